package server

import (
	"math"
	"time"

	"golang.org/x/sys/unix"

	"hushfs/internal/nfs3"
	"hushfs/internal/nfs4"
	"hushfs/internal/rpc"
	"hushfs/internal/server/v4state"
)

// Read delegations on the wire (v4state decides): the back channel is
// probed with CB_NULL when a session gets one, OPEN for reading grants,
// DELEGRETURN returns, and every change to a file — by an NFSv4.1 client
// or an NFSv3 one — first recalls the delegations of others with
// CB_RECALL, sent from a goroutine of its own (the RPC layer's rule for
// back calls that may be many). Meanwhile the change is answered
// NFS4ERR_DELAY, or, for NFSv3, waited for a little and then answered
// NFS3ERR_JUKEBOX. Local processes changing a delegated file on the
// server's disk are held back by a lease, or seen, and recall too
// (leases.go).

// v3RecallWait is how long an NFSv3 change waits for recalled
// delegations to come back before answering JUKEBOX (the Linux client
// then waits 5 s): a client answering CB_RECALL at once returns its
// delegation within a few round trips.
const v3RecallWait = 500 * time.Millisecond

// v4RecallWait is how long an NFSv4.1 OPEN, READ or change waits for the
// delegations it recalled before answering NFS4ERR_DELAY: a holder that
// answers at once (CB_RECALL, its flush, DELEGRETURN: a few round trips)
// has returned by then, and the caller is answered without the client's
// DELAY pause (50 ms and more) per file; one that does not costs the
// caller this much more, once per retry.
const v4RecallWait = 100 * time.Millisecond

// cbCred is the credential of callbacks on a session: what the client
// asked for first among those we can send.
func cbCred(sec []nfs4.CallbackSecParms) (rpc.OpaqueAuth, bool) {
	for _, p := range sec {
		switch p.Flavor {
		case nfs4.AuthSys:
			return p.Sys.Cred(), true
		case nfs4.AuthNone:
			return rpc.NoAuth, true
		}
	}
	return rpc.OpaqueAuth{}, false
}

// backChannelOf returns the RPC back channel of a callback's connection.
func backChannelOf(cb *v4state.Callback) *rpc.BackChannel {
	ci, _ := cb.Conn.ID.(*rpc.ConnInfo)
	return ci.BackChannel()
}

// probeBackChannel checks, from a goroutine, that the session's back
// channel answers CB_NULL: only then does its client get delegations.
func (s *Server) probeBackChannel(sess *v4state.Session) {
	if !s.v4.delegations || sess == nil {
		return
	}
	s.v4.cbWG.Add(1)
	go func() {
		defer s.v4.cbWG.Done()
		cb, ok := s.v4.state.BeginCallback(sess)
		if !ok {
			return
		}
		var err error
		cred, credOK := cbCred(cb.Sec)
		if bc := backChannelOf(&cb); bc != nil && credOK {
			start := s.now()
			err = bc.Call(s.v4.cbCtx, cb.Program, nfs4.CBVersion, nfs4.CBProcNull, cred, nil, nil)
			s.observeCallback(0, start)
		}
		s.v4.state.EndCallback(sess, false)
		ok = credOK && err == nil
		s.v4.state.SetBackChannelOK(sess, ok)
		if err != nil {
			s.logf("hushfs server: NFSv4.1 back channel of session %x: CB_NULL: %v: no delegations", sess.ID[:], err)
		}
	}()
}

// sendRecalls sends CB_RECALL for each delegation, each from a goroutine.
// A recall that cannot be sent is not retried: the delegation is revoked
// a lease after the recall.
func (s *Server) sendRecalls(recalls []v4state.Recall) {
	for _, r := range recalls {
		if r.Session == nil {
			s.logf("hushfs server: NFSv4.1 delegation to recall has no back channel: revoked after a lease")
			continue
		}
		s.v4.cbWG.Add(1)
		go func() {
			defer s.v4.cbWG.Done()
			s.sendRecall(r)
		}()
	}
}

