package rpc

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/netip"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// A connection of the server: reading calls (inline or handed to the
// workers), writing replies, and its end.

// serverConn is one accepted connection.
type serverConn struct {
	s    *Server
	nc   net.Conn
	info ConnInfo
	ip   netip.Addr // the client, for the duplicate request cache
	ctx  context.Context
	stop context.CancelFunc

	// held counts the bytes of records read and not yet answered plus
	// replies not yet written, for the memory bound the tests check.
	held atomic.Int64
	// lastActive is when a record last started arriving or replies were
	// last written (Server.sinceEpoch), to pick the idlest connection.
	lastActive atomic.Int64

	// slots holds one token per call read but not yet answered (or
	// dropped): the reader blocks when it is full.
	slots chan struct{}
	// replies never blocks a sender: its capacity equals slots', and every
	// reply in it holds a slot.
	replies chan *replyBuf
	// backOut carries calls to the client (BackChannel) to the writer.
	backOut chan *replyBuf
	// back is the connection's back channel, made on first use.
	back atomic.Pointer[BackChannel]
	// eof is set once the client closed its end (peerClosed).
	eof atomic.Bool

	done      chan struct{}
	closeOnce sync.Once

	// br is the connection's read buffer, used only by the goroutine that
	// holds the reading role: the reader, or the one it handed the role to
	// while it ran a call inline (takeOver).
	br *bufio.Reader
	// takeover fires inlineGrace into an inline call and hands the
	// reading role to a new goroutine, so that a slow call does not hold
	// up the calls behind it. It is armed lazily (see runInline).
	takeover *time.Timer
	tickets  uint64 // inline calls so far; used by the reading goroutine only

	rmu sync.Mutex
	// inline is the ticket of the call the reader runs inline, 0 when
	// none (or when its reading role has been handed over).
	inline uint64
	// inlineSince is when the inline call started (Server.sinceEpoch).
	inlineSince int64
	// armed: takeover is pending. INVARIANT: armed whenever inline != 0.
	armed bool
	// readers counts the connection's reader goroutines: two while one
	// finishes an inline call it handed the reading over from. The last
	// to end cleans up.
	readers int

	// Busy polling (busypoll.go), used by the goroutine holding the
	// reading role only. rc is nil when polling is off.
	rc          syscall.RawConn
	pollFn      func(fd uintptr)
	pfd         [1]unix.PollFd
	pollReady   bool
	repliedAt   int64  // when the last inline reply was sent (sinceEpoch), 0 once the next call arrived
	readAtReply uint64 // Server.callsRead then
	lastGap     int64  // from an inline reply to the next call's arrival, the last time measured
}

func (s *Server) newConn(nc net.Conn) *serverConn {
	c := &serverConn{
		s:       s,
		nc:      nc,
		info:    ConnInfo{RemoteAddr: nc.RemoteAddr(), LocalAddr: nc.LocalAddr()},
		ip:      clientIP(nc.RemoteAddr()),
		slots:   make(chan struct{}, s.opts.MaxInFlightPerConn),
		replies: make(chan *replyBuf, s.opts.MaxInFlightPerConn),
		backOut: make(chan *replyBuf, s.opts.MaxBackCallsPerConn),
		done:    make(chan struct{}),
		br:      bufio.NewReaderSize(nc, 32<<10),
	}
	c.info.conn = c
	c.ctx, c.stop = context.WithCancel(s.ctx)
	c.lastActive.Store(s.sinceEpoch())
	c.takeover = time.AfterFunc(time.Hour, c.takeOver)
	c.takeover.Stop()
	// (armed stays false: the first inline call arms it.)
	c.readers = 1
	c.initBusyPoll()
	return c
}

func (c *serverConn) inlineRunning() bool {
	c.rmu.Lock()
	defer c.rmu.Unlock()
	return c.inline != 0
}

// addHeld accounts n more (or, negative, fewer) bytes to the connection and
// keeps the server's per-connection peak.
func (c *serverConn) addHeld(n int) {
	v := c.held.Add(int64(n))
	if n <= 0 {
		return
	}
	peak := &c.s.peakHeld
	for p := peak.Load(); v > p && !peak.CompareAndSwap(p, v); p = peak.Load() {
	}
}

// close shuts the connection down; it is safe to call more than once and
// from any goroutine.
func (c *serverConn) close() {
	c.closeOnce.Do(func() {
		close(c.done)
		c.stop()
		c.nc.Close()
	})
}

func (c *serverConn) release() { <-c.slots }

// readLoop reads calls until the connection ends, or until it has handed
// the reading role to another goroutine (an inline call ran long). The
// last reader of a connection to end closes it.
func (c *serverConn) readLoop() {
	s := c.s
	// Deferred: the goroutine may also end inside a handler it runs
	// (handlerExited).
	defer func() {
		c.rmu.Lock()
		c.readers--
		last := c.readers == 0
		c.rmu.Unlock()
		if !last {
			return // the connection lives on with the reader it handed over to
		}
		c.close()
		s.mu.Lock()
		delete(s.conns, c)
		s.mu.Unlock()
		s.connWG.Done()
	}()
	c.readCalls()
}

