package proxy

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"time"

	"hushfs/internal/nfs3"
)

// Faults says which faults the proxy injects. The zero value injects none.
// Faults act on whole records (RFC 5531 §11), so the byte streams stay well
// framed whatever is dropped; every decision is made at the start of a
// record, from its header, and a record already under way when the faults
// change is finished the way it began.
//
// "Calls" below are records from a client whose header parses as an RPC
// call; the every-N counters count calls forwarded (not blackholed) since
// the faults were set, over all connections. Probabilities are per call and
// drawn from one generator seeded with Seed, so a run with one connection
// makes the same decisions each time.
type Faults struct {
	// Seed seeds the generator behind the probabilities and the jitter.
	Seed uint64 `json:"seed,omitempty"`

	// CloseEvery closes a connection, on both sides, right after every
	// CloseEvery-th call was forwarded on it: the server gets the call but
	// its reply (and any other reply still on the way) is lost, as when a
	// connection breaks. CloseProb does the same at random, per call.
	CloseEvery uint64  `json:"close_every,omitempty"`
	CloseProb  float64 `json:"close_prob,omitempty"`

	// BlackholeFor, if positive, is the length of a blackhole: the proxy
	// keeps accepting connections and reading from both sides but forwards
	// nothing, dropping every record that starts in it (calls and replies
	// alike), then resumes. The first blackhole starts after
	// BlackholeAfter calls, or, if that is zero, BlackholeAt after the
	// faults were set; later ones (BlackholeCount) the same distance after
	// the end of the previous one.
	BlackholeFor   time.Duration `json:"blackhole_for,omitempty"`
	BlackholeAfter uint64        `json:"blackhole_after,omitempty"`
	BlackholeAt    time.Duration `json:"blackhole_at,omitempty"`
	// BlackholeCount is the number of blackholes: 0 means one, a negative
	// number no limit.
	BlackholeCount int `json:"blackhole_count,omitempty"`

	// Jitter, if positive, delays each reply by a further uniform random
	// time in [0, Jitter], on top of RTT/2. A stream is never reordered,
	// so a reply also waits for the ones before it.
	Jitter time.Duration `json:"jitter,omitempty"`

	// DupEvery and DupProb select calls to duplicate (every DupEvery-th
	// call, or at random); DupProcs, if not empty, restricts them to those
	// procedures. A duplicated call reaches the server twice, as on a
	// retransmission after a lost reply: the proxy forwards the call,
	// drops the server's first reply, sends the very same record (same
	// XID) again and forwards the reply to that. With DupImmediate the
	// copy follows the call at once instead, as a retransmission made
	// while the server is still working would, and only the first reply
	// is forwarded. Calls over MaxDupRecord bytes are not duplicated.
	// DupDelay, without DupImmediate, is how long after the first reply
	// the copy is sent: a client retransmits no sooner than its timeout,
	// and a server may not recognise a duplicate of a call whose reply it
	// is still sending (it drops it as in progress).
	DupEvery     uint64        `json:"dup_every,omitempty"`
	DupProb      float64       `json:"dup_prob,omitempty"`
	DupProcs     []ProcKey     `json:"dup_procs,omitempty"`
	DupImmediate bool          `json:"dup_immediate,omitempty"`
	DupDelay     time.Duration `json:"dup_delay,omitempty"`

	// TruncateEvery and TruncateProb select calls to cut short: the
	// server gets the record mark and part of the first fragment, then
	// the connection is closed on both sides.
	TruncateEvery uint64  `json:"truncate_every,omitempty"`
	TruncateProb  float64 `json:"truncate_prob,omitempty"`

	// SlowRead, if positive, makes the proxy read from the server at most
	// SlowRead bytes at a time, pausing SlowReadPause after each read, so
	// that the server's writes back up. SlowReadBuffer, if positive, sets
	// the receive buffer (SO_RCVBUF) of the connections to the server; it
	// stays set on connections made while it was on.
	SlowRead       int           `json:"slow_read,omitempty"`
	SlowReadPause  time.Duration `json:"slow_read_pause,omitempty"`
	SlowReadBuffer int           `json:"slow_read_buffer,omitempty"`
}

