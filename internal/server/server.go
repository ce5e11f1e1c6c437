// Package server is an NFSv3 (RFC 1813) and MOUNT v3 server that exports one
// local directory with the semantics of the local file system.
//
// Design:
//
//   - File handles are the kernel's (name_to_handle_at/open_by_handle_at)
//     wrapped with a MAC keyed by a per-export secret kept in the state
//     directory, so they survive restarts and cannot be forged (handle.go).
//   - Every operation works relative to descriptors, never paths: a handle
//     resolves to an O_PATH descriptor (cached, nodes.go) and names are single
//     components looked up with O_NOFOLLOW and openat2's RESOLVE_NO_SYMLINKS |
//     RESOLVE_NO_MAGICLINKS | RESOLVE_NO_XDEV. The server never follows a
//     symbolic link and never crosses a mount point.
//   - Operations whose outcome depends on who asks run with the caller's
//     AUTH_SYS uid, gid and groups on a thread whose file-system credentials
//     are switched (creds.go), so the kernel itself enforces permissions and
//     new files get the caller's ownership. Handles are resolved with the
//     server's own credentials first, as open_by_handle_at needs
//     CAP_DAC_READ_SEARCH. Root is squashed to an anonymous identity unless
//     configured otherwise (Config.Squash).
//   - Who may call at all is decided per call from the peer's address and
//     port (Config.Allow, Config.SecurePort; hosts.go).
//   - Nothing outside the export is reachable: names are single components
//     resolved beneath their directory, ".." of the root is the root, and an
//     inode a handle resolves to is checked to lie beneath the export root
//     before it enters the node cache (confine.go).
//   - READ, WRITE and COMMIT use descriptors opened by the server and cached
//     per inode; as Linux's own NFS server does, the owner of a file may read
//     and write it whatever its mode bits (clients check permission at open
//     time, and a file created read-only must still take the data its creator
//     writes), and anyone else is checked with faccessat under their
//     credentials.
//   - READDIR cookies are the directory stream offsets of getdents64, which
//     stay valid while the directory changes (hash positions on ext4), so the
//     cookie verifier is constant per directory.
//   - Operations that change metadata make the change durable before
//     replying, unless Config.Async, syncing what the export's file system
//     needs for it (durable.go); WRITE and COMMIT sync as their stable_how
//     and the protocol say.
//   - A file system mounted inside the export is not crossed: looking up its
//     mount point is NFS3ERR_ACCES, and READDIRPLUS lists it without
//     attributes or handle.
package server

import (
	"crypto/rand"
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"net/netip"
	"path/filepath"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/sys/unix"

	"hushfs/internal/nfs3"
	"hushfs/internal/nfs4"
	"hushfs/internal/rpc"
)

// Config configures a Server.
type Config struct {
	// Root is the exported directory. Symbolic links in the path itself are
	// resolved once, at start.
	Root string
	// StateDir holds the export's handle secret (created with mode 0700,
	// the secret file 0600); handles stay valid across restarts as long as
	// it is kept. The CLI uses /var/lib/hushfs.
	StateDir string
	// ReadOnly makes every modifying procedure fail with NFS3ERR_ROFS.
	ReadOnly bool
	// Async replies to operations that change metadata (CREATE, REMOVE,
	// RENAME, SETATTR...) before the change is on stable storage, like the
	// "async" export option of Linux's server. Faster, but a server crash
	// may lose changes that clients were told are done. By default each
	// such operation syncs the directories and file involved first, as
	// RFC 1813 requires.
	Async bool
	// Squash selects whose identity is replaced by the anonymous one
	// (AnonUID, AnonGID): by default (RootSquash) the superuser's.
	Squash Squash
	// AnonUID and AnonGID are the identity of squashed callers and of
	// AUTH_NONE calls; 0 selects DefaultAnonID (65534, "nobody"). Root
	// itself cannot be chosen: that would be no squashing at all
	// (NoRootSquash says so explicitly).
	AnonUID, AnonGID uint32
	// Allow lists the client networks that may mount and call; empty means
	// every client. IPv4 clients connected over IPv6 (IPv4-mapped
	// addresses) match IPv4 prefixes.
	Allow []netip.Prefix
	// SecurePort admits only calls from privileged source ports (below
	// 1024), which only root can bind on the client's host.
	SecurePort bool
	// Logf receives diagnostics; nil discards them.
	Logf func(format string, args ...any)
	// Now is the clock for cache expiry, NFSv4.1 leases and the grace
	// period; nil means time.Now.
	Now func() time.Time
	// Lease is the NFSv4.1 lease time; 0 means v4state.DefaultLease.
	Lease time.Duration
	// IDDomain is the domain of NFSv4 owner strings ("user@domain") that
	// SETATTR accepts besides numeric ones; "" means "localdomain".
	IDDomain string
	// ObserveOp, if set, is called once per NFSv4.1 operation run, with
	// its time (per-operation metrics).
	ObserveOp func(op uint32, d time.Duration)
	// ObserveCallback, if set, is called once per NFSv4.1 callback sent,
	// with its operation (CB_RECALL, CB_GETATTR; 0 for CB_NULL) and the
	// time to its answer; Granted once per delegation granted, with its
	// type: "read", "write" or "directory" (metrics).
	ObserveCallback func(op uint32, d time.Duration)
	Granted         func(typ string)
	// Delegations grants NFSv4.1 read delegations (nfs4_deleg.go).
	Delegations bool
	// RecallWait is how long an NFSv4.1 call waits for the delegations
	// it recalled before answering NFS4ERR_DELAY; 0: v4RecallWait,
	// negative: not at all.
	RecallWait time.Duration

	io ioOptions // data path tuning and fault injection, for tests (fileio.go)
}

