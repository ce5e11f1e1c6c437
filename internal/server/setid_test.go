package server

import (
	"os"
	"path/filepath"
	"testing"

	"golang.org/x/sys/unix"

	"hushfs/internal/nfs3"
)

// A WRITE clears set-user-ID and set-group-ID exactly as a local write by
// the same user clears them (the kernel's own rule, which changed in Linux
// 6.2 for set-group-ID without group execute), and the reply's attributes
// show the mode after it. Truncations (SETATTR size, CREATE of an existing
// file with size 0) follow the same rule.
func TestSetIDClearedAsLocally(t *testing.T) {
	e := startEnv(t, false)
	rootc := e.root0()
	root := rootc.rootFH()
	pub := filepath.Join(e.root, "pub")
	os.Mkdir(pub, 0o777)
	os.Chmod(pub, 0o777)
	pubFH := rootc.mustLookup(root, "pub")
	ref := filepath.Join(t.TempDir(), "ref")
	os.Chmod(filepath.Dir(ref), 0o777)

	// localMode is the mode a file of this mode and owner has after a
	// local write (or truncation) by id: the kernel's answer.
	localMode := func(id identity, mode, uid, gid uint32, truncate bool) uint32 {
		t.Helper()
		os.Remove(ref)
		if err := os.WriteFile(ref, nil, 0o600); err != nil {
			t.Fatal(err)
		}
		must := func(err error) {
			if err != nil {
				t.Fatal(err)
			}
		}
		must(os.Chown(ref, int(uid), int(gid)))
		must(os.Chmod(ref, os.FileMode(mode&0o777)|modeBits(mode)))
		f, err := os.OpenFile(ref, os.O_WRONLY, 0) // as root: the caller's right to write is not the point
		must(err)
		defer f.Close()
		must(e.srv.as(&id, func() error {
			if truncate {
				return unix.Ftruncate(int(f.Fd()), 0)
			}
			_, err := unix.Pwrite(int(f.Fd()), []byte("x"), 0)
			return err
		}))
		return lstat(t, ref).Mode & 0o7777
	}
	cases := []struct {
		name       string
		mode       uint32
		uid, gid   uint32
		id         identity
		keep, kill uint32 // bits that must stay, bits that must go
	}{
		{"suid", 0o4777, 0, 0, identity{uid: 1000, gid: 1000}, 0, unix.S_ISUID},
		{"sgid with group exec", 0o2777, 0, 0, identity{uid: 1000, gid: 1000}, 0, unix.S_ISGID},
		{"suid+sgid", 0o6777, 0, 0, identity{uid: 1000, gid: 1000}, 0, unix.S_ISUID | unix.S_ISGID},
		{"sgid without group exec, writer outside the group", 0o2666, 0, 4242, identity{uid: 1000, gid: 1000}, 0, 0},
		{"sgid without group exec, writer in the group", 0o2666, 0, 4242, identity{uid: 1000, gid: 1000, groups: []uint32{4242}}, unix.S_ISGID, 0},
		{"owner", 0o4755, 1000, 1000, identity{uid: 1000, gid: 1000}, 0, unix.S_ISUID},
		{"root", 0o6777, 1000, 1000, identity{}, unix.S_ISUID | unix.S_ISGID, 0},
	}
	for _, tc := range cases {
		c := e.client(tc.id.uid, tc.id.gid, tc.id.groups...)
		for _, how := range []string{"WRITE", "SETATTR size", "CREATE size 0"} {
			name := "f"
			p := filepath.Join(pub, name)
			os.Remove(p)
			if err := os.WriteFile(p, []byte("data"), 0o600); err != nil {
				t.Fatal(err)
			}
			os.Chown(p, int(tc.uid), int(tc.gid))
			if err := os.Chmod(p, os.FileMode(tc.mode&0o777)|modeBits(tc.mode)); err != nil {
				t.Fatal(err)
			}
			fh := rootc.mustLookup(pubFH, name)
			var st nfs3.Status
			var after nfs3.PostOpAttr
			switch how {
			case "WRITE":
				r := c.write(fh, 0, []byte("x"), nfs3.Unstable)
				st, after = r.Status, r.Wcc.After
			case "SETATTR size":
				var r nfs3.SetattrRes
				c.call(nfs3.ProcSetattr, &nfs3.SetattrArgs{Obj: fh, Attr: nfs3.Sattr{SetSize: true}}, &r)
				st, after = r.Status, r.Wcc.After
			case "CREATE size 0":
				var r nfs3.CreateRes
				c.call(nfs3.ProcCreate, &nfs3.CreateArgs{Where: nfs3.DirOpArgs{Dir: pubFH, Name: []byte(name)},
					Mode: nfs3.Unchecked, Attr: nfs3.Sattr{SetSize: true}}, &r)
				st, after = r.Status, r.ObjAttr
			}
			what := tc.name + ": " + how
			if st != nfs3.OK {
				t.Errorf("%s: %v", what, st)
				continue
			}
			got := lstat(t, p).Mode & 0o7777
			want := localMode(tc.id, tc.mode, tc.uid, tc.gid, how != "WRITE")
			if got != want {
				t.Errorf("%s of a %o file: mode %o, a local write leaves %o", what, tc.mode, got, want)
			}
			if got&tc.keep != tc.keep || got&tc.kill != 0 {
				t.Errorf("%s of a %o file: mode %o", what, tc.mode, got)
			}
			if !after.Present || after.Attr.Mode != got {
				t.Errorf("%s: reply's attributes %v mode %o, file %o", what, after.Present, after.Attr.Mode, got)
			}
		}
	}
}

// chown(2) clears set-id bits even to the same owner, so a SETATTR of the
// owner the file has clears them as locally; a directory keeps them.
func TestChownSameOwnerClearsSetID(t *testing.T) {
	e := startEnv(t, false)
	c := e.root0()
	root := c.rootFH()
	for _, tc := range []struct {
		name string
		mode uint32
		dir  bool
		want uint32
	}{
		{"f", 0o4755, false, 0o755},
		{"g", 0o2775, false, 0o775},
		{"d", 0o2775, true, 0o2775},
	} {
		p := filepath.Join(e.root, tc.name)
		if tc.dir {
			os.Mkdir(p, 0o755)
		} else {
			os.WriteFile(p, nil, 0o644)
		}
		os.Chmod(p, os.FileMode(tc.mode&0o777)|modeBits(tc.mode))
		fh := c.mustLookup(root, tc.name)
		var r nfs3.SetattrRes
		c.call(nfs3.ProcSetattr, &nfs3.SetattrArgs{Obj: fh, Attr: nfs3.Sattr{SetUID: true, SetGID: true}}, &r)
		wantStatus(t, "SETATTR of the same owner", r.Status, nfs3.OK)
		if got := lstat(t, p).Mode & 0o7777; got != tc.want || r.Wcc.After.Attr.Mode != got {
			t.Errorf("%o %s chowned to its owner: mode %o (reply %o), want %o", tc.mode, tc.name, got, r.Wcc.After.Attr.Mode, tc.want)
		}
	}
}

// modeBits converts the set-id and sticky bits of a mode for os.Chmod.
func modeBits(mode uint32) os.FileMode {
	var m os.FileMode
	if mode&unix.S_ISUID != 0 {
		m |= os.ModeSetuid
	}
	if mode&unix.S_ISGID != 0 {
		m |= os.ModeSetgid
	}
	if mode&unix.S_ISVTX != 0 {
		m |= os.ModeSticky
	}
	return m
}
