package client

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	"hushfs/internal/proto"
)

// Write-back: data written by applications is kept per file as dirty
// extents and sent as UNSTABLE WRITEs of up to wsize, many in flight, then
// made durable by one COMMIT at close, fsync or memory pressure. Only an
// application's own request for durability (O_SYNC, O_DSYNC, the sync mount
// option) makes a WRITE synchronous; a write to a region not contiguous with
// other dirty data never does. Data acknowledged UNSTABLE is kept until a
// COMMIT with the same write verifier covers it, and sent again if the
// verifier changed (the server restarted and may have lost it).

// fileState is one regular file's write-back state.
//
// Lock ordering: fileState.mu is taken after inode.mu is released; it is a
// leaf lock except for writeback.mu, which may be taken inside it.
type fileState struct {
	mu   sync.Mutex
	cond *sync.Cond // broadcast when sends complete

	// GUARDED_BY(mu)
	dirty    extents       // written here, not yet sent
	inflight []extent      // being sent; reads still see them
	unstable []uncommitted // acknowledged UNSTABLE, not yet committed
	sending  int           // chunks being sent (queued or WRITE in flight)
	queue    []queuedChunk // streamed chunks waiting for a streamer
	streams  int           // streamers running (at most rpcWindow)
	times    *heldTimes    // times set while data was pending (heldtimes.go)
	err      error         // last write-back error
	errSeq   uint64        // count of write-back errors; descriptors compare with it
	cred     Cred          // credential write-back is done with: the last writer's

	// clean is data the server acknowledged: equal to the server's copy
	// while the node's dataGen is still cleanGen. Reads of it send nothing.
	clean      extents
	cleanGen   uint64
	dirtySince time.Time // when dirty last went from empty to not (dirty-age flush)
	// A write verifier that never settles: once maxCommitRetries resends
	// in a row did not make the data durable, the error is reported, the
	// data stays dirty, and no durable flush sends it again before retryAt
	// (the age flusher retries then, one round at a time, each failure
	// doubling retryDelay). Zero retryDelay: not backing off.
	retryDelay time.Duration
	retryAt    time.Time
	// baseSize is the server's size before our pending writes (taken when
	// the file last went from clean to dirty, under dataGen baseGen): bytes
	// at or past it that we did not write are holes, known to be zeros.
	baseSize uint64
	baseGen  uint64
	baseOK   bool
}

// queuedChunk is a streamed chunk and the context of the write it came
// from (its origin, for the statistics).
type queuedChunk struct {
	ctx context.Context
	c   extent
}

type uncommitted struct {
	extent
	verf proto.Verf
}

// writeback holds the mount-wide write-back state.
type writeback struct {
	fs *FS

	mu   sync.Mutex
	cond *sync.Cond
	// GUARDED_BY(mu)
	bytes      uint64 // dirty + in flight + uncommitted bytes, all files
	limit      uint64 // above this, writers wait for write-back
	cleanBytes uint64 // clean (acknowledged) data kept for reading back
	files      map[*inode]bool
	stop       chan struct{} // closed at unmount: ends ageLoop
}

// cleanLimit bounds the acknowledged data kept to answer reads of what we
// wrote; beyond it, other files' clean data is dropped.
const cleanLimit = 256 << 20

// dirtyLimit bounds the memory write-back may hold; writers beyond it wait.
const dirtyLimit = 512 << 20

// maxCommitRetries bounds how often data is resent after the write verifier
// changed between WRITE and COMMIT (each change means a server restart).
const maxCommitRetries = 8

// retryMin and retryMax bound the back-off between retries of data whose
// write verifier kept changing: a server whose verifier never settles
// used to get the whole file rewritten 9 times every 5 s until unmount.
const (
	retryMin = 10 * time.Second
	retryMax = 5 * time.Minute
)

func newWriteback(fs *FS) *writeback {
	w := &writeback{fs: fs, limit: dirtyLimit, files: map[*inode]bool{}, stop: make(chan struct{})}
	w.cond = sync.NewCond(&w.mu)
	go w.ageLoop()
	return w
}

