package rpc

import (
	"bytes"
	"context"
	"encoding/binary"
	"math/rand/v2"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"hushfs/internal/xdr"
)

func sysBody(p AuthSysParms) []byte { return p.Append(nil) }

func TestServerRejections(t *testing.T) {
	_, ln := startServer(t, ServerOptions{}, &testHandler{})
	okSys := AuthSysParms{Machine: "host", UID: 1000, GID: 100, GIDs: []uint32{1, 2, 3}}
	longName := AuthSysParms{Machine: strings.Repeat("m", MaxMachineName+1)}
	manyGIDs := xdr.AppendUint32(xdr.AppendUint32(xdr.AppendUint32(xdr.AppendString(u32(0), "h"), 1), 1), 17)
	for range 17 {
		manyGIDs = xdr.AppendUint32(manyGIDs, 7)
	}
	sysCred := func(body []byte) OpaqueAuth { return OpaqueAuth{Flavor: AuthSys, Body: body} }
	noneVerfBytes := NoAuth.Append(nil)

	type want struct {
		replyStat  uint32
		acceptStat AcceptStat
		rejectStat uint32
		authStat   AuthStat
		low, high  uint32
	}
	accepted := func(s AcceptStat) want { return want{replyStat: MsgAccepted, acceptStat: s} }
	authErr := func(s AuthStat) want { return want{replyStat: MsgDenied, rejectStat: AuthError, authStat: s} }

	tests := []struct {
		name string
		msg  callMsg
		want want
	}{
		{"null", newCall(0, procNull, nil), accepted(Success)},
		{"rpcvers 3", callMsg{rpcvers: 3, prog: testProg, vers: 3}, want{replyStat: MsgDenied, rejectStat: RPCMismatch, low: 2, high: 2}},
		{"rpcvers 1", callMsg{rpcvers: 1, prog: testProg, vers: 3}, want{replyStat: MsgDenied, rejectStat: RPCMismatch, low: 2, high: 2}},
		{"unknown program", callMsg{rpcvers: 2, prog: 999, vers: 3}, accepted(ProgUnavail)},
		{"version between", callMsg{rpcvers: 2, prog: testProg, vers: 4}, want{replyStat: MsgAccepted, acceptStat: ProgMismatch, low: 3, high: 5}},
		{"version above", callMsg{rpcvers: 2, prog: testProg, vers: 6}, want{replyStat: MsgAccepted, acceptStat: ProgMismatch, low: 3, high: 5}},
		{"unknown procedure", newCall(0, 99, nil), accepted(ProcUnavail)},
		{"garbage args", newCall(0, procEcho, u32(100)), accepted(GarbageArgs)},
		{"trailing args", newCall(0, procEcho, append(xdr.AppendOpaque(nil, []byte("x")), 1, 2, 3, 4)), accepted(GarbageArgs)},
		{"auth short", callMsg{rpcvers: 2, prog: testProg, vers: 3, cred: OpaqueAuth{Flavor: AuthShort, Body: []byte{1, 2, 3, 4}}}, authErr(AuthRejectedCred)},
		{"rpcsec_gss", callMsg{rpcvers: 2, prog: testProg, vers: 3, cred: OpaqueAuth{Flavor: 6}}, authErr(AuthRejectedCred)},
		{"auth_sys ok", callMsg{rpcvers: 2, prog: testProg, vers: 3, cred: sysCred(sysBody(okSys))}, accepted(Success)},
		{"auth_sys long machine name", callMsg{rpcvers: 2, prog: testProg, vers: 3, cred: sysCred(xdr.AppendUint32(xdr.AppendUint32(xdr.AppendUint32(xdr.AppendString(u32(0), longName.Machine), 0), 0), 0))}, authErr(AuthBadCred)},
		{"auth_sys 17 gids", callMsg{rpcvers: 2, prog: testProg, vers: 3, cred: sysCred(manyGIDs)}, authErr(AuthBadCred)},
		{"auth_sys trailing", callMsg{rpcvers: 2, prog: testProg, vers: 3, cred: sysCred(append(sysBody(okSys), 0, 0, 0, 0))}, authErr(AuthBadCred)},
		{"auth_sys truncated", callMsg{rpcvers: 2, prog: testProg, vers: 3, cred: sysCred(sysBody(okSys)[:12])}, authErr(AuthBadCred)},
		{"cred over 400", callMsg{rpcvers: 2, prog: testProg, vers: 3, cred: OpaqueAuth{Flavor: AuthNone, Body: make([]byte, 404)}}, authErr(AuthBadCred)},
		{"cred length past end", callMsg{rpcvers: 2, prog: testProg, vers: 3, rawCred: append(u32(AuthSys), u32(200)...)}, authErr(AuthBadCred)},
		{"verifier over 400", callMsg{rpcvers: 2, prog: testProg, vers: 3, rawCred: append(append(noneVerfBytes, u32(AuthNone)...), u32(1000)...)}, authErr(AuthBadVerf)},
		{"verifier missing", callMsg{rpcvers: 2, prog: testProg, vers: 3, rawCred: noneVerfBytes}, authErr(AuthBadVerf)},
	}
	// All on one connection: none of these is a reason to hang up.
	rc := dialRaw(t, ln.Addr())
	for i, tc := range tests {
		tc.msg.xid = uint32(1000 + i)
		rc.send(tc.msg.bytes())
		got := rc.recv()
		if got.xid != tc.msg.xid {
			t.Fatalf("%s: xid %d, want %d", tc.name, got.xid, tc.msg.xid)
		}
		g := want{replyStat: got.replyStat, acceptStat: got.acceptStat, rejectStat: got.rejectStat,
			authStat: got.authStat, low: got.low, high: got.high}
		if g != tc.want {
			t.Errorf("%s: got %+v, want %+v", tc.name, g, tc.want)
		}
	}
}

