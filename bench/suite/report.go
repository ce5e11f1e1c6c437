package main

import (
	"fmt"
	"math"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"

	"hushfs/bench/benchfmt"
)

// setupPhases are phases that prepare the next one; they are reported in a
// separate table.
var setupPhases = map[string]bool{"clean1": true, "clean2": true}

var serverOrder = map[string]int{"ganesha": 0, "hushfs": 1, "local disk": 2}

var serverTitle = map[string]string{"ganesha": "nfs-ganesha", "hushfs": "hushfs serve", "local disk": "local disk"}

// ordered returns the phases sorted by workload and phase (in the order
// the workload declares them, then the order they first ran), then RTT,
// then server.
func ordered(phases []*Phase) []*Phase {
	first := map[string]int{}
	for i, p := range phases {
		k := p.Workload + "\x00" + p.Label
		if _, ok := first[k]; !ok {
			first[k] = i
		}
	}
	wl := map[string]int{}
	for i, w := range allWorkloads {
		wl[w] = i
	}
	out := slices.Clone(phases)
	sort.SliceStable(out, func(i, j int) bool {
		a, b := out[i], out[j]
		if wl[a.Workload] != wl[b.Workload] {
			return wl[a.Workload] < wl[b.Workload]
		}
		if ra, rb := phaseRank(a), phaseRank(b); ra != rb {
			return ra < rb
		}
		fa, fb := first[a.Workload+"\x00"+a.Label], first[b.Workload+"\x00"+b.Label]
		if fa != fb {
			return fa < fb
		}
		if a.RTTms != b.RTTms {
			return a.RTTms < b.RTTms
		}
		if a.Server != b.Server {
			return serverOrder[a.Server] < serverOrder[b.Server]
		}
		return a.v3() && !b.v3()
	})
	return out
}

// phaseRank is a phase's place among its workload's declared phases (the
// git workload runs them in another order than people read them).
func phaseRank(p *Phase) int {
	if w, ok := workloads[p.Workload]; ok {
		for i, pn := range w.phases(fullSizes, 0) {
			if pn.id == p.ID {
				return i
			}
		}
	}
	return math.MaxInt
}

func rttCell(ms float64) string {
	if ms == 0 {
		return "0"
	}
	return fmt.Sprintf("%g ms", ms)
}

// topProcs lists the n most frequent procedures, WRITE with its stability.
func topProcs(p *Phase, n int) string {
	counts := p.Stats
	if counts == nil {
		counts = p.Proxy
	}
	type pc struct {
		name string
		n    uint64
	}
	var l []pc
	for k, v := range counts {
		l = append(l, pc{k, v})
	}
	sort.Slice(l, func(i, j int) bool {
		if l[i].n != l[j].n {
			return l[i].n > l[j].n
		}
		return l[i].name < l[j].name
	})
	var parts []string
	for i, e := range l {
		if i == n {
			parts = append(parts, fmt.Sprintf("+%d more", len(l)-n))
			break
		}
		s := fmt.Sprintf("%s %s", e.name, benchfmt.Commas(e.n))
		if e.name == "WRITE" && len(p.WriteStable) > 0 {
			var st []string
			for _, how := range []string{"UNSTABLE", "DATA_SYNC", "FILE_SYNC"} {
				if v := p.WriteStable[how]; v > 0 {
					st = append(st, fmt.Sprintf("%s %d", how, v))
				}
			}
			for how, v := range p.WriteStable {
				if !slices.Contains([]string{"UNSTABLE", "DATA_SYNC", "FILE_SYNC"}, how) && v > 0 {
					st = append(st, fmt.Sprintf("%s %d", how, v))
				}
			}
			s += " (" + strings.Join(st, ", ") + ")"
		}
		parts = append(parts, s)
	}
	if len(parts) == 0 {
		return "none"
	}
	return strings.Join(parts, ", ")
}

// comparable returns hushfs's figure over the procedures the Linux figure
// counts.
func comparable(p *Phase, fig *LinuxFigure) uint64 {
	if fig == nil || len(fig.Counted) == 0 {
		return p.Total()
	}
	var n uint64
	for _, proc := range fig.Counted {
		n += p.Count(proc)
	}
	return n
}

