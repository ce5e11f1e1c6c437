package client

import (
	"bytes"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"syscall"
	"testing"

	"golang.org/x/sys/unix"

	"hushfs/internal/nfs3"
)

// What everyday work costs per file when the client already knows the
// answers: the calls of untar, a git checkout and grep -r, as the kernel
// hands them to the core, counted per procedure on the wire (the proxy)
// and by the client.

// user is an unprivileged identity (the test server squashes root).
var user = &Cred{UID: 1000, GID: 1000}

// wireCalls returns the NFS calls the proxy saw, by procedure name, and
// checks that the client's statistics count the same.
func wireCalls(t *testing.T, ts *testServer, fs *FS) map[string]uint64 {
	t.Helper()
	got := map[string]uint64{}
	for k, n := range ts.proxy.Counts().Calls {
		if k.Prog == nfs3.Program && n > 0 {
			got[nfs3.ProcName(k.Proc)] = n
		}
	}
	stats := map[string]uint64{}
	for name, o := range fs.Stats().Snapshot().Ops {
		if isNFSKey(name) && o.Ops > 0 {
			stats[name] = o.Ops
		}
	}
	if !maps.Equal(got, stats) {
		t.Errorf("calls on the wire %v, client statistics %v", got, stats)
	}
	return got
}

func resetCounts(ts *testServer, fs *FS) {
	ts.proxy.Reset()
	fs.Stats().Reset()
}

func wantCalls(t *testing.T, what string, got, want map[string]uint64) {
	t.Helper()
	if !maps.Equal(got, want) {
		t.Errorf("%s: calls %v, want %v", what, got, want)
	}
}

// TestUntarPerFileCalls: GNU tar (as root) extracts a file as
// openat(O_WRONLY|O_CREAT|O_EXCL, 0600), write, utimensat(mtime), fchown
// to the owner it has, fchmod(0664), close, after the kernel's lookup of
// the name. In a directory this client made, that is three calls: CREATE
// (GUARDED, carrying the mode), one FILE_SYNC WRITE, and one SETATTR with
// the mode and the mtime, which waited for the data. No LOOKUP (the new
// directory's names are all ours), no COMMIT, no UNSTABLE WRITE.
func TestUntarPerFileCalls(t *testing.T) {
	ts := startServer(t)
	fs := ts.mount(t, "")
	ctx := ctxT(t)
	// (The test server squashes root: tar's owner here is a user.)
	top, err := fs.Mkdir(ctx, user, RootID, "src", 0o700)
	if err != nil {
		t.Fatal(err)
	}
	resetCounts(ts, fs)
	mtime := Timespec{Sec: 1672237593}
	const files = 20
	for i := range files {
		name := fmt.Sprintf("f%02d.c", i)
		if _, err := fs.Lookup(ctx, user, top.Node, name); Errno(err) != syscall.ENOENT {
			t.Fatalf("lookup of %s before its creation: %v, want ENOENT", name, err)
		}
		e, fh, err := fs.Create(ctx, user, top.Node, name, syscall.O_WRONLY|syscall.O_CREAT|syscall.O_EXCL, 0o600)
		if err != nil {
			t.Fatal(err)
		}
		data := bytes.Repeat([]byte{byte('a' + i)}, 3000+i)
		if _, err := fs.Write(ctx, user, fh, 0, data); err != nil {
			t.Fatal(err)
		}
		a, _, err := fs.SetAttr(ctx, user, e.Node, SetAttrIn{Mtime: SetTime{How: TimeSet, Time: mtime}})
		if err != nil || a.Mtime != mtime || a.Size != uint64(len(data)) {
			t.Fatalf("utimensat: %v, mtime %v size %d; want %v, %d", err, a.Mtime, a.Size, mtime, len(data))
		}
		if _, _, err := fs.SetAttr(ctx, user, e.Node, SetAttrIn{SetUID: true, UID: user.UID, SetGID: true, GID: user.GID}); err != nil {
			t.Fatal(err)
		}
		if a, _, err = fs.SetAttr(ctx, user, e.Node, SetAttrIn{SetMode: true, Mode: 0o664}); err != nil ||
			a.Mtime != mtime || a.Mode&0o7777 != 0o664 {
			t.Fatalf("fchmod: %v, mtime %v mode %o", err, a.Mtime, a.Mode)
		}
		if err := fs.Flush(ctx, user, fh); err != nil {
			t.Fatal(err)
		}
		fs.Release(ctx, fh)
	}
	// A subdirectory: looked up (absent), made, looked into.
	if _, err := fs.Lookup(ctx, user, top.Node, "sub"); Errno(err) != syscall.ENOENT {
		t.Fatalf("lookup of sub: %v", err)
	}
	sub, err := fs.Mkdir(ctx, user, top.Node, "sub", 0o700)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := fs.Lookup(ctx, user, sub.Node, "x.c"); Errno(err) != syscall.ENOENT {
		t.Fatalf("lookup in the new subdirectory: %v", err)
	}
	wantCalls(t, "untar", wireCalls(t, ts, fs), map[string]uint64{"CREATE": files, "WRITE": files, "SETATTR": files, "MKDIR": 1})
	if c := ts.proxy.Counts(); c.WriteStable[uint32(nfs3.FileSync)] != files || c.Commits != 0 {
		t.Errorf("WRITEs by stability %v, COMMITs %d; want %d FILE_SYNC and no COMMIT", c.WriteStable, c.Commits, files)
	}
	for i := range files {
		p := filepath.Join(ts.dir, "src", fmt.Sprintf("f%02d.c", i))
		var st unix.Stat_t
		if err := unix.Stat(p, &st); err != nil {
			t.Fatal(err)
		}
		if st.Mode&0o7777 != 0o664 || st.Mtim.Sec != mtime.Sec || st.Size != int64(3000+i) {
			t.Errorf("%s on the server: mode %o mtime %d size %d", p, st.Mode&0o7777, st.Mtim.Sec, st.Size)
		}
	}
}

