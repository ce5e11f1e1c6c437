package server

import (
	"golang.org/x/sys/unix"

	"hushfs/internal/nfs3"
	"hushfs/internal/nfs4"
	"hushfs/internal/server/v4state"
)

// OPEN, CLOSE and OPEN_DOWNGRADE: the file is found or made as the v3
// procedures do (CREATE's modes, durability and EXCLUSIVE verifier
// included); the open state, share reservations and grace are v4state's.
// An OPEN for writing (or denying reads) first recalls other clients'
// delegations (one for reading, other clients' write delegations); one
// for reading may be granted a read delegation, one for writing a write
// delegation (nfs4_deleg.go).

// stateid resolves the special "current stateid" (RFC 8881 §16.2.3.1.2).
func (c *compound) stateid(s *nfs4.Stateid) (nfs4.Stateid, nfs4.Status) {
	if *s == nfs4.CurrentStateid {
		if !c.curSidOK {
			return nfs4.Stateid{}, nfs4.ErrBadStateid
		}
		return c.curSid, nfs4.OK
	}
	return *s, nfs4.OK
}

func (c *compound) setStateid(s nfs4.Stateid) { c.curSid, c.curSidOK = s, true }

// regularFile returns the current filehandle as a regular file, or the
// status to fail with (ISDIR for a directory, INVAL for anything else).
func (c *compound) regularFile() (*node, nfs4.Status) {
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

// openResult is what opening by name found or made.
type openResult struct {
	n       *node // with a reference
	cinfo   nfs4.ChangeInfo
	attrset nfs4.Bitmap
	created bool
}

func (c *compound) open(a *nfs4.OpenArgs) nfs4.Status {
	access := a.ShareAccess & nfs4.ShareAccessBoth
	if a.ShareAccess&^(nfs4.ShareAccessBoth|nfs4.ShareAccessWantDelegMask|
		nfs4.ShareAccessWantSignalDelegWhenResrcAvail|nfs4.ShareAccessWantPushDelegWhenUncontended) != 0 ||
		!v4state.ValidShare(access, a.ShareDeny) {
		return c.status(nfs4.ErrInval)
	}
	if !c.cur.set {
		return c.status(nfs4.ErrNoFileHandle)
	}
	var r openResult
	reclaim := false
	st := nfs4.OK
	switch a.Claim.Type {
	case nfs4.ClaimNull:
		if st = c.s.v4.state.CheckOpenClaim(c.client, false); st == nfs4.OK {
			r, st = c.openByName(a)
		}
	case nfs4.ClaimFH, nfs4.ClaimPrevious:
		reclaim = a.Claim.Type == nfs4.ClaimPrevious
		switch {
		case a.OpenType == nfs4.OpenCreate:
			st = nfs4.ErrInval
		case reclaim && a.Claim.DelegateType != nfs4.DelegateNone && a.Claim.DelegateType != nfs4.DelegateRead &&
			a.Claim.DelegateType != nfs4.DelegateWrite:
			st = nfs4.ErrInval
		case c.cur.n == nil:
			st = nfs4.ErrIsDir
		default:
			st = c.s.v4.state.CheckOpenClaim(c.client, reclaim)
		}
		if st == nfs4.OK {
			r.n = c.cur.n
			c.s.cache.ref(r.n)
		}
	case nfs4.ClaimDelegateCur, nfs4.ClaimDelegCurFH:
		// The client opens through the delegation it holds (its local
		// opens, when the delegation is recalled).
		switch {
		case a.OpenType == nfs4.OpenCreate:
			st = nfs4.ErrInval
		case a.Claim.Type == nfs4.ClaimDelegateCur:
			if _, st = c.realDir(); st == nfs4.OK {
				if st = checkName4(a.Claim.File); st == nfs4.OK {
					r.n, _, st = c.lookupNode(a.Claim.File)
				}
			}
		case c.cur.n == nil:
			st = nfs4.ErrIsDir
		default:
			r.n = c.cur.n
			c.s.cache.ref(r.n)
		}
		if st == nfs4.OK {
			if st = c.s.v4.state.CheckDelegClaim(c.client, &a.Claim.DelegateStateid, r.n.key); st != nfs4.OK {
				c.s.cache.release(r.n)
				r.n = nil
			}
		}
	default: // CLAIM_DELEGATE_PREV, CLAIM_DELEG_PREV_FH
		st = nfs4.ErrNotSupp
	}
	if st != nfs4.OK {
		return c.status(st)
	}
	n := r.n
	var fst unix.Stat_t
	switch {
	case n.isDir():
		st = nfs4.ErrIsDir
	case n.ftype == unix.S_IFLNK:
		st = nfs4.ErrSymlink
	case !n.isReg():
		st = nfs4.ErrWrongType
	case c.s.readOnly && access&nfs4.ShareAccessWrite != 0:
		st = nfs4.ErrROFS
	default:
		if err := c.s.stat(n, &fst); err != nil {
			st = c.s.statusOf4(err)
		} else if fst.Nlink == 0 && !c.s.v4.state.Holds(c.client, n.key) {
			// Reachable only because another client keeps it open: this
			// client opens a name it cached before the file lost it, and
			// must look the name up again rather than read the old file.
			st = nfs4.ErrStale
		} else if !r.created {
			// As on a local open: the caller needs the permission, but
			// the owner always may (clients check at open, and the
			// creator of a read-only file writes what it creates).
			if access&nfs4.ShareAccessRead != 0 {
				if err := c.s.mayIO(&c.id, n, &fst, false); err != nil {
					st = c.s.statusOf4(err)
				}
			}
			if st == nfs4.OK && access&nfs4.ShareAccessWrite != 0 {
				if err := c.s.mayIO(&c.id, n, &fst, true); err != nil {
					st = c.s.statusOf4(err)
				}
			}
		}
	}
	if st == nfs4.OK && !reclaim {
		if access&nfs4.ShareAccessWrite != 0 || a.ShareDeny&nfs4.ShareDenyRead != 0 {
			st = c.mayOpen(n.key)
		} else {
			st = c.mayRead(n.key)
		}
	}
	if st == nfs4.OK {
		var sid nfs4.Stateid
		sid, st = c.s.v4.state.Open(c.client, &v4state.OpenArgs{Owner: a.Owner.Owner, FileKey: n.key,
			Access: access, Deny: a.ShareDeny, Reclaim: reclaim})
		if st == nfs4.OK {
			c.s.pinOpen(n)
			res := nfs4.OpenRes{Status: nfs4.OK, Stateid: sid, CInfo: r.cinfo,
				Rflags: nfs4.OpenResultLocktypePosix | nfs4.OpenResultPreserveUnlinked, AttrSet: r.attrset}
			res.Delegation = noDelegation(a.ShareAccess & nfs4.ShareAccessWantDelegMask)
			if reclaim && a.Claim.DelegateType != nfs4.DelegateNone {
				res.Delegation = c.reclaimDeleg(n, a.Claim.DelegateType)
			}
			// No delegation of a file without a name: no change to it
			// by name could recall it, while a client that reached it
			// through a stale name would go on opening it with no call.
			if !reclaim && fst.Nlink > 0 && a.Claim.Type != nfs4.ClaimDelegateCur && a.Claim.Type != nfs4.ClaimDelegCurFH {
				want := a.ShareAccess & nfs4.ShareAccessWantDelegMask
				if access&nfs4.ShareAccessWrite != 0 {
					res.Delegation = c.grantWrite(n, a.ShareDeny, want)
				} else {
					res.Delegation = c.grantRead(n, access, a.ShareDeny, want)
				}
			}
			c.reply = res.Append(c.reply)
			c.setCur(n, 0)
			c.setStateid(sid)
			return nfs4.OK
		}
	}
	c.s.cache.release(n)
	return c.status(st)
}

// noDelegation is the open_delegation4 of an OPEN that grants none: plain
// NONE, or NONE_EXT with the reason when the client said what it wants
// (RFC 8881 §18.16.3).
func noDelegation(want uint32) nfs4.OpenDelegation {
	switch want {
	case nfs4.ShareAccessWantNoPreference:
		return nfs4.OpenDelegation{Type: nfs4.DelegateNone}
	case nfs4.ShareAccessWantNoDeleg:
		return nfs4.OpenDelegation{Type: nfs4.DelegateNoneExt, WhyNone: nfs4.WNDNotWanted}
	case nfs4.ShareAccessWantCancel:
		return nfs4.OpenDelegation{Type: nfs4.DelegateNoneExt, WhyNone: nfs4.WNDCancelled}
	}
	return nfs4.OpenDelegation{Type: nfs4.DelegateNoneExt, WhyNone: nfs4.WNDResource}
}

// openByName serves CLAIM_NULL: the name in the current directory, made
// with OPEN4_CREATE as the create mode says.
func (c *compound) openByName(a *nfs4.OpenArgs) (r openResult, st nfs4.Status) {
	name := a.Claim.File
	if c.cur.n == nil && a.OpenType == nfs4.OpenNoCreate {
		// Only directories in the pseudo file system.
		if _, _, st := c.lookupNode(name); st != nfs4.OK {
			return r, st
		}
		return r, nfs4.ErrIsDir
	}
	dir, st := c.realDir()
	if st == nfs4.OK {
		st = checkName4(name)
	}
	if st != nfs4.OK {
		return r, st
	}
	if a.OpenType == nfs4.OpenNoCreate {
		var dst unix.Stat_t
		if err := c.s.stat(dir, &dst); err != nil {
			return r, c.s.statusOf4(err)
		}
		ch := changeOf(dst.Ctim.Sec, dst.Ctim.Nsec)
		r.cinfo = nfs4.ChangeInfo{Atomic: true, Before: ch, After: ch}
		r.n, _, st = c.lookupNode(name)
		return r, st
	}
	return c.openCreate(dir, name, a)
}

// openCreate serves OPEN4_CREATE through the v3 CREATE: UNCHECKED4 and
// GUARDED4 as v3's; EXCLUSIVE4 as v3's EXCLUSIVE (the verifier kept in
// the file's times, so a retransmission finds the file it made);
// EXCLUSIVE4_1 likewise, and then the attributes it may carry.
func (c *compound) openCreate(dir *node, name []byte, a *nfs4.OpenArgs) (r openResult, st nfs4.Status) {
	args := nfs3.CreateArgs{Where: nfs3.DirOpArgs{Dir: dir.fh, Name: name}}
	var post nfs3.Sattr
	switch a.CreateMode {
	case nfs4.Unchecked, nfs4.Guarded:
		sa, far, st := c.s.sattrOf(&a.CreateAttrs)
		if st == nfs4.OK && far != nil {
			st = nfs4.ErrInval
		}
		if st != nfs4.OK {
			return r, st
		}
		args.Mode, args.Attr = nfs3.Unchecked, sa
		if a.CreateMode == nfs4.Guarded {
			args.Mode = nfs3.Guarded
		}
		r.attrset = a.CreateAttrs.Mask
	case nfs4.Exclusive, nfs4.Exclusive41:
		args.Mode, args.Verf = nfs3.Exclusive, nfs3.Verf(a.CreateVerf)
		if a.CreateMode == nfs4.Exclusive41 {
			if !isEmpty(a.CreateAttrs.Mask.AndNot(exclCreateAttrs)) {
				return r, nfs4.ErrInval
			}
			sa, _, st := c.s.sattrOf(&a.CreateAttrs)
			if st != nfs4.OK {
				return r, st
			}
			post = sa
			r.attrset = a.CreateAttrs.Mask
		}
		// The times hold the verifier: the client sets them after.
		r.attrset.Set(nfs4.AttrTimeAccessSet)
		r.attrset.Set(nfs4.AttrTimeModifySet)
	default:
		return r, nfs4.ErrInval
	}
	if args.Attr.SetSize {
		// Truncating an existing file changes it: recall first.
		if st := c.mayChangeName(dir, name); st != nfs4.OK {
			return r, st
		}
	}
	// Creating may add an entry: other clients' delegations of the
	// directory go first (an existing file costs them theirs too).
	done, st := c.mayChangeDir(dir, name, unix.IN_CREATE)
	if st != nfs4.OK {
		return r, st
	}
	res := c.s.create(&c.id, &args)
	if res.Status != nfs3.OK {
		done(false)
		if res.Status == nfs3.ErrExist && a.CreateMode != nfs4.Guarded {
			// Not a regular file there: say what it is.
			if n, _, st := c.lookupNode(name); st == nfs4.OK {
				switch {
				case n.isDir():
					st = nfs4.ErrIsDir
				case n.ftype == unix.S_IFLNK:
					st = nfs4.ErrSymlink
				case !n.isReg():
					st = nfs4.ErrWrongType
				default:
					st = nfs4.ErrExist
				}
				c.s.cache.release(n)
				return r, st
			}
		}
		return r, status4(res.Status)
	}
	r.cinfo = cinfoOf(&res.DirWcc)
	// The directory changed under its lock: this call made the file.
	r.created = r.cinfo.Atomic && r.cinfo.Before != r.cinfo.After
	done(r.created)
	n, err := c.s.resolve(res.Obj.FH)
	if err != nil {
		return r, c.s.statusOf4(err)
	}
	if !r.created && a.CreateMode == nfs4.Unchecked {
		r.attrset = nfs4.Bitmap{}
		if a.CreateAttrs.Mask.Has(nfs4.AttrSize) {
			r.attrset.Set(nfs4.AttrSize)
		}
	}
	if r.created && (post.SetMode || post.SetUID || post.SetGID) {
		if sr := c.s.setattr(&c.id, &nfs3.SetattrArgs{Obj: n.fh, Attr: post}); sr.Status != nfs3.OK {
			c.s.cache.release(n)
			return r, status4(sr.Status)
		}
	}
	r.n = n
	return r, nfs4.OK
}

func (c *compound) close(a *nfs4.CloseArgs) nfs4.Status {
	if !c.cur.set {
		return c.status(nfs4.ErrNoFileHandle)
	}
	sid, st := c.stateid(&a.Stateid)
	if st == nfs4.OK {
		key := ""
		if c.cur.n != nil {
			key = c.cur.n.key
		}
		sid, st = c.s.v4.state.Close(c.client, &sid, key)
		if st == nfs4.OK {
			c.s.v4.leases.writerClosed(key)
		}
	}
	res := nfs4.CloseRes{Status: st, Stateid: sid}
	c.reply = res.Append(c.reply)
	if st == nfs4.OK {
		c.setStateid(sid)
	}
	return st
}

func (c *compound) openDowngrade(a *nfs4.OpenDowngradeArgs) nfs4.Status {
	if !c.cur.set {
		return c.status(nfs4.ErrNoFileHandle)
	}
	sid, st := c.stateid(&a.Stateid)
	if st == nfs4.OK {
		key := ""
		if c.cur.n != nil {
			key = c.cur.n.key
		}
		sid, st = c.s.v4.state.OpenDowngrade(c.client, &sid, key, a.ShareAccess&nfs4.ShareAccessBoth, a.ShareDeny)
	}
	res := nfs4.OpenDowngradeRes{Status: st, Stateid: sid}
	c.reply = res.Append(c.reply)
	if st == nfs4.OK {
		c.setStateid(sid)
	}
	return st
}
