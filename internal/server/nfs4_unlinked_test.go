package server

import (
	"os"
	"path/filepath"
	"testing"

	"hushfs/internal/nfs4"
)

func openFHOp(v *v4client, access uint32) nfs4.Argop {
	return nfs4.Argop{Op: nfs4.OpOpen, Args: &nfs4.OpenArgs{ShareAccess: access | nfs4.ShareAccessWantNoDeleg,
		ShareDeny: nfs4.ShareDenyNone, Owner: nfs4.StateOwner{ClientID: v.clientID, Owner: v.owner},
		Claim: nfs4.OpenClaim{Type: nfs4.ClaimFH}}}
}

// A file renamed over (or removed) while a client holds it open stays
// open for that client, but another client's OPEN of its handle — a name
// it cached before the rename — is STALE, so that it looks the name up
// again and opens the new file: the open by handle must not hand it the
// old content, however long the first client keeps the old file open.
func TestV4OpenOfUnlinkedFileByAnotherClientIsStale(t *testing.T) {
	e := startEnvTuned(t, false, func(c *Config) { c.Delegations = true })
	root := nfs4.FH(e.srv.RootHandle())
	a := e.v4(0, 0)
	b := e.v4(0, 0)

	res := b.must(putFH(root), b.openOp("f", nfs4.ShareAccessBoth, true), getFH())
	open := res.Results[1].Res.(*nfs4.OpenRes)
	old := fhOf(res.Results[2].Res)
	b.must(putFH(old), writeOp(open.Stateid, 0, "old"))
	r := a.must(putFH(old), openFHOp(a, nfs4.ShareAccessRead))
	a.must(putFH(old), nfs4.Argop{Op: nfs4.OpClose, Args: &nfs4.CloseArgs{Stateid: r.Results[1].Res.(*nfs4.OpenRes).Stateid}})

	b.must(putFH(root), b.openOp("g", nfs4.ShareAccessBoth, true))
	b.must(putFH(root), saveFH(), putFH(root), renameOp("g", "f"))

	// b still has the old file open: it reads it through its open.
	rr := b.must(putFH(old), nfs4.Argop{Op: nfs4.OpRead, Args: &nfs4.ReadArgs{Stateid: open.Stateid, Count: 10}})
	if got := string(rr.Results[1].Res.(*nfs4.ReadRes).Data); got != "old" {
		t.Fatalf("the holder of the renamed-over file reads %q", got)
	}
	// b may open it again by its handle (its own open keeps it).
	b.must(putFH(old), openFHOp(b, nfs4.ShareAccessRead))
	// a's open of the old handle is STALE.
	a.fails(nfs4.ErrStale, 1, putFH(old), openFHOp(a, nfs4.ShareAccessRead))
}

// So is another client's SETATTR of it: truncate(2) and chmod(2) of a
// name cached before the rename must not change the old file (the recall
// soak: a client's truncate reached the replaced file, its append the new
// one, which kept the whole of what the truncate was to cut). STALE makes
// the kernel look the name up again and retry. The holder of an open of
// the old file may still change it.
func TestV4SetattrOfUnlinkedFileByAnotherClientIsStale(t *testing.T) {
	e := startEnvTuned(t, false, func(c *Config) { c.Delegations = true })
	root := nfs4.FH(e.srv.RootHandle())
	a := e.v4(0, 0)
	b := e.v4(0, 0)

	res := b.must(putFH(root), b.openOp("f", nfs4.ShareAccessBoth, true), getFH())
	open := res.Results[1].Res.(*nfs4.OpenRes)
	old := fhOf(res.Results[2].Res)
	b.must(putFH(old), writeOp(open.Stateid, 0, "old content"))
	b.must(putFH(root), b.openOp("g", nfs4.ShareAccessBoth, true))
	b.must(putFH(root), saveFH(), putFH(root), renameOp("g", "f"))

	size := nfs4.Fattr{Mask: nfs4.NewBitmap(nfs4.AttrSize), Size: 3}
	a.fails(nfs4.ErrStale, 1, putFH(old), setattrOp(nfs4.Stateid{}, size))
	a.fails(nfs4.ErrStale, 1, putFH(old), chmodOp(0o600))
	if st, err := os.Stat(filepath.Join(e.root, "f")); err != nil || st.Size() != 0 {
		t.Fatalf("the new f after the refused SETATTRs: %v %v", st, err)
	}
	// b's open keeps the old file its own: b truncates it.
	b.must(putFH(old), setattrOp(open.Stateid, size))
	rr := b.must(putFH(old), nfs4.Argop{Op: nfs4.OpRead, Args: &nfs4.ReadArgs{Stateid: open.Stateid, Count: 100}})
	if got := string(rr.Results[1].Res.(*nfs4.ReadRes).Data); got != "old" {
		t.Fatalf("the holder reads %q after its truncate to 3", got)
	}
}
