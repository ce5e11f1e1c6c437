package harness

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"net"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"time"

	"hushfs/internal/client"
)

// MountFSType is the type /proc/mounts shows for a hushfs mount.
const MountFSType = "fuse.hushfs"

// MountDebugEnv names a directory: when set, every mount daemon the
// harness starts logs every FUSE request there (--log FILE -d).
const MountDebugEnv = "HUSHFS_MOUNT_DEBUG_DIR"

// Mount is a running `hushfs mount -f` process and the FUSE mount it
// serves.
//
// The process is started by the harness itself (in the foreground mode of
// the command, in the background of the test) rather than through the
// command's own daemonizing, so that the harness knows its pid and can
// always kill it. When started through a NetNS its sockets live in that
// namespace while the mount, made in the caller's mount namespace, is
// visible to the test.
type Mount struct {
	Dir    string // the mount point
	Source string // SERVER:/EXPORT

	bin string
	p   *proc
}

// MountSpec says what to mount and where.
type MountSpec struct {
	Bin     string        // the hushfs binary (BuildHushfs)
	Server  string        // server address, "127.0.0.1"
	Export  string        // exported path
	Dir     string        // the mount point, an existing directory
	Options string        // -o options (port=, mountport=, soft, ...)
	NS      *NetNS        // run the daemon in this network namespace; nil: the host's
	Timeout time.Duration // wait for the mount to appear; 30 s when zero
}

