package main

import (
	"encoding/json"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"

	"hushfs/bench/benchfmt"
	"hushfs/internal/client"
	"hushfs/internal/nfs3"
	"hushfs/internal/proxy"
)

// Report is everything a run found; results.json holds it as is.
type Report struct {
	Mode           string    `json:"mode"`
	Started        time.Time `json:"started"`
	Finished       time.Time `json:"finished"`
	Interrupted    bool      `json:"interrupted"`
	Host           Host      `json:"host"`
	DurationS      float64   `json:"duration_s"`      // configured
	WorkSeconds    float64   `json:"work_s"`          // the workloads' actual time, grace included
	SetupS         float64   `json:"setup_s"`         // build, server, proxy, mount
	SampleS        float64   `json:"sample_s"`        // sampling interval
	Seed           uint64    `json:"seed"`            // of the workloads and the faults
	MountOpts      string    `json:"mount_opts"`      // besides the ports
	BlackholeEvery string    `json:"blackhole_every"` // average interval of the blackholes

	NoFaults    bool              `json:"no_faults"`
	Faults      proxy.Faults      `json:"faults"` // as the proxy reported them
	Workloads   []*WorkloadResult `json:"workloads"`
	RPC         []RPCRow          `json:"rpc"` // hushfs stats at the end, per procedure
	RPCTotal    RPCRow            `json:"rpc_total"`
	ProxyCalls  uint64            `json:"proxy_calls"`
	ProxyConns  uint64            `json:"proxy_conns"`
	ProxyFaults proxy.FaultCounts `json:"proxy_faults"`
	LogCounts   map[string]int    `json:"log_counts"` // mount daemon log lines by kind

	Samples    []Sample `json:"samples"`
	Blackholes []Window `json:"blackholes"`
	Trends     []Trend  `json:"trends"`

	Unmount   string   `json:"unmount"`
	Hang      []string `json:"hang,omitempty"` // every goroutine's state when a hang aborted the run
	HangDumps bool     `json:"hang_dumps"`     // the daemons were sent SIGQUIT
	Logs      []string `json:"logs,omitempty"`
	Problems  []string `json:"problems"`
	Warnings  []string `json:"warnings"`
}

type Host struct {
	Commit string `json:"commit"`
	Kernel string `json:"kernel"`
	Go     string `json:"go"`
	CPUs   int    `json:"cpus"`
}

// Window is a blackhole: its start (seconds into the run) and length.
type Window struct {
	StartS float64 `json:"start_s"`
	LenS   float64 `json:"len_s"`
}

// Sample is one reading of the three processes (mount daemon, server,
// proxy) and the proxy's counters.
type Sample struct {
	T      float64           `json:"t"` // seconds since the workloads started
	RSSKiB [3]uint64         `json:"rss_kib"`
	FDs    [3]int            `json:"fds"`
	Calls  uint64            `json:"calls"`
	Conns  uint64            `json:"conns"`
	Faults proxy.FaultCounts `json:"faults"`
}

type WorkloadResult struct {
	Name       string   `json:"name"`
	About      string   `json:"about"`
	Iterations int64    `json:"iterations"`
	Ops        int64    `json:"ops"`
	Errors     int64    `json:"errors"`
	Mismatches int64    `json:"mismatches"`
	Details    []string `json:"details,omitempty"`
	FinalFiles int      `json:"final_files"`
	FinalCheck string   `json:"final_check"`
}

type RPCRow struct {
	Proc          string `json:"proc"`
	Calls         uint64 `json:"calls"`
	Transmissions uint64 `json:"transmissions"`
	Timeouts      uint64 `json:"timeouts"`
	Errors        uint64 `json:"errors"`
}