func TestServerAuthSysReachesHandler(t *testing.T) {
	_, ln := startServer(t, ServerOptions{}, &testHandler{})
	rc := dialRaw(t, ln.Addr())
	m := newCall(7, procWhoAmI, nil)
	m.cred = SysCred(1234, 56, []uint32{7, 8, 9}, "client.example")
	rc.send(m.bytes())
	rep := rc.recv()
	d := xdr.NewDecoder(rep.results)
	flavor, uid, gid, n := d.Uint32(), d.Uint32(), d.Uint32(), d.Uint32()
	var gids []uint32
	for range n {
		gids = append(gids, d.Uint32())
	}
	machine := d.String(255)
	if d.Err() != nil || flavor != AuthSys || uid != 1234 || gid != 56 || len(gids) != 3 || gids[2] != 9 || machine != "client.example" {
		t.Fatalf("handler saw flavor %d uid %d gid %d gids %v machine %q (err %v)", flavor, uid, gid, gids, machine, d.Err())
	}
	m = newCall(8, procWhoAmI, nil)
	rc.send(m.bytes())
	if d := xdr.NewDecoder(rc.recv().results); d.Uint32() != AuthNone || d.Remaining() != 0 {
		t.Fatal("AUTH_NONE call not reported as such")
	}
}

// Records whose header cannot be parsed get no reply: the connection is
// closed, as there is no xid to answer to or no way to trust the stream.
func TestServerClosesOnMalformedHeader(t *testing.T) {
	var logs logBuffer
	s, ln := startServer(t, ServerOptions{Logf: logs.Logf}, &testHandler{})
	full := newCall(1, procNull, nil).bytes()
	for _, rec := range [][]byte{
		{},                        // empty
		full[:4],                  // xid only
		append(u32(1), u32(7)...), // msg_type 7
		full[:8],                  // no rpcvers
		full[:22],                 // truncated proc
	} {
		rc := dialRaw(t, ln.Addr())
		rc.send(rec)
		rc.expectClosed()
	}
	waitFor(t, "connections to go", func() bool { return s.numConns() == 0 })
	if !logs.contains("malformed call header") {
		t.Errorf("closing not logged:\n%s", logs.String())
	}
}

func TestServerIgnoresReplyMessages(t *testing.T) {
	_, ln := startServer(t, ServerOptions{}, &testHandler{})
	rc := dialRaw(t, ln.Addr())
	stray := append(u32(55), u32(MsgReply)...)
	stray = append(stray, u32(MsgAccepted)...)
	rc.send(stray)
	rc.send(newCall(56, procNull, nil).bytes())
	if got := rc.recv(); got.xid != 56 {
		t.Fatalf("first reply has xid %d, want 56", got.xid)
	}
}