// Transfer sizes advertised by FSINFO and enforced by READ, WRITE and the
// directory procedures.
const (
	maxIO           = 1 << 20
	prefDir         = 1 << 20 // as large as a reply may be: fewer READDIRs for big directories
	maxDirReply     = 1 << 20
	ioMult          = 4096
	defaultFileMode = 0o644
	defaultDirMode  = 0o755
)

// Server serves one exported directory over NFSv3 and MOUNT v3.
type Server struct {
	root     string // cleaned absolute path, symbolic links resolved
	rootArg  string // cleaned absolute path as configured
	readOnly bool
	async    bool
	squash   Squash
	anonUID  uint32
	anonGID  uint32
	allow    []netip.Prefix
	secure   bool
	logf     func(string, ...any)
	now      func() time.Time

	mountFd int // O_RDONLY descriptor of the root, for open_by_handle_at
	mountID int
	rootDev uint64
	rootIno uint64
	rootFH  nfs3.FH
	fsid    uint64

	codec  *handleCodec
	creds  *credSwitcher
	policy syncPolicy // what makes metadata changes durable (durable.go)
	cache  *nodeCache
	verf   atomic.Uint64 // write verifier
	io     ioState       // READ/WRITE/COMMIT data path (fileio.go)
	v4     *v4           // NFSv4.1 (nfs4*.go)

	nfsCalls   [nfs3.NumProcs]atomic.Uint64
	mountCalls [nfs3.NumMountProcs]atomic.Uint64

	dentsPool sync.Pool // *[]byte getdents buffers

	mountsMu sync.Mutex
	mounts   map[mountEntry]struct{}

	stop      chan struct{}
	sweeperWG sync.WaitGroup
	closeOnce sync.Once
}

