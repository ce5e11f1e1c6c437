package rpc

import (
	"context"
	"encoding/binary"
	"fmt"
	"math/rand/v2"
	"net"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"hushfs/internal/xdr"
)

// DefaultBackTimeout bounds a call to a client on its connection: long
// enough for a client to write back what a recall asks for, short enough
// that a client that never answers does not hold its caller for long.
const DefaultBackTimeout = 30 * time.Second

// BackChannel calls the client at the other end of one connection, on that
// connection: NFSv4.1's back channel on the fore channel's connection
// (RFC 8881 §2.10.3.1). The server writes the calls between its replies,
// each record whole, and its reader hands the replies (REPLY records among
// the client's calls) to the calls waiting for them, matched by XID.
//
// It may be kept after the handler that obtained it returns; once its
// connection is gone every call fails at once with an error wrapping
// ErrConnLost (Done tells when). A call is never retransmitted: NFSv4.1
// retries only on another connection, which is the caller's to choose.
//
// A reply is read by the connection's reader, which stops reading at
// ServerOptions.MaxInFlightPerConn calls in flight and, like every reader,
// waits for a worker when all are busy. A handler that waits for a back
// call's reply holds both a worker and its connection's slot meanwhile; if
// every slot of the connection (or every worker) is held so, the reply is
// not read until the calls time out. Handlers that need to call back and
// may be many (NFSv4.1 recalls) call from a goroutine of their own and
// answer meanwhile (NFS4ERR_DELAY).
type BackChannel struct {
	c   *serverConn
	xid atomic.Uint32
	sem chan struct{} // one token per call in flight

	mu      sync.Mutex
	pending map[uint32]chan []byte // by XID; each capacity 1; a nil record: the client closed its end
}

// BackChannel returns the caller of the client at the other end of the
// connection, or nil if ci does not describe a Server's connection. Every
// call to it for one connection returns the same BackChannel.
func (ci *ConnInfo) BackChannel() *BackChannel {
	if ci == nil || ci.conn == nil {
		return nil
	}
	c := ci.conn
	if b := c.back.Load(); b != nil {
		return b
	}
	b := &BackChannel{
		c:       c,
		sem:     make(chan struct{}, c.s.opts.MaxBackCallsPerConn),
		pending: make(map[uint32]chan []byte),
	}
	b.xid.Store(rand.Uint32())
	if !c.back.CompareAndSwap(nil, b) {
		return c.back.Load()
	}
	return b
}

// Done is closed when the connection is gone.
func (b *BackChannel) Done() <-chan struct{} { return b.c.done }

// RemoteAddr is the client's address.
func (b *BackChannel) RemoteAddr() net.Addr { return b.c.info.RemoteAddr }

