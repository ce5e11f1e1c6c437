package test

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"hushfs/internal/nfs4"
	"hushfs/internal/nfs4/session"
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

var _ = strings.Contains
var _ rpc.OpaqueAuth
