// Package client is the caching core of the hushfs NFS client. It knows
// nothing about FUSE: internal/fusefs adapts the kernel's requests onto the
// methods of FS, which take a node ID, a caller credential and plain Go
// values, and return protocol-neutral results (Attr, Entry) or an error that
// carries an errno (see Errno). Nor does it know the NFS protocol: it talks
// to a proto.Server (internal/proto), which protocol.go mounts with the
// version the options name.
//
// The core is the single source of truth for cached state. Every timeout it
// hands out (Entry.EntryTTL, AttrTTL) is no longer than its own cache would
// keep the same fact, so the kernel's caches never outlive ours.
//
// # Node IDs
//
// A node ID names one server file handle for the life of the mount. IDs are
// never reused (a 64-bit counter), so the kernel's (nodeid, generation) pair
// is unique without generations. The kernel holds a lookup count on a node
// for every Entry returned with that ID; Forget drops it, and a node with no
// kernel references and no open files is removed from the table.
//
// # Lock ordering
//
// Locks are taken in this order and never the other way round:
//
//	FS.openMu      (open file and directory handle tables)
//	inodeTable.mu  (node ID and file handle maps, lookup counts)
//	inode.mu       (one node's cached attributes, names and data state)
//
// No lock is held across an RPC: state is read under the lock, the lock is
// dropped, the RPC runs, and the result is applied under the lock again,
// checking that nothing newer was applied meanwhile.
package client