// TestCheckoutPerFileCalls: git checkout writes a file as lstat (absent),
// openat(O_WRONLY|O_CREAT|O_EXCL, 0666 less the umask), write, fstat,
// close, and a directory as lstat, mkdir, then an open of its
// .gitattributes (absent). In directories it made, that is CREATE and one
// FILE_SYNC WRITE a file, MKDIR a directory.
func TestCheckoutPerFileCalls(t *testing.T) {
	ts := startServer(t)
	fs := ts.mount(t, "")
	ctx := ctxT(t)
	top, err := fs.Mkdir(ctx, root, RootID, "repo", 0o755)
	if err != nil {
		t.Fatal(err)
	}
	resetCounts(ts, fs)
	const dirs, files = 3, 10
	for d := range dirs {
		dname := fmt.Sprintf("d%d", d)
		if _, err := fs.Lookup(ctx, root, top.Node, dname); Errno(err) != syscall.ENOENT {
			t.Fatalf("lstat %s: %v", dname, err)
		}
		dir, err := fs.Mkdir(ctx, root, top.Node, dname, 0o755)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := fs.Lookup(ctx, root, dir.Node, ".gitattributes"); Errno(err) != syscall.ENOENT {
			t.Fatalf(".gitattributes: %v", err)
		}
		for i := range files {
			name := fmt.Sprintf("f%d", i)
			if _, err := fs.Lookup(ctx, root, dir.Node, name); Errno(err) != syscall.ENOENT {
				t.Fatalf("lstat %s: %v", name, err)
			}
			e, fh, err := fs.Create(ctx, root, dir.Node, name, syscall.O_WRONLY|syscall.O_CREAT|syscall.O_EXCL, 0o644)
			if err != nil {
				t.Fatal(err)
			}
			data := bytes.Repeat([]byte{byte('a' + i)}, 5000+i)
			if _, err := fs.Write(ctx, root, fh, 0, data); err != nil {
				t.Fatal(err)
			}
			if a, _, err := fs.GetAttr(ctx, root, e.Node); err != nil || a.Size != uint64(len(data)) || a.Mode&0o777 != 0o644 {
				t.Fatalf("fstat: %v size %d mode %o", err, a.Size, a.Mode)
			}
			if err := fs.Flush(ctx, root, fh); err != nil {
				t.Fatal(err)
			}
			fs.Release(ctx, fh)
			if _, _, err := fs.GetAttr(ctx, root, e.Node); err != nil {
				t.Fatal(err)
			}
		}
	}
	wantCalls(t, "checkout", wireCalls(t, ts, fs), map[string]uint64{"CREATE": dirs * files, "WRITE": dirs * files, "MKDIR": dirs})
	if c := ts.proxy.Counts(); c.WriteStable[uint32(nfs3.FileSync)] != dirs*files {
		t.Errorf("WRITEs by stability %v; want all FILE_SYNC", c.WriteStable)
	}
	for d := range dirs {
		for i := range files {
			got, err := os.ReadFile(filepath.Join(ts.dir, "repo", fmt.Sprintf("d%d", d), fmt.Sprintf("f%d", i)))
			if err != nil || !bytes.Equal(got, bytes.Repeat([]byte{byte('a' + i)}, 5000+i)) {
				t.Fatalf("d%d/f%d on the server: %d bytes, %v", d, i, len(got), err)
			}
		}
	}
}

