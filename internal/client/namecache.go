package client

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"syscall"
	"time"

	"hushfs/internal/proto"
)

// The name cache keeps, per directory, what each looked-up name was:
// a node (positive entry) or nothing (negative entry). Entries describe one
// version of the directory (its mtime and ctime). Our own CREATE, REMOVE,
// RENAME, ... update the entries they touch and move the version forward
// (the wcc check), so working in a directory does not throw its names away.
//
// When the directory's attributes show a version our own operations do not
// explain, some name changed, not every name: negative entries are dropped
// (the name may exist now) and the kernel told, while positive entries stay
// trusted until the directory's attribute lifetime has passed since each
// was last confirmed (by LOOKUP, READDIRPLUS or our own change) — so a
// directory that changes all the time (a churn of temporary files) does not
// turn every stat of its other entries into a LOOKUP. A positive entry
// that turns out stale (the handle is gone) is dropped and looked up again.
//
// Negative entries also expire negtimeo after they were last confirmed,
// after which the directory's attributes are fetched again (one GETATTR
// confirms every negative entry of the directory) before they are trusted.

// dirVersion identifies one state of a directory's contents.
type dirVersion struct{ mtime, ctime proto.Time }

func versionOf(a *proto.Attr) dirVersion { return dirVersion{a.Mtime, a.Ctime} }

// dentry is what we know of one name in a directory.
type dentry struct {
	node      NodeID    // 0: the name does not exist
	validated time.Time // when last known true (negative entries expire from here)
	kernel    bool      // the kernel was given this binding and must hear if it goes
}

// namesValidLocked reports whether dir's entries describe its current
// version.
//
// LOCKS_REQUIRED(dir.mu)
func (dir *inode) namesValidLocked() bool {
	return dir.attrValid && dir.nameVerOK && dir.nameVer == versionOf(&dir.attr)
}

// noteVersionLocked moves a directory to the version its new attributes
// show, dropping its entries if that is not the version they were valid
// for.
//
// LOCKS_REQUIRED(dir.mu)
func (fs *FS) noteVersionLocked(dir *inode, a *proto.Attr) {
	v := versionOf(a)
	if dir.nameVerOK && dir.nameVer == v {
		return
	}
	fs.dropAbsentLocked(dir)
	if dir.nameVerOK {
		dir.changedAt = dir.attrTime
	}
	dir.nameVer, dir.nameVerOK = v, true
}

// dropAbsentLocked forgets everything dir's caches say is absent — its
// negative entries and its complete listing — telling the kernel, for when
// the server shows something there our caches do not know of. Positive
// entries stay: each was confirmed, and a stale one heals by a new LOOKUP.
//
// LOCKS_REQUIRED(dir.mu)
func (fs *FS) dropAbsentLocked(dir *inode) {
	for name, d := range dir.names {
		if d.node != 0 {
			continue
		}
		if d.kernel {
			fs.notify.InvalidateEntry(dir.id, name)
		}
		delete(dir.names, name)
	}
	dir.namesGen++ // a listing being gathered now is not complete either
	if dir.list != nil || dir.nameVerOK {
		fs.listingChangedLocked(dir) // not a first sight: the kernel may hold the contents
	}
	dir.list = nil
}

// setNameLocked records that name in dir is node (0: absent), as of at,
// if dir's entries are current. kernel says the binding is being handed to
// the kernel now.
//
// LOCKS_REQUIRED(dir.mu)
func (fs *FS) setNameLocked(dir *inode, name string, node NodeID, at time.Time, kernel bool) {
	if node == 0 && fs.opts.LookupCache != LookupCacheAll || !dir.namesValidLocked() {
		delete(dir.names, name)
		return
	}
	if dir.names == nil {
		dir.names = map[string]*dentry{}
	}
	dir.names[name] = &dentry{node: node, validated: at, kernel: kernel}
}

// setName is setNameLocked taking the lock.
func (fs *FS) setName(dir *inode, name string, node NodeID, at time.Time, kernel bool) {
	dir.mu.Lock()
	fs.setNameLocked(dir, name, node, at, kernel)
	dir.mu.Unlock()
}

