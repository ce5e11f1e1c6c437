package rpc

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"hushfs/internal/xdr"
)

// The back channel: a real Server calls its real Client back on the
// client's own connection (NFSv4.1's CB program on the fore channel's
// connection).

const (
	// cbProg is the program the client serves (with testHandler), in the
	// transient range NFSv4.1 clients pick their callback program from.
	cbProg = 0x40000123

	procRelay    = 7 // opaque in: the server echoes it through the client's cbProg and returns the answer
	procRelayWho = 8 // the server calls the client's whoami with an AUTH_SYS credential and returns the answer
)

// relayHandler is the server side: testHandler, plus the relay procedures,
// which call the client back on the connection the call came in on. Every
// BackChannel it sees is remembered.
type relayHandler struct {
	testHandler
	mu    sync.Mutex
	backs map[*BackChannel]bool
}

func newRelayHandler() *relayHandler { return &relayHandler{backs: map[*BackChannel]bool{}} }

func (h *relayHandler) back(call *Call) *BackChannel {
	b := call.Conn.BackChannel()
	h.mu.Lock()
	h.backs[b] = true
	h.mu.Unlock()
	return b
}

// only returns the one BackChannel seen.
func (h *relayHandler) only(t testing.TB) *BackChannel {
	t.Helper()
	h.mu.Lock()
	defer h.mu.Unlock()
	if len(h.backs) != 1 {
		t.Fatalf("%d back channels seen, want 1", len(h.backs))
	}
	for b := range h.backs {
		return b
	}
	return nil
}

func (h *relayHandler) ServeRPC(ctx context.Context, call *Call, reply []byte) ([]byte, error) {
	switch call.Proc {
	case procRelay:
		d := xdr.NewDecoder(call.Args)
		p := d.Opaque(1 << 16)
		if d.Err() != nil {
			return reply, ErrGarbageArgs
		}
		var res opaqueRes
		if err := h.back(call).Call(ctx, cbProg, 1, procEcho, NoAuth, opaqueArg(p), &res); err != nil {
			return reply, err
		}
		return xdr.AppendOpaque(reply, res.b), nil
	case procRelayWho:
		var who whoRes
		cred := SysCred(7001, 7002, []uint32{7003}, "server")
		if err := h.back(call).Call(ctx, cbProg, 1, procWhoAmI, cred, nil, &who); err != nil {
			return reply, err
		}
		reply = xdr.AppendUint32(reply, who.flavor)
		reply = xdr.AppendUint32(reply, who.uid)
		reply = xdr.AppendUint32(reply, who.gid)
		reply = xdr.AppendUint32(reply, 0) // gids
		return xdr.AppendString(reply, who.machine), nil
	}
	return h.testHandler.ServeRPC(ctx, call, reply)
}

// startPair starts a relay server and a client of it serving cbProg with
// cb. The leak check runs after both are closed.
func startPair(t *testing.T, sopts ServerOptions, copts ClientOptions, cb Handler) (*relayHandler, *Client, *capturingListener) {
	t.Helper()
	t.Cleanup(leakCheck(t))
	h := newRelayHandler()
	_, ln := startServer(t, sopts, h)
	c := dialClient(t, ln.Addr().String(), copts)
	c.Register(cbProg, 1, cb)
	return h, c, ln
}

