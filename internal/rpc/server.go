package rpc

import (
	"context"
	"errors"
	"fmt"
	"net"
	"runtime/debug"
	"sync"
	"sync/atomic"
	"time"
)

// ServerOptions configures a Server. Zero values select the defaults.
type ServerOptions struct {
	MaxRecord          int // largest call record accepted; default DefaultMaxRecord
	Workers            int // handler goroutines shared by all connections, default 64
	MaxInFlightPerConn int // the reader stops reading a connection at this many unanswered calls (back-pressure), default 32
	// MaxConns bounds open connections, default 1024. A connection arriving
	// at the limit takes the place of the one idle longest (no call in
	// flight), as clients reconnect when they need to; if every connection
	// has calls in flight, the newcomer is closed.
	MaxConns int
	// IdleTimeout closes a connection with no call in flight for this long,
	// and bounds a reply write blocked by a client that does not read;
	// default DefaultIdleTimeout, negative = never.
	IdleTimeout time.Duration
	// DRC configures the duplicate request cache, used for the procedures
	// a NonIdempotentHandler declares.
	DRC DRCOptions
	// MaxBackCallsPerConn bounds the calls in flight to one connection's
	// client (ConnInfo.BackChannel), default 16; more wait for a place.
	MaxBackCallsPerConn int
	// BackTimeout bounds a BackChannel call, its wait for a place
	// included, default DefaultBackTimeout; the caller's context may end
	// it sooner.
	BackTimeout time.Duration
	// Observe, if set, is called once for every call run by a handler
	// (not for retransmissions answered from the cache or calls the RPC
	// layer rejects), with the time from the call's last byte read to its
	// reply queued for sending: waiting for a worker included. It runs on
	// the worker and must be fast and safe for concurrent use.
	Observe func(prog, vers, proc uint32, d time.Duration)
	// BusyPoll is how long a reader that has just answered a call polls
	// its connection for the client's next call before it sleeps, for
	// clients that send one call at a time in quick succession
	// (busypoll.go); 0 = never.
	BusyPoll time.Duration
	// BusyPollers bounds the connections polling at once; default 1.
	BusyPollers int
	Logf        func(format string, args ...any) // nil = discard
}

// DefaultIdleTimeout is how long a connection may sit idle: long enough
// for clients that keep a connection between bursts, short enough that
// abandoned ones do not accumulate.
const DefaultIdleTimeout = 5 * time.Minute

// ServerStats is a snapshot of a server's counters.
type ServerStats struct {
	ConnsOpen     int    // connections open now
	ConnsAccepted uint64 // connections accepted, in total
	ConnsRefused  uint64 // closed at accept: MaxConns open, none idle
	ConnsEvicted  uint64 // idle connections closed to make room for a new one
	// Buffered is the bytes of calls and replies held by all connections
	// now: records read and not yet answered, replies not yet sent.
	Buffered int64
	// BufferedPeak is the most bytes one connection ever held at once.
	BufferedPeak int64
	DRCHits      uint64 // retransmissions answered with the saved reply
	DRCDrops     uint64 // retransmissions dropped: the original was still running
	DRCEntries   int    // calls in the cache now
	DRCBytes     int    // bytes charged to the cache now
	// BusyPollHits counts polls that found the next call, BusyPollMisses
	// those that gave up and slept (BusyPoll).
	BusyPollHits, BusyPollMisses uint64
}

// Server serves registered programs over any number of listeners.
//
// Each connection has a reader goroutine, which parses calls and hands them
// to a pool of worker goroutines shared by all connections, and a writer
// goroutine, which sends replies in the order they complete. Workers never
// write to sockets, so a client that stops reading blocks only its own
// connection, never the pool. A call alone on its connection runs on the
// reader instead, which sends its reply itself (serverConn.mayInline).
type Server struct {
	opts ServerOptions
	logf func(format string, args ...any)

	progs atomic.Pointer[progTable]

	work     chan *job
	workerWG sync.WaitGroup
	connWG   sync.WaitGroup

	ctx    context.Context
	cancel context.CancelFunc

	drc   *drc // nil when disabled
	epoch time.Time

	// inlining counts calls running on their connection's reader (see
	// serverConn.mayInline); at most opts.Workers at once, so inline calls
	// no more than double the handlers that can run.
	inlining atomic.Int32
	// polling counts connections busy-polling now (busypoll.go).
	polling              atomic.Int32
	pollHits, pollMisses atomic.Uint64
	callsRead            atomic.Uint64 // records read on any connection

	accepted, refused, evicted atomic.Uint64
	peakHeld                   atomic.Int64
	connLog                    logLimiter

	mu        sync.Mutex
	started   bool
	closed    bool
	listeners map[net.Listener]struct{}
	conns     map[*serverConn]struct{}

	jobs    sync.Pool // *job, each with its record buffer
	replies sync.Pool // *replyBuf
}

