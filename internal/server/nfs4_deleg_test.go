package server

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"hushfs/internal/nfs3"
	"hushfs/internal/nfs4"
	"hushfs/internal/rpc"
	"hushfs/internal/xdr"
)

const testCBProgram = 0x40000000

// cbClient is the callback side of a test client: it answers CB_NULL and
// CB_COMPOUND (CB_SEQUENCE, CB_RECALL) and reports each recall; with
// returnRecalled it returns the recalled delegation (DELEGRETURN) at once.
type cbClient struct {
	v              *v4client
	returnRecalled bool
	failNull       bool          // CB_NULL is answered PROC_UNAVAIL
	null           chan struct{} // one per CB_NULL
	recalls        chan nfs4.Stateid

	// getattr, if set, answers CB_GETATTR (else NOTSUPP) and is counted.
	gmu      sync.Mutex
	getattr  func() nfs4.Fattr
	getattrs chan struct{}

	mu  sync.Mutex
	ret *v4client // its own session for DELEGRETURN from the handler

	// notifies gets each CB_NOTIFY's changes (copied), answered
	// notifyStatus (OK unless set).
	notifies     chan []nfs4.Notify
	notifyStatus atomic.Int32
	notifyHold   chan struct{} // if set (under gmu), CB_NOTIFY is answered once it is closed
}

func (h *cbClient) ServeRPC(ctx context.Context, call *rpc.Call, reply []byte) ([]byte, error) {
	switch call.Proc {
	case nfs4.CBProcNull:
		h.null <- struct{}{}
		if h.failNull {
			return nil, rpc.ErrProcUnavail
		}
		return reply, nil
	case nfs4.CBProcCompound:
	default:
		return nil, rpc.ErrProcUnavail
	}
	var args nfs4.CBCompoundArgs
	var d xdr.Decoder
	d.Reset(call.Args)
	args.Decode(&d)
	if d.Err() != nil {
		return nil, rpc.ErrGarbageArgs
	}
	res := nfs4.CBCompoundRes{Tag: args.Tag}
	for _, op := range args.Ops {
		switch a := op.Args.(type) {
		case *nfs4.CBSequenceArgs:
			res.Results = append(res.Results, nfs4.CBResop{Op: op.Op, Res: &nfs4.CBSequenceRes{Status: nfs4.OK,
				SessionID: a.SessionID, SequenceID: a.SequenceID, SlotID: a.SlotID}})
		case *nfs4.CBRecallArgs:
			res.Results = append(res.Results, nfs4.CBResop{Op: op.Op, Res: &nfs4.StatusRes{Status: nfs4.OK}})
			sid, fh := a.Stateid, append(nfs4.FH(nil), a.FH...)
			h.recalls <- sid
			if h.returnRecalled {
				// As a client does: answer, then return the delegation.
				go func() {
					h.mu.Lock()
					defer h.mu.Unlock()
					r := h.ret.do(putFH(fh), nfs4.Argop{Op: nfs4.OpDelegReturn, Args: &nfs4.DelegReturnArgs{Stateid: sid}})
					if r.Status != nfs4.OK {
						h.ret.t.Errorf("DELEGRETURN: %v", resultsOf(r))
					}
				}()
			}
		case *nfs4.CBGetattrArgs:
			h.gmu.Lock()
			getattr := h.getattr
			h.gmu.Unlock()
			if getattr == nil {
				res.Status = nfs4.ErrNotSupp
				res.Results = append(res.Results, nfs4.CBResop{Op: op.Op, Res: &nfs4.CBGetattrRes{Status: nfs4.ErrNotSupp}})
				break
			}
			f := getattr()
			f.Mask = a.AttrRequest
			res.Results = append(res.Results, nfs4.CBResop{Op: op.Op, Res: &nfs4.CBGetattrRes{Status: nfs4.OK, Attrs: f}})
			h.getattrs <- struct{}{}
		case *nfs4.CBNotifyArgs:
			h.gmu.Lock()
			hold := h.notifyHold
			h.gmu.Unlock()
			if hold != nil {
				<-hold
			}
			st := nfs4.Status(h.notifyStatus.Load())
			res.Status = st
			res.Results = append(res.Results, nfs4.CBResop{Op: op.Op, Res: &nfs4.StatusRes{Status: st}})
			if h.notifies != nil {
				// Re-decoded from its own bytes: the arguments alias the call.
				var c nfs4.CBNotifyArgs
				var cd xdr.Decoder
				cd.Reset(a.Append(nil))
				c.Decode(&cd)
				h.notifies <- c.Changes
			}
		default:
			res.Status = nfs4.ErrNotSupp
		}
	}
	return res.Append(reply), nil
}

