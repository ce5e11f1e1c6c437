package server

import (
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"hushfs/internal/server/v4state"
)

// A delegation is a promise that nobody changes the file without the
// holder being told first, and local processes changing the export
// directly are somebody too. While a delegation of a file is held, the
// server holds a Linux read lease (F_SETLEASE F_RDLCK) on a descriptor of
// it. On Linux 6.x an open for writing (O_WRONLY, O_RDWR, O_TRUNC) or a
// truncate(2) of a leased file breaks the lease: the kernel signals the
// lease holder and makes the opener wait (an O_NONBLOCK opener gets
// EWOULDBLOCK) until the lease is released, or for
// /proc/sys/fs/lease-break-time seconds, after which it removes the lease
// itself. The server then recalls the delegations, and releases the lease
// once they are returned or revoked: the local writer goes ahead after
// the holder knows.
//
// Renaming, unlinking, linking, chmod, chown, utimes and xattrs do not
// break a lease taken with F_SETLEASE (the kernel breaks only nfsd's own
// delegation leases for those), and nothing lets userspace hold them
// back. An inotify watch of each leased file sees them, after the fact,
// and the delegations are recalled then: the file's data cannot have
// changed (that needs an open for writing), but its names and attributes
// did, and the holder learns of it within a round trip.
//
// Which lease broke: the lease's signal is a realtime one (F_SETSIG)
// delivered to the process, which os/signal hands to every server's own
// channel; each server then asks F_GETLEASE of each of its leased
// descriptors (a breaking lease reports F_UNLCK). The sweep scans each
// second too, in case a signal was lost (a full realtime queue falls back
// to SIGIO, which is watched as well). No state is shared between
// servers: several in one process each scan their own leases.

// leaseSignal is the signal of lease breaks: a realtime signal
// (SIGRTMIN+6 in glibc's numbering) that nothing else in this program
// uses; unlike SIGIO it is not shared with O_ASYNC descriptors.
const leaseSignal = syscall.Signal(40)

// maxLeases bounds the files and directories delegated at once (each
// a descriptor or an inotify watch); beyond it, no more delegations are
// granted. A client keeps thousands (hushfs: 5,000 by default), and a
// directory it stats takes one too. Each scan (a lease signal, and every
// second) asks F_GETLEASE of each: 8,192 cost a few milliseconds.
const maxLeases = 8192

// leaseLimit is maxLeases within a quarter of the descriptors the process
// may open (the rest serve NFS I/O).
func leaseLimit() int {
	var r unix.Rlimit
	if unix.Getrlimit(unix.RLIMIT_NOFILE, &r) != nil {
		return 1024
	}
	return int(max(256, min(uint64(maxLeases), r.Cur/4)))
}

// defaultLeaseBreak is Linux's default lease-break-time, used when the
// sysctl cannot be read.
const defaultLeaseBreak = 45 * time.Second

type leaseWatch struct {
	s      *Server
	mu     sync.Mutex
	files  map[string]*leased // by file key
	byWD   map[int32]string   // inotify watch descriptor → file key
	count  atomic.Int32       // len(files), read without the lock
	inFd   int
	in     *os.File // inFd, read through the runtime's poller
	sig    chan os.Signal
	kick   chan struct{}
	stop   chan struct{}
	wg     sync.WaitGroup
	within time.Duration // how long a local change waits for delegations to come back
	limit  int           // leases held at most (leaseLimit)
}

// leased is a file the server holds a lease on.
type leased struct {
	fd     int   // holding the lease: O_RDONLY, or for a write lease a dup of the node's O_RDWR one
	wd     int32 // its inotify watch
	write  bool  // a write lease (F_WRLCK): any local open breaks it
	broken bool  // the lease is being broken or the file changed locally: recall
	// A delegated directory is watched, not leased (leases_dir.go).
	dir     bool
	expects []*expectation // events of the server's own changes of the directory
	// children: an entry's attributes or data changed: the delegations
	// covering entries are recalled (nfs4_dirchild.go).
	children bool
	// childExpects: entries the holder is changing itself, until when
	// their events are its own (nfs4_dirchild.go).
	childExpects map[string]time.Time
	// localDirty: entries a local process added, removed or renamed,
	// to be notified (or recalled for) by the next scan (leases_dir.go).
	localDirty map[string]bool
	// localAttrs: entries whose attributes or data a local process
	// changed, for the delegations covering entries that take
	// notifications.
	localAttrs map[string]bool
	// Changes of a write-leased file's attributes the server makes for
	// its holder (leases_self.go).
	selfAttrs []*attrExpectation
	// A broken write lease kept for a writer's data (leases_writer.go):
	// when the break was seen, when no delegation was left, the writer's
	// last WRITE.
	brokenAt, freeAt, lastWrite time.Time
}