func (s *Server) sendRecall(r v4state.Recall) {
	cb, ok := s.v4.state.BeginCallback(r.Session)
	if !ok {
		return
	}
	sequenced := false
	defer func() { s.v4.state.EndCallback(r.Session, sequenced) }()
	cred, credOK := cbCred(cb.Sec)
	bc := backChannelOf(&cb)
	if !credOK || bc == nil {
		return
	}
	args := &nfs4.CBCompoundArgs{Tag: []byte("hushfs recall"), MinorVersion: nfs4.MinorVersion, Ops: []nfs4.CBArgop{
		{Op: nfs4.CBOpSequence, Args: &cb.Sequence},
		{Op: nfs4.CBOpRecall, Args: &nfs4.CBRecallArgs{Stateid: r.Stateid, FH: nfs4.FH(r.FileKey)}},
	}}
	var res nfs4.CBCompoundRes
	start := s.now()
	err := bc.Call(s.v4.cbCtx, cb.Program, nfs4.CBVersion, nfs4.CBProcCompound, cred, args, &res)
	s.observeCallback(nfs4.CBOpRecall, start)
	if err == nil && len(res.Results) > 0 && res.Results[0].Op == nfs4.CBOpSequence {
		sequenced = res.Results[0].Res.OpStatus() == nfs4.OK
	}
	switch {
	case err != nil:
		s.logf("hushfs server: NFSv4.1 CB_RECALL: %v", err)
	case res.Status != nfs4.OK:
		s.logf("hushfs server: NFSv4.1 CB_RECALL answered %v", res.Status)
	}
}

// mayChange is asked before this compound's client changes the file key:
// other clients' delegations of it are recalled, and while any is held
// the change is NFS4ERR_DELAY.
func (c *compound) mayChange(key string) nfs4.Status { return c.mayChangeData(key, false) }

// mayChangeData is mayChange, for a WRITE if write: a broken write lease
// kept for the writer's data stays (leases_writer.go).
func (c *compound) mayChangeData(key string, write bool) nfs4.Status {
	st := c.mayOpen(key)
	if st == nfs4.OK && c.s.childConflicts(key, c.client, c) {
		st = nfs4.ErrDelay // its directory's delegation (nfs4_dirchild.go)
	}
	if st == nfs4.OK && !(write && c.s.v4.leases.writerWrites(key, c.client)) {
		c.s.v4.leases.changing(key)
	}
	if st == nfs4.OK && c.s.v4.delegations {
		// No delegation of the file is granted until the change is made.
		c.s.v4.state.BeginChange(key)
		c.after = append(c.after, func() { c.s.v4.state.EndChange(key) })
	}
	return st
}

// mayOpen is mayChange for an OPEN for writing, which changes nothing yet:
// a delegation its client holds itself stays, with its lease, until the
// client writes.
func (c *compound) mayOpen(key string) nfs4.Status {
	if !c.s.v4.state.HasDelegations() {
		return nfs4.OK
	}
	if !c.s.recallWait(key, c.client, c.s.v4.state.Conflicts, c.s.v4.waitLimit()) {
		return nfs4.ErrDelay
	}
	return nfs4.OK
}

// mayChangeName is mayChange for the object name names in dir, if any.
func (c *compound) mayChangeName(dir *node, name []byte) nfs4.Status {
	if !c.s.v4.state.HasDelegations() && !c.s.v4.leases.held() {
		return nfs4.OK
	}
	if fh, ok := c.s.handleAt(dir.fd, string(name)); ok {
		return c.mayChange(string(fh))
	}
	return nfs4.OK
}

// mayRead is asked before this compound's client opens or reads the file
// key: another client's write delegation of it is recalled, and while it
// is held the read is NFS4ERR_DELAY (its holder may have written data the
// server has not seen).
func (c *compound) mayRead(key string) nfs4.Status {
	if !c.s.v4.state.HasDelegations() {
		return nfs4.OK
	}
	if !c.s.recallWait(key, c.client, c.s.v4.state.ReadConflicts, c.s.v4.waitLimit()) {
		return nfs4.ErrDelay
	}
	return nfs4.OK
}

// mayChange3 is asked before an NFSv3 client changes the file with handle
// fh: delegations of it are recalled and waited for, a little; false means
// they are still held (JUKEBOX).
func (s *Server) mayChange3(fh []byte) bool {
	if !s.v4.state.HasDelegations() {
		s.v4.leases.changing(string(fh))
		return true
	}
	ok := s.wait3(fh, s.v4.state.Conflicts) && s.childConflicts3(fh)
	if ok {
		s.v4.leases.changing(string(fh))
	}
	return ok
}

