package client

import (
	"sync"
	"sync/atomic"
	"time"

	"hushfs/internal/proto"
)

// NodeID names a server file for the life of a mount (a FUSE nodeid).
type NodeID uint64

// RootID is the node ID of the export's root, as FUSE requires.
const RootID NodeID = 1

// inode is the client's state for one server file handle.
type inode struct {
	id NodeID
	fh proto.FH // immutable; owned copy

	// GUARDED_BY(inodeTable.mu)
	lookups uint64 // references held by the kernel
	opens   int    // open files and directories on this node
	dropped bool   // removed from the table; a new lookup makes a new node
	stale   bool   // the server said the handle is stale: names must not lead here
	// aheadHeld: a directory's node made to read it ahead of a walk before
	// the kernel holds it, aheadDepth levels below one it holds (walkhold.go).
	aheadHeld  bool
	aheadDepth int

	// sizing is held (read-locked) by a SETATTR of the size while it runs,
	// and taken by an open to wait for them (Open): the kernel ignores
	// every attribute reply for the file while its truncate is under way
	// (FUSE_I_SIZE_UNSTABLE), so an open meanwhile could not give the
	// kernel the size it found, and the reader would stop at the size
	// the kernel cached before (a version older than the last close).
	sizing sync.RWMutex

	mu sync.Mutex
	// GUARDED_BY(mu)
	attr      proto.Attr
	attrValid bool
	attrTime  time.Time     // when attr was fetched (the RPC's start)
	attrRecv  time.Time     // when attr arrived: calls sent later ran later
	attrTimeo time.Duration // current attribute cache lifetime (grows while unchanged)
	// attrStale: when the attributes were last known to change without
	// new ones (invalidateAttr); replies to calls sent before are older.
	attrStale time.Time
	// dataMtime/dataSize: the server's mtime and size when our cached data
	// (kernel page cache, directory pages) was last known valid.
	dataMtime proto.Time
	dataSize  uint64
	dataValid bool
	dataGen   uint64 // bumped whenever cached data stops being valid
	parent    NodeID // directory this node was last reached from by name ('..' of a directory)
	name      string // and its name there, for log lines (directories only)
	// names: the directory's name cache (see namecache.go), valid for the
	// directory version nameVer.
	names     map[string]*dentry
	nameVer   dirVersion
	nameVerOK bool
	namesGen  uint64    // bumped each time the names are dropped
	changedAt time.Time // when a change we did not make was last seen
	list      *dirList  // complete listing, valid with the names (listcache.go)
	// listWarned: the kinds of faults of the server's listings of the
	// directory already logged (warnListing).
	listWarned atomic.Uint32
	// bulk: bulk revalidation and walk state of a directory (bulk.go).
	bulk *dirBulk
	// access: ACCESS results per identity (see access.go).
	access map[string]accessEntry
	// opens: a regular file's v4.1 open state (openstate.go).
	opens4 *nodeOpens
	// delegated: the mount holds a read delegation of the file: its
	// attributes stay valid past their lifetime (deleg.go).
	delegated bool
	// dtrust: a directory's latest delegation (dirdeleg.go), and when
	// one covering its entries' attributes was last recalled (unix
	// nanoseconds); pdir: the directory the node was last reached from.
	dtrust          atomic.Pointer[dirTrust]
	childRecalledAt atomic.Int64
	pdir            *inode
	// delegTry: a listing last asked for the directory's delegation
	// (GUARDED_BY(mu); dirdeleg.go).
	delegTry time.Time
	// opening counts v4.1 opens under way, which tell the kernel of a
	// change they find themselves (openstate.go: openState).
	opening int
	// dropping counts descriptors whose open told the kernel to drop its
	// pages (no FOPEN_KEEP_CACHE) and which the kernel has not used since
	// (file.go: Open): until it does, its pages may be the old version's.
	dropping int
	// removeName: after a silly rename, the name to remove at last close.
	sillyDir  NodeID
	sillyName string
	// dirTimes: a directory's times held briefly (dirtimes.go).
	dirTimes *heldDir
	// sendingTimes: the times of a SETATTR on its way that held times
	// went into, shown until it is answered (heldtimes.go: sendingTimes).
	sendingTimes *heldTimes
	// file is the write-back state of a regular file; nil until first written.
	file *fileState
	// changes counts our changes to the file's data (writes, truncates),
	// each counted once it is pending: data a READ brought is kept only if
	// none came while the READ was on its way (keepRead).
	changes atomic.Uint64
}

// inodeTable maps node IDs and file handles to inodes.
type inodeTable struct {
	mu sync.Mutex
	// GUARDED_BY(mu)
	byID map[NodeID]*inode
	byFH map[string]*inode
	next NodeID
	// drops counts nodes that left the table (from 1): while it has not
	// moved, every file the mount holds a node for still has it, so a file
	// with none was changed through no node since.
	drops uint64
}

func newInodeTable(rootFH proto.FH) *inodeTable {
	t := &inodeTable{byID: map[NodeID]*inode{}, byFH: map[string]*inode{}, next: RootID + 1, drops: 1}
	root := &inode{id: RootID, fh: append(proto.FH(nil), rootFH...), lookups: 1}
	root.parent = RootID
	t.byID[RootID] = root
	t.byFH[string(root.fh)] = root
	return t
}

// get returns the node with the given ID, or nil.
func (t *inodeTable) get(id NodeID) *inode {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.byID[id]
}

