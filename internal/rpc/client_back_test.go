package rpc

import (
	"context"
	"encoding/binary"
	"net"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"hushfs/internal/xdr"
)

// A server speaking the wire protocol by hand, to send a client calls no
// real server would.

// rawServer accepts connections and hands each to the test as a rawPeer.
type rawServer struct {
	ln    net.Listener
	peers chan *rawPeer
}

// rawPeer is one accepted connection. Unless the server is rawQuiet, a
// goroutine reads it: it notes the XIDs of the client's calls, answers them
// as procEcho would (results = arguments) unless rawSilent, and passes on
// REPLY records, the client's answers to our calls.
type rawPeer struct {
	t       testing.TB
	nc      net.Conn
	mode    rawMode
	replies chan []byte
	wmu     sync.Mutex // one record at a time

	mu   sync.Mutex
	xids []uint32 // of the client's calls, in arrival order
}

type rawMode int

const (
	rawEcho   rawMode = iota // answer the client's calls
	rawSilent                // read them, never answer
	rawQuiet                 // do not read the connection
)

// seen returns how many times the client sent xid on this connection.
func (p *rawPeer) seen(xid uint32) int {
	p.mu.Lock()
	defer p.mu.Unlock()
	n := 0
	for _, x := range p.xids {
		if x == xid {
			n++
		}
	}
	return n
}

// firstXID returns the first call's XID, waiting for one.
func (p *rawPeer) firstXID(t testing.TB) uint32 {
	t.Helper()
	var xid uint32
	waitFor(t, "a call", func() bool {
		p.mu.Lock()
		defer p.mu.Unlock()
		if len(p.xids) > 0 {
			xid = p.xids[0]
			return true
		}
		return false
	})
	return xid
}

func newRawServer(t testing.TB, mode rawMode) *rawServer {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	rs := &rawServer{ln: ln, peers: make(chan *rawPeer, 16)}
	var wg sync.WaitGroup
	var mu sync.Mutex
	var open []net.Conn
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			nc, err := ln.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			open = append(open, nc)
			mu.Unlock()
			p := &rawPeer{t: t, nc: nc, mode: mode, replies: make(chan []byte, 1<<16)}
			if mode != rawQuiet {
				wg.Add(1)
				go func() {
					defer wg.Done()
					p.serve()
				}()
			}
			rs.peers <- p
		}
	}()
	t.Cleanup(func() {
		ln.Close()
		mu.Lock()
		for _, nc := range open {
			nc.Close()
		}
		mu.Unlock()
		wg.Wait()
	})
	return rs
}

func (rs *rawServer) addr() string { return rs.ln.Addr().String() }

// next returns the next connection accepted.
func (rs *rawServer) next(t testing.TB) *rawPeer {
	t.Helper()
	select {
	case p := <-rs.peers:
		return p
	case <-time.After(5 * time.Second):
		t.Fatal("no connection")
		return nil
	}
}

func (p *rawPeer) serve() {
	for {
		rec, err := ReadRecord(p.nc, nil, DefaultMaxRecord)
		if err != nil {
			close(p.replies)
			return
		}
		if len(rec) < 8 {
			continue
		}
		if binary.BigEndian.Uint32(rec[4:]) == MsgReply {
			p.replies <- rec
			continue
		}
		p.mu.Lock()
		p.xids = append(p.xids, binary.BigEndian.Uint32(rec))
		p.mu.Unlock()
		// The call's arguments follow the header and two empty auths.
		if len(rec) < 40 || p.mode == rawSilent {
			continue
		}
		b, start := BeginRecord(nil)
		b = appendAccepted(b, binary.BigEndian.Uint32(rec), Success)
		b = append(b, rec[40:]...)
		FinishRecord(b, start)
		p.wmu.Lock()
		_, err = p.nc.Write(b)
		p.wmu.Unlock()
		if err != nil {
			return
		}
	}
}

// send writes payload as one record.
func (p *rawPeer) send(payload []byte) error {
	b, start := BeginRecord(nil)
	b = append(b, payload...)
	FinishRecord(b, start)
	p.wmu.Lock()
	defer p.wmu.Unlock()
	p.nc.SetWriteDeadline(time.Now().Add(5 * time.Second))
	_, err := p.nc.Write(b)
	return err
}

// reply waits for the client's next answer to one of our calls.
func (p *rawPeer) reply(t testing.TB) reply {
	t.Helper()
	select {
	case rec, ok := <-p.replies:
		if !ok {
			t.Fatal("connection closed, no reply")
		}
		r, err := parseReply(rec)
		if err != nil {
			t.Fatalf("malformed reply %x: %v", rec, err)
		}
		return r
	case <-time.After(5 * time.Second):
		t.Fatal("no reply")
	}
	return reply{}
}

// noReply asserts that no answer comes within d.
func (p *rawPeer) noReply(t testing.TB, d time.Duration) {
	t.Helper()
	select {
	case rec, ok := <-p.replies:
		if ok {
			t.Fatalf("unexpected reply %x", rec)
		}
		t.Fatal("connection closed")
	case <-time.After(d):
	}
}

