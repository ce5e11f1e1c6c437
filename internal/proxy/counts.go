package proxy

import (
	"fmt"
	"maps"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"

	"hushfs/internal/nfs3"
	"hushfs/internal/nfs4"
	"hushfs/internal/rpc"
)

// ProcKey names an RPC procedure.
type ProcKey struct{ Prog, Vers, Proc uint32 }

// MarshalText renders the key as "prog/vers/proc", e.g. "100003/3/7", so
// that Counts.Calls is a JSON object that shell scripts can index.
func (k ProcKey) MarshalText() ([]byte, error) {
	return fmt.Appendf(nil, "%d/%d/%d", k.Prog, k.Vers, k.Proc), nil
}

// UnmarshalText parses the form written by MarshalText.
func (k *ProcKey) UnmarshalText(b []byte) error {
	parts := strings.Split(string(b), "/")
	if len(parts) != 3 {
		return fmt.Errorf("proxy: bad procedure key %q: want prog/vers/proc", b)
	}
	var v [3]uint32
	for i, s := range parts {
		n, err := strconv.ParseUint(s, 10, 32)
		if err != nil {
			return fmt.Errorf("proxy: bad procedure key %q: %w", b, err)
		}
		v[i] = uint32(n)
	}
	*k = ProcKey{v[0], v[1], v[2]}
	return nil
}

func (k ProcKey) String() string {
	b, _ := k.MarshalText()
	return string(b)
}

// Name names the procedure for people: "NFS3 GETATTR", "MOUNT3 MNT",
// "PORTMAP2 GETPORT", or "prog/vers/proc" for any other program.
func (k ProcKey) Name() string {
	var prog, proc string
	switch {
	case k.Prog == nfs3.Program && k.Vers == nfs3.Version:
		prog, proc = "NFS3", nfs3.ProcName(k.Proc)
	case k.Prog == nfs3.MountProgram && k.Vers == nfs3.MountVersion:
		prog, proc = "MOUNT3", nfs3.MountProcName(k.Proc)
	case k.Prog == nfs4.Program && k.Vers == nfs4.Version && k.Proc < uint32(len(nfs4Procs)):
		prog, proc = "NFS4", nfs4Procs[k.Proc]
	case k.Prog == rpc.PortmapProgram && k.Vers == rpc.PortmapVersion && k.Proc < uint32(len(portmapProcs)):
		prog, proc = "PORTMAP2", portmapProcs[k.Proc]
	default:
		return k.String()
	}
	if proc == "UNKNOWN" {
		return fmt.Sprintf("%s proc %d", prog, k.Proc)
	}
	return prog + " " + proc
}

// portmapProcs names the portmapper's procedures (RFC 1833 §3).
var portmapProcs = [...]string{"NULL", "SET", "UNSET", "GETPORT", "DUMP", "CALLIT"}

// nfs4Procs names NFSv4's two procedures (RFC 8881 §16).
var nfs4Procs = [...]string{"NULL", "COMPOUND"}

// NFS3 returns the key of NFSv3 procedure proc.
func NFS3(proc uint32) ProcKey { return ProcKey{nfs3.Program, nfs3.Version, proc} }

// Counts is a snapshot of what the proxy has seen since it started or was
// last reset. Call-side figures are taken as bytes arrive from the client,
// before the added delay; reply-side figures as bytes arrive from the
// target.
type Counts struct {
	// Calls counts RPC calls whose header (through the verifier) parsed,
	// by program, version and procedure.
	Calls map[ProcKey]uint64 `json:"calls"`
	// Replies counts records from the target whose msg_type is REPLY.
	Replies uint64 `json:"replies"`
	// WriteStable counts NFSv3 WRITE calls by their stable_how argument
	// (nfs3.Unstable, nfs3.DataSync, nfs3.FileSync, or whatever else a
	// client sent).
	// A WRITE whose arguments are cut short (or whose file handle is
	// longer than 64 bytes) is in Calls but not here.
	WriteStable map[uint32]uint64 `json:"write_stable"`
	// NFS4Ops counts the operations inside NFSv4 COMPOUND calls (each
	// COMPOUND itself is one call in Calls, "100003/4/1"), by the
	// operation's name: "SEQUENCE", "OPEN", ...
	NFS4Ops map[string]uint64 `json:"nfs4_ops"`
	// NFS4Incomplete counts COMPOUNDs whose operation list could not be
	// read to its end (malformed, or arguments over maxCompoundArgs): only
	// the operations before the failure are in NFS4Ops.
	NFS4Incomplete uint64 `json:"nfs4_incomplete,omitempty"`
	// Commits counts NFSv3 COMMIT calls (equal to Calls[NFS3(21)]; kept
	// separately for scripts).
	Commits uint64 `json:"commits"`
	// BackCalls counts calls from the target to a client on the client's
	// connection (NFSv4.1 callbacks: CB_NULL, CB_COMPOUND), BackReplies
	// the records from clients that are replies (to those calls).
	BackCalls   uint64 `json:"back_calls,omitempty"`
	BackReplies uint64 `json:"back_replies,omitempty"`
	// UnparsedCalls counts records from clients that are neither RPC calls
	// nor replies (wrong msg_type or RPC version, oversized credential, or
	// too short to hold a call header). They are forwarded unchanged all the same.
	UnparsedCalls uint64 `json:"unparsed_calls"`
	// UnparsedReplies counts records from the target that are not replies.
	UnparsedReplies uint64 `json:"unparsed_replies"`
	// BytesIn counts bytes read from clients (for the target), BytesOut
	// bytes read from the target (for clients). Like the record counts
	// they are taken on arrival, before the delay.
	BytesIn  uint64 `json:"bytes_in"`
	BytesOut uint64 `json:"bytes_out"`
	// Conns counts accepted client connections; DialErrors those of them
	// that were closed because the target could not be reached.
	Conns      uint64 `json:"conns"`
	DialErrors uint64 `json:"dial_errors"`
	// Faults counts the faults injected (see Faults).
	Faults FaultCounts `json:"faults"`
}

