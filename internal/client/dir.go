package client

import (
	"context"
	"fmt"
	"sync"
	"syscall"
	"time"

	"hushfs/internal/nfs3"
)

// DirEntry is one directory entry as the kernel's readdir takes it.
type DirEntry struct {
	Name   string
	Ino    uint64 // the server's fileid
	Mode   uint32 // file type bits (S_IF*) when known, else 0
	Cookie uint64 // where a listing resumes after this entry
	// Entry is filled by a plus listing (READDIRPLUS) with a referenced
	// node; Entry.Node is 0 when the server sent no handle or attributes.
	Entry Entry
}

// maxListEntries bounds the directories whose complete listing is kept
// (about 200 bytes an entry with its handle and attributes).
const maxListEntries = 250_000

// nameHash is a 64-bit FNV-1a hash of a name.
func nameHash(name string) uint64 {
	h := uint64(14695981039346656037)
	for i := 0; i < len(name); i++ {
		h ^= uint64(name[i])
		h *= 1099511628211
	}
	return h
}

// plusData is what READDIRPLUS told us of an entry.
type plusData struct {
	fh     nfs3.FH
	attr   nfs3.Fattr
	at     time.Time
	dirVer *dirVersion // the directory's version in the reply, if it had one
}

// openDir is one open directory stream: where its reader stands.
// Continuing a listing always continues from the reader's cookie.
type openDir struct {
	id   uint64
	node *inode

	mu sync.Mutex
	// GUARDED_BY(mu)
	verf    nfs3.Verf
	buf     []DirEntry // fetched, not yet returned
	plusBuf []plusData // parallel to buf in a plus listing (nil fh: none)
	next    uint64     // cookie the first entry of buf follows; the reader's position
	eof     bool       // the server said the directory ends after buf
	plus    bool       // buf came from READDIRPLUS
	// seen holds a hash of every name this pass returned, so that a
	// listing the server makes restart (BAD_COOKIE) skips them: 8 bytes a
	// name, not the name.
	seen      map[uint64]struct{}
	started   bool // the current pass has begun
	restarted bool // the server made this pass start over: skip names in seen
	// A pass served from the directory's complete listing: the snapshot it
	// reads, offsets being positions in it.
	cached   bool
	snap     []DirEntry
	snapPlus []plusData
	// pending gathers a pass from the server that may turn out complete.
	pending *pendingList
}

// OpenDir opens a directory stream.
func (fs *FS) OpenDir(ctx context.Context, c *Cred, id NodeID) (uint64, error) {
	n, err := fs.node(id)
	if err != nil {
		return 0, err
	}
	if _, err := fs.attrOrFetch(ctx, c, n); err != nil {
		return 0, err
	}
	fs.nodes.open(n)
	d := &openDir{node: n, seen: map[uint64]struct{}{}}
	fs.openMu.Lock()
	d.id = fs.nextOpen
	fs.nextOpen++
	fs.dirs[d.id] = d
	fs.openMu.Unlock()
	return d.id, nil
}

// ReleaseDir closes a directory stream.
func (fs *FS) ReleaseDir(dh uint64) {
	fs.openMu.Lock()
	d := fs.dirs[dh]
	delete(fs.dirs, dh)
	fs.openMu.Unlock()
	if d != nil {
		fs.nodes.close(d.node)
	}
}

