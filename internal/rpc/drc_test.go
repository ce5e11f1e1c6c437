package rpc

import (
	"bytes"
	"context"
	"errors"
	"net"
	"net/netip"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"hushfs/internal/xdr"
)

// Procedures of the counting handler. procCount answers with the number of
// executions so far, so that running a call twice shows in its reply.
const (
	procCount      = 20 // cached: args ignored, reply = execution number
	procCountBlock = 21 // cached: waits on the gate first
	procCountDrop  = 22 // cached: the first execution sends no reply
	procCountIdem  = 23 // not cached, otherwise like procCount
	procCountSlow  = 24 // cached: waits on the gate, even when its connection is gone
)

type countingHandler struct {
	runs    atomic.Int32
	gate    chan struct{}
	entered chan struct{}
	dropped atomic.Bool
	// dropNext makes the next procCountBlock call that passes the gate
	// send no reply.
	dropNext atomic.Bool
}

func newCountingHandler() *countingHandler {
	return &countingHandler{gate: make(chan struct{}), entered: make(chan struct{}, 16)}
}

func (h *countingHandler) ServeRPC(ctx context.Context, call *Call, reply []byte) ([]byte, error) {
	switch call.Proc {
	case procNull:
		return reply, nil
	case procCountBlock:
		h.entered <- struct{}{}
		select {
		case <-h.gate:
			if h.dropNext.Swap(false) {
				return nil, ErrDrop
			}
		case <-ctx.Done():
			return nil, ErrDrop
		}
	case procCountSlow:
		h.entered <- struct{}{}
		<-h.gate
	case procCountDrop:
		n := h.runs.Add(1)
		if !h.dropped.Swap(true) {
			return nil, ErrDrop
		}
		return xdr.AppendUint32(reply, uint32(n)), nil
	case procCount, procCountIdem:
	default:
		return nil, ErrProcUnavail
	}
	return xdr.AppendUint32(reply, uint32(h.runs.Add(1))), nil
}

func (h *countingHandler) NonIdempotent(proc uint32) bool {
	return proc >= procCount && proc <= procCountSlow && proc != procCountIdem
}

// fakeClock is an injected clock that moves only when told.
type fakeClock struct {
	mu sync.Mutex
	t  time.Time
}

func newFakeClock() *fakeClock { return &fakeClock{t: time.Unix(1_000_000, 0)} }

func (c *fakeClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

func (c *fakeClock) advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.t = c.t.Add(d)
}

// record frames a call message as one record, as it goes on the wire.
func record(m callMsg) []byte {
	b, st := BeginRecord(nil)
	b = append(b, m.bytes()...)
	FinishRecord(b, st)
	return b
}

// recvRecord reads one reply record as sent, without parsing it.
func (r *rawConn) recvRecord() []byte {
	r.t.Helper()
	r.nc.SetReadDeadline(time.Now().Add(5 * time.Second))
	rec, err := ReadRecord(r.nc, nil, DefaultMaxRecord)
	if err != nil {
		r.t.Fatalf("reading reply: %v", err)
	}
	return rec
}

// expectSilence asserts that nothing arrives for a while.
func (r *rawConn) expectSilence(d time.Duration) {
	r.t.Helper()
	r.nc.SetReadDeadline(time.Now().Add(d))
	var b [1]byte
	n, err := r.nc.Read(b[:])
	var ne net.Error
	if n > 0 || !errors.As(err, &ne) || !ne.Timeout() {
		r.t.Fatalf("expected no reply, got %d bytes, %v", n, err)
	}
}

func resultU32(t testing.TB, rec []byte) uint32 {
	t.Helper()
	rep, err := parseReply(rec)
	if err != nil || rep.acceptStat != Success || len(rep.results) != 4 {
		t.Fatalf("reply %x: %+v %v", rec, rep, err)
	}
	return xdr.NewDecoder(rep.results).Uint32()
}