// New opens the export. It fails if the root is not a directory, if the file
// system does not support file handles, or if the process lacks the
// privileges to resolve them and switch credentials (it must run as root).
func New(cfg Config) (*Server, error) {
	if cfg.Root == "" {
		return nil, errors.New("server: no export root given")
	}
	abs, err := filepath.Abs(cfg.Root)
	if err != nil {
		return nil, fmt.Errorf("server: export root: %w", err)
	}
	root, err := filepath.EvalSymlinks(abs)
	if err != nil {
		return nil, fmt.Errorf("server: export root: %w", err)
	}
	access, err := newAccessConfig(&cfg)
	if err != nil {
		return nil, fmt.Errorf("server: %w", err)
	}
	s := &Server{
		root:     root,
		rootArg:  abs,
		readOnly: cfg.ReadOnly,
		async:    cfg.Async,
		squash:   access.squash,
		anonUID:  access.anonUID,
		anonGID:  access.anonGID,
		allow:    access.allow,
		secure:   cfg.SecurePort,
		logf:     cfg.Logf,
		now:      cfg.Now,
		mountFd:  -1,
		mounts:   make(map[mountEntry]struct{}),
		stop:     make(chan struct{}),
	}
	if s.logf == nil {
		s.logf = func(string, ...any) {}
	}
	if s.now == nil {
		s.now = time.Now
	}
	if s.creds, err = newCredSwitcher(); err != nil {
		return nil, fmt.Errorf("server: %w", err)
	}
	secret, err := loadOrCreateSecret(cfg.StateDir, root)
	if err != nil {
		return nil, fmt.Errorf("server: %w", err)
	}
	s.codec = newHandleCodec(secret)
	s.cache = newNodeCache(s.now)
	s.initIO(cfg.io)
	if err := s.openRoot(); err != nil {
		s.cache.closeAll()
		if s.mountFd >= 0 {
			unix.Close(s.mountFd)
		}
		return nil, fmt.Errorf("server: export %s: %w", root, err)
	}
	var v [8]byte
	if _, err := rand.Read(v[:]); err != nil {
		s.Close()
		return nil, fmt.Errorf("server: write verifier: %w", err)
	}
	if s.v4, err = s.newV4(&cfg); err != nil {
		s.Close()
		return nil, fmt.Errorf("server: %w", err)
	}
	s.verf.Store(binary.BigEndian.Uint64(v[:]))
	s.sweeperWG.Add(1)
	go s.sweeper()
	return s, nil
}

func (s *Server) openRoot() error {
	fd, err := unix.Open(s.root, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return fmt.Errorf("opening root: %w", err)
	}
	s.mountFd = fd
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return fmt.Errorf("stat root: %w", err)
	}
	s.rootDev, s.rootIno = st.Dev, st.Ino
	s.policy = detectSyncPolicy(fd, st.Dev)
	if s.io.policy != nil {
		s.policy = *s.io.policy
	}
	if !s.async {
		s.logf("hushfs server: %s is on %s", s.root, s.policy.name)
	}
	var sfs unix.Statfs_t
	if err := unix.Fstatfs(fd, &sfs); err != nil {
		return fmt.Errorf("statfs root: %w", err)
	}
	s.fsid = uint64(uint32(sfs.Fsid.Val[0]))<<32 | uint64(uint32(sfs.Fsid.Val[1]))
	if s.fsid == 0 {
		s.fsid = st.Dev
	}
	kh, mountID, err := unix.NameToHandleAt(fd, "", unix.AT_EMPTY_PATH)
	if err != nil {
		if errors.Is(err, unix.EOPNOTSUPP) {
			return fmt.Errorf("the file system does not support file handles: %w", err)
		}
		return fmt.Errorf("name_to_handle_at: %w", err)
	}
	s.mountID = mountID
	fh, err := s.codec.encode(kh.Type(), kh.Bytes())
	if err != nil {
		return err
	}
	pfd, err := unix.OpenByHandleAt(fd, kh, unix.O_PATH|unix.O_CLOEXEC)
	if err != nil {
		if errors.Is(err, unix.EPERM) {
			return fmt.Errorf("open_by_handle_at needs CAP_DAC_READ_SEARCH (run as root): %w", err)
		}
		return fmt.Errorf("open_by_handle_at: %w", err)
	}
	n := newNode(string(fh), fh, kh, pfd, &st)
	n.isRoot = true
	n.cverf = s.cookieVerf(kh)
	n = s.cache.insert(n)
	// Pinned: never evicted, though its I/O descriptors may be closed when
	// idle like any other node's.
	s.cache.mu.Lock()
	n.pinned = true
	s.cache.mu.Unlock()
	s.cache.release(n)
	s.rootFH = fh
	return nil
}

// RootHandle returns the export root's file handle (what MNT returns).
func (s *Server) RootHandle() nfs3.FH { return append(nfs3.FH(nil), s.rootFH...) }

// Root returns the exported path (cleaned, absolute, symlinks resolved).
func (s *Server) Root() string { return s.root }

// Register serves NFS versions 3 and 4 (minor version 1) and MOUNT
// version 3 on rs.
func (s *Server) Register(rs *rpc.Server) {
	rs.Register(nfs3.Program, nfs3.Version, nfsHandler{s})
	rs.Register(nfs4.Program, nfs4.Version, nfs4Handler{s})
	rs.Register(nfs3.MountProgram, nfs3.MountVersion, mountHandler{s})
}