// ReadDir lists the directory from offset (0, or the Cookie of the last
// entry the reader consumed), calling emit for each entry until emit returns
// false (the reader's buffer is full) or the directory ends. With plus,
// entries carry referenced nodes and attributes (READDIRPLUS), so the kernel
// needs no LOOKUP or GETATTR for them.
func (fs *FS) ReadDir(ctx context.Context, c *Cred, dh uint64, offset uint64, plus bool, emit func(*DirEntry) bool) error {
	fs.openMu.Lock()
	d := fs.dirs[dh]
	fs.openMu.Unlock()
	if d == nil {
		return syscall.EBADF
	}
	plus = plus && fs.opts.RdirPlus
	d.mu.Lock()
	defer d.mu.Unlock()
	switch {
	case offset == 0 && (d.started || plus != d.plus), offset == 0 && !d.started:
		// A new pass. This, and only this, is where the directory is
		// revalidated: continuing a pass never starts it over.
		if err := fs.startPass(ctx, c, d, plus); err != nil {
			return err
		}
	case d.cached && offset != d.next:
		// seekdir within a pass served from the listing snapshot.
		k := min(offset, uint64(len(d.snap)))
		d.buf, d.next = d.snap[k:], offset
		if d.plus {
			d.plusBuf = d.snapPlus[k:]
		}
	case offset != d.next || plus != d.plus:
		// The reader moved (seekdir): continue from where it says.
		d.buf, d.plusBuf, d.eof, d.next, d.plus, d.pending = nil, nil, false, offset, plus, nil
	}
	for {
		for len(d.buf) > 0 {
			e := &d.buf[0]
			var n *inode
			e.Entry = Entry{}
			// "." and ".." get no node: the kernel ignores their IDs and
			// would never forget the reference. Nor does a handle the
			// server has called stale since the listing was read: the
			// kernel looks the name up instead.
			if d.plus && d.plusBuf[0].fh != nil && e.Name != "." && e.Name != ".." && !fs.nodes.staleFH(d.plusBuf[0].fh) {
				n = fs.plusEntry(d.node, e, &d.plusBuf[0], d.cached)
			}
			if !emit(e) {
				if n != nil {
					fs.nodes.forget(n.id, 1)
				}
				return nil
			}
			d.seen[nameHash(e.Name)] = struct{}{}
			d.next = e.Cookie
			d.buf = d.buf[1:]
			if d.plus {
				d.plusBuf = d.plusBuf[1:]
			}
		}
		if d.eof {
			return nil
		}
		from := d.next
		sent, err := fs.fetchDir(ctx, c, d)
		if err != nil {
			return err
		}
		if sent == 0 && !d.eof {
			// No entries and no end: asking again would loop.
			return fmt.Errorf("READDIR at cookie %d: server returned nothing and no EOF: %w", from, nfs3.ErrIO)
		}
	}
}

// startPass begins a listing at offset 0: with fresh directory attributes
// (a GETATTR if they expired), from the complete listing if there is one,
// else from the server.
//
// LOCKS_REQUIRED(d.mu)
func (fs *FS) startPass(ctx context.Context, c *Cred, d *openDir, plus bool) error {
	dir := d.node
	d.buf, d.plusBuf, d.eof, d.next, d.plus, d.pending = nil, nil, false, 0, plus, nil
	d.cached, d.snap, d.snapPlus, d.started, d.restarted = false, nil, nil, true, false
	clear(d.seen)
	if fs.cachingNames() {
		dir.mu.Lock()
		_, _, fresh := dir.cachedAttrLocked(fs.now())
		dir.mu.Unlock()
		if !fresh {
			if _, _, err := fs.getattrRPC(ctx, c, dir); err != nil {
				return err
			}
		}
	}
	dir.mu.Lock()
	defer dir.mu.Unlock()
	if snap, pd, ok := fs.listSnapshotLocked(dir, plus); ok {
		d.cached, d.snap, d.snapPlus = true, snap, pd
		d.buf, d.plusBuf, d.eof = snap, pd, true
		return nil
	}
	d.pending = fs.beginPendingLocked(dir)
	return nil
}

// plusEntry turns READDIRPLUS data into a referenced node in e.Entry.
//
// The kernel gets the node's attributes, not necessarily the data's: a
// listing served from the complete listing (cached) carries attributes
// from when it was read, or from the CREATE that added the name, and the
// file may have changed through its node since. So a cached entry is
// given attributes only while its node is still in the table, and only if
// they are not known to have changed after the data was read; otherwise
// it goes without a node (nil, e.Entry zero), as a plain entry, and the
// kernel looks the name up when it needs it.
func (fs *FS) plusEntry(dir *inode, e *DirEntry, p *plusData, cached bool) *inode {
	var n *inode
	if cached {
		n = fs.nodes.refExisting(p.fh)
	} else {
		n = fs.nodes.ref(p.fh)
	}
	if n == nil {
		e.Entry = Entry{}
		return nil
	}
	n.mu.Lock()
	fs.applyAttrLocked(n, &p.attr, p.at) // ignored if older than what n has
	a, ok := n.attr, n.attrValid
	if p.attr.Type == nfs3.TypeDir {
		n.parent = dir.id
	}
	n.mu.Unlock()
	if !ok {
		fs.nodes.forget(n.id, 1)
		e.Entry = Entry{}
		return nil
	}
	dir.mu.Lock()
	if p.dirVer != nil && dir.namesValidLocked() && dir.nameVer == *p.dirVer {
		fs.setNameLocked(dir, e.Name, n.id, p.at, true)
	}
	dir.mu.Unlock()
	e.Entry = fs.entryFor(n, &a, dir)
	return n
}

