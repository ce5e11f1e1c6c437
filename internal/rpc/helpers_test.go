package rpc

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"hushfs/internal/xdr"
)

// The test program: version 3 and 5 are registered, so a call to version 4
// must be answered PROG_MISMATCH 3..5.
const (
	testProg = 0x20001234

	procNull   = 0
	procEcho   = 1 // opaque<> in, the same opaque out
	procWhoAmI = 2 // returns flavor, uid, gid, gids of the credential
	procPanic  = 3
	procSleep  = 4 // uint32 milliseconds in, echoed back after sleeping
	procBlock  = 5 // waits on the handler's gate, then echoes a uint32
	procDrop   = 6 // no reply
)

// testHandler serves the test program. Hooks let a test intercept calls.
type testHandler struct {
	gate chan struct{} // procBlock waits for a value or close
	// hook, if set, runs first; a non-nil error or handled=true ends the call.
	hook func(ctx context.Context, call *Call, reply []byte) (out []byte, handled bool, err error)
}

// blockingHandler returns a test handler whose procBlock calls signal
// entered as they start, then wait on the handler's gate.
func blockingHandler() (*testHandler, chan struct{}) {
	entered := make(chan struct{}, 1)
	h := &testHandler{gate: make(chan struct{})}
	h.hook = func(ctx context.Context, call *Call, reply []byte) ([]byte, bool, error) {
		if call.Proc == procBlock {
			entered <- struct{}{}
		}
		return nil, false, nil
	}
	return h, entered
}

func (h *testHandler) ServeRPC(ctx context.Context, call *Call, reply []byte) ([]byte, error) {
	if h.hook != nil {
		if out, handled, err := h.hook(ctx, call, reply); handled || err != nil {
			return out, err
		}
	}
	d := xdr.NewDecoder(call.Args)
	switch call.Proc {
	case procNull:
		return reply, nil
	case procEcho:
		p := d.Opaque(1 << 21)
		if d.Err() != nil || d.Remaining() != 0 {
			return reply, ErrGarbageArgs
		}
		return xdr.AppendOpaque(reply, p), nil
	case procWhoAmI:
		reply = xdr.AppendUint32(reply, call.Cred.Flavor)
		p, ok := call.AuthSys()
		if !ok {
			return reply, nil
		}
		reply = xdr.AppendUint32(reply, p.UID)
		reply = xdr.AppendUint32(reply, p.GID)
		reply = xdr.AppendUint32(reply, uint32(len(p.GIDs)))
		for _, g := range p.GIDs {
			reply = xdr.AppendUint32(reply, g)
		}
		return xdr.AppendString(reply, p.Machine), nil
	case procPanic:
		panic("test handler panic")
	case procSleep:
		ms := d.Uint32()
		if d.Err() != nil {
			return reply, ErrGarbageArgs
		}
		select {
		case <-time.After(time.Duration(ms) * time.Millisecond):
		case <-ctx.Done():
			return reply, ErrDrop
		}
		return xdr.AppendUint32(reply, ms), nil
	case procBlock:
		v := d.Uint32()
		select {
		case <-h.gate:
		case <-ctx.Done():
			return reply, ErrDrop
		}
		return xdr.AppendUint32(reply, v), nil
	case procDrop:
		return reply, ErrDrop
	}
	return reply, ErrProcUnavail
}

// logBuffer collects log lines from a server or client.
type logBuffer struct {
	mu    sync.Mutex
	lines []string
}

func (l *logBuffer) Logf(format string, args ...any) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.lines = append(l.lines, fmt.Sprintf(format, args...))
}

func (l *logBuffer) contains(s string) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, line := range l.lines {
		if strings.Contains(line, s) {
			return true
		}
	}
	return false
}

func (l *logBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return strings.Join(l.lines, "\n")
}

// capturingListener remembers the connections it accepts, so that a test
// can break one from the server side.
type capturingListener struct {
	net.Listener
	mu    sync.Mutex
	conns []net.Conn
}

func (l *capturingListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err == nil {
		l.mu.Lock()
		l.conns = append(l.conns, c)
		l.mu.Unlock()
	}
	return c, err
}

func (l *capturingListener) accepted() []net.Conn {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]net.Conn(nil), l.conns...)
}