// Trend is one process's memory or descriptors over the workloads: the
// first sample, the median of the middle and of the last third, the last
// sample and the maximum, and the verdict.
type Trend struct {
	Process string  `json:"process"`
	Metric  string  `json:"metric"` // "RSS MiB" or "fds"
	Start   float64 `json:"start"`
	Mid     float64 `json:"mid"`
	Plateau float64 `json:"plateau"`
	End     float64 `json:"end"`
	Max     float64 `json:"max"`
	Growth  float64 `json:"growth"` // Plateau - Mid
	Verdict string  `json:"verdict"`
	Grows   bool    `json:"grows"`
}

// Growth tolerances: the last third's median may exceed the middle
// third's by this much before it counts as growth; both the absolute and
// the relative bound must be exceeded. (The server holds a descriptor per
// file handle it has seen in the last minute, up to 4,096, so its count
// moves by hundreds with the workloads' pace.)
const (
	rssGrowthMiB = 16.0
	rssGrowthRel = 0.25
	fdGrowth     = 16.0
	fdGrowthRel  = 0.10
	minSamples   = 9
)

func (r *Report) setRPC(s client.Snapshot) {
	r.RPC, r.RPCTotal = nil, RPCRow{Proc: "total"}
	for name, o := range s.Ops {
		row := RPCRow{Proc: name, Calls: o.Ops, Transmissions: o.Transmissions, Timeouts: o.Timeouts, Errors: o.Errors}
		r.RPC = append(r.RPC, row)
		r.RPCTotal.Calls += o.Ops
		r.RPCTotal.Transmissions += o.Transmissions
		r.RPCTotal.Timeouts += o.Timeouts
		r.RPCTotal.Errors += o.Errors
	}
	sort.Slice(r.RPC, func(i, j int) bool { return r.RPC[i].Calls > r.RPC[j].Calls })
}

func (r *Report) setProxy(c proxy.Counts) {
	r.ProxyCalls = 0
	for _, n := range c.Calls {
		r.ProxyCalls += n
	}
	r.ProxyConns = c.Conns
	r.ProxyFaults = c.Faults
}

func (r *Report) totalIterations() int64 {
	var n int64
	for _, w := range r.Workloads {
		n += w.Iterations
	}
	return n
}

func (r *Report) totalOps() int64 {
	var n int64
	for _, w := range r.Workloads {
		n += w.Ops
	}
	return n
}

// analyze fills the workloads' results, the trends and their verdicts,
// and lists what failed.
func (s *soak) analyze() {
	r := s.rep
	for i, w := range s.wls {
		res := r.Workloads[i]
		res.Iterations, res.Ops = w.iterations.Load(), w.ops.Load()
		res.Errors, res.Mismatches = w.errs.Load(), w.mismatches.Load()
		w.mu.Lock()
		res.Details = slices.Clone(w.details)
		w.mu.Unlock()
		if res.Errors+res.Mismatches > 0 {
			s.problem("workload %s: %d errors, %d mismatches; first: %s", w.name, res.Errors, res.Mismatches, res.Details[0])
		}
		if res.Iterations == 0 && !s.aborted.Load() && s.ctx.Err() == nil {
			s.warn("workload %s completed no iteration in %s", w.name, secsF(r.WorkSeconds))
		}
	}
	if len(s.wls) > 0 && !s.aborted.Load() && s.ctx.Err() == nil && !s.cfg.noFaults {
		f := r.ProxyFaults
		if f.Closes == 0 || f.Duplicated == 0 || f.JitteredReplies == 0 {
			s.warn("not every fault happened: %d closes, %d duplicated calls, %d jittered replies", f.Closes, f.Duplicated, f.JitteredReplies)
		}
		if len(r.Blackholes) > 0 && f.Blackholes == 0 {
			s.warn("%d blackholes started, none dropped anything", len(r.Blackholes))
		}
	}
	if s.m != nil {
		r.LogCounts = countLogLines(s.m.Output())
	}
	// The trends cover the workloads' time only.
	var ss []Sample
	for _, smp := range r.Samples {
		if smp.T <= r.WorkSeconds {
			ss = append(ss, smp)
		}
	}
	r.Trends = nil
	for i, name := range procNames {
		rss := make([]float64, len(ss))
		fds := make([]float64, len(ss))
		for k, smp := range ss {
			rss[k] = mibF(smp.RSSKiB[i])
			fds[k] = float64(smp.FDs[i])
		}
		for _, t := range []Trend{trend(name, "RSS MiB", rss, rssGrowthMiB, rssGrowthRel), trend(name, "fds", fds, fdGrowth, fdGrowthRel)} {
			if len(r.Samples) > 0 {
				last := r.Samples[len(r.Samples)-1]
				if t.Metric == "fds" {
					t.End = float64(last.FDs[i])
				} else {
					t.End = mibF(last.RSSKiB[i])
				}
			}
			r.Trends = append(r.Trends, t)
			if t.Grows {
				if s.cfg.quick {
					// Shown in the table only: half a minute is warm-up (the
					// server keeps a descriptor per file handle for a minute).
					r.Trends[len(r.Trends)-1].Verdict += " (quick run: warm-up, not judged)"
				} else {
					s.problem("%s %s grows: median %.0f in the last third of the samples vs %.0f in the middle third", name, t.Metric, t.Plateau, t.Mid)
				}
			}
		}
	}
}