// Bounds of the fault modes, so that a fault never holds unbounded memory
// or time.
const (
	// MaxDupRecord is the largest call, in bytes on the wire, that is
	// copied for duplication.
	MaxDupRecord = 4 << 20
	// maxDupPending bounds the duplicated calls per connection whose
	// replies are still awaited; the oldest is forgotten beyond it.
	maxDupPending = 4096
	// maxDupBytes bounds the bytes of calls kept per connection for
	// resending; calls beyond it are not duplicated.
	maxDupBytes = 64 << 20
	// maxFaultPause bounds Jitter, SlowReadPause and a blackhole.
	maxFaultPause = time.Hour
)

// NonIdempotent lists the NFSv3 procedures whose repetition changes the
// outcome without a duplicate request cache (an object created, removed or
// renamed twice, attributes set under a guard): the ones to duplicate to
// test one.
var NonIdempotent = []ProcKey{
	NFS3(nfs3.ProcSetattr), NFS3(nfs3.ProcCreate), NFS3(nfs3.ProcMkdir), NFS3(nfs3.ProcSymlink),
	NFS3(nfs3.ProcMknod), NFS3(nfs3.ProcRemove), NFS3(nfs3.ProcRmdir), NFS3(nfs3.ProcRename),
	NFS3(nfs3.ProcLink),
}

// ParseProcs parses a comma-separated list of procedures: NFSv3 names
// (CREATE, remove, ...), prog/vers/proc triples, or "nonidempotent" for
// NonIdempotent.
func ParseProcs(s string) ([]ProcKey, error) {
	var out []ProcKey
	for _, f := range strings.Split(s, ",") {
		f = strings.TrimSpace(f)
		switch {
		case f == "":
			continue
		case strings.EqualFold(f, "nonidempotent"):
			out = append(out, NonIdempotent...)
			continue
		case strings.Contains(f, "/"):
			var k ProcKey
			if err := k.UnmarshalText([]byte(f)); err != nil {
				return nil, err
			}
			out = append(out, k)
			continue
		}
		found := false
		for p := uint32(0); p <= nfs3.ProcCommit; p++ {
			if strings.EqualFold(nfs3.ProcName(p), f) {
				out = append(out, NFS3(p))
				found = true
				break
			}
		}
		if !found {
			return nil, fmt.Errorf("proxy: unknown procedure %q (want an NFSv3 name, prog/vers/proc or nonidempotent)", f)
		}
	}
	return out, nil
}

// Active reports whether f injects any fault.
func (f Faults) Active() bool {
	return f.CloseEvery > 0 || f.CloseProb > 0 || f.BlackholeFor > 0 || f.Jitter > 0 ||
		f.DupEvery > 0 || f.DupProb > 0 || f.TruncateEvery > 0 || f.TruncateProb > 0 ||
		f.SlowRead > 0 || f.SlowReadBuffer > 0
}