// dirtyExpire is how long written data may stay only in this client's
// memory while its file stays open: then it is sent and committed, as the
// kernel's own write-back does after dirty_expire_centisecs (30 s).
const dirtyExpire = 30 * time.Second

// ageLoop flushes files whose data has been dirty longer than dirtyExpire.
func (w *writeback) ageLoop() {
	tick := time.NewTicker(dirtyExpire / 6)
	defer tick.Stop()
	for {
		select {
		case <-w.stop:
			return
		case <-tick.C:
			w.flushAged(w.fs.life)
		}
	}
}

// flushAged sends and commits the data of every file dirty for longer than
// dirtyExpire, and the times held for as long.
func (w *writeback) flushAged(ctx context.Context) {
	now := w.fs.now()
	w.mu.Lock()
	files := make([]*inode, 0, len(w.files))
	for n := range w.files {
		files = append(files, n)
	}
	w.mu.Unlock()
	for _, n := range files {
		st := peek(n)
		if st == nil {
			continue
		}
		st.mu.Lock()
		aged := (len(st.dirty) > 0 && now.Sub(st.dirtySince) >= dirtyExpire ||
			st.times != nil && now.Sub(st.times.at) >= dirtyExpire) && !now.Before(st.retryAt)
		st.mu.Unlock()
		if aged {
			if err := w.flush(ctx, n, proto.FileSync); err != nil {
				w.fs.logf("hushfs: write-back of aged data of node %d: %v", n.id, err)
			}
		}
	}
}

// close stops the dirty-age flusher.
func (w *writeback) close() {
	select {
	case <-w.stop:
	default:
		close(w.stop)
	}
}

func (w *writeback) account(delta int64) {
	w.mu.Lock()
	w.bytes = uint64(int64(w.bytes) + delta)
	if delta < 0 {
		w.cond.Broadcast()
	}
	w.mu.Unlock()
}

// state returns n's write-back state, creating it.
func (w *writeback) state(n *inode) *fileState {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.file == nil {
		n.file = &fileState{}
		n.file.cond = sync.NewCond(&n.file.mu)
		w.mu.Lock()
		w.files[n] = true
		w.mu.Unlock()
	}
	return n.file
}

// peek returns n's write-back state if it has one.
func peek(n *inode) *fileState {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.file
}

// dirtyEnd returns the end of n's data not yet on the server, or 0.
func (w *writeback) dirtyEnd(n *inode) uint64 {
	st := peek(n)
	if st == nil {
		return 0
	}
	st.mu.Lock()
	defer st.mu.Unlock()
	end := st.dirty.lastEnd()
	for i := range st.inflight {
		end = max(end, st.inflight[i].end())
	}
	return end
}

// write records data written at off. It returns a pending write-back error
// not yet seen by this descriptor instead, so that no error is lost.
func (w *writeback) write(ctx context.Context, of *openFile, c *Cred, off uint64, p []byte, stable proto.Stable) error {
	n := of.node
	base := w.fs.dataSnapshot(n)
	st := w.state(n)
	st.mu.Lock()
	if err := of.takeErrLocked(st); err != nil {
		st.mu.Unlock()
		return err
	}
	if len(st.dirty) == 0 && len(st.inflight) == 0 && len(st.unstable) == 0 {
		st.baseSize, st.baseGen, st.baseOK = base.size, base.gen, base.fresh
	}
	if len(st.dirty) == 0 {
		st.dirtySince = w.fs.now()
	}
	st.cred = Cred{UID: c.UID, GID: c.GID, Groups: append([]uint32(nil), c.Groups...)}
	before := st.dirty.bytes()
	st.dirty = st.dirty.insert(off, p)
	st.writtenLocked()
	n.changes.Add(1) // after the data is pending: see pendingIn
	grown := int64(st.dirty.bytes()) - int64(before)
	// Stream out full wsize chunks once two are dirty back to back, so a
	// large sequential write is pipelined while the last chunk stays behind
	// for close (where a file that fits in one WRITE goes out FILE_SYNC).
	start := 0
	if stable == proto.Unstable {
		for _, c := range st.takeStreamLocked(uint64(w.fs.wsize)) {
			st.queue = append(st.queue, queuedChunk{w.fs.detach(ctx), c})
		}
		start = min(len(st.queue), rpcWindow-st.streams)
		st.streams += start
	}
	st.mu.Unlock()
	w.account(grown)
	// Write-back started for this writer is never abandoned if the writer
	// gives up: an abandoned WRITE would drop the data (see await).
	if stable != proto.Unstable {
		return w.fs.await(ctx, func(ctx context.Context) error { return w.flush(ctx, n, stable) })
	}
	for range start {
		go w.stream(n, st)
	}
	return w.throttle(ctx, n)
}

