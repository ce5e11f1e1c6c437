package v4state

import (
	"slices"
	"time"

	"hushfs/internal/nfs4"
)

// Read delegations (RFC 8881 §10.4): a client holding one may open, read
// and cache the file and its attributes without asking, because the
// server promises to recall it (CB_RECALL) before anyone else changes the
// file. One is granted only to a client whose back channel answered
// CB_NULL, for a file nobody has open for writing; a change by another
// client (a v4.1 OPEN for writing, SETATTR, WRITE, REMOVE, RENAME, or any
// NFSv3 change) waits until the holders have returned theirs, or for a
// lease after the recall, when a delegation not returned is revoked.
// The holder's own changes recall nothing: it knows what it does.
//
// Write delegations (RFC 8881 §10.4): granted on an OPEN for writing when
// the client alone has the file open and nobody else holds a delegation of
// it. Besides changes, another client's open of any kind and its reads
// (ReadConflicts) recall it; another client's GETATTR of the size or
// change asks the holder first (CB_GETATTR, §10.4.3: WriteHolder).

// Deleg is a read or write delegation.
type Deleg struct {
	sid      nfs4.Stateid
	client   *Client
	file     *File
	write    bool
	cbSeen   cbAttrs   // what the holder last said of the file (CB_GETATTR)
	cbBumps  uint64    // how often the holder's answer showed a change
	recalled time.Time // when the recall was asked for; zero: not recalled
	revokeAt time.Time // when a recalled delegation not returned is revoked
	revoked  bool      // the stateid is kept until FREE_STATEID, unusable
	// children: a directory delegation that also covers its entries'
	// attributes (dirdeleg.go).
	children bool
	// notify: a directory delegation whose entry changes are notified
	// (dirnotify.go); nil for every other.
	notify *DirNotify
}

// Recall is a delegation to recall: what CB_RECALL needs.
type Recall struct {
	Stateid nfs4.Stateid
	FileKey string
	Session *Session // the holder's session whose back channel answered
	// Notify: for a notification (DirConflicts), what the holder asked.
	Notify *DirNotify
}

// SetBackChannelOK records whether the session's back channel answered
// CB_NULL; only then are delegations granted to its client.
func (st *State) SetBackChannelOK(s *Session, ok bool) {
	st.mu.Lock()
	defer st.mu.Unlock()
	s.cbOK = ok
}

// backSessionLocked returns a session of cl whose back channel answered
// and whose connection is still there, or nil.
func (cl *Client) backSessionLocked() *Session {
	for _, s := range cl.sessions {
		if s.cbOK && s.back != nil && !closed(s.back.Done) && !s.destroyed {
			return s
		}
	}
	return nil
}

// GrantRead grants client cl a read delegation of the file key, which it
// has just opened for reading, if it can be kept: the client can be
// called back, nobody has the file open for writing, no delegation of it
// is being recalled, and the client holds none of it already.
func (st *State) GrantRead(cl *Client, key string) (nfs4.Stateid, bool) {
	st.mu.Lock()
	defer st.mu.Unlock()
	f := st.files[key]
	if f == nil || cl.gone || st.inGraceLocked() || cl.backSessionLocked() == nil || cl.nstate >= MaxStatePerClient ||
		st.changing[key] > 0 {
		return nfs4.Stateid{}, false
	}
	for _, o := range f.opens {
		if o.access&nfs4.ShareAccessWrite != 0 {
			return nfs4.Stateid{}, false
		}
	}
	for _, d := range f.delegs {
		if d.client == cl || !d.recalled.IsZero() || d.write {
			return nfs4.Stateid{}, false
		}
	}
	return st.addDelegLocked(cl, f, false), true
}

// GrantWrite grants client cl a write delegation of the file key, which
// it has just opened for writing, if it can be kept: the client can be
// called back, no other client has the file open, and nobody holds a
// delegation of it.
func (st *State) GrantWrite(cl *Client, key string) (nfs4.Stateid, bool) {
	st.mu.Lock()
	defer st.mu.Unlock()
	f := st.files[key]
	if f == nil || cl.gone || st.inGraceLocked() || cl.backSessionLocked() == nil || cl.nstate >= MaxStatePerClient ||
		len(f.delegs) > 0 || st.changing[key] > 0 {
		return nfs4.Stateid{}, false
	}
	for _, o := range f.opens {
		if o.owner.client != cl {
			return nfs4.Stateid{}, false
		}
	}
	return st.addDelegLocked(cl, f, true), true
}

// BeginChange marks the file key as being changed by a call whose
// conflicting delegations are gone (recalled and returned, or none): until
// its EndChange no delegation of the file is granted. One granted between
// the recall and the change would outlive the change unrecalled: an OPEN
// by another client between a RENAME's recall of the file it replaces and
// the rename got a delegation of a file with no name left, and answered
// that client's later opens of the name from it.
func (st *State) BeginChange(key string) {
	st.mu.Lock()
	st.changing[key]++
	st.mu.Unlock()
}

