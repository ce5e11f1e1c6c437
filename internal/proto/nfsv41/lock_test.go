package nfsv41

import (
	"testing"

	"hushfs/internal/nfs4"
	"hushfs/internal/proto"
)

// TestLockTableReclaimed: a lock stateid a reclaim made waits in the table
// until the owner's next call takes it (the reclaim cannot wait for the
// owner's lockState, which a LOCK held back by the recovery may hold), is
// listed for its open's CLOSE meanwhile, and goes with that open.
func TestLockTableReclaimed(t *testing.T) {
	var tb lockTable
	fh := proto.FH("file")
	oldOpen, newOpen := [nfs4.OtherSize]byte{1}, [nfs4.OtherSize]byte{2}
	ls := tb.get(fh, 7)
	ls.mu.Lock()
	ls.open, ls.st, ls.made = oldOpen, nfs4.Stateid{Seqid: 3, Other: [nfs4.OtherSize]byte{9}}, true
	tb.made(fh, 7, oldOpen)
	ls.mu.Unlock()

	st := nfs4.Stateid{Seqid: 1, Other: [nfs4.OtherSize]byte{5}}
	if _, ok := tb.reclaimedState(fh, 7, newOpen); ok {
		t.Fatalf("a reclaimed state before any reclaim")
	}
	tb.setReclaimed(fh, 7, newOpen, st)
	if got, ok := tb.reclaimedState(fh, 7, newOpen); !ok || got != st {
		t.Fatalf("reclaimedState = %v %v, want %v", got, ok, st)
	}
	if _, ok := tb.reclaimedState(fh, 7, oldOpen); ok {
		t.Errorf("the reclaimed state found under the old open")
	}
	if got := tb.ownersUnder(fh, newOpen); len(got) != 1 || got[0] != 7 {
		t.Errorf("owners under the reclaimed open: %v, want [7]", got)
	}

	ls.mu.Lock()
	tb.adopt(fh, 7, ls)
	if !ls.made || ls.open != newOpen || ls.st != st {
		t.Errorf("after adopt: made %v open %v st %v, want the reclaimed state", ls.made, ls.open, ls.st)
	}
	ls.mu.Unlock()
	if _, ok := tb.reclaimedState(fh, 7, newOpen); ok {
		t.Errorf("the reclaimed state still waits after it was adopted")
	}
	if got := tb.ownersUnder(fh, newOpen); len(got) != 1 {
		t.Errorf("owners under the reclaimed open after adopt: %v, want [7]", got)
	}

	// Not adopted before its open's CLOSE: forgotten with it.
	tb.setReclaimed(fh, 8, newOpen, st)
	tb.forgetOpen(newOpen)
	if _, ok := tb.reclaimedState(fh, 8, newOpen); ok {
		t.Errorf("a reclaimed state outlived its open's CLOSE")
	}
	if got := tb.ownersUnder(fh, newOpen); len(got) != 0 {
		t.Errorf("owners under a closed open: %v", got)
	}
}
