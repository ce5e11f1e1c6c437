package v4state

import "hushfs/internal/nfs4"

// Directory delegations (RFC 8881 §10.9, GET_DIR_DELEGATION §18.39): the
// holder may cache the directory's entries and attributes without asking,
// because the server promises to recall the delegation (CB_RECALL) before
// anyone else adds, removes or renames an entry or changes the
// directory's attributes. They are Delegs of the directory's key, so the
// machinery of file delegations serves them unchanged: Conflicts of the
// directory's key before another client's change (the holder's own
// changes recall nothing), RecallAll for a local change, revocation a
// lease after an unanswered recall, DELEGRETURN. No notifications
// (CB_NOTIFY) are offered: a change recalls.

// GrantDir grants client cl a delegation of the directory key if it can
// be kept: the client can be called back, no delegation of the directory
// is being recalled (a change is waiting for it), and the client holds
// none of it already.
func (st *State) GrantDir(cl *Client, key string) (nfs4.Stateid, bool) {
	st.mu.Lock()
	defer st.mu.Unlock()
	if cl == nil || cl.gone || st.inGraceLocked() || cl.backSessionLocked() == nil || cl.nstate >= MaxStatePerClient {
		return nfs4.Stateid{}, false
	}
	f := st.fileLocked(key)
	for _, d := range f.delegs {
		if d.client == cl || !d.recalled.IsZero() {
			st.dropFileIfIdle(f)
			return nfs4.Stateid{}, false
		}
	}
	return st.addDelegLocked(cl, f, false), true
}