func linuxCell(fig *LinuxFigure) string {
	if fig == nil {
		return ""
	}
	s := benchfmt.Commas(fig.Total)
	switch {
	case fig.AtLeast:
		s = "> " + s
	case fig.Max > 0:
		s += "–" + benchfmt.Commas(fig.Max)
	}
	if len(fig.Counted) > 0 {
		s += " (" + strings.Join(fig.Counted, "+") + ")"
	}
	return s
}

func ratioCell(p *Phase, fig *LinuxFigure) string {
	if fig == nil || (p.Status != "ok" && p.Status != "timeout") {
		return ""
	}
	h := float64(comparable(p, fig))
	r := func(l uint64) string {
		if l == 0 {
			return "∞"
		}
		v := h / float64(l)
		switch {
		case v >= 10:
			return fmt.Sprintf("%.0f", v)
		case v >= 0.1:
			return fmt.Sprintf("%.2f", v)
		default:
			return strconv.FormatFloat(v, 'g', 2, 64) // two significant digits
		}
	}
	timedOut := p.Status == "timeout"
	switch {
	case timedOut && fig.AtLeast:
		return "?"
	case timedOut:
		return "≥ " + r(fig.Total) + "×"
	case fig.AtLeast:
		return "< " + r(fig.Total) + "×"
	case fig.Max > 0:
		return r(fig.Max) + "–" + r(fig.Total) + "×"
	}
	return r(fig.Total) + "×"
}

func rpcCell(p *Phase) string {
	ops := ""
	if !p.v3() && p.OpsTotal() > 0 {
		ops = " (" + benchfmt.Commas(p.OpsTotal()) + " ops)" // a COMPOUND's operations
	}
	switch p.Status {
	case "ok":
		return benchfmt.Commas(p.Total()) + ops
	case "timeout":
		return "≥ " + benchfmt.Commas(p.Total()) + ops
	}
	return "—"
}

// serverCell names the phase's server, and the NFS version unless 3.
func serverCell(p *Phase) string {
	if p.v3() {
		return serverTitle[p.Server]
	}
	return serverTitle[p.Server] + " v" + p.Vers
}

func resultCell(p *Phase) string {
	switch {
	case p.Status == "ok" && p.CheckOK:
		return "✓ " + p.Check
	case p.Status == "ok":
		return "✗ WRONG: " + p.Check
	case p.Status == "timeout":
		return "⏱ " + p.Check
	}
	return p.Status + ": " + p.Check
}

func agreeCell(p *Phase) string {
	switch {
	case p.Status == "not run" || p.Status == "failed":
		return ""
	case p.Agree:
		return "✓"
	}
	return "✗ " + p.AgreeDetail
}

func dur(s float64) string { return benchfmt.Secs(time.Duration(s * float64(time.Second))) }

// localWall returns the wall time of the same phase on local disk (0 if
// there is none).
func localWall(r *Report, p *Phase) float64 {
	for _, l := range r.Local {
		if l.Workload == p.Workload && l.ID == p.ID && l.Status == "ok" {
			return l.WallS
		}
	}
	return 0
}

func esc(s string) string { return strings.ReplaceAll(s, "|", `\|`) }

// table is the main markdown table: every phase but the setup ones.
func table(r *Report) string {
	var b strings.Builder
	b.WriteString("| workload | phase | server | RTT | hushfs RPCs | top procedures | Linux RPCs | hushfs / Linux | wall | user | sys | Linux wall | proxy = stats | result |\n")
	b.WriteString("|---|---|---|---|--:|---|--:|--:|--:|--:|--:|--:|---|---|\n")
	for _, p := range ordered(r.Phases) {
		if setupPhases[p.ID] {
			continue
		}
		fig := r.Linux.phaseFigure(p)
		lw := ""
		if p.Server == "ganesha" && p.v3() {
			lw = r.Linux.wall(p.ID, p.RTTms)
		}
		wall, user, sys := "", "", ""
		if p.Status == "ok" || p.Status == "timeout" {
			wall, user, sys = dur(p.WallS), dur(p.UserS), dur(p.SysS)
			// Against the local build where that takes long enough for
			// the ratio to mean something.
			if l := localWall(r, p); l >= 1 && p.Status == "ok" {
				wall += fmt.Sprintf(" (%.1f× local)", p.WallS/l)
			}
		}
		top := ""
		if p.Status == "ok" || p.Status == "timeout" {
			top = topProcs(p, 4)
		}
		fmt.Fprintf(&b, "| %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s |\n",
			p.Workload, esc(p.Label), serverCell(p), rttCell(p.RTTms), rpcCell(p), esc(top),
			linuxCell(fig), ratioCell(p, fig), wall, user, sys, lw, esc(agreeCell(p)), esc(resultCell(p)))
	}
	return b.String()
}

