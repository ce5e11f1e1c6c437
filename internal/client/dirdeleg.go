package client

import (
	"context"
	"sync/atomic"
	"time"

	"hushfs/internal/proto"
)

// Directory delegations (NFSv4.1 GET_DIR_DELEGATION, RFC 8881 §10.9). A
// listing of a directory from its start asks for one in the READDIR's own
// COMPOUND (proto.ReadDirArgs.WantDirDeleg), before the entries are read.
// While it is held the server recalls it before anyone else adds, removes
// or renames an entry or changes the directory's attributes, so:
//   - the directory's attributes stay valid past their lifetime, and with
//     them its names, its complete listing and its absent names (no
//     GETATTR, READDIR or LOOKUP to revalidate them);
//   - if the server also granted notification of its entries' attribute
//     changes (proto.DirDelegation.ChildAttrs: by CB_NOTIFY or a recall),
//     the attributes of its entries that have one name (a change through
//     another link of a file is no change seen in this directory) and are
//     not directories (a directory's own entries change its attributes
//     without any event in its parent) stay valid too, if they were
//     fetched after the delegation was granted.
//
// The kernel keeps them for their usual lifetime too; a return first
// drops the kernel's listing and absent names (as the core's
// own changes do; queued) and, before the DELEGRETURN, the entries' attributes
// (InvalidateAttrsNow): another client's change waits for the return.
// Attributes cached before a recall are invalid even within their own
// lifetime (the recall may be for a change of them). The holder's own
// changes keep the delegation: their replies update the caches as always.
// A CB_NOTIFY drops what it names: an entry's attributes, or the
// directory's attributes for a name added, removed or renamed (its next
// version is fetched, its names with it). Recall, revocation, the idle
// return and unmount are file delegations' (deleg.go): dir delegations
// are kept in the same table. At most maxDirDelegs are held; beyond, the
// one unused longest goes back.

// maxDirDelegs bounds the directory delegations a mount holds.
const maxDirDelegs = 10000

// dirTrust is what a directory delegation vouches for.
type dirTrust struct {
	since      time.Time   // the GET_DIR_DELEGATION was sent
	childAttrs bool        // entries' attribute changes are notified
	entries    bool        // entries added and removed are notified, with the directory's attributes
	held       atomic.Bool // not recalled, revoked or returned
	// notified: names and listing were moved on by a notification,
	// which only the delegation vouches for (dirnotify.go).
	notified atomic.Bool
}

// endDirTrust ends t, dir's delegation, at now: what it kept of the
// entries was cached before now (the end may be for a change of them).
func endDirTrust(dir *inode, t *dirTrust, now time.Time) {
	if t.held.Swap(false) && t.childAttrs {
		for {
			old := dir.childRecalledAt.Load()
			if old >= now.UnixNano() || dir.childRecalledAt.CompareAndSwap(old, now.UnixNano()) {
				break
			}
		}
	}
}

// dirTrustedLocked reports whether n's own directory delegation vouches
// for its cached attributes.
//
// LOCKS_REQUIRED(n.mu)
func (n *inode) dirTrustedLocked() bool {
	t := n.dtrust.Load()
	return t != nil && t.held.Load() && !n.attrTime.Before(t.since)
}

// absentTrustedLocked reports whether n's directory delegation vouches
// for d, a name n's cache holds absent: confirmed absent (by its LOOKUP,
// or by a version of n's attributes or listing) no earlier than the
// GET_DIR_DELEGATION was sent, and the delegation still held. A name
// confirmed before might have been made in between.
//
// LOCKS_REQUIRED(n.mu)
func (n *inode) absentTrustedLocked(d *dentry) bool {
	t := n.dtrust.Load()
	return t != nil && t.held.Load() && !d.validated.Before(t.since)
}

// childTrustedLocked reports whether the delegation of the directory n
// was reached from vouches for n's cached attributes.
//
// LOCKS_REQUIRED(n.mu)
func (n *inode) childTrustedLocked() bool {
	if n.pdir == nil {
		return false
	}
	t := n.pdir.dtrust.Load()
	return t != nil && t.childAttrs && t.held.Load() && !n.attrTime.Before(t.since) &&
		n.attr.Type != proto.TypeDir && n.attr.Nlink == 1
}

// childRecalledLocked reports whether n's attributes were cached before
// the last recall of a delegation of its directory that covered them:
// the recall may be for a change of them, so they are not good even
// within their own lifetime.
//
// LOCKS_REQUIRED(n.mu)
func (n *inode) childRecalledLocked() bool {
	if n.pdir == nil {
		return false
	}
	at := n.pdir.childRecalledAt.Load()
	return at != 0 && n.attrTime.UnixNano() <= at
}

// setParentLocked records that n was reached by name from dir.
//
// LOCKS_REQUIRED(n.mu)
func (n *inode) setParentLocked(dir *inode) {
	n.parent = dir.id
	if n != dir {
		n.pdir = dir
	}
}