// applyDirOpWcc applies the wcc data of a directory operation on name
// that ended with status. A successful operation explains a change from
// the version we had (applyWcc). A failed one changed nothing, so a change
// its wcc data shows is someone else's: as when a retransmitted call meets
// its own first transmission still at work in the server, which then
// answers EEXIST with the directory changed between before and after.
//
// A failure whose errno is contradiction (EEXIST for a create, ENOENT for
// a remove) also says that name is not what the caches may hold. The
// directory's version does not always show the change that made it so
// (timestamps are not always fine enough), so the name is dropped outright
// and the next lookup asks the server.
func (fs *FS) applyDirOpWcc(dir *inode, w *proto.Wcc, at time.Time, status error, name string, contradiction syscall.Errno) {
	if status == nil {
		fs.applyWcc(dir, w, at, false)
		return
	}
	if w.Before.Present && w.After.Present {
		b, a := &w.Before.Attr, &w.After.Attr
		if b.HasChange && b.Change != a.Change || !b.HasChange && (b.Size != a.Size || b.Mtime != a.Mtime || b.Ctime != a.Ctime) {
			foreign := *w
			foreign.Before.Present = false // not ours, whatever it matches
			w = &foreign
		}
	}
	fs.applyWcc(dir, w, at, false)
	if contradiction == 0 || proto.ErrnoOf(status) != contradiction {
		return
	}
	dir.mu.Lock()
	_, known := dir.names[name]
	delete(dir.names, name)
	if dir.list != nil {
		_, listed := dir.list.entries[name]
		if listed == (contradiction == syscall.ENOENT) {
			dir.list = nil
			fs.listingChangedLocked(dir)
		}
	}
	dir.mu.Unlock()
	if known {
		fs.notify.InvalidateEntry(dir.id, name)
	}
}

// knownChild returns the node name in dir was last seen to be, even if the
// entry is no longer current, or nil.
func (fs *FS) knownChild(dir *inode, name string) *inode {
	dir.mu.Lock()
	d := dir.names[name]
	dir.mu.Unlock()
	if d == nil || d.node == 0 {
		return nil
	}
	return fs.nodes.get(d.node)
}

// cachingNames reports whether lookups may be answered from the cache.
func (fs *FS) cachingNames() bool {
	return fs.opts.LookupCache != LookupCacheNone && !fs.opts.NoAC
}

// Lookup resolves name in directory parent, from the name cache when it
// can. A name that does not exist returns ENOENT and, with negative
// caching, an Entry with Node 0 and how long the kernel may remember that.
func (fs *FS) Lookup(ctx context.Context, c *Cred, parent NodeID, name string) (Entry, error) {
	if err := fs.checkName(name); err != nil {
		return Entry{}, err
	}
	dir, err := fs.node(parent)
	if err != nil {
		return Entry{}, err
	}
	switch name {
	case ".":
		return fs.refEntry(ctx, c, dir, dir)
	case "..":
		// A directory we reached by name knows its parent: never a LOOKUP.
		dir.mu.Lock()
		p := dir.parent
		dir.mu.Unlock()
		if pn := fs.nodes.get(p); p != 0 && pn != nil {
			return fs.refEntry(ctx, c, pn, dir)
		}
	}
	if fs.cachingNames() {
		if e, err, hit := fs.cachedLookup(ctx, c, dir, name); hit {
			return e, err
		}
	}
	return fs.lookupRPC(ctx, c, dir, name)
}

