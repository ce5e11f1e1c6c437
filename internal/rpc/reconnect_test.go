package rpc

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"hushfs/internal/xdr"
)

// OnReconnect (a session binding a new connection before anything else
// goes out on it) and NoRetransmit (NFSv4.1's resend only after a
// connection loss).

// The hook's call goes out on the new connection before any call pending
// from the old one is resent, and before a call made meanwhile: the server
// sees the hook's call, then the hook's end, then the rest. It goes out
// though every in-flight slot is taken.
func TestClientOnReconnectFirst(t *testing.T) {
	t.Cleanup(leakCheck(t))
	const n = 10
	var mu sync.Mutex
	var order []string // what the second connection saw, in order
	firstConn := ""
	var firstCalls int
	allIn := make(chan struct{})
	h := &testHandler{hook: func(ctx context.Context, call *Call, reply []byte) ([]byte, bool, error) {
		mu.Lock()
		defer mu.Unlock()
		remote := call.Conn.RemoteAddr.String()
		if firstConn == "" {
			firstConn = remote
		}
		if remote == firstConn {
			if firstCalls++; firstCalls == n {
				close(allIn)
			}
			return reply, true, ErrDrop // answered on the next connection
		}
		d := xdr.NewDecoder(call.Args)
		switch call.Proc {
		case procEcho:
			order = append(order, string(d.Opaque(100)))
		case procSleep:
			order = append(order, fmt.Sprintf("resent %d", d.Uint32()))
		}
		return nil, false, nil
	}}
	_, ln := startServer(t, ServerOptions{}, h)
	var c *Client
	hookDone := make(chan error, 1)
	hook := func(ctx context.Context, conn *Conn) error {
		// A call made while the hook runs takes the last in-flight slot
		// and waits for the hook.
		go func() {
			var res opaqueRes
			hookDone <- c.Call(context.Background(), testProg, 3, procEcho, NoAuth, opaqueArg("made during the hook"), &res)
		}()
		if !eventually(func() bool {
			c.mu.Lock()
			defer c.mu.Unlock()
			return len(c.pending) == n+1
		}) {
			t.Error("the call made during the hook is not pending")
		}
		time.Sleep(50 * time.Millisecond) // time to go out, if it could
		var res opaqueRes
		if err := conn.Call(ctx, testProg, 3, procEcho, NoAuth, opaqueArg("bind"), &res); err != nil {
			return err
		}
		time.Sleep(50 * time.Millisecond)
		mu.Lock()
		order = append(order, "hook returns")
		mu.Unlock()
		return nil
	}
	c = dialClient(t, ln.Addr().String(), ClientOptions{Timeout: 10 * time.Second, MaxInFlight: n + 1, OnReconnect: hook})
	var wg sync.WaitGroup
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			var res u32Res
			if err := c.Call(context.Background(), testProg, 3, procSleep, NoAuth, u32Arg(i), &res); err != nil || res.v != uint32(i) {
				t.Errorf("call %d: %v %d", i, err, res.v)
			}
		}()
	}
	select {
	case <-allIn:
	case <-time.After(5 * time.Second):
		t.Fatal("calls did not arrive")
	}
	ln.accepted()[0].Close()
	wg.Wait()
	if err := <-hookDone; err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(order) != n+3 || order[0] != "bind" || order[1] != "hook returns" {
		t.Fatalf("the new connection saw %q", order)
	}
	rest := map[string]bool{}
	for _, s := range order[2:] {
		rest[s] = true
	}
	if len(rest) != n+1 || !rest["made during the hook"] {
		t.Fatalf("after the hook: %q", order[2:])
	}
}

