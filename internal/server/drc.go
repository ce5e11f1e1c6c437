package server

import (
	"hushfs/internal/nfs3"
	"hushfs/internal/rpc"
)

// The procedures that change state go through the RPC server's duplicate
// request cache, so that a retransmission (the reply was lost, the client
// reconnected) gets the original reply instead of running again: a second
// REMOVE, RMDIR, RENAME, LINK, CREATE (guarded or exclusive), MKDIR, SYMLINK
// or MKNOD would fail with NOENT or EXIST although the first succeeded; a
// second SETATTR or WRITE could undo a change made in between. The other
// procedures are read-only, or harmless to repeat (COMMIT).
var _ rpc.NonIdempotentHandler = nfsHandler{}

// NonIdempotent implements rpc.NonIdempotentHandler.
func (nfsHandler) NonIdempotent(proc uint32) bool {
	switch proc {
	case nfs3.ProcSetattr, nfs3.ProcWrite, nfs3.ProcCreate, nfs3.ProcMkdir,
		nfs3.ProcSymlink, nfs3.ProcMknod, nfs3.ProcRemove, nfs3.ProcRmdir,
		nfs3.ProcRename, nfs3.ProcLink:
		return true
	}
	return false
}
