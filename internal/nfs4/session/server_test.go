package session

import (
	"context"
	"encoding/binary"
	"net"
	"sync"
	"testing"
	"time"

	"hushfs/internal/nfs4"
	"hushfs/internal/rpc"
	"hushfs/internal/xdr"
)

// testServer is a small NFSv4.1 server on a real socket (internal/rpc's
// server and the nfs4 codec), for what ganesha cannot be made to do:
// change its slot limits, answer SEQUENCE with a chosen error, lose a
// reply, refuse the back channel, call back, set status flags. It keeps a
// session's slots and reply cache as RFC 8881 §2.10.6 says; operations
// other than the session's succeed with empty results and are counted.
type testServer struct {
	t    *testing.T
	srv  *rpc.Server
	addr string

	mu        sync.Mutex
	clientID  uint64
	nextID    uint64
	csSeq     uint32
	confirmed bool
	sessions  map[nfs4.SessionID]*tsSession
	lease     uint32
	slots     uint32 // the fore channel slots granted at most
	// highest and target are what SEQUENCE replies carry (and highest
	// what SEQUENCE accepts); 0 = slots-1.
	highest, target uint32
	flags           uint32 // SEQUENCE status flags
	noBack          bool   // refuse the back channel
	csFlags         uint32 // the flags of the last CREATE_SESSION
	back            *rpc.BackChannel
	// seqHook, if set, may answer a SEQUENCE with an error of its choice.
	seqHook func(a *nfs4.SequenceArgs) (nfs4.Status, bool)
	// dropHook, if set, says whether to run the request (or not) and
	// whether to drop its reply.
	dropHook func(a *nfs4.SequenceArgs) (run, drop bool)
	delay    time.Duration // each COMPOUND in a session takes this long
	mute     bool          // answer nothing
	seqLog   []nfs4.SequenceArgs
	execs    map[nfs4.Opnum]int // operations run (not replays)
	single   map[nfs4.Opnum]int // operations sent without SEQUENCE
	lone     int                // lone SEQUENCEs run
}

type tsSession struct {
	id    nfs4.SessionID
	slots []tsSlot
	back  bool
}

type tsSlot struct {
	seq   uint32
	reply []byte // the cached reply to seq, if cached
}

// startTestServer starts a server, set up by configure before it serves.
func startTestServer(t *testing.T, configure ...func(*testServer)) *testServer {
	ts := &testServer{t: t, sessions: map[nfs4.SessionID]*tsSession{}, lease: 90, slots: 8, nextID: 0x100,
		execs: map[nfs4.Opnum]int{}, single: map[nfs4.Opnum]int{}}
	for _, f := range configure {
		f(ts)
	}
	ts.srv = rpc.NewServer(rpc.ServerOptions{})
	ts.srv.Register(nfs4.Program, nfs4.Version, ts)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ts.addr = ln.Addr().String()
	go ts.srv.Serve(ln)
	t.Cleanup(func() { ts.srv.Close() })
	return ts
}

// options returns session options for the server: soft calls of 2 s.
func (ts *testServer) options(t *testing.T) Options {
	return Options{RPC: rpc.ClientOptions{Dial: func(ctx context.Context) (net.Conn, error) {
		var d net.Dialer
		return d.DialContext(ctx, "tcp", ts.addr)
	}, Timeout: 2 * time.Second, Retrans: 1}, Owner: []byte("test " + t.Name()), Logf: t.Logf}
}

func (ts *testServer) limitsLocked() (highest, target uint32) {
	highest, target = ts.highest, ts.target
	if highest == 0 {
		highest = ts.slots - 1
	}
	if target == 0 {
		target = highest
	}
	return highest, target
}

