package proxy

import (
	"encoding/binary"
	"errors"
	"io"
	"net"
	"sync/atomic"
	"syscall"
	"time"
)

// pipe is one direction of a pair.
type pipe struct {
	p        *Proxy
	pr       *pair
	src, dst net.Conn
	delay    time.Duration
	parser   *streamParser
	bytes    *atomic.Uint64
	line     *delayLine
	what     string

	fromClient bool // src is the client, dst the target

	// The reader's record state, for faults.
	fr      framer
	rec     record
	lastDue time.Time // due time of the last chunk queued
	dead    bool      // a close was decided: discard everything further
	taken   bool      // the current read buffer went into the line
}

// Record tunables of the fault path.
const (
	callHdrLen  = 24  // xid, msg_type, rpcvers, prog, vers, proc
	replyHdrLen = 8   // xid, msg_type
	maxHold     = 256 // bytes of a record held for its decision, marks included
)

// Ways a chunk closes its connection once written.
const (
	closeNone = iota
	closeCall // CloseEvery, CloseProb
	closeCut  // TruncateEvery, TruncateProb
)

// record is the reader's state for the record under way.
type record struct {
	decided   bool
	v         verdict
	due       time.Duration // delay of its bytes beyond the pipe's
	hold      []byte        // bytes held until the decision, marks included
	hdr       []byte        // its first body bytes
	firstFrag int           // length of its first fragment, once known
	gotFrag   bool
	sent      int    // bytes forwarded
	xid       uint32 // from the header, when parsed
	copy      []byte // the record as sent, when duplicated
	copyOK    bool   // copy is complete so far (not over MaxDupRecord)
}

func (r *record) begin() {
	*r = record{hold: r.hold[:0], hdr: r.hdr[:0]}
}

// read moves bytes from src into the delay line, parsing them on the way.
func (d *pipe) read() {
	bp := d.p.bufs.Get().(*[]byte)
	defer func() {
		if bp != nil {
			d.p.bufs.Put(bp)
		}
	}()
	var pause *time.Timer
	for {
		buf := *bp
		var slow *faultState // the faults that made this read slow
		if fs := d.p.faults.Load(); !d.fromClient && fs != nil && fs.cfg.SlowRead > 0 {
			slow = fs
			buf = buf[:min(fs.cfg.SlowRead, len(buf))]
		}
		n, err := d.src.Read(buf)
		// Loaded after the read, which may have waited long: the faults
		// apply to bytes from the time they arrive.
		fs := d.p.faults.Load()
		if n > 0 {
			data := buf[:n]
			d.bytes.Add(uint64(n))
			d.parser.feed(data)
			d.taken = false
			if !d.forward(data, bp, fs) {
				if d.taken {
					bp = nil // the aborted line dropped it
				}
				return
			}
			if d.taken {
				bp = d.p.bufs.Get().(*[]byte)
			}
		}
		if err != nil {
			if errors.Is(err, io.EOF) {
				d.line.closeInput()
			} else {
				d.fail("read", err)
			}
			return
		}
		if slow != nil && n > 0 {
			d.p.c.fault(func(f *FaultCounts) { f.SlowReads++ })
			if slow.cfg.SlowReadPause > 0 {
				if pause == nil {
					pause = time.NewTimer(slow.cfg.SlowReadPause)
				} else {
					pause.Reset(slow.cfg.SlowReadPause)
				}
				select {
				case <-pause.C:
				case <-d.pr.done:
					pause.Stop()
					return
				}
			}
		}
	}
}

