package server

import (
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"

	"golang.org/x/sys/unix"
)

// The data path of READ, WRITE and COMMIT: the system calls it makes (behind
// fileIO, so tests can make them fail), readahead and early write-back
// driven by seqTracker, and the write-back error latch.
//
// Write-back errors. An UNSTABLE WRITE is acknowledged before its data is on
// disk; if writing it back fails later, the error must reach a client, and
// Linux reports it once per open file description (errseq): to the first
// fsync or fdatasync on each descriptor after it (a descriptor opened later
// only if no one has seen it yet), and to only one of several concurrent
// syncs of a descriptor. So every error of a call that may
// reveal lost data (fdatasync, fsync, sync_file_range, an EIO from pwrite)
// is latched per file, keyed by its file handle so that it outlives the
// descriptor (closed when idle) and the node, and the write verifier
// changes at once, so that every client resends what it has not committed.
// The next COMMIT of the file reports the latched error, whatever its own
// fdatasync says (a later successful sync must not hide an earlier loss),
// and clears it: the COMMIT after that succeeds unless something new
// failed.

// fileIO makes the data system calls of READ, WRITE and COMMIT. Production
// servers use sysFileIO; tests install one that fails chosen calls.
type fileIO interface {
	Pread(fd int, p []byte, off int64) (int, error)
	Pwrite(fd int, p []byte, off int64) (int, error)
	Fdatasync(fd int) error
	Fsync(fd int) error
	// SyncFileRange is sync_file_range(2); the server only ever passes
	// SYNC_FILE_RANGE_WRITE (start write-back, never wait).
	SyncFileRange(fd int, off, n int64, flags int) error
	// Fadvise is posix_fadvise(2).
	Fadvise(fd int, off, n int64, advice int) error
	// Syncfs is syncfs(2), for metadata of objects that cannot be opened
	// (durable.go).
	Syncfs(fd int) error
}

// sysFileIO is fileIO by direct system calls.
type sysFileIO struct{}

func (sysFileIO) Pread(fd int, p []byte, off int64) (int, error)  { return unix.Pread(fd, p, off) }
func (sysFileIO) Pwrite(fd int, p []byte, off int64) (int, error) { return unix.Pwrite(fd, p, off) }
func (sysFileIO) Fdatasync(fd int) error                          { return unix.Fdatasync(fd) }
func (sysFileIO) Fsync(fd int) error                              { return unix.Fsync(fd) }
func (sysFileIO) SyncFileRange(fd int, off, n int64, flags int) error {
	return unix.SyncFileRange(fd, off, n, flags)
}
func (sysFileIO) Fadvise(fd int, off, n int64, advice int) error {
	return unix.Fadvise(fd, off, n, advice)
}
func (sysFileIO) Syncfs(fd int) error { return unix.Syncfs(fd) }

// ioOptions tunes the data path (Config.io; only tests and benchmarks set
// it).
type ioOptions struct {
	files       fileIO      // nil: sysFileIO
	noReadahead bool        // no READ readahead nor access hints
	noCluster   bool        // no early write-back of sequential UNSTABLE writes
	kernelRA    uint64      // the kernel's readahead window in bytes; 0: the export's device's
	policy      *syncPolicy // what makes metadata durable; nil: detected (durable.go)
}

// Data path tuning.
const (
	// maxReadahead bounds the readahead window of a sequential READ stream.
	maxReadahead = 8 << 20
	// defaultKernelRA is the kernel's usual readahead window, assumed when
	// the export's device does not tell.
	defaultKernelRA = 128 << 10
	// raStep is the least readahead issued at once, so that a stream of
	// small READs costs one fadvise per step rather than one per READ.
	raStep = 1 << 20
	// clusterChunk is the granularity of early write-back: ranges are
	// aligned to it and at least this large, so the disk sees big writes.
	clusterChunk = 4 << 20
	// maxLatched bounds the latched write-back errors. Past it the oldest
	// is dropped: its clients still resend, as the verifier changed when
	// it was latched, but its COMMIT no longer fails.
	maxLatched = 4096
)

