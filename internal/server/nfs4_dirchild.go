package server

import (
	"os"
	"path/filepath"
	"time"

	"golang.org/x/sys/unix"

	"hushfs/internal/server/v4state"
)

// Directory delegations that cover their entries' attributes (the holder
// asked for NOTIFY4_CHANGE_CHILD_ATTRS): before another client changes a
// file's attributes or data (WRITE, SETATTR, an OPEN that truncates; an
// NFSv3 WRITE or SETATTR), the delegations of its directory that cover
// entries are recalled and waited for, as a change of the directory
// itself would be; a local change shows up in the directory's watch as
// an event of the entry (IN_ATTRIB, IN_MODIFY: leases_dir.go) and
// recalls them at once.
//
// A holder that also takes notifications of entries (nfs4_dirnotify.go)
// is told the entry's new attributes after each such change instead
// (CB_NOTIFY, waited for): a callback per WRITE of the writer, coalesced
// when they overlap. The others are recalled: one recall ends the stream
// and costs the holder one listing.
//
// The file's directory is found from its descriptor's path (the kernel's
// name for it) and checked to hold the file under that name; a file
// whose directory cannot be found so (a hard link's other name, a file
// the kernel knows by no path) recalls every such delegation of others.
// Its holder's own changes recall nothing: the watch is told to expect
// the entry's events (expectChild) for a while after each, as for the
// holder's entry changes (leases_dir.go), with the same caveat: a local
// change of that very file meanwhile would go unseen.

// parentKey returns the handle key of the directory n (not a directory)
// is in, and n's name there, if the kernel's path for it leads there.
func (s *Server) parentKey(n *node) (key, name string, ok bool) {
	p, err := os.Readlink(procFdPath(n.fd))
	if err != nil || !filepath.IsAbs(p) {
		return "", "", false
	}
	dir, base := filepath.Split(p)
	dfd, err := unix.Open(dir, unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return "", "", false
	}
	defer unix.Close(dfd)
	var st unix.Stat_t
	if unix.Fstatat(dfd, base, &st, unix.AT_SYMLINK_NOFOLLOW) != nil || st.Ino != n.ino {
		return "", "", false
	}
	fh, ok := s.handleAt(unix.AT_FDCWD, dir)
	return string(fh), base, ok
}

// childConflicts recalls the delegations of others (by; nil: an NFSv3
// client) covering the entries of the directory the file with handle key
// is in, and reports whether any is still held.
//
// c, for an NFSv4.1 client's change, lets the holders that take
// notifications be told of the entry's new attributes once the
// operation is done (CB_NOTIFY, nfs4_dirnotify.go), instead of recalling.
func (s *Server) childConflicts(key string, by *v4state.Client, c *compound) (wait bool) {
	if !s.v4.state.HasChildDelegations() {
		return false
	}
	n, err := s.resolve([]byte(key))
	if err != nil {
		return false // the change fails on its own
	}
	defer s.cache.release(n)
	if n.ftype == unix.S_IFDIR {
		return false // a directory's attributes change with no event in its parent: never covered
	}
	dir, name, ok := s.parentKey(n)
	var recalls []v4state.Recall
	if ok && c != nil && by != nil {
		var notify []v4state.Recall
		recalls, notify, wait = s.v4.state.ChildNotifyConflicts(dir, by)
		if len(notify) > 0 {
			// Its events are this change's, which the holders are told of.
			s.v4.leases.expectChild(dir, name)
			c.after = append(c.after, func() { s.v4.notifier.markAttrs(notify, name)() })
		}
		if s.v4.state.HoldsChildren(dir, by) {
			s.v4.leases.expectChild(dir, name)
		}
	} else if ok {
		recalls, wait = s.v4.state.ChildConflicts(dir, by)
		if s.v4.state.HoldsChildren(dir, by) {
			s.v4.leases.expectChild(dir, name)
		}
	} else {
		recalls, wait = s.v4.state.AllChildConflicts(by)
	}
	s.sendRecalls(recalls)
	return wait
}

// childConflicts3 is childConflicts for an NFSv3 client's change of the
// file fh, waited for a little as wait3 does: false means still held.
func (s *Server) childConflicts3(fh []byte) bool {
	for deadline := time.Now().Add(v3RecallWait); s.childConflicts(string(fh), nil, nil); {
		if time.Now().After(deadline) {
			return false
		}
		time.Sleep(5 * time.Millisecond)
	}
	return true
}
