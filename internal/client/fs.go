package client

import (
	"context"
	"errors"
	"fmt"
	"hash/maphash"
	"net"
	"os"
	"strconv"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"hushfs/internal/nfs3"
	"hushfs/internal/rpc"
)

// Cred is the identity a request is made with: the calling process's.
type Cred struct {
	UID    uint32
	GID    uint32
	Groups []uint32
}

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

// FS is a mounted NFSv3 export.
type FS struct {
	cfg     Config
	opts    Options
	now     func() time.Time
	logf    func(string, ...any)
	nfs     *rpc.Client
	stats   *Stats
	nodes   *inodeTable
	rootFH  nfs3.FH
	machine string
	offSeed maphash.Seed // keys directory offsets (dirOffset)

	// Transfer sizes negotiated with the server's FSINFO.
	rsize, wsize, dtpref uint32
	maxFileSize          uint64
	nameMax              uint32 // longest name, from PATHCONF

	credMu sync.Mutex
	creds  map[string]rpc.OpaqueAuth // GUARDED_BY(credMu): encoded AUTH_SYS per identity

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

// floorTransfer returns the server's transfer size v (named what in its
// FSINFO) as used: at least minTransfer, in whole pages.
func (fs *FS) floorTransfer(what string, v uint32) uint32 {
	if v < minTransfer {
		fs.logf("hushfs: server %s: FSINFO %s is %d bytes; using %d (shorter replies are read and written on)", fs.cfg.Server, what, v, minTransfer)
		return minTransfer
	}
	return v &^ (minTransfer - 1)
}

// Mount asks the server's MOUNT service for the export's root handle,
// learns the transfer sizes with FSINFO and the longest name with PATHCONF,
// and returns the mounted file
// system. Nothing is left running if it fails.
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
	dial := cfg.Dial
	if dial == nil {
		var d net.Dialer
		dial = func(ctx context.Context, addr string) (net.Conn, error) { return d.DialContext(ctx, "tcp", addr) }
	}
	machine := cfg.Machine
	if machine == "" {
		machine, _ = os.Hostname()
	}
	fs := &FS{
		cfg: cfg, opts: opts, now: cfg.Now, logf: cfg.Logf, stats: newStats(),
		machine: machine, creds: map[string]rpc.OpaqueAuth{}, offSeed: maphash.MakeSeed(),
		files: map[uint64]*openFile{}, dirs: map[uint64]*openDir{}, nextOpen: 1,
		notify: nopNotifier{}, heldDirs: map[*inode]struct{}{}, dirHold: dirTimesHold,
	}
	self := Cred{UID: uint32(os.Getuid()), GID: uint32(os.Getgid())}

	mountPort, nfsPort := opts.MountPort, opts.Port
	if mountPort == 0 || nfsPort == 0 {
		var err error
		mountPort, nfsPort, err = fs.portmap(ctx, dial, mountPort, nfsPort)
		if err != nil {
			return nil, err
		}
	}
	root, err := fs.mnt(ctx, dial, mountPort, &self)
	if err != nil {
		return nil, err
	}
	fs.rootFH = root
	nfsAddr := net.JoinHostPort(cfg.Server, strconv.Itoa(nfsPort))
	fs.nfs, err = rpc.NewClient(ctx, rpc.ClientOptions{
		Dial:     func(ctx context.Context) (net.Conn, error) { return dial(ctx, nfsAddr) },
		Timeout:  opts.Timeo,
		Retrans:  opts.Retrans,
		Hard:     opts.Hard,
		Observer: fs.stats.observe,
		Logf:     cfg.Logf,
	})
	if err != nil {
		return nil, fmt.Errorf("connecting to NFS service at %s: %w", nfsAddr, err)
	}
	fs.nodes = newInodeTable(root)
	if err := fs.fsinfo(ctx, &self); err != nil {
		fs.nfs.Close()
		return nil, err
	}
	fs.pathconf(ctx, &self)
	fs.life, fs.endLife = context.WithCancel(context.Background())
	fs.wb = newWriteback(fs)
	return fs, nil
}

// portmap asks the server's portmapper for whichever ports were not given.
func (fs *FS) portmap(ctx context.Context, dial func(context.Context, string) (net.Conn, error), mountPort, nfsPort int) (int, int, error) {
	addr := net.JoinHostPort(fs.cfg.Server, strconv.Itoa(rpc.PortmapPort))
	c, err := rpc.NewClient(ctx, rpc.ClientOptions{
		Dial:    func(ctx context.Context) (net.Conn, error) { return dial(ctx, addr) },
		Timeout: fs.opts.Timeo, Retrans: fs.opts.Retrans, Observer: fs.stats.observe,
	})
	if err != nil {
		return 0, 0, fmt.Errorf("server %s: no portmapper reachable (give port= and mountport=): %w", fs.cfg.Server, err)
	}
	defer c.Close()
	if mountPort == 0 {
		if mountPort, err = rpc.GetPort(ctx, c, nfs3.MountProgram, nfs3.MountVersion, rpc.IPProtoTCP); err != nil {
			return 0, 0, fmt.Errorf("server %s: MOUNT v3 over TCP: %w", fs.cfg.Server, err)
		}
	}
	if nfsPort == 0 {
		if nfsPort, err = rpc.GetPort(ctx, c, nfs3.Program, nfs3.Version, rpc.IPProtoTCP); err != nil {
			return 0, 0, fmt.Errorf("server %s: NFS v3 over TCP: %w", fs.cfg.Server, err)
		}
	}
	return mountPort, nfsPort, nil
}

