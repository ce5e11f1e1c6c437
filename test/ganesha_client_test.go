package test

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"hushfs/internal/nfs3"
	"hushfs/internal/rpc"
	"hushfs/test/harness"
)

// TestGaneshaClient drives every NFSv3 procedure of our client half (rpc +
// nfs3 codecs) against nfs-ganesha, a server written by others, and checks
// each result against the exported directory as the local file system sees
// it.
func TestGaneshaClient(t *testing.T) {
	g := harness.StartGanesha(t, harness.GaneshaOptions{})
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()

	t.Run("portmap", func(t *testing.T) {
		pc := newClient(t, ctx, g.DialRPCBind)
		for _, p := range []struct {
			prog, vers uint32
			want       int
		}{{nfs3.Program, nfs3.Version, g.NFSPort}, {nfs3.MountProgram, nfs3.MountVersion, g.MountPort}} {
			port, err := rpc.GetPort(ctx, pc, p.prog, p.vers, rpc.IPProtoTCP)
			if err != nil {
				t.Fatalf("GETPORT %d/%d: %v", p.prog, p.vers, err)
			}
			if port != p.want {
				t.Errorf("GETPORT %d/%d = %d, want %d", p.prog, p.vers, port, p.want)
			}
		}
		// NLM is disabled in the harness's configuration: not registered.
		if port, err := rpc.GetPort(ctx, pc, 100021, 4, rpc.IPProtoTCP); err == nil {
			t.Errorf("GETPORT of unregistered NLM = %d, want an error", port)
		}
		// Nothing registers UDP (Enable_UDP = false).
		if port, err := rpc.GetPort(ctx, pc, nfs3.Program, nfs3.Version, rpc.IPProtoUDP); err == nil {
			t.Errorf("GETPORT NFS over UDP = %d, want an error", port)
		}
	})

	mc := newClient(t, ctx, g.DialMount)
	root := mountRoot(t, ctx, mc, g.ExportPath)
	t.Run("MNT unknown path", func(t *testing.T) {
		var res nfs3.MntRes
		args := nfs3.MntArgs{Path: []byte("/not-exported")}
		if err := mc.Call(ctx, nfs3.MountProgram, nfs3.MountVersion, nfs3.MountProcMnt, rootCred, &args, &res); err != nil {
			t.Fatalf("MNT: %v", err)
		}
		if res.Status == nfs3.MntOK {
			t.Errorf("MNT of a path that is not exported succeeded")
		}
		t.Logf("ganesha: MNT of an unexported path -> %v", res.Status)
	})
	n := &nfsc{t: t, ctx: ctx, c: newClient(t, ctx, g.Dial)}
	dir := g.ExportDir

	// Procedures that take a subtest's *testing.T use their own nfsc so a
	// failure is reported where it happens.
	sub := func(t *testing.T) *nfsc { return &nfsc{t: t, ctx: ctx, c: n.c} }

	t.Run("GETATTR", func(t *testing.T) {
		n := sub(t)
		res := n.getattr(root)
		if res.Status != nfs3.OK {
			t.Fatalf("GETATTR root: %v", res.Status)
		}
		checkAttr(t, "root", &res.Attr, dir)
	})

	// A file made directly in the exported directory: the server has to
	// notice it (attributes are not cached).
	hello := []byte("hello, ganesha\n")
	if err := os.WriteFile(filepath.Join(dir, "hello.txt"), hello, 0o644); err != nil {
		t.Fatal(err)
	}

	t.Run("LOOKUP+READ", func(t *testing.T) {
		n := sub(t)
		fh, attr := n.lookup(root, "hello.txt")
		checkAttr(t, "hello.txt", &attr, filepath.Join(dir, "hello.txt"))
		if got := n.readAll(fh, 4); !bytes.Equal(got, hello) {
			t.Errorf("READ = %q, want %q", got, hello)
		}
		var res nfs3.ReadRes
		n.call(nfs3.ProcRead, &nfs3.ReadArgs{File: fh, Offset: 2, Count: 3}, &res)
		if res.Status != nfs3.OK || string(res.Data) != "llo" || res.EOF {
			t.Errorf("READ 2+3 = %v %q eof=%v, want OK \"llo\" eof=false", res.Status, res.Data, res.EOF)
		}
		n.call(nfs3.ProcRead, &nfs3.ReadArgs{File: fh, Offset: 1000, Count: 10}, &res)
		if res.Status != nfs3.OK || res.Count != 0 || !res.EOF {
			t.Errorf("READ past end = %v count=%d eof=%v, want OK 0 true", res.Status, res.Count, res.EOF)
		}
	})

	t.Run("ACCESS", func(t *testing.T) {
		n := sub(t)
		fh, _ := n.lookup(root, "hello.txt")
		all := uint32(nfs3.AccessRead | nfs3.AccessLookup | nfs3.AccessModify | nfs3.AccessExtend |
			nfs3.AccessDelete | nfs3.AccessExecute)
		var res nfs3.AccessRes
		n.call(nfs3.ProcAccess, &nfs3.AccessArgs{Obj: fh, Access: all}, &res)
		if res.Status != nfs3.OK {
			t.Fatalf("ACCESS: %v", res.Status)
		}
		if res.Access&^all != 0 {
			t.Errorf("ACCESS granted %#x, more than the %#x asked", res.Access, all)
		}
		// Root on a 0644 file: read and write, but no execute bit is set.
		want := uint32(nfs3.AccessRead | nfs3.AccessModify | nfs3.AccessExtend)
		if res.Access&want != want || res.Access&nfs3.AccessExecute != 0 {
			t.Errorf("ACCESS on 0644 file = %#x, want %#x set and EXECUTE clear", res.Access, want)
		}
		n.call(nfs3.ProcAccess, &nfs3.AccessArgs{Obj: root, Access: nfs3.AccessLookup | nfs3.AccessRead}, &res)
		if res.Status != nfs3.OK || res.Access != nfs3.AccessLookup|nfs3.AccessRead {
			t.Errorf("ACCESS on root dir = %v %#x, want LOOKUP|READ", res.Status, res.Access)
		}
	})

	t.Run("CREATE+WRITE+COMMIT", func(t *testing.T) {
		n := sub(t)
		var cres nfs3.CreateRes
		n.call(nfs3.ProcCreate, &nfs3.CreateArgs{
			Where: nfs3.DirOpArgs{Dir: root, Name: []byte("w.bin")}, Mode: nfs3.Unchecked,
			Attr: nfs3.Sattr{SetMode: true, Mode: 0o640},
		}, &cres)
		if cres.Status != nfs3.OK || !cres.Obj.Present {
			t.Fatalf("CREATE UNCHECKED: %v handle=%v", cres.Status, cres.Obj.Present)
		}
		fh := cres.Obj.FH
		st := lstat(t, filepath.Join(dir, "w.bin"))
		if st.Mode&0o7777 != 0o640 || st.Mode&syscall.S_IFMT != syscall.S_IFREG {
			t.Errorf("created file mode %o, want regular 0640", st.Mode)
		}
		if cres.ObjAttr.Present && cres.ObjAttr.Attr.Fileid != st.Ino {
			t.Errorf("CREATE attrs fileid %d, inode %d", cres.ObjAttr.Attr.Fileid, st.Ino)
		}

		// Three UNSTABLE writes, out of order; then COMMIT. Every verifier
		// must be the same while the server does not restart.
		data := make([]byte, 3*65536)
		for i := range data {
			data[i] = byte(i*7 + i>>9)
		}
		var verf nfs3.Verf
		for k, off := range []int{65536, 0, 131072} {
			var wres nfs3.WriteRes
			chunk := data[off : off+65536]
			n.call(nfs3.ProcWrite, &nfs3.WriteArgs{File: fh, Offset: uint64(off), Count: uint32(len(chunk)),
				Stable: nfs3.Unstable, Data: chunk}, &wres)
			if wres.Status != nfs3.OK || wres.Count != uint32(len(chunk)) {
				t.Fatalf("WRITE at %d: %v count %d", off, wres.Status, wres.Count)
			}
			if k == 0 {
				verf = wres.Verf
			} else if wres.Verf != verf {
				t.Errorf("WRITE at %d: verifier %x, earlier %x", off, wres.Verf, verf)
			}
		}
		var comm nfs3.CommitRes
		n.call(nfs3.ProcCommit, &nfs3.CommitArgs{File: fh}, &comm)
		if comm.Status != nfs3.OK {
			t.Fatalf("COMMIT: %v", comm.Status)
		}
		if comm.Verf != verf {
			t.Errorf("COMMIT verifier %x, WRITE verifier %x", comm.Verf, verf)
		}
		if comm.Wcc.After.Present && comm.Wcc.After.Attr.Size != uint64(len(data)) {
			t.Errorf("COMMIT post-op size %d, want %d", comm.Wcc.After.Attr.Size, len(data))
		}
		got, err := os.ReadFile(filepath.Join(dir, "w.bin"))
		if err != nil || !bytes.Equal(got, data) {
			t.Errorf("file on disk after COMMIT: %d bytes, equal=%v, err=%v", len(got), bytes.Equal(got, data), err)
		}
		if got := n.readAll(fh, 32768); !bytes.Equal(got, data) {
			t.Errorf("READ back %d bytes, not what was written", len(got))
		}

		// UNCHECKED on an existing file succeeds and does not truncate.
		n.call(nfs3.ProcCreate, &nfs3.CreateArgs{Where: nfs3.DirOpArgs{Dir: root, Name: []byte("w.bin")},
			Mode: nfs3.Unchecked}, &cres)
		if cres.Status != nfs3.OK {
			t.Errorf("CREATE UNCHECKED existing: %v", cres.Status)
		}
		if sz := lstat(t, filepath.Join(dir, "w.bin")).Size; sz != int64(len(data)) {
			t.Errorf("CREATE UNCHECKED without size changed the size to %d", sz)
		}
		// GUARDED on an existing name fails.
		n.call(nfs3.ProcCreate, &nfs3.CreateArgs{Where: nfs3.DirOpArgs{Dir: root, Name: []byte("w.bin")},
			Mode: nfs3.Guarded}, &cres)
		if cres.Status != nfs3.ErrExist {
			t.Errorf("CREATE GUARDED existing: %v, want NFS3ERR_EXIST", cres.Status)
		}
	})

	t.Run("CREATE EXCLUSIVE", func(t *testing.T) {
		n := sub(t)
		v1 := nfs3.Verf{1, 2, 3, 4, 5, 6, 7, 8}
		ex := func(v nfs3.Verf) nfs3.CreateRes {
			var res nfs3.CreateRes
			n.call(nfs3.ProcCreate, &nfs3.CreateArgs{Where: nfs3.DirOpArgs{Dir: root, Name: []byte("excl")},
				Mode: nfs3.Exclusive, Verf: v}, &res)
			return res
		}
		first := ex(v1)
		if first.Status != nfs3.OK {
			t.Fatalf("CREATE EXCLUSIVE: %v", first.Status)
		}
		ino := lstat(t, filepath.Join(dir, "excl")).Ino
		// A retransmission (same verifier) succeeds on the same file...
		again := ex(v1)
		if again.Status != nfs3.OK {
			t.Errorf("CREATE EXCLUSIVE retransmitted: %v, want OK", again.Status)
		} else if fid := fileidOf(n, again); fid != ino {
			t.Errorf("CREATE EXCLUSIVE retransmitted: fileid %d, first created inode %d", fid, ino)
		}
		// ...another client's attempt (other verifier) does not.
		if other := ex(nfs3.Verf{9, 9, 9, 9, 9, 9, 9, 9}); other.Status != nfs3.ErrExist {
			t.Errorf("CREATE EXCLUSIVE other verifier: %v, want NFS3ERR_EXIST", other.Status)
		}
	})

	t.Run("SETATTR", func(t *testing.T) {
		n := sub(t)
		fh, attr := n.lookup(root, "w.bin")
		var res nfs3.SetattrRes
		mtime := nfs3.Time{Seconds: 1_000_000_000, Nseconds: 0}
		n.call(nfs3.ProcSetattr, &nfs3.SetattrArgs{Obj: fh, Attr: nfs3.Sattr{
			SetMode: true, Mode: 0o600, SetSize: true, Size: 10,
			Mtime: nfs3.SetTime{How: nfs3.SetToClientTime, Time: mtime},
		}}, &res)
		if res.Status != nfs3.OK {
			t.Fatalf("SETATTR: %v", res.Status)
		}
		st := lstat(t, filepath.Join(dir, "w.bin"))
		if st.Size != 10 || st.Mode&0o7777 != 0o600 || st.Mtim.Sec != int64(mtime.Seconds) {
			t.Errorf("after SETATTR: size %d mode %o mtime %d, want 10 0600 %d", st.Size, st.Mode&0o7777,
				st.Mtim.Sec, mtime.Seconds)
		}
		if !res.Wcc.After.Present || res.Wcc.After.Attr.Size != 10 {
			t.Errorf("SETATTR post-op attributes %+v, want size 10", res.Wcc.After)
		}
		// A guard with a stale ctime is refused and changes nothing.
		n.call(nfs3.ProcSetattr, &nfs3.SetattrArgs{Obj: fh, Attr: nfs3.Sattr{SetSize: true, Size: 1},
			Guard: true, GuardCtime: attr.Ctime}, &res)
		if res.Status != nfs3.ErrNotSync {
			t.Errorf("SETATTR with stale guard: %v, want NFS3ERR_NOT_SYNC", res.Status)
		}
		if sz := lstat(t, filepath.Join(dir, "w.bin")).Size; sz != 10 {
			t.Errorf("refused SETATTR changed size to %d", sz)
		}
	})

	t.Run("MKDIR+SYMLINK+MKNOD+READLINK", func(t *testing.T) {
		n := sub(t)
		var res nfs3.MkdirRes
		n.call(nfs3.ProcMkdir, &nfs3.MkdirArgs{Where: nfs3.DirOpArgs{Dir: root, Name: []byte("sub")},
			Attr: nfs3.Sattr{SetMode: true, Mode: 0o750}}, &res)
		if res.Status != nfs3.OK || !res.Obj.Present {
			t.Fatalf("MKDIR: %v", res.Status)
		}
		if st := lstat(t, filepath.Join(dir, "sub")); st.Mode&syscall.S_IFMT != syscall.S_IFDIR || st.Mode&0o7777 != 0o750 {
			t.Errorf("made directory mode %o, want dir 0750", st.Mode)
		}
		n.call(nfs3.ProcMkdir, &nfs3.MkdirArgs{Where: nfs3.DirOpArgs{Dir: root, Name: []byte("sub")}}, &res)
		if res.Status != nfs3.ErrExist {
			t.Errorf("MKDIR existing: %v, want NFS3ERR_EXIST", res.Status)
		}

		// Symlink targets are opaque bytes, not UTF-8.
		target := []byte("../no/such\xff\xfetarget")
		var sres nfs3.SymlinkRes
		n.call(nfs3.ProcSymlink, &nfs3.SymlinkArgs{Where: nfs3.DirOpArgs{Dir: root, Name: []byte("ln")},
			Data: target}, &sres)
		if sres.Status != nfs3.OK || !sres.Obj.Present {
			t.Fatalf("SYMLINK: %v", sres.Status)
		}
		if got, err := os.Readlink(filepath.Join(dir, "ln")); err != nil || got != string(target) {
			t.Errorf("symlink on disk = %q, %v; want %q", got, err, target)
		}
		var rl nfs3.ReadlinkRes
		n.call(nfs3.ProcReadlink, &nfs3.ReadlinkArgs{Symlink: sres.Obj.FH}, &rl)
		if rl.Status != nfs3.OK || !bytes.Equal(rl.Data, target) {
			t.Errorf("READLINK = %v %q, want %q", rl.Status, rl.Data, target)
		}
		// READLINK of a regular file is NFS3ERR_INVAL (RFC 1813 §2.6).
		fh, _ := n.lookup(root, "hello.txt")
		n.call(nfs3.ProcReadlink, &nfs3.ReadlinkArgs{Symlink: fh}, &rl)
		if rl.Status != nfs3.ErrInval {
			t.Errorf("READLINK of a file: %v, want NFS3ERR_INVAL", rl.Status)
		}

		var mres nfs3.MknodRes
		n.call(nfs3.ProcMknod, &nfs3.MknodArgs{Where: nfs3.DirOpArgs{Dir: root, Name: []byte("fifo")},
			Type: nfs3.TypeFifo, Attr: nfs3.Sattr{SetMode: true, Mode: 0o600}}, &mres)
		if mres.Status != nfs3.OK {
			t.Fatalf("MKNOD fifo: %v", mres.Status)
		}
		if st := lstat(t, filepath.Join(dir, "fifo")); st.Mode&syscall.S_IFMT != syscall.S_IFIFO {
			t.Errorf("MKNOD made mode %o, want a fifo", st.Mode)
		}
		if mres.ObjAttr.Present && mres.ObjAttr.Attr.Type != nfs3.TypeFifo {
			t.Errorf("MKNOD attributes type %d, want FIFO", mres.ObjAttr.Attr.Type)
		}
	})

	t.Run("LINK+RENAME+REMOVE+RMDIR", func(t *testing.T) {
		n := sub(t)
		fh, _ := n.lookup(root, "w.bin")
		subFH, _ := n.lookup(root, "sub")
		var lres nfs3.LinkRes
		n.call(nfs3.ProcLink, &nfs3.LinkArgs{File: fh, Link: nfs3.DirOpArgs{Dir: root, Name: []byte("w2.bin")}}, &lres)
		if lres.Status != nfs3.OK {
			t.Fatalf("LINK: %v", lres.Status)
		}
		if lres.FileAttr.Present && lres.FileAttr.Attr.Nlink != 2 {
			t.Errorf("LINK post-op nlink %d, want 2", lres.FileAttr.Attr.Nlink)
		}
		if a, b := lstat(t, filepath.Join(dir, "w.bin")), lstat(t, filepath.Join(dir, "w2.bin")); a.Ino != b.Ino {
			t.Errorf("hard link has inode %d, original %d", b.Ino, a.Ino)
		}
		// A directory cannot be hard-linked.
		n.call(nfs3.ProcLink, &nfs3.LinkArgs{File: subFH, Link: nfs3.DirOpArgs{Dir: root, Name: []byte("sublink")}}, &lres)
		if lres.Status == nfs3.OK {
			t.Errorf("LINK of a directory succeeded")
		}

		var rres nfs3.RenameRes
		n.call(nfs3.ProcRename, &nfs3.RenameArgs{From: nfs3.DirOpArgs{Dir: root, Name: []byte("w2.bin")},
			To: nfs3.DirOpArgs{Dir: subFH, Name: []byte("w3.bin")}}, &rres)
		if rres.Status != nfs3.OK {
			t.Fatalf("RENAME: %v", rres.Status)
		}
		if _, err := os.Lstat(filepath.Join(dir, "w2.bin")); !os.IsNotExist(err) {
			t.Errorf("RENAME source still there: %v", err)
		}
		lstat(t, filepath.Join(dir, "sub", "w3.bin"))
		n.call(nfs3.ProcRename, &nfs3.RenameArgs{From: nfs3.DirOpArgs{Dir: root, Name: []byte("nope")},
			To: nfs3.DirOpArgs{Dir: root, Name: []byte("nope2")}}, &rres)
		if rres.Status != nfs3.ErrNoEnt {
			t.Errorf("RENAME of a missing name: %v, want NFS3ERR_NOENT", rres.Status)
		}

		var rm nfs3.RmdirRes
		n.call(nfs3.ProcRmdir, &nfs3.RmdirArgs{Obj: nfs3.DirOpArgs{Dir: root, Name: []byte("sub")}}, &rm)
		if rm.Status != nfs3.ErrNotEmpty {
			t.Errorf("RMDIR of a non-empty directory: %v, want NFS3ERR_NOTEMPTY", rm.Status)
		}
		var rem nfs3.RemoveRes
		n.call(nfs3.ProcRemove, &nfs3.RemoveArgs{Obj: nfs3.DirOpArgs{Dir: subFH, Name: []byte("w3.bin")}}, &rem)
		if rem.Status != nfs3.OK {
			t.Fatalf("REMOVE: %v", rem.Status)
		}
		if _, err := os.Lstat(filepath.Join(dir, "sub", "w3.bin")); !os.IsNotExist(err) {
			t.Errorf("REMOVE left the file: %v", err)
		}
		n.call(nfs3.ProcRemove, &nfs3.RemoveArgs{Obj: nfs3.DirOpArgs{Dir: subFH, Name: []byte("w3.bin")}}, &rem)
		if rem.Status != nfs3.ErrNoEnt {
			t.Errorf("REMOVE again: %v, want NFS3ERR_NOENT", rem.Status)
		}
		n.call(nfs3.ProcRmdir, &nfs3.RmdirArgs{Obj: nfs3.DirOpArgs{Dir: root, Name: []byte("sub")}}, &rm)
		if rm.Status != nfs3.OK {
			t.Fatalf("RMDIR: %v", rm.Status)
		}
		if _, err := os.Lstat(filepath.Join(dir, "sub")); !os.IsNotExist(err) {
			t.Errorf("RMDIR left the directory: %v", err)
		}
		// The removed directory's handle is stale now. RFC 1813 lists only
		// NFS3ERR_STALE (and BADHANDLE for a malformed one) among GETATTR's
		// errors for this; ganesha answers STALE.
		if res := n.getattr(subFH); res.Status != nfs3.ErrStale {
			t.Errorf("GETATTR of removed directory: %v, want NFS3ERR_STALE", res.Status)
		}
	})

	t.Run("errors", func(t *testing.T) {
		n := sub(t)
		fh, _ := n.lookup(root, "hello.txt")
		if res := n.lookupRes(root, "no-such-name"); res.Status != nfs3.ErrNoEnt {
			t.Errorf("LOOKUP missing: %v, want NFS3ERR_NOENT", res.Status)
		}
		if res := n.lookupRes(fh, "x"); res.Status != nfs3.ErrNotDir {
			t.Errorf("LOOKUP in a file: %v, want NFS3ERR_NOTDIR", res.Status)
		}
		var mres nfs3.MkdirRes
		n.call(nfs3.ProcMkdir, &nfs3.MkdirArgs{Where: nfs3.DirOpArgs{Dir: fh, Name: []byte("d")}}, &mres)
		if mres.Status != nfs3.ErrNotDir {
			t.Errorf("MKDIR in a file: %v, want NFS3ERR_NOTDIR", mres.Status)
		}
		// READ and WRITE of a directory: RFC 1813 defines NFS3ERR_ISDIR as
		// "a directory in a non-directory operation" but lists only INVAL
		// among READ's errors; either is a correct refusal.
		var rres nfs3.ReadRes
		n.call(nfs3.ProcRead, &nfs3.ReadArgs{File: root, Count: 10}, &rres)
		if !statusIn(rres.Status, nfs3.ErrIsDir, nfs3.ErrInval) {
			t.Errorf("READ of a directory: %v, want NFS3ERR_ISDIR or NFS3ERR_INVAL", rres.Status)
		}
		var wres nfs3.WriteRes
		n.call(nfs3.ProcWrite, &nfs3.WriteArgs{File: root, Count: 1, Stable: nfs3.FileSync, Data: []byte("x")}, &wres)
		if !statusIn(wres.Status, nfs3.ErrIsDir, nfs3.ErrInval) {
			t.Errorf("WRITE to a directory: %v, want NFS3ERR_ISDIR or NFS3ERR_INVAL", wres.Status)
		}
		t.Logf("ganesha: READ of a directory -> %v, WRITE to a directory -> %v", rres.Status, wres.Status)

		// A file removed behind the server's back: its handle is stale.
		p := filepath.Join(dir, "doomed")
		if err := os.WriteFile(p, []byte("x"), 0o644); err != nil {
			t.Fatal(err)
		}
		dfh, _ := n.lookup(root, "doomed")
		if err := os.Remove(p); err != nil {
			t.Fatal(err)
		}
		if res := n.getattr(dfh); res.Status != nfs3.ErrStale {
			t.Errorf("GETATTR of a file removed locally: %v, want NFS3ERR_STALE", res.Status)
		}
		n.call(nfs3.ProcRead, &nfs3.ReadArgs{File: dfh, Count: 1}, &rres)
		if rres.Status != nfs3.ErrStale {
			t.Errorf("READ of a file removed locally: %v, want NFS3ERR_STALE", rres.Status)
		}
		// A handle the server never issued.
		bogus := bytes.Repeat([]byte{0xa5}, len(fh))
		if res := n.getattr(bogus); !statusIn(res.Status, nfs3.ErrBadHandle, nfs3.ErrStale) {
			t.Errorf("GETATTR of a forged handle: %v, want NFS3ERR_BADHANDLE or NFS3ERR_STALE", res.Status)
		}
		// Unknown procedure: an RPC-level PROC_UNAVAIL, not an NFS status.
		err := n.c.Call(ctx, nfs3.Program, nfs3.Version, 22, rootCred, nil, nil)
		if !isAccept(err, rpc.ProcUnavail) {
			t.Errorf("procedure 22: %v, want PROC_UNAVAIL", err)
		}
	})

	t.Run("READDIR+READDIRPLUS", func(t *testing.T) {
		n := sub(t)
		const count = 500
		big := filepath.Join(dir, "many")
		if err := os.Mkdir(big, 0o755); err != nil {
			t.Fatal(err)
		}
		want := map[string]uint64{}
		for i := range count {
			name := fmt.Sprintf("entry-%03d-%s", i, bytes.Repeat([]byte{'x'}, i%40))
			p := filepath.Join(big, name)
			if err := os.WriteFile(p, nil, 0o644); err != nil {
				t.Fatal(err)
			}
			want[name] = lstat(t, p).Ino
		}
		bigFH, _ := n.lookup(root, "many")

		// Small count, so the listing takes many round trips.
		got := map[string]uint64{}
		var cookie uint64
		var verf nfs3.Verf
		calls := 0
		for {
			var res nfs3.ReaddirRes
			n.call(nfs3.ProcReaddir, &nfs3.ReaddirArgs{Dir: bigFH, Cookie: cookie, CookieVerf: verf, Count: 2048}, &res)
			if res.Status != nfs3.OK {
				t.Fatalf("READDIR at cookie %d: %v", cookie, res.Status)
			}
			calls++
			for _, e := range res.Entries {
				name := string(e.Name)
				if _, dup := got[name]; dup {
					t.Errorf("READDIR returned %q twice", name)
				}
				got[name] = e.Fileid
				cookie = e.Cookie
			}
			verf = res.CookieVerf
			if res.EOF {
				break
			}
			if len(res.Entries) == 0 || calls > 1000 {
				t.Fatalf("READDIR makes no progress at cookie %d", cookie)
			}
		}
		checkListing(t, "READDIR", got, want)
		if calls < 5 {
			t.Errorf("READDIR of %d entries with count 2048 took only %d calls", count, calls)
		}

		gotPlus := map[string]uint64{}
		cookie, verf, calls = 0, nfs3.Verf{}, 0
		var someFH nfs3.FH
		var someName string
		for {
			var res nfs3.ReaddirplusRes
			n.call(nfs3.ProcReaddirplus, &nfs3.ReaddirplusArgs{Dir: bigFH, Cookie: cookie, CookieVerf: verf,
				DirCount: 1024, MaxCount: 8192}, &res)
			if res.Status != nfs3.OK {
				t.Fatalf("READDIRPLUS at cookie %d: %v", cookie, res.Status)
			}
			calls++
			for _, e := range res.Entries {
				name := string(e.Name)
				if _, dup := gotPlus[name]; dup {
					t.Errorf("READDIRPLUS returned %q twice", name)
				}
				gotPlus[name] = e.Fileid
				cookie = e.Cookie
				if e.Attr.Present && e.Attr.Attr.Fileid != e.Fileid {
					t.Errorf("READDIRPLUS %q: attributes fileid %d, entry fileid %d", name, e.Attr.Attr.Fileid, e.Fileid)
				}
				if _, ok := want[name]; ok && e.FH.Present && someFH == nil {
					someFH, someName = e.FH.FH, name
				}
			}
			verf = res.CookieVerf
			if res.EOF {
				break
			}
			if len(res.Entries) == 0 || calls > 1000 {
				t.Fatalf("READDIRPLUS makes no progress at cookie %d", cookie)
			}
		}
		checkListing(t, "READDIRPLUS", gotPlus, want)
		if someFH == nil {
			t.Fatal("READDIRPLUS returned no handles")
		}
		// A handle from READDIRPLUS is as good as one from LOOKUP.
		if res := n.getattr(someFH); res.Status != nfs3.OK || res.Attr.Fileid != want[someName] {
			t.Errorf("GETATTR via READDIRPLUS handle of %q: %v fileid %d, want inode %d",
				someName, res.Status, res.Attr.Fileid, want[someName])
		}
	})

	t.Run("FSSTAT+FSINFO+PATHCONF", func(t *testing.T) {
		n := sub(t)
		var fs nfs3.FsstatRes
		n.call(nfs3.ProcFsstat, &nfs3.FsstatArgs{Root: root}, &fs)
		if fs.Status != nfs3.OK {
			t.Fatalf("FSSTAT: %v", fs.Status)
		}
		var sfs syscall.Statfs_t
		if err := syscall.Statfs(dir, &sfs); err != nil {
			t.Fatal(err)
		}
		total := sfs.Blocks * uint64(sfs.Bsize)
		if fs.Tbytes == 0 || fs.Fbytes > fs.Tbytes || fs.Abytes > fs.Fbytes {
			t.Errorf("FSSTAT bytes total %d free %d avail %d: inconsistent", fs.Tbytes, fs.Fbytes, fs.Abytes)
		}
		if fs.Tbytes != total {
			t.Errorf("FSSTAT total bytes %d, statfs says %d", fs.Tbytes, total)
		}
		if fs.Tfiles != sfs.Files {
			t.Errorf("FSSTAT total files %d, statfs says %d", fs.Tfiles, sfs.Files)
		}

		var fi nfs3.FsinfoRes
		n.call(nfs3.ProcFsinfo, &nfs3.FsinfoArgs{Root: root}, &fi)
		if fi.Status != nfs3.OK {
			t.Fatalf("FSINFO: %v", fi.Status)
		}
		if fi.Rtmax == 0 || fi.Wtmax == 0 || fi.Rtpref == 0 || fi.Wtpref == 0 || fi.Dtpref == 0 ||
			fi.Rtpref > fi.Rtmax || fi.Wtpref > fi.Wtmax {
			t.Errorf("FSINFO sizes rtmax %d rtpref %d wtmax %d wtpref %d dtpref %d: inconsistent",
				fi.Rtmax, fi.Rtpref, fi.Wtmax, fi.Wtpref, fi.Dtpref)
		}
		if fi.Properties&(nfs3.FSFLink|nfs3.FSFSymlink) != nfs3.FSFLink|nfs3.FSFSymlink {
			t.Errorf("FSINFO properties %#x lack LINK|SYMLINK", fi.Properties)
		}
		if fi.MaxFileSize < 1<<40 {
			t.Errorf("FSINFO maxfilesize %d, implausibly small for ext4/tmpfs", fi.MaxFileSize)
		}

		var pc nfs3.PathconfRes
		n.call(nfs3.ProcPathconf, &nfs3.PathconfArgs{Obj: root}, &pc)
		if pc.Status != nfs3.OK {
			t.Fatalf("PATHCONF: %v", pc.Status)
		}
		// ganesha reports its own limits (name_max 1024, linkmax 8), not
		// the local file system's; only sanity can be asserted.
		if pc.NameMax < 255 || pc.Linkmax == 0 || !pc.CasePreserving || pc.CaseInsensitive {
			t.Errorf("PATHCONF name_max %d linkmax %d case_preserving %v case_insensitive %v",
				pc.NameMax, pc.Linkmax, pc.CasePreserving, pc.CaseInsensitive)
		}
	})

	if !g.Running() {
		t.Errorf("ganesha died during the test; log tail:\n%s", g.LogTail())
	}
}

