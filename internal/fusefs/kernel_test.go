package fusefs

import (
	"bytes"
	"crypto/rand"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"hushfs/internal/client"
)

// mountKernel mounts an env's adapter through the kernel at a temporary
// directory and unmounts it at cleanup.
func mountKernel(t *testing.T, o envOpts) (*env, string) {
	t.Helper()
	e := newEnv(t, o)
	if _, err := os.Stat("/dev/fuse"); err != nil {
		t.Skipf("no FUSE: %v", err)
	}
	mnt := t.TempDir()
	e.runDir = t.TempDir()
	m, err := Mount(e.fs, mnt, MountConfig{Source: "127.0.0.1:" + e.dir, Options: e.opts, Logf: t.Logf, RuntimeDir: e.runDir})
	if err != nil {
		t.Fatalf("Mount: %v", err)
	}
	e.mounted = m
	t.Cleanup(func() {
		select {
		case <-m.Done():
			return // unmounted by the test
		default:
		}
		if err := m.Unmount(false); err != nil {
			t.Errorf("unmount: %v", err)
			m.Unmount(true)
		}
		select {
		case <-m.Done():
		case <-time.After(30 * time.Second): // 10 s was exceeded on a loaded machine
			t.Errorf("serving did not end after unmount")
		}
	})
	return e, mnt
}

func TestKernelMount(t *testing.T) {
	e, mnt := mountKernel(t, envOpts{})
	mi, err := FindMount("/proc/self/mountinfo", mnt)
	if err != nil {
		t.Fatal(err)
	}
	if mi.FSType != "fuse.hushfs" || mi.Source != "127.0.0.1:"+e.dir {
		t.Errorf("mount table: type %q source %q", mi.FSType, mi.Source)
	}
	line := mountinfoLine(t, mnt)
	if !strings.Contains(line, "max_read=1048576") || !strings.Contains(line, "default_permissions") {
		t.Errorf("mount options: %s", line)
	}
	// Default options: nosuid,nodev (the FUSE convention).
	if !strings.Contains(line, "nosuid") || !strings.Contains(line, "nodev") {
		t.Errorf("mount flags: %s", line)
	}
	ra, err := os.ReadFile(fmt.Sprintf("/sys/class/bdi/%d:%d/read_ahead_kb", mi.Major, mi.Minor))
	if err != nil || strings.TrimSpace(string(ra)) != fmt.Sprint(ReadAhead>>10) {
		t.Errorf("read_ahead_kb = %q, %v; want %d", ra, err, ReadAhead>>10)
	}

	// Data through the page cache, both ways.
	data := make([]byte, 3<<20+123)
	rand.Read(data)
	if err := os.WriteFile(filepath.Join(mnt, "big"), data, 0o644); err != nil {
		t.Fatal(err)
	}
	if got, err := os.ReadFile(filepath.Join(e.dir, "big")); err != nil || !bytes.Equal(got, data) {
		t.Fatalf("server copy differs (%d bytes, %v)", len(got), err)
	}
	if got, err := os.ReadFile(filepath.Join(mnt, "big")); err != nil || !bytes.Equal(got, data) {
		t.Fatalf("read back differs (%d bytes, %v)", len(got), err)
	}
	var st unix.Stat_t
	if err := unix.Stat(filepath.Join(mnt, "big"), &st); err != nil || st.Size != int64(len(data)) || st.Blksize != 1<<20 {
		t.Errorf("stat: size %d blksize %d, %v", st.Size, st.Blksize, err)
	}

	// RENAME_NOREPLACE cannot be honoured over NFSv3.
	if err := unix.Renameat2(unix.AT_FDCWD, filepath.Join(mnt, "big"), unix.AT_FDCWD, filepath.Join(mnt, "big2"), unix.RENAME_NOREPLACE); !errors.Is(err, unix.EINVAL) {
		t.Errorf("renameat2(RENAME_NOREPLACE) = %v, want EINVAL", err)
	}
}

func mountinfoLine(t *testing.T, mnt string) string {
	t.Helper()
	b, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range strings.Split(string(b), "\n") {
		if f := strings.Fields(l); len(f) > 4 && f[4] == mnt {
			return l
		}
	}
	t.Fatalf("%s not in mountinfo", mnt)
	return ""
}