func (ts *testServer) ServeRPC(ctx context.Context, call *rpc.Call, reply []byte) ([]byte, error) {
	switch call.Proc {
	case nfs4.ProcNull:
		return reply, nil
	case nfs4.ProcCompound:
	default:
		return nil, rpc.ErrProcUnavail
	}
	ts.mu.Lock()
	mute := ts.mute
	ts.mu.Unlock()
	if mute {
		return nil, rpc.ErrDrop
	}
	var args nfs4.CompoundArgs
	var d xdr.Decoder
	d.Reset(call.Args)
	args.Decode(&d)
	if d.Err() != nil || len(args.Ops) == 0 {
		return nil, rpc.ErrGarbageArgs
	}
	res := nfs4.CompoundRes{Tag: args.Tag}
	add := func(op nfs4.Opnum, r nfs4.OpRes) {
		res.Results = append(res.Results, nfs4.Resop{Op: op, Res: r})
		res.Status = r.OpStatus()
	}
	if args.Ops[0].Op != nfs4.OpSequence {
		ts.mu.Lock()
		ts.single[args.Ops[0].Op]++
		add(args.Ops[0].Op, ts.sessionOp(call, args.Ops[0]))
		ts.mu.Unlock()
		return res.Append(reply), nil
	}
	sa := args.Ops[0].Args.(*nfs4.SequenceArgs)
	ts.mu.Lock()
	ts.seqLog = append(ts.seqLog, *sa)
	if ts.seqHook != nil {
		if st, ok := ts.seqHook(sa); ok {
			ts.mu.Unlock()
			add(nfs4.OpSequence, &nfs4.SequenceRes{Status: st})
			return res.Append(reply), nil
		}
	}
	run, drop := true, false
	if ts.dropHook != nil {
		run, drop = ts.dropHook(sa)
	}
	sess := ts.sessions[sa.SessionID]
	highest, target := ts.limitsLocked()
	var st nfs4.Status
	switch {
	case sess == nil:
		st = nfs4.ErrBadSession
	case sa.SlotID > highest || int(sa.SlotID) >= len(sess.slots):
		st = nfs4.ErrBadSlot
	case sa.SequenceID == sess.slots[sa.SlotID].seq && sess.slots[sa.SlotID].reply != nil:
		out := sess.slots[sa.SlotID].reply
		ts.mu.Unlock()
		return append(reply, out...), nil
	case sa.SequenceID == sess.slots[sa.SlotID].seq:
		st = nfs4.ErrRetryUncachedRep
	case sa.SequenceID != sess.slots[sa.SlotID].seq+1:
		st = nfs4.ErrSeqMisordered
	}
	if st != nfs4.OK || !run {
		ts.mu.Unlock()
		if !run {
			return nil, rpc.ErrDrop
		}
		add(nfs4.OpSequence, &nfs4.SequenceRes{Status: st})
		return res.Append(reply), nil
	}
	add(nfs4.OpSequence, &nfs4.SequenceRes{SessionID: sess.id, SequenceID: sa.SequenceID, SlotID: sa.SlotID,
		HighestSlotID: highest, TargetHighestSlotID: target, StatusFlags: ts.flags})
	if len(args.Ops) == 1 {
		ts.lone++
	}
	for _, op := range args.Ops[1:] {
		ts.execs[op.Op]++
		if op.Op == nfs4.OpGetattr {
			add(op.Op, &nfs4.GetattrRes{Attrs: nfs4.Fattr{Mask: nfs4.NewBitmap(nfs4.AttrLeaseTime), LeaseTime: ts.lease}})
		} else {
			add(op.Op, nfs4.NewRes(op.Op))
		}
	}
	out := res.Append(nil)
	sl := &sess.slots[sa.SlotID]
	sl.seq, sl.reply = sa.SequenceID, nil
	if sa.CacheThis {
		sl.reply = out
	}
	delay := ts.delay
	ts.mu.Unlock()
	time.Sleep(delay)
	if drop {
		return nil, rpc.ErrDrop
	}
	return append(reply, out...), nil
}