// EndChange ends a BeginChange.
func (st *State) EndChange(key string) {
	st.mu.Lock()
	if st.changing[key]--; st.changing[key] <= 0 {
		delete(st.changing, key)
	}
	st.mu.Unlock()
}

func (st *State) addDelegLocked(cl *Client, f *File, write bool) nfs4.Stateid {
	d := &Deleg{sid: nfs4.Stateid{Seqid: 1, Other: st.newOther()}, client: cl, file: f, write: write}
	f.delegs = append(f.delegs, d)
	st.stateids[d.sid.Other] = stateRec{kind: kindDeleg, deleg: d}
	cl.nstate++
	st.delegs.Add(1)
	return d.sid
}

// ReadConflicts is Conflicts for a client (nil: NFSv3) about to open or
// read the file key: only other clients' write delegations stand in the
// way (their holders may have data the server has not seen).
func (st *State) ReadConflicts(key string, by *Client) (recall []Recall, wait bool) {
	return st.conflicts(key, by, func(d *Deleg) bool { return d.write })
}

// cbAttrs is what a write delegation's holder answered to CB_GETATTR.
type cbAttrs struct {
	change, size uint64
	ok           bool
}

// WriteHolder finds another client's write delegation of the file key,
// for a GETATTR by client by: held reports one is, recalled that it is
// being recalled (the GETATTR waits), and r is what a CB_GETATTR needs.
func (st *State) WriteHolder(key string, by *Client) (r Recall, held, recalled bool) {
	st.mu.Lock()
	defer st.mu.Unlock()
	f := st.files[key]
	if f == nil {
		return r, false, false
	}
	for _, d := range f.delegs {
		if d.write && d.client != by {
			return Recall{Stateid: d.sid, FileKey: key, Session: d.client.backSessionLocked()}, true, !d.recalled.IsZero()
		}
	}
	return r, false, false
}

// HolderAnswered records the holder's CB_GETATTR answer for the write
// delegation s and returns how many times its answers showed the file
// changed at the holder: the server adds it to the change attribute it
// reports (RFC 8881 §10.4.3), so others see each change as one.
func (st *State) HolderAnswered(s nfs4.Stateid, change, size uint64) (bumps uint64, ok bool) {
	st.mu.Lock()
	defer st.mu.Unlock()
	rec, found := st.stateids[s.Other]
	if !found || rec.kind != kindDeleg || rec.deleg.revoked {
		return 0, false
	}
	d := rec.deleg
	if d.cbSeen.ok && (d.cbSeen.change != change || d.cbSeen.size != size) {
		d.cbBumps++
	}
	d.cbSeen = cbAttrs{change: change, size: size, ok: true}
	return d.cbBumps, true
}

// HasDelegations reports whether any delegation is held: a caller may skip
// finding the key of a file it changes when none is.
func (st *State) HasDelegations() bool {
	return st.delegs.Load() > 0
}

// Conflicts is asked before client by (nil: an NFSv3 client) changes the
// file key. It returns the delegations of other clients to recall now (each
// once: those already recalled are not returned again), and whether any is
// still held, in which case the change must wait (NFS4ERR_DELAY,
// NFS3ERR_JUKEBOX).
func (st *State) Conflicts(key string, by *Client) (recall []Recall, wait bool) {
	return st.conflicts(key, by, func(*Deleg) bool { return true })
}

// conflicts is what Conflicts and its narrower kinds share: other
// clients' delegations of the file key that in says stand in the way are
// recalled (each once) and waited for.
func (st *State) conflicts(key string, by *Client, in func(*Deleg) bool) (recall []Recall, wait bool) {
	st.mu.Lock()
	defer st.mu.Unlock()
	f := st.files[key]
	if f == nil {
		return nil, false
	}
	return st.conflictsLocked(key, f, by, in, st.now(), nil)
}

// conflictsLocked appends to recall f's delegations (f is the file key)
// other clients hold that in says stand in the way and that were not
// recalled yet, marking them recalled at now; wait says whether any is
// still held.
//
// LOCKS_REQUIRED(st.mu)
func (st *State) conflictsLocked(key string, f *File, by *Client, in func(*Deleg) bool, now time.Time, recall []Recall) ([]Recall, bool) {
	wait := false
	for _, d := range f.delegs {
		if d.client == by || !in(d) {
			continue
		}
		wait = true
		if d.recalled.IsZero() {
			d.recalled, d.revokeAt = now, now.Add(st.lease)
			recall = append(recall, Recall{Stateid: d.sid, FileKey: key, Session: d.client.backSessionLocked()})
		}
	}
	return recall, wait
}

