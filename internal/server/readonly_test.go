package server

import (
	"os"
	"path/filepath"
	"testing"

	"hushfs/internal/nfs3"
)

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
