package fusefs

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"hushfs/internal/client"
)

// The mount's statistics are served on a Unix socket, one per mount, in a
// runtime directory of the mount's owner, named by the mount's device (its
// FUSE connection, which no other live mount has): `hushfs stats MNT`
// finds the device and the owner in /proc/self/mountinfo without touching
// the mount. They used to be an extended attribute of the mount's root,
// which made every other attribute answer ENODATA instead of "not
// supported", and the kernel then asked for security.* and POSIX ACLs
// on every stat (200,000 requests for an ls -l of 100,000 entries).
//
// Only root and the mount's owner may connect: the socket is theirs alone
// (mode 0600) and the daemon checks the peer's credentials. A socket left
// by a daemon that died answers nothing (ECONNREFUSED): the next daemon to
// start in the directory removes it, and a daemon given the same device
// replaces it.

// controlRequest is what a client asks on the socket: one JSON object.
type controlRequest struct {
	Stats bool `json:"stats"` // send the statistics
	Reset bool `json:"reset"` // then zero them
}

// controlReply is the daemon's answer: one JSON object, then EOF.
type controlReply struct {
	Device string          `json:"device"` // MAJOR:MINOR of the mount served
	Stats  json.RawMessage `json:"stats,omitempty"`
	Error  string          `json:"error,omitempty"`
}

const (
	controlLock      = ".lock"
	controlSuffix    = ".sock"
	controlTimeout   = 10 * time.Second
	controlMaxReq    = 4 << 10
	controlMaxReply  = 64 << 20
	controlDirRoot   = "/run/hushfs"
	controlUserRun   = "/run/user"
	controlDirPrefix = "hushfs-" // under os.TempDir, when there is no /run/user/UID
)

// RuntimeDir returns the directory where the daemons of mounts owned by
// uid keep their control sockets: /run/hushfs for root, else
// /run/user/UID/hushfs, or TMPDIR/hushfs-UID where there is no
// /run/user/UID. Both the daemon and `hushfs stats` (as root or the owner)
// derive it from the owner alone.
func RuntimeDir(uid uint32) string {
	if uid == 0 {
		return controlDirRoot
	}
	run := filepath.Join(controlUserRun, strconv.FormatUint(uint64(uid), 10))
	if st, err := os.Stat(run); err == nil && st.IsDir() {
		return filepath.Join(run, "hushfs")
	}
	return filepath.Join(os.TempDir(), controlDirPrefix+strconv.FormatUint(uint64(uid), 10))
}

// controlName is the socket's name for the mount on device major:minor.
func controlName(major, minor uint32) string {
	return fmt.Sprintf("%d:%d%s", major, minor, controlSuffix)
}

// control serves one mount's statistics.
type control struct {
	fs     *FS
	l      *net.UnixListener
	path   string
	device string
	ino    uint64 // the socket file's, so only ours is removed
	logf   func(string, ...any)
	wg     sync.WaitGroup
}

// startControl listens on the mount's socket in dir ("" for
// RuntimeDir(owner)), first removing sockets there whose daemons are gone.
func startControl(fs *FS, dir string, major, minor uint32, logf func(string, ...any)) (*control, error) {
	if dir == "" {
		dir = RuntimeDir(fs.owner)
	}
	if err := ensureRuntimeDir(dir, fs.owner); err != nil {
		return nil, err
	}
	unlock, err := lockDir(dir)
	if err != nil {
		return nil, err
	}
	defer unlock()
	name := controlName(major, minor)
	sweepControl(dir, name, logf)
	path := filepath.Join(dir, name)
	// Ours while our connection lives: anything there is a dead daemon's.
	if err := os.Remove(path); err != nil && !errors.Is(err, os.ErrNotExist) {
		return nil, fmt.Errorf("statistics socket %s: %w", path, err)
	}
	l, err := net.ListenUnix("unix", &net.UnixAddr{Name: path, Net: "unix"})
	if err != nil {
		return nil, fmt.Errorf("statistics socket: %w", err)
	}
	l.SetUnlinkOnClose(false) // close removes it only if it is still ours
	var st unix.Stat_t
	if err := unix.Chmod(path, 0o600); err == nil {
		err = unix.Lstat(path, &st)
	}
	if err != nil {
		l.Close()
		os.Remove(path)
		return nil, fmt.Errorf("statistics socket %s: %w", path, err)
	}
	c := &control{fs: fs, l: l, path: path, device: fmt.Sprintf("%d:%d", major, minor), ino: st.Ino, logf: logf}
	c.wg.Add(1)
	go c.serve()
	return c, nil
}