// leaseType is the lease l holds while intact.
func (l *leased) leaseType() int {
	if l.write {
		return unix.F_WRLCK
	}
	return unix.F_RDLCK
}

// newLeaseWatch starts watching for lease breaks and local changes.
func newLeaseWatch(s *Server) (*leaseWatch, error) {
	fd, err := unix.InotifyInit1(unix.IN_NONBLOCK | unix.IN_CLOEXEC)
	if err != nil {
		return nil, fmt.Errorf("inotify_init1: %w", err)
	}
	w := &leaseWatch{s: s, files: make(map[string]*leased), byWD: make(map[int32]string), inFd: fd,
		in: os.NewFile(uintptr(fd), "inotify"), sig: make(chan os.Signal, 1), kick: make(chan struct{}, 1),
		stop: make(chan struct{})}
	w.within = localRecallTime(readLeaseBreakTime(s.logf))
	w.limit = leaseLimit()
	signal.Notify(w.sig, leaseSignal, syscall.SIGIO)
	w.wg.Add(2)
	go w.run()
	go w.readEvents()
	return w, nil
}

// readLeaseBreakTime reads how long the kernel holds back a local opener
// of a leased file.
func readLeaseBreakTime(logf func(string, ...any)) time.Duration {
	b, err := os.ReadFile("/proc/sys/fs/lease-break-time")
	if err == nil {
		var n int
		if n, err = strconv.Atoi(strings.TrimSpace(string(b))); err == nil && n >= 0 {
			return time.Duration(n) * time.Second
		}
	}
	logf("hushfs server: reading fs.lease-break-time: %v: assuming %v", err, defaultLeaseBreak)
	return defaultLeaseBreak
}

// localRecallTime is how long holders get to return delegations recalled
// for a local change: less than the kernel's lease-break-time, so that
// the delegations are revoked (and the holders told) before the kernel
// lets the writer through on its own; the sweep revokes within a second
// and the lease goes a moment later.
func localRecallTime(breakTime time.Duration) time.Duration {
	if breakTime > 6*time.Second {
		return breakTime - 3*time.Second
	}
	return breakTime / 2
}

// close stops the watch and releases every lease. It runs before the
// callbacks are waited for: a scan may send recalls.
func (w *leaseWatch) close() {
	close(w.stop)
	w.in.Close() // ends readEvents
	w.wg.Wait()
	signal.Stop(w.sig)
	w.mu.Lock()
	defer w.mu.Unlock()
	for key, l := range w.files {
		w.releaseLocked(key, l)
	}
}

func (w *leaseWatch) run() {
	defer w.wg.Done()
	for {
		select {
		case <-w.stop:
			return
		case <-w.sig:
		case <-w.kick:
		}
		w.scan()
	}
}

// returned lets the lease of the file key go at once if no delegation
// needs it any more and no local opener waits for it (the next grant
// takes the lease it needs), rather than at the next scan; a broken
// one is the scan's to let go.
func (w *leaseWatch) returned(key string) {
	if w == nil {
		return
	}
	w.mu.Lock()
	l := w.files[key]
	scan := l != nil && (l.dir || l.broken)
	if l != nil && !scan && !w.s.v4.state.Delegated(key) {
		w.releaseLocked(key, l)
	}
	w.mu.Unlock()
	if scan {
		// A directory's watch goes at the scan (leases_dir.go), and a
		// broken lease may stay for the writer's data (leases_writer.go).
		w.poke()
	}
}

// poke asks for a scan soon (a delegation was returned, a file changed).
func (w *leaseWatch) poke() {
	if w == nil {
		return
	}
	select {
	case w.kick <- struct{}{}:
	default:
	}
}

// held reports whether the server may hold any lease: changes must then
// ask (changing) even when no delegation is held.
func (w *leaseWatch) held() bool { return w != nil && w.count.Load() > 0 }

