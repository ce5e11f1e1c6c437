package client

import (
	"context"
	"errors"
	"hash/maphash"
	"net"
	"os"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"hushfs/internal/proto"
)

// Cred is the identity a request is made with: the calling process's.
type Cred = proto.Cred

// Config says what to mount and how.
type Config struct {
	Server  string // host name or address
	Export  string // exported path, as MOUNT knows it
	Options Options
	// Dial connects to addr (host:port); nil dials TCP. Tests use it to reach
	// servers in another network namespace.
	Dial func(ctx context.Context, addr string) (net.Conn, error)
	// Now is the clock; nil means time.Now. Cache expiry is measured with it.
	Now     func() time.Time
	Logf    func(format string, args ...any)
	Machine string // AUTH_SYS machine name; empty means the host name
}

// FS is a mounted export.
type FS struct {
	cfg  Config
	opts Options
	now  func() time.Time
	logf func(string, ...any)
	srv  proto.Server // the server, through the protocol's seam
	// What the server offers beyond proto.Server (v4.1): opens with the
	// I/O under them, and locks; nil for NFSv3 (openstate.go, lock.go).
	opener proto.Opener
	sio    proto.StateIO
	locker proto.Locker
	// delegator takes read delegations (deleg.go); nil for NFSv3.
	delegator proto.Delegator
	dl        delegTable
	limits    proto.Limits // what the protocol can carry
	stats     *Stats
	nodes     *inodeTable
	rootFH    proto.FH
	offSeed   maphash.Seed // keys directory offsets (dirOffset)

	// Transfer sizes negotiated with the server (FSINFO).
	rsize, wsize, dtpref uint32
	maxFileSize          uint64
	nameMax              uint32 // longest name (PATHCONF)

	openMu   sync.Mutex
	files    map[uint64]*openFile // GUARDED_BY(openMu)
	dirs     map[uint64]*openDir  // GUARDED_BY(openMu)
	nextOpen uint64               // GUARDED_BY(openMu)

	sillyMu  sync.Mutex
	sillySeq uint64 // GUARDED_BY(sillyMu)

	wb *writeback

	// life ends at unmount (Close): write-back detached from the callers
	// that started it runs under it (see await).
	life    context.Context
	endLife context.CancelFunc

	inflight flights  // shared GETATTR, LOOKUP and ACCESS calls
	notify   Notifier // tells the kernel what it must forget

	walk    walker      // tree walks seen, and their read-ahead (walk.go)
	noPlus  atomic.Bool // the server has no READDIRPLUS: no bulk revalidation
	bgMu    sync.Mutex
	closing bool           // GUARDED_BY(bgMu): unmounting, no new detached pass
	bg      sync.WaitGroup // directory passes running detached (bulk.go)
	passes  atomic.Int64   // how many: for diagnostics and tests

	// Directories whose times are held (dirtimes.go), and for how long.
	dirTimesMu sync.Mutex
	heldDirs   map[*inode]struct{} // GUARDED_BY(dirTimesMu)
	dirHold    time.Duration
}

// maxTransfer caps rsize and wsize: larger requests buy nothing on TCP and
// cost memory per call in flight.
const maxTransfer = 1 << 20

// minTransfer floors the transfer sizes a server gives, and sizes are
// whole multiples of it: a page, as Linux does (it takes 4 KiB for an rtmax
// below 1 KiB and rounds larger ones down to pages), and the least rsize
// and wsize our options accept. A server that means less answers with
// shorter READs and WRITEs, which are read and written on; honoured, an
// 8-byte rtmax made 262,144 READs of a 2 MiB file.
const minTransfer = 4096

// floorTransfer returns the server's transfer size v (named what) as
// used: at least minTransfer, in whole pages.
func (fs *FS) floorTransfer(what string, v uint32) uint32 {
	if v < minTransfer {
		fs.logf("hushfs: server %s: FSINFO %s is %d bytes; using %d (shorter replies are read and written on)", fs.cfg.Server, what, v, minTransfer)
		return minTransfer
	}
	return v &^ (minTransfer - 1)
}