// startServer serves h as versions 3 and 5 of the test program on a fresh
// 127.0.0.1 port. The server is closed at cleanup, and Serve must then
// return nil.
func startServer(t testing.TB, opts ServerOptions, h Handler) (*Server, *capturingListener) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	cl := &capturingListener{Listener: ln}
	s := NewServer(opts)
	s.Register(testProg, 3, h)
	s.Register(testProg, 5, h)
	served := make(chan error, 1)
	go func() { served <- s.Serve(cl) }()
	t.Cleanup(func() {
		if err := s.Close(); err != nil {
			t.Errorf("Close: %v", err)
		}
		select {
		case err := <-served:
			if err != nil {
				t.Errorf("Serve returned %v after Close, want nil", err)
			}
		case <-time.After(5 * time.Second):
			t.Error("Serve did not return after Close")
		}
	})
	return s, cl
}

func (s *Server) numConns() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.conns)
}

// rawConn is a client speaking the wire protocol by hand.
type rawConn struct {
	t  testing.TB
	nc net.Conn
}

func dialRaw(t testing.TB, addr net.Addr) *rawConn {
	t.Helper()
	nc, err := net.DialTimeout("tcp", addr.String(), 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { nc.Close() })
	return &rawConn{t: t, nc: nc}
}

// send writes payload as one record.
func (r *rawConn) send(payload []byte) {
	r.t.Helper()
	b, start := BeginRecord(nil)
	b = append(b, payload...)
	FinishRecord(b, start)
	r.write(b)
}

func (r *rawConn) write(b []byte) {
	r.t.Helper()
	r.nc.SetWriteDeadline(time.Now().Add(5 * time.Second))
	if _, err := r.nc.Write(b); err != nil {
		r.t.Fatalf("write: %v", err)
	}
}

// recv reads one reply record and decodes it.
func (r *rawConn) recv() reply {
	r.t.Helper()
	r.nc.SetReadDeadline(time.Now().Add(5 * time.Second))
	rec, err := ReadRecord(r.nc, nil, DefaultMaxRecord)
	if err != nil {
		r.t.Fatalf("reading reply: %v", err)
	}
	rep, err := parseReply(rec)
	if err != nil {
		r.t.Fatalf("malformed reply %x: %v", rec, err)
	}
	return rep
}

// expectClosed asserts that the server closes the connection (after any
// replies already sent).
func (r *rawConn) expectClosed() {
	r.t.Helper()
	r.nc.SetReadDeadline(time.Now().Add(5 * time.Second))
	buf := make([]byte, 4096)
	for {
		_, err := r.nc.Read(buf)
		if err == nil {
			continue
		}
		var ne net.Error
		if errors.As(err, &ne) && ne.Timeout() {
			r.t.Fatal("server did not close the connection")
		}
		return // EOF or reset
	}
}

// callMsg builds a call message (without record mark).
type callMsg struct {
	xid, rpcvers, prog, vers, proc uint32
	cred, verf                     OpaqueAuth
	rawCred                        []byte // if set, replaces the encoded cred and verf
	args                           []byte
}

func (m callMsg) bytes() []byte {
	var b []byte
	b = xdr.AppendUint32(b, m.xid)
	b = xdr.AppendUint32(b, MsgCall)
	b = xdr.AppendUint32(b, m.rpcvers)
	b = xdr.AppendUint32(b, m.prog)
	b = xdr.AppendUint32(b, m.vers)
	b = xdr.AppendUint32(b, m.proc)
	if m.rawCred != nil {
		b = append(b, m.rawCred...)
	} else {
		b = m.cred.Append(b)
		b = m.verf.Append(b)
	}
	return append(b, m.args...)
}

func newCall(xid, proc uint32, args []byte) callMsg {
	return callMsg{xid: xid, rpcvers: 2, prog: testProg, vers: 3, proc: proc, args: args}
}

// reply is a decoded reply message.
type reply struct {
	xid        uint32
	replyStat  uint32
	acceptStat AcceptStat
	low, high  uint32
	rejectStat uint32
	authStat   AuthStat
	results    []byte
}

