package test

import (
	"context"
	"errors"
	"fmt"
	"net"
	"sync"
	"testing"
	"time"

	"hushfs/internal/nfs4"
	"hushfs/internal/nfs4/session"
	"hushfs/test/harness"
)

// newV4Session opens a session to ganesha through dial with opts (Dial and
// Owner filled in when empty) and closes it at cleanup.
func newV4Session(t *testing.T, ctx context.Context, dial func(context.Context) (net.Conn, error), opts session.Options) *session.Session {
	t.Helper()
	if opts.RPC.Dial == nil {
		opts.RPC.Dial = dial
	}
	if opts.Owner == nil {
		opts.Owner = []byte("hushfs session test " + t.Name())
	}
	if opts.Logf == nil {
		opts.Logf = t.Logf
	}
	s, err := session.New(ctx, opts)
	if err != nil {
		t.Fatalf("session: %v", err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		s.Close(ctx)
	})
	return s
}

// rootGetattr is PUTROOTFH + GETATTR(type, fileid, lease_time).
func rootGetattr() []nfs4.Argop {
	return []nfs4.Argop{{Op: nfs4.OpPutRootFH},
		{Op: nfs4.OpGetattr, Args: &nfs4.GetattrArgs{AttrRequest: nfs4.NewBitmap(nfs4.AttrType, nfs4.AttrFileid, nfs4.AttrLeaseTime)}}}
}

// checkRoot fails the test unless res is a successful rootGetattr.
func checkRoot(t *testing.T, res *session.Result) {
	t.Helper()
	if res.Status != nfs4.OK || len(res.Ops) != 2 || res.Ops[1].Op != nfs4.OpGetattr {
		t.Fatalf("PUTROOTFH+GETATTR: %v with %d results", res.Status, len(res.Ops))
	}
	if a := res.Ops[1].Res.(*nfs4.GetattrRes).Attrs; a.Type != nfs4.TypeDir || a.LeaseTime == 0 {
		t.Fatalf("root attributes %+v", a)
	}
}

