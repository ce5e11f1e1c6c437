package client

import (
	"context"
	"errors"
	"sync"
	"syscall"
	"time"

	"hushfs/internal/proto"
)

// Open state on a server that has it (NFSv4.1: proto.Opener). Each open()
// of a regular file is an OPEN, which brings the file's attributes and the
// caller's rights in the same round trip: it stands in for close-to-open's
// GETATTR and ACCESS, one call either way. The server keeps one open per
// open owner and file; as Linux does, an open owner is an identity (uid),
// so all of a user's descriptors of a file share one open stateid, which
// each OPEN widens to the union of their share access. Descriptors are
// counted by the access they opened with: the last one's release sends
// CLOSE, and a release that leaves less access needed sends
// OPEN_DOWNGRADE (a writer gone, readers left), so the server's share
// reservations are what is open here. READ, WRITE, SETATTR of a size and
// LOCK go under the open. A server that no longer knows an open (its
// lease expired, it restarted) gets it again by one OPEN of the same
// handle, once per call; a second refusal is EIO, never another file's
// data (the reopen names the file by its handle).
//
// NFSv3 has none of this: fs.opener is nil and every path below is the v3
// one.

// nodeOpens is a regular file's opens, per identity.
type nodeOpens struct {
	// mu orders the calls on the opens: OPENs (read-locked) run together
	// (the server merges them; the newest stateid is kept), OPEN_DOWNGRADE,
	// CLOSE, a reopen and LOCK (write-locked) alone: each names the open's
	// latest seqid, and a CLOSE must not pass an OPEN it would undo.
	mu sync.RWMutex
	// vmu guards owners for I/O, which reads it without waiting for those
	// calls; changes hold both.
	vmu    sync.Mutex
	owners map[uint32]*ownerOpen // by uid
}

// ownerOpen is one identity's open of the file.
type ownerOpen struct {
	cred  Cred
	st    proto.StateID
	held  uint32     // share access the server holds for it
	count [4]int     // descriptors, by share access (proto.Share*)
	locks lockOwners // lock owners that took locks under it (lock.go)
	// locksLost: the server restarted and did not give back locks held
	// under this open: its descriptors' I/O fails with EIO until they are
	// all closed (a process must not go on as if it still held them).
	locksLost bool
	// viaDeleg: the server holds no open for it; its descriptors (readers)
	// were opened under the file's read delegation, whose stateid st is
	// (deleg.go). A real OPEN replaces it before the delegation goes back,
	// and before anything that needs an open (a lock, a wider open).
	viaDeleg bool
}

// shareOf is the share access an open's flags need.
func shareOf(flags uint32) uint32 {
	switch flags & syscall.O_ACCMODE {
	case syscall.O_WRONLY:
		return proto.ShareWrite
	case syscall.O_RDWR:
		return proto.ShareBoth
	}
	return proto.ShareRead
}

// opensOf returns n's opens, made on first use.
func (fs *FS) opensOf(n *inode) *nodeOpens {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.opens4 == nil {
		n.opens4 = &nodeOpens{owners: map[uint32]*ownerOpen{}}
	}
	return n.opens4
}

// newer reports whether a is a later version of the same state than b.
func newer(a, b proto.StateID) bool { return a.Other != b.Other || int32(a.Seq-b.Seq) > 0 }

// descriptors reports whether any identity has a descriptor of the file
// open here.
func (no *nodeOpens) descriptors() bool {
	no.vmu.Lock()
	defer no.vmu.Unlock()
	for _, ow := range no.owners {
		for _, n := range ow.count {
			if n > 0 {
				return true
			}
		}
	}
	return false
}

