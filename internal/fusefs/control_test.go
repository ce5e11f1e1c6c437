package fusefs

import (
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"

	"golang.org/x/sys/unix"

	"hushfs/internal/client"
)

// controlEnv is an adapter's statistics socket in a temporary runtime
// directory, and a mount table that names a mount on its device.
type controlEnv struct {
	e         *env
	dir       string // runtime directory
	mountinfo string // the mount table file the client reads
	mnt       string
}

func newControlEnv(t *testing.T) *controlEnv {
	t.Helper()
	c := &controlEnv{e: newEnv(t, envOpts{}), dir: t.TempDir(), mnt: "/mnt/hushfs test"}
	c.mountinfo = filepath.Join(t.TempDir(), "mountinfo")
	c.setMounts(t, "0:99")
	return c
}

// setMounts writes a mount table with a hushfs mount at c.mnt on device
// dev, owned by root.
func (c *controlEnv) setMounts(t *testing.T, dev string) {
	t.Helper()
	lines := "22 1 8:1 / / rw,relatime - ext4 /dev/sda1 rw\n" +
		"23 22 0:40 / /tmp rw - tmpfs tmpfs rw\n" +
		fmt.Sprintf("417 22 %s / /mnt/hushfs\\040test rw,nosuid,nodev shared:1 - fuse.hushfs 127.0.0.1:/e rw,user_id=0,group_id=0\n", dev)
	if err := os.WriteFile(c.mountinfo, []byte(lines), 0o644); err != nil {
		t.Fatal(err)
	}
}

func (c *controlEnv) start(t *testing.T, major, minor uint32) *control {
	t.Helper()
	ctl, err := startControl(c.e.fs, c.dir, major, minor, t.Logf)
	if err != nil {
		t.Fatalf("startControl: %v", err)
	}
	t.Cleanup(ctl.close)
	return ctl
}

func (c *controlEnv) query(mnt string, req controlRequest) ([]byte, error) {
	return queryControl(c.mountinfo, c.dir, mnt, req)
}

// The statistics come through the socket: the core's counters, the
// requests counted by the adapter; a reset in the same request returns
// them and then zeroes them.
func TestControlStats(t *testing.T) {
	c := newControlEnv(t)
	c.start(t, 0, 99)
	c.e.lookup(1, ".")
	b, err := c.query(c.mnt, controlRequest{Stats: true})
	if err != nil {
		t.Fatal(err)
	}
	var s client.Snapshot
	if err := json.Unmarshal(b, &s); err != nil {
		t.Fatalf("stats JSON: %v\n%s", err, b)
	}
	if s.Count("FSINFO") != 1 || s.Ops["MOUNT:MNT"].Ops != 1 || s.Total() != c.e.core.Stats().Snapshot().Total() {
		t.Errorf("stats: %v", s.Ops)
	}
	if s.Ops["FSINFO"].BytesSent == 0 || s.FUSE["lookup"] != 1 {
		t.Errorf("FSINFO %+v, FUSE requests %v", s.Ops["FSINFO"], s.FUSE)
	}
	if fi, err := os.Stat(filepath.Join(c.dir, "0:99.sock")); err != nil || fi.Mode().Perm() != 0o600 || fi.Mode()&os.ModeSocket == 0 {
		t.Errorf("socket: %v, %v; want a socket of mode 0600", fi, err)
	}

	b, err = c.query(c.mnt, controlRequest{Stats: true, Reset: true})
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(b, &s); err != nil || s.Count("FSINFO") != 1 {
		t.Errorf("stats read with the reset: %v, %v", s.Ops, err)
	}
	if s := c.e.fs.Stats(); len(s.Ops) != 0 || len(s.FUSE) != 0 {
		t.Errorf("after reset: %v %v", s.Ops, s.FUSE)
	}
}

// What is not a live hushfs mount, or not this socket's, gets an error
// that says so.
func TestControlErrors(t *testing.T) {
	c := newControlEnv(t)
	for mnt, want := range map[string]string{
		"/nowhere": "not the mount point of a hushfs mount",
		"/tmp":     "not a hushfs mount (tmpfs",
		c.mnt:      "no statistics socket",
	} {
		if _, err := c.query(mnt, controlRequest{Stats: true}); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%s: %v, want %q", mnt, err, want)
		}
	}
	// Another device's daemon answering on the mount's name.
	c.start(t, 0, 98)
	if err := os.Rename(filepath.Join(c.dir, "0:98.sock"), filepath.Join(c.dir, "0:99.sock")); err != nil {
		t.Fatal(err)
	}
	if _, err := c.query(c.mnt, controlRequest{Stats: true}); err == nil || !strings.Contains(err.Error(), "serves device 0:98, not the mount's 0:99") {
		t.Errorf("another device's socket: %v", err)
	}
}

// deadSocket leaves a socket at path that nobody listens on, as a daemon
// that died does.
func deadSocket(t *testing.T, path string) {
	t.Helper()
	l, err := net.ListenUnix("unix", &net.UnixAddr{Name: path, Net: "unix"})
	if err != nil {
		t.Fatal(err)
	}
	l.SetUnlinkOnClose(false)
	l.Close()
}

