package server

import (
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/sys/unix"

	"hushfs/internal/nfs3"
)

// Cache limits. Every cached node holds an O_PATH descriptor, which pins the
// inode in memory (and, for an unlinked inode, its blocks on disk), so idle
// nodes are dropped after a while even below the size limit. Descriptors
// opened for I/O are closed sooner: an open-for-write descriptor makes local
// execution of the file fail with ETXTBSY.
const (
	defaultMaxNodes   = 4096
	defaultMaxOpen    = 512
	defaultNodeIdle   = 60 * time.Second
	defaultOpenIdle   = 3 * time.Second
	defaultSweepEvery = time.Second
)

// node is a resolved file handle: an O_PATH descriptor for the inode plus,
// lazily, descriptors opened for reading, writing and directory listing.
// A node is used only while holding a reference (cache.acquire/insert,
// then release); descriptors are closed only once the node has left the
// cache and its last reference is gone, so an operation never sees its
// descriptor closed under it.
type node struct {
	key    string // the NFS file handle
	fh     nfs3.FH
	kh     unix.FileHandle
	fd     int // O_PATH
	ino    uint64
	ftype  uint32 // S_IFMT bits; an inode's type never changes
	isRoot bool
	cverf  nfs3.Verf // READDIR cookie verifier (directories)

	// Guarded by cache.mu.
	refs       int
	gone       bool
	pinned     bool
	lastUse    int64 // unix nanoseconds
	prev, next *node // LRU list, most recent at the front

	omu     sync.Mutex // guards rdFd, rwFd, writers, retired
	rdFd    int
	rwFd    int
	writers int   // operations writing through rwFd now (Server.writeFd)
	retired []int // former rwFd numbers, now read-only (leases.go: retireWriter)

	nsMu    sync.Mutex // directories: held across a change of entries and its before/after stats (dirop.go)
	dirMu   sync.Mutex // serialises lseek+getdents on dirFd
	dirFd   int
	dirSync syncGroup // directories: concurrent commits share syncs (durable.go)

	io *fileState // regular files only: sequential detection, write-back state

	// v4open: NFSv4.1 clients hold the file open; the server holds a
	// reference (Server.pinOpen), and the file stays reachable by its
	// handle after its last name is removed, as a local open file does.
	v4open atomic.Bool
}

func newNode(key string, fh nfs3.FH, kh unix.FileHandle, fd int, st *unix.Stat_t) *node {
	n := &node{key: key, fh: fh, kh: kh, fd: fd, ino: st.Ino, ftype: st.Mode & unix.S_IFMT,
		rdFd: -1, rwFd: -1, dirFd: -1}
	if n.isReg() {
		n.io = newFileState()
	}
	return n
}

func (n *node) isDir() bool { return n.ftype == unix.S_IFDIR }
func (n *node) isReg() bool { return n.ftype == unix.S_IFREG }

// unsynced reports whether the node's file holds data written through it
// and not yet synced: its descriptors must not close before a sync.
func (n *node) unsynced() bool { return n.io != nil && n.io.unsynced() }

// closeFds closes every descriptor of the node (once c.mu is let go:
// closeLater). Only for nodes that are gone and unreferenced.
func (n *node) closeFds(c *nodeCache) {
	n.closeIO(c)
	if n.fd >= 0 {
		c.closeLater(n.fd)
		n.fd = -1
	}
}

// closeIO closes the node's I/O descriptors (once c.mu is let go), keeping
// the O_PATH one. Only
// for unreferenced nodes (so nobody holds omu or dirMu).
func (n *node) closeIO(c *nodeCache) {
	for _, p := range []*int{&n.rdFd, &n.rwFd, &n.dirFd} {
		if *p >= 0 {
			c.closeLater(*p)
			*p = -1
			c.openCount.Add(-1)
		}
	}
	for _, fd := range n.retired {
		c.closeLater(fd)
		c.openCount.Add(-1)
	}
	n.retired = nil
	if n.io != nil {
		n.io.descriptorsClosed()
	}
}

func (n *node) hasIO() bool { return n.rdFd >= 0 || n.rwFd >= 0 || n.dirFd >= 0 || len(n.retired) > 0 }

