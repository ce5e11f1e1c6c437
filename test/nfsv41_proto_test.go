package test

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"hushfs/internal/proto"
	"hushfs/internal/proto/nfsv41"
	"hushfs/test/harness"
)

// v41calls records the calls and operations the v4.1 protocol counted.
type v41calls struct {
	mu    sync.Mutex
	calls []string
	ops   map[string]int
}

func (c *v41calls) hooks() proto.Hooks {
	return proto.Hooks{Finished: func(s *proto.CallStats) {
		c.mu.Lock()
		defer c.mu.Unlock()
		c.calls = append(c.calls, s.Name)
		if c.ops == nil {
			c.ops = map[string]int{}
		}
		for _, o := range s.Ops {
			c.ops[o]++
		}
	}}
}

// take returns the calls since the last take.
func (c *v41calls) take() []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	calls := c.calls
	c.calls, c.ops = nil, nil
	return calls
}

// mountV41 mounts ganesha's export with the v4.1 protocol package, without
// the core.
func mountV41(t *testing.T, g *harness.Ganesha, seen *v41calls) (*nfsv41.Server, proto.Export) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	srv, exp, err := nfsv41.Mount(ctx, nfsv41.Config{
		Server: g.Addr, Export: g.ExportPath, Port: g.NFSPort, Timeo: 10 * time.Second, Retrans: 2,
		Dial:  func(ctx context.Context, addr string) (net.Conn, error) { return g.NS.Dial(ctx, addr) },
		Logf:  t.Logf,
		Hooks: seen.hooks(),
	}, &proto.Cred{})
	if err != nil {
		t.Fatalf("mount over NFSv4.1: %v", err)
	}
	t.Cleanup(func() { srv.Close() })
	return srv, exp
}

func okStatus(t *testing.T, what string, err, status error) {
	t.Helper()
	if err == nil {
		err = status
	}
	if err != nil {
		t.Fatalf("%s: %v", what, err)
	}
}

