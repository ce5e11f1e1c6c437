package client

import (
	"time"

	"hushfs/internal/proto"
)

// Entries added and removed in a delegated directory by others, told by
// the server (CB_NOTIFY, RFC 8881 §20.4) instead of a recall when the
// delegation was granted with those notifications and the directory's
// attributes (proto.DirDelegation.Entries, DirAttrs). Each notification
// gives the state of the names it lists (an added name with its
// attributes and handle) and then the directory's attributes, read by
// the server before those names: the names held and the complete listing
// take the changes and move to the version those attributes show, so an
// ls after another client's create lists the held listing with the new
// name, with no call.
//
// The version is the one the server read first, so it may already show
// a change whose notification is still to come: the names are then
// right only once that one comes too. The delegation vouches for it;
// nothing else does. So when the delegation ends (recall, revocation,
// return) the names and listing that a notification moved on are
// forgotten (forgetNotified) rather than kept for as long as the
// directory's attributes show that version.
//
// A notification that cannot be placed after what the caches hold (its
// directory's change attribute older than the cached one: our own
// change's reply came first) is taken as the old notifications were:
// the directory's attributes and the names it lists are dropped, to be
// fetched again.

// applyNotified applies the notified entry changes of dir, whose
// delegation t holds, and reports whether it could.
func (fs *FS) applyNotified(dir *inode, t *dirTrust, changes []proto.DirChange) bool {
	var after *proto.Attr
	for i := range changes {
		if ch := &changes[i]; ch.Kind == proto.DirAttrsChanged && ch.Attr.Present && ch.Attr.Attr.Type == proto.TypeDir {
			after = &ch.Attr.Attr
		}
	}
	if after == nil {
		return false
	}
	now := fs.now()
	drops := fs.nodes.dropCount()
	var gone []string // names whose nodes' attributes (link counts) changed
	dir.mu.Lock()
	if !dir.namesValidLocked() || after.HasChange && dir.attr.HasChange && after.Change < dir.attr.Change {
		dir.mu.Unlock()
		return false
	}
	t.notified.Store(true)
	ver := versionOf(after)
	for i := range changes {
		ch := &changes[i]
		switch ch.Kind {
		case proto.EntryRemoved:
			gone = append(gone, ch.Name)
			fs.notifiedRemoveLocked(dir, ch.Name, now)
		case proto.EntryAdded:
			gone = append(gone, ch.Name)
			fs.notifiedAddLocked(dir, ch, ver, drops)
		case proto.EntryRenamed:
			gone = append(gone, ch.Name, ch.NewName)
			fs.notifiedRemoveLocked(dir, ch.Name, now)
			fs.notifiedAddLocked(dir, &proto.DirChange{Name: ch.NewName, Attr: ch.Attr, FH: ch.FH}, ver, drops)
		}
	}
	// The version the names now describe, and the directory's
	// attributes, as for our own change (applyWcc).
	if dir.dataValid {
		dir.dataMtime, dir.dataSize = after.Mtime, after.Size
	}
	dir.nameVer = ver
	dir.attr.Size, dir.attr.Mtime, dir.attr.Ctime = after.Size, after.Mtime, after.Ctime
	fs.setAttrLocked(dir, after, now)
	// The kernel's copy of the contents, and of the names changed.
	fs.listingChangedLocked(dir)
	dir.mu.Unlock()
	for _, name := range gone {
		fs.notify.InvalidateEntry(dir.id, name)
		if n := fs.knownChild(dir, name); n != nil {
			fs.invalidateAttr(n)
		}
	}
	return true
}

// notifiedRemoveLocked applies a name removed from dir.
//
// LOCKS_REQUIRED(dir.mu)
func (fs *FS) notifiedRemoveLocked(dir *inode, name string, now time.Time) {
	if d := dir.names[name]; d != nil && d.node != 0 {
		// Its node's attributes changed (a link fewer): knownChild
		// finds it no more once the name is gone.
		if n := fs.nodes.get(d.node); n != nil {
			fs.invalidateAttr(n)
		}
	}
	fs.setNameLocked(dir, name, 0, now, false)
	if dir.list != nil {
		delete(dir.list.entries, name)
	}
}

// notifiedAddLocked applies a name added to dir (or replaced): the name
// cache forgets it (the next lookup asks, or a listing served from the
// held one makes its node from the handle and attributes sent), and the
// complete listing gets it with them, at its end; without a handle and
// attributes the listing cannot have it and is dropped.
//
// LOCKS_REQUIRED(dir.mu)
func (fs *FS) notifiedAddLocked(dir *inode, ch *proto.DirChange, ver dirVersion, drops uint64) {
	if d := dir.names[ch.Name]; d != nil && d.node != 0 {
		if n := fs.nodes.get(d.node); n != nil {
			fs.invalidateAttr(n) // replaced: its link count changed
		}
	}
	delete(dir.names, ch.Name)
	l := dir.list
	if l == nil {
		return
	}
	if !ch.Attr.Present || ch.FH == nil {
		dir.list = nil
		return
	}
	e := &listEntry{seq: l.nextSeq, cookie: l.end}
	if old := l.entries[ch.Name]; old != nil {
		e.seq, e.cookie = old.seq, old.cookie
	} else {
		l.nextSeq++
	}
	a := ch.Attr.Attr
	v := ver
	e.fileid, e.mode = a.Fileid, typeBits[a.Type]
	e.plus = &plusData{fh: ch.FH, attr: a, at: fs.now(), dirVer: &v, drops: drops, notified: true}
	l.entries[ch.Name] = e
}

// forgetNotified drops what notifications moved dir's names and listing
// to, once the delegation that vouched for them is gone: the listing and
// absent names, and the version they describe (the next attributes
// fetched start a new one).
func (fs *FS) forgetNotified(dir *inode) {
	dir.mu.Lock()
	fs.dropAbsentLocked(dir)
	dir.nameVerOK = false
	dir.mu.Unlock()
}

// notifiedAttrs applies an entry's new attributes, notified with its
// handle, to its node and to the listing held, and reports whether it
// could (the name is known by that handle, or only listed).
func (fs *FS) notifiedAttrs(dir *inode, ch *proto.DirChange) bool {
	if !ch.Attr.Present || ch.FH == nil {
		return false
	}
	now := fs.now()
	drops := fs.nodes.dropCount()
	var n *inode
	dir.mu.Lock()
	if d := dir.names[ch.Name]; d != nil && d.node != 0 {
		if n = fs.nodes.get(d.node); n == nil || string(n.fh) != string(ch.FH) {
			dir.mu.Unlock()
			return false
		}
	}
	if dir.list != nil && dir.namesValidLocked() {
		if e := dir.list.entries[ch.Name]; e != nil {
			v := dir.nameVer
			e.fileid, e.mode = ch.Attr.Attr.Fileid, typeBits[ch.Attr.Attr.Type]
			e.plus = &plusData{fh: ch.FH, attr: ch.Attr.Attr, at: now, dirVer: &v, drops: drops, notified: true}
		}
	}
	dir.mu.Unlock()
	if n != nil {
		fs.applyAttr(n, &ch.Attr, now)
		fs.notify.InvalidateData(n.id) // the kernel's attributes (and pages) of it
	}
	return true
}
