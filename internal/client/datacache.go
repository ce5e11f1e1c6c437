package client

import (
	"slices"
	"sort"
)

// Data we wrote and the server acknowledged stays with the file as clean
// data, so reading it back (a linker reading the objects the assembler just
// wrote) sends no READ. It is valid while the file's data generation is
// unchanged: any change we did not make bumps the generation (see
// applyAttrLocked) and the clean data is dropped at its next use.
//
// The server's size before our pending writes is also remembered: bytes at
// or past it that we did not write are holes, so a gap between two dirty
// extents there can be sent as zeros, and a file written with seeks (an
// object file with fixups) still goes out as one WRITE.

// keepReadMaxFile is the largest file whose READ data is kept as clean
// data (data we write is kept whatever the size, within cleanLimit).
const keepReadMaxFile = 8 << 20

// maxGapFill bounds the gap between dirty extents filled to merge them.
const maxGapFill = 128 << 10

// dataSnap is what write-back needs to know of a node's cached attributes.
type dataSnap struct {
	gen   uint64 // data generation
	size  uint64 // the server's size as cached
	valid bool   // cached data valid (no change we did not make seen)
	fresh bool   // and the attributes within their lifetime
}

func (fs *FS) dataSnapshot(n *inode) dataSnap {
	n.mu.Lock()
	defer n.mu.Unlock()
	_, _, fresh := n.cachedAttrLocked(fs.now())
	return dataSnap{gen: n.dataGen, size: n.attr.Size, valid: n.dataValid, fresh: fresh && n.dataValid}
}

// addCleanLocked records data known to be on the server. The clean list
// takes e.data itself (acknowledged WRITE data is shared with the unstable
// list, which keeps it for a resend, so it costs no second copy): e.data
// must never be written to afterwards.
//
// LOCKS_REQUIRED(st.mu)
func (w *writeback) addCleanLocked(st *fileState, gen uint64, e extent) {
	if st.cleanGen != gen {
		w.dropCleanLocked(st)
		st.cleanGen = gen
	}
	before := st.clean.bytes()
	st.clean = st.clean.insertShared(e.off, e.data)
	w.mu.Lock()
	w.cleanBytes += st.clean.bytes() - before
	w.mu.Unlock()
}

// dropCleanLocked drops the clean data. With it goes the record of which
// bytes past the base size we wrote: they are no longer known to be holes
// where no other data covers them (reads would get zeros, and a flush
// would fill a gap with zeros over data on the server), until the next
// base size is taken.
//
// LOCKS_REQUIRED(st.mu)
func (w *writeback) dropCleanLocked(st *fileState) {
	n := st.clean.bytes()
	st.clean = nil
	st.baseOK = false
	w.mu.Lock()
	w.cleanBytes -= n
	w.mu.Unlock()
}

// evictClean drops other files' clean data while the mount keeps more than
// cleanLimit. keep's is dropped last.
func (w *writeback) evictClean(keep *fileState) {
	w.mu.Lock()
	over := w.cleanBytes > cleanLimit
	var victims []*inode
	if over {
		for n := range w.files {
			victims = append(victims, n)
		}
	}
	w.mu.Unlock()
	for _, n := range victims {
		st := peek(n)
		if st == nil || st == keep {
			continue
		}
		st.mu.Lock()
		w.dropCleanLocked(st)
		st.mu.Unlock()
		w.release(n)
		w.mu.Lock()
		over = w.cleanBytes > cleanLimit
		w.mu.Unlock()
		if !over {
			return
		}
	}
	if over && keep != nil {
		keep.mu.Lock()
		w.dropCleanLocked(keep)
		keep.mu.Unlock()
	}
}

// interval is a half-open byte range.
type interval struct{ lo, hi uint64 }

// uncovered returns the parts of [lo, hi) that no extent of lists covers.
func uncovered(lo, hi uint64, lists ...extents) []interval {
	var iv []interval
	for _, l := range lists {
		for i := range l {
			e := &l[i]
			if e.end() > lo && e.off < hi {
				iv = append(iv, interval{max(e.off, lo), min(e.end(), hi)})
			}
		}
	}
	sort.Slice(iv, func(i, j int) bool { return iv[i].lo < iv[j].lo })
	var gaps []interval
	at := lo
	for _, x := range iv {
		if x.lo > at {
			gaps = append(gaps, interval{at, x.lo})
		}
		at = max(at, x.hi)
	}
	if at < hi {
		gaps = append(gaps, interval{at, hi})
	}
	return gaps
}

// knownLocked reports whether every byte of [lo, hi) is known without the
// server: in the given data, or a hole past the base size.
//
// LOCKS_REQUIRED(st.mu)
func (st *fileState) knownLocked(lo, hi, gen uint64, lists ...extents) bool {
	baseOK := st.baseOK && st.baseGen == gen
	for _, g := range uncovered(lo, hi, lists...) {
		if !baseOK || g.lo < st.baseSize {
			return false
		}
	}
	return true
}

