package nfsv41

import (
	"context"
	"encoding/binary"
	"sync"

	"hushfs/internal/nfs4"
	"hushfs/internal/proto"
)

// Byte-range locks (proto.Locker): LOCK, LOCKU, LOCKT.
//
// A lock owner's first LOCK on a file goes with the open's stateid
// (open_to_lock_owner4) and makes a lock stateid; later LOCKs and LOCKUs
// name that lock stateid (exist_lock_owner4). The lock stateids are kept
// here, per file and lock owner, under the open they were made with: a
// CLOSE of that open ends them.

var _ proto.Locker = (*Server)(nil)

// lockKey names a lock owner's locks on one file.
type lockKey struct {
	fh    string
	owner uint64
}

// lockState is one lock owner's lock stateid on one file.
type lockState struct {
	// mu serializes the owner's LOCK and LOCKU on the file: each returns
	// the stateid's next seqid, which the next one names.
	mu   sync.Mutex
	open [nfs4.OtherSize]byte // GUARDED_BY(mu): the open it was made under
	st   nfs4.Stateid         // GUARDED_BY(mu)
	made bool                 // GUARDED_BY(mu): st is the server's
}

// lockTable holds the lock stateids; the zero value is empty.
type lockTable struct {
	mu sync.Mutex
	m  map[lockKey]*lockState // GUARDED_BY(mu)
	// byOpen: the keys made under each open, so that closing it forgets
	// them.
	byOpen map[[nfs4.OtherSize]byte][]lockKey // GUARDED_BY(mu)
	// reclaimed are lock stateids reclaimed after a server restart
	// (reclaim.go), not yet taken into their lockState: a reclaim cannot
	// wait for lockState.mu, which a LOCK held back by the recovery
	// holds. The next call of the owner on the file takes it (adopt).
	reclaimed map[lockKey]reclaimedLock // GUARDED_BY(mu)
}

// reclaimedLock is a lock stateid a reclaim made under open.
type reclaimedLock struct {
	open [nfs4.OtherSize]byte
	st   nfs4.Stateid
}

// adopt takes a reclaimed lock stateid of (fh, owner) into ls.
//
// LOCKS_REQUIRED(ls.mu)
func (t *lockTable) adopt(fh proto.FH, owner uint64, ls *lockState) {
	t.mu.Lock()
	defer t.mu.Unlock()
	k := lockKey{string(fh), owner}
	r, ok := t.reclaimed[k]
	if !ok {
		return
	}
	delete(t.reclaimed, k)
	ls.open, ls.st, ls.made = r.open, r.st, true
	if t.byOpen == nil {
		t.byOpen = map[[nfs4.OtherSize]byte][]lockKey{}
	}
	t.byOpen[r.open] = append(t.byOpen[r.open], k)
}

// reclaimedState returns the lock stateid a reclaim made for (fh, owner)
// under open, if any.
func (t *lockTable) reclaimedState(fh proto.FH, owner uint64, open [nfs4.OtherSize]byte) (nfs4.Stateid, bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	r, ok := t.reclaimed[lockKey{string(fh), owner}]
	return r.st, ok && r.open == open
}

// setReclaimed records the lock stateid a reclaim made.
func (t *lockTable) setReclaimed(fh proto.FH, owner uint64, open [nfs4.OtherSize]byte, st nfs4.Stateid) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.reclaimed == nil {
		t.reclaimed = map[lockKey]reclaimedLock{}
	}
	t.reclaimed[lockKey{string(fh), owner}] = reclaimedLock{open: open, st: st}
}

func (t *lockTable) get(fh proto.FH, owner uint64) *lockState {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.m == nil {
		t.m, t.byOpen = map[lockKey]*lockState{}, map[[nfs4.OtherSize]byte][]lockKey{}
	}
	k := lockKey{string(fh), owner}
	ls := t.m[k]
	if ls == nil {
		ls = &lockState{}
		t.m[k] = ls
	}
	return ls
}

// made records that k's lock stateid now lives under open.
func (t *lockTable) made(fh proto.FH, owner uint64, open [nfs4.OtherSize]byte) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.byOpen[open] = append(t.byOpen[open], lockKey{string(fh), owner})
}

