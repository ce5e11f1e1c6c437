package server

import (
	"bytes"
	"crypto/rand"
	"os"
	"path/filepath"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"hushfs/internal/nfs3"
	"hushfs/internal/rpc"
)

func TestMountProtocol(t *testing.T) {
	e := startEnv(t, false)
	c := e.root0()
	if err := c.callErr(nfs3.MountProgram, nfs3.MountVersion, nfs3.MountProcNull, nil, nil); err != nil {
		t.Fatal(err)
	}
	if err := c.callErr(nfs3.Program, nfs3.Version, nfs3.ProcNull, nil, nil); err != nil {
		t.Fatal(err)
	}
	r1 := c.mount("/")
	r2 := c.mount(e.srv.Root())
	r3 := c.mount(e.srv.Root() + "/")
	for _, r := range []nfs3.MntRes{r1, r2, r3} {
		if r.Status != nfs3.MntOK || !bytes.Equal(r.FH, r1.FH) {
			t.Fatalf("MNT: %v %x, want OK %x", r.Status, r.FH, r1.FH)
		}
		if !slices.Equal(r.AuthFlavors, []uint32{rpc.AuthSys, rpc.AuthNone}) {
			t.Fatalf("auth flavors %v", r.AuthFlavors)
		}
	}
	for _, p := range []string{"/nope", "relative", "", e.srv.Root() + "/sub"} {
		if r := c.mount(p); r.Status != nfs3.MntErrNoEnt {
			t.Errorf("MNT %q: %v, want NOENT", p, r.Status)
		}
	}
	// The root handle is the root directory.
	a := c.mustGetattr(r1.FH)
	st := lstat(t, e.root)
	if a.Type != nfs3.TypeDir || a.Fileid != st.Ino || a.Mode != st.Mode&0o7777 {
		t.Fatalf("root attrs %+v vs stat ino %d mode %o", a, st.Ino, st.Mode)
	}

	var dump nfs3.DumpRes
	if err := c.callErr(nfs3.MountProgram, nfs3.MountVersion, nfs3.MountProcDump, nil, &dump); err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, m := range dump.Mounts {
		got = append(got, string(m.Hostname)+" "+string(m.Directory))
	}
	want := []string{"127.0.0.1 /", "127.0.0.1 " + e.srv.Root(), "127.0.0.1 " + e.srv.Root() + "/"}
	slices.Sort(want)
	if !slices.Equal(got, want) {
		t.Fatalf("DUMP %q, want %q", got, want)
	}
	if err := c.callErr(nfs3.MountProgram, nfs3.MountVersion, nfs3.MountProcUmnt, &nfs3.UmntArgs{Path: []byte("/")}, nil); err != nil {
		t.Fatal(err)
	}
	if err := c.callErr(nfs3.MountProgram, nfs3.MountVersion, nfs3.MountProcDump, nil, &dump); err != nil {
		t.Fatal(err)
	}
	if len(dump.Mounts) != 2 {
		t.Fatalf("after UMNT: %d mounts", len(dump.Mounts))
	}
	if err := c.callErr(nfs3.MountProgram, nfs3.MountVersion, nfs3.MountProcUmntall, nil, nil); err != nil {
		t.Fatal(err)
	}
	if err := c.callErr(nfs3.MountProgram, nfs3.MountVersion, nfs3.MountProcDump, nil, &dump); err != nil {
		t.Fatal(err)
	}
	if len(dump.Mounts) != 0 {
		t.Fatalf("after UMNTALL: %d mounts", len(dump.Mounts))
	}
	var ex nfs3.ExportRes
	if err := c.callErr(nfs3.MountProgram, nfs3.MountVersion, nfs3.MountProcExport, nil, &ex); err != nil {
		t.Fatal(err)
	}
	if len(ex.Exports) != 1 || string(ex.Exports[0].Dir) != e.srv.Root() || len(ex.Exports[0].Groups) != 0 {
		t.Fatalf("EXPORT %+v", ex.Exports)
	}
	ms := e.srv.MountStats()
	if ms[nfs3.MountProcMnt] != 7 || ms[nfs3.MountProcDump] != 3 || ms[nfs3.MountProcNull] != 1 {
		t.Fatalf("mount stats %v", ms)
	}
}

func TestWriteReadCommit(t *testing.T) {
	e := startEnv(t, false)
	c := e.root0()
	root := c.rootFH()
	fh := c.mustCreate(root, "data", 0o644)

	data := make([]byte, 3<<20+123)
	rand.Read(data)
	verf := e.srv.WriteVerifier()
	// Write in 1 MiB pieces with each stability level.
	stables := []nfs3.StableHow{nfs3.Unstable, nfs3.DataSync, nfs3.FileSync, nfs3.Unstable}
	for i, off := 0, 0; off < len(data); i, off = i+1, off+maxIO {
		end := min(off+maxIO, len(data))
		w := c.write(fh, uint64(off), data[off:end], stables[i])
		if w.Status != nfs3.OK || int(w.Count) != end-off || w.Committed != stables[i] || w.Verf != verf {
			t.Fatalf("WRITE %d: %v count %d committed %v verf %x", off, w.Status, w.Count, w.Committed, w.Verf)
		}
		if !w.Wcc.Before.Present || w.Wcc.Before.Attr.Size != uint64(off) || w.Wcc.After.Attr.Size != uint64(end) {
			t.Fatalf("WRITE wcc %+v", w.Wcc)
		}
	}
	onDisk, err := os.ReadFile(filepath.Join(e.root, "data"))
	if err != nil || !bytes.Equal(onDisk, data) {
		t.Fatalf("file on disk differs (%v)", err)
	}
	var got []byte
	for off := uint64(0); ; {
		r := c.read(fh, off, 700_000)
		if r.Status != nfs3.OK || int(r.Count) != len(r.Data) {
			t.Fatalf("READ %d: %v count %d len %d", off, r.Status, r.Count, len(r.Data))
		}
		got = append(got, r.Data...)
		off += uint64(r.Count)
		if wantEOF := off >= uint64(len(data)); r.EOF != wantEOF {
			t.Fatalf("READ at %d: eof %v", off, r.EOF)
		}
		if r.EOF {
			break
		}
	}
	if !bytes.Equal(got, data) {
		t.Fatal("read back differs")
	}
	// Past the end, and an odd-sized read (padding).
	if r := c.read(fh, uint64(len(data))+10, 100); r.Status != nfs3.OK || r.Count != 0 || !r.EOF {
		t.Fatalf("READ past EOF: %+v", r.Status)
	}
	if r := c.read(fh, 5, 3); r.Status != nfs3.OK || !bytes.Equal(r.Data, data[5:8]) || r.EOF {
		t.Fatalf("READ 3 bytes: %v %x", r.Status, r.Data)
	}
	// A read larger than rtmax is cut to rtmax.
	if r := c.read(fh, 0, 4<<20); r.Status != nfs3.OK || r.Count != maxIO {
		t.Fatalf("READ 4 MiB: %v %d", r.Status, r.Count)
	}
	var cr nfs3.CommitRes
	c.call(nfs3.ProcCommit, &nfs3.CommitArgs{File: fh}, &cr)
	if cr.Status != nfs3.OK || cr.Verf != verf || !cr.Wcc.After.Present {
		t.Fatalf("COMMIT: %v verf %x want %x", cr.Status, cr.Verf, verf)
	}
	// Count larger than the data is invalid.
	var wr nfs3.WriteRes
	c.call(nfs3.ProcWrite, &nfs3.WriteArgs{File: fh, Count: 10, Data: []byte("abc")}, &wr)
	wantStatus(t, "WRITE count > data", wr.Status, nfs3.ErrInval)
	// READ/WRITE/COMMIT on a directory.
	if r := c.read(root, 0, 10); r.Status != nfs3.ErrIsDir {
		t.Fatalf("READ dir: %v", r.Status)
	}
	if w := c.write(root, 0, []byte("x"), nfs3.Unstable); w.Status != nfs3.ErrIsDir {
		t.Fatalf("WRITE dir: %v", w.Status)
	}
	c.call(nfs3.ProcCommit, &nfs3.CommitArgs{File: root}, &cr)
	wantStatus(t, "COMMIT dir", cr.Status, nfs3.ErrIsDir)
}

