package rpc

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"hushfs/internal/xdr"
)

// Marshaler is implemented by call arguments.
type Marshaler interface{ Append(b []byte) []byte }

// Unmarshaler is implemented by call results.
type Unmarshaler interface{ Decode(d *xdr.Decoder) }

// CallStats describes one finished Call.
type CallStats struct {
	Prog, Vers, Proc uint32
	Transmissions    int           // 1 + retransmissions (including resends after a reconnect)
	Timeouts         int           // per-transmission timeouts seen
	BytesSent        int           // request record size (mark included) times Transmissions
	BytesReceived    int           // reply record size, mark included; 0 without a reply
	Queue            time.Duration // waiting to be sent (for an in-flight slot or a connection)
	RTT              time.Duration // last transmission to reply
	Execute          time.Duration // Call entry to return
	Err              error
}

// ClientOptions configures a Client. Zero values select the defaults.
type ClientOptions struct {
	// Dial connects to the server; required by NewClient, used to connect
	// and to reconnect.
	Dial func(ctx context.Context) (net.Conn, error)
	// Timeout is how long to wait for a reply before retransmitting; default
	// 60 s. It grows linearly per retry (Timeout, 2·Timeout, ...), capped at
	// 600 s.
	Timeout time.Duration
	// Retrans is the number of retransmissions before a major timeout;
	// 0 selects the default, 2; a negative value means none.
	Retrans int
	// Hard: after a major timeout log that the server is not responding and
	// keep going until the context is done. Soft (false): fail with
	// ErrTimeout.
	Hard bool
	// MaxRecord bounds reply records; default DefaultMaxRecord.
	MaxRecord int
	// MaxInFlight is the number of calls on the wire at once, default 128;
	// more wait (counted as Queue time).
	MaxInFlight int
	// NoRetransmit: never send a call again on the connection it was sent
	// on; a call is resent only on a new connection, after the one it went
	// out on was lost (NFSv4.1 over TCP, RFC 8881 §2.9.2, §15.1.1). Timeouts
	// still count towards the major timeout, which resets a stale
	// connection as without it.
	NoRetransmit bool
	// OnReconnect, if set, runs on every connection made after the first,
	// before any call is sent or resent on it: calls made through conn go
	// out on it alone, while every other call (pending, resent or new)
	// waits. An NFSv4.1 client binds the new connection to its session
	// there (BIND_CONN_TO_SESSION). An error closes the connection; another
	// is tried after a pause. ctx is cancelled when the connection is lost
	// or the client closed.
	OnReconnect func(ctx context.Context, conn *Conn) error
	// MaxBackCalls bounds the calls from the server (see Register) that are
	// being served or whose replies wait to be sent, default 16. A call
	// beyond it is answered SYSTEM_ERR without running a handler; at twice
	// as many (the server sends calls and does not read the answers) the
	// connection is dropped.
	MaxBackCalls int
	// MaxBackRecord bounds a call from the server, default 64 KiB; a longer
	// one is answered GARBAGE_ARGS.
	MaxBackRecord int
	// Observer, if set, is called once per Call when it finishes.
	Observer func(*CallStats)
	Logf     func(format string, args ...any)
}

var (
	// ErrTimeout is returned (wrapped with the call's identity) after a
	// major timeout of a soft client.
	ErrTimeout = errors.New("rpc: call timed out")
	// ErrClosed is returned by calls on, or pending at, a closed client.
	ErrClosed = errors.New("rpc: client closed")
	// ErrConnLost is returned (wrapped) by calls bound to one connection
	// (Conn.Call, BackChannel.Call) when that connection is gone.
	ErrConnLost = errors.New("rpc: connection lost")
)

// maxTimeout caps the per-transmission timeout.
const maxTimeout = 600 * time.Second

// maxReconnectBackoff caps the pause between failed reconnection attempts.
const maxReconnectBackoff = 5 * time.Second