// addLocked counts a descriptor of c opened with share under st.
//
// LOCKS_REQUIRED(no.mu, read or write)
func (no *nodeOpens) addLocked(c *Cred, st proto.StateID, share uint32) {
	no.vmu.Lock()
	defer no.vmu.Unlock()
	ow := no.owners[c.UID]
	if ow == nil {
		ow = &ownerOpen{cred: Cred{UID: c.UID, GID: c.GID, Groups: append([]uint32(nil), c.Groups...)}, st: st}
		no.owners[c.UID] = ow
	}
	if ow.viaDeleg {
		// A real OPEN, which covered the delegation's readers (openState
		// asked for read access too): the open is the server's now.
		ow.st, ow.viaDeleg = st, false
	} else if newer(st, ow.st) {
		ow.st = st
	}
	ow.held |= share
	ow.count[share]++
}

// openState opens n for an open() with flags: one OPEN with the file's
// attributes and the caller's rights. It returns the share access the
// descriptor holds, and the file's first bytes if the OPEN brought them
// (readFirstWant) for Open to keep.
//
// Until the open's reply to the kernel is decided (Open lowers
// n.opening, on success), a change of the file's data the OPEN's
// attributes show is not notified to the kernel: the reply does it,
// without FOPEN_KEEP_CACHE and with the attributes invalidated. The
// queued notification would reach the kernel after that reply, while it
// fetches the attributes for its first read, and make it drop them (its
// attribute version moved): it read on with the size from before the
// change, and a short read at the old end then set a wrong size.
func (fs *FS) openState(ctx context.Context, c *Cred, n *inode, flags uint32) (share uint32, first *firstRead, err error) {
	n.mu.Lock()
	n.opening++
	gen := n.dataGen
	n.mu.Unlock()
	defer func() {
		if err != nil {
			fs.openFailed(n, gen)
		}
	}()
	// A file shown with no name left (removed or renamed over elsewhere)
	// is reached by a name the kernel cached before: whatever we hold of
	// it (a delegation, another descriptor's open), the name now leads
	// elsewhere, and the kernel looks it up again (ESTALE).
	n.mu.Lock()
	nameless := n.attr.Type == proto.TypeReg && n.attr.Nlink == 0
	n.mu.Unlock()
	if nameless {
		fs.nodes.markStale(n) // no cached name leads to it again
		return 0, nil, syscall.ESTALE
	}
	share = shareOf(flags)
	want := accessWant(n, accessForOpen(flags))
	var (
		no        *nodeOpens
		res       proto.OpenRes
		at        time.Time
		changes   uint64
		access    uint32
		readFirst uint32
	)
	// NFS4ERR_DELAY (another client's delegation of the file is being
	// recalled) is waited out here, not under no.mu: our own recall of a
	// delegation of this file needs no.mu, and the other client may be
	// waiting for it to let its own go (both opening for writing a file
	// both hold read delegations of).
	for pause := 50 * time.Millisecond; ; pause = min(2*pause, time.Second) {
		if fs.openDelegated(c, n, share, want) {
			return share, nil, nil // no call: the delegation stands for the OPEN (deleg.go)
		}
		readFirst = 0
		changes = n.changes.Load() // before the OPEN: see keepRead
		if share == proto.ShareRead {
			readFirst = fs.readFirstWant(n)
		}
		no = fs.opensOf(n)
		no.mu.RLock()
		// Readers opened under the delegation are the identity's open too: a
		// real OPEN must give them read access (opens under the delegation
		// wait for no.mu, so this stays true until addLocked).
		access = share
		no.vmu.Lock()
		if ow := no.owners[c.UID]; ow != nil && ow.viaDeleg {
			access |= ow.held
		}
		no.vmu.Unlock()
		at = fs.now()
		res, err = fs.opener.Open(ctx, c, proto.OpenArgs{FH: n.fh, Access: access, Check: accessAll,
			WantDeleg: fs.delegator != nil, ReadFirst: readFirst, NoWait: true})
		if err != nil {
			no.mu.RUnlock()
			return 0, nil, err
		}
		if !errors.Is(res.Status, proto.ErrDelay) {
			break
		}
		no.mu.RUnlock()
		t := time.NewTimer(pause)
		select {
		case <-ctx.Done():
			t.Stop()
			return 0, nil, res.Status // EAGAIN, as when the wait was the protocol's
		case <-t.C:
		}
	}
	fs.applyAttr(n, &res.Attr, at)
	if res.Status != nil {
		no.mu.RUnlock()
		fs.noteStale(n, res.Status)
		return 0, nil, res.Status
	}
	if res.Attr.Present && res.Attr.Attr.Nlink == 0 && !no.descriptors() {
		// The file lost its last name elsewhere and has no descriptor
		// here: this open came through a name cached before, and the
		// server kept the file for an open of ours not yet closed (or
		// another client's). The name is stale; the kernel looks it up
		// again (ESTALE), and must not read the old file. The CLOSE
		// below ends the identity's open at the server, and an open of
		// it kept past its last close under a write delegation is that
		// same open (one per owner): forgotten with it, or the
		// delegation's return would close it again.
		no.vmu.Lock()
		if ow := no.owners[c.UID]; ow != nil && ow.st.Other == res.State.Other && ow.needLocked() == 0 {
			delete(no.owners, c.UID)
		}
		no.vmu.Unlock()
		no.mu.RUnlock()
		fs.nodes.markStale(n)
		if res.Deleg.Type != proto.DelegNone {
			fs.keepDeleg(n, c, res.Deleg) // returned when idle
		}
		if err := fs.opener.CloseOpen(ctx, c, n.fh, res.State); err != nil {
			fs.logf("hushfs: closing node %d, which has no name left: %v", n.id, err)
		}
		return 0, nil, syscall.ESTALE
	}
	// With descriptors of it open here the file's state stays, and so
	// does this OPEN's (the same open stateid): only the open() fails.
	nameless = res.Attr.Present && res.Attr.Attr.Nlink == 0
	if res.HasData && res.Attr.Present {
		// Open keeps it only while the node shows the version its
		// attributes describe.
		n.mu.Lock()
		first = &firstRead{data: res.Data, gen: n.dataGen, changes: changes, attr: res.Attr.Attr}
		n.mu.Unlock()
	}
	no.addLocked(c, res.State, share)
	no.vmu.Lock()
	no.owners[c.UID].held |= access
	no.vmu.Unlock()
	no.mu.RUnlock()
	if res.Deleg.Type != proto.DelegNone {
		fs.keepDeleg(n, c, res.Deleg)
	}
	if nameless {
		fs.nodes.markStale(n)
		err = syscall.ESTALE
	} else if res.Granted {
		fs.storeAccess(n, c, res.Access, at)
		if res.Access&want == want {
			return share, first, nil
		}
		err = syscall.EACCES
	} else {
		// The OPEN's ACCESS did not run: ask on its own.
		err = fs.Access(ctx, c, n.id, accessForOpen(flags))
		if err == nil {
			return share, first, nil
		}
	}
	no.mu.Lock()
	defer no.mu.Unlock()
	fs.dropLocked(ctx, n, no, c.UID, share)
	return 0, nil, err
}