// readCalls is readLoop's loop. It reports whether it stopped because the
// reading role went to another goroutine.
func (c *serverConn) readCalls() (handedOver bool) {
	s := c.s
	br := c.br
	for {
		select {
		case c.slots <- struct{}{}:
		case <-c.done:
			return
		}
		c.busyPoll()
		err := c.awaitRecord(br)
		c.noteArrival()
		if err != nil {
			if errors.Is(err, io.EOF) {
				c.drain()
			} else if !c.closing() {
				s.connLogf("rpc: connection from %v: %v", c.info.RemoteAddr, err)
			}
			return false
		}
		s.callsRead.Add(1)
		j := s.getJob()
		rec, err := ReadRecord(br, j.rec, s.opts.MaxRecord)
		j.rec = rec
		if err != nil {
			s.putJob(j)
			if errors.Is(err, io.EOF) {
				c.drain()
			} else if !c.closing() {
				s.connLogf("rpc: closing connection from %v: %v", c.info.RemoteAddr, err)
			}
			return false
		}
		if s.opts.Observe != nil {
			j.start = time.Now()
		}
		c.addHeld(len(rec))
		rb := s.getReply()
		pv, out, v := decodeCall(s.progs.Load(), rec, &j.call, rb.b[:0])
		rb.b = out
		switch v {
		case verdictDispatch:
			if pv.ni != nil && pv.ni.NonIdempotent(j.call.Proc) {
				e, saved, st := s.drc.begin(s.drc.key(c.ip, &j.call), c)
				switch st {
				case drcWaiting:
					// The slot stays taken until the original's
					// reply is copied here (or it is dropped).
					c.addHeld(-len(rec))
					s.putJob(j)
					s.putReply(rb)
					continue
				case drcInProgress:
					// The original's reply will answer this one.
					c.addHeld(-len(rec))
					s.putJob(j)
					s.putReply(rb)
					c.release()
					continue
				case drcReplay:
					rb.b = append(rb.b[:0], saved...)
					c.addHeld(len(rb.b) - len(rec))
					s.putJob(j)
					c.replies <- rb
					continue
				}
				j.drc = e
			}
			s.putReply(rb)
			j.call.Conn = &c.info
			j.c, j.h = c, pv.h
			if c.mayInline() {
				if !c.runInline(j) {
					return true
				}
				continue
			}
			select {
			case s.work <- j:
			case <-c.done:
				if j.drc != nil {
					releaseWaiters(s.drc.abandon(j.drc))
				}
				s.putJob(j)
				return false
			}
		case verdictReply:
			c.addHeld(len(rb.b) - len(rec))
			s.putJob(j)
			c.replies <- rb
		case verdictIgnore:
			c.deliverReply(rec)
			c.addHeld(-len(rec))
			s.putJob(j)
			s.putReply(rb)
			c.release()
		default:
			c.addHeld(-len(rec))
			s.putJob(j)
			s.putReply(rb)
			s.connLogf("rpc: closing connection from %v: malformed call header", c.info.RemoteAddr)
			return false
		}
	}
}

// inlineGrace is how long a call may run on its connection's reader before
// the reading role passes to a new goroutine. Most calls take a few tens of
// microseconds; one that waits for the disk should not hold up the calls
// queued behind it for longer than this.
const inlineGrace = 500 * time.Microsecond

// mayInline reports whether the call just read may run on the reader
// itself rather than on a worker: when it is the connection's only call in
// flight and no further call is already buffered, a worker would only add
// two hand-offs between goroutines (to the worker and to the writer) to
// the call's latency, and the reader would have nothing to do meanwhile.
// It takes one of the server's inline places, which runInline gives back.
func (c *serverConn) mayInline() bool {
	// The reader's token is the call's own: no other call is running or
	// waiting for its reply to be sent, so the writer is idle.
	if len(c.slots) != 1 || c.br.Buffered() != 0 {
		return false
	}
	if c.s.inlining.Add(1) > int32(c.s.opts.Workers) {
		c.s.inlining.Add(-1)
		return false
	}
	return true
}

// runInline runs j on the reader and writes its reply itself. It reports
// false if the call outlasted inlineGrace and the reading role went to a
// new goroutine meanwhile: the caller must then stop reading.
//
// The takeover timer is not reset and stopped around each call: a timer
// moved earlier than the one the runtime's network poller sleeps until
// makes the runtime wake that poller (a write to its eventfd and a thread
// woken on another CPU) for every call. Instead the timer stays armed
// after a call and, when it fires, re-arms itself for the call then
// running, if any; an idle connection's timer fires once and stays off.
func (c *serverConn) runInline(j *job) bool {
	c.tickets++
	ticket := c.tickets
	c.rmu.Lock()
	c.inline = ticket
	c.inlineSince = c.s.sinceEpoch()
	if !c.armed {
		c.armed = true
		c.takeover.Reset(inlineGrace)
	}
	c.rmu.Unlock()
	j.inline = true
	rb := c.s.execute(j)
	c.rmu.Lock()
	kept := c.inline == ticket
	if kept {
		c.inline = 0
	}
	c.rmu.Unlock()
	c.s.inlining.Add(-1) // (handlerExited gives it back if the handler never returns)
	if rb != nil {
		c.sendNow(rb)
		if kept {
			c.noteReply()
		}
	}
	c.release()
	return kept
}

