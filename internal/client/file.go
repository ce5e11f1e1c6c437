package client

import (
	"context"
	"fmt"
	"sync/atomic"
	"syscall"
	"time"

	"hushfs/internal/proto"
)

// openFile is one open file description (a FUSE file handle).
type openFile struct {
	id    uint64
	node  *inode
	flags uint32
	cred  Cred
	// share is the v4.1 open this descriptor counts in (proto.Share*
	// bits), 0 if none (NFSv3).
	share uint32
	// seenErr is the write-back error count this descriptor has been told
	// of. GUARDED_BY(node.file.mu)
	seenErr uint64
	// flushed: a close(2) of a descriptor of it was seen (FLUSH); its
	// RELEASE is likely on its way (openHere).
	flushed atomic.Bool
	// dropping: its open told the kernel to drop the file's pages, and
	// the kernel has not used the descriptor since (counted in
	// node.dropping; Open).
	dropping atomic.Bool
}

// takeErrLocked returns a write-back error this descriptor has not yet
// been told of, once (errseq semantics: every descriptor open when an error
// happened sees it exactly once).
//
// LOCKS_REQUIRED(st.mu)
func (of *openFile) takeErrLocked(st *fileState) error {
	if st.errSeq == of.seenErr {
		return nil
	}
	of.seenErr = st.errSeq
	return st.err
}

// takeErr is takeErrLocked taking the lock.
func (of *openFile) takeErr() error {
	st := peek(of.node)
	if st == nil {
		return nil
	}
	st.mu.Lock()
	defer st.mu.Unlock()
	return of.takeErrLocked(st)
}

func (fs *FS) addOpenFile(n *inode, flags uint32, c *Cred, share uint32) *openFile {
	of := &openFile{node: n, flags: flags, share: share, cred: Cred{UID: c.UID, GID: c.GID, Groups: append([]uint32(nil), c.Groups...)}}
	if st := peek(n); st != nil {
		st.mu.Lock()
		of.seenErr = st.errSeq // errors from before this open are not this descriptor's
		st.mu.Unlock()
	}
	fs.nodes.open(n)
	fs.openMu.Lock()
	of.id = fs.nextOpen
	fs.nextOpen++
	fs.files[of.id] = of
	fs.openMu.Unlock()
	return of
}

func (fs *FS) openFile(fh uint64) (*openFile, error) {
	fs.openMu.Lock()
	of := fs.files[fh]
	fs.openMu.Unlock()
	if of == nil {
		return nil, syscall.EBADF
	}
	fs.pastOpen(of)
	return of, nil
}

// pastOpen is told that the kernel uses of (a request on it): it is past
// its open, whose dropping of the kernel's pages (Open) is done.
func (fs *FS) pastOpen(of *openFile) {
	if of.dropping.Load() && of.dropping.CompareAndSwap(true, false) {
		of.node.mu.Lock()
		of.node.dropping--
		of.node.mu.Unlock()
	}
}

// accessForOpen returns the ACCESS bits an open with these flags needs.
func accessForOpen(flags uint32) uint32 {
	switch flags & syscall.O_ACCMODE {
	case syscall.O_WRONLY:
		return AccessWrite
	case syscall.O_RDWR:
		return AccessRead | AccessWrite
	}
	return AccessRead
}

