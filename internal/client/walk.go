package client

import (
	"context"
	"slices"
	"sort"
	"sync"
	"syscall"
	"time"

	"hushfs/internal/proto"
)

// Tree walks. du, find, git status and grep -r go through a tree one
// directory after another, and the client sees it: the kernel enumerates a
// directory (lists it, or asks for its entries' attributes in bulk), then
// its subdirectories and theirs. From then on the directories the walk will
// reach next — the subdirectories of those it enumerates — are read ahead
// with READDIRPLUS, several at a time, so that when the walk gets there
// their attributes and listings are fresh and it sends nothing.
//
// Bounded: at most aheadCalls passes in flight, at most aheadWindow
// directories read ahead beyond those the walk has visited (so a walk that
// stops wastes no more), aheadQueue directories waiting, and only
// directories whose pass is one call. A walk with no visit for
// walkIdle is over. A lone listing starts nothing: a walk begins only when
// two subdirectories of a directory, or a subdirectory of a subdirectory,
// are enumerated shortly after it; or, where read-ahead rides in other
// calls (proto.AheadCarrier), when a file of a subdirectory listed just
// after its parent is opened to be read (walkRead).

const (
	walkStart   = 2 * time.Second // enumerations this soon after their parent's show a walk
	walkIdle    = 2 * time.Second // a walk with no visit for this long is over
	visitGap    = time.Second     // lookups in a directory count as one visit per this
	aheadWindow = 32              // directories read ahead beyond the walk's visits
	aheadCalls  = 8               // read-ahead passes in flight at once
	aheadQueue  = 4096            // directories waiting to be read ahead
	// walkListsFresh: a walk reads ahead directories never listed once it
	// has listed this many itself. Two listings may show a walk (a build
	// listing its directory and one below it) that goes no further; reading
	// their never-listed siblings then is only waste.
	walkListsFresh = 3
)

// walker is the mount's walk state: one walk at a time (walks in several
// trees at once share it, and its window).
type walker struct {
	mu sync.Mutex
	// GUARDED_BY(mu)
	session  uint64     // the current walk (0: none yet); numbers never reused
	start    time.Time  // when the directory it began at was enumerated
	last     time.Time  // its last visit
	visits   int        // directories it visited
	lists    int        // distinct directories it listed (enumerated)
	issued   int        // directories read ahead for it
	inflight int        // read-ahead passes under way (any walk)
	queue    []aheadDir // directories to read ahead, in the walk's preorder (walkorder.go)
	unlisted []aheadDir // never-listed ones held until the walk has listed walkListsFresh
	queued   map[NodeID]bool
	keys     map[NodeID]walkKey // directories' places in the preorder, as far as worked out
	held     []NodeID           // nodes made to read directories ahead (walkhold.go)
	holding  int                // nodes holdSubdirs is making (with held, bounded by aheadHolds)
	cred     Cred               // the identity read-ahead is sent with: the walker's
}

// visitDir records the kernel's interest in dir — a listing pass (enum),
// a refresh it asked for (enum), a lookup in it, its entries' attributes —
// and reports whether a walk is at dir. A walk begins when enumerations
// go down the tree (below).
func (fs *FS) visitDir(c *Cred, dir *inode, enum bool) bool {
	return fs.visitDirShown(c, dir, enum, false)
}