// forward queues what a read brought, record by record: bytes of records
// with no fault go on as one chunk per contiguous stretch (the whole read,
// without copying, when nothing intervenes); a record's first bytes wait in
// its hold while faults are on, until its header shows what to do with it.
// It reports false if the pair was torn down.
func (d *pipe) forward(data []byte, bp *[]byte, fs *faultState) bool {
	now := time.Now()
	// span is the stretch of data being gathered into one chunk.
	spanStart, spanEnd := -1, 0
	var spanDelay time.Duration
	spanRecEnd := false
	flush := func(how uint8) bool {
		if spanStart < 0 {
			return true
		}
		piece := data[spanStart:spanEnd]
		c := chunk{due: now.Add(d.delay + spanDelay), recEnd: spanRecEnd, closeAfter: how}
		if spanStart == 0 && spanEnd == len(data) && len(data) > smallChunk {
			c.data, c.pooled = piece, bp
			c.cost = cap(*bp) + chunkOverhead
			d.taken = true
		} else {
			// Keep the big buffer for the next read rather than parking
			// 64 KiB behind a few bytes.
			c.data = append([]byte(nil), piece...)
			c.cost = len(piece) + chunkOverhead
		}
		spanStart = -1
		return d.push(c)
	}
	// emit forwards piece of the current record: at data[off:] when inBuf,
	// else (held bytes) as a chunk of its own.
	emit := func(piece []byte, inBuf bool, off int, end bool, how uint8) bool {
		if !inBuf {
			if !flush(closeNone) {
				return false
			}
			return d.push(chunk{data: append([]byte(nil), piece...), cost: len(piece) + chunkOverhead,
				due: now.Add(d.delay + d.rec.due), recEnd: end, closeAfter: how})
		}
		if spanStart >= 0 && (spanEnd != off || spanDelay != d.rec.due) {
			if !flush(closeNone) {
				return false
			}
		}
		if spanStart < 0 {
			spanStart, spanDelay = off, d.rec.due
		}
		spanEnd, spanRecEnd = off+len(piece), end
		if how != closeNone {
			return flush(how)
		}
		return true
	}
	// apply treats piece, the next bytes of the decided current record.
	apply := func(piece []byte, inBuf bool, off int, end bool) bool {
		r := &d.rec
		if r.v.drop {
			return flush(closeNone) // what follows is not contiguous with the span
		}
		if r.v.dup && r.copyOK {
			if len(r.copy)+len(piece) > MaxDupRecord {
				r.copyOK, r.copy = false, nil
			} else {
				r.copy = append(r.copy, piece...)
			}
		}
		if r.v.cut > 0 && r.sent+len(piece) >= r.v.cut {
			d.dead = true
			return emit(piece[:r.v.cut-r.sent], inBuf, off, false, closeCut)
		}
		r.sent += len(piece)
		how := uint8(closeNone)
		if end && r.v.close {
			how = closeCall
			d.dead = true
		}
		// A duplicate is registered before the call's end is queued: its
		// reply may come as soon as the call is written.
		immediate := end && r.v.dup && d.registerDup()
		if !emit(piece, inBuf, off, end, how) {
			return false
		}
		if immediate {
			rec := r.copy
			r.copy = nil
			if !flush(closeNone) {
				return false
			}
			d.p.c.fault(func(f *FaultCounts) { f.Duplicated++ })
			return d.push(chunk{data: rec, cost: len(rec) + chunkOverhead, due: now.Add(d.delay), recEnd: true})
		}
		return true
	}

	for off := 0; off < len(data) && !d.dead; {
		ru := d.fr.next(data[off:])
		piece := data[off : off+ru.n]
		r := &d.rec
		if ru.start {
			r.begin()
			// Records from the server are looked at while duplicates
			// await replies, even with the faults turned off since.
			r.decided = fs == nil && (d.fromClient || !d.pr.dups.pending())
		}
		if ru.markDone && !r.gotFrag {
			r.firstFrag, r.gotFrag = ru.fragLen, true
		}
		if r.decided {
			if !apply(piece, true, off, ru.end) {
				return false
			}
			off += ru.n
			continue
		}
		r.hold = append(r.hold, piece...)
		want := replyHdrLen
		if d.fromClient {
			want = callHdrLen
		}
		if ru.body && len(r.hdr) < want {
			r.hdr = append(r.hdr, piece[:min(len(piece), want-len(r.hdr))]...)
		}
		off += ru.n
		if len(r.hdr) < want && !ru.end && len(r.hold) < maxHold {
			continue
		}
		d.decide(fs)
		r.decided = true
		if !apply(r.hold, false, 0, ru.end) {
			return false
		}
	}
	return flush(closeNone)
}

// decide sets the verdict of the current record from its header.
func (d *pipe) decide(fs *faultState) {
	r := &d.rec
	h := parseHdr(r.hdr, d.fromClient)
	r.xid = h.xid
	now := d.p.cfg.Now()
	if d.fromClient {
		if fs != nil {
			r.v = fs.onCall(now, h, r.firstFrag, d.p.c)
		}
		if r.v.dup {
			r.copyOK = true
		}
		return
	}
	if fs != nil {
		r.v = fs.onReply(now, d.p.c)
	}
	if !r.v.drop && h.isReply {
		drop, resend, delay := d.pr.dups.reply(h.xid)
		if drop {
			r.v = verdict{drop: true}
			d.p.c.fault(func(f *FaultCounts) { f.DupRepliesDropped++ })
		}
		if resend != nil {
			d.pr.toTarget.line.inject(resend, time.Now().Add(delay))
			d.p.c.fault(func(f *FaultCounts) { f.Duplicated++ })
		}
	}
	if r.v.extra > 0 {
		r.due = r.v.extra
		d.p.c.fault(func(f *FaultCounts) { f.JitteredReplies++; f.Jitter += r.v.extra })
	}
}

