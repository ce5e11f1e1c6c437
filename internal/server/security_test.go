package server

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"hushfs/internal/nfs3"
	"hushfs/internal/rpc"
	"hushfs/internal/xdr"
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

// Every modifying procedure on a read-only export answers NFS3ERR_ROFS and
// changes nothing at all, for root and for an ordinary user.
func TestReadOnlyChangesNothing(t *testing.T) {
	e := startEnv(t, true)
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	must(os.WriteFile(filepath.Join(e.root, "f"), []byte("content"), 0o666))
	must(os.Chmod(filepath.Join(e.root, "f"), 0o666))
	must(os.Mkdir(filepath.Join(e.root, "d"), 0o777))
	must(os.Chmod(filepath.Join(e.root, "d"), 0o777))
	must(os.Mkdir(filepath.Join(e.root, "empty"), 0o777))
	must(os.WriteFile(filepath.Join(e.root, "d", "g"), []byte("g"), 0o644))
	must(os.Symlink("f", filepath.Join(e.root, "sl")))
	must(os.Chmod(e.root, 0o777))
	before := snapshot(t, e.root)

	for _, who := range []struct {
		name string
		c    *client
	}{{"root", e.root0()}, {"uid 1000", e.client(1000, 1000)}} {
		c := who.c
		root := c.rootFH()
		f := c.mustLookup(root, "f")
		d := c.mustLookup(root, "d")
		sl := c.mustLookup(root, "sl")
		at := func(dir nfs3.FH, name string) nfs3.DirOpArgs { return nfs3.DirOpArgs{Dir: dir, Name: []byte(name)} }
		cases := []struct {
			proc  string
			call  func() nfs3.Status
			valid bool
		}{}
		add := func(proc string, fn func() nfs3.Status) {
			cases = append(cases, struct {
				proc  string
				call  func() nfs3.Status
				valid bool
			}{proc, fn, true})
		}
		for _, sa := range []nfs3.Sattr{
			{SetMode: true, Mode: 0o600},
			{SetSize: true, Size: 0},
			{SetSize: true, Size: 1 << 20},
			{SetUID: true, UID: 1000, SetGID: true, GID: 1000},
			{Atime: nfs3.SetTime{How: nfs3.SetToServerTime}, Mtime: nfs3.SetTime{How: nfs3.SetToServerTime}},
		} {
			for _, obj := range []nfs3.FH{f, d, sl, root} {
				add("SETATTR", func() nfs3.Status {
					var r nfs3.SetattrRes
					c.call(nfs3.ProcSetattr, &nfs3.SetattrArgs{Obj: obj, Attr: sa}, &r)
					return r.Status
				})
			}
		}
		for _, stable := range []nfs3.StableHow{nfs3.Unstable, nfs3.DataSync, nfs3.FileSync} {
			add("WRITE", func() nfs3.Status { return c.write(f, 0, []byte("XXXXXXXXXXXX"), stable).Status })
			add("WRITE", func() nfs3.Status { return c.write(f, 1<<30, []byte("x"), stable).Status })
		}
		for _, name := range []string{"new", "f", "d"} {
			for _, mode := range []nfs3.CreateMode{nfs3.Unchecked, nfs3.Guarded, nfs3.Exclusive} {
				add("CREATE", func() nfs3.Status {
					var r nfs3.CreateRes
					c.call(nfs3.ProcCreate, &nfs3.CreateArgs{Where: at(root, name), Mode: mode,
						Attr: nfs3.Sattr{SetSize: true, Size: 0}}, &r)
					return r.Status
				})
			}
			add("MKDIR", func() nfs3.Status {
				var r nfs3.MkdirRes
				c.call(nfs3.ProcMkdir, &nfs3.MkdirArgs{Where: at(root, name)}, &r)
				return r.Status
			})
			add("SYMLINK", func() nfs3.Status {
				var r nfs3.SymlinkRes
				c.call(nfs3.ProcSymlink, &nfs3.SymlinkArgs{Where: at(root, name), Data: []byte("target")}, &r)
				return r.Status
			})
			for _, typ := range []nfs3.Ftype{nfs3.TypeFifo, nfs3.TypeSock, nfs3.TypeChr} {
				add("MKNOD", func() nfs3.Status {
					var r nfs3.MknodRes
					c.call(nfs3.ProcMknod, &nfs3.MknodArgs{Where: at(d, name), Type: typ, Spec: nfs3.SpecData{Major: 1, Minor: 3}}, &r)
					return r.Status
				})
			}
			add("LINK", func() nfs3.Status {
				var r nfs3.LinkRes
				c.call(nfs3.ProcLink, &nfs3.LinkArgs{File: f, Link: at(d, name)}, &r)
				return r.Status
			})
		}
		for _, name := range []string{"f", "sl", "d", "empty", "missing"} {
			add("REMOVE", func() nfs3.Status { return c.remove(root, name) })
			add("RMDIR", func() nfs3.Status {
				var r nfs3.RemoveRes
				c.call(nfs3.ProcRmdir, &nfs3.RmdirArgs{Obj: at(root, name)}, &r)
				return r.Status
			})
			for _, to := range []nfs3.DirOpArgs{at(root, "renamed"), at(d, name), at(root, "f")} {
				add("RENAME", func() nfs3.Status {
					var r nfs3.RenameRes
					c.call(nfs3.ProcRename, &nfs3.RenameArgs{From: at(root, name), To: to}, &r)
					return r.Status
				})
			}
		}
		seen := map[string]bool{}
		for i, tc := range cases {
			seen[tc.proc] = true
			if st := tc.call(); st != nfs3.ErrROFS {
				t.Fatalf("%s: case %d (%s): %v, want NFS3ERR_ROFS", who.name, i, tc.proc, st)
			}
		}
		for _, p := range []string{"SETATTR", "WRITE", "CREATE", "MKDIR", "SYMLINK", "MKNOD", "REMOVE", "RMDIR", "RENAME", "LINK"} {
			if !seen[p] {
				t.Fatalf("no case for %s", p)
			}
		}
		// COMMIT changes nothing and is fine; reading works.
		var cr nfs3.CommitRes
		c.call(nfs3.ProcCommit, &nfs3.CommitArgs{File: f}, &cr)
		wantStatus(t, "COMMIT", cr.Status, nfs3.OK)
		if r := c.read(f, 0, 100); r.Status != nfs3.OK || string(r.Data) != "content" {
			t.Fatalf("READ: %v %q", r.Status, r.Data)
		}
		for _, fh := range []nfs3.FH{root, f, d} {
			if got, st := c.access(fh, allAccess); st != nfs3.OK || got&(nfs3.AccessModify|nfs3.AccessExtend|nfs3.AccessDelete) != 0 {
				t.Fatalf("ACCESS grants changes on a read-only export: %v %#x", st, got)
			}
		}
	}
	after := snapshot(t, e.root)
	// READ may update the access time; nothing else may change.
	if diff := diffSnapshots(before, after); diff != "" {
		t.Fatalf("read-only export changed:\n%s", diff)
	}
}

