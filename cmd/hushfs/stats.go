package main

import (
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"os"
	"sort"
	"strings"
	"text/tabwriter"
	"time"

	"hushfs/internal/client"
	"hushfs/internal/fusefs"
)

const statsUsage = `usage: hushfs stats MOUNTPOINT [--json] [--origins] [--fuse] [--reset]
  --json     print the raw statistics (JSON) instead of the table
  --origins  also show which kernel operations caused the NFS calls
  --fuse     also show the kernel's requests that reached the mount daemon
  --reset    zero the counters after printing them`

func runStats(args []string) error {
	asJSON, reset, origins, requests := false, false, false, false
	var pos []string
	for _, arg := range args {
		switch arg {
		case "--json", "-json":
			asJSON = true
		case "--reset", "-reset":
			reset = true
		case "--origins", "-origins":
			origins = true
		case "--fuse", "-fuse":
			requests = true
		case "-h", "--help", "-help":
			fmt.Fprintln(os.Stderr, statsUsage)
			return flag.ErrHelp
		default:
			if strings.HasPrefix(arg, "-") {
				return fmt.Errorf("unknown flag %q\n%s", arg, statsUsage)
			}
			pos = append(pos, arg)
		}
	}
	if len(pos) != 1 {
		return fmt.Errorf("want one MOUNTPOINT\n%s", statsUsage)
	}
	mnt := pos[0]
	path, err := mountPath(mnt)
	if err != nil {
		return fmt.Errorf("%s: %w", mnt, err)
	}
	// One request reads the counters and, with --reset, zeroes them.
	raw, err := fusefs.ReadStats(path, reset)
	if err != nil {
		return err
	}
	if asJSON {
		os.Stdout.Write(append(raw, '\n'))
		return nil
	}
	var s client.Snapshot
	if err := json.Unmarshal(raw, &s); err != nil {
		return fmt.Errorf("%s: malformed statistics: %w", mnt, err)
	}
	source := ""
	if mi, err := fusefs.FindMount("/proc/self/mountinfo", path); err == nil {
		source = mi.Source
	}
	printStats(os.Stdout, mnt, source, &s, time.Now())
	if origins {
		printOrigins(os.Stdout, &s)
	}
	if requests {
		printRequests(os.Stdout, &s)
	}
	return nil
}

// printStats prints one line per procedure, as mountstats does: counts,
// bytes, and average queue, round-trip and execution times.
func printStats(w io.Writer, mnt, source string, s *client.Snapshot, now time.Time) {
	head := mnt
	if source != "" {
		head = source + " on " + mnt
	}
	fmt.Fprintf(w, "%s: RPC statistics since %s (%s)\n", head,
		s.Since.Format(time.RFC3339), now.Sub(s.Since).Round(time.Millisecond))
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "procedure\tops\ttrans\ttimeouts\terrors\tbytes sent\tbytes recv\tavg queue ms\tavg RTT ms\tavg exec ms\t")
	line := func(name string, o client.OpStats) {
		avg := func(d time.Duration) string {
			if o.Ops == 0 {
				return "0.000"
			}
			return fmt.Sprintf("%.3f", float64(d)/float64(o.Ops)/float64(time.Millisecond))
		}
		fmt.Fprintf(tw, "%s\t%d\t%d\t%d\t%d\t%d\t%d\t%s\t%s\t%s\t\n", name, o.Ops, o.Transmissions,
			o.Timeouts, o.Errors, o.BytesSent, o.BytesReceived, avg(o.Queue), avg(o.RTT), avg(o.Execute))
	}
	var total client.OpStats
	var others []string
	for _, name := range s.Names() {
		if strings.Contains(name, ":") || name == "OTHER" {
			others = append(others, name) // MOUNT and PORTMAP calls, apart
			continue
		}
		o := s.Ops[name]
		line(name, o)
		total.Ops += o.Ops
		total.Transmissions += o.Transmissions
		total.Timeouts += o.Timeouts
		total.Errors += o.Errors
		total.BytesSent += o.BytesSent
		total.BytesReceived += o.BytesReceived
		total.Queue += o.Queue
		total.RTT += o.RTT
		total.Execute += o.Execute
	}
	line("total NFS", total)
	for _, name := range others {
		line(name, s.Ops[name])
	}
	tw.Flush()
	printOperations(w, s, total.Ops)
	if r := s.Resends; r.Commits > 0 {
		fmt.Fprintf(w, "write verifier changed at %d COMMITs (server restarts): %d bytes sent again\n", r.Commits, r.Bytes)
	}
}

// printOrigins prints, per kernel operation, the NFS calls it caused.
func printOrigins(w io.Writer, s *client.Snapshot) {
	ops := make([]string, 0, len(s.Origins))
	for o := range s.Origins {
		ops = append(ops, o)
	}
	sort.Strings(ops)
	fmt.Fprintln(w, "NFS calls by the kernel operation that caused them:")
	for _, o := range ops {
		procs := make([]string, 0, len(s.Origins[o]))
		for p := range s.Origins[o] {
			procs = append(procs, p)
		}
		sort.Strings(procs)
		var parts []string
		var total uint64
		for _, p := range procs {
			parts = append(parts, fmt.Sprintf("%s %d", p, s.Origins[o][p]))
			total += s.Origins[o][p]
		}
		fmt.Fprintf(w, "  %-10s %6d  %s\n", o, total, strings.Join(parts, ", "))
	}
}

// printRequests prints the kernel's requests that reached the daemon, by
// operation: what the kernel's own caches did not answer.
func printRequests(w io.Writer, s *client.Snapshot) {
	ops := make([]string, 0, len(s.FUSE))
	var total uint64
	for o, n := range s.FUSE {
		ops = append(ops, o)
		total += n
	}
	sort.Strings(ops)
	fmt.Fprintf(w, "FUSE requests served: %d\n", total)
	for _, o := range ops {
		fmt.Fprintf(w, "  %-12s %8d\n", o, s.FUSE[o])
	}
}

// printOperations prints the operations inside NFSv4.1 COMPOUNDs, as
// mountstats' per-op table does for v4 (each COMPOUND above is one call,
// one round trip, under the name of what it does; here are what it
// carried). Nothing for NFSv3, whose calls are their operations.
func printOperations(w io.Writer, s *client.Snapshot, calls uint64) {
	if len(s.Operations) == 0 {
		return
	}
	var n uint64
	for _, c := range s.Operations {
		n += c
	}
	fmt.Fprintf(w, "operations in COMPOUNDs: %d in %d calls\n", n, calls)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "operation\tcount\t")
	names := make([]string, 0, len(s.Operations))
	for name := range s.Operations {
		names = append(names, name)
	}
	sort.Strings(names)
	for _, name := range names {
		fmt.Fprintf(tw, "%s\t%d\t\n", name, s.Operations[name])
	}
	tw.Flush()
}