// throughputTable lists the phases that move data: MB/s and the mount
// daemon's peak memory.
func throughputTable(r *Report) string {
	var b strings.Builder
	b.WriteString("| phase | server | RTT | data | wall | MB/s | Linux wall | mount peak RSS | RPCs |\n")
	b.WriteString("|---|---|---|--:|--:|--:|--:|--:|---|\n")
	for _, p := range ordered(r.Phases) {
		if p.Bytes == 0 {
			continue
		}
		lw := ""
		if p.Server == "ganesha" {
			lw = r.Linux.wall(p.ID, p.RTTms)
		}
		fmt.Fprintf(&b, "| %s | %s | %s | %s MiB | %s | %.0f | %s | %s | %s |\n", esc(p.Label), serverCell(p),
			rttCell(p.RTTms), benchfmt.Commas(uint64(p.Bytes>>20)), dur(p.WallS), p.MBps, lw, mib(p.MountPeakRSSKiB), esc(topProcs(p, 3)))
	}
	return b.String()
}

// mib renders KiB as MiB.
func mib(kib uint64) string {
	if kib == 0 {
		return "?"
	}
	return fmt.Sprintf("%.0f MiB", float64(kib)/1024)
}

// summary is the short table: one row per phase and RTT, the servers side
// by side, beside the Linux client.
func summary(r *Report) string {
	type key struct {
		label string
		rtt   float64
		vers  string
	}
	var keys []key
	rows := map[key]map[string]*Phase{}
	for _, p := range ordered(r.Phases) {
		if setupPhases[p.ID] {
			continue
		}
		vers := p.Vers
		if p.v3() {
			vers = ""
		}
		k := key{p.Label, p.RTTms, vers}
		if rows[k] == nil {
			rows[k] = map[string]*Phase{}
			keys = append(keys, k)
		}
		rows[k][p.Server] = p
	}
	cell := func(p *Phase) (rpcs, wall string) {
		if p == nil {
			return "", ""
		}
		rpcs = rpcCell(p)
		if p.Status == "ok" || p.Status == "timeout" {
			wall = dur(p.WallS)
		}
		if p.Status == "ok" && (!p.CheckOK || !p.Agree) {
			rpcs += " ✗"
		}
		return rpcs, wall
	}
	var b strings.Builder
	b.WriteString("| phase | RTT | hushfs → ganesha | hushfs → hushfs serve | Linux → ganesha | hushfs / Linux | wall → ganesha | wall → hushfs serve | Linux wall |\n")
	b.WriteString("|---|---|--:|--:|--:|--:|--:|--:|--:|\n")
	for _, k := range keys {
		g, h := rows[k]["ganesha"], rows[k]["hushfs"]
		var id string
		for _, p := range rows[k] {
			id = p.ID
		}
		fig := r.Linux.figureVers(id, k.rtt, k.vers)
		gr, gw := cell(g)
		hr, hw := cell(h)
		ratio := ""
		if g != nil {
			ratio = ratioCell(g, fig)
		}
		label, lw := k.label, ""
		if k.vers != "" {
			label += " (v" + k.vers + ")"
		} else {
			lw = r.Linux.wall(id, k.rtt)
		}
		fmt.Fprintf(&b, "| %s | %s | %s | %s | %s | %s | %s | %s | %s |\n", esc(label), rttCell(k.rtt), gr, hr,
			linuxCell(fig), ratio, gw, hw, lw)
	}
	return b.String()
}

