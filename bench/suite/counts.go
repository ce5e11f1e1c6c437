package main

import (
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"

	"hushfs/internal/nfs3"
	"hushfs/test/harness"
)

// statsJSON is the part of `hushfs stats --json` the suite reads: calls
// and transmissions per procedure (NFS procedures by name, MOUNT: and
// PORTMAP: prefixed), and over NFSv4.1 the operations inside the
// COMPOUNDs.
type statsJSON struct {
	Ops map[string]struct {
		Ops           uint64 `json:"ops"`
		Transmissions uint64 `json:"transmissions"`
	} `json:"ops"`
	Operations map[string]uint64 `json:"operations"`
}

// proxyJSON is the part of `hushfs proxy counts --json` the suite reads.
type proxyJSON struct {
	Calls          map[string]uint64 `json:"calls"` // "prog/vers/proc"
	NFS4Ops        map[string]uint64 `json:"nfs4_ops"`
	NFS4Incomplete uint64            `json:"nfs4_incomplete"`
	WriteStable    map[string]uint64 `json:"write_stable"`
	Commits        uint64            `json:"commits"`
	UnparsedCalls  uint64            `json:"unparsed_calls"`
}

func (r *wrun) readStats(m *harness.Mount) (*statsJSON, error) {
	out, err := harness.RunHushfs(r.s.cfg.bin, 15*time.Second, "stats", m.Dir, "--json")
	if err != nil {
		return nil, fmt.Errorf("hushfs stats: %w: %s", err, strings.TrimSpace(out))
	}
	var snap statsJSON
	if err := json.Unmarshal([]byte(out), &snap); err != nil {
		return nil, fmt.Errorf("hushfs stats --json: %w: %q", err, tailString(out, 200))
	}
	return &snap, nil
}

func (r *wrun) readProxy() (*proxyJSON, error) {
	out, err := harness.RunHushfs(r.s.cfg.bin, 15*time.Second, "proxy", "counts", "--control", r.ctl, "--json")
	if err != nil {
		return nil, fmt.Errorf("hushfs proxy counts: %w: %s", err, strings.TrimSpace(out))
	}
	var c proxyJSON
	if err := json.Unmarshal([]byte(out), &c); err != nil {
		return nil, fmt.Errorf("hushfs proxy counts: %w: %q", err, tailString(out, 200))
	}
	return &c, nil
}

// fill reads both counters into p, rereading for up to 3 s while they
// disagree: calls still in flight when the workload exited (or was killed)
// are in the proxy's count, taken on arrival, before they are in the
// client's, taken on completion.
func (r *wrun) fill(p *Phase, m *harness.Mount) {
	for i := range 30 {
		if i > 0 {
			time.Sleep(100 * time.Millisecond)
		}
		snap, serr := r.readStats(m)
		pc, perr := r.readProxy()
		setCounts(p, snap, serr, pc, perr)
		if p.Agree {
			return
		}
	}
}

var stableNames = map[string]string{
	strconv.Itoa(int(nfs3.Unstable)): "UNSTABLE", strconv.Itoa(int(nfs3.DataSync)): "DATA_SYNC", strconv.Itoa(int(nfs3.FileSync)): "FILE_SYNC",
}

// nfs4Procs names NFSv4's procedures as the proxy's keys give them.
var nfs4Procs = map[uint32]string{0: "NULL", 1: "COMPOUND"}