// ensureRuntimeDir makes dir (mode 0755 for root, whose sockets' names
// anyone may see, 0700 otherwise) and checks that it is a directory of
// uid's that nobody else can write to.
func ensureRuntimeDir(dir string, uid uint32) error {
	mode := os.FileMode(0o700)
	if uid == 0 {
		mode = 0o755
	}
	if err := os.Mkdir(dir, mode); err != nil && !errors.Is(err, os.ErrExist) {
		return fmt.Errorf("statistics directory: %w", err)
	}
	var st unix.Stat_t
	if err := unix.Lstat(dir, &st); err != nil {
		return fmt.Errorf("statistics directory: %w", &os.PathError{Op: "lstat", Path: dir, Err: err})
	}
	switch {
	case st.Mode&unix.S_IFMT != unix.S_IFDIR:
		return fmt.Errorf("statistics directory %s is not a directory", dir)
	case st.Uid != uid:
		return fmt.Errorf("statistics directory %s belongs to uid %d, not %d", dir, st.Uid, uid)
	case st.Mode&0o022 != 0:
		return fmt.Errorf("statistics directory %s is writable by others (mode %o)", dir, st.Mode&0o777)
	}
	return nil
}

// lockDir takes dir's lock, held while sockets are made and swept: a
// socket bound but not yet listening refuses connections as a dead one
// does.
func lockDir(dir string) (func(), error) {
	path := filepath.Join(dir, controlLock)
	fd, err := unix.Open(path, unix.O_RDWR|unix.O_CREAT|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0o600)
	if err != nil {
		return nil, fmt.Errorf("statistics directory: %w", &os.PathError{Op: "open", Path: path, Err: err})
	}
	for {
		err = unix.Flock(fd, unix.LOCK_EX)
		if err != unix.EINTR {
			break
		}
	}
	if err != nil {
		unix.Close(fd)
		return nil, fmt.Errorf("statistics directory: %w", &os.PathError{Op: "flock", Path: path, Err: err})
	}
	return func() { unix.Close(fd) }, nil
}

// sweepControl removes the sockets in dir, other than skip, that no daemon
// listens on any more (their daemons died without cleaning up).
//
// LOCKS_REQUIRED(dir's lock)
func sweepControl(dir, skip string, logf func(string, ...any)) {
	ents, err := os.ReadDir(dir)
	if err != nil {
		return
	}
	for _, e := range ents {
		name := e.Name()
		if name == skip || !strings.HasSuffix(name, controlSuffix) || e.Type()&os.ModeSocket == 0 {
			continue
		}
		path := filepath.Join(dir, name)
		c, err := net.DialTimeout("unix", path, time.Second)
		if err == nil {
			c.Close()
			continue
		}
		if errors.Is(err, syscall.ECONNREFUSED) {
			if os.Remove(path) == nil {
				logf("hushfs: removed %s, left by a mount daemon that is gone", path)
			}
		}
	}
}

// close stops serving and removes the socket, unless another daemon has
// replaced it since (our device given to a new mount).
func (c *control) close() {
	c.l.Close()
	c.wg.Wait()
	unlock, err := lockDir(filepath.Dir(c.path))
	if err != nil {
		c.logf("hushfs: statistics socket %s left behind: %v", c.path, err)
		return
	}
	defer unlock()
	var st unix.Stat_t
	if unix.Lstat(c.path, &st) != nil || st.Ino != c.ino {
		return
	}
	// The same inode number need not be our socket: once our listener
	// is closed, a new daemon may replace the file and get the number
	// again (ext4 reuses it at once). Under the directory's lock a socket
	// there is either listening, and another daemon's, or dead.
	conn, err := net.DialTimeout("unix", c.path, time.Second)
	if err == nil {
		conn.Close()
		return
	}
	if errors.Is(err, syscall.ECONNREFUSED) {
		os.Remove(c.path)
	}
}

func (c *control) serve() {
	defer c.wg.Done()
	var conns sync.WaitGroup
	defer conns.Wait()
	for {
		conn, err := c.l.AcceptUnix()
		if err != nil {
			if !errors.Is(err, net.ErrClosed) {
				c.logf("hushfs: statistics socket %s: %v", c.path, err)
			}
			return
		}
		conns.Add(1)
		go func() {
			defer conns.Done()
			defer conn.Close()
			c.answer(conn)
		}()
	}
}

// answer serves one request from conn.
func (c *control) answer(conn *net.UnixConn) {
	conn.SetDeadline(time.Now().Add(controlTimeout))
	reply := controlReply{Device: c.device}
	send := func() {
		b, err := json.Marshal(reply)
		if err != nil {
			c.logf("hushfs: encoding statistics: %v", err)
			return
		}
		conn.Write(append(b, '\n'))
	}
	// The request is read first, whoever sent it: closing with it unread
	// would reset the connection, and the caller would never see why.
	var req controlRequest
	if err := json.NewDecoder(io.LimitReader(conn, controlMaxReq)).Decode(&req); err != nil {
		reply.Error = fmt.Sprintf("malformed request: %v", err)
		send()
		return
	}
	uid, err := peerUID(conn)
	if err != nil {
		reply.Error = fmt.Sprintf("reading the caller's credentials: %v", err)
		send()
		return
	}
	if uid != 0 && uid != c.fs.owner {
		reply.Error = fmt.Sprintf("the mount daemon refuses uid %d: only root and the mount's owner (uid %d) may read its statistics", uid, c.fs.owner)
		send()
		return
	}
	if req.Stats {
		b, err := json.Marshal(c.fs.Stats())
		if err != nil {
			reply.Error = fmt.Sprintf("encoding statistics: %v", err)
			send()
			return
		}
		reply.Stats = b
	}
	if req.Reset {
		c.fs.ResetStats()
	}
	send()
}