func waitFor(t testing.TB, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// While connections send garbage, another keeps getting correct answers.
func TestServerKeepsServingThroughGarbage(t *testing.T) {
	var logs logBuffer
	s, ln := startServer(t, ServerOptions{Logf: logs.Logf}, &testHandler{})
	addr := ln.Addr()

	stop := make(chan struct{})
	var good atomic.Int64
	errc := make(chan error, 1)
	go func() {
		nc, err := net.Dial("tcp", addr.String())
		if err != nil {
			errc <- err
			return
		}
		defer nc.Close()
		rng := rand.New(rand.NewPCG(3, 4))
		for xid := uint32(1); ; xid++ {
			select {
			case <-stop:
				errc <- nil
				return
			default:
			}
			payload := make([]byte, rng.IntN(2000))
			for i := range payload {
				payload[i] = byte(rng.Uint32())
			}
			b, st := BeginRecord(nil)
			b = append(b, newCall(xid, procEcho, xdr.AppendOpaque(nil, payload)).bytes()...)
			FinishRecord(b, st)
			nc.SetDeadline(time.Now().Add(5 * time.Second))
			if _, err := nc.Write(b); err != nil {
				errc <- err
				return
			}
			rec, err := ReadRecord(nc, nil, DefaultMaxRecord)
			if err != nil {
				errc <- err
				return
			}
			rep, err := parseReply(rec)
			if err != nil || rep.xid != xid || rep.acceptStat != Success || !bytes.Equal(rep.results, xdr.AppendOpaque(nil, payload)) {
				errc <- err
				return
			}
			good.Add(1)
		}
	}()

	rng := rand.New(rand.NewPCG(5, 6))
	garbage := make([]byte, 5000)
	for i := range garbage {
		garbage[i] = byte(rng.Uint32())
	}
	garbage[0] = 0x80 // a plausible fragment header, then noise
	garbage[1] = 0
	var emptyFrags []byte
	for range 1000 {
		emptyFrags = append(emptyFrags, 0, 0, 0, 0)
	}
	attacks := []struct {
		name     string
		data     []byte
		hangUp   bool // the attacker closes; otherwise the server must
		wantLogs string
	}{
		{"random bytes", garbage, false, ""},
		{"2 GiB fragment", []byte{0xff, 0xff, 0xff, 0xff}, false, "record too large"},
		{"2 GiB non-final fragment", []byte{0x7f, 0xff, 0xff, 0xff, 1, 2, 3}, false, "record too large"},
		{"empty fragments", emptyFrags, false, "empty fragments"},
		{"truncated record", []byte{0x80, 0, 1, 0, 1, 2, 3}, true, ""},
		{"truncated mark", []byte{0x80, 0}, true, ""},
	}
	for range 3 {
		for _, a := range attacks {
			before := good.Load()
			rc := dialRaw(t, addr)
			rc.write(a.data)
			if a.hangUp {
				rc.nc.Close()
			} else {
				rc.expectClosed()
			}
			if a.wantLogs != "" && !logs.contains(a.wantLogs) {
				t.Errorf("%s: no log mentioning %q:\n%s", a.name, a.wantLogs, logs.String())
			}
			waitFor(t, "the good connection to progress after "+a.name, func() bool { return good.Load() > before })
		}
	}
	close(stop)
	if err := <-errc; err != nil {
		t.Fatalf("good connection failed: %v", err)
	}
	waitFor(t, "attack connections to be gone", func() bool { return s.numConns() == 0 })
}

func TestServerHandlerPanic(t *testing.T) {
	var logs logBuffer
	_, ln := startServer(t, ServerOptions{Logf: logs.Logf}, &testHandler{})
	rc := dialRaw(t, ln.Addr())
	rc.send(newCall(1, procPanic, nil).bytes())
	if got := rc.recv(); got.xid != 1 || got.replyStat != MsgAccepted || got.acceptStat != SystemErr {
		t.Fatalf("panicking handler: got %+v, want SYSTEM_ERR", got)
	}
	if !logs.contains("test handler panic") {
		t.Errorf("panic not logged:\n%s", logs.String())
	}
	rc.send(newCall(2, procEcho, xdr.AppendOpaque(nil, []byte("alive"))).bytes())
	if got := rc.recv(); got.acceptStat != Success || !bytes.Equal(got.results, xdr.AppendOpaque(nil, []byte("alive"))) {
		t.Fatalf("after panic: %+v", got)
	}
}

// Handler errors of other kinds become the matching replies.
func TestServerHandlerErrors(t *testing.T) {
	var logs logBuffer
	h := &testHandler{hook: func(ctx context.Context, call *Call, reply []byte) ([]byte, bool, error) {
		reply = append(reply, "junk that must not be sent"...)
		switch call.Proc {
		case 10:
			return reply, true, AuthErr(AuthTooWeak)
		case 11:
			return reply, true, ErrSystem
		case 12:
			return reply, true, context.DeadlineExceeded // any other error
		case 13:
			return nil, true, nil // broken handler: no header
		}
		return nil, false, nil
	}}
	_, ln := startServer(t, ServerOptions{Logf: logs.Logf}, h)
	rc := dialRaw(t, ln.Addr())
	rc.send(newCall(10, 10, nil).bytes())
	if got := rc.recv(); got.replyStat != MsgDenied || got.rejectStat != AuthError || got.authStat != AuthTooWeak {
		t.Errorf("AuthErr: %+v", got)
	}
	for _, proc := range []uint32{11, 12, 13} {
		rc.send(newCall(proc, proc, nil).bytes())
		if got := rc.recv(); got.xid != proc || got.acceptStat != SystemErr {
			t.Errorf("proc %d: %+v, want SYSTEM_ERR", proc, got)
		}
	}
	if !logs.contains("deadline exceeded") {
		t.Errorf("plain handler error not logged:\n%s", logs.String())
	}
}

// A slow call does not hold back a fast one on the same connection.
func TestServerRepliesOutOfOrder(t *testing.T) {
	h := &testHandler{gate: make(chan struct{})}
	_, ln := startServer(t, ServerOptions{}, h)
	rc := dialRaw(t, ln.Addr())
	rc.send(newCall(1, procBlock, u32(11)).bytes())
	rc.send(newCall(2, procEcho, xdr.AppendOpaque(nil, []byte("fast"))).bytes())
	if got := rc.recv(); got.xid != 2 {
		t.Fatalf("first reply is xid %d, want the fast call's 2", got.xid)
	}
	close(h.gate)
	if got := rc.recv(); got.xid != 1 || !bytes.Equal(got.results, u32(11)) {
		t.Fatalf("slow call: %+v", got)
	}
}

func TestServerDropFreesSlot(t *testing.T) {
	_, ln := startServer(t, ServerOptions{MaxInFlightPerConn: 2}, &testHandler{})
	rc := dialRaw(t, ln.Addr())
	for i := range 10 { // more drops than slots: each must give its slot back
		rc.send(newCall(uint32(i), procDrop, nil).bytes())
	}
	rc.send(newCall(100, procNull, nil).bytes())
	if got := rc.recv(); got.xid != 100 {
		t.Fatalf("got xid %d, want 100 (dropped calls must not be answered)", got.xid)
	}
}

// At MaxInFlightPerConn unanswered calls the server stops reading the
// connection.
func TestServerBackPressure(t *testing.T) {
	var entered atomic.Int32
	gate := make(chan struct{})
	h := &testHandler{hook: func(ctx context.Context, call *Call, reply []byte) ([]byte, bool, error) {
		if call.Proc == procBlock {
			entered.Add(1)
			<-gate
			return xdr.AppendUint32(reply, 1), true, nil
		}
		return nil, false, nil
	}}
	_, ln := startServer(t, ServerOptions{MaxInFlightPerConn: 3, Workers: 16}, h)
	rc := dialRaw(t, ln.Addr())
	for i := range 8 {
		rc.send(newCall(uint32(i), procBlock, nil).bytes())
	}
	waitFor(t, "three handlers", func() bool { return entered.Load() == 3 })
	time.Sleep(200 * time.Millisecond)
	if n := entered.Load(); n != 3 {
		t.Fatalf("%d handlers running with MaxInFlightPerConn 3", n)
	}
	close(gate)
	seen := map[uint32]bool{}
	for range 8 {
		seen[rc.recv().xid] = true
	}
	if len(seen) != 8 {
		t.Fatalf("replies for %d distinct calls, want 8", len(seen))
	}
}

// At MaxConns with every connection busy, a new one is refused (an idle
// one would be evicted instead: TestServerEvictsIdlest).
func TestServerMaxConns(t *testing.T) {
	var logs logBuffer
	h, entered := blockingHandler()
	s, ln := startServer(t, ServerOptions{MaxConns: 1, Logf: logs.Logf}, h)
	a := dialRaw(t, ln.Addr())
	a.send(newCall(1, procNull, nil).bytes())
	a.recv()
	a.send(newCall(3, procBlock, u32(3)).bytes())
	<-entered
	b := dialRaw(t, ln.Addr())
	b.expectClosed()
	if !logs.contains("refusing connection") {
		t.Errorf("refusal not logged:\n%s", logs.String())
	}
	if st := s.Stats(); st.ConnsRefused != 1 || st.ConnsEvicted != 0 || st.ConnsOpen != 1 {
		t.Errorf("stats %+v, want 1 refused, 0 evicted, 1 open", st)
	}
	close(h.gate)
	if got := a.recv(); got.xid != 3 {
		t.Fatalf("xid %d", got.xid)
	}
	a.nc.Close()
	waitFor(t, "the first connection to go", func() bool { return s.numConns() == 0 })
	c := dialRaw(t, ln.Addr())
	c.send(newCall(2, procNull, nil).bytes())
	if got := c.recv(); got.xid != 2 {
		t.Fatalf("xid %d", got.xid)
	}
}

func TestServerIdleTimeout(t *testing.T) {
	s, ln := startServer(t, ServerOptions{IdleTimeout: 150 * time.Millisecond}, &testHandler{})
	idle := dialRaw(t, ln.Addr())
	start := time.Now()
	idle.expectClosed()
	if el := time.Since(start); el < 100*time.Millisecond {
		t.Fatalf("idle connection closed after %v", el)
	}
	// A call longer than the idle timeout keeps its connection.
	busy := dialRaw(t, ln.Addr())
	busy.send(newCall(1, procSleep, u32(450)).bytes())
	if got := busy.recv(); got.xid != 1 || !bytes.Equal(got.results, u32(450)) {
		t.Fatalf("slow call: %+v", got)
	}
	busy.expectClosed()
	waitFor(t, "connections to go", func() bool { return s.numConns() == 0 })
}

// Clients vanishing at every stage leave no goroutine behind, and Close
// waits for handlers, whose context it cancels.
func TestServerNoLeaks(t *testing.T) {
	check := leakCheck(t)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var ctxDone atomic.Bool
	block := make(chan struct{})
	h := &testHandler{hook: func(ctx context.Context, call *Call, reply []byte) ([]byte, bool, error) {
		if call.Proc == procBlock {
			close(block)
			<-ctx.Done()
			ctxDone.Store(true)
			return reply, true, nil
		}
		return nil, false, nil
	}}
	s := NewServer(ServerOptions{Workers: 4})
	s.Register(testProg, 3, h)
	served := make(chan error, 1)
	go func() { served <- s.Serve(ln) }()

	dial := func() net.Conn {
		nc, err := net.Dial("tcp", ln.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		return nc
	}
	msg := func(xid, proc uint32) []byte {
		b, st := BeginRecord(nil)
		b = append(b, newCall(xid, proc, nil).bytes()...)
		FinishRecord(b, st)
		return b
	}
	// Mid-record.
	nc := dial()
	nc.Write(msg(1, procNull)[:10])
	nc.Close()
	// Mid-mark.
	nc = dial()
	nc.Write([]byte{0x80})
	nc.Close()
	// Calls in flight, never read.
	nc = dial()
	for i := range 20 {
		nc.Write(msg(uint32(i), procSleep))
	}
	nc.Close()
	waitFor(t, "connections to go", func() bool { return s.numConns() == 0 })

	// A handler blocked until Close.
	held := dial()
	defer held.Close()
	held.Write(msg(99, procBlock))
	<-block
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if !ctxDone.Load() {
		t.Fatal("Close returned before the handler did")
	}
	if err := <-served; err != nil {
		t.Fatalf("Serve: %v", err)
	}
	if err := s.Serve(ln); err != nil {
		t.Fatalf("Serve after Close: %v", err)
	}
	check()
}

// checkDecodeCall runs the call parser on one record and checks that its
// verdict is consistent with the input: the fuzz target's invariants.
func checkDecodeCall(t *testing.T, s *Server, in []byte) {
	var call Call
	h, out, v := decodeCall(s.progs.Load(), in, &call, nil)
	switch v {
	case verdictDispatch:
		if h == nil || len(out) != 0 {
			t.Fatalf("dispatch with handler %v and %d reply bytes", h, len(out))
		}
		if call.Prog != testProg || (call.Vers != 3 && call.Vers != 5) {
			t.Fatalf("dispatched prog %d vers %d", call.Prog, call.Vers)
		}
		if len(call.Args) > len(in) || !bytes.Equal(call.Args, in[len(in)-len(call.Args):]) {
			t.Fatal("Args is not the tail of the record")
		}
		switch call.Cred.Flavor {
		case AuthNone:
		case AuthSys:
			if _, ok := call.AuthSys(); !ok {
				t.Fatal("dispatched a call whose AUTH_SYS credential does not decode")
			}
		default:
			t.Fatalf("dispatched a call with flavor %d", call.Cred.Flavor)
		}
		if binary.BigEndian.Uint32(in) != call.XID {
			t.Fatal("xid mismatch")
		}
	case verdictReply:
		if len(out) < 4 || binary.BigEndian.Uint32(out) != 1<<31|uint32(len(out)-4) {
			t.Fatalf("reply record mark wrong: %x", out)
		}
		rep, err := parseReply(out[4:])
		if err != nil {
			t.Fatalf("malformed reply %x: %v", out, err)
		}
		if rep.xid != binary.BigEndian.Uint32(in) {
			t.Fatal("reply xid mismatch")
		}
		if rep.replyStat == MsgAccepted && rep.acceptStat == Success {
			t.Fatal("parser itself answered SUCCESS")
		}
	case verdictIgnore:
		if len(in) < 8 || binary.BigEndian.Uint32(in[4:]) != MsgReply {
			t.Fatal("ignored something that is not a reply")
		}
	case verdictClose:
		if len(in) >= 24 && binary.BigEndian.Uint32(in[4:]) == MsgCall {
			t.Fatalf("closed on a record with a complete call header: %x", in[:24])
		}
	default:
		t.Fatalf("verdict %d", v)
	}
}

func FuzzServerRecord(f *testing.F) {
	s := NewServer(ServerOptions{})
	h := &testHandler{}
	s.Register(testProg, 3, h)
	s.Register(testProg, 5, h)
	f.Add(newCall(1, procEcho, xdr.AppendOpaque(nil, []byte("hi"))).bytes())
	sys := newCall(2, procNull, nil)
	sys.cred = SysCred(0, 0, []uint32{1}, "m")
	f.Add(sys.bytes())
	f.Add(callMsg{xid: 3, rpcvers: 3}.bytes())
	f.Add(callMsg{xid: 4, rpcvers: 2, prog: testProg, vers: 4}.bytes())
	f.Add(append(u32(5), u32(MsgReply)...))
	f.Add([]byte{1, 2, 3})
	f.Fuzz(func(t *testing.T, in []byte) {
		checkDecodeCall(t, s, in)
	})
}

// Handlers learn which connection a call came over.
func TestServerConnInfo(t *testing.T) {
	var mu sync.Mutex
	var remote, local string
	h := &testHandler{hook: func(ctx context.Context, call *Call, reply []byte) ([]byte, bool, error) {
		mu.Lock()
		remote, local = call.Conn.RemoteAddr.String(), call.Conn.LocalAddr.String()
		mu.Unlock()
		return reply, true, nil
	}}
	_, ln := startServer(t, ServerOptions{}, h)
	rc := dialRaw(t, ln.Addr())
	rc.send(newCall(1, procNull, nil).bytes())
	rc.recv()
	mu.Lock()
	defer mu.Unlock()
	if remote != rc.nc.LocalAddr().String() || local != ln.Addr().String() {
		t.Fatalf("ConnInfo remote %s local %s; want %s, %s", remote, local, rc.nc.LocalAddr(), ln.Addr())
	}
}
