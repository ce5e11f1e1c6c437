package fusefs

import (
	"sync"

	"github.com/hanwen/go-fuse/v2/fuse"

	"hushfs/internal/client"
)

// notifier passes the core's invalidations to the kernel. The core calls
// it from inside requests the kernel may be waiting on, and a notification
// written to /dev/fuse then can deadlock against that request, so they are
// queued (coalesced: one per node or name) and sent by one goroutine.
type notifier struct {
	srv *fuse.Server

	mu      sync.Mutex
	nodes   map[client.NodeID]struct{} // GUARDED_BY(mu)
	entries map[entryKey]struct{}      // GUARDED_BY(mu)
	wake    chan struct{}              // capacity 1: work is pending
	stop    chan struct{}
}

type entryKey struct {
	dir  client.NodeID
	name string
}

func newNotifier(srv *fuse.Server) *notifier {
	n := &notifier{srv: srv, nodes: map[client.NodeID]struct{}{}, entries: map[entryKey]struct{}{},
		wake: make(chan struct{}, 1), stop: make(chan struct{})}
	go n.run()
	return n
}

func (n *notifier) InvalidateData(node client.NodeID) {
	n.mu.Lock()
	n.nodes[node] = struct{}{}
	n.mu.Unlock()
	n.kick()
}

func (n *notifier) InvalidateEntry(dir client.NodeID, name string) {
	n.mu.Lock()
	n.entries[entryKey{dir, name}] = struct{}{}
	n.mu.Unlock()
	n.kick()
}

// InvalidateAttrsNow writes the attribute invalidations at once: the
// caller (a delegation's return) must know the kernel no longer trusts
// them before it goes on. Attributes only: no page or directory lock is
// taken, and it is never called from inside a request.
func (n *notifier) InvalidateAttrsNow(nodes []client.NodeID) {
	for _, id := range nodes {
		n.srv.InodeNotify(uint64(id), -1, 0)
	}
}

func (n *notifier) kick() {
	select {
	case n.wake <- struct{}{}:
	default:
	}
}

func (n *notifier) run() {
	for {
		select {
		case <-n.stop:
			return
		case <-n.wake:
		}
		n.mu.Lock()
		nodes, entries := n.nodes, n.entries
		n.nodes, n.entries = map[client.NodeID]struct{}{}, map[entryKey]struct{}{}
		n.mu.Unlock()
		// The kernel answers ENOENT for what it no longer caches: fine.
		for e := range entries {
			n.srv.EntryNotify(uint64(e.dir), e.name)
		}
		for id := range nodes {
			n.srv.InodeNotify(uint64(id), 0, 0) // attributes and every page
		}
	}
}

func (n *notifier) close() {
	select {
	case <-n.stop:
	default:
		close(n.stop)
	}
}

// Init is called by go-fuse with the server once mounted: from then on
// the core's invalidations reach the kernel.
func (fs *FS) Init(srv *fuse.Server) {
	fs.notifier = newNotifier(srv)
	fs.core.SetNotifier(fs.notifier)
}

// OnUnmount stops the notifier.
func (fs *FS) OnUnmount() {
	if fs.notifier != nil {
		fs.notifier.close()
	}
}

// invalidateAttr makes the kernel forget a node's cached attributes now
// (synchronously; attributes only).
func (fs *FS) invalidateAttr(node uint64) {
	if fs.notifier != nil {
		fs.notifier.srv.InodeNotify(node, -1, 0)
	}
}