func TestCreateModes(t *testing.T) {
	e := startEnv(t, false)
	c := e.root0()
	root := c.rootFH()

	// The mode is exactly what the client asks, whatever the server's umask.
	old := unix.Umask(0o077)
	defer unix.Umask(old)
	fh := c.mustCreate(root, "f", 0o664)
	if st := lstat(t, filepath.Join(e.root, "f")); st.Mode&0o7777 != 0o664 {
		t.Fatalf("mode %o, want 664", st.Mode&0o7777)
	}
	if _, st := c.create(root, "f", 0o644); st != nfs3.ErrExist {
		t.Fatalf("GUARDED over existing: %v", st)
	}
	c.mustMkdir(root, "m", 0o775)
	if st := lstat(t, filepath.Join(e.root, "m")); st.Mode&0o7777 != 0o775 {
		t.Fatalf("mkdir mode %o, want 775", st.Mode&0o7777)
	}
	// A directory made in a set-group-ID directory inherits the bit
	// and the group, as locally.
	sg := filepath.Join(e.root, "sgid")
	os.Mkdir(sg, 0o755)
	os.Chown(sg, 0, 4321)
	unix.Chmod(sg, 0o2775)
	sub := c.mustMkdir(c.mustLookup(root, "sgid"), "sub", 0o755)
	if a := c.mustGetattr(sub); a.Mode != 0o2755 || a.GID != 4321 {
		t.Fatalf("mkdir in a setgid dir: mode %o gid %d", a.Mode, a.GID)
	}
	c.write(fh, 0, []byte("hello"), nfs3.FileSync)
	// UNCHECKED over an existing file truncates it when asked to.
	var cr nfs3.CreateRes
	c.call(nfs3.ProcCreate, &nfs3.CreateArgs{Where: nfs3.DirOpArgs{Dir: root, Name: []byte("f")},
		Mode: nfs3.Unchecked, Attr: nfs3.Sattr{SetMode: true, Mode: 0o600, SetSize: true, Size: 0}}, &cr)
	if cr.Status != nfs3.OK || !bytes.Equal(cr.Obj.FH, fh) || cr.ObjAttr.Attr.Size != 0 {
		t.Fatalf("UNCHECKED existing: %v same handle %v size %d", cr.Status, bytes.Equal(cr.Obj.FH, fh), cr.ObjAttr.Attr.Size)
	}
	if cr.ObjAttr.Attr.Mode != 0o664 {
		t.Fatalf("UNCHECKED changed the mode of an existing file to %o", cr.ObjAttr.Attr.Mode)
	}
	if !cr.DirWcc.Before.Present || !cr.DirWcc.After.Present {
		t.Fatal("CREATE without dir wcc")
	}
	// CREATE with "." or ".." or over a directory.
	for _, name := range []string{".", ".."} {
		if _, st := c.create(root, name, 0o644); st != nfs3.ErrExist {
			t.Fatalf("CREATE %q: %v", name, st)
		}
	}
	c.mustMkdir(root, "d", 0o755)
	c.call(nfs3.ProcCreate, &nfs3.CreateArgs{Where: nfs3.DirOpArgs{Dir: root, Name: []byte("d")}, Mode: nfs3.Unchecked}, &cr)
	wantStatus(t, "UNCHECKED over dir", cr.Status, nfs3.ErrExist)

	// EXCLUSIVE: a retransmission gets the same file, another verifier
	// EXIST, and after the client's SETATTR even the same verifier EXIST.
	excl := func(name string, v nfs3.Verf) nfs3.CreateRes {
		var r nfs3.CreateRes
		c.call(nfs3.ProcCreate, &nfs3.CreateArgs{Where: nfs3.DirOpArgs{Dir: root, Name: []byte(name)},
			Mode: nfs3.Exclusive, Verf: v}, &r)
		return r
	}
	v1 := nfs3.Verf{0xde, 0xad, 0xbe, 0xef, 1, 2, 3, 4}
	x1 := excl("x", v1)
	if x1.Status != nfs3.OK || !x1.Obj.Present {
		t.Fatalf("EXCLUSIVE: %v", x1.Status)
	}
	x2 := excl("x", v1)
	if x2.Status != nfs3.OK || !bytes.Equal(x2.Obj.FH, x1.Obj.FH) {
		t.Fatalf("EXCLUSIVE retransmission: %v same %v", x2.Status, bytes.Equal(x2.Obj.FH, x1.Obj.FH))
	}
	if x3 := excl("x", nfs3.Verf{9}); x3.Status != nfs3.ErrExist {
		t.Fatalf("EXCLUSIVE other verifier: %v", x3.Status)
	}
	var sr nfs3.SetattrRes
	c.call(nfs3.ProcSetattr, &nfs3.SetattrArgs{Obj: x1.Obj.FH, Attr: nfs3.Sattr{SetMode: true, Mode: 0o640,
		Atime: nfs3.SetTime{How: nfs3.SetToServerTime}, Mtime: nfs3.SetTime{How: nfs3.SetToServerTime}}}, &sr)
	wantStatus(t, "SETATTR after EXCLUSIVE", sr.Status, nfs3.OK)
	if x4 := excl("x", v1); x4.Status != nfs3.ErrExist {
		t.Fatalf("EXCLUSIVE after SETATTR: %v", x4.Status)
	}
	if a := c.mustGetattr(x1.Obj.FH); a.Mode != 0o640 || a.Type != nfs3.TypeReg {
		t.Fatalf("exclusive file attrs %+v", a)
	}
	// CREATE in a non-directory.
	if _, st := c.create(fh, "sub", 0o644); st != nfs3.ErrNotDir {
		t.Fatalf("CREATE in a file: %v", st)
	}
}

