package client

import "time"

// The kernel keeps a directory's contents in its page cache
// (FOPEN_CACHE_DIR): filled by a listing read in sequence from offset 0 to
// the end, and used for later listings while the directory's mtime and
// the kernel's change counter for it (bumped by every change made through
// the mount) are those it was filled at. Across opens only if OPENDIR says
// so (FOPEN_KEEP_CACHE), which the core does while it holds the
// directory's complete listing for its current version and the kernel
// still holds the names a plus listing of it gave (after that, listing it
// again refreshes them in a few requests, where the cache would cost a
// LOOKUP each). The kernel's contents came from a listing the core served,
// which the core's own changes keep up to date and which it drops the
// moment it learns of another version; then it tells the kernel to drop
// its contents too (listingChangedLocked), so a directory kept open and
// rewound is not read from the old contents, and the kernel asks for the
// directory's attributes again, which show the new mtime.
//
// The kernel's offsets are the core's (dirOffset): a listing served from
// the kernel's cache whose pages the kernel then loses (reclaim, an
// invalidation) goes on from the core at the offset the reader reached,
// which the stream never handed out itself. The stream resumes after the
// entry the offset names in the listing kept at OPENDIR, or the
// directory's current listing (another stream may have filled the
// kernel's cache from it).

// DirCache says whether the kernel may keep the contents of the directory
// stream dh (just opened) in its page cache, and whether what it kept from
// earlier listings is still good. Neither when names are not cached
// (lookupcache=none, noac): every pass goes to the server. A directory
// the kernel will list from its own cache counts as listed (bulk.go,
// walk.go): the core sees no pass of it, but its entries' attributes may
// be asked for next, and a walk may be going through it.
func (fs *FS) DirCache(c *Cred, dh uint64) (cache, keep bool) {
	if !fs.cachingNames() {
		return false, false
	}
	fs.openMu.Lock()
	d := fs.dirs[dh]
	fs.openMu.Unlock()
	if d == nil {
		return false, false
	}
	dir := d.node
	d.mu.Lock()
	dir.mu.Lock()
	l := dir.servedListLocked()
	if l != nil {
		d.kept = l
		// The kernel's names from the last plus listing expired: listed
		// from its cache, every name would be looked up again (a LOOKUP
		// request each, 100,000 for ls -l of 100,000 entries), where
		// listing it again refreshes them all in a few requests.
		keep = !fs.opts.RdirPlus || fs.now().Before(l.kernelUntil)
	}
	if keep {
		now := fs.now()
		b := dir.bulkLocked()
		b.listedAt, b.enumAt, b.kids, b.lastKid = now, now, 0, 0
	}
	dir.mu.Unlock()
	d.mu.Unlock()
	if keep {
		fs.visitDir(c, dir, true)
	}
	return true, keep
}

// passBegunLocked notes when the names a plus pass from offset 0 hands
// the kernel expire: their entry timeouts are what is left of the
// directory's attribute lifetime.
//
// LOCKS_REQUIRED(d.mu)
func (fs *FS) passBegunLocked(d *openDir, plus bool) {
	d.namesUntil = time.Time{}
	if plus {
		now := fs.now()
		d.namesUntil = now.Add(d.node.attrLeft(now))
	}
}

// passEndedLocked records, once a plus pass from offset 0 reached the end,
// until when the kernel holds the complete listing's names.
//
// LOCKS_REQUIRED(d.mu)
func (fs *FS) passEndedLocked(d *openDir) {
	if d.namesUntil.IsZero() {
		return
	}
	dir := d.node
	dir.mu.Lock()
	if l := dir.servedListLocked(); l != nil && d.namesUntil.After(l.kernelUntil) {
		l.kernelUntil = d.namesUntil
	}
	dir.mu.Unlock()
	d.namesUntil = time.Time{}
}

// listingChangedLocked tells the kernel that what it may hold of dir's
// contents (and attributes) is no longer current.
//
// LOCKS_REQUIRED(dir.mu)
func (fs *FS) listingChangedLocked(dir *inode) {
	fs.notify.InvalidateData(dir.id)
}

// seekKeptLocked prepares d to resume after the entry offset names, for a
// seek to an offset the stream never handed out (the kernel served it from
// its cache): in the listing kept at OPENDIR, or else the directory's
// current one. From that listing itself if it is the directory's current
// complete listing, else from the server's cookie after the entry. It
// reports whether the listing has such an entry.
//
// LOCKS_REQUIRED(d.mu)
func (fs *FS) seekKeptLocked(d *openDir, offset uint64, plus bool) bool {
	dir := d.node
	dir.mu.Lock()
	defer dir.mu.Unlock()
	current := dir.servedListLocked()
	l := d.kept
	if l == nil {
		l = current
	}
	if l == nil {
		return false
	}
	if l == current {
		if s, ok := fs.listSnapshotLocked(dir, plus); ok {
			for i := range s.entries {
				if s.entries[i].Cookie == offset {
					d.cached, d.at, d.batch, d.plusB, d.pos, d.eof = true, nil, s.entries, s.plus, 0, true
					d.verf, d.pending = s.verf, nil
					return true
				}
			}
		}
	}
	for name, e := range l.entries {
		if fs.dirOffset(name) == offset {
			d.marks[offset] = e.cookie
			d.verf = l.verf
			return true
		}
	}
	return false
}

// seekDir is d.seek, resuming also from offsets the kernel's cache handed
// out for the stream.
//
// LOCKS_REQUIRED(d.mu)
func (fs *FS) seekDir(d *openDir, offset uint64, plus bool) error {
	if _, ok := d.marks[offset]; !ok && d.indexOf(offset) < 0 {
		fs.seekKeptLocked(d, offset, plus)
	}
	return d.seek(offset)
}