// mnt gets the export's root handle from the MOUNT service.
func (fs *FS) mnt(ctx context.Context, dial func(context.Context, string) (net.Conn, error), port int, self *Cred) (nfs3.FH, error) {
	addr := net.JoinHostPort(fs.cfg.Server, strconv.Itoa(port))
	c, err := rpc.NewClient(ctx, rpc.ClientOptions{
		Dial:    func(ctx context.Context) (net.Conn, error) { return dial(ctx, addr) },
		Timeout: fs.opts.Timeo, Retrans: fs.opts.Retrans, Observer: fs.stats.observe,
	})
	if err != nil {
		return nil, fmt.Errorf("connecting to MOUNT service at %s: %w", addr, err)
	}
	defer c.Close()
	var res nfs3.MntRes
	args := nfs3.MntArgs{Path: []byte(fs.cfg.Export)}
	if err := c.Call(ctx, nfs3.MountProgram, nfs3.MountVersion, nfs3.MountProcMnt, fs.auth(self), &args, &res); err != nil {
		return nil, fmt.Errorf("MOUNT %s:%s: %w", fs.cfg.Server, fs.cfg.Export, err)
	}
	if res.Status != nfs3.MntOK {
		return nil, fmt.Errorf("MOUNT %s:%s: %w", fs.cfg.Server, fs.cfg.Export, res.Status)
	}
	usable := len(res.AuthFlavors) == 0
	for _, f := range res.AuthFlavors {
		if f == rpc.AuthSys || f == rpc.AuthNone {
			usable = true
		}
	}
	if !usable {
		return nil, fmt.Errorf("MOUNT %s:%s: the export requires security flavors %v; only AUTH_SYS is supported",
			fs.cfg.Server, fs.cfg.Export, res.AuthFlavors)
	}
	return append(nfs3.FH(nil), res.FH...), nil
}

// fsinfo learns transfer sizes and the root's attributes.
func (fs *FS) fsinfo(ctx context.Context, self *Cred) error {
	var res nfs3.FsinfoRes
	at := fs.now()
	if err := fs.call(ctx, self, nfs3.ProcFsinfo, &nfs3.FsinfoArgs{Root: fs.rootFH}, &res); err != nil {
		return fmt.Errorf("FSINFO of %s:%s: %w", fs.cfg.Server, fs.cfg.Export, err)
	}
	if res.Status != nfs3.OK {
		return fmt.Errorf("FSINFO of %s:%s: %w", fs.cfg.Server, fs.cfg.Export, res.Status)
	}
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
	fs.rsize = pick("rtmax", fs.opts.Rsize, res.Rtmax)
	fs.wsize = pick("wtmax", fs.opts.Wsize, res.Wtmax)
	fs.dtpref = res.Dtpref
	if fs.dtpref == 0 || fs.dtpref > fs.rsize {
		fs.dtpref = fs.rsize
	}
	fs.dtpref = fs.floorTransfer("dtpref", fs.dtpref)
	fs.maxFileSize = res.MaxFileSize
	root := fs.nodes.get(RootID)
	fs.applyAttr(root, &res.ObjAttr, at)
	if !res.ObjAttr.Present {
		if _, _, err := fs.GetAttr(ctx, self, RootID); err != nil {
			return fmt.Errorf("GETATTR of the root of %s:%s: %w", fs.cfg.Server, fs.cfg.Export, err)
		}
	}
	return nil
}

// RootFH returns the export's root handle.
func (fs *FS) RootFH() nfs3.FH { return fs.rootFH }

// Stats returns the per-procedure RPC statistics since mount.
func (fs *FS) Stats() *Stats { return fs.stats }

// NodeCount returns the number of nodes the mount knows (the root, every
// node the kernel holds a reference to, every open one), for diagnostics
// and for tests that check references are balanced.
func (fs *FS) NodeCount() int { return fs.nodes.count() }

// TransferSizes returns rsize, wsize and the directory transfer size in use.
func (fs *FS) TransferSizes() (rsize, wsize, dtpref uint32) { return fs.rsize, fs.wsize, fs.dtpref }

// auth returns the AUTH_SYS credential for c, encoded once per identity.
func (fs *FS) auth(c *Cred) rpc.OpaqueAuth {
	key := make([]byte, 0, 8+4*len(c.Groups))
	key = fmt.Appendf(key, "%d:%d", c.UID, c.GID)
	for _, g := range c.Groups {
		key = fmt.Appendf(key, ",%d", g)
	}
	fs.credMu.Lock()
	defer fs.credMu.Unlock()
	if a, ok := fs.creds[string(key)]; ok {
		return a
	}
	if len(fs.creds) > 4096 {
		clear(fs.creds) // bounded: identities are few; a flood just re-encodes
	}
	a := rpc.SysCred(c.UID, c.GID, c.Groups, fs.machine)
	fs.creds[string(key)] = a
	return a
}

// call sends one NFSv3 request with the caller's credential.
func (fs *FS) call(ctx context.Context, c *Cred, proc uint32, args rpc.Marshaler, res rpc.Unmarshaler) error {
	fs.stats.countOrigin(originOf(ctx), proc)
	return fs.nfs.Call(ctx, nfs3.Program, nfs3.Version, proc, fs.auth(c), args, res)
}

// Errno maps any error returned by FS to the errno for the kernel. This is
// the one place client errors become errno values.
func Errno(err error) syscall.Errno {
	if err == nil {
		return 0
	}
	var en syscall.Errno
	var st nfs3.Status
	switch {
	case errors.As(err, &en):
		return en
	case errors.As(err, &st):
		return st.Errno()
	case errors.Is(err, context.Canceled):
		return syscall.EINTR
	case errors.Is(err, context.DeadlineExceeded), errors.Is(err, rpc.ErrTimeout):
		return syscall.EIO // soft mounts fail with EIO, as nfs(5) says
	}
	return syscall.EIO
}