// squashEnv exports a directory holding a 0600 file of uid 1000, a file
// readable only by group 0, and a world-writable directory.
func squashEnv(t *testing.T, tune func(*Config)) *env {
	e := startEnvTuned(t, false, tune)
	priv := filepath.Join(e.root, "private")
	if err := os.WriteFile(priv, []byte("uid 1000's"), 0o600); err != nil {
		t.Fatal(err)
	}
	os.Chown(priv, 1000, 1000)
	g0 := filepath.Join(e.root, "group0")
	os.WriteFile(g0, []byte("group 0's"), 0o040)
	os.Chmod(g0, 0o040)
	pub := filepath.Join(e.root, "pub")
	os.Mkdir(pub, 0o777)
	os.Chmod(pub, 0o777)
	return e
}

// createdBy creates a file and a directory in pub and returns their owners.
func createdBy(t *testing.T, e *env, c *client, name string) (uid, gid uint32) {
	t.Helper()
	pub := c.mustLookup(c.rootFH(), "pub")
	c.mustCreate(pub, name, 0o644)
	c.mustMkdir(pub, name+".d", 0o755)
	st := lstat(t, filepath.Join(e.root, "pub", name))
	dst := lstat(t, filepath.Join(e.root, "pub", name+".d"))
	if st.Uid != dst.Uid || st.Gid != dst.Gid {
		t.Fatalf("file owned by %d:%d, directory by %d:%d", st.Uid, st.Gid, dst.Uid, dst.Gid)
	}
	return st.Uid, st.Gid
}

