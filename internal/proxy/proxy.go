// Package proxy is a TCP proxy for ONC RPC traffic that adds a fixed round
// trip time and counts what passes through it.
//
// Every accepted client connection gets its own connection to the target.
// Each direction holds the bytes it reads for half the configured round
// trip before writing them on, through a timestamped queue: the delay is
// added to every byte without limiting how many bytes are in flight, and
// bytes within a direction are never reordered. The proxy never alters a
// byte.
//
// While forwarding, the proxy follows the record marking (RFC 5531 §11) of
// both directions and counts RPC calls per program, version and procedure,
// replies, NFSv3 WRITE calls per stable_how and COMMIT calls. The parsing
// is a streaming state machine fed each read as it comes, so it copies
// nothing and keeps at most one partial XDR word per direction, whatever
// the record sizes. These counts give benchmarks a measure of the RPC
// traffic that is independent of both the client and the server.
//
// The proxy can also inject faults (see Faults): connections closed after
// calls, blackholes, reply jitter, duplicated and truncated calls, and a
// slow reader in front of the server. They act on whole records, are set
// at Start or at any time with SetFaults, and are counted (Counts.Faults).
package proxy

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
)

// Config configures a Proxy.
type Config struct {
	// Listen is the TCP address to listen on; empty means 127.0.0.1:0.
	Listen string
	// Target is the host:port connections are forwarded to. It may be
	// empty only when Dial is set (it then only names the target in logs).
	Target string
	// RTT is the round trip time added: each direction delays its bytes
	// by RTT/2. Zero forwards without delay.
	RTT time.Duration
	// Dial, if set, opens a connection to the target, e.g. to reach one
	// in another network namespace. The default dials Target over TCP.
	Dial func(ctx context.Context) (net.Conn, error)
	// DialTimeout bounds each connection attempt to the target; zero
	// means 10 seconds.
	DialTimeout time.Duration
	// Logf, if set, receives a line for each connection that fails.
	Logf func(format string, args ...any)
	// Faults are the faults injected from the start (none by default);
	// SetFaults changes them later.
	Faults Faults
	// Now is the clock that fault schedules (blackholes) are read from;
	// nil means time.Now.
	Now func() time.Time
}

// Tunables of the forwarding path.
const (
	readSize   = 64 << 10 // bytes per read
	smallChunk = 4 << 10  // reads up to this size are copied out of the read buffer
	// chunkOverhead is charged per queued chunk besides its bytes, so a
	// stream of tiny reads cannot queue unbounded numbers of chunks.
	chunkOverhead = 64
	// lineBudget bounds the bytes held per direction per connection. At
	// 5 ms one way it still allows over 1 GB/s.
	lineBudget = 8 << 20

	defaultDialTimeout = 10 * time.Second
)

// Proxy is a running proxy. Its methods are safe for concurrent use.
type Proxy struct {
	cfg    Config
	ln     net.Listener
	ctx    context.Context // cancelled by Close; parents every dial
	cancel context.CancelFunc
	c      *counters
	bufs   sync.Pool // *[]byte of readSize
	// faults is nil while none are set: the forwarding path then takes
	// no lock and makes no decision.
	faults atomic.Pointer[faultState]

	mu     sync.Mutex
	closed bool
	pairs  map[*pair]struct{}
	wg     sync.WaitGroup // accept loop and connection handlers
}