// Call calls procedure proc of version vers of program prog at the client
// with credential cred (AUTH_NONE or AUTH_SYS, as the client asked for:
// NFSv4.1's callback_sec_parms4), arguments args (nil: none), and decodes
// the results into res (nil: ignored); results may alias the reply record,
// which is not reused.
//
// It returns *AcceptError or *DeniedError when the client refuses the call;
// an error wrapping ErrTimeout when no reply came within
// ServerOptions.BackTimeout, ErrConnLost when the connection is gone, and
// ctx.Err() when ctx is done first.
func (b *BackChannel) Call(ctx context.Context, prog, vers, proc uint32, cred OpaqueAuth, args Marshaler, res Unmarshaler) error {
	c := b.c
	timeout := c.s.opts.BackTimeout
	timer := time.NewTimer(timeout)
	defer timer.Stop()
	fail := func(what string, err error) error {
		return fmt.Errorf("rpc: back channel call to prog %d vers %d proc %d at %v: %s: %w",
			prog, vers, proc, c.info.RemoteAddr, what, err)
	}
	select {
	case b.sem <- struct{}{}:
	case <-ctx.Done():
		return ctx.Err()
	case <-timer.C:
		return fail(fmt.Sprintf("no place among %d calls in flight within %v", cap(b.sem), timeout), ErrTimeout)
	case <-c.done:
		return fail("sending", ErrConnLost)
	}
	defer func() { <-b.sem }()

	rb := c.s.getReply()
	rec, mark := BeginRecord(rb.b[:0])
	rec = appendCallHeader(rec, prog, vers, proc, cred)
	if args != nil {
		rec = args.Append(rec)
	}
	FinishRecord(rec, mark)
	rb.b, rb.backCall = rec, true
	if len(rec)-4 > c.s.opts.MaxRecord {
		c.s.putReply(rb)
		return fail(fmt.Sprintf("request of %d bytes exceeds %d", len(rec)-4, c.s.opts.MaxRecord), ErrRecordTooLarge)
	}
	ch := make(chan []byte, 1)
	b.mu.Lock()
	xid := b.xid.Add(1)
	for b.pending[xid] != nil {
		xid = b.xid.Add(1)
	}
	b.pending[xid] = ch
	b.mu.Unlock()
	if c.eof.Load() { // (after registering: see peerClosed)
		return fail("the client closed its end", ErrConnLost)
	}
	defer func() {
		b.mu.Lock()
		if b.pending[xid] == ch {
			delete(b.pending, xid)
		}
		b.mu.Unlock()
	}()
	xdr.PutUint32(rec, mark+4, xid)

	c.addHeld(len(rec))
	select {
	case c.backOut <- rb: // the writer owns rb now
	case <-ctx.Done():
		c.addHeld(-len(rec))
		c.s.putReply(rb)
		return ctx.Err()
	case <-timer.C:
		c.addHeld(-len(rec))
		c.s.putReply(rb)
		return fail(fmt.Sprintf("not sent within %v", timeout), ErrTimeout)
	case <-c.done:
		return fail("sending", ErrConnLost)
	}
	// The reply is read by whoever holds the reading role; if a call runs
	// on the reader (perhaps the caller itself), hand the role on now
	// rather than after inlineGrace.
	c.expedite()

	select {
	case reply := <-ch:
		if reply == nil {
			return fail(fmt.Sprintf("xid %#x: the client closed its end", xid), ErrConnLost)
		}
		var d xdr.Decoder
		return decodeReply(&d, reply, prog, vers, proc, res)
	case <-ctx.Done():
		return ctx.Err()
	case <-timer.C:
		return fail(fmt.Sprintf("xid %#x: no reply within %v", xid, timeout), ErrTimeout)
	case <-c.done:
		return fail(fmt.Sprintf("xid %#x: waiting for the reply", xid), ErrConnLost)
	}
}

// deliverReply hands a REPLY record read on the connection to the back
// channel call waiting for it; one nobody waits for (its call timed out,
// or a client's stray reply) is dropped. The record's buffer goes back to
// the reader's pool: the call gets a copy.
func (c *serverConn) deliverReply(rec []byte) {
	b := c.back.Load()
	if b == nil || len(rec) < 4 {
		return
	}
	xid := binary.BigEndian.Uint32(rec)
	b.mu.Lock()
	ch := b.pending[xid]
	delete(b.pending, xid)
	b.mu.Unlock()
	if ch != nil {
		ch <- slices.Clone(rec) // cannot block: one delivery per registration
	}
}

// peerClosed fails the calls to the client, which closed its end of the
// connection and so will never answer; later ones fail at once. A call
// either registers before the scan here or sees eof set after registering.
func (c *serverConn) peerClosed() {
	c.eof.Store(true)
	b := c.back.Load()
	if b == nil {
		return
	}
	b.mu.Lock()
	for xid, ch := range b.pending {
		ch <- nil // cannot block: one delivery per registration
		delete(b.pending, xid)
	}
	b.mu.Unlock()
}

// backBusy reports whether calls to the client are in flight: the
// connection is not idle then.
func (c *serverConn) backBusy() bool {
	b := c.back.Load()
	return b != nil && len(b.sem) > 0
}

// expedite hands the reading role to a new goroutine at once if a call
// runs on the reader (runInline): the reply to a back call must be read
// meanwhile. This is takeOver without the grace period.
func (c *serverConn) expedite() {
	c.rmu.Lock()
	if c.inline == 0 {
		c.rmu.Unlock()
		return
	}
	c.inline = 0
	c.readers++
	c.rmu.Unlock()
	go c.readLoop()
}
