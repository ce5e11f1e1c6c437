package main

import (
	"fmt"
	"sort"
	"strings"

	"hushfs/bench/benchfmt"
)

// v41Section is results.md's NFSv4.1 section: each phase run over both
// versions, v4.1's COMPOUNDs and the operations inside them beside v3's
// calls, with the Linux client's figures for both where it was measured.
func v41Section(r *Report) string {
	type key struct {
		workload, label, server string
		rtt                     float64
	}
	var keys []key
	pairs := map[key][2]*Phase{} // [v3, v4.1]
	for _, p := range ordered(r.Phases) {
		if setupPhases[p.ID] {
			continue
		}
		k := key{p.Workload, p.Label, p.Server, p.RTTms}
		pr, seen := pairs[k]
		if !seen {
			keys = append(keys, k)
		}
		if p.v3() {
			pr[0] = p
		} else {
			pr[1] = p
		}
		pairs[k] = pr
	}
	var b strings.Builder
	b.WriteString("\n## NFSv4.1 beside NFSv3\n\n")
	b.WriteString("The same workloads mounted with `vers=4.1`. A v4.1 call is one COMPOUND (one round trip), named by ")
	b.WriteString("what it does; *ops* counts the operations inside them (SEQUENCE, PUTFH, GETATTR, ...), from `hushfs stats` ")
	b.WriteString("and, independently, from the proxy, which decodes each COMPOUND. *Linux* is the Linux 6.1 client's figure ")
	b.WriteString("against the same server, over v3 and v4.1, where it was measured.\n\n")
	b.WriteString("| phase | server | RTT | v3 calls | v4.1 compounds | v4.1 ops | v4.1 / v3 | wall v3 | wall v4.1 | × local v3 / v4.1 | Linux v3 | Linux v4.1 | v4.1 calls | v4.1 operations |\n")
	b.WriteString("|---|---|---|--:|--:|--:|--:|--:|--:|--:|--:|--:|---|---|\n")
	for _, k := range keys {
		pr := pairs[k]
		v3, v4 := pr[0], pr[1]
		if v4 == nil {
			continue
		}
		ran := func(p *Phase) bool { return p != nil && (p.Status == "ok" || p.Status == "timeout") }
		calls3, wall3, wall4, ratio, local, ops, calls4 := "", "", "", "", "", "", ""
		if v3 != nil {
			calls3 = rpcCell(v3)
		}
		if ran(v3) {
			wall3 = dur(v3.WallS)
		}
		if ran(v4) {
			wall4 = dur(v4.WallS)
			calls4 = benchfmt.Commas(v4.Total())
			if v4.Status == "timeout" {
				calls4 = "≥ " + calls4
			}
			ops = benchfmt.Commas(v4.OpsTotal())
			if ran(v3) && v3.Total() > 0 {
				ratio = fmt.Sprintf("%.2f×", float64(v4.Total())/float64(v3.Total()))
			}
		} else {
			calls4 = v4.Status
		}
		if l := localWall(r, v4); l > 0 {
			x := func(p *Phase) string {
				if p == nil || p.Status != "ok" {
					return "—"
				}
				return fmt.Sprintf("%.1f×", p.WallS/l)
			}
			local = x(v3) + " / " + x(v4)
		}
		var lin3, lin4 *LinuxFigure
		if v3 != nil {
			lin3 = r.Linux.phaseFigure(v3)
		}
		lin4 = r.Linux.phaseFigure(v4)
		top, topOps := "", ""
		if ran(v4) {
			top = topProcs(v4, 6)
			topOps = topCounts(v4.Ops(), 8)
		}
		if ran(v4) && !v4.Agree {
			top += " (proxy ≠ stats: " + v4.AgreeDetail + ")"
		}
		if ran(v4) && !v4.CheckOK && v4.Status == "ok" {
			top += " ✗ WRONG: " + v4.Check
		}
		fmt.Fprintf(&b, "| %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s |\n",
			esc(k.label), serverTitle[k.server], rttCell(k.rtt), calls3, calls4, ops, ratio, wall3, wall4, local,
			linuxCell(lin3), linuxCell(lin4), esc(top), esc(topOps))
	}
	if r.Linux != nil && r.Linux.V41Notes != "" {
		fmt.Fprintf(&b, "\nLinux v4.1: %s\n", esc(r.Linux.V41Notes))
	}
	return b.String()
}

// topCounts lists the n largest counts, "NAME count", largest first.
func topCounts(m map[string]uint64, n int) string {
	names := make([]string, 0, len(m))
	for k := range m {
		names = append(names, k)
	}
	sort.Slice(names, func(i, j int) bool {
		if m[names[i]] != m[names[j]] {
			return m[names[i]] > m[names[j]]
		}
		return names[i] < names[j]
	})
	var parts []string
	for i, k := range names {
		if i == n {
			parts = append(parts, fmt.Sprintf("+%d more", len(names)-n))
			break
		}
		parts = append(parts, k+" "+benchfmt.Commas(m[k]))
	}
	if len(parts) == 0 {
		return "none"
	}
	return strings.Join(parts, ", ")
}
