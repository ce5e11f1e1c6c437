package server

import (
	"bytes"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"hushfs/internal/nfs3"
)

// ioOp names a call of fileIO.
type ioOp int

const (
	opPread ioOp = iota
	opPwrite
	opFdatasync
	opFsync
	opSyncFileRange
	opFadvise
	opSyncfs
	numIOOps
)

func (o ioOp) String() string {
	return [...]string{"pread", "pwrite", "fdatasync", "fsync", "sync_file_range", "fadvise", "syncfs"}[o]
}

// faultIO is the real system calls, counted, any of which a test can make
// fail.
type faultIO struct {
	sysFileIO
	mu       sync.Mutex
	calls    [numIOOps]int
	sfrBytes int64
	willneed []int64 // offset, length pairs of FADV_WILLNEED calls
	hints    []int   // other advice given
	armed    [numIOOps][]error
	// synced lists what each fsync and syncfs was given, as the
	// descriptor's path (syncfs: "syncfs <path>"), in order.
	synced []string
	// before, if set, runs before each call with its number among the
	// calls of op (from 1); an error fails the call without making it.
	before func(op ioOp, n int) error
}

// syncedPaths returns the list of synced objects so far and clears it.
func (f *faultIO) syncedPaths() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	s := f.synced
	f.synced = nil
	return s
}

func (f *faultIO) recordSync(prefix string, fd int) {
	p, err := os.Readlink(procFdPath(fd))
	if err != nil {
		p = fmt.Sprintf("fd %d: %v", fd, err)
	}
	f.mu.Lock()
	f.synced = append(f.synced, prefix+p)
	f.mu.Unlock()
}

// failNext makes the next call of op fail with err (queued: calling it
// twice fails the next two).
func (f *faultIO) failNext(op ioOp, err error) {
	f.mu.Lock()
	f.armed[op] = append(f.armed[op], err)
	f.mu.Unlock()
}

func (f *faultIO) count(op ioOp) int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.calls[op]
}

func (f *faultIO) enter(op ioOp) error {
	f.mu.Lock()
	f.calls[op]++
	n := f.calls[op]
	before := f.before
	var err error
	if len(f.armed[op]) > 0 {
		err, f.armed[op] = f.armed[op][0], f.armed[op][1:]
	}
	f.mu.Unlock()
	if err == nil && before != nil {
		err = before(op, n)
	}
	return err
}

func (f *faultIO) Pread(fd int, p []byte, off int64) (int, error) {
	if err := f.enter(opPread); err != nil {
		return 0, err
	}
	return f.sysFileIO.Pread(fd, p, off)
}

func (f *faultIO) Pwrite(fd int, p []byte, off int64) (int, error) {
	if err := f.enter(opPwrite); err != nil {
		return 0, err
	}
	return f.sysFileIO.Pwrite(fd, p, off)
}

func (f *faultIO) Fdatasync(fd int) error {
	if err := f.enter(opFdatasync); err != nil {
		return err
	}
	return f.sysFileIO.Fdatasync(fd)
}

func (f *faultIO) Fsync(fd int) error {
	f.recordSync("", fd)
	if err := f.enter(opFsync); err != nil {
		return err
	}
	return f.sysFileIO.Fsync(fd)
}

func (f *faultIO) Syncfs(fd int) error {
	f.recordSync("syncfs ", fd)
	if err := f.enter(opSyncfs); err != nil {
		return err
	}
	return f.sysFileIO.Syncfs(fd)
}

func (f *faultIO) SyncFileRange(fd int, off, n int64, flags int) error {
	if err := f.enter(opSyncFileRange); err != nil {
		return err
	}
	f.mu.Lock()
	f.sfrBytes += n
	f.mu.Unlock()
	return f.sysFileIO.SyncFileRange(fd, off, n, flags)
}

func (f *faultIO) Fadvise(fd int, off, n int64, advice int) error {
	if err := f.enter(opFadvise); err != nil {
		return err
	}
	f.mu.Lock()
	if advice == unix.FADV_WILLNEED {
		f.willneed = append(f.willneed, off, n)
	} else {
		f.hints = append(f.hints, advice)
	}
	f.mu.Unlock()
	return f.sysFileIO.Fadvise(fd, off, n, advice)
}

// fakeClock is a settable clock for the node cache's expiry.
type fakeClock struct{ ns atomic.Int64 }

func (c *fakeClock) now() time.Time      { return time.Unix(0, c.ns.Load()) }
func (c *fakeClock) add(d time.Duration) { c.ns.Add(int64(d)) }