// validCleanLocked returns the clean data if it is still valid.
//
// LOCKS_REQUIRED(st.mu)
func (st *fileState) validCleanLocked(gen uint64) extents {
	if st.cleanGen != gen {
		return nil
	}
	return st.clean
}

// fillGapsLocked merges dirty extents separated by small gaps whose bytes
// are known (clean data, or holes), so they go out as one WRITE.
//
// LOCKS_REQUIRED(st.mu)
func (w *writeback) fillGapsLocked(st *fileState, gen uint64) {
	if len(st.dirty) < 2 {
		return
	}
	clean := st.validCleanLocked(gen)
	merged := st.dirty[:1]
	var grown int64
	for _, e := range st.dirty[1:] {
		last := &merged[len(merged)-1]
		gap := e.off - last.end()
		if gap > maxGapFill || !st.knownLocked(last.end(), e.off, gen, clean) {
			merged = append(merged, e)
			continue
		}
		buf := make([]byte, uint64(len(last.data))+gap+uint64(len(e.data)))
		copy(buf, last.data)
		clean.overlay(last.end(), buf[len(last.data):uint64(len(last.data))+gap]) // the rest are zeros
		copy(buf[uint64(len(last.data))+gap:], e.data)
		*last = extent{off: last.off, data: buf}
		grown += int64(gap)
	}
	st.dirty = merged
	if grown > 0 {
		w.account(grown)
	}
}

// readLocal answers a read from data held here — clean, in flight or
// dirty, and holes — when every byte of it is known. size is the file's
// size as the reader sees it.
func (w *writeback) readLocal(n *inode, off uint64, dst []byte) (int, bool) {
	st := peek(n)
	if st == nil {
		return 0, false
	}
	// Like the kernel's page cache, data known valid is served without
	// revalidating: opening the file (close-to-open) is what revalidates.
	// A WRITE of ours completing between the snapshot and the lists moves
	// its data's end from the in-flight list into the node's size (see
	// localAttr): neither would show it, and the read would end at the
	// size before. The snapshot must be the same after the lists are read.
	for range 3 {
		snap := w.fs.dataSnapshot(n)
		if !snap.valid {
			return 0, false
		}
		got, ok := w.readLocalAt(st, snap, off, dst)
		if after := w.fs.dataSnapshot(n); after.gen == snap.gen && after.size == snap.size && after.valid {
			return got, ok
		}
	}
	return 0, false
}

// readLocalAt is readLocal for one snapshot of the node's data.
func (w *writeback) readLocalAt(st *fileState, snap dataSnap, off uint64, dst []byte) (int, bool) {
	st.mu.Lock()
	defer st.mu.Unlock()
	size := max(snap.size, st.dirty.lastEnd())
	for i := range st.inflight {
		size = max(size, st.inflight[i].end())
	}
	if off >= size {
		return 0, true
	}
	end := min(off+uint64(len(dst)), size)
	clean := st.validCleanLocked(snap.gen)
	inflight := extents(st.inflight)
	if !st.knownLocked(off, end, snap.gen, clean, inflight, st.dirty) {
		return 0, false
	}
	out := dst[:end-off]
	clear(out)
	clean.overlay(off, out)
	inflight.overlay(off, out)
	st.dirty.overlay(off, out)
	return len(out), true
}

// hasClean reports whether n has clean data of generation gen.
func (w *writeback) hasClean(n *inode, gen uint64) bool {
	st := peek(n)
	if st == nil {
		return false
	}
	st.mu.Lock()
	defer st.mu.Unlock()
	return len(st.validCleanLocked(gen)) > 0
}

// keepRead records data the server sent for a READ as clean data, when the
// file's data generation was the same before and after (no change we did
// not make was seen meanwhile) and we changed nothing in the file since
// the READ was sent (changes, from pendingIn, with nothing of ours pending
// in its range then). The server may have run the READ before a WRITE of
// ours that came back first: its bytes, kept, would replace the newer ones
// our WRITE left in the clean data, and later reads would get them (zeros,
// where the file had a hole).
func (w *writeback) keepRead(n *inode, genBefore, genAfter, changes uint64, off uint64, data []byte) {
	if genBefore != genAfter || len(data) == 0 {
		return
	}
	st := w.state(n)
	st.mu.Lock()
	if n.changes.Load() != changes {
		st.mu.Unlock()
		return
	}
	gaps := uncovered(off, off+uint64(len(data)), st.dirty, st.inflight)
	if len(gaps) == 1 && gaps[0] == (interval{off, off + uint64(len(data))}) {
		w.addCleanLocked(st, genAfter, extent{off: off, data: slices.Clone(data)})
	}
	st.mu.Unlock()
	w.evictClean(st)
}
