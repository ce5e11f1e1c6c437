package fusefs

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"runtime"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/hanwen/go-fuse/v2/fuse"
	"golang.org/x/sys/unix"

	"hushfs/internal/client"
)

// TestRequestCtx: a request's context carries the kernel operation for the
// statistics, ignores an INTERRUPT while its caller has no signal pending
// that counts, and is cancelled once it has one, even if that comes after
// the INTERRUPT.
func TestRequestCtx(t *testing.T) {
	ch := make(chan struct{})
	var signalled atomic.Bool
	fs := &FS{signalled: func(uint32) bool { return signalled.Load() }}
	h := fuse.InHeader{}
	c := fs.request(ch, &h, "open")
	defer c.finish()
	if _, ok := c.Deadline(); ok {
		t.Error("Deadline reported one")
	}
	if c.Value("x") != nil {
		t.Error("Value returned something")
	}
	if c.Value(client.OriginKey{}) != "open" {
		t.Error("the operation is not the RPCs' origin")
	}
	done := c.Done()
	close(ch) // the kernel sent INTERRUPT: for SIGURG, say
	select {
	case <-done:
		t.Fatal("the request's context ended on INTERRUPT without a signal that counts")
	case <-time.After(300 * time.Millisecond):
	}
	if c.Err() != nil {
		t.Errorf("Err after INTERRUPT = %v, want nil", c.Err())
	}
	signalled.Store(true) // then the caller gets SIGINT
	select {
	case <-done:
	case <-time.After(2 * time.Second):
		t.Fatal("the request's context did not end when its caller was signalled")
	}
	if c.Err() != context.Canceled {
		t.Errorf("Err = %v, want context.Canceled", c.Err())
	}
	// A finished request's watcher ends (no goroutine per past request).
	c2 := fs.request(make(chan struct{}), &h, "stat")
	c2.Done()
	c2.finish()
}

// TestCallerSignalled applies the interrupt rule to /proc status files:
// any pending signal counts unless it is blocked, ignored or a
// notification (SIGURG, SIGCHLD, SIGWINCH, SIGCONT); SIGKILL always counts,
// and so does a thread that is gone.
func TestCallerSignalled(t *testing.T) {
	dir := t.TempDir()
	const (
		intr = "0000000000000002" // SIGINT
		kill = "0000000000000100" // SIGKILL
		urg  = "0000000000400000" // SIGURG
		zero = "0000000000000000"
	)
	for i, tc := range []struct {
		sigPnd, shdPnd, sigBlk, sigIgn string
		want                           bool
	}{
		{zero, zero, zero, zero, false},
		{zero, kill, zero, zero, true},
		{kill, zero, "ffffffffffffffff", "ffffffffffffffff", true},
		{zero, urg, zero, zero, false},
		{urg, zero, zero, zero, false},
		{intr, zero, zero, zero, true},
		{zero, intr, zero, zero, true},
		{zero, intr, intr, zero, false},
		{intr, zero, zero, intr, false},
		{urg, intr, zero, zero, true},
		// Notifications, caught: a child exiting, a terminal resized, a
		// continue. A caught SIGCHLD used to interrupt: a Go program
		// running children got EINTR from a CREATE the server had done,
		// and its retry EEXIST.
		{zero, "0000000000010000", zero, zero, false}, // SIGCHLD
		{zero, "0000000008000000", zero, zero, false}, // SIGWINCH
		{"0000000000020000", zero, zero, zero, false}, // SIGCONT
		{zero, "0000000008430000", zero, zero, false}, // all three and SIGURG
		{zero, "0000000000010002", zero, zero, true},  // SIGCHLD and SIGINT
	} {
		d := filepath.Join(dir, fmt.Sprint(i+1))
		os.MkdirAll(d, 0o755)
		status := fmt.Sprintf("Name:\tx\nSigQ:\t0/127368\nSigPnd:\t%s\nShdPnd:\t%s\nSigBlk:\t%s\nSigIgn:\t%s\nSigCgt:\t0000000000000000\n",
			tc.sigPnd, tc.shdPnd, tc.sigBlk, tc.sigIgn)
		os.WriteFile(filepath.Join(d, "status"), []byte(status), 0o644)
		if got := callerSignalled(dir, uint32(i+1)); got != tc.want {
			t.Errorf("pending %s/%s blocked %s ignored %s: %v, want %v", tc.sigPnd, tc.shdPnd, tc.sigBlk, tc.sigIgn, got, tc.want)
		}
	}
	if !callerSignalled(dir, 999) {
		t.Error("a thread that is gone should count as signalled")
	}
	// Waits for write-back let go only of a caller being killed (tests 1,
	// 2 and 6: nothing, SIGKILL, SIGINT pending) or gone.
	for id, want := range map[uint32]bool{1: false, 2: true, 6: false, 999: true} {
		if got := callerKilled(dir, id); got != want {
			t.Errorf("callerKilled(%d) = %v, want %v", id, got, want)
		}
	}
}

