package test

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"hushfs/internal/client"
	"hushfs/internal/fusefs"
	"hushfs/test/harness"
)

// The hushfs mount daemon through the kernel, end to end: `hushfs serve`,
// `hushfs mount` (daemonized), plain file operations on the mount,
// `hushfs stats`, `hushfs umount`, and the failures that must leave nothing
// mounted and nothing running.

// mountEnv is a served export and a mount point.
type mountEnv struct {
	t      *testing.T
	bin    string
	serve  *harness.Serve
	remote string // 127.0.0.1:/export
	ports  string // port=N,mountport=M
	mnt    string
}

func newMountEnv(t *testing.T) *mountEnv {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("needs root (FUSE mounts, the server's credential switching)")
	}
	if _, err := os.Stat("/dev/fuse"); err != nil {
		t.Skipf("no FUSE: %v", err)
	}
	bin := harness.BuildHushfs(t)
	dir := t.TempDir()
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	s := harness.StartServe(t, dir)
	_, nfsPort, _ := net.SplitHostPort(s.NFSAddr)
	_, mountPort, _ := net.SplitHostPort(s.MountAddr)
	e := &mountEnv{t: t, bin: bin, serve: s, remote: "127.0.0.1:" + dir,
		ports: "port=" + nfsPort + ",mountport=" + mountPort, mnt: t.TempDir()}
	// Registered after StartServe's, so this runs first: whatever the test
	// did, no mount and no daemon outlive it.
	t.Cleanup(func() { cleanupMount(t, e.mnt) })
	return e
}

// hushfs runs the binary with a time bound and returns its exit error and
// combined output.
func (e *mountEnv) hushfs(env []string, args ...string) (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, e.bin, args...)
	cmd.Env = append(os.Environ(), env...)
	cmd.WaitDelay = 5 * time.Second
	out, err := cmd.CombinedOutput()
	return string(out), err
}

func (e *mountEnv) mount(extraOpts string) {
	e.t.Helper()
	opts := e.ports
	if extraOpts != "" {
		opts += "," + extraOpts
	}
	if out, err := e.hushfs(nil, "mount", e.remote, e.mnt, "-o", opts); err != nil {
		e.t.Fatalf("hushfs mount: %v\n%s", err, out)
	}
}

// mountEntry returns the mount table's source and type at mnt, if mounted.
func mountEntry(t *testing.T, mnt string) (source, fstype string, ok bool) {
	t.Helper()
	b, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(string(b), "\n") {
		f := strings.Fields(line)
		if len(f) < 10 || f[4] != mnt {
			continue
		}
		i := slices.Index(f, "-")
		if i < 0 || i+2 >= len(f) {
			continue
		}
		source, fstype, ok = f[i+2], f[i+1], true // the last line is the top mount
	}
	return source, fstype, ok
}

// daemonPids returns the mount daemons serving mnt: the processes whose
// command line is "… mount SOURCE MNT -f …" (the mount point is a unique
// temporary directory).
func daemonPids(t *testing.T, mnt string) []int {
	t.Helper()
	ents, err := os.ReadDir("/proc")
	if err != nil {
		t.Fatal(err)
	}
	var pids []int
	for _, d := range ents {
		pid, err := strconv.Atoi(d.Name())
		if err != nil {
			continue
		}
		b, err := os.ReadFile("/proc/" + d.Name() + "/cmdline")
		if err != nil {
			continue
		}
		args := strings.Split(strings.TrimRight(string(b), "\x00"), "\x00")
		if len(args) > 4 && args[1] == "mount" && args[3] == mnt && slices.Contains(args, "-f") && alive(pid) {
			pids = append(pids, pid)
		}
	}
	return pids
}

// alive reports whether pid is a process that has not exited (a zombie
// waiting for a parent that does not reap has exited).
func alive(pid int) bool {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return false
	}
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	return i >= 0 && i+2 < len(s) && s[i+2] != 'Z' && s[i+2] != 'X'
}