// mayRead3 is mayChange3 for an NFSv3 READ: write delegations of the file
// are recalled and waited for.
func (s *Server) mayRead3(fh []byte) bool {
	return !s.v4.state.HasDelegations() || s.wait3(fh, s.v4.state.ReadConflicts)
}

// wait3 recalls what conflicts finds and waits a little for it to be
// returned; false means it is still held.
func (s *Server) wait3(fh []byte, conflicts func(string, *v4state.Client) ([]v4state.Recall, bool)) bool {
	return s.recallWait(string(fh), nil, conflicts, v3RecallWait)
}

// waitLimit is how long NFSv4.1 calls wait for recalled delegations.
func (v *v4) waitLimit() time.Duration {
	switch {
	case v.recallWait < 0:
		return 0
	case v.recallWait == 0:
		return v4RecallWait
	}
	return v.recallWait
}

// recallWait recalls the delegations of key that conflicts finds for
// client (nil: an NFSv3 client) and waits up to limit for them to be
// returned; false means some are still held.
func (s *Server) recallWait(key string, client *v4state.Client, conflicts func(string, *v4state.Client) ([]v4state.Recall, bool), limit time.Duration) bool {
	recalls, wait := conflicts(key, client)
	s.sendRecalls(recalls)
	if len(recalls) == 0 && client != nil {
		// Recalled before, by another call or this one's earlier try:
		// its holder has had the recall's round trip already and is
		// slow to return it; waiting again at every NFSv4.1 retry would
		// only hold the caller (and its lease's renewals) back. (An
		// NFSv3 client retries JUKEBOX seconds later: it waits again.)
		limit = 0
	}
	for deadline := time.Now().Add(limit); wait && time.Now().Before(deadline); {
		time.Sleep(2 * time.Millisecond)
		// A delegation granted meanwhile is marked recalled by this
		// look too: it must be recalled now, or nobody ever will.
		recalls, wait = conflicts(key, client)
		s.sendRecalls(recalls)
	}
	return !wait
}

// mayChangeName3 is mayChange3 for the object name names in the directory
// with handle dir.
func (s *Server) mayChangeName3(dirFH []byte, name []byte) bool {
	if !s.v4.state.HasDelegations() && !s.v4.leases.held() {
		return true
	}
	dir, err := s.resolve(dirFH)
	if err != nil {
		return true // the operation fails on its own
	}
	defer s.cache.release(dir)
	if fh, ok := s.handleAt(dir.fd, string(name)); ok {
		return s.mayChange3(fh)
	}
	return true
}

func (c *compound) delegReturn(a *nfs4.StateidArgs) nfs4.Status {
	n, st := c.regularFile()
	if st == nfs4.ErrIsDir && c.cur.n != nil {
		n, st = c.cur.n, nfs4.OK // a directory delegation (nfs4_dirdeleg.go)
	}
	if st != nfs4.OK {
		return c.status(st)
	}
	sid, st := c.stateid(&a.Stateid)
	if st == nfs4.OK {
		st = c.s.v4.state.DelegReturn(c.client, &sid, n.key)
	}
	if st == nfs4.OK {
		c.s.v4.leases.returned(n.key) // the lease may go: a local writer may be waiting
	}
	return c.status(st)
}

// grantRead is the open_delegation4 of an OPEN for reading of n: a read
// delegation when the client wants one (or leaves it to us) and v4state
// grants it, else none with the reason.
func (c *compound) grantRead(n *node, access, deny, want uint32) nfs4.OpenDelegation {
	if !c.s.v4.delegations || access != nfs4.ShareAccessRead || deny != nfs4.ShareDenyNone ||
		(want != nfs4.ShareAccessWantNoPreference && want != nfs4.ShareAccessWantReadDeleg && want != nfs4.ShareAccessWantAnyDeleg) {
		return noDelegation(want)
	}
	var sid nfs4.Stateid
	ok := c.s.v4.leases.grant(n, func() (ok bool) {
		sid, ok = c.s.v4.state.GrantRead(c.client, n.key)
		return ok
	})
	if !ok {
		return noDelegation(want)
	}
	c.s.grantedDeleg("read")
	// Who may read is the server's to check at each OPEN and ACCESS; the
	// ACE grants nothing beyond (RFC 8881 §10.4.1: an empty ACE means
	// the client asks ACCESS).
	return nfs4.OpenDelegation{Type: nfs4.DelegateRead, Stateid: sid,
		Permissions: nfs4.ACE{Type: 0, AccessMask: 0, Who: []byte("EVERYONE@")}}
}