// stream is one of a file's streamers: it sends queued chunks one at a time
// until the queue is empty. Streamed chunks of all the file's writes share
// at most rpcWindow streamers, so a file's goroutines and WRITEs in flight
// stay bounded however small wsize is and however fast the writer.
func (w *writeback) stream(n *inode, st *fileState) {
	for {
		st.mu.Lock()
		if len(st.queue) == 0 {
			st.streams--
			st.mu.Unlock()
			return
		}
		q := st.queue[0]
		st.queue[0] = queuedChunk{}
		st.queue = st.queue[1:]
		st.mu.Unlock()
		w.sendOne(q.ctx, n, st, q.c, proto.Unstable)
	}
}

// takeStreamLocked detaches whole wsize chunks from the front of the dirty
// extent being appended to, leaving at least one chunk dirty.
//
// LOCKS_REQUIRED(st.mu)
func (st *fileState) takeStreamLocked(wsize uint64) []extent {
	if len(st.dirty) == 0 {
		return nil
	}
	last := &st.dirty[len(st.dirty)-1]
	full := uint64(len(last.data)) / wsize
	if full < 2 {
		return nil
	}
	take := (full - 1) * wsize
	// The chunks are a copy, not a slice of the dirty buffer: they live on
	// as unstable and clean data, and a slice would pin the whole buffer
	// (grown by append to up to twice what it holds, its remainder soon
	// copied away by the next growth) for as long as they do: kept memory
	// at about 2.5× what is counted against the limits.
	chunk := extent{off: last.off, data: slices.Clone(last.data[:take])}
	// Never two WRITEs of one range in flight: they could land in either
	// order. Overwrites of data being sent wait for the next flush.
	if len(uncovered(chunk.off, chunk.end(), st.inflight)) != 1 ||
		uncovered(chunk.off, chunk.end(), st.inflight)[0] != (interval{chunk.off, chunk.end()}) {
		return nil
	}
	last.off += take
	last.data = last.data[take:]
	out := extents{chunk}.chunks(int(wsize))
	st.inflight = append(st.inflight, out...)
	st.sending += len(out)
	return out
}

// throttle makes a writer wait while write-back holds more than its limit,
// flushing this file meanwhile so the wait ends.
func (w *writeback) throttle(ctx context.Context, n *inode) error {
	w.mu.Lock()
	over := w.bytes > w.limit
	w.mu.Unlock()
	if !over {
		return nil
	}
	return w.fs.await(ctx, func(ctx context.Context) error { return w.flush(ctx, n, proto.FileSync) })
}

// send writes chunks (already moved to st.inflight and counted in
// st.sending) with the given stability, rpcWindow at a time, and records
// the results.
func (w *writeback) send(ctx context.Context, n *inode, st *fileState, chunks []extent, stable proto.Stable) {
	inWindow(len(chunks), func(i int) { w.sendOne(ctx, n, st, chunks[i], stable) })
}

