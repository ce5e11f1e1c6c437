package rpc

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"hushfs/internal/xdr"
)

func dialClient(t testing.TB, addr string, opts ClientOptions) *Client {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	c, err := Dial(ctx, addr, opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// statsLog collects what the Observer reports.
type statsLog struct {
	mu    sync.Mutex
	stats []CallStats
}

func (s *statsLog) observe(st *CallStats) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.stats = append(s.stats, *st)
}

func (s *statsLog) all() []CallStats {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]CallStats(nil), s.stats...)
}

// Many calls in flight on one connection, answered in random order, each
// matched to its caller.
func TestClientManyInFlight(t *testing.T) {
	var remotes sync.Map
	var inFlight, peak atomic.Int32
	crowd := make(chan struct{}) // closed once 100 calls are in the server at once
	var crowdOnce sync.Once
	h := &testHandler{hook: func(ctx context.Context, call *Call, reply []byte) ([]byte, bool, error) {
		remotes.Store(call.Conn.RemoteAddr.String(), true)
		n := inFlight.Add(1)
		defer inFlight.Add(-1)
		for p := peak.Load(); n > p && !peak.CompareAndSwap(p, n); p = peak.Load() {
		}
		if n >= 100 {
			crowdOnce.Do(func() { close(crowd) })
		}
		select { // hold calls until the pipeline is full, then answer in random order
		case <-crowd:
		case <-time.After(5 * time.Second):
		}
		time.Sleep(time.Duration(rand.IntN(20)) * time.Millisecond)
		return nil, false, nil
	}}
	_, ln := startServer(t, ServerOptions{Workers: 256, MaxInFlightPerConn: 256}, h)
	c := dialClient(t, ln.Addr().String(), ClientOptions{Timeout: 10 * time.Second})
	const n = 300
	var wg sync.WaitGroup
	errs := make(chan error, n)
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			arg := []byte(fmt.Sprintf("call %d %s", i, strings.Repeat("x", i)))
			var res opaqueRes
			if err := c.Call(context.Background(), testProg, 3, procEcho, NoAuth, opaqueArg(arg), &res); err != nil {
				errs <- err
				return
			}
			if !bytes.Equal(res.b, arg) {
				errs <- fmt.Errorf("call %d got %q", i, res.b)
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	count := 0
	remotes.Range(func(any, any) bool { count++; return true })
	if count != 1 {
		t.Errorf("calls came over %d connections, want 1", count)
	}
	if p := peak.Load(); p < 100 {
		t.Errorf("at most %d calls in flight at the server, want ≥ 100 (MaxInFlight 128)", p)
	}
	if p := peak.Load(); p > 128 {
		t.Errorf("%d calls in flight, over MaxInFlight 128", p)
	}
}

// The first transmission is ignored; the retransmission, with the same XID
// and the same bytes, is answered.
func TestClientRetransmitsSameXID(t *testing.T) {
	var mu sync.Mutex
	seen := map[uint32][][]byte{}
	h := &testHandler{hook: func(ctx context.Context, call *Call, reply []byte) ([]byte, bool, error) {
		mu.Lock()
		defer mu.Unlock()
		args := append([]byte(nil), call.Args...)
		seen[call.XID] = append(seen[call.XID], args)
		if len(seen[call.XID]) == 1 {
			return reply, true, ErrDrop
		}
		return nil, false, nil
	}}
	_, ln := startServer(t, ServerOptions{}, h)
	var stats statsLog
	c := dialClient(t, ln.Addr().String(), ClientOptions{Timeout: 200 * time.Millisecond, Retrans: 2, Observer: stats.observe})
	var res opaqueRes
	start := time.Now()
	if err := c.Call(context.Background(), testProg, 3, procEcho, NoAuth, opaqueArg("again"), &res); err != nil {
		t.Fatal(err)
	}
	elapsed := time.Since(start)
	if string(res.b) != "again" {
		t.Fatalf("result %q", res.b)
	}
	mu.Lock()
	if len(seen) != 1 {
		t.Fatalf("server saw %d xids, want 1", len(seen))
	}
	for xid, args := range seen {
		if len(args) != 2 || !bytes.Equal(args[0], args[1]) {
			t.Fatalf("xid %#x seen %d times", xid, len(args))
		}
	}
	mu.Unlock()
	if elapsed < 200*time.Millisecond {
		t.Fatalf("answered after %v, before the first timeout", elapsed)
	}
	st := stats.all()
	if len(st) != 1 {
		t.Fatalf("%d observations", len(st))
	}
	s := st[0]
	reqLen := 4 + 40 + 4 + 8 // mark, header with two AUTH_NONE, opaque "again"
	if s.Transmissions != 2 || s.Timeouts != 1 || s.Err != nil || s.BytesSent != 2*reqLen ||
		s.Prog != testProg || s.Vers != 3 || s.Proc != procEcho {
		t.Fatalf("stats %+v", s)
	}
	if s.RTT <= 0 || s.RTT > 200*time.Millisecond || s.Execute < s.RTT+200*time.Millisecond {
		t.Fatalf("RTT %v, Execute %v", s.RTT, s.Execute)
	}
	if s.BytesReceived != 4+24+12 {
		t.Fatalf("BytesReceived %d", s.BytesReceived)
	}
}

func TestClientSoftTimeout(t *testing.T) {
	bh := newBlackhole(t)
	var stats statsLog
	c := dialClient(t, bh.addr(), ClientOptions{Timeout: 100 * time.Millisecond, Retrans: 2, Observer: stats.observe})
	start := time.Now()
	err := c.Call(context.Background(), testProg, 3, procEcho, NoAuth, opaqueArg("hello?"), nil)
	elapsed := time.Since(start)
	if !errors.Is(err, ErrTimeout) {
		t.Fatalf("err = %v, want ErrTimeout", err)
	}
	// Waits of 100, 200 and 300 ms.
	if elapsed < 600*time.Millisecond || elapsed > 1500*time.Millisecond {
		t.Fatalf("soft timeout after %v, want about 600ms", elapsed)
	}
	st := stats.all()
	if len(st) != 1 || st[0].Transmissions != 3 || st[0].Timeouts != 3 || !errors.Is(st[0].Err, ErrTimeout) || st[0].BytesReceived != 0 {
		t.Fatalf("stats %+v", st)
	}
	waitFor(t, "three transmissions at the blackhole", func() bool { return len(bh.records()) >= 3 })
	recs := bh.records()
	if len(recs) != 3 || !bytes.Equal(recs[0], recs[1]) || !bytes.Equal(recs[1], recs[2]) {
		t.Fatalf("blackhole got %d records, want 3 identical", len(recs))
	}
	if bh.numConns() != 1 {
		t.Fatalf("soft client used %d connections", bh.numConns())
	}
}

func TestClientHardKeepsTrying(t *testing.T) {
	bh := newBlackhole(t)
	var logs logBuffer
	var stats statsLog
	c := dialClient(t, bh.addr(), ClientOptions{Timeout: 100 * time.Millisecond, Retrans: 1, Hard: true,
		Logf: logs.Logf, Observer: stats.observe})
	ctx, cancel := context.WithTimeout(context.Background(), 1200*time.Millisecond)
	defer cancel()
	start := time.Now()
	err := c.Call(ctx, testProg, 3, procNull, NoAuth, nil, nil)
	elapsed := time.Since(start)
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("err = %v, want DeadlineExceeded", err)
	}
	if elapsed < 1200*time.Millisecond || elapsed > 2*time.Second {
		t.Fatalf("hard call returned after %v, want at the 1.2s deadline", elapsed)
	}
	if !logs.contains("not responding, still trying") {
		t.Fatalf("no 'not responding' log:\n%s", logs.String())
	}
	// Waits of 100, 200 (major), 300, 400 (major): 1s; the fifth is cut
	// short. A slow machine may see the fourth cut short instead.
	st := stats.all()
	if len(st) != 1 || st[0].Timeouts < 3 || st[0].Timeouts > 4 || st[0].Transmissions < st[0].Timeouts+1 {
		t.Fatalf("stats %+v", st)
	}
	// The connection is reset at a major timeout.
	if bh.numConns() < 2 {
		t.Fatalf("blackhole saw %d connections, want a reconnect after the major timeout", bh.numConns())
	}
}

