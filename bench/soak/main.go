// Command soak runs eight workloads at once, for a bounded time, on one
// hard hushfs mount of a `hushfs serve` export reached through `hushfs
// proxy` with faults on (connections closed at random, reply jitter,
// duplicated non-idempotent calls, truncated calls, short blackholes). Every
// workload keeps a model of what its files must hold and checks it as it
// goes; at the end every remaining file is checked against its model both
// through the mount and on the server's disk. Meanwhile it samples the
// resident memory and open descriptors of the mount daemon, the server and
// the proxy, and decides whether they reach a plateau or keep growing.
//
// It writes results.md, results.json and plot.svg and exits non-zero on any
// data mismatch, unexpected error, hang, crashed process, unclean unmount
// or (in full mode) memory or descriptor growth.
//
// Run it through `bench/run soak [--duration D] [--quick]`. It needs root
// (FUSE, the server's per-call credentials).
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"syscall"
	"time"

	"hushfs/bench/benchfmt"
)

// config is what the command line chose.
type config struct {
	quick     bool
	duration  time.Duration // workloads run this long
	grace     time.Duration // after it, what is under way may take this much longer
	opTimeout time.Duration // a single operation (or command) taking longer is a hang
	sample    time.Duration // sampling interval
	progress  time.Duration // progress line interval
	seed      uint64
	tmp       string // parent of the work directory (export, mount point)
	out       string // results directory
	latest    string // also copy the results here ("" for none)
	mountOpts string
	commit    string
	noFaults  bool     // the proxy only forwards and counts
	keepLogs  bool     // write the processes' output even when the run passes
	faults    string   // the proxy's fault flags instead of the default mix ("" for the mix)
	noHoles   bool     // no blackholes
	only      []string // run only these workloads (all when empty)
	sizes     sizes

	recallOps, recallActors []string // the recall soak's operations and actors (all when empty)
}

// sizes are the workloads' dimensions per iteration.
type sizes struct {
	buildFiles   int   // .c files of the generated project
	tarFiles     int   // files in the archive
	fsxOps       int   // operations per fsx run
	fsxMaxLen    int64 // fsx file size bound
	lsBase       int   // fixed files of the listed directory
	lsPasses     int   // listings per iteration
	churnKeep    int   // churn files alive at once
	rmDirs       int   // directories of the tree removed by rm -rf
	rmFiles      int   // files per directory
	bigMinMiB    int   // large file size range
	bigMaxMiB    int
	bigKeep      int // large files kept (older ones removed)
	metaOps      int // metadata operations per round
	metaMaxNames int // names in the metadata directory, at most
}

var fullSizes = sizes{buildFiles: 20, tarFiles: 300, fsxOps: 2000, fsxMaxLen: 1 << 20, lsBase: 300, lsPasses: 4,
	churnKeep: 20, rmDirs: 8, rmFiles: 25, bigMinMiB: 16, bigMaxMiB: 64, bigKeep: 2, metaOps: 150, metaMaxNames: 60}

var quickSizes = sizes{buildFiles: 20, tarFiles: 300, fsxOps: 600, fsxMaxLen: 1 << 20, lsBase: 200, lsPasses: 3,
	churnKeep: 20, rmDirs: 6, rmFiles: 20, bigMinMiB: 16, bigMaxMiB: 24, bigKeep: 2, metaOps: 100, metaMaxNames: 50}

const defaultDuration = 10 * time.Minute

func main() {
	os.Exit(run())
}