// TestKernelCaching checks what the kernel answers by itself within the
// core's timeouts: negative dentries, a plus listing's attributes, symbolic
// link targets.
func TestKernelCaching(t *testing.T) {
	e, mnt := mountKernel(t, envOpts{})
	for i := range 50 {
		if err := os.WriteFile(filepath.Join(e.dir, fmt.Sprintf("f%02d", i)), []byte("x"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Symlink("f00", filepath.Join(e.dir, "link")); err != nil {
		t.Fatal(err)
	}

	before := e.count("LOOKUP")
	for range 3 {
		if _, err := os.Stat(filepath.Join(mnt, "missing")); !os.IsNotExist(err) {
			t.Fatalf("stat missing: %v", err)
		}
	}
	if got := e.count("LOOKUP") - before; got != 1 {
		t.Errorf("LOOKUPs for three stats of a missing name = %d, want 1 (negative dentry)", got)
	}

	plus, lookups, getattrs := e.count("READDIRPLUS"), e.count("LOOKUP"), e.count("GETATTR")
	ents, err := os.ReadDir(mnt)
	if err != nil {
		t.Fatal(err)
	}
	for _, d := range ents {
		if _, err := d.Info(); err != nil { // lstat, as ls -l
			t.Fatal(err)
		}
	}
	if len(ents) != 51 {
		t.Errorf("%d entries, want 51", len(ents))
	}
	if got := e.count("READDIRPLUS") - plus; got != 1 {
		t.Errorf("READDIRPLUS = %d, want 1", got)
	}
	if e.count("LOOKUP") != lookups || e.count("GETATTR") != getattrs {
		t.Errorf("ls -l after READDIRPLUS sent %d LOOKUP and %d GETATTR, want none",
			e.count("LOOKUP")-lookups, e.count("GETATTR")-getattrs)
	}

	before = e.count("READLINK")
	for range 3 {
		if target, err := os.Readlink(filepath.Join(mnt, "link")); err != nil || target != "f00" {
			t.Fatalf("readlink = %q, %v", target, err)
		}
	}
	if got := e.count("READLINK") - before; got != 1 {
		t.Errorf("READLINKs for three readlinks = %d, want 1 (cached symlink)", got)
	}
}

// The statistics of a live mount come through its socket, found from the
// mount point; the socket goes away with the mount.
func TestKernelStats(t *testing.T) {
	e, mnt := mountKernel(t, envOpts{})
	if _, err := os.ReadDir(mnt); err != nil {
		t.Fatal(err)
	}
	b, err := queryControl("/proc/self/mountinfo", e.runDir, mnt, controlRequest{Stats: true})
	if err != nil {
		t.Fatal(err)
	}
	var s client.Snapshot
	if err := json.Unmarshal(b, &s); err != nil {
		t.Fatalf("stats JSON: %v", err)
	}
	if s.Count("READDIRPLUS") == 0 || s.Count("FSINFO") != 1 {
		t.Errorf("stats: %v", s.Ops)
	}
	// The kernel's requests, counted as they reach the daemon.
	if s.FUSE["opendir"] == 0 || s.FUSE["readdirplus"] == 0 {
		t.Errorf("FUSE requests: %v", s.FUSE)
	}
	if _, err := queryControl("/proc/self/mountinfo", e.runDir, mnt, controlRequest{Reset: true}); err != nil {
		t.Fatalf("reset: %v", err)
	}
	if s := e.fs.Stats(); s.Total() != 0 || s.FUSE["readdirplus"] != 0 {
		t.Errorf("after reset: %v %v", s.Ops, s.FUSE)
	}
	// Reading them sent nothing to the mount.
	if s := e.fs.Stats(); len(s.FUSE) != 0 {
		t.Errorf("requests after reading the statistics: %v", s.FUSE)
	}

	ents, err := os.ReadDir(e.runDir)
	if err != nil {
		t.Fatal(err)
	}
	var socks []string
	for _, d := range ents {
		if strings.HasSuffix(d.Name(), controlSuffix) {
			socks = append(socks, d.Name())
		}
	}
	if len(socks) != 1 {
		t.Fatalf("sockets in %s: %v, want one", e.runDir, socks)
	}
	if err := e.mounted.Unmount(false); err != nil {
		t.Fatal(err)
	}
	<-e.mounted.Done()
	if _, err := os.Lstat(filepath.Join(e.runDir, socks[0])); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("socket after unmount: %v, want removed", err)
	}
}

// The mount has no extended attributes, and the kernel learns it from the
// first request: stats and getxattrs of many files (what ls -l does for
// each entry: lgetxattr of security.selinux, getxattr of a POSIX ACL)
// send no more getxattr to the daemon, and every xattr call fails with
// EOPNOTSUPP (but POSIX ACLs: the kernel says there is none).
func TestKernelNoXAttrs(t *testing.T) {
	e, mnt := mountKernel(t, envOpts{})
	const files = 20
	for i := range files {
		if err := os.WriteFile(filepath.Join(e.dir, fmt.Sprintf("f%02d", i)), nil, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	buf := make([]byte, 256)
	for i := range files {
		p := filepath.Join(mnt, fmt.Sprintf("f%02d", i))
		var st unix.Stat_t
		if err := unix.Lstat(p, &st); err != nil {
			t.Fatal(err)
		}
		for _, name := range []string{"security.selinux", "user.comment"} {
			if _, err := unix.Lgetxattr(p, name, buf); !errors.Is(err, unix.EOPNOTSUPP) {
				t.Fatalf("lgetxattr(%s, %s) = %v, want EOPNOTSUPP", p, name, err)
			}
		}
		// POSIX ACLs are the kernel's to answer (no ACL: ENODATA).
		if _, err := unix.Getxattr(p, "system.posix_acl_access", buf); !errors.Is(err, unix.ENODATA) && !errors.Is(err, unix.EOPNOTSUPP) {
			t.Fatalf("getxattr(%s, system.posix_acl_access) = %v, want ENODATA", p, err)
		}
	}
	p := filepath.Join(mnt, "f00")
	for range 3 {
		if _, err := unix.Listxattr(p, buf); !errors.Is(err, unix.EOPNOTSUPP) {
			t.Errorf("listxattr = %v, want EOPNOTSUPP", err)
		}
		if err := unix.Setxattr(p, "user.comment", []byte("x"), 0); !errors.Is(err, unix.EOPNOTSUPP) {
			t.Errorf("setxattr = %v, want EOPNOTSUPP", err)
		}
		if err := unix.Removexattr(p, "user.comment"); !errors.Is(err, unix.EOPNOTSUPP) {
			t.Errorf("removexattr = %v, want EOPNOTSUPP", err)
		}
	}
	got := e.fs.Stats().FUSE
	for _, op := range []string{"getxattr", "listxattr", "setxattr", "removexattr"} {
		if got[op] != 1 {
			t.Errorf("%s requests = %d, want 1 (the kernel asks once per mount)", op, got[op])
		}
	}
}
