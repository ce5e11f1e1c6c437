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
// passes the chunks to release once written.
func (l *delayLine) next(out []chunk) ([]chunk, lineState) {
	out = out[:0]
	for {
		l.mu.Lock()
		if len(l.q) == 0 {
			eof := l.eof
			l.mu.Unlock()
			if eof {
				return out, lineEOF
			}
			select {
			case <-l.hasData:
			case <-l.abort:
				return out, lineAborted
			}
			continue
		}
		now := time.Now()
		if wait := l.q[0].due.Sub(now); wait > 0 {
			l.mu.Unlock()
			l.timer.Reset(wait)
			select {
			case <-l.timer.C:
			case <-l.abort:
				l.timer.Stop()
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
