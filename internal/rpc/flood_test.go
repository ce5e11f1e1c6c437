package rpc

import (
	"context"
	"math/rand/v2"
	"net"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"hushfs/internal/xdr"
)

// At MaxConns, a new connection takes the place of the one idle longest;
// connections with calls in flight are never taken.
func TestServerEvictsIdlest(t *testing.T) {
	var logs logBuffer
	h, entered := blockingHandler()
	s, ln := startServer(t, ServerOptions{MaxConns: 3, Logf: logs.Logf}, h)
	ping := func(r *rawConn, xid uint32) {
		t.Helper()
		r.send(newCall(xid, procNull, nil).bytes())
		if got := r.recv(); got.xid != xid {
			t.Fatalf("xid %d, want %d", got.xid, xid)
		}
	}
	a := dialRaw(t, ln.Addr())
	ping(a, 1)
	b := dialRaw(t, ln.Addr())
	ping(b, 2)
	busy := dialRaw(t, ln.Addr())
	busy.send(newCall(3, procBlock, u32(3)).bytes())
	<-entered
	time.Sleep(10 * time.Millisecond) // lastActive has nanoseconds, but be clear
	ping(a, 4)                        // now b is the idlest

	waitIdlest(t, s, b)
	d := dialRaw(t, ln.Addr())
	ping(d, 5)
	b.expectClosed()
	ping(a, 6) // now d is
	waitIdlest(t, s, d)
	e := dialRaw(t, ln.Addr())
	ping(e, 7)
	d.expectClosed()
	ping(a, 8)
	close(h.gate)
	if got := busy.recv(); got.xid != 3 {
		t.Fatalf("busy connection: xid %d", got.xid)
	}
	st := s.Stats()
	if st.ConnsEvicted != 2 || st.ConnsRefused != 0 || st.ConnsOpen != 3 {
		t.Fatalf("stats %+v: want 2 evicted, 0 refused, 3 open", st)
	}
	if !logs.contains("closing idle connection") {
		t.Errorf("eviction not logged:\n%s", logs.String())
	}
}

// waitIdlest waits until the server would evict r's connection: a reply
// the client has read may still be finishing on the server (its call
// counts as in flight until the handler returns), and a connection with
// a call in flight is never evicted.
func waitIdlest(t *testing.T, s *Server, r *rawConn) {
	t.Helper()
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(time.Millisecond) {
		s.mu.Lock()
		v := s.idlest()
		s.mu.Unlock()
		if v != nil && v.info.RemoteAddr.String() == r.nc.LocalAddr().String() {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("the connection from %v is not the idlest after 5 s", r.nc.LocalAddr())
		}
	}
}