// A retransmission from the same address on a new connection gets the
// original reply, byte for byte, without the handler running again.
func TestDRCReplayOnNewConnection(t *testing.T) {
	h := newCountingHandler()
	s, ln := startServer(t, ServerOptions{}, h)
	m := newCall(0xabc, procCount, []byte("args"))
	m.cred = SysCred(1000, 100, []uint32{4, 5}, "client")
	req := record(m)

	a := dialRaw(t, ln.Addr())
	a.write(req)
	first := a.recvRecord()
	if resultU32(t, first) != 1 {
		t.Fatal("first execution not numbered 1")
	}
	a.nc.Close()

	b := dialRaw(t, ln.Addr())
	if b.nc.LocalAddr().String() == a.nc.LocalAddr().String() {
		t.Fatal("the second connection reuses the first one's port")
	}
	b.write(req)
	again := b.recvRecord()
	// recvRecord strips the record mark; the mark is a function of the
	// length, equal too.
	if !bytes.Equal(first, again) {
		t.Fatalf("retransmission answered %x, original %x", again, first)
	}
	if n := h.runs.Load(); n != 1 {
		t.Fatalf("handler ran %d times", n)
	}
	// And again on the same connection.
	b.write(req)
	if got := b.recvRecord(); !bytes.Equal(first, got) {
		t.Fatalf("second retransmission answered %x", got)
	}
	st := s.Stats()
	if st.DRCHits != 2 || st.DRCEntries != 1 || h.runs.Load() != 1 {
		t.Fatalf("stats %+v, runs %d; want 2 hits, 1 entry, 1 run", st, h.runs.Load())
	}
}

// A retransmission arriving while the original runs is not executed. On
// the original's connection it gets nothing of its own (the original's
// reply answers it); on another connection it gets a copy of the original's
// reply when that is ready.
func TestDRCInProgressAnsweredOnce(t *testing.T) {
	h := newCountingHandler()
	s, ln := startServer(t, ServerOptions{}, h)
	req := record(newCall(77, procCountBlock, nil))
	a := dialRaw(t, ln.Addr())
	a.write(req)
	<-h.entered
	a.write(req)
	b := dialRaw(t, ln.Addr())
	b.write(req)
	b.write(req) // twice on b: still one copy
	// b is still served meanwhile.
	b.send(newCall(78, procNull, nil).bytes())
	if got := b.recv(); got.xid != 78 {
		t.Fatalf("b's first reply has xid %d, want 78 (the NULL)", got.xid)
	}
	waitFor(t, "the duplicates to be held", func() bool { return s.Stats().DRCDrops == 3 })
	close(h.gate)
	ra, rb := a.recvRecord(), b.recvRecord()
	if !bytes.Equal(ra, rb) || resultU32(t, ra) != 1 {
		t.Fatalf("original %x, copy %x", ra, rb)
	}
	a.expectSilence(200 * time.Millisecond)
	b.expectSilence(10 * time.Millisecond)
	if n := h.runs.Load(); n != 1 {
		t.Fatalf("handler ran %d times", n)
	}
	select {
	case <-h.entered:
		t.Fatal("a duplicate reached the handler")
	default:
	}
	// Once done, a retransmission is answered from the cache.
	b.write(req)
	if got := b.recv(); got.xid != 77 || h.runs.Load() != 1 {
		t.Fatalf("after completion: xid %d, runs %d", got.xid, h.runs.Load())
	}
}

// A client that lost its connection while a call ran resends it on a new
// one: the reply, which cannot go to the lost connection, reaches the new
// one as soon as the call completes, without waiting for another
// retransmission.
func TestDRCReplyFollowsReconnection(t *testing.T) {
	h := newCountingHandler()
	_, ln := startServer(t, ServerOptions{}, h)
	req := record(newCall(91, procCountSlow, nil))
	a := dialRaw(t, ln.Addr())
	a.write(req)
	<-h.entered
	a.nc.Close()
	b := dialRaw(t, ln.Addr())
	b.write(req)
	b.expectSilence(50 * time.Millisecond)
	close(h.gate)
	if got := resultU32(t, b.recvRecord()); got != 1 {
		t.Fatalf("reply on the new connection numbered %d", got)
	}
	if n := h.runs.Load(); n != 1 {
		t.Fatalf("handler ran %d times", n)
	}
	// The connection keeps working and its slot was given back.
	b.send(newCall(92, procNull, nil).bytes())
	if got := b.recv(); got.xid != 92 {
		t.Fatalf("xid %d", got.xid)
	}
}

