package main

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"hushfs/bench/benchfmt"
	"hushfs/test/harness"
)

// localRuns is how many times the local-disk work runs, each in a fresh
// directory; the report takes each phase's median wall time (local phases
// are short, and one run on a shared machine is noisy).
const localRuns = 3

// runLocal runs a workload's steps on local disk, in the same run: the
// figure a user compares the mount with ("× local"). No counters there.
func (s *suite) runLocal(t *harness.Program, workload string) {
	tag := "[local disk] " + workload
	s.logf("%s: the same work on local disk, %d times, for comparison", tag, localRuns)
	var runs [][]*Phase
	for i := range localRuns {
		if s.ctx.Err() != nil {
			break
		}
		dir := filepath.Join(s.work, fmt.Sprintf("local-%s-%d", workload, i+1))
		if err := os.Mkdir(dir, 0o755); err != nil {
			t.Fatalf("%v", err)
		}
		r := &wrun{s: s, t: t, server: "local disk", workload: workload,
			tag: fmt.Sprintf("%s #%d", tag, i+1), work: dir, export: dir}
		ps := s.localOnce(t, r)
		os.RemoveAll(dir)
		runs = append(runs, ps)
		if slices.ContainsFunc(ps, func(p *Phase) bool { return p.Status != "ok" }) {
			break
		}
	}
	s.mu.Lock()
	s.report.Local = append(s.report.Local, medianPhases(runs)...)
	s.mu.Unlock()
}

// localOnce runs the workload's local steps once.
func (s *suite) localOnce(t *harness.Program, r *wrun) []*Phase {
	var ps []*Phase
	for _, st := range workloads[r.workload].local(r) {
		if s.ctx.Err() != nil {
			break
		}
		fmt.Printf("%s: %-16s ", r.tag, st.label)
		h, err := r.start(st)
		if err != nil {
			t.Fatalf("%v", err)
		}
		x := h.wait(s.ctx, st.limit)
		p := r.newPhase(st.phaseName)
		p.Agree = true // no counters: nothing to disagree
		if x.timedOut || x.stopped {
			h.kill(10 * time.Second)
			y := h.result()
			y.timedOut, y.stopped = x.timedOut, x.stopped
			x = y
			p.Status, p.Check = "timeout", fmt.Sprintf("timed out after %s", benchfmt.Secs(st.limit))
			if x.stopped {
				p.Status, p.Check = "not run", "interrupted"
			}
		} else {
			p.Status = "ok"
			p.Check, p.CheckOK = st.check(&x)
			if !p.CheckOK {
				s.problem("%s %s: %s", r.tag, st.label, p.Check)
			}
		}
		p.WallS, p.UserS, p.SysS = x.wall.Seconds(), x.user.Seconds(), x.sys.Seconds()
		fmt.Printf("%8s  user %s sys %s  %s\n", benchfmt.Secs(x.wall), benchfmt.Secs(x.user), benchfmt.Secs(x.sys), p.Check)
		ps = append(ps, p)
		if p.Status != "ok" {
			break
		}
	}
	return ps
}

// medianPhases takes, for each phase, the run with the median wall time
// (the lower middle of an even count) if every run of it finished, and
// the first one that did not otherwise; its note lists every run's wall.
func medianPhases(runs [][]*Phase) []*Phase {
	if len(runs) == 0 {
		return nil
	}
	var out []*Phase
	for j := range runs[0] {
		var all []*Phase
		for _, ps := range runs {
			if j < len(ps) {
				all = append(all, ps[j])
			}
		}
		if i := slices.IndexFunc(all, func(p *Phase) bool { return p.Status != "ok" }); i >= 0 {
			out = append(out, all[i])
			continue
		}
		var walls []string
		for _, p := range all {
			walls = append(walls, dur(p.WallS))
		}
		slices.SortStableFunc(all, func(a, b *Phase) int {
			switch {
			case a.WallS < b.WallS:
				return -1
			case a.WallS > b.WallS:
				return 1
			}
			return 0
		})
		m := all[(len(all)-1)/2]
		if len(all) > 1 {
			m.Note = fmt.Sprintf("median of %d runs: %s", len(all), strings.Join(walls, ", "))
		}
		out = append(out, m)
	}
	return out
}