// grantWrite is the open_delegation4 of an OPEN for writing of n: a write
// delegation when the client wants one (or leaves it to us), no other
// client has the file open or delegated, and the server can write-lease
// it (no local process has it open).
func (c *compound) grantWrite(n *node, deny, want uint32) nfs4.OpenDelegation {
	if !c.s.v4.delegations || deny != nfs4.ShareDenyNone ||
		(want != nfs4.ShareAccessWantNoPreference && want != nfs4.ShareAccessWantWriteDeleg && want != nfs4.ShareAccessWantAnyDeleg) {
		return noDelegation(want)
	}
	var sid nfs4.Stateid
	ok := c.s.v4.leases.grantWrite(n, func() (ok bool) {
		sid, ok = c.s.v4.state.GrantWrite(c.client, n.key)
		return ok
	})
	if !ok {
		return noDelegation(want)
	}
	c.s.grantedDeleg("write")
	return nfs4.OpenDelegation{Type: nfs4.DelegateWrite, Stateid: sid, SpaceLimit: c.s.spaceLimit(n),
		Permissions: nfs4.ACE{Type: 0, AccessMask: 0, Who: []byte("EVERYONE@")}}
}

// spaceLimit is the nfs_space_limit4 of a write delegation of n: the file
// may grow by the space free to unprivileged users now without the
// holder flushing first (RFC 8881 §10.4.1), since nothing reserves it.
func (s *Server) spaceLimit(n *node) nfs4.SpaceLimit {
	var st unix.Stat_t
	var fs unix.Statfs_t
	if unix.Fstat(n.fd, &st) != nil || unix.Fstatfs(n.fd, &fs) != nil {
		return nfs4.SpaceLimit{LimitBy: nfs4.LimitSize, FileSize: 0}
	}
	free := fs.Bavail * uint64(fs.Bsize)
	limit := uint64(st.Size) + free
	if limit > math.MaxInt64 || limit < free {
		limit = math.MaxInt64
	}
	return nfs4.SpaceLimit{LimitBy: nfs4.LimitSize, FileSize: limit}
}

// cbGetattrWait bounds how long a GETATTR waits for a write delegation's
// holder to answer CB_GETATTR before recalling the delegation instead.
const cbGetattrWait = 2 * time.Second

// holderAttrs serves another client's GETATTR of the size or change of a
// write-delegated file: the holder is asked (CB_GETATTR, RFC 8881
// §10.4.3) and its size reported, with the change attribute moved on by
// each change the holder's answers showed. A holder that cannot answer
// has its delegation recalled (NFS4ERR_DELAY meanwhile).
func (c *compound) holderAttrs(n *node, mask nfs4.Bitmap, f *nfs4.Fattr) nfs4.Status {
	if !c.s.v4.state.HasDelegations() || !n.isReg() || (!mask.Has(nfs4.AttrSize) && !mask.Has(nfs4.AttrChange)) {
		return nfs4.OK
	}
	r, held, recalled := c.s.v4.state.WriteHolder(n.key, c.client)
	switch {
	case !held:
		return nfs4.OK
	case recalled:
		return nfs4.ErrDelay
	}
	attrs, ok := c.s.cbGetattr(r)
	if ok {
		if bumps, ok := c.s.v4.state.HolderAnswered(r.Stateid, attrs.Change, attrs.Size); ok {
			if attrs.Size != f.Size || bumps > 0 {
				f.Change += bumps + 1
			}
			f.Size = attrs.Size
			return nfs4.OK
		}
	}
	c.s.sendRecalls(c.s.v4.state.RecallOne(r.Stateid))
	return nfs4.ErrDelay
}