// Stats returns the number of calls received per NFS procedure number,
// including calls whose arguments did not decode; procedures never called
// are absent.
func (s *Server) Stats() map[uint32]uint64 {
	m := make(map[uint32]uint64)
	for i := range s.nfsCalls {
		if v := s.nfsCalls[i].Load(); v > 0 {
			m[uint32(i)] = v
		}
	}
	return m
}

// MountStats is Stats for the MOUNT procedures.
func (s *Server) MountStats() map[uint32]uint64 {
	m := make(map[uint32]uint64)
	for i := range s.mountCalls {
		if v := s.mountCalls[i].Load(); v > 0 {
			m[uint32(i)] = v
		}
	}
	return m
}

// WriteVerifier returns the current write verifier.
func (s *Server) WriteVerifier() nfs3.Verf {
	var v nfs3.Verf
	binary.BigEndian.PutUint64(v[:], s.verf.Load())
	return v
}

// rotateVerifier changes the write verifier after a write-back error, so
// that clients resend every write not yet committed: the error may have hit
// any of them.
func (s *Server) rotateVerifier() {
	var v [8]byte
	if _, err := rand.Read(v[:]); err != nil {
		s.verf.Add(1)
		return
	}
	s.verf.Store(binary.BigEndian.Uint64(v[:]))
}

// Close releases the server's descriptors. Stop the RPC server first: calls
// still running may fail.
func (s *Server) Close() error {
	s.closeOnce.Do(func() {
		close(s.stop)
		s.sweeperWG.Wait()
		if s.v4 != nil {
			if s.v4.leases != nil {
				s.v4.leases.close()
			}
			s.v4.cbCancel()
			s.v4.cbWG.Wait()
		}
		s.shutdownIO()
		s.cache.closeAll()
		if s.mountFd >= 0 {
			unix.Close(s.mountFd)
			s.mountFd = -1
		}
	})
	return nil
}

func (s *Server) sweeper() {
	defer s.sweeperWG.Done()
	t := time.NewTicker(defaultSweepEvery)
	defer t.Stop()
	for {
		select {
		case <-s.stop:
			return
		case <-t.C:
			s.cache.sweep()
			s.v4.state.Expire()
			s.v4.leases.scan() // revoked delegations let local writers go
		}
	}
}

// cookieVerf is a directory's READDIR cookie verifier: constant for the
// directory (its cookies never become invalid), different between
// directories and exports.
func (s *Server) cookieVerf(kh unix.FileHandle) nfs3.Verf {
	var t [4]byte
	binary.BigEndian.PutUint32(t[:], uint32(kh.Type()))
	m := s.codec.derive("cookieverf", t[:], kh.Bytes())
	var v nfs3.Verf
	copy(v[:], m[:8])
	if v == (nfs3.Verf{}) {
		v[7] = 1 // a zero verifier reads as "none"
	}
	return v
}

// resolve returns the node of fh with a reference (release it with
// s.cache.release). Forged or foreign handles are NFS3ERR_BADHANDLE; handles
// of inodes that no longer exist, or no longer lie beneath the export root,
// are NFS3ERR_STALE. It must run with the server's own credentials.
func (s *Server) resolve(fh nfs3.FH) (*node, error) {
	if !s.codec.precheck(fh) {
		return nil, nfs3.ErrBadHandle
	}
	if n := s.cache.acquire(fh); n != nil {
		return n, nil
	}
	if n := s.openPinned(fh); n != nil {
		return n, nil
	}
	kh, err := s.codec.decode(fh)
	if err != nil {
		return nil, err
	}
	fd, err := unix.OpenByHandleAt(s.mountFd, kh, unix.O_PATH|unix.O_CLOEXEC)
	if err != nil {
		switch {
		case errors.Is(err, unix.EMFILE), errors.Is(err, unix.ENFILE), errors.Is(err, unix.ENOMEM):
			return nil, nfs3.ErrJukebox
		}
		// ESTALE, ENOENT, EINVAL...: the inode is gone (the MAC proves we
		// issued the handle, so it was valid once).
		return nil, nfs3.ErrStale
	}
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		unix.Close(fd)
		return nil, nfs3.ErrStale
	}
	if st.Nlink == 0 || st.Dev != s.rootDev {
		unix.Close(fd)
		return nil, nfs3.ErrStale
	}
	// The MAC proves we issued the handle, not that the inode is still in
	// the export: a local process may have moved it out since. Checked
	// here, before the node is cached, so cache hits never pay for it.
	if err := s.checkWithin(fd, &st); err != nil {
		unix.Close(fd)
		return nil, err
	}
	n := newNode(string(fh), append(nfs3.FH(nil), fh...), kh, fd, &st)
	n.isRoot = st.Ino == s.rootIno
	if n.isDir() {
		n.cverf = s.cookieVerf(kh)
	}
	return s.cache.insert(n), nil
}