// parseReply decodes a reply strictly: every field well-formed, and nothing
// after the body except the results of a SUCCESS.
func parseReply(rec []byte) (reply, error) {
	var r reply
	d := xdr.NewDecoder(rec)
	r.xid = d.Uint32()
	if mt := d.Uint32(); d.Err() == nil && mt != MsgReply {
		return r, fmt.Errorf("msg_type %d", mt)
	}
	r.replyStat = d.Uint32()
	switch {
	case d.Err() != nil:
	case r.replyStat == MsgAccepted:
		var verf OpaqueAuth
		verf.Decode(d)
		if d.Err() == nil && (verf.Flavor != AuthNone || len(verf.Body) != 0) {
			return r, fmt.Errorf("verifier %v", verf)
		}
		r.acceptStat = AcceptStat(d.Uint32())
		switch {
		case d.Err() != nil:
		case r.acceptStat == Success:
			r.results = d.Rest()
			return r, nil
		case r.acceptStat == ProgMismatch:
			r.low, r.high = d.Uint32(), d.Uint32()
		case r.acceptStat > SystemErr:
			return r, fmt.Errorf("accept_stat %d", r.acceptStat)
		}
	case r.replyStat == MsgDenied:
		r.rejectStat = d.Uint32()
		switch {
		case d.Err() != nil:
		case r.rejectStat == RPCMismatch:
			r.low, r.high = d.Uint32(), d.Uint32()
		case r.rejectStat == AuthError:
			r.authStat = AuthStat(d.Uint32())
			if d.Err() == nil && r.authStat > AuthFailed {
				return r, fmt.Errorf("auth_stat %d", r.authStat)
			}
		default:
			return r, fmt.Errorf("reject_stat %d", r.rejectStat)
		}
	default:
		return r, fmt.Errorf("reply_stat %d", r.replyStat)
	}
	if d.Err() != nil {
		return r, d.Err()
	}
	if d.Remaining() != 0 {
		return r, fmt.Errorf("%d trailing bytes", d.Remaining())
	}
	return r, nil
}

func u32(v uint32) []byte { return xdr.AppendUint32(nil, v) }

// opaqueArg and opaqueRes are procEcho's arguments and results.
type opaqueArg []byte

func (a opaqueArg) Append(b []byte) []byte { return xdr.AppendOpaque(b, a) }

type opaqueRes struct{ b []byte }

func (r *opaqueRes) Decode(d *xdr.Decoder) { r.b = d.Opaque(1 << 21) }

type u32Arg uint32

func (a u32Arg) Append(b []byte) []byte { return xdr.AppendUint32(b, uint32(a)) }

type u32Res struct{ v uint32 }

func (r *u32Res) Decode(d *xdr.Decoder) { r.v = d.Uint32() }

// leakCheck records the goroutine count; the returned function waits for it
// to come back down and fails the test with a dump if it does not.
func leakCheck(t testing.TB) func() {
	before := runtime.NumGoroutine()
	return func() {
		t.Helper()
		deadline := time.Now().Add(5 * time.Second)
		for time.Now().Before(deadline) {
			if runtime.NumGoroutine() <= before {
				return
			}
			time.Sleep(20 * time.Millisecond)
		}
		buf := make([]byte, 1<<20)
		n := runtime.Stack(buf, true)
		t.Fatalf("goroutines: %d before, %d after\n%s", before, runtime.NumGoroutine(), buf[:n])
	}
}

// blackhole accepts connections and records what arrives, never answering.
type blackhole struct {
	ln    net.Listener
	mu    sync.Mutex
	data  bytes.Buffer
	conns int
	wg    sync.WaitGroup
}

func newBlackhole(t testing.TB) *blackhole {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	bh := &blackhole{ln: ln}
	var open []net.Conn
	var openMu sync.Mutex
	bh.wg.Add(1)
	go func() {
		defer bh.wg.Done()
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			openMu.Lock()
			open = append(open, c)
			openMu.Unlock()
			bh.mu.Lock()
			bh.conns++
			bh.mu.Unlock()
			bh.wg.Add(1)
			go func() {
				defer bh.wg.Done()
				buf := make([]byte, 4096)
				for {
					n, err := c.Read(buf)
					bh.mu.Lock()
					bh.data.Write(buf[:n])
					bh.mu.Unlock()
					if err != nil {
						return
					}
				}
			}()
		}
	}()
	t.Cleanup(func() {
		ln.Close()
		openMu.Lock()
		for _, c := range open {
			c.Close()
		}
		openMu.Unlock()
		bh.wg.Wait()
	})
	return bh
}

func (bh *blackhole) addr() string { return bh.ln.Addr().String() }

// records splits what arrived into records.
func (bh *blackhole) records() [][]byte {
	bh.mu.Lock()
	data := append([]byte(nil), bh.data.Bytes()...)
	bh.mu.Unlock()
	var recs [][]byte
	r := bytes.NewReader(data)
	for {
		rec, err := ReadRecord(r, nil, DefaultMaxRecord)
		if err != nil {
			if !errors.Is(err, io.EOF) {
				recs = append(recs, nil) // marks a partial record
			}
			return recs
		}
		recs = append(recs, rec)
	}
}

func (bh *blackhole) numConns() int {
	bh.mu.Lock()
	defer bh.mu.Unlock()
	return bh.conns
}