// Open opens a file. With close-to-open consistency (the default) it asks
// the server for fresh attributes; keepCache says whether the kernel's
// cached pages of the file are still good (the file is unchanged since they
// were read).
func (fs *FS) Open(ctx context.Context, c *Cred, id NodeID, flags uint32) (fh uint64, keepCache bool, err error) {
	n, err := fs.node(id)
	if err != nil {
		return 0, false, err
	}
	// A truncate of the file under way here first (inode.sizing): the
	// kernel takes no size until it is done.
	n.sizing.Lock()
	n.sizing.Unlock()
	// Close-to-open: fresh attributes at every open (with nocto, only when
	// the cache has expired). The permission check after it is then
	// answered by the ACCESS cache as long as mode and owner are unchanged.
	// An open that truncates gets them from its SETATTR's reply instead.
	trunc := flags&syscall.O_TRUNC != 0 && flags&syscall.O_ACCMODE != syscall.O_RDONLY
	if flags&syscall.O_ACCMODE == syscall.O_RDONLY {
		fs.walkRead(c, n) // a walk reading files reads ahead further (walk.go)
	}
	var share uint32
	var first *firstRead
	var gen uint64  // n.dataGen when the OPEN was sent
	counted := true // n.opening counts this open
	if fs.opener != nil {
		// An OPEN, with the attributes and rights (openstate.go).
		n.mu.Lock()
		gen = n.dataGen
		n.mu.Unlock()
		if share, first, err = fs.openState(ctx, c, n, flags); err != nil {
			return 0, false, err
		}
		counted = share != 0
	} else {
		// As openState does: a change the revalidation finds is told to
		// the kernel by this open's reply (no FOPEN_KEEP_CACHE, the
		// attributes invalidated), not by a notification queued behind
		// it. Arriving after the reply, that notification moved the
		// kernel's attribute version while it fetched the attributes for
		// its first read, and it dropped them: it read on with the size
		// from before another client's truncate, and its short reads left
		// it a size past the new end (TestFSX/ganesha read one byte more).
		n.mu.Lock()
		n.opening++
		gen = n.dataGen
		n.mu.Unlock()
		if fs.opts.CTO && !trunc {
			err = fs.openCheck(ctx, c, n, accessForOpen(flags))
		} else if _, err = fs.attrOrFetch(ctx, c, n); err == nil {
			err = fs.Access(ctx, c, id, accessForOpen(flags))
		}
		if err != nil {
			fs.openFailed(n, gen)
			return 0, false, err
		}
	}
	if trunc {
		if _, _, err := fs.truncateOnOpen(ctx, c, n); err != nil {
			if counted {
				fs.openFailed(n, gen)
			}
			if share != 0 {
				fs.closeState(ctx, &openFile{node: n, cred: *c, share: share})
			}
			return 0, false, err
		}
	}
	n.mu.Lock()
	if counted {
		n.opening-- // the reply tells the kernel (openState)
	}
	// The OPEN's data is the version its attributes describe: kept only if
	// no other reply moved the data generation since and the node still
	// shows that version (a reply refused as older than another open's,
	// answered first with the next version, would lend its data to that
	// version: the kernel read the old bytes up to the new size).
	firstOK := first != nil && n.dataGen == first.gen && sameVersion(&n.attr, &first.attr)
	// The kernel's pages are this version's only once an open that told
	// it to drop them is past: the kernel drops them as that open returns
	// to its caller. Two opens at once (both OPENs on their way, the
	// second answered by the delegation the first brought) had the first
	// find the change and the second, told to keep the pages, answered
	// first: its reader read the version before another client's close
	// from the kernel's pages (the recall soak, with its two readers per
	// client).
	keepCache = n.dataValid && n.dropping == 0
	if !n.dataValid {
		// From now on the kernel's pages are read from this version; what
		// we kept of earlier versions (clean data, known holes) is not.
		n.dataValid, n.dataMtime, n.dataSize = true, n.attr.Mtime, n.attr.Size
		n.dataGen++
	}
	if !keepCache {
		n.dropping++
	}
	dataGen := n.dataGen
	n.mu.Unlock()
	if firstOK {
		// The kernel's first read is then answered without a READ.
		fs.wb.keepRead(n, dataGen, dataGen, first.changes, 0, first.data)
	}
	of := fs.addOpenFile(n, flags, c, share)
	of.dropping.Store(!keepCache)
	return of.id, keepCache, nil
}

// openCheck is an open's close-to-open revalidation and permission check.
// The attributes must come from a call sent after the open began. Where
// the ACCESS cache cannot answer for the attributes the file has (a fresh
// mount, another identity, a changed mode), the check needs an ACCESS
// anyway, and its reply carries the file's attributes: one call answers
// both. Otherwise a GETATTR, and the cache answers while mode, owner and
// ctime are unchanged.
func (fs *FS) openCheck(ctx context.Context, c *Cred, n *inode, mask uint32) error {
	want := accessWant(n, mask)
	if _, ok := fs.cachedAccess(c, n, want, false); !ok {
		granted, gotAttr, err := fs.accessRPC(ctx, c, n, true)
		if err != nil {
			return err
		}
		if gotAttr {
			if granted&want != want {
				return syscall.EACCES
			}
			return nil
		}
	}
	if _, _, err := fs.getattrShared(ctx, c, n, true); err != nil {
		return err
	}
	return fs.Access(ctx, c, n.id, mask)
}