func cbCall(xid, vers, proc uint32, args []byte) callMsg {
	return callMsg{xid: xid, rpcvers: 2, prog: cbProg, vers: vers, proc: proc, args: args}
}

// echoOK makes one of the client's own calls through p (which echoes).
func echoOK(t testing.TB, c *Client, what string) {
	t.Helper()
	var res opaqueRes
	if err := c.Call(context.Background(), testProg, 3, procEcho, NoAuth, opaqueArg(what), &res); err != nil {
		t.Fatalf("the client's own call (%s): %v", what, err)
	}
	if string(res.b) != what {
		t.Fatalf("the client's own call (%s): got %q", what, res.b)
	}
}

// Every malformed or unwelcome call gets the RPC-level answer it should, or
// none when it has no header to answer; the connection stays up and the
// client's own calls go on.
func TestClientServesHostileCalls(t *testing.T) {
	t.Cleanup(leakCheck(t))
	rs := newRawServer(t, rawEcho)
	var logs logBuffer
	c := dialClient(t, rs.addr(), ClientOptions{Timeout: 5 * time.Second, MaxBackRecord: 1024, Logf: logs.Logf})
	c.Register(cbProg, 1, &testHandler{})
	p := rs.next(t)
	echoOK(t, c, "before")

	sys := sysBody(AuthSysParms{UID: 1, GID: 2, Machine: "srv"})
	cases := []struct {
		name  string
		msg   callMsg
		check func(r reply) bool
	}{
		{"unknown program", callMsg{rpcvers: 2, prog: 999, vers: 1}, func(r reply) bool {
			return r.replyStat == MsgAccepted && r.acceptStat == ProgUnavail
		}},
		{"unknown version", cbCall(0, 3, procNull, nil), func(r reply) bool {
			return r.acceptStat == ProgMismatch && r.low == 1 && r.high == 1
		}},
		{"unknown procedure", cbCall(0, 1, 99, nil), func(r reply) bool { return r.acceptStat == ProcUnavail }},
		{"garbage arguments", cbCall(0, 1, procEcho, u32(1000)), func(r reply) bool { return r.acceptStat == GarbageArgs }},
		{"handler panic", cbCall(0, 1, procPanic, nil), func(r reply) bool { return r.acceptStat == SystemErr }},
		{"rpc version 3", callMsg{rpcvers: 3, prog: cbProg, vers: 1}, func(r reply) bool {
			return r.replyStat == MsgDenied && r.rejectStat == RPCMismatch && r.low == 2 && r.high == 2
		}},
		{"unknown flavor", callMsg{rpcvers: 2, prog: cbProg, vers: 1, cred: OpaqueAuth{Flavor: 6}}, func(r reply) bool {
			return r.rejectStat == AuthError && r.authStat == AuthRejectedCred
		}},
		{"malformed AUTH_SYS", callMsg{rpcvers: 2, prog: cbProg, vers: 1, cred: OpaqueAuth{Flavor: AuthSys, Body: sys[:len(sys)-1]}}, func(r reply) bool {
			return r.rejectStat == AuthError && r.authStat == AuthBadCred
		}},
		{"over MaxBackRecord", cbCall(0, 1, procEcho, xdr.AppendOpaque(nil, make([]byte, 1100))), func(r reply) bool {
			return r.acceptStat == GarbageArgs
		}},
		{"AUTH_SYS echo", callMsg{rpcvers: 2, prog: cbProg, vers: 1, proc: procEcho, cred: OpaqueAuth{Flavor: AuthSys, Body: sys}, args: xdr.AppendOpaque(nil, []byte("ok"))}, func(r reply) bool {
			return r.acceptStat == Success && string(r.results) == string(xdr.AppendOpaque(nil, []byte("ok")))
		}},
	}
	for i, tc := range cases {
		tc.msg.xid = 0x1000 + uint32(i)
		if err := p.send(tc.msg.bytes()); err != nil {
			t.Fatal(err)
		}
		r := p.reply(t)
		if r.xid != tc.msg.xid || !tc.check(r) {
			t.Errorf("%s: reply %+v", tc.name, r)
		}
		echoOK(t, c, tc.name)
	}
	// Records with no call header to answer are ignored (and logged).
	for _, junk := range [][]byte{
		append(u32(0x2000), u32(MsgCall)...),                    // a call that ends after its type
		append(append(u32(0x2001), u32(MsgCall)...), u32(2)...), // ... after its RPC version
		append(u32(0x2002), u32(7)...),                          // no such message type
		{1, 2, 3},
	} {
		if err := p.send(junk); err != nil {
			t.Fatal(err)
		}
	}
	p.noReply(t, 100*time.Millisecond)
	echoOK(t, c, "after junk")
	if !logs.contains("ignoring a malformed call") || !logs.contains("exceeds 1024") {
		t.Errorf("not logged:\n%s", logs.String())
	}
	select {
	case p2 := <-rs.peers:
		t.Fatalf("the client reconnected (%v)", p2.nc.RemoteAddr())
	default:
	}
}

