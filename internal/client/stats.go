package client

import (
	"context"
	"maps"
	"sort"
	"strings"
	"sync"
	"time"

	"hushfs/internal/proto"
)

// OpStats are one procedure's counters, the fields of a mountstats per-op
// line. Times are cumulative.
type OpStats struct {
	Ops           uint64        `json:"ops"`
	Transmissions uint64        `json:"transmissions"`
	Timeouts      uint64        `json:"timeouts"`
	Errors        uint64        `json:"errors"`
	BytesSent     uint64        `json:"bytes_sent"`
	BytesReceived uint64        `json:"bytes_received"`
	Queue         time.Duration `json:"queue_ns"`
	RTT           time.Duration `json:"rtt_ns"`
	Execute       time.Duration `json:"execute_ns"`
}

func (s *OpStats) add(c *proto.CallStats) {
	s.Ops++
	s.Transmissions += uint64(c.Transmissions)
	s.Timeouts += uint64(c.Timeouts)
	if c.Err != nil {
		s.Errors++
	}
	s.BytesSent += uint64(c.BytesSent)
	s.BytesReceived += uint64(c.BytesReceived)
	s.Queue += c.Queue
	s.RTT += c.RTT
	s.Execute += c.Execute
}

// Stats counts RPCs per program and procedure since mount, and NFS calls
// per origin: the kernel operation (lookup, open, getattr, ...) that
// caused them.
type Stats struct {
	mu      sync.Mutex
	start   time.Time
	ops     map[string]*OpStats          // GUARDED_BY(mu); key: "GETATTR", "MOUNT:MNT", ...
	origins map[string]map[string]uint64 // GUARDED_BY(mu); origin → procedure → calls
	// compoundOps counts the operations inside the calls that carry
	// several (v4.1 COMPOUNDs), by operation name.
	compoundOps map[string]uint64 // GUARDED_BY(mu)
	resends     WriteResends      // GUARDED_BY(mu)
}

// WriteResends counts the data sent again because a COMMIT's write
// verifier differed from the one the data was acknowledged under (the
// server restarted and may have lost it).
type WriteResends struct {
	Commits uint64 `json:"commits"` // COMMITs that found a changed verifier
	Bytes   uint64 `json:"bytes"`   // bytes made dirty again by them
}

func newStats() *Stats {
	return &Stats{start: time.Now(), ops: map[string]*OpStats{}, origins: map[string]map[string]uint64{},
		compoundOps: map[string]uint64{}}
}

// OriginKey is the context key under which a caller names the operation an
// RPC is made for; calls without one count as "internal" (write-back, for
// one).
type OriginKey struct{}

func originOf(ctx context.Context) string {
	if s, ok := ctx.Value(OriginKey{}).(string); ok {
		return s
	}
	return "internal"
}

// countOrigin records one NFS call of the procedure name made for origin.
func (s *Stats) countOrigin(origin string, name string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	m := s.origins[origin]
	if m == nil {
		m = map[string]uint64{}
		s.origins[origin] = m
	}
	m[name]++
}

// countResend records one COMMIT that found bytes acknowledged under
// another write verifier.
func (s *Stats) countResend(bytes uint64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.resends.Commits++
	s.resends.Bytes += bytes
}

// observe is the protocol's per-call hook. Calls are counted under the
// names the protocol gives them (GETATTR, MOUNT:MNT, ...).
func (s *Stats) observe(c *proto.CallStats) {
	key := c.Name
	s.mu.Lock()
	defer s.mu.Unlock()
	o := s.ops[key]
	if o == nil {
		o = &OpStats{}
		s.ops[key] = o
	}
	o.add(c)
	for _, op := range c.Ops {
		s.compoundOps[op]++
	}
}

// Snapshot is a copy of the counters at one moment.
type Snapshot struct {
	// Version is the mount daemon's build (filled in by whoever serves the
	// snapshot; internal/version).
	Version string                       `json:"version,omitempty"`
	Since   time.Time                    `json:"since"`
	Ops     map[string]OpStats           `json:"ops"`     // NFS procedures by name; MOUNT:/PORTMAP: prefixed
	Origins map[string]map[string]uint64 `json:"origins"` // kernel operation → NFS procedure → calls
	// Operations counts the operations inside calls that carry several
	// (NFSv4.1 COMPOUNDs, SEQUENCE included) by name; Ops counts each
	// such call once, under the name of what it does. Absent for NFSv3.
	Operations map[string]uint64 `json:"operations,omitempty"`
	// Resends: data sent again after the write verifier changed.
	Resends WriteResends `json:"write_resends"`
	// FUSE counts the kernel's requests that reached the mount daemon, by
	// operation (filled in by the FUSE adapter, like Version).
	FUSE map[string]uint64 `json:"fuse_requests,omitempty"`
}

// Snapshot copies the counters.
func (s *Stats) Snapshot() Snapshot {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := Snapshot{Since: s.start, Ops: make(map[string]OpStats, len(s.ops)), Origins: map[string]map[string]uint64{},
		Resends: s.resends}
	for k, v := range s.ops {
		out.Ops[k] = *v
	}
	for o, m := range s.origins {
		out.Origins[o] = maps.Clone(m)
	}
	if len(s.compoundOps) > 0 {
		out.Operations = maps.Clone(s.compoundOps)
	}
	return out
}

// Reset zeroes the counters (between benchmark phases).
func (s *Stats) Reset() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.ops = map[string]*OpStats{}
	s.origins = map[string]map[string]uint64{}
	s.compoundOps = map[string]uint64{}
	s.resends = WriteResends{}
	s.start = time.Now()
}

// Count returns the number of calls of one NFS procedure (by RFC name).
func (s Snapshot) Count(name string) uint64 { return s.Ops[name].Ops }

// Total returns the number of NFS calls, all procedures together (MOUNT and
// PORTMAP excluded).
func (s Snapshot) Total() uint64 {
	var n uint64
	for k, v := range s.Ops {
		if isNFSKey(k) {
			n += v.Ops
		}
	}
	return n
}

func isNFSKey(k string) bool {
	return !strings.Contains(k, ":") && k != "OTHER"
}

// Names returns the procedure names present, sorted.
func (s Snapshot) Names() []string {
	names := make([]string, 0, len(s.Ops))
	for k := range s.Ops {
		names = append(names, k)
	}
	sort.Strings(names)
	return names
}
