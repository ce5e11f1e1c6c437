package client

import (
	"context"
	"fmt"
	"syscall"
	"time"

	"hushfs/internal/proto"
)

// Removing and renaming names: REMOVE, RMDIR and RENAME, with the hiding
// of files still open here (silly rename) and what a server's "not empty"
// says of our caches.

// Unlink removes a name. A file still open here is renamed to a hidden
// name instead and removed at its last close, so its open descriptors keep
// working, as kernel NFS clients do.
func (fs *FS) Unlink(ctx context.Context, c *Cred, parent NodeID, name string) error {
	if err := fs.checkName(name); err != nil {
		return err
	}
	dir, err := fs.node(parent)
	if err != nil {
		return err
	}
	if child := fs.childForUnlink(ctx, c, dir, name); child != nil && fs.openHere(ctx, child) {
		return fs.sillyRename(ctx, c, dir, name, child)
	}
	return fs.remove(ctx, c, dir, name, false)
}

// releaseWait is how long an unlink waits for the RELEASE of a file whose
// descriptors were all closed (FLUSH seen): the kernel sends RELEASE in
// the background after close(2) returns, so `cat f; rm f` races it, and
// losing costs a silly rename and its REMOVE (2 calls) for nothing.
const releaseWait = 50 * time.Millisecond

// openHere reports whether n is open here, for a removal that would hide
// it (silly rename). Open files whose every descriptor was closed, or
// whose release is under way, are given releaseWait to finish: a
// descriptor still in use (a dup, a fork's) keeps it open after that.
func (fs *FS) openHere(ctx context.Context, n *inode) bool {
	if fs.nodes.openCount(n) == 0 {
		return false
	}
	fs.openMu.Lock()
	closing := true
	for _, of := range fs.files {
		if of.node == n && !of.flushed.Load() {
			closing = false
			break
		}
	}
	fs.openMu.Unlock()
	if !closing {
		return true
	}
	t := time.NewTimer(releaseWait)
	defer t.Stop()
	tick := time.NewTicker(time.Millisecond)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return fs.nodes.openCount(n) > 0
		case <-t.C:
			return fs.nodes.openCount(n) > 0
		case <-tick.C:
			if fs.nodes.openCount(n) == 0 {
				return false
			}
		}
	}
}

// Rmdir removes an empty directory.
func (fs *FS) Rmdir(ctx context.Context, c *Cred, parent NodeID, name string) error {
	if err := fs.checkName(name); err != nil {
		return err
	}
	dir, err := fs.node(parent)
	if err != nil {
		return err
	}
	return fs.remove(ctx, c, dir, name, true)
}

// remove sends REMOVE, or RMDIR with rmdir.
func (fs *FS) remove(ctx context.Context, c *Cred, dir *inode, name string, rmdir bool) error {
	op := fs.srv.Remove
	if rmdir {
		op = fs.srv.Rmdir
	}
	// A name changes: held times go first (dirtimes.go).
	if err := fs.sendDirTimes(ctx, dir); err != nil {
		return err
	}
	var res proto.RemoveRes
	var err error
	at := fs.now()
	if h := fs.delegForRemove(ctx, c, dir, name, rmdir); h != nil {
		var returned bool
		res, returned, err = fs.srv.(proto.RemoveReturner).RemoveReturning(ctx, c, dir.fh, name, h.fh, h.st)
		if returned {
			fs.finishReturn(ctx, h, true)
		} else {
			fs.dl.wg.Add(1)
			go func() { // as any return: not the caller's to wait for, nor to interrupt
				defer fs.dl.wg.Done()
				rctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
				defer cancel()
				fs.finishReturn(rctx, h, false)
			}()
		}
	} else {
		res, err = op(ctx, c, dir.fh, name)
	}
	if err != nil {
		return err
	}
	fs.applyDirOpWcc(dir, &res.DirWcc, at, res.Status, name, syscall.ENOENT)
	if res.Status != nil {
		fs.noteStale(dir, res.Status)
		if rmdir && notEmpty(res.Status) {
			fs.distrustEmpty(ctx, c, dir, name)
		}
		return res.Status
	}
	if child := fs.knownChild(dir, name); child != nil {
		fs.invalidateAttr(child) // nlink and ctime changed
	}
	fs.changeName(dir, name, nil, at)
	return nil
}

// delegForRemove returns the delegation of the file name in dir, readied
// for its return (readyReturn) in the COMPOUND that removes the name
// (proto.RemoveReturner), if that is where it is to go: the file's last
// name, nothing open here, the delegation c's own. The server would
// recall it at the REMOVE anyway (git status's index.lock: CREATE,
// REMOVE and a DELEGRETURN after), and the return is then no call of its
// own. Its data is written first, as at any return (nothing, for a
// file closed since it was written).
func (fs *FS) delegForRemove(ctx context.Context, c *Cred, dir *inode, name string, rmdir bool) *heldDeleg {
	if _, ok := fs.srv.(proto.RemoveReturner); rmdir || !ok || fs.delegator == nil {
		return nil
	}
	n := fs.knownChild(dir, name)
	if n == nil || fs.nodes.openCount(n) > 0 {
		return nil
	}
	n.mu.Lock()
	last := n.attr.Type != proto.TypeDir && n.attr.Nlink == 1
	n.mu.Unlock()
	if !last {
		return nil // it stays, under other names: so does its delegation
	}
	fs.dl.mu.Lock()
	h := fs.dl.held[string(n.fh)]
	if h == nil || h.returning || h.dir != nil || h.cred.UID != c.UID || h.cred.GID != c.GID {
		fs.dl.mu.Unlock()
		return nil
	}
	h.returning = true // no open uses it from now on; a recall finds it going
	fs.dl.mu.Unlock()
	// Not interrupted: its data must reach the server before the return,
	// whether or not the removal is made.
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
	defer cancel()
	fs.readyReturn(rctx, h)
	return h
}

