package client

import (
	"slices"
	"sort"
	"syscall"

	"hushfs/internal/proto"
)

// Reading ahead two levels. The walk reads ahead the subdirectories of the
// directories it enumerates (walk.go), but only those the kernel holds a
// node for, which it gets when it lists their parent. A walk that goes
// depth first reaches a parent's first subdirectory right after listing
// the parent: that subdirectory's read-ahead has only just begun, and the
// walk, waiting for it, sends it alone (over NFSv4.1, a COMPOUND of its
// own instead of a rider; grep -r of busybox: about 30 of its 169
// listings). So when a listing read ahead names subdirectories, they get
// nodes of ours at once (held: the kernel has none yet) and are read ahead
// in turn; when the kernel lists the parent, its listing hands out those
// very nodes, listings and all.
//
// Bounded: held nodes only down to aheadHoldDepth levels below a directory
// the kernel holds (two: the parent the walk is about to list and its
// subdirectories; deeper, a walk that stops would have read a whole
// subtree for nothing), at most aheadHolds held at once (with the walk's
// window, aheadWindow, bounding what is read), and every held node the
// kernel did not take is let go when the walk is over.
//
// Where read-ahead rides in calls sent anyway (proto.AheadCarrier), one
// level more (aheadHoldDepthCarried): a listing read ahead costs no round
// trip there, but one the walk reaches before a call carried it costs
// one. A chain of directories with few files (busybox's
// examples/var_service/dnsmasq/log: dnsmasq's first entry is log, and the
// directory before it holds one file) is otherwise found a level at a
// time, each level a carrier later, and the walk got to log first in half
// the runs of grep -r.

const (
	aheadHoldDepth        = 2
	aheadHoldDepthCarried = 3
	aheadHolds            = 64
)

// holdDepth is how many levels below a directory the kernel holds nodes
// are held for read-ahead.
func (fs *FS) holdDepth() int {
	if fs.carriesAhead() {
		return aheadHoldDepthCarried
	}
	return aheadHoldDepth
}

// hold makes a node for the directory fh, held for read-ahead depth levels
// below one the kernel holds, if the table has no node for fh (nil then).
func (t *inodeTable) hold(fh proto.FH, depth int) *inode {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.byFH[string(fh)] != nil {
		return nil
	}
	n := &inode{id: t.next, fh: append(proto.FH(nil), fh...), aheadHeld: true, aheadDepth: depth}
	t.next++
	t.byID[n.id] = n
	t.byFH[string(n.fh)] = n
	return n
}

// unhold lets go of a held node. One the kernel never took leaves the
// table uncounted (nothing went through it: dropCount's promise holds).
func (t *inodeTable) unhold(id NodeID) {
	t.mu.Lock()
	defer t.mu.Unlock()
	in := t.byID[id]
	if in == nil || !in.aheadHeld {
		return
	}
	in.aheadHeld = false
	drops := t.drops
	t.maybeDropLocked(in)
	t.drops = drops
}

// heldDepth is how many levels below a directory the kernel holds n is
// (0: the kernel holds n, or it is no held node).
func (t *inodeTable) heldDepth(n *inode) int {
	t.mu.Lock()
	defer t.mu.Unlock()
	if !n.aheadHeld || n.lookups > 0 {
		return 0
	}
	return n.aheadDepth
}

// takenOrGone reports whether the held node id is the kernel's now (or
// no longer held, or gone): the walk need hold it no longer.
func (t *inodeTable) takenOrGone(id NodeID) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	n := t.byID[id]
	return n == nil || !n.aheadHeld || n.lookups > 0
}

// holdSubdirs gives a node to each subdirectory that dir's kept listing
// names and the table has no node for, within the bounds above, so that
// subdirs(dir) finds them and they can be read ahead for walk session.
func (fs *FS) holdSubdirs(dir *inode, session uint64) {
	if fs.nodes.get(dir.id) != dir {
		return // let go of meanwhile
	}
	depth := fs.nodes.heldDepth(dir) + 1
	if depth > fs.holdDepth() {
		return
	}
	type sub struct {
		seq  uint64
		name string
		p    *plusData
	}
	var subs []sub
	dir.mu.Lock()
	if l := dir.list; l != nil && dir.namesValidLocked() {
		for name, e := range l.entries {
			if e.mode == syscall.S_IFDIR && e.plus != nil && e.plus.attr.Type == proto.TypeDir && name != "." && name != ".." {
				subs = append(subs, sub{e.seq, name, e.plus})
			}
		}
	}
	dir.mu.Unlock()
	sort.Slice(subs, func(i, j int) bool { return subs[i].seq < subs[j].seq })
	w := &fs.walk
	for _, s := range subs {
		// The room is taken before the node is made: passes ending
		// together each saw room for one more and held beyond the bound.
		w.mu.Lock()
		room := w.session == session && len(w.held)+w.holding < aheadHolds
		if room {
			w.holding++
		}
		w.mu.Unlock()
		if !room {
			return
		}
		n := fs.nodes.hold(s.p.fh, depth)
		if n == nil {
			w.mu.Lock()
			w.holding--
			w.mu.Unlock()
			continue
		}
		n.mu.Lock()
		fs.applyAttrLocked(n, &s.p.attr, s.p.at)
		n.parent, n.name = dir.id, s.name
		n.mu.Unlock()
		w.mu.Lock()
		w.holding--
		kept := w.session == session
		if kept {
			w.held = append(w.held, n.id)
		}
		w.mu.Unlock()
		if !kept {
			fs.nodes.unhold(n.id)
		}
	}
}

// releaseHeld lets go of the held nodes the kernel took since (its listing
// of their parent gave them out), or of all of them (the walk is over).
// The list keeps them until they are let go, so that it bounds what
// holdSubdirs holds meanwhile.
func (fs *FS) releaseHeld(all bool) {
	w := &fs.walk
	w.mu.Lock()
	held := slices.Clone(w.held)
	w.mu.Unlock()
	var gone []NodeID
	for _, id := range held {
		if all || fs.nodes.takenOrGone(id) {
			fs.nodes.unhold(id)
			gone = append(gone, id)
		}
	}
	if len(gone) > 0 {
		w.mu.Lock()
		w.held = slices.DeleteFunc(w.held, func(id NodeID) bool { return slices.Contains(gone, id) })
		w.mu.Unlock()
	}
}
