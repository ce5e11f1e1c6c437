package test

import (
	"bytes"
	"context"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"hushfs/internal/proto"
	"hushfs/internal/proto/nfsv41"
	"hushfs/test/harness"
)

// compoundLog records each COMPOUND's name and operations, SEQUENCE left
// out, in order.
type compoundLog struct {
	mu  sync.Mutex
	got []string
}

func (l *compoundLog) hooks() proto.Hooks {
	return proto.Hooks{Finished: func(s *proto.CallStats) {
		l.mu.Lock()
		defer l.mu.Unlock()
		l.got = append(l.got, s.Name+": "+strings.Join(s.Ops[1:], " "))
	}}
}

func (l *compoundLog) take() []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	out := l.got
	l.got = nil
	return out
}

// manualTimer is the CLOSE queue's clock: its timers fire when the test
// says.
type manualTimer struct {
	mu  sync.Mutex
	fns []func()
}

func (m *manualTimer) afterFunc(d time.Duration, f func()) func() bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	i := len(m.fns)
	m.fns = append(m.fns, f)
	return func() bool {
		m.mu.Lock()
		defer m.mu.Unlock()
		if m.fns[i] == nil {
			return false
		}
		m.fns[i] = nil
		return true
	}
}

// fire runs the armed timers' functions and waits for them.
func (m *manualTimer) fire() {
	m.mu.Lock()
	fns := m.fns
	m.fns = nil
	m.mu.Unlock()
	for _, f := range fns {
		if f != nil {
			f()
		}
	}
}

