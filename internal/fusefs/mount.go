package fusefs

import (
	"errors"
	"fmt"
	"log"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/hanwen/go-fuse/v2/fuse"
	"golang.org/x/sys/unix"

	"hushfs/internal/client"
)

const (
	// MaxWrite is the largest READ and WRITE the kernel sends: the core's
	// largest transfer, so one FUSE request becomes at most one RPC.
	// go-fuse asks for max_pages = MaxWrite / page size (256 pages of
	// 4 KiB, the default /proc/sys/fs/fuse/max_pages_limit) and sets
	// max_read to match; kernels before 4.20 cap requests at 128 KiB.
	MaxWrite = 1 << 20

	// ReadAhead is the sequential read-ahead window set on the mount's
	// backing device after mounting. FUSE's INIT can only lower the
	// kernel's default (128 KiB), so it is raised through sysfs: four
	// 1 MiB READs in flight keep a long round trip busy, and the window
	// only grows that large for reads that are actually sequential.
	ReadAhead = 4 << 20

	// maxBackground bounds the kernel's asynchronous requests (read-ahead,
	// background writes): enough to keep ReadAhead's READs in flight on
	// several files at once.
	maxBackground = 64
)

// MountConfig says how to mount.
type MountConfig struct {
	// Source is "SERVER:/export", the mount's source in /proc/mounts.
	Source  string
	Options client.Options
	// Debug logs every FUSE request and reply through Logf.
	Debug bool
	Logf  func(format string, args ...any)
	// RuntimeDir is where the statistics socket goes; empty means
	// RuntimeDir(the mounting user), where `hushfs stats` looks.
	RuntimeDir string
}

// MountOptions returns the go-fuse options for a mount. Choices:
//
//   - FsName is the NFS source and Name "hushfs", so /proc/mounts shows
//     "SERVER:/export" of type fuse.hushfs (what umount and mount(8) key on).
//   - default_permissions: the kernel checks permissions against the mode
//     bits of the attributes we hand it, on every path walk, as well as the
//     server checking every call with the caller's credentials. Without it
//     the kernel asks nothing for a path it has cached, so a name looked up
//     by one user would be reachable by another through a directory that
//     user may not search — a check an NFS client makes with ACCESS on
//     every walk.
//   - MaxWrite 1 MiB (max_pages 256): see MaxWrite.
//   - MaxReadAhead is asked at MaxWrite, which INIT clamps to the kernel's
//     default; ReadAhead raises it after mounting.
//   - MaxBackground 64: see maxBackground.
//   - No extended attributes: the adapter answers the four xattr requests
//     ENOSYS, which the kernel keeps for the connection and answers
//     EOPNOTSUPP itself from then on (xattr.go). DisableXAttrs would do the
//     same inside go-fuse, but the requests would not be counted.
//     IgnoreSecurityLabels is off: its ENODATA for security.capability
//     (asked before every write) and POSIX ACLs would keep the kernel
//     asking for them.
//   - EnableLocks false: NFSv3 locking is NLM, another protocol; the kernel
//     keeps locks local to this machine, as nfs(5)'s "nolock" does. Mount
//     turns them on for a server that grants locks (NFSv4.1: lock.go).
//   - EnableSymlinkCaching: see the package documentation.
//   - ExplicitDataCacheControl false: the kernel drops a file's pages when
//     it sees its mtime or size change, and refreshes its cached size
//     before reads. With explicit control it kept a stale size after
//     another client shrank a file (found by fsx with another client's
//     changes): reads within the old size returned zero-filled tails. The
//     pages it drops for our own writes cost no READ: the core keeps what
//     we wrote and read as clean data and answers from it.
//   - READDIRPLUS always (not CAP_READDIRPLUS_AUTO) unless nordirplus: one
//     READDIRPLUS answers both "ls" and "ls -l". The kernel's auto mode
//     (plus only once the directory's entries are being looked up) was
//     measured and rejected: ls -l reads the whole directory before its
//     first stat, so the kernel switched to plain READDIR and then looked up
//     every entry (99,807 LOOKUPs for 100,000 entries). With nordirplus the
//     kernel only sends READDIR, for name-only workloads on huge directories.
//   - CAP_ATOMIC_O_TRUNC: open(O_TRUNC) arrives as one OPEN carrying the
//     flag, which the core turns into its SETATTR, instead of OPEN followed
//     by a separate SETATTR request.
//   - CAP_HANDLE_KILLPRIV_V2: set-user-ID and set-group-ID bits cleared by
//     a write, truncation or O_TRUNC open of a caller without CAP_FSETID
//     are the file system's to clear. Without it the kernel sends a
//     SETATTR of the mode first, as the writer, which the server refuses
//     to anyone but the owner: write(2) failed with EPERM. The server
//     writes and truncates as the caller, which clears them by the
//     kernel's own rule; the core sends such a write at once, so the
//     cached mode is the new one (client.ClearSetIDAfterWrite).
//   - No CAP_WRITEBACK_CACHE: see the package documentation.
//   - DisableSplice: READ data comes from memory (RPC replies), never from
//     a file descriptor, so splicing only costs a failed attempt (a 1 MiB
//     reply does not even fit the default maximum pipe size).
//   - Mount flags from the options (ro, nosuid, nodev, noexec, noatime).
//     As root the mount is made directly (mount(2)), with the flags as
//     flags; otherwise fusermount3 makes it and gets them as options.
func MountOptions(cfg MountConfig, direct bool) *fuse.MountOptions {
	o := cfg.Options
	logf := cfg.Logf
	if logf == nil {
		logf = func(string, ...any) {}
	}
	mo := &fuse.MountOptions{
		FsName:                   cfg.Source,
		Name:                     fsSubtype,
		AllowOther:               o.AllowOther,
		MaxWrite:                 MaxWrite,
		MaxReadAhead:             MaxWrite,
		MaxBackground:            maxBackground,
		DisableXAttrs:            false,
		IgnoreSecurityLabels:     false,
		EnableLocks:              false,
		EnableSymlinkCaching:     true,
		ExplicitDataCacheControl: false,
		DisableReadDirPlus:       !o.RdirPlus,
		ExtraCapabilities:        fuse.CAP_ATOMIC_O_TRUNC | fuse.CAP_HANDLE_KILLPRIV_V2,
		DisableSplice:            true,
		Debug:                    cfg.Debug,
		Logger:                   log.New(logWriter(logf), "", 0),
	}
	if o.KernelWriteback {
		mo.ExtraCapabilities |= fuse.CAP_WRITEBACK_CACHE
	}
	if direct {
		mo.DirectMountStrict = true
		mo.DirectMountFlags = mountFlags(&o)
	} else {
		mo.Options = mountFlagOptions(&o)
	}
	mo.Options = append(mo.Options, "default_permissions")
	return mo
}