// TestSigMasksReal reads the masks of a real thread that blocks SIGUSR1
// and has it pending: it shows as pending and blocked, so it does not
// interrupt.
func TestSigMasksReal(t *testing.T) {
	notified := make(chan os.Signal, 1)
	signal.Notify(notified, syscall.SIGUSR1)
	defer signal.Stop(notified)
	type result struct {
		m   sigMasks
		err error
	}
	res := make(chan result, 1)
	go func() {
		runtime.LockOSThread() // never unlocked: the thread dies with its odd mask
		var set, old unix.Sigset_t
		set.Val[0] = 1 << (uint(syscall.SIGUSR1) - 1)
		if err := unix.PthreadSigmask(unix.SIG_BLOCK, &set, &old); err != nil {
			res <- result{err: err}
			return
		}
		tid := unix.Gettid()
		if err := unix.Tgkill(unix.Getpid(), tid, syscall.SIGUSR1); err != nil {
			res <- result{err: err}
			return
		}
		m, err := readSigMasks("/proc", uint32(tid))
		unix.PthreadSigmask(unix.SIG_SETMASK, &old, nil) // delivered now, to notified
		res <- result{m, err}
	}()
	r := <-res
	if r.err != nil {
		t.Fatal(r.err)
	}
	bit := uint64(1) << (uint(syscall.SIGUSR1) - 1)
	if r.m.pending&bit == 0 || r.m.blocked&bit == 0 || r.m.interrupts() {
		t.Errorf("masks %+v: want SIGUSR1 pending and blocked, not interrupting", r.m)
	}
	select {
	case <-notified:
	case <-time.After(5 * time.Second):
		t.Error("SIGUSR1 was not delivered once unblocked")
	}
}

func TestLookupPositiveNegative(t *testing.T) {
	e := newEnv(t, envOpts{})
	path := filepath.Join(e.dir, "file")
	if err := os.WriteFile(path, []byte("0123456789"), 0o640); err != nil {
		t.Fatal(err)
	}
	mtime := time.Unix(1_700_000_000, 123_456_789)
	if err := os.Chtimes(path, mtime, mtime); err != nil {
		t.Fatal(err)
	}
	var st syscall.Stat_t
	if err := syscall.Stat(path, &st); err != nil {
		t.Fatal(err)
	}

	before := e.count("LOOKUP")
	out := e.lookup(1, "file")
	if got := e.count("LOOKUP") - before; got != 1 {
		t.Errorf("LOOKUP RPCs = %d, want 1", got)
	}
	if out.Generation != 0 {
		t.Errorf("generation %d, want 0", out.Generation)
	}
	a := out.Attr
	if a.Ino != st.Ino || a.Size != 10 || a.Mode != syscall.S_IFREG|0o640 || a.Nlink != 1 {
		t.Errorf("attr ino %d size %d mode %o nlink %d; want ino %d size 10 mode %o nlink 1",
			a.Ino, a.Size, a.Mode, a.Nlink, st.Ino, syscall.S_IFREG|0o640)
	}
	if a.Mtime != uint64(mtime.Unix()) || a.Mtimensec != uint32(mtime.Nanosecond()) {
		t.Errorf("mtime %d.%09d, want %d.%09d", a.Mtime, a.Mtimensec, mtime.Unix(), mtime.Nanosecond())
	}
	if a.Ctime != uint64(st.Ctim.Sec) || a.Ctimensec != uint32(st.Ctim.Nsec) {
		t.Errorf("ctime %d.%09d, want %d.%09d", a.Ctime, a.Ctimensec, st.Ctim.Sec, st.Ctim.Nsec)
	}
	if a.Blksize != e.fs.blksize || a.Blksize < 4096 {
		t.Errorf("blksize %d", a.Blksize)
	}
	// Defaults: acregmin 3 s for the file, acdirmin 30 s for the entry
	// (the directory's attribute lifetime).
	if out.AttrTimeout() <= 0 || out.AttrTimeout() > 60*time.Second {
		t.Errorf("attr timeout %v", out.AttrTimeout())
	}
	if out.EntryTimeout() <= 0 || out.EntryTimeout() > 60*time.Second {
		t.Errorf("entry timeout %v", out.EntryTimeout())
	}

	// A name that does not exist: a negative entry for negtimeo (3 s).
	h := e.hdr(1)
	var neg fuse.EntryOut
	neg.NodeId = 99 // must be overwritten
	if st := e.fs.Lookup(nil, &h, "missing", &neg); st != fuse.OK {
		t.Fatalf("negative Lookup = %v, want OK with node 0", st)
	}
	if neg.NodeId != 0 || neg.EntryTimeout() != 3*time.Second {
		t.Errorf("negative entry node %d timeout %v, want 0 and 3s", neg.NodeId, neg.EntryTimeout())
	}
	// Lookup in a node the core never handed out.
	h = e.hdr(12345)
	if st := e.fs.Lookup(nil, &h, "x", &neg); st != fuse.Status(syscall.ESTALE) {
		t.Errorf("Lookup in unknown node = %v, want ESTALE", st)
	}
}