// grant runs grantFn (v4state's grant of a delegation of n) while the
// server holds a read lease on n's file and watches it, taking the lease
// first if needed. A file that cannot be leased — open for writing
// somewhere (EAGAIN), the server's own descriptor for NFS writes included
// — gets no delegation. The lock orders the grant before any scan that
// would see the lease broken, so no delegation outlives its lease
// unrecalled.
func (w *leaseWatch) grant(n *node, grantFn func() bool) bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	l := w.files[n.key]
	if l != nil && l.write && !l.broken && !w.s.v4.state.Delegated(n.key) {
		// The write lease of a delegation already back: a local reader
		// would break it. A read delegation gets a read lease.
		w.releaseLocked(n.key, l)
		l = nil
	}
	fresh := l == nil
	if fresh {
		if len(w.files) >= w.limit {
			return false
		}
		w.s.retireWriter(n)
		var err error
		if l, err = w.take(n); err != nil {
			if !errors.Is(err, unix.EAGAIN) && !errors.Is(err, unix.EACCES) && !errors.Is(err, unix.ESTALE) {
				w.s.logf("hushfs server: no delegation: %v", err)
			}
			return false
		}
		w.files[n.key] = l
		w.count.Add(1)
	} else if !l.broken && !leaseIntact(l.fd, l.leaseType()) {
		l.broken = true
		w.poke()
	}
	if !l.broken && grantFn() {
		return true
	}
	if fresh {
		w.releaseLocked(n.key, l)
	}
	return false
}

// leaseIntact reports whether the lease of type typ on fd is held and not
// being broken (a breaking lease reports what it is being broken to).
func leaseIntact(fd, typ int) bool {
	t, err := unix.FcntlInt(uintptr(fd), unix.F_GETLEASE, 0)
	return err == nil && t == typ
}

// grantWrite is grant for a write delegation: the server takes a write
// lease on n's file, which Linux grants only when no other open file
// description of it exists (the server's own included) and which any
// local open breaks. A file already leased (a read delegation, or a lease
// not yet released) gets none.
func (w *leaseWatch) grantWrite(n *node, grantFn func() bool) bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.files[n.key] != nil || len(w.files) >= w.limit {
		return false
	}
	l, err := w.takeWrite(n)
	if err != nil {
		if !errors.Is(err, unix.EAGAIN) && !errors.Is(err, unix.ESTALE) {
			w.s.logf("hushfs server: no write delegation: %v", err)
		}
		return false
	}
	w.files[n.key] = l
	w.count.Add(1)
	if grantFn() {
		return true
	}
	w.releaseLocked(n.key, l)
	return false
}

// takeWrite write-leases n's file through the node's own descriptor open
// for reading and writing: the holder's READs, WRITEs and COMMITs go
// through it without breaking the lease, where a new open would. The
// node's other descriptors are made the same open file (dup3) first,
// since each would stop the lease; n must be pinned (open by the
// holder), so the descriptors stay while the lease does.
func (w *leaseWatch) takeWrite(n *node) (*leased, error) {
	n.omu.Lock()
	defer n.omu.Unlock()
	if n.writers > 0 {
		return nil, unix.EAGAIN
	}
	if n.rwFd < 0 {
		fd, err := unix.OpenByHandleAt(w.s.mountFd, n.kh, unix.O_RDWR|unix.O_CLOEXEC|unix.O_NOCTTY|unix.O_NONBLOCK)
		if err != nil {
			return nil, fmt.Errorf("opening a file to write-lease: %w", err)
		}
		n.rwFd = fd
		w.s.cache.openCount.Add(1)
	}
	replaced := false
	for _, p := range append([]*int{&n.rdFd}, pointersTo(n.retired)...) {
		if *p >= 0 && *p != n.rwFd {
			if err := unix.Dup3(n.rwFd, *p, unix.O_CLOEXEC); err != nil {
				return nil, fmt.Errorf("dup3 of a descriptor to write-lease: %w", err)
			}
			replaced = true
		}
	}
	if replaced && n.io != nil {
		n.io.descriptorsClosed() // advice was given to the open files replaced
	}
	if _, err := unix.FcntlInt(uintptr(n.rwFd), unix.F_SETSIG, int(leaseSignal)); err != nil {
		return nil, fmt.Errorf("F_SETSIG: %w", err)
	}
	if _, err := unix.FcntlInt(uintptr(n.rwFd), unix.F_SETLEASE, unix.F_WRLCK); err != nil {
		return nil, fmt.Errorf("F_SETLEASE F_WRLCK: %w", err)
	}
	unlock := func(what string, err error) (*leased, error) {
		unix.FcntlInt(uintptr(n.rwFd), unix.F_SETLEASE, unix.F_UNLCK)
		return nil, fmt.Errorf("%s: %w", what, err)
	}
	if _, err := unix.FcntlInt(uintptr(n.rwFd), unix.F_SETOWN, os.Getpid()); err != nil {
		return unlock("F_SETOWN", err)
	}
	fd, err := unix.FcntlInt(uintptr(n.rwFd), unix.F_DUPFD_CLOEXEC, 0)
	if err != nil {
		return unlock("F_DUPFD_CLOEXEC", err)
	}
	// No IN_MODIFY: the holder's own writes go through the leased file,
	// and a local writer must open the file, which breaks the lease.
	wd, err := unix.InotifyAddWatch(w.inFd, procFdPath(fd), unix.IN_ATTRIB|unix.IN_MOVE_SELF|unix.IN_DELETE_SELF)
	if err != nil {
		unix.Close(fd)
		return unlock("inotify_add_watch", err)
	}
	w.byWD[int32(wd)] = n.key
	return &leased{fd: fd, wd: int32(wd), write: true}, nil
}