// Client is a pipelined ONC RPC client over one TCP connection: any number
// of calls are in flight at once, replies are matched by XID in whatever
// order they come. A broken connection is re-established and every pending
// call resent with its original bytes, so that a server's duplicate request
// cache recognises it.
//
// Reply records are allocated per reply and results decoded by Call alias
// them: they stay valid after Call returns.
//
// The server may also call the client on the same connection (NFSv4.1's
// back channel): calls to programs registered with Register are served,
// each on a goroutine of its own, and their replies sent between the
// client's own requests (client_back.go).
type Client struct {
	opts      ClientOptions
	logf      func(format string, args ...any)
	maxRecord int
	epoch     time.Time // origin of the monotonic timestamps kept in atomics

	sem     chan struct{} // in-flight slots
	xid     atomic.Uint32
	closing chan struct{}
	ctx     context.Context // lifetime of the client; bounds dialing
	cancel  context.CancelFunc
	wake    chan struct{} // a call is waiting for a connection
	wg      sync.WaitGroup
	calls   sync.Pool // *pendingCall

	// unresponsive is set while a major timeout has been logged and no
	// reply has come since.
	unresponsive atomic.Bool
	server       string

	progs   atomic.Pointer[progTable] // programs served to the server
	connLog logLimiter                // for what a hostile server could flood

	mu      sync.Mutex
	pending map[uint32]*pendingCall
	conn    *clientConn // nil while reconnecting
	// connecting is a new connection whose OnReconnect hook runs; it is
	// not yet conn.
	connecting *clientConn
	closed     bool
	major      chan struct{} // closed at the next major timeout of a hard call
}

// pendingCall is one call from encoding to reply. Its request bytes are
// shared with the connection writer, so it is reference counted: the caller
// holds one reference and every queued transmission another; the last to
// let go returns it to the pool.
type pendingCall struct {
	xid   uint32
	req   []byte
	reply chan []byte // capacity 1; at most one delivery per registration
	refs  atomic.Int32
	// finished tells the writer not to bother sending.
	finished  atomic.Bool
	tx        atomic.Int32
	firstSent atomic.Int64 // since Client.epoch; 0 = not yet sent
	lastSent  atomic.Int64
	conn      *clientConn // connection last queued on; guarded by Client.mu
	// pin, if set, is the only connection the call may go out on
	// (Conn.Call); guarded by Client.mu.
	pin   *clientConn
	dec   xdr.Decoder
	timer *time.Timer // retransmission timer, reused with the call
}

// NewClient connects to the server with opts.Dial and returns the client.
// Failing to connect is an error here, not later.
func NewClient(ctx context.Context, opts ClientOptions) (*Client, error) {
	if opts.Dial == nil {
		return nil, errors.New("rpc: ClientOptions.Dial is required")
	}
	if opts.Timeout <= 0 {
		opts.Timeout = 60 * time.Second
	}
	if opts.Retrans < 0 {
		opts.Retrans = 0
	} else if opts.Retrans == 0 {
		opts.Retrans = 2
	}
	if opts.MaxRecord <= 0 {
		opts.MaxRecord = DefaultMaxRecord
	}
	if opts.MaxInFlight <= 0 {
		opts.MaxInFlight = 128
	}
	if opts.MaxBackCalls <= 0 {
		opts.MaxBackCalls = 16
	}
	if opts.MaxBackRecord <= 0 {
		opts.MaxBackRecord = 64 << 10
	}
	c := &Client{
		opts:      opts,
		logf:      opts.Logf,
		maxRecord: opts.MaxRecord,
		epoch:     time.Now(),
		sem:       make(chan struct{}, opts.MaxInFlight),
		closing:   make(chan struct{}),
		wake:      make(chan struct{}, 1),
		pending:   make(map[uint32]*pendingCall),
		major:     make(chan struct{}),
	}
	if c.logf == nil {
		c.logf = func(string, ...any) {}
	}
	c.xid.Store(rand.Uint32())
	c.calls.New = func() any { return &pendingCall{reply: make(chan []byte, 1)} }
	c.progs.Store(&progTable{})
	nc, err := opts.Dial(ctx)
	if err != nil {
		return nil, fmt.Errorf("rpc: connecting: %w", err)
	}
	c.server = nc.RemoteAddr().String()
	c.ctx, c.cancel = context.WithCancel(context.Background())
	cc := c.newConn(nc)
	c.install(cc)
	c.wg.Add(1)
	go c.maintain(cc)
	return c, nil
}