// v4cb connects a client with a back channel served by a cbClient, and
// waits for the server's CB_NULL probe.
func (e *env) v4cb(returnRecalled, failNull bool) (*v4client, *cbClient) {
	e.t.Helper()
	h := &cbClient{returnRecalled: returnRecalled, failNull: failNull, null: make(chan struct{}, 4), recalls: make(chan nfs4.Stateid, 16),
		getattrs: make(chan struct{}, 16), notifies: make(chan []nfs4.Notify, 64)}
	v := &v4client{t: e.t, c: e.client(0, 0).c, cred: rpc.SysCred(0, 0, nil, "hushfs-test"), backChan: true}
	v.c.Register(testCBProgram, nfs4.CBVersion, h)
	v.owner = []byte("test client with a back channel " + e.t.Name())
	if e.cbClients++; e.cbClients > 1 {
		v.owner = fmt.Appendf(v.owner, " #%d", e.cbClients)
	}
	v.setup()
	h.v = v
	// DELEGRETURN from the handler goes on a session of the same client
	// record, on another connection.
	h.ret = &v4client{t: e.t, c: e.client(0, 0).c, cred: v.cred, clientID: v.clientID, owner: v.owner, csSeq: v.csSeq}
	h.ret.sess = h.ret.createSession(false)
	v.csSeq = h.ret.csSeq
	select {
	case <-h.null:
	case <-time.After(10 * time.Second):
		e.t.Fatal("no CB_NULL on the back channel")
	}
	return v, h
}

// openDeleg opens name for reading with a read delegation wanted (see
// openWanting).
func (v *v4client) openDeleg(dir nfs4.FH, name string) (*nfs4.OpenRes, nfs4.FH) {
	v.t.Helper()
	return v.openWanting(dir, name, nfs4.ShareAccessRead, nfs4.ShareAccessWantReadDeleg, nfs4.DelegateRead, false)
}

// openWanting opens name with access and the want flag, retrying for a
// second until the delegation kind typ comes, while the server records
// the back channel's answer to CB_NULL (which the client has seen). It
// returns the OPEN's result and the file's handle.
func (v *v4client) openWanting(dir nfs4.FH, name string, access, want uint32, typ nfs4.DelegationType, create bool) (*nfs4.OpenRes, nfs4.FH) {
	v.t.Helper()
	deadline := time.Now().Add(time.Second)
	for {
		op := v.openOp(name, access, create)
		op.Args.(*nfs4.OpenArgs).ShareAccess = access | want
		res := v.must(putFH(dir), op, getFH())
		open := res.Results[1].Res.(*nfs4.OpenRes)
		if open.Delegation.Type == typ || time.Now().After(deadline) {
			return open, fhOf(res.Results[2].Res)
		}
		v.must(putFH(fhOf(res.Results[2].Res)), nfs4.Argop{Op: nfs4.OpClose, Args: &nfs4.CloseArgs{Stateid: open.Stateid}})
		time.Sleep(10 * time.Millisecond)
	}
}

func recallOf(t *testing.T, h *cbClient) nfs4.Stateid {
	t.Helper()
	select {
	case sid := <-h.recalls:
		return sid
	case <-time.After(10 * time.Second):
		t.Fatal("no CB_RECALL")
	}
	return nfs4.Stateid{}
}

