package client

import (
	"os"
	"path/filepath"
	"syscall"
	"testing"

	"hushfs/internal/proto"
)

// TestFailedDirOpWcc: a failed directory operation changed nothing, so it
// never vouches for the caches. The wcc data of an EEXIST showing the
// directory changed from our version is someone else's change (here: a
// retransmitted MKDIR meeting its own first transmission in the server);
// and an EEXIST or ENOENT that contradicts a cached name drops that name
// even when the directory's version shows no change (timestamps too
// coarse). In each case the next lookup asks the server and finds what is
// really there.
func TestFailedDirOpWcc(t *testing.T) {
	ts := startServer(t)
	fs := ts.mount(t, "")
	ctx := ctxT(t)
	dir := fs.nodes.get(RootID)
	errExist := proto.Error{Errno: syscall.EEXIST, Name: "NFS3ERR_EXIST"}
	version := func() proto.WccAttr {
		dir.mu.Lock()
		defer dir.mu.Unlock()
		return proto.WccAttr{Size: dir.attr.Size, Mtime: dir.attr.Mtime, Ctime: dir.attr.Ctime}
	}
	attrs := func() proto.Attr {
		dir.mu.Lock()
		defer dir.mu.Unlock()
		return dir.attr
	}
	negative := func(name string) {
		t.Helper()
		if _, err := fs.Lookup(ctx, root, RootID, name); Errno(err) != syscall.ENOENT {
			t.Fatalf("lookup %s: %v, want ENOENT", name, err)
		}
		dir.mu.Lock()
		d := dir.names[name]
		dir.mu.Unlock()
		if d == nil || d.node != 0 {
			t.Fatalf("no negative entry cached for %s", name)
		}
	}

	// EEXIST whose wcc data shows a change from the version we had.
	negative("a")
	if err := os.Mkdir(filepath.Join(ts.dir, "a"), 0o755); err != nil {
		t.Fatal(err)
	}
	before, after := version(), attrs()
	after.Mtime.Nsec = (after.Mtime.Nsec + 1) % 1e9
	after.Ctime = after.Mtime
	res := proto.CreateRes{Status: errExist, DirWcc: proto.Wcc{
		Before: proto.PreAttr{Present: true, Attr: before}, After: proto.PostAttr{Present: true, Attr: after}}}
	if _, err := fs.finishCreate(ctx, root, dir, "a", &res, fs.now()); Errno(err) != syscall.EEXIST {
		t.Fatalf("finishCreate: %v", err)
	}
	if _, err := fs.Lookup(ctx, root, RootID, "a"); err != nil {
		t.Errorf("lookup after EEXIST with a foreign change: %v", err)
	}

	// EEXIST with no change to see at all.
	negative("b")
	if err := os.Mkdir(filepath.Join(ts.dir, "b"), 0o755); err != nil {
		t.Fatal(err)
	}
	same := attrs()
	res = proto.CreateRes{Status: errExist, DirWcc: proto.Wcc{
		Before: proto.PreAttr{Present: true, Attr: version()}, After: proto.PostAttr{Present: true, Attr: same}}}
	if _, err := fs.finishCreate(ctx, root, dir, "b", &res, fs.now()); Errno(err) != syscall.EEXIST {
		t.Fatalf("finishCreate: %v", err)
	}
	if _, err := fs.Lookup(ctx, root, RootID, "b"); err != nil {
		t.Errorf("lookup after an EEXIST that contradicts the cache: %v", err)
	}

	// ENOENT from REMOVE for a name cached as present.
	if _, fh, err := fs.Create(ctx, root, RootID, "c", syscall.O_WRONLY, 0o644); err != nil {
		t.Fatal(err)
	} else {
		fs.Release(ctx, fh)
	}
	if err := os.Remove(filepath.Join(ts.dir, "c")); err != nil {
		t.Fatal(err)
	}
	w := proto.Wcc{Before: proto.PreAttr{Present: true, Attr: version()}, After: proto.PostAttr{Present: true, Attr: attrs()}}
	fs.applyDirOpWcc(dir, &w, fs.now(), proto.Error{Errno: syscall.ENOENT, Name: "NFS3ERR_NOENT"}, "c", syscall.ENOENT)
	if _, err := fs.Lookup(ctx, root, RootID, "c"); Errno(err) != syscall.ENOENT {
		t.Errorf("lookup after REMOVE said ENOENT: %v, want ENOENT", err)
	}

	// A failure that contradicts nothing keeps the cache.
	negative("d")
	w = proto.Wcc{Before: proto.PreAttr{Present: true, Attr: version()}, After: proto.PostAttr{Present: true, Attr: attrs()}}
	fs.applyDirOpWcc(dir, &w, fs.now(), proto.Error{Errno: syscall.EACCES, Name: "NFS3ERR_ACCES"}, "d", syscall.EEXIST)
	dir.mu.Lock()
	d := dir.names["d"]
	dir.mu.Unlock()
	if d == nil || d.node != 0 {
		t.Error("an EACCES with nothing changed dropped the negative entry")
	}
}