// everydayTable is the everyday workloads beside local disk: wall, × local
// and every procedure's calls, per server and RTT.
func everydayTable(r *Report) string {
	var b strings.Builder
	b.WriteString("| phase | server | RTT | local | wall | × local | RPCs | per procedure | result |\n")
	b.WriteString("|---|---|---|--:|--:|--:|--:|---|---|\n")
	for _, p := range ordered(r.Phases) {
		if !everyday(p) {
			continue
		}
		local, wall, ratio, procs := "", "", "", ""
		if l := localWall(r, p); l > 0 {
			local = dur(l)
			if p.Status == "ok" {
				ratio = fmt.Sprintf("%.0f×", p.WallS/l)
				if p.WallS/l < 10 {
					ratio = fmt.Sprintf("%.1f×", p.WallS/l)
				}
			}
		}
		if p.Status == "ok" || p.Status == "timeout" {
			wall = dur(p.WallS)
			procs = topProcs(p, 100)
		}
		if !p.Agree && p.Status != "not run" && p.Status != "failed" {
			procs += " (proxy ≠ stats: " + p.AgreeDetail + ")"
		}
		fmt.Fprintf(&b, "| %s | %s | %s | %s | %s | %s | %s | %s | %s |\n", esc(p.Label), serverCell(p),
			rttCell(p.RTTms), local, wall, ratio, rpcCell(p), esc(procs), esc(resultCell(p)))
	}
	return b.String()
}

// setupTable lists the setup phases (make clean).
func setupTable(r *Report) string {
	var b strings.Builder
	b.WriteString("| workload | phase | server | RTT | hushfs RPCs | top procedures | wall | proxy = stats | result |\n")
	b.WriteString("|---|---|---|---|--:|---|--:|---|---|\n")
	for _, p := range ordered(r.Phases) {
		if !setupPhases[p.ID] {
			continue
		}
		wall := ""
		if p.Status == "ok" || p.Status == "timeout" {
			wall = dur(p.WallS)
		}
		fmt.Fprintf(&b, "| %s | %s | %s | %s | %s | %s | %s | %s | %s |\n", p.Workload, esc(p.Label),
			serverCell(p), rttCell(p.RTTms), rpcCell(p), esc(topProcs(p, 4)), wall, esc(agreeCell(p)), esc(resultCell(p)))
	}
	return b.String()
}

func localTable(r *Report) string {
	var b strings.Builder
	b.WriteString("| workload | phase | wall | user | sys | runs | result |\n|---|---|--:|--:|--:|---|---|\n")
	for _, p := range r.Local {
		fmt.Fprintf(&b, "| %s | %s | %s | %s | %s | %s | %s |\n", p.Workload, esc(p.Label), dur(p.WallS), dur(p.UserS), dur(p.SysS),
			esc(p.Note), esc(resultCell(p)))
	}
	return b.String()
}

func assertTable(as []Assert) string {
	var b strings.Builder
	b.WriteString("| asserted | want | got | |\n|---|---|---|---|\n")
	for _, a := range as {
		mark := "✓"
		if !a.OK {
			mark = "✗ FAILED"
		}
		fmt.Fprintf(&b, "| %s | %s | %s | %s |\n", esc(a.What), esc(a.Want), esc(a.Got), mark)
	}
	return b.String()
}