// trend judges one series: growth when the last third's median exceeds
// the middle third's by more than abs and (if rel > 0) by more than rel of
// it.
func trend(process, metric string, v []float64, abs, rel float64) Trend {
	t := Trend{Process: process, Metric: metric}
	if len(v) == 0 {
		t.Verdict = "no samples"
		return t
	}
	t.Start, t.End = v[0], v[len(v)-1]
	t.Max = slices.Max(v)
	n := len(v)
	if n < minSamples {
		t.Plateau = median(v)
		t.Verdict = fmt.Sprintf("too few samples (%d) to judge", n)
		return t
	}
	t.Mid = median(v[n/3 : 2*n/3])
	t.Plateau = median(v[2*n/3:])
	t.Growth = t.Plateau - t.Mid
	t.Grows = t.Growth > abs && (rel == 0 || t.Growth > rel*t.Mid)
	switch {
	case t.Grows:
		t.Verdict = fmt.Sprintf("GROWS: %+.0f", t.Growth)
	case t.Growth > 0:
		t.Verdict = fmt.Sprintf("plateau (%+.0f, within tolerance)", t.Growth)
	default:
		t.Verdict = fmt.Sprintf("plateau (%+.0f)", t.Growth)
	}
	return t
}

func median(v []float64) float64 {
	if len(v) == 0 {
		return 0
	}
	s := slices.Clone(v)
	slices.Sort(s)
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}

// countLogLines counts the mount daemon's connection events.
func countLogLines(log string) map[string]int {
	m := map[string]int{}
	for line := range strings.SplitSeq(log, "\n") {
		switch {
		case strings.Contains(line, "rpc: connection to") && strings.Contains(line, "lost"):
			m["connection lost"]++
		case strings.Contains(line, "not responding"):
			m["server not responding"]++
		case strings.Contains(line, "rpc: server") && strings.HasSuffix(line, " OK"):
			m["server OK again"]++
		case strings.Contains(line, "rpc: reconnecting"):
			m["reconnect failed"]++
		}
	}
	return m
}

// write writes results.md, results.json and plot.svg to the results
// directory, and to the latest directory if there is one.
func (s *soak) write() error {
	files := map[string][]byte{"results.md": []byte(markdown(s.rep)), "plot.svg": []byte(plot(s.rep))}
	b, err := json.MarshalIndent(s.rep, "", "  ")
	if err != nil {
		return err
	}
	files["results.json"] = append(b, '\n')
	if len(s.rep.Problems) > 0 || s.cfg.keepLogs {
		// The processes' output, to read a failure by.
		for name, text := range s.logs {
			files[name] = []byte(text)
			s.rep.Logs = append(s.rep.Logs, name)
		}
		sort.Strings(s.rep.Logs)
		files["results.md"] = []byte(markdown(s.rep))
	}
	dirs := []string{s.cfg.out}
	if s.cfg.latest != "" && !s.rep.Interrupted {
		dirs = append(dirs, s.cfg.latest)
		os.RemoveAll(s.cfg.latest)
	}
	for _, d := range dirs {
		if err := os.MkdirAll(d, 0o755); err != nil {
			return err
		}
		for name, data := range files {
			if err := os.WriteFile(filepath.Join(d, name), data, 0o644); err != nil {
				return err
			}
		}
	}
	return nil
}

