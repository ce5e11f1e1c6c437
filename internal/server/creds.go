package server

import (
	"errors"
	"fmt"
	"runtime"
	"slices"
	"sync/atomic"
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
// runs each credentialed operation locked to its thread, switches, operates,
// and switches back before the thread can run anything else. With a non-zero
// fsuid the kernel drops the file-system capabilities; we also clear every
// other effective capability (CAP_SYS_RESOURCE would let a user eat reserved
// blocks), so the operation has exactly the caller's privileges.
//
// Each credential change costs the kernel a new credential structure (about
// 1.5 µs here, against 0.15 µs for a system call that reads one), so only
// what differs from the server's own credentials is changed: the groups
// only when the caller's differ, the ids only when they are not the
// server's. The thread is not left with the caller's credentials in the
// hope that the next call comes from the same user: the Go runtime would
// run any goroutine of the process on it meanwhile, and start new threads
// from it that inherit them.
type credSwitcher struct {
	uid, gid uint32   // the server's own file-system ids
	groups   []uint32 // the server's own supplementary groups
	hdr      unix.CapUserHeader
	caps     [2]unix.CapUserData // the server's own capabilities

	// leaveFault, set by tests, makes leave fail before it restores
	// anything.
	leaveFault atomic.Pointer[func() error]
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
	// An invalid id changes nothing and returns the current one.
	uid, _, _ := unix.RawSyscall(unix.SYS_SETFSUID, ^uintptr(0), 0, 0)
	gid, _, _ := unix.RawSyscall(unix.SYS_SETFSGID, ^uintptr(0), 0, 0)
	c.uid, c.gid = uint32(uid), uint32(gid)
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

// switched records which credentials enter changed, for leave to restore.
type switched struct{ gid, groups, uid, caps bool }

// enter switches the calling thread to id, changing only what differs from
// the server's own credentials. On error the thread may be half switched;
// the caller must call leave with what it returned.
func (c *credSwitcher) enter(id *identity) (sw switched, err error) {
	// Each part is marked before it is changed, so that leave restores a
	// part whose change failed half way.
	if id.gid != c.gid {
		sw.gid = true
		if err := setfs(unix.SYS_SETFSGID, id.gid); err != nil {
			return sw, err
		}
	}
	if !slices.Equal(id.groups, c.groups) {
		sw.groups = true
		if err := setgroups(id.groups); err != nil {
			return sw, err
		}
	}
	if id.uid != c.uid {
		sw.uid = true
		if err := setfs(unix.SYS_SETFSUID, id.uid); err != nil {
			return sw, err
		}
	}
	if id.uid != 0 {
		sw.caps = true
		none := c.caps
		none[0].Effective, none[1].Effective = 0, 0
		if err := c.capset(&none); err != nil {
			return sw, err
		}
	}
	return sw, nil
}

// leave restores the server's own credentials on the calling thread, as
// far as enter changed them.
func (c *credSwitcher) leave(sw switched) error {
	if f := c.leaveFault.Load(); f != nil {
		if err := (*f)(); err != nil {
			return err
		}
	}
	// Capabilities first: the changes below need CAP_SETUID/CAP_SETGID.
	if sw.caps {
		caps := c.caps
		if err := c.capset(&caps); err != nil {
			return err
		}
	}
	if sw.uid {
		if err := setfs(unix.SYS_SETFSUID, c.uid); err != nil {
			return err
		}
	}
	if sw.gid {
		if err := setfs(unix.SYS_SETFSGID, c.gid); err != nil {
			return err
		}
	}
	if sw.groups {
		return setgroups(c.groups)
	}
	return nil
}

// as runs fn with the credentials of id, on the calling goroutine locked to
// its OS thread. A privileged identity runs fn directly. If the thread's
// credentials cannot be restored afterwards, the goroutine ends still
// locked (runtime.Goexit), and the Go runtime discards the thread rather
// than reuse it with someone else's identity; the RPC server drops the
// call and the connection, and replaces a worker that ends so. Panics in fn
// are returned as errors, after the credentials are restored.
func (s *Server) as(id *identity, fn func() error) error {
	if id.privileged() {
		return fn()
	}
	runtime.LockOSThread()
	var err error
	sw, e := s.creds.enter(id)
	if e != nil {
		err = fmt.Errorf("switching to uid %d gid %d: %w: %w", id.uid, id.gid, nfs3.ErrServerFault, e)
	} else {
		err = runGuarded(fn)
	}
	if e := s.creds.leave(sw); e != nil {
		s.logf("hushfs server: restoring credentials failed, retiring the thread: %v", e)
		runtime.Goexit()
	}
	runtime.UnlockOSThread()
	return err
}

func runGuarded(fn func() error) (err error) {
	defer func() {
		if p := recover(); p != nil {
			err = fmt.Errorf("%w: panic: %v", nfs3.ErrServerFault, p)
		}
	}()
	return fn()
}