func TestSetattr(t *testing.T) {
	e := startEnv(t, false)
	c := e.root0()
	root := c.rootFH()
	fh := c.mustCreate(root, "f", 0o644)
	p := filepath.Join(e.root, "f")
	before := c.mustGetattr(fh)

	setattr := func(sa nfs3.Sattr, guard *nfs3.Time) nfs3.SetattrRes {
		t.Helper()
		a := nfs3.SetattrArgs{Obj: fh, Attr: sa}
		if guard != nil {
			a.Guard, a.GuardCtime = true, *guard
		}
		var r nfs3.SetattrRes
		c.call(nfs3.ProcSetattr, &a, &r)
		return r
	}
	r := setattr(nfs3.Sattr{SetMode: true, Mode: 0o4751, SetUID: true, UID: 1234, SetGID: true, GID: 5678,
		SetSize: true, Size: 10000}, nil)
	wantStatus(t, "SETATTR", r.Status, nfs3.OK)
	st := lstat(t, p)
	if st.Mode&0o7777 != 0o4751 || st.Uid != 1234 || st.Gid != 5678 || st.Size != 10000 {
		t.Fatalf("after SETATTR: mode %o uid %d gid %d size %d", st.Mode&0o7777, st.Uid, st.Gid, st.Size)
	}
	if !r.Wcc.Before.Present || r.Wcc.Before.Attr.Size != 0 || r.Wcc.After.Attr.Size != 10000 {
		t.Fatalf("SETATTR wcc %+v", r.Wcc)
	}
	if r.Wcc.Before.Attr.Ctime != before.Ctime {
		t.Fatalf("pre-op ctime %v, want %v", r.Wcc.Before.Attr.Ctime, before.Ctime)
	}
	// Client times with nanoseconds.
	at := nfs3.Time{Seconds: 1_000_000_000, Nseconds: 123456789}
	mt := nfs3.Time{Seconds: 1_500_000_000, Nseconds: 987654321}
	r = setattr(nfs3.Sattr{Atime: nfs3.SetTime{How: nfs3.SetToClientTime, Time: at},
		Mtime: nfs3.SetTime{How: nfs3.SetToClientTime, Time: mt}}, nil)
	wantStatus(t, "SETATTR times", r.Status, nfs3.OK)
	a := c.mustGetattr(fh)
	if a.Atime != at || a.Mtime != mt {
		t.Fatalf("times %+v %+v", a.Atime, a.Mtime)
	}
	// Only mtime to server time: atime stays.
	r = setattr(nfs3.Sattr{Mtime: nfs3.SetTime{How: nfs3.SetToServerTime}}, nil)
	a = c.mustGetattr(fh)
	if a.Atime != at || time.Since(time.Unix(int64(a.Mtime.Seconds), 0)) > time.Minute {
		t.Fatalf("server time: atime %+v mtime %+v", a.Atime, a.Mtime)
	}
	// Shrink.
	r = setattr(nfs3.Sattr{SetSize: true, Size: 3}, nil)
	if st := lstat(t, p); r.Status != nfs3.OK || st.Size != 3 {
		t.Fatalf("truncate: %v size %d", r.Status, st.Size)
	}
	// Guard: a stale ctime is NOT_SYNC and changes nothing.
	stale := before.Ctime
	r = setattr(nfs3.Sattr{SetMode: true, Mode: 0o600}, &stale)
	wantStatus(t, "guarded SETATTR", r.Status, nfs3.ErrNotSync)
	if st := lstat(t, p); st.Mode&0o777 == 0o600 {
		t.Fatal("guarded SETATTR with a stale ctime changed the mode")
	}
	if !r.Wcc.After.Present {
		t.Fatal("NOT_SYNC without post-op attributes")
	}
	cur := c.mustGetattr(fh).Ctime
	r = setattr(nfs3.Sattr{SetMode: true, Mode: 0o600}, &cur)
	wantStatus(t, "guarded SETATTR, current ctime", r.Status, nfs3.OK)
	if st := lstat(t, p); st.Mode&0o7777 != 0o600 {
		t.Fatalf("mode %o", st.Mode&0o7777)
	}
	// Size on a directory.
	var dr nfs3.SetattrRes
	c.call(nfs3.ProcSetattr, &nfs3.SetattrArgs{Obj: root, Attr: nfs3.Sattr{SetSize: true}}, &dr)
	wantStatus(t, "SETATTR size of dir", dr.Status, nfs3.ErrIsDir)
}

