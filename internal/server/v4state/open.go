package v4state

import (
	"bytes"
	"slices"

	"hushfs/internal/nfs4"
)

// File is the state of one file: its opens, byte-range locks and
// delegations.
type File struct {
	key    string
	opens  []*Open
	locks  []*lockRange
	delegs []*Deleg
}

// OpenOwner is an open owner: a client's name for who opens (Linux: one per
// user credential).
type OpenOwner struct {
	client *Client
	owner  []byte
	opens  map[string]*Open // by file key
}

// Open is an open stateid: what one open owner has of one file open, the
// union of its OPENs' share access and deny.
type Open struct {
	sid    nfs4.Stateid
	owner  *OpenOwner
	file   *File
	access uint32 // nfs4.ShareAccessRead|Write
	deny   uint32 // nfs4.ShareDeny*
	locks  []*LockState
}

// OpenArgs is an OPEN's request of the state.
type OpenArgs struct {
	Owner   []byte
	FileKey string
	Access  uint32 // ShareAccessRead|Write (want bits removed)
	Deny    uint32
	Reclaim bool // CLAIM_PREVIOUS
}

// CheckOpenClaim decides whether client cl may open now: a reclaim only in
// the grace period and from a client of the previous instance that has not
// sent RECLAIM_COMPLETE (else NO_GRACE); anything else only out of the
// grace period, and only once the client has sent RECLAIM_COMPLETE, which
// a client must before its first non-reclaim lock (RFC 8881 §18.51.3;
// else GRACE).
func (st *State) CheckOpenClaim(cl *Client, reclaim bool) nfs4.Status {
	st.mu.Lock()
	defer st.mu.Unlock()
	return st.claimLocked(cl, reclaim)
}

func (st *State) claimLocked(cl *Client, reclaim bool) nfs4.Status {
	grace := st.inGraceLocked()
	switch {
	case reclaim && (!grace || !cl.mayReclaim || cl.reclaimComplete):
		return nfs4.ErrNoGrace
	case !reclaim && (grace || !cl.reclaimComplete):
		return nfs4.ErrGrace
	}
	if reclaim {
		st.grace.reclaimed(st.now())
	}
	return nfs4.OK
}

// ValidShare checks an OPEN's share_access (the want bits masked off) and
// share_deny.
func ValidShare(access, deny uint32) bool {
	return access >= nfs4.ShareAccessRead && access <= nfs4.ShareAccessBoth && deny <= nfs4.ShareDenyBoth
}

// Open records an OPEN by client cl: a new open stateid for the owner and
// file, or the owner's existing one upgraded to the union of access and
// deny (its seqid advanced). Another owner's open whose deny excludes the
// access asked, or whose access the deny asked excludes, is SHARE_DENIED.
func (st *State) Open(cl *Client, a *OpenArgs) (nfs4.Stateid, nfs4.Status) {
	st.mu.Lock()
	defer st.mu.Unlock()
	if cl.gone {
		return nfs4.Stateid{}, nfs4.ErrStaleClientID
	}
	if s := st.claimLocked(cl, a.Reclaim); s != nfs4.OK {
		return nfs4.Stateid{}, s
	}
	oo := cl.openOwners[ownerKey(a.Owner)]
	f := st.fileLocked(a.FileKey)
	for _, o := range f.opens {
		if o.owner == oo {
			continue
		}
		if a.Access&o.deny != 0 || a.Deny&o.access != 0 {
			st.dropFileIfIdle(f)
			return nfs4.Stateid{}, nfs4.ErrShareDenied
		}
	}
	if oo == nil {
		oo = &OpenOwner{client: cl, owner: bytes.Clone(a.Owner), opens: make(map[string]*Open)}
		cl.openOwners[ownerKey(a.Owner)] = oo
	}
	cl.lastRenew = st.now()
	if o := oo.opens[a.FileKey]; o != nil {
		o.access |= a.Access
		o.deny |= a.Deny
		bumpSeqid(&o.sid)
		return o.sid, nfs4.OK
	}
	if cl.nstate >= MaxStatePerClient {
		st.dropFileIfIdle(f)
		return nfs4.Stateid{}, nfs4.ErrResource
	}
	o := &Open{owner: oo, file: f, access: a.Access, deny: a.Deny}
	o.sid = nfs4.Stateid{Seqid: 1, Other: st.newOther()}
	oo.opens[a.FileKey] = o
	f.opens = append(f.opens, o)
	st.stateids[o.sid.Other] = stateRec{kind: kindOpen, open: o}
	cl.nstate++
	return o.sid, nfs4.OK
}