// ioState is the server's part of the data path.
type ioState struct {
	files     fileIO
	readahead bool
	cluster   bool
	kernelRA  uint64      // the kernel's own readahead window for the export
	policy    *syncPolicy // set by tests to replace the detected one

	mu      sync.Mutex
	closing bool             // no new background goroutines
	latched map[string]error // unreported write-back errors by file handle
	order   []string         // latched keys, oldest first (for maxLatched)

	workers sync.WaitGroup // background goroutines
}

// initIO sets up the data path; New calls it once the node cache exists.
func (s *Server) initIO(o ioOptions) {
	s.io = ioState{
		files:     o.files,
		readahead: !o.noReadahead,
		cluster:   !o.noCluster,
		latched:   make(map[string]error),
		kernelRA:  o.kernelRA,
		policy:    o.policy,
	}
	if s.io.files == nil {
		s.io.files = sysFileIO{}
	}
	if s.io.kernelRA == 0 {
		s.io.kernelRA = defaultKernelRA
		var st unix.Stat_t
		if unix.Stat(s.root, &st) == nil {
			s.io.kernelRA = kernelReadahead(st.Dev)
		}
	}
	s.cache.flush = s.flushIdle
}

// shutdownIO waits for the background goroutines to finish; Close calls
// it before closing the descriptors.
func (s *Server) shutdownIO() {
	s.io.mu.Lock()
	s.io.closing = true
	s.io.mu.Unlock()
	s.io.workers.Wait()
}

// fileState is the data-path state of a regular file's node.
type fileState struct {
	mu sync.Mutex // guards the fields up to syncMu
	rd seqTracker // the READ stream; its runs' marks: readahead issued up to
	wr seqTracker // the WRITE stream; its runs' marks: write-back started up to

	adviceFd int // the descriptor advice applies to (-1: none)
	advice   int // FADV_NORMAL or FADV_RANDOM
	// Work for the file's background goroutine, oldest first: ranges to
	// read ahead and ranges to write back early; and whether it runs.
	// Neither is done on the request's path: a READ or WRITE replies
	// without waiting for page allocation and I/O submission.
	raQ, flushQ []byteRange
	working     bool

	// Syncs (fdatasync, fsync, sync_file_range) run under the read lock
	// and latch their error before releasing it; taking the write lock
	// after one's own sync is a barrier: every sync that overlapped it has
	// then recorded its outcome. Needed because the kernel reports a
	// write-back error to only one of several concurrent syncs of a
	// descriptor, and the others must not then reply success.
	syncMu sync.RWMutex
	// dirtyGen counts WRITEs that wrote data; syncedGen is the highest
	// count a successful (or latched-failed) sync covered. The file holds
	// acknowledged but unsynced data while dirtyGen > syncedGen.
	dirtyGen  atomic.Uint64
	syncedGen atomic.Uint64
	// errSeq counts latched errors of the file.
	errSeq atomic.Uint64
}

type byteRange struct{ off, end uint64 }

// maxQueued bounds each queue of background work; past it new ranges are
// dropped (they only make things faster: a READ reads what is not read
// ahead, COMMIT syncs what was not written back early).
const maxQueued = 16

// enqueueLocked adds r to *q, merged into the last range if contiguous,
// and reports whether the background goroutine must start. Called with mu
// held.
func (fs *fileState) enqueueLocked(q *[]byteRange, r byteRange) (start bool) {
	switch l := len(*q); {
	case l > 0 && (*q)[l-1].end == r.off:
		(*q)[l-1].end = r.end
	case l < maxQueued:
		*q = append(*q, r)
	}
	if fs.working {
		return false // the running goroutine picks it up
	}
	fs.working = true
	return true
}

// nextJob returns the next range for the background goroutine, readahead
// first (a READ may be about to wait for it), or ok false when there is
// nothing left to do: the goroutine must then stop.
func (fs *fileState) nextJob() (r byteRange, flush, ok bool) {
	fs.mu.Lock()
	defer fs.mu.Unlock()
	for _, q := range []*[]byteRange{&fs.raQ, &fs.flushQ} {
		if len(*q) > 0 {
			r, *q = (*q)[0], (*q)[1:]
			return r, q == &fs.flushQ, true
		}
	}
	fs.working = false
	return r, false, false
}

