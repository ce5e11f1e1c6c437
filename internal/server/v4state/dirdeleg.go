package v4state

import (
	"time"

	"hushfs/internal/nfs4"
)

// Directory delegations (RFC 8881 §10.9, GET_DIR_DELEGATION §18.39): the
// holder may cache the directory's entries and attributes without asking,
// because the server promises to recall the delegation (CB_RECALL) before
// anyone else adds, removes or renames an entry or changes the
// directory's attributes. They are Delegs of the directory's key, so the
// machinery of file delegations serves them unchanged: Conflicts of the
// directory's key before another client's change (the holder's own
// changes recall nothing), RecallAll for a local change, revocation a
// lease after an unanswered recall, DELEGRETURN. No notifications
// (CB_NOTIFY) are sent: a change recalls.
//
// A delegation granted with children also covers its entries' attributes
// (the holder asked for NOTIFY4_CHANGE_CHILD_ATTRS, which the server
// keeps by recalling, RFC 8881 §10.9.1 lets it): another client's change
// of an entry asks ChildConflicts of the directory first.

// GrantDir grants client cl a delegation of the directory key if it can
// be kept: the client can be called back, no delegation of the directory
// is being recalled (a change is waiting for it), and the client holds
// none of it already (one it holds, alike, is granted again). children: it covers the entries' attributes too;
// notify (non-nil): its entry changes by others are told by CB_NOTIFY
// (dirnotify.go), not recalled.
func (st *State) GrantDir(cl *Client, key string, children bool, notify *DirNotify) (nfs4.Stateid, bool) {
	st.mu.Lock()
	defer st.mu.Unlock()
	if cl == nil || cl.gone || st.inGraceLocked() || cl.backSessionLocked() == nil || cl.nstate >= MaxStatePerClient {
		return nfs4.Stateid{}, false
	}
	f := st.fileLocked(key)
	for _, d := range f.delegs {
		if d.client == cl && d.recalled.IsZero() && d.children == children && (d.notify == nil) == (notify == nil) {
			// Asked again (a retried COMPOUND whose reply was lost): the
			// same one, so that GET_DIR_DELEGATION may run twice.
			return d.sid, true
		}
		if d.client == cl || !d.recalled.IsZero() {
			st.dropFileIfIdle(f)
			return nfs4.Stateid{}, false
		}
	}
	sid := st.addDelegLocked(cl, f, false)
	st.stateids[sid.Other].deleg.notify = notify
	if children {
		st.stateids[sid.Other].deleg.children = true
		st.childDelegs.Add(1)
	}
	return sid, true
}

// HasChildDelegations reports whether any directory delegation covering
// its entries' attributes is held: only then is the directory of a
// changed file worth finding.
func (st *State) HasChildDelegations() bool { return st.childDelegs.Load() > 0 }

// HoldsChildren reports whether client cl holds a delegation of the
// directory key covering its entries (not being recalled).
func (st *State) HoldsChildren(key string, cl *Client) bool {
	st.mu.Lock()
	defer st.mu.Unlock()
	f := st.files[key]
	if f == nil || cl == nil {
		return false
	}
	for _, d := range f.delegs {
		if d.client == cl && d.children && d.recalled.IsZero() {
			return true
		}
	}
	return false
}

// ChildConflicts is Conflicts for a change of an entry's attributes in
// the directory key by client by (nil: NFSv3): only other clients'
// delegations covering the entries stand in the way.
func (st *State) ChildConflicts(key string, by *Client) (recall []Recall, wait bool) {
	return st.conflicts(key, by, coversChildren)
}

func coversChildren(d *Deleg) bool { return d.children }

// AllChildConflicts is ChildConflicts of every directory: the changed
// file's directory is not known.
func (st *State) AllChildConflicts(by *Client) (recall []Recall, wait bool) {
	st.mu.Lock()
	defer st.mu.Unlock()
	now := st.now()
	for key, f := range st.files {
		var held bool
		recall, held = st.conflictsLocked(key, f, by, coversChildren, now, recall)
		wait = wait || held
	}
	return recall, wait
}

// NotifyChildren returns the delegations of the directory key covering
// its entries that take notifications: a local change of an entry's
// attributes is told to them (RecallChildren recalls the others).
func (st *State) NotifyChildren(key string) (notify []Recall) {
	st.mu.Lock()
	defer st.mu.Unlock()
	f := st.files[key]
	if f == nil {
		return nil
	}
	for _, d := range f.delegs {
		if d.children && d.notify != nil && d.recalled.IsZero() {
			notify = append(notify, Recall{Stateid: d.sid, FileKey: key, Session: d.client.backSessionLocked(), Notify: d.notify})
		}
	}
	return notify
}

// RecallChildren is RecallAll for a change of an entry's attributes in
// the directory key that the server did not make (a local one): the
// delegations covering its entries are recalled, revoked if not returned
// within the given time.
func (st *State) RecallChildren(key string, within time.Duration) (recall []Recall) {
	st.mu.Lock()
	defer st.mu.Unlock()
	f := st.files[key]
	if f == nil {
		return nil
	}
	now := st.now()
	for _, d := range f.delegs {
		if !d.children || !d.recalled.IsZero() || d.notify != nil {
			continue // one that takes notifications is told (NotifyChildren)
		}
		d.recalled, d.revokeAt = now, now.Add(min(within, st.lease))
		recall = append(recall, Recall{Stateid: d.sid, FileKey: key, Session: d.client.backSessionLocked()})
	}
	return recall
}