// cachedLookup answers a lookup from the name cache; hit is false when the
// cache cannot answer.
func (fs *FS) cachedLookup(ctx context.Context, c *Cred, dir *inode, name string) (e Entry, err error, hit bool) {
	now := fs.now()
	dir.mu.Lock()
	_, _, fresh := dir.cachedAttrLocked(now)
	dir.mu.Unlock()
	walking := fs.visitDir(c, dir, false)
	if !fresh {
		// One call revalidates all its names: a GETATTR of the directory
		// or, when a walk is at it, its READDIRPLUS.
		if err := fs.reviveDir(ctx, c, dir, walking); err != nil {
			return Entry{}, err, true
		}
	}
	dir.mu.Lock()
	old := fs.tooOldLocked(dir, dir.names[name], now)
	dir.mu.Unlock()
	if old {
		// Many such names of one directory (a server whose replies do not
		// prove our changes ours, ganesha's) are confirmed by one
		// READDIRPLUS pass rather than a LOOKUP each (bulk.go).
		if r := fs.bulkDemand(ctx, c, dir, false); r != nil {
			select {
			case <-r.done:
			case <-ctx.Done():
				return Entry{}, ctx.Err(), true
			}
			now = fs.now()
		}
	}
	for fetched := false; ; fetched = true {
		dir.mu.Lock()
		d := dir.names[name]
		if fs.tooOldLocked(dir, d, now) {
			delete(dir.names, name)
			d = nil
		}
		if d == nil && fs.opts.LookupCache == LookupCacheAll && dir.listedAbsentLocked(name) {
			// Not in the complete listing: absent, as of the last time the
			// directory's version was confirmed.
			d = &dentry{validated: dir.attrTime}
			if dir.names == nil {
				dir.names = map[string]*dentry{}
			}
			dir.names[name] = d
		} else if d != nil && d.node == 0 && dir.attrTime.After(d.validated) &&
			fs.opts.LookupCache == LookupCacheAll && dir.listedAbsentLocked(name) {
			// Looked up before the listing was read: absent from it as well,
			// so confirmed as of then too (and covered by a delegation
			// granted with it: absentTrustedLocked).
			d.validated = dir.attrTime
		}
		if d == nil || !dir.namesValidLocked() {
			dir.mu.Unlock()
			return Entry{}, nil, false
		}
		if d.node != 0 {
			id := d.node
			d.kernel = true
			dir.mu.Unlock()
			return fs.cachedPositive(ctx, c, dir, name, id)
		}
		// A negative entry is trusted for negtimeo after it was last
		// confirmed: by its LOOKUP, or by directory attributes fetched since
		// that show the same version.
		if since := now.Sub(dir.attrTime); since < fs.opts.NegTimeo && dir.attrTime.After(d.validated) {
			d.validated = dir.attrTime
		}
		if age := now.Sub(d.validated); age < fs.opts.NegTimeo {
			d.kernel = true
			dir.mu.Unlock()
			return Entry{EntryTTL: fs.opts.NegTimeo - age}, syscall.ENOENT, true
		}
		if dir.absentTrustedLocked(d) {
			// Confirmed under the directory's delegation, still held:
			// nobody has made the name since (the server recalls first).
			d.kernel = true
			dir.mu.Unlock()
			return Entry{EntryTTL: fs.opts.NegTimeo}, syscall.ENOENT, true
		}
		dir.mu.Unlock()
		if fetched {
			return Entry{}, nil, false
		}
		// One GETATTR of the directory confirms all its negative entries.
		if _, _, err := fs.getattrRPC(ctx, c, dir); err != nil {
			return Entry{}, err, true
		}
		now = fs.now()
	}
}

// tooOldLocked reports whether d is a positive entry kept across a change
// of dir we did not make and not confirmed for the directory's attribute
// lifetime since: it is asked again.
//
// LOCKS_REQUIRED(dir.mu)
func (fs *FS) tooOldLocked(dir *inode, d *dentry, now time.Time) bool {
	return d != nil && d.node != 0 && d.validated.Before(dir.changedAt) && now.Sub(d.validated) >= max(dir.attrTimeo, fs.opts.AcDirMin)
}

// cachedPositive returns the entry for a cached positive name.
func (fs *FS) cachedPositive(ctx context.Context, c *Cred, dir *inode, name string, id NodeID) (Entry, error, bool) {
	n := fs.nodes.refID(id)
	if n == nil {
		dir.mu.Lock()
		delete(dir.names, name)
		dir.mu.Unlock()
		return Entry{}, nil, false
	}
	n.mu.Lock()
	a, ok := n.attr, n.attrValid
	n.mu.Unlock()
	if !ok {
		var err error
		if a, _, err = fs.getattrRPC(ctx, c, n); err != nil {
			fs.nodes.forget(n.id, 1)
			return Entry{}, err, true
		}
	}
	// Expired attributes go out with no lifetime: the kernel asks again
	// when it needs them, and the walk through the name costs nothing.
	return fs.entryFor(n, &a, dir), nil, true
}

// lookupResult is one LOOKUP's outcome, shared by concurrent callers.
type lookupResult struct {
	fh     proto.FH
	attr   proto.PostAttr
	at     time.Time
	dirVer *dirVersion // the directory's version in the reply, if the name cache describes it
}

// lookupRPC sends LOOKUP (one for all concurrent lookups of the name) and
// records the answer in the name cache.
func (fs *FS) lookupRPC(ctx context.Context, c *Cred, dir *inode, name string) (Entry, error) {
	key := "l" + strconv.FormatUint(uint64(dir.id), 10) + "/" + name
	if !fs.cachingNames() {
		key = "" // sharing would be a cache: with none, everyone asks
	}
	e, err, dead := fs.lookupShared(ctx, c, dir, name, key)
	if dead {
		// We joined a LOOKUP answered before the server called the handle
		// it found stale: ask again, alone.
		e, err, _ = fs.lookupShared(ctx, c, dir, name, "")
	}
	return e, err
}

