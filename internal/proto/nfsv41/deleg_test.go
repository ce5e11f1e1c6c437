package nfsv41

import (
	"context"
	"testing"

	"hushfs/internal/nfs4"
	"hushfs/internal/proto"
)

// recallLog records the recalls handed to the core.
type recallLog struct{ got []proto.StateID }

func (r *recallLog) Recall(_ proto.FH, st proto.StateID, _ bool) { r.got = append(r.got, st) }
func (*recallLog) GetAttr(proto.FH) (uint64, uint64, bool)       { return 0, 0, false }
func (*recallLog) Revoked()                                      {}

// TestEarlyRecall: a CB_RECALL before the core takes callbacks (the
// root's delegation the mount's COMPOUND was granted, recalled before
// the mount is done) is answered OK and handed to the core when it takes
// them; after, recalls go to the core at once. Before, it was answered
// BADHANDLE and lost: the server waited for a return that never came.
func TestEarlyRecall(t *testing.T) {
	s := &Server{}
	recall := func(b byte) nfs4.OpRes {
		return s.callback(context.Background(), nil, nfs4.CBArgop{Op: nfs4.CBOpRecall,
			Args: &nfs4.CBRecallArgs{Stateid: nfs4.Stateid{Seqid: 1, Other: [12]byte{b}}, FH: nfs4.FH{b}}})
	}
	if st := recall(1).OpStatus(); st != nfs4.OK {
		t.Fatalf("a recall before the core's callbacks answered %v, want OK", st)
	}
	var log recallLog
	s.SetCallbacks(&log)
	if len(log.got) != 1 || log.got[0].Other[0] != 1 {
		t.Fatalf("the core was handed %v, want the early recall", log.got)
	}
	if st := recall(2).OpStatus(); st != nfs4.OK || len(log.got) != 2 || log.got[1].Other[0] != 2 {
		t.Fatalf("a recall after: %v, the core has %v", st, log.got)
	}
}
