package proxy

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"slices"
	"sync"
	"testing"
	"time"

	"hushfs/internal/nfs3"
	"hushfs/internal/rpc"
	"hushfs/internal/xdr"
)

// startFaultProxy starts a proxy with faults in front of target, closed at
// the end of the test.
func startFaultProxy(t *testing.T, target string, f Faults) *Proxy {
	t.Helper()
	p, err := Start(Config{Target: target, Faults: f, Logf: t.Logf})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := p.Close(); err != nil {
			t.Errorf("Close: %v", err)
		}
	})
	return p
}

// countingServer answers every call with one 4-byte result: how many times
// the server has now seen that XID. It records, per connection, how each
// ended (io.EOF at a record boundary, io.ErrUnexpectedEOF inside one).
type countingServer struct {
	mu    sync.Mutex
	seen  map[uint32]uint32
	procs map[uint32]int // calls per procedure, duplicates included
	ends  []error
	delay time.Duration // before each reply
}

func (s *countingServer) handle(c net.Conn) {
	for {
		rec, err := readRecord(c, 8<<20)
		if err != nil {
			s.mu.Lock()
			if errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, io.EOF) {
				s.ends = append(s.ends, err)
			} else {
				s.ends = append(s.ends, io.ErrUnexpectedEOF) // reset mid-record or between: count as cut
			}
			s.mu.Unlock()
			return
		}
		if len(rec) < 24 || binary.BigEndian.Uint32(rec[4:]) != msgCall {
			continue
		}
		xid := binary.BigEndian.Uint32(rec)
		s.mu.Lock()
		s.seen[xid]++
		s.procs[binary.BigEndian.Uint32(rec[20:])]++
		n := s.seen[xid]
		s.mu.Unlock()
		time.Sleep(s.delay)
		if _, err := c.Write(frame(replyBody(xid, xdr.AppendUint32(nil, n)))); err != nil {
			return
		}
	}
}

func startCounting(t *testing.T) (*countingServer, net.Addr) {
	s := &countingServer{seen: map[uint32]uint32{}, procs: map[uint32]int{}}
	ln := listen(t)
	serveConns(t, ln, s.handle)
	return s, ln.Addr()
}

// callRaw sends one call on c and returns the 4-byte result of its reply.
func callRaw(t *testing.T, c net.Conn, xid, proc uint32) uint32 {
	t.Helper()
	if _, err := c.Write(frame(callBody(xid, NFS3(proc), none, none, nil))); err != nil {
		t.Fatalf("send xid %d: %v", xid, err)
	}
	rec, err := readRecord(c, 1<<20)
	if err != nil {
		t.Fatalf("reply to xid %d: %v", xid, err)
	}
	if len(rec) < 28 || binary.BigEndian.Uint32(rec) != xid {
		t.Fatalf("reply to xid %d: %x", xid, rec)
	}
	return binary.BigEndian.Uint32(rec[24:])
}

// TestFaultDuplicateResend: every CREATE reaches the server twice, the
// client gets the reply to the second (a lost reply and a retransmission);
// other procedures are left alone.
func TestFaultDuplicateResend(t *testing.T) {
	srv, addr := startCounting(t)
	p := startFaultProxy(t, addr.String(), Faults{DupProb: 1, DupProcs: []ProcKey{NFS3(nfs3.ProcCreate)}})
	c := dial(t, p.Addr(), 20*time.Second)
	for i := range uint32(20) {
		proc := uint32(nfs3.ProcCreate)
		want := uint32(2)
		if i%2 == 1 {
			proc, want = nfs3.ProcGetattr, 1
		}
		if got := callRaw(t, c, 100+i, proc); got != want {
			t.Errorf("call %d (proc %d): the client got the reply to transmission %d, want %d", i, proc, got, want)
		}
	}
	f := p.Counts().Faults
	if f.Duplicated != 10 || f.DupRepliesDropped != 10 || f.DupSkipped != 0 {
		t.Errorf("fault counts %+v; want 10 duplicated, 10 replies dropped", f)
	}
	srv.mu.Lock()
	defer srv.mu.Unlock()
	if srv.procs[nfs3.ProcCreate] != 20 || srv.procs[nfs3.ProcGetattr] != 10 {
		t.Errorf("server saw %d CREATE, %d GETATTR; want 20, 10", srv.procs[nfs3.ProcCreate], srv.procs[nfs3.ProcGetattr])
	}
}

