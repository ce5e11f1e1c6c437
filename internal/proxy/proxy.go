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
	"errors"
	"fmt"
	"net"
	"sync"
	"sync/atomic"
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
