package server

import (
	"context"
	"net"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"hushfs/internal/nfs4"
	"hushfs/internal/nfs4/session"
	"hushfs/internal/rpc"
)

// The hushfs NFSv4.1 client's session layer (internal/nfs4/session)
// against this server: the session is set up with a back channel, gets a
// read delegation, answers the recall another client's write open causes
// and returns it; after the server restarts (same port, same state
// directory) the session recovers and reclaims its open in the grace
// period.
func TestV4SessionClientInterop(t *testing.T) {
	e := startEnvTuned(t, false, func(c *Config) { c.Delegations = true })
	e.samePort = true
	os.WriteFile(filepath.Join(e.root, "f"), []byte("shared"), 0o644)
	root := nfs4.FH(e.srv.RootHandle())
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()

	var (
		mu       sync.Mutex
		sess     *session.Session
		fh       nfs4.FH
		recalled = make(chan nfs4.Stateid, 4)
		recovery = make(chan session.Recovery, 4)
		reclaim  = make(chan nfs4.Status, 4)
	)
	owner := []byte("interop open owner")
	cred := rpc.SysCred(0, 0, nil, "interop")
	callback := func(_ context.Context, _ *nfs4.CBSequenceArgs, op nfs4.CBArgop) nfs4.OpRes {
		a, ok := op.Args.(*nfs4.CBRecallArgs)
		if !ok {
			return nil
		}
		recalled <- a.Stateid
		sid, file := a.Stateid, append(nfs4.FH(nil), a.FH...)
		go func() { // answer first, then return (the holder's way)
			mu.Lock()
			s := sess
			mu.Unlock()
			var res session.Result
			if err := s.Compound(ctx, cred, []nfs4.Argop{putFH(file), {Op: nfs4.OpDelegReturn, Args: &nfs4.DelegReturnArgs{Stateid: sid}}}, &res); err != nil || res.Status != nfs4.OK {
				t.Errorf("DELEGRETURN: %v %v", err, res.Status)
			}
		}()
		return &nfs4.StatusRes{Status: nfs4.OK}
	}
	onRecover := func(ctx context.Context, r session.Recovery) error {
		recovery <- r
		mu.Lock()
		s, file := sess, fh
		mu.Unlock()
		var res session.Result
		err := s.Compound(ctx, cred, []nfs4.Argop{putFH(file), {Op: nfs4.OpOpen, Args: &nfs4.OpenArgs{
			ShareAccess: nfs4.ShareAccessRead | nfs4.ShareAccessWantNoDeleg, Owner: nfs4.StateOwner{ClientID: r.ClientID, Owner: owner},
			Claim: nfs4.OpenClaim{Type: nfs4.ClaimPrevious, DelegateType: nfs4.DelegateNone}}}}, &res)
		if err != nil {
			return err
		}
		reclaim <- res.Status
		return nil
	}
	addr := e.addr // the restarted server listens here again; e.addr is rewritten then
	s, err := session.New(ctx, session.Options{
		RPC: rpc.ClientOptions{Dial: func(ctx context.Context) (net.Conn, error) {
			var d net.Dialer
			return d.DialContext(ctx, "tcp", addr)
		}, Timeout: 10 * time.Second},
		Owner: []byte("hushfs interop test " + t.Name()), Callback: callback, OnRecover: onRecover, Logf: t.Logf,
	})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close(context.Background())
	mu.Lock()
	sess = s
	mu.Unlock()
	clientID := s.Info().ClientID

	// A read delegation, once the server has heard back from CB_NULL.
	var res session.Result
	var open *nfs4.OpenRes
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		if err := s.Compound(ctx, cred, []nfs4.Argop{putFH(root), {Op: nfs4.OpOpen, Args: &nfs4.OpenArgs{
			ShareAccess: nfs4.ShareAccessRead | nfs4.ShareAccessWantReadDeleg, Owner: nfs4.StateOwner{ClientID: clientID, Owner: owner},
			Claim: nfs4.OpenClaim{Type: nfs4.ClaimNull, File: []byte("f")}}}, getFH()}, &res); err != nil || res.Status != nfs4.OK {
			t.Fatalf("OPEN: %v %v", err, res.Status)
		}
		open = res.Ops[1].Res.(*nfs4.OpenRes)
		if open.Delegation.Type == nfs4.DelegateRead || time.Now().After(deadline) {
			break
		}
	}
	if open.Delegation.Type != nfs4.DelegateRead {
		t.Fatalf("no read delegation: %+v", open.Delegation)
	}
	mu.Lock()
	fh = fhOf(res.Ops[2].Res)
	mu.Unlock()
	deleg := open.Delegation.Stateid

	// Another client's write open: recalled, returned, then granted.
	b := e.v4(0, 0)
	b.fails(nfs4.ErrDelay, 1, putFH(root), b.openOp("f", nfs4.ShareAccessWrite, false))
	select {
	case sid := <-recalled:
		if sid != deleg {
			t.Fatalf("recalled %v, held %v", sid, deleg)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("no recall reached the session")
	}
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		r := b.do(putFH(root), b.openOp("f", nfs4.ShareAccessWrite, false), getFH())
		if r.Status == nfs4.OK {
			b.must(putFH(fhOf(r.Results[2].Res)), nfs4.Argop{Op: nfs4.OpClose, Args: &nfs4.CloseArgs{Stateid: r.Results[1].Res.(*nfs4.OpenRes).Stateid}})
			break
		}
		if r.Status != nfs4.ErrDelay || time.Now().After(deadline) {
			t.Fatalf("write open after the recall: %v", resultsOf(r))
		}
	}

	// The server restarts: the session recovers and reclaims its open.
	e.restart(false)
	if err := s.Compound(ctx, cred, []nfs4.Argop{putFH(fh), getattrOp(nfs4.AttrSize)}, &res); err != nil || res.Status != nfs4.OK {
		t.Fatalf("GETATTR after the restart: %v %v", err, res.Status)
	}
	select {
	case r := <-recovery:
		if !r.Reconnected {
			t.Errorf("recovery %+v: not seen as a restart", r)
		}
	default:
		t.Fatal("the session did not recover")
	}
	if st := <-reclaim; st != nfs4.OK {
		t.Fatalf("reclaim of the open after the restart: %v", st)
	}
}
