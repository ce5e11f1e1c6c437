package client

import (
	"os"
	"path/filepath"
	"slices"
	"sync/atomic"
	"syscall"
	"testing"

	"hushfs/internal/nfs3"
)

// TestGuardedCreateRetransmittedWithoutDRC: O_EXCL is one GUARDED CREATE
// carrying the mode (no SETATTR after it). On a server without a duplicate
// request cache, a retransmission of it (its reply was lost) runs again and
// answers EEXIST for the file the first transmission made; the atime
// verifier shows the file is ours, and the create succeeds.
func TestGuardedCreateRetransmittedWithoutDRC(t *testing.T) {
	ts := startServer(t)
	var creates atomic.Int32
	// The front has no duplicate request cache: every transmission it
	// forwards is a new call to the server.
	front := hostileFront(t, ts.nfsL.Addr().String(), func(proc uint32, args, res []byte) []byte {
		if proc == nfs3.ProcCreate && creates.Add(1) == 1 {
			return nil // the reply is lost: the client sends the call again
		}
		return res
	})
	fs := ts.mountVia(t, front, "timeo=2,retrans=10")
	ctx := ctxT(t)
	e, fh, err := fs.Create(ctx, user, RootID, "new", syscall.O_WRONLY|syscall.O_CREAT|syscall.O_EXCL, 0o640)
	if err != nil {
		t.Fatalf("O_EXCL create whose retransmission met its own file: %v", err)
	}
	if creates.Load() != 2 {
		t.Fatalf("the server ran the CREATE %d times, want 2", creates.Load())
	}
	if e.Attr.Mode&0o7777 != 0o640 || e.Attr.UID != user.UID {
		t.Errorf("entry: mode %o uid %d", e.Attr.Mode, e.Attr.UID)
	}
	if _, err := fs.Write(ctx, user, fh, 0, []byte("mine")); err != nil {
		t.Fatal(err)
	}
	if err := fs.Flush(ctx, user, fh); err != nil {
		t.Fatal(err)
	}
	fs.Release(ctx, fh)
	s := fs.Stats().Snapshot()
	if c := s.Ops["CREATE"]; c.Ops != 1 || c.Transmissions != 2 {
		t.Errorf("CREATE: %d calls, %d transmissions; want 1 and 2", c.Ops, c.Transmissions)
	}
	if s.Count("SETATTR") != 0 || s.Count("LOOKUP") != 1 {
		t.Errorf("SETATTR %d, LOOKUP %d; want none and the one that found the file", s.Count("SETATTR"), s.Count("LOOKUP"))
	}
	fi, err := os.Stat(filepath.Join(ts.dir, "new"))
	if err != nil || fi.Mode().Perm() != 0o640 || fi.Size() != 4 {
		t.Errorf("on the server: %v %v", fi, err)
	}
}

// TestGuardedCreateOfAnothersFile: EEXIST for a file someone else made
// stands (its atime is not our verifier), and the file is left alone.
func TestGuardedCreateOfAnothersFile(t *testing.T) {
	ts := startServer(t)
	fs := ts.mount(t, "")
	ctx := ctxT(t)
	path := filepath.Join(ts.dir, "taken")
	if err := os.WriteFile(path, nil, 0o640); err != nil {
		t.Fatal(err)
	}
	if _, _, err := fs.Create(ctx, user, RootID, "taken", syscall.O_WRONLY|syscall.O_CREAT|syscall.O_EXCL, 0o600); Errno(err) != syscall.EEXIST {
		t.Fatalf("O_EXCL create of another's file: %v, want EEXIST", err)
	}
	if fi, err := os.Stat(path); err != nil || fi.Mode().Perm() != 0o640 {
		t.Errorf("the other's file: %v %v", fi, err)
	}
	// The name is known now.
	if _, err := fs.Lookup(ctx, user, RootID, "taken"); err != nil {
		t.Errorf("lookup after EEXIST: %v", err)
	}
}

// TestMadeDirectoryListing: a directory our MKDIR made answers lookups of
// absent names without a call, but is listed by the server (with "." and
// "..", which no listing of ours has).
func TestMadeDirectoryListing(t *testing.T) {
	ts := startServer(t)
	fs := ts.mount(t, "")
	ctx := ctxT(t)
	d, err := fs.Mkdir(ctx, user, RootID, "d", 0o755)
	if err != nil {
		t.Fatal(err)
	}
	_, fh, err := fs.Create(ctx, user, d.Node, "f", syscall.O_WRONLY|syscall.O_CREAT|syscall.O_EXCL, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	fs.Release(ctx, fh)
	resetCounts(ts, fs)
	if _, err := fs.Lookup(ctx, user, d.Node, "absent"); Errno(err) != syscall.ENOENT {
		t.Fatalf("lookup of an absent name: %v", err)
	}
	wantCalls(t, "lookup of an absent name", wireCalls(t, ts, fs), map[string]uint64{})
	dh, err := fs.OpenDir(ctx, user, d.Node)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	if err := fs.ReadDir(ctx, user, dh, 0, true, func(de *DirEntry) bool {
		names = append(names, de.Name)
		if de.Entry.Node != 0 {
			fs.Forget(de.Entry.Node, 1)
		}
		return true
	}); err != nil {
		t.Fatal(err)
	}
	fs.ReleaseDir(dh)
	slices.Sort(names)
	if !slices.Equal(names, []string{".", "..", "f"}) {
		t.Errorf("listing of the new directory: %q", names)
	}
	wantCalls(t, "listing", wireCalls(t, ts, fs), map[string]uint64{"READDIRPLUS": 1})
}

// TestMadeDirectoryChangedByAnother: once the directory we made shows a
// change we did not make, its names are asked of the server again.
func TestMadeDirectoryChangedByAnother(t *testing.T) {
	ts := startServer(t)
	fs := ts.mount(t, "")
	ctx := ctxT(t)
	d, err := fs.Mkdir(ctx, user, RootID, "d", 0o777)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := fs.Lookup(ctx, user, d.Node, "x"); Errno(err) != syscall.ENOENT {
		t.Fatalf("lookup before: %v", err)
	}
	if err := os.WriteFile(filepath.Join(ts.dir, "d", "x"), []byte("theirs"), 0o644); err != nil {
		t.Fatal(err)
	}
	fs.invalidateAttr(fs.nodes.get(d.Node)) // as when the attributes expire
	e, err := fs.Lookup(ctx, user, d.Node, "x")
	if err != nil || e.Attr.Size != 6 {
		t.Fatalf("lookup after another client's create: %v, %+v", err, e.Attr)
	}
}

// TestMadeDirectoryNotKeptByKernel: the kernel may keep a directory's
// contents across opens only while the core holds a listing it serves; a
// directory our MKDIR made has only its lookup listing (no "." and "..",
// no server cookies to resume from).
func TestMadeDirectoryNotKeptByKernel(t *testing.T) {
	ts := startServer(t)
	fs := ts.mount(t, "nordirplus")
	ctx := ctxT(t)
	d, err := fs.Mkdir(ctx, user, RootID, "d", 0o755)
	if err != nil {
		t.Fatal(err)
	}
	dh, err := fs.OpenDir(ctx, user, d.Node)
	if err != nil {
		t.Fatal(err)
	}
	defer fs.ReleaseDir(dh)
	if cache, keep := fs.DirCache(user, dh); !cache || keep {
		t.Errorf("opendir of a directory we made: cache %v keep %v, want the kernel to cache it and keep nothing", cache, keep)
	}
}