// nodeFromFd makes a node of a descriptor just opened (O_PATH) on a
// directory entry, taking ownership of fd. st must describe fd.
func (s *Server) nodeFromFd(fd int, st *unix.Stat_t) (*node, error) {
	kh, mountID, err := unix.NameToHandleAt(fd, "", unix.AT_EMPTY_PATH)
	if err != nil {
		unix.Close(fd)
		return nil, fmt.Errorf("name_to_handle_at: %w", err)
	}
	if mountID != s.mountID || st.Dev != s.rootDev {
		unix.Close(fd)
		return nil, errMountPoint
	}
	fh, err := s.codec.encode(kh.Type(), kh.Bytes())
	if err != nil {
		unix.Close(fd)
		return nil, fmt.Errorf("%w: %w", nfs3.ErrServerFault, err)
	}
	if n := s.cache.acquire(fh); n != nil {
		unix.Close(fd)
		return n, nil
	}
	n := newNode(string(fh), fh, kh, fd, st)
	n.isRoot = st.Ino == s.rootIno
	if n.isDir() {
		n.cverf = s.cookieVerf(kh)
	}
	return s.cache.insert(n), nil
}

// errMountPoint is what looking up a mount point inside the export yields:
// the server does not cross into other file systems.
var errMountPoint = fmt.Errorf("%w: mount point not exported", nfs3.ErrAcces)

// handleAt returns the file handle of name in dir without opening it (for
// READDIRPLUS). ok is false when no handle can be given (a mount point, a
// vanished entry).
func (s *Server) handleAt(dirFd int, name string) (nfs3.FH, bool) {
	kh, mountID, err := unix.NameToHandleAt(dirFd, name, 0)
	if err != nil || mountID != s.mountID {
		return nil, false
	}
	fh, err := s.codec.encode(kh.Type(), kh.Bytes())
	if err != nil {
		return nil, false
	}
	return fh, true
}

// stat returns the node's current attributes. An inode without names is
// NFS3ERR_STALE, and the node is dropped from the cache.
func (s *Server) stat(n *node, st *unix.Stat_t) error {
	if err := unix.Fstat(n.fd, st); err != nil {
		return err
	}
	if st.Nlink == 0 && !n.v4open.Load() {
		s.cache.forget(n)
		return nfs3.ErrStale
	}
	return nil
}

// ioFd returns a descriptor of the node's file open for reading (write
// false) or reading and writing, opened on first use and cached. It must run
// with the server's own credentials.
func (s *Server) ioFd(n *node, write bool) (int, error) {
	n.omu.Lock()
	defer n.omu.Unlock()
	if n.rwFd >= 0 {
		return n.rwFd, nil
	}
	if !write && n.rdFd >= 0 {
		return n.rdFd, nil
	}
	flags := unix.O_RDONLY
	if write {
		flags = unix.O_RDWR
	}
	fd, err := unix.OpenByHandleAt(s.mountFd, n.kh, flags|unix.O_CLOEXEC|unix.O_NOCTTY|unix.O_NONBLOCK)
	if err != nil {
		if errors.Is(err, unix.ESTALE) {
			return -1, nfs3.ErrStale
		}
		return -1, err
	}
	s.cache.openCount.Add(1)
	if write {
		n.rwFd = fd
	} else {
		n.rdFd = fd
	}
	return fd, nil
}