func waitExit(t *testing.T, pid int, d time.Duration) bool {
	t.Helper()
	deadline := time.Now().Add(d)
	for time.Now().Before(deadline) {
		if !alive(pid) {
			return true
		}
		time.Sleep(20 * time.Millisecond)
	}
	return false
}

// cleanupMount detaches whatever is mounted at mnt and kills its daemons
// by pid.
func cleanupMount(t *testing.T, mnt string) {
	for range 4 {
		if _, _, ok := mountEntry(t, mnt); !ok {
			break
		}
		syscall.Unmount(mnt, syscall.MNT_DETACH)
	}
	for _, pid := range daemonPids(t, mnt) {
		syscall.Kill(pid, syscall.SIGKILL)
		if !waitExit(t, pid, 10*time.Second) {
			t.Errorf("mount daemon %d survived SIGKILL", pid)
		}
	}
}

func (e *mountEnv) stats(args ...string) client.Snapshot {
	e.t.Helper()
	out, err := e.hushfs(nil, append([]string{"stats", e.mnt, "--json"}, args...)...)
	if err != nil {
		e.t.Fatalf("hushfs stats: %v\n%s", err, out)
	}
	var s client.Snapshot
	if err := json.Unmarshal([]byte(out), &s); err != nil {
		e.t.Fatalf("hushfs stats --json: %v\n%s", err, out)
	}
	return s
}

