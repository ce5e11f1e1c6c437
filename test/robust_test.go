package test

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"os"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"hushfs/internal/nfs3"
	"hushfs/internal/xdr"
	"hushfs/test/harness"
)

// This file talks to `hushfs serve` with bytes built by hand, independent
// of internal/rpc: the server's RPC layer is checked against RFC 5531 by
// something that shares no code with it.

// Wire constants of RFC 5531, spelled out here on purpose.
const (
	msgCall, msgReply             = 0, 1
	msgAccepted, msgDenied        = 0, 1
	acceptSuccess, progUnavail    = 0, 1
	progMismatch, procUnavail     = 2, 3
	garbageArgs                   = 4
	rejectRPCMismatch, rejectAuth = 0, 1
	authBadCred, authRejectedCred = 1, 2
	authTooWeak                   = 5
	flavorNone, flavorSys         = 0, 1
)

// rawReply is a decoded reply_msg.
type rawReply struct {
	xid, mtype, replyStat uint32
	acceptStat            uint32 // accepted
	low, high             uint32 // PROG_MISMATCH or RPC_MISMATCH
	rejectStat, authStat  uint32 // denied
	results               []byte // SUCCESS: procedure results
}

func (r *rawReply) String() string {
	if r.replyStat == msgDenied {
		return fmt.Sprintf("xid %#x DENIED reject_stat %d auth_stat %d versions %d..%d",
			r.xid, r.rejectStat, r.authStat, r.low, r.high)
	}
	return fmt.Sprintf("xid %#x ACCEPTED accept_stat %d versions %d..%d", r.xid, r.acceptStat, r.low, r.high)
}

func decodeReply(rec []byte) (*rawReply, error) {
	d := xdr.NewDecoder(rec)
	r := &rawReply{xid: d.Uint32(), mtype: d.Uint32(), replyStat: d.Uint32()}
	if r.mtype != msgReply {
		return nil, fmt.Errorf("message type %d, not REPLY", r.mtype)
	}
	switch r.replyStat {
	case msgAccepted:
		d.Uint32()    // verifier flavor
		d.Opaque(400) // verifier body
		r.acceptStat = d.Uint32()
		switch r.acceptStat {
		case acceptSuccess:
			r.results = d.Rest()
		case progMismatch:
			r.low, r.high = d.Uint32(), d.Uint32()
		}
	case msgDenied:
		r.rejectStat = d.Uint32()
		if r.rejectStat == rejectRPCMismatch {
			r.low, r.high = d.Uint32(), d.Uint32()
		} else {
			r.authStat = d.Uint32()
		}
	default:
		return nil, fmt.Errorf("reply_stat %d", r.replyStat)
	}
	return r, d.Err()
}

// callSpec describes one call message; zero fields take sane defaults
// (RPC version 2, AUTH_SYS root credential, AUTH_NONE verifier).
type callSpec struct {
	xid, rpcvers, prog, vers, proc uint32
	credFlavor                     uint32
	cred                           []byte // nil: AUTH_SYS root
	args                           []byte
}

// authSysBody encodes authsys_parms by hand.
func authSysBody(machine string, uid, gid uint32, gids []uint32) []byte {
	b := xdr.AppendUint32(nil, 0) // stamp
	b = xdr.AppendString(b, machine)
	b = xdr.AppendUint32(b, uid)
	b = xdr.AppendUint32(b, gid)
	b = xdr.AppendUint32(b, uint32(len(gids)))
	for _, g := range gids {
		b = xdr.AppendUint32(b, g)
	}
	return b
}

// record returns the call as one record-marked fragment.
func (c callSpec) record() []byte {
	if c.rpcvers == 0 {
		c.rpcvers = 2
	}
	cred := c.cred
	if cred == nil && c.credFlavor == flavorSys {
		cred = authSysBody("robust", 0, 0, nil)
	}
	b := xdr.AppendUint32(nil, 0)
	b = xdr.AppendUint32(b, c.xid)
	b = xdr.AppendUint32(b, msgCall)
	b = xdr.AppendUint32(b, c.rpcvers)
	b = xdr.AppendUint32(b, c.prog)
	b = xdr.AppendUint32(b, c.vers)
	b = xdr.AppendUint32(b, c.proc)
	b = xdr.AppendUint32(b, c.credFlavor)
	b = xdr.AppendOpaque(b, cred)
	b = xdr.AppendUint32(b, flavorNone)
	b = xdr.AppendOpaque(b, nil)
	b = append(b, c.args...)
	xdr.PutUint32(b, 0, 1<<31|uint32(len(b)-4))
	return b
}

