package client

import (
	"context"
	"slices"
	"syscall"

	"hushfs/internal/proto"
)

// Set-user-ID and set-group-ID bits are cleared by writes and truncations
// of callers without CAP_FSETID, as Linux does locally. The kernel leaves
// that to the file system (FUSE_HANDLE_KILLPRIV_V2: a SETATTR of the mode
// made as the writer would fail for anyone but the owner) and flags such
// requests; the server clears the bits when it writes or truncates as the
// caller. What is left to the client is to send such a write at once, so
// the mode it caches (from the WRITE's reply) is the cleared one when the
// writer looks.

// clearsSetID reports whether a write or truncation by c, a caller without
// CAP_FSETID, clears set-id bits of a file with attributes a, by Linux's
// rule: set-user-ID always; set-group-ID if group execute is set or c is not
// in the file's group.
func clearsSetID(a *proto.Attr, c *Cred) bool {
	if a.Type != proto.TypeReg {
		return false
	}
	if a.Mode&syscall.S_ISUID != 0 {
		return true
	}
	if a.Mode&syscall.S_ISGID == 0 {
		return false
	}
	return a.Mode&syscall.S_IXGRP != 0 || (c.GID != a.GID && !slices.Contains(c.Groups, a.GID))
}

// ClearSetIDAfterWrite follows a Write by c, a caller without CAP_FSETID
// (FUSE's WRITE_KILL_SUIDGID). If the file's mode has set-id bits such a
// write clears, its pending data is sent now, as c: the server's write
// clears them, and its reply's attributes replace the cached mode, so a
// stat right after the write shows them gone. Otherwise it sends nothing.
func (fs *FS) ClearSetIDAfterWrite(ctx context.Context, c *Cred, fh uint64) error {
	of, err := fs.openFile(fh)
	if err != nil {
		return err
	}
	n := of.node
	n.mu.Lock()
	a := n.attr // the last known mode, even if its lifetime is over
	n.mu.Unlock()
	if !clearsSetID(&a, c) {
		return nil
	}
	// Never abandoned half-way (see await): the data would be lost.
	if err := fs.await(ctx, func(ctx context.Context) error { return fs.wb.flush(ctx, n, proto.Unstable) }); err != nil {
		return err
	}
	return of.takeErr()
}