// Validate checks that the values are in range.
func (f Faults) Validate() error {
	var errs []error
	for _, p := range []struct {
		name string
		v    float64
	}{{"close probability", f.CloseProb}, {"duplicate probability", f.DupProb}, {"truncate probability", f.TruncateProb}} {
		if !(p.v >= 0 && p.v <= 1) {
			errs = append(errs, fmt.Errorf("%s %v not in [0, 1]", p.name, p.v))
		}
	}
	for _, d := range []struct {
		name string
		v    time.Duration
	}{{"blackhole length", f.BlackholeFor}, {"blackhole start", f.BlackholeAt}, {"jitter", f.Jitter},
		{"duplicate delay", f.DupDelay}, {"slow read pause", f.SlowReadPause}} {
		if d.v < 0 || d.v > maxFaultPause {
			errs = append(errs, fmt.Errorf("%s %v not in [0, %v]", d.name, d.v, maxFaultPause))
		}
	}
	if f.SlowRead < 0 || f.SlowReadBuffer < 0 {
		errs = append(errs, fmt.Errorf("negative slow read size %d or buffer %d", f.SlowRead, f.SlowReadBuffer))
	}
	if (f.BlackholeAfter > 0 || f.BlackholeAt > 0 || f.BlackholeCount != 0) && f.BlackholeFor == 0 {
		errs = append(errs, errors.New("blackhole start or count given without a length"))
	}
	if f.BlackholeFor > 0 && f.BlackholeFor < time.Millisecond {
		errs = append(errs, fmt.Errorf("blackhole length %v under 1ms", f.BlackholeFor))
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("proxy: faults: %w", err)
	}
	return nil
}

// FaultCounts counts the faults the proxy injected: each is counted when it
// takes effect on the wire.
type FaultCounts struct {
	// Closes counts connections closed after a call (CloseEvery,
	// CloseProb); Truncated those closed after part of a call.
	Closes    uint64 `json:"closes"`
	Truncated uint64 `json:"truncated"`
	// Blackholes counts blackholes that dropped something;
	// BlackholedCalls and BlackholedReplies the records they dropped.
	Blackholes        uint64 `json:"blackholes"`
	BlackholedCalls   uint64 `json:"blackholed_calls"`
	BlackholedReplies uint64 `json:"blackholed_replies"`
	// Duplicated counts call copies sent to the server; DupRepliesDropped
	// the replies the proxy kept from the client because of them;
	// DupSkipped calls selected but not duplicated: too big, too many
	// bytes held for resending on their connection, or a client's own
	// retransmission of a call whose duplicate still awaits replies.
	Duplicated        uint64 `json:"duplicated"`
	DupRepliesDropped uint64 `json:"dup_replies_dropped"`
	DupSkipped        uint64 `json:"dup_skipped"`
	// JitteredReplies counts replies given extra delay, Jitter their
	// extra delays summed.
	JitteredReplies uint64        `json:"jittered_replies"`
	Jitter          time.Duration `json:"jitter_ns"`
	// SlowReads counts reads from a server made small and followed by a
	// pause.
	SlowReads uint64 `json:"slow_reads"`
}

// recHdr is what a record's first body bytes say.
type recHdr struct {
	xid     uint32
	isCall  bool // msg_type CALL, RPC version 2, through the procedure
	isReply bool // msg_type REPLY
	key     ProcKey
}

// verdict is what happens to one record.
type verdict struct {
	drop      bool          // forward none of it
	extra     time.Duration // reply jitter
	close     bool          // close the connection once it is forwarded
	cut       int           // > 0: forward this many bytes of it, then close
	dup       bool          // copy it for duplication
	immediate bool          // with dup: the copy goes right behind it
	dupDelay  time.Duration // with dup, not immediate: the copy's wait after the first reply
	injectXID bool          // reply side: a duplicate's first reply was dropped
}

// faultState is a Faults in force with its decision state. cfg is fixed;
// the rest is guarded by mu.
type faultState struct {
	cfg   Faults
	procs map[ProcKey]bool // DupProcs as a set; nil: any
	armed time.Time

	mu      sync.Mutex
	rng     *rand.Rand
	calls   uint64 // calls forwarded since armed
	bhLeft  int    // blackholes still to come; < 0: no limit
	bhCalls uint64 // calls after which the next call-triggered blackhole starts
	// The current or next scheduled blackhole; zero end: none scheduled.
	bhStart, bhEnd time.Time
	bhHit          bool      // the current window dropped something (counted)
	manualEnd      time.Time // end of a blackhole started by Proxy.Blackhole
	manualHit      bool
}