func TestLookup(t *testing.T) {
	e := startEnv(t, false)
	c := e.root0()
	root := c.rootFH()
	d := c.mustMkdir(root, "d", 0o755)
	f := c.mustCreate(d, "f", 0o644)
	if err := os.Symlink("/etc", filepath.Join(e.root, "d", "link")); err != nil {
		t.Fatal(err)
	}

	if got := c.mustLookup(d, "f"); !bytes.Equal(got, f) {
		t.Fatal("LOOKUP returned another handle than CREATE")
	}
	if got := c.mustLookup(d, "."); !bytes.Equal(got, d) {
		t.Fatal(`LOOKUP "." is not the directory`)
	}
	if got := c.mustLookup(d, ".."); !bytes.Equal(got, root) {
		t.Fatal(`LOOKUP ".." of d is not the root`)
	}
	if got := c.mustLookup(root, ".."); !bytes.Equal(got, root) {
		t.Fatal(`LOOKUP ".." of the export root is not the root`)
	}
	// A symbolic link is returned as itself, never followed.
	l := c.mustLookup(d, "link")
	if a := c.mustGetattr(l); a.Type != nfs3.TypeLnk {
		t.Fatalf("symlink looked up as %v", a.Type)
	}
	if _, st := c.lookup(l, "passwd"); st != nfs3.ErrNotDir {
		t.Fatalf("LOOKUP through a symlink: %v", st)
	}
	var r nfs3.LookupRes
	c.call(nfs3.ProcLookup, &nfs3.LookupArgs{What: nfs3.DirOpArgs{Dir: d, Name: []byte("missing")}}, &r)
	if r.Status != nfs3.ErrNoEnt || !r.DirAttr.Present {
		t.Fatalf("LOOKUP missing: %v dir attrs %v", r.Status, r.DirAttr.Present)
	}
	for _, name := range []string{"a/b", "../d", "f\x00", "/etc", ""} {
		if _, st := c.lookup(d, name); st != nfs3.ErrInval {
			t.Errorf("LOOKUP %q: %v, want INVAL", name, st)
		}
	}
	if _, st := c.lookup(f, "x"); st != nfs3.ErrNotDir {
		t.Fatalf("LOOKUP in a file: %v", st)
	}
	// Attributes in the reply are the object's and the directory's.
	c.call(nfs3.ProcLookup, &nfs3.LookupArgs{What: nfs3.DirOpArgs{Dir: d, Name: []byte("f")}}, &r)
	if st := lstat(t, filepath.Join(e.root, "d", "f")); r.ObjAttr.Attr.Fileid != st.Ino {
		t.Fatal("LOOKUP object attributes")
	}
	if st := lstat(t, filepath.Join(e.root, "d")); r.DirAttr.Attr.Fileid != st.Ino {
		t.Fatal("LOOKUP directory attributes")
	}
}

func TestSymlinkReadlink(t *testing.T) {
	e := startEnv(t, false)
	c := e.root0()
	root := c.rootFH()
	name := "l\xff\xfe名前"
	target := "../\x80bin/∂ with space/\x01"
	var r nfs3.SymlinkRes
	c.call(nfs3.ProcSymlink, &nfs3.SymlinkArgs{Where: nfs3.DirOpArgs{Dir: root, Name: []byte(name)},
		Attr: nfs3.Sattr{SetMode: true, Mode: 0o777}, Data: []byte(target)}, &r)
	if r.Status != nfs3.OK || !r.Obj.Present || r.ObjAttr.Attr.Type != nfs3.TypeLnk || r.ObjAttr.Attr.Size != uint64(len(target)) {
		t.Fatalf("SYMLINK: %v %+v", r.Status, r.ObjAttr)
	}
	if got, err := os.Readlink(filepath.Join(e.root, name)); err != nil || got != target {
		t.Fatalf("on disk: %q %v", got, err)
	}
	var rl nfs3.ReadlinkRes
	c.call(nfs3.ProcReadlink, &nfs3.ReadlinkArgs{Symlink: r.Obj.FH}, &rl)
	if rl.Status != nfs3.OK || string(rl.Data) != target || !rl.SymlinkAttr.Present {
		t.Fatalf("READLINK: %v %q", rl.Status, rl.Data)
	}
	if got := c.mustLookup(root, name); !bytes.Equal(got, r.Obj.FH) {
		t.Fatal("LOOKUP of the symlink gives another handle")
	}
	var rd nfs3.ReaddirplusRes
	c.call(nfs3.ProcReaddirplus, &nfs3.ReaddirplusArgs{Dir: root, DirCount: 4096, MaxCount: 8192}, &rd)
	listed := false
	for _, en := range rd.Entries {
		if string(en.Name) == name && bytes.Equal(en.FH.FH, r.Obj.FH) && en.Attr.Attr.Type == nfs3.TypeLnk {
			listed = true
		}
	}
	if !listed {
		t.Fatal("READDIRPLUS does not list the name byte for byte")
	}
	// READLINK of a non-link, SYMLINK over an existing name, bad targets.
	c.call(nfs3.ProcReadlink, &nfs3.ReadlinkArgs{Symlink: root}, &rl)
	wantStatus(t, "READLINK of a directory", rl.Status, nfs3.ErrInval)
	c.call(nfs3.ProcSymlink, &nfs3.SymlinkArgs{Where: nfs3.DirOpArgs{Dir: root, Name: []byte(name)}, Data: []byte("x")}, &r)
	wantStatus(t, "SYMLINK over existing", r.Status, nfs3.ErrExist)
	c.call(nfs3.ProcSymlink, &nfs3.SymlinkArgs{Where: nfs3.DirOpArgs{Dir: root, Name: []byte("nul")}, Data: []byte("a\x00b")}, &r)
	wantStatus(t, "SYMLINK with NUL", r.Status, nfs3.ErrInval)
}

