package test

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"hushfs/internal/nfs4"
	"hushfs/internal/nfs4/session"
	"hushfs/internal/proxy"
	"hushfs/internal/rpc"
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
// CREATE_SESSION with a back channel, RECLAIM_COMPLETE; 16 slots asked for,
// ganesha's 8 granted), runs more COMPOUNDs at once than there are slots
// (each waits for one; none goes beyond the 8), counts every call and
// operation, and destroys the session and client ID at Close: ganesha then
// no longer knows the client ID.
func TestNFSv4SessionGanesha(t *testing.T) {
	g := harness.StartGanesha(t, harness.GaneshaOptions{NFSv4: true, SlotTableSize: 8})
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	s := newV4Session(t, ctx, g.Dial, session.Options{RPC: clientOpts(nil), Slots: 16})
	info := s.Info()
	t.Logf("session %x client %#x: fore %+v back %+v back channel %v lease %v server %q",
		info.SessionID, info.ClientID, info.Fore, info.Back, info.BackChannel, info.Lease, info.Server.Impl.Name)
	if info.Fore.MaxRequests != 8 || info.Slots != 8 ||
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
	// A renewal due meanwhile may go out beside the COMPOUND: calls beyond
	// the renewals are the COMPOUND alone.
	if st := renewing.Stats(); st.Renewals < 3 || st.NewSessions != 0 || st.NewClientIDs != 0 || st.Calls-st.Renewals != before.Calls-before.Renewals+1 {
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

// hardOpts never gives up on a call: a hard mount's RPC options, with
// transmissions timing out after d.
func hardOpts(d time.Duration) rpc.ClientOptions {
	return rpc.ClientOptions{Timeout: d, Retrans: 1, Hard: true}
}

// exportFH walks from the pseudo root to ganesha's export and returns its
// handle.
func exportFH(t *testing.T, ctx context.Context, s *session.Session, g *harness.Ganesha) nfs4.FH {
	t.Helper()
	ops := []nfs4.Argop{{Op: nfs4.OpPutRootFH}}
	for _, name := range strings.Split(strings.Trim(g.ExportPath, "/"), "/") {
		ops = append(ops, nfs4.Argop{Op: nfs4.OpLookup, Args: &nfs4.LookupArgs{Name: []byte(name)}})
	}
	ops = append(ops, nfs4.Argop{Op: nfs4.OpGetFH})
	var res session.Result
	if err := s.Compound(ctx, rootCred, ops, &res); err != nil {
		t.Fatal(err)
	}
	if res.Status != nfs4.OK || len(res.Ops) != len(ops) {
		t.Fatalf("walk to the export: %v", res.Status)
	}
	return append(nfs4.FH(nil), res.Ops[len(ops)-1].Res.(*nfs4.GetFHRes).FH...)
}

// mkdirV4 sends PUTFH dir + CREATE name (a directory): not idempotent (a
// second run answers EXIST), so its reply is cached for a retry.
func mkdirV4(ctx context.Context, s *session.Session, dir nfs4.FH, name string) (*session.Result, error) {
	var res session.Result
	ops := []nfs4.Argop{{Op: nfs4.OpPutFH, Args: &nfs4.PutFHArgs{FH: dir}},
		{Op: nfs4.OpCreate, Args: &nfs4.CreateArgs{Type: nfs4.TypeDir, Name: []byte(name),
			Attrs: nfs4.Fattr{Mask: nfs4.NewBitmap(nfs4.AttrMode), Mode: 0o755}}}}
	return &res, s.Compound(ctx, rootCred, ops, &res)
}

// checkMkdir fails the test unless mkdirV4 succeeded and made the
// directory.
func checkMkdir(t *testing.T, g *harness.Ganesha, name string, res *session.Result, err error) {
	t.Helper()
	if err != nil {
		t.Fatalf("CREATE %s: %v", name, err)
	}
	if res.Status != nfs4.OK || len(res.Ops) != 2 {
		t.Fatalf("CREATE %s: %v (a CREATE run twice answers EXIST)", name, res.Status)
	}
	if fi, err := os.Stat(filepath.Join(g.ExportDir, name)); err != nil || !fi.IsDir() {
		t.Fatalf("CREATE %s: on the server: %v", name, err)
	}
}

// TestNFSv4SessionServerRestart kills ganesha and starts it again under an
// idle session: the new connection's BIND_CONN_TO_SESSION finds the
// session gone, CREATE_SESSION finds the client ID gone, and the session
// comes back under a new client ID, with the reclaim hook told the server
// restarted (reconnected); the COMPOUND waiting meanwhile then succeeds.
func TestNFSv4SessionServerRestart(t *testing.T) {
	g := harness.StartGanesha(t, harness.GaneshaOptions{NFSv4: true})
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	rec := &recoveries{t: t}
	s := newV4Session(t, ctx, g.Dial, session.Options{RPC: hardOpts(2 * time.Second), OnRecover: rec.hook})
	rec.s = s
	old := s.Info().ClientID
	g.Restart(t)
	var res session.Result
	if err := s.Compound(ctx, rootCred, rootGetattr(), &res); err != nil {
		t.Fatal(err)
	}
	checkRoot(t, &res)
	st := s.Stats()
	got, errs := rec.list()
	t.Logf("after the restart: %+v; recoveries %+v %v", st, got, errs)
	// (ganesha's client IDs start with its start time in seconds: one
	// restarted within the second hands out the old number again.)
	if len(got) != 1 || errs[0] != nil || !got[0].Reconnected || got[0].Cause != nfs4.ErrStaleClientID ||
		got[0].ClientID != s.Info().ClientID {
		t.Fatalf("recoveries %+v %v (old client ID %#x)", got, errs, old)
	}
	if st.NewClientIDs != 1 || st.NewSessions != 1 || st.Binds < 1 {
		t.Fatalf("after the restart: %+v", st)
	}
}

// startV4Proxy starts `hushfs proxy` in ganesha's namespace in front of
// its NFS port and returns it with a dialer of it.
func startV4Proxy(t *testing.T, g *harness.Ganesha) (*faultProxy, func(context.Context) (net.Conn, error)) {
	t.Helper()
	p := startFaultProxyNS(t, harness.BuildHushfs(t), g.NS, net.JoinHostPort(g.Addr, fmt.Sprint(g.NFSPort)))
	return p, func(ctx context.Context) (net.Conn, error) { return g.NS.Dial(ctx, p.Addr) }
}

// compoundCalls is the COMPOUNDs the proxy forwarded.
func compoundCalls(c proxy.Counts) uint64 {
	return c.Calls[proxy.ProcKey{Prog: nfs4.Program, Vers: nfs4.Version, Proc: nfs4.ProcCompound}]
}

// TestNFSv4SessionConnectionCut: `hushfs proxy` closes the connection
// right after forwarding a CREATE, so that ganesha runs it and its reply
// is lost. The session binds the new connection (BIND_CONN_TO_SESSION)
// and sends the CREATE again with its slot and sequence id: ganesha
// answers from its reply cache (OK, where running it again answers EXIST).
func TestNFSv4SessionConnectionCut(t *testing.T) {
	g := harness.StartGanesha(t, harness.GaneshaOptions{NFSv4: true})
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	p, dial := startV4Proxy(t, g)
	s := newV4Session(t, ctx, dial, session.Options{RPC: hardOpts(2 * time.Second)})
	dir := exportFH(t, ctx, s, g)

	p.SetFaults(t, "--close-every", "3")
	var res session.Result
	for range 2 {
		if err := s.Compound(ctx, rootCred, rootGetattr(), &res); err != nil {
			t.Fatal(err)
		}
		checkRoot(t, &res)
	}
	cres, err := mkdirV4(ctx, s, dir, "cut") // the third call: cut after it
	p.SetFaults(t)
	checkMkdir(t, g, "cut", cres, err)
	st, c := s.Stats(), p.Counts(t)
	t.Logf("session %+v; proxy closed %d, forwarded %d COMPOUNDs", st, c.Faults.Closes, compoundCalls(c))
	if c.Faults.Closes != 1 || st.Retransmissions != 1 || st.Binds != 1 || st.NewSessions != 0 {
		t.Fatalf("one connection closed after the CREATE: %+v, proxy closed %d", st, c.Faults.Closes)
	}
	if compoundCalls(c) != st.Calls+st.Retransmissions {
		t.Fatalf("the proxy forwarded %d COMPOUNDs, the session counts %d calls and %d retransmissions",
			compoundCalls(c), st.Calls, st.Retransmissions)
	}
	// The session goes on in the same slot table.
	if err := s.Compound(ctx, rootCred, rootGetattr(), &res); err != nil {
		t.Fatal(err)
	}
	checkRoot(t, &res)
}

// TestNFSv4SessionBlackhole: `hushfs proxy` drops everything both ways for
// 3 s, a CREATE sent meanwhile included. The session's call times out, the
// connection is replaced (its BIND_CONN_TO_SESSION may fall in the
// blackhole too: another connection is tried), and the CREATE goes again
// with its slot and sequence id once the blackhole is over: ganesha runs it
// once, and the slot's next request is in sequence.
func TestNFSv4SessionBlackhole(t *testing.T) {
	g := harness.StartGanesha(t, harness.GaneshaOptions{NFSv4: true})
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	p, dial := startV4Proxy(t, g)
	s := newV4Session(t, ctx, dial, session.Options{RPC: hardOpts(time.Second)})
	dir := exportFH(t, ctx, s, g)

	p.SetFaults(t, "--blackhole", "3s")
	cres, err := mkdirV4(ctx, s, dir, "dark")
	p.SetFaults(t)
	checkMkdir(t, g, "dark", cres, err)
	st, c := s.Stats(), p.Counts(t)
	t.Logf("session %+v; proxy blackholed %d calls and %d replies", st, c.Faults.BlackholedCalls, c.Faults.BlackholedReplies)
	if c.Faults.BlackholedCalls < 1 || st.Retransmissions < 1 || st.Binds < 1 || st.NewSessions != 0 {
		t.Fatalf("after the blackhole: %+v, proxy %+v", st, c.Faults)
	}
	var res session.Result
	if err := s.Compound(ctx, rootCred, rootGetattr(), &res); err != nil {
		t.Fatal(err)
	}
	checkRoot(t, &res)
}

// TestNFSv4SessionExactlyOnce: 8 workers each make 25 directories through
// `hushfs proxy` closing a connection after one call in 15 at random, so
// that CREATEs, their replies and BIND_CONN_TO_SESSIONs are lost in every
// combination, several in flight at once. Every CREATE answers OK (run
// again, one would answer EXIST) and every directory is there.
func TestNFSv4SessionExactlyOnce(t *testing.T) {
	g := harness.StartGanesha(t, harness.GaneshaOptions{NFSv4: true})
	ctx, cancel := context.WithTimeout(context.Background(), 120*time.Second)
	defer cancel()
	p, dial := startV4Proxy(t, g)
	s := newV4Session(t, ctx, dial, session.Options{RPC: hardOpts(2 * time.Second), Slots: 8})
	dir := exportFH(t, ctx, s, g)
	p.SetFaults(t, "--close-prob", "0.066", "--seed", "7")
	const workers, each = 8, 25
	var wg sync.WaitGroup
	errs := make(chan error, workers*each)
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range each {
				name := fmt.Sprintf("w%d-%d", w, i)
				res, err := mkdirV4(ctx, s, dir, name)
				if err == nil && res.Status != nfs4.OK {
					err = res.Status
				}
				if err != nil {
					errs <- fmt.Errorf("CREATE %s: %w", name, err)
				}
			}
		}()
	}
	wg.Wait()
	p.SetFaults(t)
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	ents, err := os.ReadDir(g.ExportDir)
	if err != nil {
		t.Fatal(err)
	}
	st, c := s.Stats(), p.Counts(t)
	t.Logf("%d directories; session %+v; proxy closed %d connections", len(ents), st, c.Faults.Closes)
	if len(ents) != workers*each || c.Faults.Closes == 0 || st.Retransmissions == 0 || st.NewSessions != 0 {
		t.Fatalf("%d directories, %d closes, %d retransmissions, %d new sessions",
			len(ents), c.Faults.Closes, st.Retransmissions, st.NewSessions)
	}
}
