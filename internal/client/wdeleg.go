package client

import (
	"context"

	"hushfs/internal/proto"
)

// Write delegations (NFSv4.1; RFC 8881 §10.4). An OPEN for writing, and
// the OPEN that creates a file, ask for one; `hushfs serve` grants it when
// no other client has the file open. The server's promise is that nobody
// else opens the file, or reads or changes it, without recalling the
// delegation first. So, while it is held:
//   - the file's attributes are ours: they stay valid without GETATTR
//     (inode.delegated), size from the data held here;
//   - any open() by an identity whose rights are cached sends no call
//     (openDelegated): descriptors count under the delegation, or under an
//     open of the identity kept past its last close;
//   - the last close sends no CLOSE (the open is kept until the
//     delegation goes: dropLocked), no COMMIT and no GETATTR; it still
//     writes the data and waits for the reply (one FILE_SYNC WRITE when it
//     fits, else UNSTABLE ones, committed later). Other NFS clients would
//     not need it (the server recalls before their open, and the return
//     writes and commits everything first), but a process on the server's
//     own disk that stats the file breaks no lease, and a SETATTR after the
//     close must land after the data (a later WRITE moves the mtime); the
//     times held for the data go too. Durability is fsync's, as on a local
//     disk: fsync writes and COMMITs;
//   - I/O names the delegation's stateid (ioState).
//
// Past the delegation's space limit (nfs_space_limit4) the server does
// not promise the space: writes there are FILE_SYNC, and a close flushes
// and commits as without a delegation. The return (recall, idle, unmount,
// revocation) writes and commits the data and held times, gives
// descriptors opened under the delegation a real OPEN (or widens their
// identity's open to what they hold), closes the opens kept past their
// last close, then sends DELEGRETURN (deleg.go: returnDeleg).

// writeDeleg returns n's write delegation if one is held and usable.
func (fs *FS) writeDeleg(n *inode) (h *heldDeleg, ok bool) {
	if fs.delegator == nil {
		return nil, false
	}
	fs.dl.mu.Lock()
	defer fs.dl.mu.Unlock()
	h = fs.dl.held[string(n.fh)]
	if h == nil || !h.write || h.returning {
		return nil, false
	}
	return h, true
}

// closeDelegated reports whether a close of n may leave its data to the
// write delegation: one is held, the lease is current, and the file does
// not reach past the space limit.
func (fs *FS) closeDelegated(n *inode) bool {
	h, ok := fs.writeDeleg(n)
	if !ok || !fs.delegator.LeaseValid() {
		return false
	}
	return fs.heldSize(n) <= h.limit
}

// beyondDelegLimit reports whether a write of n reaching end goes past its
// write delegation's space limit (to be written through).
func (fs *FS) beyondDelegLimit(n *inode, end uint64) bool {
	h, ok := fs.writeDeleg(n)
	return ok && end > h.limit
}

// heldSize is n's size as this client holds it: the server's, or as far
// as data not yet sent reaches.
func (fs *FS) heldSize(n *inode) uint64 {
	n.mu.Lock()
	size := n.attr.Size
	n.mu.Unlock()
	return max(size, fs.wb.dirtyEnd(n))
}

// heldAttrs answers CB_GETATTR for the file fh: its size as held here and
// a change attribute that moves with every change of ours, sent or not
// (the server's last one plus the count of our changes; both only grow).
// ok is false unless we hold a write delegation of it.
func (fs *FS) heldAttrs(fh proto.FH) (size, change uint64, ok bool) {
	fs.dl.mu.Lock()
	h := fs.dl.held[string(fh)]
	fs.dl.mu.Unlock()
	if h == nil || !h.write || h.n == nil {
		return 0, 0, false
	}
	n := h.n
	size = fs.heldSize(n)
	n.mu.Lock()
	change = n.attr.Change
	n.mu.Unlock()
	return size, change + n.changes.Load(), true
}

// flushDelegated writes and commits what a write delegation held (data
// and held times) before it goes back: others read it once it has.
func (fs *FS) flushDelegated(ctx context.Context, h *heldDeleg) {
	if h.n == nil {
		return
	}
	if err := fs.wb.flush(ctx, h.n, proto.FileSync); err != nil {
		fs.logf("hushfs: writing node %d before returning its delegation: %v", h.n.id, err)
	}
}

// settleOpensLocked readies n's opens for the return of its delegation h:
// descriptors opened under it get a real OPEN, identities whose
// descriptors hold more than their open get it widened, and opens kept
// past their last close are closed.
//
// LOCKS_REQUIRED(no.mu)
func (fs *FS) settleOpensLocked(ctx context.Context, n *inode, no *nodeOpens, h *heldDeleg) {
	type todo struct {
		ow          *ownerOpen
		need        uint32
		via, closed bool
	}
	var work []todo
	no.vmu.Lock()
	for uid, ow := range no.owners {
		need := ow.needLocked()
		switch {
		case ow.viaDeleg:
			if ow.st.Other == h.st.Other {
				work = append(work, todo{ow: ow, via: true})
			}
		case need == 0:
			delete(no.owners, uid)
			work = append(work, todo{ow: ow, closed: true})
		case need&^ow.held != 0:
			work = append(work, todo{ow: ow, need: need | ow.held})
		}
	}
	no.vmu.Unlock()
	for _, w := range work {
		switch {
		case w.via:
			fs.realizeLocked(ctx, n, no, w.ow)
		case w.closed:
			if err := fs.opener.CloseOpen(ctx, &w.ow.cred, n.fh, w.ow.st); err != nil {
				fs.logf("hushfs: closing node %d kept open under its delegation: %v", n.id, err)
			}
		default:
			fs.widenLocked(ctx, n, no, w.ow, w.need)
		}
	}
}

// widenLocked opens n again for ow with access need, the same open
// owner's OPEN upgrading its open (RFC 8881 §18.16.3).
//
// LOCKS_REQUIRED(no.mu)
func (fs *FS) widenLocked(ctx context.Context, n *inode, no *nodeOpens, ow *ownerOpen, need uint32) {
	at := fs.now()
	res, err := fs.opener.Open(ctx, &ow.cred, proto.OpenArgs{FH: n.fh, Access: need})
	if err == nil && res.Status != nil {
		err = res.Status
	}
	if err != nil {
		fs.logf("hushfs: node %d: widening its open before returning the delegation: %v", n.id, err)
		return
	}
	fs.applyAttr(n, &res.Attr, at)
	no.vmu.Lock()
	if newer(res.State, ow.st) {
		ow.st = res.State
	}
	ow.held |= need
	no.vmu.Unlock()
}

// needLocked is the share access ow's descriptors hold.
//
// LOCKS_REQUIRED(no.vmu)
func (ow *ownerOpen) needLocked() uint32 {
	var need uint32
	for s := range ow.count {
		if ow.count[s] > 0 {
			need |= uint32(s)
		}
	}
	return need
}