// firstRead is a file's first bytes an OPEN brought, with the data
// generation its attributes left and our change count before it was sent.
type firstRead struct {
	data    []byte
	gen     uint64
	changes uint64
	attr    proto.Attr // the OPEN's, which the data is the version of
}

// readFirstMax is the largest file whose OPEN for reading also reads it
// (all of it, in the same COMPOUND). The kernel's first read of a file is
// its readahead window from offset 0 (fusefs.ReadAhead, 4 MiB), capped at
// the file's size: for a file this small what it asks is all the file,
// and the OPEN's READ answers it. A bigger file's first read asks for more
// than a prefix would hold, so a prefix would be sent twice. 1 MiB, not
// more: the server keeps the OPEN's reply, data and all, for a retry
// (proto/nfsv41/open.go); 256 KiB before, which left grep -r a READ for
// each source file between the two (busybox: 2 of 2,868).
const readFirstMax = 1 << 20

// readFirstWant is how much an OPEN of n for reading should read: the
// whole file as last known (rounded up to a page: it may have grown),
// when it is small and no data of it is cached (which the kernel's read
// would use instead).
func (fs *FS) readFirstWant(n *inode) uint32 {
	if fs.sio == nil {
		return 0
	}
	n.mu.Lock()
	size, known, valid, gen := n.attr.Size, n.attrValid, n.dataValid, n.dataGen
	n.mu.Unlock()
	if !known || size > readFirstMax || (valid && fs.wb.hasClean(n, gen)) {
		return 0
	}
	return uint32(min(max(size+4095, 4096)&^4095, readFirstMax, uint64(fs.rsize)))
}

