package server

import (
	"errors"
	"fmt"
	"runtime"
	"unsafe"

	"golang.org/x/sys/unix"

	"hushfs/internal/nfs3"
	"hushfs/internal/rpc"
)

// Squash selects which callers are mapped to the anonymous identity, as the
// root_squash, no_root_squash and all_squash export options do.
type Squash int

const (
	// RootSquash maps uid 0 to the anonymous uid, gid 0 to the anonymous
	// gid, and group 0 among the auxiliary groups to the anonymous gid: a
	// client's root is not the server's root.
	RootSquash Squash = iota
	// NoRootSquash takes every AUTH_SYS identity as sent, root included.
	NoRootSquash
	// AllSquash maps every caller to the anonymous uid and gid, without
	// auxiliary groups.
	AllSquash
)

func (q Squash) String() string {
	switch q {
	case RootSquash:
		return "root_squash"
	case NoRootSquash:
		return "no_root_squash"
	case AllSquash:
		return "all_squash"
	}
	return fmt.Sprintf("squash(%d)", int(q))
}

// DefaultAnonID is the anonymous uid and gid unless configured ("nobody").
const DefaultAnonID = 65534

// identity is the credential an operation runs with.
type identity struct {
	uid, gid uint32
	groups   []uint32 // auxiliary groups
}

// isRoot reports whether the identity is the superuser, who is neither
// subject to permission checks nor has them checked on its behalf.
func (id *identity) isRoot() bool { return id.uid == 0 }

// privileged reports whether operations may run with the server's own
// credentials unchanged: uid and gid 0. (uid 0 with another gid still
// switches, so that new files get that group.)
func (id *identity) privileged() bool { return id.uid == 0 && id.gid == 0 }

// identityOf returns the identity a call runs with: its AUTH_SYS ids after
// squashing, or the anonymous identity for anything else (AUTH_NONE). Every
// permission decision, and the credentials operations switch to, use this
// identity only.
func (s *Server) identityOf(call *rpc.Call) identity {
	anon := identity{uid: s.anonUID, gid: s.anonGID}
	if s.squash == AllSquash {
		return anon
	}
	p, ok := call.AuthSys()
	// -1 is no valid id (the kernel reads it as "unchanged").
	if !ok || p.UID == ^uint32(0) || p.GID == ^uint32(0) {
		return anon
	}
	id := identity{uid: p.UID, gid: p.GID}
	if s.squash == RootSquash {
		if id.uid == 0 {
			id.uid = s.anonUID
		}
		if id.gid == 0 {
			id.gid = s.anonGID
		}
	}
	for _, g := range p.GIDs {
		switch {
		case g == ^uint32(0):
			continue
		case g == 0 && s.squash == RootSquash:
			g = s.anonGID
		}
		id.groups = append(id.groups, g)
	}
	return id
}

// credSwitcher changes the file-system credentials of the calling OS thread.
//
// Linux keeps credentials per thread; the raw setfsuid, setfsgid, setgroups
// and capset system calls change only the calling thread (the C library and
// Go's syscall.Set* instead apply them to every thread). The server therefore
// runs each credentialed operation on a goroutine locked to its thread,
// switches, operates, and switches back. With a non-zero fsuid the kernel
// drops the file-system capabilities; we also clear every other effective
// capability (CAP_SYS_RESOURCE would let a user eat reserved blocks), so the
// operation has exactly the caller's privileges.
type credSwitcher struct {
	groups []uint32 // the server's own supplementary groups
	hdr    unix.CapUserHeader
	caps   [2]unix.CapUserData // the server's own capabilities
}

func newCredSwitcher() (*credSwitcher, error) {
	c := &credSwitcher{hdr: unix.CapUserHeader{Version: unix.LINUX_CAPABILITY_VERSION_3}}
	if err := unix.Capget(&c.hdr, &c.caps[0]); err != nil {
		return nil, fmt.Errorf("capget: %w", err)
	}
	need := []struct {
		capability int
		name       string
	}{
		{unix.CAP_SETUID, "CAP_SETUID"},
		{unix.CAP_SETGID, "CAP_SETGID"},
		{unix.CAP_DAC_READ_SEARCH, "CAP_DAC_READ_SEARCH"},
		{unix.CAP_DAC_OVERRIDE, "CAP_DAC_OVERRIDE"},
		{unix.CAP_CHOWN, "CAP_CHOWN"},
		{unix.CAP_FOWNER, "CAP_FOWNER"},
	}
	for _, n := range need {
		if c.caps[n.capability/32].Effective&(1<<(n.capability%32)) == 0 {
			return nil, fmt.Errorf("the server needs %s (run it as root)", n.name)
		}
	}
	gs, err := unix.Getgroups()
	if err != nil {
		return nil, fmt.Errorf("getgroups: %w", err)
	}
	for _, g := range gs {
		c.groups = append(c.groups, uint32(g))
	}
	return c, nil
}