// MajorTimeout's channel closes at a hard call's major timeout (100 +
// 200 ms here), and a new one is handed out for the next.
func TestClientMajorTimeoutSignalled(t *testing.T) {
	bh := newBlackhole(t)
	c := dialClient(t, bh.addr(), ClientOptions{Timeout: 100 * time.Millisecond, Retrans: 1, Hard: true})
	major := c.MajorTimeout()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	start := time.Now()
	go func() { done <- c.Call(ctx, testProg, 3, procNull, NoAuth, nil, nil) }()
	select {
	case <-major:
		if el := time.Since(start); el < 300*time.Millisecond {
			t.Errorf("major timeout signalled after %v, want 300ms", el)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("no major timeout signalled")
	}
	select {
	case <-c.MajorTimeout():
		t.Fatal("the next major timeout's channel is already closed")
	default:
	}
	cancel()
	if err := <-done; !errors.Is(err, context.Canceled) {
		t.Fatalf("hard call: %v, want Canceled", err)
	}
}

// stallingConn passes on the first budget bytes written to it and
// swallows the rest: the peer sees a reply begin and never end, while the
// connection stays open.
type stallingConn struct {
	net.Conn
	mu     sync.Mutex
	budget int
}

func (c *stallingConn) Write(b []byte) (int, error) {
	c.mu.Lock()
	n := min(c.budget, len(b))
	c.budget -= n
	c.mu.Unlock()
	if n > 0 {
		if _, err := c.Conn.Write(b[:n]); err != nil {
			return 0, err
		}
	}
	return len(b), nil
}

// stallFirstListener makes the first connection it accepts a stallingConn.
type stallFirstListener struct {
	net.Listener
	budget int
	once   sync.Once
}

func (l *stallFirstListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return c, err
	}
	l.once.Do(func() { c = &stallingConn{Conn: c, budget: l.budget} })
	return c, nil
}

