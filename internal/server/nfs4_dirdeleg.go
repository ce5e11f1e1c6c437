package server

import (
	"hushfs/internal/nfs4"
)

// Directory delegations on the wire (v4state/dirdeleg.go decides,
// leases_dir.go watches local changes): GET_DIR_DELEGATION grants one to
// a client whose back channel answered CB_NULL, and every change of the
// directory's entries or attributes by anyone else — another NFSv4.1
// client, an NFSv3 client — first recalls it with CB_RECALL and waits
// (NFS4ERR_DELAY, or NFS3ERR_JUKEBOX after a little), as for files.
// Where none is granted the answer is GDD4_UNAVAIL, which fails nothing
// in the client's COMPOUND. Of the notifications (CB_NOTIFY) only the
// entries' attribute changes are granted, when asked for, and kept by
// recalling instead (nfs4_dirchild.go); the other kinds are not granted,
// so the client knows every change of an entry recalls.

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
		var sid nfs4.Stateid
		ok := c.s.v4.leases.grantDir(dir, func() (ok bool) {
			sid, ok = c.s.v4.state.GrantDir(c.client, dir.key, children)
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
				res.Notification = nfs4.NewBitmap(nfs4.NotifyChangeChildAttrs)
				res.ChildAttributes = a.ChildAttributes
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
func (c *compound) mayChangeDir(dir *node, name []byte, mask uint32) (done func(ok bool), st nfs4.Status) {
	if !c.s.v4.state.HasDelegations() && !c.s.v4.leases.held() {
		return func(bool) {}, nfs4.OK
	}
	if st := c.mayOpen(dir.key); st != nfs4.OK {
		return nil, st
	}
	return c.s.v4.leases.expect(dir.key, name, mask), nfs4.OK
}

// mayChangeDir3 is mayChangeDir for an NFSv3 client's change of the
// directory with handle dirFH: the delegations are recalled and waited
// for, a little; false means they are still held (JUKEBOX). NFSv3
// clients hold none, so the watch expects nothing.
func (s *Server) mayChangeDir3(dirFH []byte) bool {
	return !s.v4.state.HasDelegations() || s.wait3(dirFH, s.v4.state.Conflicts)
}