// lstat returns the local file system's view of path.
func lstat(t testing.TB, path string) syscall.Stat_t {
	t.Helper()
	var st syscall.Stat_t
	if err := syscall.Lstat(path, &st); err != nil {
		t.Fatalf("lstat %s: %v", path, err)
	}
	return st
}

// checkAttr compares NFS attributes with lstat of path.
func checkAttr(t testing.TB, what string, a *nfs3.Fattr, path string) {
	t.Helper()
	st := lstat(t, path)
	types := map[uint32]nfs3.Ftype{syscall.S_IFREG: nfs3.TypeReg, syscall.S_IFDIR: nfs3.TypeDir,
		syscall.S_IFLNK: nfs3.TypeLnk, syscall.S_IFIFO: nfs3.TypeFifo}
	if want := types[st.Mode&syscall.S_IFMT]; a.Type != want {
		t.Errorf("%s: type %d, want %d", what, a.Type, want)
	}
	if a.Mode&0o7777 != st.Mode&0o7777 {
		t.Errorf("%s: mode %o, want %o", what, a.Mode&0o7777, st.Mode&0o7777)
	}
	if a.Fileid != st.Ino || a.Nlink != uint32(st.Nlink) || a.UID != st.Uid || a.GID != st.Gid {
		t.Errorf("%s: fileid %d nlink %d uid %d gid %d, want %d %d %d %d", what,
			a.Fileid, a.Nlink, a.UID, a.GID, st.Ino, st.Nlink, st.Uid, st.Gid)
	}
	if a.Type == nfs3.TypeReg && a.Size != uint64(st.Size) {
		t.Errorf("%s: size %d, want %d", what, a.Size, st.Size)
	}
	if a.Mtime.Seconds != uint32(st.Mtim.Sec) || a.Mtime.Nseconds != uint32(st.Mtim.Nsec) {
		t.Errorf("%s: mtime %d.%09d, want %d.%09d", what, a.Mtime.Seconds, a.Mtime.Nseconds,
			st.Mtim.Sec, st.Mtim.Nsec)
	}
}

// fileidOf returns the fileid of a CREATE result, asking GETATTR when the
// server sent no attributes.
func fileidOf(n *nfsc, res nfs3.CreateRes) uint64 {
	if res.ObjAttr.Present {
		return res.ObjAttr.Attr.Fileid
	}
	if !res.Obj.Present {
		n.t.Fatalf("CREATE returned neither handle nor attributes")
	}
	return n.getattr(res.Obj.FH).Attr.Fileid
}

// checkListing compares a directory listing (name → fileid) with the
// expected entries; "." and ".." may or may not be listed (RFC 1813 leaves
// it to the server).
func checkListing(t testing.TB, what string, got, want map[string]uint64) {
	t.Helper()
	delete(got, ".")
	delete(got, "..")
	for name, ino := range want {
		fid, ok := got[name]
		if !ok {
			t.Errorf("%s: %q missing", what, name)
		} else if fid != ino {
			t.Errorf("%s: %q fileid %d, inode %d", what, name, fid, ino)
		}
	}
	for name := range got {
		if _, ok := want[name]; !ok {
			t.Errorf("%s: unexpected entry %q", what, name)
		}
	}
}
