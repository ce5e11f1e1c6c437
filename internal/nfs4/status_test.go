package nfs4

import (
	"errors"
	"fmt"
	"os"
	"syscall"
	"testing"
)

// TestStatusErrno checks that the server's errno-to-status mapping and the
// client's status-to-errno mapping agree, so a local error crosses the wire
// and comes back as itself.
func TestStatusErrno(t *testing.T) {
	for _, en := range []syscall.Errno{syscall.EPERM, syscall.ENOENT, syscall.EIO, syscall.ENXIO,
		syscall.EACCES, syscall.EEXIST, syscall.EXDEV, syscall.ENOTDIR, syscall.EISDIR, syscall.ELOOP,
		syscall.EINVAL, syscall.EFBIG, syscall.ENOSPC, syscall.EROFS, syscall.EMLINK, syscall.ENAMETOOLONG,
		syscall.ENOTEMPTY, syscall.EDQUOT, syscall.ESTALE, syscall.EOPNOTSUPP, syscall.EAGAIN,
		syscall.EDEADLK, syscall.EBUSY} {
		err := &os.PathError{Op: "open", Path: "x", Err: en}
		st := StatusOf(fmt.Errorf("wrapped: %w", err))
		if st == OK || st.Errno() != en {
			t.Errorf("%v -> %v -> %v", en, st, st.Errno())
		}
		if st.String() == fmt.Sprintf("nfsstat4(%d)", uint32(st)) {
			t.Errorf("%v has no name", st)
		}
	}
	// Errors without a local twin: what the client's caller sees.
	for st, en := range map[Status]syscall.Errno{
		ErrBadHandle: syscall.ESTALE, ErrFHExpired: syscall.ESTALE, ErrDenied: syscall.EAGAIN,
		ErrGrace: syscall.EAGAIN, ErrShareDenied: syscall.EACCES, ErrAttrNotSupp: syscall.EOPNOTSUPP,
		ErrBadName: syscall.EINVAL, ErrBadOwner: syscall.EINVAL, ErrLockRange: syscall.ENOLCK,
		ErrBadSession: syscall.EIO, ErrExpired: syscall.EIO, Status(77777): syscall.EIO, OK: 0,
	} {
		if st.Errno() != en {
			t.Errorf("%v -> %v, want %v", st, st.Errno(), en)
		}
	}
	if StatusOf(nil) != OK || StatusOf(errors.New("plain")) != ErrIO || StatusOf(syscall.ENODEV) != ErrNXIO {
		t.Error("StatusOf(nil / no errno / ENODEV)")
	}
	if StatusOf(fmt.Errorf("x: %w", ErrDelay)) != ErrDelay {
		t.Error("a wrapped Status is kept")
	}
}