func TestMkdirRemoveRmdir(t *testing.T) {
	e := startEnv(t, false)
	c := e.root0()
	root := c.rootFH()
	d := c.mustMkdir(root, "d", 0o750)
	if st := lstat(t, filepath.Join(e.root, "d")); st.Mode&0o7777 != 0o750 || st.Mode&unix.S_IFMT != unix.S_IFDIR {
		t.Fatalf("mkdir mode %o", st.Mode)
	}
	if _, st := c.mkdir(root, "d", 0o755); st != nfs3.ErrExist {
		t.Fatalf("MKDIR existing: %v", st)
	}
	c.mustCreate(d, "f", 0o644)
	rmdir := func(dir nfs3.FH, name string) nfs3.RmdirRes {
		var r nfs3.RmdirRes
		c.call(nfs3.ProcRmdir, &nfs3.RmdirArgs{Obj: nfs3.DirOpArgs{Dir: dir, Name: []byte(name)}}, &r)
		return r
	}
	if r := rmdir(root, "d"); r.Status != nfs3.ErrNotEmpty || !r.DirWcc.After.Present {
		t.Fatalf("RMDIR non-empty: %v", r.Status)
	}
	wantStatus(t, "RMDIR of a file", rmdir(d, "f").Status, nfs3.ErrNotDir)
	wantStatus(t, "REMOVE of a directory", c.remove(root, "d"), nfs3.ErrIsDir)
	wantStatus(t, "REMOVE missing", c.remove(d, "nope"), nfs3.ErrNoEnt)
	wantStatus(t, `REMOVE "."`, c.remove(d, "."), nfs3.ErrInval)
	wantStatus(t, `RMDIR ".."`, rmdir(d, "..").Status, nfs3.ErrInval)

	var rr nfs3.RemoveRes
	c.call(nfs3.ProcRemove, &nfs3.RemoveArgs{Obj: nfs3.DirOpArgs{Dir: d, Name: []byte("f")}}, &rr)
	if rr.Status != nfs3.OK || !rr.DirWcc.Before.Present || !rr.DirWcc.After.Present {
		t.Fatalf("REMOVE: %v %+v", rr.Status, rr.DirWcc)
	}
	if rr.DirWcc.Before.Attr.Mtime == rr.DirWcc.After.Attr.Mtime && rr.DirWcc.Before.Attr.Ctime == rr.DirWcc.After.Attr.Ctime {
		t.Fatal("REMOVE wcc: directory times did not change")
	}
	r := rmdir(root, "d")
	wantStatus(t, "RMDIR", r.Status, nfs3.OK)
	if _, err := os.Lstat(filepath.Join(e.root, "d")); !os.IsNotExist(err) {
		t.Fatal("directory still there")
	}
	// The removed directory's handle is stale.
	if _, st := c.getattr(d); st != nfs3.ErrStale {
		t.Fatalf("GETATTR of removed dir: %v", st)
	}
}

func TestRename(t *testing.T) {
	e := startEnv(t, false)
	c := e.root0()
	root := c.rootFH()
	a := c.mustMkdir(root, "a", 0o755)
	b := c.mustMkdir(root, "b", 0o755)
	src := c.mustCreate(a, "src", 0o644)
	c.write(src, 0, []byte("source"), nfs3.FileSync)
	victim := c.mustCreate(b, "dst", 0o644)
	c.write(victim, 0, []byte("victim"), nfs3.FileSync)

	rename := func(fd nfs3.FH, fn string, td nfs3.FH, tn string) nfs3.RenameRes {
		var r nfs3.RenameRes
		c.call(nfs3.ProcRename, &nfs3.RenameArgs{From: nfs3.DirOpArgs{Dir: fd, Name: []byte(fn)},
			To: nfs3.DirOpArgs{Dir: td, Name: []byte(tn)}}, &r)
		return r
	}
	r := rename(a, "src", b, "dst")
	if r.Status != nfs3.OK || !r.FromDirWcc.Before.Present || !r.FromDirWcc.After.Present ||
		!r.ToDirWcc.Before.Present || !r.ToDirWcc.After.Present {
		t.Fatalf("RENAME over existing: %v %+v %+v", r.Status, r.FromDirWcc, r.ToDirWcc)
	}
	if got, _ := os.ReadFile(filepath.Join(e.root, "b", "dst")); string(got) != "source" {
		t.Fatalf("after rename: %q", got)
	}
	// The moved file keeps its handle; the replaced one is stale.
	if got := c.mustLookup(b, "dst"); !bytes.Equal(got, src) {
		t.Fatal("renamed file changed handle")
	}
	if rd := c.read(src, 0, 100); rd.Status != nfs3.OK || string(rd.Data) != "source" {
		t.Fatalf("READ via old handle: %v", rd.Status)
	}
	if _, st := c.getattr(victim); st != nfs3.ErrStale {
		t.Fatalf("replaced file: %v, want STALE", st)
	}
	if rd := c.read(victim, 0, 10); rd.Status != nfs3.ErrStale {
		t.Fatalf("READ replaced file: %v, want STALE", rd.Status)
	}
	// Directories: over an empty one works, over a non-empty one does not,
	// a file over a directory is ISDIR, a directory into itself INVAL.
	c.mustMkdir(root, "empty", 0o755)
	wantStatus(t, "RENAME dir over empty dir", rename(root, "a", root, "empty").Status, nfs3.OK)
	wantStatus(t, "RENAME dir over non-empty dir", rename(root, "empty", root, "b").Status, nfs3.ErrNotEmpty)
	c.mustMkdir(root, "c", 0o755)
	wantStatus(t, "RENAME file over dir", rename(b, "dst", root, "c").Status, nfs3.ErrIsDir)
	wantStatus(t, "RENAME dir over file", rename(root, "c", b, "dst").Status, nfs3.ErrNotDir)
	wantStatus(t, "RENAME dir into itself", rename(root, "b", b, "sub").Status, nfs3.ErrInval)
	wantStatus(t, "RENAME missing", rename(root, "nope", root, "x").Status, nfs3.ErrNoEnt)
	wantStatus(t, "RENAME dot", rename(b, ".", root, "x").Status, nfs3.ErrInval)
	// Same directory, same name: a no-op.
	wantStatus(t, "RENAME onto itself", rename(b, "dst", b, "dst").Status, nfs3.OK)
}

