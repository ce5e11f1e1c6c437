package fusefs

import (
	"context"
	"errors"
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
	// Version names the daemon's build in the statistics.
	Version string
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
	version string
	// requests counts the requests served, by operation (statistics).
	requests requestCounts
	// signalled reports whether a calling thread has a signal pending
	// that interrupts its request (see reqCtx); killed whether it is
	// being killed (see killable).
	signalled func(tid uint32) bool
	killed    func(tid uint32) bool

	notifier *notifier // set by Init

	// openHandles counts files and directories open (OPEN, CREATE,
	// OPENDIR answered, not yet released): uses of a detached mount
	// that no process table shows (a mapping outliving its descriptor;
	// see Mounted.Orphaned).
	openHandles atomic.Int64
	// inflight counts the requests being served (those with a reqCtx):
	// a process blocked in a lookup of a detached mount uses it with no
	// descriptor to show for it.
	inflight atomic.Int64
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
		version:       opts.Version,
		requests:      newRequestCounts(),
		signalled:     func(tid uint32) bool { return callerSignalled(opts.ProcDir, tid) },
		killed:        func(tid uint32) bool { return callerKilled(opts.ProcDir, tid) },
	}
}

// String names the file system (go-fuse's default subtype).
func (fs *FS) String() string { return "hushfs" }

// status converts a core error to a FUSE status.
func status(err error) fuse.Status {
	return fuse.Status(client.Errno(err))
}

// reqCtx is a request's context. It names the kernel operation, which the
// core counts RPCs by (client.OriginKey), and it is cancelled, the request
// then failing with EINTR, when the calling thread is interrupted by a
// signal.
//
// The kernel sends INTERRUPT (go-fuse closes the cancel channel) when the
// thread waiting for the request has a signal pending, and the signal
// stays pending until the request ends: the thread cannot take it while
// it waits. So whether to honour an INTERRUPT is read from /proc: honoured
// if the caller has any signal pending (for the thread, or shared by its
// process) that it neither blocks nor ignores, except the notifications
// whose default action is to ignore them or to continue: SIGURG, SIGCHLD,
// SIGWINCH and SIGCONT. A program catches those to be told something (Go's
// runtime catches them all; SIGURG is its preemption signal, sent to its
// threads constantly), not to abandon what it is doing, and they come at
// any time: a process reaping a child got EINTR from a CREATE or REMOVE
// the server had done, and the retry failed with EEXIST or ENOENT (the
// kernel does not restart a call that FUSE answers EINTR, SA_RESTART or
// not). A signal whose default action kills shows up as SIGKILL pending,
// so a killed process is let go too even though a request already handed
// to us is one the kernel waits out even for SIGKILL. An INTERRUPT not
// honoured at once (a notification alone) is checked again every 200 ms
// while the request waits, since the kernel sends only one per request.
// The check needs a goroutine only while the request waits in an RPC (Done
// was called), and it ends with the request.
type reqCtx struct {
	op        string
	cancel    <-chan struct{} // go-fuse's: closed on INTERRUPT
	tid       uint32          // the calling thread
	signalled func(tid uint32) bool

	once     sync.Once
	done     chan struct{} // closed when cancelled
	finished chan struct{} // closed when the request ends
	err      atomic.Value  // error, once done

	inflight *atomic.Int64 // the adapter's count of requests being served
	ended    atomic.Bool   // finish ran
}

// request returns the context of a request for operation op.
func (fs *FS) request(cancel <-chan struct{}, h *fuse.InHeader, op string) *reqCtx {
	fs.requests.add(op)
	fs.inflight.Add(1)
	return &reqCtx{op: op, cancel: cancel, tid: h.Caller.Pid, signalled: fs.signalled, inflight: &fs.inflight}
}

// killable returns the context of a request that waits for write-back
// (close, fsync, a synchronous write): it lets its caller go only when the
// caller is being killed, as the Linux NFS client's killable waits do. A
// caught signal must not fail a close whose data is still being written
// (the descriptor is gone either way, and the error with it); a killed
// process must not be held in D state by a server that does not answer
// (the kernel waits out a FLUSH even for SIGKILL once it is ours, but it
// does send INTERRUPT). The write-back itself goes on (client.FS.await).
func (fs *FS) killable(cancel <-chan struct{}, h *fuse.InHeader, op string) *reqCtx {
	fs.requests.add(op)
	fs.inflight.Add(1)
	return &reqCtx{op: op, cancel: cancel, tid: h.Caller.Pid, signalled: fs.killed, inflight: &fs.inflight}
}

