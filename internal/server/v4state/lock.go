package v4state

import (
	"bytes"
	"slices"

	"hushfs/internal/nfs4"
)

// Byte-range locks are the server's own, between NFSv4.1 clients: they are
// not taken on the exported files, so neither local processes nor NFSv3
// clients (NLM is not served) see them.

// LockOwner is a lock owner (Linux: one per process, or per open file
// description for flock and OFD locks).
type LockOwner struct {
	client *Client
	owner  []byte
	states map[string]*LockState // by file key
}

// LockState is a lock stateid: one lock owner's locks on one file, made
// from one of the client's opens of it.
type LockState struct {
	sid   nfs4.Stateid
	owner *LockOwner
	open  *Open
	file  *File
	n     int // ranges held
}

func (ls *LockState) held() bool { return ls.n > 0 }

// lockRange is one locked range, end inclusive (^0: to the end of any file).
type lockRange struct {
	ls         *LockState
	start, end uint64
	write      bool
}

func (r *lockRange) overlaps(start, end uint64) bool { return r.start <= end && start <= r.end }

// rangeOf turns offset and length into an inclusive range: length all ones
// is to the end of any file; 0, or a range past 2^64, is INVAL.
func rangeOf(off, length uint64) (start, end uint64, ok bool) {
	switch {
	case length == 0:
		return 0, 0, false
	case length == ^uint64(0):
		return off, ^uint64(0), true
	case length-1 > ^uint64(0)-off:
		return 0, 0, false
	}
	return off, off + length - 1, true
}

// LockArgs is a LOCK's request of the state.
type LockArgs struct {
	Write   bool
	Reclaim bool
	Offset  uint64
	Length  uint64
	// A new lock owner (open_to_lock_owner4) with the open it locks
	// through, or an existing lock stateid.
	NewOwner    bool
	OpenStateid nfs4.Stateid
	Owner       []byte
	LockStateid nfs4.Stateid
	FileKey     string
}

func deniedOf(r *lockRange) nfs4.LockDenied {
	d := nfs4.LockDenied{Offset: r.start, Length: ^uint64(0), LockType: nfs4.ReadLT,
		Owner: nfs4.StateOwner{ClientID: r.ls.owner.client.ID, Owner: r.ls.owner.owner}}
	if r.end != ^uint64(0) {
		d.Length = r.end - r.start + 1
	}
	if r.write {
		d.LockType = nfs4.WriteLT
	}
	return d
}

// conflictLocked returns the first lock of another owner than lo on f
// that a lock of the range and kind conflicts with, or nil.
func conflictLocked(f *File, lo *LockOwner, start, end uint64, write bool) *lockRange {
	for _, r := range f.locks {
		if r.ls.owner != lo && r.overlaps(start, end) && (write || r.write) {
			return r
		}
	}
	return nil
}

// Lock serves LOCK for client cl: on NFS4_OK the lock stateid; on DENIED
// the conflicting lock.
func (st *State) Lock(cl *Client, a *LockArgs) (nfs4.Stateid, nfs4.LockDenied, nfs4.Status) {
	var none nfs4.Stateid
	start, end, ok := rangeOf(a.Offset, a.Length)
	if !ok {
		return none, nfs4.LockDenied{}, nfs4.ErrInval
	}
	st.mu.Lock()
	defer st.mu.Unlock()
	if s := st.claimLocked(cl, a.Reclaim); s != nfs4.OK {
		return none, nfs4.LockDenied{}, s
	}
	var ls *LockState
	if a.NewOwner {
		o, status := st.openOfLocked(cl, &a.OpenStateid, a.FileKey)
		if status != nfs4.OK {
			return none, nfs4.LockDenied{}, status
		}
		lo := cl.lockOwners[ownerKey(a.Owner)]
		if lo == nil {
			lo = &LockOwner{client: cl, owner: bytes.Clone(a.Owner), states: make(map[string]*LockState)}
			cl.lockOwners[ownerKey(a.Owner)] = lo
		}
		if ls = lo.states[a.FileKey]; ls == nil {
			if cl.nstate >= MaxStatePerClient {
				return none, nfs4.LockDenied{}, nfs4.ErrResource
			}
			ls = &LockState{sid: nfs4.Stateid{Other: st.newOther()}, owner: lo, open: o, file: o.file}
			lo.states[a.FileKey] = ls
			o.locks = append(o.locks, ls)
			st.stateids[ls.sid.Other] = stateRec{kind: kindLock, lock: ls}
			cl.nstate++
		}
	} else {
		var status nfs4.Status
		if ls, status = st.lockStateLocked(cl, &a.LockStateid, a.FileKey); status != nfs4.OK {
			return none, nfs4.LockDenied{}, status
		}
	}
	acc := uint32(nfs4.ShareAccessRead)
	if a.Write {
		acc = nfs4.ShareAccessWrite
	}
	if ls.open.access&acc == 0 {
		st.dropIdleLockState(ls)
		return none, nfs4.LockDenied{}, nfs4.ErrOpenMode
	}
	f := ls.file
	if r := conflictLocked(f, ls.owner, start, end, a.Write); r != nil {
		d := deniedOf(r)
		st.dropIdleLockState(ls)
		return none, d, nfs4.ErrDenied
	}
	if ls.n >= MaxLocksPerStateid {
		return none, nfs4.LockDenied{}, nfs4.ErrResource
	}
	st.unlockRangeLocked(ls, start, end)
	st.insertRangeLocked(ls, &lockRange{ls: ls, start: start, end: end, write: a.Write})
	bumpSeqid(&ls.sid)
	cl.lastRenew = st.now()
	return ls.sid, nfs4.LockDenied{}, nfs4.OK
}

