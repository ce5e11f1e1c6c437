package test

// Helpers of the fault tests: a `hushfs proxy` process between the mount
// and `hushfs serve`, driven through its control socket with the CLI, and
// a helper process that blocks in a system call on the mount and reports
// how it ended.

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"regexp"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"hushfs/internal/proxy"
	"hushfs/test/harness"
)

// faultProxy is a running `hushfs proxy` process.
type faultProxy struct {
	Addr string // 127.0.0.1:PORT
	Port string
	ctl  string
	bin  string
	cmd  *exec.Cmd
	out  *lockedBuffer
	done chan struct{}
}

// lockedBuffer collects a process's output.
type lockedBuffer struct {
	mu sync.Mutex
	b  strings.Builder
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

var proxyReady = regexp.MustCompile(`^hushfs proxy: listening (\S+) `)

// startFaultProxy starts `hushfs proxy` in front of target with the given
// fault flags, waits (at most 20 s) for it to listen, and kills it by pid
// at cleanup.
func startFaultProxy(t *testing.T, bin, target string, flags ...string) *faultProxy {
	t.Helper()
	return startFaultProxyNS(t, bin, nil, target, flags...)
}

// startFaultProxyNS is startFaultProxy with the proxy's sockets in a
// network namespace (ns nil: the host's). Its control socket is a file, so
// the test reaches it from anywhere.
func startFaultProxyNS(t *testing.T, bin string, ns *harness.NetNS, target string, flags ...string) *faultProxy {
	t.Helper()
	p := &faultProxy{ctl: filepath.Join(t.TempDir(), "proxy.ctl"), bin: bin, out: &lockedBuffer{}, done: make(chan struct{})}
	args := append([]string{"proxy", "--listen", "127.0.0.1:0", "--target", target, "--control", p.ctl}, flags...)
	if ns != nil {
		// nsenter with only --net execs the command: the pid is the proxy's.
		p.cmd = ns.Command(context.Background(), bin, args...)
	} else {
		p.cmd = exec.Command(bin, args...)
	}
	p.cmd.Stderr = p.out
	p.cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	p.cmd.WaitDelay = 2 * time.Second
	stdout, err := p.cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := p.cmd.Start(); err != nil {
		t.Fatalf("start hushfs proxy: %v", err)
	}
	ready := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			if m := proxyReady.FindStringSubmatch(sc.Text()); m != nil {
				ready <- m[1]
			}
			fmt.Fprintln(p.out, sc.Text())
		}
		io.Copy(p.out, stdout)
		p.cmd.Wait()
		close(p.done)
	}()
	t.Cleanup(func() {
		p.cmd.Process.Kill()
		select {
		case <-p.done:
		case <-time.After(10 * time.Second):
			t.Errorf("hushfs proxy pid %d still running 10 s after SIGKILL", p.cmd.Process.Pid)
		}
	})
	select {
	case p.Addr = <-ready:
	case <-p.done:
		t.Fatalf("hushfs proxy exited before listening:\n%s", p.out.String())
	case <-time.After(20 * time.Second):
		t.Fatalf("hushfs proxy printed no listening line in 20 s:\n%s", p.out.String())
	}
	_, p.Port, err = net.SplitHostPort(p.Addr)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// ctlJSON runs `hushfs proxy SUBCOMMAND --control CTL args...` and decodes
// its JSON line into v.
func (p *faultProxy) ctlJSON(t *testing.T, v any, sub string, args ...string) {
	t.Helper()
	out, err := harness.RunHushfs(p.bin, 20*time.Second, append([]string{"proxy", sub, "--control", p.ctl}, args...)...)
	if err != nil {
		t.Fatalf("hushfs proxy %s %v: %v\n%s", sub, args, err, out)
	}
	if err := json.Unmarshal([]byte(out), v); err != nil {
		t.Fatalf("hushfs proxy %s: %v\n%s", sub, err, out)
	}
}

// Counts returns the proxy's counts.
func (p *faultProxy) Counts(t *testing.T) proxy.Counts {
	t.Helper()
	var c proxy.Counts
	p.ctlJSON(t, &c, "counts", "--json")
	return c
}