// truncateOnOpen empties a file for open(O_TRUNC): a SETATTR even when the
// cache says the file is already empty, since the open did not revalidate.
func (fs *FS) truncateOnOpen(ctx context.Context, c *Cred, n *inode) (Attr, time.Duration, error) {
	fs.invalidateAttr(n)
	return fs.SetAttr(ctx, c, n.id, SetAttrIn{SetSize: true})
}

// Create creates and opens a regular file: one CREATE carrying the mode,
// GUARDED for O_EXCL.
func (fs *FS) Create(ctx context.Context, c *Cred, parent NodeID, name string, flags, mode uint32) (Entry, uint64, error) {
	if err := fs.checkName(name); err != nil {
		return Entry{}, 0, err
	}
	dir, err := fs.node(parent)
	if err != nil {
		return Entry{}, 0, err
	}
	var share uint32
	if fs.opener != nil {
		share = shareOf(flags) // the create is an OPEN (openstate.go)
	}
	e, share, err := fs.create(ctx, c, dir, name, mode, flags&syscall.O_EXCL != 0, flags&syscall.O_TRUNC != 0, share)
	if err != nil {
		return Entry{}, 0, err
	}
	n, err := fs.node(e.Node)
	if err != nil {
		return Entry{}, 0, err
	}
	return e, fs.addOpenFile(n, flags, c, share).id, nil
}

// Read reads up to len(dst) bytes at off: rsize READs in parallel, with
// data written here and not yet sent laid over them.
func (fs *FS) Read(ctx context.Context, c *Cred, fh uint64, off uint64, dst []byte) (int, error) {
	of, err := fs.openFile(fh)
	if err != nil {
		return 0, err
	}
	if err := fs.checkLocksLost(of); err != nil {
		return 0, err
	}
	n := of.node
	if got, ok := fs.wb.readLocal(n, off, dst); ok {
		return got, nil
	}
	// What is not yet on the server is taken before the READs: write-back
	// may complete while they are in flight, taking that data out of the
	// dirty and in-flight lists after the server answered without it.
	pending, pendingEnd, changes := fs.wb.pendingIn(n, off, uint64(len(dst)))
	type piece struct {
		got int
		eof bool
		err error
	}
	snap := fs.dataSnapshot(n)
	genBefore := snap.gen
	rsize := int(fs.rsize)
	pieces := make([]piece, (len(dst)+rsize-1)/rsize)
	inWindow(len(pieces), func(i int) {
		lo := i * rsize
		hi := min(lo+rsize, len(dst))
		pieces[i].got, pieces[i].eof, pieces[i].err = fs.readFull(ctx, c, n, off+uint64(lo), dst[lo:hi])
	})
	valid := 0
	gen := fs.dataSnapshot(n).gen
	for i, p := range pieces {
		if p.err != nil {
			return 0, p.err
		}
		valid = i*rsize + p.got
		if p.eof || p.got < min(rsize, len(dst)-i*rsize) {
			break
		}
	}
	// What the server sent is kept as clean data, if the file did not
	// change meanwhile: a page the kernel drops is then read from here.
	// Only for small files: a big file read through is the kernel page
	// cache's to hold, and a copy here would double the memory it takes
	// and push out the small files whose pages the kernel drops after our
	// own writes (objects a linker reads back).
	if snap.size <= keepReadMaxFile && len(pending) == 0 {
		fs.wb.keepRead(n, genBefore, gen, changes, off, dst[:valid])
	}
	// Bytes between the server's EOF and our dirty data are a hole.
	clear(dst[valid:])
	valid = max(valid, pending.overlay(off, dst))
	// Data written since the snapshot is newer still.
	valid = max(valid, fs.wb.overlay(n, off, dst))
	// Pending data beyond this range makes the file longer than the
	// server knew: up to there this range is a hole, not end of file. A
	// short read here would make the kernel shrink its idea of the size.
	if end := max(pendingEnd, fs.wb.dirtyEnd(n)); end > off {
		valid = max(valid, int(min(uint64(len(dst)), end-off)))
	}
	return valid, nil
}