// TestNFSv4SessionGanesha sets a session up with ganesha (EXCHANGE_ID,
// CREATE_SESSION with a back channel, RECLAIM_COMPLETE), runs COMPOUNDs on
// many slots at once, counts every call and operation, and destroys the
// session and client ID at Close: ganesha then no longer knows the client
// ID.
func TestNFSv4SessionGanesha(t *testing.T) {
	g := harness.StartGanesha(t, harness.GaneshaOptions{NFSv4: true})
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	s := newV4Session(t, ctx, g.Dial, session.Options{RPC: clientOpts(nil), Slots: 16})
	info := s.Info()
	t.Logf("session %x client %#x: fore %+v back %+v back channel %v lease %v server %q",
		info.SessionID, info.ClientID, info.Fore, info.Back, info.BackChannel, info.Lease, info.Server.Impl.Name)
	if info.Fore.MaxRequests == 0 || info.Fore.MaxRequests > 16 || info.Slots != int(info.Fore.MaxRequests) ||
		info.Lease != 60*time.Second || !info.BackChannel {
		t.Fatalf("negotiated %+v", info)
	}
	setup := s.Stats()
	// EXCHANGE_ID, CREATE_SESSION, the lease (SEQUENCE PUTROOTFH GETATTR),
	// RECLAIM_COMPLETE (SEQUENCE RECLAIM_COMPLETE).
	want := map[nfs4.Opnum]uint64{nfs4.OpExchangeID: 1, nfs4.OpCreateSession: 1, nfs4.OpSequence: 2,
		nfs4.OpPutRootFH: 1, nfs4.OpGetattr: 1, nfs4.OpReclaimComplete: 1}
	if setup.Calls != 4 || fmt.Sprint(setup.Ops) != fmt.Sprint(want) {
		t.Fatalf("setup sent %d calls: %v, want 4: %v", setup.Calls, setup.Ops, want)
	}

	// More COMPOUNDs at once than there are slots: each waits for one.
	const n = 64
	var wg sync.WaitGroup
	errs := make(chan error, n)
	slots := make(chan uint32, n)
	for range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			var res session.Result
			if err := s.Compound(ctx, rootCred, rootGetattr(), &res); err != nil {
				errs <- err
				return
			}
			if res.Status != nfs4.OK || len(res.Ops) != 2 {
				errs <- fmt.Errorf("status %v, %d results", res.Status, len(res.Ops))
				return
			}
			slots <- res.Seq.SlotID
		}()
	}
	wg.Wait()
	close(errs)
	close(slots)
	for err := range errs {
		t.Fatal(err)
	}
	used := map[uint32]bool{}
	for id := range slots {
		if id >= info.Fore.MaxRequests {
			t.Fatalf("slot %d used, the session has %d", id, info.Fore.MaxRequests)
		}
		used[id] = true
	}
	if len(used) < 2 {
		t.Fatalf("%d COMPOUNDs at once went on %d slot(s)", n, len(used))
	}
	t.Logf("%d COMPOUNDs on %d slots", n, len(used))
	st := s.Stats()
	if st.Calls-setup.Calls != n || st.Ops[nfs4.OpSequence]-setup.Ops[nfs4.OpSequence] != n ||
		st.Ops[nfs4.OpGetattr]-setup.Ops[nfs4.OpGetattr] != n || st.Retransmissions != 0 {
		t.Fatalf("after %d COMPOUNDs: %+v", n, st)
	}

	// Close destroys the session and the client ID.
	if err := s.Close(ctx); err != nil {
		t.Fatalf("Close: %v", err)
	}
	st = s.Stats()
	if st.Ops[nfs4.OpDestroySession] != 1 || st.Ops[nfs4.OpDestroyClientID] != 1 {
		t.Fatalf("Close sent %v", st.Ops)
	}
	var res session.Result
	if err := s.Compound(ctx, rootCred, rootGetattr(), &res); !errors.Is(err, session.ErrClosed) {
		t.Fatalf("COMPOUND after Close: %v", err)
	}
	// ganesha no longer knows the client ID.
	c := newClient(t, ctx, g.Dial)
	args := &nfs4.CompoundArgs{MinorVersion: 1, Ops: []nfs4.Argop{{Op: nfs4.OpCreateSession, Args: &nfs4.CreateSessionArgs{
		ClientID: info.ClientID, Sequence: 2, Fore: info.Fore, Back: info.Back, CBProgram: 0x40000000,
		SecParms: []nfs4.CallbackSecParms{{Flavor: nfs4.AuthNone}}}}}}
	var cres nfs4.CompoundRes
	if err := c.Call(ctx, nfs4.Program, nfs4.Version, nfs4.ProcCompound, rootCred, args, &cres); err != nil {
		t.Fatal(err)
	}
	if cres.Status != nfs4.ErrStaleClientID {
		t.Fatalf("CREATE_SESSION for the destroyed client ID: %v", cres.Status)
	}
}

// frozenClock never moves: a session on it never renews its lease.
type frozenClock struct{ t time.Time }

func (c frozenClock) Now() time.Time                     { return c.t }
func (frozenClock) After(time.Duration) <-chan time.Time { return nil }

// recoveries records the calls of Options.OnRecover; each runs a COMPOUND
// with the context it is given, as a state layer's reclaim would.
type recoveries struct {
	t    *testing.T
	s    *session.Session // set once the session exists
	mu   sync.Mutex
	got  []session.Recovery
	errs []error
}

func (r *recoveries) hook(ctx context.Context, rec session.Recovery) error {
	var res session.Result
	err := r.s.Compound(ctx, rootCred, rootGetattr(), &res)
	if err == nil && res.Status != nfs4.OK {
		err = res.Status
	}
	r.mu.Lock()
	r.got = append(r.got, rec)
	r.errs = append(r.errs, err)
	r.mu.Unlock()
	return err
}

