package rpc

import (
	"context"
	"net"
	"runtime"
	"testing"
	"time"

	"hushfs/internal/xdr"
)

const procGoexit = 7 // the handler ends its goroutine (test hook)

// records concatenates calls into one write, so that the server finds the
// later ones already buffered when it reads the first.
func records(calls ...callMsg) []byte {
	var b []byte
	for _, c := range calls {
		b = append(b, record(c)...)
	}
	return b
}

// A lone call on a connection runs on the connection's reader: it is
// answered even when every worker is busy and the work queue is full.
func TestServerInlineWhenWorkersBusy(t *testing.T) {
	entered := make(chan uint32, 4)
	h := &testHandler{gate: make(chan struct{})}
	h.hook = func(ctx context.Context, call *Call, reply []byte) ([]byte, bool, error) {
		if call.Proc == procBlock {
			entered <- call.XID
		}
		return nil, false, nil
	}
	_, ln := startServer(t, ServerOptions{Workers: 1}, h)
	busy := dialRaw(t, ln.Addr())
	// Three calls at once: none runs inline (the next is already
	// buffered, or one is in flight); the worker takes the first, the
	// queue (one place) the second.
	busy.write(records(newCall(1, procBlock, u32(1)), newCall(2, procBlock, u32(2)), newCall(3, procBlock, u32(3))))
	if xid := <-entered; xid != 1 {
		t.Fatalf("first blocked call is %d", xid)
	}
	lone := dialRaw(t, ln.Addr())
	lone.send(newCall(10, procEcho, xdr.AppendOpaque(nil, []byte("inline"))).bytes())
	if got := lone.recv(); got.xid != 10 {
		t.Fatalf("lone call: %+v", got)
	}
	close(h.gate)
	seen := map[uint32]bool{}
	for range 3 {
		seen[busy.recv().xid] = true
	}
	if len(seen) != 3 {
		t.Fatalf("replies for %v", seen)
	}
}

// An inline call that takes long hands the reading of its connection to a
// new goroutine: later calls on the connection are answered meanwhile, and
// the connection goes on working after it finishes.
func TestServerInlineHandsOver(t *testing.T) {
	check := leakCheck(t)
	h, entered := blockingHandler()
	s, ln := startServer(t, ServerOptions{Workers: 2}, h)
	rc := dialRaw(t, ln.Addr())
	rc.send(newCall(1, procBlock, u32(7)).bytes())
	<-entered // running, on the reader: nothing else was in flight
	start := time.Now()
	for i := uint32(2); i < 5; i++ {
		rc.send(newCall(i, procEcho, xdr.AppendOpaque(nil, []byte("x"))).bytes())
		if got := rc.recv(); got.xid != i {
			t.Fatalf("call behind the blocked one: xid %d, want %d", got.xid, i)
		}
	}
	t.Logf("3 calls answered behind a blocked inline call in %v", time.Since(start))
	close(h.gate)
	if got := rc.recv(); got.xid != 1 {
		t.Fatalf("the blocked call: xid %d", got.xid)
	}
	for i := uint32(10); i < 20; i++ {
		rc.send(newCall(i, procNull, nil).bytes())
		if got := rc.recv(); got.xid != i {
			t.Fatalf("after the handover: xid %d, want %d", got.xid, i)
		}
	}
	// (The server counts a reply's bytes as released once its write
	// has returned, which may be after the client has read it.)
	waitFor(t, "nothing buffered", func() bool { return s.Stats().Buffered == 0 })
	if st := s.Stats(); st.ConnsOpen != 1 {
		t.Fatalf("stats %+v: want 1 connection", st)
	}
	rc.nc.Close()
	waitFor(t, "the connection to go", func() bool { return s.numConns() == 0 })
	s.Close()
	check()
}

// A handler that ends its goroutine instead of returning (as one does
// that cannot restore its thread's credentials) gets no reply: its
// connection is closed, a worker so lost is replaced, and the server goes
// on serving, holding nothing for the lost call.
func TestServerHandlerGoexit(t *testing.T) {
	check := leakCheck(t)
	var logs logBuffer
	h := &testHandler{hook: func(ctx context.Context, call *Call, reply []byte) ([]byte, bool, error) {
		if call.Proc == procGoexit {
			runtime.Goexit()
		}
		return nil, false, nil
	}}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s := NewServer(ServerOptions{Workers: 1, Logf: logs.Logf})
	s.Register(testProg, 3, h)
	served := make(chan error, 1)
	go func() { served <- s.Serve(ln) }()

	// On the reader (a lone call), then on the only worker (the call
	// after it is already buffered).
	for _, batch := range [][]callMsg{
		{newCall(1, procGoexit, nil)},
		{newCall(1, procGoexit, nil), newCall(2, procNull, nil)},
	} {
		rc := dialRaw(t, ln.Addr())
		rc.write(records(batch...))
		rc.expectClosed()
		// Pipelined calls: the first goes to the worker, which must
		// exist.
		ok := dialRaw(t, ln.Addr())
		ok.write(records(newCall(5, procNull, nil), newCall(6, procNull, nil), newCall(7, procNull, nil)))
		seen := map[uint32]bool{}
		for range 3 {
			seen[ok.recv().xid] = true
		}
		if len(seen) != 3 {
			t.Fatalf("after a lost handler: replies for %v", seen)
		}
		waitFor(t, "nothing held", func() bool { return s.Stats().Buffered == 0 })
		ok.nc.Close()
		waitFor(t, "connections to go", func() bool { return s.numConns() == 0 })
	}
	if !logs.contains("ended its goroutine") {
		t.Errorf("not logged:\n%s", logs.String())
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if err := <-served; err != nil {
		t.Fatal(err)
	}
	if n := s.inlining.Load(); n != 0 {
		t.Fatalf("%d inline places still taken", n)
	}
	check()
}
