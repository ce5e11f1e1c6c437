package server

import (
	"os"
	"path/filepath"
	"testing"

	"golang.org/x/sys/unix"

	"hushfs/internal/nfs3"
	"hushfs/internal/rpc"
)

// Permission checks are the kernel's, made with the caller's credentials.
func TestPermissionsNonRoot(t *testing.T) {
	e := startEnv(t, false)
	rootc := e.root0()
	root := rootc.rootFH()
	// Root-owned: the export root (0755), a private file, a group dir.
	if err := os.WriteFile(filepath.Join(e.root, "secret"), []byte("s3cret"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(e.root, "public"), []byte("hello"), 0o644); err != nil {
		t.Fatal(err)
	}
	grp := filepath.Join(e.root, "grp")
	os.Mkdir(grp, 0o770)
	os.Chown(grp, 0, 4242)
	os.Chmod(grp, 0o770)
	pub := filepath.Join(e.root, "pub")
	os.Mkdir(pub, 0o777)
	os.Chmod(pub, 0o777)

	u := e.client(1000, 1000)
	secret := u.mustLookup(root, "secret")
	public := u.mustLookup(root, "public")

	// Creating in a root-owned 0755 directory.
	if _, st := u.create(root, "mine", 0o644); st != nfs3.ErrAcces {
		t.Fatalf("CREATE in 0755 root dir as uid 1000: %v", st)
	}
	if _, st := u.mkdir(root, "mine", 0o755); st != nfs3.ErrAcces {
		t.Fatalf("MKDIR in 0755 root dir as uid 1000: %v", st)
	}
	wantStatus(t, "REMOVE in 0755 root dir", u.remove(root, "public"), nfs3.ErrAcces)
	// Reading a 0600 root file, writing a 0644 one.
	if r := u.read(secret, 0, 10); r.Status != nfs3.ErrAcces || r.Data != nil {
		t.Fatalf("READ 0600 root file as uid 1000: %v", r.Status)
	}
	if r := u.read(public, 0, 10); r.Status != nfs3.OK || string(r.Data) != "hello" {
		t.Fatalf("READ 0644 file: %v", r.Status)
	}
	if w := u.write(public, 0, []byte("x"), nfs3.Unstable); w.Status != nfs3.ErrAcces {
		t.Fatalf("WRITE 0644 root file as uid 1000: %v", w.Status)
	}
	var sr nfs3.SetattrRes
	u.call(nfs3.ProcSetattr, &nfs3.SetattrArgs{Obj: public, Attr: nfs3.Sattr{SetMode: true, Mode: 0o666}}, &sr)
	wantStatus(t, "chmod of another's file", sr.Status, nfs3.ErrPerm)
	u.call(nfs3.ProcSetattr, &nfs3.SetattrArgs{Obj: public, Attr: nfs3.Sattr{SetSize: true, Size: 0}}, &sr)
	wantStatus(t, "truncate of a 0644 root file", sr.Status, nfs3.ErrAcces)
	if got, _ := os.ReadFile(filepath.Join(e.root, "public")); string(got) != "hello" {
		t.Fatal("file modified")
	}

	// ACCESS answers with what the kernel grants.
	if got, st := u.access(root, allAccess); st != nfs3.OK || got != nfs3.AccessRead|nfs3.AccessLookup {
		t.Fatalf("ACCESS root dir as uid 1000: %v %#x", st, got)
	}
	if got, _ := u.access(secret, allAccess); got != 0 {
		t.Fatalf("ACCESS 0600 root file as uid 1000: %#x", got)
	}
	if got, _ := u.access(public, allAccess); got != nfs3.AccessRead {
		t.Fatalf("ACCESS 0644 root file as uid 1000: %#x", got)
	}
	if got, _ := rootc.access(secret, allAccess); got != nfs3.AccessRead|nfs3.AccessModify|nfs3.AccessExtend {
		t.Fatalf("ACCESS 0600 file as root: %#x", got)
	}
	if got, _ := rootc.access(root, allAccess); got != nfs3.AccessRead|nfs3.AccessLookup|nfs3.AccessModify|nfs3.AccessExtend|nfs3.AccessDelete {
		t.Fatalf("ACCESS dir as root: %#x", got)
	}

	// New objects belong to the caller.
	pubFH := u.mustLookup(root, "pub")
	mine := u.mustCreate(pubFH, "mine", 0o644)
	if st := lstat(t, filepath.Join(pub, "mine")); st.Uid != 1000 || st.Gid != 1000 {
		t.Fatalf("created file owned by %d:%d", st.Uid, st.Gid)
	}
	if got, _ := u.access(mine, allAccess); got != nfs3.AccessRead|nfs3.AccessModify|nfs3.AccessExtend {
		t.Fatalf("ACCESS own file: %#x", got)
	}
	// The owner may write a file it created read-only (open(O_CREAT, 0444)
	// then write), as on a local file system.
	ro := u.mustCreate(pubFH, "readonly", 0o444)
	if w := u.write(ro, 0, []byte("data"), nfs3.FileSync); w.Status != nfs3.OK {
		t.Fatalf("owner writing its 0444 file: %v", w.Status)
	}
	if r := u.read(ro, 0, 10); r.Status != nfs3.OK || string(r.Data) != "data" {
		t.Fatalf("owner reading its 0444 file: %v", r.Status)
	}
	// ...but someone else may not.
	other := e.client(1001, 1001)
	if w := other.write(ro, 0, []byte("x"), nfs3.Unstable); w.Status != nfs3.ErrAcces {
		t.Fatalf("other user writing a 0444 file: %v", w.Status)
	}
	// Only root may give files away.
	u.call(nfs3.ProcSetattr, &nfs3.SetattrArgs{Obj: mine, Attr: nfs3.Sattr{SetUID: true, UID: 0}}, &sr)
	wantStatus(t, "chown to root as uid 1000", sr.Status, nfs3.ErrPerm)
	// Sticky /tmp-like semantics come from the kernel too.
	unix.Chmod(pub, 0o1777)
	wantStatus(t, "REMOVE another's file in a sticky dir", other.remove(pubFH, "mine"), nfs3.ErrPerm)
	wantStatus(t, "REMOVE own file in a sticky dir", u.remove(pubFH, "mine"), nfs3.OK)

	// Supplementary groups from AUTH_SYS count.
	grpFH := rootc.mustLookup(root, "grp")
	if _, st := u.create(grpFH, "g", 0o644); st != nfs3.ErrAcces {
		t.Fatalf("CREATE in 0770 group dir without the group: %v", st)
	}
	if _, st := u.lookup(grpFH, "g"); st != nfs3.ErrAcces {
		t.Fatalf("LOOKUP in 0770 group dir without the group: %v", st)
	}
	member := e.client(1000, 1000, 17, 4242)
	member.mustCreate(grpFH, "g", 0o640)
	if st := lstat(t, filepath.Join(grp, "g")); st.Uid != 1000 || st.Gid != 1000 {
		t.Fatalf("file in group dir owned by %d:%d", st.Uid, st.Gid)
	}
	// Primary gid as the group.
	e.client(1002, 4242).mustCreate(grpFH, "h", 0o640)

	// AUTH_NONE is nobody.
	anon := e.clientCred(rpc.NoAuth)
	h := anon.mustCreate(pubFH, "anon", 0o644)
	if a := anon.mustGetattr(h); a.UID != DefaultAnonID || a.GID != DefaultAnonID {
		t.Fatalf("AUTH_NONE file owned by %d:%d", a.UID, a.GID)
	}
	if r := anon.read(secret, 0, 1); r.Status != nfs3.ErrAcces {
		t.Fatalf("AUTH_NONE reading a 0600 file: %v", r.Status)
	}
	// Root with another gid creates files in that group.
	r5 := e.client(0, 5)
	r5.mustCreate(root, "rootgrp", 0o644)
	if st := lstat(t, filepath.Join(e.root, "rootgrp")); st.Uid != 0 || st.Gid != 5 {
		t.Fatalf("root:5 file owned by %d:%d", st.Uid, st.Gid)
	}
	// READDIR of a directory one may not read.
	private := filepath.Join(e.root, "private")
	os.Mkdir(private, 0o700)
	privFH := rootc.mustLookup(root, "private")
	var rd nfs3.ReaddirRes
	u.call(nfs3.ProcReaddir, &nfs3.ReaddirArgs{Dir: privFH, Count: 4096}, &rd)
	wantStatus(t, "READDIR of a 0700 root dir", rd.Status, nfs3.ErrAcces)
	// Writes by another user clear set-user-ID, as locally.
	suid := filepath.Join(pub, "suid")
	os.WriteFile(suid, nil, 0o666)
	unix.Chmod(suid, 0o4777)
	sfh := u.mustLookup(pubFH, "suid")
	if w := u.write(sfh, 0, []byte("x"), nfs3.Unstable); w.Status != nfs3.OK {
		t.Fatalf("WRITE: %v", w.Status)
	}
	if st := lstat(t, suid); st.Mode&unix.S_ISUID != 0 {
		t.Fatalf("set-user-ID kept after an unprivileged write: %o", st.Mode)
	}
}

// The credential switch is per thread: concurrent calls as different users
// never see each other's identity.
func TestConcurrentIdentities(t *testing.T) {
	e := startEnv(t, false)
	rootc := e.root0()
	root := rootc.rootFH()
	pub := filepath.Join(e.root, "pub")
	os.Mkdir(pub, 0o777)
	os.Chmod(pub, 0o777)
	pubFH := rootc.mustLookup(root, "pub")
	const users = 6
	const files = 40
	done := make(chan error, users)
	for u := range users {
		c := e.client(uint32(2000+u), uint32(3000+u))
		go func() {
			for i := range files {
				var r nfs3.CreateRes
				name := []byte{byte('a' + u), byte('0' + i/10), byte('0' + i%10)}
				if err := c.callErr(nfs3.Program, nfs3.Version, nfs3.ProcCreate, &nfs3.CreateArgs{
					Where: nfs3.DirOpArgs{Dir: pubFH, Name: name}, Mode: nfs3.Guarded,
					Attr: nfs3.Sattr{SetMode: true, Mode: 0o600}}, &r); err != nil {
					done <- err
					return
				}
				if r.Status != nfs3.OK {
					done <- r.Status
					return
				}
			}
			done <- nil
		}()
	}
	for range users {
		if err := <-done; err != nil {
			t.Fatal(err)
		}
	}
	ents, _ := os.ReadDir(pub)
	if len(ents) != users*files {
		t.Fatalf("%d files", len(ents))
	}
	for _, de := range ents {
		st := lstat(t, filepath.Join(pub, de.Name()))
		u := uint32(de.Name()[0] - 'a')
		if st.Uid != 2000+u || st.Gid != 3000+u {
			t.Fatalf("%s owned by %d:%d", de.Name(), st.Uid, st.Gid)
		}
	}
	// The server's own threads are root again: root can still do anything.
	if _, st := rootc.create(root, "stillroot", 0o600); st != nfs3.OK {
		t.Fatalf("root CREATE after user calls: %v", st)
	}
	if st := lstat(t, filepath.Join(e.root, "stillroot")); st.Uid != 0 || st.Gid != 0 {
		t.Fatalf("root's file owned by %d:%d", st.Uid, st.Gid)
	}
}