func TestMountSmoke(t *testing.T) {
	e := newMountEnv(t)
	e.mount("")
	source, fstype, ok := mountEntry(t, e.mnt)
	if !ok || source != e.remote || fstype != "fuse.hushfs" {
		t.Fatalf("mount table: source %q type %q mounted %v; want %q fuse.hushfs", source, fstype, ok, e.remote)
	}
	pids := daemonPids(t, e.mnt)
	if len(pids) != 1 {
		t.Fatalf("mount daemons for %s: %v, want one", e.mnt, pids)
	}
	daemon := pids[0]

	// Plain file operations through the mount, checked on the server side.
	data := make([]byte, 2<<20+77)
	rand.Read(data)
	if err := os.WriteFile(filepath.Join(e.mnt, "data"), data, 0o644); err != nil {
		t.Fatal(err)
	}
	if got, err := os.ReadFile(filepath.Join(e.serve.Dir, "data")); err != nil || !bytes.Equal(got, data) {
		t.Fatalf("server copy after close: %d bytes, %v", len(got), err)
	}
	if got, err := os.ReadFile(filepath.Join(e.mnt, "data")); err != nil || !bytes.Equal(got, data) {
		t.Fatalf("read back: %d bytes, %v", len(got), err)
	}
	if err := os.Mkdir(filepath.Join(e.mnt, "dir"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(filepath.Join(e.mnt, "data"), filepath.Join(e.mnt, "dir", "moved")); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(e.mnt, "dir", "small"), []byte("hello\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	ents, err := os.ReadDir(filepath.Join(e.mnt, "dir"))
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, d := range ents {
		names = append(names, d.Name())
	}
	if strings.Join(names, ",") != "moved,small" {
		t.Errorf("listing: %v", names)
	}
	if err := os.Remove(filepath.Join(e.mnt, "dir", "small")); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(e.serve.Dir, "dir", "small")); !os.IsNotExist(err) {
		t.Errorf("removed file still on the server: %v", err)
	}
	if fi, err := os.Stat(filepath.Join(e.serve.Dir, "dir", "moved")); err != nil || fi.Size() != int64(len(data)) {
		t.Errorf("renamed file on the server: %v, %v", fi, err)
	}

	s := e.stats()
	// The daemon names its build, as `hushfs version` does.
	if v, err := e.hushfs(nil, "version"); err != nil || s.Version == "" || s.Version != strings.TrimSpace(v) {
		t.Errorf("stats version %q, hushfs version %q (%v): want the same", s.Version, v, err)
	}
	for _, proc := range []string{"CREATE", "WRITE", "MKDIR", "RENAME", "REMOVE", "READDIRPLUS"} {
		if s.Count(proc) == 0 {
			t.Errorf("stats show no %s: %v", proc, s.Names())
		}
	}
	if s.Count("MKDIR") != 1 || s.Count("RENAME") != 1 || s.Count("REMOVE") != 1 {
		t.Errorf("MKDIR %d RENAME %d REMOVE %d, want 1 each", s.Count("MKDIR"), s.Count("RENAME"), s.Count("REMOVE"))
	}
	if s.Ops["WRITE"].BytesSent < uint64(len(data)) {
		t.Errorf("WRITE bytes sent %d < %d written", s.Ops["WRITE"].BytesSent, len(data))
	}
	table, err := e.hushfs(nil, "stats", e.mnt)
	if err != nil || !strings.Contains(table, "total NFS") || !strings.Contains(table, "RENAME") || !strings.Contains(table, e.remote) {
		t.Errorf("stats table: %v\n%s", err, table)
	}
	e.stats("--reset")
	if s := e.stats(); s.Total() != 0 {
		t.Errorf("after --reset: %v", s.Ops)
	}

	if out, err := e.hushfs(nil, "umount", e.mnt); err != nil {
		t.Fatalf("hushfs umount: %v\n%s", err, out)
	}
	if _, _, ok := mountEntry(t, e.mnt); ok {
		t.Error("still mounted after hushfs umount")
	}
	if !waitExit(t, daemon, 10*time.Second) {
		t.Errorf("mount daemon %d still running after umount", daemon)
	}
	out, err := e.hushfs(nil, "umount", e.mnt)
	if err == nil || !strings.Contains(out, "not a hushfs mount") {
		t.Errorf("umount of an unmounted directory: %v\n%s", err, out)
	}
}

// TestMountFailures: a failed mount says why, exits non-zero, and leaves
// nothing mounted and no daemon.
func TestMountFailures(t *testing.T) {
	e := newMountEnv(t)
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	closed := strconv.Itoa(l.Addr().(*net.TCPAddr).Port)
	l.Close()
	for _, c := range []struct {
		name   string
		args   []string
		expect []string // in the message
	}{
		{"bad option", []string{"mount", e.remote, e.mnt, "-o", e.ports + ",rsise=4096"}, []string{`"rsise=4096"`, "unknown option"}},
		{"bad value", []string{"mount", e.remote, e.mnt, "-o", e.ports + ",timeo=soon"}, []string{`"timeo=soon"`}},
		{"unreachable server", []string{"mount", e.remote, e.mnt, "-o", "port=" + closed + ",mountport=" + closed},
			[]string{"127.0.0.1:" + closed, "connection refused"}},
		{"no such export", []string{"mount", "127.0.0.1:/no/such/export", e.mnt, "-o", e.ports}, []string{"/no/such/export"}},
		{"no mount point", []string{"mount", e.remote, filepath.Join(e.mnt, "absent"), "-o", e.ports}, []string{"absent"}},
		{"bad source", []string{"mount", "127.0.0.1:relative", e.mnt, "-o", e.ports}, []string{"absolute"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			out, err := e.hushfs(nil, c.args...)
			var ee *exec.ExitError
			if !errors.As(err, &ee) || ee.ExitCode() == 0 {
				t.Errorf("exit: %v, want a non-zero status\n%s", err, out)
			}
			for _, want := range c.expect {
				if !strings.Contains(out, want) {
					t.Errorf("message does not name %q:\n%s", want, out)
				}
			}
			if _, _, ok := mountEntry(t, e.mnt); ok {
				t.Errorf("%s is mounted after a failed mount", e.mnt)
			}
			if pids := daemonPids(t, e.mnt); len(pids) > 0 {
				t.Errorf("mount daemons left running: %v", pids)
			}
		})
	}
}

// TestMountHelper mounts as mount(8) does for "mount -t fuse.hushfs":
// mount.fuse3 runs "hushfs SOURCE MOUNTPOINT -o OPTIONS" from PATH.
func TestMountHelper(t *testing.T) {
	e := newMountEnv(t)
	helper, err := exec.LookPath("mount.fuse3")
	if err != nil {
		for _, p := range []string{"/sbin/mount.fuse3", "/usr/sbin/mount.fuse3"} {
			if _, err := os.Stat(p); err == nil {
				helper = p
			}
		}
	}
	if helper == "" {
		t.Skip("no mount.fuse3")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, helper, e.remote, e.mnt, "-t", "fuse.hushfs",
		"-o", e.ports+",_netdev,noatime,x-systemd.requires=network-online.target")
	cmd.Env = append(os.Environ(), "PATH="+filepath.Dir(e.bin)+":"+os.Getenv("PATH"))
	cmd.WaitDelay = 5 * time.Second
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("mount.fuse3: %v\n%s", err, out)
	}
	source, fstype, ok := mountEntry(t, e.mnt)
	if !ok || source != e.remote || fstype != "fuse.hushfs" {
		t.Fatalf("mount table: source %q type %q mounted %v", source, fstype, ok)
	}
	if err := os.WriteFile(filepath.Join(e.serve.Dir, "f"), []byte("via helper"), 0o644); err != nil {
		t.Fatal(err)
	}
	if got, err := os.ReadFile(filepath.Join(e.mnt, "f")); err != nil || string(got) != "via helper" {
		t.Errorf("read through the helper's mount: %q, %v", got, err)
	}
	pids := daemonPids(t, e.mnt)
	if len(pids) != 1 {
		t.Fatalf("mount daemons: %v", pids)
	}
	// umount(8)'s way: the kernel unmounts, the daemon sees the session end.
	if err := syscall.Unmount(e.mnt, 0); err != nil {
		t.Fatalf("umount: %v", err)
	}
	if !waitExit(t, pids[0], 10*time.Second) {
		t.Errorf("mount daemon %d still running after the kernel unmount", pids[0])
	}
}

// TestMountDaemonSignal: SIGTERM with a file still open and data not yet
// written back detaches the mount, writes the data back, and exits.
func TestMountDaemonSignal(t *testing.T) {
	e := newMountEnv(t)
	e.mount("")
	pids := daemonPids(t, e.mnt)
	if len(pids) != 1 {
		t.Fatalf("mount daemons: %v", pids)
	}
	f, err := os.Create(filepath.Join(e.mnt, "open"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	data := bytes.Repeat([]byte("unflushed "), 1000)
	if _, err := f.Write(data); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Kill(pids[0], syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if !waitExit(t, pids[0], 20*time.Second) {
		t.Fatalf("mount daemon %d still running 20 s after SIGTERM", pids[0])
	}
	if _, _, ok := mountEntry(t, e.mnt); ok {
		t.Error("still mounted after the daemon's SIGTERM")
	}
	if got, err := os.ReadFile(filepath.Join(e.serve.Dir, "open")); err != nil || !bytes.Equal(got, data) {
		t.Errorf("data written before SIGTERM: %d bytes on the server (%v), want %d", len(got), err, len(data))
	}
}

// statsSocket returns the path of the statistics socket of the mount at
// mnt, from its device in the mount table.
func statsSocket(t *testing.T, mnt string) string {
	t.Helper()
	mi, err := fusefs.FindMount("/proc/self/mountinfo", mnt)
	if err != nil {
		t.Fatal(err)
	}
	return filepath.Join(fusefs.RuntimeDir(0), fmt.Sprintf("%d:%d.sock", mi.Major, mi.Minor))
}

// TestMountStatsSocket: `hushfs stats` reaches the daemon through the
// mount's socket, for root and the owner only; the socket goes with the
// mount, and one left by a killed daemon neither answers nor confuses a
// new mount at the same path.
func TestMountStatsSocket(t *testing.T) {
	e := newMountEnv(t)
	e.mount("")
	if _, err := os.ReadDir(e.mnt); err != nil {
		t.Fatal(err)
	}
	sock := statsSocket(t, e.mnt)
	if fi, err := os.Lstat(sock); err != nil || fi.Mode()&os.ModeSocket == 0 || fi.Mode().Perm() != 0o600 {
		t.Fatalf("statistics socket %s: %v, %v; want a socket of mode 0600", sock, fi, err)
	}
	if s := e.stats(); s.Count("READDIRPLUS") == 0 || s.FUSE["readdirplus"] == 0 {
		t.Errorf("stats: %v, FUSE requests %v", s.Ops, s.FUSE)
	}
	if out, err := e.hushfs(nil, "stats", e.mnt, "--fuse"); err != nil || !strings.Contains(out, "FUSE requests served") || !strings.Contains(out, "readdirplus") {
		t.Errorf("stats --fuse: %v\n%s", err, out)
	}

	// Another user may use the mount (were it allow_other) but not read
	// its statistics.
	bin := filepath.Join(t.TempDir(), "hushfs")
	if b, err := os.ReadFile(e.bin); err != nil || os.WriteFile(bin, b, 0o755) != nil {
		t.Fatalf("copying the binary: %v", err)
	}
	for _, dir := range []string{e.mnt, filepath.Dir(bin)} {
		for p := dir; p != "/" && p != os.TempDir(); p = filepath.Dir(p) {
			if err := os.Chmod(p, 0o755); err != nil {
				t.Fatal(err)
			}
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin, "stats", e.mnt)
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: 65534, Gid: 65534}}
	if out, err := cmd.CombinedOutput(); err == nil || !strings.Contains(string(out), "permission denied: only root and the mount's owner") {
		t.Errorf("hushfs stats as uid 65534: %v, want permission denied\n%s", err, out)
	}

	// A killed daemon leaves its socket, which answers nothing.
	pids := daemonPids(t, e.mnt)
	if len(pids) != 1 {
		t.Fatalf("mount daemons: %v", pids)
	}
	syscall.Kill(pids[0], syscall.SIGKILL)
	if !waitExit(t, pids[0], 10*time.Second) {
		t.Fatalf("mount daemon %d survived SIGKILL", pids[0])
	}
	if out, err := e.hushfs(nil, "stats", e.mnt); err == nil || !strings.Contains(out, "mount daemon is gone") {
		t.Errorf("stats of a mount whose daemon was killed: %v\n%s", err, out)
	}
	if err := syscall.Unmount(e.mnt, syscall.MNT_DETACH); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Lstat(sock); err != nil {
		t.Fatalf("the killed daemon's socket: %v (the test expects it left behind)", err)
	}

	// A new mount at the same path: its daemon clears the dead socket
	// (its device is another, or the same one given again) and answers.
	e.mount("")
	sock2 := statsSocket(t, e.mnt)
	if sock2 != sock {
		if _, err := os.Lstat(sock); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("dead daemon's socket %s after a new mount: %v, want removed", sock, err)
		}
	}
	if s := e.stats(); s.Count("FSINFO") != 1 {
		t.Errorf("stats of the new mount: %v", s.Ops)
	}
	if out, err := e.hushfs(nil, "umount", e.mnt); err != nil {
		t.Fatalf("hushfs umount: %v\n%s", err, out)
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		_, err := os.Lstat(sock2)
		if errors.Is(err, os.ErrNotExist) {
			break
		}
		if time.Now().After(deadline) {
			t.Errorf("socket %s after umount: %v, want removed", sock2, err)
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
}