// sendOne sends one chunk, resending the remainder of a short write.
func (w *writeback) sendOne(ctx context.Context, n *inode, st *fileState, c extent, stable proto.Stable) {
	st.mu.Lock()
	cred := st.cred
	st.mu.Unlock()
	var done extents // acknowledged ranges, kept as clean data
	var err error
	var acked []uncommitted
	rest := c
	for len(rest.data) > 0 {
		count := uint32(len(rest.data))
		at := w.fs.now()
		var res proto.WriteRes
		err = w.fs.underState(ctx, n, &cred, true, func(st *proto.StateID) (error, error) {
			var err error
			if st == nil {
				res, err = w.fs.srv.Write(ctx, &cred, n.fh, rest.off, rest.data, stable)
			} else {
				res, err = w.fs.sio.WriteState(ctx, &cred, *st, n.fh, rest.off, rest.data, stable)
			}
			return res.Status, err
		})
		if err != nil {
			break
		}
		w.fs.applyWcc(n, &res.Wcc, at, true)
		if res.Status != nil {
			err = res.Status
			break
		}
		if res.Count == 0 || res.Count > count {
			err = fmt.Errorf("WRITE at %d: server wrote %d of %d bytes: %w", rest.off, res.Count, count, proto.ErrIO)
			break
		}
		ack := extent{off: rest.off, data: rest.data[:res.Count]}
		if res.Committed == proto.Unstable {
			acked = append(acked, uncommitted{extent: ack, verf: res.Verf})
		}
		done = append(done, ack)
		rest = extent{off: rest.off + uint64(res.Count), data: rest.data[res.Count:]}
	}
	gen := w.fs.dataSnapshot(n).gen
	st.mu.Lock()
	st.removeInflightLocked(c)
	st.sending--
	st.unstable = append(st.unstable, acked...)
	for _, d := range done {
		w.addCleanLocked(st, gen, d)
	}
	defer w.evictClean(st)
	var requeued uint64
	switch {
	case err == nil:
	case errors.Is(err, context.Canceled), errors.Is(err, context.DeadlineExceeded):
		// The caller gave up, the server did not fail: what was not
		// acknowledged is dirty again, for the next flush. Never dropped.
		if len(rest.data) > 0 {
			st.dirty = st.dirty.insert(rest.off, rest.data)
			requeued = uint64(len(rest.data))
		}
	default:
		st.setErrLocked(fmt.Errorf("write-back of %d bytes at offset %d: %w", len(c.data), c.off, err))
	}
	st.cond.Broadcast()
	st.mu.Unlock()
	var kept uint64
	for _, a := range acked {
		kept += uint64(len(a.data))
	}
	w.account(int64(kept+requeued) - int64(len(c.data)))
}

// LOCKS_REQUIRED(st.mu)
func (st *fileState) removeInflightLocked(c extent) {
	for i := range st.inflight {
		e := &st.inflight[i]
		if e.off == c.off && len(e.data) == len(c.data) {
			st.inflight = append(st.inflight[:i], st.inflight[i+1:]...)
			return
		}
	}
}

// LOCKS_REQUIRED(st.mu)
func (st *fileState) setErrLocked(err error) {
	st.err = err
	st.errSeq++
}

// flush sends all of n's dirty data and waits for every send in flight.
// With stable other than Unstable it also makes everything durable: either
// as one FILE_SYNC WRITE, when all that is pending fits in one, or by
// COMMIT, resending whatever a changed write verifier says was lost; then
// it sends the times held for the data. A file backing off after its write
// verifier kept changing is not sent before its retry time: the flush
// fails with EIO (the data is not durable).
func (w *writeback) flush(ctx context.Context, n *inode, stable proto.Stable) error {
	return w.flushFile(ctx, n, stable, false)
}

// flushOrdered sends all of n's dirty data before a SETATTR that must come
// after it: as one FILE_SYNC WRITE when all that is pending fits in one
// (no COMMIT needed later), else UNSTABLE, committed later as usual.
func (w *writeback) flushOrdered(ctx context.Context, n *inode) error {
	return w.flushData(ctx, n, proto.FileSync, false, false)
}