func newFileState() *fileState { return &fileState{adviceFd: -1, advice: unix.FADV_NORMAL} }

// unsynced reports whether data written since the last sync may not be on
// disk yet.
func (fs *fileState) unsynced() bool { return fs.dirtyGen.Load() > fs.syncedGen.Load() }

func (fs *fileState) markSynced(gen uint64) {
	for {
		cur := fs.syncedGen.Load()
		if cur >= gen || fs.syncedGen.CompareAndSwap(cur, gen) {
			return
		}
	}
}

// descriptorsClosed forgets the advice given on descriptors now closed.
func (fs *fileState) descriptorsClosed() {
	fs.mu.Lock()
	fs.adviceFd, fs.advice = -1, unix.FADV_NORMAL
	fs.mu.Unlock()
}

// planRead records a READ of count bytes at off on fd (the file being size
// bytes long; the kernel's readahead window kernelRA). A random stream gets
// FADV_RANDOM, so the kernel stops reading ahead around each request; a
// sequential one gets FADV_NORMAL back and, if it deserves a larger window
// than the kernel's (its score, up to maxReadahead), the window beyond its
// front is queued for readahead. The kernel's own readahead, when large
// enough, is the better one: it reads asynchronously as the reader reaches
// marked pages, at no cost to us, while pages we read ahead carry no such
// mark and leave the stream to us. (FADV_SEQUENTIAL, which doubles the
// kernel's window, made concurrent readers slower in our measurements: the
// larger readahead runs in the readers' preads.) It returns the range
// queued (empty: none), whether the background goroutine must start, and
// the advice to give fd now (-1: none).
func (fs *fileState) planRead(fd int, off, count, size, kernelRA uint64) (ra byteRange, start bool, advice int) {
	fs.mu.Lock()
	defer fs.mu.Unlock()
	v := fs.rd.observe(off, count)
	advice = -1
	cur := unix.FADV_NORMAL
	if fs.adviceFd == fd {
		cur = fs.advice
	}
	want := cur
	switch {
	case v.sequential():
		want = unix.FADV_NORMAL
	case v.class == seqRandom:
		want = unix.FADV_RANDOM
	}
	if want != cur {
		advice = want
	}
	fs.adviceFd, fs.advice = fd, want
	if !v.sequential() {
		return ra, false, advice
	}
	window := min(v.score, maxReadahead)
	if window <= kernelRA {
		return ra, false, advice
	}
	from := max(v.run.mark, v.run.front)
	to := min(v.run.front+window, size)
	if to <= from || (to-from < raStep && to < size) {
		return ra, false, advice
	}
	fs.rd.setMark(to)
	ra = byteRange{from, to}
	return ra, fs.enqueueLocked(&fs.raQ, ra), advice
}

// planWrite records a WRITE of count bytes at off. For an UNSTABLE write of
// a sequential stream, it queues early write-back of the chunks behind the
// write front that reordered requests will no longer fill (the front minus
// the reordering window), and reports whether the background goroutine
// must start.
func (fs *fileState) planWrite(off, count uint64, unstable bool) (start bool) {
	fs.mu.Lock()
	defer fs.mu.Unlock()
	v := fs.wr.observe(off, count)
	if !unstable || !v.sequential() {
		return false
	}
	from := max(v.run.mark, v.run.start/clusterChunk*clusterChunk)
	lag := uint64(seqReorderK) * max(count, seqMinReq)
	if v.run.front <= lag {
		return false
	}
	to := (v.run.front - lag) / clusterChunk * clusterChunk
	if to < from+clusterChunk {
		return false
	}
	fs.wr.setMark(to)
	return fs.enqueueLocked(&fs.flushQ, byteRange{from, to})
}

// readAhead acts on a READ of count bytes at off from fd, the file being
// size bytes long: access advice now, readahead in the background, as
// planRead decides. It never fails the READ: a refused hint only costs
// speed.
func (s *Server) readAhead(n *node, fd int, off, count uint64, size int64) {
	if !s.io.readahead || n.io == nil || size <= 0 {
		return
	}
	_, start, advice := n.io.planRead(fd, off, count, uint64(size), s.io.kernelRA)
	if advice >= 0 {
		if err := s.io.files.Fadvise(fd, 0, 0, advice); err != nil {
			s.logf("hushfs server: fadvise(%d) of inode %d: %v", advice, n.ino, err)
		}
	}
	if start {
		s.startBackground(n)
	}
}