// A call dropped by its handler leaves its waiters free to retransmit: the
// retransmission runs.
func TestDRCWaiterOfDroppedCall(t *testing.T) {
	h := newCountingHandler()
	s, ln := startServer(t, ServerOptions{MaxInFlightPerConn: 2}, h)
	req := record(newCall(93, procCountBlock, nil))
	a := dialRaw(t, ln.Addr())
	a.write(req)
	<-h.entered
	b := dialRaw(t, ln.Addr())
	b.write(req)
	waitFor(t, "the duplicate to be held", func() bool { return s.Stats().DRCDrops == 1 })
	h.dropNext.Store(true)
	h.gate <- struct{}{}
	b.expectSilence(100 * time.Millisecond)
	b.write(req)
	<-h.entered
	h.gate <- struct{}{}
	if got := resultU32(t, b.recvRecord()); got != 1 {
		t.Fatalf("retransmission's reply numbered %d", got)
	}
	// Both of b's slots are free again.
	for x := uint32(94); x < 97; x++ {
		b.send(newCall(x, procNull, nil).bytes())
		if got := b.recv(); got.xid != x {
			t.Fatalf("xid %d, want %d", got.xid, x)
		}
	}
}

// The cache answers only the very same call: another XID, other arguments
// or another caller under a reused XID, and procedures not declared
// non-idempotent all run.
func TestDRCDistinguishesCalls(t *testing.T) {
	h := newCountingHandler()
	s, ln := startServer(t, ServerOptions{}, h)
	rc := dialRaw(t, ln.Addr())
	run := func(m callMsg) uint32 {
		t.Helper()
		rc.write(record(m))
		return resultU32(t, rc.recvRecord())
	}
	base := newCall(5, procCount, []byte("one"))
	base.cred = SysCred(1000, 100, nil, "client")
	want := uint32(1)
	check := func(what string, got uint32) {
		t.Helper()
		if got != want {
			t.Fatalf("%s: execution %d, want %d", what, got, want)
		}
		want++
	}
	check("original", run(base))
	if run(base) != 1 {
		t.Fatal("identical retransmission executed")
	}
	m := base
	m.args = []byte("two")
	check("same xid, other args", run(m))
	long := bytes.Repeat([]byte("d"), 4*argsPrefix)
	m = base
	m.xid = 7
	m.args = long
	check("long args", run(m))
	m.args = bytes.Clone(long)
	m.args[3*argsPrefix] = 'e'
	check("same xid, args differing beyond the hashed prefix", run(m))
	m = base
	m.cred = SysCred(1001, 100, nil, "client")
	check("same xid, other uid", run(m))
	m = base
	m.cred = NoAuth
	check("same xid, AUTH_NONE", run(m))
	m = base
	m.xid = 6
	check("other xid", run(m))
	m = base
	m.vers = 5
	check("other version", run(m))
	idem := newCall(9, procCountIdem, nil)
	check("idempotent", run(idem))
	check("idempotent, retransmitted", run(idem))
	// The AUTH_SYS stamp is not the caller's identity: a retransmission
	// re-encoded with a new stamp is still the same call.
	p := AuthSysParms{Stamp: 12345, Machine: "client", UID: 1000, GID: 100}
	m = base
	m.cred = p.Cred()
	if got := run(m); got != 1 {
		t.Fatalf("new stamp: execution %d, want the original's 1", got)
	}
	if st := s.Stats(); st.DRCHits != 2 {
		t.Fatalf("%d hits, want 2", st.DRCHits)
	}
}

// A call its handler dropped is not remembered: the retransmission runs.
func TestDRCDroppedNotCached(t *testing.T) {
	h := newCountingHandler()
	_, ln := startServer(t, ServerOptions{}, h)
	rc := dialRaw(t, ln.Addr())
	req := record(newCall(40, procCountDrop, nil))
	rc.write(req)
	rc.expectSilence(100 * time.Millisecond)
	rc.write(req)
	if got := resultU32(t, rc.recvRecord()); got != 2 {
		t.Fatalf("retransmission of a dropped call: execution %d, want 2", got)
	}
}

func TestDRCExpiry(t *testing.T) {
	clk := newFakeClock()
	h := newCountingHandler()
	_, ln := startServer(t, ServerOptions{DRC: DRCOptions{TTL: time.Minute, Now: clk.Now}}, h)
	rc := dialRaw(t, ln.Addr())
	req := record(newCall(1, procCount, nil))
	rc.write(req)
	if resultU32(t, rc.recvRecord()) != 1 {
		t.Fatal("first run")
	}
	clk.advance(59 * time.Second)
	rc.write(req)
	if got := resultU32(t, rc.recvRecord()); got != 1 {
		t.Fatalf("before expiry: execution %d, want the cached 1", got)
	}
	clk.advance(time.Second)
	rc.write(req)
	if got := resultU32(t, rc.recvRecord()); got != 2 {
		t.Fatalf("after expiry: execution %d, want 2", got)
	}
}

