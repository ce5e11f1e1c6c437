package nfs3

import (
	"errors"
	"fmt"
	"syscall"
)

// Status is nfsstat3. It implements error for every value but OK.
type Status uint32

const (
	OK             Status = 0
	ErrPerm        Status = 1
	ErrNoEnt       Status = 2
	ErrIO          Status = 5
	ErrNXIO        Status = 6
	ErrAcces       Status = 13
	ErrExist       Status = 17
	ErrXDev        Status = 18
	ErrNoDev       Status = 19
	ErrNotDir      Status = 20
	ErrIsDir       Status = 21
	ErrInval       Status = 22
	ErrFBig        Status = 27
	ErrNoSpc       Status = 28
	ErrROFS        Status = 30
	ErrMLink       Status = 31
	ErrNameTooLong Status = 63
	ErrNotEmpty    Status = 66
	ErrDQuot       Status = 69
	ErrStale       Status = 70
	ErrRemote      Status = 71
	ErrBadHandle   Status = 10001
	ErrNotSync     Status = 10002
	ErrBadCookie   Status = 10003
	ErrNotSupp     Status = 10004
	ErrTooSmall    Status = 10005
	ErrServerFault Status = 10006
	ErrBadType     Status = 10007
	ErrJukebox     Status = 10008
)

var statusNames = map[Status]string{
	OK: "NFS3_OK", ErrPerm: "NFS3ERR_PERM", ErrNoEnt: "NFS3ERR_NOENT", ErrIO: "NFS3ERR_IO",
	ErrNXIO: "NFS3ERR_NXIO", ErrAcces: "NFS3ERR_ACCES", ErrExist: "NFS3ERR_EXIST",
	ErrXDev: "NFS3ERR_XDEV", ErrNoDev: "NFS3ERR_NODEV", ErrNotDir: "NFS3ERR_NOTDIR",
	ErrIsDir: "NFS3ERR_ISDIR", ErrInval: "NFS3ERR_INVAL", ErrFBig: "NFS3ERR_FBIG",
	ErrNoSpc: "NFS3ERR_NOSPC", ErrROFS: "NFS3ERR_ROFS", ErrMLink: "NFS3ERR_MLINK",
	ErrNameTooLong: "NFS3ERR_NAMETOOLONG", ErrNotEmpty: "NFS3ERR_NOTEMPTY",
	ErrDQuot: "NFS3ERR_DQUOT", ErrStale: "NFS3ERR_STALE", ErrRemote: "NFS3ERR_REMOTE",
	ErrBadHandle: "NFS3ERR_BADHANDLE", ErrNotSync: "NFS3ERR_NOT_SYNC",
	ErrBadCookie: "NFS3ERR_BAD_COOKIE", ErrNotSupp: "NFS3ERR_NOTSUPP",
	ErrTooSmall: "NFS3ERR_TOOSMALL", ErrServerFault: "NFS3ERR_SERVERFAULT",
	ErrBadType: "NFS3ERR_BADTYPE", ErrJukebox: "NFS3ERR_JUKEBOX",
}

func (s Status) String() string {
	if n, ok := statusNames[s]; ok {
		return n
	}
	return fmt.Sprintf("nfsstat3(%d)", uint32(s))
}

func (s Status) Error() string { return s.String() }

// Errno maps a status to the errno a local system call would have returned.
// This is the one place the client turns NFS errors into errno values.
func (s Status) Errno() syscall.Errno {
	switch s {
	case OK:
		return 0
	case ErrPerm:
		return syscall.EPERM
	case ErrNoEnt:
		return syscall.ENOENT
	case ErrIO:
		return syscall.EIO
	case ErrNXIO:
		return syscall.ENXIO
	case ErrAcces:
		return syscall.EACCES
	case ErrExist:
		return syscall.EEXIST
	case ErrXDev:
		return syscall.EXDEV
	case ErrNoDev:
		return syscall.ENODEV
	case ErrNotDir:
		return syscall.ENOTDIR
	case ErrIsDir:
		return syscall.EISDIR
	case ErrInval:
		return syscall.EINVAL
	case ErrFBig:
		return syscall.EFBIG
	case ErrNoSpc:
		return syscall.ENOSPC
	case ErrROFS:
		return syscall.EROFS
	case ErrMLink:
		return syscall.EMLINK
	case ErrNameTooLong:
		return syscall.ENAMETOOLONG
	case ErrNotEmpty:
		return syscall.ENOTEMPTY
	case ErrDQuot:
		return syscall.EDQUOT
	case ErrStale, ErrBadHandle:
		return syscall.ESTALE
	case ErrRemote:
		return syscall.EREMOTE
	case ErrNotSupp, ErrBadType:
		return syscall.EOPNOTSUPP
	case ErrTooSmall:
		return syscall.ERANGE
	case ErrJukebox:
		return syscall.EAGAIN
	case ErrBadCookie, ErrNotSync:
		return syscall.EIO
	}
	return syscall.EIO
}

// StatusOf maps an error from a local file system call to the status a
// server returns. This is the one place the server turns errno into NFS
// errors; an error that carries no errno becomes NFS3ERR_IO.
func StatusOf(err error) Status {
	if err == nil {
		return OK
	}
	var st Status
	if errors.As(err, &st) {
		return st
	}
	var en syscall.Errno
	if !errors.As(err, &en) {
		return ErrIO
	}
	switch en {
	case syscall.EPERM:
		return ErrPerm
	case syscall.ENOENT:
		return ErrNoEnt
	case syscall.EIO:
		return ErrIO
	case syscall.ENXIO:
		return ErrNXIO
	case syscall.EACCES:
		return ErrAcces
	case syscall.EEXIST:
		return ErrExist
	case syscall.EXDEV:
		return ErrXDev
	case syscall.ENODEV:
		return ErrNoDev
	case syscall.ENOTDIR, syscall.ELOOP:
		// ELOOP: a symlink where a directory was needed (O_NOFOLLOW walks).
		return ErrNotDir
	case syscall.EISDIR:
		return ErrIsDir
	case syscall.EINVAL:
		return ErrInval
	case syscall.EFBIG:
		return ErrFBig
	case syscall.ENOSPC:
		return ErrNoSpc
	case syscall.EROFS:
		return ErrROFS
	case syscall.EMLINK:
		return ErrMLink
	case syscall.ENAMETOOLONG:
		return ErrNameTooLong
	case syscall.ENOTEMPTY:
		return ErrNotEmpty
	case syscall.EDQUOT:
		return ErrDQuot
	case syscall.ESTALE:
		return ErrStale
	case syscall.EREMOTE:
		return ErrRemote
	case syscall.EOPNOTSUPP:
		return ErrNotSupp
	case syscall.EAGAIN:
		return ErrJukebox
	case syscall.EBADF:
		return ErrBadHandle
	}
	return ErrIO
}
