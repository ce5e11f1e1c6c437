package harness

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"syscall"
	"time"
)

// build memoises the one `go build ./cmd/hushfs` of a test binary: building
// is the slow part of starting our own processes and its result never
// changes during a run. It is the package's only mutable state.
var build struct {
	once sync.Once
	dir  string // temporary directory holding the binary
	bin  string
	err  error
}

// BuildHushfs builds cmd/hushfs once per test binary (later calls return
// the same path) and returns the binary's path. The binary lives in a
// temporary directory that CleanupBuild removes; call it from TestMain.
//
// The binary is built without -race even under `go test -race`: the
// packages it is made of run their own tests with the race detector, and
// end-to-end tests move hundreds of MiB through it.
func BuildHushfs(t T) string {
	t.Helper()
	build.once.Do(func() {
		build.bin, build.dir, build.err = buildHushfs()
	})
	if build.err != nil {
		t.Fatalf("build hushfs: %v", build.err)
	}
	return build.bin
}

// CleanupBuild removes the binary BuildHushfs built, if any. Call it after
// m.Run in TestMain.
func CleanupBuild() {
	if build.dir != "" {
		os.RemoveAll(build.dir)
	}
}

func buildHushfs() (bin, dir string, err error) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	goBin, err := exec.LookPath("go")
	if err != nil {
		return "", "", fmt.Errorf("go tool: %w", err)
	}
	// The module root, from wherever the test binary runs (its package dir).
	out, err := exec.CommandContext(ctx, goBin, "env", "GOMOD").Output()
	if err != nil {
		return "", "", fmt.Errorf("go env GOMOD: %w", err)
	}
	gomod := strings.TrimSpace(string(out))
	if gomod == "" || gomod == os.DevNull {
		return "", "", fmt.Errorf("not inside the hushfs module")
	}
	dir, err = os.MkdirTemp("", "hushfs-e2e-bin-")
	if err != nil {
		return "", "", err
	}
	bin = filepath.Join(dir, "hushfs")
	cmd := exec.CommandContext(ctx, goBin, "build", "-o", bin, "./cmd/hushfs")
	cmd.Dir = filepath.Dir(gomod)
	if out, err := cmd.CombinedOutput(); err != nil {
		os.RemoveAll(dir)
		return "", "", fmt.Errorf("go build ./cmd/hushfs: %w\n%s", err, out)
	}
	return bin, dir, nil
}

// serveLine is the line `hushfs serve` prints on stdout once it listens.
var serveLine = regexp.MustCompile(`^hushfs serve: nfs (\S+) mount (\S+)`)

// Serve is a running `hushfs serve` process.
type Serve struct {
	Dir        string // the exported directory
	ExportPath string // the path clients MOUNT
	StateDir   string // --state-dir (its handle key lives there)
	NFSAddr    string // "127.0.0.1:PORT"
	MountAddr  string
	Cmd        *exec.Cmd // the current incarnation

	bin   string
	extra []string
	p     *proc
}

// proc is one incarnation of a child process.
type proc struct {
	cmd    *exec.Cmd
	out    *syncBuffer   // stderr, and stdout lines other than the ready line
	exited chan struct{} // closed when cmd.Wait returned
	err    error         // cmd.Wait's result; read only after exited is closed
}

func (p *proc) done() bool {
	select {
	case <-p.exited:
		return true
	default:
		return false
	}
}

// kill stops the process by pid and waits for it.
func (p *proc) kill(t T) {
	if p.done() {
		return
	}
	p.cmd.Process.Kill()
	select {
	case <-p.exited:
	case <-time.After(10 * time.Second):
		t.Errorf("%s pid %d did not exit within 10 s of SIGKILL", p.cmd.Path, p.cmd.Process.Pid)
	}
}

// StartServe starts `hushfs serve DIR` on 127.0.0.1 with kernel-chosen
// ports and a fresh state directory, waits (at most 20 s) for its ready line
// and for NFS and MOUNT to answer NULL, and kills it by pid at cleanup.
// extraArgs are passed before DIR.
//
// No --allow: every client of a test connects from 127.0.0.1, which the
// server serves by default.
//
// The server runs with --no-root-squash: the tests act as root and expect
// root's powers in the export (chown, reading any file). A test of
// squashing passes --root-squash or --all-squash in extraArgs, which come
// later and win.
//
// The server needs root (open_by_handle_at, per-call credentials), so the
// test is skipped otherwise.
func StartServe(t T, dir string, extraArgs ...string) *Serve {
	t.Helper()
	RequireRoot(t)
	// The server exports the directory under its absolute, symlink-free
	// path (and also as "/").
	abs, err := filepath.Abs(dir)
	if err == nil {
		abs, err = filepath.EvalSymlinks(abs)
	}
	if err != nil {
		t.Fatalf("export path of %s: %v", dir, err)
	}
	s := &Serve{Dir: dir, ExportPath: abs, StateDir: t.TempDir(), bin: BuildHushfs(t), extra: extraArgs}
	s.start(t, "0", "0")
	return s
}

