// Package harness starts the real peers that hushfs's end-to-end tests talk
// to: an nfs-ganesha NFSv3 server inside a private network namespace, and
// hushfs's own binary (`hushfs serve`) as a separate process.
//
// Everything a helper starts is stopped by pid and every namespace and
// temporary directory is removed through t.Cleanup, so a test that fails
// half-way still leaves the host as it found it. Every wait is bounded.
package harness

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"time"

	"golang.org/x/sys/unix"
)

// netnsDir is where `ip netns` keeps the bind mounts that name namespaces.
const netnsDir = "/var/run/netns"

// NetNS is a private network namespace holding only a loopback interface, so
// that servers started in it (ganesha and its rpcbind) cannot collide with
// anything on the host or in another test, and no traffic leaves 127.0.0.1.
type NetNS struct {
	Name string // the `ip netns` name
	Path string // the namespace's bind mount, for setns and nsenter
}

// RequireRoot skips the test unless it runs as root: namespaces, rpcbind and
// ganesha all need it.
func RequireRoot(t T) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("needs root (network namespaces, rpcbind, nfs-ganesha)")
	}
}

// NewNetNS creates a network namespace named hushfs-<pid>-<random>, brings up
// its loopback interface (and nothing else) and deletes it at cleanup.
func NewNetNS(t T) *NetNS {
	t.Helper()
	RequireRoot(t)
	sweepStaleNetNS(t)
	var suffix [4]byte
	if _, err := rand.Read(suffix[:]); err != nil {
		t.Fatalf("netns name: %v", err)
	}
	name := fmt.Sprintf("hushfs-%d-%s", os.Getpid(), hex.EncodeToString(suffix[:]))
	if out, err := runBounded(10*time.Second, "ip", "netns", "add", name); err != nil {
		t.Fatalf("ip netns add %s: %v\n%s", name, err, out)
	}
	n := &NetNS{Name: name, Path: filepath.Join(netnsDir, name)}
	t.Cleanup(func() {
		if out, err := runBounded(10*time.Second, "ip", "netns", "delete", name); err != nil {
			t.Errorf("ip netns delete %s: %v\n%s", name, err, out)
		}
	})
	if out, err := runBounded(10*time.Second, "ip", "-n", name, "link", "set", "lo", "up"); err != nil {
		t.Fatalf("bring up lo in %s: %v\n%s", name, err, out)
	}
	return n
}

// sweepStaleNetNS deletes namespaces left by test binaries that died
// without running their cleanups (a -timeout panic skips them): the name
// carries the creator's pid, and a namespace whose creator no longer exists
// is garbage. Processes inside are already gone (see StartGanesha).
func sweepStaleNetNS(t T) {
	ents, err := os.ReadDir(netnsDir)
	if err != nil {
		return // no namespaces yet
	}
	for _, e := range ents {
		var pid int
		var rest string
		if n, _ := fmt.Sscanf(e.Name(), "hushfs-%d-%s", &pid, &rest); n != 2 || pid == os.Getpid() {
			continue
		}
		if _, err := os.Stat(fmt.Sprintf("/proc/%d", pid)); err == nil {
			continue // creator still running (or its pid reused): leave it
		}
		if out, err := runBounded(10*time.Second, "ip", "netns", "delete", e.Name()); err != nil {
			t.Logf("removing stale namespace %s: %v\n%s", e.Name(), err, out)
		} else {
			t.Logf("removed stale namespace %s left by dead pid %d", e.Name(), pid)
		}
	}
}

// runBounded runs a short administrative command with a deadline and returns
// its combined output.
func runBounded(d time.Duration, name string, args ...string) ([]byte, error) {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	defer cancel()
	return exec.CommandContext(ctx, name, args...).CombinedOutput()
}

// Command returns a command that runs name inside the namespace's network
// stack only (nsenter --net): it keeps the caller's mount namespace, so a
// FUSE mount made by the command is visible to the test, and its files.
func (n *NetNS) Command(ctx context.Context, name string, args ...string) *exec.Cmd {
	all := append([]string{"--net=" + n.Path, "--", name}, args...)
	return exec.CommandContext(ctx, "nsenter", all...)
}