// lookupShared is lookupRPC sharing the call by key (none if empty). dead
// says the answer's handle has been called stale since (never when key is
// empty: the call's own answer was checked after it came).
func (fs *FS) lookupShared(ctx context.Context, c *Cred, dir *inode, name, key string) (e Entry, err error, dead bool) {
	v, err := fs.flightOrCall(ctx, key, false, func() (any, error) {
		var res proto.LookupRes
		var at time.Time
		for asked := 0; ; asked++ {
			at = fs.now()
			var err error
			if res, err = fs.srv.Lookup(ctx, c, dir.fh, name); err != nil {
				return nil, err
			}
			// A handle the server has called stale since: this answer was
			// made before the file went (another client removed it while
			// the call was on its way). Ask once more; the new answer is
			// believed whatever it says.
			if res.Status != nil || asked > 0 || !fs.nodes.staleFH(res.FH) {
				break
			}
		}
		fs.applyAttr(dir, &res.DirAttr, at)
		fs.noteStale(dir, res.Status)
		replyCurrent := func() bool { // the reply describes the directory as we now know it
			return res.DirAttr.Present && dir.namesValidLocked() && dir.nameVer == versionOf(&res.DirAttr.Attr)
		}
		if res.Status != nil {
			dir.mu.Lock()
			if proto.ErrnoOf(res.Status) == syscall.ENOENT && replyCurrent() {
				fs.setNameLocked(dir, name, 0, at, true)
			} else {
				delete(dir.names, name)
			}
			dir.mu.Unlock()
			return nil, res.Status
		}
		if !fs.usableFH(res.FH) {
			// An empty handle would be one node for every name so answered.
			fs.logf("hushfs: directory %s: LOOKUP of %q answered with an empty file handle", fs.describeDir(dir), name)
			return nil, fmt.Errorf("LOOKUP %q: the server answered an empty file handle: %w", name, proto.ErrIO)
		}
		r := &lookupResult{fh: append(proto.FH(nil), res.FH...), attr: res.Attr, at: at}
		dir.mu.Lock()
		if replyCurrent() {
			v := versionOf(&res.DirAttr.Attr)
			r.dirVer = &v // each caller records the name with the node it holds
		} else {
			delete(dir.names, name)
		}
		dir.mu.Unlock()
		return r, nil
	})
	if err != nil {
		if proto.ErrnoOf(err) == syscall.ENOENT && fs.opts.LookupCache == LookupCacheAll && !fs.opts.NoAC {
			return Entry{EntryTTL: fs.opts.NegTimeo}, err, false
		}
		return Entry{}, err, false
	}
	r := v.(*lookupResult)
	n := fs.nodes.refLive(r.fh)
	if n == nil {
		if key != "" {
			return Entry{}, nil, true
		}
		n = fs.nodes.ref(r.fh) // the server insists: a new file
	}
	fs.applyAttr(n, &r.attr, r.at)
	a, err := fs.attrOrFetch(ctx, c, n)
	if err != nil {
		fs.nodes.forget(n.id, 1)
		return Entry{}, err, false
	}
	n.mu.Lock()
	n.setParentLocked(dir)
	if a.Type == proto.TypeDir {
		n.name = name
	}
	n.mu.Unlock()
	// The name leads to the node the kernel now holds. (Recorded with a
	// node made only for the recording, it led to a node gone from the
	// table by then: the name's next lookup was a LOOKUP again.)
	dir.mu.Lock()
	if r.dirVer != nil && dir.namesValidLocked() && dir.nameVer == *r.dirVer {
		fs.setNameLocked(dir, name, n.id, r.at, true)
	}
	dir.mu.Unlock()
	return fs.entryFor(n, &a, dir), nil, false
}

// flightOrCall runs fn shared by key, or alone when key is empty. A caller
// that joined a call whose own caller was interrupted asks again itself.
// A fresh caller joins no call sent before it came (see flights.do).
func (fs *FS) flightOrCall(ctx context.Context, key string, fresh bool, fn func() (any, error)) (any, error) {
	if key == "" {
		return fn()
	}
	v, err := fs.inflight.do(key, fresh, fn)
	if err != nil && errors.Is(err, context.Canceled) && ctx.Err() == nil {
		return fn()
	}
	return v, err
}

// childForUnlink returns the node name in dir names, from the cache or,
// when files are open and the cache cannot say, from the server: an open
// file must be hidden rather than removed.
func (fs *FS) childForUnlink(ctx context.Context, c *Cred, dir *inode, name string) *inode {
	if n := fs.knownChild(dir, name); n != nil {
		return n
	}
	fs.openMu.Lock()
	anyOpen := len(fs.files) > 0
	fs.openMu.Unlock()
	if !anyOpen {
		return nil
	}
	res, err := fs.srv.Lookup(ctx, c, dir.fh, name)
	if err != nil || res.Status != nil {
		return nil
	}
	return fs.nodes.lookupFH(res.FH)
}
