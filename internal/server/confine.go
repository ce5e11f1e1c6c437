package server

import (
	"errors"
	"fmt"
	"strings"

	"golang.org/x/sys/unix"

	"hushfs/internal/nfs3"
)

// Confinement to the export.
//
// Names are resolved one component at a time beneath their directory's
// descriptor (openEntry), so a lookup never leaves the directory it starts
// from. Two ways out remain, and are closed here:
//
//   - ".." of a directory. At the export root it is the root itself; below
//     it, the parent is checked like an inode a handle resolves to, since
//     the directory may have been moved out of the export by a local
//     process after its handle was issued.
//   - A handle. The MAC proves this export issued it, but the inode may
//     have been moved out since, and open_by_handle_at opens any inode of
//     the file system. Before a resolved inode enters the node cache it is
//     checked to lie beneath the export root; nodes in the cache are the
//     ones that passed, so the check costs nothing on cache hits.
//
// Directories are checked exactly: the kernel always connects a directory
// it opens by handle to its real parent chain, so walking ".." reaches
// either the export root or the top of the file system. Other inodes have
// no parent to walk to (an ext4 inode does not record its names). Their
// descriptor names a path when the kernel still has the inode's name
// cached; an inode whose only name is known to lie outside the export is
// refused. When the kernel knows no name (a "disconnected" inode, shown as
// "/" in /proc, typical after a server reboot) or the inode has other
// names, nothing can be told without searching the file system, and the
// handle is honoured: it was issued for an inode reached inside the export.

// maxWalkDepth bounds the walk from a directory up to the export root;
// deeper directories are refused rather than walked forever.
const maxWalkDepth = 4096

// checkWithin returns nil if the inode fd refers to (an O_PATH descriptor
// on the export's file system, described by st) lies beneath the export
// root, NFS3ERR_STALE if it does not, and NFS3ERR_JUKEBOX when descriptors
// run short. It runs with the server's own credentials.
func (s *Server) checkWithin(fd int, st *unix.Stat_t) error {
	if st.Dev != s.rootDev {
		return nfs3.ErrStale
	}
	if st.Ino == s.rootIno {
		return nil
	}
	var ok bool
	var err error
	if st.Mode&unix.S_IFMT == unix.S_IFDIR {
		ok, err = s.dirWithin(fd, st.Ino)
	} else {
		ok = s.fileNotOutside(fd, st)
	}
	switch {
	case errors.Is(err, unix.EMFILE), errors.Is(err, unix.ENFILE), errors.Is(err, unix.ENOMEM):
		return nfs3.ErrJukebox
	case err != nil:
		s.logf("hushfs server: inode %d: checking it lies in the export: %v", st.Ino, err)
		return nfs3.ErrStale
	case !ok:
		s.logf("hushfs server: refusing inode %d: it is outside the export", st.Ino)
		return nfs3.ErrStale
	}
	return nil
}

// dirWithin walks ".." from the directory fd (inode ino) until it meets the
// export root (true) or the top of the file system or another file system
// (false).
func (s *Server) dirWithin(fd int, ino uint64) (bool, error) {
	cur, curIno := fd, ino
	defer func() {
		if cur != fd {
			unix.Close(cur)
		}
	}()
	for range maxWalkDepth {
		p, err := openDotDot(cur)
		if err != nil {
			if errors.Is(err, unix.EXDEV) {
				return false, nil // the top of a mount: the root was not on the way
			}
			return false, err
		}
		var st unix.Stat_t
		if err := unix.Fstat(p, &st); err != nil {
			unix.Close(p)
			return false, err
		}
		if cur != fd {
			unix.Close(cur)
		}
		cur = p
		switch {
		case st.Dev != s.rootDev:
			return false, nil
		case st.Ino == s.rootIno:
			return true, nil
		case st.Ino == curIno:
			return false, nil // the file system's root is its own parent
		}
		curIno = st.Ino
	}
	return false, fmt.Errorf("more than %d levels below the file system's root", maxWalkDepth)
}

// parentNode makes the node of a directory's parent, opened (O_PATH) by
// LOOKUP of "..", taking ownership of fd. The directory may have left the
// export since it was resolved, taking its parent with it: the parent must
// pass the same check as an inode a handle resolves to.
func (s *Server) parentNode(fd int) (*node, error) {
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		unix.Close(fd)
		return nil, err
	}
	if err := s.checkWithin(fd, &st); err != nil {
		unix.Close(fd)
		return nil, err
	}
	return s.nodeFromFd(fd, &st)
}

// openDotDot opens the parent of the directory dirFd as O_PATH. The walk
// must not cross mounts: the export's inodes are all on its own mount.
func openDotDot(dirFd int) (int, error) {
	how := unix.OpenHow{
		Flags:   uint64(unix.O_PATH | unix.O_DIRECTORY | unix.O_NOFOLLOW | unix.O_CLOEXEC),
		Resolve: unix.RESOLVE_NO_SYMLINKS | unix.RESOLVE_NO_MAGICLINKS | unix.RESOLVE_NO_XDEV,
	}
	for {
		fd, err := unix.Openat2(dirFd, "..", &how)
		switch {
		case err == nil:
			return fd, nil
		case errors.Is(err, unix.EINTR), errors.Is(err, unix.EAGAIN):
			continue
		case errors.Is(err, unix.ENOSYS):
			return unix.Openat(dirFd, "..", int(how.Flags), 0)
		}
		return -1, err
	}
}

// fileNotOutside reports false only when the non-directory fd refers to is
// known to lie outside the export: the kernel names it by a path outside
// the export root, and that path is its only name.
func (s *Server) fileNotOutside(fd int, st *unix.Stat_t) bool {
	if s.root == "/" {
		return true
	}
	var buf [unix.PathMax]byte
	k, err := unix.Readlink(procFdPath(fd), buf[:])
	if err != nil || k >= len(buf) {
		return true // no name to judge by
	}
	p := string(buf[:k])
	if strings.HasPrefix(p, s.root+"/") {
		return true
	}
	if st.Nlink != 1 || !strings.HasPrefix(p, "/") {
		return true // another name may be inside; or no real path
	}
	// A disconnected inode reads as "/", which names another inode: only a
	// path that really leads to this inode proves where it is.
	var pst unix.Stat_t
	if unix.Lstat(p, &pst) != nil {
		return true
	}
	return pst.Dev != st.Dev || pst.Ino != st.Ino
}