// NFS3 returns the number of NFSv3 calls of procedure proc.
func (c Counts) NFS3(proc uint32) uint64 { return c.Calls[NFS3(proc)] }

// counters is the proxy's live state behind Counts. Record events take the
// mutex (at most a few per record); byte counts, updated per read, are
// atomic.
type counters struct {
	mu              sync.Mutex
	calls           map[ProcKey]uint64
	writeStable     map[uint32]uint64
	nfs4Ops         map[nfs4.Opnum]uint64
	nfs4Incomplete  uint64
	replies         uint64
	backCalls       uint64
	backReplies     uint64
	unparsedCalls   uint64
	unparsedReplies uint64
	conns           uint64
	dialErrors      uint64
	faults          FaultCounts

	bytesIn, bytesOut atomic.Uint64
}

func newCounters() *counters {
	return &counters{calls: map[ProcKey]uint64{}, writeStable: map[uint32]uint64{}, nfs4Ops: map[nfs4.Opnum]uint64{}}
}

func (c *counters) compound(ops []nfs4.Argop, complete bool) {
	c.mu.Lock()
	for i := range ops {
		c.nfs4Ops[ops[i].Op]++
	}
	if !complete {
		c.nfs4Incomplete++
	}
	c.mu.Unlock()
}

func (c *counters) call(k ProcKey) {
	c.mu.Lock()
	c.calls[k]++
	c.mu.Unlock()
}

func (c *counters) stable(how uint32) {
	c.mu.Lock()
	c.writeStable[how]++
	c.mu.Unlock()
}

func (c *counters) reply() {
	c.mu.Lock()
	c.replies++
	c.mu.Unlock()
}

func (c *counters) back(callSide bool) {
	c.mu.Lock()
	if callSide {
		c.backReplies++
	} else {
		c.backCalls++
	}
	c.mu.Unlock()
}

func (c *counters) unparsed(callSide bool) {
	c.mu.Lock()
	if callSide {
		c.unparsedCalls++
	} else {
		c.unparsedReplies++
	}
	c.mu.Unlock()
}

func (c *counters) conn() {
	c.mu.Lock()
	c.conns++
	c.mu.Unlock()
}

func (c *counters) dialError() {
	c.mu.Lock()
	c.dialErrors++
	c.mu.Unlock()
}

// fault updates the fault counts.
func (c *counters) fault(f func(*FaultCounts)) {
	c.mu.Lock()
	f(&c.faults)
	c.mu.Unlock()
}

// snapshot copies the counters, zeroing them when reset is set; with reset
// no event is lost between the copy and the zeroing.
func (c *counters) snapshot(reset bool) Counts {
	c.mu.Lock()
	defer c.mu.Unlock()
	s := Counts{
		Calls:           maps.Clone(c.calls),
		Replies:         c.replies,
		BackCalls:       c.backCalls,
		BackReplies:     c.backReplies,
		WriteStable:     maps.Clone(c.writeStable),
		NFS4Ops:         make(map[string]uint64, len(c.nfs4Ops)),
		NFS4Incomplete:  c.nfs4Incomplete,
		Commits:         c.calls[NFS3(nfs3.ProcCommit)],
		UnparsedCalls:   c.unparsedCalls,
		UnparsedReplies: c.unparsedReplies,
		Conns:           c.conns,
		DialErrors:      c.dialErrors,
		Faults:          c.faults,
	}
	for op, n := range c.nfs4Ops {
		s.NFS4Ops[op.String()] += n
	}
	if reset {
		s.BytesIn = c.bytesIn.Swap(0)
		s.BytesOut = c.bytesOut.Swap(0)
		c.calls = map[ProcKey]uint64{}
		c.writeStable = map[uint32]uint64{}
		c.nfs4Ops = map[nfs4.Opnum]uint64{}
		c.nfs4Incomplete = 0
		c.backCalls, c.backReplies = 0, 0
		c.replies, c.unparsedCalls, c.unparsedReplies, c.conns, c.dialErrors = 0, 0, 0, 0, 0
		c.faults = FaultCounts{}
	} else {
		s.BytesIn = c.bytesIn.Load()
		s.BytesOut = c.bytesOut.Load()
	}
	return s
}