func TestRootSquash(t *testing.T) {
	// The zero Config squashes root.
	e := squashEnv(t, func(c *Config) { c.Squash = Config{}.Squash })
	rc := e.root0()
	root := rc.rootFH()
	priv := rc.mustLookup(root, "private")
	readWant(t, rc, "root reading uid 1000's 0600 file", priv, nfs3.ErrAcces)
	if got, st := rc.access(priv, allAccess); st != nfs3.OK || got != 0 {
		t.Fatalf("ACCESS of uid 1000's 0600 file as squashed root: %v %#x", st, got)
	}
	if w := rc.write(priv, 0, []byte("x"), nfs3.FileSync); w.Status != nfs3.ErrAcces {
		t.Fatalf("WRITE as squashed root: %v", w.Status)
	}
	var sr nfs3.SetattrRes
	rc.call(nfs3.ProcSetattr, &nfs3.SetattrArgs{Obj: priv, Attr: nfs3.Sattr{SetUID: true, UID: 0}}, &sr)
	wantStatus(t, "chown as squashed root", sr.Status, nfs3.ErrPerm)
	rc.call(nfs3.ProcSetattr, &nfs3.SetattrArgs{Obj: priv, Attr: nfs3.Sattr{SetSize: true}}, &sr)
	wantStatus(t, "truncate as squashed root", sr.Status, nfs3.ErrAcces)
	if _, st := rc.create(root, "x", 0o644); st != nfs3.ErrAcces {
		t.Fatalf("CREATE in the root-owned 0755 export root as squashed root: %v", st)
	}
	var mr nfs3.MknodRes
	rc.call(nfs3.ProcMknod, &nfs3.MknodArgs{Where: nfs3.DirOpArgs{Dir: rc.mustLookup(root, "pub"), Name: []byte("null")},
		Type: nfs3.TypeChr, Spec: nfs3.SpecData{Major: 1, Minor: 3}}, &mr)
	wantStatus(t, "MKNOD of a device as squashed root", mr.Status, nfs3.ErrPerm)
	if uid, gid := createdBy(t, e, rc, "byroot"); uid != DefaultAnonID || gid != DefaultAnonID {
		t.Fatalf("file created by squashed root owned by %d:%d", uid, gid)
	}
	// Root with another group keeps that group.
	if uid, gid := createdBy(t, e, e.client(0, 50), "byroot50"); uid != DefaultAnonID || gid != 50 {
		t.Fatalf("file created by squashed root, gid 50, owned by %d:%d", uid, gid)
	}
	// Group 0, as primary or auxiliary group, is squashed too.
	g0 := rc.mustLookup(root, "group0")
	readWant(t, e.client(1000, 0), "group0 file as gid 0", g0, nfs3.ErrAcces)
	readWant(t, e.client(1000, 1000, 0), "group0 file with auxiliary group 0", g0, nfs3.ErrAcces)
	// Other users are untouched.
	if r := e.client(1000, 1000).read(priv, 0, 100); r.Status != nfs3.OK || string(r.Data) != "uid 1000's" {
		t.Fatalf("uid 1000 reading its file: %v", r.Status)
	}
	if uid, gid := createdBy(t, e, e.client(1000, 1000), "by1000"); uid != 1000 || gid != 1000 {
		t.Fatalf("file created by uid 1000 owned by %d:%d", uid, gid)
	}
	// AUTH_NONE is anonymous.
	if uid, gid := createdBy(t, e, e.clientCred(rpc.NoAuth), "bynone"); uid != DefaultAnonID || gid != DefaultAnonID {
		t.Fatalf("file created with AUTH_NONE owned by %d:%d", uid, gid)
	}
}