// SetFaults replaces the proxy's faults (no flags: none) and returns them.
func (p *faultProxy) SetFaults(t *testing.T, flags ...string) proxy.Faults {
	t.Helper()
	if len(flags) == 0 {
		flags = []string{"--off"}
	}
	var f proxy.Faults
	p.ctlJSON(t, &f, "faults", flags...)
	return f
}

// Blackhole starts a blackhole of d now and returns when it ends.
func (p *faultProxy) Blackhole(t *testing.T, d time.Duration) time.Time {
	t.Helper()
	var r struct {
		Until time.Time `json:"until"`
	}
	p.ctlJSON(t, &r, "blackhole", d.String())
	if r.Until.IsZero() {
		t.Fatalf("blackhole of %v: no end reported", d)
	}
	return r.Until
}

// mountThrough mounts the export of s with NFS through the proxy and
// MOUNT directly.
func mountThrough(t *testing.T, bin string, s *harness.Serve, p *faultProxy, dir, opts string) *harness.Mount {
	t.Helper()
	_, mountPort, _ := net.SplitHostPort(s.MountAddr)
	o := "port=" + p.Port + ",mountport=" + mountPort
	if opts != "" {
		o += "," + opts
	}
	return harness.StartMount(t, harness.MountSpec{Bin: bin, Server: "127.0.0.1", Export: s.ExportPath, Dir: dir, Options: o})
}

// blockerEnv, when set in the environment of the test binary, makes it act
// as the blocking helper instead of running tests: "OP PATH SIGNALS", OP
// one of stat, read or close (create PATH, write closeData to it, then
// close it once told to on stdin), SIGNALS how it treats SIGINT: "handle"
// (a handler installed) or "ignore" (SIG_IGN).
const blockerEnv = "HUSHFS_TEST_BLOCKER"

func init() {
	spec := os.Getenv(blockerEnv)
	if spec == "" {
		return
	}
	f := strings.Fields(spec)
	if len(f) != 3 {
		fmt.Fprintf(os.Stderr, "bad %s=%q\n", blockerEnv, spec)
		os.Exit(2)
	}
	os.Exit(runBlocker(f[0], f[1], f[2]))
}

// runBlocker performs one system call on its own OS thread, announcing
// the thread's id first ("tid N") and its outcome last ("errno N after
// D"), as raw system calls: no library retries an EINTR away.
func runBlocker(op, path, sigs string) int {
	switch sigs {
	case "handle":
		c := make(chan os.Signal, 8)
		signal.Notify(c, syscall.SIGINT)
		go func() {
			for s := range c {
				fmt.Printf("signal %d\n", s.(syscall.Signal))
			}
		}()
	case "ignore":
		signal.Ignore(syscall.SIGINT)
	default:
		fmt.Fprintf(os.Stderr, "bad signal treatment %q\n", sigs)
		return 2
	}
	runtime.LockOSThread()
	var fd int
	switch op {
	case "read":
		var err error
		if fd, err = unix.Open(path, unix.O_RDONLY, 0); err != nil {
			fmt.Printf("open: errno %d\n", err.(syscall.Errno))
			return 1
		}
	case "close":
		var err error
		if fd, err = unix.Open(path, unix.O_WRONLY|unix.O_CREAT|unix.O_TRUNC, 0o644); err != nil {
			fmt.Printf("open: errno %d\n", err.(syscall.Errno))
			return 1
		}
		if _, err := unix.Write(fd, closeData()); err != nil {
			fmt.Printf("write: errno %d\n", err.(syscall.Errno))
			return 1
		}
	}
	fmt.Printf("tid %d\n", unix.Gettid())
	if op == "close" {
		// Written (held by the mount, not yet sent): close when told.
		bufio.NewReader(os.Stdin).ReadString('\n')
	}
	start := time.Now()
	var err error
	switch op {
	case "close":
		err = unix.Close(fd)
	case "stat":
		var st unix.Stat_t
		err = unix.Stat(path, &st)
	case "read":
		_, err = unix.Read(fd, make([]byte, 4096))
	default:
		fmt.Fprintf(os.Stderr, "bad op %q\n", op)
		return 2
	}
	errno := 0
	if err != nil {
		errno = int(err.(syscall.Errno))
	}
	fmt.Printf("errno %d after %d\n", errno, time.Since(start).Nanoseconds())
	return 0
}