// Mount mounts the export with the protocol the options name (mount.go)
// and returns the mounted file system. Nothing is left running if it
// fails.
func Mount(ctx context.Context, cfg Config) (*FS, error) {
	opts := cfg.Options
	if opts.Vers == 0 {
		opts = DefaultOptions()
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if cfg.Logf == nil {
		cfg.Logf = func(string, ...any) {}
	}
	if cfg.Machine == "" {
		cfg.Machine, _ = os.Hostname()
	}
	fs := &FS{
		cfg: cfg, opts: opts, now: cfg.Now, logf: cfg.Logf, stats: newStats(),
		offSeed: maphash.MakeSeed(),
		files:   map[uint64]*openFile{}, dirs: map[uint64]*openDir{}, nextOpen: 1,
		notify: nopNotifier{}, heldDirs: map[*inode]struct{}{}, dirHold: dirTimesHold,
	}
	self := Cred{UID: uint32(os.Getuid()), GID: uint32(os.Getgid())}
	hooks := proto.Hooks{
		Calling:  func(ctx context.Context, name string) { fs.stats.countOrigin(originOf(ctx), name) },
		Finished: fs.stats.observe,
	}
	srv, exp, err := mountServer(ctx, &cfg, &opts, hooks, &self)
	if err != nil {
		return nil, err
	}
	fs.srv, fs.limits, fs.rootFH = srv, exp.Limits, exp.Root
	fs.opener, _ = srv.(proto.Opener)
	fs.sio, _ = srv.(proto.StateIO)
	fs.locker, _ = srv.(proto.Locker)
	if fs.opener == nil || fs.sio == nil {
		fs.opener, fs.sio, fs.locker = nil, nil, nil // opens without their I/O would be no use
	}
	fs.nodes = newInodeTable(exp.Root)
	root := fs.nodes.get(RootID)
	for i := range exp.RootAttrs {
		fs.applyAttr(root, &proto.PostAttr{Present: true, Attr: exp.RootAttrs[i].Attr}, exp.RootAttrs[i].At)
	}
	fs.transferSizes(&exp)
	fs.life, fs.endLife = context.WithCancel(context.Background())
	fs.wb = newWriteback(fs)
	fs.initDelegs(srv) // after life: the idle sweeper runs under it
	fs.initReclaim(srv)
	return fs, nil
}

// transferSizes picks the transfer sizes within what the server gave and
// the options ask, and the longest name: the server's, at most NFSv3's
// usual 255 (what a server that cannot say gets too).
func (fs *FS) transferSizes(exp *proto.Export) {
	pick := func(what string, opt, max uint32) uint32 {
		v := max
		if v == 0 || v > maxTransfer {
			v = maxTransfer
		}
		v = fs.floorTransfer(what, v)
		if opt != 0 && opt < v {
			v = opt
		}
		return v
	}
	fs.rsize = pick("rtmax", fs.opts.Rsize, exp.Rtmax)
	fs.wsize = pick("wtmax", fs.opts.Wsize, exp.Wtmax)
	fs.dtpref = exp.Dtpref
	if fs.dtpref == 0 || fs.dtpref > fs.rsize {
		fs.dtpref = fs.rsize
	}
	fs.dtpref = fs.floorTransfer("dtpref", fs.dtpref)
	fs.maxFileSize = exp.MaxFileSize
	fs.nameMax = defaultNameMax
	if exp.NameMax > 0 && exp.NameMax < fs.nameMax {
		fs.nameMax = exp.NameMax
	}
}

// RootFH returns the export's root handle.
func (fs *FS) RootFH() proto.FH { return fs.rootFH }

// Stats returns the per-procedure RPC statistics since mount.
func (fs *FS) Stats() *Stats { return fs.stats }

// NodeCount returns the number of nodes the mount knows (the root, every
// node the kernel holds a reference to, every open one), for diagnostics
// and for tests that check references are balanced.
func (fs *FS) NodeCount() int { return fs.nodes.count() }

// TransferSizes returns rsize, wsize and the directory transfer size in use.
func (fs *FS) TransferSizes() (rsize, wsize, dtpref uint32) { return fs.rsize, fs.wsize, fs.dtpref }

// Errno maps any error returned by FS to the errno for the kernel. This is
// the one place client errors become errno values.
func Errno(err error) syscall.Errno {
	if err == nil {
		return 0
	}
	var en syscall.Errno
	var st proto.Error
	switch {
	case errors.As(err, &en):
		return en
	case errors.As(err, &st):
		return st.Errno // the protocol's mapping of its status
	case errors.Is(err, context.Canceled):
		return syscall.EINTR
	}
	// A soft mount's call that timed out (or any other failure to get an
	// answer) is EIO, as nfs(5) says.
	return syscall.EIO
}
