package client

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"hushfs/internal/nfs3"
	"hushfs/internal/proto"
	"hushfs/internal/proxy"
)

// TestCachedListingGivesCurrentAttributes: a READDIRPLUS listing served
// from the complete listing hands the kernel each file's attributes as
// they are now, not as they were when the name was listed or created, or
// none. (It used to give a file created and written after the listing its
// size at CREATE, 0: `ls -l` or make then saw empty object files, and a
// source rewritten after the listing its old mtime, so make did not
// rebuild it.)
func TestCachedListingGivesCurrentAttributes(t *testing.T) {
	ts := startServer(t)
	// 0666: the test server squashes root.
	if err := os.WriteFile(filepath.Join(ts.dir, "old"), []byte("abc"), 0o666); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(filepath.Join(ts.dir, "old"), 0o666); err != nil {
		t.Fatal(err)
	}
	fs := ts.mount(t, "")
	ctx := ctxT(t)
	list := func() map[string]*DirEntry {
		t.Helper()
		dh, err := fs.OpenDir(ctx, root, RootID)
		if err != nil {
			t.Fatal(err)
		}
		defer fs.ReleaseDir(dh)
		got := map[string]*DirEntry{}
		err = fs.ReadDir(ctx, root, dh, 0, true, func(de *DirEntry) bool {
			e := *de
			got[de.Name] = &e
			return true
		})
		if err != nil {
			t.Fatal(err)
		}
		for _, e := range got {
			if e.Entry.Node != 0 {
				fs.Forget(e.Entry.Node, 1)
			}
		}
		return got
	}
	list() // the complete listing, with "old" at 3 bytes

	// Two new files, written after CREATE: the kernel keeps a reference
	// to "new" and forgets "gone" (its node leaves the table).
	create := func(name string, size int) NodeID {
		t.Helper()
		e, fh, err := fs.Create(ctx, root, RootID, name, syscall.O_WRONLY, 0o644)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := fs.Write(ctx, root, fh, 0, make([]byte, size)); err != nil {
			t.Fatal(err)
		}
		if err := fs.Flush(ctx, root, fh); err != nil {
			t.Fatal(err)
		}
		fs.Release(ctx, fh)
		return e.Node
	}
	create("new", 5000)
	fs.Forget(create("gone", 7000), 1)
	// The old one rewritten.
	old, err := fs.Lookup(ctx, root, RootID, "old")
	if err != nil {
		t.Fatal(err)
	}
	fh, _, err := fs.Open(ctx, root, old.Node, syscall.O_WRONLY|syscall.O_TRUNC)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := fs.Write(ctx, root, fh, 0, []byte("rewritten")); err != nil {
		t.Fatal(err)
	}
	if err := fs.Flush(ctx, root, fh); err != nil {
		t.Fatal(err)
	}
	fs.Release(ctx, fh)

	before := fs.Stats().Snapshot().Count("READDIRPLUS")
	got := list()
	if n := fs.Stats().Snapshot().Count("READDIRPLUS"); n != before {
		t.Fatalf("the second listing sent %d READDIRPLUS: not served from the complete listing, so this test shows nothing", n-before)
	}
	for name, want := range map[string]int64{"new": 5000, "old": 9, "gone": 7000} {
		var st syscall.Stat_t
		if err := syscall.Stat(filepath.Join(ts.dir, name), &st); err != nil {
			t.Fatal(err)
		}
		e := got[name]
		switch {
		case e == nil:
			t.Errorf("%s: not listed", name)
		case e.Entry.Node == 0 && name == "gone":
			// No node left to say what its attributes are now: a plain
			// entry, the kernel looks it up.
		case e.Entry.Node == 0:
			t.Errorf("%s: listed without attributes, though its node is in use", name)
		case e.Entry.Attr.Size != uint64(want) || e.Entry.Attr.Mtime != (Timespec{st.Mtim.Sec, uint32(st.Mtim.Nsec)}):
			t.Errorf("%s: listed with size %d mtime %v, the server has %d bytes mtime %v",
				name, e.Entry.Attr.Size, e.Entry.Attr.Mtime, want, st.Mtim)
		}
	}
}