// lifetime returns the context of a request the kernel never interrupts
// (RELEASE, sent in the background): go-fuse cancels it only when the
// connection ends, and then it ends.
func (fs *FS) lifetime(cancel <-chan struct{}, op string) *reqCtx {
	fs.requests.add(op)
	fs.inflight.Add(1)
	return &reqCtx{op: op, cancel: cancel, signalled: func(uint32) bool { return true }, inflight: &fs.inflight}
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

// watch cancels the request once it is interrupted and its caller has (or
// later gets, while the request waits) a signal pending that counts.
func (c *reqCtx) watch() {
	select {
	case <-c.finished:
		return
	case <-c.cancel:
	}
	for tick := time.NewTicker(200 * time.Millisecond); ; {
		if c.signalled(c.tid) {
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
	if c.inflight != nil && !c.ended.Swap(true) {
		c.inflight.Add(-1)
	}
}

// callerSignalled reports whether thread tid has a signal pending that
// interrupts it: pending for the thread or its process, not blocked by the
// thread, not ignored, and not a notification (notifyBits). A thread that
// is gone counts (it was killed).
func callerSignalled(procDir string, tid uint32) bool {
	m, err := readSigMasks(procDir, tid)
	if err != nil {
		return os.IsNotExist(err) || errors.Is(err, syscall.ESRCH) // gone already
	}
	return m.interrupts()
}

// callerKilled reports whether thread tid is being killed (SIGKILL
// pending, as for any fatal signal) or is gone.
func callerKilled(procDir string, tid uint32) bool {
	m, err := readSigMasks(procDir, tid)
	if err != nil {
		return os.IsNotExist(err) || errors.Is(err, syscall.ESRCH)
	}
	return m.pending&sigKillBit != 0
}

// sigMasks are a thread's signal masks from /proc/TID/status: bit n-1
// stands for signal n.
type sigMasks struct {
	pending uint64 // SigPnd | ShdPnd: for the thread, and for its process
	blocked uint64 // SigBlk, the thread's
	ignored uint64 // SigIgn, the process's
}

const (
	sigKillBit = 1 << (uint(syscall.SIGKILL) - 1)
	// notifyBits are the signals that never interrupt (see reqCtx).
	notifyBits = 1<<(uint(syscall.SIGURG)-1) | 1<<(uint(syscall.SIGCHLD)-1) |
		1<<(uint(syscall.SIGWINCH)-1) | 1<<(uint(syscall.SIGCONT)-1)
)

// interrupts applies the rule of reqCtx to the masks.
func (m sigMasks) interrupts() bool {
	// SIGKILL can be neither blocked nor ignored, whatever the masks say.
	return m.pending&sigKillBit != 0 || m.pending&^(m.blocked|m.ignored|notifyBits) != 0
}

func readSigMasks(procDir string, tid uint32) (sigMasks, error) {
	var m sigMasks
	b, err := os.ReadFile(fmt.Sprintf("%s/%d/status", procDir, tid))
	if err != nil {
		return m, err
	}
	for _, line := range strings.Split(string(b), "\n") {
		field, val, ok := strings.Cut(line, ":")
		if !ok {
			continue
		}
		var dst *uint64
		switch field {
		case "SigPnd", "ShdPnd":
			dst = &m.pending
		case "SigBlk":
			dst = &m.blocked
		case "SigIgn":
			dst = &m.ignored
		default:
			continue
		}
		mask, err := strconv.ParseUint(strings.TrimSpace(val), 16, 64)
		if err != nil {
			return m, fmt.Errorf("%s/%d/status: %s: %w", procDir, tid, field, err)
		}
		*dst |= mask
	}
	return m, nil
}

// node converts a FUSE node ID.
func node(id uint64) client.NodeID { return client.NodeID(id) }
