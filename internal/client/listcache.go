package client

import (
	"cmp"
	"slices"
	"time"

	"hushfs/internal/proto"
)

// A directory's complete listing is kept once a reader has listed it from
// the first cookie to EOF without the directory changing meanwhile. Like
// the name cache, it describes one version of the directory and is dropped
// with the names when another version shows up; our own CREATE, REMOVE,
// RENAME and LINK, which the wcc check proves are the only changes, are
// applied to it instead. While it is valid:
//   - a new listing is served from it, with no READDIR, in the server's
//     order (names we added since at the end), so a rewound pass of an
//     unchanged directory lists it as the pass from the server did;
//   - a name it does not have does not exist: no LOOKUP to learn that.
//
// A directory our own MKDIR made starts with an empty listing of this kind
// (made): the reply's attributes show the version in which it is empty,
// and the wcc check carries the listing through our own changes from
// there. It answers lookups of absent names (untar and checkout ask for
// every name before creating it) but is never served as a listing: it has
// no server cookies, nor "." and "..". A pass from the server replaces it.
//
// It keeps the server's cookie after each entry, so a stream that read a
// pass from it can read on from the server after any of its entries.

// dirList is a directory's complete listing.
type dirList struct {
	entries map[string]*listEntry // "." and ".." too, when the server lists them
	verf    proto.Verf            // the cookie verifier it was read with
	end     uint64                // the server's cookie after its last entry
	nextSeq uint64                // the order of the next name we add
	made    bool                  // started empty by our MKDIR, not read from the server
	// kernelUntil: the kernel holds the listing's names (dentries, from a
	// plus pass of it to the end) until then (dircache.go).
	kernelUntil time.Time
}

// listEntry is one name of a complete listing.
type listEntry struct {
	fileid uint64
	mode   uint32    // file type bits when known
	plus   *plusData // handle and attributes, when known
	seq    uint64    // listing order: server order, then our additions
	// cookie is the server's cookie after the entry; for a name we added,
	// the listing's end (the server has it somewhere we do not know: after
	// it comes, of what the listing had, nothing).
	cookie uint64
}

// listSeqOwn orders entries added after the listing: after every listed one.
const listSeqOwn = 1 << 62

// pendingList gathers a stream's entries while it might become complete.
type pendingList struct {
	startGen uint64     // the directory's namesGen when the stream began
	startVer dirVersion // and its version
	entries  []pendingEntry
}

type pendingEntry struct {
	name   string
	fileid uint64
	mode   uint32
	plus   *plusData
	cookie uint64
}

// beginPendingLocked starts collecting a stream's entries from cookie 0.
//
// LOCKS_REQUIRED(dir.mu)
func (fs *FS) beginPendingLocked(dir *inode) *pendingList {
	if !fs.cachingNames() || !dir.namesValidLocked() {
		return nil
	}
	return &pendingList{startGen: dir.namesGen, startVer: dir.nameVer}
}

// finishPending installs a stream's entries, read with verf up to end, as
// the directory's complete listing if the directory did not change while
// they were read.
func (fs *FS) finishPending(dir *inode, p *pendingList, verf proto.Verf, end uint64) {
	dir.mu.Lock()
	defer dir.mu.Unlock()
	if p == nil || dir.namesGen != p.startGen || !dir.namesValidLocked() || dir.nameVer != p.startVer {
		return
	}
	l := &dirList{entries: make(map[string]*listEntry, len(p.entries)), verf: verf, end: end, nextSeq: listSeqOwn}
	for i, e := range p.entries {
		l.entries[e.name] = &listEntry{fileid: e.fileid, mode: e.mode, plus: e.plus, seq: uint64(i), cookie: e.cookie}
	}
	dir.list = l
}

// madeEmptyLocked gives dir, which our MKDIR just made and whose attributes
// are those of the MKDIR's reply, its empty listing.
//
// LOCKS_REQUIRED(dir.mu)
func (fs *FS) madeEmptyLocked(dir *inode) {
	if !fs.cachingNames() || fs.opts.LookupCache != LookupCacheAll || !dir.namesValidLocked() || dir.list != nil {
		return
	}
	dir.list = &dirList{entries: map[string]*listEntry{}, nextSeq: listSeqOwn, made: true}
}

