package client

import (
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"

	"hushfs/internal/nfs3"
	"hushfs/internal/xdr"
)

// A name longer than the server's NAME_MAX is ENAMETOOLONG, never ENOENT,
// and costs no RPC, even where the caches could answer: a directory whose
// whole listing is cached, a name cached as absent.
func TestNameTooLongFromCaches(t *testing.T) {
	ts := startServer(t)
	os.Mkdir(filepath.Join(ts.dir, "d"), 0o777)
	os.Chmod(filepath.Join(ts.dir, "d"), 0o777) // the test server squashes root
	os.WriteFile(filepath.Join(ts.dir, "d", "f"), nil, 0o666)
	fs := ts.mount(t, "")
	ctx := ctxT(t)
	if s := fs.Stats().Snapshot(); s.Total() != 0 {
		t.Fatalf("stats not reset: %v", s.Ops)
	}
	if fs.nameMax != nfs3.MaxNameLen {
		t.Fatalf("name_max %d, want the server's %d", fs.nameMax, nfs3.MaxNameLen)
	}
	d, err := fs.Lookup(ctx, root, RootID, "d")
	if err != nil {
		t.Fatal(err)
	}
	listNames(t, ctx, fs, d.Node) // the complete listing is cached now
	if _, err := fs.Lookup(ctx, root, d.Node, "absent"); Errno(err) != syscall.ENOENT {
		t.Fatalf("lookup of an absent name: %v", err)
	}
	f, err := fs.Lookup(ctx, root, d.Node, "f")
	if err != nil {
		t.Fatal(err)
	}
	before := fs.Stats().Snapshot()
	long := strings.Repeat("x", nfs3.MaxNameLen+1)
	want := func(what string, err error) {
		t.Helper()
		if Errno(err) != syscall.ENAMETOOLONG {
			t.Errorf("%s of a %d-byte name: %v, want ENAMETOOLONG", what, len(long), err)
		}
	}
	for _, name := range []string{long, strings.Repeat("y", 1024)} {
		long = name
		_, err := fs.Lookup(ctx, root, d.Node, long)
		want("lookup", err)
		_, _, err = fs.Create(ctx, root, d.Node, long, syscall.O_CREAT|syscall.O_RDWR, 0o644)
		want("create", err)
		_, _, err = fs.Create(ctx, root, d.Node, long, syscall.O_CREAT|syscall.O_EXCL|syscall.O_RDWR, 0o644)
		want("exclusive create", err)
		_, err = fs.Mkdir(ctx, root, d.Node, long, 0o755)
		want("mkdir", err)
		_, err = fs.Symlink(ctx, root, d.Node, long, "f")
		want("symlink", err)
		_, err = fs.Mknod(ctx, root, d.Node, long, syscall.S_IFIFO|0o644, 0)
		want("mknod", err)
		_, err = fs.Link(ctx, root, f.Node, d.Node, long)
		want("link", err)
		want("unlink", fs.Unlink(ctx, root, d.Node, long))
		want("rmdir", fs.Rmdir(ctx, root, d.Node, long))
		want("rename to", fs.Rename(ctx, root, d.Node, "f", d.Node, long))
		want("rename from", fs.Rename(ctx, root, d.Node, long, d.Node, "g"))
	}
	after := fs.Stats().Snapshot()
	if after.Total() != before.Total() {
		t.Errorf("over-long names cost %d RPCs, want none", after.Total()-before.Total())
	}
	if s, err := fs.StatFS(ctx, root, RootID); err != nil || s.NameLen != nfs3.MaxNameLen {
		t.Errorf("statfs: namelen %d (%v), want %d", s.NameLen, err, nfs3.MaxNameLen)
	}
}

// The limit is the server's (PATHCONF name_max, asked once at mount): a
// server that takes at most 16 bytes gets no call for a 17-byte name,
// while a 16-byte one is its to answer.
func TestNameMaxFromPathconf(t *testing.T) {
	ts := startServer(t)
	os.Mkdir(filepath.Join(ts.dir, "d"), 0o777)
	os.Chmod(filepath.Join(ts.dir, "d"), 0o777)
	var pathconfs atomic.Int32
	port := hostileFront(t, ts.nfsL.Addr().String(), func(proc uint32, args, res []byte) []byte {
		if proc != nfs3.ProcPathconf {
			return res
		}
		pathconfs.Add(1)
		var r nfs3.PathconfRes
		d := xdr.NewDecoder(res)
		r.Decode(d)
		if d.Err() != nil || r.Status != nfs3.OK {
			t.Errorf("PATHCONF: %v %v", d.Err(), r.Status)
			return res
		}
		r.NameMax = 16
		return r.Append(nil)
	})
	fs := ts.mountVia(t, port, "")
	if n := pathconfs.Load(); n != 1 {
		t.Fatalf("%d PATHCONF calls at mount, want 1", n)
	}
	ctx := ctxT(t)
	d, err := fs.Lookup(ctx, root, RootID, "d")
	if err != nil {
		t.Fatal(err)
	}
	fs.Stats().Reset()
	if _, err := fs.Mkdir(ctx, root, d.Node, strings.Repeat("a", 17), 0o755); Errno(err) != syscall.ENAMETOOLONG {
		t.Fatalf("mkdir of 17 bytes: %v, want ENAMETOOLONG", err)
	}
	if _, err := fs.Lookup(ctx, root, d.Node, strings.Repeat("a", 17)); Errno(err) != syscall.ENAMETOOLONG {
		t.Fatalf("lookup of 17 bytes: %v, want ENAMETOOLONG", err)
	}
	if n := fs.Stats().Snapshot().Total(); n != 0 {
		t.Fatalf("%d RPCs for names over name_max", n)
	}
	if _, err := fs.Mkdir(ctx, root, d.Node, strings.Repeat("a", 16), 0o755); err != nil {
		t.Fatalf("mkdir of 16 bytes: %v", err)
	}
	if s, err := fs.StatFS(ctx, root, RootID); err != nil || s.NameLen != 16 {
		t.Errorf("statfs: namelen %d (%v), want 16", s.NameLen, err)
	}
}