// NewServer returns a server with no programs registered.
func NewServer(opts ServerOptions) *Server {
	if opts.MaxRecord <= 0 {
		opts.MaxRecord = DefaultMaxRecord
	}
	if opts.Workers <= 0 {
		opts.Workers = 64
	}
	if opts.MaxInFlightPerConn <= 0 {
		opts.MaxInFlightPerConn = 32
	}
	if opts.MaxConns <= 0 {
		opts.MaxConns = 1024
	}
	if opts.IdleTimeout == 0 {
		opts.IdleTimeout = DefaultIdleTimeout
	}
	if opts.BusyPollers <= 0 {
		opts.BusyPollers = 1
	}
	if opts.MaxBackCallsPerConn <= 0 {
		opts.MaxBackCallsPerConn = 16
	}
	if opts.BackTimeout <= 0 {
		opts.BackTimeout = DefaultBackTimeout
	}
	s := &Server{
		opts:      opts,
		logf:      opts.Logf,
		work:      make(chan *job, opts.Workers),
		drc:       newDRC(opts.DRC),
		epoch:     time.Now(),
		listeners: make(map[net.Listener]struct{}),
		conns:     make(map[*serverConn]struct{}),
	}
	if s.logf == nil {
		s.logf = func(string, ...any) {}
	}
	s.ctx, s.cancel = context.WithCancel(context.Background())
	s.progs.Store(&progTable{})
	s.jobs.New = func() any { return &job{rec: make([]byte, 0, 4<<10)} }
	s.replies.New = func() any { return &replyBuf{b: make([]byte, 0, 1<<10)} }
	return s
}

// Register serves version vers of program prog with h; registering the same
// program and version again replaces the handler. It is meant to be called
// before Serve, but is safe at any time: calls read after it returns see it.
func (s *Server) Register(prog, vers uint32, h Handler) {
	s.mu.Lock()
	defer s.mu.Unlock()
	pv := progVers{vers: vers, h: h}
	if ni, ok := h.(NonIdempotentHandler); ok && s.drc != nil {
		pv.ni = ni
	}
	s.progs.Store(s.progs.Load().with(prog, pv))
}

// Serve accepts connections on l until l fails or the server is closed. It
// may be called for several listeners at once. It returns nil after Close.
func (s *Server) Serve(l net.Listener) error {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		l.Close()
		return nil
	}
	if !s.started {
		s.started = true
		s.workerWG.Add(s.opts.Workers)
		for range s.opts.Workers {
			go s.worker()
		}
	}
	s.listeners[l] = struct{}{}
	s.mu.Unlock()
	defer func() {
		s.mu.Lock()
		delete(s.listeners, l)
		s.mu.Unlock()
	}()

	var delay time.Duration
	for {
		nc, err := l.Accept()
		if err != nil {
			if s.isClosed() {
				return nil
			}
			if errors.Is(err, net.ErrClosed) {
				return fmt.Errorf("rpc: accept: %w", err)
			}
			// Anything else (EMFILE, ECONNABORTED, ...) may pass: back off
			// rather than spin or give up.
			delay = min(max(2*delay, 5*time.Millisecond), time.Second)
			s.logf("rpc: accept on %v: %v; retrying in %v", l.Addr(), err, delay)
			select {
			case <-time.After(delay):
			case <-s.ctx.Done():
				return nil
			}
			continue
		}
		delay = 0
		s.mu.Lock()
		if s.closed {
			s.mu.Unlock()
			nc.Close()
			return nil
		}
		if len(s.conns) >= s.opts.MaxConns {
			victim := s.idlest()
			if victim == nil {
				s.mu.Unlock()
				s.refused.Add(1)
				s.connLogf("rpc: refusing connection from %v: %d connections open, all busy", nc.RemoteAddr(), s.opts.MaxConns)
				nc.Close()
				continue
			}
			delete(s.conns, victim)
			s.evicted.Add(1)
			s.connLogf("rpc: closing idle connection from %v to make room for %v (%d connections open)",
				victim.info.RemoteAddr, nc.RemoteAddr(), s.opts.MaxConns)
			victim.close()
		}
		c := s.newConn(nc)
		s.conns[c] = struct{}{}
		s.connWG.Add(2)
		s.mu.Unlock()
		s.accepted.Add(1)
		go c.readLoop()
		go c.writeLoop()
	}
}