// A client with a working back channel gets a read delegation on OPEN for
// reading; another client's OPEN for writing is NFS4ERR_DELAY until the
// holder, recalled with CB_RECALL, returns it; an NFSv3 WRITE and REMOVE
// recall and wait; the holder's own write open recalls nothing; a client
// without a back channel gets none.
func TestV4ReadDelegationRecall(t *testing.T) {
	e := startEnvTuned(t, false, func(c *Config) { c.Delegations = true })
	os.WriteFile(filepath.Join(e.root, "f"), []byte("delegated"), 0o644)
	root := nfs4.FH(e.srv.RootHandle())
	a, h := e.v4cb(true, false)
	b := e.v4(0, 0)

	open, fh := a.openDeleg(root, "f")
	if open.Delegation.Type != nfs4.DelegateRead {
		t.Fatalf("OPEN for reading by a client with a back channel: %+v", open.Delegation)
	}
	deleg := open.Delegation.Stateid
	res := a.must(putFH(fh), nfs4.Argop{Op: nfs4.OpRead, Args: &nfs4.ReadArgs{Stateid: deleg, Count: 100}})
	if r := res.Results[1].Res.(*nfs4.ReadRes); string(r.Data) != "delegated" {
		t.Fatalf("READ with the delegation stateid: %q", r.Data)
	}
	if o, _ := b.openDeleg(root, "f"); o.Delegation.Type == nfs4.DelegateRead {
		t.Fatal("a client without a back channel got a delegation")
	}

	// The holder opening for writing itself recalls nothing.
	a.must(putFH(root), a.openOp("f", nfs4.ShareAccessWrite, false))
	select {
	case sid := <-h.recalls:
		t.Fatalf("the holder's own write open recalled %v", sid)
	default:
	}

	// Another client's write open: DELAY, CB_RECALL, DELEGRETURN, then OK.
	b.fails(nfs4.ErrDelay, 1, putFH(root), b.openOp("f", nfs4.ShareAccessWrite, false))
	if sid := recallOf(t, h); sid != deleg {
		t.Fatalf("CB_RECALL of %v, the delegation is %v", sid, deleg)
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		r := b.do(putFH(root), b.openOp("f", nfs4.ShareAccessWrite, false))
		if r.Status == nfs4.OK {
			break
		}
		if r.Status != nfs4.ErrDelay || time.Now().After(deadline) {
			t.Fatalf("write open after the recall: %v", resultsOf(r))
		}
		time.Sleep(10 * time.Millisecond)
	}
	a.fails(nfs4.ErrBadStateid, 1, putFH(fh), nfs4.Argop{Op: nfs4.OpRead, Args: &nfs4.ReadArgs{Stateid: deleg, Count: 1}})

	// NFSv3 changes recall too, and wait for the return.
	b.must(putFH(root), nfs4.Argop{Op: nfs4.OpRemove, Args: &nfs4.RemoveArgs{Target: []byte("f")}})
	os.WriteFile(filepath.Join(e.root, "g"), []byte("v3 victim"), 0o644)
	c3 := e.root0()
	for _, change := range []string{"WRITE", "REMOVE"} {
		open, gfh := a.openDeleg(root, "g")
		if open.Delegation.Type != nfs4.DelegateRead {
			t.Fatalf("no delegation of g: %+v", open.Delegation)
		}
		a.must(putFH(gfh), nfs4.Argop{Op: nfs4.OpClose, Args: &nfs4.CloseArgs{Stateid: open.Stateid}})
		var st nfs3.Status
		if change == "WRITE" {
			st = c3.write(nfs3.FH(gfh), 0, []byte("V3"), nfs3.FileSync).Status
		} else {
			st = c3.remove(nfs3.FH(root), "g")
		}
		if st != nfs3.OK {
			t.Fatalf("v3 %s of a delegated file: %v", change, st)
		}
		if sid := recallOf(t, h); sid != open.Delegation.Stateid {
			t.Fatalf("v3 %s recalled %v", change, sid)
		}
	}
}