// mountFlags returns the mount(2) flags for the options.
func mountFlags(o *client.Options) uintptr {
	var f uintptr
	for _, x := range []struct {
		on   bool
		flag uintptr
	}{
		{o.ReadOnly, unix.MS_RDONLY}, {o.NoSuid, unix.MS_NOSUID}, {o.NoDev, unix.MS_NODEV},
		{o.NoExec, unix.MS_NOEXEC}, {o.NoAtime, unix.MS_NOATIME},
	} {
		if x.on {
			f |= x.flag
		}
	}
	if f == 0 {
		// go-fuse reads zero as "its defaults" (nosuid,nodev); the
		// kernel ignores MS_MGC_VAL.
		f = unix.MS_MGC_VAL
	}
	return f
}

// mountFlagOptions returns the same flags as fusermount3 options.
func mountFlagOptions(o *client.Options) []string {
	var opts []string
	pick := func(on bool, yes, no string) {
		if on {
			opts = append(opts, yes)
		} else if no != "" {
			opts = append(opts, no)
		}
	}
	pick(o.ReadOnly, "ro", "rw")
	pick(o.NoSuid, "nosuid", "suid")
	pick(o.NoDev, "nodev", "dev")
	pick(o.NoExec, "noexec", "exec")
	pick(o.NoAtime, "noatime", "")
	return opts
}

// logWriter sends go-fuse's log lines to logf.
type logWriter func(string, ...any)

func (w logWriter) Write(p []byte) (int, error) {
	w("go-fuse: %s", strings.TrimRight(string(p), "\n"))
	return len(p), nil
}

// Mounted is a live mount being served.
type Mounted struct {
	Mountpoint string
	// Major, Minor: the mount's device, its FUSE connection's, which is
	// not given to another mount while the connection lives; with the
	// mount's never reused ID (kernels from 6.8) they tell this mount from
	// another one made at the same path later.
	Major, Minor uint32
	uniqueID     uint64 // 0: the kernel has none
	srv          *fuse.Server
	fs           *FS
	done         chan struct{}
	logf         func(string, ...any)

	mu      sync.Mutex
	ctl     *control // GUARDED_BY(mu): the statistics socket, once made
	ctlDone bool     // GUARDED_BY(mu): no socket (any more)
}

// ErrNotOurs says that what is mounted at a mount point (if anything) is
// not the mount being served: it was unmounted in this mount namespace
// (another one may hold a copy that keeps the connection alive) and maybe
// replaced by another mount since.
var ErrNotOurs = errors.New("not this daemon's mount")

