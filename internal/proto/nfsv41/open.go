package nfsv41

import (
	"context"
	"fmt"

	"hushfs/internal/nfs4"
	"hushfs/internal/proto"
)

// Opens (proto.Opener) and the I/O done under them (proto.StateIO).
//
// An open belongs to an open owner; there is one per identity (uid), as
// Linux has, so the opens of one user's processes of a file share one
// open stateid, which the server upgrades with each OPEN and which
// OPEN_DOWNGRADE and CLOSE undo. The core counts its descriptors and
// decides which of these to send; this package only speaks them.

var (
	_ proto.Opener  = (*Server)(nil)
	_ proto.StateIO = (*Server)(nil)
)

// openOwner is the open owner of c's opens: one per uid. The client ID
// already tells this mount from any other client.
func (s *Server) openOwner(c *proto.Cred) nfs4.StateOwner {
	return nfs4.StateOwner{ClientID: s.sess.Info().ClientID, Owner: fmt.Appendf(nil, "hushfs open uid %d", c.UID)}
}

func stateidOf(st proto.StateID) nfs4.Stateid { return nfs4.Stateid{Seqid: st.Seq, Other: st.Other} }
func stateOf(st nfs4.Stateid) proto.StateID   { return proto.StateID{Seq: st.Seqid, Other: st.Other} }

// ioStateid is st for READ, WRITE and SETATTR: seqid 0 means the server's
// current one (RFC 8881 §8.2.2), so an OPEN upgrading the state while the
// I/O is on its way does not make it OLD_STATEID.
func ioStateid(st proto.StateID) nfs4.Stateid { return nfs4.Stateid{Other: st.Other} }

// stateErr is statusErr, marking the statuses that say the server no
// longer knows the state named (the core reopens once).
func stateErr(st nfs4.Status) error {
	err := statusErr(st)
	switch st {
	case nfs4.ErrBadStateid, nfs4.ErrExpired, nfs4.ErrAdminRevoked, nfs4.ErrStaleStateid,
		nfs4.ErrDelegRevoked, nfs4.ErrStaleClientID:
		e := err.(proto.Error)
		e.Cond = proto.CondBadState
		return e
	}
	return err
}