// A reply stalls mid-record (its mark and 10 bytes arrive, then nothing,
// the connection open): the soft call times out, and its major timeout
// resets the connection, so the next calls are answered on a new one
// instead of timing out behind the stalled record forever.
func TestClientSoftResetsStalledConnection(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	cl := &capturingListener{Listener: &stallFirstListener{Listener: ln, budget: 4 + 10}}
	s := NewServer(ServerOptions{})
	s.Register(testProg, 3, &testHandler{})
	go s.Serve(cl)
	t.Cleanup(func() { s.Close() })

	var logs logBuffer
	var stats statsLog
	c := dialClient(t, ln.Addr().String(), ClientOptions{Timeout: 100 * time.Millisecond, Retrans: 1,
		Logf: logs.Logf, Observer: stats.observe})
	ctx := context.Background()
	var res opaqueRes
	if err := c.Call(ctx, testProg, 3, procEcho, NoAuth, opaqueArg("stalls"), &res); !errors.Is(err, ErrTimeout) {
		t.Fatalf("call answered by a stalled record: err = %v, want ErrTimeout", err)
	}
	for i := range 3 {
		msg := fmt.Sprintf("call %d", i)
		if err := c.Call(ctx, testProg, 3, procEcho, NoAuth, opaqueArg(msg), &res); err != nil {
			t.Fatalf("%s after the stalled reply: %v\n%s", msg, err, logs.String())
		}
		if string(res.b) != msg {
			t.Fatalf("%s answered %q", msg, res.b)
		}
	}
	if n := len(cl.accepted()); n != 2 {
		t.Fatalf("%d connections, want the stalled one and its replacement", n)
	}
	for _, st := range stats.all()[1:] {
		if st.Timeouts != 0 || st.Transmissions != 1 {
			t.Fatalf("a call after the reset: %+v", st)
		}
	}
}

// The server side drops the connection with calls in flight: the client
// reconnects and resends them, same XIDs, and every call completes.
func TestClientReconnectResends(t *testing.T) {
	const n = 20
	var mu sync.Mutex
	firstConn := ""
	xidsFirst := map[uint32]bool{}
	xidsLater := map[uint32]bool{}
	allIn := make(chan struct{})
	h := &testHandler{hook: func(ctx context.Context, call *Call, reply []byte) ([]byte, bool, error) {
		mu.Lock()
		defer mu.Unlock()
		remote := call.Conn.RemoteAddr.String()
		if firstConn == "" {
			firstConn = remote
		}
		if remote == firstConn {
			xidsFirst[call.XID] = true
			if len(xidsFirst) == n {
				close(allIn)
			}
			return reply, true, ErrDrop
		}
		xidsLater[call.XID] = true
		return nil, false, nil
	}}
	var logs logBuffer
	_, ln := startServer(t, ServerOptions{}, h)
	var stats statsLog
	c := dialClient(t, ln.Addr().String(), ClientOptions{Timeout: 10 * time.Second, Logf: logs.Logf, Observer: stats.observe})
	var wg sync.WaitGroup
	errs := make(chan error, n)
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			var res u32Res
			if err := c.Call(context.Background(), testProg, 3, procSleep, NoAuth, u32Arg(i), &res); err != nil {
				errs <- err
			} else if res.v != uint32(i) {
				errs <- fmt.Errorf("call %d got %d", i, res.v)
			}
		}()
	}
	select {
	case <-allIn:
	case <-time.After(5 * time.Second):
		t.Fatal("calls did not arrive")
	}
	start := time.Now()
	ln.accepted()[0].Close()
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	if el := time.Since(start); el > 2*time.Second {
		t.Errorf("recovery took %v", el)
	}
	mu.Lock()
	for xid := range xidsFirst {
		if !xidsLater[xid] {
			t.Errorf("xid %#x not resent with the same xid", xid)
		}
	}
	mu.Unlock()
	if len(ln.accepted()) != 2 {
		t.Errorf("%d connections, want 2", len(ln.accepted()))
	}
	for _, s := range stats.all() {
		if s.Transmissions != 2 || s.Timeouts != 0 {
			t.Errorf("stats %+v, want 2 transmissions, no timeout", s)
		}
	}
	if !logs.contains("connection to") {
		t.Errorf("loss not logged:\n%s", logs.String())
	}
}

