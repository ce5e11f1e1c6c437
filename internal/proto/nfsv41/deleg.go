package nfsv41

import (
	"context"
	"fmt"
	"math"
	"time"

	"hushfs/internal/nfs4"
	"hushfs/internal/proto"
)

// Delegations (proto.Delegator): the server's callbacks go to the core's
// proto.Callbacks, DELEGRETURN gives a delegation back. This package keeps
// no delegations itself: which files are delegated, and what depends on
// it, is the core's to know (client/deleg.go).

var _ proto.Delegator = (*Server)(nil)

// cbHolder boxes the core's callbacks for an atomic.Pointer.
type cbHolder struct{ cb proto.Callbacks }

// SetCallbacks installs the core's answers to the server's callbacks.
// Until then no delegation is asked for, and a CB_RECALL is answered as
// for a delegation we do not hold.
func (s *Server) SetCallbacks(cb proto.Callbacks) { s.cb.Store(&cbHolder{cb}) }

func (s *Server) callbacks() proto.Callbacks {
	if h := s.cb.Load(); h != nil {
		return h.cb
	}
	return nil
}

// callback serves one operation of a CB_COMPOUND (session.Options.Callback).
// CB_RECALL is handed to the core, which returns the delegation from a
// goroutine of its own: the DELEGRETURN needs the fore channel, and the
// server is waiting for this answer first (RFC 8881 §20.2: answer, then
// return). CB_GETATTR is answered from what the core holds (cbGetattr).
func (s *Server) callback(_ context.Context, _ *nfs4.CBSequenceArgs, op nfs4.CBArgop) nfs4.OpRes {
	cb := s.callbacks()
	if op.Op == nfs4.CBOpGetattr {
		a, ok := op.Args.(*nfs4.CBGetattrArgs)
		if !ok || cb == nil {
			return &nfs4.CBGetattrRes{Status: nfs4.ErrBadHandle}
		}
		return cbGetattr(cb, a)
	}
	if op.Op == nfs4.CBOpNotify {
		return cbNotify(cb, op.Args)
	}
	if op.Op != nfs4.CBOpRecall {
		return nil
	}
	a, ok := op.Args.(*nfs4.CBRecallArgs)
	if !ok || cb == nil {
		return &nfs4.StatusRes{Status: nfs4.ErrBadHandle}
	}
	cb.Recall(proto.FH(append([]byte(nil), a.FH...)), stateOf(a.Stateid), a.Truncate)
	return &nfs4.StatusRes{Status: nfs4.OK}
}

// revokedFlags are the SEQUENCE status flags saying state of ours was
// revoked (RFC 8881 §18.46.3); the server does not say which.
const revokedFlags = nfs4.SeqStatusRecallableStateRevoked | nfs4.SeqStatusAdminStateRevoked |
	nfs4.SeqStatusExpiredSomeStateRevoked | nfs4.SeqStatusExpiredAllStateRevoked

// onStatus is session.Options.OnStatus: revoked state makes the core drop
// its delegations.
func (s *Server) onStatus(flags uint32) {
	if flags&revokedFlags == 0 {
		return
	}
	if cb := s.callbacks(); cb != nil {
		cb.Revoked()
	}
}

// leaseMargin is kept off the lease's end for LeaseValid: a SEQUENCE's
// send time is only close to when the server renewed the lease.
const leaseMargin = time.Second

// LeaseValid reports whether the lease was renewed within its time, less
// leaseMargin, and no revoked state that came with the renewal is still
// being acted on (the renewal of a client stopped past its lease carries
// RECALLABLE_STATE_REVOKED): only then may a delegation be acted on
// without a call.
func (s *Server) LeaseValid() bool {
	info := s.sess.Info()
	return info.Lease > leaseMargin && s.now().Sub(info.Renewed) < info.Lease-leaseMargin &&
		info.Unsettled&revokedFlags == 0
}

