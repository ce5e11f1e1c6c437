// Package session is the NFSv4.1 client's session layer (RFC 8881 §2.10):
// it establishes a client ID and a session with a server and sends
// COMPOUNDs in it, doing underneath what the session needs: a slot and a
// sequence id for each COMPOUND (exactly-once semantics: a request resent
// after a lost connection goes on its slot with its sequence id, and the
// server answers it from its reply cache), the slot limits the server
// sets, lease renewal while idle, BIND_CONN_TO_SESSION on every new
// connection, recovery of a lost session or client ID (with a hook for the
// state layer to reclaim), the back channel's CB_SEQUENCE, and
// DESTROY_SESSION and DESTROY_CLIENTID at Close.
//
// It knows nothing of files: the operations after SEQUENCE, and what their
// results mean, are the caller's.
package session

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"errors"
	"fmt"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"hushfs/internal/nfs4"
	"hushfs/internal/rpc"
)

// Options configures a session. Zero values select the defaults.
type Options struct {
	// RPC configures the connection; Dial is required. The session sets
	// NoRetransmit (RFC 8881 §2.9.2: a request is resent only on a new
	// connection) and OnReconnect (BIND_CONN_TO_SESSION), and raises
	// MaxInFlight and MaxRecord to what the session needs. Hard, Timeout
	// and Retrans say what a server that stops answering costs, as for
	// NFSv3.
	RPC rpc.ClientOptions
	// Cred is the credential of the session's own operations (EXCHANGE_ID,
	// CREATE_SESSION, SEQUENCE alone, ...); AUTH_SYS root by default.
	Cred rpc.OpaqueAuth
	// Owner is the client owner string (co_ownerid): stable for a client
	// machine and mount, so that a server recognises the client after it
	// restarts (DefaultOwner); required.
	Owner []byte
	// Verifier is the client's boot verifier: different for every instance
	// of the client, so that a server drops a previous instance's state.
	// Random by default.
	Verifier *nfs4.Verifier
	// Slots is the number of fore channel slots asked for (COMPOUNDs in
	// flight at once), default 64; the server may grant fewer, and later
	// ask for fewer or allow more up to this number.
	Slots int
	// MaxIO is the largest READ or WRITE payload the session must carry,
	// default 1 MiB: the fore channel's request and response sizes are
	// asked for with room for headers besides.
	MaxIO uint32
	// MaxOps is the number of operations per COMPOUND asked for, SEQUENCE
	// included, default 64.
	MaxOps uint32
	// MaxCached is the largest reply the server is asked to keep for a
	// retry (ca_maxresponsesize_cached), default 16 KiB.
	MaxCached uint32
	// CBProgram is the callback program number, default 0x40000000.
	CBProgram uint32
	// NoBackChannel asks for no back channel: the server then cannot call
	// the client, and grants no delegations.
	NoBackChannel bool
	// Callback serves the operations of the server's CB_COMPOUNDs after
	// CB_SEQUENCE (CB_RECALL, CB_GETATTR, ...). nil answers NOTSUPP to
	// every one; CB_RECALL_SLOT is served by the session itself.
	Callback CallbackHandler
	// OnRecover is called after a new client ID replaced one the server
	// no longer knows (it restarted, or expired our lease), before any
	// other COMPOUND is sent: the state layer reclaims (in the grace
	// period) or reopens what it held. COMPOUNDs sent with the ctx it is
	// given go out meanwhile; all others wait until it returns and
	// RECLAIM_COMPLETE has been sent. nil: nothing to reclaim.
	OnRecover func(ctx context.Context, r Recovery) error
	// OnStatus is told the SEQUENCE status flags (nfs4.SeqStatus*) of the
	// replies that carry any, for the state layer to act on (revoked
	// state, ...). Calls are made one at a time from a goroutine of the
	// session, flags seen meanwhile are or-ed together into the next call.
	OnStatus func(flags uint32)
	// Clock is the lease timers' time source; the system clock by default.
	Clock Clock
	Logf  func(format string, args ...any)
}