// pendingIn copies the data not yet on the server (dirty or in flight) that
// overlaps [off, off+size), and returns it with the end of all such data
// and the count of our changes to the file so far (inode.changes).
func (w *writeback) pendingIn(n *inode, off, size uint64) (extents, uint64, uint64) {
	// Read first: a change counted after this was not pending before it.
	changes := n.changes.Load()
	st := peek(n)
	if st == nil {
		return nil, 0, changes
	}
	st.mu.Lock()
	defer st.mu.Unlock()
	var out extents
	end := st.dirty.lastEnd()
	take := func(e *extent) {
		end = max(end, e.end())
		if e.end() <= off || e.off >= off+size {
			return
		}
		lo, hi := max(off, e.off), min(off+size, e.end())
		out = out.insert(lo, e.data[lo-e.off:hi-e.off])
	}
	// In-flight data is older than dirty data for the same bytes.
	for i := range st.inflight {
		take(&st.inflight[i])
	}
	for i := range st.dirty {
		take(&st.dirty[i])
	}
	return out, end, changes
}

// maxNoProgress is how many READ replies in a row may bring neither data
// nor end of file before the read fails: such a server would otherwise be
// asked forever.
const maxNoProgress = 3

// readFull fills dst from off, or up to the end of the file. A READ reply
// with fewer bytes than asked and no end of file is legal (RFC 1813; a
// server whose rtmax is below our rsize sends them): the rest is read on
// from where it ended. Taken as the end of the file, it made the
// application see the file cut short, and the bytes past it zeros where
// our own data lay beyond.
func (fs *FS) readFull(ctx context.Context, c *Cred, n *inode, off uint64, dst []byte) (int, bool, error) {
	got, idle := 0, 0
	for got < len(dst) {
		k, eof, err := fs.readRPC(ctx, c, n, off+uint64(got), dst[got:])
		if err != nil {
			return 0, false, err
		}
		got += k
		if eof {
			return got, true, nil
		}
		if k > 0 {
			idle = 0
			continue
		}
		if idle++; idle >= maxNoProgress {
			fs.logf("hushfs: READ of node %d at offset %d: %d replies in a row without data or end of file; failing the read with EIO", n.id, off+uint64(got), idle)
			return 0, false, fmt.Errorf("READ at offset %d: %d replies without data or end of file: %w", off+uint64(got), idle, proto.ErrIO)
		}
	}
	return got, false, nil
}

// readRPC reads into dst at off with one READ.
func (fs *FS) readRPC(ctx context.Context, c *Cred, n *inode, off uint64, dst []byte) (int, bool, error) {
	at := fs.now()
	var res proto.ReadRes
	err := fs.underState(ctx, n, c, false, func(st *proto.StateID) (error, error) {
		var err error
		if st == nil {
			res, err = fs.srv.Read(ctx, c, n.fh, off, dst)
		} else {
			res, err = fs.sio.ReadState(ctx, c, *st, n.fh, off, dst)
		}
		return res.Status, err
	})
	if err != nil {
		return 0, false, err
	}
	fs.applyAttr(n, &res.Attr, at)
	if res.Status != nil {
		fs.noteStale(n, res.Status)
		return 0, false, res.Status
	}
	return res.N, res.EOF, nil
}

// Write records data written at off. Unless the file was opened O_SYNC or
// O_DSYNC (or the mount is sync) it returns once the data is held here;
// write-back sends it.
func (fs *FS) Write(ctx context.Context, c *Cred, fh uint64, off uint64, data []byte) (int, error) {
	of, err := fs.openFile(fh)
	if err != nil {
		return 0, err
	}
	if err := fs.checkLocksLost(of); err != nil {
		return 0, err
	}
	if of.flags&syscall.O_APPEND != 0 {
		off = fs.appendOffset(of.node, off)
	}
	if fs.maxFileSize > 0 && off+uint64(len(data)) > fs.maxFileSize {
		return 0, syscall.EFBIG
	}
	stable := proto.Unstable
	switch {
	case fs.opts.Sync || of.flags&syscall.O_SYNC == syscall.O_SYNC:
		stable = proto.FileSync
	case of.flags&syscall.O_DSYNC != 0:
		stable = proto.DataSync
	case fs.beyondDelegLimit(of.node, off+uint64(len(data))):
		stable = proto.FileSync // the server does not promise the space there
	}
	if err := fs.wb.write(ctx, of, c, off, data, stable); err != nil {
		return 0, err
	}
	if stable != proto.Unstable {
		if err := of.takeErr(); err != nil {
			return 0, err
		}
	}
	return len(data), nil
}