// wantDirDeleg reports whether a listing of dir from its start is to ask
// for a delegation of it: the server may grant them and none is held.
func (fs *FS) wantDirDeleg(dir *inode) bool {
	if fs.delegator == nil || !fs.cachingNames() || dir.attrTimeo <= 0 {
		return false
	}
	fs.dl.mu.Lock()
	defer fs.dl.mu.Unlock()
	h := fs.dl.held[string(dir.fh)]
	return !fs.dl.closed && (h == nil || h.returning) && fs.delegator.LeaseValid()
}

// getattrCall sends n's GETATTR, sent at 'at'. A directory whose
// delegation is wanted asks for it in the same COMPOUND, where the server
// can (proto.DirAttrDelegator): a directory stat'ed but never listed (the
// directories of a path, .git's, the mount's root) then costs no GETATTR
// at its next use either, nor do the names absent from it.
func (fs *FS) getattrCall(ctx context.Context, c *Cred, n *inode, at time.Time) (proto.AttrRes, error) {
	if !fs.getattrAsksDirDeleg(n) {
		return fs.srv.GetAttr(ctx, c, n.fh)
	}
	res, d, err := fs.srv.(proto.DirAttrDelegator).GetAttrDirDeleg(ctx, c, n.fh)
	if err == nil && d.Granted {
		fs.keepDirDeleg(n, c, d, at)
	}
	return res, err
}

// getattrAsksDirDeleg reports whether n's GETATTR is to ask for n's
// delegation: a directory, whose delegation is wanted, of a server that
// answers for them and takes the request with a GETATTR.
func (fs *FS) getattrAsksDirDeleg(n *inode) bool {
	if _, ok := fs.srv.(proto.DirAttrDelegator); !ok || !fs.dirDelegsKnown() {
		return false
	}
	n.mu.Lock()
	dir := n.attr.Type == proto.TypeDir
	n.mu.Unlock()
	return dir && fs.wantDirDeleg(n)
}

// dirDelegsKnown reports whether the server has answered a request for a
// directory delegation (proto.DirDelegator): only then is a listing read
// for the sake of one.
func (fs *FS) dirDelegsKnown() bool {
	dd, ok := fs.srv.(proto.DirDelegator)
	return ok && dd.DirDelegations()
}

// retryDirDelegLocked reports whether a listing of dir, whose
// attributes are fresh but whose delegation is not held (recalled, say),
// is to be read from the server again to ask for one: if its pass is one
// call, at most once per attribute lifetime (a server that keeps saying
// no costs no more than the lifetime's GETATTR would), or at once after a
// recall that made its entries' attributes to be fetched again (the pass
// brings them all).
//
// LOCKS_REQUIRED(dir.mu)
func (fs *FS) retryDirDelegLocked(dir *inode) bool {
	now := fs.now()
	recalled := dir.childRecalledAt.Load() > dir.delegTry.UnixNano() // its entries' attributes are to be fetched anyway
	if dir.list == nil || fs.passCallsLocked(dir) > 1 || now.Sub(dir.delegTry) < dir.attrTimeo && !recalled {
		return false
	}
	dir.delegTry = now
	return true
}

// keepDirDeleg keeps the directory delegation a listing of dir sent at
// 'at' brought (returned at once if recalled already, or unmounting).
func (fs *FS) keepDirDeleg(dir *inode, c *Cred, d proto.DirDelegation, at time.Time) {
	t := &dirTrust{since: at, childAttrs: d.ChildAttrs, entries: d.Entries && d.DirAttrs}
	t.held.Store(true)
	h := &heldDeleg{n: dir, fh: dir.fh, st: d.State, used: fs.now(), dir: t,
		cred: Cred{UID: c.UID, GID: c.GID, Groups: append([]uint32(nil), c.Groups...)}}
	fs.dl.mu.Lock()
	_, recalled := fs.dl.early[d.State.Other]
	delete(fs.dl.early, d.State.Other)
	if old := fs.dl.held[string(dir.fh)]; recalled || fs.dl.closed || old != nil && !old.returning {
		t.held.Store(false)
		h.returning = true
		fs.dl.mu.Unlock()
		fs.returnDelegAsync(h)
		return
	}
	var evict *heldDeleg
	if fs.dl.ndir >= maxDirDelegs {
		evict = fs.oldestDirDelegLocked()
	}
	// An old one still returning is forgotten here: its return no longer
	// removes h (returnDeleg checks identity).
	fs.dl.held[string(dir.fh)] = h
	fs.dl.ndir++
	h.counted = true
	dir.dtrust.Store(t)
	if !fs.dl.sweeper {
		fs.dl.sweeper = true
		fs.dl.wg.Add(1)
		go fs.sweepDelegs()
	}
	fs.dl.mu.Unlock()
	if evict != nil {
		fs.returnDelegAsync(evict)
	}
}

// oldestDirDelegLocked marks the directory delegation unused longest
// returning and returns it.
//
// LOCKS_REQUIRED(fs.dl.mu)
func (fs *FS) oldestDirDelegLocked() *heldDeleg {
	var old *heldDeleg
	for _, h := range fs.dl.held {
		if h.dir != nil && !h.returning && (old == nil || h.used.Before(old.used)) {
			old = h
		}
	}
	if old != nil {
		old.returning = true
	}
	return old
}