// Recovery tells Options.OnRecover what was lost.
type Recovery struct {
	ClientID uint64      // the new client ID
	Cause    nfs4.Status // what showed the old one was gone (STALE_CLIENTID, EXPIRED, BADSESSION, ...)
	// Reconnected says the connection was lost before: most likely the
	// server restarted and is in its grace period, where state is
	// reclaimed with CLAIM_PREVIOUS. Otherwise the lease expired: state
	// is opened again (NO_GRACE answers a reclaim).
	Reconnected bool
	// Lease is the server's lease time; a grace period lasts at least as
	// long.
	Lease time.Duration
}

// CallbackHandler serves one operation of a CB_COMPOUND; seq is the
// compound's CB_SEQUENCE (its referring calls tell which of our COMPOUNDs
// the server had seen). It returns the operation's result (*nfs4.StatusRes,
// or *nfs4.CBGetattrRes for CB_GETATTR); nil answers NOTSUPP.
type CallbackHandler func(ctx context.Context, seq *nfs4.CBSequenceArgs, op nfs4.CBArgop) nfs4.OpRes

// Errors of the session.
var (
	ErrClosed = errors.New("session: closed")
	// ErrSessionLost is returned to COMPOUNDs of Options.OnRecover's
	// context when the session they were sent in is lost too: recovery
	// starts again.
	ErrSessionLost = errors.New("session: lost during recovery")
)

// Defaults and bounds.
const (
	defaultSlots     = 64
	maxSlotsAsked    = 1024
	defaultMaxIO     = 1 << 20
	defaultMaxOps    = 64
	defaultMaxCached = 16 << 10
	defaultCBProgram = 0x40000000
	headerRoom       = 16 << 10 // a COMPOUND's operations besides its payload
	backSlots        = 4        // at most rpc's default MaxBackCalls (16)
	backMaxRequest   = 32 << 10 // below rpc's MaxBackRecord (64 KiB)
	backMaxResponse  = 8 << 10
	backMaxOps       = 16
	defaultLease     = 30 * time.Second // when the server does not say
	closeTimeout     = 10 * time.Second
)

// Session is a client ID with a session at one server.
type Session struct {
	opts  Options
	rpc   *rpc.Client
	clock Clock
	logf  func(format string, args ...any)
	cred  rpc.OpaqueAuth
	stats counters

	life   context.Context // cancelled at Close: ends every call
	cancel context.CancelFunc
	stop   chan struct{} // closed at Close: stops the renewer
	wg     sync.WaitGroup

	mu         sync.Mutex
	closed     bool
	cur        *state
	clientID   uint64
	csSeq      uint32 // csa_sequence of the next CREATE_SESSION for clientID
	lease      time.Duration
	lastRenew  time.Time // when the last SEQUENCE the server took was sent
	recovering *recovery // non-nil while a recovery runs
	reconnects uint64    // connections made after the first
	seenConns  uint64    // reconnects at the last recovery
	server     ServerInfo
	flags      uint32 // status flags not yet handed to OnStatus
	flagsBusy  bool
	lastBind   time.Time

	// unsettled: status flags taken whose OnStatus call has not returned
	// (Info.Unsettled).
	unsettled uint32
}

// state is one session: its id, channels and slot table. A recovery
// replaces it with another.
type state struct {
	id       nfs4.SessionID
	clientID uint64
	fore     nfs4.ChannelAttrs
	back     nfs4.ChannelAttrs
	hasBack  bool // the server took the back channel
	slots    *slotTable
	cb       cbSlots
	lost     atomic.Bool
	lostWhy  atomic.Uint32 // the nfs4.Status that showed it lost
}

// markLost records that the server no longer takes st: its waiting and
// later COMPOUNDs go to the session that replaces it.
func (st *state) markLost(cause nfs4.Status) {
	st.lostWhy.CompareAndSwap(0, uint32(cause))
	st.lost.Store(true)
	st.slots.kill()
}