// TestFaultDuplicateDelay: the copy of a call waits DupDelay after the
// first reply, as a client's retransmission would wait for its timeout.
func TestFaultDuplicateDelay(t *testing.T) {
	const delay = 100 * time.Millisecond
	_, addr := startCounting(t)
	p := startFaultProxy(t, addr.String(), Faults{DupEvery: 1, DupDelay: delay})
	c := dial(t, p.Addr(), 20*time.Second)
	for i := range uint32(3) {
		start := time.Now()
		if got := callRaw(t, c, 50+i, nfs3.ProcRename); got != 2 {
			t.Errorf("call %d: the client got the reply to transmission %d, want 2", i, got)
		}
		if took := time.Since(start); took < delay || took > delay+time.Second {
			t.Errorf("call %d took %v, want the %v delay and little more", i, took, delay)
		}
	}
}

// TestFaultDuplicateImmediate: the copy follows the call at once; the
// client gets the first reply only, and the next call's reply is not
// confused with the dropped one.
func TestFaultDuplicateImmediate(t *testing.T) {
	srv, addr := startCounting(t)
	p := startFaultProxy(t, addr.String(), Faults{DupEvery: 1, DupImmediate: true})
	c := dial(t, p.Addr(), 20*time.Second)
	for i := range uint32(10) {
		if got := callRaw(t, c, 7+i, nfs3.ProcRemove); got != 1 {
			t.Errorf("call %d: the client got the reply to transmission %d, want 1", i, got)
		}
	}
	// The last duplicate's second reply may still be on its way.
	deadline := time.Now().Add(5 * time.Second)
	for p.Counts().Faults.DupRepliesDropped < 10 && time.Now().Before(deadline) {
		time.Sleep(5 * time.Millisecond)
	}
	if f := p.Counts().Faults; f.Duplicated != 10 || f.DupRepliesDropped != 10 {
		t.Errorf("fault counts %+v; want 10 duplicated, 10 replies dropped", f)
	}
	srv.mu.Lock()
	defer srv.mu.Unlock()
	if srv.procs[nfs3.ProcRemove] != 20 {
		t.Errorf("server saw %d REMOVE, want 20", srv.procs[nfs3.ProcRemove])
	}
}

// TestFaultCloseEvery: the project's RPC client, through a proxy closing
// the connection after every 5th call, completes every call (reconnecting
// and resending); each close is counted and shows as a new connection.
func TestFaultCloseEvery(t *testing.T) {
	p := startFaultProxy(t, startRPCServer(t).String(), Faults{CloseEvery: 5})
	c := rpcDial(t, p.Addr())
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for i := range 40 {
		arg := binary.BigEndian.AppendUint32(nil, uint32(i))
		var res echoRes
		if err := c.Call(ctx, testProg, testVers, 1, rpc.NoAuth, rawArgs(arg), &res); err != nil {
			t.Fatalf("call %d: %v", i, err)
		}
		if !bytes.Equal(res, arg) {
			t.Fatalf("call %d: result %x, want %x", i, res, arg)
		}
	}
	cnt := p.Counts()
	// Each close loses the reply to the call that caused it, which is
	// then sent again: 4 calls complete per 5 forwarded.
	if cnt.Faults.Closes < 9 || cnt.Faults.Closes > 10 || cnt.Conns != cnt.Faults.Closes+1 {
		t.Errorf("closes %d, connections %d; want 9 or 10 closes, one connection more", cnt.Faults.Closes, cnt.Conns)
	}
}

// TestFaultCloseRandom: closes at random are reproducible from the seed.
func TestFaultCloseRandom(t *testing.T) {
	run := func() uint64 {
		p := startFaultProxy(t, startRPCServer(t).String(), Faults{CloseProb: 0.2, Seed: 42})
		c := rpcDial(t, p.Addr())
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		for i := range 30 {
			if err := c.Call(ctx, testProg, testVers, 0, rpc.NoAuth, nil, nil); err != nil {
				t.Fatalf("call %d: %v", i, err)
			}
		}
		return p.Counts().Faults.Closes
	}
	a, b := run(), run()
	if a == 0 || a != b {
		t.Errorf("closes with the same seed: %d then %d; want the same, not 0", a, b)
	}
}