// The server goes away entirely and comes back on the same port.
func TestClientReconnectsAfterServerRestart(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	serve := func(ln net.Listener) (*Server, chan error) {
		s := NewServer(ServerOptions{})
		s.Register(testProg, 3, &testHandler{})
		done := make(chan error, 1)
		go func() { done <- s.Serve(ln) }()
		return s, done
	}
	s1, done1 := serve(ln)
	c := dialClient(t, addr, ClientOptions{Timeout: 2 * time.Second, Hard: true})
	if err := c.Call(context.Background(), testProg, 3, procNull, NoAuth, nil, nil); err != nil {
		t.Fatal(err)
	}
	s1.Close()
	<-done1
	result := make(chan error, 1)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		var res opaqueRes
		err := c.Call(ctx, testProg, 3, procEcho, NoAuth, opaqueArg("back"), &res)
		if err == nil && string(res.b) != "back" {
			err = fmt.Errorf("result %q", res.b)
		}
		result <- err
	}()
	time.Sleep(300 * time.Millisecond) // some dial attempts fail meanwhile
	ln2, err := net.Listen("tcp", addr)
	if err != nil {
		t.Skipf("port %s taken meanwhile: %v", addr, err)
	}
	s2, done2 := serve(ln2)
	defer func() { s2.Close(); <-done2 }()
	if err := <-result; err != nil {
		t.Fatal(err)
	}
}

func TestClientCancel(t *testing.T) {
	bh := newBlackhole(t)
	var stats statsLog
	c := dialClient(t, bh.addr(), ClientOptions{MaxInFlight: 1, Observer: stats.observe})
	ctx, cancel := context.WithCancel(context.Background())
	type result struct {
		err error
		at  time.Time
	}
	results := make(chan result, 2)
	for range 2 { // the second waits for the in-flight slot
		go func() {
			err := c.Call(ctx, testProg, 3, procNull, NoAuth, nil, nil)
			results <- result{err, time.Now()}
		}()
	}
	time.Sleep(100 * time.Millisecond)
	cancelled := time.Now()
	cancel()
	for range 2 {
		r := <-results
		if r.err != context.Canceled {
			t.Fatalf("err = %v, want context.Canceled", r.err)
		}
		if d := r.at.Sub(cancelled); d > 200*time.Millisecond {
			t.Fatalf("returned %v after cancel", d)
		}
	}
	// Waiting for the slot counts as Queue time.
	st := stats.all()
	if len(st) != 2 {
		t.Fatalf("%d observations", len(st))
	}
	for _, s := range st {
		if s.Err != context.Canceled {
			t.Fatalf("stats %+v", s)
		}
	}
	// The client remains usable: a later call is sent (and times out softly).
	ctx2, cancel2 := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel2()
	if err := c.Call(ctx2, testProg, 3, procNull, NoAuth, nil, nil); err != context.DeadlineExceeded {
		t.Fatalf("err = %v", err)
	}
}

