package session

import (
	"context"
	"errors"
	"sync"

	"hushfs/internal/nfs4"
	"hushfs/internal/rpc"
	"hushfs/internal/xdr"
)

// maxCachedCB bounds a callback reply kept for the server's retry; ours are
// a few hundred bytes.
const maxCachedCB = 8 << 10

// cbSlots is the back channel's slot table: the server's CB_SEQUENCE
// sequence ids per slot, and the last reply of each for a retry.
type cbSlots struct {
	mu    sync.Mutex
	slots []cbSlot
}

type cbSlot struct {
	seq   uint32
	busy  bool
	reply []byte // the encoded CB_COMPOUND4res of request seq
}

func (c *cbSlots) init(n int) { c.slots = make([]cbSlot, max(n, 1)) }

// begin checks a CB_SEQUENCE against its slot: a new request takes the
// slot (OK), a retry of the last one gets its reply again.
func (c *cbSlots) begin(a *nfs4.CBSequenceArgs) (replay []byte, st nfs4.Status) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if int(a.SlotID) >= len(c.slots) {
		return nil, nfs4.ErrBadSlot
	}
	sl := &c.slots[a.SlotID]
	switch {
	case a.SequenceID == sl.seq+1 && sl.busy:
		return nil, nfs4.ErrDelay // a retry of a request still running
	case a.SequenceID == sl.seq+1:
		sl.busy = true
		return nil, nfs4.OK
	case a.SequenceID == sl.seq && sl.reply != nil:
		return sl.reply, nfs4.OK
	case a.SequenceID == sl.seq && sl.seq != 0:
		return nil, nfs4.ErrRetryUncachedRep
	}
	return nil, nfs4.ErrSeqMisordered
}

// end records the reply to a request begin let through.
func (c *cbSlots) end(a *nfs4.CBSequenceArgs, reply []byte) {
	c.mu.Lock()
	defer c.mu.Unlock()
	sl := &c.slots[a.SlotID]
	sl.seq, sl.busy, sl.reply = a.SequenceID, false, nil
	if len(reply) <= maxCachedCB {
		sl.reply = reply
	}
}

// serveCallback serves the callback program: CB_NULL, and CB_COMPOUND
// checked against the back channel's slots (CB_SEQUENCE), its other
// operations run by Options.Callback.
func (s *Session) serveCallback(ctx context.Context, call *rpc.Call, reply []byte) ([]byte, error) {
	s.stats.cbCalls.Add(1)
	switch call.Proc {
	case nfs4.CBProcNull:
		return reply, nil
	case nfs4.CBProcCompound:
	default:
		return nil, rpc.ErrProcUnavail
	}
	var args nfs4.CBCompoundArgs
	var d xdr.Decoder
	d.Reset(call.Args)
	args.Decode(&d)
	var bad *nfs4.OpDecodeError
	if err := d.Err(); err != nil && !errors.As(err, &bad) {
		return nil, rpc.ErrGarbageArgs
	}
	return append(reply, s.runCallback(ctx, &args, bad)...), nil
}

// runCallback runs a CB_COMPOUND whose operations up to bad (if set)
// decoded, and returns its encoded result.
func (s *Session) runCallback(ctx context.Context, args *nfs4.CBCompoundArgs, bad *nfs4.OpDecodeError) []byte {
	res := nfs4.CBCompoundRes{Tag: args.Tag}
	add := func(op nfs4.CBOpnum, r nfs4.OpRes) bool {
		res.Results = append(res.Results, nfs4.CBResop{Op: op, Res: r})
		res.Status = r.OpStatus()
		return res.Status == nfs4.OK
	}
	for i := range args.Ops {
		s.stats.cbOp(args.Ops[i].Op)
	}
	if args.MinorVersion != nfs4.MinorVersion {
		res.Status = nfs4.ErrMinorVersMismatch
		return res.Append(nil)
	}
	if len(args.Ops) == 0 {
		if bad != nil {
			add(nfs4.CBOpnum(bad.ResOp()), &nfs4.StatusRes{Status: bad.Status()})
		}
		return res.Append(nil)
	}
	first := args.Ops[0]
	if first.Op != nfs4.CBOpSequence {
		st := nfs4.ErrOpNotInSession
		if first.Op == nfs4.CBOpIllegal {
			st = nfs4.ErrOpIllegal
		}
		add(first.Op, &nfs4.StatusRes{Status: st})
		return res.Append(nil)
	}
	seq := first.Args.(*nfs4.CBSequenceArgs)
	s.mu.Lock()
	cur := s.cur
	s.mu.Unlock()
	if cur == nil || seq.SessionID != cur.id {
		add(nfs4.CBOpSequence, &nfs4.CBSequenceRes{Status: nfs4.ErrBadSession})
		return res.Append(nil)
	}
	replay, st := cur.cb.begin(seq)
	if replay != nil {
		return replay
	}
	if st != nfs4.OK {
		add(nfs4.CBOpSequence, &nfs4.CBSequenceRes{Status: st})
		return res.Append(nil)
	}
	high := uint32(len(cur.cb.slots) - 1)
	ok := add(nfs4.CBOpSequence, &nfs4.CBSequenceRes{SessionID: cur.id, SequenceID: seq.SequenceID,
		SlotID: seq.SlotID, HighestSlotID: high, TargetHighestSlotID: high})
	for _, op := range args.Ops[1:] {
		if !ok {
			break
		}
		ok = add(op.Op, s.callbackOp(ctx, cur, seq, op))
	}
	if ok && bad != nil {
		add(nfs4.CBOpnum(bad.ResOp()), &nfs4.StatusRes{Status: bad.Status()})
	}
	out := res.Append(nil)
	cur.cb.end(seq, out)
	return out
}

// callbackOp runs one operation after CB_SEQUENCE.
func (s *Session) callbackOp(ctx context.Context, cur *state, seq *nfs4.CBSequenceArgs, op nfs4.CBArgop) nfs4.OpRes {
	switch op.Op {
	case nfs4.CBOpSequence:
		return &nfs4.StatusRes{Status: nfs4.ErrSequencePos}
	case nfs4.CBOpIllegal:
		return &nfs4.StatusRes{Status: nfs4.ErrOpIllegal}
	case nfs4.CBOpRecallSlot:
		// The server wants fewer fore channel slots used.
		cur.slots.setTarget(op.Args.(*nfs4.CBRecallSlotArgs).TargetHighestSlotID)
		return &nfs4.StatusRes{Status: nfs4.OK}
	}
	if s.opts.Callback != nil {
		if r := s.opts.Callback(ctx, seq, op); r != nil {
			return r
		}
	}
	return &nfs4.StatusRes{Status: nfs4.ErrNotSupp}
}
