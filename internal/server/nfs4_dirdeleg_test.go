package server

import (
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"hushfs/internal/nfs3"
	"hushfs/internal/nfs4"
)

// Directory delegations (nfs4_dirdeleg.go, leases_dir.go).

func gddOp(notify ...int) nfs4.Argop {
	return nfs4.Argop{Op: nfs4.OpGetDirDelegation, Args: &nfs4.GetDirDelegationArgs{
		NotificationTypes: nfs4.NewBitmap(notify...)}}
}

// dirDeleg asks for a delegation of the directory dir, again for a second
// while the server records the back channel's answer to CB_NULL.
func (v *v4client) dirDeleg(dir nfs4.FH) *nfs4.GetDirDelegationRes {
	v.t.Helper()
	deadline := time.Now().Add(time.Second)
	for {
		// No notifications asked for: every change recalls (the ones
		// told by CB_NOTIFY: nfs4_dirnotify_test.go).
		res := v.must(putFH(dir), gddOp(nfs4.NotifyChangeCookieVerifier))
		g := res.Results[1].Res.(*nfs4.GetDirDelegationRes)
		if g.NonFatal == nfs4.GDD4OK || time.Now().After(deadline) {
			return g
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// mustDirDeleg is dirDeleg failing the test unless it was granted.
func (v *v4client) mustDirDeleg(dir nfs4.FH) nfs4.Stateid {
	v.t.Helper()
	g := v.dirDeleg(dir)
	if g.NonFatal != nfs4.GDD4OK {
		v.t.Fatalf("GET_DIR_DELEGATION: not granted: %+v", g)
	}
	return g.Stateid
}

// dirEnv starts a server with delegations and a directory d in the export.
func dirEnv(t *testing.T, tune func(*Config)) (*env, nfs4.FH) {
	t.Helper()
	e := startEnvTuned(t, false, func(c *Config) {
		c.Delegations = true
		if tune != nil {
			tune(c)
		}
	})
	if err := os.Mkdir(filepath.Join(e.root, "d"), 0o777); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(e.root, "d", "old"), []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	return e, nfs4.FH(e.srv.RootHandle())
}

func lookupFH(v *v4client, dir nfs4.FH, name string) nfs4.FH {
	v.t.Helper()
	return fhOf(v.must(putFH(dir), lookupOp(name), getFH()).Results[2].Res)
}

func mkdirOp(name string) nfs4.Argop {
	return nfs4.Argop{Op: nfs4.OpCreate, Args: &nfs4.CreateArgs{Type: nfs4.TypeDir, Name: []byte(name),
		Attrs: nfs4.Fattr{Mask: nfs4.NewBitmap(nfs4.AttrMode), Mode: 0o755}}}
}

func renameOp(from, to string) nfs4.Argop {
	return nfs4.Argop{Op: nfs4.OpRename, Args: &nfs4.RenameArgs{OldName: []byte(from), NewName: []byte(to)}}
}

func dirReturnOp(sid nfs4.Stateid) nfs4.Argop {
	return nfs4.Argop{Op: nfs4.OpDelegReturn, Args: &nfs4.DelegReturnArgs{Stateid: sid}}
}

// waitReturned waits until the holder has returned its recalled
// delegation of dir (the callback handler's DELEGRETURN runs on its own).
func waitReturned(t *testing.T, e *env, h *cbClient, dir nfs4.FH) {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); e.srv.v4.state.Delegated(string(dir)); {
		if time.Now().After(deadline) {
			t.Fatal("the recalled directory delegation was not returned")
		}
		time.Sleep(5 * time.Millisecond)
	}
	// The handler's DELEGRETURN holds h.mu until its reply is in.
	h.mu.Lock()
	h.mu.Unlock()
}

// noRecall fails the test if h is recalled within d.
func noRecall(t *testing.T, h *cbClient, d time.Duration, what string) {
	t.Helper()
	select {
	case sid := <-h.recalls:
		t.Fatalf("%s recalled %v", what, sid)
	case <-time.After(d):
	}
}

// A client with a working back channel gets a delegation of a directory,
// with no notifications whatever it asked for, and returns it with
// DELEGRETURN; a client without a back channel, or whose CB_NULL failed,
// is answered GDD4_UNAVAIL in a COMPOUND that goes on.
func TestV4DirDelegationGrant(t *testing.T) {
	e, root := dirEnv(t, nil)
	a, _ := e.v4cb(false, false)
	d := lookupFH(a, root, "d")
	g := a.dirDeleg(d)
	if g.NonFatal != nfs4.GDD4OK || g.Stateid == (nfs4.Stateid{}) {
		t.Fatalf("GET_DIR_DELEGATION by a client with a back channel: %+v", g)
	}
	if !isEmpty(g.Notification) {
		t.Fatalf("notifications granted: %v", g.Notification)
	}
	a.must(putFH(d), dirReturnOp(g.Stateid))
	a.fails(nfs4.ErrBadStateid, 1, putFH(d), dirReturnOp(g.Stateid))

	b := e.v4(0, 0)
	res := b.must(putFH(d), gddOp(), getFH())
	if g := res.Results[1].Res.(*nfs4.GetDirDelegationRes); g.NonFatal != nfs4.GDD4Unavail {
		t.Fatalf("GET_DIR_DELEGATION without a back channel: %+v", g)
	}
	f := lookupFH(b, d, "old")
	b.fails(nfs4.ErrNotDir, 1, putFH(f), gddOp())
}

// A client whose back channel does not answer CB_NULL gets no directory
// delegation.
func TestV4DirDelegationNoCallbacks(t *testing.T) {
	e, root := dirEnv(t, nil)
	c, _ := e.v4cb(false, true)
	if g := c.dirDeleg(lookupFH(c, root, "d")); g.NonFatal != nfs4.GDD4Unavail {
		t.Fatalf("GET_DIR_DELEGATION by a client whose CB_NULL failed: %+v", g)
	}
}

// Another client's CREATE, OPEN that creates, REMOVE, RENAME into, out of
// and within the delegated directory, and LINK into it, are
// NFS4ERR_DELAY while the holder, recalled with CB_RECALL, has not
// returned the delegation, and go ahead once it has.
func TestV4DirDelegationRecallOnOtherClient(t *testing.T) {
	e, root := dirEnv(t, nil)
	a, h := e.v4cb(true, false)
	b := e.v4(0, 0)
	d := lookupFH(a, root, "d")
	os.WriteFile(filepath.Join(e.root, "outside"), []byte("o"), 0o644)
	os.WriteFile(filepath.Join(e.root, "d", "r1"), []byte("r"), 0o644)
	os.WriteFile(filepath.Join(e.root, "d", "r2"), []byte("r"), 0o644)
	outside := lookupFH(b, root, "outside")
	for _, tc := range []struct {
		name string
		ops  []nfs4.Argop // the change, at index 1
	}{
		{"CREATE", []nfs4.Argop{putFH(d), mkdirOp("sub")}},
		{"OPEN create", []nfs4.Argop{putFH(d), b.openOp("new", nfs4.ShareAccessWrite, true)}},
		{"REMOVE", []nfs4.Argop{putFH(d), removeOp("old")}},
		{"RENAME within", []nfs4.Argop{putFH(d), saveFH(), renameOp("r1", "r1b")}},
		{"RENAME out", []nfs4.Argop{putFH(d), saveFH(), putFH(root), renameOp("r2", "r2b")}},
		{"RENAME in", []nfs4.Argop{putFH(root), saveFH(), putFH(d), renameOp("outside", "in")}},
		{"LINK", []nfs4.Argop{putFH(outside), saveFH(), putFH(d),
			{Op: nfs4.OpLink, Args: &nfs4.LinkArgs{NewName: []byte("link")}}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			sid := a.mustDirDeleg(d)
			last := len(tc.ops) - 1
			b.fails(nfs4.ErrDelay, last, tc.ops...)
			if got := recallOf(t, h); got != sid {
				t.Fatalf("CB_RECALL of %v, the delegation is %v", got, sid)
			}
			deadline := time.Now().Add(10 * time.Second)
			for {
				r := b.do(tc.ops...)
				if r.Status == nfs4.OK {
					break
				}
				if r.Status != nfs4.ErrDelay || time.Now().After(deadline) {
					t.Fatalf("%s after the recall: %v", tc.name, resultsOf(r))
				}
				time.Sleep(10 * time.Millisecond)
			}
			waitReturned(t, e, h, d)
			a.fails(nfs4.ErrBadStateid, 1, putFH(d), dirReturnOp(sid))
		})
	}
}

// An NFSv3 CREATE, MKDIR, REMOVE or RENAME in a delegated directory
// recalls the delegation and waits for its return.
func TestV4DirDelegationRecallOnV3(t *testing.T) {
	e, root := dirEnv(t, nil)
	a, h := e.v4cb(true, false)
	d := lookupFH(a, root, "d")
	c3 := e.root0()
	os.WriteFile(filepath.Join(e.root, "d", "v3victim"), []byte("x"), 0o644)
	for _, tc := range []struct {
		name   string
		change func() nfs3.Status
	}{
		{"CREATE", func() nfs3.Status { _, st := c3.create(nfs3.FH(d), "v3new", 0o644); return st }},
		{"MKDIR", func() nfs3.Status { _, st := c3.mkdir(nfs3.FH(d), "v3dir", 0o755); return st }},
		{"REMOVE", func() nfs3.Status { return c3.remove(nfs3.FH(d), "v3victim") }},
		{"RENAME", func() nfs3.Status {
			var r nfs3.RenameRes
			c3.call(nfs3.ProcRename, &nfs3.RenameArgs{From: nfs3.DirOpArgs{Dir: nfs3.FH(d), Name: []byte("old")},
				To: nfs3.DirOpArgs{Dir: nfs3.FH(root), Name: []byte("moved")}}, &r)
			return r.Status
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			sid := a.mustDirDeleg(d)
			if st := tc.change(); st != nfs3.OK {
				t.Fatalf("v3 %s in a delegated directory: %v", tc.name, st)
			}
			// Returned before the change was made, not after.
			if e.srv.v4.state.Delegated(string(d)) {
				t.Fatalf("v3 %s went ahead while the directory was delegated", tc.name)
			}
			if got := recallOf(t, h); got != sid {
				t.Fatalf("v3 %s recalled %v, the delegation is %v", tc.name, got, sid)
			}
			waitReturned(t, e, h, d)
			a.fails(nfs4.ErrBadStateid, 1, putFH(d), dirReturnOp(sid))
		})
	}
}

// A local process adding, removing or renaming an entry of a delegated
// directory, or changing its mode, recalls the delegation.
func TestV4DirDelegationRecallOnLocalChange(t *testing.T) {
	e, root := dirEnv(t, nil)
	a, h := e.v4cb(true, false)
	d := lookupFH(a, root, "d")
	dir := filepath.Join(e.root, "d")
	for _, tc := range []struct {
		name   string
		change func() error
	}{
		{"create", func() error { return os.WriteFile(filepath.Join(dir, "local"), []byte("l"), 0o644) }},
		{"rename", func() error { return os.Rename(filepath.Join(dir, "local"), filepath.Join(dir, "local2")) }},
		{"unlink", func() error { return os.Remove(filepath.Join(dir, "local2")) }},
		{"chmod", func() error { return os.Chmod(dir, 0o755) }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			sid := a.mustDirDeleg(d)
			if err := tc.change(); err != nil {
				t.Fatal(err)
			}
			if got := recallOf(t, h); got != sid {
				t.Fatalf("local %s recalled %v, the delegation is %v", tc.name, got, sid)
			}
			waitReturned(t, e, h, d)
		})
	}
}

// The holder's own CREATE, OPEN that creates, REMOVE and RENAME within
// the directory recall nothing; a local change afterwards
// still does (the watch consumed only the holder's events).
func TestV4DirDelegationHolderOwnChanges(t *testing.T) {
	e, root := dirEnv(t, nil)
	a, h := e.v4cb(true, false)
	d := lookupFH(a, root, "d")
	sid := a.mustDirDeleg(d)
	a.must(putFH(d), mkdirOp("mine"))
	a.must(putFH(d), a.openOp("myfile", nfs4.ShareAccessWrite, true))
	a.must(putFH(d), removeOp("old"))
	a.must(putFH(d), saveFH(), renameOp("mine", "mine2"))
	noRecall(t, h, time.Second, "the holder's own changes")
	if err := os.WriteFile(filepath.Join(e.root, "d", "local"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if got := recallOf(t, h); got != sid {
		t.Fatalf("local create recalled %v, the delegation is %v", got, sid)
	}
	waitReturned(t, e, h, d)
}

// A directory delegation not returned is revoked a lease after its
// recall: the waiting change goes ahead and the holder's DELEGRETURN is
// DELEG_REVOKED.
func TestV4DirDelegationRevoked(t *testing.T) {
	var mu sync.Mutex
	now := time.Now()
	clock := func() time.Time { mu.Lock(); defer mu.Unlock(); return now }
	advance := func(d time.Duration) { mu.Lock(); now = now.Add(d); mu.Unlock() }
	e, root := dirEnv(t, func(c *Config) { c.Now = clock; c.Lease = 10 * time.Second })
	a, h := e.v4cb(false, false)
	b := e.v4(0, 0)
	d := lookupFH(a, root, "d")
	sid := a.mustDirDeleg(d)
	b.fails(nfs4.ErrDelay, 1, putFH(d), mkdirOp("sub"))
	recallOf(t, h)
	advance(9 * time.Second)
	a.must()
	b.must()
	e.srv.v4.state.Expire()
	b.fails(nfs4.ErrDelay, 1, putFH(d), mkdirOp("sub"))
	advance(2 * time.Second)
	a.must()
	b.must()
	e.srv.v4.state.Expire()
	b.must(putFH(d), mkdirOp("sub"))
	a.fails(nfs4.ErrDelegRevoked, 1, putFH(d), dirReturnOp(sid))
}