// Dial returns a client of the server at the TCP address addr. It sets
// opts.Dial if nil.
func Dial(ctx context.Context, addr string, opts ClientOptions) (*Client, error) {
	if opts.Dial == nil {
		var d net.Dialer
		opts.Dial = func(ctx context.Context) (net.Conn, error) {
			return d.DialContext(ctx, "tcp", addr)
		}
	}
	return NewClient(ctx, opts)
}

// Close closes the connection, fails every pending call with ErrClosed and
// waits for the client's goroutines to exit.
func (c *Client) Close() error {
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		return nil
	}
	c.closed = true
	cc, nc := c.conn, c.connecting
	c.conn, c.connecting = nil, nil
	c.mu.Unlock()
	close(c.closing)
	c.cancel()
	if cc != nil {
		cc.fail(ErrClosed)
	}
	if nc != nil {
		nc.fail(ErrClosed)
	}
	c.wg.Wait()
	return nil
}

// MajorTimeout returns a channel closed at the next major timeout of a
// hard call: the moment a soft call would have failed. Work that must end
// in bounded time (write-back at unmount) gives up on it.
func (c *Client) MajorTimeout() <-chan struct{} {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.major
}

func (c *Client) now() int64 { return int64(time.Since(c.epoch)) }

// timeo is the wait after the n-th transmission (n ≥ 1).
func (c *Client) timeo(n int) time.Duration {
	if n > int(maxTimeout/c.opts.Timeout) {
		return maxTimeout
	}
	return min(time.Duration(n)*c.opts.Timeout, maxTimeout)
}

// Call calls procedure proc of version vers of program prog with credential
// cred, arguments args (nil: none) and decodes the results into res (nil:
// ignored). Results may alias the reply record, which is not reused.
//
// It returns *AcceptError or *DeniedError when the server refuses the call,
// an error wrapping ErrTimeout after a soft major timeout, ErrClosed when the
// client is closed, and ctx.Err() when ctx is done first.
func (c *Client) Call(ctx context.Context, prog, vers, proc uint32, cred OpaqueAuth, args Marshaler, res Unmarshaler) error {
	return c.call(ctx, nil, prog, vers, proc, cred, args, res)
}

