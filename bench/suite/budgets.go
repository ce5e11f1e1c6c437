package main

import (
	"fmt"
	"maps"
	"slices"
	"strings"

	"hushfs/bench/benchfmt"
)

// quickBudgets are quick mode's ceilings on the NFS calls of the everyday
// workloads (quick trees: zlib 1.2.13 for untar and the git repository,
// bigdir of 2,000 entries), against hushfs serve at RTT 0, per phase and
// procedure: the counts measured when they were set. A count over its
// budget (and budgetSlack) fails the run; one well under it is printed, so
// that the budget is lowered as the client improves. Quick mode prints every
// phase's counts in this form after a run. Measured on 2c8d3f3 (the same
// on every run); untar, git clone, grep -r, git status and configure &&
// make lowered once creates took one call, new directories answered
// lookups of absent names, times set while writing waited for the data and
// an open's ACCESS brought its attributes; ls -l, git status and du -s
// again with bulk revalidation (a READDIRPLUS pass of a directory for its
// entries' expired attributes, tree walks read ahead); untar's SETATTRs once
// a directory's times went out with its mode. git status's GETATTRs are one
// per file git opens: .git's, and those the clone left racily clean (their
// mtime is the index's second), which git reads again — from a few to
// every file, as the clone's timing falls: the budget is every file.
var quickBudgets = map[string]map[string]uint64{
	"ls-l-cached":    {},
	"ls-l-expired":   {"GETATTR": 2, "READDIRPLUS": 1},
	"untar":          {"CREATE": 110, "LOOKUP": 1, "MKDIR": 14, "SETATTR": 248, "WRITE": 110},
	"git-clone":      {"ACCESS": 15, "COMMIT": 1, "CREATE": 151, "GETATTR": 37, "LINK": 2, "LOOKUP": 5, "MKDIR": 31, "READDIRPLUS": 5, "REMOVE": 9, "RENAME": 16, "SETATTR": 2, "SYMLINK": 1, "WRITE": 148},
	"grep-r":         {"ACCESS": 136, "FSSTAT": 1, "LOOKUP": 1, "READ": 139, "READDIRPLUS": 31},
	"git-status":     {"ACCESS": 1, "CREATE": 1, "GETATTR": 138, "READDIRPLUS": 28, "RENAME": 1, "WRITE": 1},
	"du-s":           {"FSSTAT": 1, "GETATTR": 2, "LOOKUP": 2, "READDIRPLUS": 28},
	"rm-clone":       {"FSSTAT": 1, "REMOVE": 136, "RMDIR": 31},
	"configure-make": {"ACCESS": 68, "CREATE": 62, "GETATTR": 378, "LOOKUP": 23, "MKDIR": 1, "READ": 34, "READDIRPLUS": 2, "REMOVE": 16, "RENAME": 17, "RMDIR": 1, "SETATTR": 27, "SYMLINK": 2, "WRITE": 188},
}

// budgetSlack is how far a count may go over its budget: a phase slowed
// down by a loaded machine may see a few more attributes expire during it
// (acregmin is 3 s).
func budgetSlack(budget uint64) uint64 { return max(2, budget/20) }

// wellUnder reports whether a count is far enough under its budget for
// the budget to be lowered.
func wellUnder(n, budget uint64) bool { return n+max(2, budget/10) < budget }

// checkBudgets holds quick mode's everyday phases to quickBudgets. It
// returns the assertions and, separately, the lines that ask for a budget
// to be lowered.
func checkBudgets(phases []*Phase) (as []Assert, lower []string) {
	for _, p := range phases {
		budget, ok := quickBudgets[p.ID]
		if !ok || p.Server != "hushfs" || p.RTTms != 0 {
			continue
		}
		a := Assert{What: p.Label + ": NFS calls per procedure", Want: "≤ " + procList(budget) + " (+ max(2, 5 %) each)"}
		if p.Status != "ok" {
			a.Got = p.Status + ": " + p.Check
			as = append(as, a)
			continue
		}
		a.OK = true
		var over []string
		for _, proc := range slices.Sorted(maps.Keys(unionKeys(budget, p.Stats))) {
			n, b := p.Stats[proc], budget[proc]
			if n > b+budgetSlack(b) {
				a.OK = false
				over = append(over, fmt.Sprintf("%s %d > %d", proc, n, b))
			}
			if wellUnder(n, b) {
				lower = append(lower, fmt.Sprintf("%s %s: %d, budget %d: lower it in bench/suite/budgets.go", p.Label, proc, n, b))
			}
		}
		a.Got = procList(p.Stats)
		if len(over) > 0 {
			a.Got += "; over: " + strings.Join(over, ", ")
		}
		as = append(as, a)
	}
	return as, lower
}

func unionKeys(a, b map[string]uint64) map[string]bool {
	u := map[string]bool{}
	for k := range a {
		u[k] = true
	}
	for k := range b {
		u[k] = true
	}
	return u
}

// procList lists counts by procedure name: "CREATE 110, GETATTR 3".
func procList(m map[string]uint64) string {
	var parts []string
	for _, k := range slices.Sorted(maps.Keys(m)) {
		if m[k] > 0 {
			parts = append(parts, fmt.Sprintf("%s %s", k, benchfmt.Commas(m[k])))
		}
	}
	if len(parts) == 0 {
		return "nothing"
	}
	return strings.Join(parts, ", ")
}

// budgetLiteral prints the everyday phases' counts as entries of
// quickBudgets, to paste when budgets are set or lowered.
func budgetLiteral(phases []*Phase) string {
	var b strings.Builder
	for _, p := range phases {
		if !everyday(p) || p.Server != "hushfs" || p.RTTms != 0 || p.Status != "ok" {
			continue
		}
		var parts []string
		for _, k := range slices.Sorted(maps.Keys(p.Stats)) {
			parts = append(parts, fmt.Sprintf("%q: %d", k, p.Stats[k]))
		}
		fmt.Fprintf(&b, "\t%q: {%s},\n", p.ID, strings.Join(parts, ", "))
	}
	return b.String()
}