// openOfLocked finds the open stateid s of client cl on file key.
func (st *State) openOfLocked(cl *Client, s *nfs4.Stateid, key string) (*Open, nfs4.Status) {
	if IsSpecial(s) {
		return nil, nfs4.ErrBadStateid
	}
	rec, status := st.lookupLocked(s)
	if status != nfs4.OK {
		return nil, status
	}
	if rec.kind != kindOpen || rec.open.owner.client != cl {
		return nil, nfs4.ErrBadStateid
	}
	if rec.open.file.key != key {
		return nil, nfs4.ErrBadStateid
	}
	return rec.open, nfs4.OK
}

// Close serves CLOSE: the open ends, unless its lock owners still hold
// locks (LOCKS_HELD). It returns the stateid, now invalid, with its seqid
// advanced.
func (st *State) Close(cl *Client, s *nfs4.Stateid, key string) (nfs4.Stateid, nfs4.Status) {
	st.mu.Lock()
	defer st.mu.Unlock()
	o, status := st.openOfLocked(cl, s, key)
	if status != nfs4.OK {
		return nfs4.Stateid{}, status
	}
	for _, ls := range o.locks {
		if ls.held() {
			return nfs4.Stateid{}, nfs4.ErrLocksHeld
		}
	}
	sid := o.sid
	bumpSeqid(&sid)
	st.releaseOpenLocked(o)
	cl.lastRenew = st.now()
	return sid, nfs4.OK
}

// OpenDowngrade serves OPEN_DOWNGRADE: the open's access and deny become
// the ones given, which must be within what it has (else INVAL).
func (st *State) OpenDowngrade(cl *Client, s *nfs4.Stateid, key string, access, deny uint32) (nfs4.Stateid, nfs4.Status) {
	st.mu.Lock()
	defer st.mu.Unlock()
	o, status := st.openOfLocked(cl, s, key)
	if status != nfs4.OK {
		return nfs4.Stateid{}, status
	}
	if !ValidShare(access, deny) || access&^o.access != 0 || deny&^o.deny != 0 {
		return nfs4.Stateid{}, nfs4.ErrInval
	}
	o.access, o.deny = access, deny
	bumpSeqid(&o.sid)
	cl.lastRenew = st.now()
	return o.sid, nfs4.OK
}

// releaseOpenLocked ends an open and the lock stateids made from it.
func (st *State) releaseOpenLocked(o *Open) {
	for _, ls := range slices.Clone(o.locks) {
		st.releaseLockStateLocked(ls)
	}
	f := o.file
	f.opens = slices.DeleteFunc(f.opens, func(x *Open) bool { return x == o })
	delete(o.owner.opens, f.key)
	if len(o.owner.opens) == 0 {
		delete(o.owner.client.openOwners, ownerKey(o.owner.owner))
	}
	delete(st.stateids, o.sid.Other)
	o.owner.client.nstate--
	st.dropFileIfIdle(f)
}

// CheckIO checks the stateid of a READ (write false), WRITE or SETATTR of
// the size (write true) by client cl on file key: an open or lock
// stateid of cl for that file, whose open has the access (a WRITE through
// an open for reading only is OPENMODE; a READ may go through an open for
// writing); or a special stateid, allowed unless another open's deny
// excludes the access (LOCKED). The READ bypass stateid skips that check;
// it is not for writing (BAD_STATEID).
func (st *State) CheckIO(cl *Client, s *nfs4.Stateid, key string, write bool) nfs4.Status {
	st.mu.Lock()
	defer st.mu.Unlock()
	if isBypass(s) {
		if write {
			return nfs4.ErrBadStateid
		}
		return nfs4.OK
	}
	if isAnonymous(s) {
		f := st.files[key]
		if f == nil {
			return nfs4.OK
		}
		want := uint32(nfs4.ShareDenyRead)
		if write {
			want = nfs4.ShareDenyWrite
		}
		for _, o := range f.opens {
			if o.deny&want != 0 {
				return nfs4.ErrLocked
			}
		}
		return nfs4.OK
	}
	rec, status := st.lookupLocked(s)
	if status != nfs4.OK {
		return status
	}
	var o *Open
	switch rec.kind {
	case kindOpen:
		o = rec.open
	case kindLock:
		o = rec.lock.open
	case kindDeleg:
		d := rec.deleg
		switch {
		case d.client != cl || d.file.key != key:
			return nfs4.ErrBadStateid
		case d.revoked:
			return nfs4.ErrDelegRevoked
		case write && !d.write:
			return nfs4.ErrOpenMode // a read delegation
		}
		cl.lastRenew = st.now()
		return nfs4.OK
	default:
		return nfs4.ErrBadStateid
	}
	if o.owner.client != cl || o.file.key != key {
		return nfs4.ErrBadStateid
	}
	if write && o.access&nfs4.ShareAccessWrite == 0 {
		return nfs4.ErrOpenMode
	}
	cl.lastRenew = st.now()
	return nfs4.OK
}

