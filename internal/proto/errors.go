package proto

import (
	"errors"
	"syscall"
)

// Error is a server's answer that an operation failed: the errno it means
// locally (from the protocol's own mapping, nfs3/status.go or
// nfs4/status.go) and the protocol's name for the status, for messages.
// Cond marks the few statuses the core acts on that no errno tells apart.
//
// errors.Is(err, syscall.ENOENT) holds for an Error whose Errno is ENOENT;
// errors.Is(err, ErrBadCookie) for one whose Cond is CondBadCookie.
type Error struct {
	Errno syscall.Errno
	Name  string // "NFS3ERR_NOENT", "NFS4ERR_DELAY"
	Cond  Cond
}

// Cond is a status the core treats specially beyond its errno.
type Cond uint8

const (
	CondNone Cond = iota
	// CondBadCookie: a listing cookie or verifier the server no longer
	// honours (the listing is read again from its start).
	CondBadCookie
	// CondNotSupp: the server does not do the operation at all (a server
	// without READDIRPLUS), as opposed to this file's type not allowing it.
	CondNotSupp
	// CondBadState: the server no longer knows the open or lock state a
	// call named (v4.1 BAD_STATEID, EXPIRED, ADMIN_REVOKED…): the core
	// opens the file again, once.
	CondBadState
	// CondNoGrace: the server takes no reclaims (its grace period is
	// over, or it never had one): nothing more can be reclaimed.
	CondNoGrace
	// CondDelay: the server cannot do it yet (v4.1 NFS4ERR_DELAY: a
	// delegation of the file is being recalled), for a caller that asked
	// to be told rather than have it waited out (OpenArgs.NoWait).
	CondDelay
)

func (e Error) Error() string { return e.Name }

// Is matches the errno e means, or a sentinel Error of the same Cond.
func (e Error) Is(target error) bool {
	switch t := target.(type) {
	case syscall.Errno:
		return e.Errno == t
	case Error:
		return t.Cond != CondNone && t.Cond == e.Cond
	}
	return false
}

// Sentinels for errors.Is.
var (
	ErrBadCookie = Error{Errno: syscall.EIO, Name: "bad listing cookie", Cond: CondBadCookie}
	ErrNotSupp   = Error{Errno: syscall.EOPNOTSUPP, Name: "operation not supported", Cond: CondNotSupp}
	ErrBadState  = Error{Errno: syscall.EIO, Name: "state unknown to the server", Cond: CondBadState}
	ErrNoGrace   = Error{Errno: syscall.EIO, Name: "no grace period", Cond: CondNoGrace}
	ErrDelay     = Error{Errno: syscall.EAGAIN, Name: "NFS4ERR_DELAY", Cond: CondDelay}
)

// ErrIO is the core's own failure of a server's answer it cannot use (a
// listing that loops, a WRITE that wrote nothing): like a server's I/O
// error status, it says the server answered, and the kernel gets EIO.
var ErrIO = Error{Errno: syscall.EIO, Name: "input/output error"}

// ErrnoOf returns the errno of the server's failure in err's chain, or 0
// if err is not one (nil, or no answer from the server).
func ErrnoOf(err error) syscall.Errno {
	var e Error
	if errors.As(err, &e) {
		return e.Errno
	}
	return 0
}

// IsAnswer reports whether err is a server's answer (an Error), as
// opposed to the call getting none.
func IsAnswer(err error) bool {
	var e Error
	return errors.As(err, &e)
}