func pointersTo(fds []int) []*int {
	ps := make([]*int, len(fds))
	for i := range fds {
		ps[i] = &fds[i]
	}
	return ps
}

// take opens n's file for reading, leases it and watches it.
func (w *leaseWatch) take(n *node) (*leased, error) {
	fd, err := unix.OpenByHandleAt(w.s.mountFd, n.kh, unix.O_RDONLY|unix.O_CLOEXEC|unix.O_NOCTTY|unix.O_NONBLOCK)
	if err != nil {
		return nil, fmt.Errorf("opening a file to lease: %w", err)
	}
	fail := func(what string, err error) (*leased, error) {
		unix.Close(fd)
		return nil, fmt.Errorf("%s: %w", what, err)
	}
	// The signal first: the lease may break as soon as it is taken.
	if _, err := unix.FcntlInt(uintptr(fd), unix.F_SETSIG, int(leaseSignal)); err != nil {
		return fail("F_SETSIG", err)
	}
	if _, err := unix.FcntlInt(uintptr(fd), unix.F_SETLEASE, unix.F_RDLCK); err != nil {
		return fail("F_SETLEASE", err)
	}
	// To the process, not the thread that took it (which may end).
	if _, err := unix.FcntlInt(uintptr(fd), unix.F_SETOWN, os.Getpid()); err != nil {
		return fail("F_SETOWN", err)
	}
	wd, err := unix.InotifyAddWatch(w.inFd, procFdPath(fd),
		unix.IN_MODIFY|unix.IN_ATTRIB|unix.IN_MOVE_SELF|unix.IN_DELETE_SELF)
	if err != nil {
		return fail("inotify_add_watch", err)
	}
	w.byWD[int32(wd)] = n.key
	return &leased{fd: fd, wd: int32(wd)}, nil
}

// releaseLocked lets the lease go (a local writer waiting for it goes
// ahead) and stops watching the file.
func (w *leaseWatch) releaseLocked(key string, l *leased) {
	unix.InotifyRmWatch(w.inFd, uint32(l.wd))
	delete(w.byWD, l.wd)
	if l.write {
		// The node's descriptors share the leased open file: closing
		// this one alone would leave the lease.
		unix.FcntlInt(uintptr(l.fd), unix.F_SETLEASE, unix.F_UNLCK)
	}
	unix.Close(l.fd) // releases a read lease
	delete(w.files, key)
	w.count.Add(-1)
}

// scan recalls the delegations of files whose lease is breaking or which
// changed locally, revoking them if they are not back in time (v4state's
// RecallAll), and releases the leases no delegation needs any more.
func (w *leaseWatch) scan() {
	if w == nil {
		return
	}
	var recalls []v4state.Recall
	now := w.s.now()
	w.mu.Lock()
	for key, l := range w.files {
		if !l.dir {
			w.forgetSelfLocked(l)
		}
		if l.dir {
			w.forgetExpectsLocked(l)
		} else if !l.broken && !leaseIntact(l.fd, l.leaseType()) {
			l.broken = true
		}
		if l.dir && len(l.localDirty) > 0 && !l.broken {
			recalls = append(recalls, w.localDirChangeLocked(key, l)...)
		}
		if l.dir && l.children && !l.broken {
			l.children = false
			recalls = append(recalls, w.s.v4.state.RecallChildren(key, w.s.v4.state.Lease())...)
			w.localAttrsLocked(key, l)
		}
		if l.broken {
			if l.brokenAt.IsZero() {
				l.brokenAt = now
			}
			// A local change of a directory has happened already:
			// its holders get a lease to return the delegation.
			within := w.within
			if l.dir {
				within = w.s.v4.state.Lease()
			}
			r, held := w.s.v4.state.RecallAll(key, within)
			recalls = append(recalls, r...)
			if !held && !w.holdForWriterLocked(key, l, now) {
				w.releaseLocked(key, l)
			}
		} else if !w.s.v4.state.Delegated(key) {
			w.releaseLocked(key, l)
		}
	}
	w.mu.Unlock()
	w.s.sendRecalls(recalls)
}

