package session

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"hushfs/internal/nfs4"
	"hushfs/internal/rpc"
	"hushfs/internal/xdr"
)

// Result is the reply to a COMPOUND sent with Session.Compound. It may be
// reused; its results alias the reply, valid until the next use.
type Result struct {
	// Status is the COMPOUND's status: that of the last operation the
	// server ran (OK when it ran them all).
	Status nfs4.Status
	// Ops are the results of the operations after SEQUENCE, as far as the
	// server ran them.
	Ops []nfs4.Resop
	// Seq is SEQUENCE's result (status flags, slot limits).
	Seq nfs4.SequenceRes
	// Sent and Received are the sizes of the COMPOUND's arguments and of
	// its reply's results (the RPC header not included), and RTT the time
	// from the request's last sending to its reply, for statistics.
	Sent, Received int
	RTT            time.Duration

	raw nfs4.CompoundRes
}

// Bounds of the retries of one COMPOUND.
const (
	maxSeqRetries = 16 // SEQUENCE errors other than DELAY answered in a row
	delayMin      = 50 * time.Millisecond
	delayMax      = 2 * time.Second
)

// Compound sends ops after a SEQUENCE in the session, with credential cred,
// and returns their results in res. It takes a slot (waiting for one while
// all are busy), and retries what the session layer can retry: SEQUENCE's
// DELAY (same slot and sequence id), a lost connection (the same request
// on a new connection), BADSLOT, SEQ_MISORDERED, SEQ_FALSE_RETRY, and a
// lost session or client ID (recovered, then the COMPOUND is sent again in
// the new session). An operation's error is not an error of Compound: it is
// res.Status, with the results up to it.
//
// The server is asked to cache the reply for a retry unless every
// operation is one that can be run twice to the same effect (LOOKUP,
// GETATTR, READ, ...), whose replies (READ's) may be too big to cache.
//
// When ctx ends first Compound returns its error at once; the request's
// slot stays taken until the server answers it (or the connection to it
// fails), so that the slot's next request is never taken for a retry of
// this one.
func (s *Session) Compound(ctx context.Context, cred rpc.OpaqueAuth, ops []nfs4.Argop, res *Result) error {
	return s.compound(ctx, cred, ops, res)
}

type stateKey struct{}

// withState marks ctx for COMPOUNDs of session st alone: those of session
// setup and of Options.OnRecover, which go out while other COMPOUNDs wait
// for the recovery to end, and fail with ErrSessionLost instead of
// starting another.
func withState(ctx context.Context, st *state) context.Context {
	return context.WithValue(ctx, stateKey{}, st)
}

