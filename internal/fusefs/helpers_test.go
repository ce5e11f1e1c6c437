package fusefs

import (
	"context"
	"io"
	"net"
	"os"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hanwen/go-fuse/v2/fuse"

	"hushfs/internal/client"
	"hushfs/internal/rpc"
	"hushfs/internal/server"
)

// fakeClock is the credential cache's clock in tests.
type fakeClock struct {
	mu sync.Mutex
	t  time.Time
}

func newFakeClock() *fakeClock { return &fakeClock{t: time.Unix(1_000_000, 0)} }

func (c *fakeClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

func (c *fakeClock) Advance(d time.Duration) {
	c.mu.Lock()
	c.t = c.t.Add(d)
	c.mu.Unlock()
}

// env is an adapter on a core mounted on an in-process server that exports
// a fresh temporary directory over real 127.0.0.1 sockets.
type env struct {
	t     *testing.T
	dir   string // the exported directory
	core  *client.FS
	fs    *FS
	clock *fakeClock
	stall *stallProxy // non-nil when NFS goes through a stallable forwarder
	opts  client.Options
	// Set by mountKernel: the mount and its statistics directory.
	mounted *Mounted
	runDir  string
}

type envOpts struct {
	options string // mount options besides the ports
	stall   bool   // send NFS through a forwarder that can hold replies
	clock   bool   // the core's caches expire by e.clock too (the kernel's do not)
}

func requireRoot(t *testing.T) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("needs root: the server switches credentials per call")
	}
}

func newEnv(t *testing.T, o envOpts) *env {
	t.Helper()
	requireRoot(t)
	dir := t.TempDir()
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	// The tests act as root in a root-owned export: no squashing.
	srv, err := server.New(server.Config{Root: dir, StateDir: t.TempDir(), Squash: server.NoRootSquash})
	if err != nil {
		t.Fatalf("server: %v", err)
	}
	rs := rpc.NewServer(rpc.ServerOptions{})
	srv.Register(rs)
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	served := make(chan struct{})
	go func() {
		rs.Serve(l)
		close(served)
	}()
	port := l.Addr().(*net.TCPAddr).Port
	nfsPort := port
	e := &env{t: t, dir: srv.Root(), clock: newFakeClock()}
	if o.stall {
		e.stall = newStallProxy(t, l.Addr().String())
		nfsPort = e.stall.port()
	}
	opts, err := client.ParseOptions("port=" + strconv.Itoa(nfsPort) + ",mountport=" + strconv.Itoa(port) + "," + o.options)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	cfg := client.Config{Server: "127.0.0.1", Export: e.dir, Options: opts, Logf: t.Logf}
	if o.clock {
		cfg.Now = e.clock.Now
	}
	core, err := client.Mount(ctx, cfg)
	if err != nil {
		t.Fatalf("mount: %v", err)
	}
	e.core, e.opts = core, opts
	e.fs = New(core, Options{Now: e.clock.Now, Logf: t.Logf})
	t.Cleanup(func() {
		if e.stall != nil {
			e.stall.close()
		}
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		core.Close(ctx)
		rs.Close()
		<-served
		srv.Close()
	})
	return e
}

// hdr is a request header for node id from this process as root.
func (e *env) hdr(id uint64) fuse.InHeader {
	return fuse.InHeader{NodeId: id, Caller: fuse.Caller{Owner: fuse.Owner{Uid: 0, Gid: 0}, Pid: uint32(os.Getpid())}}
}

// count is the number of calls of one NFS procedure so far.
func (e *env) count(proc string) uint64 { return e.core.Stats().Snapshot().Count(proc) }

// lookup looks name up in parent and fails the test unless it exists.
func (e *env) lookup(parent uint64, name string) fuse.EntryOut {
	e.t.Helper()
	h := e.hdr(parent)
	var out fuse.EntryOut
	if st := e.fs.Lookup(nil, &h, name, &out); st != fuse.OK || out.NodeId == 0 {
		e.t.Fatalf("Lookup(%d, %q) = %v, node %d", parent, name, st, out.NodeId)
	}
	return out
}

// stallProxy forwards TCP to a target; while stalled it holds everything
// the target sends, so calls wait for replies that do not come.
type stallProxy struct {
	l       net.Listener
	target  string
	stalled atomic.Bool
	done    chan struct{}
	wg      sync.WaitGroup
	mu      sync.Mutex
	conns   []net.Conn
}

func newStallProxy(t *testing.T, target string) *stallProxy {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &stallProxy{l: l, target: target, done: make(chan struct{})}
	p.wg.Add(1)
	go p.accept()
	return p
}

func (p *stallProxy) port() int { return p.l.Addr().(*net.TCPAddr).Port }

func (p *stallProxy) accept() {
	defer p.wg.Done()
	for {
		c, err := p.l.Accept()
		if err != nil {
			return
		}
		s, err := net.Dial("tcp", p.target)
		if err != nil {
			c.Close()
			continue
		}
		p.mu.Lock()
		p.conns = append(p.conns, c, s)
		p.mu.Unlock()
		p.wg.Add(2)
		go func() { defer p.wg.Done(); io.Copy(s, c) }()
		go func() { defer p.wg.Done(); p.copyStalling(c, s) }()
	}
}

func (p *stallProxy) copyStalling(dst, src net.Conn) {
	buf := make([]byte, 64<<10)
	for {
		n, err := src.Read(buf)
		for p.stalled.Load() {
			select {
			case <-p.done:
				return
			case <-time.After(5 * time.Millisecond):
			}
		}
		if n > 0 {
			if _, werr := dst.Write(buf[:n]); werr != nil {
				return
			}
		}
		if err != nil {
			return
		}
	}
}

func (p *stallProxy) close() {
	select {
	case <-p.done:
		return
	default:
	}
	close(p.done)
	p.l.Close()
	p.mu.Lock()
	for _, c := range p.conns {
		c.Close()
	}
	p.mu.Unlock()
	p.wg.Wait()
}
