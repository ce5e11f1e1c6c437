package client

import (
	"context"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"hushfs/internal/nfs3"
	"hushfs/internal/proto"
	"hushfs/internal/rpc"
	"hushfs/internal/xdr"
)

// Another client's changes, made here directly in the exported directory:
// what our caches believed must give way as soon as the server shows it
// is wrong.

// listNames lists a directory through the core, from offset 0 to the end.
func listNames(t *testing.T, ctx context.Context, fs *FS, id NodeID) []string {
	t.Helper()
	dh, err := fs.OpenDir(ctx, root, id)
	if err != nil {
		t.Fatalf("opendir: %v", err)
	}
	defer fs.ReleaseDir(dh)
	var names []string
	err = fs.ReadDir(ctx, root, dh, 0, false, func(de *DirEntry) bool {
		if de.Name != "." && de.Name != ".." {
			names = append(names, de.Name)
		}
		return true
	})
	if err != nil {
		t.Fatalf("readdir: %v", err)
	}
	slices.Sort(names)
	return names
}

// TestRmdirNotEmptyDistrustsListing: we listed a directory and removed
// what it held, so our cached listing (kept up to date by our own REMOVEs)
// says it is empty; another client then adds a file. RMDIR answers
// ENOTEMPTY, and the next listing must come from the server and show the
// file, or rm -rf, listing nothing and retrying rmdir, would loop until
// the directory's attributes expire.
func TestRmdirNotEmptyDistrustsListing(t *testing.T) {
	ts := startServer(t)
	// Writable by all: the test server squashes root.
	if err := os.Mkdir(filepath.Join(ts.dir, "x"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(filepath.Join(ts.dir, "x"), 0o777); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(ts.dir, "x", "f"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	fs := ts.mount(t, "")
	ctx := ctxT(t)
	e, err := fs.Lookup(ctx, root, RootID, "x")
	if err != nil {
		t.Fatal(err)
	}
	if got := listNames(t, ctx, fs, e.Node); !slices.Equal(got, []string{"f"}) {
		t.Fatalf("listing: %v", got)
	}
	if err := fs.Unlink(ctx, root, e.Node, "f"); err != nil {
		t.Fatal(err)
	}
	readdirs := fs.Stats().Snapshot().Count("READDIRPLUS") + fs.Stats().Snapshot().Count("READDIR")
	if got := listNames(t, ctx, fs, e.Node); len(got) != 0 {
		t.Fatalf("listing after our own unlink: %v", got)
	}
	if n := fs.Stats().Snapshot().Count("READDIRPLUS") + fs.Stats().Snapshot().Count("READDIR"); n != readdirs {
		t.Fatalf("the listing after our own unlink was not served from the cache (%d READDIRs): the test proves nothing", n-readdirs)
	}

	// The other client.
	if err := os.WriteFile(filepath.Join(ts.dir, "x", "g"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := fs.Rmdir(ctx, root, RootID, "x"); Errno(err) != syscall.ENOTEMPTY {
		t.Fatalf("rmdir: %v, want ENOTEMPTY", err)
	}
	if got := listNames(t, ctx, fs, e.Node); !slices.Equal(got, []string{"g"}) {
		t.Fatalf("listing after ENOTEMPTY: %v, want [g]", got)
	}
	if _, err := fs.Lookup(ctx, root, e.Node, "g"); err != nil {
		t.Fatalf("lookup of the other client's file: %v", err)
	}
	if err := fs.Unlink(ctx, root, e.Node, "g"); err != nil {
		t.Fatal(err)
	}
	if err := fs.Rmdir(ctx, root, RootID, "x"); err != nil {
		t.Fatalf("rmdir once emptied: %v", err)
	}
}

// TestRmdirNotEmptyUnnamedChild: the same when the directory's name is no
// longer in the name cache (dropped when its parent changed) while the
// node, which the kernel still holds, keeps its listing: RMDIR's ENOTEMPTY
// finds the node with a LOOKUP.
func TestRmdirNotEmptyUnnamedChild(t *testing.T) {
	ts, fs, ctx, e := mountWithDirX(t)
	if got := listNames(t, ctx, fs, e.Node); len(got) != 0 {
		t.Fatalf("listing: %v", got)
	}
	dir := fs.nodes.get(RootID)
	dir.mu.Lock()
	delete(dir.names, "x")
	dir.mu.Unlock()
	if err := os.WriteFile(filepath.Join(ts.dir, "x", "g"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := fs.Rmdir(ctx, root, RootID, "x"); Errno(err) != syscall.ENOTEMPTY {
		t.Fatalf("rmdir: %v, want ENOTEMPTY", err)
	}
	if got := listNames(t, ctx, fs, e.Node); !slices.Equal(got, []string{"g"}) {
		t.Fatalf("listing after ENOTEMPTY: %v, want [g]", got)
	}
}

// TestCreateInRemovedDirectory: another client removed a directory we
// hold, and a CREATE in it answers STALE. The directory's name must then
// lead nowhere: the kernel retries the create with a fresh walk of the
// path, and if our name cache handed it the dead directory again the
// caller would see ESTALE instead of ENOENT.
func TestCreateInRemovedDirectory(t *testing.T) {
	ts, fs, ctx, e := mountWithDirX(t)
	// A negative entry in x, so that the kernel would create without
	// another LOOKUP.
	if _, err := fs.Lookup(ctx, root, e.Node, "new"); Errno(err) != syscall.ENOENT {
		t.Fatalf("lookup of a new name: %v", err)
	}
	if err := os.Remove(filepath.Join(ts.dir, "x")); err != nil {
		t.Fatal(err)
	}
	for _, op := range []struct {
		name string
		do   func() error
	}{
		{"create", func() error {
			_, _, err := fs.Create(ctx, root, e.Node, "new", syscall.O_WRONLY|syscall.O_EXCL, 0o644)
			return err
		}},
		{"mkdir", func() error { _, err := fs.Mkdir(ctx, root, e.Node, "new", 0o755); return err }},
		{"symlink", func() error { _, err := fs.Symlink(ctx, root, e.Node, "new", "t"); return err }},
		{"unlink", func() error { return fs.Unlink(ctx, root, e.Node, "old") }},
		{"rename", func() error { return fs.Rename(ctx, root, e.Node, "old", e.Node, "new") }},
	} {
		t.Run(op.name, func(t *testing.T) {
			// Back in the name cache, as after a lookup before the removal.
			d := fs.nodes.get(RootID)
			fs.nodes.mu.Lock()
			x := fs.nodes.byID[e.Node]
			x.stale = false
			fs.nodes.byFH[string(x.fh)] = x
			fs.nodes.mu.Unlock()
			fs.setName(d, "x", e.Node, fs.now(), true)
			if got := knownNode(d, "x"); got != e.Node {
				t.Fatalf("x not in the name cache: %d", got)
			}

			if err := op.do(); Errno(err) != syscall.ESTALE {
				t.Fatalf("%s in the removed directory: %v, want ESTALE", op.name, err)
			}
			// The kernel's retry looks x up again: the server must say.
			if e2, err := fs.Lookup(ctx, root, RootID, "x"); Errno(err) != syscall.ENOENT {
				t.Fatalf("lookup of the removed directory after %s: node %d, %v; want ENOENT", op.name, e2.Node, err)
			}
		})
	}
}

// knownNode returns the node name is cached as in dir (0: none or absent).
func knownNode(dir *inode, name string) NodeID {
	dir.mu.Lock()
	defer dir.mu.Unlock()
	if d := dir.names[name]; d != nil {
		return d.node
	}
	return 0
}

// holdFront forwards NFS calls to a real server; when armed, it holds the
// reply to the next call that match accepts (already answered by the
// server) until released, as a reply still on its way when the file goes.
type holdFront struct {
	port     int
	armed    atomic.Bool
	held     chan struct{} // a reply is being held
	released chan struct{}
}

func startHoldFront(t *testing.T, backend string, match func(proc uint32, args []byte) bool) *holdFront {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	up, err := rpc.Dial(ctx, backend, rpc.ClientOptions{})
	if err != nil {
		t.Fatal(err)
	}
	h := &holdFront{held: make(chan struct{}), released: make(chan struct{})}
	rs := rpc.NewServer(rpc.ServerOptions{})
	rs.Register(nfs3.Program, nfs3.Version, rpc.HandlerFunc(func(ctx context.Context, call *rpc.Call, reply []byte) ([]byte, error) {
		hold := match(call.Proc, call.Args) && h.armed.CompareAndSwap(true, false)
		var res rawRes
		if err := up.Call(ctx, nfs3.Program, nfs3.Version, call.Proc, call.Cred, rawArgs(call.Args), &res); err != nil {
			return nil, rpc.ErrSystem
		}
		if hold {
			close(h.held)
			<-h.released
		}
		return append(reply, res.b...), nil
	}))
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go rs.Serve(l)
	t.Cleanup(func() {
		rs.Close()
		up.Close()
	})
	h.port = l.Addr().(*net.TCPAddr).Port
	return h
}

// mountVia mounts ts with NFS through a front listening on nfsPort.
func mountVia(t *testing.T, ts *testServer, nfsPort int, opts string) *FS {
	t.Helper()
	o, err := ParseOptions(fmt.Sprintf("port=%d,mountport=%d,timeo=50,%s", nfsPort, port(ts.mountL.Addr()), opts))
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
	return fs
}

// removeAndSeeStale removes directory name of ts's export behind the
// client's back and has a GETATTR of node id answer STALE.
func removeAndSeeStale(t *testing.T, ctx context.Context, fs *FS, ts *testServer, name string, id NodeID) {
	t.Helper()
	if err := os.Remove(filepath.Join(ts.dir, name)); err != nil {
		t.Fatal(err)
	}
	fs.invalidateAttr(fs.nodes.get(id))
	if _, _, err := fs.GetAttr(ctx, root, id); Errno(err) != syscall.ESTALE {
		t.Fatalf("GETATTR of the removed %s: %v, want ESTALE", name, err)
	}
}

// awaitHeld waits for the front to hold a reply.
func awaitHeld(t *testing.T, h *holdFront) {
	t.Helper()
	select {
	case <-h.held:
	case <-time.After(10 * time.Second):
		t.Fatal("the call never reached the front")
	}
}

// TestLateLookupReplyOfRemovedDirectory: a LOOKUP is answered, then the
// directory it found is removed by another client and a call on its
// handle answers STALE, and only then does the LOOKUP's reply arrive. Its
// handle must not come back to life as a new node (every call on which
// would be STALE again, and the kernel, having retried once, would give the
// caller ESTALE): the client asks again and learns the name is gone.
func TestLateLookupReplyOfRemovedDirectory(t *testing.T) {
	ts := startServer(t)
	if err := os.Mkdir(filepath.Join(ts.dir, "x"), 0o755); err != nil {
		t.Fatal(err)
	}
	front := startHoldFront(t, ts.nfsL.Addr().String(), func(proc uint32, args []byte) bool {
		var a nfs3.LookupArgs
		d := xdr.NewDecoder(args)
		a.Decode(d)
		return proc == nfs3.ProcLookup && d.Err() == nil && string(a.What.Name) == "x"
	})
	fs := mountVia(t, ts, front.port, "")
	ctx := ctxT(t)
	e, err := fs.Lookup(ctx, root, RootID, "x")
	if err != nil {
		t.Fatal(err)
	}
	rootDir := fs.nodes.get(RootID)
	front.armed.Store(true)
	type result struct {
		e   Entry
		err error
	}
	late := make(chan result, 1)
	go func() {
		e, err := fs.lookupRPC(ctx, root, rootDir, "x")
		late <- result{e, err}
	}()
	awaitHeld(t, front)
	removeAndSeeStale(t, ctx, fs, ts, "x", e.Node) // the other client
	close(front.released)
	r := <-late
	if Errno(r.err) != syscall.ENOENT {
		t.Fatalf("lookup whose reply came after the STALE: node %d (known %d), %v; want ENOENT", r.e.Node, e.Node, r.err)
	}
	if e2, err := fs.Lookup(ctx, root, RootID, "x"); Errno(err) != syscall.ENOENT {
		t.Fatalf("lookup afterwards: node %d, %v; want ENOENT", e2.Node, err)
	}
}

// TestLateReaddirplusOfRemovedDirectory: the same for a READDIRPLUS whose
// reply, listing a directory the server has since called stale, arrives
// late: the entry goes to the kernel without a node, so the kernel looks
// the name up (and learns it is gone) instead of being handed the dead
// handle as a new node.
func TestLateReaddirplusOfRemovedDirectory(t *testing.T) {
	ts := startServer(t)
	if err := os.Mkdir(filepath.Join(ts.dir, "x"), 0o755); err != nil {
		t.Fatal(err)
	}
	front := startHoldFront(t, ts.nfsL.Addr().String(), func(proc uint32, args []byte) bool {
		return proc == nfs3.ProcReaddirplus
	})
	fs := mountVia(t, ts, front.port, "")
	ctx := ctxT(t)
	e, err := fs.Lookup(ctx, root, RootID, "x")
	if err != nil {
		t.Fatal(err)
	}
	dh, err := fs.OpenDir(ctx, root, RootID)
	if err != nil {
		t.Fatal(err)
	}
	defer fs.ReleaseDir(dh)
	front.armed.Store(true)
	listed := make(chan Entry, 1)
	failed := make(chan error, 1)
	go func() {
		var x Entry
		err := fs.ReadDir(ctx, root, dh, 0, true, func(de *DirEntry) bool {
			if de.Name == "x" {
				x = de.Entry
			}
			return true
		})
		if err != nil {
			failed <- err
			return
		}
		listed <- x
	}()
	awaitHeld(t, front)
	removeAndSeeStale(t, ctx, fs, ts, "x", e.Node)
	close(front.released)
	select {
	case err := <-failed:
		t.Fatalf("readdirplus: %v", err)
	case x := <-listed:
		if x.Node != 0 {
			t.Errorf("x listed with node %d (the removed one is %d): a dead handle handed out as a new node", x.Node, e.Node)
		}
	}
	if e2, err := fs.Lookup(ctx, root, RootID, "x"); Errno(err) != syscall.ENOENT {
		t.Fatalf("lookup afterwards: node %d, %v; want ENOENT", e2.Node, err)
	}
}

// TestJoinedLookupOfRemovedDirectory: a lookup joins another's LOOKUP of
// the same name, whose answer was made before another client removed the
// directory and only reaches the joiner after a call on the directory's
// handle answered STALE. The joiner must not turn that answer into a new
// node for the dead handle: it asks again, alone, and learns the name is
// gone.
func TestJoinedLookupOfRemovedDirectory(t *testing.T) {
	ts, fs, ctx, e := mountWithDirX(t)
	x := fs.nodes.get(e.Node)
	x.mu.Lock()
	old := &lookupResult{fh: x.fh, attr: proto.PostAttr{Present: true, Attr: x.attr}, at: x.attrTime}
	x.mu.Unlock()

	// The other lookup, answered before the removal, still on its way.
	rootDir := fs.nodes.get(RootID)
	key := "l" + strconv.FormatUint(uint64(rootDir.id), 10) + "/x"
	started, release := make(chan struct{}), make(chan struct{})
	go fs.inflight.do(key, false, func() (any, error) {
		close(started)
		<-release
		return old, nil
	})
	<-started
	type result struct {
		e   Entry
		err error
	}
	joined := make(chan result, 1)
	go func() {
		e, err := fs.lookupRPC(ctx, root, rootDir, "x")
		joined <- result{e, err}
	}()
	time.Sleep(100 * time.Millisecond)
	select {
	case r := <-joined:
		t.Fatalf("the lookup did not wait for the call in flight: %+v", r)
	default: // waiting for it
	}
	removeAndSeeStale(t, ctx, fs, ts, "x", e.Node)
	close(release)
	r := <-joined
	if Errno(r.err) != syscall.ENOENT {
		t.Fatalf("joined lookup answered before the removal: node %d (the removed one %d), %v; want ENOENT", r.e.Node, e.Node, r.err)
	}
}

// mountWithDirX starts a server whose export holds a directory x, mounts
// it and looks x up.
func mountWithDirX(t *testing.T) (*testServer, *FS, context.Context, Entry) {
	t.Helper()
	ts := startServer(t)
	if err := os.Mkdir(filepath.Join(ts.dir, "x"), 0o755); err != nil {
		t.Fatal(err)
	}
	fs := ts.mount(t, "")
	ctx := ctxT(t)
	e, err := fs.Lookup(ctx, root, RootID, "x")
	if err != nil {
		t.Fatal(err)
	}
	return ts, fs, ctx, e
}

// TestOpenJoinsNoEarlierGetattr: close-to-open needs attributes from a
// GETATTR sent after the open began. One already on its way (a stat that
// ran before another client's change) must not answer the open.
func TestOpenJoinsNoEarlierGetattr(t *testing.T) {
	ts := startServer(t)
	path := filepath.Join(ts.dir, "f")
	if err := os.WriteFile(path, []byte("old"), 0o644); err != nil {
		t.Fatal(err)
	}
	fs := ts.mount(t, "")
	ctx := ctxT(t)
	e, err := fs.Lookup(ctx, root, RootID, "f")
	if err != nil {
		t.Fatal(err)
	}
	n := fs.nodes.get(e.Node)
	n.mu.Lock()
	old := n.attr
	n.mu.Unlock()

	// A GETATTR sent before the change, still on its way.
	key := "g" + strconv.FormatUint(uint64(n.id), 10)
	openSeesChangeMadeDuringFlight(t, fs, e, path, key, func() (any, error) { return &old, nil }, "a GETATTR")
}

// openSeesChangeMadeDuringFlight holds a call under key in flight (sent
// before the change), changes the file on the server's disk, then opens
// it: the open must not wait for that call, and must see the change.
// what names the held call for the failure message.
func openSeesChangeMadeDuringFlight(t *testing.T, fs *FS, e Entry, path, key string, held func() (any, error), what string) {
	t.Helper()
	ctx := ctxT(t)
	started, release := make(chan struct{}), make(chan struct{})
	defer close(release)
	go fs.inflight.do(key, false, func() (any, error) {
		close(started)
		<-release
		return held()
	})
	<-started
	if err := os.WriteFile(path, []byte("changed by another client"), 0o644); err != nil {
		t.Fatal(err)
	}
	opened := make(chan error, 1)
	go func() {
		fh, _, err := fs.Open(ctx, root, e.Node, syscall.O_RDONLY)
		if err == nil {
			fs.Release(ctx, fh)
		}
		opened <- err
	}()
	select {
	case err := <-opened:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(5 * time.Second):
		t.Fatalf("the open waited for %s sent before it began", what)
	}
	a, _, err := fs.GetAttr(ctx, root, e.Node)
	if err != nil {
		t.Fatal(err)
	}
	if a.Size != uint64(len("changed by another client")) {
		t.Fatalf("size after open %d: the open did not see the change made before it", a.Size)
	}
}