// registerDup records the current call, complete in r.copy, as
// duplicated. It reports whether the copy is to follow the call at once
// (r.copy is then kept for that); otherwise the copy waits for the first
// reply.
func (d *pipe) registerDup() bool {
	r := &d.rec
	if !r.copyOK {
		d.p.c.fault(func(f *FaultCounts) { f.DupSkipped++ })
		return false
	}
	e := &dupEntry{immediate: r.v.immediate, delay: r.v.dupDelay}
	if !e.immediate {
		e.rec = r.copy
	}
	if !d.pr.dups.add(r.xid, e) {
		// The client retransmitted a call still being duplicated, or
		// too much is held for resending: leave this one alone.
		d.p.c.fault(func(f *FaultCounts) { f.DupSkipped++ })
		return false
	}
	if !r.v.immediate {
		r.copy = nil
	}
	return r.v.immediate
}

// push queues c, keeping due times in order.
func (d *pipe) push(c chunk) bool {
	if c.due.Before(d.lastDue) {
		c.due = d.lastDue
	}
	d.lastDue = c.due
	if !d.line.push(c) {
		if c.pooled != nil {
			d.p.bufs.Put(c.pooled)
		}
		return false
	}
	return true
}

// parseHdr reads the header fields of a record's first body bytes.
func parseHdr(b []byte, call bool) recHdr {
	var h recHdr
	if len(b) < 8 {
		return h
	}
	word := func(i int) uint32 { return binary.BigEndian.Uint32(b[4*i:]) }
	h.xid = word(0)
	if !call {
		h.isReply = word(1) == msgReply
		return h
	}
	if len(b) >= callHdrLen && word(1) == msgCall && word(2) == rpcVersion {
		h.isCall = true
		h.key = ProcKey{word(3), word(4), word(5)}
	}
	return h
}

// write forwards chunks from the delay line to dst as they fall due. Once
// the source has ended and everything is delivered it half-closes dst, so
// an end of stream is delayed like the data before it. A chunk marked to
// close the connection is the last one written.
func (d *pipe) write() {
	var batch []chunk
	var bufs net.Buffers
	atBoundary := true
	for {
		var st lineState
		batch, st = d.line.next(batch, atBoundary)
		switch st {
		case lineAborted:
			return
		case lineEOF:
			if cw, ok := d.dst.(interface{ CloseWrite() error }); ok {
				if err := cw.CloseWrite(); err != nil {
					d.fail("half-close", err)
				}
			}
			return
		}
		if !d.fromClient && d.pr.closing.Load() {
			d.line.release(batch)
			return // the pair is being torn down by a fault
		}
		n, how := len(batch), uint8(closeNone)
		for i, c := range batch {
			if c.closeAfter != closeNone {
				n, how = i+1, c.closeAfter
				d.pr.closing.Store(true)
				break
			}
		}
		bufs = bufs[:0]
		for _, c := range batch[:n] {
			bufs = append(bufs, c.data)
		}
		// WriteTo consumes its receiver, so give it a copy of the header.
		v := bufs
		_, err := v.WriteTo(d.dst)
		atBoundary = batch[n-1].recEnd
		d.line.release(batch)
		for i, c := range batch {
			if c.pooled != nil {
				d.p.bufs.Put(c.pooled)
			}
			batch[i] = chunk{}
		}
		if err != nil {
			d.fail("write", err)
			return
		}
		if how != closeNone {
			d.p.c.fault(func(f *FaultCounts) {
				if how == closeCut {
					f.Truncated++
				} else {
					f.Closes++
				}
			})
			d.pr.abort()
			return
		}
	}
}

// fail tears the pair down after an I/O error. It logs the error unless it
// is the echo of a teardown already under way, or a client resetting its
// connection, which is how many clients end one.
func (d *pipe) fail(op string, err error) {
	select {
	case <-d.pr.done:
		return
	default:
	}
	d.pr.abort()
	clientSide := d.fromClient == (op == "read")
	if errors.Is(err, net.ErrClosed) ||
		clientSide && (errors.Is(err, syscall.ECONNRESET) || errors.Is(err, syscall.EPIPE)) {
		return
	}
	d.p.cfg.Logf("proxy: %s: %s: %v", d.what, op, err)
}