func TestLookupNegativeNotCached(t *testing.T) {
	for _, opts := range []string{"lookupcache=none", "lookupcache=positive", "noac"} {
		t.Run(opts, func(t *testing.T) {
			e := newEnv(t, envOpts{options: opts})
			h := e.hdr(1)
			var out fuse.EntryOut
			if st := e.fs.Lookup(nil, &h, "missing", &out); st != fuse.ENOENT {
				t.Errorf("Lookup(missing) = %v, want ENOENT", st)
			}
		})
	}
}

func TestForgetBalancesLookups(t *testing.T) {
	e := newEnv(t, envOpts{})
	if err := os.WriteFile(filepath.Join(e.dir, "f"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	base := e.core.NodeCount()
	a := e.lookup(1, "f")
	b := e.lookup(1, "f")
	if a.NodeId != b.NodeId {
		t.Fatalf("two lookups gave nodes %d and %d", a.NodeId, b.NodeId)
	}
	if n := e.core.NodeCount(); n != base+1 {
		t.Fatalf("nodes after lookup = %d, want %d", n, base+1)
	}
	e.fs.Forget(a.NodeId, 1)
	if n := e.core.NodeCount(); n != base+1 {
		t.Fatalf("nodes after forgetting one of two references = %d, want %d", n, base+1)
	}
	e.fs.Forget(a.NodeId, 1)
	if n := e.core.NodeCount(); n != base {
		t.Fatalf("nodes after forgetting both = %d, want %d", n, base)
	}
}

func TestGetAttrFromCacheAndNoac(t *testing.T) {
	e := newEnv(t, envOpts{})
	before := e.count("GETATTR")
	h := e.hdr(1)
	in := fuse.GetAttrIn{InHeader: h}
	var out fuse.AttrOut
	if st := e.fs.GetAttr(nil, &in, &out); st != fuse.OK {
		t.Fatalf("GetAttr = %v", st)
	}
	if out.Mode&syscall.S_IFMT != syscall.S_IFDIR || out.Timeout() <= 0 {
		t.Errorf("root mode %o timeout %v", out.Mode, out.Timeout())
	}
	if got := e.count("GETATTR") - before; got != 0 {
		t.Errorf("GETATTR RPCs for cached root attributes = %d, want 0", got)
	}

	n := newEnv(t, envOpts{options: "noac"})
	before = n.count("GETATTR")
	h = n.hdr(1)
	in = fuse.GetAttrIn{InHeader: h}
	for range 2 {
		if st := n.fs.GetAttr(nil, &in, &out); st != fuse.OK {
			t.Fatalf("GetAttr = %v", st)
		}
		if out.Timeout() != 0 {
			t.Errorf("noac attr timeout %v, want 0", out.Timeout())
		}
	}
	if got := n.count("GETATTR") - before; got != 2 {
		t.Errorf("noac GETATTR RPCs = %d, want 2", got)
	}
}

func TestCreateWriteReadKeepCache(t *testing.T) {
	e := newEnv(t, envOpts{})
	h := e.hdr(1)
	cin := fuse.CreateIn{InHeader: h, Flags: syscall.O_CREAT | syscall.O_EXCL | syscall.O_WRONLY, Mode: 0o600}
	var cout fuse.CreateOut
	if st := e.fs.Create(nil, &cin, "new", &cout); st != fuse.OK {
		t.Fatalf("Create = %v", st)
	}
	if cout.NodeId == 0 || cout.Fh == 0 || cout.Attr.Mode != syscall.S_IFREG|0o600 {
		t.Fatalf("Create: node %d fh %d mode %o", cout.NodeId, cout.Fh, cout.Attr.Mode)
	}
	fh := cout.Fh
	fn := cout.NodeId
	data := bytes.Repeat([]byte("hushfs"), 1000)
	win := fuse.WriteIn{InHeader: e.hdr(fn), Fh: fh, Offset: 0, Size: uint32(len(data))}
	if n, st := e.fs.Write(nil, &win, data); st != fuse.OK || n != uint32(len(data)) {
		t.Fatalf("Write = %d, %v", n, st)
	}
	data[0] = 'X' // go-fuse reuses its buffer: the core must have copied
	fin := fuse.FlushIn{InHeader: e.hdr(fn), Fh: fh}
	if st := e.fs.Flush(nil, &fin); st != fuse.OK {
		t.Fatalf("Flush = %v", st)
	}
	got, err := os.ReadFile(filepath.Join(e.dir, "new"))
	if err != nil || !bytes.Equal(got, bytes.Repeat([]byte("hushfs"), 1000)) {
		t.Fatalf("server file after flush: %d bytes, err %v", len(got), err)
	}
	e.fs.Release(nil, &fuse.ReleaseIn{InHeader: e.hdr(fn), Fh: fh})

	open := func() fuse.OpenOut {
		t.Helper()
		in := fuse.OpenIn{InHeader: e.hdr(fn), Flags: syscall.O_RDONLY}
		var out fuse.OpenOut
		if st := e.fs.Open(nil, &in, &out); st != fuse.OK {
			t.Fatalf("Open = %v", st)
		}
		return out
	}
	o := open()
	if o.OpenFlags&fuse.FOPEN_KEEP_CACHE == 0 {
		t.Errorf("reopen of a file only we changed: no FOPEN_KEEP_CACHE")
	}
	rin := fuse.ReadIn{InHeader: e.hdr(fn), Fh: o.Fh, Offset: 6, Size: 12}
	res, st := e.fs.Read(nil, &rin, make([]byte, 12))
	if st != fuse.OK {
		t.Fatalf("Read = %v", st)
	}
	b, _ := res.Bytes(make([]byte, 12))
	if string(b) != "hushfshushfs" {
		t.Errorf("Read = %q", b)
	}
	// Past the end: a short read, not an error.
	rin = fuse.ReadIn{InHeader: e.hdr(fn), Fh: o.Fh, Offset: 5990, Size: 100}
	res, st = e.fs.Read(nil, &rin, make([]byte, 10)) // too small a buffer: the adapter allocates
	if st != fuse.OK {
		t.Fatalf("Read at end = %v", st)
	}
	if b, _ := res.Bytes(nil); string(b) != "hushfs"[2:]+"hushfs" {
		t.Errorf("Read at end = %q", b)
	}
	e.fs.Release(nil, &fuse.ReleaseIn{InHeader: e.hdr(fn), Fh: o.Fh})

	// Changed on the server behind our back: the kernel must drop its pages.
	time.Sleep(10 * time.Millisecond) // a distinct mtime
	if err := os.WriteFile(filepath.Join(e.dir, "new"), []byte("other"), 0o600); err != nil {
		t.Fatal(err)
	}
	o = open()
	if o.OpenFlags&fuse.FOPEN_KEEP_CACHE != 0 {
		t.Errorf("reopen of a file changed on the server kept the cache")
	}
	e.fs.Release(nil, &fuse.ReleaseIn{InHeader: e.hdr(fn), Fh: o.Fh})

	// O_EXCL on an existing name.
	if st := e.fs.Create(nil, &cin, "new", &cout); st != fuse.Status(syscall.EEXIST) {
		t.Errorf("exclusive Create of an existing name = %v, want EEXIST", st)
	}
	// Bad handles.
	rin.Fh = 999999
	if _, st := e.fs.Read(nil, &rin, make([]byte, 100)); st != fuse.EBADF {
		t.Errorf("Read of an unknown handle = %v, want EBADF", st)
	}
}

func TestOpenTruncates(t *testing.T) {
	e := newEnv(t, envOpts{})
	path := filepath.Join(e.dir, "t")
	if err := os.WriteFile(path, []byte("some data"), 0o644); err != nil {
		t.Fatal(err)
	}
	fn := e.lookup(1, "t").NodeId
	in := fuse.OpenIn{InHeader: e.hdr(fn), Flags: syscall.O_WRONLY | syscall.O_TRUNC}
	var out fuse.OpenOut
	if st := e.fs.Open(nil, &in, &out); st != fuse.OK {
		t.Fatalf("Open(O_TRUNC) = %v", st)
	}
	if out.OpenFlags&fuse.FOPEN_KEEP_CACHE != 0 {
		t.Error("truncating open kept the cache")
	}
	e.fs.Release(nil, &fuse.ReleaseIn{Fh: out.Fh})
	if fi, err := os.Stat(path); err != nil || fi.Size() != 0 {
		t.Fatalf("after O_TRUNC open: %v, %v", fi, err)
	}
}

func TestSetAttr(t *testing.T) {
	e := newEnv(t, envOpts{})
	path := filepath.Join(e.dir, "s")
	if err := os.WriteFile(path, []byte("0123456789"), 0o644); err != nil {
		t.Fatal(err)
	}
	fn := e.lookup(1, "s").NodeId
	set := func(in fuse.SetAttrIn) fuse.AttrOut {
		t.Helper()
		in.InHeader = e.hdr(fn)
		var out fuse.AttrOut
		if st := e.fs.SetAttr(nil, &in, &out); st != fuse.OK {
			t.Fatalf("SetAttr(valid %#x) = %v", in.Valid, st)
		}
		return out
	}
	// ftruncate: the size change names a file handle. (chown before
	// chmod: a chown clears the set-user-ID bit.)
	out := set(fuse.SetAttrIn{SetAttrInCommon: fuse.SetAttrInCommon{Valid: fuse.FATTR_SIZE | fuse.FATTR_FH, Fh: 12345, Size: 4}})
	if out.Size != 4 {
		t.Errorf("size after truncate: %d", out.Size)
	}
	out = set(fuse.SetAttrIn{SetAttrInCommon: fuse.SetAttrInCommon{Valid: fuse.FATTR_UID | fuse.FATTR_GID, Owner: fuse.Owner{Uid: 1234, Gid: 5678}}})
	if out.Uid != 1234 || out.Gid != 5678 {
		t.Errorf("owner after chown: %d:%d", out.Uid, out.Gid)
	}
	out = set(fuse.SetAttrIn{SetAttrInCommon: fuse.SetAttrInCommon{Valid: fuse.FATTR_MODE, Mode: syscall.S_IFREG | 0o4751}})
	if out.Mode != syscall.S_IFREG|0o4751 {
		t.Errorf("mode after chmod: %o", out.Mode)
	}
	set(fuse.SetAttrIn{SetAttrInCommon: fuse.SetAttrInCommon{Valid: fuse.FATTR_ATIME | fuse.FATTR_MTIME,
		Atime: 1_600_000_000, Atimensec: 111, Mtime: 1_600_000_001, Mtimensec: 222}})
	var st syscall.Stat_t
	if err := syscall.Stat(path, &st); err != nil {
		t.Fatal(err)
	}
	if st.Size != 4 || st.Mode&0o7777 != 0o4751 || st.Uid != 1234 || st.Gid != 5678 ||
		st.Atim != (syscall.Timespec{Sec: 1_600_000_000, Nsec: 111}) || st.Mtim != (syscall.Timespec{Sec: 1_600_000_001, Nsec: 222}) {
		t.Errorf("server file: size %d mode %o owner %d:%d atime %v mtime %v", st.Size, st.Mode&0o7777, st.Uid, st.Gid, st.Atim, st.Mtim)
	}
	start := time.Now().Add(-2 * time.Second)
	set(fuse.SetAttrIn{SetAttrInCommon: fuse.SetAttrInCommon{Valid: fuse.FATTR_MTIME | fuse.FATTR_MTIME_NOW, Mtime: 5}})
	if err := syscall.Stat(path, &st); err != nil {
		t.Fatal(err)
	}
	if time.Unix(st.Mtim.Unix()).Before(start) || st.Atim.Sec != 1_600_000_000 {
		t.Errorf("after MTIME_NOW: mtime %v atime %v", time.Unix(st.Mtim.Unix()), st.Atim)
	}
}

func TestNamespaceOps(t *testing.T) {
	e := newEnv(t, envOpts{})
	h := e.hdr(1)
	var dir fuse.EntryOut
	if st := e.fs.Mkdir(nil, &fuse.MkdirIn{InHeader: h, Mode: 0o750}, "d", &dir); st != fuse.OK {
		t.Fatalf("Mkdir = %v", st)
	}
	if dir.Attr.Mode != syscall.S_IFDIR|0o750 || dir.NodeId == 0 {
		t.Errorf("Mkdir entry: node %d mode %o", dir.NodeId, dir.Attr.Mode)
	}
	dh := e.hdr(dir.NodeId)
	var ln fuse.EntryOut
	if st := e.fs.Symlink(nil, &dh, "../target with spaces", "link", &ln); st != fuse.OK {
		t.Fatalf("Symlink = %v", st)
	}
	lh := e.hdr(ln.NodeId)
	if target, st := e.fs.Readlink(nil, &lh); st != fuse.OK || string(target) != "../target with spaces" {
		t.Errorf("Readlink = %q, %v", target, st)
	}
	if target, err := os.Readlink(filepath.Join(e.dir, "d", "link")); err != nil || target != "../target with spaces" {
		t.Errorf("server symlink: %q, %v", target, err)
	}
	var fifo fuse.EntryOut
	if st := e.fs.Mknod(nil, &fuse.MknodIn{InHeader: dh, Mode: syscall.S_IFIFO | 0o640}, "fifo", &fifo); st != fuse.OK {
		t.Fatalf("Mknod fifo = %v", st)
	}
	if fi, err := os.Lstat(filepath.Join(e.dir, "d", "fifo")); err != nil || fi.Mode()&os.ModeNamedPipe == 0 {
		t.Errorf("server fifo: %v, %v", fi, err)
	}
	var reg fuse.EntryOut
	if st := e.fs.Mknod(nil, &fuse.MknodIn{InHeader: dh, Mode: syscall.S_IFREG | 0o600}, "reg", &reg); st != fuse.OK {
		t.Fatalf("Mknod regular = %v", st)
	}
	var hard fuse.EntryOut
	if st := e.fs.Link(nil, &fuse.LinkIn{InHeader: h, Oldnodeid: reg.NodeId}, "hard", &hard); st != fuse.OK {
		t.Fatalf("Link = %v", st)
	}
	if hard.NodeId != reg.NodeId || hard.Attr.Nlink != 2 {
		t.Errorf("Link entry node %d (want %d) nlink %d", hard.NodeId, reg.NodeId, hard.Attr.Nlink)
	}

	// Rename flags NFSv3 cannot honour: refused before any RPC.
	before := e.count("RENAME")
	for _, fl := range []uint32{1 /* RENAME_NOREPLACE */, 2 /* RENAME_EXCHANGE */} {
		rin := fuse.RenameIn{InHeader: h, Newdir: dir.NodeId, Flags: fl}
		if st := e.fs.Rename(nil, &rin, "hard", "moved"); st != fuse.EINVAL {
			t.Errorf("Rename flags %d = %v, want EINVAL", fl, st)
		}
	}
	if e.count("RENAME") != before {
		t.Errorf("refused renames sent RENAME")
	}
	rin := fuse.RenameIn{InHeader: h, Newdir: dir.NodeId}
	if st := e.fs.Rename(nil, &rin, "hard", "moved"); st != fuse.OK {
		t.Fatalf("Rename = %v", st)
	}
	if _, err := os.Stat(filepath.Join(e.dir, "d", "moved")); err != nil {
		t.Errorf("renamed file: %v", err)
	}
	for _, name := range []string{"moved", "reg", "fifo", "link"} {
		if st := e.fs.Unlink(nil, &dh, name); st != fuse.OK {
			t.Errorf("Unlink %s = %v", name, st)
		}
	}
	if st := e.fs.Unlink(nil, &dh, "moved"); st != fuse.ENOENT {
		t.Errorf("second Unlink = %v, want ENOENT", st)
	}
	if st := e.fs.Rmdir(nil, &h, "d"); st != fuse.OK {
		t.Errorf("Rmdir = %v", st)
	}
	if _, err := os.Stat(filepath.Join(e.dir, "d")); !os.IsNotExist(err) {
		t.Errorf("directory still there: %v", err)
	}
	if st := e.fs.FsyncDir(nil, &fuse.FsyncIn{InHeader: h}); st != fuse.OK {
		t.Errorf("FsyncDir = %v", st)
	}
}

// listDir reads a whole directory through ReadDir or ReadDirPlus with
// small kernel-like buffers, continuing from the last offset returned.
func listDir(t *testing.T, e *env, node uint64, plus bool, bufSize int) ([]fuse.DirEntry, []fuse.EntryOut) {
	t.Helper()
	h := e.hdr(node)
	var oo fuse.OpenOut
	if st := e.fs.OpenDir(nil, &fuse.OpenIn{InHeader: h}, &oo); st != fuse.OK {
		t.Fatalf("OpenDir = %v", st)
	}
	defer e.fs.ReleaseDir(&fuse.ReleaseIn{InHeader: h, Fh: oo.Fh})
	var ents []fuse.DirEntry
	var outs []fuse.EntryOut
	off := uint64(0)
	for range 10000 {
		buf := make([]byte, bufSize)
		l := fuse.NewDirEntryList(buf, off)
		in := fuse.ReadIn{InHeader: h, Fh: oo.Fh, Offset: off, Size: uint32(bufSize)}
		var st fuse.Status
		if plus {
			st = e.fs.ReadDirPlus(nil, &in, l)
		} else {
			st = e.fs.ReadDir(nil, &in, l)
		}
		if st != fuse.OK {
			t.Fatalf("ReadDir(plus=%v) at %d = %v", plus, off, st)
		}
		if len(l.Bytes()) == 0 {
			return ents, outs
		}
		var es []fuse.DirEntry
		var os []fuse.EntryOut
		var err error
		if plus {
			es, os, err = fuse.ParseDirLookupEntries(l.Bytes())
		} else {
			es, err = fuse.ParseDirEntries(l.Bytes())
		}
		if err != nil {
			t.Fatal(err)
		}
		ents, outs = append(ents, es...), append(outs, os...)
		off = es[len(es)-1].Off
	}
	t.Fatal("listing did not end")
	return nil, nil
}

func TestReadDirAndPlus(t *testing.T) {
	e := newEnv(t, envOpts{})
	const n = 300
	want := map[string]bool{}
	for i := range n {
		name := fmt.Sprintf("file-%03d", i)
		want[name] = true
		if err := os.WriteFile(filepath.Join(e.dir, name), []byte(name), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Mkdir(filepath.Join(e.dir, "sub"), 0o755); err != nil {
		t.Fatal(err)
	}
	want["sub"] = true
	check := func(ents []fuse.DirEntry) {
		t.Helper()
		seen := map[string]int{}
		for _, d := range ents {
			seen[d.Name]++
			if d.Name == "." || d.Name == ".." {
				continue
			}
			if !want[d.Name] || seen[d.Name] > 1 {
				t.Errorf("unexpected or repeated entry %q", d.Name)
			}
			var st syscall.Stat_t
			if err := syscall.Lstat(filepath.Join(e.dir, d.Name), &st); err != nil || st.Ino != d.Ino {
				t.Errorf("%s: ino %d, server %d (%v)", d.Name, d.Ino, st.Ino, err)
			}
		}
		for name := range want {
			if seen[name] != 1 {
				t.Errorf("entry %q seen %d times", name, seen[name])
			}
		}
	}

	// Plain READDIR, 4 KiB at a time: one RPC, many kernel calls.
	before := e.count("READDIR")
	ents, _ := listDir(t, e, 1, false, 4096)
	check(ents)
	if got := e.count("READDIR") - before; got != 1 {
		t.Errorf("READDIR RPCs = %d, want 1", got)
	}

	// READDIRPLUS: entries come with nodes and attributes.
	base := e.core.NodeCount()
	beforePlus, beforeLookup, beforeGetattr := e.count("READDIRPLUS"), e.count("LOOKUP"), e.count("GETATTR")
	ents, outs := listDir(t, e, 1, true, 4096)
	check(ents)
	if got := e.count("READDIRPLUS") - beforePlus; got != 1 {
		t.Errorf("READDIRPLUS RPCs = %d, want 1", got)
	}
	if e.count("LOOKUP") != beforeLookup || e.count("GETATTR") != beforeGetattr {
		t.Errorf("a plus listing sent LOOKUP or GETATTR")
	}
	refs := map[uint64]uint64{}
	for i, d := range ents {
		o := outs[i]
		if d.Name == "." || d.Name == ".." {
			if o.NodeId != 0 {
				t.Errorf("%q went out with node %d: the kernel would never forget it", d.Name, o.NodeId)
			}
			continue
		}
		if o.NodeId == 0 || o.Attr.Ino != d.Ino || o.EntryTimeout() <= 0 {
			t.Errorf("%s: node %d attr ino %d (dirent %d) entry timeout %v", d.Name, o.NodeId, o.Attr.Ino, d.Ino, o.EntryTimeout())
			continue
		}
		if d.Name == "sub" {
			if o.Attr.Mode&syscall.S_IFMT != syscall.S_IFDIR || d.Mode&syscall.S_IFMT != syscall.S_IFDIR {
				t.Errorf("sub: attr mode %o dirent mode %o", o.Attr.Mode, d.Mode)
			}
		} else if o.Attr.Mode != syscall.S_IFREG|0o644 || o.Attr.Size != uint64(len(d.Name)) {
			t.Errorf("%s: mode %o size %d", d.Name, o.Attr.Mode, o.Attr.Size)
		}
		refs[o.NodeId]++
	}
	if got := e.core.NodeCount(); got != base+n+1 {
		t.Errorf("nodes after plus listing = %d, want %d", got, base+n+1)
	}
	// Every reference that reached the kernel is forgotten by it in time;
	// once it has, no node may be left over (entries that did not fit a
	// buffer were given back by the core; "." and ".." never take one).
	for id, k := range refs {
		e.fs.Forget(id, k)
	}
	if got := e.core.NodeCount(); got != base {
		t.Errorf("nodes after forgetting every listed entry = %d, want %d", got, base)
	}
}

func TestStatFs(t *testing.T) {
	e := newEnv(t, envOpts{})
	h := e.hdr(1)
	var out fuse.StatfsOut
	if st := e.fs.StatFs(nil, &h, &out); st != fuse.OK {
		t.Fatalf("StatFs = %v", st)
	}
	var sfs syscall.Statfs_t
	if err := syscall.Statfs(e.dir, &sfs); err != nil {
		t.Fatal(err)
	}
	total := sfs.Blocks * uint64(sfs.Bsize)
	if out.Bsize != 4096 || out.Frsize != 4096 || out.NameLen != 255 ||
		out.Blocks != total/4096 || out.Files != sfs.Files {
		t.Errorf("StatFs %+v; server blocks %d×%d files %d", out, sfs.Blocks, sfs.Bsize, sfs.Files)
	}
}

func TestMountOptions(t *testing.T) {
	o := client.DefaultOptions()
	o.ReadOnly, o.NoExec, o.NoAtime, o.NoSuid, o.NoDev, o.AllowOther = true, true, true, true, false, true
	mo := MountOptions(MountConfig{Source: "srv:/export", Options: o}, true)
	if mo.FsName != "srv:/export" || mo.Name != "hushfs" || mo.MaxWrite != MaxWrite || !mo.AllowOther ||
		mo.DisableXAttrs || mo.EnableLocks || !mo.EnableSymlinkCaching || mo.ExplicitDataCacheControl ||
		mo.DisableReadDirPlus || !mo.DirectMountStrict || fmt.Sprint(mo.Options) != "[default_permissions]" {
		t.Errorf("direct mount options %+v", mo)
	}
	want := uintptr(syscall.MS_RDONLY | syscall.MS_NOEXEC | syscall.MS_NOATIME | syscall.MS_NOSUID)
	if mo.DirectMountFlags != want {
		t.Errorf("direct mount flags %#x, want %#x", mo.DirectMountFlags, want)
	}
	mo = MountOptions(MountConfig{Source: "srv:/export", Options: o}, false)
	if fmt.Sprint(mo.Options) != "[ro nosuid dev noexec noatime default_permissions]" || mo.DirectMount || mo.DirectMountStrict {
		t.Errorf("fusermount3 options %v", mo.Options)
	}
	o = client.DefaultOptions()
	o.NoSuid, o.NoDev, o.RdirPlus = false, false, false
	mo = MountOptions(MountConfig{Source: "s:/", Options: o}, true)
	if mo.DirectMountFlags != syscall.MS_MGC_VAL || !mo.DisableReadDirPlus {
		t.Errorf("suid,dev,nordirplus: flags %#x, DisableReadDirPlus %v", mo.DirectMountFlags, mo.DisableReadDirPlus)
	}
}

func TestParseMountInfo(t *testing.T) {
	mi, err := parseMountInfo(`417 29 0:63 / /tmp/with\040space rw,nosuid,nodev,relatime shared:229 - fuse.hushfs 127.0.0.1:/srv/a\134b rw,user_id=1000,group_id=0,max_read=1048576`)
	if err != nil {
		t.Fatal(err)
	}
	if mi.Major != 0 || mi.Minor != 63 || mi.Mountpoint != "/tmp/with space" || mi.FSType != "fuse.hushfs" || mi.Source != `127.0.0.1:/srv/a\b` ||
		!mi.HasOwner || mi.Owner != 1000 {
		t.Errorf("parsed %+v", mi)
	}
	mi, err = parseMountInfo(`22 1 8:1 / / rw,relatime - ext4 /dev/sda1 rw`)
	if err != nil || mi.Mountpoint != "/" || mi.FSType != "ext4" || mi.HasOwner {
		t.Errorf("no optional fields: %+v, %v", mi, err)
	}
	for _, bad := range []string{"", "1 2 3", "1 2 x:y / /m rw - t s o", "1 2 0:1 / /m rw shared:1"} {
		if _, err := parseMountInfo(bad); err == nil {
			t.Errorf("parseMountInfo(%q) succeeded", bad)
		}
	}
	if _, err := FindMount("/proc/self/mountinfo", "/"); err != nil {
		t.Errorf("FindMount(/): %v", err)
	}
	if _, err := FindMount("/proc/self/mountinfo", t.TempDir()); !errors.Is(err, ErrNotMounted) {
		t.Errorf("FindMount(temp dir) = %v, want ErrNotMounted", err)
	}
}

func TestReadGroups(t *testing.T) {
	dir := t.TempDir()
	write := func(s string) string {
		p := filepath.Join(dir, "status")
		if err := os.WriteFile(p, []byte(s), 0o644); err != nil {
			t.Fatal(err)
		}
		return p
	}
	if g, err := readGroups(write("Name:\tx\nGroups:\t4 24 27 \nNgid:\t0\n")); err != nil || fmt.Sprint(g) != "[4 24 27]" {
		t.Errorf("groups %v, %v", g, err)
	}
	if g, err := readGroups(write("Groups:\t\n")); err != nil || len(g) != 0 {
		t.Errorf("no groups: %v, %v", g, err)
	}
	for _, bad := range []string{"Name:\tx\n", "Groups:\t1 x\n", "Groups:\t99999999999\n"} {
		if _, err := readGroups(write(bad)); err == nil {
			t.Errorf("readGroups(%q) succeeded", bad)
		}
	}
}