// openFailed ends an open under way (openState) that gives the kernel no
// reply to learn from: a change seen meanwhile is notified after all.
func (fs *FS) openFailed(n *inode, gen uint64) {
	n.mu.Lock()
	n.opening--
	changed := n.dataGen != gen
	n.mu.Unlock()
	if changed {
		fs.notify.InvalidateData(n.id)
	}
}

// createOpen is a create's CREATE as an OPEN that creates the file, left
// open for the descriptor being made (one round trip, as v3's CREATE). It
// asks for a delegation: the file just made is ours alone, and a write
// delegation lets its writer close it without a call (wdeleg.go).
func (fs *FS) createOpen(ctx context.Context, c *Cred, dir *inode, name string, how proto.CreateHow, share uint32) (proto.CreateRes, proto.StateID, proto.Delegation, error) {
	res, err := fs.opener.Open(ctx, c, proto.OpenArgs{Dir: dir.fh, Name: name, Access: share, Create: &how,
		WantDeleg: fs.delegator != nil})
	if err != nil {
		return proto.CreateRes{}, proto.StateID{}, proto.Delegation{}, err
	}
	out := proto.CreateRes{Status: res.Status, Attr: res.Attr, DirWcc: res.DirWcc}
	if len(res.FH) > 0 {
		out.FH = proto.PostFH{Present: true, FH: res.FH}
	}
	return out, res.State, res.Deleg, nil
}

// adoptOpen counts the descriptor a create opened under st on n, and
// keeps the delegation it brought; if n could not be had, the open is
// closed and the delegation returned.
func (fs *FS) adoptOpen(ctx context.Context, c *Cred, n *inode, fh proto.FH, st proto.StateID, d proto.Delegation, share uint32) {
	if n == nil {
		if d.Type != proto.DelegNone {
			if err := fs.delegator.ReturnDelegation(ctx, c, fh, d.State); err != nil {
				fs.logf("hushfs: returning the delegation of a new file: %v", err)
			}
		}
		if err := fs.opener.CloseOpen(ctx, c, fh, st); err != nil {
			fs.logf("hushfs: closing the open of a new file: %v", err)
		}
		return
	}
	defer func() {
		if d.Type != proto.DelegNone {
			fs.keepDeleg(n, c, d) // after no.mu: a recall takes it first
		}
	}()
	no := fs.opensOf(n)
	no.mu.Lock()
	defer no.mu.Unlock()
	// Readers of this identity opened under the delegation need a real
	// open that reads: this one may be for writing only.
	no.vmu.Lock()
	ow := no.owners[c.UID]
	no.vmu.Unlock()
	if ow != nil {
		fs.realizeLocked(ctx, n, no, ow)
	}
	no.addLocked(c, st, share)
}

// closeState ends a descriptor's part in its open: CLOSE if it was the
// identity's last, OPEN_DOWNGRADE if the rest need less access.
func (fs *FS) closeState(ctx context.Context, of *openFile) {
	no := fs.opensOf(of.node)
	no.mu.Lock()
	defer no.mu.Unlock()
	fs.dropLocked(ctx, of.node, no, of.cred.UID, of.share)
}