// peerUID returns the effective uid of the process at the other end.
func peerUID(conn *net.UnixConn) (uint32, error) {
	raw, err := conn.SyscallConn()
	if err != nil {
		return 0, err
	}
	var cred *unix.Ucred
	var cerr error
	if err := raw.Control(func(fd uintptr) {
		cred, cerr = unix.GetsockoptUcred(int(fd), unix.SOL_SOCKET, unix.SO_PEERCRED)
	}); err != nil {
		return 0, err
	}
	if cerr != nil {
		return 0, cerr
	}
	return cred.Uid, nil
}

// ReadStats returns the statistics (client.Snapshot as JSON) of the hushfs
// mount at mountpoint, a clean absolute path, zeroing them after reading
// them if reset. It reads the mount table and the mount's socket, never
// the mount itself.
func ReadStats(mountpoint string, reset bool) ([]byte, error) {
	return queryControl("/proc/self/mountinfo", "", mountpoint, controlRequest{Stats: true, Reset: reset})
}

// ReadSnapshot is ReadStats decoded.
func ReadSnapshot(mountpoint string) (client.Snapshot, error) {
	var s client.Snapshot
	b, err := ReadStats(mountpoint, false)
	if err != nil {
		return s, err
	}
	if err := json.Unmarshal(b, &s); err != nil {
		return s, fmt.Errorf("%s: malformed statistics: %w", mountpoint, err)
	}
	return s, nil
}

// queryControl sends req to the daemon of the mount at mountpoint, found
// in the mountinfo file, through its socket in dir ("" for the owner's
// RuntimeDir), and returns the statistics it sent, if asked for.
func queryControl(mountinfo, dir, mountpoint string, req controlRequest) ([]byte, error) {
	mi, err := FindMount(mountinfo, mountpoint)
	if errors.Is(err, ErrNotMounted) {
		return nil, fmt.Errorf("%s is not the mount point of a hushfs mount", mountpoint)
	}
	if err != nil {
		return nil, err
	}
	if mi.FSType != FSType {
		return nil, fmt.Errorf("%s is not a hushfs mount (%s from %s)", mountpoint, mi.FSType, mi.Source)
	}
	if dir == "" {
		if !mi.HasOwner {
			return nil, fmt.Errorf("%s: the mount table names no owner (user_id) for it", mountpoint)
		}
		dir = RuntimeDir(mi.Owner)
	}
	path := filepath.Join(dir, controlName(mi.Major, mi.Minor))
	conn, err := net.DialTimeout("unix", path, controlTimeout)
	switch {
	case errors.Is(err, os.ErrNotExist):
		return nil, fmt.Errorf("%s: no statistics socket %s: its mount daemon does not serve one (it may predate them, or could not make it: see its log)", mountpoint, path)
	case errors.Is(err, syscall.ECONNREFUSED):
		return nil, fmt.Errorf("%s: its mount daemon is gone (nothing listens on %s)", mountpoint, path)
	case errors.Is(err, syscall.EACCES) || errors.Is(err, syscall.EPERM):
		return nil, fmt.Errorf("%s: permission denied: only root and the mount's owner (uid %d) may read its statistics", mountpoint, mi.Owner)
	case err != nil:
		return nil, fmt.Errorf("%s: statistics: %w", mountpoint, err)
	}
	defer conn.Close()
	conn.SetDeadline(time.Now().Add(controlTimeout))
	b, _ := json.Marshal(req)
	if _, err := conn.Write(append(b, '\n')); err != nil {
		return nil, fmt.Errorf("%s: statistics: %w", mountpoint, err)
	}
	raw, err := io.ReadAll(io.LimitReader(conn, controlMaxReply))
	if err != nil {
		return nil, fmt.Errorf("%s: statistics: %w", mountpoint, err)
	}
	var reply controlReply
	if err := json.Unmarshal(raw, &reply); err != nil {
		return nil, fmt.Errorf("%s: malformed answer on %s: %w", mountpoint, path, err)
	}
	if want := fmt.Sprintf("%d:%d", mi.Major, mi.Minor); reply.Device != want {
		return nil, fmt.Errorf("%s: the daemon on %s serves device %s, not the mount's %s", mountpoint, path, reply.Device, want)
	}
	if reply.Error != "" {
		return nil, fmt.Errorf("%s: %s", mountpoint, reply.Error)
	}
	if req.Stats && len(reply.Stats) == 0 {
		return nil, fmt.Errorf("%s: the daemon sent no statistics", mountpoint)
	}
	return reply.Stats, nil
}