// call is Call, on connection pin alone if it is set. A pinned call takes
// no in-flight slot: the calls holding them may all be waiting for pin's
// OnReconnect hook, whose calls these are.
func (c *Client) call(ctx context.Context, pin *clientConn, prog, vers, proc uint32, cred OpaqueAuth, args Marshaler, res Unmarshaler) error {
	start := time.Now()
	if pin == nil {
		if err := c.acquire(ctx); err != nil {
			c.observe(prog, vers, proc, start, nil, 0, 0, err)
			return err
		}
		defer func() { <-c.sem }()
	}

	p := c.calls.Get().(*pendingCall)
	p.refs.Store(1)
	b, mark := BeginRecord(p.req[:0])
	b = appendCallHeader(b, prog, vers, proc, cred)
	if args != nil {
		b = args.Append(b)
	}
	FinishRecord(b, mark)
	p.req = b
	if len(b)-4 > c.maxRecord {
		c.release(p)
		err := fmt.Errorf("rpc: call to prog %d vers %d proc %d: request of %d bytes exceeds %d",
			prog, vers, proc, len(b)-4, c.maxRecord)
		c.observe(prog, vers, proc, start, nil, 0, 0, err)
		return err
	}

	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		c.release(p)
		c.observe(prog, vers, proc, start, nil, 0, 0, ErrClosed)
		return ErrClosed
	}
	xid := c.xid.Add(1)
	for c.pending[xid] != nil { // only after 2^32 calls, but never mix two up
		xid = c.xid.Add(1)
	}
	p.xid = xid
	xdr.PutUint32(p.req, mark+4, xid)
	if pin != nil && !pin.pinLocked(p) {
		c.mu.Unlock()
		c.release(p)
		err := fmt.Errorf("%w: prog %d vers %d proc %d: %v", ErrConnLost, prog, vers, proc, pin.err)
		c.observe(prog, vers, proc, start, nil, 0, 0, err)
		return err
	}
	c.pending[xid] = p
	c.sendLocked(p)
	c.mu.Unlock()

	timer := p.timer
	if timer == nil {
		timer = time.NewTimer(c.timeo(1))
		p.timer = timer
	} else {
		timer.Reset(c.timeo(1))
	}
	timeouts, retries := 0, 0
	for {
		select {
		case rec := <-p.reply:
			if rec == nil { // pinned, and its connection is gone
				err := fmt.Errorf("%w: prog %d vers %d proc %d xid %#x: %v", ErrConnLost, prog, vers, proc, xid, pin.err)
				c.observe(prog, vers, proc, start, p, timeouts, 0, err)
				c.finish(p)
				return err
			}
			err := decodeReply(&p.dec, rec, prog, vers, proc, res)
			c.observe(prog, vers, proc, start, p, timeouts, len(rec)+4, err)
			c.finish(p)
			return err
		case <-timer.C:
			timeouts++
			switch {
			case retries < c.opts.Retrans:
				retries++
				if !c.opts.NoRetransmit {
					c.retransmit(p)
				}
			case pin != nil:
				// The hook's call: failing it fails the hook, which
				// drops the connection and tries another.
				err := fmt.Errorf("%w: prog %d vers %d proc %d xid %#x: no reply on the new connection",
					ErrTimeout, prog, vers, proc, xid)
				c.abandon(p, prog, vers, proc, start, timeouts, err)
				return err
			case !c.opts.Hard:
				err := fmt.Errorf("%w: prog %d vers %d proc %d xid %#x: no reply after %d transmissions",
					ErrTimeout, prog, vers, proc, xid, p.tx.Load())
				// The connection may be what failed (a reply stalled
				// mid-record blocks every reply behind it): reset it as
				// a hard call would, or every later call times out too.
				c.mu.Lock()
				cc := p.conn
				c.mu.Unlock()
				c.abandon(p, prog, vers, proc, start, timeouts, err)
				c.resetStale(cc)
				return err
			default:
				retries = 0
				if c.unresponsive.CompareAndSwap(false, true) {
					c.logf("rpc: server %s not responding, still trying", c.server)
				}
				c.majorTimeout(p)
				c.mu.Lock()
				close(c.major)
				c.major = make(chan struct{})
				c.mu.Unlock()
			}
			timer.Reset(c.timeo(timeouts + 1))
		case <-ctx.Done():
			err := ctx.Err()
			if pin != nil && pin.isDead() { // (the hook's context ends with its connection)
				err = fmt.Errorf("%w: prog %d vers %d proc %d xid %#x: %v", ErrConnLost, prog, vers, proc, xid, pin.err)
			}
			c.abandon(p, prog, vers, proc, start, timeouts, err)
			return err
		case <-c.closing:
			c.abandon(p, prog, vers, proc, start, timeouts, ErrClosed)
			return ErrClosed
		}
	}
}

func (c *Client) acquire(ctx context.Context) error {
	select {
	case c.sem <- struct{}{}:
		return nil
	default:
	}
	select {
	case c.sem <- struct{}{}:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	case <-c.closing:
		return ErrClosed
	}
}

