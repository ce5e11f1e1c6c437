package client

import (
	"math"
	"slices"
)

// The order of read-ahead. A walk (du, find, grep -r) goes through a tree
// depth first in listing order: a directory, its first subdirectory and
// all below it, then its second. The directories it will reach next are
// therefore not the oldest queued but the first in that preorder, and a
// subdirectory found by a listing read ahead is wanted before its
// parent's later siblings: grep enters examples/var_service/dnsmasq and
// at once its first entry, log, with no file opened in between, so log's
// listing must be asked before the walk gets to dnsmasq. Queued oldest
// first (log behind every sibling of dnsmasq), it went alone in every
// grep -r of busybox over NFSv4.1, with no open to ride in.
//
// So the queue is kept in preorder: a directory's key is its place among
// its parent's subdirectories (listing order), after its parent's key.
// Directories the walk has passed stay at the front only until the pass
// finds them listed (startAhead), and what lies far ahead in the preorder
// waits for the window (aheadWindow) as before.

// walkKey is a directory's place in the preorder: its ancestors' places
// below the mount's root and its own, each an index among its parent's
// subdirectories. Keys compare as slices do: a parent before its
// subdirectories, those before the parent's next sibling.
type walkKey []uint32

// maxKeyDepth bounds the ancestors a key is worked out through; deeper
// directories sort after everything at that depth.
const maxKeyDepth = 256

// maxWalkKeys bounds the keys kept for a walk (one per directory queued
// or on the way to one); past it they are worked out again.
const maxWalkKeys = 4 * aheadQueue

// walkKeyOf returns dir's key, worked out through its ancestors where it
// is not known. It takes node locks, so the caller must not hold the
// walker's.
func (fs *FS) walkKeyOf(dir *inode) walkKey {
	w := &fs.walk
	var chain []*inode // dir, its parent, …: those without a key
	var base walkKey
	for n := dir; ; {
		w.mu.Lock()
		k, ok := w.keys[n.id]
		w.mu.Unlock()
		if ok {
			base = k
			break
		}
		chain = append(chain, n)
		n.mu.Lock()
		pid := n.parent
		n.mu.Unlock()
		p := fs.nodes.get(pid)
		if p == nil || p == n || len(chain) >= maxKeyDepth {
			// The mount's root, or a directory whose parent is gone:
			// the top of the order.
			base = walkKey{}
			chain = chain[:len(chain)-1]
			if p == nil || p == n {
				w.setKey(n.id, base)
			} else {
				base = walkKey{math.MaxUint32}
			}
			break
		}
		n = p
	}
	// Down again: each one's place among its parent's subdirectories.
	for i := len(chain) - 1; i >= 0; i-- {
		n := chain[i]
		n.mu.Lock()
		pid := n.parent
		n.mu.Unlock()
		place := uint32(math.MaxUint32) // not (yet) in its parent's listing: after those that are
		if j := slices.Index(fs.subdirs(fs.nodes.get(pid)), n.id); j >= 0 {
			place = uint32(j)
		}
		base = append(base[:len(base):len(base)], place)
		w.setKey(n.id, base)
	}
	return base
}

// setKey keeps id's key.
func (w *walker) setKey(id NodeID, k walkKey) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.setKeyLocked(id, k)
}

// setKeyLocked is setKey with w.mu held.
func (w *walker) setKeyLocked(id NodeID, k walkKey) {
	if w.keys == nil || len(w.keys) >= maxWalkKeys {
		w.keys = map[NodeID]walkKey{}
	}
	w.keys[id] = k
}

// subdirKeys returns dir's subdirectories the kernel holds, but skip, with
// their keys (dir's, then their place among its subdirectories).
func (fs *FS) subdirKeys(dir *inode, skip NodeID) ([]NodeID, []walkKey) {
	subs := fs.subdirs(dir)
	if len(subs) == 0 {
		return nil, nil
	}
	dk := fs.walkKeyOf(dir)
	ids := make([]NodeID, 0, len(subs))
	keys := make([]walkKey, 0, len(subs))
	for i, id := range subs {
		if id == skip {
			continue
		}
		k := append(dk[:len(dk):len(dk)], uint32(i))
		ids = append(ids, id)
		keys = append(keys, k)
	}
	return ids, keys
}

// aheadDir is a directory queued to be read ahead, with its key.
type aheadDir struct {
	id  NodeID
	key walkKey
}

// insertLocked puts d into the queue at its place in the preorder (after
// those of an equal key). w.mu is held.
func (w *walker) insertLocked(d aheadDir) {
	i, _ := slices.BinarySearchFunc(w.queue, d.key, func(q aheadDir, k walkKey) int {
		if c := slices.Compare(q.key, k); c != 0 {
			return c
		}
		return -1 // equal keys: after the one queued
	})
	w.queue = slices.Insert(w.queue, i, d)
}
