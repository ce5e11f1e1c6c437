package server

import (
	"context"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"hushfs/internal/nfs4"
	"hushfs/internal/rpc"
	"hushfs/internal/xdr"
)

// v4client is an NFSv4.1 client for tests: the internal/nfs4 codec over
// one RPC connection, with one session whose slot 0 carries every
// COMPOUND (SEQUENCE first, with the next sequence id).
type v4client struct {
	t        testing.TB
	c        *rpc.Client
	cred     rpc.OpaqueAuth
	clientID uint64
	sess     nfs4.SessionID
	seq      uint32 // slot 0's last sequence id
	owner    []byte // open and lock owner
	backChan bool   // CREATE_SESSION asks for a back channel on the connection
	csSeq    uint32 // the client record's last CREATE_SESSION sequence id
}

var v4owners atomic.Uint64 // distinct client owners within one test binary

// v4 connects as uid/gid and sets up a session: EXCHANGE_ID,
// CREATE_SESSION, RECLAIM_COMPLETE.
func (e *env) v4(uid, gid uint32) *v4client {
	e.t.Helper()
	v := &v4client{t: e.t, c: e.client(uid, gid).c, cred: rpc.SysCred(uid, gid, nil, "hushfs-test")}
	v.owner = fmt.Appendf(nil, "test client %d", v4owners.Add(1))
	v.setup()
	return v
}

// setup makes the client record and the session.
func (v *v4client) setup() {
	v.t.Helper()
	eid := v.only(nfs4.Argop{Op: nfs4.OpExchangeID, Args: &nfs4.ExchangeIDArgs{
		ClientOwner:  nfs4.ClientOwner{Verifier: nfs4.Verifier{1, 2, 3}, OwnerID: v.owner},
		StateProtect: nfs4.StateProtectArgs{How: nfs4.SP4None}}}).(*nfs4.ExchangeIDRes)
	v.clientID, v.csSeq = eid.ClientID, eid.SequenceID-1
	v.sess, v.seq = v.createSession(v.backChan), 0
	v.must(nfs4.Argop{Op: nfs4.OpReclaimComplete, Args: &nfs4.ReclaimCompleteArgs{}})
}

// createSession makes a session of the client record on this connection.
func (v *v4client) createSession(backChan bool) nfs4.SessionID {
	v.t.Helper()
	var flags uint32
	if backChan {
		flags = nfs4.CreateSessionFlagConnBackChan
	}
	v.csSeq++
	cs := v.only(nfs4.Argop{Op: nfs4.OpCreateSession, Args: &nfs4.CreateSessionArgs{
		ClientID: v.clientID, Sequence: v.csSeq, Flags: flags,
		Fore:      nfs4.ChannelAttrs{MaxRequestSize: 1 << 20, MaxResponseSize: 1 << 20, MaxResponseSizeCached: 8192, MaxOperations: 16, MaxRequests: 4},
		Back:      nfs4.ChannelAttrs{MaxRequestSize: 4096, MaxResponseSize: 4096, MaxOperations: 2, MaxRequests: 1},
		CBProgram: testCBProgram, SecParms: []nfs4.CallbackSecParms{{Flavor: nfs4.AuthNone}}}}).(*nfs4.CreateSessionRes)
	return cs.SessionID
}

// send sends a COMPOUND as it is.
func (v *v4client) send(ops ...nfs4.Argop) *nfs4.CompoundRes {
	v.t.Helper()
	var res nfs4.CompoundRes
	if err := v.sendRaw(&nfs4.CompoundArgs{Tag: []byte("t"), MinorVersion: 1, Ops: ops}, &res); err != nil {
		v.t.Fatalf("COMPOUND %v: %v", opNames(ops), err)
	}
	return &res
}

func (v *v4client) sendRaw(args rpc.Marshaler, res rpc.Unmarshaler) error {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	return v.c.Call(ctx, nfs4.Program, nfs4.Version, nfs4.ProcCompound, v.cred, args, res)
}

// only sends one operation alone (the session operations) and returns its
// result, failing the test unless it succeeded.
func (v *v4client) only(op nfs4.Argop) nfs4.OpRes {
	v.t.Helper()
	res := v.send(op)
	if res.Status != nfs4.OK || len(res.Results) != 1 {
		v.t.Fatalf("%v: %v", op.Op, resultsOf(res))
	}
	return res.Results[0].Res
}

// seqOp is the next SEQUENCE on slot 0.
func (v *v4client) seqOp(cache bool) nfs4.Argop {
	v.seq++
	return nfs4.Argop{Op: nfs4.OpSequence, Args: &nfs4.SequenceArgs{SessionID: v.sess, SequenceID: v.seq, CacheThis: cache}}
}