// sendLocked queues p on the current connection, or, with none, makes sure
// one is being established: the new connection sends every pending call.
// A pinned call goes to its own connection.
func (c *Client) sendLocked(p *pendingCall) {
	if p.pin != nil {
		p.conn = p.pin
		p.pin.enqueue(p)
		return
	}
	if c.conn != nil {
		p.conn = c.conn
		c.conn.enqueue(p)
		return
	}
	select {
	case c.wake <- struct{}{}:
	default:
	}
}

func (c *Client) retransmit(p *pendingCall) {
	c.mu.Lock()
	if c.pending[p.xid] == p {
		c.sendLocked(p)
	}
	c.mu.Unlock()
}

// majorTimeout resets the connection the call was last sent on (see
// resetStale); the new one resends every pending call. On a connection left
// alone the call is sent again, unless NoRetransmit.
func (c *Client) majorTimeout(p *pendingCall) {
	c.mu.Lock()
	cc := p.conn
	if !c.opts.NoRetransmit && c.pending[p.xid] == p && c.conn != nil && !c.staleLocked(cc) {
		c.sendLocked(p)
	}
	c.mu.Unlock()
	c.resetStale(cc)
}

// staleLocked reports whether cc is the current connection and at least
// one timeout old: one that has stopped answering may be silently dead, or
// wedged behind a reply that stopped mid-record. A younger one is left
// alone, so that many calls timing out together do not each tear down the
// replacement the first one caused.
func (c *Client) staleLocked(cc *clientConn) bool {
	return cc != nil && c.conn == cc && time.Since(cc.established) >= c.opts.Timeout
}

// resetStale fails cc if it is stale; the next call to need a connection
// makes a new one.
func (c *Client) resetStale(cc *clientConn) {
	c.mu.Lock()
	stale := c.staleLocked(cc)
	c.mu.Unlock()
	if stale {
		cc.fail(errors.New("rpc: major timeout"))
	}
}

// abandon ends a call that got no reply.
func (c *Client) abandon(p *pendingCall, prog, vers, proc uint32, start time.Time, timeouts int, err error) {
	c.mu.Lock()
	if c.pending[p.xid] == p {
		delete(c.pending, p.xid)
		if p.pin != nil {
			delete(p.pin.pinned, p.xid)
		}
	}
	c.mu.Unlock()
	c.observe(prog, vers, proc, start, p, timeouts, 0, err)
	c.finish(p)
}

// finish drops the caller's reference to a call that is no longer pending.
func (c *Client) finish(p *pendingCall) {
	// Stopped before the call can go back to the pool and its timer be
	// reset by another caller.
	p.timer.Stop()
	p.finished.Store(true)
	select {
	case <-p.reply: // delivered while the caller was giving up
	default:
	}
	c.release(p)
}

func (c *Client) release(p *pendingCall) {
	if p.refs.Add(-1) != 0 {
		return
	}
	if cap(p.req) > maxPooledBuf {
		return
	}
	p.req = p.req[:0]
	p.finished.Store(false)
	p.tx.Store(0)
	p.firstSent.Store(0)
	p.lastSent.Store(0)
	p.conn = nil
	p.pin = nil
	p.dec.Reset(nil)
	c.calls.Put(p)
}

func (c *Client) observe(prog, vers, proc uint32, start time.Time, p *pendingCall, timeouts, received int, err error) {
	if c.opts.Observer == nil {
		return
	}
	end := time.Now()
	st := &CallStats{Prog: prog, Vers: vers, Proc: proc, Timeouts: timeouts, BytesReceived: received,
		Execute: end.Sub(start), Queue: end.Sub(start), Err: err}
	if p != nil {
		st.Transmissions = int(p.tx.Load())
		st.BytesSent = st.Transmissions * len(p.req)
		if first := p.firstSent.Load(); first != 0 {
			st.Queue = c.epoch.Add(time.Duration(first)).Sub(start)
		}
		if last := p.lastSent.Load(); last != 0 && received > 0 {
			st.RTT = end.Sub(c.epoch.Add(time.Duration(last)))
		}
	}
	c.opts.Observer(st)
}