// flushFile is flush; atUnmount makes a file backing off try once more now.
func (w *writeback) flushFile(ctx context.Context, n *inode, stable proto.Stable, atUnmount bool) error {
	durable := stable != proto.Unstable
	if err := w.flushData(ctx, n, stable, atUnmount, durable); err != nil || !durable {
		return err
	}
	return w.sendHeldTimes(ctx, n)
}

// flushData sends n's dirty data with stable (UNSTABLE where more than one
// WRITE is needed, or unstable data waits for a COMMIT anyway) and, with
// commit, makes it all durable.
func (w *writeback) flushData(ctx context.Context, n *inode, stable proto.Stable, atUnmount, commit bool) error {
	st := peek(n)
	if st == nil {
		return nil
	}
	retries := maxCommitRetries
	if commit {
		now := w.fs.now()
		st.mu.Lock()
		if st.retryDelay > 0 {
			if now.Before(st.retryAt) && !atUnmount {
				at := st.retryAt
				st.mu.Unlock()
				return fmt.Errorf("write-back held since the server's write verifier kept changing; next retry in %v: %w", at.Sub(now).Round(time.Second), proto.ErrIO)
			}
			// This is the retry: one round, and no other starts meanwhile.
			retries = 0
			st.retryAt = now.Add(st.retryDelay)
		}
		st.mu.Unlock()
	}
	for attempt := 0; ; attempt++ {
		gen := w.fs.dataSnapshot(n).gen
		st.mu.Lock()
		for st.sending > 0 {
			st.cond.Wait()
		}
		if err := ctx.Err(); err != nil {
			st.mu.Unlock()
			return err // nothing sent: the data stays as it is
		}
		w.fillGapsLocked(st, gen)
		st.dirty.trim()
		chunks := st.dirty.chunks(int(w.fs.wsize))
		mode := proto.Unstable
		if stable != proto.Unstable && len(chunks) == 1 && len(st.unstable) == 0 {
			mode = stable // one WRITE does it all: no COMMIT needed
		}
		st.inflight = append(st.inflight, chunks...)
		st.sending += len(chunks)
		st.dirty = nil
		st.mu.Unlock()
		if len(chunks) > 0 {
			w.send(ctx, n, st, chunks, mode)
		}
		if err := ctx.Err(); err != nil {
			return err // interrupted: unsent data is dirty again
		}
		if !commit {
			return nil
		}
		st.mu.Lock()
		pending := len(st.unstable) > 0
		st.mu.Unlock()
		if !pending {
			w.settled(n, st)
			return nil
		}
		resent, err := w.commit(ctx, n, st)
		if err != nil || !resent {
			if err == nil {
				w.settled(n, st)
			}
			return err
		}
		if attempt >= retries {
			return w.backOff(n, st, attempt+1)
		}
	}
}

// backOff records that resends did not make n's data durable (the write
// verifier changed after each): the data stays dirty, and the next retry
// waits twice as long as the last. The first failure goes to every
// descriptor open; a failed retry only to the flush that made it (a close
// while it is held fails anyway, and one after it is durable must not).
func (w *writeback) backOff(n *inode, st *fileState, rounds int) error {
	err := fmt.Errorf("COMMIT: write verifier changed %d times in a row: %w", rounds, proto.ErrIO)
	st.mu.Lock()
	if st.retryDelay == 0 {
		st.setErrLocked(err)
	}
	st.retryDelay = min(max(2*st.retryDelay, retryMin), retryMax)
	st.retryAt = w.fs.now().Add(st.retryDelay)
	held, delay := st.dirty.bytes(), st.retryDelay
	st.mu.Unlock()
	w.fs.logf("hushfs: write-back of node %d: the server's write verifier changed %d times in a row; %d bytes kept, retried in %v",
		n.id, rounds, held, delay)
	return err
}

// settled ends a back-off once n's data is durable.
func (w *writeback) settled(n *inode, st *fileState) {
	st.mu.Lock()
	was := st.retryDelay > 0
	st.retryDelay, st.retryAt = 0, time.Time{}
	st.mu.Unlock()
	if was {
		w.fs.logf("hushfs: write-back of node %d: the data kept after the write verifier changed is durable now", n.id)
	}
}