// RecallOne recalls the delegation s (a holder that cannot answer
// CB_GETATTR): it returns what to recall, if it was not yet.
func (st *State) RecallOne(s nfs4.Stateid) []Recall {
	st.mu.Lock()
	defer st.mu.Unlock()
	rec, found := st.stateids[s.Other]
	if !found || rec.kind != kindDeleg || rec.deleg.revoked || !rec.deleg.recalled.IsZero() {
		return nil
	}
	d := rec.deleg
	now := st.now()
	d.recalled, d.revokeAt = now, now.Add(st.lease)
	return []Recall{{Stateid: d.sid, FileKey: d.file.key, Session: d.client.backSessionLocked()}}
}

// RecallAll is Conflicts for a change the server does not make itself (a
// local process changed the file on the server's disk) or makes for a
// holder: every delegation of the file key is recalled, and revoked if it
// is not returned within the given time (at most a lease), because the
// change cannot be held back longer. It returns the delegations to recall
// now and whether any is still held.
func (st *State) RecallAll(key string, within time.Duration) (recall []Recall, held bool) {
	st.mu.Lock()
	defer st.mu.Unlock()
	f := st.files[key]
	if f == nil {
		return nil, false
	}
	now := st.now()
	within = min(within, st.lease)
	for _, d := range f.delegs {
		held = true
		if d.recalled.IsZero() {
			d.recalled, d.revokeAt = now, now.Add(within)
			recall = append(recall, Recall{Stateid: d.sid, FileKey: key, Session: d.client.backSessionLocked()})
		} else if at := now.Add(within); at.Before(d.revokeAt) {
			d.revokeAt = at
		}
	}
	return recall, held
}

// Delegated reports whether any delegation of the file key is held (not
// returned, not revoked).
func (st *State) Delegated(key string) bool {
	st.mu.Lock()
	defer st.mu.Unlock()
	f := st.files[key]
	return f != nil && len(f.delegs) > 0
}

// DelegReturn serves DELEGRETURN of stateid s by cl for the file key.
func (st *State) DelegReturn(cl *Client, s *nfs4.Stateid, key string) nfs4.Status {
	st.mu.Lock()
	defer st.mu.Unlock()
	d, status := st.delegOfLocked(cl, s, key)
	if status != nfs4.OK {
		return status
	}
	st.releaseDelegLocked(d)
	cl.lastRenew = st.now()
	return nfs4.OK
}

// CheckDelegClaim checks the delegation stateid of an OPEN with
// CLAIM_DELEGATE_CUR or CLAIM_DELEG_CUR_FH: the client opens through the
// delegation it holds on the file, as it does for its local opens when
// the delegation is recalled.
func (st *State) CheckDelegClaim(cl *Client, s *nfs4.Stateid, key string) nfs4.Status {
	st.mu.Lock()
	defer st.mu.Unlock()
	_, status := st.delegOfLocked(cl, s, key)
	return status
}

// delegOfLocked finds cl's delegation s of the file key; a revoked one is
// DELEG_REVOKED.
func (st *State) delegOfLocked(cl *Client, s *nfs4.Stateid, key string) (*Deleg, nfs4.Status) {
	if IsSpecial(s) {
		return nil, nfs4.ErrBadStateid
	}
	rec, status := st.lookupLocked(s)
	switch {
	case status != nfs4.OK:
		return nil, status
	case rec.kind != kindDeleg || rec.deleg.client != cl || rec.deleg.file.key != key:
		return nil, nfs4.ErrBadStateid
	case rec.deleg.revoked:
		return nil, nfs4.ErrDelegRevoked
	}
	return rec.deleg, nfs4.OK
}

// releaseDelegLocked ends a delegation (returned, or its client gone).
func (st *State) releaseDelegLocked(d *Deleg) {
	if !d.revoked {
		st.unlinkDelegLocked(d)
	} else {
		d.client.revoked--
	}
	delete(st.stateids, d.sid.Other)
	d.client.nstate--
}

// unlinkDelegLocked takes a delegation off its file.
func (st *State) unlinkDelegLocked(d *Deleg) {
	f := d.file
	f.delegs = slices.DeleteFunc(f.delegs, func(x *Deleg) bool { return x == d })
	st.delegs.Add(-1)
	if d.children {
		st.childDelegs.Add(-1)
	}
	st.dropFileIfIdle(f)
}

// revokeLocked revokes the recalled delegations whose time to come back
// is over (a lease, or less for a local change: RecallAll): the change
// waiting for them goes ahead. The stateid stays, answering
// DELEG_REVOKED, and SEQUENCE tells the client (RECALLABLE_STATE_REVOKED)
// until it frees it.
func (st *State) revokeLocked(now time.Time) {
	for _, f := range st.files {
		for _, d := range slices.Clone(f.delegs) {
			if d.recalled.IsZero() || now.Before(d.revokeAt) {
				continue
			}
			st.logf("hushfs server: NFSv4.1 client %#x (%q) did not return a delegation within %v of its recall: revoked",
				d.client.ID, d.client.Owner, d.revokeAt.Sub(d.recalled))
			d.revoked = true
			d.client.revoked++
			st.unlinkDelegLocked(d)
		}
	}
}