// Start listens on cfg.Listen and starts accepting connections. The proxy is
// listening when Start returns.
func Start(cfg Config) (*Proxy, error) {
	if cfg.RTT < 0 {
		return nil, fmt.Errorf("proxy: negative RTT %v", cfg.RTT)
	}
	if cfg.Target == "" && cfg.Dial == nil {
		return nil, errors.New("proxy: no target")
	}
	if cfg.Listen == "" {
		cfg.Listen = "127.0.0.1:0"
	}
	if cfg.DialTimeout <= 0 {
		cfg.DialTimeout = defaultDialTimeout
	}
	if cfg.Logf == nil {
		cfg.Logf = func(string, ...any) {}
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if err := cfg.Faults.Validate(); err != nil {
		return nil, err
	}
	if cfg.Dial == nil {
		target := cfg.Target
		cfg.Dial = func(ctx context.Context) (net.Conn, error) {
			var d net.Dialer
			return d.DialContext(ctx, "tcp", target)
		}
	}
	ln, err := net.Listen("tcp", cfg.Listen)
	if err != nil {
		return nil, fmt.Errorf("proxy: listen: %w", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	p := &Proxy{
		cfg:    cfg,
		ln:     ln,
		ctx:    ctx,
		cancel: cancel,
		c:      newCounters(),
		pairs:  map[*pair]struct{}{},
	}
	p.bufs.New = func() any { b := make([]byte, readSize); return &b }
	if cfg.Faults.Active() {
		p.faults.Store(newFaultState(cfg.Faults, cfg.Now()))
	}
	p.wg.Add(1)
	go p.acceptLoop()
	return p, nil
}

// Addr returns the address the proxy listens on.
func (p *Proxy) Addr() net.Addr { return p.ln.Addr() }

// Counts returns a snapshot of the counters.
func (p *Proxy) Counts() Counts { return p.c.snapshot(false) }

// Reset zeroes the counters, e.g. between benchmark phases.
func (p *Proxy) Reset() { p.c.snapshot(true) }

// TakeCounts returns the counters and zeroes them in one step, so that no
// event falls between a snapshot and a reset.
func (p *Proxy) TakeCounts() Counts { return p.c.snapshot(true) }

// SetFaults replaces the faults injected from now on (the zero Faults turns
// them off). Their counters and schedules start afresh: every-N counts, the
// random sequence and blackhole times count from this call. A blackhole
// started by Blackhole ends with it.
func (p *Proxy) SetFaults(f Faults) error {
	if err := f.Validate(); err != nil {
		return err
	}
	if !f.Active() {
		p.faults.Store(nil)
		return nil
	}
	p.faults.Store(newFaultState(f, p.cfg.Now()))
	if f.SlowReadBuffer > 0 {
		p.mu.Lock()
		for pr := range p.pairs {
			pr.setReadBuffer(f.SlowReadBuffer)
		}
		p.mu.Unlock()
	}
	return nil
}

// Faults returns the faults in force.
func (p *Proxy) Faults() Faults {
	if fs := p.faults.Load(); fs != nil {
		return fs.cfg
	}
	return Faults{}
}

// Blackhole starts a blackhole of length d now, on top of the faults in
// force (see Faults.BlackholeFor), and returns when it will end. A zero or
// negative d ends nothing and starts nothing.
func (p *Proxy) Blackhole(d time.Duration) (time.Time, error) {
	if d > maxFaultPause {
		return time.Time{}, fmt.Errorf("proxy: blackhole of %v is over %v", d, maxFaultPause)
	}
	now := p.cfg.Now()
	for {
		fs := p.faults.Load()
		if fs == nil {
			// A state that injects nothing else, to hold the blackhole.
			fs = newFaultState(Faults{}, now)
			if !p.faults.CompareAndSwap(nil, fs) {
				continue
			}
		}
		if d > 0 {
			fs.startBlackhole(now, d)
		}
		return fs.blackholeUntil(now), nil
	}
}

// BlackholeUntil returns the end of the blackhole in force, or the zero
// time if there is none.
func (p *Proxy) BlackholeUntil() time.Time {
	if fs := p.faults.Load(); fs != nil {
		return fs.blackholeUntil(p.cfg.Now())
	}
	return time.Time{}
}

// Close stops listening, closes every proxied connection and waits for
// their handlers to finish. Bytes still held in the delay queues are
// dropped.
func (p *Proxy) Close() error {
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		return nil
	}
	p.closed = true
	pairs := make([]*pair, 0, len(p.pairs))
	for pr := range p.pairs {
		pairs = append(pairs, pr)
	}
	p.mu.Unlock()

	err := p.ln.Close()
	p.cancel()
	for _, pr := range pairs {
		pr.abort()
	}
	p.wg.Wait()
	if err != nil && !errors.Is(err, net.ErrClosed) {
		return fmt.Errorf("proxy: close listener: %w", err)
	}
	return nil
}

func (p *Proxy) acceptLoop() {
	defer p.wg.Done()
	var backoff time.Duration
	for {
		c, err := p.ln.Accept()
		if err != nil {
			if errors.Is(err, net.ErrClosed) {
				return
			}
			// Out of descriptors and the like: wait rather than spin.
			backoff = min(max(2*backoff, 5*time.Millisecond), time.Second)
			p.cfg.Logf("proxy: accept: %v (retrying in %v)", err, backoff)
			select {
			case <-time.After(backoff):
			case <-p.ctx.Done():
				return
			}
			continue
		}
		backoff = 0
		p.c.conn()
		pr := &pair{client: c, done: make(chan struct{})}
		p.mu.Lock()
		if p.closed {
			p.mu.Unlock()
			c.Close()
			return
		}
		p.pairs[pr] = struct{}{}
		p.wg.Add(1)
		p.mu.Unlock()
		go p.serve(pr)
	}
}

// pair is one client connection and its connection to the target.
type pair struct {
	client   net.Conn
	done     chan struct{} // closed by abort
	dups     dupTable      // duplicated calls awaiting replies
	toTarget *pipe         // set before the pipes run
	// closing is set before a call that closes the connection is
	// written: nothing read from the target after it reaches the client,
	// so the call's reply is lost for certain, not by a race.
	closing atomic.Bool

	mu       sync.Mutex
	upstream net.Conn
	aborted  bool
}

// setUpstream records the target connection; false means the pair was
// aborted meanwhile and up must be closed by the caller.
func (pr *pair) setUpstream(up net.Conn) bool {
	pr.mu.Lock()
	defer pr.mu.Unlock()
	if pr.aborted {
		return false
	}
	pr.upstream = up
	return true
}

// setReadBuffer sets the receive buffer of the target connection, if any.
func (pr *pair) setReadBuffer(n int) {
	pr.mu.Lock()
	up := pr.upstream
	pr.mu.Unlock()
	if rb, ok := up.(interface{ SetReadBuffer(int) error }); ok {
		rb.SetReadBuffer(n) // best effort: a fault, not a requirement
	}
}

// abort tears the pair down: both connections are closed, which unblocks
// reads and writes, and done is closed, which unblocks the delay lines.
func (pr *pair) abort() {
	pr.mu.Lock()
	defer pr.mu.Unlock()
	if pr.aborted {
		return
	}
	pr.aborted = true
	close(pr.done)
	pr.client.Close()
	if pr.upstream != nil {
		pr.upstream.Close()
	}
}

func (p *Proxy) serve(pr *pair) {
	defer p.wg.Done()
	defer func() {
		pr.abort()
		p.mu.Lock()
		delete(p.pairs, pr)
		p.mu.Unlock()
	}()
	client := pr.client.RemoteAddr()

	ctx, cancel := context.WithTimeout(p.ctx, p.cfg.DialTimeout)
	up, err := p.cfg.Dial(ctx)
	cancel()
	if err != nil {
		if p.ctx.Err() != nil {
			return // the proxy is closing: not the target's fault
		}
		p.c.dialError()
		p.cfg.Logf("proxy: client %v: cannot reach target %s: %v; closing client connection", client, p.cfg.Target, err)
		return
	}
	if !pr.setUpstream(up) {
		up.Close()
		return
	}
	if fs := p.faults.Load(); fs != nil && fs.cfg.SlowReadBuffer > 0 {
		pr.setReadBuffer(fs.cfg.SlowReadBuffer)
	}

	half := p.cfg.RTT / 2
	toTarget := &pipe{
		p: p, pr: pr, src: pr.client, dst: up, delay: half,
		parser: newStreamParser(true, p.c), bytes: &p.c.bytesIn, fromClient: true,
		what: fmt.Sprintf("client %v → target %s", client, p.cfg.Target),
	}
	toClient := &pipe{
		p: p, pr: pr, src: up, dst: pr.client, delay: half,
		parser: newStreamParser(false, p.c), bytes: &p.c.bytesOut,
		what: fmt.Sprintf("target %s → client %v", p.cfg.Target, client),
	}
	pr.toTarget = toTarget
	var wg sync.WaitGroup
	for _, d := range []*pipe{toTarget, toClient} {
		d.line = newDelayLine(lineBudget, pr.done)
		wg.Add(2)
		go func() { defer wg.Done(); d.read() }()
		go func() { defer wg.Done(); d.write() }()
	}
	wg.Wait()
}

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