// ownersUnder returns the lock owners of fh with lock states made, or
// reclaimed, under open.
func (t *lockTable) ownersUnder(fh proto.FH, open [nfs4.OtherSize]byte) []uint64 {
	t.mu.Lock()
	defer t.mu.Unlock()
	var out []uint64
	for _, k := range t.byOpen[open] {
		if k.fh == string(fh) {
			out = append(out, k.owner)
		}
	}
	for k, r := range t.reclaimed {
		if r.open == open && k.fh == string(fh) {
			out = append(out, k.owner)
		}
	}
	return out
}

// forgetOpen drops the lock states made under open (closed).
func (t *lockTable) forgetOpen(open [nfs4.OtherSize]byte) {
	t.mu.Lock()
	defer t.mu.Unlock()
	for _, k := range t.byOpen[open] {
		if ls := t.m[k]; ls != nil {
			ls.mu.Lock()
			if ls.open == open {
				ls.made = false
				delete(t.m, k)
			}
			ls.mu.Unlock()
		}
	}
	delete(t.byOpen, open)
	for k, r := range t.reclaimed {
		if r.open == open {
			delete(t.reclaimed, k)
		}
	}
}

// lockOwner is the lock owner for the kernel's owner under an open: the
// open's stateid is part of it, so a lock owner never outlives its open
// (after a reopen, the owner is new and starts with open_to_lock_owner4).
func (s *Server) lockOwner(owner uint64, open [nfs4.OtherSize]byte) nfs4.StateOwner {
	b := make([]byte, 0, 12+8+nfs4.OtherSize)
	b = append(b, "hushfs lock "...)
	b = binary.BigEndian.AppendUint64(b, owner)
	b = append(b, open[:]...)
	return nfs4.StateOwner{ClientID: s.sess.Info().ClientID, Owner: b}
}

// nfsRange is v4's offset and length for the core's (length 0: to the
// end, which v4 says with all ones).
func nfsRange(off, length uint64) (uint64, uint64) {
	if length == 0 {
		return off, ^uint64(0)
	}
	return off, length
}

func lockType(t proto.LockType, wait bool) nfs4.LockType {
	switch {
	case t == proto.ReadLock && wait:
		return nfs4.ReadWLT
	case t == proto.ReadLock:
		return nfs4.ReadLT
	case wait:
		return nfs4.WriteWLT
	}
	return nfs4.WriteLT
}

// conflict is a lock in the way, as the core describes locks.
func conflict(d *nfs4.LockDenied) *proto.LockArgs {
	c := &proto.LockArgs{Offset: d.Offset, Length: d.Length, Type: proto.WriteLock}
	if d.LockType == nfs4.ReadLT || d.LockType == nfs4.ReadWLT {
		c.Type = proto.ReadLock
	}
	if d.Length == ^uint64(0) {
		c.Length = 0
	}
	return c
}

// Lock takes a lock (LOCK); a lock in the way is Status EAGAIN with the
// Conflict.
func (s *Server) Lock(ctx context.Context, c *proto.Cred, a proto.LockArgs) (proto.LockRes, error) {
	ls := s.locks.get(a.FH, a.Owner)
	ls.mu.Lock()
	defer ls.mu.Unlock()
	s.locks.adopt(a.FH, a.Owner, ls)
	off, length := nfsRange(a.Offset, a.Length)
	args := &nfs4.LockArgs{LockType: lockType(a.Type, a.Wait), Offset: off, Length: length}
	fresh := !ls.made || ls.open != a.State.Other
	if fresh {
		args.NewLockOwner = true
		args.OpenStateid = stateidOf(a.State)
		args.LockOwner = s.lockOwner(a.Owner, a.State.Other)
	} else {
		args.LockStateid = ls.st
	}
	r, err := s.compound(ctx, c, "LOCK", []nfs4.Argop{putfh(a.FH), {Op: nfs4.OpLock, Args: args}})
	if err != nil {
		return proto.LockRes{}, err
	}
	l, ok := r.at(1).(*nfs4.LockRes)
	if !ok {
		return proto.LockRes{Status: stateErr(r.status(1))}, nil
	}
	switch l.Status {
	case nfs4.OK:
		ls.st, ls.open = l.Stateid, a.State.Other
		if fresh {
			ls.made = true
			s.locks.made(a.FH, a.Owner, a.State.Other)
		}
		return proto.LockRes{State: stateOf(l.Stateid)}, nil
	case nfs4.ErrDenied:
		return proto.LockRes{Status: statusErr(l.Status), Conflict: conflict(&l.Denied)}, nil
	}
	return proto.LockRes{Status: stateErr(l.Status)}, nil
}

