package rpc

import (
	"bufio"
	"context"
	"encoding/binary"
	"fmt"
	"net"
	"sync"
	"sync/atomic"
	"time"
)

// clientConn is one connection with its reader and writer goroutines.
type clientConn struct {
	c           *Client
	nc          net.Conn
	info        ConnInfo        // for calls from the server
	ctx         context.Context // cancelled when the connection dies
	cancel      context.CancelFunc
	established time.Time     // when it became the current connection; guarded by Client.mu
	notify      chan struct{} // capacity 1: the queue is not empty
	dead        chan struct{}
	once        sync.Once
	err         error       // why the connection died; set before dead is closed
	replied     atomic.Bool // at least one reply arrived
	wbuf        net.Buffers // the writer's; a field so that writev does not allocate it

	// pinned holds the calls bound to this connection (Conn.Call) that
	// await their replies; pinDead is set once it died. Guarded by
	// Client.mu.
	pinned  map[uint32]*pendingCall
	pinDead bool

	// backHeld counts the server's calls being served plus the replies
	// queued for them and not yet written (client_back.go).
	backHeld atomic.Int32

	qmu     sync.Mutex
	q       []*pendingCall
	rq      [][]byte // replies to the server's calls, each a whole record
	qclosed bool
}

// Conn is one connection of a Client, as handed to
// ClientOptions.OnReconnect. It may be kept; its calls fail once the
// connection is gone.
type Conn struct{ cc *clientConn }

// Call is Client.Call on this connection alone: the call is never resent on
// another connection, and fails with an error wrapping ErrConnLost when
// this one is lost. It does not wait for an in-flight slot of the client.
func (n *Conn) Call(ctx context.Context, prog, vers, proc uint32, cred OpaqueAuth, args Marshaler, res Unmarshaler) error {
	return n.cc.c.call(ctx, n.cc, prog, vers, proc, cred, args, res)
}

// LocalAddr and RemoteAddr are the connection's addresses.
func (n *Conn) LocalAddr() net.Addr  { return n.cc.info.LocalAddr }
func (n *Conn) RemoteAddr() net.Addr { return n.cc.info.RemoteAddr }

// newConn starts the reader and writer of nc. The connection carries no
// call but those pinned to it (Conn.Call) until install makes it the
// current one. It returns nil if the client was closed meanwhile.
func (c *Client) newConn(nc net.Conn) *clientConn {
	cc := &clientConn{
		c:      c,
		nc:     nc,
		info:   ConnInfo{RemoteAddr: nc.RemoteAddr(), LocalAddr: nc.LocalAddr()},
		notify: make(chan struct{}, 1),
		dead:   make(chan struct{}),
		pinned: make(map[uint32]*pendingCall),
	}
	cc.ctx, cc.cancel = context.WithCancel(c.ctx)
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		cc.cancel()
		nc.Close()
		return nil
	}
	c.connecting = cc
	c.wg.Add(2)
	c.mu.Unlock()
	go cc.readLoop()
	go cc.writeLoop()
	return cc
}

// install makes cc the current connection and queues every pending call on
// it but those pinned to another. It reports false if the client was closed
// meanwhile.
func (c *Client) install(cc *clientConn) bool {
	c.mu.Lock()
	if c.connecting == cc {
		c.connecting = nil
	}
	if c.closed {
		c.mu.Unlock()
		cc.fail(ErrClosed)
		return false
	}
	c.conn = cc
	cc.established = time.Now()
	for _, p := range c.pending {
		if p.pin == nil {
			p.conn = cc
			cc.enqueue(p)
		}
	}
	c.mu.Unlock()
	return true
}

// pinLocked binds p to cc; it reports false if cc is gone already.
//
// LOCKS_REQUIRED: c.mu.
func (cc *clientConn) pinLocked(p *pendingCall) bool {
	if cc.pinDead {
		return false
	}
	p.pin = cc
	cc.pinned[p.xid] = p
	return true
}

// failPinned fails the calls pinned to cc, which died: a nil reply tells
// each caller so. No new one can be pinned.
func (cc *clientConn) failPinned() {
	c := cc.c
	c.mu.Lock()
	cc.pinDead = true
	for xid, p := range cc.pinned {
		if c.pending[xid] == p {
			delete(c.pending, xid)
			p.reply <- nil // cannot block: one delivery per registration
		}
	}
	clear(cc.pinned)
	c.mu.Unlock()
}

// maintain re-establishes the connection whenever it breaks, once a call
// needs it, backing off while attempts keep failing.
func (c *Client) maintain(cc *clientConn) {
	defer c.wg.Done()
	var backoff time.Duration
	for {
		select {
		case <-cc.dead:
		case <-c.closing:
			return
		}
		select {
		case <-c.closing:
			return
		default:
		}
		c.mu.Lock()
		if c.conn == cc {
			c.conn = nil
		}
		c.mu.Unlock()
		if cc.replied.Load() {
			backoff = 0 // it worked for a while: try again at once
		}
		c.logf("rpc: connection to %s lost: %v", c.server, cc.err)
		for cc = nil; cc == nil; {
			if backoff > 0 {
				select {
				case <-time.After(backoff):
				case <-c.closing:
					return
				}
			}
			backoff = min(max(2*backoff, 100*time.Millisecond), maxReconnectBackoff)
			if !c.awaitWork() {
				return
			}
			ctx, cancel := context.WithTimeout(c.ctx, c.opts.Timeout)
			nc, err := c.opts.Dial(ctx)
			cancel()
			if err != nil {
				if c.ctx.Err() != nil {
					return
				}
				c.logf("rpc: reconnecting to %s: %v", c.server, err)
				continue
			}
			if cc = c.newConn(nc); cc == nil {
				return
			}
			if hook := c.opts.OnReconnect; hook != nil {
				if err := hook(cc.ctx, &Conn{cc}); err != nil {
					c.logf("rpc: setting up the new connection to %s: %v", c.server, err)
					cc.fail(fmt.Errorf("setting up the connection: %w", err))
					c.mu.Lock()
					if c.connecting == cc {
						c.connecting = nil
					}
					c.mu.Unlock()
					cc = nil
					continue
				}
			}
			if !c.install(cc) {
				return
			}
		}
	}
}