func TestClientCloseFailsPending(t *testing.T) {
	bh := newBlackhole(t)
	check := leakCheck(t) // after the blackhole's own accept loop
	ctx := context.Background()
	c, err := Dial(ctx, bh.addr(), ClientOptions{MaxInFlight: 2})
	if err != nil {
		t.Fatal(err)
	}
	errs := make(chan error, 5)
	for range 5 {
		go func() { errs <- c.Call(ctx, testProg, 3, procNull, NoAuth, nil, nil) }()
	}
	time.Sleep(100 * time.Millisecond)
	start := time.Now()
	c.Close()
	for range 5 {
		if err := <-errs; err != ErrClosed {
			t.Fatalf("pending call: err = %v, want ErrClosed", err)
		}
	}
	if d := time.Since(start); d > time.Second {
		t.Fatalf("calls failed %v after Close", d)
	}
	if err := c.Call(ctx, testProg, 3, procNull, NoAuth, nil, nil); err != ErrClosed {
		t.Fatalf("call after Close: %v", err)
	}
	check()
}

func TestClientErrors(t *testing.T) {
	_, ln := startServer(t, ServerOptions{}, &testHandler{})
	c := dialClient(t, ln.Addr().String(), ClientOptions{Timeout: 5 * time.Second})
	ctx := context.Background()
	var ae *AcceptError
	var de *DeniedError

	err := c.Call(ctx, 999, 1, 0, NoAuth, nil, nil)
	if !errors.As(err, &ae) || ae.Stat != ProgUnavail {
		t.Errorf("unknown program: %v", err)
	}
	err = c.Call(ctx, testProg, 4, 0, NoAuth, nil, nil)
	if !errors.As(err, &ae) || ae.Stat != ProgMismatch || ae.Low != 3 || ae.High != 5 {
		t.Errorf("unknown version: %v", err)
	}
	err = c.Call(ctx, testProg, 3, 99, NoAuth, nil, nil)
	if !errors.As(err, &ae) || ae.Stat != ProcUnavail {
		t.Errorf("unknown procedure: %v", err)
	}
	err = c.Call(ctx, testProg, 3, procEcho, NoAuth, u32Arg(1000), nil)
	if !errors.As(err, &ae) || ae.Stat != GarbageArgs {
		t.Errorf("garbage args: %v", err)
	}
	err = c.Call(ctx, testProg, 3, procNull, OpaqueAuth{Flavor: 6}, nil, nil)
	if !errors.As(err, &de) || de.RejectStat != AuthError || de.Auth != AuthRejectedCred {
		t.Errorf("unsupported flavor: %v", err)
	}
	// NULL returns nothing: decoding a uint32 from it must fail, with context.
	err = c.Call(ctx, testProg, 3, procNull, NoAuth, nil, &u32Res{})
	if err == nil || !strings.Contains(err.Error(), fmt.Sprintf("rpc: decoding reply to prog %d vers 3 proc 0", testProg)) {
		t.Errorf("short results: %v", err)
	}
	// Trailing bytes after the results are tolerated.
	var one u32Res
	if err := c.Call(ctx, testProg, 3, procEcho, NoAuth, opaqueArg("abcdefgh"), &one); err != nil || one.v != 8 {
		t.Errorf("trailing results: %v, %d", err, one.v)
	}
	// AUTH_SYS goes through SysCred to the handler.
	var who whoRes
	if err := c.Call(ctx, testProg, 5, procWhoAmI, SysCred(501, 20, []uint32{12, 61}, "mac"), nil, &who); err != nil {
		t.Fatal(err)
	}
	if who.flavor != AuthSys || who.uid != 501 || who.gid != 20 || fmt.Sprint(who.gids) != "[12 61]" || who.machine != "mac" {
		t.Errorf("whoami: %+v", who)
	}
	// A request larger than MaxRecord is refused before sending.
	small := dialClient(t, ln.Addr().String(), ClientOptions{MaxRecord: 100})
	if err := small.Call(ctx, testProg, 3, procEcho, NoAuth, opaqueArg(make([]byte, 200)), nil); err == nil {
		t.Error("oversized request sent")
	}
}

type whoRes struct {
	flavor, uid, gid uint32
	gids             []uint32
	machine          string
}

func (w *whoRes) Decode(d *xdr.Decoder) {
	w.flavor, w.uid, w.gid = d.Uint32(), d.Uint32(), d.Uint32()
	n := d.ArrayLen(16, 4)
	for range n {
		w.gids = append(w.gids, d.Uint32())
	}
	w.machine = d.String(255)
}