func (s *Session) compound(ctx context.Context, cred rpc.OpaqueAuth, ops []nfs4.Argop, res *Result) error {
	pinned, _ := ctx.Value(stateKey{}).(*state)
	cacheThis := !idempotent(ops)
	var (
		st    *state
		tk    ticket
		held  bool // tk is a slot kept for sending again
		delay time.Duration
		tries int
	)
	defer func() {
		if held {
			st.slots.release(tk)
		}
	}()
	for {
		if !held {
			var err error
			if st, err = s.ready(ctx, pinned); err != nil {
				return err
			}
			if uint32(len(ops)+1) > st.fore.MaxOperations {
				return fmt.Errorf("session: COMPOUND of %d operations and SEQUENCE: the session takes %d: %w",
					len(ops), st.fore.MaxOperations, nfs4.ErrTooManyOps)
			}
			if tk, err = st.slots.acquire(ctx); err != nil {
				if errors.Is(err, errTableGone) {
					continue
				}
				return err
			}
			held = true
		}
		args := compoundArgs{seq: nfs4.SequenceArgs{SessionID: st.id, SequenceID: tk.seqid, SlotID: tk.id,
			HighestSlotID: tk.highest, CacheThis: cacheThis}, ops: ops}
		if err := ctx.Err(); err != nil {
			return err // not sent: the deferred release frees the slot
		}
		rd := &replyDecoder{res: res}
		sent := s.clock.Now()
		s.stats.calls.Add(1)
		s.stats.op(nfs4.OpSequence)
		for i := range ops {
			s.stats.op(ops[i].Op)
		}
		err, abandoned := s.exchange(ctx, cred, &args, rd, func(err error) { s.settle(st, tk, sent, rd, err) })
		if abandoned {
			held = false // the request's goroutine frees the slot
			return err
		}
		if err != nil && !rd.hasSeq {
			held = false
			st.slots.unknown(tk)
			return fmt.Errorf("session: COMPOUND: %w", err)
		}
		if !rd.hasSeq {
			// Failed before SEQUENCE ran (MINOR_VERS_MISMATCH, a
			// request the server could not decode, ...): the slot
			// was not used.
			return fmt.Errorf("session: COMPOUND failed before SEQUENCE: %w", rd.status)
		}
		sq := &rd.seq
		if sq.Status == nfs4.OK {
			held = false
			if sq.SessionID != st.id || sq.SlotID != tk.id || sq.SequenceID != tk.seqid {
				st.slots.unknown(tk)
				return fmt.Errorf("session: SEQUENCE answered session %x slot %d sequence %d for session %x slot %d sequence %d",
					sq.SessionID, sq.SlotID, sq.SequenceID, st.id, tk.id, tk.seqid)
			}
			s.accepted(st, tk, sent, sq)
			if err != nil { // the SEQUENCE decoded, a later result did not
				return fmt.Errorf("session: COMPOUND: %w", err)
			}
			res.Status = res.raw.Status
			res.Ops = res.raw.Results[1:]
			res.Seq = *sq
			res.Sent, res.Received, res.RTT = args.size, rd.size, s.clock.Now().Sub(sent)
			return nil
		}
		if sq.Status != nfs4.ErrDelay {
			if tries++; tries > maxSeqRetries {
				return fmt.Errorf("session: SEQUENCE: %w (%d times in a row)", sq.Status, tries)
			}
		}
		switch sq.Status {
		case nfs4.ErrDelay:
			// The server is busy, or still running this slot's previous
			// request: the same request again later, same slot and id.
			delay = min(max(2*delay, delayMin), delayMax)
			t := time.NewTimer(delay)
			select {
			case <-t.C:
			case <-ctx.Done():
				t.Stop()
				return ctx.Err()
			}
			st.slots.renew(&tk)
		case nfs4.ErrSeqFalseRetry:
			// The server ran another request with this sequence id:
			// ours is the next one.
			tk = st.slots.retried(tk, tk.seqid)
		case nfs4.ErrRetryUncachedRep:
			tk = st.slots.retried(tk, tk.seqid)
			if cacheThis {
				// It ran the request and kept no reply: running it
				// again could do it twice.
				held = false
				st.slots.release(tk)
				return fmt.Errorf("session: the server ran the COMPOUND and kept no reply to send again: %w", sq.Status)
			}
		case nfs4.ErrSeqMisordered:
			var ok bool
			if tk, ok = st.slots.misordered(tk); !ok {
				held = false
				st.slots.release(tk)
				s.logf("nfs4 session: slot %d out of step with the server: replacing the session", tk.id)
				if err := s.lose(ctx, st, nfs4.ErrSeqMisordered, pinned); err != nil {
					return err
				}
			}
		case nfs4.ErrBadSlot, nfs4.ErrBadHighSlot:
			held = false
			if tk.id == 0 {
				st.slots.release(tk)
				if err := s.lose(ctx, st, sq.Status, pinned); err != nil {
					return err
				}
				continue
			}
			st.slots.badSlot(tk)
		case nfs4.ErrConnNotBoundToSession:
			if err := s.bind(ctx, st); err != nil {
				return err
			}
		case nfs4.ErrBadSession, nfs4.ErrDeadSession, nfs4.ErrStaleClientID, nfs4.ErrExpired:
			held = false
			st.slots.release(tk)
			if err := s.lose(ctx, st, sq.Status, pinned); err != nil {
				return err
			}
		default:
			return fmt.Errorf("session: SEQUENCE: %w", sq.Status)
		}
	}
}