// visitDirShown is visitDir; shown says a walk shows at dir whatever the
// enumerations before it (walkRead).
func (fs *FS) visitDirShown(c *Cred, dir *inode, enum, shown bool) bool {
	if !fs.bulkOn() {
		return false
	}
	now := fs.now()
	dir.mu.Lock()
	b := dir.bulkLocked()
	if !enum && now.Sub(b.visitAt) < visitGap {
		walking := b.visitWalk
		dir.mu.Unlock()
		return walking
	}
	b.visitAt = now
	pid, seen, ahead, listed := dir.parent, b.walkSeen, b.aheadIn, b.listedIn
	dir.mu.Unlock()
	// A walk shows as enumerations going down the tree: a third level
	// (parent, child, grandchild), or a second child of one directory,
	// each within walkStart of its parent's. (One child enumerated after
	// its parent is often no walk: git clone lists the directory it clones
	// into, then stats in its .git.)
	var penum time.Time
	chain, evidence := 1, false
	p := fs.nodes.get(pid)
	if p != nil && p != dir {
		p.mu.Lock()
		if pb := p.bulk; pb != nil {
			penum = pb.enumAt
			if enum && now.Sub(penum) < walkStart {
				if pb.lastKid != dir.id {
					pb.kids++
					pb.lastKid = dir.id
				}
				chain = pb.chain + 1
				evidence = chain >= 3 || pb.kids >= 2 || shown
			}
		}
		p.mu.Unlock()
	}
	if enum {
		dir.mu.Lock()
		b.chain = chain
		dir.mu.Unlock()
	}

	w := &fs.walk
	w.mu.Lock()
	active := w.session != 0 && now.Sub(w.last) < walkIdle
	in := active && (seen == w.session || ahead == w.session || !penum.IsZero() && !penum.Before(w.start))
	began, over := false, false
	if !in && evidence {
		if !active {
			over = len(w.held) > 0
			w.session++
			w.start, w.visits, w.issued, w.lists = penum, 0, 0, 0
			w.queue, w.unlisted = w.queue[:0], w.unlisted[:0]
			clear(w.queued)
			clear(w.keys)
		}
		in, began = true, true
	}
	session := w.session
	if in {
		w.last = now
		if seen != session {
			w.visits++
		}
		if enum && listed != session {
			// Directories, not listings: a build listing one directory
			// over and over goes nowhere.
			if w.lists++; w.lists == walkListsFresh {
				// A walk through directories never listed (grep -r, find
				// on a fresh mount): read those ahead too, the held first.
				w.dueLocked()
			}
		}
		w.cred = Cred{UID: c.UID, GID: c.GID, Groups: append(w.cred.Groups[:0:0], c.Groups...)}
	}
	w.mu.Unlock()
	if over {
		fs.releaseHeld(true) // the last walk's
	}

	dir.mu.Lock()
	b.visitWalk = in
	if in {
		b.walkSeen = session
		if enum {
			b.listedIn = session
		}
	}
	dir.mu.Unlock()
	if began {
		// Where the walk goes next: into dir, then on through its
		// parent's other subdirectories, and those of every directory
		// the walk came down through (each enumerated shortly before its
		// child: chain), all in the walk's preorder. grep -r enters a
		// directory holding only a directory, and that one's, before it
		// opens anything: the walk shows two levels below the root, and
		// the root's other subdirectories are where it goes after.
		fs.enqueueSubdirs(dir, 0)
		for q, kid, up := p, dir, max(chain-1, 1); q != nil && q != kid && up > 0; up-- {
			fs.enqueueSubdirs(q, kid.id)
			q.mu.Lock()
			pp := q.parent
			q.mu.Unlock()
			q, kid = fs.nodes.get(pp), q
		}
	}
	if in {
		fs.pump()
	}
	return in
}

// walkRead is told that the kernel opens file n to read it. A walk that
// reads the files of a directory it listed is a recursive reader (grep -r),
// not a build listing a directory and one below it: the never-listed
// directories it held back (walkListsFresh) are read ahead from now on,
// riding in those opens' COMPOUNDs over NFSv4.1, instead of after its
// third listing (each of the first three a round trip of its own). Each
// such open is a visit too: the walk is not idle while it reads.
func (fs *FS) walkRead(c *Cred, n *inode) {
	if !fs.bulkOn() {
		return
	}
	n.mu.Lock()
	pid := n.parent
	n.mu.Unlock()
	dir := fs.nodes.get(pid)
	if dir == nil || dir == n {
		return
	}
	now := fs.now()
	listed, early := fs.walkListed(dir, now)
	w := &fs.walk
	w.mu.Lock()
	if w.session == 0 || listed != w.session || now.Sub(w.last) >= walkIdle {
		w.mu.Unlock()
		if !early || !fs.carriesAhead() {
			return
		}
		// Listing a directory just after its parent and reading its
		// files is how a recursive reader begins (grep -r: the export's
		// root, its first subdirectory, that one's files). Where
		// read-ahead rides in the calls the walk sends anyway (NFSv4.1:
		// the opens that follow), that is enough to begin a walk there:
		// its first listings then ride too, instead of each being the
		// kernel's own round trip until a second subdirectory shows the
		// walk. Elsewhere each listing read ahead is a call of its own,
		// and a build that lists a directory, one below it and reads a
		// file there would pay for a walk it does not make.
		if !fs.visitDirShown(c, dir, true, true) {
			return
		}
		listed, _ = fs.walkListed(dir, now)
		w.mu.Lock()
		if w.session == 0 || listed != w.session {
			w.mu.Unlock()
			return
		}
	}
	// Reading the files of a directory it listed is the walk going on:
	// a directory of many files takes grep longer than walkIdle, and a
	// walk over by then would let go of what it read ahead (walkhold.go)
	// and have to show itself again (each listing until then alone).
	w.last = now
	if w.lists >= walkListsFresh {
		w.mu.Unlock()
		fs.pump()
		return
	}
	w.lists = walkListsFresh
	w.dueLocked()
	w.mu.Unlock()
	fs.pump()
}

