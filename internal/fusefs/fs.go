package fusefs

import (
	"context"
	"os"
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
	}
}

// String names the file system (go-fuse's default subtype).
func (fs *FS) String() string { return "hushfs" }

// status converts a core error to a FUSE status.
func status(err error) fuse.Status {
	return fuse.Status(client.Errno(err))
}

// reqCtx is a request's context: done when go-fuse closes the request's
// cancel channel (the kernel sent INTERRUPT, or the connection died), so no
// goroutine watches it. It also names the kernel operation, which the core
// counts RPCs by (client.OriginKey).
type reqCtx struct {
	cancel <-chan struct{}
	op     string
}

func (c *reqCtx) Deadline() (time.Time, bool) { return time.Time{}, false }
func (c *reqCtx) Done() <-chan struct{}       { return c.cancel }

func (c *reqCtx) Value(key any) any {
	if key == (client.OriginKey{}) {
		return c.op
	}
	return nil
}

func (c *reqCtx) Err() error {
	select {
	case <-c.cancel:
		return context.Canceled
	default:
		return nil
	}
}

// ctx turns a cancel channel into a context for the kernel operation op.
func ctx(cancel <-chan struct{}, op string) context.Context { return &reqCtx{cancel, op} }

// node converts a FUSE node ID.
func node(id uint64) client.NodeID { return client.NodeID(id) }
