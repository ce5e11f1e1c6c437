package client

import (
	"context"
	"hash/maphash"
	"sync"
	"syscall"
	"time"

	"hushfs/internal/proto"
)

// DirEntry is one directory entry as the kernel's readdir takes it.
type DirEntry struct {
	Name string
	Ino  uint64 // the server's fileid
	Mode uint32 // file type bits (S_IF*) when known, else 0
	// Cookie is the offset a listing resumes from after this entry (the
	// kernel's d_off, what telldir returns). It is the stream's own, not
	// the server's cookie: see dirOffset.
	Cookie uint64
	// Entry is filled by a plus listing (READDIRPLUS) with a referenced
	// node; Entry.Node is 0 when the server sent no handle or attributes.
	Entry Entry

	cookie uint64 // the server's cookie after this entry
}

// maxListEntries bounds the directories whose complete listing is kept
// (about 200 bytes an entry with its handle and attributes).
const maxListEntries = 250_000

// maxMarks bounds the offsets one open directory can resume from (16
// bytes and a map slot each): past it, a seekdir to a newly handed-out
// offset fails with EINVAL, while reading on is unaffected.
const maxMarks = 1 << 22

// dirOffset is the offset of the entry name in every listing of the mount:
// a keyed hash of the name. An offset must lead after the same entry in
// every pass of an open directory — read from the server or from the
// complete listing, in whatever order, after entries came and went — and
// the entry's name is what stays the same. It is below 2^63 (lseek refuses
// larger directory offsets) and never 0 (the start); the key is the
// mount's, so a server cannot choose names that collide.
func (fs *FS) dirOffset(name string) uint64 {
	h := maphash.String(fs.offSeed, name) >> 1
	if h == 0 {
		h = 1
	}
	return h
}

// plusData is what READDIRPLUS told us of an entry.
type plusData struct {
	fh     proto.FH
	attr   proto.Attr
	at     time.Time
	dirVer *dirVersion // the directory's version in the reply, if it had one
	drops  uint64      // the node table's dropCount when the call was sent (0: unknown)
	// notified: from a directory notification (dirnotify.go), which a
	// later one would have undone if the entry had gone: its node may be
	// made whatever left the table since.
	notified bool
}

// openDir is one open directory stream.
//
// A pass reads from offset 0 to the end, from the server or from the
// directory's complete listing (a snapshot, taken when the pass begins). A
// run is the part of a pass read in sequence: it begins at offset 0, at a
// seekdir, or where the server made the listing start over (BAD_COOKIE).
type openDir struct {
	id   uint64
	node *inode

	mu sync.Mutex
	// GUARDED_BY(mu)
	next   uint64         // offset of the last entry returned (0: none yet)
	batch  []DirEntry     // entries at hand: the last reply, or the snapshot
	plusB  []plusData     // parallel to batch when it came with handles (nil fh: none)
	pos    int            // the first entry of batch not returned
	cached bool           // batch is the complete listing's snapshot
	at     map[uint64]int // offset → index in a snapshot, once it is seeked in
	eof    bool           // nothing follows batch
	cookie uint64         // the server's cookie the next READDIR reads from
	verf   proto.Verf
	// marks holds, for every offset the stream handed out, the server's
	// cookie to read on from after its entry, as the last pass that
	// returned the entry had it.
	marks map[uint64]uint64
	// pending gathers a pass from the server that may turn out complete;
	// listing says the pass may (the name cache is kept).
	pending *pendingList
	listing bool
	// passAt and calls: when the pass's first call (from cookie 0) was
	// sent, and the calls it has made (bulk.go's estimates).
	passAt time.Time
	calls  int
	// kept is the complete listing the kernel was told it may list the
	// stream from (DirCache); read under node.mu. namesUntil: when the
	// names a plus pass from offset 0 hands the kernel expire (zero: not
	// such a pass).
	kept       *dirList
	namesUntil time.Time
	// The current run. seen holds the offsets it returned, so that a
	// restart skips them; asked the cookies read from since it (re)started:
	// reading from one again is a loop.
	seen      map[uint64]struct{}
	asked     map[uint64]struct{}
	restarted bool  // the server made the run start over: skip names in seen
	gained    int   // entries returned since the run (re)started
	fruitless int   // restarts in a row with no entry returned in between
	failed    error // the run made no progress: what continuing it returns
}

