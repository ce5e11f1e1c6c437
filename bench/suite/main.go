// Command suite replays hushfs's client experiments through a real FUSE
// mount and counts what they cost: for each workload (a lua build, listing
// a 100,000-entry directory with and without concurrent changes, rm -rf of
// a tree, sequential and scattered writes, and everyday work on real trees:
// untar, git clone/status, grep -r, du -s, rm -rf, configure && make) it
// starts a fresh server
// (nfs-ganesha with FSAL VFS, or `hushfs serve`), puts `hushfs proxy --rtt R`
// in front of it, mounts hushfs through the proxy and runs the phases. Per
// phase it records the RPCs per procedure as `hushfs stats` counts them and
// as the proxy counts them independently (they must agree), the workload's
// wall, user and system time, and whether the phase's result is right;
// the same work on local disk in the same run gives the "× local" figure.
// It writes results.md, results.json and chart.svg, with the Linux kernel
// client's figures for the same phases beside hushfs's.
//
// Run it through bench/run, which installs what it needs and builds it. It
// needs root (FUSE, network namespaces, ganesha).
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"time"

	"hushfs/test/harness"
)

// config is what the command line chose.
type config struct {
	bin       string // the hushfs binary
	luaTar    string // lua5.4_5.4.4.orig.tar.gz
	cache     string // bench/.cache: the source tarballs of the everyday workloads
	fixupSrc  string // bench/workloads/fixup.c
	linuxPath string // bench/linux-6.1.json
	quick     bool
	rtts      []time.Duration
	servers   []string
	vers      []string // NFS versions mounted: "3", "4.1"
	workloads []string
	out       string        // results directory
	latest    string        // also copy the results here ("" for none)
	maxPhase  time.Duration // cap on every phase's limit (0: the defaults)
	mountOpts string        // extra mount options
	commit    string        // label of the code measured
	sizes     sizes
}

// sizes are the workloads' dimensions; --quick shrinks them.
type sizes struct {
	lsFiles   int // entries in bigdir
	treeDirs  int // directories in tree/
	treeFiles int // files per directory
	ddMiB     int // MiB written by dd
	seqMiB    int // MiB of the file read sequentially
	noopRuns  int // times the no-op build is repeated (determinism check)
	untar     tree
	repo      tree // the tree the git workload's repository is made of
}

var fullSizes = sizes{lsFiles: 100_000, treeDirs: 200, treeFiles: 50, ddMiB: 64, seqMiB: 1024, noopRuns: 1,
	untar: sqliteTree, repo: busyboxTree}
var quickSizes = sizes{lsFiles: 2_000, treeDirs: 20, treeFiles: 50, ddMiB: 8, seqMiB: 32, noopRuns: 3,
	untar: zlibTree, repo: zlibTree}

var allWorkloads = []string{"lua", "ls", "rmrf", "write", "untar", "git", "zlib"}
var allServers = []string{"ganesha", "hushfs"}
var allVers = []string{"3", "4.1"}

func main() {
	os.Exit(run())
}