// servedListLocked returns dir's complete listing for its current version
// if it is one listings may be served from (not a made one), else nil.
//
// LOCKS_REQUIRED(dir.mu)
func (dir *inode) servedListLocked() *dirList {
	if l := dir.list; l != nil && !l.made && dir.namesValidLocked() {
		return l
	}
	return nil
}

// listChangeLocked applies our own change of name in dir to its complete
// listing: n is what the name now is (nil: removed). With no node to record
// (a rename we could not follow), the listing is dropped. A name that stays
// keeps its place.
//
// LOCKS_REQUIRED(dir.mu)
func (dir *inode) listChangeLocked(name string, n *inode, removed bool) {
	l := dir.list
	if l == nil {
		return
	}
	if removed {
		delete(l.entries, name)
		return
	}
	if n == nil {
		dir.list = nil
		return
	}
	e := &listEntry{seq: l.nextSeq, cookie: l.end}
	if old := l.entries[name]; old != nil {
		e.seq, e.cookie = old.seq, old.cookie
	} else {
		l.nextSeq++
	}
	n.mu.Lock()
	if n.attrValid {
		e.fileid, e.mode = n.attr.Fileid, typeBits[n.attr.Type]
		e.plus = &plusData{fh: n.fh, attr: n.attr, at: n.attrTime}
	}
	n.mu.Unlock()
	l.entries[name] = e
}

// changeName records our own change of name in dir: in the name cache and
// in the complete listing. n is the node name now is, nil if removed.
func (fs *FS) changeName(dir *inode, name string, n *inode, at time.Time) {
	dir.mu.Lock()
	defer dir.mu.Unlock()
	if !dir.namesValidLocked() {
		dir.list = nil
	}
	if n == nil {
		fs.setNameLocked(dir, name, 0, at, true)
		dir.listChangeLocked(name, nil, true)
		return
	}
	fs.setNameLocked(dir, name, n.id, at, true)
	dir.listChangeLocked(name, n, false)
}

// listedAbsentLocked reports whether dir's complete listing shows that name
// does not exist.
//
// LOCKS_REQUIRED(dir.mu)
func (dir *inode) listedAbsentLocked(name string) bool {
	if dir.list == nil || !dir.namesValidLocked() || name == "." || name == ".." {
		return false
	}
	_, ok := dir.list.entries[name]
	return !ok
}

// listSnapshot is a complete listing as a stream reads it.
type listSnapshot struct {
	entries []DirEntry
	plus    []plusData // parallel to entries in a plus snapshot (nil fh: none)
	verf    proto.Verf
}

// listSnapshotLocked returns the complete listing as a stream's entries in
// listing order and, for plus streams, their handles and attributes (no
// snapshot when a name other than "." and ".." lacks them: then the server
// must be asked).
//
// LOCKS_REQUIRED(dir.mu)
func (fs *FS) listSnapshotLocked(dir *inode, plus bool) (listSnapshot, bool) {
	l := dir.list
	if l == nil || l.made || !dir.namesValidLocked() {
		return listSnapshot{}, false
	}
	// Sorted with the entries at hand: looking them up by name in the
	// comparison was most of a 100,000-entry snapshot's cost.
	type named struct {
		name string
		e    *listEntry
	}
	order := make([]named, 0, len(l.entries))
	for name, e := range l.entries {
		if plus && e.plus == nil && name != "." && name != ".." {
			return listSnapshot{}, false
		}
		order = append(order, named{name, e})
	}
	slices.SortFunc(order, func(a, b named) int { return cmp.Compare(a.e.seq, b.e.seq) })
	s := listSnapshot{entries: make([]DirEntry, len(order)), verf: l.verf}
	if plus {
		s.plus = make([]plusData, len(order))
	}
	for i, o := range order {
		e := o.e
		s.entries[i] = DirEntry{Name: o.name, Ino: e.fileid, Mode: e.mode, Cookie: fs.dirOffset(o.name), cookie: e.cookie}
		if plus && e.plus != nil {
			s.plus[i] = *e.plus
		}
	}
	return s, true
}
