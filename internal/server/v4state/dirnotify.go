package v4state

import (
	"time"

	"hushfs/internal/nfs4"
)

// Directory delegations with notifications (RFC 8881 §10.9, §20.4): the
// holder asked to be told of entries added and removed (NOTIFY4_ADD_ENTRY,
// NOTIFY4_REMOVE_ENTRY), so another client's change of the directory's
// entries, or a local one, sends it CB_NOTIFY instead of recalling its
// delegation (the server's nfs4_dirnotify.go). Everything else recalls
// it as before: a change of the directory's own attributes, an NFSv3
// client's change, a notification that could not be delivered.

// DirNotify is what the holder of a notifying directory delegation
// asked for.
type DirNotify struct {
	ChildAttrs nfs4.Bitmap   // the entries' attributes to send (gdda_child_attributes)
	DirAttrs   nfs4.Bitmap   // the directory's, sent with each notification (gdda_dir_attributes)
	DirAttrsOK bool          // NOTIFY4_CHANGE_DIR_ATTRS granted
	Delay      time.Duration // how long changes may be gathered before sending
}

// DirConflicts is Conflicts for client by (nil: NFSv3) about to add,
// remove or rename an entry of the directory key: delegations of others
// that take notifications are returned in notify (to be told after the
// change; by == nil never notifies: NFSv3 changes are not awaited), the
// others recalled as Conflicts does.
func (st *State) DirConflicts(key string, by *Client) (recall, notify []Recall, wait bool) {
	st.mu.Lock()
	defer st.mu.Unlock()
	f := st.files[key]
	if f == nil {
		return nil, nil, false
	}
	if by != nil {
		for _, d := range f.delegs {
			if d.client != by && d.notify != nil && d.recalled.IsZero() {
				notify = append(notify, Recall{Stateid: d.sid, FileKey: key, Session: d.client.backSessionLocked(), Notify: d.notify})
			}
		}
	}
	// One being recalled (its notification failed) is waited for, as
	// any: its holder may not know of the changes since.
	recall, wait = st.conflictsLocked(key, f, by, func(d *Deleg) bool {
		return by == nil || d.notify == nil || !d.recalled.IsZero()
	}, st.now(), nil)
	return recall, notify, wait
}

// LocalDirChange is RecallAll for a local change of the directory key's
// entries that the server can describe: the delegations that take
// notifications are returned in notify, the others recalled (revoked if
// not returned within the given time).
func (st *State) LocalDirChange(key string, within time.Duration) (recall, notify []Recall) {
	st.mu.Lock()
	defer st.mu.Unlock()
	f := st.files[key]
	if f == nil {
		return nil, nil
	}
	now := st.now()
	within = min(within, st.lease)
	for _, d := range f.delegs {
		if !d.recalled.IsZero() {
			continue
		}
		r := Recall{Stateid: d.sid, FileKey: key, Session: d.client.backSessionLocked()}
		if d.notify != nil {
			r.Notify = d.notify
			notify = append(notify, r)
			continue
		}
		d.recalled, d.revokeAt = now, now.Add(within)
		recall = append(recall, r)
	}
	return recall, notify
}

// NotifyHeld reports whether the notifying delegation s is still held and
// not being recalled: only then are its notifications worth sending.
func (st *State) NotifyHeld(s nfs4.Stateid) bool {
	st.mu.Lock()
	defer st.mu.Unlock()
	rec, found := st.stateids[s.Other]
	return found && rec.kind == kindDeleg && !rec.deleg.revoked && rec.deleg.recalled.IsZero()
}

// DelegHeld reports whether the delegation s is still held: not returned
// and not revoked (recalled or not).
func (st *State) DelegHeld(s nfs4.Stateid) bool {
	st.mu.Lock()
	defer st.mu.Unlock()
	rec, found := st.stateids[s.Other]
	return found && rec.kind == kindDeleg && !rec.deleg.revoked
}

// ChildNotifyConflicts is ChildConflicts for an NFSv4.1 client by
// changing an entry of the directory key: delegations of others covering
// the entries that also take notifications are returned in notify (told
// of the entry's new attributes after the change), the others recalled.
func (st *State) ChildNotifyConflicts(key string, by *Client) (recall, notify []Recall, wait bool) {
	st.mu.Lock()
	defer st.mu.Unlock()
	f := st.files[key]
	if f == nil {
		return nil, nil, false
	}
	for _, d := range f.delegs {
		if d.client != by && d.children && d.notify != nil && d.recalled.IsZero() {
			notify = append(notify, Recall{Stateid: d.sid, FileKey: key, Session: d.client.backSessionLocked(), Notify: d.notify})
		}
	}
	recall, wait = st.conflictsLocked(key, f, by, func(d *Deleg) bool {
		return d.children && (d.notify == nil || !d.recalled.IsZero())
	}, st.now(), nil)
	return recall, notify, wait
}