func run() int {
	var c config
	var rtts, servers, vers string
	flag.StringVar(&c.bin, "hushfs", "bin/hushfs", "the hushfs binary")
	flag.StringVar(&c.luaTar, "lua-tar", "bench/.cache/lua5.4_5.4.4.orig.tar.gz", "lua 5.4.4 source tarball")
	flag.StringVar(&c.cache, "cache", "bench/.cache", "directory of the source tarballs (sqlite, busybox, zlib) and the git repositories made from them")
	flag.StringVar(&c.fixupSrc, "fixup-src", "bench/workloads/fixup.c", "source of the fixup program")
	flag.StringVar(&c.linuxPath, "linux", "bench/linux-6.1.json", "the Linux client's figures")
	flag.BoolVar(&c.quick, "quick", false, "short mode for CI: hushfs serve only, RTT 0, smaller sizes; asserts the deterministic RPC counts")
	flag.StringVar(&rtts, "rtt", "", "comma-separated round trip times the proxy adds (default 0,10ms; 0 with --quick)")
	flag.StringVar(&servers, "servers", "", "comma-separated servers: ganesha, hushfs (default both; hushfs with --quick)")
	flag.StringVar(&vers, "vers", "3", "comma-separated NFS versions to mount: 3, 4.1 (each workload runs over each)")
	flag.StringVar(&c.out, "out", "", "results directory (default bench/results/DATE, bench/results/tmp/quick with --quick)")
	flag.StringVar(&c.latest, "latest", "", "directory that also receives the results (default bench/results/latest for a full run of everything)")
	flag.StringVar(&c.commit, "commit", "", "what code is measured, for the report (default: git describe --always --dirty)")
	flag.StringVar(&c.mountOpts, "mount-opts", "", "extra hushfs mount options (e.g. nocto,actimeo=600), recorded in the report")
	flag.DurationVar(&c.maxPhase, "max-phase", 0, "cap every phase's time limit at this (0: the per-phase defaults)")
	flag.Usage = func() {
		fmt.Fprintln(flag.CommandLine.Output(), "usage: suite [flags] [lua|ls|rmrf|write|untar|git|zlib ...]")
		flag.PrintDefaults()
	}
	render := flag.String("render", "", "only rewrite results.md and chart.svg in this results directory from its results.json")
	flag.Parse()
	if *render != "" {
		if err := rerender(*render, c.linuxPath); err != nil {
			fmt.Fprintf(os.Stderr, "suite: %v\n", err)
			return 1
		}
		return 0
	}

	full := !c.quick && rtts == "" && servers == "" && flag.NArg() == 0
	if rtts == "" {
		rtts = "0,10ms"
		if c.quick {
			rtts = "0"
		}
	}
	for _, s := range strings.Split(rtts, ",") {
		s = strings.TrimSpace(s)
		if s == "0" {
			s = "0s"
		}
		d, err := time.ParseDuration(s)
		if err != nil || d < 0 {
			fmt.Fprintf(os.Stderr, "suite: bad --rtt %q\n", rtts)
			return 2
		}
		c.rtts = append(c.rtts, d)
	}
	if servers == "" {
		servers = "ganesha,hushfs"
		if c.quick {
			servers = "hushfs"
		}
	}
	for _, s := range strings.Split(servers, ",") {
		s = strings.TrimSpace(s)
		if !slices.Contains(allServers, s) {
			fmt.Fprintf(os.Stderr, "suite: unknown server %q (want ganesha or hushfs)\n", s)
			return 2
		}
		c.servers = append(c.servers, s)
	}
	for _, v := range strings.Split(vers, ",") {
		v = strings.TrimSpace(v)
		if v == "4" {
			v = "4.1" // as mount's vers=4
		}
		if !slices.Contains(allVers, v) {
			fmt.Fprintf(os.Stderr, "suite: unknown NFS version %q (want 3 or 4.1)\n", v)
			return 2
		}
		c.vers = append(c.vers, v)
	}
	full = full && len(c.vers) == 1 && c.vers[0] == "3"
	c.workloads = flag.Args()
	if len(c.workloads) == 0 {
		c.workloads = allWorkloads
	}
	for _, w := range c.workloads {
		if !slices.Contains(allWorkloads, w) {
			fmt.Fprintf(os.Stderr, "suite: unknown workload %q (want %s)\n", w, strings.Join(allWorkloads, ", "))
			return 2
		}
	}
	c.sizes = fullSizes
	if c.quick {
		c.sizes = quickSizes
	}
	now := time.Now()
	if c.out == "" {
		c.out = filepath.Join("bench", "results", now.Format("2006-01-02T150405"))
		if c.quick {
			c.out = filepath.Join("bench", "results", "tmp", "quick")
		}
	}
	if c.latest == "" && full {
		c.latest = filepath.Join("bench", "results", "latest")
	}
	for _, p := range []*string{&c.bin, &c.luaTar, &c.cache, &c.fixupSrc, &c.linuxPath, &c.out} {
		abs, err := filepath.Abs(*p)
		if err != nil {
			fmt.Fprintf(os.Stderr, "suite: %v\n", err)
			return 2
		}
		*p = abs
	}
	if os.Geteuid() != 0 {
		fmt.Fprintln(os.Stderr, "suite: needs root (FUSE mounts, network namespaces, nfs-ganesha)")
		return 2
	}

	// Ctrl-C or SIGTERM stops the phase under way (its processes are
	// killed by process group) and every later one; cleanups then unmount
	// and stop everything, and the results so far are written.
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM, syscall.SIGHUP)
	defer stop()
	finished := make(chan struct{})
	defer close(finished) // runs before stop: a normal end is no signal
	go func() {
		select {
		case <-ctx.Done():
		case <-finished:
			return
		}
		// A second signal then kills the suite outright, abandoning the
		// cleanup (its children die with it; a mount may stay behind).
		stop()
		fmt.Fprintln(os.Stderr, "suite: stopping: killing the phase under way, unmounting, stopping servers (a second signal abandons this)")
	}()

	s, err := newSuite(ctx, c)
	if err != nil {
		fmt.Fprintf(os.Stderr, "suite: %v\n", err)
		return 1
	}
	s.report.Started = now
	status := s.runAll()
	s.report.Finished = time.Now()
	s.report.Interrupted = ctx.Err() != nil
	if err := s.write(); err != nil {
		fmt.Fprintf(os.Stderr, "suite: writing results: %v\n", err)
		return 1
	}
	if ctx.Err() != nil {
		fmt.Fprintln(os.Stderr, "suite: interrupted; partial results written")
		return 130
	}
	return status
}

// runAll runs every server × RTT × workload, each with fresh processes,
// and returns the exit status: 0, or 1 if a phase's result was wrong, a
// count disagreed, or (in quick mode) an asserted RPC count differed.
func (s *suite) runAll() int {
	c := s.cfg
	s.logf("hushfs benchmark suite: %s mode, NFS versions %s, servers %s, RTT %s, workloads %s; results in %s",
		map[bool]string{true: "quick", false: "full"}[c.quick], strings.Join(c.vers, ","), strings.Join(c.servers, ","),
		rttList(c.rtts), strings.Join(c.workloads, ","), c.out)
	ok := harness.Run(func(t *harness.Program) {
		s.prepare(t)
		// The same work on local disk first (quick mode asserts counts,
		// and local disk has none).
		for _, w := range c.workloads {
			if !c.quick && workloads[w].local != nil && s.ctx.Err() == nil {
				s.runLocal(t, w)
			}
		}
		for _, server := range c.servers {
			for _, rtt := range c.rtts {
				for _, w := range c.workloads {
					// Each version right after the other: the two
					// runs of a workload see the same machine load.
					for _, v := range c.vers {
						if s.ctx.Err() != nil {
							return
						}
						s.runWorkload(server, v, rtt, w)
					}
				}
			}
		}
	})
	if !ok {
		s.problem("the suite's own setup failed (see the messages above)")
	}
	if c.quick {
		s.assertQuick()
	}
	s.summarize()
	if len(s.report.Problems) > 0 {
		return 1
	}
	return 0
}

func rttList(ds []time.Duration) string {
	var parts []string
	for _, d := range ds {
		parts = append(parts, rttName(d))
	}
	return strings.Join(parts, ",")
}

func rttName(d time.Duration) string {
	if d == 0 {
		return "0"
	}
	return d.String()
}