// newRun begins a run.
//
// LOCKS_REQUIRED(d.mu)
func (d *openDir) newRun() {
	clear(d.seen)
	clear(d.asked)
	d.passAt, d.calls = time.Time{}, 0
	d.restarted, d.gained, d.fruitless, d.failed = false, 0, 0, nil
}

// OpenDir opens a directory stream.
func (fs *FS) OpenDir(ctx context.Context, c *Cred, id NodeID) (uint64, error) {
	n, err := fs.node(id)
	if err != nil {
		return 0, err
	}
	// No call: a listing pass from offset 0 revalidates the directory
	// (startPass), and the kernel reads one after every opendir it means
	// to read; a GETATTR here would only come before the pass's own call.
	fs.nodes.open(n)
	d := &openDir{node: n, marks: map[uint64]uint64{}, seen: map[uint64]struct{}{}, asked: map[uint64]struct{}{}}
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

// ReadDir lists the directory from offset (0, or the Cookie of an entry
// the stream returned), calling emit for each entry until emit returns
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
	plus = plus && fs.opts.RdirPlus && !fs.noPlus.Load()
	d.mu.Lock()
	defer d.mu.Unlock()
	if offset == 0 {
		fs.touchDirDeleg(d.node)
	}
	switch {
	case offset == 0:
		// A new pass. This, and only this, is where the directory is
		// revalidated: continuing a pass never starts it over.
		if err := fs.startPass(ctx, c, d, plus); err != nil {
			return err
		}
		fs.passBegunLocked(d, plus)
	case offset != d.next:
		if err := fs.seekDir(d, offset, plus); err != nil {
			return err
		}
	case d.failed != nil:
		return d.failed
	}
	for {
		for d.pos < len(d.batch) {
			e := &d.batch[d.pos]
			var n *inode
			e.Entry = Entry{}
			// "." and ".." get no node: the kernel ignores their IDs and
			// would never forget the reference. Nor does a handle the
			// server has called stale since the listing was read: the
			// kernel looks the name up instead.
			if plus && d.plusB != nil {
				if p := &d.plusB[d.pos]; p.fh != nil && e.Name != "." && e.Name != ".." && !fs.nodes.staleFH(p.fh) {
					n = fs.plusEntry(d.node, e, p, d.cached)
				}
			}
			if !emit(e) {
				if n != nil {
					fs.nodes.unref(n.id)
				}
				return nil
			}
			d.pos++
			d.next = e.Cookie
			if !d.cached {
				d.seen[e.Cookie] = struct{}{}
			}
			if _, ok := d.marks[e.Cookie]; ok || len(d.marks) < maxMarks {
				d.marks[e.Cookie] = e.cookie
			}
			d.gained++
		}
		if d.eof {
			fs.passEndedLocked(d)
			fs.walkOn(d.node, !d.cached)
			return nil
		}
		if err := fs.fetchDir(ctx, c, d, plus); err != nil {
			return err
		}
	}
}

// seek moves the stream to after the entry offset stands for (seekdir,
// or the kernel asking again from an entry its reader had no room for):
// within the entries at hand if it is there, else from the server, from
// the cookie the last pass that returned the entry had for it.
//
// LOCKS_REQUIRED(d.mu)
func (d *openDir) seek(offset uint64) error {
	if i := d.indexOf(offset); i >= 0 {
		// Entries returned after it are not the reader's any more.
		for j := i + 1; j < d.pos; j++ {
			delete(d.seen, d.batch[j].Cookie)
		}
		d.pos, d.next, d.failed = i+1, offset, nil
		return nil
	}
	cookie, ok := d.marks[offset]
	if !ok {
		return syscall.EINVAL // not an offset this stream handed out
	}
	d.cached, d.at, d.batch, d.plusB, d.pos, d.eof = false, nil, nil, nil, 0, false
	d.cookie, d.next, d.pending = cookie, offset, nil
	d.newRun()
	return nil
}

// indexOf returns the index in batch of the entry at offset, or -1.
//
// LOCKS_REQUIRED(d.mu)
func (d *openDir) indexOf(offset uint64) int {
	if !d.cached {
		for i := range d.batch {
			if d.batch[i].Cookie == offset {
				return i
			}
		}
		return -1
	}
	if d.at == nil { // a snapshot is searched once it is seeked in
		d.at = make(map[uint64]int, len(d.batch))
		for i := len(d.batch) - 1; i >= 0; i-- {
			d.at[d.batch[i].Cookie] = i
		}
	}
	if i, ok := d.at[offset]; ok {
		return i
	}
	return -1
}