// walkListed returns the walk dir was listed in, and whether dir was
// listed within walkStart of its parent (early: the second level of a
// walk that may be beginning).
func (fs *FS) walkListed(dir *inode, now time.Time) (listed uint64, early bool) {
	dir.mu.Lock()
	defer dir.mu.Unlock()
	if dir.bulk == nil {
		return 0, false
	}
	b := dir.bulk
	return b.listedIn, b.chain >= 2 && now.Sub(b.enumAt) < walkStart
}

// carriesAhead reports whether the protocol carries read-ahead in the
// calls it sends anyway (proto.AheadCarrier).
func (fs *FS) carriesAhead() bool {
	ac, ok := fs.srv.(proto.AheadCarrier)
	return ok && ac.CarriesAhead()
}

// refreshed is told that a pass over dir ended (ahead: a read-ahead one).
// A directory the walk enumerated leads it on into its subdirectories.
func (fs *FS) refreshed(dir *inode, ahead bool, err error) {
	w := &fs.walk
	now := fs.now()
	w.mu.Lock()
	if ahead {
		w.inflight--
	}
	session := w.session
	active := session != 0 && now.Sub(w.last) < walkIdle
	w.mu.Unlock()
	if !active {
		return
	}
	dir.mu.Lock()
	inWalk := dir.bulk != nil && (dir.bulk.walkSeen == session || dir.bulk.aheadIn == session)
	dir.mu.Unlock()
	if err == nil && inWalk {
		if ahead {
			fs.holdSubdirs(dir, session)
		}
		fs.enqueueSubdirs(dir, 0)
	}
	fs.pump()
}

// walkOn is told that the kernel listed dir to its end, from the server
// (fromServer) or from a listing kept. If the walk read dir ahead, or is
// at it and listed it from the server (a directory never listed before:
// grep -r, find on a fresh mount), its subdirectories are where the walk
// goes next: they now have nodes (the listing gave the kernel its
// entries), so they can be read ahead in turn. No refresh of dir leads the
// walk on there: a read-ahead pass ended before the kernel held the
// subdirectories, and a listing for the kernel is no refresh.
func (fs *FS) walkOn(dir *inode, fromServer bool) {
	w := &fs.walk
	now := fs.now()
	w.mu.Lock()
	session := w.session
	active := session != 0 && now.Sub(w.last) < walkIdle
	w.mu.Unlock()
	if !active {
		return
	}
	dir.mu.Lock()
	on := dir.bulk != nil && (dir.bulk.aheadIn == session || fromServer && dir.bulk.walkSeen == session)
	dir.mu.Unlock()
	if on {
		// The kernel holds dir's subdirectories now: what their listings
		// read ahead name, two levels below them, is read ahead too.
		for _, id := range fs.enqueueSubdirs(dir, 0) {
			if n := fs.nodes.get(id); n != nil {
				fs.holdSubdirs(n, session)
				for _, id2 := range fs.enqueueSubdirs(n, 0) {
					if n2 := fs.nodes.get(id2); n2 != nil {
						fs.holdSubdirs(n2, session)
					}
				}
			}
		}
		fs.pump()
	}
}

// subdirs returns dir's subdirectories that the kernel holds, in listing
// order (the server's, which du and find follow), or by name when no
// complete listing is kept.
func (fs *FS) subdirs(dir *inode) []NodeID {
	if dir == nil {
		return nil
	}
	var fhs []proto.FH
	var ids []NodeID
	dir.mu.Lock()
	if l := dir.list; l != nil && dir.namesValidLocked() {
		type sub struct {
			seq uint64
			fh  proto.FH
		}
		var subs []sub
		for name, e := range l.entries {
			if e.mode == syscall.S_IFDIR && e.plus != nil && name != "." && name != ".." {
				subs = append(subs, sub{e.seq, e.plus.fh})
			}
		}
		sort.Slice(subs, func(i, j int) bool { return subs[i].seq < subs[j].seq })
		for _, s := range subs {
			fhs = append(fhs, s.fh)
		}
	} else {
		names := make([]string, 0, len(dir.names))
		for name, e := range dir.names {
			if e.node != 0 {
				names = append(names, name)
			}
		}
		slices.Sort(names)
		for _, name := range names {
			ids = append(ids, dir.names[name].node)
		}
	}
	dir.mu.Unlock()
	for _, fh := range fhs {
		if n := fs.nodes.live(fh); n != nil {
			ids = append(ids, n.id)
		}
	}
	out := ids[:0]
	for _, id := range ids {
		if n := fs.nodes.get(id); n != nil && n != dir {
			n.mu.Lock()
			isDir := n.attrValid && n.attr.Type == proto.TypeDir
			n.mu.Unlock()
			if isDir {
				out = append(out, id)
			}
		}
	}
	return out
}