func newFaultState(f Faults, now time.Time) *faultState {
	s := &faultState{cfg: f, armed: now, rng: rand.New(rand.NewPCG(f.Seed, f.Seed^0x9e3779b97f4a7c15))}
	if len(f.DupProcs) > 0 {
		s.procs = map[ProcKey]bool{}
		for _, k := range f.DupProcs {
			s.procs[k] = true
		}
	}
	if f.BlackholeFor > 0 {
		s.bhLeft = f.BlackholeCount
		if s.bhLeft == 0 {
			s.bhLeft = 1
		}
		s.schedule(now)
	}
	return s
}

// schedule arms the next blackhole, from the arming or from the end of the
// previous one (from).
func (s *faultState) schedule(from time.Time) {
	s.bhStart, s.bhEnd, s.bhHit = time.Time{}, time.Time{}, false
	if s.bhLeft == 0 {
		return
	}
	if s.bhLeft > 0 {
		s.bhLeft--
	}
	if s.cfg.BlackholeAfter > 0 {
		s.bhCalls = s.calls + s.cfg.BlackholeAfter
		return
	}
	s.bhStart = from.Add(s.cfg.BlackholeAt)
	s.bhEnd = s.bhStart.Add(s.cfg.BlackholeFor)
}

// inBlackhole reports whether now falls in a blackhole, moving the schedule
// on past windows that ended; hit says the caller drops a record because of
// it, and returns whether that is the window's first drop. Called with mu
// held.
func (s *faultState) inBlackhole(now time.Time) (in, first bool) {
	if now.Before(s.manualEnd) {
		first = !s.manualHit
		s.manualHit = true
		return true, first
	}
	for !s.bhEnd.IsZero() && !now.Before(s.bhEnd) {
		s.schedule(s.bhEnd)
	}
	if !s.bhEnd.IsZero() && !now.Before(s.bhStart) {
		first = !s.bhHit
		s.bhHit = true
		return true, first
	}
	return false, false
}

// every reports whether the n-th call is selected by an every-N setting.
func every(n, period uint64) bool { return period > 0 && n%period == 0 }

// draw reports true with probability p; it consumes a random number only
// when p is positive, so settings left at zero do not change the sequence.
func (s *faultState) draw(p float64) bool { return p > 0 && s.rng.Float64() < p }

// onCall decides the fate of a call (h.isCall) or of another record from a
// client; c counts what it decides to drop.
func (s *faultState) onCall(now time.Time, h recHdr, firstFrag int, c *counters) verdict {
	s.mu.Lock()
	defer s.mu.Unlock()
	// A call-triggered blackhole starts with the call after the count.
	if s.bhEnd.IsZero() && s.bhCalls > 0 && s.calls >= s.bhCalls {
		s.bhStart, s.bhEnd, s.bhHit = now, now.Add(s.cfg.BlackholeFor), false
		s.bhCalls = 0
	}
	if in, first := s.inBlackhole(now); in {
		c.fault(func(f *FaultCounts) {
			f.BlackholedCalls++
			if first {
				f.Blackholes++
			}
		})
		return verdict{drop: true}
	}
	if !h.isCall {
		return verdict{}
	}
	s.calls++
	n := s.calls
	if every(n, s.cfg.TruncateEvery) || s.draw(s.cfg.TruncateProb) {
		// The record mark and half the first fragment: the server sees a
		// record begin and never end.
		return verdict{cut: 4 + firstFrag/2}
	}
	if every(n, s.cfg.CloseEvery) || s.draw(s.cfg.CloseProb) {
		return verdict{close: true}
	}
	if (s.procs == nil || s.procs[h.key]) && (every(n, s.cfg.DupEvery) || s.draw(s.cfg.DupProb)) {
		return verdict{dup: true, immediate: s.cfg.DupImmediate, dupDelay: s.cfg.DupDelay}
	}
	return verdict{}
}