func (st *state) cause() nfs4.Status { return nfs4.Status(st.lostWhy.Load()) }

// ServerInfo is what EXCHANGE_ID said of the server.
type ServerInfo struct {
	Owner nfs4.ServerOwner
	Scope []byte
	Impl  nfs4.ImplID // empty if the server sent none
	Flags uint32      // eir_flags
}

// Info describes the session now.
type Info struct {
	ClientID    uint64
	SessionID   nfs4.SessionID
	Fore, Back  nfs4.ChannelAttrs // as negotiated
	BackChannel bool              // the server took our back channel
	Slots       int               // slots usable now (the server's target)
	Lease       time.Duration
	Server      ServerInfo

	// Renewed is when the last SEQUENCE the server took was sent: the
	// lease, and the delegations hanging on it, are good until Renewed +
	// Lease (RFC 8881 §8.3).
	Renewed time.Time
	// Unsettled are SEQUENCE status flags that came with the renewal but
	// Options.OnStatus has not finished acting on: until it has, a
	// renewal carrying RECALLABLE_STATE_REVOKED vouches for nothing.
	Unsettled uint32
}

// New connects to the server, establishes a client ID and a session and
// sends RECLAIM_COMPLETE (a new client has nothing to reclaim).
func New(ctx context.Context, opts Options) (*Session, error) {
	if len(opts.Owner) == 0 || len(opts.Owner) > nfs4.OpaqueLimit {
		return nil, fmt.Errorf("session: client owner of %d bytes (1 to %d)", len(opts.Owner), nfs4.OpaqueLimit)
	}
	if opts.Slots <= 0 {
		opts.Slots = defaultSlots
	}
	opts.Slots = min(opts.Slots, maxSlotsAsked)
	if opts.MaxIO == 0 {
		opts.MaxIO = defaultMaxIO
	}
	opts.MaxIO = min(opts.MaxIO, nfs4.MaxData)
	if opts.MaxOps == 0 {
		opts.MaxOps = defaultMaxOps
	}
	if opts.MaxCached == 0 {
		opts.MaxCached = defaultMaxCached
	}
	if opts.CBProgram == 0 {
		opts.CBProgram = defaultCBProgram
	}
	if opts.Clock == nil {
		opts.Clock = realClock{}
	}
	if opts.Cred.Flavor == rpc.AuthNone && len(opts.Cred.Body) == 0 {
		host, _ := os.Hostname()
		opts.Cred = rpc.SysCred(0, 0, nil, host)
	}
	s := &Session{opts: opts, clock: opts.Clock, logf: opts.Logf, cred: opts.Cred, stop: make(chan struct{})}
	if s.logf == nil {
		s.logf = func(string, ...any) {}
	}
	if opts.Verifier == nil {
		var v nfs4.Verifier
		rand.Read(v[:])
		s.opts.Verifier = &v
	}
	ro := opts.RPC
	ro.NoRetransmit = true
	ro.OnReconnect = s.onReconnect
	ro.MaxInFlight = max(ro.MaxInFlight, opts.Slots+16)
	ro.MaxRecord = max(ro.MaxRecord, int(opts.MaxIO)+2*headerRoom, rpc.DefaultMaxRecord)
	user := ro.Observer
	ro.Observer = func(st *rpc.CallStats) {
		if st.Prog == nfs4.Program && st.Transmissions > 1 {
			s.stats.retrans.Add(uint64(st.Transmissions - 1))
		}
		if user != nil {
			user(st)
		}
	}
	if ro.Logf == nil {
		ro.Logf = s.logf
	}
	var err error
	if s.rpc, err = rpc.NewClient(ctx, ro); err != nil {
		return nil, fmt.Errorf("session: %w", err)
	}
	s.life, s.cancel = context.WithCancel(context.Background())
	if !opts.NoBackChannel {
		s.rpc.Register(opts.CBProgram, nfs4.CBVersion, rpc.HandlerFunc(s.serveCallback))
	}
	if err := s.establish(ctx); err != nil {
		s.cancel()
		s.rpc.Close()
		return nil, err
	}
	s.wg.Add(1)
	go s.renewLoop()
	return s, nil
}