// Open opens a file in one COMPOUND: by handle (CLAIM_FH), with its
// attributes and the caller's rights (what v3's close-to-open GETATTR and
// ACCESS bring), or by name in a directory (CLAIM_NULL; creating it if
// a.Create is set), with the file's handle and the directory's attributes
// around the OPEN and its change_info. A delegation is asked for when
// a.WantDeleg is set and the core takes callbacks (deleg.go: wantDeleg);
// otherwise none is wanted, and one granted anyway is given back at once.
func (s *Server) Open(ctx context.Context, c *proto.Cred, a proto.OpenArgs) (proto.OpenRes, error) {
	want, keep := wantDeleg(a, s.callbacks() != nil)
	open := &nfs4.OpenArgs{
		ShareAccess: a.Access | want,
		ShareDeny:   a.Deny,
		Owner:       s.openOwner(c),
	}
	byName := a.Create != nil || len(a.FH) == 0
	var ops []nfs4.Argop
	iOpen, iFH, iAttr, iAccess, iPre, iPost := -1, -1, -1, -1, -1, -1
	name := "OPEN"
	if byName {
		open.Claim = nfs4.OpenClaim{Type: nfs4.ClaimNull, File: []byte(a.Name)}
		if how := a.Create; how != nil {
			name = "CREATE" // counted as v3's, which it replaces
			open.OpenType = nfs4.OpenCreate
			setCreateHow(open, how)
		}
		ops = append(ops, putfh(a.Dir), getattr(fileAttrs))
		iPre = 1
	} else {
		open.Claim = nfs4.OpenClaim{Type: nfs4.ClaimFH}
		ops = append(ops, putfh(a.FH))
	}
	iOpen = len(ops)
	ops = append(ops, nfs4.Argop{Op: nfs4.OpOpen, Args: open})
	if byName {
		iFH = len(ops)
		ops = append(ops, nfs4.Argop{Op: nfs4.OpGetFH})
	}
	iAttr = len(ops)
	ops = append(ops, getattr(fileAttrs))
	if a.Check != 0 {
		iAccess = len(ops)
		ops = append(ops, nfs4.Argop{Op: nfs4.OpAccess, Args: &nfs4.AccessArgs{Access: a.Check}})
	}
	// The first READ under the open just made (the current stateid, RFC
	// 8881 §16.2.3.1.2), last so that its failure costs only the data,
	// and the change attribute again after it: the data is the file's as
	// the OPEN's attributes describe it only if nothing changed between.
	iRead, iChange := -1, -1
	if n := s.readFirstCount(a.ReadFirst); n > 0 && !byName && a.Access&proto.ShareRead != 0 {
		iRead = len(ops)
		ops = append(ops, nfs4.Argop{Op: nfs4.OpRead, Args: &nfs4.ReadArgs{Stateid: nfs4.CurrentStateid, Count: n}})
		iChange = len(ops)
		ops = append(ops, getattr(changeAttr))
	}
	if byName {
		ops = append(ops, putfh(a.Dir), getattr(fileAttrs))
		iPost = len(ops) - 1
	}
	// A CLOSE of this open still queued is taken back, or goes first
	// (closeq.go).
	var lead []*pendingClose
	var taken *pendingClose
	if byName {
		lead = s.cq.takeLead(c)
	} else if p, back := s.cq.reclaim(c, a.FH, a.Access); p != nil {
		lead = []*pendingClose{p}
	} else {
		taken = back
	}
	r, err := s.compoundWait(ctx, c, name, lead, ops, !a.NoWait)
	if err == nil && r.status(iOpen) == nfs4.OK {
		taken = nil
	}
	if taken != nil {
		// The OPEN did not take it: the open is still there to close.
		s.cq.requeue([]*pendingClose{taken})
	}
	if err != nil {
		return proto.OpenRes{}, err
	}
	out := proto.OpenRes{Status: stateErr(r.status(iOpen))}
	if r.res.Status == nfs4.ErrDelay {
		out.Status = proto.ErrDelay // a.NoWait (waited out otherwise)
	}
	var pre proto.PostAttr
	if byName {
		pre, _ = r.attrs(iPre)
	}
	o, ok := r.at(iOpen).(*nfs4.OpenRes)
	if !ok || o.Status != nfs4.OK {
		out.DirWcc = failedWcc(pre)
		return out, nil
	}
	out.State = stateOf(o.Stateid)
	s.cq.opened(out.State, a.Access)
	if byName {
		if g, ok := r.at(iFH).(*nfs4.GetFHRes); ok && g.Status == nfs4.OK && len(g.FH) > 0 {
			out.FH = proto.FH(g.FH)
		}
		dirAttr, _ := r.attrs(iPost)
		out.DirWcc = wccOf(&o.CInfo, pre, dirAttr)
	} else {
		out.FH = a.FH
	}
	out.Attr, _ = r.attrs(iAttr)
	if iAccess >= 0 {
		if acc, ok := r.at(iAccess).(*nfs4.AccessRes); ok && acc.Status == nfs4.OK {
			out.Access, out.Granted = acc.Access&acc.Supported&a.Check, true
		}
	}
	if rd, ok := r.at(iRead).(*nfs4.ReadRes); ok && rd.Status == nfs4.OK && out.Attr.Present && out.Attr.Attr.HasChange {
		if g, ok := r.at(iChange).(*nfs4.GetattrRes); ok && g.Status == nfs4.OK && g.Attrs.Change == out.Attr.Attr.Change {
			out.Data, out.DataEOF, out.HasData = rd.Data, rd.EOF, true
		}
	}
	if d := o.Delegation; (d.Type == nfs4.DelegateRead || d.Type == nfs4.DelegateWrite) && len(out.FH) > 0 {
		if keep {
			out.Deleg = delegationOf(&d)
		} else if err := s.ReturnDelegation(ctx, c, out.FH, stateOf(d.Stateid)); err != nil {
			// The server takes it back when it recalls it and we do not
			// answer, or at the lease's end.
			s.logf("hushfs: NFSv4.1 returning a delegation we did not want: %v", err)
		}
	}
	return out, nil
}

// CloseOpen closes an open (CLOSE): queued, to ride in the next COMPOUND
// (closeq.go), unless locks were taken under it or the mount is closing.
// Locks the server still holds under it (LOCKS_HELD: a lock owner whose
// unlock never came) are released first, and the open's lock states are
// forgotten. A state the server no longer knows is closed already.
func (s *Server) CloseOpen(ctx context.Context, c *proto.Cred, fh proto.FH, st proto.StateID) error {
	if len(s.locks.ownersUnder(fh, st.Other)) == 0 && s.cq.add(c, fh, st) {
		return nil
	}
	defer s.locks.forgetOpen(st.Other)
	defer s.cq.sent([]*pendingClose{{cred: *c, fh: fh, st: st}})
	closeOps := []nfs4.Argop{putfh(fh), {Op: nfs4.OpClose, Args: &nfs4.CloseArgs{Stateid: stateidOf(st)}}}
	r, err := s.compound(ctx, c, "CLOSE", closeOps)
	if err != nil {
		return err
	}
	if r.status(1) == nfs4.ErrLocksHeld {
		s.unlockAll(ctx, c, fh, st.Other)
		if r, err = s.compound(ctx, c, "CLOSE", closeOps); err != nil {
			return err
		}
	}
	if st := r.status(1); !closedStatus(st) {
		return fmt.Errorf("CLOSE: %w", statusErr(st))
	}
	return nil
}