func TestNoRootSquash(t *testing.T) {
	e := squashEnv(t, func(c *Config) { c.Squash = NoRootSquash })
	rc := e.root0()
	root := rc.rootFH()
	priv := rc.mustLookup(root, "private")
	if r := rc.read(priv, 0, 100); r.Status != nfs3.OK || string(r.Data) != "uid 1000's" {
		t.Fatalf("root reading uid 1000's 0600 file: %v", r.Status)
	}
	if uid, gid := createdBy(t, e, rc, "byroot"); uid != 0 || gid != 0 {
		t.Fatalf("file created by root owned by %d:%d", uid, gid)
	}
	var sr nfs3.SetattrRes
	rc.call(nfs3.ProcSetattr, &nfs3.SetattrArgs{Obj: priv, Attr: nfs3.Sattr{SetUID: true, UID: 4242}}, &sr)
	wantStatus(t, "chown as root", sr.Status, nfs3.OK)
	g0 := rc.mustLookup(root, "group0")
	for _, c := range []*client{e.client(1000, 0), e.client(1000, 1000, 0)} {
		if r := c.read(g0, 0, 100); r.Status != nfs3.OK || string(r.Data) != "group 0's" {
			t.Fatalf("group 0 member reading the group0 file: %v", r.Status)
		}
	}
	// AUTH_NONE is still anonymous.
	if uid, gid := createdBy(t, e, e.clientCred(rpc.NoAuth), "bynone"); uid != DefaultAnonID || gid != DefaultAnonID {
		t.Fatalf("file created with AUTH_NONE owned by %d:%d", uid, gid)
	}
}

func TestAllSquash(t *testing.T) {
	e := squashEnv(t, func(c *Config) { c.Squash = AllSquash; c.AnonUID, c.AnonGID = 4000, 4001 })
	u := e.client(1000, 1000)
	root := u.rootFH()
	priv := u.mustLookup(root, "private")
	readWant(t, u, "uid 1000 reading its own 0600 file under all_squash", priv, nfs3.ErrAcces)
	for i, c := range []*client{u, e.root0(), e.client(5, 5, 1000, 0), e.clientCred(rpc.NoAuth)} {
		if uid, gid := createdBy(t, e, c, fmt.Sprint("by", i)); uid != 4000 || gid != 4001 {
			t.Fatalf("client %d: file owned by %d:%d, want 4000:4001", i, uid, gid)
		}
	}
	// The anonymous identity has no auxiliary groups.
	readWant(t, e.client(1000, 1000, 0), "group0 file under all_squash", u.mustLookup(root, "group0"), nfs3.ErrAcces)
}

func TestIdentityOf(t *testing.T) {
	sys := func(uid, gid uint32, gids ...uint32) rpc.OpaqueAuth { return rpc.SysCred(uid, gid, gids, "m") }
	cases := []struct {
		squash Squash
		cred   rpc.OpaqueAuth
		want   identity
	}{
		{RootSquash, sys(0, 0, 0, 5), identity{7, 8, []uint32{8, 5}}},
		{RootSquash, sys(0, 5), identity{7, 5, nil}},
		{RootSquash, sys(5, 0, 0), identity{5, 8, []uint32{8}}},
		{RootSquash, sys(5, 6, 7), identity{5, 6, []uint32{7}}},
		{RootSquash, rpc.NoAuth, identity{7, 8, nil}},
		{RootSquash, sys(^uint32(0), 5), identity{7, 8, nil}},
		{NoRootSquash, sys(0, 0, 0, 5), identity{0, 0, []uint32{0, 5}}},
		{NoRootSquash, rpc.NoAuth, identity{7, 8, nil}},
		{NoRootSquash, sys(5, ^uint32(0)), identity{7, 8, nil}},
		{NoRootSquash, sys(5, 6, ^uint32(0), 9), identity{5, 6, []uint32{9}}},
		{AllSquash, sys(5, 6, 7), identity{7, 8, nil}},
		{AllSquash, sys(0, 0), identity{7, 8, nil}},
		{AllSquash, rpc.NoAuth, identity{7, 8, nil}},
	}
	for i, tc := range cases {
		s := &Server{squash: tc.squash, anonUID: 7, anonGID: 8}
		got := s.identityOf(&rpc.Call{Cred: tc.cred})
		if got.uid != tc.want.uid || got.gid != tc.want.gid || fmt.Sprint(got.groups) != fmt.Sprint(tc.want.groups) {
			t.Errorf("case %d (%v): %+v, want %+v", i, tc.squash, got, tc.want)
		}
	}
}