// wrote accounts for a WRITE of count bytes at off that wrote data; for an
// UNSTABLE one of a sequential stream it may start early write-back in the
// background.
func (s *Server) wrote(n *node, off, count uint64, unstable bool) {
	n.io.dirtyGen.Add(1)
	if s.io.cluster && n.io.planWrite(off, count, unstable) {
		s.startBackground(n)
	}
}

// startBackground starts n's background goroutine, which the caller has
// found not running (and marked running).
func (s *Server) startBackground(n *node) {
	s.io.mu.Lock()
	if s.io.closing {
		s.io.mu.Unlock()
		n.io.mu.Lock()
		n.io.working, n.io.raQ, n.io.flushQ = false, nil, nil
		n.io.mu.Unlock()
		return
	}
	s.io.workers.Add(1)
	s.io.mu.Unlock()
	// The goroutine's own reference keeps the node's descriptors open.
	s.cache.ref(n)
	go s.background(n)
}

// background does n's queued readahead and early write-back until none is
// left. It never waits for the I/O it starts: READs find the pages read or
// being read, COMMIT finds less dirty data. A write-back failure is
// latched for the COMMIT to report.
func (s *Server) background(n *node) {
	defer s.io.workers.Done()
	defer s.cache.release(n)
	for {
		r, flush, ok := n.io.nextJob()
		if !ok {
			return
		}
		// The descriptor the READ or WRITE that queued the work used,
		// still open.
		fd, err := s.ioFd(n, flush)
		if err != nil {
			s.logf("hushfs server: background I/O of inode %d: %v", n.ino, err)
			continue
		}
		if !flush {
			// WILLNEED starts reading the range into the page cache
			// and returns.
			if err := s.io.files.Fadvise(fd, int64(r.off), int64(r.end-r.off), unix.FADV_WILLNEED); err != nil {
				s.logf("hushfs server: readahead of inode %d: %v", n.ino, err)
			}
			continue
		}
		n.io.syncMu.RLock()
		err = s.io.files.SyncFileRange(fd, int64(r.off), int64(r.end-r.off), unix.SYNC_FILE_RANGE_WRITE)
		if err != nil && !errors.Is(err, unix.EINTR) {
			s.latch(n, "early write-back (sync_file_range)", err)
		}
		n.io.syncMu.RUnlock()
	}
}

// syncFile runs fdatasync (full: fsync) on fd, a descriptor of n's file,
// latching a failure. It fails if its own sync failed, or if another sync
// that overlapped it latched an error: the kernel reports an error to one
// of them only, and the data this one was to make durable may be what was
// lost. A failed sync still counts as covering the writes before it: its
// error is latched, and the kernel has dropped the data it could not write.
func (s *Server) syncFile(n *node, fd int, full bool) error {
	fs := n.io
	fs.syncMu.RLock()
	seq := fs.errSeq.Load()
	gen := fs.dirtyGen.Load()
	var err error
	if full {
		err = s.io.files.Fsync(fd)
	} else {
		err = s.io.files.Fdatasync(fd)
	}
	if err != nil {
		err = s.latch(n, "sync", err)
	}
	fs.markSynced(gen)
	fs.syncMu.RUnlock()
	// The barrier: every sync that overlapped ours has latched its error.
	fs.syncMu.Lock()
	fs.syncMu.Unlock() //nolint:staticcheck // an empty critical section is the point

	if err != nil {
		return err
	}
	if fs.errSeq.Load() != seq {
		return s.peekLatched(n)
	}
	return nil
}

