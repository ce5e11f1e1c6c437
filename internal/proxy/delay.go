package proxy

import (
	"sync"
	"time"
)

// chunk is one read's worth of bytes waiting to be forwarded.
type chunk struct {
	data   []byte
	pooled *[]byte // the pool buffer data lives in, or nil
	due    time.Time
	cost   int // bytes charged against the line's budget
	// recEnd: the chunk ends at a record boundary of the stream, where a
	// whole record may be slipped in.
	recEnd bool
	// closeAfter, unless closeNone, closes the connection on both sides
	// once the chunk is written (a fault).
	closeAfter uint8
}

// delayLine is a FIFO of chunks for one direction of one connection. The
// reader stamps each chunk with the time it may leave; the writer waits for
// that time. Many chunks can be in flight at once, so the added latency
// costs no throughput, and since chunks leave in arrival order with
// non-decreasing due times, bytes are never reordered.
//
// Memory is bounded by a byte budget: push blocks once the chunks held cost
// limit bytes, which in turn stops reading and lets TCP flow control slow
// the sender.
type delayLine struct {
	limit int

	mu   sync.Mutex
	q    []chunk
	used int
	eof  bool
	// inj holds whole records to be written at the next record boundary,
	// ahead of the queue (duplicated calls). They are few and small, and
	// not charged against the budget.
	inj []injected

	// One producer and one consumer, so a one-slot channel per condition
	// is enough: a poke made between a check and a wait stays pending.
	hasData chan struct{}
	space   chan struct{}
	abort   <-chan struct{} // closed when the connection is torn down
	timer   *time.Timer
}

func newDelayLine(limit int, abort <-chan struct{}) *delayLine {
	t := time.NewTimer(time.Hour)
	t.Stop()
	return &delayLine{
		limit:   limit,
		hasData: make(chan struct{}, 1),
		space:   make(chan struct{}, 1),
		abort:   abort,
		timer:   t,
	}
}

func poke(c chan struct{}) {
	select {
	case c <- struct{}{}:
	default:
	}
}

// push appends c, waiting for budget. It reports false if the line was
// aborted, in which case c was not taken.
func (l *delayLine) push(c chunk) bool {
	for {
		l.mu.Lock()
		// An empty line always accepts, so one oversized chunk cannot
		// wedge it.
		if l.used == 0 || l.used+c.cost <= l.limit {
			l.q = append(l.q, c)
			l.used += c.cost
			l.mu.Unlock()
			poke(l.hasData)
			return true
		}
		l.mu.Unlock()
		select {
		case <-l.space:
		case <-l.abort:
			return false
		}
	}
}

// closeInput records that no more chunks will come; the writer drains what
// is queued and then sees the end.
func (l *delayLine) closeInput() {
	l.mu.Lock()
	l.eof = true
	l.mu.Unlock()
	poke(l.hasData)
}

// injected is a whole record waiting to be slipped into the stream.
type injected struct {
	rec []byte
	due time.Time
}

// inject queues a whole record to be written at the first record boundary
// from due on.
func (l *delayLine) inject(rec []byte, due time.Time) {
	l.mu.Lock()
	l.inj = append(l.inj, injected{rec, due})
	l.mu.Unlock()
	poke(l.hasData)
}

// lineState is what next found.
type lineState int

const (
	lineReady   lineState = iota // chunks returned
	lineEOF                      // input closed and everything delivered
	lineAborted                  // connection torn down
)

// maxBatch bounds how many due chunks one next call returns, i.e. how many
// buffers one vectored write carries.
const maxBatch = 64

// next waits until the head chunk is due and returns it with every other
// chunk already due (up to maxBatch), appended to out[:0]. The caller
// passes the chunks to release once written. When the caller's stream is
// at a record boundary (atBoundary) a due injected record comes first,
// alone.
func (l *delayLine) next(out []chunk, atBoundary bool) ([]chunk, lineState) {
	out = out[:0]
	for {
		l.mu.Lock()
		now := time.Now()
		var injDue time.Time // of an injected record that can go later
		if atBoundary && len(l.inj) > 0 {
			if in := l.inj[0]; !in.due.After(now) {
				l.inj[0] = injected{}
				l.inj = l.inj[1:]
				l.mu.Unlock()
				return append(out, chunk{data: in.rec, recEnd: true}), lineReady
			}
			injDue = l.inj[0].due
		}
		if len(l.q) == 0 {
			eof := l.eof
			l.mu.Unlock()
			if eof {
				return out, lineEOF
			}
			if !l.wait(injDue, now) {
				return out, lineAborted
			}
			continue
		}
		if head := l.q[0].due; head.After(now) {
			l.mu.Unlock()
			if injDue.IsZero() || head.Before(injDue) {
				injDue = head
			}
			if !l.wait(injDue, now) {
				return out, lineAborted
			}
			continue
		}
		k := 0
		for k < len(l.q) && k < maxBatch && !l.q[k].due.After(now) {
			out = append(out, l.q[k])
			l.q[k] = chunk{} // drop the reference for the collector
			k++
		}
		// Slide the window; append reallocates (dropping the dead
		// prefix) once capacity runs out, so this stays amortised O(1).
		l.q = l.q[k:]
		l.mu.Unlock()
		return out, lineReady
	}
}

// wait waits until until (if not zero), new data or an injected record, or
// the abort; it reports false on abort.
func (l *delayLine) wait(until, now time.Time) bool {
	var tc <-chan time.Time
	if !until.IsZero() {
		l.timer.Reset(until.Sub(now))
		defer l.timer.Stop()
		tc = l.timer.C
	}
	select {
	case <-tc:
	case <-l.hasData:
	case <-l.abort:
		return false
	}
	return true
}

// release returns the budget of chunks handed out by next.
func (l *delayLine) release(cs []chunk) {
	n := 0
	for _, c := range cs {
		n += c.cost
	}
	l.mu.Lock()
	l.used -= n
	l.mu.Unlock()
	poke(l.space)
}