// dropLocked uncounts a descriptor of uid's open of n opened with share.
//
// LOCKS_REQUIRED(no.mu)
func (fs *FS) dropLocked(ctx context.Context, n *inode, no *nodeOpens, uid, share uint32) {
	// A recall marks the delegation returning before it takes no.mu to
	// close the opens kept: either it sees this one kept, or this sees it.
	_, wdeleg := fs.writeDeleg(n)
	no.vmu.Lock()
	ow := no.owners[uid]
	if ow == nil || ow.count[share] == 0 {
		no.vmu.Unlock()
		return
	}
	ow.count[share]--
	need := ow.needLocked()
	// Under a write delegation the open is kept past its last close: no
	// CLOSE now, and a re-open needs no OPEN; the return closes it. An
	// open with locks taken under it is closed as usual.
	keep := need == 0 && !ow.viaDeleg && len(ow.locks) == 0 && wdeleg
	if need == 0 && !keep {
		delete(no.owners, uid)
	}
	no.vmu.Unlock()
	if need == 0 && (ow.viaDeleg || keep) {
		return // nothing open at the server, or kept: the delegation stays
	}
	if need == 0 {
		if err := fs.opener.CloseOpen(ctx, &ow.cred, n.fh, ow.st); err != nil {
			fs.logf("hushfs: closing node %d: %v (the server drops the open when our lease ends)", n.id, err)
		}
		return
	}
	// Access beyond the open's is the write delegation's (openDelegated);
	// and under it nobody else may open the file anyway: the open stays as
	// wide as it is, without an OPEN_DOWNGRADE, until the return.
	need &= ow.held
	if need == ow.held || need == 0 || wdeleg && len(ow.locks) == 0 {
		return
	}
	st, err := fs.opener.Downgrade(ctx, &ow.cred, n.fh, ow.st, need, 0)
	if err != nil {
		// Still open with more access than needed: harmless to us; another
		// client's deny may be refused until the last close.
		fs.logf("hushfs: narrowing the open of node %d: %v", n.id, err)
		return
	}
	no.vmu.Lock()
	ow.st, ow.held = st, need
	no.vmu.Unlock()
}

// ioState picks the open c's I/O on n goes under: c's own if it has the
// access, else any open of the file that has it. ok is false where there
// is none (NFSv3; a file not open here: the anonymous stateid).
func (fs *FS) ioState(n *inode, c *Cred, write bool) (st proto.StateID, uid uint32, ok bool) {
	if fs.sio == nil {
		return proto.StateID{}, 0, false
	}
	n.mu.Lock()
	no := n.opens4
	n.mu.Unlock()
	if no == nil {
		return proto.StateID{}, 0, false
	}
	need := uint32(proto.ShareRead)
	if write {
		need = proto.ShareWrite
	}
	// Under a write delegation its stateid covers any I/O (RFC 8881
	// §9.1.4.1): a descriptor may hold more than its open (openDelegated).
	if h, ok := fs.writeDeleg(n); ok {
		return h.st, c.UID, true
	}
	no.vmu.Lock()
	defer no.vmu.Unlock()
	if ow := no.owners[c.UID]; ow != nil && ow.held&need != 0 {
		return ow.st, c.UID, true
	}
	for uid, ow := range no.owners {
		if ow.held&need != 0 {
			return ow.st, uid, true
		}
	}
	return proto.StateID{}, 0, false
}

// underState runs call under the open c's I/O on n goes under (st nil:
// none, the protocol's plain call). A status saying the server no longer
// knows the open opens the file again, once, and runs call again; what
// the second answer says stands (EIO if it is the same refusal). call
// returns the server's status and the call's error.
func (fs *FS) underState(ctx context.Context, n *inode, c *Cred, write bool, call func(st *proto.StateID) (status, err error)) error {
	st, uid, ok := fs.ioState(n, c, write)
	if !ok {
		_, err := call(nil)
		return err
	}
	status, err := call(&st)
	if err == nil && proto.ErrnoOf(status) == syscall.EBADF {
		// OPENMODE: the open was narrowed after st was picked (a writer's
		// release sent its OPEN_DOWNGRADE meanwhile; the recall soak's
		// truncate(2) failed with EBADF). What is open now may have no
		// such access: once more under none, as for a file not open here
		// (the server still checks the caller and the share reservations).
		_, err = call(nil)
		return err
	}
	if err != nil || !errors.Is(status, proto.ErrBadState) {
		return err
	}
	again, ok, closed := fs.reopen(ctx, n, uid, st, status)
	switch {
	case closed:
		// Closed here while the call was on its way (write-back after the
		// last release): no open to name, as for any file not open.
		_, err = call(nil)
	case ok:
		_, err = call(&again)
	}
	return err // else the refusal stands: EIO
}

