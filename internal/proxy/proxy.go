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
package proxy

import (
	"context"
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
	client net.Conn
	done   chan struct{} // closed by abort

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
}

// read moves bytes from src into the delay line, parsing them on the way.
func (d *pipe) read() {
	bp := d.p.bufs.Get().(*[]byte)
	defer func() {
		if bp != nil {
			d.p.bufs.Put(bp)
		}
	}()
	for {
		n, err := d.src.Read(*bp)
		if n > 0 {
			data := (*bp)[:n]
			d.bytes.Add(uint64(n))
			d.parser.feed(data)
			c := chunk{due: time.Now().Add(d.delay)}
			if n <= smallChunk {
				// Keep the big buffer for the next read rather than
				// parking 64 KiB behind a few bytes.
				c.data = append([]byte(nil), data...)
				c.cost = n + chunkOverhead
			} else {
				c.data, c.pooled = data, bp
				c.cost = cap(*bp) + chunkOverhead
				bp = d.p.bufs.Get().(*[]byte)
			}
			if !d.line.push(c) {
				if c.pooled != nil {
					d.p.bufs.Put(c.pooled)
				}
				return
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
	}
}

// write forwards chunks from the delay line to dst as they fall due. Once
// the source has ended and everything is delivered it half-closes dst, so
// an end of stream is delayed like the data before it.
func (d *pipe) write() {
	var batch []chunk
	var bufs net.Buffers
	for {
		var st lineState
		batch, st = d.line.next(batch)
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
		bufs = bufs[:0]
		for _, c := range batch {
			bufs = append(bufs, c.data)
		}
		// WriteTo consumes its receiver, so give it a copy of the header.
		v := bufs
		_, err := v.WriteTo(d.dst)
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