// A delegation not returned is revoked a lease after its recall: the
// change goes ahead, the holder's stateid is DELEG_REVOKED, SEQUENCE
// flags RECALLABLE_STATE_REVOKED until the client frees the stateid.
func TestV4DelegationRevoked(t *testing.T) {
	var mu sync.Mutex
	now := time.Now()
	clock := func() time.Time { mu.Lock(); defer mu.Unlock(); return now }
	e := startEnvTuned(t, false, func(c *Config) { c.Delegations = true; c.Now = clock; c.Lease = 10 * time.Second })
	os.WriteFile(filepath.Join(e.root, "f"), []byte("x"), 0o644)
	root := nfs4.FH(e.srv.RootHandle())
	a, h := e.v4cb(false, false)
	b := e.v4(0, 0)
	open, fh := a.openDeleg(root, "f")
	if open.Delegation.Type != nfs4.DelegateRead {
		t.Fatalf("no delegation: %+v", open.Delegation)
	}
	deleg := open.Delegation.Stateid
	b.fails(nfs4.ErrDelay, 2, putFH(root), lookupOp("f"), nfs4.Argop{Op: nfs4.OpSetattr,
		Args: &nfs4.SetattrArgs{Attrs: nfs4.Fattr{Mask: nfs4.NewBitmap(nfs4.AttrMode), Mode: 0o600}}})
	recallOf(t, h)

	mu.Lock()
	now = now.Add(9 * time.Second)
	mu.Unlock()
	a.must() // both renew their leases; the delegation is still recalled
	b.must()
	e.srv.v4.state.Expire()
	b.fails(nfs4.ErrDelay, 1, putFH(fh), nfs4.Argop{Op: nfs4.OpSetattr,
		Args: &nfs4.SetattrArgs{Attrs: nfs4.Fattr{Mask: nfs4.NewBitmap(nfs4.AttrMode), Mode: 0o600}}})
	mu.Lock()
	now = now.Add(2 * time.Second)
	mu.Unlock()
	a.must()
	b.must()
	e.srv.v4.state.Expire()
	b.must(putFH(fh), nfs4.Argop{Op: nfs4.OpSetattr,
		Args: &nfs4.SetattrArgs{Attrs: nfs4.Fattr{Mask: nfs4.NewBitmap(nfs4.AttrMode), Mode: 0o600}}})

	a.fails(nfs4.ErrDelegRevoked, 1, putFH(fh), nfs4.Argop{Op: nfs4.OpRead, Args: &nfs4.ReadArgs{Stateid: deleg, Count: 1}})
	flags := func() uint32 {
		r := a.send(a.seqOp(false))
		return r.Results[0].Res.(*nfs4.SequenceRes).StatusFlags
	}
	if flags()&nfs4.SeqStatusRecallableStateRevoked == 0 {
		t.Fatal("SEQUENCE does not flag the revoked delegation")
	}
	res := a.must(nfs4.Argop{Op: nfs4.OpTestStateid, Args: &nfs4.TestStateidArgs{Stateids: []nfs4.Stateid{deleg}}})
	if c := res.Results[0].Res.(*nfs4.TestStateidRes).StatusCodes; len(c) != 1 || c[0] != nfs4.ErrDelegRevoked {
		t.Fatalf("TEST_STATEID of the revoked delegation: %v", c)
	}
	a.must(nfs4.Argop{Op: nfs4.OpFreeStateid, Args: &nfs4.FreeStateidArgs{Stateid: deleg}})
	if flags()&nfs4.SeqStatusRecallableStateRevoked != 0 {
		t.Fatal("SEQUENCE still flags a revoked delegation after FREE_STATEID")
	}
}

// A client whose back channel does not answer CB_NULL gets no delegation.
func TestV4NoDelegationWithoutCallbacks(t *testing.T) {
	e := startEnvTuned(t, false, func(c *Config) { c.Delegations = true })
	os.WriteFile(filepath.Join(e.root, "f"), []byte("x"), 0o644)
	v, _ := e.v4cb(false, true)
	if o, _ := v.openDeleg(nfs4.FH(e.srv.RootHandle()), "f"); o.Delegation.Type == nfs4.DelegateRead {
		t.Fatal("a client whose CB_NULL failed got a delegation")
	}
}

func (h *cbClient) setGetattr(f func() nfs4.Fattr) {
	h.gmu.Lock()
	defer h.gmu.Unlock()
	h.getattr = f
}