// TestCloseDuringSillyRename: the last close of a file arriving while its
// unlink is hiding it (the RENAME on the wire) still removes the hidden
// name. The kernel sends RELEASE after close(2) has returned, so a file
// unlinked right after its close is often still open when the unlink
// starts; the hidden file used to be left behind for good. The RENAME is
// slowed by a proxy with a 200 ms round trip, and the close made once the
// proxy has seen the RENAME.
func TestCloseDuringSillyRename(t *testing.T) {
	ts := startServer(t)
	slow, err := proxy.Start(proxy.Config{Listen: "127.0.0.1:0", Target: ts.nfsL.Addr().String(), RTT: 200 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { slow.Close() })
	o, err := ParseOptions(fmt.Sprintf("port=%d,mountport=%d,timeo=50", port(slow.Addr()), port(ts.mountL.Addr())))
	if err != nil {
		t.Fatal(err)
	}
	ctx := ctxT(t)
	fs, err := Mount(ctx, Config{Server: "127.0.0.1", Export: ts.srv.Root(), Options: o})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { fs.Close(context.Background()) })

	_, fh, err := fs.Create(ctx, root, RootID, "f", syscall.O_WRONLY, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := fs.Write(ctx, root, fh, 0, []byte("data")); err != nil {
		t.Fatal(err)
	}
	if err := fs.Flush(ctx, root, fh); err != nil {
		t.Fatal(err)
	}
	slow.Reset()
	unlinked := make(chan error, 1)
	go func() { unlinked <- fs.Unlink(ctx, root, RootID, "f") }()
	deadline := time.Now().Add(10 * time.Second)
	for slow.Counts().NFS3(nfs3.ProcRename) == 0 {
		if time.Now().After(deadline) {
			t.Fatal("no RENAME: the unlink did not hide the open file")
		}
		time.Sleep(time.Millisecond)
	}
	fs.Release(ctx, fh) // the last close, while the RENAME's reply is on its way
	if err := <-unlinked; err != nil {
		t.Fatalf("unlink: %v", err)
	}
	// (Glob's * matches names starting with a dot.)
	if names, _ := filepath.Glob(filepath.Join(ts.dir, "*")); len(names) != 0 {
		t.Fatalf("left in the directory after the unlink and the last close: %v", names)
	}
}

// TestRepliesInServerOrder: the server runs calls concurrently, so the
// order replies come back in is not the order the calls ran in, nor is
// the order they were sent in. Attributes showing an older ctime than the
// cached ones describe an earlier state and are not taken; a later ctime
// is taken whatever the order. It used to be the send order alone: a
// GETATTR sent just after our WRITE but run before it came back after it
// with the size from before, which shrank the file under its writer (the
// kernel cut its page cache to it, and bytes past it that we had not just
// written counted as holes: read, and even written back, as zeros); and a
// READ sent just after our SETATTR but run before it kept the SETATTR's
// new size out of the cache.
func TestRepliesInServerOrder(t *testing.T) {
	ts := startServer(t)
	fs := ts.mount(t, "")
	ctx := ctxT(t)
	e, fh, err := fs.Create(ctx, root, RootID, "f", syscall.O_RDWR, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	defer fs.Release(ctx, fh)
	write := func(off uint64, n int) {
		t.Helper()
		if _, err := fs.Write(ctx, root, fh, off, make([]byte, n)); err != nil {
			t.Fatal(err)
		}
		if err := fs.Flush(ctx, root, fh); err != nil {
			t.Fatal(err)
		}
	}
	n := fs.nodes.get(e.Node)
	attrs := func() (proto.Attr, time.Time) {
		n.mu.Lock()
		defer n.mu.Unlock()
		return n.attr, n.attrTime
	}
	apply := func(a proto.Attr, at time.Time) {
		n.mu.Lock()
		fs.applyAttrLocked(n, &a, at)
		n.mu.Unlock()
	}
	size := func() uint64 {
		t.Helper()
		a, _, err := fs.GetAttr(ctx, root, e.Node)
		if err != nil {
			t.Fatal(err)
		}
		return a.Size
	}
	later := func(a proto.Attr, s int64) proto.Attr {
		a.Mtime = proto.Time{Sec: a.Mtime.Sec + s}
		a.Ctime = a.Mtime
		return a
	}

	// A GETATTR run before our WRITE, sent just after it (the time the
	// node's attributes carry), its reply coming after the WRITE's.
	write(0, 100)
	before, _ := attrs()
	time.Sleep(10 * time.Millisecond) // a new ctime even on coarse timestamps
	write(100, 4000)
	_, wrote := attrs()
	apply(before, wrote.Add(time.Nanosecond))
	if got := size(); got != 4100 {
		t.Errorf("after a GETATTR run before our WRITE: size %d, want 4100", got)
	}
	if s := fs.dataSnapshot(n); s.size != 4100 || !s.valid {
		t.Errorf("after a GETATTR run before our WRITE: cached size %d, data valid %v; want 4100, true", s.size, s.valid)
	}

	// A call that ran during our WRITE, in flight beside it: the server
	// moved the times before it extended the file, so its reply has the
	// WRITE's ctime and the size from before. Sent after the WRITE, its
	// reply coming after it, or before it: the larger size stays.
	cur, wroteAt := attrs()
	mid := cur
	mid.Size = 100
	apply(mid, wroteAt.Add(time.Nanosecond))
	if got := size(); got != 4100 {
		t.Errorf("after a reply of a call run during our WRITE, sent after it: size %d, want 4100", got)
	}
	n.mu.Lock()
	n.attr.Size, n.attrTime = 100, wroteAt.Add(time.Nanosecond) // that reply taken first
	n.mu.Unlock()
	apply(cur, wroteAt) // the WRITE's, sent before it
	if got := size(); got != 4100 {
		t.Errorf("after our WRITE's reply, the reply of a call run during it taken first: size %d, want 4100", got)
	}

	// Another client truncates the file: a later ctime, taken.
	cur, _ = attrs()
	truncated := later(cur, 1)
	truncated.Size = 10
	apply(truncated, fs.now())
	if got := size(); got != 10 {
		t.Errorf("after a reply showing the file truncated since: size %d, want 10", got)
	}

	// Our SETATTR, then a READ sent after it but run before it, whose
	// reply comes first.
	cur, _ = attrs()
	setattrSent, readSent := fs.now(), fs.now().Add(time.Millisecond)
	apply(cur, readSent) // the READ's post-op attributes: the state before
	set := later(cur, 1)
	set.Size = 7
	fs.applyWcc(n, &proto.Wcc{After: proto.PostAttr{Present: true, Attr: set}}, setattrSent, false)
	if got := size(); got != 7 {
		t.Errorf("after our SETATTR's reply, sent before a READ that ran before it: size %d, want 7", got)
	}

	// Two WRITEs in flight together, the later-sent one run first: its
	// reply, with the smaller size and older ctime, comes last. Both were
	// sent before either reply came (a call sent after a reply arrived ran
	// after it, whatever its ctime).
	cur, _ = attrs()
	first, second := fs.now().Add(-2*time.Millisecond), fs.now().Add(-time.Millisecond)
	wcc := func(size uint64, s int64) *proto.Wcc {
		a := later(cur, s)
		a.Size = size
		return &proto.Wcc{After: proto.PostAttr{Present: true, Attr: a}}
	}
	fs.applyWcc(n, wcc(8000, 2), first, true) // ran second: the file at 8000
	fs.applyWcc(n, wcc(5000, 1), second, true)
	if a, _ := attrs(); a.Size != 8000 || a.Ctime.Sec != cur.Ctime.Sec+2 {
		t.Errorf("after WRITE replies in the other order than the server ran them: size %d ctime %+v, want 8000, %d s",
			a.Size, a.Ctime, cur.Ctime.Sec+2)
	}
}

// TestEvictedCleanDataIsNoHole: data we wrote and the server acknowledged
// stays as clean data, and bytes past the file's old size that none of
// our data covers are holes (zeros, known without asking). Once clean data
// is dropped for memory (another file's writes need the room), the bytes
// it held are no longer known to be ours: they must be read from the
// server, and must not be sent back as zeros to fill a gap between two
// writes. Both used to happen: reads got zeros, and a flush wrote zeros
// over the data on the server.
func TestEvictedCleanDataIsNoHole(t *testing.T) {
	ts := startServer(t)
	fs := ts.mount(t, "")
	ctx := ctxT(t)
	e, fh, err := fs.Create(ctx, root, RootID, "f", syscall.O_RDWR, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	defer fs.Release(ctx, fh)
	_, wsize, _ := fs.TransferSizes()
	data := make([]byte, 3*int(wsize))
	for i := range data {
		data[i] = byte(i%251 + 1)
	}
	// Three wsize chunks written in one go: the first two stream out as
	// UNSTABLE WRITEs and become clean data; the file is new, so anything
	// else past 0 would be a hole.
	for off := 0; off < len(data); off += int(wsize) {
		if _, err := fs.Write(ctx, root, fh, uint64(off), data[off:off+int(wsize)]); err != nil {
			t.Fatal(err)
		}
	}
	n := fs.nodes.get(e.Node)
	st := peek(n)
	deadline := time.Now().Add(20 * time.Second)
	for {
		st.mu.Lock()
		sending, clean := st.sending, st.clean.bytes()
		st.mu.Unlock()
		if sending == 0 && clean > 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("streamed WRITEs not done: %d sending, %d bytes clean", sending, clean)
		}
		time.Sleep(time.Millisecond)
	}
	// Other files' clean data fills the cache: this file's is dropped.
	fs.wb.mu.Lock()
	fs.wb.cleanBytes += cleanLimit
	fs.wb.mu.Unlock()
	fs.wb.evictClean(nil)
	fs.wb.mu.Lock()
	fs.wb.cleanBytes -= cleanLimit
	fs.wb.mu.Unlock()
	st.mu.Lock()
	clean := st.clean.bytes()
	st.mu.Unlock()
	if clean != 0 {
		t.Fatalf("%d bytes of clean data left after eviction", clean)
	}

	buf := make([]byte, 4096)
	got, err := fs.Read(ctx, root, fh, 4096, buf)
	if err != nil || got != len(buf) || !bytes.Equal(buf, data[4096:8192]) {
		t.Errorf("read of evicted data: %d bytes, %v, equal %v; want the data written", got, err, bytes.Equal(buf, data[4096:8192]))
	}
	// Two small writes with acknowledged data between them: the flush
	// must not fill the gap with zeros.
	for _, off := range []int{10, 100_000} {
		if _, err := fs.Write(ctx, root, fh, uint64(off), data[off:off+10]); err != nil {
			t.Fatal(err)
		}
	}
	if err := fs.Flush(ctx, root, fh); err != nil {
		t.Fatal(err)
	}
	disk, err := os.ReadFile(filepath.Join(ts.dir, "f"))
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(disk, data) {
		i := 0
		for i < min(len(disk), len(data)) && disk[i] == data[i] {
			i++
		}
		t.Errorf("the server's file differs from what was written (%d bytes, want %d), first at %d", len(disk), len(data), i)
	}
}

// TestReadOverlappingOurWrite: a READ the server ran before a WRITE of ours
// to the same bytes, whose reply is handled after the WRITE came back,
// must not leave its (older) bytes as the clean data that later reads are
// answered from. It did: under load, a file read back after close+reopen
// showed zeros where its last writes were, though the server had them.
// The interleaving is made here with the steps Read takes.
func TestReadOverlappingOurWrite(t *testing.T) {
	ts := startServer(t)
	if err := os.WriteFile(filepath.Join(ts.dir, "f"), make([]byte, 8192), 0o666); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(filepath.Join(ts.dir, "f"), 0o666); err != nil {
		t.Fatal(err)
	}
	fs := ts.mount(t, "")
	ctx := ctxT(t)
	e, err := fs.Lookup(ctx, root, RootID, "f")
	if err != nil {
		t.Fatal(err)
	}
	fh, _, err := fs.Open(ctx, root, e.Node, syscall.O_RDWR)
	if err != nil {
		t.Fatal(err)
	}
	defer fs.Release(ctx, fh)
	n := fs.nodes.get(e.Node)

	// A READ of the file is sent (nothing of ours pending yet) and runs
	// on the server: zeros.
	pending, _, changes := fs.wb.pendingIn(n, 0, 8192)
	gen := fs.dataSnapshot(n).gen
	old := make([]byte, 8192)
	if got, _, err := fs.readRPC(ctx, root, n, 0, old); err != nil || got != 8192 {
		t.Fatalf("READ: %d, %v", got, err)
	}
	// Meanwhile we write those bytes, and the WRITE comes back first.
	ours := bytes.Repeat([]byte("ours"), 1024)
	if _, err := fs.Write(ctx, root, fh, 0, ours); err != nil {
		t.Fatal(err)
	}
	if err := fs.Flush(ctx, root, fh); err != nil {
		t.Fatal(err)
	}
	// Then the READ's reply is handled.
	if len(pending) != 0 {
		t.Fatal("something pending before the READ")
	}
	fs.wb.keepRead(n, gen, fs.dataSnapshot(n).gen, changes, 0, old)

	buf := make([]byte, 4096)
	if got, err := fs.Read(ctx, root, fh, 0, buf); err != nil || got != 4096 || !bytes.Equal(buf, ours) {
		t.Errorf("read after the late READ reply: %d bytes, %v, our data %v", got, err, bytes.Equal(buf, ours))
	}
}