// establish makes the first client ID and session.
func (s *Session) establish(ctx context.Context) error {
	eid, err := s.exchangeID(ctx)
	if err != nil {
		return err
	}
	st, err := s.createSession(ctx, eid.ClientID)
	if err != nil {
		return err
	}
	s.install(st)
	if err := s.fetchLease(ctx, st); err != nil {
		return err
	}
	return s.reclaimComplete(ctx, st)
}

// Stats returns the session's counters.
func (s *Session) Stats() Stats { return s.stats.snapshot() }

// Info describes the session now.
func (s *Session) Info() Info {
	s.mu.Lock()
	defer s.mu.Unlock()
	st := s.cur
	return Info{ClientID: st.clientID, SessionID: st.id, Fore: st.fore, Back: st.back, BackChannel: st.hasBack,
		Slots: st.slots.usable(), Lease: s.lease, Server: s.server, Renewed: s.lastRenew, Unsettled: s.unsettled}
}

// RPC returns the session's RPC client (for NULL pings and statistics).
func (s *Session) RPC() *rpc.Client { return s.rpc }

// single sends a COMPOUND of one operation without SEQUENCE (EXCHANGE_ID,
// CREATE_SESSION, DESTROY_*, BIND_CONN_TO_SESSION), on conn or, if nil,
// whichever connection is current, and returns the operation's result, or
// an error naming the operation.
func (s *Session) single(ctx context.Context, conn *rpc.Conn, op nfs4.Opnum, args nfs4.OpArgs) (nfs4.OpRes, error) {
	ca := &nfs4.CompoundArgs{MinorVersion: nfs4.MinorVersion, Ops: []nfs4.Argop{{Op: op, Args: args}}}
	var res nfs4.CompoundRes
	s.stats.calls.Add(1)
	s.stats.op(op)
	var err error
	if conn != nil {
		err = conn.Call(ctx, nfs4.Program, nfs4.Version, nfs4.ProcCompound, s.cred, ca, &res)
	} else {
		err = s.rpc.Call(ctx, nfs4.Program, nfs4.Version, nfs4.ProcCompound, s.cred, ca, &res)
	}
	if err != nil {
		return nil, fmt.Errorf("session: %v: %w", op, err)
	}
	if len(res.Results) != 1 || res.Results[0].Op != op {
		if res.Status != nfs4.OK {
			return nil, fmt.Errorf("session: %v: %w", op, res.Status)
		}
		return nil, fmt.Errorf("session: %v: reply with %d results", op, len(res.Results))
	}
	r := res.Results[0].Res
	if st := r.OpStatus(); st != nfs4.OK {
		return r, fmt.Errorf("session: %v: %w", op, st)
	}
	return r, nil
}

// exchangeID sends EXCHANGE_ID with our owner and verifier.
func (s *Session) exchangeID(ctx context.Context) (*nfs4.ExchangeIDRes, error) {
	args := &nfs4.ExchangeIDArgs{
		ClientOwner:  nfs4.ClientOwner{Verifier: *s.opts.Verifier, OwnerID: s.opts.Owner},
		StateProtect: nfs4.StateProtectArgs{How: nfs4.SP4None},
		HasImplID:    true,
		ImplID:       nfs4.ImplID{Domain: []byte("hushfs"), Name: []byte("hushfs NFSv4.1 client")},
	}
	r, err := s.single(ctx, nil, nfs4.OpExchangeID, args)
	if err != nil {
		if errors.Is(err, nfs4.ErrClidInUse) {
			return nil, fmt.Errorf("%w (another client with credentials of its own uses our owner %q)", err, s.opts.Owner)
		}
		return nil, err
	}
	eid := r.(*nfs4.ExchangeIDRes)
	if eid.StateProtect.How != nfs4.SP4None {
		return nil, fmt.Errorf("session: EXCHANGE_ID: the server chose state protection %d, we asked for none", eid.StateProtect.How)
	}
	if eid.Flags&nfs4.ExchgIDFlagMaskPNFS == nfs4.ExchgIDFlagUsePNFSDS {
		return nil, errors.New("session: EXCHANGE_ID: the server is a pNFS data server only")
	}
	s.mu.Lock()
	s.clientID, s.csSeq = eid.ClientID, eid.SequenceID
	s.server = ServerInfo{
		Owner: nfs4.ServerOwner{MinorID: eid.ServerOwner.MinorID, MajorID: clone(eid.ServerOwner.MajorID)},
		Scope: clone(eid.ServerScope), Flags: eid.Flags,
	}
	if eid.HasImplID {
		s.server.Impl = nfs4.ImplID{Domain: clone(eid.ImplID.Domain), Name: clone(eid.ImplID.Name), Date: eid.ImplID.Date}
	}
	s.mu.Unlock()
	return eid, nil
}