// dropIdleLockState forgets a lock stateid made by a LOCK that failed
// (it never reached the client).
func (st *State) dropIdleLockState(ls *LockState) {
	if ls.sid.Seqid == 0 && !ls.held() {
		st.releaseLockStateLocked(ls)
	}
}

// lockStateLocked finds the lock stateid s of cl on file key.
func (st *State) lockStateLocked(cl *Client, s *nfs4.Stateid, key string) (*LockState, nfs4.Status) {
	if IsSpecial(s) {
		return nil, nfs4.ErrBadStateid
	}
	rec, status := st.lookupLocked(s)
	if status != nfs4.OK {
		return nil, status
	}
	if rec.kind != kindLock || rec.lock.owner.client != cl || rec.lock.file.key != key {
		return nil, nfs4.ErrBadStateid
	}
	return rec.lock, nfs4.OK
}

// insertRangeLocked adds r, merging it with the owner's adjacent or
// overlapping ranges of the same kind.
func (st *State) insertRangeLocked(ls *LockState, r *lockRange) {
	f := ls.file
	for i := 0; i < len(f.locks); {
		x := f.locks[i]
		adj := x.ls == ls && x.write == r.write &&
			(x.overlaps(r.start, r.end) || (r.end != ^uint64(0) && x.start == r.end+1) || (x.end != ^uint64(0) && x.end+1 == r.start))
		if adj {
			r.start, r.end = min(r.start, x.start), max(r.end, x.end)
			f.locks = slices.Delete(f.locks, i, i+1)
			ls.n--
			continue
		}
		i++
	}
	f.locks = append(f.locks, r)
	ls.n++
}

// unlockRangeLocked removes [start, end] from the ranges of ls, splitting
// those that straddle it.
func (st *State) unlockRangeLocked(ls *LockState, start, end uint64) {
	f := ls.file
	var add []*lockRange
	for i := 0; i < len(f.locks); {
		x := f.locks[i]
		if x.ls != ls || !x.overlaps(start, end) {
			i++
			continue
		}
		if x.start < start {
			add = append(add, &lockRange{ls: ls, start: x.start, end: start - 1, write: x.write})
		}
		if x.end > end {
			add = append(add, &lockRange{ls: ls, start: end + 1, end: x.end, write: x.write})
		}
		f.locks = slices.Delete(f.locks, i, i+1)
		ls.n--
	}
	f.locks = append(f.locks, add...)
	ls.n += len(add)
}

// LockU serves LOCKU: the range is unlocked (what of it was locked).
func (st *State) LockU(cl *Client, s *nfs4.Stateid, key string, off, length uint64) (nfs4.Stateid, nfs4.Status) {
	start, end, ok := rangeOf(off, length)
	if !ok {
		return nfs4.Stateid{}, nfs4.ErrInval
	}
	st.mu.Lock()
	defer st.mu.Unlock()
	ls, status := st.lockStateLocked(cl, s, key)
	if status != nfs4.OK {
		return nfs4.Stateid{}, status
	}
	st.unlockRangeLocked(ls, start, end)
	bumpSeqid(&ls.sid)
	cl.lastRenew = st.now()
	return ls.sid, nfs4.OK
}

// LockT serves LOCKT: the first lock of another owner than (cl, owner)
// that a lock of the range and kind would conflict with.
func (st *State) LockT(cl *Client, owner []byte, key string, write bool, off, length uint64) (nfs4.LockDenied, nfs4.Status) {
	start, end, ok := rangeOf(off, length)
	if !ok {
		return nfs4.LockDenied{}, nfs4.ErrInval
	}
	st.mu.Lock()
	defer st.mu.Unlock()
	if st.inGraceLocked() {
		return nfs4.LockDenied{}, nfs4.ErrGrace
	}
	f := st.files[key]
	if f == nil {
		return nfs4.LockDenied{}, nfs4.OK
	}
	lo := cl.lockOwners[ownerKey(owner)] // nil: an owner without locks, conflicting with all
	if r := conflictLocked(f, lo, start, end, write); r != nil {
		return deniedOf(r), nfs4.ErrDenied
	}
	return nfs4.LockDenied{}, nfs4.OK
}

// releaseLockStateLocked ends a lock stateid and its locks.
func (st *State) releaseLockStateLocked(ls *LockState) {
	f := ls.file
	f.locks = slices.DeleteFunc(f.locks, func(r *lockRange) bool { return r.ls == ls })
	ls.n = 0
	ls.open.locks = slices.DeleteFunc(ls.open.locks, func(x *LockState) bool { return x == ls })
	lo := ls.owner
	if lo.states[f.key] == ls {
		delete(lo.states, f.key)
	}
	if len(lo.states) == 0 {
		delete(lo.client.lockOwners, ownerKey(lo.owner))
	}
	if _, ok := st.stateids[ls.sid.Other]; ok {
		delete(st.stateids, ls.sid.Other)
		lo.client.nstate--
	}
	st.dropFileIfIdle(f)
}