// TestFaultBlackhole: during a blackhole a soft client times out (its
// retransmission dropped too), and calls work again once it ends.
func TestFaultBlackhole(t *testing.T) {
	p := startFaultProxy(t, startRPCServer(t).String(), Faults{})
	ctx := context.Background()
	c, err := rpc.Dial(ctx, p.Addr().String(), rpc.ClientOptions{Timeout: 150 * time.Millisecond, Retrans: 1, Logf: t.Logf})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if err := c.Call(ctx, testProg, testVers, 0, rpc.NoAuth, nil, nil); err != nil {
		t.Fatalf("before the blackhole: %v", err)
	}
	until, err := p.Blackhole(800 * time.Millisecond)
	if err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	err = c.Call(ctx, testProg, testVers, 0, rpc.NoAuth, nil, nil)
	if !errors.Is(err, rpc.ErrTimeout) {
		t.Fatalf("call in the blackhole: %v, want a timeout", err)
	}
	if took := time.Since(start); took < 400*time.Millisecond || took > 700*time.Millisecond {
		t.Errorf("soft timeout after %v, want 150 ms + 300 ms", took)
	}
	time.Sleep(time.Until(until))
	if err := c.Call(ctx, testProg, testVers, 0, rpc.NoAuth, nil, nil); err != nil {
		t.Fatalf("after the blackhole: %v", err)
	}
	f := p.Counts().Faults
	if f.Blackholes != 1 || f.BlackholedCalls != 2 {
		t.Errorf("fault counts %+v; want 1 blackhole, 2 calls dropped", f)
	}
}

// TestFaultBlackholeAfterCalls: a configured blackhole starts after N calls
// and drops replies as well as calls; a hard client rides it out.
func TestFaultBlackholeAfterCalls(t *testing.T) {
	srv, addr := startCounting(t)
	srv.delay = 300 * time.Millisecond // the 3rd call's reply comes back inside the blackhole
	p := startFaultProxy(t, addr.String(), Faults{BlackholeFor: 500 * time.Millisecond, BlackholeAfter: 3})
	c := dial(t, p.Addr(), 20*time.Second)
	callRaw(t, c, 1, 0)
	callRaw(t, c, 2, 0)
	// The third call passes; the fourth, sent before its reply, starts
	// the blackhole, which then swallows the third's reply.
	c.Write(frame(callBody(3, NFS3(0), none, none, nil)))
	time.Sleep(50 * time.Millisecond)
	c.Write(frame(callBody(4, NFS3(0), none, none, nil)))
	c.SetReadDeadline(time.Now().Add(700 * time.Millisecond))
	if rec, err := readRecord(c, 1<<20); err == nil {
		t.Fatalf("a reply came through the blackhole: %x", rec)
	}
	c.SetReadDeadline(time.Now().Add(10 * time.Second))
	if got := callRaw(t, c, 5, 0); got != 1 {
		t.Errorf("after the blackhole: %d", got)
	}
	f := p.Counts().Faults
	if f.Blackholes != 1 || f.BlackholedCalls != 1 || f.BlackholedReplies != 1 {
		t.Errorf("fault counts %+v; want 1 blackhole, 1 call and 1 reply dropped", f)
	}
	srv.mu.Lock()
	defer srv.mu.Unlock()
	if srv.seen[3] != 1 || srv.seen[4] != 0 {
		t.Errorf("server saw xid 3 %d times, xid 4 %d times; want 1, 0", srv.seen[3], srv.seen[4])
	}
}

