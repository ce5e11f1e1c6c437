package client

import (
	"context"
	"errors"
	"math"
	"syscall"
	"time"

	"hushfs/internal/proto"
)

// Byte-range locks between clients, where the server has them (NFSv4.1:
// proto.Locker). fcntl's locks and flock's (which FUSE sends as whole-file
// locks of the open file's own owner) are the server's to grant, under
// the descriptor's open, each kernel lock owner a lock owner of its own;
// so two machines' locks, and two processes' on this one, exclude each
// other. The kernel keeps no copy: a process's POSIX locks go with the
// FLUSH of its close (or of its death), a file's flock locks with its
// RELEASE (ReleaseLocks), and whatever a lock owner still holds goes at
// the open's CLOSE.
//
// A lock that must wait (F_SETLKW) is asked for again and again, 100 ms
// apart at first and up to 1 s, until it is granted or the caller has a
// signal: RFC 8881 §9.6 has the client poll; CB_NOTIFY_LOCK, where a
// server sends it, only says when to ask next.

// Lock is a lock as fcntl's struct flock has it: [Start, End], End
// inclusive, OffsetMax meaning to the end of the file; Type is F_RDLCK,
// F_WRLCK or F_UNLCK.
type Lock struct {
	Start, End uint64
	Type       uint32
	Pid        uint32
}

// OffsetMax is the kernel's OFFSET_MAX: a lock's End that means the end
// of the file, whatever it becomes.
const OffsetMax = math.MaxInt64

// Lock poll intervals for a lock that waits: doubling from the first to
// the last.
const (
	lockPollFirst = 100 * time.Millisecond
	lockPollMax   = time.Second
)

// HasLocks reports whether the server grants locks (the FUSE adapter asks
// the kernel for them only then; NFSv3 keeps them local to this machine).
func (fs *FS) HasLocks() bool { return fs.locker != nil }

// lockArgs is the server's view of lk on of's file for the kernel's owner.
func lockArgs(of *openFile, owner uint64, lk *Lock) proto.LockArgs {
	a := proto.LockArgs{FH: of.node.fh, Owner: owner, Offset: lk.Start, Type: proto.WriteLock}
	if lk.Type == syscall.F_RDLCK {
		a.Type = proto.ReadLock
	}
	if lk.End < OffsetMax && lk.End >= lk.Start {
		a.Length = lk.End - lk.Start + 1
	}
	return a
}

// lockShare is the access a lock of type t needs of its descriptor.
func lockShare(t uint32) uint32 {
	if t == syscall.F_RDLCK {
		return proto.ShareRead
	}
	return proto.ShareWrite
}

// lockOf is the kernel's view of a lock the server reported in the way.
func lockOf(c *proto.LockArgs) Lock {
	lk := Lock{Start: min(c.Offset, OffsetMax), End: OffsetMax, Type: syscall.F_WRLCK}
	if c.Type == proto.ReadLock {
		lk.Type = syscall.F_RDLCK
	}
	if c.Length != 0 && c.Offset+c.Length > c.Offset && c.Offset+c.Length-1 < OffsetMax {
		lk.End = c.Offset + c.Length - 1
	}
	return lk
}

// lockFile is the descriptor fh and its open, for a lock call.
func (fs *FS) lockFile(fh uint64) (*openFile, *nodeOpens, error) {
	if fs.locker == nil {
		return nil, nil, syscall.ENOLCK
	}
	of, err := fs.openFile(fh)
	if err != nil {
		return nil, nil, err
	}
	if of.share == 0 {
		return nil, nil, syscall.ENOLCK // not opened through the server
	}
	return of, fs.opensOf(of.node), nil
}

// ownerState returns the stateid of of's open, if it is still open.
func (no *nodeOpens) ownerState(uid uint32) (*ownerOpen, proto.StateID, bool) {
	no.vmu.Lock()
	defer no.vmu.Unlock()
	ow := no.owners[uid]
	if ow == nil {
		return nil, proto.StateID{}, false
	}
	return ow, ow.st, true
}

// GetLk reports a lock in the way of lk for the kernel's owner (LOCKT),
// or lk with Type F_UNLCK if there is none.
func (fs *FS) GetLk(ctx context.Context, c *Cred, fh, owner uint64, lk Lock) (Lock, error) {
	of, no, err := fs.lockFile(fh)
	if err != nil {
		return Lock{}, err
	}
	_, st, ok := no.ownerState(of.cred.UID)
	if !ok {
		return Lock{}, syscall.EBADF
	}
	a := lockArgs(of, owner, &lk)
	a.State = st
	res, err := fs.locker.TestLock(ctx, c, a)
	if err != nil {
		return Lock{}, err
	}
	if res.Conflict != nil {
		return lockOf(res.Conflict), nil
	}
	if res.Status != nil {
		return Lock{}, res.Status
	}
	lk.Type = syscall.F_UNLCK
	return lk, nil
}