// ready returns the session to send in: pinned (setup and reclaim), or the
// current one once no recovery runs.
func (s *Session) ready(ctx context.Context, pinned *state) (*state, error) {
	if pinned != nil {
		if pinned.lost.Load() {
			return nil, ErrSessionLost
		}
		return pinned, nil
	}
	for {
		s.mu.Lock()
		closed, st, rec := s.closed, s.cur, s.recovering
		s.mu.Unlock()
		if closed {
			return nil, ErrClosed
		}
		if rec == nil {
			if !st.lost.Load() {
				return st, nil
			}
			// A recovery failed: try again.
			if err := s.lose(ctx, st, st.cause(), nil); err != nil {
				return nil, err
			}
			continue
		}
		select {
		case <-rec.done:
			if rec.err != nil {
				return nil, rec.err
			}
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
}

// accepted records a SEQUENCE the server took: the slot's new sequence id
// and limits, the lease renewed (from when the request was sent), status
// flags.
func (s *Session) accepted(st *state, tk ticket, sent time.Time, sq *nfs4.SequenceRes) {
	st.slots.complete(tk, sq.SequenceID, sq.HighestSlotID, sq.TargetHighestSlotID)
	s.mu.Lock()
	if sent.After(s.lastRenew) {
		s.lastRenew = sent
	}
	if s.opts.OnStatus != nil {
		s.unsettled |= sq.StatusFlags // with the renewal: see Info.Unsettled
	}
	s.mu.Unlock()
	if sq.StatusFlags != 0 {
		s.statusFlags(st, sq.StatusFlags)
	}
}

// settle processes the reply to a request its caller gave up on, and frees
// the slot.
func (s *Session) settle(st *state, tk ticket, sent time.Time, rd *replyDecoder, err error) {
	switch {
	case !rd.hasSeq && err != nil:
		st.slots.unknown(tk)
	case !rd.hasSeq:
		st.slots.release(tk)
	case rd.seq.Status == nfs4.OK && rd.seq.SlotID == tk.id && rd.seq.SequenceID == tk.seqid:
		s.accepted(st, tk, sent, &rd.seq)
	case rd.seq.Status == nfs4.ErrSeqFalseRetry || rd.seq.Status == nfs4.ErrRetryUncachedRep:
		st.slots.retried(tk, tk.seqid)
		st.slots.release(tk)
	default:
		st.slots.release(tk)
	}
}

// exchange sends one COMPOUND and decodes its reply through rd. A caller
// whose ctx can end gets control back when it does (abandoned true): the
// call then finishes on its own goroutine, which hands its outcome to
// onAbandon. The request is encoded before exchange returns, so the
// caller's operations may be reused.
func (s *Session) exchange(ctx context.Context, cred rpc.OpaqueAuth, args *compoundArgs, rd *replyDecoder, onAbandon func(error)) (err error, abandoned bool) {
	call := func() error {
		return s.rpc.Call(s.life, nfs4.Program, nfs4.Version, nfs4.ProcCompound, cred, args, rd)
	}
	if ctx.Done() == nil {
		return call(), false
	}
	args.encoded = make(chan struct{})
	done := make(chan error, 1)
	go func() {
		err := call()
		rd.mu.Lock()
		if rd.abandoned {
			rd.mu.Unlock()
			onAbandon(err)
			return
		}
		rd.finished = true
		rd.mu.Unlock()
		done <- err
	}()
	select {
	case <-args.encoded:
	case err := <-done:
		return err, false
	}
	select {
	case err := <-done:
		return err, false
	case <-ctx.Done():
	}
	rd.mu.Lock()
	if rd.finished {
		rd.mu.Unlock()
		return <-done, false
	}
	rd.abandoned = true
	rd.mu.Unlock()
	return ctx.Err(), true
}

// compoundArgs encodes SEQUENCE and the caller's operations.
type compoundArgs struct {
	seq     nfs4.SequenceArgs
	ops     []nfs4.Argop
	encoded chan struct{} // closed once encoded, if set
	size    int           // bytes Append added
}

func (a *compoundArgs) Append(b []byte) []byte {
	start := len(b)
	b = nfs4.AppendCompoundArgsHead(b, nil, nfs4.MinorVersion, 1+len(a.ops))
	b = nfs4.AppendArgop(b, nfs4.OpSequence, &a.seq)
	for i := range a.ops {
		b = nfs4.AppendArgop(b, a.ops[i].Op, a.ops[i].Args)
	}
	a.size = len(b) - start
	if a.encoded != nil {
		close(a.encoded)
	}
	return b
}

// replyDecoder decodes a COMPOUND reply into the caller's Result, or, once
// the caller gave up on it, into a value of its own; either way it keeps
// SEQUENCE's result for the slot table.
type replyDecoder struct {
	res *Result

	mu        sync.Mutex
	abandoned bool // the caller returned: decode elsewhere
	finished  bool // the call returned to a caller still waiting
	hasSeq    bool
	seq       nfs4.SequenceRes
	status    nfs4.Status
	size      int // bytes of the results
}

func (r *replyDecoder) Decode(d *xdr.Decoder) {
	r.mu.Lock()
	defer r.mu.Unlock()
	raw := &r.res.raw
	if r.abandoned {
		raw = new(nfs4.CompoundRes)
	}
	r.size = d.Remaining()
	raw.Decode(d)
	r.status = raw.Status
	if len(raw.Results) > 0 && raw.Results[0].Op == nfs4.OpSequence {
		r.seq = *raw.Results[0].Res.(*nfs4.SequenceRes)
		r.hasSeq = true
	}
}

// idempotent reports whether running ops twice has the effect of running
// them once, so that their reply need not be cached for a retry.
// Idempotent reports whether a COMPOUND of ops may run twice to the same
// effect: its reply is then not cached for a retry.
func Idempotent(ops []nfs4.Argop) bool { return idempotent(ops) }

func idempotent(ops []nfs4.Argop) bool {
	for i := range ops {
		switch ops[i].Op {
		case nfs4.OpAccess, nfs4.OpGetattr, nfs4.OpGetFH, nfs4.OpLookup, nfs4.OpLookupP, nfs4.OpNverify,
			nfs4.OpPutFH, nfs4.OpPutPubFH, nfs4.OpPutRootFH, nfs4.OpRead, nfs4.OpReaddir, nfs4.OpReadlink,
			nfs4.OpRestoreFH, nfs4.OpSaveFH, nfs4.OpSecinfo, nfs4.OpSecinfoNoName, nfs4.OpVerify,
			nfs4.OpTestStateid,
			// Asked again by a client that holds it, the server may answer
			// with the same delegation (hushfs serve does): a READDIR with
			// it must not need a reply cache its listing cannot fit.
			nfs4.OpGetDirDelegation:
		default:
			return false
		}
	}
	return true
}