// rerender rewrites results.md and plot.svg of a results directory from
// its results.json (after a change to the report).
func rerender(dir string) error {
	b, err := os.ReadFile(filepath.Join(dir, "results.json"))
	if err != nil {
		return err
	}
	var r Report
	if err := json.Unmarshal(b, &r); err != nil {
		return fmt.Errorf("%s: %w", dir, err)
	}
	if err := os.WriteFile(filepath.Join(dir, "results.md"), []byte(markdown(&r)), 0o644); err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(dir, "plot.svg"), []byte(plot(&r)), 0o644)
}

// ---- results.md

func markdown(r *Report) string {
	var b strings.Builder
	b.WriteString("# hushfs soak\n\n")
	commit := r.Host.Commit
	if commit == "" {
		commit = "(unknown)"
	}
	fmt.Fprintf(&b, "%s run, %s → %s: setup %s, workloads %s (%s asked). Commit %s, kernel %s, %d CPUs, %s. Seed %d.\n\n",
		r.Mode, r.Started.Format("2006-01-02 15:04:05"), r.Finished.Format("15:04:05"), secsF(r.SetupS),
		secsF(r.WorkSeconds), secsF(r.DurationS), commit, r.Host.Kernel, r.Host.CPUs, r.Host.Go, r.Seed)
	if r.Interrupted {
		b.WriteString("**Interrupted: these results are partial.**\n\n")
	}
	verdict := "**PASS**: no data mismatch, no unexpected error, no hang, clean unmount, no growth beyond tolerance."
	if len(r.Problems) > 0 {
		verdict = fmt.Sprintf("**FAIL**: %d problems (listed below).", len(r.Problems))
	}
	b.WriteString(verdict + "\n\n")
	fmt.Fprintf(&b, "`hushfs serve` (export on local disk, `--no-root-squash`) ← `hushfs proxy` with faults ← one `hushfs mount -o %s`, all on 127.0.0.1. ", r.MountOpts)
	if r.NoFaults {
		b.WriteString("**No faults** (`--no-faults`): the proxy only forwarded and counted.\n\n")
	} else {
		fmt.Fprintf(&b, "Proxy faults: `%s`, plus a blackhole of 1–2 s about every %s.\n\n", faultsLine(r.Faults), r.BlackholeEvery)
	}

	b.WriteString("## Workloads\n\n")
	b.WriteString("All eight run at once, each in its own directory of the mount, iterating until the time is up. An operation is one file-system call or one command the workload makes (a write, a rename, a `make`, a read back…).\n\n")
	b.WriteString("| workload | iterations | operations | errors | mismatches | final check (mount and disk vs model) |\n|---|--:|--:|--:|--:|---|\n")
	var it, ops, errs, mism int64
	for _, w := range r.Workloads {
		fc := w.FinalCheck
		if fc == "ok" {
			fc = fmt.Sprintf("ok, %s names", benchfmt.Commas(uint64(w.FinalFiles)))
		} else if fc == "" {
			fc = "not run"
		} else {
			fc = "✗ see problems"
		}
		fmt.Fprintf(&b, "| %s | %s | %s | %d | %d | %s |\n", w.Name, benchfmt.Commas(uint64(w.Iterations)), benchfmt.Commas(uint64(w.Ops)), w.Errors, w.Mismatches, fc)
		it += w.Iterations
		ops += w.Ops
		errs += w.Errors
		mism += w.Mismatches
	}
	fmt.Fprintf(&b, "| **total** | %s | %s | %d | %d | |\n\n", benchfmt.Commas(uint64(it)), benchfmt.Commas(uint64(ops)), errs, mism)
	for _, w := range r.Workloads {
		fmt.Fprintf(&b, "- **%s**: %s.\n", w.Name, w.About)
	}

	b.WriteString("\n## Faults injected\n\n")
	f := r.ProxyFaults
	fmt.Fprintf(&b, "Counted by the proxy, which saw %s calls on %s connections.\n\n", benchfmt.Commas(r.ProxyCalls), benchfmt.Commas(r.ProxyConns))
	b.WriteString("| fault | count |\n|---|--:|\n")
	fmt.Fprintf(&b, "| connections closed after a call | %s |\n", benchfmt.Commas(f.Closes))
	fmt.Fprintf(&b, "| calls cut short (connection closed) | %s |\n", benchfmt.Commas(f.Truncated))
	fmt.Fprintf(&b, "| calls executed twice (first reply dropped, copy resent) | %s |\n", benchfmt.Commas(f.Duplicated))
	fmt.Fprintf(&b, "| duplications skipped (a retransmission already under way, or too big) | %s |\n", benchfmt.Commas(f.DupSkipped))
	fmt.Fprintf(&b, "| blackholes (started / that dropped something) | %d / %d |\n", len(r.Blackholes), f.Blackholes)
	fmt.Fprintf(&b, "| calls / replies dropped in blackholes | %s / %s |\n", benchfmt.Commas(f.BlackholedCalls), benchfmt.Commas(f.BlackholedReplies))
	avg := 0.0
	if f.JitteredReplies > 0 {
		avg = float64(f.Jitter) / float64(f.JitteredReplies) / float64(time.Microsecond)
	}
	fmt.Fprintf(&b, "| replies delayed by jitter (average extra) | %s (%.0f µs) |\n", benchfmt.Commas(f.JitteredReplies), avg)
	if len(r.LogCounts) > 0 {
		var parts []string
		for _, k := range sortedKeys(r.LogCounts) {
			parts = append(parts, fmt.Sprintf("%s %d", k, r.LogCounts[k]))
		}
		fmt.Fprintf(&b, "\nThe mount daemon logged: %s.\n", strings.Join(parts, ", "))
	}

	b.WriteString("\n## RPCs\n\n")
	if len(r.RPC) == 0 {
		b.WriteString("Not read (the run did not get that far).\n")
	} else {
		t := r.RPCTotal
		fmt.Fprintf(&b, "From `hushfs stats --json` at the end: %s calls, %s retransmissions (transmissions beyond the first, resends after a reconnect included), %s timeouts, %s calls failed.\n\n",
			benchfmt.Commas(t.Calls), benchfmt.Commas(t.Transmissions-t.Calls), benchfmt.Commas(t.Timeouts), benchfmt.Commas(t.Errors))
		b.WriteString("| procedure | calls | retransmissions | timeouts | errors |\n|---|--:|--:|--:|--:|\n")
		for _, row := range r.RPC {
			fmt.Fprintf(&b, "| %s | %s | %s | %s | %s |\n", row.Proc, benchfmt.Commas(row.Calls), benchfmt.Commas(row.Transmissions-row.Calls), benchfmt.Commas(row.Timeouts), benchfmt.Commas(row.Errors))
		}
		fmt.Fprintf(&b, "| **total** | %s | %s | %s | %s |\n", benchfmt.Commas(t.Calls), benchfmt.Commas(t.Transmissions-t.Calls), benchfmt.Commas(t.Timeouts), benchfmt.Commas(t.Errors))
	}

	b.WriteString("\n## Memory and descriptors\n\n")
	fmt.Fprintf(&b, "Sampled every %s (VmRSS and /proc/PID/fd): %d samples. *Plateau* is the median of the last third of the samples taken while the workloads ran, *mid* the median of the middle third; growth from mid to plateau beyond both %.0f MiB and %.0f%% (RSS) or both %.0f descriptors and %.0f%% (fds) fails a full run (a quick run is warm-up: shown, not judged). *End* is the last sample, after the final checks.\n\n",
		secsF(r.SampleS), len(r.Samples), rssGrowthMiB, rssGrowthRel*100, fdGrowth, fdGrowthRel*100)
	b.WriteString("| process | metric | start | mid | plateau | end | max | verdict |\n|---|---|--:|--:|--:|--:|--:|---|\n")
	for _, t := range r.Trends {
		fmt.Fprintf(&b, "| %s | %s | %.0f | %.0f | %.0f | %.0f | %.0f | %s |\n", t.Process, t.Metric, t.Start, t.Mid, t.Plateau, t.End, t.Max, t.Verdict)
	}

	fmt.Fprintf(&b, "\n## Unmount\n\n%s\n", orDash(r.Unmount))
	if len(r.Hang) > 0 {
		b.WriteString("\n## State at the hang\n\n")
		for _, h := range r.Hang {
			fmt.Fprintf(&b, "- %s\n", h)
		}
		if r.HangDumps {
			b.WriteString("\nThe mount daemon and the server were sent SIGQUIT: their goroutines are in mount.log and serve.log.\n")
		}
	}
	b.WriteString("\n## Problems\n\n")
	if len(r.Problems) == 0 {
		b.WriteString("None.\n")
	}
	for _, p := range r.Problems {
		fmt.Fprintf(&b, "- %s\n", mdBlock(p))
	}
	for _, w := range r.Workloads {
		if len(w.Details) > 1 {
			fmt.Fprintf(&b, "\nAll recorded failures of %s:\n\n", w.Name)
			for _, d := range w.Details {
				fmt.Fprintf(&b, "- %s\n", mdBlock(d))
			}
		}
	}
	if len(r.Warnings) > 0 {
		b.WriteString("\n## Warnings\n\n")
		for _, w := range r.Warnings {
			fmt.Fprintf(&b, "- %s\n", mdBlock(w))
		}
	}
	if len(r.Logs) > 0 {
		fmt.Fprintf(&b, "\nProcess output kept: %s.\n", strings.Join(r.Logs, ", "))
	}
	b.WriteString("\n![RSS and open descriptors of the mount daemon, the server and the proxy over the run](plot.svg)\n")
	return b.String()
}

