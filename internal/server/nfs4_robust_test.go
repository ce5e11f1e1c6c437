package server

import (
	"math/rand/v2"
	"os"
	"path/filepath"
	"testing"

	"hushfs/internal/nfs4"
)

// Every 4.1 operation, with zero-valued arguments, after every kind of
// current (and saved) filehandle, in random sequences: the server answers
// each COMPOUND (any status) and stays up. Fixed seed: the same 3,000
// COMPOUNDs every run.
func TestV4AnySequenceAnswered(t *testing.T) {
	e := startEnvTuned(t, false, func(c *Config) { c.Delegations = true })
	os.WriteFile(filepath.Join(e.root, "f"), []byte("data"), 0o644)
	os.Mkdir(filepath.Join(e.root, "d"), 0o755)
	os.Symlink("f", filepath.Join(e.root, "l"))
	v := e.v4(0, 0)
	res := v.must(putFH(e.srv.RootHandle()), lookupOp("f"), getFH())
	file := fhOf(res.Results[2].Res)
	res = v.must(putRoot(), getFH())
	pseudo := fhOf(res.Results[1].Res)
	res = v.must(putFH(e.srv.RootHandle()), lookupOp("l"), getFH())
	link := fhOf(res.Results[2].Res)
	starts := [][]nfs4.Argop{nil, {putRoot()}, {putFH(pseudo)}, {putFH(e.srv.RootHandle())}, {putFH(file)},
		{putFH(link)}, {putFH(file), saveFH(), putFH(e.srv.RootHandle())}, {putFH([]byte("not a handle"))}}
	var ops []nfs4.Opnum
	for op := nfs4.OpAccess; op <= nfs4.OpReclaimComplete; op++ {
		switch op {
		case nfs4.OpSequence, nfs4.OpExchangeID, nfs4.OpCreateSession, nfs4.OpDestroySession,
			nfs4.OpDestroyClientID, nfs4.OpBindConnToSession, nfs4.OpOpenConfirm, nfs4.OpRenew,
			nfs4.OpSetClientID, nfs4.OpSetClientIDConfirm, nfs4.OpReleaseLockOwner:
			continue // the session's own, or of 4.0 (their results do not decode here)
		}
		ops = append(ops, op)
	}
	rng := rand.New(rand.NewPCG(19, 41))
	for range 3000 {
		seq := append([]nfs4.Argop(nil), starts[rng.IntN(len(starts))]...)
		for range 1 + rng.IntN(4) {
			op := ops[rng.IntN(len(ops))]
			args := nfs4.NewArgs(op)
			switch a := args.(type) {
			case *nfs4.WantDelegationArgs:
				a.Claim.Type = nfs4.ClaimFH
			case *nfs4.LookupArgs:
				a.Name = []byte([]string{"f", "d", "l", "..", "x"}[rng.IntN(5)])
			case *nfs4.OpenArgs:
				a.ShareAccess = uint32(rng.IntN(4))
				a.Owner.Owner = []byte("o")
				a.Claim = nfs4.OpenClaim{Type: nfs4.ClaimType(rng.IntN(7)), File: []byte("f")}
				if a.Claim.Type == nfs4.ClaimDelegateCur || a.Claim.Type == nfs4.ClaimDelegatePrev {
					a.Claim.File = []byte("f")
				}
			}
			seq = append(seq, nfs4.Argop{Op: op, Args: args})
		}
		v.do(seq...)
	}
	v.must(putRoot(), getFH()) // still serving
}
