package server

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"

	"golang.org/x/sys/unix"
)

// Durability of metadata changes.
//
// Unless Config.Async, an operation that changes the namespace or an
// object's attributes replies only once the change is on stable storage.
// What has to be synced for that depends on the file system:
//
//   - ext4 with a journal, and XFS, commit a CREATE (the new inode and its
//     directory entry) as one transaction: syncing the directory commits
//     both, and concurrent changes in the directory share that sync.
//   - ext4 without a journal writes buffers back one by one: fsync of a
//     directory writes its blocks and its own inode, not the inode of a
//     file just created in it (unless it happens to share its inode table
//     block), which a crash could then lose: e2fsck would drop the entry
//     pointing at an uninitialised inode. fsync of the new file writes its
//     inode and, as ext4 marks new entries, the parent's blocks and inode
//     as well: one sync covers both, but it cannot be shared.
//   - Elsewhere POSIX promises no more than that fsync of a file makes the
//     file durable, and fsync of a directory its entries: both are synced.
//
// Objects that cannot be opened for a sync (symbolic links, devices,
// FIFOs, sockets) are covered by a sync of their directory where that
// commits the whole transaction (journaling), and only by syncfs
// elsewhere.
//
// Removals and renames need only the directories: the entries are what
// changed.
type syncPolicy struct {
	// newCoversEntry: syncing a new file or directory also makes its entry
	// in the parent durable.
	newCoversEntry bool
	// dirCoversInodes: syncing a directory also makes durable the inodes
	// changed before it (a journal commits them in the same transaction).
	dirCoversInodes bool
	name            string // for the log
}

// detectSyncPolicy finds what the export's file system needs (see above).
// Anything it cannot tell selects the POSIX-only policy, which syncs more
// but never less.
func detectSyncPolicy(rootFd int, dev uint64) syncPolicy {
	var sfs unix.Statfs_t
	if err := unix.Fstatfs(rootFd, &sfs); err != nil {
		return syncPolicy{name: "unknown file system"}
	}
	switch sfs.Type {
	case unix.XFS_SUPER_MAGIC:
		return syncPolicy{newCoversEntry: true, dirCoversInodes: true, name: "xfs"}
	case unix.EXT4_SUPER_MAGIC:
		// ext2, ext3 and ext4 share the magic; only the ext4 driver has
		// the parent sync and registers the file system under
		// /sys/fs/ext4, where it also says whether there is a journal.
		b, err := os.ReadFile(filepath.Join("/sys/fs/ext4", blockDevName(dev), "journal_task"))
		if err != nil {
			return syncPolicy{name: "ext2/3/4 (driver not recognised)"}
		}
		if strings.TrimSpace(string(b)) == "<none>" {
			return syncPolicy{newCoversEntry: true, name: "ext4 without a journal"}
		}
		return syncPolicy{newCoversEntry: true, dirCoversInodes: true, name: "ext4 with a journal"}
	}
	return syncPolicy{name: fmt.Sprintf("file system type %#x", sfs.Type)}
}

// blockDevName returns the kernel's name of block device dev ("vda",
// "sda1", "dm-0"), as file systems name themselves in sysfs, or "" if it
// cannot tell.
func blockDevName(dev uint64) string {
	p, err := os.Readlink(fmt.Sprintf("/sys/dev/block/%d:%d", unix.Major(dev), unix.Minor(dev)))
	if err != nil {
		return ""
	}
	return filepath.Base(p)
}

// syncGroup shares the syncs of one directory among concurrent operations
// (group commit). An operation whose change is complete needs a sync that
// starts after it: one already running may have started before the change
// and is not enough. Operations arriving while a sync runs therefore wait
// for the next one, which the first of them to get the lock starts for
// all of them, so N concurrent changes cost about two syncs, not N.
type syncGroup struct {
	mu        sync.Mutex
	cond      sync.Cond // on mu: a sync completed
	running   bool
	started   uint64 // syncs started so far; the running one, if any, is number started
	completed uint64 // the number of the last sync that completed
	failedAt  uint64 // the number of the last sync that failed, 0 if none
	err       error  // its error
	waiters   int    // callers waiting for a sync to complete (for tests)
}