// FreeStateid serves FREE_STATEID: a lock stateid without locks is
// forgotten; an open, or a lock stateid holding locks, is LOCKS_HELD.
func (st *State) FreeStateid(cl *Client, s *nfs4.Stateid) nfs4.Status {
	st.mu.Lock()
	defer st.mu.Unlock()
	if IsSpecial(s) {
		return nfs4.ErrBadStateid
	}
	rec, status := st.lookupLocked(s)
	if status != nfs4.OK {
		return status
	}
	switch rec.kind {
	case kindOpen:
		if rec.open.owner.client != cl {
			return nfs4.ErrBadStateid
		}
		return nfs4.ErrLocksHeld
	case kindLock:
		if rec.lock.owner.client != cl {
			return nfs4.ErrBadStateid
		}
		if rec.lock.held() {
			return nfs4.ErrLocksHeld
		}
		st.releaseLockStateLocked(rec.lock)
		return nfs4.OK
	case kindDeleg:
		if rec.deleg.client != cl {
			return nfs4.ErrBadStateid
		}
		if !rec.deleg.revoked {
			return nfs4.ErrLocksHeld // DELEGRETURN gives it back
		}
		st.releaseDelegLocked(rec.deleg)
		return nfs4.OK
	}
	return nfs4.ErrBadStateid
}

// TestStateids serves TEST_STATEID: a status per stateid, as its use by
// cl would meet.
func (st *State) TestStateids(cl *Client, sids []nfs4.Stateid, out []nfs4.Status) []nfs4.Status {
	st.mu.Lock()
	defer st.mu.Unlock()
	for i := range sids {
		s := &sids[i]
		if IsSpecial(s) {
			out = append(out, nfs4.ErrBadStateid)
			continue
		}
		rec, status := st.lookupLocked(s)
		if status == nfs4.OK {
			var owner *Client
			switch rec.kind {
			case kindOpen:
				owner = rec.open.owner.client
			case kindLock:
				owner = rec.lock.owner.client
			case kindDeleg:
				owner = rec.deleg.client
				if rec.deleg.revoked {
					status = nfs4.ErrDelegRevoked
				}
			}
			if owner != cl {
				status = nfs4.ErrBadStateid
			}
		}
		out = append(out, status)
	}
	return out
}

// Holds reports whether cl has the file key open or delegated: a file
// whose last name is gone stays open for such a client alone.
func (st *State) Holds(cl *Client, key string) bool {
	return st.anyOf(key, func(o *Open) bool { return o.owner.client == cl },
		func(d *Deleg) bool { return d.client == cl && !d.revoked })
}

// Writes reports whether cl holds the file key open for writing or holds
// its write delegation: the writes it may still send.
func (st *State) Writes(key string, cl *Client) bool {
	return st.anyOf(key, func(o *Open) bool { return o.owner.client == cl && o.access&nfs4.ShareAccessWrite != 0 },
		func(d *Deleg) bool { return d.client == cl && d.write && !d.revoked })
}

// WriteOpen reports whether any client holds the file key open for
// writing.
func (st *State) WriteOpen(key string) bool {
	return st.anyOf(key, func(o *Open) bool { return o.access&nfs4.ShareAccessWrite != 0 },
		func(*Deleg) bool { return false })
}

// anyOf reports whether an open or a delegation of the file key is one
// the predicates accept.
func (st *State) anyOf(key string, open func(*Open) bool, deleg func(*Deleg) bool) bool {
	st.mu.Lock()
	defer st.mu.Unlock()
	f := st.files[key]
	if f == nil {
		return false
	}
	return slices.ContainsFunc(f.opens, open) || slices.ContainsFunc(f.delegs, deleg)
}