// TestFaultScheduleRepeats checks time-scheduled blackholes on a fake
// clock: each starts BlackholeAt after the previous one ended, for the
// number asked.
func TestFaultScheduleRepeats(t *testing.T) {
	t0 := time.Unix(1000, 0)
	s := newFaultState(Faults{BlackholeFor: 2 * time.Second, BlackholeAt: 10 * time.Second, BlackholeCount: 2}, t0)
	c := newCounters()
	at := func(sec float64) bool {
		v := s.onReply(t0.Add(time.Duration(sec*float64(time.Second))), c)
		return v.drop
	}
	for _, tc := range []struct {
		sec  float64
		drop bool
	}{{0, false}, {9.9, false}, {10, true}, {11.9, true}, {12, false}, {21.9, false}, {22.5, true}, {24, false}, {40, false}, {100, false}} {
		if got := at(tc.sec); got != tc.drop {
			t.Errorf("at %v s: dropped %v, want %v", tc.sec, got, tc.drop)
		}
	}
	if f := c.snapshot(false).Faults; f.Blackholes != 2 || f.BlackholedReplies != 3 {
		t.Errorf("counts %+v", f)
	}
}

// TestFaultTruncate: every 3rd call is cut short; the server sees a
// record start and never end, and the project's RPC client still completes
// every call.
func TestFaultTruncate(t *testing.T) {
	srv, addr := startCounting(t)
	p := startFaultProxy(t, addr.String(), Faults{TruncateEvery: 3})
	c := rpcDial(t, p.Addr())
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for i := range 12 {
		var res echoRes
		if err := c.Call(ctx, nfs3.Program, nfs3.Version, nfs3.ProcGetattr, rpc.NoAuth, rawArgs(make([]byte, 40)), &res); err != nil {
			t.Fatalf("call %d: %v", i, err)
		}
	}
	cuts := p.Counts().Faults.Truncated
	if cuts < 5 {
		t.Errorf("%d calls truncated, want at least 5", cuts)
	}
	deadline := time.Now().Add(5 * time.Second)
	for {
		srv.mu.Lock()
		partial := 0
		for _, e := range srv.ends {
			if errors.Is(e, io.ErrUnexpectedEOF) {
				partial++
			}
		}
		srv.mu.Unlock()
		if uint64(partial) == cuts {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("server saw %d connections end inside a record, want %d", partial, cuts)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// TestFaultJitter: replies are delayed by up to the jitter, the delays
// drawn are counted, and the same seed draws the same delays.
func TestFaultJitter(t *testing.T) {
	const jitter = 40 * time.Millisecond
	run := func() (time.Duration, FaultCounts) {
		_, addr := startCounting(t)
		p := startFaultProxy(t, addr.String(), Faults{Jitter: jitter, Seed: 9})
		c := dial(t, p.Addr(), 20*time.Second)
		var measured time.Duration
		for i := range uint32(20) {
			start := time.Now()
			callRaw(t, c, i, 0)
			took := time.Since(start)
			if took > jitter+200*time.Millisecond {
				t.Errorf("call %d took %v, jitter is %v", i, took, jitter)
			}
			measured += took
		}
		return measured, p.Counts().Faults
	}
	m1, f1 := run()
	_, f2 := run()
	if f1.JitteredReplies < 18 || f1.Jitter < 20*10*time.Millisecond || m1 < f1.Jitter {
		t.Errorf("jittered %d replies by %v in all, calls took %v", f1.JitteredReplies, f1.Jitter, m1)
	}
	if f1.Jitter != f2.Jitter {
		t.Errorf("same seed, different jitter: %v then %v", f1.Jitter, f2.Jitter)
	}
}

// TestFaultSlowReader: a big reply read a few KiB at a time with a pause
// after each read arrives intact, no sooner than the pauses allow; also
// with a small receive buffer, which makes the server's writes wait for
// the window to open.
func TestFaultSlowReader(t *testing.T) {
	for _, tc := range []struct {
		size, chunk, buffer int
		pause               time.Duration
	}{
		{1 << 20, 4 << 10, 0, time.Millisecond},
		{128 << 10, 2 << 10, 16 << 10, 0},
	} {
		t.Run(fmt.Sprintf("%d-by-%d-rcvbuf-%d", tc.size, tc.chunk, tc.buffer), func(t *testing.T) {
			p := startFaultProxy(t, startRPCServer(t).String(), Faults{SlowRead: tc.chunk, SlowReadPause: tc.pause, SlowReadBuffer: tc.buffer})
			c := dial(t, p.Addr(), 30*time.Second)
			data := make([]byte, tc.size)
			for i := range data {
				data[i] = byte(i * 7)
			}
			start := time.Now()
			if _, err := c.Write(frame(callBody(77, ProcKey{testProg, testVers, 1}, none, none, data))); err != nil {
				t.Fatal(err)
			}
			rec, err := readRecord(c, 2<<20)
			if err != nil {
				t.Fatal(err)
			}
			took := time.Since(start)
			if len(rec) < 24 || !bytes.Equal(rec[24:], data) {
				t.Fatalf("reply of %d bytes is not the %d bytes sent", len(rec), tc.size)
			}
			f := p.Counts().Faults
			min := uint64(tc.size / tc.chunk)
			if f.SlowReads < min || took < time.Duration(min)*tc.pause {
				t.Errorf("%d slow reads in %v; want at least %d, taking %v", f.SlowReads, took, min, time.Duration(min)*tc.pause)
			}
			t.Logf("%d bytes in %d reads, %v", tc.size, f.SlowReads, took)
		})
	}
}

// TestFaultsToggle: faults switched on and off at run time act only while
// on, and a record under way keeps the treatment it started with.
func TestFaultsToggle(t *testing.T) {
	srv, addr := startCounting(t)
	p := startFaultProxy(t, addr.String(), Faults{})
	c := dial(t, p.Addr(), 20*time.Second)
	if got := callRaw(t, c, 1, nfs3.ProcCreate); got != 1 {
		t.Fatalf("no faults: reply to transmission %d", got)
	}
	if err := p.SetFaults(Faults{DupEvery: 1}); err != nil {
		t.Fatal(err)
	}
	if got := callRaw(t, c, 2, nfs3.ProcCreate); got != 2 {
		t.Errorf("duplicating: reply to transmission %d, want 2", got)
	}
	// Half a call, then the faults go off: the call is still duplicated.
	rec := frame(callBody(3, NFS3(nfs3.ProcCreate), none, none, make([]byte, 100)))
	c.Write(rec[:40])
	time.Sleep(50 * time.Millisecond)
	if err := p.SetFaults(Faults{}); err != nil {
		t.Fatal(err)
	}
	c.Write(rec[40:])
	rep, err := readRecord(c, 1<<20)
	if err != nil || binary.BigEndian.Uint32(rep[24:]) != 2 {
		t.Errorf("call under way when faults went off: %x %v; want the reply to transmission 2", rep, err)
	}
	if got := callRaw(t, c, 4, nfs3.ProcCreate); got != 1 {
		t.Errorf("faults off: reply to transmission %d", got)
	}
	if f := p.Counts().Faults; f.Duplicated != 2 {
		t.Errorf("duplicated %d, want 2", f.Duplicated)
	}
	if err := p.SetFaults(Faults{CloseProb: 2}); err == nil {
		t.Error("a probability of 2 was accepted")
	}
	srv.mu.Lock()
	defer srv.mu.Unlock()
	if want := map[uint32]uint32{1: 1, 2: 2, 3: 2, 4: 1}; !equalMaps(srv.seen, want) {
		t.Errorf("server saw %v, want %v", srv.seen, want)
	}
}

func equalMaps(a, b map[uint32]uint32) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if b[k] != v {
			return false
		}
	}
	return true
}

// TestFaultFragments: records in many fragments, split across reads
// anywhere, are treated whole: duplicated byte for byte.
func TestFaultFragments(t *testing.T) {
	var got [][]byte
	var mu sync.Mutex
	ln := listen(t)
	serveConns(t, ln, func(c net.Conn) {
		for {
			rec, err := readRecord(c, 1<<20)
			if err != nil {
				return
			}
			mu.Lock()
			got = append(got, rec)
			mu.Unlock()
			c.Write(frame(replyBody(binary.BigEndian.Uint32(rec), nil)))
		}
	})
	p := startFaultProxy(t, ln.Addr().String(), Faults{DupEvery: 1})
	c := dial(t, p.Addr(), 20*time.Second)
	body := callBody(99, NFS3(nfs3.ProcWrite), authSys("m", 1, 2, 3), none, writeArgs(make([]byte, 32), 0, 2, bytes.Repeat([]byte("abc"), 300)))
	rec := frameSplit(body, 3, 0, 10, 7, 100)
	for i := 0; i < len(rec); i += 5 {
		c.Write(rec[i:min(i+5, len(rec))])
		time.Sleep(time.Millisecond)
	}
	if _, err := replyXID(c); err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(got) != 2 || !bytes.Equal(got[0], body) || !bytes.Equal(got[1], body) {
		t.Errorf("server got %d records; want the call twice, intact", len(got))
	}
}

// TestParseProcs checks the procedure list syntax.
func TestParseProcs(t *testing.T) {
	k, err := ParseProcs("create, REMOVE,100005/3/1")
	if err != nil || !slices.Equal(k, []ProcKey{NFS3(nfs3.ProcCreate), NFS3(nfs3.ProcRemove), {100005, 3, 1}}) {
		t.Errorf("ParseProcs: %v %v", k, err)
	}
	if k, err := ParseProcs("nonidempotent"); err != nil || !slices.Equal(k, NonIdempotent) {
		t.Errorf("nonidempotent: %v %v", k, err)
	}
	if _, err := ParseProcs("frobnicate"); err == nil {
		t.Error("unknown procedure accepted")
	}
}

// TestDupTableBounds: the table forgets its oldest entries beyond its
// count, refuses calls beyond its bytes, and refuses an XID already
// awaited.
func TestDupTableBounds(t *testing.T) {
	var tb dupTable
	for i := range uint32(maxDupPending + 10) {
		if !tb.add(i, &dupEntry{rec: make([]byte, 8)}) {
			t.Fatalf("add %d refused", i)
		}
	}
	if len(tb.m) != maxDupPending || tb.bytes != 8*maxDupPending {
		t.Errorf("%d entries, %d bytes; want %d, %d", len(tb.m), tb.bytes, maxDupPending, 8*maxDupPending)
	}
	if drop, rec, _ := tb.reply(3); drop || rec != nil {
		t.Error("an evicted entry was still there")
	}
	if tb.add(maxDupPending+5, &dupEntry{}) {
		t.Error("an XID already awaited was added again")
	}
	var big dupTable
	if !big.add(1, &dupEntry{rec: make([]byte, maxDupBytes-10)}) || big.add(2, &dupEntry{rec: make([]byte, 11)}) {
		t.Error("byte bound not kept")
	}
	if drop, rec, _ := big.reply(1); !drop || len(rec) != maxDupBytes-10 || big.bytes != 0 {
		t.Errorf("first reply: drop %v, %d bytes to resend, %d held", drop, len(rec), big.bytes)
	}
	if !big.add(2, &dupEntry{rec: make([]byte, 11)}) {
		t.Error("bytes not given back after the resend")
	}
}

// TestFaultPathByteExact sends random bytes (records of random lengths,
// as garbage record marks make them) through the fault path with jitter
// on, to an echo server: every byte comes back, in order. The duplicate
// probability makes the call side hold every record's header for a
// decision too; none of the records is a call.
func TestFaultPathByteExact(t *testing.T) {
	ln := listen(t)
	serveConns(t, ln, echo)
	p := startFaultProxy(t, ln.Addr().String(), Faults{Jitter: time.Millisecond, Seed: 3, DupProb: 0.5})
	c := dial(t, p.Addr(), 30*time.Second)
	r := rand.New(rand.NewPCG(5, 6))
	// Valid small records first, so that some decisions are made, then
	// garbage.
	var data []byte
	for i := range 50 {
		data = append(data, frame(replyBody(uint32(i), make([]byte, r.IntN(200))))...)
	}
	for range 1 << 20 {
		data = append(data, byte(r.Uint32()))
	}
	done := make(chan []byte)
	go func() {
		got, _ := io.ReadAll(c)
		done <- got
	}()
	for rest := data; len(rest) > 0; {
		n := min(len(rest), 1+r.IntN(20000))
		if _, err := c.Write(rest[:n]); err != nil {
			t.Fatal(err)
		}
		rest = rest[n:]
	}
	c.CloseWrite()
	if got := <-done; !bytes.Equal(got, data) {
		t.Errorf("echoed %d bytes, sent %d (or they differ)", len(got), len(data))
	}
	if f := p.Counts().Faults; f.JitteredReplies == 0 {
		t.Errorf("no reply record was jittered: %+v", f)
	}
}