// Unlock releases a range (LOCKU). An owner that never locked the file
// holds nothing to release.
func (s *Server) Unlock(ctx context.Context, c *proto.Cred, a proto.LockArgs) (proto.LockRes, error) {
	ls := s.locks.get(a.FH, a.Owner)
	ls.mu.Lock()
	defer ls.mu.Unlock()
	s.locks.adopt(a.FH, a.Owner, ls)
	if !ls.made {
		return proto.LockRes{}, nil
	}
	st, err := s.locku(ctx, c, a.FH, ls, a.Offset, a.Length)
	if err != nil {
		return proto.LockRes{}, err
	}
	return proto.LockRes{Status: st, State: stateOf(ls.st)}, nil
}

// locku sends LOCKU of [off, off+length) under ls (held).
//
// LOCKS_REQUIRED(ls.mu)
func (s *Server) locku(ctx context.Context, c *proto.Cred, fh proto.FH, ls *lockState, off, length uint64) (error, error) {
	off, length = nfsRange(off, length)
	r, err := s.compound(ctx, c, "LOCKU", []nfs4.Argop{putfh(fh), {Op: nfs4.OpLockU,
		Args: &nfs4.LockUArgs{LockType: nfs4.WriteLT, Stateid: ls.st, Offset: off, Length: length}}})
	if err != nil {
		return nil, err
	}
	u, ok := r.at(1).(*nfs4.LockURes)
	if !ok || u.Status != nfs4.OK {
		return stateErr(r.status(1)), nil
	}
	ls.st = u.Stateid
	return nil, nil
}

// unlockAll releases every lock held under an open (before its CLOSE),
// reclaimed ones not yet adopted too.
func (s *Server) unlockAll(ctx context.Context, c *proto.Cred, fh proto.FH, open [nfs4.OtherSize]byte) {
	for _, owner := range s.locks.ownersUnder(fh, open) {
		ls := s.locks.get(fh, owner)
		ls.mu.Lock()
		s.locks.adopt(fh, owner, ls)
		if ls.made && ls.open == open {
			if st, err := s.locku(ctx, c, fh, ls, 0, 0); st != nil || err != nil {
				s.logf("hushfs: NFSv4.1 releasing locks before CLOSE: %v %v", st, err)
			}
		}
		ls.mu.Unlock()
	}
}

// TestLock asks whether a lock could be taken (LOCKT): Status EAGAIN with
// the Conflict if not.
func (s *Server) TestLock(ctx context.Context, c *proto.Cred, a proto.LockArgs) (proto.LockRes, error) {
	off, length := nfsRange(a.Offset, a.Length)
	args := &nfs4.LockTArgs{LockType: lockType(a.Type, false), Offset: off, Length: length,
		Owner: s.lockOwner(a.Owner, a.State.Other)}
	r, err := s.compound(ctx, c, "LOCKT", []nfs4.Argop{putfh(a.FH), {Op: nfs4.OpLockT, Args: args}})
	if err != nil {
		return proto.LockRes{}, err
	}
	t, ok := r.at(1).(*nfs4.LockTRes)
	if !ok {
		return proto.LockRes{Status: stateErr(r.status(1))}, nil
	}
	if t.Status == nfs4.ErrDenied {
		return proto.LockRes{Status: statusErr(t.Status), Conflict: conflict(&t.Denied)}, nil
	}
	return proto.LockRes{Status: stateErr(t.Status)}, nil
}
