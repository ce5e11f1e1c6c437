package server

import "hushfs/internal/nfs4"

// reclaimDeleg is the open_delegation4 of an OPEN with CLAIM_PREVIOUS that
// names the delegation the client held before we restarted: given back
// where nothing conflicts (v4state.ReclaimDeleg), with the file leased as
// for any delegation (leases.go) so that local changes recall it. If it
// cannot be, none is given (the client stops relying on it).
func (c *compound) reclaimDeleg(n *node, t nfs4.DelegationType) nfs4.OpenDelegation {
	if !c.s.v4.delegations {
		return noDelegation(0)
	}
	write := t == nfs4.DelegateWrite
	var sid nfs4.Stateid
	grant := func() (ok bool) {
		sid, ok = c.s.v4.state.ReclaimDeleg(c.client, n.key, write)
		return ok
	}
	ace := nfs4.ACE{Type: 0, AccessMask: 0, Who: []byte("EVERYONE@")}
	if write {
		if !c.s.v4.leases.grantWrite(n, grant) {
			return noDelegation(0)
		}
		return nfs4.OpenDelegation{Type: nfs4.DelegateWrite, Stateid: sid, SpaceLimit: c.s.spaceLimit(n), Permissions: ace}
	}
	if !c.s.v4.leases.grant(n, grant) {
		return noDelegation(0)
	}
	return nfs4.OpenDelegation{Type: nfs4.DelegateRead, Stateid: sid, Permissions: ace}
}