// reopen opens n again for uid after the server said it no longer knows
// the open old: an OPEN of the handle per share access the descriptors
// hold (each a part a later OPEN_DOWNGRADE may narrow to), unless another
// call reopened it meanwhile. Locks held under the old open are lost (the
// server may have granted them to another client since): logged.
//
// closed reports that uid's open was closed meanwhile: there is nothing
// to reopen.
func (fs *FS) reopen(ctx context.Context, n *inode, uid uint32, old proto.StateID, why error) (st proto.StateID, ok, closed bool) {
	no := fs.opensOf(n)
	no.mu.Lock()
	defer no.mu.Unlock()
	no.vmu.Lock()
	ow := no.owners[uid]
	no.vmu.Unlock()
	if ow == nil {
		return proto.StateID{}, false, true
	}
	if ow.st.Other != old.Other {
		return ow.st, true, false
	}
	fs.logf("hushfs: node %d: the server no longer knows our open (%v); opening it again", n.id, why)
	st, ok = fs.reopenOwnerLocked(ctx, n, no, ow)
	return st, ok, false
}

// reopenOwnerLocked opens n for ow by its handle, an OPEN per share access
// its descriptors hold, and makes that ow's open (its locks are lost: the
// server may have granted them to another since). It serves reopen, and
// turns readers opened under a delegation into a real open (deleg.go).
//
// LOCKS_REQUIRED(no.mu)
func (fs *FS) reopenOwnerLocked(ctx context.Context, n *inode, no *nodeOpens, ow *ownerOpen) (st proto.StateID, ok bool) {
	for share := uint32(1); share < 4; share++ {
		if ow.count[share] == 0 {
			continue
		}
		at := fs.now()
		res, err := fs.opener.Open(ctx, &ow.cred, proto.OpenArgs{FH: n.fh, Access: share})
		if err == nil && res.Status != nil {
			err = res.Status
		}
		if err != nil {
			fs.logf("hushfs: node %d: opening it again: %v; its I/O fails with EIO", n.id, err)
			return proto.StateID{}, false
		}
		fs.applyAttr(n, &res.Attr, at)
		if !ok || newer(res.State, st) {
			st, ok = res.State, true
		}
	}
	if !ok {
		return proto.StateID{}, false
	}
	no.vmu.Lock()
	lost := len(ow.locks)
	ow.st, ow.locks, ow.viaDeleg = st, nil, false
	if lost > 0 {
		ow.locksLost = true
	}
	no.vmu.Unlock()
	if lost > 0 {
		fs.logf("hushfs: node %d: locks of %d lock owners were lost with the old open; I/O of uid %d's descriptors of it fails with EIO until they are closed",
			n.id, lost, ow.cred.UID)
	}
	return st, true
}

// storeAccess caches the rights the server granted c on n, with the
// attributes n now has (from the same reply).
func (fs *FS) storeAccess(n *inode, c *Cred, granted uint32, at time.Time) {
	n.mu.Lock()
	defer n.mu.Unlock()
	if !n.attrValid {
		return
	}
	if n.access == nil {
		n.access = map[string]accessEntry{}
	}
	if len(n.access) > 64 {
		clear(n.access) // a node is rarely used by many identities
	}
	n.access[credKey(c)] = accessEntry{granted: granted, mode: n.attr.Mode, uid: n.attr.UID,
		gid: n.attr.GID, ctime: n.attr.Ctime, at: at}
}

// lockOwners are the kernel's lock owners that took locks under an open,
// with the ranges each holds (lockranges.go).
type lockOwners map[uint64]lockRanges