// markdown renders results.md.
func markdown(r *Report) string {
	var b strings.Builder
	b.WriteString("# hushfs benchmark results\n\n")
	commit := r.Host.Commit
	if commit == "" {
		commit = "(unknown)"
	}
	fmt.Fprintf(&b, "%s run, %s → %s (%s). Commit %s, kernel %s, %d CPUs, %s.\n\n", r.Mode,
		r.Started.Format("2006-01-02 15:04:05"), r.Finished.Format("15:04:05"), dur(r.Finished.Sub(r.Started).Seconds()),
		commit, r.Host.Kernel, r.Host.CPUs, r.Host.Go)
	if r.Interrupted {
		b.WriteString("**Interrupted: these results are partial.**\n\n")
	}
	fmt.Fprintf(&b, "Servers: %s. Proxy RTT: %s. Sizes: bigdir %s entries; tree %d dirs × %d files; dd %d MiB.\n\n",
		strings.Join(r.Servers, ", "), strings.Join(r.RTTs, ", "), benchfmt.Commas(uint64(r.Sizes.LsFiles)),
		r.Sizes.TreeDirs, r.Sizes.TreeFiles, r.Sizes.DdMiB)
	for _, t := range []struct{ what, tree string }{{"untar", r.Sizes.Untar}, {"git clone", r.Sizes.Repo}, {"configure && make", r.Sizes.Zlib}} {
		if t.tree != "" {
			fmt.Fprintf(&b, "- %s: %s\n", t.what, t.tree)
		}
	}
	if r.Sizes.Untar != "" || r.Sizes.Repo != "" || r.Sizes.Zlib != "" {
		b.WriteString("\n")
	}
	if r.MountOpts != "" {
		fmt.Fprintf(&b, "Extra mount options: `%s`.\n\n", r.MountOpts)
	}
	b.WriteString("Each workload ran against a fresh server with `hushfs proxy --rtt R` in front of it and hushfs mounted through the proxy. ")
	b.WriteString("RPCs are NFS calls during the phase as `hushfs stats` counts them; the proxy counted them independently (*proxy = stats*). ")
	b.WriteString("Wall, user and sys are the workload process's (with its children), not the mount daemon's; ")
	b.WriteString("for a phase killed at its limit, user and sys leave out children still running then. ")
	if r.Linux != nil {
		fmt.Fprintf(&b, "*Linux* is the %s against %s, on nfs-ganesha rows only (it was measured against ganesha); ", r.Linux.Client, r.Linux.Server)
		b.WriteString("for dd and fixup it counts WRITE and COMMIT only, and the ratio takes hushfs's WRITE + COMMIT. ")
		b.WriteString("`≥`: hushfs's phase was killed at its limit; `>`/`<`: the Linux run was killed at its limit.\n\n")
	}
	b.WriteString("## Summary\n\n")
	b.WriteString("NFS calls per phase (`≥`: stopped at its time limit; ✗: a wrong result or a count mismatch, see below).\n\n")
	b.WriteString(summary(r))
	b.WriteString("\n## Every phase\n\n")
	b.WriteString(table(r))
	if slices.ContainsFunc(r.Phases, func(p *Phase) bool { return p.Bytes > 0 }) {
		b.WriteString("\n## Data throughput\n\n")
		b.WriteString("Each phase on a fresh mount (empty client caches; the server's page cache holds the file). ")
		b.WriteString("MB/s is 10^6 bytes per second of the workload's wall time; peak RSS is the mount daemon's VmHWM.\n\n")
		b.WriteString(throughputTable(r))
	}
	if slices.ContainsFunc(r.Phases, everyday) {
		b.WriteString("\n## Everyday workloads\n\n")
		b.WriteString("Real trees (listed above); *local* is the same work on local disk in the same run, ")
		b.WriteString("warm (local disk has no attributes to expire), the median of its runs. ")
		fmt.Fprintf(&b, "*Expired*: the mount sat idle %s first, past the longest attribute lifetime its options allow, so every cached attribute had expired. ", dur(r.Sizes.ExpireWaitS))
		b.WriteString("git status runs on the mount that cloned; grep -r on a fresh mount, then du -s and rm -rf on that one. ")
		b.WriteString("Calls per procedure from `hushfs stats` (the proxy agreed unless marked). A mount's wall time is one run: noisy on a shared machine.\n\n")
		b.WriteString(everydayTable(r))
	}
	if slices.ContainsFunc(r.Phases, func(p *Phase) bool { return !p.v3() }) {
		b.WriteString(v41Section(r))
	}
	if len(r.Local) > 0 {
		b.WriteString("\n## The same work on local disk\n\n")
		b.WriteString(localTable(r))
	}
	if slices.ContainsFunc(r.Phases, func(p *Phase) bool { return setupPhases[p.ID] }) {
		b.WriteString("\n## Setup phases\n\n")
		b.WriteString(setupTable(r))
	}
	if len(r.Asserts) > 0 {
		b.WriteString("\n## Asserted RPC counts (quick mode)\n\n")
		b.WriteString(assertTable(r.Asserts))
		if len(r.LowerBudgets) > 0 {
			b.WriteString("\nWell under budget (the client improved; lower these budgets):\n\n")
			for _, l := range r.LowerBudgets {
				fmt.Fprintf(&b, "- %s\n", esc(l))
			}
		}
	}
	b.WriteString("\n## Problems\n\n")
	if len(r.Problems) == 0 {
		b.WriteString("None: every phase that finished has the right result, and the proxy's counts equal `hushfs stats` for every phase.\n")
	}
	for _, p := range r.Problems {
		fmt.Fprintf(&b, "- %s\n", esc(p))
	}
	var timeouts []string
	for _, p := range ordered(r.Phases) {
		if p.Status == "timeout" {
			timeouts = append(timeouts, fmt.Sprintf("- %s %s, %s, RTT %s: %s (%s)", p.Workload, p.Label,
				serverCell(p), rttCell(p.RTTms), p.Check, topProcs(p, 4)))
		}
	}
	if len(timeouts) > 0 {
		b.WriteString("\n## Phases stopped at their time limit\n\n")
		b.WriteString(strings.Join(timeouts, "\n") + "\n")
	}
	b.WriteString("\n![RPCs per phase, hushfs and the Linux client](chart.svg)\n")
	return b.String()
}

