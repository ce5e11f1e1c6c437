package v4state

import "hushfs/internal/nfs4"

// ReclaimDeleg gives client cl back the delegation of the file key it
// held before the server restarted (OPEN CLAIM_PREVIOUS with a
// delegate_type, RFC 8881 §10.2.1), which the OPEN just reclaimed the open
// of. Unlike a grant, it is given in the grace period (only reclaims
// happen then, so nothing new can conflict) and before the back channel
// answered CB_NULL (the client held it already; a recall that cannot
// reach it ends in revocation as for any holder). It is refused where a
// grant would conflict: another client's delegation of the file, or for a
// read delegation another client's open for writing, or for a write
// delegation any other client's open.
func (st *State) ReclaimDeleg(cl *Client, key string, write bool) (nfs4.Stateid, bool) {
	st.mu.Lock()
	defer st.mu.Unlock()
	f := st.files[key]
	if f == nil || cl.gone || !st.inGraceLocked() || !cl.mayReclaim || cl.reclaimComplete || cl.nstate >= MaxStatePerClient {
		return nfs4.Stateid{}, false
	}
	for _, o := range f.opens {
		if o.owner.client != cl && (write || o.access&nfs4.ShareAccessWrite != 0) {
			return nfs4.Stateid{}, false
		}
	}
	for _, d := range f.delegs {
		if d.client != cl || d.write != write {
			return nfs4.Stateid{}, false
		}
		return d.sid, true // reclaimed twice (two open owners): the same one
	}
	return st.addDelegLocked(cl, f, write), true
}