// StartMount starts `hushfs mount SERVER:/EXPORT DIR -o OPTS -f` and
// returns once DIR shows up in /proc/self/mountinfo as a hushfs mount. It
// fails the test with the daemon's output if the process exits first or the
// mount does not appear in time. At cleanup the mount is detached
// (`hushfs umount -l`, then umount2(MNT_DETACH) if still there) and the
// daemon is killed by pid if it has not exited on its own; a mount or a
// daemon that survives that is reported as a test error.
func StartMount(t T, spec MountSpec) *Mount {
	t.Helper()
	RequireRoot(t)
	if _, err := os.Stat("/dev/fuse"); err != nil {
		t.Skip("no FUSE: ", err)
	}
	timeout := 30 * time.Second
	if spec.Timeout > 0 {
		timeout = spec.Timeout
	}
	m := &Mount{Dir: spec.Dir, Source: spec.Server + ":" + spec.Export, bin: spec.Bin}
	args := []string{"mount", m.Source, spec.Dir, "-f"}
	if spec.Options != "" {
		args = append(args, "-o", spec.Options)
	}
	if dir := os.Getenv(MountDebugEnv); dir != "" {
		// Every FUSE request and reply, for a failure to be read later.
		f, err := os.CreateTemp(dir, "hushfs-mount-*.log")
		if err != nil {
			t.Fatalf("%s: %v", MountDebugEnv, err)
		}
		f.Close()
		args = append(args, "--log", f.Name(), "-d")
		t.Logf("mount daemon log: %s", f.Name())
	}
	var cmd *exec.Cmd
	if spec.NS != nil {
		// nsenter with only --net execs the command: the pid is hushfs's.
		cmd = spec.NS.Command(context.Background(), spec.Bin, args...)
	} else {
		cmd = exec.Command(spec.Bin, args...)
	}
	p := &proc{cmd: cmd, out: &syncBuffer{}, exited: make(chan struct{})}
	cmd.Stdout, cmd.Stderr = p.out, p.out
	cmd.Dir = "/" // keep no test directory busy
	cmd.WaitDelay = 2 * time.Second
	// If the test binary dies without cleanups, the daemon dies with it
	// (the kernel then aborts the FUSE connection).
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		t.Fatalf("start hushfs mount: %v", err)
	}
	go func() {
		p.err = cmd.Wait()
		close(p.exited)
	}()
	m.p = p
	t.Cleanup(func() { m.cleanup(t) })

	deadline := time.Now().Add(timeout)
	for {
		if ok, _ := Mounted(spec.Dir); ok {
			return m
		}
		if p.done() {
			t.Fatalf("hushfs mount %s %s exited before the mount appeared: %v\n%s", m.Source, spec.Dir, p.err, p.out.String())
		}
		if time.Now().After(deadline) {
			t.Fatalf("hushfs mount %s %s: not mounted after %v\n%s", m.Source, spec.Dir, timeout, p.out.String())
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// MountServe mounts a `hushfs serve` export (ports given explicitly, no
// portmapper) with extra options appended to the port options.
func MountServe(t T, bin string, s *Serve, dir, opts string) *Mount {
	t.Helper()
	_, nfsPort, _ := net.SplitHostPort(s.NFSAddr)
	_, mountPort, _ := net.SplitHostPort(s.MountAddr)
	return StartMount(t, MountSpec{Bin: bin, Server: "127.0.0.1", Export: s.ExportPath, Dir: dir,
		Options: joinOpts("port="+nfsPort+",mountport="+mountPort, opts)})
}

// MountGanesha mounts ganesha's export from inside its namespace (through
// its rpcbind unless opts name the ports).
func MountGanesha(t T, bin string, g *Ganesha, dir, opts string) *Mount {
	t.Helper()
	return StartMount(t, MountSpec{Bin: bin, Server: g.Addr, Export: g.ExportPath, Dir: dir,
		Options: joinOpts(fmt.Sprintf("port=%d,mountport=%d", g.NFSPort, g.MountPort), opts), NS: g.NS})
}

// MountGaneshaV41 mounts ganesha's export over NFSv4.1 (vers=4.1) from
// inside its namespace; ganesha must serve NFSv4 (GaneshaOptions.NFSv4).
func MountGaneshaV41(t T, bin string, g *Ganesha, dir, opts string) *Mount {
	t.Helper()
	return StartMount(t, MountSpec{Bin: bin, Server: g.Addr, Export: g.ExportPath, Dir: dir,
		Options: joinOpts(fmt.Sprintf("vers=4.1,port=%d", g.NFSPort), opts), NS: g.NS})
}

func joinOpts(a, b string) string {
	if b == "" {
		return a
	}
	return a + "," + b
}

// Pid returns the daemon's process id.
func (m *Mount) Pid() int { return m.p.cmd.Process.Pid }

// Alive reports whether the daemon is still running.
func (m *Mount) Alive() bool { return !m.p.done() }

// Output returns what the daemon printed so far.
func (m *Mount) Output() string { return m.p.out.String() }

// Unmount runs `hushfs umount DIR` (lazy with -l) and waits, at most 20 s,
// for the daemon to exit. It returns the command's error and output, or an
// error if the mount or the daemon is still there afterwards.
func (m *Mount) Unmount(lazy bool) error {
	args := []string{"umount", m.Dir}
	if lazy {
		args = append(args, "-l")
	}
	out, err := RunHushfs(m.bin, 30*time.Second, args...)
	if err != nil {
		return fmt.Errorf("hushfs %s: %w\n%s", strings.Join(args, " "), err, out)
	}
	select {
	case <-m.p.exited:
	case <-time.After(20 * time.Second):
		return fmt.Errorf("mount daemon %d still running 20 s after hushfs umount", m.Pid())
	}
	if ok, _ := Mounted(m.Dir); ok {
		return fmt.Errorf("%s still mounted after hushfs umount", m.Dir)
	}
	return nil
}

// Stats returns the mount's RPC statistics (`hushfs stats DIR --json`).
func (m *Mount) Stats(t T) client.Snapshot {
	t.Helper()
	out, err := RunHushfs(m.bin, 30*time.Second, "stats", m.Dir, "--json")
	if err != nil {
		t.Fatalf("hushfs stats %s --json: %v\n%s", m.Dir, err, out)
	}
	var s client.Snapshot
	if err := json.Unmarshal([]byte(out), &s); err != nil {
		t.Fatalf("hushfs stats --json: %v\n%s", err, out)
	}
	return s
}

// ResetStats zeroes the mount's counters (`hushfs stats DIR --reset`).
func (m *Mount) ResetStats(t T) {
	t.Helper()
	if out, err := RunHushfs(m.bin, 30*time.Second, "stats", m.Dir, "--json", "--reset"); err != nil {
		t.Fatalf("hushfs stats %s --reset: %v\n%s", m.Dir, err, out)
	}
}

// cleanup detaches the mount and makes sure the daemon is gone.
func (m *Mount) cleanup(t T) {
	if ok, _ := Mounted(m.Dir); ok {
		if out, err := RunHushfs(m.bin, 20*time.Second, "umount", m.Dir, "-l"); err != nil {
			t.Logf("cleanup: hushfs umount -l %s: %v\n%s", m.Dir, err, out)
		}
	}
	select {
	case <-m.p.exited:
	case <-time.After(10 * time.Second):
		// Write-back that cannot finish (the server is gone, a hard
		// mount) keeps the daemon waiting: that is what SIGKILL is for.
		t.Logf("cleanup: mount daemon %d still running 10 s after detaching %s; killing it", m.Pid(), m.Dir)
		m.p.kill(t)
	}
	for range 3 {
		if ok, _ := Mounted(m.Dir); !ok {
			return
		}
		syscall.Unmount(m.Dir, syscall.MNT_DETACH)
	}
	if ok, _ := Mounted(m.Dir); ok {
		t.Errorf("cleanup: %s is still mounted", m.Dir)
	}
}

// RunHushfs runs the hushfs binary with a deadline and returns its combined
// output and exit error.
func RunHushfs(bin string, timeout time.Duration, args ...string) (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin, args...)
	cmd.WaitDelay = 2 * time.Second
	out, err := cmd.CombinedOutput()
	return string(out), err
}

// Mounted reports whether dir is a mount point of a hushfs mount (the
// topmost mount there), reading /proc/self/mountinfo; it never touches dir
// itself, which may hang or fail if its server is gone.
func Mounted(dir string) (bool, error) {
	fstype, ok, err := mountType(dir)
	return ok && fstype == MountFSType, err
}

// MountedAny reports whether anything at all is mounted on dir.
func MountedAny(dir string) (bool, error) {
	_, ok, err := mountType(dir)
	return ok, err
}

func mountType(dir string) (fstype string, ok bool, err error) {
	f, err := os.Open("/proc/self/mountinfo")
	if err != nil {
		return "", false, err
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		// ID PARENT MAJ:MIN ROOT MOUNTPOINT OPTS [OPTIONAL...] - FSTYPE SOURCE SUPER
		fields := strings.Fields(sc.Text())
		if len(fields) < 7 || unescapeMountinfo(fields[4]) != dir {
			continue
		}
		for i := 6; i+1 < len(fields); i++ {
			if fields[i] == "-" {
				fstype, ok = fields[i+1], true // later lines are mounted on top
				break
			}
		}
	}
	if err := sc.Err(); err != nil {
		return "", false, err
	}
	return fstype, ok, nil
}

// unescapeMountinfo undoes the octal escapes (\040 for a space) of a
// mountinfo path.
func unescapeMountinfo(s string) string {
	if !strings.Contains(s, `\`) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && i+3 < len(s) {
			if n, err := strconv.ParseUint(s[i+1:i+4], 8, 8); err == nil {
				b.WriteByte(byte(n))
				i += 3
				continue
			}
		}
		b.WriteByte(s[i])
	}
	return b.String()
}