// mdBlock keeps a multi-line message inside its list item.
func mdBlock(s string) string {
	s = strings.TrimRight(s, "\n")
	if !strings.Contains(s, "\n") {
		return s
	}
	return strings.ReplaceAll(s, "\n", "\n  ")
}

func orDash(s string) string {
	if s == "" {
		return "—"
	}
	return s
}

// faultsLine renders the faults in force as the proxy's flags.
func faultsLine(f proxy.Faults) string {
	var p []string
	add := func(k, v string) { p = append(p, "--"+k+" "+v) }
	add("seed", strconv.FormatUint(f.Seed, 10))
	if f.CloseProb > 0 {
		add("close-prob", strconv.FormatFloat(f.CloseProb, 'g', -1, 64))
	}
	if f.TruncateProb > 0 {
		add("truncate-prob", strconv.FormatFloat(f.TruncateProb, 'g', -1, 64))
	}
	if f.Jitter > 0 {
		add("jitter", f.Jitter.String())
	}
	if f.DupProb > 0 {
		add("dup-prob", strconv.FormatFloat(f.DupProb, 'g', -1, 64))
		var names []string
		for _, k := range f.DupProcs {
			if k.Prog == nfs3.Program && k.Vers == nfs3.Version {
				names = append(names, nfs3.ProcName(k.Proc))
			} else {
				names = append(names, k.String())
			}
		}
		if len(names) > 0 {
			add("dup-procs", strings.Join(names, ","))
		}
		if f.DupDelay > 0 {
			add("dup-delay", f.DupDelay.String())
		}
	}
	return strings.Join(p, " ")
}

