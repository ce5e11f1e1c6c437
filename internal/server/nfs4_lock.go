package server

import (
	"hushfs/internal/nfs4"
	"hushfs/internal/server/v4state"
)

// LOCK, LOCKT, LOCKU, FREE_STATEID and TEST_STATEID: byte-range locks are
// v4state's, between NFSv4.1 clients only (see its lock.go).

// lockFile is the current filehandle as a file that may be locked.
func (c *compound) lockFile() (*node, nfs4.Status) {
	switch {
	case !c.cur.set:
		return nil, nfs4.ErrNoFileHandle
	case c.cur.n == nil || c.cur.n.isDir():
		return nil, nfs4.ErrIsDir
	case !c.cur.n.isReg():
		return nil, nfs4.ErrInval
	}
	return c.cur.n, nfs4.OK
}

func isWriteLock(t nfs4.LockType) bool { return t == nfs4.WriteLT || t == nfs4.WriteWLT }

func (c *compound) lock(a *nfs4.LockArgs) nfs4.Status {
	n, st := c.lockFile()
	if st != nfs4.OK {
		return c.status(st)
	}
	args := v4state.LockArgs{Write: isWriteLock(a.LockType), Reclaim: a.Reclaim, Offset: a.Offset,
		Length: a.Length, NewOwner: a.NewLockOwner, Owner: a.LockOwner.Owner, FileKey: n.key}
	if a.NewLockOwner {
		args.OpenStateid, st = c.stateid(&a.OpenStateid)
	} else {
		args.LockStateid, st = c.stateid(&a.LockStateid)
	}
	res := nfs4.LockRes{Status: st}
	if st == nfs4.OK {
		res.Stateid, res.Denied, res.Status = c.s.v4.state.Lock(c.client, &args)
	}
	c.reply = res.Append(c.reply)
	if res.Status == nfs4.OK {
		c.setStateid(res.Stateid)
	}
	return res.Status
}

func (c *compound) lockT(a *nfs4.LockTArgs) nfs4.Status {
	n, st := c.lockFile()
	if st != nfs4.OK {
		return c.status(st)
	}
	res := nfs4.LockTRes{}
	if st := c.s.v4.state.ClientOfID(a.Owner.ClientID); st != nfs4.OK {
		res.Status = st
	} else {
		res.Denied, res.Status = c.s.v4.state.LockT(c.client, a.Owner.Owner, n.key, isWriteLock(a.LockType), a.Offset, a.Length)
	}
	c.reply = res.Append(c.reply)
	return res.Status
}

func (c *compound) lockU(a *nfs4.LockUArgs) nfs4.Status {
	n, st := c.lockFile()
	if st != nfs4.OK {
		return c.status(st)
	}
	sid, st := c.stateid(&a.Stateid)
	if st == nfs4.OK {
		sid, st = c.s.v4.state.LockU(c.client, &sid, n.key, a.Offset, a.Length)
	}
	res := nfs4.LockURes{Status: st, Stateid: sid}
	c.reply = res.Append(c.reply)
	if st == nfs4.OK {
		c.setStateid(sid)
	}
	return st
}

func (c *compound) freeStateid(a *nfs4.FreeStateidArgs) nfs4.Status {
	sid, st := c.stateid(&a.Stateid)
	if st == nfs4.OK {
		st = c.s.v4.state.FreeStateid(c.client, &sid)
	}
	return c.status(st)
}

func (c *compound) testStateid(a *nfs4.TestStateidArgs) nfs4.Status {
	res := nfs4.TestStateidRes{Status: nfs4.OK}
	res.StatusCodes = c.s.v4.state.TestStateids(c.client, a.Stateids, nil)
	c.reply = res.Append(c.reply)
	return nfs4.OK
}
