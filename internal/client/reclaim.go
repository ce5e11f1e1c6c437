package client

import (
	"context"
	"errors"
	"syscall"

	"hushfs/internal/proto"
)

// Reclaim after a server restart (proto.Reclaimer). The protocol calls
// Reclaim when the server has forgotten our state, in its grace period,
// before any other call goes out: every open is asked for again with the
// share access it held (and the file's delegation with it, if we held
// one), then every lock each lock owner held under it. Calls held back
// meanwhile then go out naming the old stateids, are refused, and are
// sent again under the new ones (underState: reopen finds the open's
// state changed). What the server will not give back (no grace period:
// it restarted long ago, or our lease expired) is left as it was: the
// next call reopens the file (reopenOwnerLocked), and the locks held
// under it are lost, which makes its descriptors' I/O fail with EIO
// (locksLost), as Linux's client does with lost locks (nfs4_lost_locks).
//
// Nothing here waits for no.mu: an OPEN, LOCK or CLOSE held back by the
// recovery holds it. The state is read and changed under no.vmu, between
// calls; the calls held back see the change when they are refused.

var _ proto.Reclaimer = (*FS)(nil)

// initReclaim offers the protocol our reclaims, if it may need them.
func (fs *FS) initReclaim(srv proto.Server) {
	if r, ok := srv.(proto.Recoverable); ok && fs.opener != nil {
		r.SetReclaimer(fs)
	}
}

// heldOpen is what one identity's open of a file held, as Reclaim found
// it.
type heldOpen struct {
	ow     *ownerOpen
	cred   Cred
	st     proto.StateID
	access uint32
	locks  map[uint64]lockRanges
}

// Reclaim asks for every open and lock again through ops (see above).
func (fs *FS) Reclaim(ctx context.Context, ops proto.ReclaimOps) {
	delegs := fs.heldDelegs()
	var opens, locks, lostOpens, lostLocks int
	noGrace := false
	for _, n := range fs.nodes.all() {
		n.mu.Lock()
		no := n.opens4
		n.mu.Unlock()
		if no == nil {
			continue
		}
		h := delegs[string(n.fh)]
		for _, o := range no.held() {
			if noGrace {
				fs.loseLocks(n, no, o)
				lostOpens++
				lostLocks += len(o.locks)
				continue
			}
			deleg := proto.DelegNone
			if h != nil && h.cred.UID == o.cred.UID {
				deleg = proto.DelegRead
				if h.write {
					deleg = proto.DelegWrite
				}
			}
			st, ok, stop := fs.reclaimOpen(ctx, ops, n, no, o, h, deleg)
			if stop {
				noGrace = true
			}
			if !ok {
				lostOpens++
				lostLocks += len(o.locks)
				continue
			}
			if deleg != proto.DelegNone {
				delete(delegs, string(n.fh)) // reclaimed, or dropped there
			}
			opens++
			for owner, rs := range o.locks {
				if fs.reclaimLocks(ctx, ops, n, no, o, st, owner, rs) {
					locks++
				} else {
					lostLocks++
				}
			}
		}
	}
	// Delegations of files with nothing open here by their holder: given
	// back (giveBackDeleg).
	for _, h := range delegs {
		fs.giveBackDeleg(h)
	}
	fs.logf("hushfs: reclaimed %d opens and the locks of %d lock owners; %d opens and the locks of %d lock owners not reclaimed%s",
		opens, locks, lostOpens, lostLocks, map[bool]string{true: " (the server has no grace period for us)", false: ""}[noGrace])
}

// held lists the opens of the file at the server (not those of
// descriptors opened under a delegation only: with theirs).
func (no *nodeOpens) held() []heldOpen {
	no.vmu.Lock()
	defer no.vmu.Unlock()
	out := make([]heldOpen, 0, len(no.owners))
	for _, ow := range no.owners {
		o := heldOpen{ow: ow, cred: ow.cred, st: ow.st, access: ow.held, locks: map[uint64]lockRanges{}}
		for owner, rs := range ow.locks {
			o.locks[owner] = append(lockRanges(nil), rs...)
		}
		if o.access != 0 {
			out = append(out, o)
		}
	}
	return out
}