// Mount mounts fs at mountpoint (an absolute path) and serves it in the
// background. It returns once the kernel answers requests on the mount.
// As root it mounts directly, falling back to fusermount3 if the kernel
// refuses (a container without CAP_SYS_ADMIN); otherwise it uses
// fusermount3.
func Mount(fs *FS, mountpoint string, cfg MountConfig) (*Mounted, error) {
	logf := cfg.Logf
	if logf == nil {
		logf = func(string, ...any) {}
	}
	direct := os.Geteuid() == 0
	options := func(direct bool) *fuse.MountOptions {
		mo := MountOptions(cfg, direct)
		mo.EnableLocks = fs.core.HasLocks()
		return mo
	}
	srv, err := fuse.NewServer(fs, mountpoint, options(direct))
	if err != nil && direct && (errors.Is(err, syscall.EPERM) || errors.Is(err, syscall.EACCES)) {
		logf("hushfs: mount(2) refused (%v); trying fusermount3", err)
		srv, err = fuse.NewServer(fs, mountpoint, options(false))
	}
	if err != nil {
		return nil, fmt.Errorf("mounting FUSE at %s: %w", mountpoint, err)
	}
	m := &Mounted{Mountpoint: mountpoint, srv: srv, fs: fs, done: make(chan struct{}), logf: logf}
	go func() {
		srv.Serve()
		m.CloseStats()
		close(m.done)
	}()
	fail := func(err error) (*Mounted, error) {
		if mi, ferr := FindMount("/proc/self/mountinfo", mountpoint); ferr == nil && mi.FSType == FSType {
			Unmount(mountpoint, true)
		}
		return nil, fmt.Errorf("mounting FUSE at %s: %w", mountpoint, err)
	}
	if err := srv.WaitMount(); err != nil {
		return fail(err)
	}
	// Just mounted, and nobody can have mounted over it without asking
	// for it (a lookup of the mount point): the topmost mount is ours.
	mi, err := FindMount("/proc/self/mountinfo", mountpoint)
	if err != nil {
		return fail(err)
	}
	if mi.FSType != FSType {
		return fail(fmt.Errorf("the mount table shows %s there, not %s", mi.FSType, FSType))
	}
	id, err := statMount(unix.AT_FDCWD, mountpoint)
	if err != nil {
		return fail(err)
	}
	m.Major, m.Minor, m.uniqueID = id.major, id.minor, id.unique
	if err := setReadAhead(mi, ReadAhead); err != nil {
		logf("hushfs: read-ahead stays at the kernel default: %v", err)
	}
	// Statistics are not worth failing a mount for.
	if ctl, err := startControl(fs, cfg.RuntimeDir, m.Major, m.Minor, logf); err != nil {
		logf("hushfs: hushfs stats will not work for %s: %v", mountpoint, err)
	} else {
		m.mu.Lock()
		closed := m.ctlDone
		if !closed {
			m.ctl = ctl
		}
		m.mu.Unlock()
		if closed {
			ctl.close()
		}
	}
	return m, nil
}

// CloseStats stops serving the statistics and removes their socket; the
// end of the connection does so too, and a daemon about to exit calls it
// (a lazily detached mount's connection may outlive it).
func (m *Mounted) CloseStats() {
	m.mu.Lock()
	ctl := m.ctl
	m.ctl, m.ctlDone = nil, true
	m.mu.Unlock()
	if ctl != nil {
		ctl.close()
	}
}

// Done is closed when the mount is gone (unmounted by anyone) and every
// request has been answered.
func (m *Mounted) Done() <-chan struct{} { return m.done }

// Unmount unmounts this mount, and only this one: it checks that the
// topmost mount at the mount point is still its own (by device) and
// returns an error wrapping ErrNotOurs, touching nothing, if it is not.
// Without lazy it fails while files are open (after a few tries: the kernel
// may still be closing some); with lazy the mount is detached at once and
// goes away at its last use, and Done may stay open until then. It does
// not wait for the requests being served to end.
func (m *Mounted) Unmount(lazy bool) error {
	if lazy {
		return m.detach()
	}
	var err error
	for try, delay := 0, 5*time.Millisecond; try < 5; try, delay = try+1, 2*delay+5*time.Millisecond {
		if err = m.check(); err != nil {
			return err
		}
		// The path is looked up again by umount2: a mount made there
		// between the check and now would be the one unmounted. A lookup
		// of our own to pin the mount would make it busy; only the lazy
		// detach, which ignores that, can hold it (detach).
		if err = Unmount(m.Mountpoint, false); err == nil || !errors.Is(err, syscall.EBUSY) {
			return err
		}
		time.Sleep(delay)
	}
	return err
}

// mountID identifies a mount (see Mounted).
type mountID struct {
	major, minor uint32
	unique       uint64
}