// idlest returns the connection without calls in flight that has been
// inactive longest, or nil. The caller holds s.mu.
func (s *Server) idlest() *serverConn {
	var best *serverConn
	for c := range s.conns {
		// The reader holds one token while it waits for a record; any
		// other is a call in flight, and so is one it runs itself.
		if len(c.slots) > 1 || c.inlineRunning() || c.backBusy() {
			continue
		}
		if best == nil || c.lastActive.Load() < best.lastActive.Load() {
			best = c
		}
	}
	return best
}

// Stats returns a snapshot of the server's counters.
func (s *Server) Stats() ServerStats {
	st := ServerStats{
		ConnsAccepted:  s.accepted.Load(),
		ConnsRefused:   s.refused.Load(),
		ConnsEvicted:   s.evicted.Load(),
		BufferedPeak:   s.peakHeld.Load(),
		BusyPollHits:   s.pollHits.Load(),
		BusyPollMisses: s.pollMisses.Load(),
	}
	s.mu.Lock()
	st.ConnsOpen = len(s.conns)
	for c := range s.conns {
		st.Buffered += c.held.Load()
	}
	s.mu.Unlock()
	if s.drc != nil {
		st.DRCHits, st.DRCDrops = s.drc.hits.Load(), s.drc.drops.Load()
		st.DRCEntries, st.DRCBytes = s.drc.size()
	}
	return st
}

// sinceEpoch is a monotonic timestamp that fits an atomic.
func (s *Server) sinceEpoch() int64 { return int64(time.Since(s.epoch)) }

func (s *Server) isClosed() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.closed
}

// Close stops all listeners and connections, cancels the handlers' contexts
// and waits for running handlers to return.
func (s *Server) Close() error {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return nil
	}
	s.closed = true
	var err error
	for l := range s.listeners {
		if e := l.Close(); e != nil && !errors.Is(e, net.ErrClosed) && err == nil {
			err = fmt.Errorf("rpc: closing listener %v: %w", l.Addr(), e)
		}
	}
	conns := make([]*serverConn, 0, len(s.conns))
	for c := range s.conns {
		conns = append(conns, c)
	}
	s.mu.Unlock()

	s.cancel()
	for _, c := range conns {
		c.close()
	}
	// Readers are the only senders on s.work: once they are gone it can be
	// closed, and the workers finish what is queued and exit.
	s.connWG.Wait()
	close(s.work)
	s.workerWG.Wait()
	return err
}

// job is one call on its way through a worker. It owns the record buffer
// that Call's slices alias.
type job struct {
	c      *serverConn
	h      Handler
	call   Call
	rec    []byte
	drc    *drcEntry // the call's cache entry, if its procedure is cached
	start  time.Time // when the record was read, if calls are observed
	inline bool      // run on the connection's reader
}

// replyBuf is a record for a connection's writer: a reply, which holds a
// slot of its connection, or a call to the client (BackChannel), which
// does not.
type replyBuf struct {
	b        []byte
	backCall bool
}

// maxPooledBuf keeps buffers of unusual size (beyond a maximal record) out of
// the pools.
const maxPooledBuf = DefaultMaxRecord + 64<<10

func (s *Server) getJob() *job { return s.jobs.Get().(*job) }

func (s *Server) putJob(j *job) {
	if cap(j.rec) > maxPooledBuf {
		return
	}
	j.c, j.h, j.drc, j.inline = nil, nil, nil, false
	j.call = Call{}
	j.rec = j.rec[:0]
	s.jobs.Put(j)
}

func (s *Server) getReply() *replyBuf { return s.replies.Get().(*replyBuf) }

func (s *Server) putReply(r *replyBuf) {
	if cap(r.b) > maxPooledBuf {
		return
	}
	r.b = r.b[:0]
	r.backCall = false
	s.replies.Put(r)
}