// startPass begins a listing at offset 0: from the complete listing if
// there is one and the directory's attributes are fresh (a GETATTR, or
// a READDIRPLUS pass under way, if they expired), else from the server.
//
// LOCKS_REQUIRED(d.mu)
func (fs *FS) startPass(ctx context.Context, c *Cred, d *openDir, plus bool) error {
	dir := d.node
	d.cached, d.at, d.batch, d.plusB, d.pos, d.eof = false, nil, nil, nil, 0, false
	d.cookie, d.verf, d.next, d.pending = 0, proto.Verf{}, 0, nil
	d.listing = fs.cachingNames()
	d.newRun()
	// The kernel lists the directory: a stat of its entries may follow
	// (bulk.go), and a walk may be going through it (walk.go).
	now := fs.now()
	dir.mu.Lock()
	b := dir.bulkLocked()
	b.listedAt, b.enumAt, b.kids, b.lastKid = now, now, 0, 0
	dir.mu.Unlock()
	walking := fs.visitDir(c, dir, true)
	fromServer := false
	if fs.cachingNames() {
		// A pass under way (read ahead, say) brings the listing: wait for
		// it rather than read the directory twice.
		dir.mu.Lock()
		r := dir.bulk.refresh
		dir.mu.Unlock()
		if r != nil {
			r.want()
			select {
			case <-r.done:
			case <-ctx.Done():
				return ctx.Err()
			}
		}
		// Before dir.mu: the table's lock comes first. Only from a server
		// known to answer for them (a listing still asks any other).
		deleg := fs.dirDelegsKnown() && fs.wantDirDeleg(dir)
		dir.mu.Lock()
		_, _, fresh := dir.cachedAttrLocked(fs.now())
		// With the attributes expired, the pass's first reply revalidates
		// the directory (repend) as a GETATTR would: for a directory with
		// no complete listing kept, and for a READDIRPLUS pass of one
		// call, which also brings every entry's attributes (ls -l, du
		// then stat nothing). A pass of one call that asks for the
		// directory's delegation too (dirdeleg.go), which makes the next
		// listings free, costs no more than the GETATTR.
		fromServer = !fresh && (dir.bulk.refresh == nil &&
			(dir.list == nil || (plus && fs.bulkOn() || deleg) && fs.passCallsLocked(dir) <= 1))
		if deleg && !fromServer && fs.retryDirDelegLocked(dir) {
			fromServer = true // fresh, but the listing is the way to the delegation
		}
		dir.mu.Unlock()
		if !fresh && !fromServer {
			if err := fs.reviveDir(ctx, c, dir, walking); err != nil {
				return err
			}
		}
	}
	dir.mu.Lock()
	defer dir.mu.Unlock()
	if s, ok := fs.listSnapshotLocked(dir, plus); ok && !fromServer {
		d.cached, d.batch, d.plusB, d.verf, d.eof = true, s.entries, s.plus, s.verf, true
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
// given attributes only while its node is still in the table (or, for a
// file that had none, while no node has left the table since the data was
// read: a listing read ahead of a walk), and only if they are not known to
// have changed after the data was read; otherwise
// it goes without a node (nil, e.Entry zero), as a plain entry, and the
// kernel looks the name up when it needs it.
func (fs *FS) plusEntry(dir *inode, e *DirEntry, p *plusData, cached bool) *inode {
	var n *inode
	switch {
	case cached && p.notified:
		n = fs.nodes.refLive(p.fh)
	case cached:
		n = fs.nodes.refListed(p.fh, p.drops)
	default:
		n = fs.nodes.ref(p.fh)
	}
	if n == nil {
		e.Entry = Entry{}
		return nil
	}
	n.mu.Lock()
	fs.applyAttrLocked(n, &p.attr, p.at) // ignored if older than what n has
	// Not those a recalled directory delegation kept (dirdeleg.go): the
	// kernel would use them before asking again.
	a, ok := n.attr, n.attrValid && !n.childRecalledLocked()
	n.setParentLocked(dir)
	if p.attr.Type == proto.TypeDir {
		n.name = e.Name
	}
	n.mu.Unlock()
	if !ok {
		fs.nodes.unref(n.id)
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