// TestOpenOnFreshMountOneCall: the first open of a file on a fresh mount
// needs close-to-open attributes and a permission check the cache cannot
// answer; one ACCESS, whose reply carries the attributes, does both. A
// later open needs fresh attributes only: one GETATTR.
func TestOpenOnFreshMountOneCall(t *testing.T) {
	ts := startServer(t)
	const files = 10
	for i := range files {
		if err := os.WriteFile(filepath.Join(ts.dir, fmt.Sprintf("f%d", i)), []byte("data"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	fs := ts.mount(t, "")
	ctx := ctxT(t)
	var ids []NodeID
	for i := range files {
		e, err := fs.Lookup(ctx, root, RootID, fmt.Sprintf("f%d", i))
		if err != nil {
			t.Fatal(err)
		}
		ids = append(ids, e.Node)
	}
	openAll := func() {
		for _, id := range ids {
			fh, _, err := fs.Open(ctx, root, id, syscall.O_RDONLY)
			if err != nil {
				t.Fatal(err)
			}
			fs.Release(ctx, fh)
		}
	}
	resetCounts(ts, fs)
	openAll()
	wantCalls(t, "first opens", wireCalls(t, ts, fs), map[string]uint64{"ACCESS": files})
	resetCounts(ts, fs)
	openAll()
	wantCalls(t, "second opens", wireCalls(t, ts, fs), map[string]uint64{"GETATTR": files})

	// Another identity has no cached answer: ACCESS again, and it is
	// refused what the mode refuses.
	if err := os.Chmod(filepath.Join(ts.dir, "f0"), 0o600); err != nil {
		t.Fatal(err)
	}
	resetCounts(ts, fs)
	if _, _, err := fs.Open(ctx, &Cred{UID: 1000, GID: 1000}, ids[0], syscall.O_RDONLY); Errno(err) != syscall.EACCES {
		t.Fatalf("open of a 0600 root file as uid 1000: %v, want EACCES", err)
	}
	wantCalls(t, "open as another user", wireCalls(t, ts, fs), map[string]uint64{"ACCESS": 1})
}

// TestOpenJoinsNoEarlierAccess: an ACCESS already on its way when the open
// began (an access(2) that ran before another client's change) must not
// answer the open's close-to-open check.
func TestOpenJoinsNoEarlierAccess(t *testing.T) {
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
	key := fmt.Sprintf("a%d/%s", e.Node, credKey(root))
	openSeesChangeMadeDuringFlight(t, fs, e, path, key, func() (any, error) { return nil, syscall.EIO }, "an ACCESS")
}