// A handler calls the client back during the call and waits for the
// answer; the credential it chose reaches the client's handler.
func TestBackChannelDuringCall(t *testing.T) {
	var mu sync.Mutex // (the race detector sees no order through sockets)
	var cbConn string
	cb := &testHandler{hook: func(ctx context.Context, call *Call, reply []byte) ([]byte, bool, error) {
		mu.Lock()
		defer mu.Unlock()
		cbConn = call.Conn.RemoteAddr.String() + ">" + call.Conn.LocalAddr.String()
		if call.Conn.BackChannel() != nil {
			t.Error("a client's call from its server has a back channel of its own")
		}
		return nil, false, nil
	}}
	h, c, ln := startPair(t, ServerOptions{}, ClientOptions{Timeout: 5 * time.Second}, cb)
	ctx := context.Background()
	var res opaqueRes
	if err := c.Call(ctx, testProg, 3, procRelay, NoAuth, opaqueArg("there and back"), &res); err != nil {
		t.Fatal(err)
	}
	if string(res.b) != "there and back" {
		t.Fatalf("relayed %q", res.b)
	}
	var who whoRes
	if err := c.Call(ctx, testProg, 3, procRelayWho, NoAuth, nil, &who); err != nil {
		t.Fatal(err)
	}
	if who.flavor != AuthSys || who.uid != 7001 || who.gid != 7002 || who.machine != "server" {
		t.Fatalf("the client's handler saw %+v", who)
	}
	// Both calls back came on the client's one connection.
	conns := ln.accepted()
	if len(conns) != 1 {
		t.Fatalf("%d connections", len(conns))
	}
	mu.Lock()
	if want := conns[0].LocalAddr().String() + ">" + conns[0].RemoteAddr().String(); cbConn != want {
		t.Errorf("call back on %s, want %s", cbConn, want)
	}
	mu.Unlock()
	h.only(t)
}