// setCounts fills p's counts from the two readings and compares them.
// Over NFSv3 both count calls per procedure. Over NFSv4.1 the client names
// each COMPOUND by what it does (OPEN, GETATTR, ...) while the proxy sees
// only COMPOUNDs: the two agree when they count as many calls and the same
// operations inside them.
func setCounts(p *Phase, snap *statsJSON, serr error, pc *proxyJSON, perr error) {
	p.Stats, p.StatsTotal, p.StatsTransmissions = nil, 0, nil
	p.Proxy, p.ProxyTotal, p.ProxyOther = nil, 0, nil
	p.StatsOps, p.StatsOpsTotal, p.ProxyOps, p.ProxyOpsTotal = nil, 0, nil, 0
	p.WriteStable, p.Commits = map[string]uint64{}, 0
	if snap != nil {
		p.Stats = map[string]uint64{}
		for name, o := range snap.Ops {
			if strings.Contains(name, ":") || name == "OTHER" || o.Ops == 0 {
				continue // MOUNT and PORTMAP calls do not go through the proxy
			}
			p.Stats[name] = o.Ops
			p.StatsTotal += o.Ops
			if o.Transmissions != o.Ops {
				if p.StatsTransmissions == nil {
					p.StatsTransmissions = map[string]uint64{}
				}
				p.StatsTransmissions[name] = o.Transmissions
			}
		}
		if len(snap.Operations) > 0 {
			p.StatsOps = map[string]uint64{}
			for op, n := range snap.Operations {
				if n > 0 {
					p.StatsOps[op] = n
					p.StatsOpsTotal += n
				}
			}
		}
	}
	if pc != nil {
		p.Proxy = map[string]uint64{}
		for k, n := range pc.Calls {
			if n == 0 {
				continue
			}
			var prog, vers, proc uint32
			if _, err := fmt.Sscanf(k, "%d/%d/%d", &prog, &vers, &proc); err == nil && prog == nfs3.Program {
				name := ""
				switch {
				case vers == nfs3.Version:
					name = nfs3.ProcName(proc)
				case vers == 4 && nfs4Procs[proc] != "":
					name = nfs4Procs[proc]
				}
				if name != "" {
					p.Proxy[name] += n
					p.ProxyTotal += n
					continue
				}
			}
			if p.ProxyOther == nil {
				p.ProxyOther = map[string]uint64{}
			}
			p.ProxyOther[k] += n
		}
		if len(pc.NFS4Ops) > 0 {
			p.ProxyOps = map[string]uint64{}
			for op, n := range pc.NFS4Ops {
				if n > 0 {
					p.ProxyOps[op] = n
					p.ProxyOpsTotal += n
				}
			}
		}
		for how, n := range pc.WriteStable {
			name, ok := stableNames[how]
			if !ok {
				name = "stable_how=" + how
			}
			p.WriteStable[name] += n
		}
		p.Commits = pc.Commits
	}
	var diffs []string
	if serr != nil {
		diffs = append(diffs, serr.Error())
	}
	if perr != nil {
		diffs = append(diffs, perr.Error())
	}
	if snap != nil && pc != nil {
		if p.Vers == "4.1" {
			diffs = append(diffs, compoundDiffs(p)...)
		} else {
			diffs = append(diffs, callDiffs(p.Stats, p.Proxy, p.StatsTransmissions)...)
		}
		for k, n := range p.ProxyOther {
			diffs = append(diffs, fmt.Sprintf("proxy saw %d calls of %s", n, k))
		}
		if pc.UnparsedCalls > 0 {
			diffs = append(diffs, fmt.Sprintf("proxy could not parse %d calls", pc.UnparsedCalls))
		}
		if pc.NFS4Incomplete > 0 {
			diffs = append(diffs, fmt.Sprintf("proxy could not read the operations of %d COMPOUNDs", pc.NFS4Incomplete))
		}
	}
	p.Agree = len(diffs) == 0
	p.AgreeDetail = strings.Join(diffs, "; ")
}

// callDiffs lists the procedures whose counts differ.
func callDiffs(stats, prox map[string]uint64, trans map[string]uint64) []string {
	names := slices.Collect(maps.Keys(stats))
	for n := range prox {
		if _, ok := stats[n]; !ok {
			names = append(names, n)
		}
	}
	sort.Strings(names)
	var diffs []string
	for _, n := range names {
		if a, b := stats[n], prox[n]; a != b {
			d := fmt.Sprintf("%s stats %d proxy %d", n, a, b)
			if t, ok := trans[n]; ok {
				d += fmt.Sprintf(" (stats transmissions %d)", t)
			}
			diffs = append(diffs, d)
		}
	}
	return diffs
}

// compoundDiffs compares an NFSv4.1 phase's counts: calls (COMPOUNDs and
// NULLs) in all, and operations by name. COMPOUNDs the session layer sends
// on its own are the proxy's alone: a lone SEQUENCE renewing the lease when
// the mount is idle; those are noted, not counted as a disagreement.
func compoundDiffs(p *Phase) []string {
	stats, prox := maps.Clone(p.StatsOps), maps.Clone(p.ProxyOps)
	if stats == nil {
		stats = map[string]uint64{}
	}
	if prox == nil {
		prox = map[string]uint64{}
	}
	var diffs []string
	extra := int64(p.ProxyTotal) - int64(p.StatsTotal)
	p.Renewals = 0
	if extra > 0 && int64(prox["SEQUENCE"])-int64(stats["SEQUENCE"]) == extra {
		p.Renewals = uint64(extra)
		prox["SEQUENCE"] = stats["SEQUENCE"]
		extra = 0
	}
	if extra != 0 {
		diffs = append(diffs, fmt.Sprintf("calls: stats %d proxy %d", p.StatsTotal, p.ProxyTotal))
	}
	for _, d := range callDiffs(stats, prox, nil) {
		diffs = append(diffs, "operation "+d)
	}
	return diffs
}