// ---- chart.svg: RPCs per phase, one panel per RTT, log scale.

type bar struct {
	value    float64
	hi       float64 // upper end of a range, or 0
	atLeast  bool    // a lower bound (stopped at a limit)
	color    string
	missing  bool
	tooltips string
}

func shortCount(v float64) string {
	switch {
	case v >= 1e6:
		return fmt.Sprintf("%.1fM", v/1e6)
	case v >= 1e4:
		return fmt.Sprintf("%.0fk", v/1e3)
	case v >= 1e3:
		return fmt.Sprintf("%.1fk", v/1e3)
	}
	return fmt.Sprintf("%.0f", v)
}

func xmlEsc(s string) string {
	return strings.NewReplacer("&", "&amp;", "<", "&lt;", ">", "&gt;", `"`, "&quot;").Replace(s)
}

// chart draws grouped bars: for each phase, hushfs against each server and
// the Linux client, on a log scale, one panel per RTT.
func chart(r *Report) string {
	type series struct {
		name, color, server string
	}
	var ss []series
	if slices.Contains(r.Servers, "ganesha") {
		ss = append(ss, series{"hushfs → nfs-ganesha", "#1f77b4", "ganesha"})
	}
	if slices.Contains(r.Servers, "hushfs") {
		ss = append(ss, series{"hushfs → hushfs serve", "#2ca02c", "hushfs"})
	}
	ss = append(ss, series{"Linux 6.1 → nfs-ganesha", "#7f7f7f", "linux"})

	// Phases in table order, once per id.
	var ids []phaseName
	seen := map[string]bool{}
	for _, p := range ordered(r.Phases) {
		if setupPhases[p.ID] || seen[p.ID] {
			continue
		}
		seen[p.ID] = true
		ids = append(ids, phaseName{p.ID, p.Label})
	}
	find := func(id, server string, rtt float64) *Phase {
		for _, p := range r.Phases {
			if p.ID == id && p.Server == server && p.RTTms == rtt && p.v3() {
				return p
			}
		}
		return nil
	}
	var rtts []float64
	for _, p := range r.Phases {
		if !slices.Contains(rtts, p.RTTms) {
			rtts = append(rtts, p.RTTms)
		}
	}
	sort.Float64s(rtts)

	const (
		left, right, top = 70.0, 20.0, 70.0
		panelH, gap      = 300.0, 90.0
		groupW           = 96.0
	)
	width := left + right + groupW*float64(max(len(ids), 1))
	height := top + float64(len(rtts))*(panelH+gap) + 10

	maxV := 10.0
	bars := map[string][]bar{} // "rtt/id" → bars
	for _, rtt := range rtts {
		for _, id := range ids {
			var bs []bar
			for _, s := range ss {
				var b bar
				b.color = s.color
				if s.server == "linux" {
					fig := r.Linux.figure(id.id, rtt)
					if fig == nil {
						b.missing = true
					} else {
						b.value, b.hi, b.atLeast = float64(fig.Total), float64(fig.Max), fig.AtLeast
					}
				} else {
					p := find(id.id, s.server, rtt)
					if p == nil || (p.Status != "ok" && p.Status != "timeout") {
						b.missing = true
					} else {
						b.value = float64(comparable(p, r.Linux.figure(id.id, 0)))
						b.atLeast = p.Status == "timeout"
					}
				}
				maxV = math.Max(maxV, math.Max(b.value, b.hi))
				bs = append(bs, b)
			}
			bars[fmt.Sprint(rtt, "/", id.id)] = bs
		}
	}
	// The axis starts below 1 so that a count of 1 still shows a bar.
	decades := math.Ceil(math.Log10(maxV))
	const floor = -0.3 // log10 of the axis' lower end
	y := func(v, base float64) float64 {
		if v <= 0 {
			return base + panelH
		}
		return base + panelH - panelH*(math.Log10(v)-floor)/(decades-floor)
	}

	var b strings.Builder
	fmt.Fprintf(&b, `<svg xmlns="http://www.w3.org/2000/svg" width="%.0f" height="%.0f" viewBox="0 0 %.0f %.0f" font-family="sans-serif" font-size="12">`+"\n", width, height, width, height)
	fmt.Fprintf(&b, `<rect width="100%%" height="100%%" fill="white"/>`+"\n")
	fmt.Fprintf(&b, `<text x="%.0f" y="20" font-size="15" font-weight="bold">NFS RPCs per phase (log scale): hushfs and the Linux client</text>`+"\n", left)
	lx := left
	for _, s := range ss {
		fmt.Fprintf(&b, `<rect x="%.0f" y="30" width="12" height="12" fill="%s"/><text x="%.0f" y="40">%s</text>`+"\n", lx, s.color, lx+16, xmlEsc(s.name))
		lx += 16 + 7.5*float64(len(s.name)) + 20
	}
	fmt.Fprintf(&b, `<text x="%.0f" y="60" fill="#555">Hatched: stopped at a time limit (a lower bound). Light top: the range over several runs. dd and fixup: WRITE + COMMIT only.</text>`+"\n", left)
	b.WriteString(`<defs><pattern id="hatch" width="6" height="6" patternUnits="userSpaceOnUse" patternTransform="rotate(45)"><rect width="6" height="6" fill="white" fill-opacity="0.0"/><line x1="0" y1="0" x2="0" y2="6" stroke="white" stroke-width="3"/></pattern></defs>` + "\n")
	for pi, rtt := range rtts {
		base := top + 20 + float64(pi)*(panelH+gap)
		fmt.Fprintf(&b, `<text x="%.0f" y="%.0f" font-weight="bold">RTT %s</text>`+"\n", left, base-8, xmlEsc(rttCell(rtt)))
		for d := 0.0; d <= decades; d++ {
			yy := y(math.Pow(10, d), base)
			fmt.Fprintf(&b, `<line x1="%.0f" y1="%.1f" x2="%.0f" y2="%.1f" stroke="#ddd"/>`+"\n", left, yy, width-right, yy)
			fmt.Fprintf(&b, `<text x="%.0f" y="%.1f" text-anchor="end" fill="#555">%s</text>`+"\n", left-6, yy+4, shortCount(math.Pow(10, d)))
		}
		fmt.Fprintf(&b, `<line x1="%.0f" y1="%.0f" x2="%.0f" y2="%.0f" stroke="#333"/>`+"\n", left, base+panelH, width-right, base+panelH)
		for gi, id := range ids {
			gx := left + float64(gi)*groupW
			bs := bars[fmt.Sprint(rtt, "/", id.id)]
			bw := (groupW - 16) / float64(len(bs))
			for i, br := range bs {
				x := gx + 8 + float64(i)*bw
				if br.missing {
					fmt.Fprintf(&b, `<text x="%.1f" y="%.1f" text-anchor="middle" fill="#999" font-size="10">n/a</text>`+"\n", x+bw/2, base+panelH-4)
					continue
				}
				yy := y(br.value, base)
				h := base + panelH - yy
				fmt.Fprintf(&b, `<rect x="%.1f" y="%.1f" width="%.1f" height="%.1f" fill="%s"/>`+"\n", x+1, yy, bw-2, h, br.color)
				label := shortCount(br.value)
				if br.hi > 0 {
					yh := y(br.hi, base)
					fmt.Fprintf(&b, `<rect x="%.1f" y="%.1f" width="%.1f" height="%.1f" fill="%s" fill-opacity="0.4"/>`+"\n", x+1, yh, bw-2, yy-yh, br.color)
					label += "–" + shortCount(br.hi)
					yy = yh
				}
				if br.atLeast {
					fmt.Fprintf(&b, `<rect x="%.1f" y="%.1f" width="%.1f" height="%.1f" fill="url(#hatch)"/>`+"\n", x+1, yy, bw-2, base+panelH-yy)
					label = "≥" + label
				}
				fmt.Fprintf(&b, `<text x="%.1f" y="%.1f" text-anchor="middle" font-size="9">%s</text>`+"\n", x+bw/2, yy-3, xmlEsc(label))
			}
			fmt.Fprintf(&b, `<text x="%.1f" y="%.0f" text-anchor="middle">%s</text>`+"\n", gx+groupW/2, base+panelH+16, xmlEsc(id.label))
		}
	}
	b.WriteString("</svg>\n")
	return b.String()
}