// statMount returns the identity of the topmost mount at path (relative
// to dirfd; "" for dirfd itself) from what the kernel has, never asking
// the file system, whose server may be gone.
func statMount(dirfd int, path string) (mountID, error) {
	flags := unix.AT_STATX_DONT_SYNC | unix.AT_SYMLINK_NOFOLLOW
	if path == "" {
		flags |= unix.AT_EMPTY_PATH
	}
	var st unix.Statx_t
	if err := unix.Statx(dirfd, path, flags, unix.STATX_MNT_ID_UNIQUE, &st); err != nil {
		return mountID{}, &os.PathError{Op: "statx", Path: path, Err: err}
	}
	id := mountID{major: st.Dev_major, minor: st.Dev_minor}
	if st.Mask&unix.STATX_MNT_ID_UNIQUE != 0 {
		id.unique = st.Mnt_id
	}
	return id, nil
}

// owns returns nil if id is this mount's, else an error wrapping
// ErrNotOurs.
func (m *Mounted) owns(id mountID) error {
	select {
	case <-m.done:
		// The connection is gone: its device may be another's by now.
		return fmt.Errorf("%s: this mount's connection has ended: %w", m.Mountpoint, ErrNotOurs)
	default:
	}
	if id.major == m.Major && id.minor == m.Minor && (m.uniqueID == 0 || id.unique == m.uniqueID) {
		return nil
	}
	what := fmt.Sprintf("device %d:%d", id.major, id.minor)
	if mi, err := FindMount("/proc/self/mountinfo", m.Mountpoint); errors.Is(err, ErrNotMounted) {
		return fmt.Errorf("%s: nothing is mounted there any more: %w", m.Mountpoint, ErrNotOurs)
	} else if err == nil {
		what = fmt.Sprintf("%s from %s, device %d:%d", mi.FSType, mi.Source, id.major, id.minor)
	}
	return fmt.Errorf("%s: the mount there is another one (%s; this one is %d:%d): %w",
		m.Mountpoint, what, m.Major, m.Minor, ErrNotOurs)
}

// check returns nil if the topmost mount at the mount point is this one.
func (m *Mounted) check() error {
	id, err := statMount(unix.AT_FDCWD, m.Mountpoint)
	if err != nil {
		return err
	}
	return m.owns(id)
}

// detach lazily unmounts this mount. As root it holds the mount it checked
// (an O_PATH descriptor of the mount point) and detaches exactly that one
// through the descriptor, so a mount made at the path meanwhile is never
// touched; fusermount3 takes a path, so that is checked just before.
func (m *Mounted) detach() error {
	if os.Geteuid() != 0 {
		if err := m.check(); err != nil {
			return err
		}
		return Unmount(m.Mountpoint, true)
	}
	fd, err := unix.Open(m.Mountpoint, unix.O_PATH|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return &os.PathError{Op: "open", Path: m.Mountpoint, Err: err}
	}
	defer unix.Close(fd)
	id, err := statMount(fd, "")
	if err != nil {
		return err
	}
	if err := m.owns(id); err != nil {
		return err
	}
	// The descriptor is the root of our mount (umount2 refuses anything
	// else); through /proc it names that mount and no other.
	if err := unix.Unmount(fmt.Sprintf("/proc/self/fd/%d", fd), unix.MNT_DETACH); err != nil {
		return &os.PathError{Op: "umount", Path: m.Mountpoint, Err: err}
	}
	return nil
}

// Unmount unmounts whatever hushfs mount is at mountpoint: umount2(2) as
// root (MNT_DETACH when lazy), fusermount3 -u (-z) otherwise.
func Unmount(mountpoint string, lazy bool) error {
	if os.Geteuid() == 0 {
		flags := 0
		if lazy {
			flags = unix.MNT_DETACH
		}
		if err := unix.Unmount(mountpoint, flags); err != nil {
			return &os.PathError{Op: "umount", Path: mountpoint, Err: err}
		}
		return nil
	}
	args := []string{"-u"}
	if lazy {
		args = append(args, "-z")
	}
	out, err := exec.Command("fusermount3", append(args, "--", mountpoint)...).CombinedOutput()
	if err != nil {
		return fmt.Errorf("fusermount3 -u %s: %w: %s", mountpoint, err, strings.TrimSpace(string(out)))
	}
	return nil
}

// setReadAhead sets the read-ahead window of the FUSE mount mi (root only:
// it writes the backing device's sysfs attribute).
func setReadAhead(mi MountInfo, bytes int) error {
	path := fmt.Sprintf("/sys/class/bdi/%d:%d/read_ahead_kb", mi.Major, mi.Minor)
	return os.WriteFile(path, []byte(strconv.Itoa(bytes>>10)), 0)
}
