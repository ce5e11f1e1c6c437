package client

// Notifier is how the core tells the kernel that something it may have
// cached is no longer true. The FUSE adapter implements it; calls must not
// block on the kernel (the adapter queues them), because they can come
// from inside a request the kernel is waiting on.
type Notifier interface {
	// InvalidateData drops a node's cached attributes and pages.
	InvalidateData(node NodeID)
	// InvalidateEntry drops the kernel's binding of name in dir, positive
	// or negative.
	InvalidateEntry(dir NodeID, name string)
	// InvalidateAttrsNow drops the nodes' cached attributes (only those)
	// before it returns. Never from a request the kernel waits on.
	InvalidateAttrsNow(nodes []NodeID)
}

type nopNotifier struct{}

func (nopNotifier) InvalidateData(NodeID)          {}
func (nopNotifier) InvalidateEntry(NodeID, string) {}
func (nopNotifier) InvalidateAttrsNow([]NodeID)    {}

// SetNotifier installs the kernel notifier (before the file system is
// served).
func (fs *FS) SetNotifier(n Notifier) { fs.notify = n }