// reclaimOpen reclaims o with the delegation h (deleg, if not DelegNone)
// and makes the answer its open: st is the new stateid. stop says the
// server takes no more reclaims. A reclaim refused leaves the open as it
// was: its next call reopens it (and loses its locks).
func (fs *FS) reclaimOpen(ctx context.Context, ops proto.ReclaimOps, n *inode, no *nodeOpens, o heldOpen,
	h *heldDeleg, deleg proto.DelegType) (st proto.StateID, ok, stop bool) {
	at := fs.now()
	res, err := ops.ReclaimOpen(ctx, &o.cred, n.fh, o.access, deleg)
	if err == nil && res.Status != nil {
		err = res.Status
	}
	if err != nil {
		fs.logf("hushfs: node %d: reclaiming the open of uid %d: %v", n.id, o.cred.UID, err)
		if deleg != proto.DelegNone {
			fs.giveBackDeleg(h)
		}
		fs.loseLocks(n, no, o)
		return proto.StateID{}, false, errors.Is(err, proto.ErrNoGrace)
	}
	fs.applyAttr(n, &res.Attr, at)
	no.vmu.Lock()
	if no.owners[o.cred.UID] == o.ow && o.ow.st == o.st {
		o.ow.st, o.ow.viaDeleg = res.State, false
	}
	no.vmu.Unlock()
	if deleg != proto.DelegNone {
		if res.Deleg.Type == proto.DelegNone {
			fs.giveBackDeleg(h)
		} else {
			fs.dl.mu.Lock()
			if fs.dl.held[string(n.fh)] == h && !h.returning {
				h.st, h.limit = res.Deleg.State, res.Deleg.Limit
			}
			fs.dl.mu.Unlock()
		}
	}
	return res.State, true, false
}

// loseLocks marks the locks held under o, whose open was not reclaimed,
// lost now, before any held-back WRITE goes out under a reopen (locks
// cannot be reclaimed without their open).
func (fs *FS) loseLocks(n *inode, no *nodeOpens, o heldOpen) {
	if len(o.locks) == 0 {
		return
	}
	no.vmu.Lock()
	if no.owners[o.cred.UID] == o.ow {
		o.ow.locksLost = true
	}
	no.vmu.Unlock()
	fs.logf("hushfs: node %d: locks of %d lock owners were lost at the server's restart; I/O of uid %d's descriptors of it fails with EIO until they are closed",
		n.id, len(o.locks), o.cred.UID)
}

// reclaimLocks reclaims one lock owner's ranges under the reclaimed open
// st. A range refused loses the owner's locks: the open's descriptors'
// I/O fails with EIO, and the ranges reclaimed before it are released at
// the owner's close as before (it stays listed).
func (fs *FS) reclaimLocks(ctx context.Context, ops proto.ReclaimOps, n *inode, no *nodeOpens, o heldOpen,
	st proto.StateID, owner uint64, rs lockRanges) bool {
	for _, x := range rs {
		a := x.args(n.fh, owner)
		a.State = st
		res, err := ops.ReclaimLock(ctx, &o.cred, a)
		if err == nil && res.Status != nil {
			err = res.Status
		}
		if err == nil {
			continue
		}
		fs.logf("hushfs: node %d: lock [%d, %d) of lock owner %x was lost at the server's restart (%v); I/O of uid %d's descriptors of it fails with EIO until they are closed",
			n.id, x.start, x.end, owner, err, o.cred.UID)
		no.vmu.Lock()
		if no.owners[o.cred.UID] == o.ow {
			// Still listed: the owner's close sends LOCKU, releasing
			// the ranges reclaimed before this one.
			o.ow.locksLost = true
		}
		no.vmu.Unlock()
		return false
	}
	return true
}

// heldDelegs are the delegations held, by file handle.
func (fs *FS) heldDelegs() map[string]*heldDeleg {
	out := map[string]*heldDeleg{}
	if fs.delegator == nil {
		return out
	}
	fs.dl.mu.Lock()
	defer fs.dl.mu.Unlock()
	for k, h := range fs.dl.held {
		if !h.returning {
			out[k] = h
		}
	}
	return out
}

// giveBackDeleg stops using a delegation the server no longer knows (not
// reclaimed) and gives it back as a revoked one is (deleg.go's
// returnDeleg, from a goroutine: its calls wait for the recovery): what a
// write delegation held is sent first, readers under it get real opens,
// and the DELEGRETURN finds it gone.
func (fs *FS) giveBackDeleg(h *heldDeleg) {
	if h == nil {
		return
	}
	fs.dl.mu.Lock()
	if h.returning {
		fs.dl.mu.Unlock()
		return
	}
	h.returning = true
	fs.dl.mu.Unlock()
	fs.undelegate(h)
	fs.returnDelegAsync(h)
}

// checkLocksLost fails of's I/O with EIO if locks held under its open
// were lost at a server restart.
func (fs *FS) checkLocksLost(of *openFile) error {
	if of.share == 0 {
		return nil
	}
	n := of.node
	n.mu.Lock()
	no := n.opens4
	n.mu.Unlock()
	if no == nil {
		return nil
	}
	no.vmu.Lock()
	defer no.vmu.Unlock()
	if ow := no.owners[of.cred.UID]; ow != nil && ow.locksLost {
		return syscall.EIO
	}
	return nil
}