// touchDirDeleg notes a use of dir's delegation (for the idle return).
func (fs *FS) touchDirDeleg(dir *inode) {
	if fs.delegator == nil || dir.dtrust.Load() == nil {
		return
	}
	fs.dl.mu.Lock()
	if h := fs.dl.held[string(dir.fh)]; h != nil && h.dir != nil {
		h.used = fs.now()
	}
	fs.dl.mu.Unlock()
}

// undelegateDir ends what a directory delegation vouched for: the
// directory's attributes expire (names and listing are revalidated with
// them), and so do its entries' that it alone kept valid.
func (fs *FS) undelegateDir(h *heldDeleg) {
	endDirTrust(h.n, h.dir, fs.now()) // whatever ended it: what it alone kept is fetched again
	fs.expireAttr(h.n)
	if h.dir.notified.Load() {
		fs.forgetNotified(h.n)
	}
	// The kernel's copy of the listing, and the names it holds absent
	// (another's create may be what recalled it). Names it holds present
	// stay: their nodes' attributes are forgotten (forgetChildrenNow), so
	// the next use of a removed one asks and finds it gone; forgetting
	// them all would cost a lookup each, at the server for names the core
	// knows only from the listing.
	fs.notify.InvalidateData(h.n.id)
	var absent []string
	h.n.mu.Lock()
	for name, d := range h.n.names {
		if d.node == 0 {
			absent = append(absent, name)
		}
	}
	h.n.mu.Unlock()
	for _, name := range absent {
		fs.notify.InvalidateEntry(h.n.id, name)
	}
}

// forgetChildrenNow makes the kernel forget the attributes of dir's
// entries before h, dir's delegation, goes back: another client's change
// of one waits for the return, and the kernel was let keep them past
// their lifetime. From the return's goroutine only.
func (fs *FS) forgetChildrenNow(h *heldDeleg) {
	fs.dl.mu.Lock()
	closed := fs.dl.closed
	fs.dl.mu.Unlock()
	if !h.dir.childAttrs || closed {
		return // unmounting: the kernel's caches go with the mount
	}
	var ids []NodeID
	h.n.mu.Lock()
	for _, d := range h.n.names {
		if d.node != 0 {
			ids = append(ids, d.node)
		}
	}
	h.n.mu.Unlock()
	// Bounded: a kernel that does not take the notifications (going
	// away) must not hold the return, which the server waits for.
	done := make(chan struct{})
	go func() {
		defer close(done)
		fs.notify.InvalidateAttrsNow(ids)
	}()
	t := time.NewTimer(forgetWait)
	defer t.Stop()
	select {
	case <-done:
	case <-t.C:
		fs.logf("hushfs: the kernel took no attribute invalidation within %v; returning a directory delegation anyway", forgetWait)
	}
}

// forgetWait bounds the wait for the kernel's attribute invalidations.
const forgetWait = 2 * time.Second

// expireAttr makes n's cached attributes expired: replies to calls sent
// before they arrived stay refused, later ones count.
func (fs *FS) expireAttr(n *inode) {
	n.mu.Lock()
	n.attrValid = false
	if n.attrTime.After(n.attrStale) {
		n.attrStale = n.attrTime
	}
	n.mu.Unlock()
}

// Notify takes a CB_NOTIFY of the delegated directory dirFH
// (proto.DirNotifier): entries added and removed are applied to the
// names and listing held (dirnotify.go) when the server sends the
// directory's attributes with them; what else each change names is
// dropped, to be fetched again at its next use. The delegation stays.
func (d delegCallbacks) Notify(dirFH proto.FH, st proto.StateID, changes []proto.DirChange) bool {
	fs := d.fs
	fs.dl.mu.Lock()
	h := fs.dl.held[string(dirFH)]
	fs.dl.mu.Unlock()
	if h == nil || h.dir == nil || h.st.Other != st.Other {
		return false
	}
	dir := h.n
	var entries []proto.DirChange
	for _, ch := range changes {
		if ch.Kind != proto.ChildAttrsChanged {
			entries = append(entries, ch)
			continue
		}
		if h.dir.entries && fs.notifiedAttrs(dir, &ch) {
			continue
		}
		// The listing's copy of its attributes too: it would make a
		// node for the kernel with them.
		dir.mu.Lock()
		if dir.list != nil {
			if e := dir.list.entries[ch.Name]; e != nil {
				e.plus = nil
			}
		}
		dir.mu.Unlock()
		if n := fs.knownChild(dir, ch.Name); n != nil {
			fs.invalidateAttr(n)
			fs.notify.InvalidateData(n.id)
		}
	}
	if len(entries) == 0 || h.dir.entries && fs.applyNotified(dir, h.dir, entries) {
		return true
	}
	fs.invalidateAttr(dir)
	fs.notify.InvalidateData(dir.id)
	for _, ch := range entries {
		if ch.Name != "" {
			fs.notify.InvalidateEntry(dir.id, ch.Name)
		}
		if ch.Kind == proto.EntryRenamed {
			fs.notify.InvalidateEntry(dir.id, ch.NewName)
		}
	}
	return true
}