// writeFd is ioFd for writing: the descriptor is counted as being written
// through until done is called, so that it is not made read-only meanwhile
// (retireWriter).
func (s *Server) writeFd(n *node) (fd int, done func(), err error) {
	// Counted before the descriptor is taken: retireWriter either ran
	// before (and ioFd opens another) or sees the writer.
	n.omu.Lock()
	n.writers++
	n.omu.Unlock()
	done = func() {
		n.omu.Lock()
		n.writers--
		n.omu.Unlock()
	}
	if fd, err = s.ioFd(n, true); err != nil {
		done()
		return -1, nil, err
	}
	return fd, done, nil
}

// dirFd returns a descriptor of the node's directory open for reading; the
// caller holds n.dirMu.
func (s *Server) dirFd(n *node) (int, error) {
	if n.dirFd >= 0 {
		return n.dirFd, nil
	}
	fd, err := unix.OpenByHandleAt(s.mountFd, n.kh, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC)
	if err != nil {
		if errors.Is(err, unix.ESTALE) {
			return -1, nfs3.ErrStale
		}
		return -1, err
	}
	s.cache.openCount.Add(1)
	n.dirFd = fd
	return fd, nil
}

// fattr converts stat results to fattr3.
func (s *Server) fattr(st *unix.Stat_t) nfs3.Fattr {
	return nfs3.Fattr{
		Type:   ftypeOf(st.Mode),
		Mode:   st.Mode & 0o7777,
		Nlink:  uint32(st.Nlink),
		UID:    st.Uid,
		GID:    st.Gid,
		Size:   uint64(st.Size),
		Used:   uint64(st.Blocks) * 512,
		Rdev:   nfs3.SpecData{Major: unix.Major(st.Rdev), Minor: unix.Minor(st.Rdev)},
		Fsid:   s.fsid,
		Fileid: st.Ino,
		Atime:  nfsTime(st.Atim),
		Mtime:  nfsTime(st.Mtim),
		Ctime:  nfsTime(st.Ctim),
	}
}

func (s *Server) postOp(st *unix.Stat_t) nfs3.PostOpAttr {
	return nfs3.PostOpAttr{Present: true, Attr: s.fattr(st)}
}

// postOpOf stats n for a reply's post-operation attributes; they are simply
// absent if that fails.
func (s *Server) postOpOf(n *node) nfs3.PostOpAttr {
	var st unix.Stat_t
	if n == nil || unix.Fstat(n.fd, &st) != nil {
		return nfs3.PostOpAttr{}
	}
	return s.postOp(&st)
}

func preOp(st *unix.Stat_t) nfs3.PreOpAttr {
	return nfs3.PreOpAttr{Present: true, Attr: nfs3.WccAttr{
		Size: uint64(st.Size), Mtime: nfsTime(st.Mtim), Ctime: nfsTime(st.Ctim)}}
}

func ftypeOf(mode uint32) nfs3.Ftype {
	switch mode & unix.S_IFMT {
	case unix.S_IFREG:
		return nfs3.TypeReg
	case unix.S_IFDIR:
		return nfs3.TypeDir
	case unix.S_IFBLK:
		return nfs3.TypeBlk
	case unix.S_IFCHR:
		return nfs3.TypeChr
	case unix.S_IFLNK:
		return nfs3.TypeLnk
	case unix.S_IFSOCK:
		return nfs3.TypeSock
	case unix.S_IFIFO:
		return nfs3.TypeFifo
	}
	return nfs3.TypeReg
}

// nfsTime converts a kernel time. nfstime3 seconds are unsigned 32 bits: a
// local time outside them (set on the server's disk) is sent as the nearest
// time they hold, not wrapped (2^32 is not 1970, nor 1969 2106).
func nfsTime(ts unix.Timespec) nfs3.Time {
	switch {
	case ts.Sec < 0:
		return nfs3.Time{}
	case ts.Sec > math.MaxUint32:
		return nfs3.Time{Seconds: math.MaxUint32, Nseconds: 999_999_999}
	}
	return nfs3.Time{Seconds: uint32(ts.Sec), Nseconds: uint32(ts.Nsec)}
}

// statusOf is the status a failed operation replies with. Failures that are
// the server's or the disk's, not the client's, are logged.
func (s *Server) statusOf(err error) nfs3.Status {
	st := nfs3.StatusOf(err)
	switch st {
	case nfs3.OK:
		st = nfs3.ErrServerFault
		fallthrough
	case nfs3.ErrIO, nfs3.ErrServerFault:
		s.logf("hushfs server: %v", err)
	}
	return st
}
