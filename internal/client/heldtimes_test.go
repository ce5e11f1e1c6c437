package client

import (
	"bytes"
	"os"
	"path/filepath"
	"sync"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"hushfs/internal/nfs3"
	"hushfs/internal/proto"
	"hushfs/internal/proxy"
)

// createWritten creates name in the export's root as user and writes data
// to it, leaving it open; the counters start after.
func createWritten(t *testing.T, ts *testServer, fs *FS, name string, data []byte) (Entry, uint64) {
	t.Helper()
	ctx := ctxT(t)
	e, fh, err := fs.Create(ctx, user, RootID, name, syscall.O_WRONLY|syscall.O_CREAT|syscall.O_EXCL, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	for off := 0; off < len(data); off += 1 << 20 {
		if _, err := fs.Write(ctx, user, fh, uint64(off), data[off:min(off+1<<20, len(data))]); err != nil {
			t.Fatal(err)
		}
	}
	resetCounts(ts, fs)
	return e, fh
}

func serverStat(t *testing.T, ts *testServer, name string) unix.Stat_t {
	t.Helper()
	var st unix.Stat_t
	if err := unix.Stat(filepath.Join(ts.dir, name), &st); err != nil {
		t.Fatal(err)
	}
	return st
}

// TestTimesHeldUntilDataWritten: times the owner sets while data is
// pending send nothing then (stat shows them); at close the data goes out
// in one FILE_SYNC WRITE, then a SETATTR with the times, so the server's
// mtime is the one set, not the WRITE's. Sent at once, they used to force
// the data out UNSTABLE and a COMMIT at close.
func TestTimesHeldUntilDataWritten(t *testing.T) {
	ts := startServer(t)
	fs := ts.mount(t, "")
	ctx := ctxT(t)
	data := bytes.Repeat([]byte("x"), 10_000)
	e, fh := createWritten(t, ts, fs, "f", data)
	mtime, atime := Timespec{Sec: 1_000_000_000, Nsec: 5}, Timespec{Sec: 1_100_000_000}
	a, _, err := fs.SetAttr(ctx, user, e.Node, SetAttrIn{Atime: SetTime{How: TimeSet, Time: atime}, Mtime: SetTime{How: TimeSet, Time: mtime}})
	if err != nil || a.Mtime != mtime || a.Atime != atime || a.Size != uint64(len(data)) {
		t.Fatalf("utimensat: %v, %+v", err, a)
	}
	wantCalls(t, "utimensat with data pending", wireCalls(t, ts, fs), map[string]uint64{})
	if a, _, err := fs.GetAttr(ctx, user, e.Node); err != nil || a.Mtime != mtime {
		t.Fatalf("stat after utimensat: %v mtime %v, want %v", err, a.Mtime, mtime)
	}
	if err := fs.Flush(ctx, user, fh); err != nil {
		t.Fatal(err)
	}
	fs.Release(ctx, fh)
	wantCalls(t, "close", wireCalls(t, ts, fs), map[string]uint64{"WRITE": 1, "SETATTR": 1})
	if c := ts.proxy.Counts(); c.WriteStable[uint32(nfs3.FileSync)] != 1 {
		t.Errorf("WRITEs by stability %v, want one FILE_SYNC", c.WriteStable)
	}
	st := serverStat(t, ts, "f")
	if st.Mtim.Sec != mtime.Sec || st.Mtim.Nsec != int64(mtime.Nsec) || st.Atim.Sec != atime.Sec || st.Size != int64(len(data)) {
		t.Errorf("on the server: mtime %v atime %v size %d", st.Mtim, st.Atim, st.Size)
	}
}

// TestTimesHeldBehindStreamedData: a file too large for one WRITE has
// chunks in flight when its times are set; they still land after every
// WRITE.
func TestTimesHeldBehindStreamedData(t *testing.T) {
	ts := startServer(t)
	fs := ts.mount(t, "")
	ctx := ctxT(t)
	data := bytes.Repeat([]byte("y"), 3<<20+7)
	e, fh := createWritten(t, ts, fs, "big", data)
	mtime := Timespec{Sec: 1_000_000_000}
	if _, _, err := fs.SetAttr(ctx, user, e.Node, SetAttrIn{Mtime: SetTime{How: TimeSet, Time: mtime}}); err != nil {
		t.Fatal(err)
	}
	if err := fs.Flush(ctx, user, fh); err != nil {
		t.Fatal(err)
	}
	fs.Release(ctx, fh)
	if st := serverStat(t, ts, "big"); st.Mtim.Sec != mtime.Sec || st.Size != int64(len(data)) {
		t.Errorf("on the server: mtime %d size %d, want %d %d", st.Mtim.Sec, st.Size, mtime.Sec, len(data))
	}
	// The proxy's counts only: a chunk still in flight when the counters
	// were reset is counted by the client once answered, not by the proxy.
	c := ts.proxy.Counts()
	setattr := c.Calls[proxy.NFS3(nfs3.ProcSetattr)]
	commit := c.Calls[proxy.NFS3(nfs3.ProcCommit)]
	if setattr != 1 || commit != 1 {
		t.Errorf("SETATTR %d COMMIT %d, want one of each", setattr, commit)
	}
}

// TestWriteAfterHeldTimes: a write after utimensat moves the mtime, as
// locally (the server's WRITE time stands); the atime set stays.
func TestWriteAfterHeldTimes(t *testing.T) {
	ts := startServer(t)
	fs := ts.mount(t, "")
	ctx := ctxT(t)
	e, fh := createWritten(t, ts, fs, "f", []byte("first"))
	old, atime := Timespec{Sec: 1_000_000_000}, Timespec{Sec: 1_100_000_000}
	if _, _, err := fs.SetAttr(ctx, user, e.Node, SetAttrIn{Atime: SetTime{How: TimeSet, Time: atime}, Mtime: SetTime{How: TimeSet, Time: old}}); err != nil {
		t.Fatal(err)
	}
	if _, err := fs.Write(ctx, user, fh, 5, []byte(" second")); err != nil {
		t.Fatal(err)
	}
	if a, _, err := fs.GetAttr(ctx, user, e.Node); err != nil || a.Mtime == old || a.Atime != atime {
		t.Fatalf("stat after the write: %v, mtime %v atime %v", err, a.Mtime, a.Atime)
	}
	if err := fs.Flush(ctx, user, fh); err != nil {
		t.Fatal(err)
	}
	fs.Release(ctx, fh)
	st := serverStat(t, ts, "f")
	if st.Mtim.Sec < time.Now().Add(-time.Hour).Unix() || st.Atim.Sec != atime.Sec || st.Size != int64(len("first second")) {
		t.Errorf("on the server: mtime %d atime %d size %d; want the write's mtime, atime %d", st.Mtim.Sec, st.Atim.Sec, st.Size, atime.Sec)
	}
}

// TestTruncateAfterHeldTimes: a truncation after utimensat moves the
// mtime; the SETATTR of the size does not carry the held one.
func TestTruncateAfterHeldTimes(t *testing.T) {
	ts := startServer(t)
	fs := ts.mount(t, "")
	ctx := ctxT(t)
	e, fh := createWritten(t, ts, fs, "f", []byte("some data"))
	old := Timespec{Sec: 1_000_000_000}
	if _, _, err := fs.SetAttr(ctx, user, e.Node, SetAttrIn{Mtime: SetTime{How: TimeSet, Time: old}}); err != nil {
		t.Fatal(err)
	}
	a, _, err := fs.SetAttr(ctx, user, e.Node, SetAttrIn{SetSize: true, Size: 4})
	if err != nil || a.Mtime == old || a.Size != 4 {
		t.Fatalf("ftruncate: %v, %+v", err, a)
	}
	if err := fs.Flush(ctx, user, fh); err != nil {
		t.Fatal(err)
	}
	fs.Release(ctx, fh)
	if st := serverStat(t, ts, "f"); st.Mtim.Sec == old.Sec || st.Size != 4 {
		t.Errorf("on the server: mtime %d size %d", st.Mtim.Sec, st.Size)
	}
	if got, err := os.ReadFile(filepath.Join(ts.dir, "f")); err != nil || string(got) != "some" {
		t.Errorf("content %q %v", got, err)
	}
}

// TestOthersTimesNotHeld: times set by someone other than the owner are
// sent at once, so a refusal reaches the utimensat that asked.
func TestOthersTimesNotHeld(t *testing.T) {
	ts := startServer(t)
	fs := ts.mount(t, "")
	ctx := ctxT(t)
	other := &Cred{UID: 1001, GID: 1001}
	e, fh, err := fs.Create(ctx, user, RootID, "f", syscall.O_RDWR|syscall.O_CREAT|syscall.O_EXCL, 0o666)
	if err != nil {
		t.Fatal(err)
	}
	fs.Release(ctx, fh)
	fh, _, err = fs.Open(ctx, other, e.Node, syscall.O_WRONLY)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := fs.Write(ctx, other, fh, 0, []byte("data")); err != nil {
		t.Fatal(err)
	}
	_, _, err = fs.SetAttr(ctx, other, e.Node, SetAttrIn{Mtime: SetTime{How: TimeSet, Time: Timespec{Sec: 1_000_000_000}}})
	if Errno(err) != syscall.EPERM {
		t.Errorf("utimensat by another user: %v, want EPERM", err)
	}
	if err := fs.Flush(ctx, other, fh); err != nil {
		t.Errorf("close: %v", err)
	}
	fs.Release(ctx, fh)
	if got, err := os.ReadFile(filepath.Join(ts.dir, "f")); err != nil || string(got) != "data" {
		t.Errorf("content %q %v", got, err)
	}
}

// TestHeldTimesAge: times held for a file kept open go out with the
// dirty-age flush, even once its data has gone out by other means.
func TestHeldTimesAge(t *testing.T) {
	ts := startServer(t)
	var mu sync.Mutex
	now := time.Unix(2_000_000_000, 0)
	clock := func() time.Time { mu.Lock(); defer mu.Unlock(); return now }
	fs := ts.mountViaWith(t, port(ts.proxy.Addr()), "", clock, nil)
	ctx := ctxT(t)
	e, fh := createWritten(t, ts, fs, "f", []byte("data"))
	mtime := Timespec{Sec: 1_000_000_000}
	if _, _, err := fs.SetAttr(ctx, user, e.Node, SetAttrIn{Mtime: SetTime{How: TimeSet, Time: mtime}}); err != nil {
		t.Fatal(err)
	}
	// The data goes out UNSTABLE (as for a set-id file's write); the times
	// stay held.
	if err := fs.wb.flush(ctx, fs.nodes.get(e.Node), proto.Unstable); err != nil {
		t.Fatal(err)
	}
	fs.wb.flushAged(ctx)
	if st := serverStat(t, ts, "f"); st.Size != 4 || st.Mtim.Sec == mtime.Sec {
		t.Fatalf("before the times aged: size %d mtime %d", st.Size, st.Mtim.Sec)
	}
	mu.Lock()
	now = now.Add(dirtyExpire)
	mu.Unlock()
	fs.wb.flushAged(ctx)
	if st := serverStat(t, ts, "f"); st.Mtim.Sec != mtime.Sec {
		t.Errorf("aged held times not on the server: mtime %d", st.Mtim.Sec)
	}
	fs.Release(ctx, fh)
}

// TestHeldTimesShownWhileSent: a file's times held behind its data go out
// with a chmod's SETATTR; while that SETATTR is on its way, stat shows
// them, and after it too, even if a GETATTR sent meanwhile ran first.
func TestHeldTimesShownWhileSent(t *testing.T) {
	ts := startServer(t)
	fs := ts.mount(t, "")
	ctx := ctxT(t)
	e, fh := createWritten(t, ts, fs, "f", bytes.Repeat([]byte("y"), 5000))
	mtime := Timespec{Sec: 1_000_000_000, Nsec: 7}
	if _, _, err := fs.SetAttr(ctx, user, e.Node, SetAttrIn{Mtime: SetTime{How: TimeSet, Time: mtime}}); err != nil {
		t.Fatal(err)
	}
	h := &holdSetAttr{Server: fs.srv, held: make(chan struct{}), release: make(chan struct{})}
	fs.srv = h
	chmod := make(chan error, 1)
	go func() {
		_, _, err := fs.SetAttr(ctx, user, e.Node, SetAttrIn{SetMode: true, Mode: 0o600})
		chmod <- err
	}()
	select {
	case <-h.held:
	case <-time.After(10 * time.Second):
		t.Fatal("the chmod's SETATTR never came")
	}
	n, _ := fs.node(e.Node)
	n.mu.Lock()
	n.attrTime = time.Time{}
	n.mu.Unlock()
	a, _, err := fs.GetAttr(ctx, user, e.Node)
	close(h.release)
	if err != nil || a.Mtime != mtime {
		t.Errorf("stat while the held times are on their way: %v, mtime %v, want %v", err, a.Mtime, mtime)
	}
	if err := <-chmod; err != nil {
		t.Fatal(err)
	}
	if a, _, err := fs.GetAttr(ctx, user, e.Node); err != nil || a.Mtime != mtime || a.Mode&0o777 != 0o600 {
		t.Errorf("stat after: %v, mtime %v mode %o", err, a.Mtime, a.Mode&0o777)
	}
	fs.Release(ctx, fh)
	if st := serverStat(t, ts, "f"); st.Mtim.Sec != mtime.Sec || st.Mode&0o777 != 0o600 {
		t.Errorf("on the server: mtime %v mode %o", st.Mtim, st.Mode&0o777)
	}
}
