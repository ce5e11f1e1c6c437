package fusefs

import (
	"maps"
	"sync/atomic"
)

// requestOps names the kernel's requests the adapter is asked to serve, as
// the statistics show them (the origins of RPCs use the same names).
var requestOps = []string{
	"lookup", "forget", "getattr", "setattr", "readlink", "symlink", "mknod", "mkdir",
	"unlink", "rmdir", "rename", "link", "open", "read", "write", "statfs", "release",
	"fsync", "getxattr", "listxattr", "setxattr", "removexattr", "flush", "opendir",
	"readdir", "readdirplus", "releasedir", "fsyncdir", "access", "create", "getlk", "setlk",
	"setlkw",
}

// requestCounts counts the FUSE requests that reach the daemon, by
// operation: what the kernel did not answer from its own caches. The map
// is filled once and only its counters change, so counting takes no lock.
type requestCounts struct {
	n map[string]*atomic.Uint64
}

func newRequestCounts() requestCounts {
	c := requestCounts{n: make(map[string]*atomic.Uint64, len(requestOps))}
	for _, op := range requestOps {
		c.n[op] = new(atomic.Uint64)
	}
	return c
}

// add counts one request of op (one of requestOps).
func (c requestCounts) add(op string) {
	if n := c.n[op]; n != nil {
		n.Add(1)
	}
}

// snapshot returns the counts that are not zero.
func (c requestCounts) snapshot() map[string]uint64 {
	out := map[string]uint64{}
	for op, n := range c.n {
		if v := n.Load(); v > 0 {
			out[op] = v
		}
	}
	return out
}

// reset zeroes the counts (not atomically as a whole: requests counted
// meanwhile may land on either side).
func (c requestCounts) reset() {
	for n := range maps.Values(c.n) {
		n.Store(0)
	}
}
