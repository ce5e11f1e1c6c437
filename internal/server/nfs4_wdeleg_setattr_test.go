package server

import (
	"os"
	"path/filepath"
	"testing"
	"time"

	"hushfs/internal/nfs4"
)

func setattrOp(sid nfs4.Stateid, f nfs4.Fattr) nfs4.Argop {
	return nfs4.Argop{Op: nfs4.OpSetattr, Args: &nfs4.SetattrArgs{Stateid: sid, Attrs: f}}
}

// The holder's own SETATTRs of its write-delegated file — a chmod, a
// truncate under the delegation and under its open, times set — keep the
// delegation (a build's chmod of the binary it linked must not cost a
// CLOSE, a DELEGRETURN and a new OPEN); another client's SETATTR, and a
// local chmod after the holder's, still recall it.
func TestV4HolderSetattrKeepsWriteDelegation(t *testing.T) {
	e := startEnvTuned(t, false, func(c *Config) { c.Delegations = true })
	a, h := e.v4cb(true, false)
	b := e.v4(0, 0)
	open, fh := writeDelegated(t, e, a, "f")
	deleg := open.Delegation.Stateid
	a.must(putFH(fh), writeOp(deleg, 0, "0123456789"))

	mtime := nfs4.SetTime{How: nfs4.SetToClientTime, Time: nfs4.Time{Seconds: 1_700_000_000}}
	a.must(putFH(fh), setattrOp(deleg, nfs4.Fattr{Mask: nfs4.NewBitmap(nfs4.AttrMode), Mode: 0o755}))
	noRecall(t, h, 300*time.Millisecond, "the holder's chmod")
	a.must(putFH(fh), setattrOp(deleg, nfs4.Fattr{Mask: nfs4.NewBitmap(nfs4.AttrSize), Size: 4}))
	a.must(putFH(fh), setattrOp(open.Stateid, nfs4.Fattr{Mask: nfs4.NewBitmap(nfs4.AttrSize, nfs4.AttrMode), Size: 2, Mode: 0o700}))
	a.must(putFH(fh), setattrOp(deleg, nfs4.Fattr{Mask: nfs4.NewBitmap(nfs4.AttrTimeModifySet, nfs4.AttrTimeAccessSet),
		TimeModifySet: mtime, TimeAccessSet: mtime}))
	a.must(putFH(fh), setattrOp(nfs4.Stateid{}, nfs4.Fattr{Mask: nfs4.NewBitmap(nfs4.AttrTimeModifySet),
		TimeModifySet: nfs4.SetTime{How: nfs4.SetToServerTime}}))
	noRecall(t, h, 1500*time.Millisecond, "the holder's SETATTRs") // the watch's events and its 1 s scan
	if !e.srv.v4.state.Delegated(string(fh)) {
		t.Fatal("the delegation is gone after the holder's SETATTRs")
	}
	st, err := os.Stat(filepath.Join(e.root, "f"))
	if err != nil || st.Size() != 2 || st.Mode().Perm() != 0o700 {
		t.Fatalf("after the holder's SETATTRs: %v %v", st, err)
	}
	// A local chmod after them recalls.
	if err := os.Chmod(filepath.Join(e.root, "f"), 0o600); err != nil {
		t.Fatal(err)
	}
	if sid := recallOf(t, h); sid != deleg {
		t.Fatalf("the local chmod recalled %v", sid)
	}
	returned(t, e, h, fh)

	// Another client's SETATTR recalls (NFS4ERR_DELAY until returned).
	open, gfh := writeDelegated(t, e, a, "g")
	b.fails(nfs4.ErrDelay, 1, putFH(gfh), setattrOp(nfs4.Stateid{}, nfs4.Fattr{Mask: nfs4.NewBitmap(nfs4.AttrMode), Mode: 0o600}))
	if sid := recallOf(t, h); sid != open.Delegation.Stateid {
		t.Fatalf("another client's SETATTR recalled %v", sid)
	}
	untilOK(t, b, putFH(gfh), setattrOp(nfs4.Stateid{}, nfs4.Fattr{Mask: nfs4.NewBitmap(nfs4.AttrMode), Mode: 0o600}))
	h.settled()
}