func (r *recoveries) list() ([]session.Recovery, []error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]session.Recovery(nil), r.got...), append([]error(nil), r.errs...)
}

// TestNFSv4SessionLease: with ganesha's lease at 2 s, an idle session
// renews it (a lone SEQUENCE each second) and keeps its session and client
// ID for 3 leases and more; a session whose clock stands still sends no
// renewal, ganesha expires its lease, and the next COMPOUND finds that out,
// establishes a new client ID and session, and calls the reclaim hook,
// whose COMPOUND goes out before the waiting one.
func TestNFSv4SessionLease(t *testing.T) {
	const lease = 2
	g := harness.StartGanesha(t, harness.GaneshaOptions{NFSv4: true, LeaseLifetime: lease})
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	opts := session.Options{RPC: clientOpts(nil)}
	renewing := newV4Session(t, ctx, g.Dial, opts)
	rec := &recoveries{t: t}
	opts.Owner = []byte("hushfs session test frozen")
	opts.Clock = frozenClock{time.Now()}
	opts.OnRecover = rec.hook
	frozen := newV4Session(t, ctx, g.Dial, opts)
	rec.s = frozen
	if l := renewing.Info().Lease; l != lease*time.Second {
		t.Fatalf("lease %v, ganesha has %d s", l, lease)
	}
	clientID := frozen.Info().ClientID

	time.Sleep(4 * lease * time.Second)
	var res session.Result
	before := renewing.Stats()
	if err := renewing.Compound(ctx, rootCred, rootGetattr(), &res); err != nil {
		t.Fatal(err)
	}
	checkRoot(t, &res)
	if st := renewing.Stats(); st.Renewals < 3 || st.NewSessions != 0 || st.NewClientIDs != 0 || st.Calls != before.Calls+1 {
		t.Fatalf("renewing session after %d s idle: %d renewals, %d new sessions, %d new client IDs, %d calls (%d before)",
			4*lease, st.Renewals, st.NewSessions, st.NewClientIDs, st.Calls, before.Calls)
	} else {
		t.Logf("renewing session: %d renewals in %d s", st.Renewals, 4*lease)
	}

	if err := frozen.Compound(ctx, rootCred, rootGetattr(), &res); err != nil {
		t.Fatal(err)
	}
	checkRoot(t, &res)
	st := frozen.Stats()
	got, errs := rec.list()
	t.Logf("frozen session: %+v; recoveries %+v %v", st, got, errs)
	if st.Renewals != 0 || st.NewClientIDs != 1 || st.NewSessions != 1 || st.Reclaims != 1 || len(got) != 1 || errs[0] != nil {
		t.Fatalf("frozen session: %+v, recoveries %+v %v", st, got, errs)
	}
	// Setup (4 calls); the COMPOUND (BADSESSION); CREATE_SESSION for the
	// old client ID (STALE_CLIENTID); EXCHANGE_ID, CREATE_SESSION, the
	// lease, the hook's COMPOUND, RECLAIM_COMPLETE; the COMPOUND again.
	want := map[nfs4.Opnum]uint64{nfs4.OpExchangeID: 2, nfs4.OpCreateSession: 3, nfs4.OpSequence: 7,
		nfs4.OpPutRootFH: 5, nfs4.OpGetattr: 5, nfs4.OpReclaimComplete: 2}
	if st.Calls != 12 || fmt.Sprint(st.Ops) != fmt.Sprint(want) {
		t.Fatalf("frozen session sent %d calls %v, want 12 %v", st.Calls, st.Ops, want)
	}
	if got[0].ClientID == clientID || got[0].ClientID != frozen.Info().ClientID || got[0].Reconnected ||
		got[0].Lease != lease*time.Second {
		t.Fatalf("recovery %+v (old client ID %#x, now %#x)", got[0], clientID, frozen.Info().ClientID)
	}
}