// A reply arriving after its call gave up (cancelled by its caller) is
// dropped, and the connection goes on serving other calls.
func TestClientLateReplyDropped(t *testing.T) {
	h := &testHandler{gate: make(chan struct{})}
	_, ln := startServer(t, ServerOptions{}, h)
	var stats statsLog
	c := dialClient(t, ln.Addr().String(), ClientOptions{Timeout: 10 * time.Second, Observer: stats.observe})
	ctx := context.Background()
	short, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
	defer cancel()
	if err := c.Call(short, testProg, 3, procBlock, NoAuth, u32Arg(1), nil); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("err = %v, want DeadlineExceeded", err)
	}
	if st := stats.all(); len(st) != 1 || st[0].Transmissions != 1 || st[0].Timeouts != 0 {
		t.Fatalf("one transmission, no timeout: %+v", st)
	}
	close(h.gate)                      // the late reply goes out now
	time.Sleep(100 * time.Millisecond) // and arrives meanwhile
	var res u32Res
	if err := c.Call(ctx, testProg, 3, procBlock, NoAuth, u32Arg(2), &res); err != nil || res.v != 2 {
		t.Fatalf("after late reply: %v, %d", err, res.v)
	}
	if n := len(ln.accepted()); n != 1 {
		t.Fatalf("%d connections", n)
	}
}

func TestClientObserverSuccess(t *testing.T) {
	_, ln := startServer(t, ServerOptions{}, &testHandler{})
	var stats statsLog
	c := dialClient(t, ln.Addr().String(), ClientOptions{Observer: stats.observe})
	if err := c.Call(context.Background(), testProg, 3, procNull, NoAuth, nil, nil); err != nil {
		t.Fatal(err)
	}
	st := stats.all()
	if len(st) != 1 {
		t.Fatalf("%d observations", len(st))
	}
	s := st[0]
	if s.Transmissions != 1 || s.Timeouts != 0 || s.BytesSent != 4+40 || s.BytesReceived != 4+24 || s.Err != nil {
		t.Fatalf("stats %+v", s)
	}
	if s.RTT <= 0 || s.Queue < 0 || s.Execute < s.RTT || s.Execute < s.Queue {
		t.Fatalf("times: queue %v rtt %v execute %v", s.Queue, s.RTT, s.Execute)
	}
}

func TestClientUnreachable(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if c, err := Dial(ctx, addr, ClientOptions{}); err == nil {
		c.Close()
		t.Fatal("Dial to a closed port succeeded")
	}
	if _, err := NewClient(ctx, ClientOptions{}); err == nil {
		t.Fatal("NewClient without Dial succeeded")
	}
}

func TestSysCredRoundTrip(t *testing.T) {
	cred := SysCred(1, 2, []uint32{3, 4}, "box")
	call := Call{Cred: cred}
	p, ok := call.AuthSys()
	if !ok || p.UID != 1 || p.GID != 2 || len(p.GIDs) != 2 || p.GIDs[1] != 4 || p.Machine != "box" {
		t.Fatalf("%+v %v", p, ok)
	}
	if !validAuthSys(cred.Body) {
		t.Fatal("SysCred body fails validation")
	}
	if _, ok := (&Call{Cred: NoAuth}).AuthSys(); ok {
		t.Fatal("AUTH_NONE decoded as AUTH_SYS")
	}
}

func BenchmarkNullRoundTrip(b *testing.B) {
	_, ln := startServer(b, ServerOptions{}, &testHandler{})
	c := dialClient(b, ln.Addr().String(), ClientOptions{})
	ctx := context.Background()
	b.ReportAllocs()
	for b.Loop() {
		if err := c.Call(ctx, testProg, 3, procNull, NoAuth, nil, nil); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkNull16InFlight(b *testing.B) {
	_, ln := startServer(b, ServerOptions{}, &testHandler{})
	c := dialClient(b, ln.Addr().String(), ClientOptions{})
	ctx := context.Background()
	b.ReportAllocs()
	var next atomic.Int64
	b.ResetTimer()
	var wg sync.WaitGroup
	for range 16 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for next.Add(1) <= int64(b.N) {
				if err := c.Call(ctx, testProg, 3, procNull, NoAuth, nil, nil); err != nil {
					b.Error(err)
					return
				}
			}
		}()
	}
	wg.Wait()
}

func BenchmarkEcho4KRoundTrip(b *testing.B) {
	_, ln := startServer(b, ServerOptions{}, &testHandler{})
	c := dialClient(b, ln.Addr().String(), ClientOptions{})
	ctx := context.Background()
	arg := opaqueArg(make([]byte, 4096))
	var res opaqueRes
	b.ReportAllocs()
	b.SetBytes(4096)
	for b.Loop() {
		if err := c.Call(ctx, testProg, 3, procEcho, NoAuth, arg, &res); err != nil {
			b.Fatal(err)
		}
	}
}