// nodeCache maps file handles to nodes: a bounded LRU with reference counts.
type nodeCache struct {
	mu    sync.Mutex
	byKey map[string]*node
	byIno map[uint64]*node
	head  node // sentinel of the LRU list

	maxNodes  int
	maxOpen   int64
	nodeIdle  time.Duration
	openIdle  time.Duration
	now       func() time.Time
	openCount atomic.Int64 // I/O descriptors open across all nodes

	// flush, if set, syncs a node's unsynced data before the sweep closes
	// its descriptors (Server.flushIdle). It runs without mu held.
	flush func(*node)

	// closing are descriptors of nodes let go under mu, closed by unlock
	// after mu is released: the last close of a removed file frees its
	// inode and blocks in the kernel (tens of µs), and every call's
	// handle lookup waits for mu.
	closing []int
}

// closeLater queues fd, no longer reachable from any node, for unlock to
// close. Called with mu held.
func (c *nodeCache) closeLater(fd int) { c.closing = append(c.closing, fd) }

// unlock releases mu, then closes the descriptors queued under it before
// returning: callers still see them closed when their call returns.
func (c *nodeCache) unlock() {
	fds := c.closing
	c.closing = nil
	c.mu.Unlock()
	for _, fd := range fds {
		unix.Close(fd)
	}
}

func newNodeCache(now func() time.Time) *nodeCache {
	c := &nodeCache{
		byKey:    make(map[string]*node),
		byIno:    make(map[uint64]*node),
		maxNodes: defaultMaxNodes,
		maxOpen:  defaultMaxOpen,
		nodeIdle: defaultNodeIdle,
		openIdle: defaultOpenIdle,
		now:      now,
	}
	c.head.prev, c.head.next = &c.head, &c.head
	return c
}

func (c *nodeCache) unlink(n *node) {
	n.prev.next, n.next.prev = n.next, n.prev
	n.prev, n.next = nil, nil
}

func (c *nodeCache) pushFront(n *node) {
	n.prev, n.next = &c.head, c.head.next
	c.head.next.prev = n
	c.head.next = n
}

// acquire returns the cached node of fh with a reference, or nil.
func (c *nodeCache) acquire(fh []byte) *node {
	c.mu.Lock()
	defer c.unlock()
	n := c.byKey[string(fh)]
	if n == nil {
		return nil
	}
	n.refs++
	n.lastUse = c.now().UnixNano()
	c.unlink(n)
	c.pushFront(n)
	return n
}

// insert adds n with a reference and returns it; if a node with the same
// handle is cached already (a concurrent resolver won), n's descriptor is
// closed and the cached node is returned instead.
func (c *nodeCache) insert(n *node) *node {
	c.mu.Lock()
	defer c.unlock()
	if old := c.byKey[n.key]; old != nil {
		unix.Close(n.fd)
		n.fd = -1
		old.refs++
		old.lastUse = c.now().UnixNano()
		c.unlink(old)
		c.pushFront(old)
		return old
	}
	n.refs = 1
	n.lastUse = c.now().UnixNano()
	c.byKey[n.key] = n
	c.byIno[n.ino] = n
	c.pushFront(n)
	c.trimLocked()
	return n
}

// trimLocked evicts unreferenced nodes from the tail beyond maxNodes.
func (c *nodeCache) trimLocked() {
	excess := len(c.byKey) - c.maxNodes
	for n := c.head.prev; excess > 0 && n != &c.head; {
		prev := n.prev
		// Nodes with unsynced data wait for the sweep to sync them.
		if n.refs == 0 && !n.pinned && !n.unsynced() {
			c.removeLocked(n)
			excess--
		}
		n = prev
	}
}

// removeLocked takes n out of the cache; its descriptors close now if it is
// unreferenced, else at its last release.
func (c *nodeCache) removeLocked(n *node) {
	if n.gone {
		return
	}
	n.gone = true
	delete(c.byKey, n.key)
	if c.byIno[n.ino] == n {
		delete(c.byIno, n.ino)
	}
	c.unlink(n)
	if n.refs == 0 {
		n.closeFds(c)
	}
}