func TestAccessConfigValidation(t *testing.T) {
	good := []Config{
		{},
		{Squash: AllSquash, AnonUID: 1, AnonGID: 1},
		{Allow: []netip.Prefix{netip.MustParsePrefix("10.1.2.3/8"), netip.MustParsePrefix("::ffff:127.0.0.0/104")}},
	}
	for i, cfg := range good {
		a, err := newAccessConfig(&cfg)
		if err != nil {
			t.Fatalf("config %d: %v", i, err)
		}
		if i == 0 && (a.anonUID != DefaultAnonID || a.anonGID != DefaultAnonID || a.squash != RootSquash) {
			t.Fatalf("defaults: %+v", a)
		}
		if i == 2 && (a.allow[0] != netip.MustParsePrefix("10.0.0.0/8") || a.allow[1] != netip.MustParsePrefix("127.0.0.0/8")) {
			t.Fatalf("normalised prefixes: %v", a.allow)
		}
	}
	bad := []Config{
		{Squash: Squash(3)},
		{AnonUID: ^uint32(0)},
		{AnonGID: ^uint32(0)},
		{Allow: []netip.Prefix{{}}},
		{Allow: []netip.Prefix{netip.MustParsePrefix("::ffff:0.0.0.0/64")}},
	}
	for i, cfg := range bad {
		if _, err := newAccessConfig(&cfg); err == nil {
			t.Errorf("bad config %d accepted", i)
		}
	}
}

// callHandler runs one call through a handler as if it came from peer
// (nil: no connection information).
func callHandler(t *testing.T, h rpc.Handler, prog, proc uint32, peer net.Addr, args rpc.Marshaler) ([]byte, error) {
	t.Helper()
	call := &rpc.Call{Prog: prog, Proc: proc, Cred: rpc.SysCred(0, 0, nil, "t")}
	if prog == nfs3.Program {
		call.Vers = nfs3.Version
	} else {
		call.Vers = nfs3.MountVersion
	}
	if args != nil {
		call.Args = args.Append(nil)
	}
	if peer != nil {
		call.Conn = &rpc.ConnInfo{RemoteAddr: peer}
	}
	return h.ServeRPC(context.Background(), call, nil)
}

func isTooWeak(err error) bool {
	var de *rpc.DeniedError
	return errors.As(err, &de) && de.RejectStat == rpc.AuthError && de.Auth == rpc.AuthTooWeak
}

// admission checks one peer against a server's MNT and NFS handlers.
func admission(t *testing.T, s *Server, peer net.Addr) (mnt nfs3.MountStat, nfsOK bool) {
	t.Helper()
	out, err := callHandler(t, mountHandler{s}, nfs3.MountProgram, nfs3.MountProcMnt, peer, &nfs3.MntArgs{Path: []byte("/")})
	if err != nil {
		t.Fatalf("MNT from %v: %v", peer, err)
	}
	var mr nfs3.MntRes
	var d xdr.Decoder
	d.Reset(out)
	mr.Decode(&d)
	if d.Err() != nil {
		t.Fatalf("MNT reply: %v", d.Err())
	}
	for i, proc := range []uint32{nfs3.ProcNull, nfs3.ProcGetattr, nfs3.ProcLookup, nfs3.ProcRead} {
		var args rpc.Marshaler
		switch proc {
		case nfs3.ProcGetattr:
			args = &nfs3.GetattrArgs{Obj: s.RootHandle()}
		case nfs3.ProcLookup:
			args = &nfs3.LookupArgs{What: nfs3.DirOpArgs{Dir: s.RootHandle(), Name: []byte("f")}}
		case nfs3.ProcRead:
			args = &nfs3.ReadArgs{File: s.RootHandle(), Count: 10}
		}
		out, err := callHandler(t, nfsHandler{s}, nfs3.Program, proc, peer, args)
		ok := err == nil
		switch {
		case !ok && !isTooWeak(err):
			t.Fatalf("%s from %v: %v", nfs3.ProcName(proc), peer, err)
		case ok && proc != nfs3.ProcNull && len(out) == 0:
			t.Fatalf("%s from %v: empty reply", nfs3.ProcName(proc), peer)
		case i == 0:
			nfsOK = ok
		case ok != nfsOK:
			t.Fatalf("%s from %v admitted %v, NULL %v", nfs3.ProcName(proc), peer, ok, nfsOK)
		}
	}
	return mr.Status, nfsOK
}