// takeOver runs when the takeover timer fires. If an inline call has run
// for inlineGrace, a new goroutine takes over reading the connection, and
// the call's goroutine stops reading once it has answered it. If a later
// call is running, the timer is re-armed for it; if none, it stays off.
func (c *serverConn) takeOver() {
	c.rmu.Lock()
	c.armed = false
	if c.inline == 0 {
		c.rmu.Unlock()
		return // the call finished first
	}
	if left := time.Duration(c.inlineSince + int64(inlineGrace) - c.s.sinceEpoch()); left > 0 {
		c.armed = true
		c.takeover.Reset(left)
		c.rmu.Unlock()
		return
	}
	c.inline = 0
	// The old reader is still in its call: the connection's count in
	// connWG is held until both readers have ended.
	c.readers++
	c.rmu.Unlock()
	go c.readLoop()
}

// sendNow writes one reply on the caller's goroutine. Used for inline
// calls only, whose connection has no other reply pending: net.Conn
// writes are atomic with respect to each other, so a reply the writer
// goroutine sends at the same time (after a takeover) cannot interleave.
func (c *serverConn) sendNow(rb *replyBuf) {
	if idle := c.s.opts.IdleTimeout; idle > 0 {
		_ = c.nc.SetWriteDeadline(time.Now().Add(idle))
	}
	_, err := c.nc.Write(rb.b)
	c.addHeld(-len(rb.b))
	c.lastActive.Store(c.s.sinceEpoch())
	c.s.putReply(rb)
	if err != nil {
		if !c.closing() {
			c.s.connLogf("rpc: writing reply to %v: %v", c.info.RemoteAddr, err)
		}
		c.close()
	}
}

func (c *serverConn) closing() bool {
	select {
	case <-c.done:
		return true
	default:
		return false
	}
}

// awaitRecord waits for the first byte of the next record, enforcing the
// idle timeout: the connection is idle only while no call is in flight, so a
// client waiting on a slow reply is not cut off. Once a record has started,
// it must complete within another idle period.
func (c *serverConn) awaitRecord(br *bufio.Reader) error {
	idle := c.s.opts.IdleTimeout
	if idle <= 0 {
		_, err := br.Peek(1)
		c.lastActive.Store(c.s.sinceEpoch())
		return err
	}
	for {
		if err := c.nc.SetReadDeadline(time.Now().Add(idle)); err != nil {
			return err
		}
		_, err := br.Peek(1)
		if err == nil {
			c.lastActive.Store(c.s.sinceEpoch())
			return c.nc.SetReadDeadline(time.Now().Add(idle))
		}
		var ne net.Error
		if !errors.As(err, &ne) || !ne.Timeout() {
			return err
		}
		if len(c.slots) <= 1 && !c.backBusy() { // only this reader's own token
			return fmt.Errorf("idle for %v", idle)
		}
	}
}

// drain waits, after the client closed its side cleanly, until every call
// read so far is answered: taking all the tokens means none is in flight.
// Calls to the client fail at once: it can no longer answer them.
func (c *serverConn) drain() {
	c.peerClosed()
	for i := 1; i < cap(c.slots); i++ {
		select {
		case c.slots <- struct{}{}:
		case <-c.done:
			return
		}
	}
}

// writeLoop sends replies as they complete. Whatever has queued up goes out
// in one writev; each reply is one contiguous record, never split between
// calls.
func (c *serverConn) writeLoop() {
	defer c.s.connWG.Done()
	var batch []*replyBuf
	var bufs, wb net.Buffers
	for {
		select {
		case rb := <-c.replies:
			batch = append(batch[:0], rb)
		case rb := <-c.backOut:
			batch = append(batch[:0], rb)
		case <-c.done:
			return
		}
	more:
		for len(batch) < cap(c.replies) {
			select {
			case rb := <-c.replies:
				batch = append(batch, rb)
			default:
				break more
			}
		}
		for len(c.backOut) > 0 {
			batch = append(batch, <-c.backOut) // (only this goroutine receives)
		}
		bufs = bufs[:0]
		n := 0
		for _, rb := range batch {
			bufs = append(bufs, rb.b)
			n += len(rb.b)
		}
		if idle := c.s.opts.IdleTimeout; idle > 0 {
			_ = c.nc.SetWriteDeadline(time.Now().Add(idle))
		}
		wb = bufs // WriteTo consumes its receiver
		_, err := wb.WriteTo(c.nc)
		clear(bufs)
		c.addHeld(-n)
		c.lastActive.Store(c.s.sinceEpoch())
		for i, rb := range batch {
			if !rb.backCall {
				c.release()
			}
			c.s.putReply(rb)
			batch[i] = nil
		}
		if err != nil {
			if !c.closing() {
				c.s.connLogf("rpc: writing replies to %v: %v", c.info.RemoteAddr, err)
			}
			c.close()
			return
		}
	}
}