// TestNFSv41CloseQueue drives the v4.1 protocol package against ganesha
// and checks the operations of every COMPOUND: a last close sends nothing
// and its CLOSE rides after the next COMPOUND's operations; an OPEN of the
// same file takes it back (no CLOSE; the server's open is the same), but
// for a writer's open reopened for reading, whose CLOSE goes first in the
// OPEN's COMPOUND; a COMPOUND whose own operation fails leaves it to the
// next; a REMOVE
// carries it before its own; the queue's timer and unmount send it alone;
// an OPEN for reading brings the file's first bytes (READ under the
// current stateid) with the attributes they belong to. A second client
// opening with DENY_READ proves the server's opens are closed when the
// CLOSEs say so.
func TestNFSv41CloseQueue(t *testing.T) {
	g := harness.StartGanesha(t, harness.GaneshaOptions{NFSv4: true})
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	var log compoundLog
	var clock manualTimer
	mount := func(hooks proto.Hooks, after func(time.Duration, func()) func() bool) (*nfsv41.Server, proto.Export) {
		srv, exp, err := nfsv41.Mount(ctx, nfsv41.Config{
			Server: g.Addr, Export: g.ExportPath, Port: g.NFSPort, Timeo: 10 * time.Second, Retrans: 2,
			Dial: func(ctx context.Context, addr string) (net.Conn, error) { return g.NS.Dial(ctx, addr) },
			Logf: t.Logf, Hooks: hooks, AfterFunc: after,
		}, &proto.Cred{})
		if err != nil {
			t.Fatalf("mount over NFSv4.1: %v", err)
		}
		return srv, exp
	}
	srv, exp := mount(log.hooks(), clock.afterFunc)
	defer srv.Close()
	other, _ := mount(proto.Hooks{}, nil)
	defer other.Close()
	c := &proto.Cred{}

	data := pattern(3000, 5)
	for _, name := range []string{"a", "b", "c"} {
		must(t, "write on the server", os.WriteFile(filepath.Join(g.ExportDir, name), data, 0o644))
	}
	fhOf := func(name string) proto.FH {
		r, err := srv.Lookup(ctx, c, exp.Root, name)
		okStatus(t, "lookup "+name, err, r.Status)
		return r.FH
	}
	a, b, cc := fhOf("a"), fhOf("b"), fhOf("c")
	log.take()
	open := func(fh proto.FH, readFirst uint32) proto.OpenRes {
		t.Helper()
		r, err := srv.Open(ctx, c, proto.OpenArgs{FH: fh, Access: proto.ShareRead, Check: 1, ReadFirst: readFirst})
		okStatus(t, "open", err, r.Status)
		return r
	}
	closeIt := func(fh proto.FH, r proto.OpenRes) {
		t.Helper()
		must(t, "close", srv.CloseOpen(ctx, c, fh, r.State))
	}
	// otherClose closes the other client's open at once: its CLOSE rides
	// with a GETATTR, before the next probe.
	otherClose := func(fh proto.FH, st proto.StateID) {
		t.Helper()
		must(t, "close by another client", other.CloseOpen(ctx, c, fh, st))
		if _, err := other.GetAttr(ctx, c, exp.Root); err != nil {
			t.Fatalf("another client's GETATTR: %v", err)
		}
	}
	// denied reports whether another client's OPEN with DENY_READ is
	// refused: someone (we) still has the file open for reading.
	denied := func(fh proto.FH) bool {
		t.Helper()
		r, err := other.Open(ctx, c, proto.OpenArgs{FH: fh, Access: proto.ShareRead, Deny: proto.ShareRead})
		if err != nil {
			t.Fatalf("open by another client: %v", err)
		}
		if r.Status == nil {
			otherClose(fh, r.State)
			return false
		}
		return true
	}
	expect := func(what string, want ...string) {
		t.Helper()
		got := log.take()
		t.Logf("%s: %q", what, got)
		if !slices.Equal(got, want) {
			t.Errorf("%s: COMPOUNDs\n  %s\nwant\n  %s", what, strings.Join(got, "\n  "), strings.Join(want, "\n  "))
		}
	}

	// The first read in the OPEN's COMPOUND, with the data as the server has it.
	ra := open(a, 4096)
	expect("open a with its first read", "OPEN: PUTFH OPEN GETATTR ACCESS READ GETATTR")
	if !ra.HasData || !bytes.Equal(ra.Data, data) || !ra.DataEOF {
		t.Errorf("open a: first read %v, %d bytes, eof %v; want the file's %d bytes to its end", ra.HasData, len(ra.Data), ra.DataEOF, len(data))
	}
	closeIt(a, ra)
	expect("last close of a")
	if !denied(a) {
		t.Errorf("a is not open at the server while its CLOSE is queued")
	}
	// Its CLOSE rides after the next COMPOUND's operations.
	rb := open(b, 0)
	expect("open b", "OPEN: PUTFH OPEN GETATTR ACCESS PUTFH CLOSE")
	if denied(a) {
		t.Errorf("a is still open at the server after the CLOSE carried by b's OPEN")
	}
	// A re-open while the CLOSE is queued takes the open back.
	closeIt(b, rb)
	rb2 := open(b, 0)
	expect("re-open b", "OPEN: PUTFH OPEN GETATTR ACCESS")
	if rb2.State.Other != rb.State.Other {
		t.Errorf("re-open of b: a new open %x, not the one taken back %x", rb2.State.Other, rb.State.Other)
	}
	// A writer's open reopened for reading: its CLOSE goes first, in the
	// OPEN's COMPOUND (taken back, the server would keep the write access
	// the core no longer counts).
	closeIt(b, rb2)
	rw, err := srv.Open(ctx, c, proto.OpenArgs{FH: b, Access: proto.ShareBoth, Check: 1})
	okStatus(t, "open b for writing", err, rw.Status)
	closeIt(b, rw)
	log.take()
	rb2 = open(b, 0)
	expect("re-open for reading of b opened for writing", "OPEN: PUTFH CLOSE PUTFH OPEN GETATTR ACCESS")
	if r, err := other.Open(ctx, c, proto.OpenArgs{FH: b, Access: proto.ShareRead, Deny: proto.ShareWrite}); err != nil || r.Status != nil {
		t.Errorf("another client's DENY_WRITE open of b refused after the reopen for reading: %v %v", err, r.Status)
	} else {
		otherClose(b, r.State)
	}
	// A COMPOUND whose own operation fails leaves the CLOSE to the next.
	closeIt(b, rb2)
	if r, err := srv.Lookup(ctx, c, exp.Root, "absent"); err != nil || r.Status == nil {
		t.Fatalf("lookup of an absent name: %v, %v", err, r.Status)
	}
	if _, err := srv.GetAttr(ctx, c, exp.Root); err != nil {
		t.Fatal(err)
	}
	expect("a failed LOOKUP, then a GETATTR",
		"LOOKUP: PUTFH GETATTR LOOKUP GETFH GETATTR PUTFH CLOSE", "GETATTR: PUTFH GETATTR PUTFH CLOSE")
	if denied(b) {
		t.Errorf("b is still open at the server after its CLOSE")
	}
	// A REMOVE carries the CLOSE before its own operations.
	rc := open(cc, 0)
	closeIt(cc, rc)
	log.take()
	r, err := srv.Remove(ctx, c, exp.Root, "c")
	okStatus(t, "remove c", err, r.Status)
	expect("remove c after its last close", "REMOVE: PUTFH CLOSE PUTFH GETATTR LOOKUP NVERIFY PUTFH REMOVE GETATTR")
	// Nothing to carry it: the queue's timer sends it alone.
	ra = open(a, 0)
	closeIt(a, ra)
	clock.fire()
	expect("the timer", "OPEN: PUTFH OPEN GETATTR ACCESS", "CLOSE: PUTFH CLOSE")
	// A file of 200 KiB in the same COMPOUND: the session keeps room for it.
	bigData := pattern(200<<10, 6)
	must(t, "write on the server", os.WriteFile(filepath.Join(g.ExportDir, "big"), bigData, 0o644))
	big := fhOf("big")
	rbig := open(big, 256<<10)
	if !rbig.HasData || !bytes.Equal(rbig.Data, bigData) {
		t.Errorf("open of a 200 KiB file: first read %v, %d bytes; want all %d", rbig.HasData, len(rbig.Data), len(bigData))
	}
	closeIt(big, rbig)
	log.take()
	clock.fire()
	log.take()
	// And one of 600 KiB whole (grep -r's larger source files).
	bigData = pattern(600<<10, 7)
	must(t, "write on the server", os.WriteFile(filepath.Join(g.ExportDir, "bigger"), bigData, 0o644))
	big = fhOf("bigger")
	rbig = open(big, 600<<10)
	if !rbig.HasData || !bytes.Equal(rbig.Data, bigData) {
		t.Errorf("open of a 600 KiB file: first read %v, %d bytes; want all %d", rbig.HasData, len(rbig.Data), len(bigData))
	}
	closeIt(big, rbig)
	log.take()
	clock.fire()
	log.take()
	// A CLOSE still queued at unmount is sent then.
	ra = open(a, 0)
	closeIt(a, ra)
	must(t, "unmount", srv.Close())
	if got := log.take(); len(got) != 2 || got[1] != "CLOSE: PUTFH CLOSE" {
		t.Errorf("unmount with a CLOSE queued: COMPOUNDs %q, want the OPEN and a CLOSE", got)
	}
	if denied(a) {
		t.Errorf("a is still open at the server after unmount")
	}
}
