package proto

import (
	"context"
	"errors"
	"fmt"
	"syscall"
	"testing"
)

// TestErrorMatching: a server's failure matches the errno it means and,
// for the statuses the core acts on, its sentinel; wrapped, it keeps both
// and its name; errors that are not answers match none of it.
func TestErrorMatching(t *testing.T) {
	stale := Error{Errno: syscall.ESTALE, Name: "NFS3ERR_STALE"}
	bad := Error{Errno: syscall.EIO, Name: "NFS3ERR_BAD_COOKIE", Cond: CondBadCookie}
	wrapped := fmt.Errorf("listing: %w", bad)
	switch {
	case !errors.Is(stale, syscall.ESTALE), errors.Is(stale, syscall.ENOENT):
		t.Error("errno matching")
	case errors.Is(stale, ErrBadCookie), errors.Is(stale, ErrIO):
		t.Error("an Error without a Cond matched a sentinel")
	case !errors.Is(wrapped, ErrBadCookie), errors.Is(wrapped, ErrNotSupp), !errors.Is(wrapped, syscall.EIO):
		t.Error("a wrapped bad cookie")
	case wrapped.Error() != "listing: NFS3ERR_BAD_COOKIE":
		t.Errorf("message %q", wrapped)
	case ErrnoOf(wrapped) != syscall.EIO, ErrnoOf(context.Canceled) != 0, ErrnoOf(nil) != 0:
		t.Error("ErrnoOf")
	case !IsAnswer(wrapped), IsAnswer(syscall.EIO), IsAnswer(fmt.Errorf("x: %w", context.DeadlineExceeded)):
		t.Error("IsAnswer")
	}
}
