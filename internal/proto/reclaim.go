package proto

import "context"

// Reclaim after a server restart. A server that restarts forgets its
// opens, locks and delegations; during its grace period it lets clients
// take back what they held (NFSv4.1: OPEN with CLAIM_PREVIOUS, LOCK with
// reclaim set) before anyone else may take anything. The core knows what
// it holds; the protocol knows how to ask for it back. So the protocol
// calls the core's Reclaimer when it finds the server restarted, and the
// core asks for each open and lock through the ReclaimOps it is given.

// Reclaimer is the core's side: it reclaims everything it holds through
// ops, and keeps the state the server hands back. Reclaim runs while the
// protocol holds every other call back, so it must not wait for any call
// of the core's that is on its way.
type Reclaimer interface {
	Reclaim(ctx context.Context, ops ReclaimOps)
}

// ReclaimOps is the protocol's side, used from Reclaimer.Reclaim only.
type ReclaimOps interface {
	// ReclaimOpen takes back c's open of fh with the share access it
	// held, and the delegation of the file it held (DelegNone: none).
	// The result's State is the open's new stateid, Deleg the delegation
	// the server gave back (it may give none). A Status says the server
	// refused (its grace period is over, it does not know us).
	ReclaimOpen(ctx context.Context, c *Cred, fh FH, access uint32, deleg DelegType) (OpenRes, error)
	// ReclaimLock takes back a lock held under the reclaimed open a.State.
	ReclaimLock(ctx context.Context, c *Cred, a LockArgs) (LockRes, error)
}

// Recoverable is a server that can lose its state and lets it be
// reclaimed (NFSv4.1); the core sets itself as the Reclaimer.
type Recoverable interface {
	SetReclaimer(r Reclaimer)
}