// TestNFSv41ProtoGanesha drives every proto.Server method over NFSv4.1
// against ganesha and checks each answer against the exported directory
// as the local file system sees it, and that each method is one COMPOUND.
func TestNFSv41ProtoGanesha(t *testing.T) {
	g := harness.StartGanesha(t, harness.GaneshaOptions{NFSv4: true})
	must(t, "mkdir", os.MkdirAll(filepath.Join(g.ExportDir, "a/b/c"), 0o755))
	must(t, "write", os.WriteFile(filepath.Join(g.ExportDir, "a/b/c/f"), []byte("deep"), 0o644))
	seen := &v41calls{}
	srv, exp := mountV41(t, g, seen)
	if calls := seen.take(); fmt.Sprint(calls) != "[MOUNT]" {
		t.Errorf("mounting sent %v, want one COMPOUND", calls)
	}
	var st syscall.Stat_t
	must(t, "stat export", syscall.Stat(g.ExportDir, &st))
	root := exp.RootAttrs[0].Attr
	if root.Type != proto.TypeDir || root.Fileid != st.Ino || !root.HasChange || exp.Rtmax == 0 || exp.Wtmax == 0 || exp.NameMax == 0 {
		t.Fatalf("export %+v root %+v (inode %d)", exp, root, st.Ino)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	c := &proto.Cred{}

	// A walk, one LOOKUP per call.
	dir := exp.Root
	for _, name := range []string{"a", "b", "c"} {
		l, err := srv.Lookup(ctx, c, dir, name)
		okStatus(t, "lookup "+name, err, l.Status)
		if !l.DirAttr.Present || !l.Attr.Present || l.Attr.Attr.Type != proto.TypeDir {
			t.Fatalf("lookup %s: %+v", name, l)
		}
		dir = append(proto.FH(nil), l.FH...)
	}
	l, err := srv.Lookup(ctx, c, dir, "f")
	okStatus(t, "lookup f", err, l.Status)
	if l.Attr.Attr.Size != 4 || l.Attr.Attr.Type != proto.TypeReg || l.Attr.Attr.Mode != 0o644 || l.Attr.Attr.UID != 0 {
		t.Fatalf("f: %+v", l.Attr.Attr)
	}
	l, err = srv.Lookup(ctx, c, dir, "nothing")
	if err != nil || !errors.Is(l.Status, syscall.ENOENT) || !l.DirAttr.Present {
		t.Fatalf("lookup of a missing name: %v %+v", err, l)
	}

	// Create, write, read back, commit.
	cr, err := srv.Create(ctx, c, exp.Root, "new", proto.CreateHow{Mode: proto.Guarded,
		Attrs: proto.SetAttrs{SetMode: true, Mode: 0o640}})
	okStatus(t, "create", err, cr.Status)
	// ganesha's change_info is not atomic: the pre-operation attributes
	// are the GETATTR's before the OPEN, whose change change_info's before
	// value matched (nobody else changed the directory).
	if !cr.FH.Present || !cr.Attr.Present || cr.Attr.Attr.Mode != 0o640 || !cr.DirWcc.Before.Present ||
		cr.DirWcc.Before.Attr.HasChange || cr.DirWcc.Atomic || !cr.DirWcc.After.Present ||
		cr.DirWcc.Before.Attr.Ctime != root.Ctime || cr.DirWcc.After.Attr.Change == root.Change {
		t.Fatalf("create: %+v (root before %+v)", cr, root)
	}
	f := append(proto.FH(nil), cr.FH.FH...)
	cr2, err := srv.Create(ctx, c, exp.Root, "new", proto.CreateHow{Mode: proto.Guarded})
	if err != nil || !errors.Is(cr2.Status, syscall.EEXIST) {
		t.Fatalf("guarded create of an existing name: %v %+v", err, cr2.Status)
	}
	data := []byte(strings.Repeat("hushfs over v4.1 ", 1000))
	w, err := srv.Write(ctx, c, f, 0, data, proto.Unstable)
	okStatus(t, "write", err, w.Status)
	if w.Count != uint32(len(data)) || !w.Wcc.After.Present || w.Wcc.After.Attr.Size != uint64(len(data)) {
		t.Fatalf("write: %+v", w)
	}
	cm, err := srv.Commit(ctx, c, f, 0, 0)
	okStatus(t, "commit", err, cm.Status)
	if cm.Verf != w.Verf {
		t.Errorf("commit verifier %x, write's %x", cm.Verf, w.Verf)
	}
	buf := make([]byte, len(data)+10)
	rd, err := srv.Read(ctx, c, f, 0, buf)
	okStatus(t, "read", err, rd.Status)
	if rd.N != len(data) || !rd.EOF || string(buf[:rd.N]) != string(data) {
		t.Fatalf("read %d bytes eof %v", rd.N, rd.EOF)
	}
	sameBytes(t, "file on the server", readFile(t, filepath.Join(g.ExportDir, "new")), data)

	// SETATTR: chmod, truncate, times.
	sa, err := srv.SetAttr(ctx, c, f, proto.SetAttrs{SetMode: true, Mode: 0o600, SetSize: true, Size: 5,
		Mtime: proto.SetTime{How: proto.SetToClientTime, Time: proto.Time{Sec: 1234567890, Nsec: 5}},
		Atime: proto.SetTime{How: proto.SetToClientTime, Time: proto.Time{Sec: 1000000000}}})
	okStatus(t, "setattr", err, sa.Status)
	a := sa.Wcc.After.Attr
	if !sa.Wcc.Before.Present || a.Mode != 0o600 || a.Size != 5 || a.Mtime != (proto.Time{Sec: 1234567890, Nsec: 5}) || a.Atime.Sec != 1000000000 {
		t.Fatalf("setattr: %+v", sa.Wcc)
	}
	must(t, "stat new", syscall.Stat(filepath.Join(g.ExportDir, "new"), &st))
	if st.Size != 5 || st.Mode&0o7777 != 0o600 || st.Mtim.Sec != 1234567890 {
		t.Fatalf("on the server: size %d mode %o mtime %d", st.Size, st.Mode, st.Mtim.Sec)
	}
	ga, err := srv.GetAttr(ctx, c, f)
	okStatus(t, "getattr", err, ga.Status)
	if ga.Attr.Fileid != st.Ino || ga.Attr.Nlink != 1 || ga.Attr.Size != 5 {
		t.Fatalf("getattr %+v", ga.Attr)
	}
	ac, err := srv.Access(ctx, c, f, proto.AccessRead|proto.AccessModify|proto.AccessExecute)
	okStatus(t, "access", err, ac.Status)
	if ac.Access&(proto.AccessRead|proto.AccessModify) != proto.AccessRead|proto.AccessModify || !ac.Attr.Present {
		t.Fatalf("access %+v", ac)
	}

	// mkdir, symlink, readlink, link, rename, remove, rmdir.
	md, err := srv.Mkdir(ctx, c, exp.Root, "d", proto.SetAttrs{SetMode: true, Mode: 0o750})
	okStatus(t, "mkdir", err, md.Status)
	if md.Attr.Attr.Type != proto.TypeDir || md.Attr.Attr.Mode != 0o750 || !md.DirWcc.After.Present {
		t.Fatalf("mkdir %+v", md)
	}
	d := append(proto.FH(nil), md.FH.FH...)
	sl, err := srv.Symlink(ctx, c, d, "s", "../new", proto.SetAttrs{})
	okStatus(t, "symlink", err, sl.Status)
	rl, err := srv.Readlink(ctx, c, sl.FH.FH)
	okStatus(t, "readlink", err, rl.Status)
	if string(rl.Target) != "../new" || rl.Attr.Attr.Type != proto.TypeLnk {
		t.Fatalf("readlink %q %+v", rl.Target, rl.Attr)
	}
	ln, err := srv.Link(ctx, c, f, d, "hard")
	okStatus(t, "link", err, ln.Status)
	if ln.Attr.Attr.Nlink != 2 || !ln.DirWcc.After.Present {
		t.Fatalf("link %+v", ln)
	}
	rn, err := srv.Rename(ctx, c, d, "hard", exp.Root, "moved")
	okStatus(t, "rename", err, rn.Status)
	if !rn.FromDirWcc.After.Present || !rn.ToDirWcc.After.Present || rn.FromDirWcc.After.Attr.Fileid == rn.ToDirWcc.After.Attr.Fileid {
		t.Fatalf("rename %+v", rn)
	}
	if _, err := os.Lstat(filepath.Join(g.ExportDir, "moved")); err != nil {
		t.Fatalf("renamed: %v", err)
	}
	rm, err := srv.Rmdir(ctx, c, exp.Root, "d")
	if err != nil || !errors.Is(rm.Status, syscall.ENOTEMPTY) {
		t.Fatalf("rmdir of a full directory: %v %v", err, rm.Status)
	}
	rm, err = srv.Rmdir(ctx, c, exp.Root, "moved")
	if err != nil || !errors.Is(rm.Status, syscall.ENOTDIR) {
		t.Fatalf("rmdir of a file: %v %v", err, rm.Status)
	}
	rm, err = srv.Remove(ctx, c, exp.Root, "d")
	if err != nil || !errors.Is(rm.Status, syscall.EISDIR) {
		t.Fatalf("remove of a directory: %v %v", err, rm.Status)
	}
	rm, err = srv.Remove(ctx, c, exp.Root, "nothing")
	if err != nil || !errors.Is(rm.Status, syscall.ENOENT) {
		t.Fatalf("remove of a missing name: %v %v", err, rm.Status)
	}
	rm, err = srv.Remove(ctx, c, d, "s")
	okStatus(t, "remove", err, rm.Status)
	if !rm.DirWcc.Before.Present || !rm.DirWcc.After.Present {
		t.Fatalf("remove %+v", rm)
	}
	rm, err = srv.Rmdir(ctx, c, exp.Root, "d")
	okStatus(t, "rmdir", err, rm.Status)
	if _, err := os.Lstat(filepath.Join(g.ExportDir, "d")); !os.IsNotExist(err) {
		t.Fatalf("removed directory: %v", err)
	}

	// Another user: EACCES writing a file of root's, mode 0600.
	other := &proto.Cred{UID: 1000, GID: 1000}
	w, err = srv.Write(ctx, other, f, 0, []byte("x"), proto.FileSync)
	if err != nil || !errors.Is(w.Status, syscall.EACCES) {
		t.Fatalf("write as another user: %v %v", err, w.Status)
	}

	fsst, err := srv.FsStat(ctx, c, exp.Root)
	okStatus(t, "fsstat", err, fsst.Status)
	if fsst.Tbytes == 0 || fsst.Tfiles == 0 {
		t.Fatalf("fsstat %+v", fsst)
	}
	pc, err := srv.PathConf(ctx, c, exp.Root)
	okStatus(t, "pathconf", err, pc.Status)
	fi, err := srv.FsInfo(ctx, c, exp.Root)
	okStatus(t, "fsinfo", err, fi.Status)
	t.Logf("name_max %d link_max %d rtmax %d wtmax %d maxfilesize %d", pc.NameMax, pc.LinkMax, fi.Rtmax, fi.Wtmax, fi.MaxFileSize)

	seen.take()
	seen.mu.Lock()
	seen.mu.Unlock()
	// One COMPOUND per method.
	srv.GetAttr(ctx, c, f)
	srv.Lookup(ctx, c, exp.Root, "new")
	srv.Read(ctx, c, f, 0, buf)
	if calls := seen.take(); fmt.Sprint(calls) != "[GETATTR LOOKUP READ]" {
		t.Errorf("calls %v", calls)
	}
}

// TestNFSv41ReaddirGanesha lists 1,000 entries over NFSv4.1 in pages, with
// READDIR (names and fileids) and READDIRPLUS (attributes and handles),
// and checks each against the local file system.
func TestNFSv41ReaddirGanesha(t *testing.T) {
	g := harness.StartGanesha(t, harness.GaneshaOptions{NFSv4: true})
	big := filepath.Join(g.ExportDir, "big")
	must(t, "mkdir", os.Mkdir(big, 0o755))
	want := map[string]syscall.Stat_t{}
	for i := 0; i < 1000; i++ {
		name := fmt.Sprintf("entry-%04d", i)
		p := filepath.Join(big, name)
		if i%10 == 0 {
			must(t, "mkdir", os.Mkdir(p, 0o700))
		} else {
			must(t, "write", os.WriteFile(p, []byte(strings.Repeat("x", i)), 0o644))
		}
		var st syscall.Stat_t
		must(t, "stat", syscall.Lstat(p, &st))
		want[name] = st
	}
	var bigSt, rootSt syscall.Stat_t
	must(t, "stat", syscall.Lstat(big, &bigSt))
	must(t, "stat", syscall.Lstat(g.ExportDir, &rootSt))
	seen := &v41calls{}
	srv, exp := mountV41(t, g, seen)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	c := &proto.Cred{}
	l, err := srv.Lookup(ctx, c, exp.Root, "big")
	okStatus(t, "lookup big", err, l.Status)

	// Read on from "." and from "..": ".." and then the server's entries
	// from its start; the server's entries.
	for _, from := range []uint64{1, 2} {
		res, err := srv.ReadDir(ctx, c, proto.ReadDirArgs{Dir: l.FH, Cookie: from, Count: 1024, MaxCount: 1024})
		okStatus(t, "readdir from a dot", err, res.Status)
		names := []string{}
		for _, e := range res.Entries[:3] {
			names = append(names, string(e.Name))
		}
		if _, ok := want[names[2]]; !ok || (from == 1) != (names[0] == "..") || (from == 2) != (names[0] != "..") {
			t.Fatalf("listing from cookie %d begins %q", from, names)
		}
	}
	// At the export's root, ".." is the root itself.
	res, err := srv.ReadDir(ctx, c, proto.ReadDirArgs{Dir: exp.Root, Count: 1024, MaxCount: 1024})
	okStatus(t, "readdir of the root", err, res.Status)
	if len(res.Entries) < 2 || string(res.Entries[1].Name) != ".." || res.Entries[1].Fileid != rootSt.Ino || res.Entries[0].Fileid != rootSt.Ino {
		t.Fatalf("the root's listing begins %+v", res.Entries[:min(2, len(res.Entries))])
	}

	for _, plus := range []bool{false, true} {
		seen.take()
		got := map[string]bool{}
		a := proto.ReadDirArgs{Dir: l.FH, Count: 8192, MaxCount: 32768}
		pages := 0
		for {
			var res proto.ReadDirRes
			if plus {
				res, err = srv.ReadDirPlus(ctx, c, a)
			} else {
				res, err = srv.ReadDir(ctx, c, a)
			}
			okStatus(t, "readdir", err, res.Status)
			pages++
			for i, e := range res.Entries {
				name := string(e.Name)
				if pages == 1 && i < 2 {
					// The listing begins with "." and "..", which v4 servers
					// do not send: the directory and its parent.
					dot := [2]string{".", ".."}[i]
					ino := [2]uint64{bigSt.Ino, rootSt.Ino}[i]
					if name != dot || e.Cookie != uint64(i+1) || e.Fileid != ino || e.Attr.Present || e.FH.Present {
						t.Fatalf("entry %d: %q cookie %d fileid %d, want %q cookie %d fileid %d, no attributes", i, name, e.Cookie, e.Fileid, dot, i+1, ino)
					}
					a.Cookie = e.Cookie
					continue
				}
				st, ok := want[name]
				if !ok || got[name] {
					t.Fatalf("entry %q: unknown or seen twice", name)
				}
				got[name] = true
				if e.Fileid != st.Ino {
					t.Fatalf("%s: fileid %d, inode %d", name, e.Fileid, st.Ino)
				}
				if plus {
					at := e.Attr.Attr
					if !e.Attr.Present || !e.FH.Present || at.Size != uint64(st.Size) || at.Mode != st.Mode&0o7777 ||
						at.Nlink != uint32(st.Nlink) || at.Mtime.Sec != st.Mtim.Sec || !at.HasChange || at.Fileid != st.Ino {
						t.Fatalf("%s: %+v, local %+v", name, e, st)
					}
				}
				a.Cookie = e.Cookie
			}
			a.Verf = res.Verf
			if res.EOF {
				break
			}
			if len(res.Entries) == 0 {
				t.Fatal("a page with no entries and no EOF")
			}
		}
		if len(got) != len(want) {
			names := make([]string, 0)
			for n := range want {
				if !got[n] {
					names = append(names, n)
				}
			}
			sort.Strings(names)
			t.Fatalf("plus %v: %d of %d entries; missing %v", plus, len(got), len(want), names)
		}
		calls := seen.take()
		t.Logf("plus %v: %d entries in %d pages, %d calls", plus, len(got), pages, len(calls))
		if len(calls) != pages {
			t.Errorf("%d calls for %d pages", len(calls), pages)
		}
	}
}

// TestNFSv41RemoveUnreadableType removes a device whose type ganesha can
// no longer read (FSAL VFS answers INVAL for a device once the name it
// first saw is gone): unlink checks the type in its COMPOUND, and when the
// server cannot tell it, removes the name without the check; rmdir never
// removes what it could not see to be a directory.
func TestNFSv41RemoveUnreadableType(t *testing.T) {
	g := harness.StartGanesha(t, harness.GaneshaOptions{NFSv4: true})
	must(t, "mkdir", os.Mkdir(filepath.Join(g.ExportDir, "d"), 0o755))
	seen := &v41calls{}
	srv, exp := mountV41(t, g, seen)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	c := &proto.Cred{}
	l, err := srv.Lookup(ctx, c, exp.Root, "d")
	okStatus(t, "lookup d", err, l.Status)
	for _, name := range []string{"a", "c"} {
		cr, err := srv.Mknod(ctx, c, l.FH, name, proto.TypeChr, proto.SetAttrs{SetMode: true, Mode: 0o644}, proto.Device{Major: 1, Minor: 2})
		okStatus(t, "mknod", err, cr.Status)
		ln, err := srv.Link(ctx, c, cr.FH.FH, l.FH, name+"2")
		okStatus(t, "link", err, ln.Status)
		rm, err := srv.Remove(ctx, c, l.FH, name)
		okStatus(t, "remove the first name", err, rm.Status)
		if ga, err := srv.GetAttr(ctx, c, cr.FH.FH); err != nil || ga.Status == nil {
			t.Fatalf("ganesha reads the device's attributes again (%v, %v): this test no longer tests anything", err, ga.Status)
		}
	}
	seen.take()
	rm, err := srv.Remove(ctx, c, l.FH, "a2")
	okStatus(t, "unlink of the device left", err, rm.Status)
	if calls := seen.take(); fmt.Sprint(calls) != "[REMOVE REMOVE]" {
		t.Errorf("calls %v, want the checked REMOVE and the unchecked one", calls)
	}
	if _, err := os.Lstat(filepath.Join(g.ExportDir, "d", "a2")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("after unlink the server holds a2: %v", err)
	}
	rd, err := srv.Rmdir(ctx, c, l.FH, "c2")
	if err != nil || rd.Status == nil {
		t.Errorf("rmdir of a device: %v, %v; want a failure", err, rd.Status)
	}
	if _, err := os.Lstat(filepath.Join(g.ExportDir, "d", "c2")); err != nil {
		t.Errorf("rmdir of a device removed it: %v", err)
	}
}