func clone(b []byte) []byte { return append([]byte(nil), b...) }

// createSession sends CREATE_SESSION for clientID with the next sequence id
// and returns the new session, not yet installed.
func (s *Session) createSession(ctx context.Context, clientID uint64) (*state, error) {
	s.mu.Lock()
	seq := s.csSeq
	s.mu.Unlock()
	o := &s.opts
	args := &nfs4.CreateSessionArgs{
		ClientID: clientID, Sequence: seq,
		Fore: nfs4.ChannelAttrs{MaxRequestSize: o.MaxIO + headerRoom, MaxResponseSize: o.MaxIO + headerRoom,
			MaxResponseSizeCached: o.MaxCached, MaxOperations: o.MaxOps, MaxRequests: uint32(o.Slots)},
		// A back channel attribute set is sent even without one (the
		// XDR has it); the flag says whether this connection carries it.
		Back: nfs4.ChannelAttrs{MaxRequestSize: backMaxRequest, MaxResponseSize: backMaxResponse,
			MaxResponseSizeCached: backMaxResponse, MaxOperations: backMaxOps, MaxRequests: backSlots},
		CBProgram: o.CBProgram,
		SecParms:  []nfs4.CallbackSecParms{{Flavor: nfs4.AuthNone}},
	}
	if !o.NoBackChannel {
		args.Flags |= nfs4.CreateSessionFlagConnBackChan
	}
	r, err := s.single(ctx, nil, nfs4.OpCreateSession, args)
	if err != nil {
		return nil, err
	}
	cs := r.(*nfs4.CreateSessionRes)
	if cs.Sequence != seq {
		return nil, fmt.Errorf("session: CREATE_SESSION: reply for sequence %d, sent %d", cs.Sequence, seq)
	}
	if cs.Fore.MaxRequests == 0 || cs.Fore.MaxOperations < 2 {
		return nil, fmt.Errorf("session: CREATE_SESSION: fore channel of %d slots and %d operations",
			cs.Fore.MaxRequests, cs.Fore.MaxOperations)
	}
	s.mu.Lock()
	s.csSeq = seq + 1
	s.mu.Unlock()
	st := &state{id: cs.SessionID, clientID: clientID, fore: cs.Fore, back: cs.Back,
		hasBack: cs.Flags&nfs4.CreateSessionFlagConnBackChan != 0,
		slots:   newSlotTable(int(cs.Fore.MaxRequests), o.Slots)}
	st.cb.init(int(min(cs.Back.MaxRequests, 16)))
	if !o.NoBackChannel && !st.hasBack {
		s.logf("nfs4 session: the server refused the back channel: no callbacks, so no delegations")
	}
	return st, nil
}

// install makes st the current session.
func (s *Session) install(st *state) {
	s.mu.Lock()
	old := s.cur
	s.cur = st
	s.mu.Unlock()
	if old != nil {
		old.markLost(nfs4.ErrBadSession)
	}
}