// Dial opens a TCP connection to addr ("127.0.0.1:PORT") inside the
// namespace, from the test process which itself stays in the host namespace.
//
// A socket belongs to the network namespace of the thread that created it,
// so only socket(2) has to run on a thread switched into the namespace; the
// connect and all later I/O work from any thread. Go's net.Dialer cannot be
// used for this because it may create the socket on another thread.
func (n *NetNS) Dial(ctx context.Context, addr string) (net.Conn, error) {
	ap, err := netip.ParseAddrPort(addr)
	if err != nil {
		return nil, fmt.Errorf("netns %s: dial %q: %w", n.Name, addr, err)
	}
	if !ap.Addr().Is4() || !ap.Addr().IsLoopback() {
		return nil, fmt.Errorf("netns %s: dial %s: only 127.0.0.0/8 is reachable", n.Name, addr)
	}
	fd, err := n.socket()
	if err != nil {
		return nil, err
	}
	if err := connectFD(ctx, fd, ap); err != nil {
		unix.Close(fd)
		return nil, fmt.Errorf("netns %s: connect %s: %w", n.Name, addr, err)
	}
	f := os.NewFile(uintptr(fd), "netns-tcp:"+addr)
	defer f.Close() // FileConn dups the descriptor
	c, err := net.FileConn(f)
	if err != nil {
		return nil, fmt.Errorf("netns %s: wrap socket for %s: %w", n.Name, addr, err)
	}
	return c, nil
}

// socket creates a non-blocking TCP socket in the namespace.
func (n *NetNS) socket() (int, error) {
	type result struct {
		fd  int
		err error
	}
	ch := make(chan result, 1)
	// A fresh goroutine owns the locked thread: if switching back fails, the
	// goroutine exits still locked and the runtime discards the thread
	// rather than let another goroutine run in the wrong namespace.
	go func() {
		runtime.LockOSThread()
		fd, restored, err := n.socketOnThisThread()
		if restored {
			runtime.UnlockOSThread()
		}
		ch <- result{fd, err}
	}()
	r := <-ch
	return r.fd, r.err
}

func (n *NetNS) socketOnThisThread() (fd int, restored bool, err error) {
	orig, err := unix.Open("/proc/thread-self/ns/net", unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		return -1, true, fmt.Errorf("open own netns: %w", err)
	}
	defer unix.Close(orig)
	target, err := unix.Open(n.Path, unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		return -1, true, fmt.Errorf("open netns %s: %w", n.Path, err)
	}
	defer unix.Close(target)
	if err := unix.Setns(target, unix.CLONE_NEWNET); err != nil {
		return -1, true, fmt.Errorf("setns %s: %w", n.Path, err)
	}
	fd, serr := unix.Socket(unix.AF_INET, unix.SOCK_STREAM|unix.SOCK_NONBLOCK|unix.SOCK_CLOEXEC, 0)
	if err := unix.Setns(orig, unix.CLONE_NEWNET); err != nil {
		if serr == nil {
			unix.Close(fd)
		}
		return -1, false, fmt.Errorf("setns back to own netns: %w", err)
	}
	if serr != nil {
		return -1, true, fmt.Errorf("socket in netns %s: %w", n.Name, serr)
	}
	return fd, true, nil
}

// connectFD connects a non-blocking socket, waiting at most until ctx ends.
func connectFD(ctx context.Context, fd int, ap netip.AddrPort) error {
	sa := &unix.SockaddrInet4{Port: int(ap.Port()), Addr: ap.Addr().As4()}
	err := unix.Connect(fd, sa)
	if err == nil {
		return nil
	}
	if !errors.Is(err, unix.EINPROGRESS) {
		return err
	}
	for {
		wait := 100 * time.Millisecond
		if dl, ok := ctx.Deadline(); ok {
			if left := time.Until(dl); left < wait {
				wait = left
			}
		}
		if err := ctx.Err(); err != nil {
			return err
		}
		if wait <= 0 {
			return context.DeadlineExceeded
		}
		fds := []unix.PollFd{{Fd: int32(fd), Events: unix.POLLOUT}}
		k, err := unix.Poll(fds, int(wait/time.Millisecond)+1)
		if errors.Is(err, unix.EINTR) {
			continue
		}
		if err != nil {
			return fmt.Errorf("poll: %w", err)
		}
		if k == 0 {
			continue
		}
		soerr, err := unix.GetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_ERROR)
		if err != nil {
			return fmt.Errorf("getsockopt SO_ERROR: %w", err)
		}
		if soerr != 0 {
			return unix.Errno(soerr)
		}
		return nil
	}
}

// String names the namespace in messages.
func (n *NetNS) String() string { return "netns " + n.Name }

// tail returns the last max lines of s.
func tail(s string, max int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(lines) > max {
		lines = lines[len(lines)-max:]
	}
	return strings.Join(lines, "\n")
}

// syncBuffer collects a child's output; it is written by exec's copying
// goroutine and read by the test, hence the lock.
type syncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}