// notEmpty reports whether st is the server's "directory not empty"
// (RFC 1813 allows NFS3ERR_EXIST for it too).
func notEmpty(st error) bool {
	e := proto.ErrnoOf(st)
	return e == syscall.ENOTEMPTY || e == syscall.EEXIST
}

// distrustEmpty handles the server's word that directory name in dir is
// not empty: what our caches say of its contents may be a listing from
// before another client added to it, kept fresh by our own removals (each
// REMOVE's wcc data vouches only for the change it made). Unless the
// caches stop answering for it, rm -rf would list nothing, try rmdir again,
// and loop until the attributes expire.
func (fs *FS) distrustEmpty(ctx context.Context, c *Cred, dir *inode, name string) {
	child := fs.knownChild(dir, name)
	if child == nil {
		// Not in the name cache: the node may still be known (the kernel
		// holds it) with a listing of its own.
		res, err := fs.srv.Lookup(ctx, c, dir.fh, name)
		if err != nil || res.Status != nil {
			return
		}
		if child = fs.nodes.lookupFH(res.FH); child == nil {
			return // never seen: nothing cached to distrust
		}
	}
	child.mu.Lock()
	fs.dropAbsentLocked(child)
	child.attrValid = false // the next listing starts with a GETATTR
	child.mu.Unlock()
}

// sillyRename hides an open file under a unique name in the same directory.
func (fs *FS) sillyRename(ctx context.Context, c *Cred, dir *inode, name string, child *inode) error {
	fs.sillyMu.Lock()
	fs.sillySeq++
	seq := fs.sillySeq
	fs.sillyMu.Unlock()
	child.mu.Lock()
	fileid := child.attr.Fileid
	child.mu.Unlock()
	hidden := fmt.Sprintf(".nfs%016x%08x", fileid, seq)
	if err := fs.rename(ctx, c, dir, name, dir, hidden); err != nil {
		return err
	}
	child.mu.Lock()
	child.sillyDir, child.sillyName = dir.id, hidden
	child.mu.Unlock()
	if fs.nodes.openCount(child) > 0 {
		return nil
	}
	// The last close came while the file was being hidden (the kernel
	// sends RELEASE after close returns, so a file closed just before
	// its unlink is often still open here): it found no hidden name to
	// remove, so remove it now, unless a close took it meanwhile.
	child.mu.Lock()
	hidden = child.sillyName
	child.sillyDir, child.sillyName = 0, ""
	child.mu.Unlock()
	if hidden == "" {
		return nil
	}
	return fs.remove(ctx, c, dir, hidden, false)
}

// Rename renames oldName in oldParent to newName in newParent, replacing
// what newName named. A replaced file that is open here is first hidden,
// so its open descriptors keep working.
func (fs *FS) Rename(ctx context.Context, c *Cred, oldParent NodeID, oldName string, newParent NodeID, newName string) error {
	if err := fs.checkName(oldName); err != nil {
		return err
	}
	if err := fs.checkName(newName); err != nil {
		return err
	}
	from, err := fs.node(oldParent)
	if err != nil {
		return err
	}
	to, err := fs.node(newParent)
	if err != nil {
		return err
	}
	if victim := fs.childForUnlink(ctx, c, to, newName); victim != nil && fs.openHere(ctx, victim) {
		if moved := fs.knownChild(from, oldName); moved != victim {
			if err := fs.sillyRename(ctx, c, to, newName, victim); err != nil {
				return err
			}
		}
	}
	return fs.rename(ctx, c, from, oldName, to, newName)
}

func (fs *FS) rename(ctx context.Context, c *Cred, from *inode, oldName string, to *inode, newName string) error {
	// A name changes: held times go first (dirtimes.go).
	if err := fs.sendDirTimes(ctx, from, to); err != nil {
		return err
	}
	at := fs.now()
	res, err := fs.srv.Rename(ctx, c, from.fh, oldName, to.fh, newName)
	if err != nil {
		return err
	}
	fs.applyDirOpWcc(from, &res.FromDirWcc, at, res.Status, oldName, syscall.ENOENT)
	if to != from {
		fs.applyDirOpWcc(to, &res.ToDirWcc, at, res.Status, "", 0)
	}
	if res.Status != nil {
		if from == to {
			fs.noteStale(from, res.Status) // with two directories, which one is unknown
		}
		return res.Status
	}
	moved := fs.knownChild(from, oldName)
	if victim := fs.knownChild(to, newName); victim != nil && victim != moved {
		fs.invalidateAttr(victim)
	}
	fs.changeName(from, oldName, nil, at)
	if moved != nil {
		fs.invalidateAttr(moved) // ctime changed
		moved.mu.Lock()
		moved.setParentLocked(to)
		if moved.attr.Type == proto.TypeDir {
			moved.name = newName
		}
		moved.mu.Unlock()
		fs.changeName(to, newName, moved, at)
	} else {
		to.mu.Lock()
		delete(to.names, newName)
		to.list = nil // a name we cannot describe arrived
		to.mu.Unlock()
	}
	return nil
}