// ReturnDelegation gives a delegation back (DELEGRETURN). One the server
// revoked is freed instead (FREE_STATEID: the server keeps a revoked
// stateid, and keeps saying so in every SEQUENCE, until the client has
// seen it); one it does not know is gone already.
func (s *Server) ReturnDelegation(ctx context.Context, c *proto.Cred, fh proto.FH, st proto.StateID) error {
	sid := stateidOf(st)
	r, err := s.compound(ctx, c, "DELEGRETURN", []nfs4.Argop{putfh(fh),
		{Op: nfs4.OpDelegReturn, Args: &nfs4.DelegReturnArgs{Stateid: sid}}})
	if err != nil {
		return err
	}
	switch status := r.status(1); status {
	case nfs4.OK, nfs4.ErrBadStateid, nfs4.ErrStaleStateid, nfs4.ErrExpired:
		return nil
	case nfs4.ErrDelegRevoked, nfs4.ErrAdminRevoked:
		r, err := s.compound(ctx, c, "FREE_STATEID", []nfs4.Argop{
			{Op: nfs4.OpFreeStateid, Args: &nfs4.FreeStateidArgs{Stateid: sid}}})
		if err != nil {
			return err
		}
		if st := r.status(0); st != nfs4.OK && st != nfs4.ErrBadStateid {
			return fmt.Errorf("FREE_STATEID of a revoked delegation: %w", statusErr(st))
		}
		return nil
	default:
		return fmt.Errorf("DELEGRETURN: %w", statusErr(status))
	}
}

// wantDeleg is the OPEN's want flags: a read delegation with an open for
// reading, a write delegation with one for writing, when the core asks
// and takes callbacks (keep); else none.
func wantDeleg(a proto.OpenArgs, callbacks bool) (want uint32, keep bool) {
	switch {
	case !a.WantDeleg || !callbacks:
		return nfs4.ShareAccessWantNoDeleg, false
	case a.Access&proto.ShareWrite != 0:
		return nfs4.ShareAccessWantWriteDeleg, true
	}
	return nfs4.ShareAccessWantReadDeleg, true
}

// delegationOf is the core's view of a granted delegation: its kind,
// stateid and, for a write delegation, its space limit in bytes.
func delegationOf(d *nfs4.OpenDelegation) proto.Delegation {
	if d.Type == nfs4.DelegateRead {
		return proto.Delegation{Type: proto.DelegRead, State: stateOf(d.Stateid)}
	}
	limit := d.SpaceLimit.FileSize
	if d.SpaceLimit.LimitBy == nfs4.LimitBlocks {
		limit = uint64(d.SpaceLimit.NumBlocks) * uint64(d.SpaceLimit.BytesPerBlock)
	}
	if limit > math.MaxInt64 {
		limit = math.MaxInt64
	}
	return proto.Delegation{Type: proto.DelegWrite, State: stateOf(d.Stateid), Limit: limit}
}

// cbGetattr answers CB_GETATTR of a file we hold a write delegation of:
// the size and change attribute the core holds (RFC 8881 §10.4.3), only
// those asked for; BADHANDLE for a file not write-delegated here (§20.1.3).
func cbGetattr(cb proto.Callbacks, a *nfs4.CBGetattrArgs) nfs4.OpRes {
	size, change, ok := cb.GetAttr(proto.FH(a.FH))
	if !ok {
		return &nfs4.CBGetattrRes{Status: nfs4.ErrBadHandle}
	}
	res := &nfs4.CBGetattrRes{Status: nfs4.OK}
	if a.AttrRequest.Has(nfs4.AttrChange) {
		res.Attrs.Mask.Set(nfs4.AttrChange)
		res.Attrs.Change = change
	}
	if a.AttrRequest.Has(nfs4.AttrSize) {
		res.Attrs.Mask.Set(nfs4.AttrSize)
		res.Attrs.Size = size
	}
	return res
}