func (s *Serve) start(t T, nfsPort, mountPort string) {
	t.Helper()
	args := []string{"serve", "--listen", "127.0.0.1", "--nfs-port", nfsPort,
		"--mount-port", mountPort, "--state-dir", s.StateDir, "--no-root-squash"}
	args = append(args, s.extra...)
	args = append(args, s.Dir)
	p := &proc{cmd: exec.Command(s.bin, args...), out: &syncBuffer{}, exited: make(chan struct{})}
	p.cmd.Stderr = p.out
	stdout, err := p.cmd.StdoutPipe()
	if err != nil {
		t.Fatalf("hushfs serve: %v", err)
	}
	p.cmd.WaitDelay = 2 * time.Second
	// If the test binary dies without cleanups (a -timeout panic), the
	// server dies with it.
	p.cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := p.cmd.Start(); err != nil {
		t.Fatalf("start hushfs serve: %v", err)
	}
	s.p, s.Cmd = p, p.cmd
	t.Cleanup(func() { p.kill(t) })

	// Read stdout until the ready line, then keep draining it so the
	// server never blocks on a full pipe; Wait only after the pipe is
	// drained, as os/exec requires.
	ready := make(chan [2]string, 1)
	go func() {
		sc := bufio.NewScanner(stdout)
		found := false
		for sc.Scan() {
			if m := serveLine.FindStringSubmatch(sc.Text()); !found && m != nil {
				found = true
				ready <- [2]string{m[1], m[2]}
				continue
			}
			fmt.Fprintln(p.out, sc.Text())
		}
		io.Copy(p.out, stdout)
		p.err = p.cmd.Wait()
		close(p.exited)
	}()

	timer := time.NewTimer(20 * time.Second)
	defer timer.Stop()
	select {
	case addrs := <-ready:
		s.NFSAddr, s.MountAddr = addrs[0], addrs[1]
	case <-p.exited:
		t.Fatalf("hushfs serve exited before it was ready: %v\n%s", p.err, p.out.String())
	case <-timer.C:
		t.Fatalf("hushfs serve printed no ready line within 20 s\n%s", p.out.String())
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for _, a := range []struct {
		addr       string
		prog, vers uint32
	}{{s.NFSAddr, 100003, 3}, {s.MountAddr, 100005, 3}} {
		if err := pingAddr(ctx, a.addr, a.prog, a.vers); err != nil {
			t.Fatalf("hushfs serve not answering: %v\n%s", err, p.out.String())
		}
	}
}

func pingAddr(ctx context.Context, addr string, prog, vers uint32) error {
	var d net.Dialer
	c, err := d.DialContext(ctx, "tcp", addr)
	if err != nil {
		return err
	}
	defer c.Close()
	return PingNull(ctx, c, prog, vers)
}

// Restart kills the server with SIGKILL (no chance to save anything) and
// starts it again on the same ports with the same state directory, as a
// crash and restart would.
func (s *Serve) Restart(t T) {
	t.Helper()
	s.Kill(t)
	s.StartAgain(t)
}

// Kill kills the server with SIGKILL and waits for it to exit; StartAgain
// brings it back. Between the two the server is down, as after a crash.
func (s *Serve) Kill(t T) {
	t.Helper()
	s.p.kill(t)
}

// StartAgain starts a killed server again on the same ports with the same
// state directory (so its file handles stay valid) and waits until it
// answers. Its write verifier is a new one.
func (s *Serve) StartAgain(t T) {
	t.Helper()
	if s.Alive() {
		t.Fatalf("hushfs serve pid %d is still running", s.Cmd.Process.Pid)
	}
	_, nfsPort, err := net.SplitHostPort(s.NFSAddr)
	if err != nil {
		t.Fatal(err)
	}
	_, mountPort, err := net.SplitHostPort(s.MountAddr)
	if err != nil {
		t.Fatal(err)
	}
	old := [2]string{s.NFSAddr, s.MountAddr}
	s.start(t, nfsPort, mountPort)
	if [2]string{s.NFSAddr, s.MountAddr} != old {
		t.Fatalf("restarted server listens on %s/%s, want %s/%s", s.NFSAddr, s.MountAddr, old[0], old[1])
	}
}

// Alive reports whether the server process is still running.
func (s *Serve) Alive() bool { return !s.p.done() }

// Output returns what the server wrote to stderr (and to stdout besides the
// ready line) so far.
func (s *Serve) Output() string { return s.p.out.String() }