func TestLink(t *testing.T) {
	e := startEnv(t, false)
	c := e.root0()
	root := c.rootFH()
	f := c.mustCreate(root, "f", 0o644)
	link := func(file, dir nfs3.FH, name string) nfs3.LinkRes {
		var r nfs3.LinkRes
		c.call(nfs3.ProcLink, &nfs3.LinkArgs{File: file, Link: nfs3.DirOpArgs{Dir: dir, Name: []byte(name)}}, &r)
		return r
	}
	r := link(f, root, "g")
	if r.Status != nfs3.OK || r.FileAttr.Attr.Nlink != 2 || !r.LinkDirWcc.After.Present {
		t.Fatalf("LINK: %v nlink %d", r.Status, r.FileAttr.Attr.Nlink)
	}
	if got := c.mustLookup(root, "g"); !bytes.Equal(got, f) {
		t.Fatal("hard link has another handle")
	}
	if st := lstat(t, filepath.Join(e.root, "g")); st.Nlink != 2 || st.Ino != lstat(t, filepath.Join(e.root, "f")).Ino {
		t.Fatal("not a hard link on disk")
	}
	wantStatus(t, "LINK over existing", link(f, root, "g").Status, nfs3.ErrExist)
	wantStatus(t, "LINK a directory", link(root, root, "rootlink").Status, nfs3.ErrPerm)
	wantStatus(t, "LINK into a file", link(f, f, "x").Status, nfs3.ErrNotDir)
	// Removing one name leaves the other, with nlink 1.
	wantStatus(t, "REMOVE f", c.remove(root, "f"), nfs3.OK)
	if a := c.mustGetattr(f); a.Nlink != 1 {
		t.Fatalf("nlink after remove: %d", a.Nlink)
	}
	// A symbolic link can be hard-linked (as itself).
	var sr nfs3.SymlinkRes
	c.call(nfs3.ProcSymlink, &nfs3.SymlinkArgs{Where: nfs3.DirOpArgs{Dir: root, Name: []byte("s")}, Data: []byte("g")}, &sr)
	if r := link(sr.Obj.FH, root, "s2"); r.Status != nfs3.OK || r.FileAttr.Attr.Type != nfs3.TypeLnk {
		t.Fatalf("LINK symlink: %v", r.Status)
	}
	if st := lstat(t, filepath.Join(e.root, "s2")); st.Mode&unix.S_IFMT != unix.S_IFLNK {
		t.Fatal("link of a symlink followed it")
	}
}

func TestMknod(t *testing.T) {
	e := startEnv(t, false)
	c := e.root0()
	root := c.rootFH()
	mknod := func(c *client, name string, typ nfs3.Ftype, spec nfs3.SpecData) nfs3.MknodRes {
		var r nfs3.MknodRes
		c.call(nfs3.ProcMknod, &nfs3.MknodArgs{Where: nfs3.DirOpArgs{Dir: root, Name: []byte(name)}, Type: typ,
			Attr: nfs3.Sattr{SetMode: true, Mode: 0o640}, Spec: spec}, &r)
		return r
	}
	for _, tc := range []struct {
		name string
		typ  nfs3.Ftype
		mode uint32
	}{{"fifo", nfs3.TypeFifo, unix.S_IFIFO}, {"sock", nfs3.TypeSock, unix.S_IFSOCK}, {"chr", nfs3.TypeChr, unix.S_IFCHR}, {"blk", nfs3.TypeBlk, unix.S_IFBLK}} {
		r := mknod(c, tc.name, tc.typ, nfs3.SpecData{Major: 1, Minor: 3})
		if r.Status != nfs3.OK || r.ObjAttr.Attr.Type != tc.typ || r.ObjAttr.Attr.Mode != 0o640 {
			t.Fatalf("MKNOD %s: %v %+v", tc.name, r.Status, r.ObjAttr.Attr)
		}
		st := lstat(t, filepath.Join(e.root, tc.name))
		if st.Mode&unix.S_IFMT != tc.mode || st.Mode&0o7777 != 0o640 {
			t.Fatalf("%s on disk: mode %o", tc.name, st.Mode)
		}
		if tc.typ == nfs3.TypeChr && (r.ObjAttr.Attr.Rdev != nfs3.SpecData{Major: 1, Minor: 3} || st.Rdev != unix.Mkdev(1, 3)) {
			t.Fatalf("device numbers %+v", r.ObjAttr.Attr.Rdev)
		}
	}
	for _, typ := range []nfs3.Ftype{nfs3.TypeReg, nfs3.TypeDir, nfs3.TypeLnk, 42} {
		wantStatus(t, "MKNOD bad type", mknod(c, "bad", typ, nfs3.SpecData{}).Status, nfs3.ErrBadType)
	}
	os.Chmod(e.root, 0o777)
	user := e.client(1000, 1000)
	wantStatus(t, "MKNOD chr as user", mknod(user, "uchr", nfs3.TypeChr, nfs3.SpecData{Major: 1, Minor: 3}).Status, nfs3.ErrPerm)
	if r := mknod(user, "ufifo", nfs3.TypeFifo, nfs3.SpecData{}); r.Status != nfs3.OK || r.ObjAttr.Attr.UID != 1000 {
		t.Fatalf("MKNOD fifo as user: %v uid %d", r.Status, r.ObjAttr.Attr.UID)
	}
	wantStatus(t, "MKNOD existing", mknod(c, "fifo", nfs3.TypeFifo, nfs3.SpecData{}).Status, nfs3.ErrExist)
}

func TestFsProcs(t *testing.T) {
	e := startEnv(t, false)
	c := e.root0()
	root := c.rootFH()
	var fs nfs3.FsstatRes
	c.call(nfs3.ProcFsstat, &nfs3.FsstatArgs{Root: root}, &fs)
	var sf unix.Statfs_t
	unix.Statfs(e.root, &sf)
	if fs.Status != nfs3.OK || fs.Tbytes != sf.Blocks*uint64(sf.Bsize) || fs.Tfiles != sf.Files ||
		fs.Abytes > fs.Fbytes || fs.Fbytes > fs.Tbytes || !fs.ObjAttr.Present {
		t.Fatalf("FSSTAT %+v", fs)
	}
	var fi nfs3.FsinfoRes
	c.call(nfs3.ProcFsinfo, &nfs3.FsinfoArgs{Root: root}, &fi)
	if fi.Status != nfs3.OK || fi.Rtmax != 1<<20 || fi.Wtmax != 1<<20 || fi.Rtpref != 1<<20 || fi.Wtpref != 1<<20 ||
		fi.Rtmult != 4096 || fi.Dtpref == 0 || fi.TimeDelta != (nfs3.Time{Nseconds: 1}) ||
		fi.Properties != nfs3.FSFLink|nfs3.FSFSymlink|nfs3.FSFHomogeneous|nfs3.FSFCanSetTime || fi.MaxFileSize < 1<<40 {
		t.Fatalf("FSINFO %+v", fi)
	}
	var pc nfs3.PathconfRes
	c.call(nfs3.ProcPathconf, &nfs3.PathconfArgs{Obj: root}, &pc)
	if pc.Status != nfs3.OK || pc.NameMax != 255 || !pc.NoTrunc || !pc.ChownRestricted || pc.CaseInsensitive ||
		!pc.CasePreserving || pc.Linkmax < 1000 {
		t.Fatalf("PATHCONF %+v", pc)
	}
}