// onReply decides the fate of a record from the server.
func (s *faultState) onReply(now time.Time, c *counters) verdict {
	s.mu.Lock()
	defer s.mu.Unlock()
	if in, first := s.inBlackhole(now); in {
		c.fault(func(f *FaultCounts) {
			f.BlackholedReplies++
			if first {
				f.Blackholes++
			}
		})
		return verdict{drop: true}
	}
	if s.cfg.Jitter > 0 {
		return verdict{extra: time.Duration(s.rng.Int64N(int64(s.cfg.Jitter) + 1))}
	}
	return verdict{}
}

// startBlackhole begins a blackhole of length d at now, besides any
// configured ones.
func (s *faultState) startBlackhole(now time.Time, d time.Duration) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if end := now.Add(d); end.After(s.manualEnd) {
		if !now.Before(s.manualEnd) {
			s.manualHit = false // a new blackhole, not an extension
		}
		s.manualEnd = end
	}
}

// blackholeUntil returns the end of the blackhole in force at now, or the
// zero time.
func (s *faultState) blackholeUntil(now time.Time) time.Time {
	s.mu.Lock()
	defer s.mu.Unlock()
	end := time.Time{}
	if now.Before(s.manualEnd) {
		end = s.manualEnd
	}
	if !s.bhEnd.IsZero() && !now.Before(s.bhStart) && now.Before(s.bhEnd) && s.bhEnd.After(end) {
		end = s.bhEnd
	}
	return end
}

// dupEntry is a duplicated call whose replies are awaited on a connection.
type dupEntry struct {
	rec       []byte        // the call record as sent, marks included; nil once resent
	immediate bool          // the copy went right behind the call
	delay     time.Duration // the copy's wait after the first reply
	replies   int           // replies seen with this XID
}

// dupTable holds a connection's duplicated calls by XID.
type dupTable struct {
	mu    sync.Mutex
	m     map[uint32]*dupEntry
	order []uint32 // insertion order, to forget the oldest
	bytes int      // of the records held for resending
}

// add records a duplicated call; it reports false (and records nothing) if
// the XID is already awaited, as when the client itself retransmits, or
// the records held for resending would exceed their bound.
func (t *dupTable) add(xid uint32, e *dupEntry) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.m == nil {
		t.m = map[uint32]*dupEntry{}
	}
	if t.m[xid] != nil || t.bytes+len(e.rec) > maxDupBytes {
		return false
	}
	for len(t.m) >= maxDupPending && len(t.order) > 0 {
		if old := t.m[t.order[0]]; old != nil {
			t.bytes -= len(old.rec)
			delete(t.m, t.order[0])
		}
		t.order = t.order[1:]
	}
	t.bytes += len(e.rec)
	t.m[xid] = e
	t.order = append(t.order, xid)
	if len(t.order) > 2*maxDupPending { // entries ended out of order
		t.order = slices.DeleteFunc(t.order, func(x uint32) bool { return t.m[x] == nil })
	}
	return true
}

// pending reports whether any duplicated call awaits replies.
func (t *dupTable) pending() bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	return len(t.m) > 0
}

// reply decides on a reply with this XID: whether to drop it, and the call
// to send again, if any.
//
// A call to be resent after its reply: the first reply is dropped and the
// call sent again; the second reply is forwarded. An immediate duplicate:
// the first reply is forwarded and the second, if the server sends one,
// dropped.
func (t *dupTable) reply(xid uint32) (drop bool, resend []byte, delay time.Duration) {
	t.mu.Lock()
	defer t.mu.Unlock()
	e := t.m[xid]
	if e == nil {
		return false, nil, 0
	}
	e.replies++
	switch {
	case !e.immediate && e.replies == 1:
		rec := e.rec
		e.rec = nil
		t.bytes -= len(rec)
		return true, rec, e.delay
	case e.immediate && e.replies == 1:
		return false, nil, 0
	}
	delete(t.m, xid)
	return e.immediate, nil, 0
}