func tcpPeer(ap string) net.Addr { return net.TCPAddrFromAddrPort(netip.MustParseAddrPort(ap)) }

func TestAllowHandlers(t *testing.T) {
	cases := []struct {
		allow []string
		peers map[string]bool
	}{
		{nil, map[string]bool{"127.0.0.1:700": true, "[::1]:40000": true, "10.9.8.7:40000": true}},
		{[]string{"127.0.0.2/32"}, map[string]bool{
			"127.0.0.1:40000": false, "127.0.0.2:40000": true, "[::ffff:127.0.0.2]:40000": true,
			"[::ffff:127.0.0.1]:40000": false, "[::1]:40000": false,
		}},
		{[]string{"127.0.0.0/8"}, map[string]bool{
			"127.0.0.1:40000": true, "127.255.0.9:1": true, "[::ffff:127.0.0.1]:40000": true,
			"[::1]:40000": false, "128.0.0.1:40000": false,
		}},
		{[]string{"::ffff:127.0.0.1/128", "::1/128", "fe80::/10"}, map[string]bool{
			"127.0.0.1:40000": true, "[::1]:40000": true, "[::2]:40000": false, "[fe80::1%lo]:40000": true,
			"127.0.0.2:40000": false,
		}},
	}
	for _, tc := range cases {
		var allow []netip.Prefix
		for _, p := range tc.allow {
			allow = append(allow, netip.MustParsePrefix(p))
		}
		e := startEnvTuned(t, false, func(c *Config) { c.Allow = allow })
		for peer, want := range tc.peers {
			mnt, nfsOK := admission(t, e.srv, tcpPeer(peer))
			wantMnt := nfs3.MntOK
			if !want {
				wantMnt = nfs3.MntErrAcces
			}
			if mnt != wantMnt || nfsOK != want {
				t.Errorf("allow %v, peer %s: MNT %v, NFS admitted %v; want admitted %v", tc.allow, peer, mnt, nfsOK, want)
			}
		}
		// Without a peer address nothing can be checked: refused when a
		// list is configured.
		mnt, nfsOK := admission(t, e.srv, nil)
		if want := len(allow) == 0; nfsOK != want || (mnt == nfs3.MntOK) != want {
			t.Errorf("allow %v, no peer address: MNT %v, NFS %v", tc.allow, mnt, nfsOK)
		}
		e.stop()
	}
}

func TestSecurePortHandlers(t *testing.T) {
	e := startEnvTuned(t, false, func(c *Config) { c.SecurePort = true })
	for peer, want := range map[string]bool{
		"127.0.0.1:1023": true, "127.0.0.1:1": true, "[::1]:111": true, "[::ffff:127.0.0.1]:900": true,
		"127.0.0.1:1024": false, "127.0.0.1:40000": false, "127.0.0.1:0": false, "[::1]:2049": false,
	} {
		mnt, nfsOK := admission(t, e.srv, tcpPeer(peer))
		if (mnt == nfs3.MntOK) != want || nfsOK != want {
			t.Errorf("secure port, peer %s: MNT %v, NFS %v; want %v", peer, mnt, nfsOK, want)
		}
	}
	// Both restrictions at once: both must hold.
	e2 := startEnvTuned(t, false, func(c *Config) {
		c.SecurePort = true
		c.Allow = []netip.Prefix{netip.MustParsePrefix("127.0.0.2/32")}
	})
	for peer, want := range map[string]bool{"127.0.0.2:800": true, "127.0.0.1:800": false, "127.0.0.2:8000": false} {
		if _, nfsOK := admission(t, e2.srv, tcpPeer(peer)); nfsOK != want {
			t.Errorf("allow+secure, peer %s: %v", peer, nfsOK)
		}
	}
}

