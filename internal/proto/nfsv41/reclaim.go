package nfsv41

import (
	"context"
	"time"

	"hushfs/internal/nfs4"
	"hushfs/internal/nfs4/session"
	"hushfs/internal/proto"
)

// Reclaim after a server restart (RFC 8881 §8.4.2). The session layer
// finds that the server no longer knows our client ID, makes a new one
// and calls onRecover before anything else goes out; the core then
// reclaims each open with OPEN (CLAIM_PREVIOUS) and each lock with LOCK
// (reclaim set) through reclaimOps, in the grace period, and the session
// sends RECLAIM_COMPLETE once onRecover returns. Calls held back
// meanwhile then go out: their old stateids are refused, and the core
// resends them under the reclaimed ones (client/openstate.go's reopen
// finds the open's state already new). What the server refuses to give
// back falls to the core's reopen, and locks so lost are reported.

var (
	_ proto.Recoverable = (*Server)(nil)
	_ proto.ReclaimOps  = reclaimOps{}
)

// reclaimerHolder lets an atomic.Pointer hold the interface.
type reclaimerHolder struct{ r proto.Reclaimer }

// SetReclaimer sets who reclaims after a server restart (the core).
func (s *Server) SetReclaimer(r proto.Reclaimer) { s.rc.Store(&reclaimerHolder{r}) }

// onRecover is session.Options.OnRecover: the core reclaims what it held
// (the delegations too: those it cannot reclaim it gives back).
// ctx's COMPOUNDs go out while all others wait. Reclaims the server
// refuses with NO_GRACE (its grace period is over, or this was our lease
// expiring, not a restart) end the core's reclaiming; it reopens instead.
func (s *Server) onRecover(ctx context.Context, r session.Recovery) error {
	h := s.rc.Load()
	if h == nil {
		// Nothing reclaims: the server lost or expired all our state,
		// delegations with it.
		if cb := s.callbacks(); cb != nil {
			cb.Revoked()
		}
		return nil
	}
	start := s.now()
	s.logf("hushfs: NFSv4.1 server lost our state (%v, reconnected %v): reclaiming opens and locks", r.Cause, r.Reconnected)
	h.r.Reclaim(ctx, reclaimOps{s})
	s.logf("hushfs: NFSv4.1 reclaim done in %v", s.now().Sub(start).Round(time.Millisecond))
	return nil
}

// reclaimOps speaks the reclaims for the core.
type reclaimOps struct{ s *Server }

// ReclaimOpen sends PUTFH + OPEN (CLAIM_PREVIOUS) + GETATTR: the open of
// c's open owner with the access it held, and the delegation it held.
func (o reclaimOps) ReclaimOpen(ctx context.Context, c *proto.Cred, fh proto.FH, access uint32, deleg proto.DelegType) (proto.OpenRes, error) {
	s := o.s
	claim := nfs4.OpenClaim{Type: nfs4.ClaimPrevious, DelegateType: nfs4.DelegateNone}
	switch deleg {
	case proto.DelegRead:
		claim.DelegateType = nfs4.DelegateRead
	case proto.DelegWrite:
		claim.DelegateType = nfs4.DelegateWrite
	}
	open := &nfs4.OpenArgs{ShareAccess: access, Owner: s.openOwner(c), Claim: claim}
	r, err := s.compound(ctx, c, "OPEN", []nfs4.Argop{putfh(fh), {Op: nfs4.OpOpen, Args: open}, getattr(fileAttrs)})
	if err != nil {
		return proto.OpenRes{}, err
	}
	out := proto.OpenRes{Status: reclaimErr(r.status(1)), FH: fh}
	o4, ok := r.at(1).(*nfs4.OpenRes)
	if !ok || o4.Status != nfs4.OK {
		return out, nil
	}
	out.State = stateOf(o4.Stateid)
	out.Attr, _ = r.attrs(2)
	if d := o4.Delegation; d.Type == nfs4.DelegateRead || d.Type == nfs4.DelegateWrite {
		if got := delegationOf(&d); got.Type == deleg && !d.Recall {
			out.Deleg = got
		} else if err := s.ReturnDelegation(ctx, c, fh, stateOf(d.Stateid)); err != nil {
			// Not the one we held, or the server wants it back at once
			// (it could not tell whether another client changed the file).
			s.logf("hushfs: NFSv4.1 returning a reclaimed delegation: %v", err)
		}
	}
	return out, nil
}

// ReclaimLock sends LOCK with reclaim set under the reclaimed open.
func (o reclaimOps) ReclaimLock(ctx context.Context, c *proto.Cred, a proto.LockArgs) (proto.LockRes, error) {
	return o.s.reclaimLock(ctx, c, a)
}

// reclaimErr is stateErr, marking NO_GRACE: no reclaim will be taken.
func reclaimErr(st nfs4.Status) error {
	err := stateErr(st)
	if st == nfs4.ErrNoGrace {
		e := err.(proto.Error)
		e.Cond = proto.CondNoGrace
		return e
	}
	return err
}

// reclaimLock sends LOCK with reclaim set: the owner's first range under
// the reclaimed open makes its lock stateid (open_to_lock_owner4, the lock
// owner named as Lock names it under that open), later ranges go under
// that stateid. It does not wait for the owner's lockState (a LOCK held
// back by the recovery holds it): the stateid waits in the table for the
// owner's next call (lockTable.adopt).
func (s *Server) reclaimLock(ctx context.Context, c *proto.Cred, a proto.LockArgs) (proto.LockRes, error) {
	off, length := nfsRange(a.Offset, a.Length)
	args := &nfs4.LockArgs{LockType: lockType(a.Type, false), Reclaim: true, Offset: off, Length: length}
	if st, ok := s.locks.reclaimedState(a.FH, a.Owner, a.State.Other); ok {
		args.LockStateid = st
	} else {
		args.NewLockOwner = true
		args.OpenStateid = stateidOf(a.State)
		args.LockOwner = s.lockOwner(a.Owner, a.State.Other)
	}
	r, err := s.compound(ctx, c, "LOCK", []nfs4.Argop{putfh(a.FH), {Op: nfs4.OpLock, Args: args}})
	if err != nil {
		return proto.LockRes{}, err
	}
	l, ok := r.at(1).(*nfs4.LockRes)
	if !ok || l.Status != nfs4.OK {
		return proto.LockRes{Status: reclaimErr(r.status(1))}, nil
	}
	s.locks.setReclaimed(a.FH, a.Owner, a.State.Other, l.Stateid)
	return proto.LockRes{State: stateOf(l.Stateid)}, nil
}