// rawConn is a plain TCP connection to the server.
type rawConn struct {
	t testing.TB
	c net.Conn
}

func dialRaw(t testing.TB, addr string) *rawConn {
	t.Helper()
	c, err := net.DialTimeout("tcp", addr, 5*time.Second)
	if err != nil {
		t.Fatalf("dial %s: %v", addr, err)
	}
	t.Cleanup(func() { c.Close() })
	return &rawConn{t: t, c: c}
}

func (r *rawConn) send(b []byte) error {
	r.c.SetWriteDeadline(time.Now().Add(5 * time.Second))
	_, err := r.c.Write(b)
	return err
}

func (r *rawConn) mustSend(b []byte) {
	r.t.Helper()
	if err := r.send(b); err != nil {
		r.t.Fatalf("send: %v", err)
	}
}

// reply reads the next reply, within 5 s.
func (r *rawConn) reply() (*rawReply, error) {
	r.c.SetReadDeadline(time.Now().Add(5 * time.Second))
	rec, err := harness.ReadRecord(r.c, 1<<20)
	if err != nil {
		return nil, err
	}
	return decodeReply(rec)
}

func (r *rawConn) mustReply(xid uint32) *rawReply {
	r.t.Helper()
	rep, err := r.reply()
	if err != nil {
		r.t.Fatalf("reply to xid %#x: %v", xid, err)
	}
	if rep.xid != xid {
		r.t.Fatalf("reply xid %#x, want %#x", rep.xid, xid)
	}
	return rep
}

// call sends one call and returns its reply.
func (r *rawConn) call(c callSpec) *rawReply {
	r.t.Helper()
	r.mustSend(c.record())
	return r.mustReply(c.xid)
}

// expectClosed asserts that the server closes the connection within 5 s
// without sending anything.
func (r *rawConn) expectClosed(what string) {
	r.t.Helper()
	r.c.SetReadDeadline(time.Now().Add(5 * time.Second))
	buf := make([]byte, 4096)
	n, err := io.ReadAtLeast(r.c, buf, 1)
	switch {
	case n > 0:
		r.t.Errorf("%s: server sent %d bytes (% x...), want the connection closed", what, n, buf[:min(n, 32)])
	case errors.Is(err, os.ErrDeadlineExceeded):
		r.t.Errorf("%s: connection still open after 5 s, want it closed", what)
	case errors.Is(err, io.EOF) || errors.Is(err, syscall.ECONNRESET):
		// closed, as it should be
	default:
		r.t.Errorf("%s: unexpected read error %v", what, err)
	}
}

// rawMount returns the root handle with a hand-built MNT.
func rawMount(t testing.TB, addr, path string) nfs3.FH {
	t.Helper()
	r := dialRaw(t, addr)
	rep := r.call(callSpec{xid: 1, prog: nfs3.MountProgram, vers: 3, proc: 1, credFlavor: flavorSys,
		args: xdr.AppendString(nil, path)})
	if rep.replyStat != msgAccepted || rep.acceptStat != acceptSuccess {
		t.Fatalf("MNT %s: %v", path, rep)
	}
	d := xdr.NewDecoder(rep.results)
	st := d.Uint32()
	fh := d.Opaque(64)
	if d.Err() != nil || st != 0 || len(fh) == 0 {
		t.Fatalf("MNT %s: status %d handle %x err %v", path, st, fh, d.Err())
	}
	return bytes.Clone(fh)
}

func getattrArgs(fh nfs3.FH) []byte { return xdr.AppendOpaque(nil, fh) }