// SetLk takes or releases lk for the kernel's owner (F_SETLK, or F_SETLKW
// with wait: until granted or ctx ends, which is EINTR).
func (fs *FS) SetLk(ctx context.Context, c *Cred, fh, owner uint64, lk Lock, wait bool) error {
	of, no, err := fs.lockFile(fh)
	if err != nil {
		return err
	}
	a := lockArgs(of, owner, &lk)
	if lk.Type == syscall.F_UNLCK {
		return fs.unlock(ctx, c, of, no, a)
	}
	// The descriptor must be open for the lock's kind: the kernel checks
	// fcntl's, not flock's (an exclusive flock needs a writer, as with
	// Linux's NFS client), and the identity's open may have more access
	// than this descriptor.
	if need := lockShare(lk.Type); of.share&need == 0 {
		return syscall.EBADF
	}
	a.Wait = wait
	pause := lockPollFirst
	for {
		err := fs.lockOnce(ctx, c, of, no, a)
		if !wait || !errors.Is(err, syscall.EAGAIN) {
			return err
		}
		t := time.NewTimer(pause)
		select {
		case <-ctx.Done():
			t.Stop()
			return syscall.EINTR
		case <-t.C:
		}
		pause = min(2*pause, lockPollMax)
	}
}

// lockOnce asks for the lock once, under the descriptor's open (opened
// again, once, if the server no longer knows it).
func (fs *FS) lockOnce(ctx context.Context, c *Cred, of *openFile, no *nodeOpens, a proto.LockArgs) error {
	for try := 0; ; try++ {
		// Under no.mu: the open's stateid is its latest, and no CLOSE of it
		// passes the LOCK.
		no.mu.Lock()
		ow, _, ok := no.ownerState(of.cred.UID)
		if !ok {
			no.mu.Unlock()
			return syscall.EBADF
		}
		fs.realizeLocked(ctx, of.node, no, ow) // a lock needs an open, not a delegation
		_, st, _ := no.ownerState(of.cred.UID)
		a.State = st
		res, err := fs.locker.Lock(ctx, c, a)
		if err == nil && res.Status == nil {
			no.vmu.Lock()
			if ow.locks == nil {
				ow.locks = lockOwners{}
			}
			start, end := rangeOf(&a)
			ow.locks[a.Owner] = ow.locks[a.Owner].set(start, end, a.Type)
			no.vmu.Unlock()
		}
		no.mu.Unlock()
		if err != nil {
			return err
		}
		if try == 0 && errors.Is(res.Status, proto.ErrBadState) {
			if _, ok, _ := fs.reopen(ctx, of.node, of.cred.UID, st, res.Status); ok {
				continue
			}
		}
		return res.Status
	}
}

// unlock releases a range (LOCKU).
func (fs *FS) unlock(ctx context.Context, c *Cred, of *openFile, no *nodeOpens, a proto.LockArgs) error {
	no.mu.Lock()
	defer no.mu.Unlock()
	ow, st, ok := no.ownerState(of.cred.UID)
	if !ok {
		return nil // closed: nothing is held
	}
	a.State = st
	res, err := fs.locker.Unlock(ctx, c, a)
	if err != nil {
		return err
	}
	if res.Status == nil {
		// What is left is what a reclaim asks for again; nothing left:
		// its close has nothing to release.
		no.vmu.Lock()
		start, end := rangeOf(&a)
		if left := ow.locks[a.Owner].clear(start, end); len(left) > 0 {
			ow.locks[a.Owner] = left
		} else {
			delete(ow.locks, a.Owner)
		}
		no.vmu.Unlock()
	}
	if errors.Is(res.Status, proto.ErrBadState) {
		return nil // the server dropped the open, and its locks with it
	}
	return res.Status
}

// ReleaseLocks releases every lock the kernel's owner holds on fh's file:
// at a close (FLUSH: a process's POSIX locks go with any close of the
// file) and at the release of a file flock locked. It is done once the
// data is written (Flush first: another client taking the lock must see
// it) and goes on if the caller is killed (a dead process's locks must not
// stay held).
func (fs *FS) ReleaseLocks(ctx context.Context, fh, owner uint64) error {
	if fs.locker == nil {
		return nil
	}
	of, err := fs.openFile(fh)
	if err != nil || of.share == 0 {
		return nil
	}
	no := fs.opensOf(of.node)
	no.vmu.Lock()
	var holders []*ownerOpen
	for _, ow := range no.owners {
		if _, ok := ow.locks[owner]; ok {
			holders = append(holders, ow)
		}
	}
	no.vmu.Unlock()
	if len(holders) == 0 {
		return nil // the owner never locked this file: no call
	}
	return fs.await(ctx, func(ctx context.Context) error {
		no.mu.Lock()
		defer no.mu.Unlock()
		var first error
		for _, ow := range holders {
			no.vmu.Lock()
			st := ow.st
			delete(ow.locks, owner)
			no.vmu.Unlock()
			res, err := fs.locker.Unlock(ctx, &ow.cred, proto.LockArgs{FH: of.node.fh, State: st, Owner: owner, Type: proto.WriteLock})
			if err == nil && res.Status != nil && !errors.Is(res.Status, proto.ErrBadState) {
				err = res.Status
			}
			if err != nil {
				fs.logf("hushfs: releasing the locks of node %d at close: %v", of.node.id, err)
				if first == nil {
					first = err
				}
			}
		}
		return first
	})
}