var errCredSwitch = errors.New("switching credentials failed")

func setgroups(gs []uint32) error {
	var p unsafe.Pointer
	if len(gs) > 0 {
		p = unsafe.Pointer(&gs[0])
	}
	if _, _, e := unix.RawSyscall(unix.SYS_SETGROUPS, uintptr(len(gs)), uintptr(p), 0); e != 0 {
		return e
	}
	return nil
}

// setfs calls setfsuid or setfsgid and verifies the result: the calls report
// no errors, only the previous value, so we read back the current one by
// passing an invalid id.
func setfs(trap uintptr, id uint32) error {
	unix.RawSyscall(trap, uintptr(id), 0, 0)
	cur, _, _ := unix.RawSyscall(trap, ^uintptr(0), 0, 0)
	if uint32(cur) != id {
		return errCredSwitch
	}
	return nil
}

func (c *credSwitcher) capset(data *[2]unix.CapUserData) error {
	hdr := c.hdr
	if _, _, e := unix.RawSyscall(unix.SYS_CAPSET, uintptr(unsafe.Pointer(&hdr)), uintptr(unsafe.Pointer(&data[0])), 0); e != 0 {
		return e
	}
	return nil
}

// enter switches the calling thread to id. On error the thread may be half
// switched; the caller must call leave.
func (c *credSwitcher) enter(id *identity) error {
	if err := setfs(unix.SYS_SETFSGID, id.gid); err != nil {
		return err
	}
	if err := setgroups(id.groups); err != nil {
		return err
	}
	if err := setfs(unix.SYS_SETFSUID, id.uid); err != nil {
		return err
	}
	if id.uid != 0 {
		none := c.caps
		none[0].Effective, none[1].Effective = 0, 0
		if err := c.capset(&none); err != nil {
			return err
		}
	}
	return nil
}

// leave restores the server's own credentials on the calling thread.
func (c *credSwitcher) leave() error {
	// Capabilities first: the id changes below need CAP_SETUID/CAP_SETGID.
	caps := c.caps
	if err := c.capset(&caps); err != nil {
		return err
	}
	if err := setfs(unix.SYS_SETFSUID, 0); err != nil {
		return err
	}
	if err := setfs(unix.SYS_SETFSGID, 0); err != nil {
		return err
	}
	return setgroups(c.groups)
}

// as runs fn with the credentials of id. A privileged identity runs fn
// directly. Otherwise fn runs on a fresh goroutine locked to its OS thread:
// if the thread's credentials cannot be restored afterwards, the goroutine
// exits still locked and the Go runtime discards the thread rather than
// reuse it with someone else's identity. Panics in fn are returned as
// errors, since no caller up that goroutine's stack could recover them.
func (s *Server) as(id *identity, fn func() error) error {
	if id.privileged() {
		return fn()
	}
	done := make(chan error, 1)
	go func() {
		runtime.LockOSThread()
		var err error
		if e := s.creds.enter(id); e != nil {
			err = fmt.Errorf("switching to uid %d gid %d: %w: %w", id.uid, id.gid, nfs3.ErrServerFault, e)
		} else {
			err = runGuarded(fn)
		}
		if e := s.creds.leave(); e != nil {
			s.logf("hushfs server: restoring credentials failed, retiring thread: %v", e)
			done <- err
			return // still locked: the thread ends with this goroutine
		}
		runtime.UnlockOSThread()
		done <- err
	}()
	return <-done
}

func runGuarded(fn func() error) (err error) {
	defer func() {
		if p := recover(); p != nil {
			err = fmt.Errorf("%w: panic: %v", nfs3.ErrServerFault, p)
		}
	}()
	return fn()
}