// dialFromPort connects to addr from 127.0.0.1:port, trying ports from
// port downwards until one is free; it returns the client and the port.
func dialFromPort(t *testing.T, addr string, port, lowest int) (*rpc.Client, int) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for p := port; p >= lowest; p-- {
		d := net.Dialer{LocalAddr: &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1), Port: p}}
		nc, err := d.DialContext(ctx, "tcp", addr)
		if errors.Is(err, unix.EADDRINUSE) || errors.Is(err, unix.EADDRNOTAVAIL) {
			continue
		}
		if err != nil {
			t.Fatalf("dial from port %d: %v", p, err)
		}
		used := false
		c, err := rpc.NewClient(ctx, rpc.ClientOptions{
			Dial: func(context.Context) (net.Conn, error) {
				if used {
					return nil, errors.New("no reconnecting from a fixed port")
				}
				used = true
				return nc, nil
			},
			Timeout: 20 * time.Second, Retrans: -1,
		})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		return c, p
	}
	t.Fatalf("no free local port in %d..%d", lowest, port)
	return nil, 0
}

// Real sockets: the client's address and port as the kernel reports them.
func TestAllowAndSecurePortOverTCP(t *testing.T) {
	requireRoot(t)
	check := func(e *env, c *rpc.Client, want bool, what string) {
		t.Helper()
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		cred := rpc.SysCred(0, 0, nil, "t")
		var mr nfs3.MntRes
		if err := c.Call(ctx, nfs3.MountProgram, nfs3.MountVersion, nfs3.MountProcMnt, cred, &nfs3.MntArgs{Path: []byte("/")}, &mr); err != nil {
			t.Fatalf("%s: MNT: %v", what, err)
		}
		if (mr.Status == nfs3.MntOK) != want || (!want && mr.Status != nfs3.MntErrAcces) {
			t.Fatalf("%s: MNT %v", what, mr.Status)
		}
		err := c.Call(ctx, nfs3.Program, nfs3.Version, nfs3.ProcNull, cred, nil, nil)
		if want && err != nil || !want && !isTooWeak(err) {
			t.Fatalf("%s: NULL: %v", what, err)
		}
		var gr nfs3.GetattrRes
		err = c.Call(ctx, nfs3.Program, nfs3.Version, nfs3.ProcGetattr, cred, &nfs3.GetattrArgs{Obj: e.srv.RootHandle()}, &gr)
		switch {
		case want && (err != nil || gr.Status != nfs3.OK):
			t.Fatalf("%s: GETATTR: %v %v", what, err, gr.Status)
		case !want && !isTooWeak(err):
			t.Fatalf("%s: GETATTR: %v, want AUTH_TOOWEAK", what, err)
		}
	}
	denied := startEnvTuned(t, false, func(c *Config) { c.Allow = []netip.Prefix{netip.MustParsePrefix("127.0.0.2/32")} })
	check(denied, denied.root0().c, false, "127.0.0.1 with allow 127.0.0.2/32")
	allowed := startEnvTuned(t, false, func(c *Config) { c.Allow = []netip.Prefix{netip.MustParsePrefix("127.0.0.0/8")} })
	check(allowed, allowed.root0().c, true, "127.0.0.1 with allow 127.0.0.0/8")

	secure := startEnvTuned(t, false, func(c *Config) { c.SecurePort = true })
	check(secure, secure.root0().c, false, "ephemeral port with secure-port")
	high, hp := dialFromPort(t, secure.addr, 1100, 1024)
	check(secure, high, false, fmt.Sprintf("port %d with secure-port", hp))
	low, lp := dialFromPort(t, secure.addr, 1023, 600)
	check(secure, low, true, fmt.Sprintf("port %d with secure-port", lp))
}