// fetchLease reads the server's lease time (the lease_time attribute of the
// root); it paces renewal and bounds the grace period.
func (s *Session) fetchLease(ctx context.Context, st *state) error {
	var res Result
	ops := []nfs4.Argop{{Op: nfs4.OpPutRootFH},
		{Op: nfs4.OpGetattr, Args: &nfs4.GetattrArgs{AttrRequest: nfs4.NewBitmap(nfs4.AttrLeaseTime)}}}
	if err := s.compound(withState(ctx, st), s.cred, ops, &res); err != nil {
		return fmt.Errorf("session: reading the lease time: %w", err)
	}
	lease := defaultLease
	if res.Status == nfs4.OK && len(res.Ops) == 2 {
		if a := &res.Ops[1].Res.(*nfs4.GetattrRes).Attrs; a.Mask.Has(nfs4.AttrLeaseTime) && a.LeaseTime > 0 {
			lease = time.Duration(a.LeaseTime) * time.Second
		}
	} else {
		s.logf("nfs4 session: the server gives no lease time (%v): assuming %v", res.Status, lease)
	}
	s.mu.Lock()
	s.lease = lease
	s.mu.Unlock()
	return nil
}

// reclaimComplete sends RECLAIM_COMPLETE for the whole client.
func (s *Session) reclaimComplete(ctx context.Context, st *state) error {
	var res Result
	ops := []nfs4.Argop{{Op: nfs4.OpReclaimComplete, Args: &nfs4.ReclaimCompleteArgs{}}}
	if err := s.compound(withState(ctx, st), s.cred, ops, &res); err != nil {
		return fmt.Errorf("session: RECLAIM_COMPLETE: %w", err)
	}
	if res.Status != nfs4.OK && res.Status != nfs4.ErrCompleteAlready {
		return fmt.Errorf("session: RECLAIM_COMPLETE: %w", res.Status)
	}
	return nil
}

// Close destroys the session and the client ID (the server drops our
// state at once instead of at the lease's end) and closes the connection.
// It returns within ctx's deadline, or 10 s without one, whatever the
// server does.
func (s *Session) Close(ctx context.Context) error {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return nil
	}
	s.closed = true
	rec := s.recovering
	s.mu.Unlock()
	close(s.stop)
	if _, ok := ctx.Deadline(); !ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, closeTimeout)
		defer cancel()
	}
	if rec != nil {
		// Destroy what the recovery makes, not what it replaces.
		select {
		case <-rec.done:
		case <-ctx.Done():
		}
	}
	s.mu.Lock()
	st, clientID := s.cur, s.clientID
	s.mu.Unlock()
	var errs []error
	if st != nil && !st.lost.Load() {
		_, err := s.single(ctx, nil, nfs4.OpDestroySession, &nfs4.DestroySessionArgs{SessionID: st.id})
		if err != nil {
			errs = append(errs, err)
		}
	}
	if ctx.Err() == nil {
		_, err := s.single(ctx, nil, nfs4.OpDestroyClientID, &nfs4.DestroyClientIDArgs{ClientID: clientID})
		if err != nil {
			errs = append(errs, err)
		}
	}
	s.cancel()
	s.rpc.Close()
	s.wg.Wait()
	return errors.Join(errs...)
}

// DefaultOwner returns a client owner string for a mount: the machine's
// identity (systemd's machine-id, or the host name) and key, which names
// the mount (server, export and mount point), so that each mount is a
// client of its own that a server recognises after it restarts.
func DefaultOwner(key string) []byte {
	machine := ""
	if b, err := os.ReadFile("/etc/machine-id"); err == nil {
		machine = strings.TrimSpace(string(b))
	}
	if machine == "" {
		machine, _ = os.Hostname()
	}
	o := fmt.Sprintf("hushfs %s %s", machine, key)
	if len(o) > nfs4.OpaqueLimit {
		sum := sha256.Sum256([]byte(key))
		o = fmt.Sprintf("hushfs %.200s %x", machine, sum)
	}
	return []byte(o)
}