// fetchDir reads the next batch of entries after d.next into d.buf. A
// cookie the server no longer honours restarts the listing from the
// beginning, skipping names this reader has already been given.
//
// LOCKS_REQUIRED(d.mu)
func (fs *FS) fetchDir(ctx context.Context, c *Cred, d *openDir) (sent int, err error) {
	for restarted := false; ; restarted = true {
		sent, err := fs.readdirRPC(ctx, c, d)
		if err != nfs3.ErrBadCookie || restarted {
			return sent, err
		}
		d.next, d.verf = 0, nfs3.Verf{}
		d.buf, d.plusBuf, d.pending = nil, nil, nil
		d.restarted = true
	}
}

// readdirRPC sends one READDIR or READDIRPLUS from d.next.
//
// LOCKS_REQUIRED(d.mu)
func (fs *FS) readdirRPC(ctx context.Context, c *Cred, d *openDir) (int, error) {
	dir := d.node
	at := fs.now()
	skip := d.restarted // names already returned in this pass are skipped
	add := func(name []byte, fileid, cookie uint64) bool {
		if skip {
			if _, dup := d.seen[nameHash(string(name))]; dup {
				d.next = cookie
				return false
			}
		}
		d.buf = append(d.buf, DirEntry{Name: string(name), Ino: fileid, Cookie: cookie})
		return true
	}
	// collect records an entry of a pass that may become the complete
	// listing; finish installs it at EOF.
	collect := func(e *DirEntry, p *plusData) {
		switch {
		case d.pending == nil:
		case e.Name == ".":
			d.pending.dots = true
		case e.Name == "..":
			d.pending.dotdot = e.Ino
		case len(d.pending.entries) >= maxListEntries:
			d.pending = nil // too large to keep: listed from the server each time
		default:
			d.pending.entries = append(d.pending.entries, pendingEntry{name: e.Name, fileid: e.Ino, mode: e.Mode, plus: p})
		}
	}
	finish := func() {
		if d.eof && d.pending != nil {
			fs.finishPending(dir, d.pending)
			d.pending = nil
		}
	}
	if d.plus {
		args := nfs3.ReaddirplusArgs{Dir: dir.fh, Cookie: d.next, CookieVerf: d.verf, DirCount: fs.dtpref, MaxCount: fs.rsize}
		var res nfs3.ReaddirplusRes
		if err := fs.call(ctx, c, nfs3.ProcReaddirplus, &args, &res); err != nil {
			return 0, err
		}
		fs.applyAttr(dir, &res.DirAttr, at)
		if res.Status != nfs3.OK {
			fs.noteStale(dir, res.Status)
			return 0, res.Status
		}
		d.verf, d.eof = res.CookieVerf, res.EOF
		var ver *dirVersion
		if res.DirAttr.Present {
			v := versionOf(&res.DirAttr.Attr)
			ver = &v
		}
		for i := range res.Entries {
			e := &res.Entries[i]
			if !add(e.Name, e.Fileid, e.Cookie) {
				continue
			}
			var p plusData
			var pp *plusData
			if e.FH.Present && e.Attr.Present {
				p = plusData{fh: append(nfs3.FH(nil), e.FH.FH...), attr: e.Attr.Attr, at: at, dirVer: ver}
				d.buf[len(d.buf)-1].Mode = typeBits[e.Attr.Attr.Type]
				pp = &p
			}
			d.plusBuf = append(d.plusBuf, p)
			collect(&d.buf[len(d.buf)-1], pp)
		}
		finish()
		return len(res.Entries), nil
	}
	args := nfs3.ReaddirArgs{Dir: dir.fh, Cookie: d.next, CookieVerf: d.verf, Count: fs.dtpref}
	var res nfs3.ReaddirRes
	if err := fs.call(ctx, c, nfs3.ProcReaddir, &args, &res); err != nil {
		return 0, err
	}
	fs.applyAttr(dir, &res.DirAttr, at)
	if res.Status != nfs3.OK {
		fs.noteStale(dir, res.Status)
		return 0, res.Status
	}
	d.verf, d.eof = res.CookieVerf, res.EOF
	for i := range res.Entries {
		e := &res.Entries[i]
		if add(e.Name, e.Fileid, e.Cookie) {
			collect(&d.buf[len(d.buf)-1], nil)
		}
	}
	finish()
	return len(res.Entries), nil
}