// startFaultEnv starts a server whose data system calls go through f.
func startFaultEnv(t *testing.T, f *faultIO, clock *fakeClock) *env {
	return startEnvTuned(t, false, func(c *Config) {
		c.io.files = f
		// The usual kernel readahead, whatever this machine's, so that
		// the server reads ahead of sequential streams.
		c.io.kernelRA = defaultKernelRA
		if clock != nil {
			c.Now = clock.now
		}
	})
}

// withNode runs fn with the server's node of fh.
func (e *env) withNode(fh nfs3.FH, fn func(n *node)) {
	e.t.Helper()
	n, err := e.srv.resolve(fh)
	if err != nil {
		e.t.Fatalf("resolve: %v", err)
	}
	defer e.srv.cache.release(n)
	fn(n)
}

// waitFlushed waits until the background work on fh (early write-back,
// readahead) is done.
func (e *env) waitFlushed(fh nfs3.FH) {
	e.t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for {
		var busy bool
		e.withNode(fh, func(n *node) {
			n.io.mu.Lock()
			busy = n.io.working
			n.io.mu.Unlock()
		})
		if !busy {
			return
		}
		if time.Now().After(deadline) {
			e.t.Fatal("early write-back did not finish")
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func (c *client) commit(fh nfs3.FH) nfs3.CommitRes {
	c.t.Helper()
	var r nfs3.CommitRes
	c.call(nfs3.ProcCommit, &nfs3.CommitArgs{File: fh}, &r)
	return r
}

func chunk(i int, size int) []byte {
	b := make([]byte, size)
	for j := range b {
		b[j] = byte(i*7 + j/4096)
	}
	return b
}

// Sequential 1 MiB UNSTABLE writes sent by 4 goroutines over 4 connections
// arrive reordered; they are still one sequential stream, written back
// early (sync_file_range) behind the front, each byte once, and the file is
// intact. A goroutine stalled long enough is a straggler far behind the
// front: random, but the stream survives it.
func TestWriteClusteringConcurrent(t *testing.T) {
	f := &faultIO{}
	e := startFaultEnv(t, f, nil)
	c0 := e.root0()
	fh := c0.mustCreate(c0.rootFH(), "seq", 0o644)
	clients := []*client{c0, e.root0(), e.root0(), e.root0()}
	const chunks = 64
	var next atomic.Int64
	var wg sync.WaitGroup
	for g := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			c := clients[g%len(clients)]
			for {
				i := int(next.Add(1) - 1)
				if i >= chunks {
					return
				}
				if r := c.write(fh, uint64(i)*mib, chunk(i, mib), nfs3.Unstable); r.Status != nfs3.OK {
					t.Errorf("WRITE %d: %v", i, r.Status)
					return
				}
			}
		}()
	}
	wg.Wait()
	e.waitFlushed(fh)
	e.withNode(fh, func(n *node) {
		n.io.mu.Lock()
		defer n.io.mu.Unlock()
		w := &n.io.wr
		t.Logf("score %d MiB; in order %d, reordered %d, random %d, repeat %d; sync_file_range %d calls, %d MiB",
			w.score/mib, w.count(seqInOrder), w.count(seqReordered), w.count(seqRandom), w.count(seqRepeat),
			f.count(opSyncFileRange), f.sfrBytes/mib)
		front := max(w.cur.front, w.prev.front)
		if w.score < 16*mib || w.count(seqRandom) > 3 || front != chunks*mib {
			t.Errorf("not classified sequential: score %d, %d random, front %d", w.score, w.count(seqRandom), front)
		}
	})
	// At least all but the reordering window behind the front; at most
	// the file (each byte once). How much of the window is covered too
	// depends on how the goroutines' writes interleaved.
	lag := uint64(seqReorderK) * mib
	if got, least := f.sfrBytes, int64((chunks*mib-lag)/clusterChunk*clusterChunk); f.count(opSyncFileRange) == 0 || got < least || got > chunks*mib {
		t.Errorf("early write-back covered %d bytes, want %d to %d", got, least, chunks*mib)
	}
	if r := c0.commit(fh); r.Status != nfs3.OK {
		t.Fatalf("COMMIT: %v", r.Status)
	}
	got, err := os.ReadFile(filepath.Join(e.root, "seq"))
	if err != nil {
		t.Fatal(err)
	}
	for i := range chunks {
		if !bytes.Equal(got[i*mib:(i+1)*mib], chunk(i, mib)) {
			t.Fatalf("chunk %d differs", i)
		}
	}
}

// The same writes, one at a time in an order shuffled within windows of 4:
// nothing is random, some are reordered, write-back starts early. Random
// offsets over 1 GiB are not sequential and start no write-back.
func TestWriteClusteringShuffledAndRandom(t *testing.T) {
	f := &faultIO{}
	e := startFaultEnv(t, f, nil)
	c := e.root0()
	root := c.rootFH()
	fh := c.mustCreate(root, "shuffled", 0o644)
	rng := rand.New(rand.NewPCG(11, 12))
	for _, off := range shuffledChunks(rng, 48, 4, mib) {
		if r := c.write(fh, off, chunk(int(off/mib), mib), nfs3.Unstable); r.Status != nfs3.OK {
			t.Fatalf("WRITE: %v", r.Status)
		}
	}
	e.waitFlushed(fh)
	e.withNode(fh, func(n *node) {
		n.io.mu.Lock()
		defer n.io.mu.Unlock()
		w := &n.io.wr
		if w.count(seqRandom) != 0 || w.count(seqReordered) == 0 || w.score != 48*mib {
			t.Errorf("shuffled: %d random, %d reordered, score %d", w.count(seqRandom), w.count(seqReordered), w.score)
		}
	})
	if f.count(opSyncFileRange) == 0 {
		t.Error("no early write-back for shuffled sequential writes")
	}

	sfr := f.count(opSyncFileRange)
	fh2 := c.mustCreate(root, "random", 0o644)
	for i, slot := range rng.Perm(1024)[:64] {
		if r := c.write(fh2, uint64(slot)*mib, chunk(i, mib), nfs3.Unstable); r.Status != nfs3.OK {
			t.Fatalf("WRITE: %v", r.Status)
		}
	}
	e.withNode(fh2, func(n *node) {
		n.io.mu.Lock()
		defer n.io.mu.Unlock()
		w := &n.io.wr
		if w.score >= seqThreshold || w.count(seqRandom) < 60 {
			t.Errorf("random: score %d, %d of 64 random", w.score, w.count(seqRandom))
		}
	})
	if got := f.count(opSyncFileRange); got != sfr {
		t.Errorf("random writes made %d sync_file_range calls", got-sfr)
	}
	if r := c.commit(fh2); r.Status != nfs3.OK {
		t.Fatalf("COMMIT: %v", r.Status)
	}
}

// A write-back error seen by COMMIT's fdatasync fails that COMMIT with
// NFS3ERR_IO and changes the verifier; it is reported once: a later WRITE
// and COMMIT succeed.
func TestCommitWritebackErrorOnce(t *testing.T) {
	f := &faultIO{}
	e := startFaultEnv(t, f, nil)
	c := e.root0()
	fh := c.mustCreate(c.rootFH(), "f", 0o644)
	w := c.write(fh, 0, []byte("lost"), nfs3.Unstable)
	if w.Status != nfs3.OK {
		t.Fatalf("WRITE: %v", w.Status)
	}
	f.failNext(opFdatasync, unix.EIO)
	r := c.commit(fh)
	wantStatus(t, "COMMIT after a failed write-back", r.Status, nfs3.ErrIO)
	if v := e.srv.WriteVerifier(); v == w.Verf {
		t.Fatal("verifier unchanged after a write-back error")
	}
	w2 := c.write(fh, 0, []byte("kept"), nfs3.Unstable)
	if w2.Status != nfs3.OK || w2.Verf == w.Verf {
		t.Fatalf("WRITE after: %v verf %x (before %x)", w2.Status, w2.Verf, w.Verf)
	}
	n := f.count(opFdatasync)
	r = c.commit(fh)
	if r.Status != nfs3.OK || r.Verf != w2.Verf {
		t.Fatalf("second COMMIT: %v verf %x, want OK %x", r.Status, r.Verf, w2.Verf)
	}
	if f.count(opFdatasync) != n+1 {
		t.Fatal("second COMMIT did not sync")
	}
	// Nothing written since: the next COMMIT has nothing to sync.
	if r := c.commit(fh); r.Status != nfs3.OK || r.Verf != w2.Verf || f.count(opFdatasync) != n+1 {
		t.Fatalf("third COMMIT: %v, %d syncs", r.Status, f.count(opFdatasync)-n-1)
	}
}

// An error of the early write-back (sync_file_range) is latched: a later
// successful WRITE and COMMIT's successful fdatasync do not hide it; the
// COMMIT after succeeds.
func TestCommitReportsEarlyWritebackError(t *testing.T) {
	f := &faultIO{}
	e := startFaultEnv(t, f, nil)
	c := e.root0()
	fh := c.mustCreate(c.rootFH(), "f", 0o644)
	f.failNext(opSyncFileRange, unix.EIO)
	first := c.write(fh, 0, chunk(0, mib), nfs3.Unstable)
	for i := 1; i < 24; i++ {
		if r := c.write(fh, uint64(i)*mib, chunk(i, mib), nfs3.Unstable); r.Status != nfs3.OK {
			t.Fatalf("WRITE %d: %v", i, r.Status)
		}
	}
	e.waitFlushed(fh)
	if f.count(opSyncFileRange) == 0 {
		t.Fatal("no early write-back happened")
	}
	w := c.write(fh, 24*mib, chunk(24, mib), nfs3.Unstable)
	if w.Status != nfs3.OK {
		t.Fatalf("WRITE after the error: %v", w.Status)
	}
	if w.Verf == first.Verf {
		t.Fatal("verifier unchanged after the early write-back failed")
	}
	syncs := f.count(opFdatasync)
	wantStatus(t, "COMMIT", c.commit(fh).Status, nfs3.ErrIO)
	if f.count(opFdatasync) != syncs+1 {
		t.Fatal("COMMIT did not sync")
	}
	if r := c.commit(fh); r.Status != nfs3.OK || r.Verf != w.Verf {
		t.Fatalf("next COMMIT: %v verf %x want %x", r.Status, r.Verf, w.Verf)
	}
}

// The idle sweep syncs a descriptor holding unsynced data before closing
// it; an error of that sync is reported by the next COMMIT, once.
func TestSweepLatchesWritebackError(t *testing.T) {
	f := &faultIO{}
	clock := &fakeClock{}
	clock.ns.Store(time.Now().UnixNano())
	e := startFaultEnv(t, f, clock)
	c := e.root0()
	root := c.rootFH()
	fh := c.mustCreate(root, "f", 0o644)
	if r := c.write(fh, 0, []byte("unsynced"), nfs3.Unstable); r.Status != nfs3.OK {
		t.Fatalf("WRITE: %v", r.Status)
	}
	f.failNext(opFdatasync, unix.EIO)
	syncs := f.count(opFdatasync)
	clock.add(2 * defaultOpenIdle)
	e.sweepUntilClosed(fh)
	if f.count(opFdatasync) != syncs+1 {
		t.Fatalf("the sweep made %d syncs, want 1", f.count(opFdatasync)-syncs)
	}
	wantStatus(t, "COMMIT after the sweep's sync failed", c.commit(fh).Status, nfs3.ErrIO)
	wantStatus(t, "next COMMIT", c.commit(fh).Status, nfs3.OK)

	// Without an error the sweep's sync makes the data durable: COMMIT
	// finds nothing to do.
	if r := c.write(fh, 0, []byte("synced"), nfs3.Unstable); r.Status != nfs3.OK {
		t.Fatalf("WRITE: %v", r.Status)
	}
	syncs = f.count(opFdatasync)
	clock.add(2 * defaultOpenIdle)
	e.sweepUntilClosed(fh)
	if f.count(opFdatasync) != syncs+1 {
		t.Fatalf("the sweep made %d syncs, want 1", f.count(opFdatasync)-syncs)
	}
	if r := c.commit(fh); r.Status != nfs3.OK || f.count(opFdatasync) != syncs+1 {
		t.Fatalf("COMMIT after a clean sweep: %v, %d syncs", r.Status, f.count(opFdatasync)-syncs-1)
	}
}

// sweepUntilClosed sweeps the node cache (as the sweeper goroutine also
// does) until fh's node has no unsynced data and no I/O descriptor open.
// It looks at the node without using it, which would make it busy again.
func (e *env) sweepUntilClosed(fh nfs3.FH) {
	e.t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		e.srv.cache.sweep()
		c := e.srv.cache
		c.mu.Lock()
		n := c.byKey[string(fh)]
		var open, unsynced bool
		if n != nil {
			n.omu.Lock()
			open, unsynced = n.rdFd >= 0 || n.rwFd >= 0, n.unsynced()
			n.omu.Unlock()
		}
		c.mu.Unlock()
		switch {
		case n == nil:
			e.t.Fatal("node evicted")
		case !open && !unsynced:
			return
		case time.Now().After(deadline):
			e.t.Fatalf("sweep: descriptors still open (%v) or data unsynced (%v)", open, unsynced)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// Two syncs overlap; the kernel reports the error to one only (here: the
// COMMIT's fdatasync fails, the FILE_SYNC WRITE's succeeds). Neither may
// reply success: the stable WRITE waits for the COMMIT's outcome.
func TestOverlappingSyncsBothFail(t *testing.T) {
	f := &faultIO{}
	e := startFaultEnv(t, f, nil)
	c1, c2 := e.root0(), e.root0()
	fh := c1.mustCreate(c1.rootFH(), "f", 0o644)
	if r := c1.write(fh, 0, []byte("one"), nfs3.Unstable); r.Status != nfs3.OK {
		t.Fatalf("WRITE: %v", r.Status)
	}
	entered := make(chan int, 2)
	release := make(chan struct{})
	f.mu.Lock()
	f.before = func(op ioOp, n int) error {
		if op != opFdatasync && op != opFsync {
			return nil
		}
		entered <- int(op)
		if op == opFdatasync {
			<-release
			return unix.EIO
		}
		return nil
	}
	f.mu.Unlock()
	commitDone := make(chan nfs3.CommitRes, 1)
	go func() { commitDone <- c1.commit(fh) }()
	if op := <-entered; op != int(opFdatasync) {
		t.Fatalf("first sync is %v", ioOp(op))
	}
	writeDone := make(chan nfs3.WriteRes, 1)
	go func() { writeDone <- c2.write(fh, 100, []byte("two"), nfs3.FileSync) }()
	if op := <-entered; op != int(opFsync) {
		t.Fatalf("second sync is %v", ioOp(op))
	}
	select {
	case w := <-writeDone:
		t.Fatalf("FILE_SYNC WRITE replied (%v) while an overlapping sync was pending", w.Status)
	case <-time.After(200 * time.Millisecond):
	}
	close(release)
	wantStatus(t, "COMMIT", (<-commitDone).Status, nfs3.ErrIO)
	wantStatus(t, "overlapping FILE_SYNC WRITE", (<-writeDone).Status, nfs3.ErrIO)
	f.mu.Lock()
	f.before = nil
	f.mu.Unlock()
	wantStatus(t, "next COMMIT", c1.commit(fh).Status, nfs3.OK)
}

// Sequential READs (shuffled within windows of 4) are read ahead
// (FADV_WILLNEED just beyond the front, contiguous, up to the end of the
// file); random ones get FADV_RANDOM and no readahead. The data read is
// right either way.
func TestReadahead(t *testing.T) {
	f := &faultIO{}
	e := startFaultEnv(t, f, nil)
	c := e.root0()
	root := c.rootFH()
	const size = 40 * mib
	want := make([]byte, size)
	for i := range size / mib {
		copy(want[i*mib:], chunk(i, mib))
	}
	if err := os.WriteFile(filepath.Join(e.root, "big"), want, 0o644); err != nil {
		t.Fatal(err)
	}
	fh := c.mustLookup(root, "big")
	rng := rand.New(rand.NewPCG(8, 9))
	for _, off := range shuffledChunks(rng, size/mib, 4, mib) {
		r := c.read(fh, off, mib)
		if r.Status != nfs3.OK || !bytes.Equal(r.Data, want[off:off+mib]) {
			t.Fatalf("READ %d: %v, %d bytes", off, r.Status, len(r.Data))
		}
	}
	e.waitFlushed(fh)
	f.mu.Lock()
	ra := append([]int64(nil), f.willneed...)
	hints := append([]int(nil), f.hints...)
	f.mu.Unlock()
	if len(ra) == 0 || len(hints) != 0 {
		t.Fatalf("sequential READs: readahead %v, hints %v", ra, hints)
	}
	for i := 0; i+2 < len(ra); i += 2 {
		if ra[i]+ra[i+1] != ra[i+2] || ra[i+1] > maxReadahead {
			t.Fatalf("readahead ranges not contiguous: %v", ra)
		}
	}
	if end := ra[len(ra)-2] + ra[len(ra)-1]; end != size {
		t.Fatalf("readahead ended at %d, want %d", end, size)
	}

	// Random 4 KiB READs of another file.
	if err := os.WriteFile(filepath.Join(e.root, "rnd"), want, 0o644); err != nil {
		t.Fatal(err)
	}
	fh2 := c.mustLookup(root, "rnd")
	n := len(ra)
	for _, slot := range rng.Perm(size / 4096)[:100] {
		off := uint64(slot) * 4096
		if r := c.read(fh2, off, 4096); r.Status != nfs3.OK || !bytes.Equal(r.Data, want[off:off+4096]) {
			t.Fatalf("READ %d: %v", off, r.Status)
		}
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if len(f.willneed) != n || fmt.Sprint(f.hints) != fmt.Sprint([]int{unix.FADV_RANDOM}) {
		t.Fatalf("random READs: %d readahead calls, hints %v", (len(f.willneed)-n)/2, f.hints)
	}
}