// enqueueSubdirs adds dir's subdirectories (but skip) to read ahead, each
// at its place in the walk's preorder, and returns them. Their keys are
// kept, so that theirs in turn need no walk up the tree. Past aheadQueue
// the furthest are dropped.
func (fs *FS) enqueueSubdirs(dir *inode, skip NodeID) []NodeID {
	ids, keys := fs.subdirKeys(dir, skip)
	w := &fs.walk
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.queued == nil {
		w.queued = map[NodeID]bool{}
	}
	for i, id := range ids {
		w.setKeyLocked(id, keys[i])
		if !w.queued[id] {
			w.queued[id] = true
			w.insertLocked(aheadDir{id, keys[i]})
		}
	}
	w.trimLocked()
	return ids
}

// dueLocked queues the never-listed directories held back: the walk goes
// through such directories. w.mu is held.
func (w *walker) dueLocked() {
	for _, d := range w.unlisted {
		w.insertLocked(d)
	}
	w.unlisted = nil
	w.trimLocked()
}

// trimLocked drops the furthest past aheadQueue. w.mu is held.
func (w *walker) trimLocked() {
	if len(w.queue) > aheadQueue {
		for _, d := range w.queue[aheadQueue:] {
			delete(w.queued, d.id)
		}
		w.queue = w.queue[:aheadQueue]
	}
}

// pump starts read-ahead passes while the walk goes on and its window and
// the calls in flight allow.
func (fs *FS) pump() {
	w := &fs.walk
	for {
		now := fs.now()
		w.mu.Lock()
		if w.session != 0 && now.Sub(w.last) >= walkIdle && len(w.held) > 0 {
			w.mu.Unlock()
			fs.releaseHeld(true) // the walk is over
			return
		}
		if len(w.queue) == 0 || w.inflight >= aheadCalls || w.issued >= w.visits+aheadWindow ||
			w.session == 0 || now.Sub(w.last) >= walkIdle {
			w.mu.Unlock()
			fs.releaseHeld(false)
			return
		}
		d := w.queue[0]
		id := d.id
		w.queue = w.queue[1:]
		delete(w.queued, id)
		session := w.session
		cred := Cred{UID: w.cred.UID, GID: w.cred.GID, Groups: append([]uint32(nil), w.cred.Groups...)}
		w.inflight++
		w.issued++
		w.mu.Unlock()
		started, hold := false, false
		if dir := fs.nodes.get(id); dir != nil {
			started, hold = fs.startAhead(dir, &cred, session)
		}
		if started {
			continue
		}
		w.mu.Lock()
		w.inflight--
		w.issued--
		if hold && w.session == session && len(w.unlisted) < aheadQueue {
			if w.lists >= walkListsFresh {
				w.insertLocked(d) // became due meanwhile
				w.queued[id] = true
			} else {
				w.unlisted = append(w.unlisted, d)
			}
		}
		w.mu.Unlock()
	}
}

// startAhead reads dir ahead of the walk if that brings anything: a
// listing the walk would read itself (none kept, or the directory's
// attributes expired), or entries' attributes that expired. Not for a
// directory under way, nor one whose pass takes more than one call
// (memory: the walk's own demand refreshes those). A directory never
// listed is read too: the walk lists it next (grep -r, find on a fresh
// mount), and its listing then gives the kernel its entries with no call.
//
// hold reports a directory never listed that waits for the walk to show
// it goes through such directories (walkListsFresh).
func (fs *FS) startAhead(dir *inode, c *Cred, session uint64) (started, hold bool) {
	now := fs.now()
	dir.mu.Lock()
	b := dir.bulkLocked()
	_, _, fresh := dir.cachedAttrLocked(now)
	want := dir.attrValid && dir.attr.Type == proto.TypeDir && b.refresh == nil &&
		now.Sub(b.failAt) >= bulkDemandWindow && now.Sub(b.freshAt) >= fs.opts.AcRegMin &&
		// The kernel began listing it: that listing reads it.
		(b.listedAt.IsZero() || now.Sub(b.listedAt) >= bulkHintWindow) &&
		fs.passCallsLocked(dir) <= 1
	stale := !fresh || dir.list == nil || !dir.namesValidLocked()
	if want && !dir.knowsEntriesLocked() {
		fs.walk.mu.Lock()
		hold = fs.walk.lists < walkListsFresh
		fs.walk.mu.Unlock()
	}
	var ids []NodeID
	if want && !stale {
		for _, e := range dir.names {
			if e.node != 0 {
				ids = append(ids, e.node)
			}
		}
	}
	dir.mu.Unlock()
	for _, id := range ids {
		if stale {
			break
		}
		if n := fs.nodes.get(id); n != nil {
			n.mu.Lock()
			_, _, ok := n.cachedAttrLocked(now)
			n.mu.Unlock()
			stale = !ok
		}
	}
	if !want || !stale || hold {
		return false, hold
	}
	_, started = fs.startRefresh(context.WithValue(fs.life, OriginKey{}, "readahead"), c, dir, session)
	return started, false
}
