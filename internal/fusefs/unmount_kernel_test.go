package fusefs

import (
	"errors"
	"os"
	"path/filepath"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// mountAt mounts an env's adapter at mnt; at cleanup it is unmounted if it
// is still there.
func mountAt(t *testing.T, e *env, mnt string) *Mounted {
	t.Helper()
	m, err := Mount(e.fs, mnt, MountConfig{Source: "127.0.0.1:" + e.dir, Options: e.opts, Logf: t.Logf})
	if err != nil {
		t.Fatalf("Mount: %v", err)
	}
	t.Cleanup(func() {
		if err := m.Unmount(false); err != nil && !errors.Is(err, ErrNotOurs) {
			t.Errorf("unmount: %v", err)
			m.Unmount(true)
		}
		select {
		case <-m.Done():
		case <-time.After(10 * time.Second):
			t.Errorf("serving did not end after unmount")
		}
	})
	return m
}

// TestUnmountOnlyOwnMount: a mount's Unmount, lazy or not, touches only
// that mount. Not another file system mounted over it at the same path,
// and not a new hushfs mount made at the path after it was unmounted there
// (as when another mount namespace holds a copy and keeps its daemon
// alive): it says ErrNotOurs and leaves them alone.
func TestUnmountOnlyOwnMount(t *testing.T) {
	a := newEnv(t, envOpts{})
	mnt := t.TempDir()
	ma := mountAt(t, a, mnt)
	if ma.Major == 0 && ma.Minor == 0 {
		t.Fatal("no device recorded for the mount")
	}

	// Something mounted over it.
	if err := unix.Mount("tmpfs", mnt, "tmpfs", 0, ""); err != nil {
		t.Fatalf("mount tmpfs over the mount: %v", err)
	}
	for _, lazy := range []bool{false, true} {
		if err := ma.Unmount(lazy); !errors.Is(err, ErrNotOurs) {
			t.Errorf("Unmount(lazy %v) under a tmpfs: %v, want ErrNotOurs", lazy, err)
		}
		if mi, err := FindMount("/proc/self/mountinfo", mnt); err != nil || mi.FSType != "tmpfs" {
			t.Fatalf("after Unmount(lazy %v): topmost mount %+v, %v; want the tmpfs untouched", lazy, mi, err)
		}
	}
	if err := unix.Unmount(mnt, 0); err != nil {
		t.Fatal(err)
	}

	// Unmounted by path here (hushfs umount), and another hushfs mount
	// made at the same path.
	if err := Unmount(mnt, false); err != nil {
		t.Fatal(err)
	}
	select {
	case <-ma.Done():
	case <-time.After(10 * time.Second):
		t.Fatal("serving did not end after unmount")
	}
	b := newEnv(t, envOpts{})
	mb := mountAt(t, b, mnt)
	// The first connection has ended, so the second may have its device.
	t.Logf("devices %d:%d then %d:%d; unique mount IDs %d then %d", ma.Major, ma.Minor, mb.Major, mb.Minor, ma.uniqueID, mb.uniqueID)
	for _, lazy := range []bool{false, true} {
		if err := ma.Unmount(lazy); !errors.Is(err, ErrNotOurs) {
			t.Errorf("Unmount(lazy %v) of a mount replaced by another: %v, want ErrNotOurs", lazy, err)
		}
		if mi, err := FindMount("/proc/self/mountinfo", mnt); err != nil || mi.Major != mb.Major || mi.Minor != mb.Minor {
			t.Fatalf("after Unmount(lazy %v): topmost mount %+v, %v; want the new mount untouched", lazy, mi, err)
		}
	}
	if err := os.WriteFile(filepath.Join(mnt, "x"), []byte("b"), 0o644); err != nil {
		t.Fatalf("the new mount after the old one's Unmount: %v", err)
	}
	if got, err := os.ReadFile(filepath.Join(b.dir, "x")); err != nil || string(got) != "b" {
		t.Fatalf("the new mount's server has %q, %v", got, err)
	}
	// Its own Unmount works, lazy too.
	if err := mb.Unmount(true); err != nil {
		t.Fatalf("the new mount's own lazy Unmount: %v", err)
	}
	if _, err := FindMount("/proc/self/mountinfo", mnt); !errors.Is(err, ErrNotMounted) {
		t.Fatalf("still mounted after its own lazy Unmount: %v", err)
	}
}