// awaitWork waits until some call is pending, or, while the client serves
// calls from the server (Register), returns at once: the server can reach
// such a client only on a connection the client made. It reports false
// when the client is closed.
func (c *Client) awaitWork() bool {
	for {
		c.mu.Lock()
		n := len(c.pending)
		c.mu.Unlock()
		if n > 0 || len(*c.progs.Load()) > 0 {
			return true
		}
		select {
		case <-c.wake:
		case <-c.closing:
			return false
		}
	}
}

// enqueue queues a transmission of p. It never blocks.
func (cc *clientConn) enqueue(p *pendingCall) {
	cc.qmu.Lock()
	if !cc.qclosed {
		p.refs.Add(1)
		cc.q = append(cc.q, p)
	}
	cc.qmu.Unlock()
	select {
	case cc.notify <- struct{}{}:
	default:
	}
}

func (cc *clientConn) isDead() bool {
	select {
	case <-cc.dead:
		return true
	default:
		return false
	}
}

// fail closes the connection and fails what is bound to it.
//
// LOCKS_EXCLUDED: c.mu.
func (cc *clientConn) fail(err error) {
	cc.once.Do(func() {
		cc.err = err
		close(cc.dead)
		cc.cancel()
		cc.nc.Close()
		cc.failPinned()
	})
}

// writeLoop sends queued requests, gathering whatever is queued into one
// writev. Callers never wait for it: a connection that stops taking data
// blocks only this goroutine, until the connection is failed.
func (cc *clientConn) writeLoop() {
	c := cc.c
	defer c.wg.Done()
	var batch []*pendingCall
	var replies [][]byte
	var bufs net.Buffers
	for {
		select {
		case <-cc.notify:
		case <-cc.dead:
			cc.qmu.Lock()
			cc.qclosed = true
			rest := cc.q
			cc.q = nil
			cc.backHeld.Add(-int32(len(cc.rq)))
			cc.rq = nil
			cc.qmu.Unlock()
			for _, p := range rest {
				c.release(p)
			}
			return
		}
		cc.qmu.Lock()
		batch, cc.q = cc.q, batch[:0]
		replies, cc.rq = cc.rq, replies[:0]
		cc.qmu.Unlock()
		if len(replies) > 0 {
			// Out of backHeld once taken, not once written: the server
			// may read a reply and send its next call before this
			// goroutine runs again. What the writer holds is bounded by
			// what one batch took.
			cc.backHeld.Add(-int32(len(replies)))
			bufs = append(bufs, replies...)
		}
		now := c.now()
		for _, p := range batch {
			if p.finished.Load() {
				continue
			}
			p.tx.Add(1)
			p.firstSent.CompareAndSwap(0, now)
			p.lastSent.Store(now)
			bufs = append(bufs, p.req)
		}
		var err error
		if len(bufs) > 0 {
			cc.wbuf = bufs // WriteTo consumes its receiver
			_, err = cc.wbuf.WriteTo(cc.nc)
		}
		clear(bufs)
		bufs = bufs[:0]
		for i, p := range batch {
			c.release(p)
			batch[i] = nil
		}
		clear(replies)
		if err != nil {
			cc.fail(fmt.Errorf("writing requests: %w", err))
		}
	}
}

// readLoop matches replies to pending calls by XID. A reply nobody waits
// for (its call timed out or was cancelled) is dropped. Calls from the
// server are served (serveCall).
func (cc *clientConn) readLoop() {
	c := cc.c
	defer c.wg.Done()
	br := bufio.NewReaderSize(cc.nc, 64<<10)
	for {
		rec, err := readRecord(br, nil, c.maxRecord, c.maxRecord)
		if err != nil {
			cc.fail(fmt.Errorf("reading replies: %w", err))
			return
		}
		if len(rec) < 8 {
			continue
		}
		switch binary.BigEndian.Uint32(rec[4:]) {
		case MsgReply:
		case MsgCall:
			cc.serveCall(rec)
			continue
		default:
			continue
		}
		xid := binary.BigEndian.Uint32(rec)
		c.mu.Lock()
		if p := c.pending[xid]; p != nil {
			delete(c.pending, xid)
			if p.pin != nil {
				delete(p.pin.pinned, xid)
			}
			// Under the lock, so that a caller giving up either finds
			// the call still pending or finds the reply in the channel.
			select {
			case p.reply <- rec:
			default: // cannot happen: one delivery per registration
			}
		}
		c.mu.Unlock()
		cc.replied.Store(true)
		if c.unresponsive.Load() && c.unresponsive.CompareAndSwap(true, false) {
			c.logf("rpc: server %s OK", c.server)
		}
	}
}