func TestStaleAndBadHandles(t *testing.T) {
	e := startEnv(t, false)
	c := e.root0()
	root := c.rootFH()
	f := c.mustCreate(root, "f", 0o644)
	g := c.mustCreate(root, "g", 0o644)
	c.write(f, 0, []byte("data"), nfs3.Unstable)
	wantStatus(t, "REMOVE", c.remove(root, "f"), nfs3.OK)
	for _, proc := range []func() nfs3.Status{
		func() nfs3.Status { _, st := c.getattr(f); return st },
		func() nfs3.Status { return c.read(f, 0, 10).Status },
		func() nfs3.Status { return c.write(f, 0, []byte("x"), nfs3.Unstable).Status },
		func() nfs3.Status { _, st := c.access(f, allAccess); return st },
	} {
		wantStatus(t, "removed file", proc(), nfs3.ErrStale)
	}
	// Removed behind the server's back, while its handle is cached.
	c.mustGetattr(g)
	os.Remove(filepath.Join(e.root, "g"))
	if _, st := c.getattr(g); st != nfs3.ErrStale {
		t.Fatalf("locally removed file: %v", st)
	}

	// Altering any byte of a valid handle makes it BADHANDLE (never
	// another file, never STALE).
	h := c.mustCreate(root, "h", 0o644)
	for i := range h {
		bad := bytes.Clone(h)
		bad[i] ^= 0x40
		if _, st := c.getattr(bad); st != nfs3.ErrBadHandle {
			t.Fatalf("handle with byte %d flipped: %v", i, st)
		}
	}
	for _, bad := range []nfs3.FH{nil, h[:len(h)-1], append(bytes.Clone(h), 0), make(nfs3.FH, 64)} {
		if _, st := c.getattr(bad); st != nfs3.ErrBadHandle {
			t.Fatalf("handle %x: %v", bad, st)
		}
	}
	// A handle of another export (another secret) is refused too.
	other := startEnv(t, false)
	oroot := other.root0().rootFH()
	if _, st := c.getattr(oroot); st != nfs3.ErrBadHandle {
		t.Fatalf("other export's root handle: %v", st)
	}
	if _, st := c.lookup(oroot, "x"); st != nfs3.ErrBadHandle {
		t.Fatalf("LOOKUP with other export's handle: %v", st)
	}
}

func TestReadOnly(t *testing.T) {
	e := startEnv(t, true)
	if err := os.WriteFile(filepath.Join(e.root, "f"), []byte("content"), 0o644); err != nil {
		t.Fatal(err)
	}
	os.Mkdir(filepath.Join(e.root, "d"), 0o755)
	c := e.root0()
	root := c.rootFH()
	f := c.mustLookup(root, "f")
	if r := c.read(f, 0, 100); r.Status != nfs3.OK || string(r.Data) != "content" {
		t.Fatalf("READ on read-only export: %v", r.Status)
	}
	dirop := nfs3.DirOpArgs{Dir: root, Name: []byte("new")}
	var (
		sr  nfs3.SetattrRes
		wr  nfs3.WriteRes
		dr  nfs3.DirOpRes
		rr  nfs3.RemoveRes
		rnr nfs3.RenameRes
		lr  nfs3.LinkRes
	)
	c.call(nfs3.ProcSetattr, &nfs3.SetattrArgs{Obj: f, Attr: nfs3.Sattr{SetMode: true, Mode: 0o600}}, &sr)
	wantStatus(t, "SETATTR", sr.Status, nfs3.ErrROFS)
	c.call(nfs3.ProcWrite, &nfs3.WriteArgs{File: f, Count: 1, Data: []byte("x")}, &wr)
	wantStatus(t, "WRITE", wr.Status, nfs3.ErrROFS)
	c.call(nfs3.ProcCreate, &nfs3.CreateArgs{Where: dirop, Mode: nfs3.Unchecked}, &dr)
	wantStatus(t, "CREATE", dr.Status, nfs3.ErrROFS)
	c.call(nfs3.ProcMkdir, &nfs3.MkdirArgs{Where: dirop}, &dr)
	wantStatus(t, "MKDIR", dr.Status, nfs3.ErrROFS)
	c.call(nfs3.ProcSymlink, &nfs3.SymlinkArgs{Where: dirop, Data: []byte("x")}, &dr)
	wantStatus(t, "SYMLINK", dr.Status, nfs3.ErrROFS)
	c.call(nfs3.ProcMknod, &nfs3.MknodArgs{Where: dirop, Type: nfs3.TypeFifo}, &dr)
	wantStatus(t, "MKNOD", dr.Status, nfs3.ErrROFS)
	c.call(nfs3.ProcRemove, &nfs3.RemoveArgs{Obj: nfs3.DirOpArgs{Dir: root, Name: []byte("f")}}, &rr)
	wantStatus(t, "REMOVE", rr.Status, nfs3.ErrROFS)
	c.call(nfs3.ProcRmdir, &nfs3.RmdirArgs{Obj: nfs3.DirOpArgs{Dir: root, Name: []byte("d")}}, &rr)
	wantStatus(t, "RMDIR", rr.Status, nfs3.ErrROFS)
	c.call(nfs3.ProcRename, &nfs3.RenameArgs{From: nfs3.DirOpArgs{Dir: root, Name: []byte("f")}, To: dirop}, &rnr)
	wantStatus(t, "RENAME", rnr.Status, nfs3.ErrROFS)
	c.call(nfs3.ProcLink, &nfs3.LinkArgs{File: f, Link: dirop}, &lr)
	wantStatus(t, "LINK", lr.Status, nfs3.ErrROFS)
	if got, st := c.access(root, allAccess); st != nfs3.OK || got != nfs3.AccessRead|nfs3.AccessLookup {
		t.Fatalf("ACCESS on read-only export: %v %#x", st, got)
	}
	if got, _ := os.ReadFile(filepath.Join(e.root, "f")); string(got) != "content" {
		t.Fatal("file changed")
	}
	if _, err := os.Lstat(filepath.Join(e.root, "new")); !os.IsNotExist(err) {
		t.Fatal("something was created")
	}
}