// getattr3 is an NFSv3 GETATTR. Of a file another client holds a write
// delegation of, whose data may be at the holder only, the holder is
// asked (CB_GETATTR) as for a v4.1 GETATTR and its size reported; v3 has
// no change attribute, so each change the holder's answers show moves
// mtime and ctime on by a nanosecond, which a v3 client's cache checks
// see. A holder that cannot answer has the delegation recalled, and the
// GETATTR waits for its return as a v3 READ does (JUKEBOX if it is not
// back within v3RecallWait).
func (s *Server) getattr3(a *nfs3.GetattrArgs) nfs3.GetattrRes {
	r := s.getattr(a)
	if r.Status != nfs3.OK || r.Attr.Type != nfs3.TypeReg || !s.v4.state.HasDelegations() {
		return r
	}
	rc, held, recalled := s.v4.state.WriteHolder(string(a.Obj), nil)
	if !held {
		return r
	}
	if !recalled {
		if attrs, ok := s.cbGetattr(rc); ok {
			if bumps, ok := s.v4.state.HolderAnswered(rc.Stateid, attrs.Change, attrs.Size); ok {
				if attrs.Size != r.Attr.Size || bumps > 0 {
					r.Attr.Mtime = laterBy(r.Attr.Mtime, bumps+1)
					r.Attr.Ctime = laterBy(r.Attr.Ctime, bumps+1)
				}
				r.Attr.Size = attrs.Size
				return r
			}
		}
		s.sendRecalls(s.v4.state.RecallOne(rc.Stateid))
	}
	if !s.wait3(a.Obj, s.v4.state.ReadConflicts) {
		return nfs3.GetattrRes{Status: nfs3.ErrJukebox}
	}
	return s.getattr(a)
}

// laterBy is t moved on by n nanoseconds.
func laterBy(t nfs3.Time, n uint64) nfs3.Time {
	ns := uint64(t.Nseconds) + n
	return nfs3.Time{Seconds: t.Seconds + uint32(ns/1e9), Nseconds: uint32(ns % 1e9)}
}

// cbGetattr asks the holder of the write delegation r for the file's size
// and change attribute, waiting at most cbGetattrWait.
func (s *Server) cbGetattr(r v4state.Recall) (nfs4.Fattr, bool) {
	if r.Session == nil {
		return nfs4.Fattr{}, false
	}
	type answer struct {
		f  nfs4.Fattr
		ok bool
	}
	done := make(chan answer, 1)
	s.v4.cbWG.Add(1)
	go func() {
		defer s.v4.cbWG.Done()
		f, ok := s.sendCBGetattr(r)
		done <- answer{f, ok}
	}()
	select {
	case a := <-done:
		return a.f, a.ok
	case <-time.After(cbGetattrWait):
		s.logf("hushfs server: NFSv4.1 CB_GETATTR: no answer within %v: recalling", cbGetattrWait)
		return nfs4.Fattr{}, false
	}
}

func (s *Server) sendCBGetattr(r v4state.Recall) (nfs4.Fattr, bool) {
	cb, ok := s.v4.state.BeginCallback(r.Session)
	if !ok {
		return nfs4.Fattr{}, false
	}
	sequenced := false
	defer func() { s.v4.state.EndCallback(r.Session, sequenced) }()
	cred, credOK := cbCred(cb.Sec)
	bc := backChannelOf(&cb)
	if !credOK || bc == nil {
		return nfs4.Fattr{}, false
	}
	args := &nfs4.CBCompoundArgs{Tag: []byte("hushfs getattr"), MinorVersion: nfs4.MinorVersion, Ops: []nfs4.CBArgop{
		{Op: nfs4.CBOpSequence, Args: &cb.Sequence},
		{Op: nfs4.CBOpGetattr, Args: &nfs4.CBGetattrArgs{FH: nfs4.FH(r.FileKey),
			AttrRequest: nfs4.NewBitmap(nfs4.AttrChange, nfs4.AttrSize)}},
	}}
	var res nfs4.CBCompoundRes
	start := s.now()
	err := bc.Call(s.v4.cbCtx, cb.Program, nfs4.CBVersion, nfs4.CBProcCompound, cred, args, &res)
	s.observeCallback(nfs4.CBOpGetattr, start)
	if err == nil && len(res.Results) > 0 && res.Results[0].Op == nfs4.CBOpSequence {
		sequenced = res.Results[0].Res.OpStatus() == nfs4.OK
	}
	if err != nil || res.Status != nfs4.OK || len(res.Results) != 2 {
		if err != nil {
			s.logf("hushfs server: NFSv4.1 CB_GETATTR: %v", err)
		}
		return nfs4.Fattr{}, false
	}
	g, ok := res.Results[1].Res.(*nfs4.CBGetattrRes)
	if !ok || g.Status != nfs4.OK || !g.Attrs.Mask.Has(nfs4.AttrChange) || !g.Attrs.Mask.Has(nfs4.AttrSize) {
		return nfs4.Fattr{}, false
	}
	return g.Attrs, true
}