// do sends ops after SEQUENCE; the results in the reply exclude SEQUENCE's.
func (v *v4client) do(ops ...nfs4.Argop) *nfs4.CompoundRes {
	v.t.Helper()
	res := v.send(append([]nfs4.Argop{v.seqOp(false)}, ops...)...)
	if len(res.Results) == 0 || res.Results[0].Op != nfs4.OpSequence {
		v.t.Fatalf("%v: no SEQUENCE result: %v", opNames(ops), resultsOf(res))
	}
	if st := res.Results[0].Res.OpStatus(); st != nfs4.OK {
		v.t.Fatalf("%v: SEQUENCE %v", opNames(ops), st)
	}
	res.Results = res.Results[1:]
	return res
}

// must is do, failing the test unless every operation succeeded.
func (v *v4client) must(ops ...nfs4.Argop) *nfs4.CompoundRes {
	v.t.Helper()
	res := v.do(ops...)
	if res.Status != nfs4.OK || len(res.Results) != len(ops) {
		v.t.Fatalf("%v: %v", opNames(ops), resultsOf(res))
	}
	return res
}

// fails is do, failing the test unless the COMPOUND stopped at operation i
// with status want.
func (v *v4client) fails(want nfs4.Status, i int, ops ...nfs4.Argop) *nfs4.CompoundRes {
	v.t.Helper()
	res := v.do(ops...)
	if res.Status != want || len(res.Results) != i+1 || res.Results[i].Res.OpStatus() != want {
		v.t.Fatalf("%v: %v, want %v at %d", opNames(ops), resultsOf(res), want, i)
	}
	return res
}

func opNames(ops []nfs4.Argop) string {
	var n []string
	for _, o := range ops {
		n = append(n, o.Op.String())
	}
	return strings.Join(n, "+")
}

func resultsOf(res *nfs4.CompoundRes) string {
	got := []string{res.Status.String()}
	for _, r := range res.Results {
		got = append(got, fmt.Sprintf("%v:%v", r.Op, r.Res.OpStatus()))
	}
	return strings.Join(got, " ")
}

// Operation helpers.

func putFH(fh []byte) nfs4.Argop { return nfs4.Argop{Op: nfs4.OpPutFH, Args: &nfs4.PutFHArgs{FH: fh}} }
func putRoot() nfs4.Argop        { return nfs4.Argop{Op: nfs4.OpPutRootFH} }
func getFH() nfs4.Argop          { return nfs4.Argop{Op: nfs4.OpGetFH} }
func saveFH() nfs4.Argop         { return nfs4.Argop{Op: nfs4.OpSaveFH} }
func lookupOp(name string) nfs4.Argop {
	return nfs4.Argop{Op: nfs4.OpLookup, Args: &nfs4.LookupArgs{Name: []byte(name)}}
}
func getattrOp(attrs ...int) nfs4.Argop {
	return nfs4.Argop{Op: nfs4.OpGetattr, Args: &nfs4.GetattrArgs{AttrRequest: nfs4.NewBitmap(attrs...)}}
}
func removeOp(name string) nfs4.Argop {
	return nfs4.Argop{Op: nfs4.OpRemove, Args: &nfs4.RemoveArgs{Target: []byte(name)}}
}

// openOp opens name in the current directory, creating it (UNCHECKED4,
// mode 0644) when create is set.
func (v *v4client) openOp(name string, access uint32, create bool) nfs4.Argop {
	a := &nfs4.OpenArgs{ShareAccess: access | nfs4.ShareAccessWantNoDeleg, ShareDeny: nfs4.ShareDenyNone,
		Owner: nfs4.StateOwner{ClientID: v.clientID, Owner: v.owner},
		Claim: nfs4.OpenClaim{Type: nfs4.ClaimNull, File: []byte(name)}}
	if create {
		a.OpenType, a.CreateMode = nfs4.OpenCreate, nfs4.Unchecked
		a.CreateAttrs.Mask.Set(nfs4.AttrMode)
		a.CreateAttrs.Mode = 0o644
	}
	return nfs4.Argop{Op: nfs4.OpOpen, Args: a}
}

// rawReply keeps a reply's bytes undecoded.
type rawReply struct{ b []byte }

func (r *rawReply) Decode(d *xdr.Decoder) { r.b = append([]byte(nil), d.FixedOpaque(d.Remaining())...) }

// fhOf returns the filehandle of a GETFH result.
func fhOf(r nfs4.OpRes) nfs4.FH { return append(nfs4.FH(nil), r.(*nfs4.GetFHRes).FH...) }

// attrsOf returns the attributes of a GETATTR result.
func attrsOf(r nfs4.OpRes) nfs4.Fattr { return r.(*nfs4.GetattrRes).Attrs }