func TestHandlesSurviveRestart(t *testing.T) {
	e := startEnv(t, false)
	c := e.root0()
	root := c.rootFH()
	d := c.mustMkdir(root, "d", 0o755)
	f := c.mustCreate(d, "f", 0o644)
	c.write(f, 0, []byte("persistent"), nfs3.FileSync)
	v1 := e.srv.WriteVerifier()

	e.restart(false)
	c = e.root0()
	if got := c.rootFH(); !bytes.Equal(got, root) {
		t.Fatal("root handle changed across restart")
	}
	if r := c.read(f, 0, 100); r.Status != nfs3.OK || string(r.Data) != "persistent" {
		t.Fatalf("READ with a handle from before the restart: %v %q", r.Status, r.Data)
	}
	if got := c.mustLookup(d, "f"); !bytes.Equal(got, f) {
		t.Fatal("LOOKUP gives another handle after restart")
	}
	w := c.write(f, 0, []byte("P"), nfs3.Unstable)
	if w.Status != nfs3.OK || w.Verf == v1 {
		t.Fatalf("write verifier did not change across restart (%x)", w.Verf)
	}
	fi, err := os.Stat(filepath.Join(e.state, stateFileName(e.srv.Root())))
	if err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("state file: %v %v", fi.Mode(), err)
	}
	// A state file others could read is refused.
	os.Chmod(filepath.Join(e.state, stateFileName(e.srv.Root())), 0o644)
	if _, err := New(Config{Root: e.root, StateDir: e.state}); err == nil {
		t.Fatal("New accepted a world-readable secret")
	}
}

func TestStats(t *testing.T) {
	e := startEnv(t, false)
	c := e.root0()
	root := c.rootFH()
	for range 3 {
		c.mustGetattr(root)
	}
	c.lookup(root, "x")
	c.callErr(nfs3.Program, nfs3.Version, nfs3.ProcNull, nil, nil)
	got := e.srv.Stats()
	want := map[uint32]uint64{nfs3.ProcNull: 1, nfs3.ProcGetattr: 3, nfs3.ProcLookup: 1}
	if len(got) != len(want) {
		t.Fatalf("stats %v, want %v", got, want)
	}
	for k, v := range want {
		if got[k] != v {
			t.Fatalf("stats %v, want %v", got, want)
		}
	}
	// Procedure numbers past COMMIT are PROC_UNAVAIL.
	if err := c.callErr(nfs3.Program, nfs3.Version, 22, nil, nil); !isAcceptErr(err, rpc.ProcUnavail) {
		t.Fatalf("proc 22: %v", err)
	}
	if err := c.callErr(nfs3.MountProgram, nfs3.MountVersion, 6, nil, nil); !isAcceptErr(err, rpc.ProcUnavail) {
		t.Fatalf("mount proc 6: %v", err)
	}
}

func TestCacheExpiry(t *testing.T) {
	var clock atomic.Int64
	clock.Store(time.Now().UnixNano())
	e := startEnvTuned(t, false, func(c *Config) { c.Now = func() time.Time { return time.Unix(0, clock.Load()) } })
	advance := func(d time.Duration) { clock.Add(int64(d)) }
	c := e.root0()
	root := c.rootFH()
	f := c.mustCreate(root, "f", 0o644)
	c.write(f, 0, []byte("abc"), nfs3.Unstable)
	fds := func(n *node) (rw, path int) {
		e.srv.cache.mu.Lock()
		defer e.srv.cache.mu.Unlock()
		return n.rwFd, n.fd
	}
	n := e.srv.cache.acquire(f)
	if rw, _ := fds(n); n == nil || rw < 0 {
		t.Fatal("written file not cached with a write descriptor")
	}
	e.srv.cache.release(n)
	advance(defaultOpenIdle + time.Second)
	e.srv.cache.sweep()
	if rw, path := fds(n); rw >= 0 || path < 0 {
		t.Fatal("idle I/O descriptor not closed, or node closed too early")
	}
	advance(defaultNodeIdle)
	e.srv.cache.sweep()
	if e.srv.cache.acquire(f) != nil {
		t.Fatal("idle node not evicted")
	}
	if got := e.srv.cache.len(); got != 1 {
		t.Fatalf("%d nodes cached, want only the root", got)
	}
	if got := e.srv.cache.openCount.Load(); got != 0 {
		t.Fatalf("%d I/O descriptors open after expiry", got)
	}
	// Evicted handles resolve again.
	if r := c.read(f, 0, 10); r.Status != nfs3.OK || string(r.Data) != "abc" {
		t.Fatalf("READ after eviction: %v", r.Status)
	}
	if e.srv.cache.openCount.Load() != 1 {
		t.Fatalf("open descriptors %d, want 1", e.srv.cache.openCount.Load())
	}
}

// A file system mounted inside the export is not crossed into.
func TestMountPointNotCrossed(t *testing.T) {
	e := startEnv(t, false)
	mnt := filepath.Join(e.root, "mnt")
	os.Mkdir(mnt, 0o755)
	if err := unix.Mount("tmpfs", mnt, "tmpfs", 0, "size=1m"); err != nil {
		t.Skipf("cannot mount a tmpfs: %v", err)
	}
	t.Cleanup(func() { unix.Unmount(mnt, unix.MNT_DETACH) })
	os.WriteFile(filepath.Join(mnt, "inside"), []byte("other fs"), 0o644)
	c := e.root0()
	root := c.rootFH()
	if _, st := c.lookup(root, "mnt"); st != nfs3.ErrAcces {
		t.Fatalf("LOOKUP of a mount point: %v", st)
	}
	var r nfs3.ReaddirplusRes
	c.call(nfs3.ProcReaddirplus, &nfs3.ReaddirplusArgs{Dir: root, DirCount: 4096, MaxCount: 8192}, &r)
	found := false
	for _, en := range r.Entries {
		if string(en.Name) == "mnt" {
			found = true
			if en.FH.Present || en.Attr.Present {
				t.Fatal("READDIRPLUS gave a handle or attributes for a mount point")
			}
		}
	}
	if r.Status != nfs3.OK || !found {
		t.Fatalf("READDIRPLUS: %v, mount point listed %v", r.Status, found)
	}
}