// TestServeRobustRPC sends malformed, hostile and unsupported messages to
// the `hushfs serve` process and checks each gets the reply RFC 5531
// prescribes or a closed connection, and that afterwards the server still
// answers correctly and has not grown.
func TestServeRobustRPC(t *testing.T) {
	dir := t.TempDir()
	if err := os.WriteFile(dir+"/f", []byte("data"), 0o644); err != nil {
		t.Fatal(err)
	}
	s := harness.StartServe(t, dir)
	root := rawMount(t, s.MountAddr, s.ExportPath)
	const nfsProg, mountProg = nfs3.Program, nfs3.MountProgram

	// After each rejected call the same connection must still work.
	nullOK := func(t *testing.T, r *rawConn, xid uint32) {
		t.Helper()
		rep := r.call(callSpec{xid: xid, prog: nfsProg, vers: 3, proc: 0, credFlavor: flavorNone})
		if rep.replyStat != msgAccepted || rep.acceptStat != acceptSuccess {
			t.Errorf("NULL after the rejected call: %v", rep)
		}
	}

	t.Run("unknown program", func(t *testing.T) {
		r := dialRaw(t, s.NFSAddr)
		for i, prog := range []uint32{100004, 0, 0xffffffff} {
			xid := uint32(10 + i)
			rep := r.call(callSpec{xid: xid, prog: prog, vers: 1, proc: 0, credFlavor: flavorNone})
			if rep.replyStat != msgAccepted || rep.acceptStat != progUnavail {
				t.Errorf("program %d: %v, want PROG_UNAVAIL", prog, rep)
			}
		}
		nullOK(t, r, 19)
	})

	t.Run("unknown version", func(t *testing.T) {
		r := dialRaw(t, s.NFSAddr)
		// The server speaks NFSv3 and NFSv4 (minor version 1).
		for i, vers := range []uint32{2, 5, 0xffffffff} {
			xid := uint32(20 + i)
			rep := r.call(callSpec{xid: xid, prog: nfsProg, vers: vers, proc: 0, credFlavor: flavorNone})
			if rep.replyStat != msgAccepted || rep.acceptStat != progMismatch || rep.low != 3 || rep.high != 4 {
				t.Errorf("NFS version %d: %v, want PROG_MISMATCH 3..4", vers, rep)
			}
		}
		rep := r.call(callSpec{xid: 25, prog: mountProg, vers: 4, proc: 0, credFlavor: flavorNone})
		if rep.replyStat != msgAccepted || rep.acceptStat != progMismatch || rep.high != 3 || rep.low < 1 || rep.low > 3 {
			t.Errorf("MOUNT version 4: %v, want PROG_MISMATCH with high 3", rep)
		}
		nullOK(t, r, 29)
	})

	t.Run("unknown procedure", func(t *testing.T) {
		r := dialRaw(t, s.NFSAddr)
		for i, c := range []struct{ prog, proc uint32 }{
			{nfsProg, nfs3.NumProcs}, {nfsProg, 1000}, {nfsProg, 0xffffffff}, {mountProg, nfs3.NumMountProcs},
		} {
			xid := uint32(30 + i)
			rep := r.call(callSpec{xid: xid, prog: c.prog, vers: 3, proc: c.proc, credFlavor: flavorSys})
			if rep.replyStat != msgAccepted || rep.acceptStat != procUnavail {
				t.Errorf("program %d procedure %d: %v, want PROC_UNAVAIL", c.prog, c.proc, rep)
			}
		}
		nullOK(t, r, 39)
	})

	t.Run("RPC version 3", func(t *testing.T) {
		r := dialRaw(t, s.NFSAddr)
		rep := r.call(callSpec{xid: 40, rpcvers: 3, prog: nfsProg, vers: 3, proc: 0})
		if rep.replyStat != msgDenied || rep.rejectStat != rejectRPCMismatch || rep.low != 2 || rep.high != 2 {
			t.Errorf("RPC version 3: %v, want DENIED RPC_MISMATCH 2..2", rep)
		}
	})

	t.Run("auth flavors", func(t *testing.T) {
		r := dialRaw(t, s.NFSAddr)
		body := []byte("opaque credential body from an unsupported flavor")
		// An unsupported flavor may be refused as a bad credential, one the
		// client must replace, or one too weak (RFC 5531 §9 leaves the
		// choice to the server); a malformed AUTH_SYS body is a bad
		// credential.
		unsupported := []uint32{authBadCred, authRejectedCred, authTooWeak}
		malformed := []uint32{authBadCred}
		for i, c := range []struct {
			name   string
			flavor uint32
			cred   []byte
			want   []uint32
		}{
			{"AUTH_SHORT", 2, body, unsupported},
			{"RPCSEC_GSS", 6, body, unsupported},
			{"390003 (krb5)", 390003, body, unsupported},
			{"AUTH_SYS machine name of 256 bytes", flavorSys, authSysBody(strings.Repeat("m", 256), 0, 0, nil), malformed},
			{"AUTH_SYS with 17 groups", flavorSys, authSysBody("m", 0, 0, make([]uint32, 17)), malformed},
			{"AUTH_SYS truncated", flavorSys, authSysBody("m", 0, 0, nil)[:10], malformed},
			{"AUTH_SYS with trailing bytes", flavorSys, append(authSysBody("m", 0, 0, nil), 0, 0, 0, 0), malformed},
		} {
			xid := uint32(50 + i)
			rep := r.call(callSpec{xid: xid, prog: nfsProg, vers: 3, proc: nfs3.ProcGetattr,
				credFlavor: c.flavor, cred: c.cred, args: getattrArgs(root)})
			if rep.replyStat != msgDenied || rep.rejectStat != rejectAuth || !slices.Contains(c.want, rep.authStat) {
				t.Errorf("%s: %v, want DENIED AUTH_ERROR with auth_stat in %v", c.name, rep, c.want)
			} else {
				t.Logf("%s: AUTH_ERROR auth_stat %d", c.name, rep.authStat)
			}
		}
		nullOK(t, r, 59)
	})

	t.Run("credential over 400 bytes", func(t *testing.T) {
		// The record is well formed, so the server may answer (AUTH_ERROR)
		// or drop the connection; it must not accept the call.
		r := dialRaw(t, s.NFSAddr)
		r.mustSend(callSpec{xid: 60, prog: nfsProg, vers: 3, proc: nfs3.ProcGetattr, credFlavor: flavorSys,
			cred: make([]byte, 404), args: getattrArgs(root)}.record())
		rep, err := r.reply()
		if err == nil && (rep.xid != 60 || rep.replyStat != msgDenied || rep.rejectStat != rejectAuth) {
			t.Errorf("404-byte credential: %v, want AUTH_ERROR or a closed connection", rep)
		}
		logOutcome(t, "404-byte credential", rep, err)
	})

	t.Run("truncated arguments", func(t *testing.T) {
		r := dialRaw(t, s.NFSAddr)
		args := getattrArgs(root)
		for i, a := range [][]byte{nil, args[:2], args[:len(args)-4], xdr.AppendUint32(nil, 65)} {
			xid := uint32(70 + i)
			rep := r.call(callSpec{xid: xid, prog: nfsProg, vers: 3, proc: nfs3.ProcGetattr, credFlavor: flavorSys, args: a})
			if rep.replyStat != msgAccepted || rep.acceptStat != garbageArgs {
				t.Errorf("GETATTR with args % x: %v, want GARBAGE_ARGS", a, rep)
			}
		}
		nullOK(t, r, 79)
	})

	t.Run("message that is not a call", func(t *testing.T) {
		// A REPLY sent to the server: no reply to it is possible; the
		// server either ignores it or hangs up.
		r := dialRaw(t, s.NFSAddr)
		bogus := xdr.AppendUint32(nil, 0)
		bogus = xdr.AppendUint32(bogus, 80)
		bogus = xdr.AppendUint32(bogus, msgReply)
		bogus = xdr.AppendUint32(bogus, msgAccepted)
		xdr.PutUint32(bogus, 0, 1<<31|uint32(len(bogus)-4))
		r.mustSend(bogus)
		if err := r.send(callSpec{xid: 81, prog: nfsProg, vers: 3, proc: 0, credFlavor: flavorNone}.record()); err != nil {
			return // already closed
		}
		rep, err := r.reply()
		if err == nil && (rep.xid != 81 || rep.acceptStat != acceptSuccess) {
			t.Errorf("after a REPLY message: %v, want the NULL's reply or a closed connection", rep)
		}
		logOutcome(t, "REPLY message, then NULL", rep, err)
	})

	t.Run("truncated call header", func(t *testing.T) {
		r := dialRaw(t, s.NFSAddr)
		rec := callSpec{xid: 90, prog: nfsProg, vers: 3, proc: 0}.record()
		short := append([]byte(nil), rec[:4+14]...)
		xdr.PutUint32(short, 0, 1<<31|14) // a complete record holding half a header
		r.mustSend(short)
		if err := r.send(callSpec{xid: 91, prog: nfsProg, vers: 3, proc: 0, credFlavor: flavorNone}.record()); err != nil {
			return
		}
		rep, err := r.reply()
		if err == nil && (rep.xid != 91 || rep.acceptStat != acceptSuccess) {
			t.Errorf("after a truncated header: %v, want the NULL's reply or a closed connection", rep)
		}
		logOutcome(t, "truncated header, then NULL", rep, err)
	})

	t.Run("truncated record", func(t *testing.T) {
		r := dialRaw(t, s.NFSAddr)
		rec := callSpec{xid: 100, prog: nfsProg, vers: 3, proc: nfs3.ProcGetattr, credFlavor: flavorSys,
			args: getattrArgs(root)}.record()
		r.mustSend(rec[:len(rec)/2])
		r.c.(*net.TCPConn).CloseWrite()
		r.expectClosed("record cut short by EOF")
	})

	t.Run("2 GiB fragment", func(t *testing.T) {
		for _, mark := range []uint32{0xffffffff, 0x7fffffff} {
			r := dialRaw(t, s.NFSAddr)
			b := xdr.AppendUint32(nil, mark)
			b = append(b, make([]byte, 1024)...)
			if err := r.send(b); err != nil {
				continue // already closed: fine
			}
			r.expectClosed(fmt.Sprintf("fragment header %#x", mark))
		}
	})

	t.Run("many fragments over the limit", func(t *testing.T) {
		// 64 KiB non-final fragments adding up to 16 MiB: no single header
		// is large, the record is.
		r := dialRaw(t, s.NFSAddr)
		frag := append(xdr.AppendUint32(nil, 65536), make([]byte, 65536)...)
		for i := 0; i < 256; i++ {
			if err := r.send(frag); err != nil {
				break // closed while we were still sending: fine
			}
		}
		r.expectClosed("16 MiB record in 64 KiB fragments")
	})

	t.Run("garbage bytes", func(t *testing.T) {
		r := dialRaw(t, s.NFSAddr)
		junk := []byte("GET / HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
		rnd := rand.New(rand.NewPCG(1, 2))
		for range 4096 {
			junk = append(junk, byte(rnd.Uint32()))
		}
		if err := r.send(junk); err == nil {
			r.expectClosed("HTTP request and random bytes")
		}
	})

	t.Run("empty records", func(t *testing.T) {
		r := dialRaw(t, s.NFSAddr)
		var b []byte
		for range 1000 {
			b = xdr.AppendUint32(b, 0) // empty non-final fragment
		}
		if err := r.send(b); err == nil {
			r.expectClosed("1000 empty fragments")
		}
	})

	// After all of it: a fresh connection gets a correct GETATTR.
	r := dialRaw(t, s.NFSAddr)
	rep := r.call(callSpec{xid: 200, prog: nfsProg, vers: 3, proc: nfs3.ProcGetattr, credFlavor: flavorSys,
		args: getattrArgs(root)})
	if rep.replyStat != msgAccepted || rep.acceptStat != acceptSuccess {
		t.Fatalf("final GETATTR: %v", rep)
	}
	var res nfs3.GetattrRes
	d := xdr.NewDecoder(rep.results)
	res.Decode(d)
	if d.Err() != nil || d.Remaining() != 0 {
		t.Fatalf("final GETATTR: decode: %v (%d bytes left)", d.Err(), d.Remaining())
	}
	if res.Status != nfs3.OK {
		t.Fatalf("final GETATTR: %v", res.Status)
	}
	checkAttr(t, "root after the abuse", &res.Attr, dir)

	if !s.Alive() {
		t.Fatalf("server died:\n%s", s.Output())
	}
	// Hostile lengths must not have been allocated.
	if rss := vmRSS(t, s.Cmd.Process.Pid); rss > 256<<20 {
		t.Errorf("server RSS %d MiB after the hostile input, want < 256 MiB", rss>>20)
	}
}

// logOutcome records which of the allowed behaviours the server chose.
func logOutcome(t *testing.T, what string, rep *rawReply, err error) {
	t.Helper()
	if err != nil {
		t.Logf("%s: connection ended (%v)", what, err)
	} else {
		t.Logf("%s: reply %v", what, rep)
	}
}

// vmRSS returns the resident set size of pid in bytes.
func vmRSS(t testing.TB, pid int) int64 {
	t.Helper()
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/status")
	if err != nil {
		t.Fatalf("read status of %d: %v", pid, err)
	}
	for _, line := range strings.Split(string(b), "\n") {
		if f := strings.Fields(line); len(f) >= 2 && f[0] == "VmRSS:" {
			kb, err := strconv.ParseInt(f[1], 10, 64)
			if err != nil {
				t.Fatalf("VmRSS %q: %v", line, err)
			}
			return kb << 10
		}
	}
	t.Fatalf("no VmRSS for pid %d", pid)
	return 0
}