// A hook that fails closes its connection and another is tried; a hook's
// call whose connection dies fails at once with ErrConnLost.
func TestClientOnReconnectFails(t *testing.T) {
	t.Cleanup(leakCheck(t))
	var firstMu sync.Mutex
	first := ""
	h := &testHandler{hook: func(ctx context.Context, call *Call, reply []byte) ([]byte, bool, error) {
		firstMu.Lock()
		if first == "" {
			first = call.Conn.RemoteAddr.String()
		}
		onFirst := first == call.Conn.RemoteAddr.String()
		firstMu.Unlock()
		switch {
		case call.Proc == procBlock:
			<-ctx.Done() // until its connection goes
			return reply, true, ErrDrop
		case call.Proc == procEcho && onFirst:
			return reply, true, ErrDrop // answered on a later connection
		}
		return nil, false, nil
	}}
	_, ln := startServer(t, ServerOptions{}, h)
	var logs logBuffer
	var mu sync.Mutex
	var hookErrs []error
	hook := func(ctx context.Context, conn *Conn) error {
		mu.Lock()
		calls := len(hookErrs)
		mu.Unlock()
		var err error
		switch calls {
		case 0: // the server drops the connection under the hook's call
			go func() {
				time.Sleep(50 * time.Millisecond) // the call is sent meanwhile
				ln.accepted()[1].Close()
			}()
			err = conn.Call(ctx, testProg, 3, procBlock, NoAuth, u32Arg(1), nil)
		case 1:
			err = errors.New("session not ready")
		}
		mu.Lock()
		hookErrs = append(hookErrs, err)
		mu.Unlock()
		return err
	}
	c := dialClient(t, ln.Addr().String(), ClientOptions{Timeout: 10 * time.Second, OnReconnect: hook, Logf: logs.Logf})
	if err := c.Call(context.Background(), testProg, 3, procNull, NoAuth, nil, nil); err != nil {
		t.Fatal(err)
	}
	// A pending call makes the client reconnect after the drop.
	done := make(chan error, 1)
	go func() {
		var res opaqueRes
		done <- c.Call(context.Background(), testProg, 3, procEcho, NoAuth, opaqueArg("x"), &res)
	}()
	waitFor(t, "the call pending", func() bool {
		c.mu.Lock()
		defer c.mu.Unlock()
		return len(c.pending) == 1
	})
	ln.accepted()[0].Close()
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the call never completed")
	}
	mu.Lock()
	defer mu.Unlock()
	if len(hookErrs) != 3 || !errors.Is(hookErrs[0], ErrConnLost) || hookErrs[1] == nil || hookErrs[2] != nil {
		t.Fatalf("hook results %v", hookErrs)
	}
	if n := len(ln.accepted()); n != 4 {
		t.Fatalf("%d connections, want 4 (the first, two whose hooks failed, the one used)", n)
	}
	if !logs.contains("session not ready") {
		t.Fatalf("hook error not logged:\n%s", logs.String())
	}
}

// Close while a hook runs: its context is cancelled and Close returns.
func TestClientCloseDuringOnReconnect(t *testing.T) {
	t.Cleanup(leakCheck(t))
	_, ln := startServer(t, ServerOptions{}, &testHandler{})
	entered := make(chan struct{})
	hook := func(ctx context.Context, conn *Conn) error {
		close(entered)
		<-ctx.Done()
		return conn.Call(context.Background(), testProg, 3, procNull, NoAuth, nil, nil)
	}
	c := dialClient(t, ln.Addr().String(), ClientOptions{Timeout: 10 * time.Second, OnReconnect: hook})
	c.Register(cbProg, 1, &testHandler{}) // reconnect without a call pending
	waitFor(t, "the connection accepted", func() bool { return len(ln.accepted()) == 1 })
	ln.accepted()[0].Close()
	select {
	case <-entered:
	case <-time.After(5 * time.Second):
		t.Fatal("no reconnection")
	}
	closed := make(chan struct{})
	go func() { c.Close(); close(closed) }()
	select {
	case <-closed:
	case <-time.After(5 * time.Second):
		t.Fatal("Close waits for the hook")
	}
}

