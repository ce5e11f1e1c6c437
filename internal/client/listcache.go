package client

import (
	"sort"
	"time"

	"hushfs/internal/nfs3"
)

// A directory's complete listing is kept once a reader has listed it from
// the first cookie to EOF without the directory changing meanwhile. Like
// the name cache, it describes one version of the directory and is dropped
// with the names when another version shows up; our own CREATE, REMOVE,
// RENAME and LINK, which the wcc check proves are the only changes, are
// applied to it instead. While it is valid:
//   - a new listing is served from it, with no READDIR (the offsets handed
//     to that reader are positions in a snapshot, stable for its stream);
//   - a name it does not have does not exist: no LOOKUP to learn that.

// dirList is a directory's complete listing.
type dirList struct {
	entries map[string]*listEntry
	dots    bool   // the server lists "." and ".."
	dotdot  uint64 // the fileid it gives ".."
}

// listEntry is one name of a complete listing.
type listEntry struct {
	fileid uint64
	mode   uint32    // file type bits when known
	plus   *plusData // handle and attributes, when known
	seq    uint64    // listing order: server order, then our additions
}

// listSeq orders entries added after the listing: after every listed one.
const listSeqOwn = 1 << 62

// pendingList gathers a stream's entries while it might become complete.
type pendingList struct {
	startGen uint64     // the directory's namesGen when the stream began
	startVer dirVersion // and its version
	entries  []pendingEntry
	dots     bool
	dotdot   uint64
}

type pendingEntry struct {
	name   string
	fileid uint64
	mode   uint32
	plus   *plusData
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

// finishPending installs a stream's entries as the directory's complete
// listing if the directory did not change while they were read.
func (fs *FS) finishPending(dir *inode, p *pendingList) {
	dir.mu.Lock()
	defer dir.mu.Unlock()
	if p == nil || dir.namesGen != p.startGen || !dir.namesValidLocked() || dir.nameVer != p.startVer {
		return
	}
	l := &dirList{entries: make(map[string]*listEntry, len(p.entries)), dots: p.dots, dotdot: p.dotdot}
	for i, e := range p.entries {
		l.entries[e.name] = &listEntry{fileid: e.fileid, mode: e.mode, plus: e.plus, seq: uint64(i)}
	}
	dir.list = l
}

// listChangeLocked applies our own change of name in dir to its complete
// listing: n is what the name now is (nil: removed). With no node to record
// (a rename we could not follow), the listing is dropped.
//
// LOCKS_REQUIRED(dir.mu)
func (dir *inode) listChangeLocked(name string, n *inode, removed bool) {
	if dir.list == nil {
		return
	}
	if removed {
		delete(dir.list.entries, name)
		return
	}
	if n == nil {
		dir.list = nil
		return
	}
	n.mu.Lock()
	e := &listEntry{seq: listSeqOwn + uint64(len(dir.list.entries))}
	if n.attrValid {
		e.fileid, e.mode = n.attr.Fileid, typeBits[n.attr.Type]
		e.plus = &plusData{fh: n.fh, attr: n.attr, at: n.attrTime}
	}
	n.mu.Unlock()
	dir.list.entries[name] = e
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

// listSnapshotLocked returns the complete listing as a stream's entries,
// with offsets 1, 2, ... and, for plus streams, the handles and attributes
// (nil when any entry lacks them: then the server must be asked).
//
// LOCKS_REQUIRED(dir.mu)
func (fs *FS) listSnapshotLocked(dir *inode, plus bool) ([]DirEntry, []plusData, bool) {
	l := dir.list
	if l == nil || !dir.namesValidLocked() {
		return nil, nil, false
	}
	names := make([]string, 0, len(l.entries))
	for name, e := range l.entries {
		if plus && e.plus == nil {
			return nil, nil, false
		}
		names = append(names, name)
	}
	sort.Slice(names, func(i, j int) bool { return l.entries[names[i]].seq < l.entries[names[j]].seq })
	var out []DirEntry
	var pd []plusData
	add := func(name string, fileid uint64, mode uint32, p *plusData) {
		out = append(out, DirEntry{Name: name, Ino: fileid, Mode: mode, Cookie: uint64(len(out) + 1)})
		if plus {
			if p != nil {
				pd = append(pd, *p)
			} else {
				pd = append(pd, plusData{})
			}
		}
	}
	if l.dots {
		add(".", dir.attr.Fileid, typeBits[nfs3.TypeDir], nil)
		add("..", l.dotdot, typeBits[nfs3.TypeDir], nil)
	}
	for _, name := range names {
		e := l.entries[name]
		add(name, e.fileid, e.mode, e.plus)
	}
	return out, pd, true
}
