package main

import (
	"encoding/json"
	"fmt"
	"os"
)

// LinuxData is bench/linux-6.1.json: the Linux kernel client's figures for
// the same phases against the same ganesha.
type LinuxData struct {
	Client string                 `json:"client"`
	Server string                 `json:"server"`
	Notes  string                 `json:"notes"`
	Phases map[string]*LinuxPhase `json:"phases"`
	// V41 are the same client's figures over NFSv4.1 against the same
	// ganesha, V41Serve against `hushfs serve` (COMPOUNDs, counted by
	// their main operation as mountstats does); either RTT may be missing.
	V41      map[string]*LinuxPhase `json:"v41,omitempty"`
	V41Serve map[string]*LinuxPhase `json:"v41_hushfs_serve,omitempty"`
	V41Notes string                 `json:"v41_notes,omitempty"`
}

// LinuxPhase is one phase's figures at RTT 0 and 10 ms.
type LinuxPhase struct {
	RTT0   *LinuxFigure `json:"rtt0"`
	RTT10  *LinuxFigure `json:"rtt10"`
	Wall10 string       `json:"wall10,omitempty"`
}

// LinuxFigure is an RPC count.
type LinuxFigure struct {
	Total uint64 `json:"total"`
	// Max is the upper end when runs varied (Total is then the lower).
	Max uint64 `json:"max,omitempty"`
	// AtLeast: the phase was killed before it finished.
	AtLeast bool              `json:"at_least,omitempty"`
	Procs   map[string]uint64 `json:"procs,omitempty"`
	// Counted names the procedures Total covers when it is not every
	// call; hushfs's figure is compared over the same ones.
	Counted []string `json:"counted,omitempty"`
	Note    string   `json:"note,omitempty"`
}

func loadLinux(path string) (*LinuxData, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("Linux client data: %w", err)
	}
	var d LinuxData
	if err := json.Unmarshal(b, &d); err != nil {
		return nil, fmt.Errorf("Linux client data %s: %w", path, err)
	}
	for id, p := range d.Phases {
		if p == nil || p.RTT0 == nil || p.RTT10 == nil {
			return nil, fmt.Errorf("Linux client data %s: phase %q lacks rtt0 or rtt10", path, id)
		}
	}
	for id, p := range d.V41 {
		if p == nil || (p.RTT0 == nil && p.RTT10 == nil) {
			return nil, fmt.Errorf("Linux client data %s: v4.1 phase %q has no figure", path, id)
		}
	}
	for id, p := range d.V41Serve {
		if p == nil || (p.RTT0 == nil && p.RTT10 == nil) {
			return nil, fmt.Errorf("Linux client data %s: v4.1 phase %q against hushfs serve has no figure", path, id)
		}
	}
	return &d, nil
}

// figureVers is the Linux figure against ganesha for a phase over an NFS
// version ("" or "3": NFSv3).
func (d *LinuxData) figureVers(id string, rttMs float64, vers string) *LinuxFigure {
	if vers == "" || vers == "3" {
		return d.figure(id, rttMs)
	}
	if d == nil || vers != "4.1" {
		return nil
	}
	return pick(d.V41[id], rttMs)
}

// phaseFigure is the Linux figure to set beside a phase: the same server,
// NFS version and RTT, if Linux was measured so.
func (d *LinuxData) phaseFigure(p *Phase) *LinuxFigure {
	switch {
	case d == nil:
		return nil
	case p.Server == "ganesha":
		return d.figureVers(p.ID, p.RTTms, p.Vers)
	case p.Server == "hushfs" && p.Vers == "4.1":
		return pick(d.V41Serve[p.ID], p.RTTms)
	}
	return nil
}

// pick is a phase's figure at an RTT (0 or 10 ms), if there is one.
func pick(p *LinuxPhase, rttMs float64) *LinuxFigure {
	if p == nil {
		return nil
	}
	switch rttMs {
	case 0:
		return p.RTT0
	case 10:
		return p.RTT10
	}
	return nil
}

// figure returns the Linux figure for a phase at an RTT, if there is one
// (the data covers 0 and 10 ms).
func (d *LinuxData) figure(id string, rttMs float64) *LinuxFigure {
	if d == nil {
		return nil
	}
	return pick(d.Phases[id], rttMs)
}

// wall returns the Linux wall time at 10 ms for a phase, if known.
func (d *LinuxData) wall(id string, rttMs float64) string {
	if d == nil || rttMs != 10 || d.Phases[id] == nil {
		return ""
	}
	return d.Phases[id].Wall10
}
