package nfs3

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
		syscall.EACCES, syscall.EEXIST, syscall.EXDEV, syscall.ENODEV, syscall.ENOTDIR, syscall.EISDIR,
		syscall.EINVAL, syscall.EFBIG, syscall.ENOSPC, syscall.EROFS, syscall.EMLINK, syscall.ENAMETOOLONG,
		syscall.ENOTEMPTY, syscall.EDQUOT, syscall.ESTALE, syscall.EREMOTE, syscall.EOPNOTSUPP, syscall.EAGAIN} {
		err := &os.PathError{Op: "open", Path: "x", Err: en}
		st := StatusOf(fmt.Errorf("wrapped: %w", err))
		if st == OK || st.Errno() != en {
			t.Errorf("%v -> %v -> %v", en, st, st.Errno())
		}
		if st.String() == fmt.Sprintf("nfsstat3(%d)", uint32(st)) {
			t.Errorf("%v has no name", st)
		}
	}
	if StatusOf(nil) != OK || StatusOf(errors.New("plain")) != ErrIO {
		t.Error("StatusOf(nil / no errno)")
	}
	if StatusOf(fmt.Errorf("x: %w", ErrStale)) != ErrStale {
		t.Error("a wrapped Status is kept")
	}
	if ErrNotSupp.Error() != "NFS3ERR_NOTSUPP" || Status(12345).String() != "nfsstat3(12345)" {
		t.Error("Status names")
	}
	if FileSync.String() != "FILE_SYNC" || StableHow(7).String() != "stable_how(?)" {
		t.Error("StableHow names")
	}
}