// appendOffset is where an O_APPEND write goes: the end of the file as
// known here. The kernel sends it at the size it cached (FUSE without
// writeback_cache leaves O_APPEND to the file system), which another
// client's change may have moved since: the open learned the server's
// size (close-to-open), but the kernel's stays until it asks again. When
// they differ the kernel is told to drop the file's pages and size: it
// copied the data to its pages at the old end.
func (fs *FS) appendOffset(n *inode, kernelOff uint64) uint64 {
	n.mu.Lock()
	a := n.attr
	n.mu.Unlock()
	end := fs.localAttr(n, &a).Size
	if end != kernelOff {
		fs.notify.InvalidateData(n.id)
	}
	return end
}

// Flush is called at every close of a descriptor: it writes the file's
// dirty data and commits it (close-to-open), then reports any write-back
// error this descriptor has not seen. Under a write delegation the data
// is written but not committed (wdeleg.go).
func (fs *FS) Flush(ctx context.Context, c *Cred, fh uint64) error {
	of, err := fs.openFile(fh)
	if err != nil {
		return err
	}
	defer of.flushed.Store(true)
	return fs.flushSync(ctx, of, fs.closeDelegated(of.node))
}

// flushSync writes of's file, and commits it unless delegated, then
// reports any write-back error of has not seen.
func (fs *FS) flushSync(ctx context.Context, of *openFile, delegated bool) error {
	// A caller let go (killed) does not take the data with it: see await.
	flush := func(ctx context.Context) error { return fs.wb.flush(ctx, of.node, proto.FileSync) }
	if delegated {
		// The data, and times held for it (tar's utimensat), reach the
		// server's disk; only the COMMIT waits (wdeleg.go).
		flush = func(ctx context.Context) error {
			if err := fs.wb.flushOrdered(ctx, of.node); err != nil {
				return err
			}
			return fs.wb.sendHeldTimes(ctx, of.node)
		}
	}
	if err := fs.await(ctx, flush); err != nil {
		of.takeErr() // reported now: not again at the next close
		return err
	}
	return of.takeErr()
}

// Fsync makes the file's data durable on the server: WRITE and COMMIT,
// with a write delegation too.
func (fs *FS) Fsync(ctx context.Context, c *Cred, fh uint64) error {
	of, err := fs.openFile(fh)
	if err != nil {
		return err
	}
	if err := fs.flushSync(ctx, of, false); err != nil {
		return err
	}
	// Locks lost at a server restart (reclaim.go): the data went out, but
	// not under the locks the process believes it holds.
	return fs.checkLocksLost(of)
}

// Release closes a file handle. At the last close of a file that was
// unlinked while open, the hidden name is removed. It returns when that is
// done or when ctx ends; the rest then goes on under the mount's lifetime.
func (fs *FS) Release(ctx context.Context, fh uint64) {
	fs.openMu.Lock()
	of := fs.files[fh]
	delete(fs.files, fh)
	fs.openMu.Unlock()
	if of == nil {
		return
	}
	fs.pastOpen(of)
	fs.await(ctx, func(ctx context.Context) error {
		fs.release(ctx, of)
		return nil
	})
}

func (fs *FS) release(ctx context.Context, of *openFile) {
	n := of.node
	// Writes through a shared mapping can arrive after the last flush.
	flush := fs.wb.flush
	if fs.closeDelegated(n) {
		flush = func(ctx context.Context, n *inode, _ proto.Stable) error { return fs.wb.flushOrdered(ctx, n) }
	}
	if err := flush(ctx, n, proto.FileSync); err != nil && ctx.Err() == nil {
		// (Ended with the mount: Close reports what is left.)
		fs.logf("hushfs: write-back at close of node %d: %v", n.id, err)
	}
	if of.share != 0 {
		fs.closeState(ctx, of)
	}
	if fs.nodes.close(n) > 0 {
		return
	}
	fs.wb.release(n)
	n.mu.Lock()
	dirID, name := n.sillyDir, n.sillyName
	n.sillyDir, n.sillyName = 0, ""
	n.mu.Unlock()
	if name == "" {
		return
	}
	if dir := fs.nodes.get(dirID); dir != nil {
		if err := fs.remove(ctx, &of.cred, dir, name, false); err != nil {
			fs.logf("hushfs: removing %s after last close: %v", name, err)
		}
	}
}