// ref finds or creates the node for fh and takes one kernel reference on it.
// The handle is copied, so fh may alias an RPC reply buffer.
func (t *inodeTable) ref(fh proto.FH) *inode {
	t.mu.Lock()
	defer t.mu.Unlock()
	n := t.byFH[string(fh)]
	if n == nil || n.stale {
		// A handle the server called stale and now hands out again names
		// a new file (by the server's word): a new node, never the old.
		n = &inode{id: t.next, fh: append(proto.FH(nil), fh...)}
		t.next++
		t.byID[n.id] = n
		t.byFH[string(n.fh)] = n
	}
	n.lookups++
	return n
}

// refExisting takes one kernel reference on the node for fh if the table
// has one (not stale); it returns nil otherwise.
func (t *inodeTable) refExisting(fh proto.FH) *inode {
	t.mu.Lock()
	defer t.mu.Unlock()
	n := t.byFH[string(fh)]
	if n == nil || n.dropped || n.stale {
		return nil
	}
	n.lookups++
	return n
}

// refListed takes one kernel reference on the node for fh, creating it
// only if no node left the table since drops was read (dropCount): data
// read then about a file no node held is still all this mount knows of it.
// nil otherwise, or if the server called fh stale.
func (t *inodeTable) refListed(fh proto.FH, drops uint64) *inode {
	t.mu.Lock()
	n := t.byFH[string(fh)]
	create := n == nil && drops != 0 && drops == t.drops
	t.mu.Unlock()
	if create {
		return t.refLive(fh)
	}
	return t.refExisting(fh)
}

// dropCount is the table's count of nodes that left it.
func (t *inodeTable) dropCount() uint64 {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.drops
}

// refLive is ref for a handle from an answer that may predate the
// server calling it stale: it returns nil, taking nothing, if it has.
func (t *inodeTable) refLive(fh proto.FH) *inode {
	t.mu.Lock()
	n := t.byFH[string(fh)]
	stale := n != nil && n.stale
	t.mu.Unlock()
	if stale {
		return nil
	}
	return t.ref(fh)
}

// refID takes one kernel reference on the node with the given ID, if the
// table still has it.
func (t *inodeTable) refID(id NodeID) *inode {
	t.mu.Lock()
	defer t.mu.Unlock()
	n := t.byID[id]
	if n == nil || n.dropped || n.stale {
		return nil
	}
	n.lookups++
	return n
}

// live returns the node for fh, without a reference, if the table has one
// the server has not called stale.
func (t *inodeTable) live(fh proto.FH) *inode {
	t.mu.Lock()
	defer t.mu.Unlock()
	if n := t.byFH[string(fh)]; n != nil && !n.stale {
		return n
	}
	return nil
}

// lookupFH returns the node for fh if the table has one, without a reference.
func (t *inodeTable) lookupFH(fh proto.FH) *inode {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.byFH[string(fh)]
}

// forget drops n kernel references on id; a node with none left and no open
// files leaves the table. The root is never dropped.
func (t *inodeTable) forget(id NodeID, n uint64) {
	t.mu.Lock()
	defer t.mu.Unlock()
	in := t.byID[id]
	if in == nil {
		return
	}
	if n > in.lookups {
		n = in.lookups
	}
	in.lookups -= n
	in.aheadHeld = false // the kernel had it: an ordinary node, whose drop counts
	t.maybeDropLocked(in)
}

// unref takes back the reference a listing entry just took, the kernel
// never having been given it. A node that leaves the table here was made
// by that very reference (an older one had a reference or an open of its
// own): nothing went through it, so the drop is not counted.
func (t *inodeTable) unref(id NodeID) {
	t.mu.Lock()
	defer t.mu.Unlock()
	in := t.byID[id]
	if in == nil || in.lookups == 0 {
		return
	}
	in.lookups--
	drops := t.drops
	t.maybeDropLocked(in)
	t.drops = drops
}

// LOCKS_REQUIRED(t.mu)
func (t *inodeTable) maybeDropLocked(in *inode) {
	if in.lookups > 0 || in.opens > 0 || in.aheadHeld || in.id == RootID || in.dropped {
		return
	}
	in.dropped = true
	t.drops++
	delete(t.byID, in.id)
	if t.byFH[string(in.fh)] == in {
		delete(t.byFH, string(in.fh))
	}
}

// open records an open file or directory on the node, keeping it in the
// table even if the kernel forgets it.
func (t *inodeTable) open(in *inode) {
	t.mu.Lock()
	in.opens++
	t.mu.Unlock()
}

// close undoes open and reports how many opens remain.
func (t *inodeTable) close(in *inode) int {
	t.mu.Lock()
	defer t.mu.Unlock()
	in.opens--
	left := in.opens
	t.maybeDropLocked(in)
	return left
}

// openCount reports the node's open files and directories.
func (t *inodeTable) openCount(in *inode) int {
	t.mu.Lock()
	defer t.mu.Unlock()
	return in.opens
}

// markStale records that the server called the node's handle stale: no
// name leads to it again (refID refuses it), a later file that happens to
// get the same handle is a new node (ref), and meanwhile staleFH can tell
// that a reply carrying the handle may predate its death.
func (t *inodeTable) markStale(in *inode) {
	t.mu.Lock()
	defer t.mu.Unlock()
	in.stale = true
}

// staleFH reports whether the server has called fh stale (as far as the
// node it named is still known).
func (t *inodeTable) staleFH(fh proto.FH) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	n := t.byFH[string(fh)]
	return n != nil && n.stale
}

// all returns every node in the table.
func (t *inodeTable) all() []*inode {
	t.mu.Lock()
	defer t.mu.Unlock()
	out := make([]*inode, 0, len(t.byID))
	for _, n := range t.byID {
		out = append(out, n)
	}
	return out
}

// count returns the number of nodes in the table (for tests and stats).
func (t *inodeTable) count() int {
	t.mu.Lock()
	defer t.mu.Unlock()
	return len(t.byID)
}
