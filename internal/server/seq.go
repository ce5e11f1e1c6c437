package server

// Sequential-access detection. NFS clients keep many READs or WRITEs of one
// file in flight, over one connection or several, and the server's worker
// pool runs them in any order; a stream that is sequential at the client
// therefore arrives slightly shuffled. The kernel's own readahead, which
// sees only the order of our pread calls on one shared descriptor, is
// easily misled by that, and write-back has no notion of a stream at all.
// seqTracker recognises such a stream from the offsets alone.

// Tuning of the detector.
const (
	// seqReorderK is how far from the expected offset, in request sizes,
	// a request may land and still count as part of the stream, reordered:
	// about the number of requests a client keeps in flight per file.
	seqReorderK = 8
	// seqMinReq is the smallest request size the reordering window is
	// computed from, so that a stream of tiny requests still tolerates a
	// useful amount of shuffling.
	seqMinReq = 4096
	// seqThreshold is the score from which a stream is sequential: enough
	// in-order bytes that acting on it (readahead, early write-back) pays.
	seqThreshold = 2 << 20
	// seqMaxScore bounds the score, so that a long sequential run turns
	// random after a few halvings rather than after dozens.
	seqMaxScore = 64 << 20
	// seqRecent is how many recent request offsets are remembered to tell
	// a repeated request (a retransmission, a client polling the head of a
	// file) from a late one filling a hole.
	seqRecent = 8
)

// seqClass is how one request relates to the stream.
type seqClass uint8

const (
	seqRandom    seqClass = iota // far from the stream: a new run starts there
	seqInOrder                   // exactly at the expected offset
	seqReordered                 // near the expected offset: early or late, still the stream
	seqRepeat                    // the offset of a recent request again: neither
)

func (c seqClass) String() string {
	switch c {
	case seqInOrder:
		return "in-order"
	case seqReordered:
		return "reordered"
	case seqRepeat:
		return "repeat"
	}
	return "random"
}

// seqRun is one run of requests: where it began and where it has got to.
type seqRun struct {
	start uint64 // offset of its first request
	front uint64 // one past the highest byte requested: the next expected offset
	id    uint64 // distinguishes runs, so that users can tell when one restarted
	// mark is the owner's progress in the run (readahead issued, write-back
	// started up to there), kept with it when a stray request interrupts
	// it; 0 for a new run.
	mark uint64
}

// seqTracker classifies the requests of one stream (a file's READs, or its
// WRITEs). The score grows with the bytes of requests that continue the run
// (in order or reordered within the window) and halves at each random one,
// so a single stray request does not end a long sequential stream but a
// random workload never reaches the threshold. The previous run is kept,
// so that a stream interrupted by one stray request (another client reading
// the head of the file) resumes where it was.
//
// A seqTracker is plain data: its owner serialises calls (fileState.mu).
type seqTracker struct {
	cur, prev seqRun
	score     uint64
	nextID    uint64
	recent    [seqRecent]uint64 // offsets of the last requests
	nrecent   int               // valid entries in recent (up to seqRecent)
	ri        int               // next slot of recent to overwrite

	// Counts per class, for diagnostics and tests.
	counts [4]uint64
}

// seqView is the tracker's state after a request.
type seqView struct {
	class seqClass
	score uint64
	run   seqRun
}

// sequential reports whether the stream is sequential.
func (v seqView) sequential() bool { return v.score >= seqThreshold }

// near reports whether a request at off is within window bytes of the
// run's front: ahead of it (an early request, the gap to be filled by late
// ones) or behind it (a late one).
func (r *seqRun) near(off, window uint64) bool {
	if off >= r.front {
		return off-r.front <= window
	}
	return r.front-off <= window
}

// observe classifies a request of n bytes at off and updates the stream.
// Requests of no bytes change nothing.
func (t *seqTracker) observe(off, n uint64) seqView {
	if n == 0 {
		return seqView{class: seqRepeat, score: t.score, run: t.cur}
	}
	end := off + n
	if end < off { // wrapped: treat as reaching the end of the offset space
		end = ^uint64(0)
	}
	if t.nextID == 0 {
		// Streams are expected to start at the beginning of the file: a
		// first request near it (the first of a shuffled batch) is
		// reordered, one far from it random.
		t.nextID = 1
		t.cur = seqRun{id: t.nextID}
	}
	var class seqClass
	window := seqReorderK * max(n, seqMinReq)
	switch {
	case off == t.cur.front:
		class = seqInOrder
	case t.isRecent(off):
		class = seqRepeat
	case t.cur.near(off, window):
		class = seqReordered
	case t.prev.id != 0 && t.prev.near(off, window):
		// Back to the run a stray request interrupted.
		t.cur, t.prev = t.prev, t.cur
		class = seqReordered
	default:
		class = seqRandom
		t.score /= 2
		t.nextID++
		t.prev = t.cur
		t.cur = seqRun{start: off, front: off, id: t.nextID}
	}
	switch class {
	case seqInOrder, seqReordered:
		t.score = min(t.score+n, seqMaxScore)
		fallthrough
	case seqRandom:
		t.cur.front = max(t.cur.front, end)
		t.cur.start = min(t.cur.start, off)
	}
	t.remember(off)
	t.counts[class]++
	return seqView{class: class, score: t.score, run: t.cur}
}

func (t *seqTracker) isRecent(off uint64) bool {
	for i := range t.nrecent {
		if t.recent[i] == off {
			return true
		}
	}
	return false
}

func (t *seqTracker) remember(off uint64) {
	t.recent[t.ri] = off
	t.ri = (t.ri + 1) % seqRecent
	if t.nrecent < seqRecent {
		t.nrecent++
	}
}

// setMark sets the mark of the current run.
func (t *seqTracker) setMark(m uint64) { t.cur.mark = m }

// count returns how many requests were classified c.
func (t *seqTracker) count(c seqClass) uint64 { return t.counts[c] }