// Hundreds of calls both ways at once on one connection: the client's
// plain calls, its calls whose handlers call back, and calls the server
// makes from goroutines of its own. Every one is answered with its own
// payload (records never interleave, replies never cross).
func TestBackChannelConcurrent(t *testing.T) {
	const n = 300
	var cbPeak, cbNow atomic.Int32
	cb := &testHandler{hook: func(ctx context.Context, call *Call, reply []byte) ([]byte, bool, error) {
		v := cbNow.Add(1)
		defer cbNow.Add(-1)
		for p := cbPeak.Load(); v > p && !cbPeak.CompareAndSwap(p, v); p = cbPeak.Load() {
		}
		return nil, false, nil
	}}
	// The handlers that wait for a call back hold their connection's slots
	// meanwhile: the client sends fewer calls at once than the server reads
	// (see BackChannel).
	h, c, ln := startPair(t, ServerOptions{MaxInFlightPerConn: 64}, ClientOptions{Timeout: 10 * time.Second, MaxInFlight: 48}, cb)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	var res opaqueRes
	if err := c.Call(ctx, testProg, 3, procRelay, NoAuth, opaqueArg("first"), &res); err != nil {
		t.Fatal(err)
	}
	back := h.only(t)

	var wg sync.WaitGroup
	errs := make(chan error, 3*n)
	for i := range n {
		wg.Add(3)
		go func() { // the client's call, relayed back
			defer wg.Done()
			want := fmt.Sprintf("relay %d %s", i, bytes.Repeat([]byte{'r'}, i*7))
			var res opaqueRes
			if err := c.Call(ctx, testProg, 3, procRelay, NoAuth, opaqueArg(want), &res); err != nil {
				errs <- fmt.Errorf("relay %d: %w", i, err)
			} else if string(res.b) != want {
				errs <- fmt.Errorf("relay %d: got %.40q", i, res.b)
			}
		}()
		go func() { // the client's plain call
			defer wg.Done()
			want := fmt.Sprintf("fore %d %s", i, bytes.Repeat([]byte{'f'}, i*11))
			var res opaqueRes
			if err := c.Call(ctx, testProg, 3, procEcho, NoAuth, opaqueArg(want), &res); err != nil {
				errs <- fmt.Errorf("fore %d: %w", i, err)
			} else if string(res.b) != want {
				errs <- fmt.Errorf("fore %d: got %.40q", i, res.b)
			}
		}()
		go func() { // the server's call
			defer wg.Done()
			want := fmt.Sprintf("back %d %s", i, bytes.Repeat([]byte{'b'}, i*5))
			var res opaqueRes
			if err := back.Call(ctx, cbProg, 1, procEcho, NoAuth, opaqueArg(want), &res); err != nil {
				errs <- fmt.Errorf("back %d: %w", i, err)
			} else if string(res.b) != want {
				errs <- fmt.Errorf("back %d: got %.40q", i, res.b)
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	if len(ln.accepted()) != 1 {
		t.Errorf("%d connections, want 1", len(ln.accepted()))
	}
	if p := cbPeak.Load(); p > 16 {
		t.Errorf("%d calls back served at once, over MaxBackCallsPerConn 16", p)
	}
}

// A client that does not answer: the server's call times out (the handler
// that made it returns), the connection goes on, nothing is left behind.
func TestBackChannelNoAnswer(t *testing.T) {
	cb := &testHandler{hook: func(ctx context.Context, call *Call, reply []byte) ([]byte, bool, error) {
		if call.Proc == procEcho {
			return reply, true, ErrDrop // never answered
		}
		return nil, false, nil
	}}
	const timeout = 300 * time.Millisecond
	h, c, _ := startPair(t, ServerOptions{BackTimeout: timeout}, ClientOptions{Timeout: 10 * time.Second}, cb)
	ctx := context.Background()
	start := time.Now()
	var res opaqueRes
	err := c.Call(ctx, testProg, 3, procRelay, NoAuth, opaqueArg("unanswered"), &res)
	var ae *AcceptError
	if !errors.As(err, &ae) || ae.Stat != SystemErr { // the handler's error, answered SYSTEM_ERR
		t.Fatalf("relay of an unanswered call: %v", err)
	}
	if el := time.Since(start); el < timeout || el > timeout+5*time.Second {
		t.Fatalf("the handler returned after %v, want about %v", el, timeout)
	}
	back := h.only(t)
	base := runtime.NumGoroutine() // (the server's workers have started: it answered)
	// Many more, from the server's own goroutines, all at once: each
	// times out; places are bounded (16), so some wait for one first.
	var wg sync.WaitGroup
	var timedOut atomic.Int32
	for range 40 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			err := back.Call(ctx, cbProg, 1, procEcho, NoAuth, opaqueArg("x"), nil)
			if errors.Is(err, ErrTimeout) {
				timedOut.Add(1)
			} else {
				t.Errorf("unanswered call: %v", err)
			}
		}()
	}
	wg.Wait()
	if timedOut.Load() != 40 {
		t.Fatalf("%d of 40 timed out", timedOut.Load())
	}
	back.mu.Lock()
	pending := len(back.pending)
	back.mu.Unlock()
	if pending != 0 || len(back.sem) != 0 {
		t.Fatalf("after the timeouts: %d calls pending, %d places taken", pending, len(back.sem))
	}
	deadline := time.Now().Add(5 * time.Second)
	for runtime.NumGoroutine() > base && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	if n := runtime.NumGoroutine(); n > base {
		buf := make([]byte, 1<<20)
		t.Fatalf("%d goroutines after the timeouts, %d before\n%s", n, base, buf[:runtime.Stack(buf, true)])
	}
	// The connection still works both ways.
	var who whoRes
	if err := c.Call(ctx, testProg, 3, procRelayWho, NoAuth, nil, &who); err != nil || who.uid != 7001 {
		t.Fatalf("after the timeouts: %v %+v", err, who)
	}
}

// The connection's death fails the calls waiting on it at once, not at
// their timeout; later calls fail at once too. The client may close it
// (the server reads EOF) or it may break under the server.
func TestBackChannelConnDeath(t *testing.T) {
	for _, how := range []string{"client closes", "server side breaks"} {
		t.Run(how, func(t *testing.T) {
			cb, entered := blockingHandler()
			h, c, ln := startPair(t, ServerOptions{}, ClientOptions{Timeout: 10 * time.Second}, cb)
			ctx := context.Background()
			if err := c.Call(ctx, testProg, 3, procRelay, NoAuth, opaqueArg("hello"), &opaqueRes{}); err != nil {
				t.Fatal(err)
			}
			back := h.only(t)
			done := make(chan error, 1)
			go func() { done <- back.Call(ctx, cbProg, 1, procBlock, NoAuth, u32Arg(1), nil) }()
			<-entered
			start := time.Now()
			if how == "client closes" {
				c.Close()
			} else {
				ln.accepted()[0].Close()
			}
			select {
			case err := <-done:
				if !errors.Is(err, ErrConnLost) {
					t.Fatalf("pending call: %v", err)
				}
			case <-time.After(5 * time.Second):
				t.Fatal("the pending call outlived its connection")
			}
			if el := time.Since(start); el > 2*time.Second {
				t.Fatalf("failed after %v", el)
			}
			select {
			case <-back.Done():
			case <-time.After(time.Second):
				t.Fatal("Done not closed")
			}
			if err := back.Call(ctx, cbProg, 1, procNull, NoAuth, nil, nil); !errors.Is(err, ErrConnLost) {
				t.Fatalf("call on a dead connection: %v", err)
			}
		})
	}
}

// At most MaxBackCallsPerConn calls are on the wire to one client; the
// rest wait for a place and go out as places free.
func TestBackChannelBounded(t *testing.T) {
	var in atomic.Int32 // calls that reached the client's handler
	cb := &testHandler{gate: make(chan struct{})}
	cb.hook = func(ctx context.Context, call *Call, reply []byte) ([]byte, bool, error) {
		in.Add(1)
		return nil, false, nil
	}
	h, c, _ := startPair(t, ServerOptions{MaxBackCallsPerConn: 3}, ClientOptions{Timeout: 10 * time.Second}, cb)
	ctx := context.Background()
	if err := c.Call(ctx, testProg, 3, procRelay, NoAuth, opaqueArg("hello"), &opaqueRes{}); err != nil {
		t.Fatal(err)
	}
	in.Store(0)
	back := h.only(t)
	var wg sync.WaitGroup
	for i := range 10 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			var res u32Res
			if err := back.Call(ctx, cbProg, 1, procBlock, NoAuth, u32Arg(i), &res); err != nil || res.v != uint32(i) {
				t.Errorf("call %d: %v, %d", i, err, res.v)
			}
		}()
	}
	waitFor(t, "3 calls at the client", func() bool { return in.Load() == 3 })
	time.Sleep(100 * time.Millisecond) // no fourth comes
	if v := in.Load(); v != 3 {
		t.Fatalf("%d calls reached the client, want 3", v)
	}
	close(cb.gate)
	wg.Wait()
}

