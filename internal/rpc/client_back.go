package rpc

import (
	"context"
	"fmt"
	"runtime/debug"
)

// Calls from the server on the client's connection: NFSv4.1 sends its
// callbacks (CB_COMPOUND, CB_NULL) on the fore channel's connection
// (RFC 8881 §2.10.3.1), so the client's reader, which otherwise sees only
// replies, also takes CALL records and serves them.
//
// What a server can make the client hold is bounded: a call is read whole
// only up to the client's MaxRecord (beyond, the connection is dropped, as
// for an oversized reply) and served only up to MaxBackRecord; at most
// MaxBackCalls are served or have replies waiting to be written at once.
// The reader never waits for a handler: a handler may itself call the
// server (a CB_RECALL answered by DELEGRETURN) and need the reader to
// deliver that reply.

// Register serves version vers of program prog to the server at the other
// end of the client's connections (for NFSv4.1, the callback program the
// client named in CREATE_SESSION); registering the same program and version
// again replaces the handler. Calls to programs not registered are answered
// PROG_UNAVAIL, to versions not registered PROG_MISMATCH. Once a program is
// registered, a lost connection is re-established at once rather than when
// the next call needs it, so that the server can reach the client.
func (c *Client) Register(prog, vers uint32, h Handler) {
	c.mu.Lock()
	c.progs.Store(c.progs.Load().with(prog, progVers{vers: vers, h: h}))
	c.mu.Unlock()
	select {
	case c.wake <- struct{}{}: // a connection may be wanted now
	default:
	}
}

// serveCall answers, or starts serving, a call record from the server. It
// runs on the reader and never blocks.
func (cc *clientConn) serveCall(rec []byte) {
	c := cc.c
	held := cc.backHeld.Load()
	if held >= 2*int32(c.opts.MaxBackCalls) {
		cc.fail(fmt.Errorf("the server sent a call with %d of its calls unanswered or their replies unread", held))
		return
	}
	call := &Call{}
	pv, reply, v := decodeCall(c.progs.Load(), rec, call, nil)
	switch v {
	case verdictDispatch:
	case verdictReply: // refused by the RPC layer (version, credential, program)
		cc.queueReply(reply)
		return
	default: // no header to answer
		c.connLog.logf(c.logf, "rpc: ignoring a malformed call of %d bytes from %s", len(rec), c.server)
		return
	}
	switch {
	case len(rec) > c.opts.MaxBackRecord:
		c.connLog.logf(c.logf, "rpc: call of %d bytes from %s to prog %d vers %d proc %d exceeds %d: answered GARBAGE_ARGS",
			len(rec), c.server, call.Prog, call.Vers, call.Proc, c.opts.MaxBackRecord)
		cc.queueReply(acceptReply(nil, call.XID, ErrGarbageArgs))
		return
	case held >= int32(c.opts.MaxBackCalls):
		c.connLog.logf(c.logf, "rpc: %d calls from %s in progress: answering prog %d vers %d proc %d SYSTEM_ERR",
			held, c.server, call.Prog, call.Vers, call.Proc)
		cc.queueReply(acceptReply(nil, call.XID, ErrSystem))
		return
	}
	call.Conn = &cc.info
	cc.backHeld.Add(1)
	c.wg.Add(1)
	go cc.runBack(pv.h, call)
}

// runBack serves one call from the server on its own goroutine and queues
// the reply. The call's place in backHeld passes to its reply.
func (cc *clientConn) runBack(h Handler, call *Call) {
	c := cc.c
	defer c.wg.Done()
	replied := false
	defer func() {
		if !replied { // dropped, or the handler ended its goroutine
			cc.backHeld.Add(-1)
		}
	}()
	b, start := BeginRecord(make([]byte, 0, 256))
	b = appendAccepted(b, call.XID, Success)
	out, err := invokeBack(cc.ctx, h, call, b)
	b, err = handlerReply(b, start, call.XID, out, err)
	if err == ErrDrop {
		return
	}
	if err != nil {
		c.logf("rpc: serving prog %d vers %d proc %d from %s: %v", call.Prog, call.Vers, call.Proc, c.server, err)
	}
	FinishRecord(b, start)
	replied = true
	cc.backHeld.Add(-1) // queueReply counts the reply
	cc.queueReply(b)
}

// invokeBack calls the handler, turning a panic into an error.
func invokeBack(ctx context.Context, h Handler, call *Call, reply []byte) (out []byte, err error) {
	defer func() {
		if p := recover(); p != nil {
			out, err = nil, fmt.Errorf("handler panic: %v\n%s", p, debug.Stack())
		}
	}()
	return h.ServeRPC(ctx, call, reply)
}

// queueReply queues a reply record (mark included) for the writer, which
// sends it whole between requests. It never blocks.
func (cc *clientConn) queueReply(rec []byte) {
	cc.qmu.Lock()
	if cc.qclosed {
		cc.qmu.Unlock()
		return
	}
	cc.backHeld.Add(1)
	cc.rq = append(cc.rq, rec)
	cc.qmu.Unlock()
	select {
	case cc.notify <- struct{}{}:
	default:
	}
}