// commitFile serves COMMIT for n: it makes every WRITE acknowledged so far
// durable, data and size, and reports (once) a latched write-back error.
//
// The range a COMMIT names does not narrow the sync: sync_file_range
// neither writes the metadata an extending write changed (the size) nor
// flushes the disk's write cache, so only fdatasync of the whole file makes
// the range durable, even where early write-back already wrote it out.
// What COMMIT does skip is a sync with nothing to do: when every WRITE
// that wrote data was followed by a successful sync (another client's
// COMMIT, a stable WRITE, the idle sweep's flush) and no error is latched,
// everything acknowledged is already on disk. Not with Config.Async, whose
// SETATTRs are not synced and have always been made durable by the next
// COMMIT.
func (s *Server) commitFile(n *node) error {
	fs := n.io
	// The barrier first: a sync that succeeded proves nothing while an
	// overlapping one may still be about to latch the error the kernel
	// gave it instead. After it, syncedGen covers only syncs whose errors
	// (theirs or an overlapping one's) are latched.
	fs.syncMu.Lock()
	clean := !fs.unsynced()
	fs.syncMu.Unlock()
	if !s.async && clean && !s.hasLatched(n) {
		return nil
	}
	fd, err := s.ioFd(n, false)
	if err != nil {
		return err
	}
	err = s.syncFile(n, fd, false)
	if lerr := s.takeLatched(n); lerr != nil {
		return lerr
	}
	return err
}

// flushIdle makes an idle node's unsynced data durable before the sweep
// closes its descriptors: the kernel reports a write-back error to syncs of
// the descriptor it happened on (or, if no one saw it, of descriptors opened
// later), and an inode without open descriptors may leave memory and take
// the error with it. A failure is latched for the next COMMIT.
func (s *Server) flushIdle(n *node) {
	if n.io == nil {
		return
	}
	fd, err := s.ioFd(n, false)
	if err == nil {
		err = s.syncFile(n, fd, false)
	}
	if err != nil {
		s.logf("hushfs server: flushing idle inode %d: %v", n.ino, err)
	}
}

// latch records a write-back error of n's file (the first one stays until
// reported) and changes the write verifier. It returns the error, with
// context.
func (s *Server) latch(n *node, op string, err error) error {
	err = fmt.Errorf("write-back of inode %d: %s: %w", n.ino, op, err)
	s.io.mu.Lock()
	if _, dup := s.io.latched[n.key]; !dup {
		for len(s.io.order) >= maxLatched {
			delete(s.io.latched, s.io.order[0])
			s.io.order = s.io.order[1:]
		}
		s.io.latched[n.key] = err
		s.io.order = append(s.io.order, n.key)
	}
	s.io.mu.Unlock()
	n.io.errSeq.Add(1)
	s.rotateVerifier()
	s.logf("hushfs server: %v; write verifier changed", err)
	return err
}

func (s *Server) hasLatched(n *node) bool {
	s.io.mu.Lock()
	defer s.io.mu.Unlock()
	return s.io.latched[n.key] != nil
}

// peekLatched returns n's latched error without clearing it, or EIO if a
// COMMIT took it meanwhile.
func (s *Server) peekLatched(n *node) error {
	s.io.mu.Lock()
	defer s.io.mu.Unlock()
	if err := s.io.latched[n.key]; err != nil {
		return err
	}
	return fmt.Errorf("write-back of inode %d failed: %w", n.ino, unix.EIO)
}

// takeLatched returns n's latched error and clears it.
func (s *Server) takeLatched(n *node) error {
	s.io.mu.Lock()
	defer s.io.mu.Unlock()
	err := s.io.latched[n.key]
	if err != nil {
		delete(s.io.latched, n.key)
		for i, k := range s.io.order {
			if k == n.key {
				s.io.order = append(s.io.order[:i], s.io.order[i+1:]...)
				break
			}
		}
	}
	return err
}

// kernelReadahead returns the readahead window the kernel uses for files of
// the block device dev (its backing device's read_ahead_kb), or
// defaultKernelRA if it cannot tell.
func kernelReadahead(dev uint64) uint64 {
	b, err := os.ReadFile(fmt.Sprintf("/sys/class/bdi/%d:%d/read_ahead_kb", unix.Major(dev), unix.Minor(dev)))
	if err != nil {
		return defaultKernelRA
	}
	kb, err := strconv.ParseUint(strings.TrimSpace(string(b)), 10, 32)
	if err != nil {
		return defaultKernelRA
	}
	return kb << 10
}
