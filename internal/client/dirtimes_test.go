package client

import (
	"context"
	"os"
	"path/filepath"
	"sync"
	"syscall"
	"testing"
	"time"

	"hushfs/internal/proto"
)

// madeDir makes dir "d" in the export's root as user, with a file in it
// (as tar has when it restores the directory's times); counters start after.
func madeDir(t *testing.T, ts *testServer, fs *FS) NodeID {
	t.Helper()
	ctx := ctxT(t)
	d, err := fs.Mkdir(ctx, user, RootID, "d", 0o700)
	if err != nil {
		t.Fatal(err)
	}
	_, fh, err := fs.Create(ctx, user, d.Node, "f", syscall.O_WRONLY|syscall.O_CREAT|syscall.O_EXCL, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	if err := fs.Flush(ctx, user, fh); err != nil {
		t.Fatal(err)
	}
	fs.Release(ctx, fh)
	resetCounts(ts, fs)
	return d.Node
}

var tarMtime = Timespec{Sec: 1_672_237_593}

func setMtime(t *testing.T, fs *FS, c *Cred, id NodeID) {
	t.Helper()
	a, _, err := fs.SetAttr(ctxT(t), c, id, SetAttrIn{Mtime: SetTime{How: TimeSet, Time: tarMtime}})
	if err != nil || a.Mtime != tarMtime {
		t.Fatalf("utimensat: %v, mtime %v", err, a.Mtime)
	}
}

func serverMtime(t *testing.T, ts *testServer, name string) int64 {
	t.Helper()
	st := serverStat(t, ts, name)
	return st.Mtim.Sec
}

// TestDirTimesMergedWithChmod: tar's utimensat and chmod of a directory it
// made go out as one SETATTR carrying both, and the server has both.
func TestDirTimesMergedWithChmod(t *testing.T) {
	ts := startServer(t)
	fs := ts.mount(t, "")
	fs.dirHold = time.Hour // only the chmod may send them
	d := madeDir(t, ts, fs)
	setMtime(t, fs, user, d)
	wantCalls(t, "utimensat", wireCalls(t, ts, fs), map[string]uint64{})
	if a, _, err := fs.GetAttr(ctxT(t), user, d); err != nil || a.Mtime != tarMtime {
		t.Fatalf("stat after utimensat: %v, mtime %v", err, a.Mtime)
	}
	if _, _, err := fs.SetAttr(ctxT(t), user, d, SetAttrIn{SetMode: true, Mode: 0o755}); err != nil {
		t.Fatal(err)
	}
	wantCalls(t, "chmod", wireCalls(t, ts, fs), map[string]uint64{"SETATTR": 1})
	st := serverStat(t, ts, "d")
	if st.Mtim.Sec != tarMtime.Sec || st.Mode&0o7777 != 0o755 {
		t.Errorf("on the server: mtime %d mode %o, want %d and 755", st.Mtim.Sec, st.Mode&0o7777, tarMtime.Sec)
	}
}

// TestDirTimesSentWhenHoldEnds: times held alone reach the server when
// the hold ends, in one SETATTR.
func TestDirTimesSentWhenHoldEnds(t *testing.T) {
	ts := startServer(t)
	fs := ts.mount(t, "")
	fs.dirHold = 50 * time.Millisecond
	d := madeDir(t, ts, fs)
	setMtime(t, fs, user, d)
	deadline := time.Now().Add(10 * time.Second)
	for fs.Stats().Snapshot().Count("SETATTR") == 0 {
		if time.Now().After(deadline) {
			t.Fatal("the held times never reached the server")
		}
		time.Sleep(10 * time.Millisecond)
	}
	if m := serverMtime(t, ts, "d"); m != tarMtime.Sec {
		t.Errorf("the server's mtime is %d, want %d", m, tarMtime.Sec)
	}
	wantCalls(t, "the hold's end", wireCalls(t, ts, fs), map[string]uint64{"SETATTR": 1})
}

// TestDirTimesBeforeNameChange: a name made in the directory after its
// times were set moves its mtime on the server, as it would locally: the
// held times go out first.
func TestDirTimesBeforeNameChange(t *testing.T) {
	ts := startServer(t)
	fs := ts.mount(t, "")
	fs.dirHold = time.Hour
	d := madeDir(t, ts, fs)
	setMtime(t, fs, user, d)
	if _, err := fs.Mkdir(ctxT(t), user, d, "sub", 0o755); err != nil {
		t.Fatal(err)
	}
	wantCalls(t, "mkdir after utimensat", wireCalls(t, ts, fs), map[string]uint64{"SETATTR": 1, "MKDIR": 1})
	if m := serverMtime(t, ts, "d"); m == tarMtime.Sec {
		t.Errorf("the server's mtime is the one set before the mkdir (%d): the held times went out after it", m)
	}
	if a, _, err := fs.GetAttr(ctxT(t), user, d); err != nil || a.Mtime == tarMtime {
		t.Errorf("stat after the mkdir: %v, mtime %v still the held one", err, a.Mtime)
	}
}

// TestDirTimesNotHeld: times of a directory the client did not make, or
// set by another caller than its owner, go out at once.
func TestDirTimesNotHeld(t *testing.T) {
	ts := startServer(t)
	if err := os.Mkdir(filepath.Join(ts.dir, "theirs"), 0o777); err != nil {
		t.Fatal(err)
	}
	if err := os.Chown(filepath.Join(ts.dir, "theirs"), int(user.UID), int(user.GID)); err != nil {
		t.Fatal(err)
	}
	fs := ts.mount(t, "")
	fs.dirHold = time.Hour
	e, err := fs.Lookup(ctxT(t), user, RootID, "theirs")
	if err != nil {
		t.Fatal(err)
	}
	resetCounts(ts, fs)
	setMtime(t, fs, user, e.Node)
	wantCalls(t, "utimensat of a directory made elsewhere", wireCalls(t, ts, fs), map[string]uint64{"SETATTR": 1})

	// Another caller may not set explicit times: the server's EPERM must
	// reach utimensat.
	d := madeDir(t, ts, fs)
	other := &Cred{UID: 1001, GID: 1001}
	_, _, err = fs.SetAttr(ctxT(t), other, d, SetAttrIn{Mtime: SetTime{How: TimeSet, Time: tarMtime}})
	if err != syscall.EPERM && err.Error() != "NFS3ERR_PERM" {
		t.Errorf("utimensat by another than the owner: %v, want EPERM", err)
	}
	wantCalls(t, "utimensat by another than the owner", wireCalls(t, ts, fs), map[string]uint64{"SETATTR": 1})
}

// TestDirTimesAtUnmount and fsyncdir: what is held is sent.
func TestDirTimesAtUnmount(t *testing.T) {
	ts := startServer(t)
	fs := ts.mount(t, "")
	fs.dirHold = time.Hour
	d := madeDir(t, ts, fs)
	setMtime(t, fs, user, d)
	if err := fs.FsyncDir(ctxT(t), d); err != nil {
		t.Fatal(err)
	}
	if m := serverMtime(t, ts, "d"); m != tarMtime.Sec {
		t.Errorf("after fsyncdir the server's mtime is %d, want %d", m, tarMtime.Sec)
	}

	d2, err := fs.Mkdir(ctxT(t), user, RootID, "d2", 0o700)
	if err != nil {
		t.Fatal(err)
	}
	setMtime(t, fs, user, d2.Node)
	if err := fs.Close(ctxT(t)); err != nil {
		t.Fatal(err)
	}
	if m := serverMtime(t, ts, "d2"); m != tarMtime.Sec {
		t.Errorf("after unmount the server's mtime is %d, want %d", m, tarMtime.Sec)
	}
}

// holdSetAttr holds every SETATTR until released, telling held once the
// first is on its way.
type holdSetAttr struct {
	proto.Server
	held, release chan struct{}
	once          sync.Once
}

func (h *holdSetAttr) SetAttr(ctx context.Context, c *proto.Cred, fh proto.FH, in proto.SetAttrs) (proto.WccRes, error) {
	h.once.Do(func() { close(h.held) })
	<-h.release
	res, err := h.Server.SetAttr(ctx, c, fh, in)
	// As from a server that sends no pre-operation attributes (RFC 1813
	// allows it): nothing says the SETATTR ran right after the state the
	// client has.
	res.Wcc.Before.Present = false
	return res, err
}

// TestDirTimesShownWhileSent: while the SETATTR carrying a directory's
// held times is on its way (the hold ended), stat still shows those
// times, not the cached ones from before the utimensat (pjdfstest's
// utimensat/00.t read them back as the directory's creation time). A
// GETATTR sent meanwhile, which the server ran first, does not outlive
// the SETATTR's answer: its later ctime makes it the newer state.
func TestDirTimesShownWhileSent(t *testing.T) {
	ts := startServer(t)
	fs := ts.mount(t, "")
	fs.dirHold = 50 * time.Millisecond
	d := madeDir(t, ts, fs)
	h := &holdSetAttr{Server: fs.srv, held: make(chan struct{}), release: make(chan struct{})}
	fs.srv = h
	setMtime(t, fs, user, d)
	select {
	case <-h.held:
	case <-time.After(10 * time.Second):
		t.Fatal("the held times were not sent when their hold ended")
	}
	n, _ := fs.node(d)
	n.mu.Lock()
	n.attrTime = time.Time{} // expired: the stat looks at the cache as it is
	n.mu.Unlock()
	a, _, err := fs.GetAttr(ctxT(t), user, d)
	close(h.release)
	if err != nil || a.Mtime != tarMtime {
		t.Errorf("stat while the held times are on their way: %v, mtime %v, want %v", err, a.Mtime, tarMtime)
	}
	deadline := time.Now().Add(10 * time.Second)
	for serverMtime(t, ts, "d") != tarMtime.Sec {
		if time.Now().After(deadline) {
			t.Fatal("the times never reached the server")
		}
		time.Sleep(10 * time.Millisecond)
	}
	if a, _, err := fs.GetAttr(ctxT(t), user, d); err != nil || a.Mtime != tarMtime {
		t.Errorf("stat after: %v, mtime %v", err, a.Mtime)
	}
}
