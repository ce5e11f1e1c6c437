package server

import (
	"time"

	"hushfs/internal/nfs4"
	"hushfs/internal/server/v4state"
)

// Directory delegations on the wire (v4state/dirdeleg.go decides,
// leases_dir.go watches local changes): GET_DIR_DELEGATION grants one to
// a client whose back channel answered CB_NULL, and every change of the
// directory's entries or attributes by anyone else — another NFSv4.1
// client, an NFSv3 client — first recalls it with CB_RECALL and waits
// (NFS4ERR_DELAY, or NFS3ERR_JUKEBOX after a little), as for files.
// Where none is granted the answer is GDD4_UNAVAIL, which fails nothing
// in the client's COMPOUND. Of the notifications, entries added and
// removed are granted together when both are asked for, and sent by
// CB_NOTIFY (nfs4_dirnotify.go) with the directory's attributes when
// those are asked for too; entries' attribute changes are granted when
// asked for, and kept by recalling instead (nfs4_dirchild.go). Renames
// are not granted: they are told as a removal and an addition. What is
// not granted, the client knows recalls.

func (c *compound) getDirDelegation(a *nfs4.GetDirDelegationArgs) nfs4.Status {
	res := nfs4.GetDirDelegationRes{Status: nfs4.OK, NonFatal: nfs4.GDD4Unavail}
	dir, st := c.realDir()
	switch {
	case st == nfs4.ErrROFS:
		// A directory of the pseudo file system above the export,
		// which never changes: nothing worth a delegation.
		dir = nil
	case st != nfs4.OK:
		return c.status(st)
	}
	if dir != nil && c.s.v4.delegations && c.client != nil {
		children := a.NotificationTypes.Has(nfs4.NotifyChangeChildAttrs)
		notify := dirNotifyOf(a)
		var sid nfs4.Stateid
		ok := c.s.v4.leases.grantDir(dir, func() (ok bool) {
			sid, ok = c.s.v4.state.GrantDir(c.client, dir.key, children, notify)
			return ok
		})
		if ok {
			c.s.grantedDeleg("directory")
			// The cookie verifier READDIR gives for the directory:
			// cookies stay valid while the delegation is held.
			res = nfs4.GetDirDelegationRes{Status: nfs4.OK, NonFatal: nfs4.GDD4OK,
				CookieVerf: nfs4.Verifier(dir.cverf), Stateid: sid}
			if children {
				// Kept by recalling (nfs4_dirchild.go): any attribute.
				res.Notification.Set(nfs4.NotifyChangeChildAttrs)
				res.ChildAttributes = a.ChildAttributes
			}
			if notify != nil {
				res.Notification.Set(nfs4.NotifyAddEntry)
				res.Notification.Set(nfs4.NotifyRemoveEntry)
				res.ChildAttributes = notify.ChildAttrs
				if notify.DirAttrsOK {
					res.Notification.Set(nfs4.NotifyChangeDirAttrs)
					res.DirAttributes = notify.DirAttrs
				}
			}
		}
	}
	c.reply = res.Append(c.reply)
	return nfs4.OK
}

// mayChangeDir is asked before this compound's client adds, removes or
// renames the entry name of dir (mask: the inotify event that causes;
// SETATTR asks mayChange of the directory's key instead): other clients'
// delegations of the directory are recalled, and while any is held the
// change is NFS4ERR_DELAY. done(ok) must follow the change, saying
// whether it was made: the client's own delegation stays (the watch of
// local changes is told to expect it).
//
// Delegations of others that take notifications of entries stay: once
// the operation is done, their holders are told (CB_NOTIFY) and waited
// for (nfs4_dirnotify.go).
func (c *compound) mayChangeDir(dir *node, name []byte, mask uint32) (done func(ok bool), st nfs4.Status) {
	if !c.s.v4.state.HasDelegations() && !c.s.v4.leases.held() {
		return func(bool) {}, nfs4.OK
	}
	recalls, notify, wait := c.s.v4.state.DirConflicts(dir.key, c.client)
	c.s.sendRecalls(recalls)
	if wait {
		return nil, nfs4.ErrDelay
	}
	expected := c.s.v4.leases.expect(dir.key, name, mask)
	return func(ok bool) {
		expected(ok)
		if ok && len(notify) > 0 {
			// Once the operation is done (an OPEN's create sets the
			// mode after): the entry as it is then.
			entry := string(name)
			c.after = append(c.after, func() { c.s.v4.notifier.mark(notify, entry)() })
		}
	}, nfs4.OK
}

// dirNotifyOf is what a GET_DIR_DELEGATION asks to be notified of that
// the server sends (nil: nothing, its entry changes recall): entries
// added and removed, asked for together, with the entries' attributes
// (and the directory's, if asked for) that the server can send.
func dirNotifyOf(a *nfs4.GetDirDelegationArgs) *v4state.DirNotify {
	if !a.NotificationTypes.Has(nfs4.NotifyAddEntry) || !a.NotificationTypes.Has(nfs4.NotifyRemoveEntry) {
		return nil
	}
	n := &v4state.DirNotify{ChildAttrs: a.ChildAttributes.And(supportedAttrs)}
	if a.NotificationTypes.Has(nfs4.NotifyChangeDirAttrs) {
		n.DirAttrsOK = true
		n.DirAttrs = a.DirAttributes.And(supportedAttrs)
		n.DirAttrs.Clear(nfs4.AttrFilehandle) // the handle is the CB_NOTIFY's
		n.DirAttrs.Clear(nfs4.AttrRdattrError)
	}
	// The entries' changes come with the directory's attributes or the
	// entries': their delays, as asked, within bounds.
	n.Delay = min(max(durOf(a.ChildAttrDelay), durOf(a.DirAttrDelay)), maxNotifyDelay)
	return n
}

// durOf is an nfstime4 as a duration (negative: 0).
func durOf(t nfs4.Time) time.Duration {
	if t.Seconds < 0 {
		return 0
	}
	return time.Duration(t.Seconds)*time.Second + time.Duration(t.Nseconds)
}

// mayChangeDir3 is mayChangeDir for an NFSv3 client's change of the
// directory with handle dirFH: the delegations are recalled and waited
// for, a little; false means they are still held (JUKEBOX). NFSv3
// clients hold none, so the watch expects nothing.
func (s *Server) mayChangeDir3(dirFH []byte) bool {
	return !s.v4.state.HasDelegations() || s.wait3(dirFH, s.v4.state.Conflicts)
}