// A client that sends calls and never reads the replies holds only its
// own connection's slots: the workers stay free for everyone else, and
// what the server buffers for it is bounded by MaxInFlightPerConn.
//
// At the same time another client sends garbage over and over, and a third
// opens MaxConns connections and sits on them. A well-behaved client still
// gets every call answered, promptly.
func TestServerFlood(t *testing.T) {
	const (
		workers  = 4
		inFlight = 8
		maxConns = 16
		payload  = 4 << 10
		calls    = 10000
	)
	var logs logBuffer
	testStart := time.Now()
	s, ln := startServer(t, ServerOptions{Workers: workers, MaxInFlightPerConn: inFlight, MaxConns: maxConns, Logf: logs.Logf}, &testHandler{})
	addr := ln.Addr().String()
	stop := make(chan struct{})
	var wg sync.WaitGroup
	defer func() {
		close(stop)
		wg.Wait()
	}()

	// The hoarder: MaxConns idle connections.
	hoard := make([]net.Conn, 0, maxConns)
	for range maxConns {
		nc, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		hoard = append(hoard, nc)
	}
	defer func() {
		for _, nc := range hoard {
			nc.Close()
		}
	}()
	waitFor(t, "the hoard to fill the server", func() bool { return s.Stats().ConnsOpen == maxConns })

	// The flooder: 10,000 calls with 4 KiB replies, never read.
	flood, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer flood.Close()
	call := record(newCall(0, procEcho, xdr.AppendOpaque(nil, make([]byte, payload))))
	var sent atomic.Int64
	wg.Add(1)
	go func() {
		defer wg.Done()
		batch := make([]byte, 0, 100*len(call))
		for i := 0; i < calls; i += 100 {
			batch = batch[:0]
			for k := range 100 {
				xdr.PutUint32(call, 4, uint32(i+k))
				batch = append(batch, call...)
			}
			flood.SetWriteDeadline(time.Now().Add(20 * time.Second))
			n, err := flood.Write(batch)
			sent.Add(int64(n))
			if err != nil {
				return // blocked until the deadline or closed: expected
			}
		}
	}()
	// The flooder's connection reaches its limit: its slots full of
	// replies nobody reads.
	waitFor(t, "the flooder to stall", func() bool {
		return s.Stats().BufferedPeak >= int64((inFlight-1)*payload)
	})

	// The garbage sender: records of noise, and oversized record marks.
	var garbageConns atomic.Int64
	wg.Add(1)
	go func() {
		defer wg.Done()
		rng := rand.New(rand.NewPCG(1, 2))
		junk := make([]byte, 3000)
		for n := 0; ; n++ {
			select {
			case <-stop:
				return
			default:
			}
			for i := range junk {
				junk[i] = byte(rng.Uint32())
			}
			if n%2 == 0 {
				xdr.PutUint32(junk, 0, 1<<31|uint32(len(junk)-4))
			} else {
				junk[0] = 0xff
			}
			garbageConns.Add(1)
			nc, err := net.Dial("tcp", addr)
			if err != nil {
				continue
			}
			nc.SetDeadline(time.Now().Add(time.Second))
			nc.Write(junk)
			nc.Read(junk[:1]) // until the server hangs up
			nc.Close()
		}
	}()

	// The well-behaved client.
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	c, err := Dial(ctx, addr, ClientOptions{Timeout: 2 * time.Second, Retrans: 5})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	start := time.Now()
	var lat []time.Duration
	for i := range 200 {
		t0 := time.Now()
		var r opaqueRes
		msg := []byte{byte(i)}
		if err := c.Call(ctx, testProg, 3, procEcho, NoAuth, opaqueArg(msg), &r); err != nil || string(r.b) != string(msg) {
			t.Fatalf("call %d under flood: %v", i, err)
		}
		lat = append(lat, time.Since(t0))
	}
	// Every worker is free: as many concurrent 200 ms calls as workers
	// finish together, not one after another.
	t0 := time.Now()
	var cw sync.WaitGroup
	errs := make(chan error, workers)
	for range workers {
		cw.Add(1)
		go func() {
			defer cw.Done()
			var r u32Res
			errs <- c.Call(ctx, testProg, 3, procSleep, NoAuth, u32Arg(200), &r)
		}()
	}
	cw.Wait()
	parallel := time.Since(t0)
	close(errs)
	for err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
	slices.Sort(lat)
	st := s.Stats()
	t.Logf("200 calls in %v under flood (median %v, max %v); %d workers' 200 ms calls in %v; flooder wrote %d of %d bytes; peak buffered per connection %d bytes; %d garbage connections, %d connections evicted",
		time.Since(start)-parallel, lat[len(lat)/2], lat[len(lat)-1], workers, parallel, sent.Load(), calls*len(call), st.BufferedPeak, garbageConns.Load(), st.ConnsEvicted)
	if garbageConns.Load() < 10 {
		t.Errorf("only %d garbage connections: the attack did not run", garbageConns.Load())
	}
	// The garbage is logged at a limited rate.
	logs.mu.Lock()
	lines := len(logs.lines)
	logs.mu.Unlock()
	if limit := logBurst + int(time.Since(testStart).Seconds()*logRate) + 1; lines > limit {
		t.Errorf("%d log lines for %d garbage connections, limit %d", lines, garbageConns.Load(), limit)
	}
	if parallel > 2*200*time.Millisecond {
		t.Errorf("%d concurrent 200 ms calls took %v: workers are pinned", workers, parallel)
	}
	if lat[len(lat)-1] > 5*time.Second {
		t.Errorf("slowest call under flood took %v", lat[len(lat)-1])
	}
	// The bound: every slot holding a record or a reply of the largest
	// size (the echo reply is the record's size).
	bound := int64(inFlight * (len(call) + 64))
	if st.BufferedPeak > bound {
		t.Errorf("a connection buffered %d bytes, bound %d", st.BufferedPeak, bound)
	}
	if sent.Load() >= int64(calls*len(call)) {
		t.Errorf("the server read all %d bytes of the flood: no back-pressure", sent.Load())
	}
}

// A client that stops reading is cut off once a reply write has been
// blocked for the idle timeout, and what it held is released.
func TestServerStalledReaderClosed(t *testing.T) {
	s, ln := startServer(t, ServerOptions{IdleTimeout: 300 * time.Millisecond, MaxInFlightPerConn: 4}, &testHandler{})
	nc, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	// Make the socket buffers small, so a few replies fill them.
	nc.(*net.TCPConn).SetReadBuffer(4 << 10)
	call := record(newCall(1, procEcho, xdr.AppendOpaque(nil, make([]byte, 256<<10))))
	go func() {
		for range 64 {
			nc.SetWriteDeadline(time.Now().Add(10 * time.Second))
			if _, err := nc.Write(call); err != nil {
				return
			}
		}
	}()
	waitFor(t, "replies to pile up", func() bool { return s.Stats().Buffered > 256<<10 })
	start := time.Now()
	waitFor(t, "the stalled connection to be closed", func() bool { return s.Stats().ConnsOpen == 0 })
	t.Logf("closed %v after the replies piled up", time.Since(start))
}