// A client that closes its sending side while the server's call to it is
// pending can never answer: the call fails at once, not at its timeout.
func TestBackChannelClientHalfCloses(t *testing.T) {
	t.Cleanup(leakCheck(t))
	_, ln := startServer(t, ServerOptions{BackTimeout: 20 * time.Second}, newRelayHandler())
	rc := dialRaw(t, ln.Addr())
	rc.send(newCall(42, procRelay, xdr.AppendOpaque(nil, []byte("x"))).bytes())
	rc.nc.SetReadDeadline(time.Now().Add(5 * time.Second))
	rec, err := ReadRecord(rc.nc, nil, DefaultMaxRecord)
	if err != nil {
		t.Fatal(err)
	}
	d := xdr.NewDecoder(rec)
	d.Uint32() // the server's own XID
	if mt, rv, prog, vers, proc := d.Uint32(), d.Uint32(), d.Uint32(), d.Uint32(), d.Uint32(); d.Err() != nil ||
		mt != MsgCall || rv != RPCVersion || prog != cbProg || vers != 1 || proc != procEcho {
		t.Fatalf("the server's call: %x", rec)
	}
	start := time.Now()
	rc.nc.(interface{ CloseWrite() error }).CloseWrite()
	r := rc.recv()
	if r.xid != 42 || r.acceptStat != SystemErr {
		t.Fatalf("relay answered %+v", r)
	}
	if el := time.Since(start); el > 2*time.Second {
		t.Fatalf("answered after %v", el)
	}
}