// flushCloses sends every queued CLOSE, in COMPOUNDs of their own
// (closeDelay passed with no COMPOUND to carry them, the queue is full, or
// the mount is closing).
func (s *Server) flushCloses(ctx context.Context) {
	for {
		ps := s.cq.takeAny(maxClosesPerCompound)
		if len(ps) == 0 {
			return
		}
		var ops []nfs4.Argop
		for _, p := range ps {
			ops = append(ops, closeOps(p)...)
		}
		r, err := s.compoundOnce(ctx, &ps[0].cred, "CLOSE", nil, ops)
		if err != nil {
			s.cq.sent(ps)
			s.logf("hushfs: NFSv4.1 sending %d CLOSEs: %v (the server drops the opens when our lease ends)", len(ps), err)
			if ctx.Err() != nil {
				return
			}
			continue
		}
		s.closesDone(ps, r, 0)
	}
}

// Downgrade narrows an open to the share access its remaining opens need
// (OPEN_DOWNGRADE), returning the open's new stateid.
func (s *Server) Downgrade(ctx context.Context, c *proto.Cred, fh proto.FH, st proto.StateID, access, deny uint32) (proto.StateID, error) {
	r, err := s.compound(ctx, c, "OPEN_DOWNGRADE", []nfs4.Argop{putfh(fh), {Op: nfs4.OpOpenDowngrade,
		Args: &nfs4.OpenDowngradeArgs{Stateid: stateidOf(st), ShareAccess: access, ShareDeny: deny}}})
	if err != nil {
		return st, err
	}
	d, ok := r.at(1).(*nfs4.OpenDowngradeRes)
	if !ok || d.Status != nfs4.OK {
		return st, fmt.Errorf("OPEN_DOWNGRADE: %w", stateErr(r.status(1)))
	}
	s.cq.downgraded(st, access)
	return stateOf(d.Stateid), nil
}

// readFirstMax is the most an OPEN's first READ asks for (OpenArgs.ReadFirst
// is the core's wish), and what the session asks the server to be able to
// keep of a reply for a retry besides readFirstRoom: an OPEN's reply must be
// kept (it is not idempotent), READ data and all. A server keeps a slot's
// last reply, as large as it was (ganesha 4.3 grants this; one granting
// less gets first reads that fit what it keeps): at most a slot's worth
// per COMPOUND in flight, as a READ of that size would hold in flight.
const (
	readFirstMax  = 1 << 20
	readFirstRoom = 8 << 10 // SEQUENCE, OPEN, GETATTRs, ACCESS, CLOSEs carried
)

// readFirstCount is how much an OPEN's first READ asks for: want, within
// what the server keeps of a reply and sends in one.
func (s *Server) readFirstCount(want uint32) uint32 {
	if want == 0 {
		return 0
	}
	fore := s.sess.Info().Fore
	limit := min(fore.MaxResponseSizeCached, fore.MaxResponseSize)
	if limit <= readFirstRoom+4096 {
		return 0
	}
	return min(want, readFirstMax, limit-readFirstRoom)
}

// ReadState is Read under an open's state.
func (s *Server) ReadState(ctx context.Context, c *proto.Cred, st proto.StateID, fh proto.FH, off uint64, dst []byte) (proto.ReadRes, error) {
	return s.read(ctx, c, ioStateid(st), stateErr, fh, off, dst)
}

// WriteState is Write under an open's state.
func (s *Server) WriteState(ctx context.Context, c *proto.Cred, st proto.StateID, fh proto.FH, off uint64, data []byte, stable proto.Stable) (proto.WriteRes, error) {
	return s.write(ctx, c, ioStateid(st), stateErr, fh, off, data, stable)
}

// SetAttrState is SetAttr under an open's state (a size change needs it:
// share reservations and mandatory locks are checked against it).
func (s *Server) SetAttrState(ctx context.Context, c *proto.Cred, st proto.StateID, fh proto.FH, in proto.SetAttrs) (proto.WccRes, error) {
	return s.setattr(ctx, c, ioStateid(st), stateErr, fh, in)
}

// setCreateHow fills an OPEN that creates with how's createhow4: the
// attributes to set, or EXCLUSIVE4_1's verifier.
func setCreateHow(open *nfs4.OpenArgs, how *proto.CreateHow) {
	switch how.Mode {
	case proto.Unchecked:
		open.CreateMode = nfs4.Unchecked
		open.CreateAttrs = fattrOf(&how.Attrs)
	case proto.Guarded:
		open.CreateMode = nfs4.Guarded
		open.CreateAttrs = fattrOf(&how.Attrs)
	case proto.Exclusive:
		open.CreateMode = nfs4.Exclusive41
		open.CreateVerf = nfs4.Verifier(how.Verf)
	}
}