func run() int {
	var c config
	flag.BoolVar(&c.quick, "quick", false, "CI's short mode: about a minute in all (30 s of workloads), 1 s samples; memory growth reported, not failed")
	flag.DurationVar(&c.duration, "duration", 0, "how long the workloads run (default 10m; 30s with --quick)")
	flag.Uint64Var(&c.seed, "seed", 20261124, "seed of the workloads and of the proxy's faults")
	flag.StringVar(&c.tmp, "tmp", "/var/tmp", "directory under which the export and the mount point are made")
	flag.StringVar(&c.out, "out", "", "results directory (default bench/results/soak-DATE; bench/results/tmp/soak-quick with --quick)")
	flag.StringVar(&c.latest, "latest", "", "directory that also receives the results (default bench/results/soak-latest for a full run of at least 10 minutes)")
	flag.StringVar(&c.mountOpts, "mount-opts", "hard,timeo=50", "mount options besides the ports")
	flag.StringVar(&c.commit, "commit", "", "what code is measured, for the report (default: git describe --always --dirty)")
	flag.BoolVar(&c.keepLogs, "keep-logs", false, "write the mount daemon's, server's and proxy's output to the results directory even when the run passes")
	flag.StringVar(&c.faults, "proxy-faults", "", "the proxy's fault flags instead of the default mix, e.g. \"--seed 1 --close-prob 0.01\" (blackholes are separate)")
	flag.BoolVar(&c.noHoles, "no-blackholes", false, "start no blackholes")
	flag.BoolVar(&c.noFaults, "no-faults", false, "no faults: the proxy only forwards and counts (to tell a fault's effect from a plain bug)")
	only := flag.String("workloads", "", "comma-separated workloads to run (default all): "+strings.Join(workloadNames, ","))
	recall := flag.Bool("recall", false, "the NFSv4.1 recall soak instead: hushfs serve (delegations on, 10 s lease), two v4.1 mounts and a local writer on 100 files (2 minutes; 25 s with --quick)")
	recallOps := flag.String("recall-ops", "", "with --recall, only these operations (read,reopen,rewrite,append,truncate,rename,chmod)")
	recallActors := flag.String("recall-actors", "", "with --recall, only these actors (A,B,local)")
	render := flag.String("render", "", "only rewrite results.md and plot.svg in this results directory from its results.json")
	flag.Usage = func() {
		fmt.Fprintln(flag.CommandLine.Output(), "usage: soak [--duration D] [--quick] [flags]")
		flag.PrintDefaults()
	}
	flag.Parse()
	if *render != "" {
		if err := rerender(*render); err != nil {
			fmt.Fprintf(os.Stderr, "soak: %v\n", err)
			return 1
		}
		return 0
	}
	if flag.NArg() > 0 {
		flag.Usage()
		return 2
	}
	if *recall {
		if os.Geteuid() != 0 {
			fmt.Fprintln(os.Stderr, "soak: needs root (FUSE mounts, the server's per-call credentials)")
			return 2
		}
		ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM, syscall.SIGHUP)
		defer stop()
		signal.Ignore(syscall.SIGPIPE)
		if *recallOps != "" {
			c.recallOps = strings.Split(*recallOps, ",")
		}
		if *recallActors != "" {
			c.recallActors = strings.Split(*recallActors, ",")
		}
		return runRecall(ctx, c)
	}
	if *only != "" {
		for _, w := range strings.Split(*only, ",") {
			if !slices.Contains(workloadNames, w) {
				fmt.Fprintf(os.Stderr, "soak: unknown workload %q (want %s)\n", w, strings.Join(workloadNames, ", "))
				return 2
			}
			c.only = append(c.only, w)
		}
	}
	c.sizes = fullSizes
	c.sample, c.progress = 2*time.Second, 30*time.Second
	c.grace, c.opTimeout = 2*time.Minute, 90*time.Second
	if c.quick {
		c.sizes = quickSizes
		c.sample, c.progress = time.Second, 5*time.Second
		c.grace, c.opTimeout = 25*time.Second, 45*time.Second
		if c.duration == 0 {
			c.duration = 30 * time.Second
		}
	}
	if c.duration == 0 {
		c.duration = defaultDuration
	}
	if c.duration < 5*time.Second {
		fmt.Fprintln(os.Stderr, "soak: --duration under 5s")
		return 2
	}
	now := time.Now()
	if c.out == "" {
		c.out = filepath.Join("bench", "results", "soak-"+now.Format("2006-01-02T150405"))
		if c.quick {
			c.out = filepath.Join("bench", "results", "tmp", "soak-quick")
		}
	}
	if c.latest == "" && !c.quick && c.duration >= defaultDuration && !c.noFaults && c.only == nil && c.faults == "" && !c.noHoles {
		c.latest = filepath.Join("bench", "results", "soak-latest")
	}
	if c.commit == "" {
		if out, err := exec.Command("git", "describe", "--always", "--dirty").Output(); err == nil {
			c.commit = strings.TrimSpace(string(out))
		}
	}
	if os.Geteuid() != 0 {
		fmt.Fprintln(os.Stderr, "soak: needs root (FUSE mounts, the server's per-call credentials)")
		return 2
	}

	// Ctrl-C or SIGTERM ends the workloads early; the run then checks,
	// unmounts, stops everything and writes what it has.
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM, syscall.SIGHUP)
	defer stop()
	// Output piped to a reader that went away (| head) must not kill the
	// run before its cleanup: writes then fail with EPIPE instead.
	signal.Ignore(syscall.SIGPIPE)

	s := newSoak(ctx, c)
	s.rep.Started = now
	s.rep.Host = hostInfo(c.commit)
	s.runAll()
	s.rep.Finished = time.Now()
	s.rep.Interrupted = ctx.Err() != nil
	if err := s.write(); err != nil {
		fmt.Fprintf(os.Stderr, "soak: writing results: %v\n", err)
		return 1
	}
	s.logf("results in %s", c.out)
	if len(s.rep.Problems) > 0 {
		s.logf("FAIL: %d problems:", len(s.rep.Problems))
		for _, p := range s.rep.Problems {
			fmt.Fprintf(os.Stderr, "  - %s\n", p)
		}
		return 1
	}
	if ctx.Err() != nil {
		s.logf("interrupted; partial results written")
		return 130
	}
	s.logf("PASS: %s of workloads, %d iterations, %s operations, no errors, no mismatches",
		secsF(s.rep.WorkSeconds), s.rep.totalIterations(), benchfmt.Commas(uint64(s.rep.totalOps())))
	return 0
}

// hostInfo describes the machine and code, for the report.
func hostInfo(commit string) Host {
	h := Host{Commit: commit, CPUs: runtime.NumCPU(), Go: runtime.Version()}
	if b, err := os.ReadFile("/proc/sys/kernel/osrelease"); err == nil {
		h.Kernel = strings.TrimSpace(string(b))
	}
	return h
}
