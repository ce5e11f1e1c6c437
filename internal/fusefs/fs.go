package fusefs

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/hanwen/go-fuse/v2/fuse"

	"hushfs/internal/client"
)

// Options configure the adapter.
type Options struct {
	// Now is the clock the credential cache expires by; nil means time.Now.
	Now func() time.Time
	// ProcDir is where the callers' /proc/PID/status files are read;
	// empty means "/proc".
	ProcDir string
	// Logf receives diagnostics; nil discards them.
	Logf func(format string, args ...any)
}

// FS implements fuse.RawFileSystem on top of a client core. Operations it
// does not implement fall through to go-fuse's default (ENOSYS).
type FS struct {
	fuse.RawFileSystem

	core    *client.FS
	creds   *credCache
	logf    func(string, ...any)
	blksize uint32 // st_blksize reported for every file
	owner   uint32 // the mounting user: may reset the statistics, with root
	dying   func(tid uint32) bool

	notifier *notifier // set by Init
}

// New returns the adapter for core.
func New(core *client.FS, opts Options) *FS {
	if opts.Now == nil {
		opts.Now = time.Now
	}
	if opts.ProcDir == "" {
		opts.ProcDir = "/proc"
	}
	if opts.Logf == nil {
		opts.Logf = func(string, ...any) {}
	}
	// st_blksize is the I/O size programs pick their buffers by (stdio,
	// cp): the write size makes each write(2) one full FUSE WRITE.
	_, wsize, _ := core.TransferSizes()
	blksize := min(wsize, MaxWrite)
	if blksize == 0 {
		blksize = 4096
	}
	return &FS{
		RawFileSystem: fuse.NewDefaultRawFileSystem(),
		core:          core,
		creds:         newCredCache(opts.Now, opts.ProcDir),
		logf:          opts.Logf,
		blksize:       blksize,
		owner:         uint32(os.Geteuid()),
		dying:         func(tid uint32) bool { return threadDying(opts.ProcDir, tid) },
	}
}

// String names the file system (go-fuse's default subtype).
func (fs *FS) String() string { return "hushfs" }

// status converts a core error to a FUSE status.
func status(err error) fuse.Status {
	return fuse.Status(client.Errno(err))
}

// reqCtx is a request's context. It names the kernel operation, which the
// core counts RPCs by (client.OriginKey), and it is cancelled the way an
// NFS mount's calls are: only by a fatal signal.
//
// The kernel interrupts a request (go-fuse closes its cancel channel) for
// any signal the caller gets, including ones it handles and carries on
// after and the Go runtime's preemption signals; answering those with EINTR
// would break stat, close or a page fault (SIGBUS) in programs that never
// expect it. But a request already handed to us is one the kernel waits
// out even for SIGKILL, so a killed process would hang on a dead server
// unless we let it go. So an interrupt is honoured only when the calling
// thread is dying: SIGKILL pending, which is also what a signal whose
// default action kills (Ctrl-C on cat) becomes. The check needs a goroutine
// only while the request waits in an RPC (Done was called), and it ends
// with the request.
type reqCtx struct {
	op     string
	cancel <-chan struct{} // go-fuse's: closed on INTERRUPT
	tid    uint32          // the calling thread
	dying  func(tid uint32) bool

	once     sync.Once
	done     chan struct{} // closed when cancelled
	finished chan struct{} // closed when the request ends
	err      atomic.Value  // error, once done
}

// request returns the context of a request for operation op.
func (fs *FS) request(cancel <-chan struct{}, h *fuse.InHeader, op string) *reqCtx {
	return &reqCtx{op: op, cancel: cancel, tid: h.Caller.Pid, dying: fs.dying}
}

func (c *reqCtx) Deadline() (time.Time, bool) { return time.Time{}, false }

func (c *reqCtx) Value(key any) any {
	if key == (client.OriginKey{}) {
		return c.op
	}
	return nil
}

func (c *reqCtx) Err() error {
	if err, ok := c.err.Load().(error); ok {
		return err
	}
	return nil
}

func (c *reqCtx) Done() <-chan struct{} {
	c.once.Do(func() {
		c.done, c.finished = make(chan struct{}), make(chan struct{})
		if c.cancel != nil {
			go c.watch()
		}
	})
	return c.done
}

// watch cancels the request if it is interrupted and its caller is dying,
// or dies while it still waits.
func (c *reqCtx) watch() {
	select {
	case <-c.finished:
		return
	case <-c.cancel:
	}
	for tick := time.NewTicker(200 * time.Millisecond); ; {
		if c.dying(c.tid) {
			c.err.Store(context.Canceled)
			close(c.done)
			tick.Stop()
			return
		}
		select {
		case <-c.finished:
			tick.Stop()
			return
		case <-tick.C:
		}
	}
}

// finish ends the request's watcher, if it has one.
func (c *reqCtx) finish() {
	c.once.Do(func() {}) // no watcher can start after this
	if c.finished != nil {
		close(c.finished)
	}
}

// threadDying reports whether a thread has SIGKILL pending (it is being
// killed), from /proc.
func threadDying(procDir string, tid uint32) bool {
	b, err := os.ReadFile(fmt.Sprintf("%s/%d/status", procDir, tid))
	if err != nil {
		return os.IsNotExist(err) // gone already
	}
	for _, line := range strings.Split(string(b), "\n") {
		field, val, ok := strings.Cut(line, ":")
		if !ok || (field != "SigPnd" && field != "ShdPnd") {
			continue
		}
		mask, err := strconv.ParseUint(strings.TrimSpace(val), 16, 64)
		if err == nil && mask&(1<<(uint(syscall.SIGKILL)-1)) != 0 {
			return true
		}
	}
	return false
}

// node converts a FUSE node ID.
func node(id uint64) client.NodeID { return client.NodeID(id) }
