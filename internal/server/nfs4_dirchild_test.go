package server

import (
	"os"
	"path/filepath"
	"testing"
	"time"

	"hushfs/internal/nfs3"
	"hushfs/internal/nfs4"
)

// Directory delegations covering their entries' attributes
// (nfs4_dirchild.go).

// mustChildDeleg asks for a delegation of dir with the entries'
// attribute notifications and fails unless both were granted.
func (v *v4client) mustChildDeleg(dir nfs4.FH) nfs4.Stateid {
	v.t.Helper()
	deadline := time.Now().Add(time.Second)
	for {
		res := v.must(putFH(dir), gddOp(nfs4.NotifyChangeChildAttrs))
		g := res.Results[1].Res.(*nfs4.GetDirDelegationRes)
		if g.NonFatal == nfs4.GDD4OK {
			if !g.Notification.Has(nfs4.NotifyChangeChildAttrs) {
				v.t.Fatalf("GET_DIR_DELEGATION asking for the entries' attributes: granted %v", g.Notification)
			}
			return g.Stateid
		}
		if time.Now().After(deadline) {
			v.t.Fatalf("GET_DIR_DELEGATION: not granted: %+v", g)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func chmodOp(mode uint32) nfs4.Argop {
	return nfs4.Argop{Op: nfs4.OpSetattr,
		Args: &nfs4.SetattrArgs{Attrs: nfs4.Fattr{Mask: nfs4.NewBitmap(nfs4.AttrMode), Mode: mode}}}
}

// untilDone repeats ops while they are NFS4ERR_DELAY (10 s at most).
func untilDone(t *testing.T, v *v4client, what string, ops ...nfs4.Argop) {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); ; {
		r := v.do(ops...)
		if r.Status == nfs4.OK {
			return
		}
		if r.Status != nfs4.ErrDelay || time.Now().After(deadline) {
			t.Fatalf("%s after the recall: %v", what, resultsOf(r))
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// Asked again by its holder, GET_DIR_DELEGATION grants the same
// delegation (a retried COMPOUND may run it twice).
func TestV4DirDelegationAskedAgain(t *testing.T) {
	e, root := dirEnv(t, nil)
	a, _ := e.v4cb(false, false)
	d := lookupFH(a, root, "d")
	sid := a.mustChildDeleg(d)
	if again := a.mustChildDeleg(d); again != sid {
		t.Fatalf("asked again: %v, first %v", again, sid)
	}
}

// Another client's SETATTR or WRITE of an entry of a directory delegated
// with the entries' attributes is NFS4ERR_DELAY until the holder,
// recalled, returns it; the same change in a directory delegated without
// them recalls nothing.
func TestV4DirDelegationChildRecallOnOtherClient(t *testing.T) {
	e, root := dirEnv(t, nil)
	a, h := e.v4cb(true, false)
	b := e.v4(0, 0)
	d := lookupFH(a, root, "d")
	f := lookupFH(b, d, "old")
	for _, tc := range []struct {
		name string
		ops  []nfs4.Argop // the change, at index 1
	}{
		{"SETATTR", []nfs4.Argop{putFH(f), chmodOp(0o600)}},
		{"WRITE", []nfs4.Argop{putFH(f), writeOp(nfs4.Stateid{}, 0, "written")}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			sid := a.mustChildDeleg(d)
			b.fails(nfs4.ErrDelay, 1, tc.ops...)
			if got := recallOf(t, h); got != sid {
				t.Fatalf("CB_RECALL of %v, the delegation is %v", got, sid)
			}
			untilDone(t, b, tc.name, tc.ops...)
			waitReturned(t, e, h, d)
		})
	}
	t.Run("without", func(t *testing.T) {
		sid := a.mustDirDeleg(d) // asks for entry notifications only
		b.must(putFH(f), chmodOp(0o640))
		noRecall(t, h, 500*time.Millisecond, "another's SETATTR of an entry, not covered")
		a.must(putFH(d), dirReturnOp(sid))
	})
}

// An NFSv3 WRITE or SETATTR of an entry recalls the covering delegation
// and waits for its return before it is made.
func TestV4DirDelegationChildRecallOnV3(t *testing.T) {
	e, root := dirEnv(t, nil)
	a, h := e.v4cb(true, false)
	d := lookupFH(a, root, "d")
	c3 := e.root0()
	f := c3.mustLookup(nfs3.FH(d), "old")
	for _, tc := range []struct {
		name   string
		change func() nfs3.Status
	}{
		{"WRITE", func() nfs3.Status { return c3.write(f, 0, []byte("v3"), nfs3.FileSync).Status }},
		{"SETATTR", func() nfs3.Status {
			var r nfs3.SetattrRes
			c3.call(nfs3.ProcSetattr, &nfs3.SetattrArgs{Obj: f, Attr: nfs3.Sattr{SetMode: true, Mode: 0o600}}, &r)
			return r.Status
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			sid := a.mustChildDeleg(d)
			if st := tc.change(); st != nfs3.OK {
				t.Fatalf("v3 %s of an entry: %v", tc.name, st)
			}
			if e.srv.v4.state.Delegated(string(d)) {
				t.Fatalf("v3 %s went ahead while the directory was delegated", tc.name)
			}
			if got := recallOf(t, h); got != sid {
				t.Fatalf("v3 %s recalled %v, the delegation is %v", tc.name, got, sid)
			}
			waitReturned(t, e, h, d)
		})
	}
}

// A local write or chmod of an entry recalls the covering delegation (the
// directory's watch names the entry), not one without the entries.
func TestV4DirDelegationChildRecallOnLocalChange(t *testing.T) {
	e, root := dirEnv(t, nil)
	a, h := e.v4cb(true, false)
	d := lookupFH(a, root, "d")
	p := filepath.Join(e.root, "d", "old")
	sid := a.mustDirDeleg(d)
	if err := os.Chmod(p, 0o600); err != nil {
		t.Fatal(err)
	}
	noRecall(t, h, 500*time.Millisecond, "a local chmod of an entry, not covered")
	a.must(putFH(d), dirReturnOp(sid))
	for _, tc := range []struct {
		name   string
		change func() error
	}{
		{"write", func() error { return os.WriteFile(p, []byte("local"), 0o644) }},
		{"chmod", func() error { return os.Chmod(p, 0o640) }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			sid := a.mustChildDeleg(d)
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

// The holder's own WRITE and SETATTR of an entry recall nothing; a local
// change of another entry afterwards still does.
func TestV4DirDelegationChildHolderOwnChanges(t *testing.T) {
	e, root := dirEnv(t, nil)
	a, h := e.v4cb(true, false)
	d := lookupFH(a, root, "d")
	if err := os.WriteFile(filepath.Join(e.root, "d", "other"), []byte("o"), 0o644); err != nil {
		t.Fatal(err)
	}
	f := lookupFH(a, d, "old")
	sid := a.mustChildDeleg(d)
	a.must(putFH(f), writeOp(nfs4.Stateid{}, 0, "mine"))
	a.must(putFH(f), chmodOp(0o600))
	noRecall(t, h, time.Second, "the holder's own WRITE and SETATTR of an entry")
	if err := os.Chmod(filepath.Join(e.root, "d", "other"), 0o600); err != nil {
		t.Fatal(err)
	}
	if got := recallOf(t, h); got != sid {
		t.Fatalf("a local chmod of another entry recalled %v, the delegation is %v", got, sid)
	}
	waitReturned(t, e, h, d)
}