// A socket left by a dead daemon says so to a client; a daemon for the
// same device replaces it, one for another device removes it, and a
// daemon removes only its own socket when it stops.
func TestControlStaleSockets(t *testing.T) {
	c := newControlEnv(t)
	deadSocket(t, filepath.Join(c.dir, "0:99.sock"))
	deadSocket(t, filepath.Join(c.dir, "0:97.sock"))
	if _, err := c.query(c.mnt, controlRequest{Stats: true}); err == nil || !strings.Contains(err.Error(), "mount daemon is gone") {
		t.Errorf("dead daemon's socket: %v", err)
	}
	live := c.start(t, 0, 96) // sweeps: 0:99 and 0:97 are dead
	for _, name := range []string{"0:99.sock", "0:97.sock"} {
		if _, err := os.Lstat(filepath.Join(c.dir, name)); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("%s after a new daemon started: %v, want removed", name, err)
		}
	}
	if _, err := os.Lstat(live.path); err != nil {
		t.Errorf("live socket: %v", err)
	}

	deadSocket(t, filepath.Join(c.dir, "0:99.sock"))
	c.start(t, 0, 99)
	if _, err := c.query(c.mnt, controlRequest{Stats: true}); err != nil {
		t.Errorf("after a daemon for the device replaced the dead socket: %v", err)
	}
	// A sweep leaves live sockets alone.
	c.start(t, 0, 95)
	if _, err := c.query(c.mnt, controlRequest{Stats: true}); err != nil {
		t.Errorf("after another daemon's sweep: %v", err)
	}

	// The device given to a new mount whose daemon replaced the socket:
	// the old daemon's close leaves the new socket alone.
	old := c.start(t, 0, 94)
	renewed := c.start(t, 0, 94)
	old.close()
	if _, err := os.Lstat(renewed.path); err != nil {
		t.Errorf("the new daemon's socket after the old one stopped: %v", err)
	}
	renewed.close()
	if _, err := os.Lstat(renewed.path); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("socket after its daemon stopped: %v, want removed", err)
	}

	// The same, with the old daemon's listener already closed when the new
	// daemon replaces the socket file: the file system may then give the
	// new socket the old one's inode number (ext4 does), which must not
	// make the old daemon take it for its own.
	old = c.start(t, 0, 93)
	old.l.Close()
	renewed = c.start(t, 0, 93)
	old.close()
	if _, err := os.Lstat(renewed.path); err != nil {
		t.Errorf("the new daemon's socket after the old one stopped (listener closed first): %v", err)
	}
}

// Only root and the mount's owner are answered, whatever the socket's
// mode: the daemon checks the caller's credentials.
func TestControlRefusesOthers(t *testing.T) {
	c := newControlEnv(t)
	ctl := c.start(t, 0, 99)
	if err := os.Chmod(ctl.path, 0o666); err != nil {
		t.Fatal(err)
	}
	// Everything else within the other user's reach.
	for _, p := range []string{c.dir, filepath.Dir(c.mountinfo)} {
		for ; p != "/" && p != os.TempDir(); p = filepath.Dir(p) {
			if err := os.Chmod(p, 0o755); err != nil {
				t.Fatal(err)
			}
		}
	}
	var err error
	asEUID(t, 65534, func() { _, err = c.query(c.mnt, controlRequest{Stats: true, Reset: true}) })
	if err == nil || !strings.Contains(err.Error(), "the mount daemon refuses uid 65534") {
		t.Errorf("query by uid 65534: %v, want refused", err)
	}
	if c.e.fs.Stats().Total() == 0 {
		t.Error("a refused reset zeroed the statistics")
	}
	// With the socket's own mode, connecting is refused before that.
	if err := os.Chmod(ctl.path, 0o600); err != nil {
		t.Fatal(err)
	}
	asEUID(t, 65534, func() { _, err = c.query(c.mnt, controlRequest{Stats: true}) })
	if err == nil || !strings.Contains(err.Error(), "permission denied: only root and the mount's owner (uid 0)") {
		t.Errorf("connect by uid 65534: %v, want permission denied", err)
	}
}

// asEUID runs fn on a thread of its own whose effective uid is uid (what
// SO_PEERCRED reports and file permissions are checked against); the
// thread ends with it.
func asEUID(t *testing.T, uid int, fn func()) {
	t.Helper()
	done := make(chan error, 1)
	go func() {
		runtime.LockOSThread() // never unlocked: the thread exits with the goroutine
		if _, _, e := unix.RawSyscall(unix.SYS_SETRESUID, ^uintptr(0), uintptr(uid), ^uintptr(0)); e != 0 {
			done <- e
			return
		}
		fn()
		done <- nil
	}()
	if err := <-done; err != nil {
		t.Fatalf("switching to uid %d: %v", uid, err)
	}
}
