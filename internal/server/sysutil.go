package server

import (
	"bytes"
	"errors"
	"math"
	"strconv"
	"unsafe"

	"golang.org/x/sys/unix"

	"hushfs/internal/nfs3"
)

// procFdPath names a descriptor through /proc, for the calls that have no
// descriptor-relative form usable without privileges (linkat and truncate of
// an O_PATH descriptor). Following such a "magic link" is allowed to the
// process itself whatever its file-system credentials.
func procFdPath(fd int) string { return "/proc/self/fd/" + strconv.Itoa(fd) }

// openResolveFlags confine a single-component lookup: no symbolic link is
// followed (the final one is opened as itself with O_PATH|O_NOFOLLOW), no
// magic link, no mount point crossed, and nothing outside the directory
// reached (RESOLVE_BENEATH refuses ".." and absolute names, should one ever
// get past checkName; LOOKUP of ".." has its own path, openDotDot).
const openResolveFlags = unix.RESOLVE_BENEATH | unix.RESOLVE_NO_SYMLINKS | unix.RESOLVE_NO_MAGICLINKS | unix.RESOLVE_NO_XDEV

// openEntry opens name (one component) in dirFd as O_PATH without following
// it. Crossing into another mount yields errMountPoint.
func openEntry(dirFd int, name string, extra int) (int, error) {
	how := unix.OpenHow{
		Flags:   uint64(unix.O_PATH | unix.O_NOFOLLOW | unix.O_CLOEXEC | extra),
		Resolve: openResolveFlags,
	}
	if name == ".." {
		// Never an entry of the directory (and not confined by the
		// fallback below).
		return -1, nfs3.ErrInval
	}
	for {
		fd, err := unix.Openat2(dirFd, name, &how)
		switch {
		case err == nil:
			return fd, nil
		case errors.Is(err, unix.EINTR), errors.Is(err, unix.EAGAIN):
			continue
		case errors.Is(err, unix.EXDEV):
			return -1, errMountPoint
		case errors.Is(err, unix.ENOSYS):
			// Kernels before 5.6: a single component with O_NOFOLLOW
			// follows nothing either; only the mount check is lost.
			return unix.Openat(dirFd, name, int(how.Flags), 0)
		}
		return -1, err
	}
}

// fchmodEmpty changes the mode of the inode fd refers to, O_PATH descriptors
// included (fchmod refuses those).
func fchmodEmpty(fd int, mode uint32) error {
	var empty [1]byte
	_, _, e := unix.Syscall6(unix.SYS_FCHMODAT2, uintptr(fd), uintptr(unsafe.Pointer(&empty[0])),
		uintptr(mode), unix.AT_EMPTY_PATH, 0, 0)
	switch e {
	case 0:
		return nil
	case unix.ENOSYS:
		return unix.Fchmodat(unix.AT_FDCWD, procFdPath(fd), mode, 0)
	}
	return e
}

// accessOK reports whether the calling thread's credentials grant mode
// (R_OK, W_OK, X_OK) on the inode fd refers to. AT_EACCESS makes the kernel
// use the file-system ids we switched to, not the real ids.
func accessOK(fd int, mode uint32) error {
	return unix.Faccessat2(fd, "", mode, unix.AT_EACCESS|unix.AT_EMPTY_PATH)
}

// checkName validates one file name component from a client. A name longer
// than the most PATHCONF ever reports is NAMETOOLONG here; a shorter one that
// the export's file system cannot take gets ENAMETOOLONG from its kernel,
// which maps to the same status.
func checkName(name []byte) error {
	switch {
	case len(name) == 0:
		return nfs3.ErrInval
	case len(name) > nfs3.MaxNameLen:
		return nfs3.ErrNameTooLong
	case bytes.IndexByte(name, '/') >= 0, bytes.IndexByte(name, 0) >= 0:
		return nfs3.ErrInval
	}
	return nil
}

func isDot(name []byte) bool {
	return string(name) == "." || string(name) == ".."
}

// timespecOf converts a set_atime/set_mtime to utimensat's form.
func timespecOf(t nfs3.SetTime) unix.Timespec {
	switch t.How {
	case nfs3.SetToServerTime:
		return unix.Timespec{Nsec: unix.UTIME_NOW}
	case nfs3.SetToClientTime:
		return unix.Timespec{Sec: int64(t.Time.Seconds), Nsec: int64(t.Time.Nseconds)}
	}
	return unix.Timespec{Nsec: unix.UTIME_OMIT}
}

// linkMax is the most links an inode may have, by file system type.
func linkMax(fsType int64) uint32 {
	switch fsType {
	case unix.EXT4_SUPER_MAGIC: // also ext2 and ext3
		return 65000
	case unix.XFS_SUPER_MAGIC:
		return math.MaxInt32
	case unix.BTRFS_SUPER_MAGIC:
		return 65535
	case unix.TMPFS_MAGIC:
		return math.MaxUint32
	}
	return 32000
}