// The oldest entries make room: by count and by bytes.
func TestDRCBounds(t *testing.T) {
	for _, tc := range []struct {
		name string
		opts DRCOptions
	}{
		{"entries", DRCOptions{MaxEntries: 3}},
		// Each entry is charged the overhead plus its reply (28 bytes of
		// header and result, mark included).
		{"bytes", DRCOptions{MaxBytes: 3 * (drcEntryOverhead + 32)}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := newCountingHandler()
			s, ln := startServer(t, ServerOptions{DRC: tc.opts}, h)
			rc := dialRaw(t, ln.Addr())
			run := func(xid uint32) uint32 {
				rc.write(record(newCall(xid, procCount, nil)))
				return resultU32(t, rc.recvRecord())
			}
			for xid := uint32(1); xid <= 4; xid++ {
				if got := run(xid); got != xid {
					t.Fatalf("xid %d: execution %d", xid, got)
				}
			}
			st := s.Stats()
			if st.DRCEntries != 3 {
				t.Fatalf("%d entries, want 3", st.DRCEntries)
			}
			if tc.opts.MaxBytes > 0 && st.DRCBytes > tc.opts.MaxBytes {
				t.Fatalf("%d bytes charged, bound %d", st.DRCBytes, tc.opts.MaxBytes)
			}
			for _, xid := range []uint32{4, 3, 2} {
				if got := run(xid); got != xid {
					t.Fatalf("xid %d: execution %d, want the cached %d", xid, got, xid)
				}
			}
			if got := run(1); got != 5 {
				t.Fatalf("evicted xid 1: execution %d, want 5", got)
			}
		})
	}
}

func TestDRCDisabled(t *testing.T) {
	h := newCountingHandler()
	s, ln := startServer(t, ServerOptions{DRC: DRCOptions{Disable: true}}, h)
	rc := dialRaw(t, ln.Addr())
	req := record(newCall(1, procCount, nil))
	for want := uint32(1); want <= 2; want++ {
		rc.write(req)
		if got := resultU32(t, rc.recvRecord()); got != want {
			t.Fatalf("execution %d, want %d", got, want)
		}
	}
	if st := s.Stats(); st.DRCHits != 0 || st.DRCEntries != 0 {
		t.Fatalf("stats %+v", st)
	}
}

// The key separates clients by address (not port); tested on the cache
// itself, as every test socket is on 127.0.0.1.
func TestDRCKeyByAddress(t *testing.T) {
	d := newDRC(DRCOptions{})
	call := &Call{XID: 1, Prog: 2, Vers: 3, Proc: 4, Args: []byte("x")}
	a := netip.MustParseAddr("192.0.2.1")
	b := netip.MustParseAddr("192.0.2.2")
	ea, _, st := d.begin(d.key(a, call), nil)
	if st != drcMiss {
		t.Fatal("first call not a miss")
	}
	d.finish(ea, []byte("reply"))
	if _, saved, st := d.begin(d.key(a, call), nil); st != drcReplay || string(saved) != "reply" {
		t.Fatalf("same address: %v %q", st, saved)
	}
	if _, _, st := d.begin(d.key(b, call), nil); st != drcMiss {
		t.Fatalf("other address: %v, want a miss", st)
	}
	if clientIP(&net.TCPAddr{IP: net.ParseIP("::ffff:192.0.2.1"), Port: 1}) != a {
		t.Fatal("v4-mapped address not unmapped")
	}
}

// The cost of the cache per call, for a small call and a 1 MiB WRITE-sized
// one: hashing, lookup, saving a small reply.
func BenchmarkDRC(b *testing.B) {
	for _, size := range []int{128, 64 << 10, 1 << 20} {
		b.Run(byteSize(size), func(b *testing.B) {
			d := newDRC(DRCOptions{})
			args := make([]byte, size)
			call := &Call{Prog: 100003, Vers: 3, Proc: 7, Cred: SysCred(1000, 100, nil, "bench"), Args: args}
			reply := make([]byte, 160)
			ip := netip.MustParseAddr("192.0.2.1")
			b.SetBytes(int64(size))
			b.ReportAllocs()
			for i := range b.N {
				call.XID = uint32(i)
				e, _, _ := d.begin(d.key(ip, call), nil)
				d.finish(e, reply)
			}
		})
	}
}

func byteSize(n int) string {
	switch {
	case n >= 1<<20:
		return strconv.Itoa(n>>20) + "MiB"
	case n >= 1<<10:
		return strconv.Itoa(n>>10) + "KiB"
	}
	return strconv.Itoa(n) + "B"
}
