package fusefs

import (
	"bufio"
	"bytes"
	"os"
	"path/filepath"
	"strconv"
	"time"

	"golang.org/x/sys/unix"
)

// A lazily detached mount ("hushfs umount -l") goes away, and its daemon
// sees the connection end, only when nothing references it any more. A
// mount namespace made while the mount existed (unshare -m, ip netns exec,
// a container start: every test's ganesha) holds a copy of it, and where
// the mount's parent is private — "/" is here — the detach does not reach
// that copy: the connection lived on, and the daemon waited, for as long
// as any process in that namespace ran (a whole concurrent test run),
// though nothing used the mount. Orphaned tells that case apart from a
// detached mount still in use, which stays served.

// Orphaned returns a channel closed once this mount is gone from the
// daemon's own mount namespace (unmounted here, by anyone) and nothing
// uses it any more but copies of the mount in other mount namespaces:
// no file or directory of it open (here or through a copy: the kernel
// sends OPEN for either), no request being served (a process blocked in
// a lookup), no process's descriptor, working or root directory in it
// (O_PATH descriptors send nothing). The daemon may then
// end the connection without taking anything from anyone: a process that
// later walks into a copy gets ENOTCONN, as after the daemon's exit. It
// checks every interval, reading the mount table only.
func (m *Mounted) Orphaned(interval time.Duration) <-chan struct{} {
	c := make(chan struct{})
	go func() {
		t := time.NewTicker(interval)
		defer t.Stop()
		for {
			select {
			case <-m.done:
				return
			case <-t.C:
			}
			if m.orphaned("/proc") {
				close(c)
				return
			}
		}
	}()
	return c
}

// orphaned reports whether the mount is unmounted here and unused (see
// Orphaned), from the proc file system at procDir.
func (m *Mounted) orphaned(procDir string) bool {
	if m.fs != nil && (m.fs.openHandles.Load() > 0 || m.fs.inflight.Load() > 0) {
		return false
	}
	mounted, err := hasDevice(filepath.Join(procDir, "self/mountinfo"), m.Major, m.Minor)
	if err != nil || mounted {
		return false
	}
	return !deviceInUse(procDir, m.Major, m.Minor)
}

// hasDevice reports whether the mount table at path has a mount of the
// device (the mount point itself or a bind mount of it elsewhere).
func hasDevice(path string, major, minor uint32) (bool, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return false, err
	}
	sc := bufio.NewScanner(bytes.NewReader(b))
	sc.Buffer(make([]byte, 0, 64<<10), 1<<20)
	for sc.Scan() {
		mi, err := parseMountInfo(sc.Text())
		if err != nil {
			return false, err
		}
		if mi.Major == major && mi.Minor == minor {
			return true, nil
		}
	}
	return false, sc.Err()
}

// deviceInUse reports whether any process has a descriptor, working
// directory or root on the device. It asks the kernel what it has
// (AT_STATX_DONT_SYNC): the device comes from the superblock, no request
// reaches the file system.
func deviceInUse(procDir string, major, minor uint32) bool {
	ents, err := os.ReadDir(procDir)
	if err != nil {
		return true
	}
	on := func(path string) bool {
		var st unix.Statx_t
		if err := unix.Statx(unix.AT_FDCWD, path, unix.AT_STATX_DONT_SYNC, 0, &st); err != nil {
			return false // gone, or not a path (a socket, a pipe)
		}
		return st.Dev_major == major && st.Dev_minor == minor
	}
	for _, e := range ents {
		if _, err := strconv.Atoi(e.Name()); err != nil {
			continue
		}
		dir := filepath.Join(procDir, e.Name())
		if on(dir+"/cwd") || on(dir+"/root") {
			return true
		}
		fds, err := os.ReadDir(dir + "/fd")
		if err != nil {
			continue // exited, or a kernel thread
		}
		for _, fd := range fds {
			if on(dir + "/fd/" + fd.Name()) {
				return true
			}
		}
	}
	return false
}