func (s *Server) worker() {
	returned := false
	defer func() {
		// A worker whose goroutine ended inside a handler
		// (handlerExited) is replaced, unless the server is closing.
		if !returned && !s.isClosed() {
			s.workerWG.Add(1)
			go s.worker()
		}
		s.workerWG.Done()
	}()
	for j := range s.work {
		s.run(j)
	}
	returned = true
}

// run executes one call and queues its reply for the writer.
func (s *Server) run(j *job) {
	c := j.c
	if rb := s.execute(j); rb != nil {
		c.replies <- rb // never blocks: the reply holds the call's slot
	} else {
		c.release()
	}
}

// execute runs one call and returns its reply record, or nil if the
// handler dropped the call. It consumes j; the call's slot stays taken.
func (s *Server) execute(j *job) *replyBuf {
	c := j.c
	recLen := len(j.rec)
	if obs := s.opts.Observe; obs != nil {
		prog, vers, proc, start := j.call.Prog, j.call.Vers, j.call.Proc, j.start
		defer func() { obs(prog, vers, proc, time.Since(start)) }()
	}
	rb := s.getReply()
	b, start := BeginRecord(rb.b[:0])
	b = appendAccepted(b, j.call.XID, Success)
	out, err := s.invoke(c.ctx, j, b)
	b, err = handlerReply(b, start, j.call.XID, out, err)
	if err == ErrDrop {
		if j.drc != nil {
			releaseWaiters(s.drc.abandon(j.drc))
		}
		c.addHeld(-recLen)
		rb.b = b
		s.putReply(rb)
		s.putJob(j)
		return nil
	}
	if err != nil {
		s.logf("rpc: prog %d vers %d proc %d from %v: %v",
			j.call.Prog, j.call.Vers, j.call.Proc, c.info.RemoteAddr, err)
	}
	FinishRecord(b, start)
	rb.b = b
	// Saved before the reply goes out: a retransmission can only follow
	// the reply's loss, and must then find it.
	if j.drc != nil {
		for _, w := range s.drc.finish(j.drc, b) {
			cp := s.getReply()
			cp.b = append(cp.b[:0], b...)
			w.addHeld(len(cp.b))
			w.replies <- cp // never blocks: w holds the slot this reply takes
		}
	}
	c.addHeld(len(b) - recLen)
	s.putJob(j)
	return rb
}

// releaseWaiters gives back the slots of connections that waited for a
// reply that will not come: the client retransmits again.
func releaseWaiters(ws []*serverConn) {
	for _, w := range ws {
		w.release()
	}
}

// invoke calls the handler, turning a panic into an error so that no
// handler can bring the server down.
func (s *Server) invoke(ctx context.Context, j *job, reply []byte) (out []byte, err error) {
	returned := false
	defer func() {
		if p := recover(); p != nil {
			out, err = nil, fmt.Errorf("handler panic: %v\n%s", p, debug.Stack())
		} else if !returned {
			s.handlerExited(j)
		}
	}()
	out, err = j.h.ServeRPC(ctx, &j.call, reply)
	returned = true
	return out, err
}

// handlerExited cleans up after a handler that ended its goroutine
// (runtime.Goexit) instead of returning: a handler does so when it cannot
// restore the credentials of its thread, which the runtime then discards
// with the goroutine. The call gets no reply; its connection is closed, so
// that the client resends what it has pending on a new one at once rather
// than after a timeout. A worker ended so is replaced (worker).
func (s *Server) handlerExited(j *job) {
	c := j.c
	s.logf("rpc: prog %d vers %d proc %d from %v: the handler ended its goroutine; closing the connection",
		j.call.Prog, j.call.Vers, j.call.Proc, c.info.RemoteAddr)
	if j.drc != nil {
		releaseWaiters(s.drc.abandon(j.drc))
	}
	c.addHeld(-len(j.rec))
	c.close()
	c.release()
	if j.inline {
		s.inlining.Add(-1)
		// No takeover now: the ending reader's goroutine cleans up
		// as the connection's last reader, unless one took over already.
		c.rmu.Lock()
		c.inline = 0
		c.rmu.Unlock()
		// A pending takeover finds no inline call and stays off.
	}
}

// connLogf logs a connection-level message, subject to the rate limit.
func (s *Server) connLogf(format string, args ...any) {
	s.connLog.logf(s.logf, format, args...)
}
