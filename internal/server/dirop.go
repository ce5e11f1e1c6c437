package server

import (
	"golang.org/x/sys/unix"

	"hushfs/internal/nfs3"
)

// Directory changes and their before/after attributes.
//
// Every operation that changes a directory's entries (CREATE, MKDIR,
// SYMLINK, MKNOD, REMOVE, RMDIR, RENAME, LINK, and NFSv4's OPEN with create)
// holds the directory's namespace lock (node.nsMu) from the stat that gives
// its attributes before the change, across the system call, to the stat
// that gives them after: no other NFS operation changes the directory in
// between, so the pair describes exactly this change. NFSv3 reports it as
// wcc_data; NFSv4 as change_info4 with atomic TRUE, which lets a client
// keep its cached names of the directory instead of looking them up again.
// The lock is not held for the sync that makes the change durable, so
// concurrent changes still share their directory's syncs. (A local
// process changing the directory during the microseconds between the two
// stats is the one thing the lock cannot exclude.) A RENAME between two
// directories locks both, in inode order.

// dirOp holds what every procedure that changes a directory does first:
// resolve the directory, take its pre-operation attributes, refuse on a
// read-only export or a non-directory, validate the name.
type dirOp struct {
	dir    *node
	wcc    nfs3.WccData
	locked bool // holds dir.nsMu (a RENAME within one directory: only one of its two ops does)
	after  bool // wcc.After taken, lock released
}

// checkDirOp resolves a directory operation's directory and validates it
// and the name, without locking. On failure it returns the status to reply
// with (wcc filled as far as known) and no node to release.
func (s *Server) checkDirOp(fh nfs3.FH, name []byte, creating bool) (*dirOp, nfs3.Status) {
	dir, err := s.resolve(fh)
	if err != nil {
		return &dirOp{}, s.statusOf(err)
	}
	status := nfs3.OK
	switch {
	case s.readOnly:
		status = nfs3.ErrROFS
	case !dir.isDir():
		status = nfs3.ErrNotDir
	default:
		if err := checkName(name); err != nil {
			status = s.statusOf(err)
		} else if isDot(name) {
			// "." and ".." always exist; they are not ordinary entries to
			// remove or rename.
			status = nfs3.ErrInval
			if creating {
				status = nfs3.ErrExist
			}
		}
	}
	if status != nfs3.OK {
		var st unix.Stat_t
		if err := s.stat(dir, &st); err != nil {
			s.cache.release(dir)
			return &dirOp{}, s.statusOf(err)
		}
		op := &dirOp{}
		op.wcc.Before, op.wcc.After = preOp(&st), s.postOp(&st)
		s.cache.release(dir)
		return op, status
	}
	return &dirOp{dir: dir}, nfs3.OK
}

// beginDirOp starts a directory operation: checkDirOp, then the lock and
// the attributes before. On failure it returns the status to reply with
// (wcc filled as far as known) and no node to release.
func (s *Server) beginDirOp(fh nfs3.FH, name []byte, creating bool) (*dirOp, nfs3.Status) {
	op, status := s.checkDirOp(fh, name, creating)
	if status != nfs3.OK {
		return op, status
	}
	if status := s.lockDirOps(op); status != nfs3.OK {
		return &dirOp{}, status
	}
	return op, nfs3.OK
}

// beginRenameOps starts a RENAME: both directories checked, locked in
// inode order (once if they are the same), their attributes taken.
func (s *Server) beginRenameOps(a *nfs3.RenameArgs) (from, to *dirOp, status nfs3.Status) {
	from, status = s.checkDirOp(a.From.Dir, a.From.Name, false)
	if status != nfs3.OK {
		return from, &dirOp{}, status
	}
	to, status = s.checkDirOp(a.To.Dir, a.To.Name, false)
	if status != nfs3.OK {
		s.cache.release(from.dir)
		return &dirOp{}, to, status
	}
	if status := s.lockDirOps(from, to); status != nfs3.OK {
		return &dirOp{}, &dirOp{}, status
	}
	return from, to, nfs3.OK
}

// lockDirOps locks the directories of ops (checked, unlocked) in inode
// order and takes their attributes before the change. On failure every
// directory is unlocked and released.
func (s *Server) lockDirOps(ops ...*dirOp) nfs3.Status {
	if len(ops) == 2 && ops[1].dir.ino < ops[0].dir.ino {
		ops = []*dirOp{ops[1], ops[0]}
	}
	for i, op := range ops {
		if i > 0 && ops[i-1].dir == op.dir {
			continue
		}
		op.dir.nsMu.Lock()
		op.locked = true
	}
	var st unix.Stat_t
	for _, op := range ops {
		if err := s.stat(op.dir, &st); err != nil {
			for _, o := range ops {
				if o.locked {
					o.dir.nsMu.Unlock()
				}
				s.cache.release(o.dir)
			}
			return s.statusOf(err)
		}
		op.wcc.Before = preOp(&st)
	}
	return nfs3.OK
}

// dirChanged takes the attributes of the ops' directories after the change
// and unlocks them. It is called right after the system call, before the
// change is synced; endDirOp calls it if the operation did not.
func (s *Server) dirChanged(ops ...*dirOp) {
	for _, op := range ops {
		if op.dir == nil || op.after {
			continue
		}
		op.wcc.After = s.postOpOf(op.dir)
		op.after = true
	}
	for _, op := range ops {
		if op.locked {
			op.dir.nsMu.Unlock()
			op.locked = false
		}
	}
}

// endDirOp releases the operation's directory, taking its attributes after
// the change first if dirChanged has not.
func (s *Server) endDirOp(op *dirOp) {
	if op.dir == nil {
		return
	}
	s.dirChanged(op)
	s.cache.release(op.dir)
	op.dir = nil
}