// NoRetransmit: a call the server never answers is not sent again on its
// connection, timeouts notwithstanding; after the connection drops it is
// resent once, same XID, on the new one. Without the option (NFSv3) it is
// sent again on the same connection.
func TestClientNoRetransmit(t *testing.T) {
	for _, noRetrans := range []bool{true, false} {
		t.Run(fmt.Sprintf("NoRetransmit=%v", noRetrans), func(t *testing.T) {
			t.Cleanup(leakCheck(t))
			rs := newRawServer(t, rawSilent)
			var stats statsLog
			// Timeouts at 60, 180, 360, 600, 900, 1260 ms; the major one
			// (which would reset the connection) at 1680 ms.
			c := dialClient(t, rs.addr(), ClientOptions{Timeout: 60 * time.Millisecond, Retrans: 6, Hard: true,
				NoRetransmit: noRetrans, Observer: stats.observe})
			ctx, cancel := context.WithCancel(context.Background())
			done := make(chan error, 1)
			go func() { done <- c.Call(ctx, testProg, 3, procNull, NoAuth, nil, nil) }()
			p1 := rs.next(t)
			xid := p1.firstXID(t)
			time.Sleep(400 * time.Millisecond) // three timeouts
			if n := p1.seen(xid); noRetrans && n != 1 {
				t.Fatalf("sent %d times on its connection", n)
			} else if !noRetrans && n < 2 {
				t.Fatalf("sent %d times on its connection, want retransmissions", n)
			}
			p1.nc.Close()
			p2 := rs.next(t)
			if got := p2.firstXID(t); got != xid {
				t.Fatalf("resent as xid %#x, want %#x", got, xid)
			}
			time.Sleep(400 * time.Millisecond) // two more timeouts
			if n := p2.seen(xid); noRetrans && n != 1 {
				t.Fatalf("sent %d times on the new connection", n)
			}
			cancel()
			if err := <-done; !errors.Is(err, context.Canceled) {
				t.Fatal(err)
			}
			if st := stats.all(); noRetrans && (len(st) != 1 || st[0].Transmissions != 2) {
				t.Fatalf("stats %+v, want 2 transmissions", st)
			}
		})
	}
}

// NoRetransmit with a hard major timeout: the stale connection is reset
// and the call resent on the next one; every connection carries it once.
func TestClientNoRetransmitMajorTimeout(t *testing.T) {
	t.Cleanup(leakCheck(t))
	rs := newRawServer(t, rawSilent)
	c := dialClient(t, rs.addr(), ClientOptions{Timeout: 50 * time.Millisecond, Retrans: 1, Hard: true, NoRetransmit: true})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- c.Call(ctx, testProg, 3, procNull, NoAuth, nil, nil) }()
	p1 := rs.next(t)
	xid := p1.firstXID(t)
	p2 := rs.next(t) // after the major timeout (150 ms)
	if got := p2.firstXID(t); got != xid {
		t.Fatalf("resent as xid %#x, want %#x", got, xid)
	}
	time.Sleep(200 * time.Millisecond)
	cancel()
	<-done
	for i, p := range []*rawPeer{p1, p2} {
		if n := p.seen(xid); n != 1 {
			t.Errorf("connection %d carried the call %d times", i+1, n)
		}
	}
}

// A soft client with NoRetransmit fails after its major timeout having
// sent the call once.
func TestClientNoRetransmitSoft(t *testing.T) {
	t.Cleanup(leakCheck(t))
	rs := newRawServer(t, rawSilent)
	var stats statsLog
	c := dialClient(t, rs.addr(), ClientOptions{Timeout: 50 * time.Millisecond, Retrans: 2, NoRetransmit: true, Observer: stats.observe})
	err := c.Call(context.Background(), testProg, 3, procNull, NoAuth, nil, nil)
	if !errors.Is(err, ErrTimeout) {
		t.Fatal(err)
	}
	p := rs.next(t)
	if n := p.seen(p.firstXID(t)); n != 1 {
		t.Fatalf("sent %d times", n)
	}
	if st := stats.all(); len(st) != 1 || st[0].Transmissions != 1 || st[0].Timeouts != 3 {
		t.Fatalf("stats %+v", st)
	}
}

// eventually reports whether cond holds within 5 s; for goroutines other
// than the test's, which must not call t.Fatal.
func eventually(cond func() bool) bool {
	for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline); time.Sleep(5 * time.Millisecond) {
		if cond() {
			return true
		}
	}
	return false
}