// sync runs do, or waits for a run of it by another caller that started
// after this call, and returns that run's error. A caller gets the error
// of any failed run at or after the one it needed: never success for a
// change that may not be durable.
func (g *syncGroup) sync(do func() error) error {
	g.mu.Lock()
	if g.cond.L == nil {
		g.cond.L = &g.mu
	}
	need := g.started + 1
	for g.completed < need {
		if g.running {
			g.waiters++
			g.cond.Wait()
			g.waiters--
			continue
		}
		g.running = true
		g.started++
		n := g.started
		g.mu.Unlock()
		err := do()
		g.mu.Lock()
		g.running = false
		g.completed = n
		if err != nil {
			g.failedAt, g.err = n, err
		}
		g.cond.Broadcast()
	}
	var err error
	if g.failedAt >= need {
		err = g.err
	}
	g.mu.Unlock()
	return err
}

// commitDir makes the entries of directory n durable: its blocks and its
// inode. Concurrent calls share syncs (syncGroup). Nothing with
// Config.Async.
func (s *Server) commitDir(n *node) error {
	if s.async {
		return nil
	}
	// The descriptor stays open while we hold our reference; the lock
	// only guards its creation.
	n.dirMu.Lock()
	fd, err := s.dirFd(n)
	n.dirMu.Unlock()
	if err == nil {
		err = n.dirSync.sync(func() error { return s.io.files.Fsync(fd) })
	}
	if err != nil {
		return fmt.Errorf("committing directory: %w", err)
	}
	return nil
}

// commitNew makes a new object durable together with its entry in dir
// (see syncPolicy). rw is a descriptor of a new regular file open for
// writing, or -1.
func (s *Server) commitNew(dir, child *node, rw int) error {
	if s.async {
		return nil
	}
	if s.policy.dirCoversInodes {
		// One commit holds the new inode and its entry: the directory's
		// sync, which concurrent changes in the directory share.
		return s.commitDir(dir)
	}
	var err error
	switch {
	case child.isReg():
		fd := rw
		if fd < 0 {
			fd, err = s.ioFd(child, false)
		}
		if err == nil {
			// Through syncFile, which latches a write-back error this
			// sync reveals for the file's next COMMIT.
			err = s.syncFile(child, fd, true)
		}
	case child.isDir():
		child.dirMu.Lock()
		var fd int
		fd, err = s.dirFd(child)
		child.dirMu.Unlock()
		if err == nil {
			err = child.dirSync.sync(func() error { return s.io.files.Fsync(fd) })
		}
	default:
		// Cannot be opened: only syncing the file system makes the new
		// inode durable (and the entry with it).
		if err := s.syncFS(); err != nil {
			return fmt.Errorf("committing new entry: %w", err)
		}
		return nil
	}
	if err != nil {
		return fmt.Errorf("committing new entry: %w", err)
	}
	if !s.policy.newCoversEntry {
		return s.commitDir(dir)
	}
	return nil
}

// commitAttrs makes an attribute change of n durable (SETATTR). Nothing
// with Config.Async.
func (s *Server) commitAttrs(n *node) error {
	if s.async {
		return nil
	}
	var err error
	switch {
	case n.isDir():
		return s.commitDir(n)
	case n.isReg():
		var fd int
		if fd, err = s.ioFd(n, false); err == nil {
			err = s.syncFile(n, fd, true)
		}
	case s.policy.dirCoversInodes:
		// Links, devices, FIFOs cannot be opened for a sync; a sync of
		// the export's root commits the journal all the same.
		err = s.io.files.Fsync(s.mountFd)
	default:
		err = s.syncFS()
	}
	if err != nil {
		return fmt.Errorf("committing attributes: %w", err)
	}
	return nil
}

// syncFS makes everything the export's file system holds durable, for
// objects that cannot be opened for a sync on a file system without a
// journal. syncfs(2) alone is not enough there: Linux's sync_filesystem
// has the file system flush the disk's cache (ext4 without a journal does
// so in its sync_fs) before its last pass writes out the buffer cache's
// blocks, inode tables and directories among them, and waits for them;
// a write still in flight at the flush may stay in the cache. An fsync of
// the export's root, with nothing dirty left, adds the flush that covers
// them.
func (s *Server) syncFS() error {
	if err := s.io.files.Syncfs(s.mountFd); err != nil {
		return err
	}
	return s.io.files.Fsync(s.mountFd)
}
