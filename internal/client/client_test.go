package client

import (
	"bytes"
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"hushfs/internal/nfs3"
	"hushfs/internal/proto"
	"hushfs/internal/proxy"
	"hushfs/internal/rpc"
	"hushfs/internal/server"
)

// testServer is an in-process hushfs server on 127.0.0.1 with a counting
// proxy in front of its NFS port.
type testServer struct {
	dir, state string
	srv        *server.Server
	rs         *rpc.Server
	nfsL       net.Listener
	mountL     net.Listener
	proxy      *proxy.Proxy
	config     func(*server.Config) // changes to the server's defaults, or nil
}

func requireRoot(t *testing.T) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("the server needs root (kernel file handles, per-call credentials)")
	}
}

func startServer(t *testing.T) *testServer {
	t.Helper()
	return startServerWith(t, nil)
}

// startServerWith is startServer with the server's configuration changed
// by config (delegations on, say).
func startServerWith(t *testing.T, config func(*server.Config)) *testServer {
	t.Helper()
	requireRoot(t)
	ts := &testServer{dir: t.TempDir(), state: t.TempDir(), config: config}
	os.Chmod(ts.dir, 0o777)
	var err error
	if ts.nfsL, err = net.Listen("tcp", "127.0.0.1:0"); err != nil {
		t.Fatal(err)
	}
	if ts.mountL, err = net.Listen("tcp", "127.0.0.1:0"); err != nil {
		t.Fatal(err)
	}
	ts.serve(t)
	ts.proxy, err = proxy.Start(proxy.Config{Listen: "127.0.0.1:0", Target: ts.nfsL.Addr().String()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ts.proxy.Close()
		ts.stop()
	})
	return ts
}

func (ts *testServer) serve(t *testing.T) {
	t.Helper()
	var err error
	cfg := server.Config{Root: ts.dir, StateDir: ts.state}
	if ts.config != nil {
		ts.config(&cfg)
	}
	ts.srv, err = server.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	ts.rs = rpc.NewServer(rpc.ServerOptions{})
	ts.srv.Register(ts.rs)
	go ts.rs.Serve(ts.nfsL)
	go ts.rs.Serve(ts.mountL)
}

func (ts *testServer) stop() {
	ts.rs.Close()
	ts.srv.Close()
}

