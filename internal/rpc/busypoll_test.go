package rpc

import (
	"testing"
	"time"

	"hushfs/internal/xdr"
)

// pingPong sends n calls one at a time on rc, each as soon as the previous
// reply arrived (after think), and checks the replies.
func pingPong(t *testing.T, rc *rawConn, first uint32, n int, think time.Duration) {
	t.Helper()
	for i := range uint32(n) {
		xid := first + i
		rc.send(newCall(xid, procEcho, xdr.AppendOpaque(nil, []byte("p"))).bytes())
		if got := rc.recv(); got.xid != xid || got.acceptStat != Success {
			t.Fatalf("call %d: %+v", xid, got)
		}
		time.Sleep(think)
	}
}

// A client sending its calls one at a time, at once after each reply, finds
// the reader polling for them: the polls find the calls.
func TestBusyPollFindsNextCall(t *testing.T) {
	// A window far longer than any turnaround of the test's client, so
	// that a busy machine does not turn hits into misses — but a loaded
	// one (CI beside other work) can still keep the client off the CPU for
	// longer now and then: nine in ten found is polling at work (without
	// it, none is).
	s, ln := startServer(t, ServerOptions{BusyPoll: 20 * time.Millisecond}, &testHandler{})
	rc := dialRaw(t, ln.Addr())
	pingPong(t, rc, 1, 200, 0)
	st := s.Stats()
	t.Logf("hits %d misses %d", st.BusyPollHits, st.BusyPollMisses)
	if st.BusyPollHits < 180 || st.BusyPollMisses > 10 {
		t.Fatalf("200 calls in a row: %d polls found the next call, %d missed; want ≥ 180 and ≤ 10", st.BusyPollHits, st.BusyPollMisses)
	}
	// Off: never polls.
	s2, ln2 := startServer(t, ServerOptions{}, &testHandler{})
	pingPong(t, dialRaw(t, ln2.Addr()), 1, 50, 0)
	if st := s2.Stats(); st.BusyPollHits+st.BusyPollMisses != 0 {
		t.Fatalf("BusyPoll 0: %+v", st)
	}
}

// A client that pauses between calls longer than twice the window is not
// polled for, after the first poll at most.
func TestBusyPollSkipsSlowClient(t *testing.T) {
	s, ln := startServer(t, ServerOptions{BusyPoll: 2 * time.Millisecond}, &testHandler{})
	rc := dialRaw(t, ln.Addr())
	pingPong(t, rc, 1, 10, 10*time.Millisecond)
	if st := s.Stats(); st.BusyPollHits != 0 || st.BusyPollMisses > 1 {
		t.Fatalf("10 calls 10 ms apart: %d hits, %d misses; want 0 and ≤ 1", st.BusyPollHits, st.BusyPollMisses)
	}
}

// A poll ends as soon as another connection's call is read: with several
// clients busy, the processor goes to their calls.
func TestBusyPollStopsForOtherClients(t *testing.T) {
	s, ln := startServer(t, ServerOptions{BusyPoll: time.Second}, &testHandler{})
	a, b := dialRaw(t, ln.Addr()), dialRaw(t, ln.Addr())
	// a's first reply starts a poll of up to a second on a's connection.
	pingPong(t, a, 1, 1, 0)
	waitFor(t, "a poll to start", func() bool { return s.polling.Load() == 1 })
	start := time.Now()
	pingPong(t, b, 100, 1, 0)
	// (b's reply may start a poll on b's connection in turn.)
	waitFor(t, "a's poll to end", func() bool { return s.Stats().BusyPollMisses == 1 })
	if d := time.Since(start); d > 500*time.Millisecond {
		t.Fatalf("the poll ended %v after another client's call; want at once", d)
	}
	if st := s.Stats(); st.BusyPollHits != 0 {
		t.Fatalf("stats %+v: no poll can have found a call", st)
	}
	// Both connections work on; a's call ends any poll of b's.
	pingPong(t, a, 2, 3, 0)
	pingPong(t, b, 200, 3, 0)
}

// The takeover timer is armed once and re-armed by itself: after many
// quick inline calls, a call that blocks still hands the reading over, so
// a call behind it is answered first.
func TestServerInlineHandsOverAfterQuickCalls(t *testing.T) {
	h, entered := blockingHandler()
	_, ln := startServer(t, ServerOptions{}, h)
	rc := dialRaw(t, ln.Addr())
	for round := range 3 {
		base := uint32(1000 * (round + 1))
		pingPong(t, rc, base, 300, 0)
		rc.send(newCall(base+500, procBlock, u32(1)).bytes())
		<-entered
		rc.send(newCall(base+501, procNull, nil).bytes())
		if got := rc.recv(); got.xid != base+501 {
			t.Fatalf("round %d: the call behind a blocked inline call: xid %d", round, got.xid)
		}
		h.gate <- struct{}{}
		if got := rc.recv(); got.xid != base+500 {
			t.Fatalf("round %d: the blocked call: xid %d", round, got.xid)
		}
	}
}
