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
	return &d, nil
}

// figure returns the Linux figure for a phase at an RTT, if there is one
// (the data covers 0 and 10 ms).
func (d *LinuxData) figure(id string, rttMs float64) *LinuxFigure {
	if d == nil {
		return nil
	}
	p := d.Phases[id]
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

// wall returns the Linux wall time at 10 ms for a phase, if known.
func (d *LinuxData) wall(id string, rttMs float64) string {
	if d == nil || rttMs != 10 || d.Phases[id] == nil {
		return ""
	}
	return d.Phases[id].Wall10
}