// changing is told that the server is about to change the file key for an
// NFS client, other clients' delegations being gone: the lease goes first
// (the server's own open for writing would break it and fail), and a
// delegation the changing client holds itself, no longer backed by a
// lease, is recalled, not waited for.
func (w *leaseWatch) changing(key string) {
	if !w.held() {
		return
	}
	w.mu.Lock()
	l := w.files[key]
	if l != nil && l.dir {
		// A directory's watch is no lease the server's change could
		// break: the watch sees the change (an attribute's, expected
		// if the holder makes it).
		w.mu.Unlock()
		return
	}
	if l != nil && l.write && !l.broken && w.s.v4.state.Delegated(key) {
		// The holder of the write delegation changes the file through
		// the leased descriptor: the lease stays.
		w.mu.Unlock()
		return
	}
	if l != nil {
		w.releaseLocked(key, l)
	}
	w.mu.Unlock()
	if l != nil {
		recalls, _ := w.s.v4.state.RecallAll(key, w.s.v4.state.Lease())
		w.s.sendRecalls(recalls)
	}
}

// readEvents marks the leased files inotify reports changed (renamed,
// unlinked, linked, attributes) for recall.
func (w *leaseWatch) readEvents() {
	defer w.wg.Done()
	buf := make([]byte, 64<<10)
	for {
		n, err := w.in.Read(buf)
		if err != nil {
			if !errors.Is(err, os.ErrClosed) {
				w.s.logf("hushfs server: reading inotify events: %v", err)
			}
			return
		}
		w.mu.Lock()
		for off := 0; off+unix.SizeofInotifyEvent <= n; {
			wd := int32(binary.NativeEndian.Uint32(buf[off:]))
			mask := binary.NativeEndian.Uint32(buf[off+4:])
			nameLen := int(binary.NativeEndian.Uint32(buf[off+12:]))
			start := off + unix.SizeofInotifyEvent
			off = start + nameLen
			name := ""
			if nameLen > 0 && off <= n {
				// NUL-padded to an alignment.
				name = strings.TrimRight(string(buf[start:off]), "\x00")
			}
			switch {
			case mask&unix.IN_Q_OVERFLOW != 0:
				// Events were lost: any file may have changed.
				for _, l := range w.files {
					l.broken = true
				}
			case mask&unix.IN_IGNORED != 0:
			default:
				if key, ok := w.byWD[wd]; ok {
					l := w.files[key]
					if (l.dir && w.dirEvent(l, mask, name)) || (!l.dir && w.fileEvent(l, mask)) {
						l.broken = true
					}
				}
			}
		}
		w.mu.Unlock()
		w.poke()
	}
}

// retireWriter makes n's descriptor open for writing, if nothing writes
// through it now and everything written through it is synced, read-only:
// the server's own writable descriptor, kept a few seconds after an NFS
// write (and while clients keep using the file), would make the file
// unleasable. The descriptor number stays valid for readers that have it
// (dup3 replaces the open file behind it), and is closed with the node's
// other descriptors; the next write opens another.
func (s *Server) retireWriter(n *node) {
	if n.io == nil || n.unsynced() || s.hasLatched(n) {
		return
	}
	n.omu.Lock()
	defer n.omu.Unlock()
	if n.rwFd < 0 || n.writers > 0 {
		return
	}
	ro, err := unix.OpenByHandleAt(s.mountFd, n.kh, unix.O_RDONLY|unix.O_CLOEXEC|unix.O_NOCTTY|unix.O_NONBLOCK)
	if err != nil {
		return
	}
	// Every descriptor sharing the written open file: a write lease
	// (takeWrite) made the node's read descriptors that open file too.
	for _, p := range append([]*int{&n.rwFd, &n.rdFd}, pointersTo(n.retired)...) {
		if *p >= 0 && err == nil {
			err = unix.Dup3(ro, *p, unix.O_CLOEXEC)
		}
	}
	unix.Close(ro)
	if err != nil {
		s.logf("hushfs server: making the written descriptor of inode %d read-only: %v", n.ino, err)
		return
	}
	if n.rdFd < 0 {
		n.rdFd = n.rwFd
	} else {
		n.retired = append(n.retired, n.rwFd)
	}
	n.rwFd = -1
	n.io.descriptorsClosed() // advice was given to the open file replaced
}
