package server

import (
	"bytes"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"

	"golang.org/x/sys/unix"

	"hushfs/internal/nfs3"
)

// snapshot describes every object under dir (itself included): type, mode,
// owner, size, link count, times, and content or link target, so that
// comparing two snapshots shows whether anything at all changed.
func snapshot(t testing.TB, dir string) map[string]string {
	t.Helper()
	out := make(map[string]string)
	err := filepath.Walk(dir, func(p string, fi fs.FileInfo, err error) error {
		if err != nil {
			return err
		}
		st := fi.Sys().(*syscall.Stat_t)
		desc := fmt.Sprintf("mode=%o uid=%d gid=%d size=%d nlink=%d mtime=%d.%09d ctime=%d.%09d",
			st.Mode, st.Uid, st.Gid, st.Size, st.Nlink, st.Mtim.Sec, st.Mtim.Nsec, st.Ctim.Sec, st.Ctim.Nsec)
		switch {
		case fi.Mode().IsRegular():
			b, err := os.ReadFile(p)
			if err != nil {
				return err
			}
			sum := sha256.Sum256(b)
			desc += " sha256=" + hex.EncodeToString(sum[:8])
		case fi.Mode()&fs.ModeSymlink != 0:
			target, err := os.Readlink(p)
			if err != nil {
				return err
			}
			desc += " -> " + target
		}
		rel, _ := filepath.Rel(dir, p)
		out[rel] = desc
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

func diffSnapshots(before, after map[string]string) string {
	var d []string
	for k, v := range before {
		if w, ok := after[k]; !ok {
			d = append(d, fmt.Sprintf("%s removed (was %s)", k, v))
		} else if w != v {
			d = append(d, fmt.Sprintf("%s changed: %s => %s", k, v, w))
		}
	}
	for k, v := range after {
		if _, ok := before[k]; !ok {
			d = append(d, fmt.Sprintf("%s appeared: %s", k, v))
		}
	}
	sort.Strings(d)
	return strings.Join(d, "\n")
}

// outsideDir makes a directory next to the export, outside it, holding a
// canary file, and returns both paths.
func (e *env) outsideDir() (dir, canary string) {
	e.t.Helper()
	dir = filepath.Join(filepath.Dir(e.root), "outside")
	if err := os.Mkdir(dir, 0o777); err != nil {
		e.t.Fatal(err)
	}
	os.Chmod(dir, 0o777)
	canary = filepath.Join(dir, "canary")
	if err := os.WriteFile(canary, []byte("canary: must never be served"), 0o666); err != nil {
		e.t.Fatal(err)
	}
	os.Chmod(canary, 0o666)
	return dir, canary
}

// sealedHandle returns the handle this export would issue for path, which
// need not lie in the export: what a client could present if it knew the
// secret.
func (e *env) sealedHandle(path string) nfs3.FH {
	e.t.Helper()
	kh, _, err := unix.NameToHandleAt(unix.AT_FDCWD, path, 0)
	if err != nil {
		e.t.Fatal(err)
	}
	fh, err := e.srv.codec.encode(kh.Type(), kh.Bytes())
	if err != nil {
		e.t.Fatal(err)
	}
	return fh
}

func readWant(t testing.TB, c *client, what string, fh nfs3.FH, want ...nfs3.Status) {
	t.Helper()
	r := c.read(fh, 0, 4096)
	for _, w := range want {
		if r.Status == w {
			if len(r.Data) != 0 {
				t.Fatalf("%s: READ failed with %v but returned %d bytes", what, r.Status, len(r.Data))
			}
			return
		}
	}
	t.Fatalf("%s: READ status %v (%d bytes), want one of %v", what, r.Status, len(r.Data), want)
}

// Any single bit flipped anywhere in a handle, a handle of another export of
// the same directory (another secret) and a handle sealed under a secret
// since replaced are all refused before anything is read.
func TestHandleForgery(t *testing.T) {
	e := startEnv(t, false)
	if err := os.WriteFile(filepath.Join(e.root, "f"), []byte("private data"), 0o644); err != nil {
		t.Fatal(err)
	}
	os.Mkdir(filepath.Join(e.root, "d"), 0o755)
	c := e.root0()
	root := c.rootFH()
	f := c.mustLookup(root, "f")
	d := c.mustLookup(root, "d")
	if r := c.read(f, 0, 100); r.Status != nfs3.OK || string(r.Data) != "private data" {
		t.Fatalf("READ of the genuine handle: %v", r.Status)
	}
	for _, h := range []struct {
		name string
		fh   nfs3.FH
	}{{"file", f}, {"dir", d}, {"root", root}} {
		for i := range h.fh {
			for bit := range 8 {
				bad := bytes.Clone(h.fh)
				bad[i] ^= 1 << bit
				what := fmt.Sprintf("%s handle, byte %d bit %d flipped", h.name, i, bit)
				readWant(t, c, what, bad, nfs3.ErrBadHandle)
				if _, st := c.lookup(bad, "f"); st != nfs3.ErrBadHandle {
					t.Fatalf("%s: LOOKUP %v", what, st)
				}
			}
		}
	}

	// The same directory exported with another secret: the same kernel
	// handles under another MAC.
	other := &env{t: t, root: e.root, state: filepath.Join(t.TempDir(), "state2")}
	other.start(false)
	t.Cleanup(other.stop)
	oc := other.root0()
	oroot := oc.rootFH()
	of := oc.mustLookup(oroot, "f")
	if bytes.Equal(of, f) {
		t.Fatal("two secrets sealed the same handle")
	}
	readWant(t, c, "handle of another export", of, nfs3.ErrBadHandle)
	readWant(t, oc, "handle of another export", f, nfs3.ErrBadHandle)
	if _, st := c.lookup(oroot, "f"); st != nfs3.ErrBadHandle {
		t.Fatalf("LOOKUP in another export's root handle: %v", st)
	}

	// The state file replaced: handles sealed under the old secret die.
	exported := e.srv.Root()
	e.stop()
	if err := os.Remove(filepath.Join(e.state, stateFileName(exported))); err != nil {
		t.Fatal(err)
	}
	e.start(false)
	c = e.root0()
	if nr := c.rootFH(); bytes.Equal(nr, root) {
		t.Fatal("root handle unchanged under a new secret")
	}
	readWant(t, c, "handle sealed under the old secret", f, nfs3.ErrBadHandle)
	if _, st := c.lookup(root, "f"); st != nfs3.ErrBadHandle {
		t.Fatalf("LOOKUP in the old root handle: %v", st)
	}
	if _, st := c.lookup(d, "x"); st != nfs3.ErrBadHandle {
		t.Fatalf("LOOKUP in an old dir handle: %v", st)
	}
}

// Handles are 24 bytes on ext4 (a READDIRPLUS entry's size counts), and
// the longer version 1 handles issued before are still served, and still
// sealed: a flipped bit in one is refused too.
func TestHandleVersions(t *testing.T) {
	e := startEnv(t, false)
	path := filepath.Join(e.root, "f")
	if err := os.WriteFile(path, []byte("v1 data"), 0o644); err != nil {
		t.Fatal(err)
	}
	c := e.root0()
	f := c.mustLookup(c.rootFH(), "f")
	kh, _, err := unix.NameToHandleAt(unix.AT_FDCWD, path, 0)
	if err != nil {
		t.Fatal(err)
	}
	if want := fhHeaderLen + len(kh.Bytes()) + fhMACLen; len(f) != want || f[0] != fhVersion {
		t.Fatalf("handle of %d bytes, version %d; want %d bytes (kernel handle %d), version %d", len(f), f[0], want, len(kh.Bytes()), fhVersion)
	}
	// A version 1 handle, sealed as the server sealed them then.
	v1 := []byte{fhVersion1}
	v1 = binary.BigEndian.AppendUint32(v1, e.srv.codec.exportID)
	v1 = binary.BigEndian.AppendUint32(v1, uint32(kh.Type()))
	v1 = append(v1, kh.Bytes()...)
	m := e.srv.codec.mac(v1)
	v1 = append(v1, m[:fhMACLen]...)
	if r := c.read(v1, 0, 100); r.Status != nfs3.OK || string(r.Data) != "v1 data" {
		t.Fatalf("READ with a version 1 handle: %v %q", r.Status, r.Data)
	}
	for i := range v1 {
		bad := bytes.Clone(v1)
		bad[i] ^= 0x10
		readWant(t, c, fmt.Sprintf("version 1 handle, byte %d changed", i), bad, nfs3.ErrBadHandle)
	}
}

// Even with a correct MAC (as if the secret had leaked, or the inode moved
// out after its handle was issued), an inode outside the export is refused.
func TestHandleOutsideExport(t *testing.T) {
	e := startEnv(t, false)
	outside, canary := e.outsideDir()
	before := snapshot(t, outside)
	c := e.root0()
	root := c.rootFH()

	for _, p := range []string{canary, outside, filepath.Dir(e.root)} {
		var st unix.Stat_t
		if unix.Lstat(p, &st) != nil || st.Dev != e.srv.rootDev {
			continue // another file system: refused by the device check alone
		}
		fh := e.sealedHandle(p)
		if _, st := c.getattr(fh); st != nfs3.ErrStale {
			t.Fatalf("GETATTR of sealed handle of %s: %v", p, st)
		}
		readWant(t, c, "sealed handle of "+p, fh, nfs3.ErrStale)
		if _, st := c.lookup(fh, "canary"); st != nfs3.ErrStale {
			t.Fatalf("LOOKUP in sealed handle of %s: %v", p, st)
		}
		if w := c.write(fh, 0, []byte("pwned"), nfs3.FileSync); w.Status != nfs3.ErrStale {
			t.Fatalf("WRITE to sealed handle of %s: %v", p, w.Status)
		}
		if _, st := c.create(fh, "planted", 0o644); st != nfs3.ErrStale {
			t.Fatalf("CREATE in sealed handle of %s: %v", p, st)
		}
		var rd nfs3.ReaddirRes
		c.call(nfs3.ProcReaddir, &nfs3.ReaddirArgs{Dir: fh, Count: 4096}, &rd)
		if rd.Status != nfs3.ErrStale {
			t.Fatalf("READDIR of sealed handle of %s: %v", p, rd.Status)
		}
	}

	// Inodes that were inside when their handles were issued, moved out by a
	// local process; the server restarted, so nothing is cached.
	os.MkdirAll(filepath.Join(e.root, "d", "sub"), 0o755)
	os.WriteFile(filepath.Join(e.root, "d", "sub", "f"), []byte("was inside"), 0o644)
	os.WriteFile(filepath.Join(e.root, "movedfile"), []byte("was inside"), 0o644)
	os.WriteFile(filepath.Join(e.root, "linked"), []byte("inside and outside"), 0o644)
	d := c.mustLookup(root, "d")
	sub := c.mustLookup(d, "sub")
	subf := c.mustLookup(sub, "f")
	mf := c.mustLookup(root, "movedfile")
	linked := c.mustLookup(root, "linked")
	e.stop()
	elsewhere := filepath.Join(filepath.Dir(e.root), "elsewhere")
	os.Mkdir(elsewhere, 0o755)
	if err := os.Rename(filepath.Join(e.root, "d"), filepath.Join(elsewhere, "d")); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(filepath.Join(e.root, "movedfile"), filepath.Join(elsewhere, "movedfile")); err != nil {
		t.Fatal(err)
	}
	if err := os.Link(filepath.Join(e.root, "linked"), filepath.Join(elsewhere, "linked")); err != nil {
		t.Fatal(err)
	}
	os.Stat(filepath.Join(elsewhere, "movedfile")) // the kernel knows its name now
	e.start(false)
	c = e.root0()
	for _, h := range []struct {
		name string
		fh   nfs3.FH
	}{{"moved-out dir", d}, {"dir below a moved-out dir", sub}, {"moved-out file", mf},
		{"file below a moved-out dir", subf}} {
		if _, st := c.getattr(h.fh); st != nfs3.ErrStale {
			t.Fatalf("GETATTR of %s: %v", h.name, st)
		}
	}
	if _, st := c.lookup(sub, ".."); st != nfs3.ErrStale {
		t.Fatalf("LOOKUP .. of a moved-out dir: %v", st)
	}
	readWant(t, c, "moved-out file", mf, nfs3.ErrStale)
	// A file that keeps a name inside the export is in the export.
	if r := c.read(linked, 0, 100); r.Status != nfs3.OK || string(r.Data) != "inside and outside" {
		t.Fatalf("READ of a file linked inside and outside: %v", r.Status)
	}

	// A directory moved out while its node is cached: ".." no longer leads
	// anywhere.
	os.MkdirAll(filepath.Join(e.root, "d2", "sub"), 0o755)
	d2sub := c.mustLookup(c.mustLookup(root, "d2"), "sub")
	c.mustGetattr(d2sub)
	if err := os.Rename(filepath.Join(e.root, "d2"), filepath.Join(elsewhere, "d2")); err != nil {
		t.Fatal(err)
	}
	parent, st := c.lookup(d2sub, "..")
	if st != nfs3.ErrStale {
		t.Fatalf("LOOKUP .. of a dir moved out while cached: %v (handle %x)", st, parent)
	}
	if diff := diffSnapshots(before, snapshot(t, outside)); diff != "" {
		t.Fatalf("outside directory changed:\n%s", diff)
	}
}

// ".." never leads out of the export, and "." and ".." are not names a
// client can create or remove.
func TestDotDot(t *testing.T) {
	e := startEnv(t, false)
	os.MkdirAll(filepath.Join(e.root, "a", "b"), 0o755)
	c := e.root0()
	root := c.rootFH()
	for _, name := range []string{"..", "."} {
		if got := c.mustLookup(root, name); !bytes.Equal(got, root) {
			t.Fatalf("LOOKUP %q at the root gave %x, want the root %x", name, got, root)
		}
	}
	up := root
	for range 5 {
		up = c.mustLookup(up, "..")
	}
	if !bytes.Equal(up, root) {
		t.Fatal("repeated .. left the root")
	}
	a := c.mustLookup(root, "a")
	b := c.mustLookup(a, "b")
	if got := c.mustLookup(b, ".."); !bytes.Equal(got, a) {
		t.Fatal("LOOKUP .. of a/b is not a")
	}
	if got := c.mustLookup(c.mustLookup(b, ".."), ".."); !bytes.Equal(got, root) {
		t.Fatal("LOOKUP .. of a is not the root")
	}
	// ".." needs search permission like any name.
	os.Chmod(filepath.Join(e.root, "a", "b"), 0o700)
	u := e.client(1000, 1000)
	if fh, st := u.lookup(b, ".."); st != nfs3.ErrAcces {
		t.Fatalf("LOOKUP .. of a 0700 root directory as uid 1000: %v %x", st, fh)
	}
	if got := u.mustLookup(a, ".."); !bytes.Equal(got, root) {
		t.Fatal("LOOKUP .. of a as uid 1000 is not the root")
	}
	// Names are single components.
	for _, name := range []string{"../..", "/etc", "a/../..", "a/b", "/", "../"} {
		if fh, st := c.lookup(root, name); st != nfs3.ErrInval {
			t.Fatalf("LOOKUP %q: %v %x", name, st, fh)
		}
	}
	if _, st := c.create(root, "..", 0o644); st != nfs3.ErrExist {
		t.Fatalf("CREATE ..: %v", st)
	}
	wantStatus(t, "REMOVE ..", c.remove(root, ".."), nfs3.ErrInval)
	var rr nfs3.RenameRes
	c.call(nfs3.ProcRename, &nfs3.RenameArgs{From: nfs3.DirOpArgs{Dir: a, Name: []byte("..")},
		To: nfs3.DirOpArgs{Dir: root, Name: []byte("x")}}, &rr)
	wantStatus(t, "RENAME ..", rr.Status, nfs3.ErrInval)
	// READDIRPLUS of the root gives the root's own handle for "..".
	var rp nfs3.ReaddirplusRes
	c.call(nfs3.ProcReaddirplus, &nfs3.ReaddirplusArgs{Dir: root, DirCount: 4096, MaxCount: 8192}, &rp)
	if rp.Status != nfs3.OK {
		t.Fatalf("READDIRPLUS: %v", rp.Status)
	}
	seen := false
	for _, en := range rp.Entries {
		if string(en.Name) == ".." {
			seen = true
			if en.FH.Present && !bytes.Equal(en.FH.FH, root) {
				t.Fatalf("READDIRPLUS gives .. of the root handle %x", en.FH.FH)
			}
		}
	}
	if !seen {
		t.Fatal("READDIRPLUS did not list ..")
	}
}

// Symbolic links inside the export that point outside it are objects in
// their own right: no procedure follows them.
func TestSymlinksNotFollowed(t *testing.T) {
	e := startEnv(t, false)
	outside, canary := e.outsideDir()
	os.WriteFile(filepath.Join(outside, "victim"), []byte("victim"), 0o644)
	os.Mkdir(filepath.Join(outside, "sub"), 0o777)
	rel := "../outside"
	links := map[string]string{
		"abs":     outside,
		"rel":     rel,
		"deep":    "../../../../../../../../" + strings.TrimPrefix(outside, "/"),
		"absfile": canary,
		"relfile": rel + "/canary",
	}
	for name, target := range links {
		if err := os.Symlink(target, filepath.Join(e.root, name)); err != nil {
			t.Fatal(err)
		}
	}
	before := snapshot(t, outside)
	c := e.root0()
	root := c.rootFH()
	u := e.client(1000, 1000)

	for name, target := range links {
		fh := c.mustLookup(root, name)
		if a := c.mustGetattr(fh); a.Type != nfs3.TypeLnk {
			t.Fatalf("LOOKUP %s: type %v, want a symbolic link", name, a.Type)
		}
		var rl nfs3.ReadlinkRes
		c.call(nfs3.ProcReadlink, &nfs3.ReadlinkArgs{Symlink: fh}, &rl)
		if rl.Status != nfs3.OK || string(rl.Data) != target {
			t.Fatalf("READLINK %s: %v %q", name, rl.Status, rl.Data)
		}
		// Used as a directory.
		for _, child := range []string{"canary", "victim", "sub", "."} {
			if got, st := c.lookup(fh, child); st != nfs3.ErrNotDir {
				t.Fatalf("LOOKUP %s/%s: %v %x", name, child, st, got)
			}
		}
		if _, st := c.create(fh, "planted", 0o644); st != nfs3.ErrNotDir {
			t.Fatalf("CREATE in %s: %v", name, st)
		}
		if _, st := c.mkdir(fh, "planted", 0o755); st != nfs3.ErrNotDir {
			t.Fatalf("MKDIR in %s: %v", name, st)
		}
		wantStatus(t, "REMOVE through "+name, c.remove(fh, "canary"), nfs3.ErrNotDir)
		var rr nfs3.RenameRes
		c.call(nfs3.ProcRename, &nfs3.RenameArgs{From: nfs3.DirOpArgs{Dir: fh, Name: []byte("victim")},
			To: nfs3.DirOpArgs{Dir: root, Name: []byte("stolen")}}, &rr)
		wantStatus(t, "RENAME out of "+name, rr.Status, nfs3.ErrNotDir)
		var rd nfs3.ReaddirRes
		c.call(nfs3.ProcReaddir, &nfs3.ReaddirArgs{Dir: fh, Count: 4096}, &rd)
		wantStatus(t, "READDIR of "+name, rd.Status, nfs3.ErrNotDir)
		// Used as a file.
		readWant(t, c, "READ of "+name, fh, nfs3.ErrInval)
		readWant(t, u, "READ of "+name+" as uid 1000", fh, nfs3.ErrInval)
		if w := c.write(fh, 0, []byte("pwned"), nfs3.FileSync); w.Status != nfs3.ErrInval {
			t.Fatalf("WRITE to %s: %v", name, w.Status)
		}
		var sr nfs3.SetattrRes
		c.call(nfs3.ProcSetattr, &nfs3.SetattrArgs{Obj: fh, Attr: nfs3.Sattr{SetSize: true}}, &sr)
		wantStatus(t, "truncate of "+name, sr.Status, nfs3.ErrInval)
		// Owner and times apply to the link itself (lchown, lutimes);
		// its mode cannot be changed and is left alone.
		c.call(nfs3.ProcSetattr, &nfs3.SetattrArgs{Obj: fh, Attr: nfs3.Sattr{
			SetMode: true, Mode: 0o777, SetUID: true, UID: 1234, SetGID: true, GID: 1234,
			Mtime: nfs3.SetTime{How: nfs3.SetToClientTime, Time: nfs3.Time{Seconds: 1000}},
		}}, &sr)
		wantStatus(t, "SETATTR of "+name, sr.Status, nfs3.OK)
		if st := lstat(t, filepath.Join(e.root, name)); st.Uid != 1234 || st.Mtim.Sec != 1000 {
			t.Fatalf("SETATTR of %s did not change the link itself: %+v", name, st)
		}
		var cr nfs3.CommitRes
		c.call(nfs3.ProcCommit, &nfs3.CommitArgs{File: fh}, &cr)
		wantStatus(t, "COMMIT of "+name, cr.Status, nfs3.ErrInval)
		// A hard link to it links the symbolic link, not its target.
		var lr nfs3.LinkRes
		c.call(nfs3.ProcLink, &nfs3.LinkArgs{File: fh, Link: nfs3.DirOpArgs{Dir: root, Name: []byte("hl-" + name)}}, &lr)
		wantStatus(t, "LINK to "+name, lr.Status, nfs3.OK)
		if st := lstat(t, filepath.Join(e.root, "hl-"+name)); st.Mode&unix.S_IFMT != unix.S_IFLNK {
			t.Fatalf("LINK to %s made mode %o", name, st.Mode)
		}
		// CREATE over the link's name never opens its target.
		for _, mode := range []nfs3.CreateMode{nfs3.Unchecked, nfs3.Guarded, nfs3.Exclusive} {
			var cres nfs3.CreateRes
			c.call(nfs3.ProcCreate, &nfs3.CreateArgs{Where: nfs3.DirOpArgs{Dir: root, Name: []byte(name)},
				Mode: mode, Attr: nfs3.Sattr{SetSize: true, Size: 0}}, &cres)
			wantStatus(t, fmt.Sprintf("CREATE %v over %s", mode, name), cres.Status, nfs3.ErrExist)
		}
		if _, st := c.mkdir(root, name, 0o755); st != nfs3.ErrExist {
			t.Fatalf("MKDIR over %s: %v", name, st)
		}
	}
	// RENAME onto a link's name replaces the link; RENAME of a link moves
	// the link; REMOVE removes the link.
	c.mustCreate(root, "newfile", 0o644)
	var rr nfs3.RenameRes
	c.call(nfs3.ProcRename, &nfs3.RenameArgs{From: nfs3.DirOpArgs{Dir: root, Name: []byte("newfile")},
		To: nfs3.DirOpArgs{Dir: root, Name: []byte("absfile")}}, &rr)
	wantStatus(t, "RENAME onto absfile", rr.Status, nfs3.OK)
	if st := lstat(t, filepath.Join(e.root, "absfile")); st.Mode&unix.S_IFMT != unix.S_IFREG {
		t.Fatal("RENAME onto a link did not replace the link")
	}
	c.call(nfs3.ProcRename, &nfs3.RenameArgs{From: nfs3.DirOpArgs{Dir: root, Name: []byte("abs")},
		To: nfs3.DirOpArgs{Dir: root, Name: []byte("abs2")}}, &rr)
	wantStatus(t, "RENAME of abs", rr.Status, nfs3.OK)
	for _, name := range []string{"abs2", "rel", "deep", "relfile"} {
		wantStatus(t, "REMOVE "+name, c.remove(root, name), nfs3.OK)
	}
	var rm nfs3.RemoveRes
	c.call(nfs3.ProcRmdir, &nfs3.RmdirArgs{Obj: nfs3.DirOpArgs{Dir: root, Name: []byte("hl-abs")}}, &rm)
	wantStatus(t, "RMDIR of a link to a directory", rm.Status, nfs3.ErrNotDir)

	if diff := diffSnapshots(before, snapshot(t, outside)); diff != "" {
		t.Fatalf("outside directory changed:\n%s", diff)
	}
}

// A local process keeps swapping a directory of the export with a symbolic
// link to a directory outside it while clients work in that directory, by
// name and by handle. Nothing outside is ever created, read or written.
func TestRenameRaceStaysInside(t *testing.T) {
	// Async: the property holds either way, and syncing each of the
	// thousands of directory changes would only slow the race down.
	e := startEnvTuned(t, false, func(c *Config) { c.Async = true })
	outside, canary := e.outsideDir()
	canaryData, _ := os.ReadFile(canary)
	before := snapshot(t, outside)
	d := filepath.Join(e.root, "d")
	if err := os.Mkdir(d, 0o777); err != nil {
		t.Fatal(err)
	}
	os.Chmod(d, 0o777)
	link := filepath.Join(e.root, "link")
	// Relative: an absolute link is also stopped by the refusal to cross
	// mounts, a relative one only by not following links at all.
	if err := os.Symlink("../outside", link); err != nil {
		t.Fatal(err)
	}
	away := filepath.Join(e.root, "away")
	root := e.root0().rootFH()
	dirFH := e.root0().mustLookup(root, "d")

	var swapped atomic.Int64
	stop := make(chan struct{})
	var swaps sync.WaitGroup
	var stopOnce sync.Once
	halt := func() {
		stopOnce.Do(func() { close(stop) })
		swaps.Wait()
	}
	t.Cleanup(halt) // also when the test fails early
	swaps.Add(1)
	var swapErr error
	go func() {
		defer swaps.Done()
		for i := 0; ; i++ {
			select {
			case <-stop:
				return
			default:
			}
			var err error
			if i%2 == 0 {
				// Atomically trade places: "d" is the link, "link" the
				// directory; the next even round trades them back.
				err = unix.Renameat2(unix.AT_FDCWD, d, unix.AT_FDCWD, link, unix.RENAME_EXCHANGE)
			} else {
				// The directory steps aside, the link takes its name,
				// and both go back.
				for _, mv := range [][2]string{{d, away}, {link, d}, {d, link}, {away, d}} {
					if err = os.Rename(mv[0], mv[1]); err != nil {
						break
					}
				}
			}
			if err != nil {
				swapErr = err
				return
			}
			swapped.Add(1)
		}
	}()

	const iterations = 300
	var workers sync.WaitGroup
	var mu sync.Mutex
	var leaks []string               // escapes, or failures of operations that must work
	var sawDir, sawLink atomic.Int64 // what LOOKUP of "d" found
	for w := range 3 {
		workers.Add(1)
		go func() {
			defer workers.Done()
			c := e.client(uint32(1000+w), 1000)
			if w == 0 {
				c = e.root0()
			}
			leak := func(f string, a ...any) {
				mu.Lock()
				leaks = append(leaks, fmt.Sprintf(f, a...))
				mu.Unlock()
			}
			for i := range iterations {
				// By name: whatever "d" is at this instant.
				var lr nfs3.LookupRes
				c.call(nfs3.ProcLookup, &nfs3.LookupArgs{What: nfs3.DirOpArgs{Dir: root, Name: []byte("d")}}, &lr)
				dirs := []nfs3.FH{dirFH}
				if lr.Status == nfs3.OK {
					dirs = append(dirs, lr.Obj)
					switch {
					case !lr.ObjAttr.Present:
					case lr.ObjAttr.Attr.Type == nfs3.TypeDir:
						sawDir.Add(1)
					case lr.ObjAttr.Attr.Type == nfs3.TypeLnk:
						sawLink.Add(1)
					}
				}
				for k, dir := range dirs {
					name := fmt.Sprintf("w%d-%d-%d", w, i, k)
					var cr nfs3.CreateRes
					c.call(nfs3.ProcCreate, &nfs3.CreateArgs{Where: nfs3.DirOpArgs{Dir: dir, Name: []byte(name)},
						Mode: nfs3.Unchecked, Attr: nfs3.Sattr{SetMode: true, Mode: 0o666}}, &cr)
					if cr.Status == nfs3.OK {
						if wr := c.write(cr.Obj.FH, 0, []byte("inside"), nfs3.Unstable); wr.Status != nfs3.OK {
							leak("WRITE to new file %s: %v", name, wr.Status)
						}
						if fh, st := c.lookup(dir, name); st != nfs3.OK || !bytes.Equal(fh, cr.Obj.FH) {
							leak("LOOKUP of new file %s: %v", name, st)
						}
						if st := c.remove(dir, name); st != nfs3.OK {
							leak("REMOVE of new file %s: %v", name, st)
						}
					}
					// The canary's name, in whatever "d" is.
					if fh, st := c.lookup(dir, "canary"); st == nfs3.OK {
						leak("LOOKUP of canary through %x succeeded", dir)
						if r := c.read(fh, 0, 100); len(r.Data) > 0 {
							leak("canary read: %q", r.Data)
						}
						c.write(fh, 0, []byte("pwned"), nfs3.FileSync)
					}
					if st := c.remove(dir, "canary"); st == nfs3.OK {
						leak("REMOVE of canary through %x succeeded", dir)
					}
				}
			}
		}()
	}
	workers.Wait()
	halt()
	if swapErr != nil {
		t.Fatalf("swapping: %v", swapErr)
	}
	if len(leaks) > 0 {
		t.Fatalf("%d escapes, first: %s", len(leaks), leaks[0])
	}
	if diff := diffSnapshots(before, snapshot(t, outside)); diff != "" {
		t.Fatalf("outside directory changed:\n%s", diff)
	}
	if got, _ := os.ReadFile(canary); !bytes.Equal(got, canaryData) {
		t.Fatalf("canary changed: %q", got)
	}
	// The race must really have been run: "d" seen as both.
	t.Logf("%d swaps; LOOKUP of d found the directory %d times, the link %d times", swapped.Load(), sawDir.Load(), sawLink.Load())
	if swapped.Load() < 10 || sawDir.Load() == 0 || sawLink.Load() == 0 {
		t.Fatal("the swapping did not overlap the clients' work")
	}
	// Every file made went into the directory, and was removed again.
	dir := d
	if fi, err := os.Lstat(d); err != nil || !fi.IsDir() {
		dir = link // swapped an odd number of times
	}
	ents, err := os.ReadDir(dir)
	if err != nil || len(ents) != 0 {
		t.Fatalf("directory after the race: %v, %d entries", err, len(ents))
	}
}