// ---- plot.svg: RSS and descriptors over time, one panel each.

var procColors = [3]string{"#1f77b4", "#2ca02c", "#d62728"}

// niceStep returns a step of 1, 2 or 5 × 10^k that divides [0, top] into
// at most n intervals.
func niceStep(top float64, n int) float64 {
	if top <= 0 {
		return 1
	}
	raw := top / float64(n)
	p := math.Pow(10, math.Floor(math.Log10(raw)))
	for _, m := range []float64{1, 2, 5, 10} {
		if m*p >= raw {
			return m * p
		}
	}
	return 10 * p
}

func plot(r *Report) string {
	const (
		left, right, top = 70.0, 30.0, 92.0
		width            = 960.0
		panelH, gap      = 240.0, 70.0
	)
	height := top + 2*panelH + gap + 50
	maxT := 1.0
	for _, smp := range r.Samples {
		maxT = math.Max(maxT, smp.T)
	}
	plotW := width - left - right
	x := func(t float64) float64 { return left + plotW*t/maxT }

	var b strings.Builder
	fmt.Fprintf(&b, `<svg xmlns="http://www.w3.org/2000/svg" width="%.0f" height="%.0f" viewBox="0 0 %.0f %.0f" font-family="sans-serif" font-size="12">`+"\n", width, height, width, height)
	b.WriteString(`<rect width="100%" height="100%" fill="white"/>` + "\n")
	fmt.Fprintf(&b, `<text x="%.0f" y="20" font-size="15" font-weight="bold">hushfs soak (%s, %s): resident memory and open descriptors</text>`+"\n",
		left, xmlEsc(r.Mode), xmlEsc(r.Started.Format("2006-01-02 15:04")))
	lx := left
	for i, name := range procNames {
		fmt.Fprintf(&b, `<rect x="%.0f" y="32" width="14" height="4" fill="%s"/><text x="%.0f" y="38">%s</text>`+"\n", lx, procColors[i], lx+18, name)
		lx += 18 + 7.5*float64(len(name)) + 24
	}
	fmt.Fprintf(&b, `<rect x="%.0f" y="30" width="14" height="10" fill="#000" fill-opacity="0.12"/><text x="%.0f" y="38">blackhole</text>`+"\n", lx, lx+18)
	lx += 18 + 7.5*9 + 24
	fmt.Fprintf(&b, `<line x1="%.0f" y1="35" x2="%.0f" y2="35" stroke="#555" stroke-dasharray="4 3"/><text x="%.0f" y="38">workloads end</text>`+"\n", lx, lx+14, lx+18)
	fmt.Fprintf(&b, `<text x="%.0f" y="56" fill="#555">Dashed segments: median of the last third of the samples (the plateau) per process.</text>`+"\n", left)

	panels := []struct {
		title string
		val   func(smp Sample, i int) float64
		unit  string
	}{
		{"resident memory (VmRSS), MiB", func(smp Sample, i int) float64 { return mibF(smp.RSSKiB[i]) }, "RSS MiB"},
		{"open file descriptors", func(smp Sample, i int) float64 { return float64(smp.FDs[i]) }, "fds"},
	}
	for pi, p := range panels {
		base := top + float64(pi)*(panelH+gap)
		maxV := 1.0
		for _, smp := range r.Samples {
			for i := range procNames {
				maxV = math.Max(maxV, p.val(smp, i))
			}
		}
		step := niceStep(maxV*1.05, 6)
		topV := math.Ceil(maxV*1.05/step) * step
		y := func(v float64) float64 { return base + panelH - panelH*v/topV }
		fmt.Fprintf(&b, `<text x="%.0f" y="%.0f" font-weight="bold">%s</text>`+"\n", left, base-8, p.title)
		for _, w := range r.Blackholes {
			fmt.Fprintf(&b, `<rect x="%.1f" y="%.0f" width="%.1f" height="%.0f" fill="#000" fill-opacity="0.12"/>`+"\n",
				x(w.StartS), base, math.Max(1, x(w.StartS+w.LenS)-x(w.StartS)), panelH)
		}
		for v := 0.0; v <= topV+step/2; v += step {
			fmt.Fprintf(&b, `<line x1="%.0f" y1="%.1f" x2="%.0f" y2="%.1f" stroke="#e5e5e5"/>`+"\n", left, y(v), width-right, y(v))
			fmt.Fprintf(&b, `<text x="%.0f" y="%.1f" text-anchor="end" fill="#555">%s</text>`+"\n", left-6, y(v)+4, strconv.FormatFloat(v, 'f', -1, 64))
		}
		tstep := niceStep(maxT, 10)
		for t := 0.0; t <= maxT+tstep/100; t += tstep {
			fmt.Fprintf(&b, `<line x1="%.1f" y1="%.0f" x2="%.1f" y2="%.0f" stroke="#333"/>`+"\n", x(t), base+panelH, x(t), base+panelH+4)
			fmt.Fprintf(&b, `<text x="%.1f" y="%.0f" text-anchor="middle" fill="#555">%s s</text>`+"\n", x(t), base+panelH+17, strconv.FormatFloat(t, 'f', -1, 64))
		}
		fmt.Fprintf(&b, `<line x1="%.0f" y1="%.0f" x2="%.0f" y2="%.0f" stroke="#333"/>`+"\n", left, base+panelH, width-right, base+panelH)
		fmt.Fprintf(&b, `<line x1="%.0f" y1="%.0f" x2="%.0f" y2="%.0f" stroke="#333"/>`+"\n", left, base, left, base+panelH)
		if r.WorkSeconds > 0 && r.WorkSeconds <= maxT {
			fmt.Fprintf(&b, `<line x1="%.1f" y1="%.0f" x2="%.1f" y2="%.0f" stroke="#555" stroke-dasharray="4 3"/>`+"\n", x(r.WorkSeconds), base, x(r.WorkSeconds), base+panelH)
		}
		for i := range procNames {
			var pts []string
			for _, smp := range r.Samples {
				pts = append(pts, fmt.Sprintf("%.1f,%.1f", x(smp.T), y(p.val(smp, i))))
			}
			if len(pts) > 0 {
				fmt.Fprintf(&b, `<polyline fill="none" stroke="%s" stroke-width="1.5" points="%s"/>`+"\n", procColors[i], strings.Join(pts, " "))
			}
			for _, t := range r.Trends {
				if t.Process == procNames[i] && t.Metric == p.unit && t.Mid != 0 {
					x0 := x(r.WorkSeconds * 2 / 3)
					fmt.Fprintf(&b, `<line x1="%.1f" y1="%.1f" x2="%.1f" y2="%.1f" stroke="%s" stroke-width="2.5" stroke-dasharray="6 3"/>`+"\n",
						x0, y(t.Plateau), x(r.WorkSeconds), y(t.Plateau), procColors[i])
				}
			}
		}
	}
	fmt.Fprintf(&b, `<text x="%.0f" y="%.0f" text-anchor="middle" fill="#555">seconds since the workloads started</text>`+"\n", left+plotW/2, height-8)
	b.WriteString("</svg>\n")
	return b.String()
}

func xmlEsc(s string) string {
	return strings.NewReplacer("&", "&amp;", "<", "&lt;", ">", "&gt;", `"`, "&quot;").Replace(s)
}

// ---- formatting

func mibF(kib uint64) float64 { return float64(kib) / 1024 }

// secsF formats a number of seconds as secs does.
func secsF(s float64) string { return benchfmt.Secs(time.Duration(s * float64(time.Second))) }