// sessionOp runs an operation sent without SEQUENCE.
func (ts *testServer) sessionOp(call *rpc.Call, op nfs4.Argop) nfs4.OpRes {
	switch a := op.Args.(type) {
	case *nfs4.ExchangeIDArgs:
		if ts.clientID == 0 {
			ts.nextID++
			ts.clientID, ts.csSeq, ts.confirmed = ts.nextID, 1, false
		}
		flags := uint32(nfs4.ExchgIDFlagUseNonPNFS)
		if ts.confirmed {
			flags |= nfs4.ExchgIDFlagConfirmedR
		}
		return &nfs4.ExchangeIDRes{ClientID: ts.clientID, SequenceID: ts.csSeq, Flags: flags,
			ServerOwner: nfs4.ServerOwner{MajorID: []byte("test server")}}
	case *nfs4.CreateSessionArgs:
		switch {
		case a.ClientID != ts.clientID:
			return &nfs4.CreateSessionRes{Status: nfs4.ErrStaleClientID}
		case a.Sequence != ts.csSeq:
			return &nfs4.CreateSessionRes{Status: nfs4.ErrSeqMisordered}
		}
		ts.csSeq++
		ts.confirmed = true
		ts.csFlags = a.Flags
		ts.nextID++
		sess := &tsSession{slots: make([]tsSlot, 64)}
		binary.BigEndian.PutUint64(sess.id[:], ts.nextID)
		ts.sessions[sess.id] = sess
		r := &nfs4.CreateSessionRes{SessionID: sess.id, Sequence: a.Sequence, Fore: a.Fore, Back: a.Back}
		r.Fore.MaxRequests = min(a.Fore.MaxRequests, ts.slots)
		if a.Flags&nfs4.CreateSessionFlagConnBackChan != 0 && !ts.noBack {
			r.Flags |= nfs4.CreateSessionFlagConnBackChan
			sess.back = true
			ts.back = call.Conn.BackChannel()
		}
		return r
	case *nfs4.BindConnToSessionArgs:
		sess := ts.sessions[a.SessionID]
		if sess == nil {
			return &nfs4.BindConnToSessionRes{Status: nfs4.ErrBadSession}
		}
		r := &nfs4.BindConnToSessionRes{SessionID: a.SessionID, Dir: nfs4.CDFS4Fore}
		if a.Dir&nfs4.CDFC4Back != 0 && sess.back {
			r.Dir = nfs4.CDFS4Both
			ts.back = call.Conn.BackChannel()
		}
		return r
	case *nfs4.DestroySessionArgs:
		if ts.sessions[a.SessionID] == nil {
			return &nfs4.StatusRes{Status: nfs4.ErrBadSession}
		}
		delete(ts.sessions, a.SessionID)
		return &nfs4.StatusRes{}
	case *nfs4.DestroyClientIDArgs:
		if a.ClientID != ts.clientID {
			return &nfs4.StatusRes{Status: nfs4.ErrStaleClientID}
		}
		ts.clientID = 0
		return &nfs4.StatusRes{}
	}
	return &nfs4.StatusRes{Status: nfs4.ErrOpNotInSession}
}

// setLimits sets the slot limits SEQUENCE replies carry; slots above
// highest are forgotten (a request on one is BADSLOT; one made again
// starts at sequence id 1).
func (ts *testServer) setLimits(highest, target uint32) {
	ts.mu.Lock()
	defer ts.mu.Unlock()
	ts.highest, ts.target = highest, target
	for _, sess := range ts.sessions {
		for i := int(highest) + 1; i < len(sess.slots); i++ {
			sess.slots[i] = tsSlot{}
		}
	}
}

// restart forgets every client and session, as a server that rebooted.
func (ts *testServer) restart() {
	ts.mu.Lock()
	ts.clientID, ts.sessions = 0, map[nfs4.SessionID]*tsSession{}
	ts.mu.Unlock()
}

// callback sends a CB_COMPOUND on the back channel.
func (ts *testServer) callback(ctx context.Context, prog uint32, ops ...nfs4.CBArgop) (*nfs4.CBCompoundRes, error) {
	ts.mu.Lock()
	back := ts.back
	ts.mu.Unlock()
	if back == nil {
		ts.t.Fatal("no back channel")
	}
	var res nfs4.CBCompoundRes
	err := back.Call(ctx, prog, nfs4.CBVersion, nfs4.CBProcCompound, rpc.OpaqueAuth{},
		&nfs4.CBCompoundArgs{Tag: []byte("cb"), MinorVersion: 1, Ops: ops}, &res)
	return &res, err
}

// seqs returns the SEQUENCEs received so far.
func (ts *testServer) seqs() []nfs4.SequenceArgs {
	ts.mu.Lock()
	defer ts.mu.Unlock()
	return append([]nfs4.SequenceArgs(nil), ts.seqLog...)
}

// fakeClock is a Clock moved by hand.
type fakeClock struct {
	mu      sync.Mutex
	now     time.Time
	waiters []fakeWaiter
}

type fakeWaiter struct {
	at time.Time
	ch chan time.Time
}

func (c *fakeClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *fakeClock) After(d time.Duration) <-chan time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	ch := make(chan time.Time, 1)
	if d <= 0 {
		ch <- c.now
		return ch
	}
	c.waiters = append(c.waiters, fakeWaiter{c.now.Add(d), ch})
	return ch
}

// waiting is the number of timers set and not yet fired.
func (c *fakeClock) waiting() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.waiters)
}

func (c *fakeClock) Advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = c.now.Add(d)
	keep := c.waiters[:0]
	for _, w := range c.waiters {
		if w.at.After(c.now) {
			keep = append(keep, w)
		} else {
			w.ch <- c.now
		}
	}
	c.waiters = keep
}