// ref takes another reference to n, which the caller holds a reference to
// (for work that outlives the caller's).
func (c *nodeCache) ref(n *node) {
	c.mu.Lock()
	n.refs++
	c.unlock()
}

// release drops a reference taken by acquire, insert or ref.
func (c *nodeCache) release(n *node) {
	c.mu.Lock()
	defer c.unlock()
	n.refs--
	if n.refs == 0 && n.gone {
		n.closeFds(c)
	}
}

// forget removes n from the cache (its inode is gone).
func (c *nodeCache) forget(n *node) {
	c.mu.Lock()
	defer c.unlock()
	if !n.pinned {
		c.removeLocked(n)
	}
}

// forgetIfUnlinked drops the cached node of inode ino when the inode has no
// names left, so that its descriptors do not keep a deleted file's blocks
// allocated. Called after REMOVE, RMDIR and a RENAME that replaced a target.
func (c *nodeCache) forgetIfUnlinked(ino uint64) {
	c.mu.Lock()
	defer c.unlock()
	n := c.byIno[ino]
	if n == nil || n.pinned {
		return
	}
	var st unix.Stat_t
	if unix.Fstat(n.fd, &st) == nil && st.Nlink > 0 {
		return
	}
	c.removeLocked(n)
}

// sweep closes I/O descriptors idle for openIdle (or, above maxOpen, the
// least recently used ones) and evicts nodes idle for nodeIdle. A node whose
// file holds unsynced data is first synced (flush), outside the lock and
// with a reference that keeps it open meanwhile; it is closed or evicted
// afterwards if still idle.
func (c *nodeCache) sweep() {
	now := c.now().UnixNano()
	var flush []*node
	c.mu.Lock()
	over := c.openCount.Load() - c.maxOpen
	for n := c.head.prev; n != &c.head; {
		prev := n.prev
		if n.refs == 0 {
			if c.flush != nil && c.idleAction(n, now, over > 0) && n.unsynced() {
				n.refs++
				flush = append(flush, n)
			} else {
				over -= c.sweepOne(n, now, over > 0)
			}
		}
		n = prev
	}
	c.unlock()
	if len(flush) == 0 {
		return
	}
	for _, n := range flush {
		c.flush(n)
	}
	c.mu.Lock()
	defer c.unlock()
	now = c.now().UnixNano()
	over = c.openCount.Load() - c.maxOpen
	for _, n := range flush {
		n.refs--
		switch {
		case n.gone:
			if n.refs == 0 {
				n.closeFds(c)
			}
		case n.refs == 0 && !n.unsynced():
			over -= c.sweepOne(n, now, over > 0)
		}
	}
}

// idleAction reports whether the sweep would close or evict the
// unreferenced node n. Called with mu held.
func (c *nodeCache) idleAction(n *node, now int64, overOpen bool) bool {
	idle := now - n.lastUse
	return (!n.pinned && idle >= int64(c.nodeIdle)) ||
		(n.hasIO() && (idle >= int64(c.openIdle) || overOpen))
}

// sweepOne evicts the unreferenced node n if idle for nodeIdle, or closes
// its I/O descriptors if idle for openIdle or if too many are open. It
// returns the number of descriptors closed. Called with mu held.
func (c *nodeCache) sweepOne(n *node, now int64, overOpen bool) int64 {
	idle := now - n.lastUse
	before := c.openCount.Load()
	switch {
	case !n.pinned && idle >= int64(c.nodeIdle):
		c.removeLocked(n)
	case n.hasIO() && (idle >= int64(c.openIdle) || overOpen):
		n.closeIO(c)
	}
	return before - c.openCount.Load()
}

// closeAll closes every descriptor; the server is shutting down and no
// operation is running.
func (c *nodeCache) closeAll() {
	c.mu.Lock()
	defer c.unlock()
	for n := c.head.next; n != &c.head; {
		next := n.next
		n.pinned = false
		n.refs = 0
		c.removeLocked(n)
		n = next
	}
}

// len reports the number of cached nodes.
func (c *nodeCache) len() int {
	c.mu.Lock()
	defer c.unlock()
	return len(c.byKey)
}