// commit sends COMMIT for the whole file. Data whose WRITE verifier differs
// from the COMMIT's is moved back to dirty; resent reports whether any was.
func (w *writeback) commit(ctx context.Context, n *inode, st *fileState) (resent bool, err error) {
	st.mu.Lock()
	cred := st.cred
	st.mu.Unlock()
	at := w.fs.now()
	res, err := w.fs.srv.Commit(ctx, &cred, n.fh, 0, 0)
	if err == nil {
		w.fs.applyWcc(n, &res.Wcc, at, true)
		if res.Status != nil {
			err = res.Status
		}
	}
	st.mu.Lock()
	defer st.mu.Unlock()
	if err != nil {
		if errors.Is(err, context.Canceled) {
			return false, err // the data is still held; a later flush commits it
		}
		err = fmt.Errorf("COMMIT: %w", err)
		st.setErrLocked(err)
		w.account(-int64(uncommittedBytes(st.unstable)))
		st.unstable = nil
		return false, err
	}
	var freed int64
	var again uint64
	for _, u := range st.unstable {
		if u.verf != res.Verf {
			st.dirty = st.dirty.insert(u.off, u.data)
			again += uint64(len(u.data))
		} else {
			freed += int64(len(u.data))
		}
	}
	st.unstable = nil
	w.account(-freed)
	if again > 0 {
		w.fs.stats.countResend(again)
	}
	return again > 0, nil
}

func uncommittedBytes(l []uncommitted) uint64 {
	var n uint64
	for _, u := range l {
		n += uint64(len(u.data))
	}
	return n
}

// overlay copies n's not-yet-sent data over dst (read at off) and returns
// how far into dst it reached.
func (w *writeback) overlay(n *inode, off uint64, dst []byte) int {
	st := peek(n)
	if st == nil {
		return 0
	}
	st.mu.Lock()
	defer st.mu.Unlock()
	reach := extents(st.inflight).overlay(off, dst)
	return max(reach, st.dirty.overlay(off, dst))
}

// truncated records our own truncation of the file to size: data kept
// past it is gone, and so is everything the server had there.
func (w *writeback) truncated(n *inode, size uint64) {
	st := peek(n)
	if st == nil {
		n.changes.Add(1)
		return
	}
	st.mu.Lock()
	before, cleanBefore := st.dirty.bytes(), st.clean.bytes()
	st.dirty = st.dirty.truncate(size)
	n.changes.Add(1)
	st.clean = st.clean.truncate(size)
	st.baseSize = min(st.baseSize, size)
	after, cleanAfter := st.dirty.bytes(), st.clean.bytes()
	st.mu.Unlock()
	w.account(int64(after) - int64(before))
	w.mu.Lock()
	w.cleanBytes -= cleanBefore - cleanAfter
	w.mu.Unlock()
}

// flushAll flushes and commits every file (at unmount).
func (w *writeback) flushAll(ctx context.Context) error {
	w.mu.Lock()
	files := make([]*inode, 0, len(w.files))
	for n := range w.files {
		files = append(files, n)
	}
	w.mu.Unlock()
	var first error
	for _, n := range files {
		if err := w.flushFile(ctx, n, proto.FileSync, true); err != nil && first == nil {
			first = err
		}
	}
	return first
}

// release forgets n's write-back state once it has nothing pending and
// no clean data worth keeping.
func (w *writeback) release(n *inode) {
	st := peek(n)
	if st == nil {
		return
	}
	st.mu.Lock()
	idle := len(st.dirty) == 0 && st.sending == 0 && len(st.unstable) == 0 && len(st.clean) == 0 && st.times == nil
	st.mu.Unlock()
	if !idle {
		return
	}
	n.mu.Lock()
	n.file = nil
	n.mu.Unlock()
	w.mu.Lock()
	delete(w.files, n)
	w.mu.Unlock()
}