// closeData is what the close helper writes: less than two wsize chunks,
// so all of it stays dirty in the mount until the close.
func closeData() []byte { return pattern(300<<10, 9) }

// blocker is a running blocking helper.
type blocker struct {
	cmd   *exec.Cmd
	tid   int
	stdin io.WriteCloser
	lines chan string
	done  chan struct{}
}

// startBlocker runs the helper (a copy of the test binary) and waits for
// it to announce the thread that is about to make the call.
func startBlocker(t *testing.T, op, path, sigs string) *blocker {
	t.Helper()
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	b := &blocker{lines: make(chan string, 16), done: make(chan struct{})}
	b.cmd = exec.Command(exe, "-test.run=^$")
	b.cmd.Env = append(os.Environ(), blockerEnv+"="+op+" "+path+" "+sigs)
	b.cmd.Stderr = os.Stderr
	b.cmd.Dir = "/"
	b.cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	out, err := b.cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if b.stdin, err = b.cmd.StdinPipe(); err != nil {
		t.Fatal(err)
	}
	if err := b.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() {
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			b.lines <- sc.Text()
		}
		b.cmd.Wait()
		close(b.done)
	}()
	t.Cleanup(func() {
		b.cmd.Process.Kill()
		select {
		case <-b.done:
		case <-time.After(10 * time.Second):
			t.Errorf("blocking helper pid %d still running 10 s after SIGKILL", b.cmd.Process.Pid)
		}
	})
	line := b.next(t, 10*time.Second)
	tid, err := strconv.Atoi(strings.TrimPrefix(line, "tid "))
	if err != nil {
		t.Fatalf("blocking helper said %q, want its tid", line)
	}
	b.tid = tid
	return b
}

// proceed tells a close helper to close its file.
func (b *blocker) proceed(t *testing.T) {
	t.Helper()
	if _, err := io.WriteString(b.stdin, "close\n"); err != nil {
		t.Fatalf("telling the helper to close: %v", err)
	}
}

// next returns the helper's next line, failing the test after wait.
func (b *blocker) next(t *testing.T, wait time.Duration) string {
	t.Helper()
	select {
	case l := <-b.lines:
		return l
	case <-time.After(wait):
		t.Fatalf("blocking helper said nothing for %v", wait)
	}
	return ""
}

// result waits (at most wait) for the helper's outcome, skipping the lines
// its signal handler prints; ok is false if it is still blocked.
func (b *blocker) result(t *testing.T, wait time.Duration) (errno syscall.Errno, took time.Duration, ok bool) {
	t.Helper()
	deadline := time.After(wait)
	for {
		select {
		case l := <-b.lines:
			if strings.HasPrefix(l, "signal ") {
				continue
			}
			var n int
			var ns int64
			if _, err := fmt.Sscanf(l, "errno %d after %d", &n, &ns); err != nil {
				t.Fatalf("blocking helper said %q", l)
			}
			return syscall.Errno(n), time.Duration(ns), true
		case <-deadline:
			return 0, 0, false
		}
	}
}

// signal sends sig to the helper's calling thread.
func (b *blocker) signal(t *testing.T, sig syscall.Signal) {
	t.Helper()
	if err := unix.Tgkill(b.cmd.Process.Pid, b.tid, sig); err != nil {
		t.Fatalf("tgkill %d %d %v: %v", b.cmd.Process.Pid, b.tid, sig, err)
	}
}

// threadState returns the state letter of the helper's thread (S, D, ...).
func (b *blocker) threadState() string {
	st, err := os.ReadFile(fmt.Sprintf("/proc/%d/task/%d/stat", b.cmd.Process.Pid, b.tid))
	if err != nil {
		return "gone"
	}
	s := string(st)
	if i := strings.LastIndexByte(s, ')'); i >= 0 && i+2 < len(s) {
		return s[i+2 : i+3]
	}
	return "?"
}