// restart stops the server and starts a new one on the same ports and
// state: handles stay valid, the write verifier changes.
func (ts *testServer) restart(t *testing.T) {
	t.Helper()
	nfsAddr, mountAddr := ts.nfsL.Addr().String(), ts.mountL.Addr().String()
	ts.stop()
	var err error
	for i := 0; i < 50; i++ {
		if ts.nfsL, err = net.Listen("tcp", nfsAddr); err == nil {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	if err != nil {
		t.Fatal(err)
	}
	if ts.mountL, err = net.Listen("tcp", mountAddr); err != nil {
		t.Fatal(err)
	}
	ts.serve(t)
}

func port(a net.Addr) int { return a.(*net.TCPAddr).Port }

func (ts *testServer) mount(t *testing.T, opts string) *FS {
	t.Helper()
	o, err := ParseOptions(fmt.Sprintf("port=%d,mountport=%d,timeo=50,%s", port(ts.proxy.Addr()), port(ts.mountL.Addr()), opts))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	fs, err := Mount(ctx, Config{Server: "127.0.0.1", Export: ts.srv.Root(), Options: o})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { fs.Close(context.Background()) })
	fs.Stats().Reset()
	ts.proxy.Reset()
	return fs
}

var root = &Cred{}

func ctxT(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	t.Cleanup(cancel)
	return ctx
}

func TestMountErrors(t *testing.T) {
	ts := startServer(t)
	ctx := ctxT(t)
	o, _ := ParseOptions(fmt.Sprintf("port=%d,mountport=%d", port(ts.nfsL.Addr()), port(ts.mountL.Addr())))
	_, err := Mount(ctx, Config{Server: "127.0.0.1", Export: "/no/such/export", Options: o})
	if err == nil || !strings.Contains(err.Error(), "MOUNT") {
		t.Fatalf("mounting a missing export: %v", err)
	}
	l, _ := net.Listen("tcp", "127.0.0.1:0")
	dead := port(l.Addr())
	l.Close()
	o.MountPort = dead
	if _, err = Mount(ctx, Config{Server: "127.0.0.1", Export: ts.srv.Root(), Options: o}); err == nil {
		t.Fatal("mount through a closed port succeeded")
	}
}

// TestWriteBackDD: a 64 MiB sequential write is 64 UNSTABLE WRITEs of 1 MiB
// and one COMMIT at close, no synchronous WRITE.
func TestWriteBackDD(t *testing.T) {
	ts := startServer(t)
	fs := ts.mount(t, "")
	ctx := ctxT(t)
	e, fh, err := fs.Create(ctx, root, RootID, "w64", syscall.O_WRONLY|syscall.O_TRUNC, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	block := make([]byte, 1<<20)
	rand.Read(block)
	for i := 0; i < 64; i++ {
		if _, err := fs.Write(ctx, root, fh, uint64(i)<<20, block); err != nil {
			t.Fatal(err)
		}
	}
	if err := fs.Flush(ctx, root, fh); err != nil {
		t.Fatal(err)
	}
	fs.Release(ctx, fh)
	c := ts.proxy.Counts()
	if got := c.WriteStable[uint32(nfs3.Unstable)]; got != 64 {
		t.Errorf("UNSTABLE WRITEs = %d, want 64", got)
	}
	if c.WriteStable[uint32(nfs3.FileSync)]+c.WriteStable[uint32(nfs3.DataSync)] != 0 {
		t.Errorf("synchronous WRITEs: %v", c.WriteStable)
	}
	if c.Commits != 1 {
		t.Errorf("COMMITs = %d, want 1", c.Commits)
	}
	if s := fs.Stats().Snapshot(); s.Count("WRITE") != 64 || s.Count("COMMIT") != 1 {
		t.Errorf("client stats: WRITE %d COMMIT %d", s.Count("WRITE"), s.Count("COMMIT"))
	}
	got, _ := os.ReadFile(filepath.Join(ts.dir, "w64"))
	for i := 0; i < 64; i++ {
		if !bytes.Equal(got[i<<20:(i+1)<<20], block) {
			t.Fatalf("block %d differs on the server", i)
		}
	}
	_ = e
}

// TestWriteBackFixup: sequential 4 KiB writes then scattered 4-byte
// pwrites into them (an assembler's fixups) send one FILE_SYNC WRITE at
// close and nothing before.
func TestWriteBackFixup(t *testing.T) {
	ts := startServer(t)
	fs := ts.mount(t, "")
	ctx := ctxT(t)
	_, fh, err := fs.Create(ctx, root, RootID, "obj.o", syscall.O_RDWR, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	model := make([]byte, 1<<20)
	rand.Read(model)
	for off := 0; off < len(model); off += 4096 {
		if _, err := fs.Write(ctx, root, fh, uint64(off), model[off:off+4096]); err != nil {
			t.Fatal(err)
		}
	}
	for i := 0; i < 100; i++ {
		off := (i * 10007) % (len(model) - 4)
		fix := []byte{byte(i), 1, 2, 3}
		copy(model[off:], fix)
		if _, err := fs.Write(ctx, root, fh, uint64(off), fix); err != nil {
			t.Fatal(err)
		}
	}
	if n := ts.proxy.Counts().Calls[proxy.NFS3(nfs3.ProcWrite)]; n != 0 {
		t.Fatalf("%d WRITEs before close", n)
	}
	// Reads see data not yet sent.
	buf := make([]byte, 8192)
	if n, err := fs.Read(ctx, root, fh, 4000, buf); err != nil || n != len(buf) || !bytes.Equal(buf, model[4000:4000+8192]) {
		t.Fatalf("read of dirty data: n=%d err=%v", n, err)
	}
	if err := fs.Flush(ctx, root, fh); err != nil {
		t.Fatal(err)
	}
	fs.Release(ctx, fh)
	c := ts.proxy.Counts()
	if c.WriteStable[uint32(nfs3.FileSync)] != 1 || c.WriteStable[uint32(nfs3.Unstable)] != 0 || c.Commits != 0 {
		t.Errorf("WRITE stability %v, COMMITs %d; want one FILE_SYNC", c.WriteStable, c.Commits)
	}
	got, _ := os.ReadFile(filepath.Join(ts.dir, "obj.o"))
	if !bytes.Equal(got, model) {
		t.Fatal("file on the server differs from what was written")
	}
}

// TestOSyncWrites: O_SYNC asks for durability, and gets FILE_SYNC WRITEs.
func TestOSyncWrites(t *testing.T) {
	ts := startServer(t)
	fs := ts.mount(t, "")
	ctx := ctxT(t)
	_, fh, err := fs.Create(ctx, root, RootID, "sync", syscall.O_WRONLY|syscall.O_SYNC, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 3; i++ {
		if _, err := fs.Write(ctx, root, fh, uint64(i)*10, []byte("0123456789")); err != nil {
			t.Fatal(err)
		}
	}
	if c := ts.proxy.Counts(); c.WriteStable[uint32(nfs3.FileSync)] != 3 {
		t.Fatalf("O_SYNC writes: %v", c.WriteStable)
	}
	fs.Flush(ctx, root, fh)
	fs.Release(ctx, fh)
}

// TestVerifierChangeResends: data acknowledged UNSTABLE before a server
// restart is sent again when COMMIT shows a new write verifier.
func TestVerifierChangeResends(t *testing.T) {
	ts := startServer(t)
	fs := ts.mount(t, "")
	ctx := ctxT(t)
	_, fh, err := fs.Create(ctx, root, RootID, "v", syscall.O_WRONLY, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	data := make([]byte, 3<<20)
	rand.Read(data)
	if _, err := fs.Write(ctx, root, fh, 0, data); err != nil {
		t.Fatal(err)
	}
	// Two chunks stream out UNSTABLE as soon as three are dirty; wait for them.
	fs.wb.flush(ctx, fs.nodes.get(2), proto.Unstable)
	before := ts.proxy.Counts().WriteStable[uint32(nfs3.Unstable)]
	if before != 3 {
		t.Fatalf("UNSTABLE WRITEs before restart = %d, want 3", before)
	}
	ts.restart(t)
	// The first call after the restart finds the old connection gone and is
	// sent again on a new one; count only from there on.
	if _, err := fs.StatFS(ctx, root, RootID); err != nil {
		t.Fatal(err)
	}
	ts.proxy.Reset()
	if err := fs.Flush(ctx, root, fh); err != nil {
		t.Fatal(err)
	}
	fs.Release(ctx, fh)
	c := ts.proxy.Counts()
	if c.Commits != 2 || c.WriteStable[uint32(nfs3.Unstable)] != 3 {
		t.Errorf("after restart: COMMITs %d, UNSTABLE WRITEs %d; want 2 and 3 (all resent once)", c.Commits, c.WriteStable[uint32(nfs3.Unstable)])
	}
	// The statistics say so too: one COMMIT found the verifier changed, and
	// all three acknowledged MiB went out again.
	if r := fs.Stats().Snapshot().Resends; r.Commits != 1 || r.Bytes != 3<<20 {
		t.Errorf("statistics: %+v resends, want 1 COMMIT and %d bytes", r, 3<<20)
	}
	got, _ := os.ReadFile(filepath.Join(ts.dir, "v"))
	if !bytes.Equal(got, data) {
		t.Fatal("file differs after resend")
	}
}

// TestWriteErrorReportedOncePerDescriptor: a write-back error reaches
// every descriptor open at the time, once each, and is not lost to a later
// success.
func TestWriteErrorReportedOncePerDescriptor(t *testing.T) {
	ts := startServer(t)
	fs := ts.mount(t, "")
	ctx := ctxT(t)
	user := &Cred{UID: 1000, GID: 1000}
	e, fh1, err := fs.Create(ctx, user, RootID, "ro", syscall.O_WRONLY, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	fh2, _, err := fs.Open(ctx, user, e.Node, syscall.O_WRONLY)
	if err != nil {
		t.Fatal(err)
	}
	// The file vanishes on the server: write-back fails with ESTALE.
	if err := os.Remove(filepath.Join(ts.dir, "ro")); err != nil {
		t.Fatal(err)
	}
	fs.Write(ctx, user, fh1, 0, []byte("lost?"))
	err1 := fs.Flush(ctx, user, fh1)
	if Errno(err1) != syscall.ESTALE {
		t.Fatalf("first close: %v, want ESTALE", err1)
	}
	if err := fs.Flush(ctx, user, fh1); err != nil {
		t.Fatalf("second close of the same descriptor: %v, want nil (reported once)", err)
	}
	if err := fs.Flush(ctx, user, fh2); Errno(err) != syscall.ESTALE {
		t.Fatalf("other descriptor: %v, want ESTALE", err)
	}
	if err := fs.Flush(ctx, user, fh2); err != nil {
		t.Fatalf("other descriptor again: %v", err)
	}
	fs.Release(ctx, fh1)
	fs.Release(ctx, fh2)
}

// TestUnlinkOpenFile: an unlinked open file stays readable through its
// descriptor, hidden under a .nfs name removed at last close.
func TestUnlinkOpenFile(t *testing.T) {
	ts := startServer(t)
	fs := ts.mount(t, "")
	ctx := ctxT(t)
	_, fh, err := fs.Create(ctx, root, RootID, "victim", syscall.O_RDWR, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	fs.Write(ctx, root, fh, 0, []byte("still here"))
	if err := fs.Flush(ctx, root, fh); err != nil {
		t.Fatal(err)
	}
	if err := fs.Unlink(ctx, root, RootID, "victim"); err != nil {
		t.Fatal(err)
	}
	if _, err := fs.Lookup(ctx, root, RootID, "victim"); Errno(err) != syscall.ENOENT {
		t.Fatalf("lookup after unlink: %v", err)
	}
	names, _ := filepath.Glob(filepath.Join(ts.dir, ".nfs*"))
	if len(names) != 1 {
		t.Fatalf("hidden files: %v", names)
	}
	buf := make([]byte, 64)
	if n, err := fs.Read(ctx, root, fh, 0, buf); err != nil || string(buf[:n]) != "still here" {
		t.Fatalf("read after unlink: %q %v", buf[:n], err)
	}
	fs.Release(ctx, fh)
	if names, _ := filepath.Glob(filepath.Join(ts.dir, ".nfs*")); len(names) != 0 {
		t.Fatalf("hidden file left after last close: %v", names)
	}
}

// TestReadDirResumesUnderChurn: a listing read in small pieces, while
// another process creates and removes names in the directory, returns every
// stable name exactly once and never starts over.
func TestReadDirResumesUnderChurn(t *testing.T) {
	ts := startServer(t)
	const n = 3000
	sub := filepath.Join(ts.dir, "big")
	os.Mkdir(sub, 0o755)
	for i := 0; i < n; i++ {
		os.WriteFile(filepath.Join(sub, "f"+strconv.Itoa(i)), nil, 0o644)
	}
	fs := ts.mount(t, "nordirplus")
	ctx := ctxT(t)
	e, err := fs.Lookup(ctx, root, RootID, "big")
	if err != nil {
		t.Fatal(err)
	}
	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() { // churn directly in the exported directory
		defer wg.Done()
		for i := 0; ; i++ {
			select {
			case <-stop:
				return
			default:
			}
			p := filepath.Join(sub, ".churn-"+strconv.Itoa(i))
			os.WriteFile(p, nil, 0o644)
			os.Remove(filepath.Join(sub, ".churn-"+strconv.Itoa(i-1)))
			time.Sleep(time.Millisecond)
		}
	}()
	dh, err := fs.OpenDir(ctx, root, e.Node)
	if err != nil {
		t.Fatal(err)
	}
	seen := map[string]int{}
	var off uint64
	for calls := 0; ; calls++ {
		got := 0
		err := fs.ReadDir(ctx, root, dh, off, false, func(de *DirEntry) bool {
			if got == 40 { // a small reader buffer, as the kernel's is
				return false
			}
			got++
			seen[de.Name]++
			off = de.Cookie
			return true
		})
		if err != nil {
			t.Fatal(err)
		}
		if got == 0 {
			break
		}
		if calls > 10*n {
			t.Fatal("listing does not end")
		}
	}
	close(stop)
	wg.Wait()
	fs.ReleaseDir(dh)
	for i := 0; i < n; i++ {
		if c := seen["f"+strconv.Itoa(i)]; c != 1 {
			t.Fatalf("f%d listed %d times", i, c)
		}
	}
	rpcs := fs.Stats().Snapshot().Count("READDIR")
	t.Logf("%d entries in %d READDIRs under churn", n, rpcs)
	// ~3000 entries of ~24 bytes per 64 KiB-ish reply: a restart per call
	// would cost hundreds.
	if rpcs > 10 {
		t.Errorf("READDIR calls = %d: the listing restarted", rpcs)
	}
}

// TestReadDirPlusRefsAreReturned: entries the reader's buffer had no room
// for do not keep a kernel reference.
func TestReadDirPlusRefsAreReturned(t *testing.T) {
	ts := startServer(t)
	for i := 0; i < 50; i++ {
		os.WriteFile(filepath.Join(ts.dir, "p"+strconv.Itoa(i)), nil, 0o644)
	}
	fs := ts.mount(t, "")
	ctx := ctxT(t)
	dh, err := fs.OpenDir(ctx, root, RootID)
	if err != nil {
		t.Fatal(err)
	}
	var off uint64
	refs := map[NodeID]uint64{}
	for {
		got := 0
		err := fs.ReadDir(ctx, root, dh, off, true, func(de *DirEntry) bool {
			if got == 7 {
				return false
			}
			got++
			off = de.Cookie
			if de.Entry.Node != 0 {
				refs[de.Entry.Node]++
			}
			return true
		})
		if err != nil {
			t.Fatal(err)
		}
		if got == 0 {
			break
		}
	}
	fs.ReleaseDir(dh)
	if s := fs.Stats().Snapshot(); s.Count("GETATTR")+s.Count("LOOKUP") != 0 {
		t.Errorf("READDIRPLUS listing sent GETATTR %d LOOKUP %d", s.Count("GETATTR"), s.Count("LOOKUP"))
	}
	for id, n := range refs {
		fs.Forget(id, n)
	}
	if left := fs.nodes.count(); left != 1 {
		t.Fatalf("%d nodes left after forgetting every returned entry, want only the root", left)
	}
}

// TestNamespaceOps runs each metadata operation once with its error cases.
func TestNamespaceOps(t *testing.T) {
	ts := startServer(t)
	fs := ts.mount(t, "")
	ctx := ctxT(t)
	d, err := fs.Mkdir(ctx, root, RootID, "d", 0o755)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := fs.Mkdir(ctx, root, RootID, "d", 0o755); Errno(err) != syscall.EEXIST {
		t.Fatalf("mkdir existing: %v", err)
	}
	// Answered by the new directory's own (empty) listing, as of its
	// MKDIR: negtimeo from then.
	neg, err := fs.Lookup(ctx, root, d.Node, "nope")
	if Errno(err) != syscall.ENOENT || neg.EntryTTL > 3*time.Second || neg.EntryTTL < 2*time.Second {
		t.Fatalf("negative lookup: %v ttl %v", err, neg.EntryTTL)
	}
	if _, err := fs.Symlink(ctx, root, d.Node, "l\xff", "../tgt\xfe"); err != nil {
		t.Fatal(err)
	}
	l, err := fs.Lookup(ctx, root, d.Node, "l\xff")
	if err != nil {
		t.Fatal(err)
	}
	if tgt, err := fs.Readlink(ctx, root, l.Node); err != nil || string(tgt) != "../tgt\xfe" {
		t.Fatalf("readlink: %q %v", tgt, err)
	}
	if _, err := fs.Mknod(ctx, root, d.Node, "fifo", syscall.S_IFIFO|0o644, 0); err != nil {
		t.Fatal(err)
	}
	f, fh, err := fs.Create(ctx, root, d.Node, "f", syscall.O_WRONLY|syscall.O_EXCL, 0o640)
	if err != nil {
		t.Fatal(err)
	}
	fs.Release(ctx, fh)
	if f.Attr.Mode&0o777 != 0o640 {
		t.Fatalf("exclusive create mode %o", f.Attr.Mode)
	}
	if _, err := fs.Link(ctx, root, f.Node, RootID, "hard"); err != nil {
		t.Fatal(err)
	}
	if a, _, err := fs.GetAttr(ctx, root, f.Node); err != nil || a.Nlink != 2 {
		t.Fatalf("nlink after link: %d %v", a.Nlink, err)
	}
	if err := fs.Rmdir(ctx, root, RootID, "d"); Errno(err) != syscall.ENOTEMPTY {
		t.Fatalf("rmdir non-empty: %v", err)
	}
	if err := fs.Rename(ctx, root, RootID, "hard", d.Node, "fifo"); err != nil {
		t.Fatalf("rename over existing: %v", err)
	}
	a, _, err := fs.SetAttr(ctx, root, f.Node, SetAttrIn{SetSize: true, Size: 5 << 30, SetMode: true, Mode: 0o600})
	if err != nil || a.Size != 5<<30 || a.Mode&0o777 != 0o600 {
		t.Fatalf("setattr: %+v %v", a, err)
	}
	if err := fs.Access(ctx, &Cred{UID: 1000, GID: 1000}, f.Node, AccessRead); Errno(err) != syscall.EACCES {
		t.Fatalf("access as another user: %v", err)
	}
	if _, err := fs.Mkdir(ctx, &Cred{UID: 1000, GID: 1000}, d.Node, "x", 0o755); Errno(err) != syscall.EACCES {
		t.Fatalf("mkdir in a root 0755 dir as uid 1000: %v", err)
	}
	for _, name := range []string{"fifo", "f", "l\xff"} {
		if err := fs.Unlink(ctx, root, d.Node, name); err != nil {
			t.Fatalf("unlink %q: %v", name, err)
		}
	}
	if err := fs.Rmdir(ctx, root, RootID, "d"); err != nil {
		t.Fatal(err)
	}
	if _, _, err := fs.GetAttr(ctx, root, d.Node); !errors.Is(err, syscall.ESTALE) && err != nil {
		// the attribute cache may still answer; a fresh GETATTR must be STALE
		t.Fatalf("getattr of removed dir: %v", err)
	}
	st, err := fs.StatFS(ctx, root, RootID)
	if err != nil || st.Blocks == 0 {
		t.Fatalf("statfs: %+v %v", st, err)
	}
}

// TestDirtyDataAges: data written to a file kept open is sent and
// committed once it has been dirty for dirtyExpire (injected clock).
func TestDirtyDataAges(t *testing.T) {
	ts := startServer(t)
	var mu sync.Mutex
	now := time.Unix(2_000_000_000, 0)
	clock := func() time.Time { mu.Lock(); defer mu.Unlock(); return now }
	o, _ := ParseOptions(fmt.Sprintf("port=%d,mountport=%d", port(ts.proxy.Addr()), port(ts.mountL.Addr())))
	ctx := ctxT(t)
	fs, err := Mount(ctx, Config{Server: "127.0.0.1", Export: ts.srv.Root(), Options: o, Now: clock})
	if err != nil {
		t.Fatal(err)
	}
	defer fs.Close(ctx)
	_, fh, err := fs.Create(ctx, root, RootID, "log", syscall.O_WRONLY, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	fs.Write(ctx, root, fh, 0, []byte("line one\n"))
	fs.wb.flushAged(ctx)
	if got, _ := os.ReadFile(filepath.Join(ts.dir, "log")); len(got) != 0 {
		t.Fatalf("young dirty data sent: %q", got)
	}
	mu.Lock()
	now = now.Add(dirtyExpire)
	mu.Unlock()
	fs.wb.flushAged(ctx)
	if got, _ := os.ReadFile(filepath.Join(ts.dir, "log")); string(got) != "line one\n" {
		t.Fatalf("aged dirty data not on the server: %q", got)
	}
	fs.Release(ctx, fh)
}

// TestNoSpace: an export on a small tmpfs: writing past its size fails with
// ENOSPC at close (flush) — for every descriptor — and what fit is kept.
func TestNoSpace(t *testing.T) {
	requireRoot(t)
	dir := t.TempDir()
	if err := syscall.Mount("tmpfs", dir, "tmpfs", 0, "size=2m"); err != nil {
		t.Skipf("no tmpfs: %v", err)
	}
	defer syscall.Unmount(dir, syscall.MNT_DETACH)
	ts := &testServer{dir: dir, state: t.TempDir()}
	var err error
	if ts.nfsL, err = net.Listen("tcp", "127.0.0.1:0"); err != nil {
		t.Fatal(err)
	}
	if ts.mountL, err = net.Listen("tcp", "127.0.0.1:0"); err != nil {
		t.Fatal(err)
	}
	ts.serve(t)
	if ts.proxy, err = proxy.Start(proxy.Config{Listen: "127.0.0.1:0", Target: ts.nfsL.Addr().String()}); err != nil {
		t.Fatal(err)
	}
	defer func() { ts.proxy.Close(); ts.stop() }()
	fs := ts.mount(t, "")
	ctx := ctxT(t)
	fit := make([]byte, 1<<20)
	rand.Read(fit)
	_, fh1, err := fs.Create(ctx, root, RootID, "fits", syscall.O_WRONLY, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	fs.Write(ctx, root, fh1, 0, fit)
	if err := fs.Flush(ctx, root, fh1); err != nil {
		t.Fatalf("1 MiB on a 2 MiB file system: %v", err)
	}
	fs.Release(ctx, fh1)
	e, fh2, err := fs.Create(ctx, root, RootID, "toobig", syscall.O_WRONLY, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	fh3, _, err := fs.Open(ctx, root, e.Node, syscall.O_WRONLY)
	if err != nil {
		t.Fatal(err)
	}
	big := make([]byte, 3<<20)
	for off := 0; off < len(big); off += 1 << 20 {
		fs.Write(ctx, root, fh2, uint64(off), big[off:off+1<<20])
	}
	if err := fs.Flush(ctx, root, fh2); Errno(err) != syscall.ENOSPC {
		t.Fatalf("close after writing past the file system: %v, want ENOSPC", err)
	}
	if err := fs.Flush(ctx, root, fh3); Errno(err) != syscall.ENOSPC {
		t.Fatalf("the other descriptor: %v, want ENOSPC", err)
	}
	fs.Release(ctx, fh2)
	fs.Release(ctx, fh3)
	if got, _ := os.ReadFile(filepath.Join(dir, "fits")); !bytes.Equal(got, fit) {
		t.Fatal("data that fit was lost")
	}
}

// TestFsyncCommits: fsync (and fdatasync, the same call here) of data that
// went out UNSTABLE sends one COMMIT; data still dirty that fits one WRITE
// goes out FILE_SYNC instead, equally durable.
func TestFsyncCommits(t *testing.T) {
	ts := startServer(t)
	fs := ts.mount(t, "")
	ctx := ctxT(t)
	_, fh, err := fs.Create(ctx, root, RootID, "synced", syscall.O_WRONLY, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	data := make([]byte, 3<<20)
	fs.Write(ctx, root, fh, 0, data) // streams two chunks UNSTABLE
	if err := fs.Fsync(ctx, root, fh); err != nil {
		t.Fatal(err)
	}
	c := ts.proxy.Counts()
	if c.Commits != 1 || c.WriteStable[uint32(nfs3.Unstable)] != 3 || c.WriteStable[uint32(nfs3.FileSync)] != 0 {
		t.Fatalf("fsync after 3 MiB: COMMIT %d, WRITE %v; want 1 COMMIT after 3 UNSTABLE", c.Commits, c.WriteStable)
	}
	ts.proxy.Reset()
	fs.Write(ctx, root, fh, 0, []byte("small"))
	if err := fs.Fsync(ctx, root, fh); err != nil {
		t.Fatal(err)
	}
	c = ts.proxy.Counts()
	if c.Commits != 0 || c.WriteStable[uint32(nfs3.FileSync)] != 1 {
		t.Fatalf("fsync of 5 dirty bytes: COMMIT %d, WRITE %v; want one FILE_SYNC WRITE", c.Commits, c.WriteStable)
	}
	if err := fs.Fsync(ctx, root, fh); err != nil {
		t.Fatal(err)
	}
	if c2 := ts.proxy.Counts(); c2.Calls[proxy.NFS3(nfs3.ProcWrite)]+c2.Commits != 1 { // still only the FILE_SYNC WRITE
		t.Fatalf("fsync with nothing pending sent %v", c2.Calls)
	}
	fs.Release(ctx, fh)
}

// TestDirtyLimitBoundsMemory: with a small write-back limit, a long
// sequential write makes the writer wait for write-back (and COMMIT), so
// what the mount holds never goes much past the limit, and the data is
// intact.
func TestDirtyLimitBoundsMemory(t *testing.T) {
	ts := startServer(t)
	fs := ts.mount(t, "")
	const limit = 8 << 20
	fs.wb.mu.Lock()
	fs.wb.limit = limit
	fs.wb.mu.Unlock()
	ctx := ctxT(t)
	_, fh, err := fs.Create(ctx, root, RootID, "big", syscall.O_WRONLY, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	block := make([]byte, 1<<20)
	var peak uint64
	for i := range 64 {
		for j := range block {
			block[j] = byte(i + j)
		}
		if _, err := fs.Write(ctx, root, fh, uint64(i)<<20, block); err != nil {
			t.Fatal(err)
		}
		fs.wb.mu.Lock()
		peak = max(peak, fs.wb.bytes)
		fs.wb.mu.Unlock()
	}
	if err := fs.Flush(ctx, root, fh); err != nil {
		t.Fatal(err)
	}
	fs.Release(ctx, fh)
	t.Logf("peak held %d MiB, %d COMMITs", peak>>20, ts.proxy.Counts().Commits)
	// One write past the limit, plus the wsize chunk streaming keeps back.
	if peak > limit+2<<20 {
		t.Errorf("write-back held %d bytes after a write returned, limit %d", peak, limit)
	}
	if c := ts.proxy.Counts(); c.Commits < 4 {
		t.Errorf("COMMITs = %d: writers did not wait for write-back to be made durable", c.Commits)
	}
	got, err := os.ReadFile(filepath.Join(ts.dir, "big"))
	if err != nil || len(got) != 64<<20 {
		t.Fatalf("server file: %d bytes, %v", len(got), err)
	}
	for i := range 64 {
		for j := 0; j < 1<<20; j += 4093 {
			if got[i<<20+j] != byte(i+j) {
				t.Fatalf("byte %d of MiB %d differs", j, i)
			}
		}
	}
}