// Calls beyond MaxBackCalls are answered SYSTEM_ERR without running a
// handler; the ones running finish normally, and the connection serves on.
func TestClientBackCallsOverLimit(t *testing.T) {
	t.Cleanup(leakCheck(t))
	rs := newRawServer(t, rawEcho)
	c := dialClient(t, rs.addr(), ClientOptions{Timeout: 5 * time.Second, MaxBackCalls: 4})
	var running atomic.Int32 // handlers that ran
	cb := &testHandler{gate: make(chan struct{})}
	cb.hook = func(ctx context.Context, call *Call, reply []byte) ([]byte, bool, error) {
		running.Add(1)
		return nil, false, nil
	}
	c.Register(cbProg, 1, cb)
	p := rs.next(t)
	for i := range 4 {
		if err := p.send(cbCall(uint32(100+i), 1, procBlock, u32(uint32(i))).bytes()); err != nil {
			t.Fatal(err)
		}
	}
	waitFor(t, "4 handlers running", func() bool { return running.Load() == 4 })
	for i := range 3 {
		if err := p.send(cbCall(uint32(200+i), 1, procNull, nil).bytes()); err != nil {
			t.Fatal(err)
		}
		if r := p.reply(t); r.xid != uint32(200+i) || r.acceptStat != SystemErr {
			t.Fatalf("call over the limit: %+v", r)
		}
	}
	if v := running.Load(); v != 4 {
		t.Fatalf("%d handlers ran", v)
	}
	echoOK(t, c, "while full")
	close(cb.gate)
	seen := map[uint32]bool{}
	for range 4 {
		r := p.reply(t)
		if r.acceptStat != Success || r.xid < 100 || r.xid > 103 {
			t.Fatalf("released call: %+v", r)
		}
		seen[r.xid] = true
	}
	if len(seen) != 4 {
		t.Fatalf("replies to %v", seen)
	}
	if err := p.send(cbCall(300, 1, procNull, nil).bytes()); err != nil {
		t.Fatal(err)
	}
	if r := p.reply(t); r.xid != 300 || r.acceptStat != Success {
		t.Fatalf("after the release: %+v", r)
	}
}

// A server that floods the client with calls and never reads the answers:
// the client holds no more than twice MaxBackCalls calls and replies
// (handlers running faster or slower than the flood, its writer blocked or
// not), then drops the connection.
func TestClientBackFlood(t *testing.T) {
	t.Cleanup(leakCheck(t))
	rs := newRawServer(t, rawQuiet)
	var logs logBuffer
	var d net.Dialer
	c := dialClient(t, rs.addr(), ClientOptions{
		Timeout:      5 * time.Second,
		MaxBackCalls: 4,
		Logf:         logs.Logf,
		Dial: func(ctx context.Context) (net.Conn, error) {
			nc, err := d.DialContext(ctx, "tcp", rs.addr())
			if err == nil {
				nc.(*net.TCPConn).SetWriteBuffer(4096) // fills soon
			}
			return nc, err
		},
	})
	c.Register(cbProg, 1, &testHandler{})
	p := rs.next(t)
	p.nc.(*net.TCPConn).SetReadBuffer(4096)
	rec := cbCall(1, 1, procNull, nil).bytes()
	var batch []byte
	for range 256 {
		b, start := BeginRecord(batch)
		b = append(b, rec...)
		FinishRecord(b, start)
		batch = b
	}
	deadline := time.Now().Add(20 * time.Second)
	var err error
	for sent := 0; err == nil; sent += 256 {
		if time.Now().After(deadline) {
			t.Fatalf("the client still reads after %d calls", sent)
		}
		p.nc.SetWriteDeadline(deadline)
		_, err = p.nc.Write(batch)
	}
	t.Logf("flood ended: %v", err)
	waitFor(t, "the drop logged", func() bool { return logs.contains("unanswered or their replies unread") })
	// A registered program makes the client come back at once.
	rs.next(t)
}

// A record over the client's MaxRecord drops the connection; the client's
// pending call is resent on the next one and answered.
func TestClientOversizedRecordFromServer(t *testing.T) {
	t.Cleanup(leakCheck(t))
	rs := newRawServer(t, rawQuiet)
	c := dialClient(t, rs.addr(), ClientOptions{Timeout: 5 * time.Second, MaxRecord: 4096})
	c.Register(cbProg, 1, &testHandler{})
	p := rs.next(t)
	done := make(chan error, 1)
	go func() {
		var res opaqueRes
		done <- c.Call(context.Background(), testProg, 3, procEcho, NoAuth, opaqueArg("resent"), &res)
	}()
	// Wait for the call to arrive (unanswered: quiet), then send too much.
	p.nc.SetReadDeadline(time.Now().Add(5 * time.Second))
	if _, err := ReadRecord(p.nc, nil, DefaultMaxRecord); err != nil {
		t.Fatal(err)
	}
	if err := p.send(cbCall(1, 1, procEcho, xdr.AppendOpaque(nil, make([]byte, 8192))).bytes()); err != nil {
		t.Fatal(err)
	}
	p2 := rs.next(t)
	p2.mode = rawEcho
	go p2.serve()
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("the call was not answered on the new connection")
	}
}
