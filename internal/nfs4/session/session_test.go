package session

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"hushfs/internal/nfs4"
	"hushfs/internal/rpc"
)

var testCred = rpc.SysCred(0, 0, nil, "session test")

func newTestSession(t *testing.T, opts Options) *Session {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	s, err := New(ctx, opts)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		s.Close(ctx)
	})
	return s
}

// getattr is PUTROOTFH + GETATTR, which the test server answers with the
// lease time.
func getattr() []nfs4.Argop {
	return []nfs4.Argop{{Op: nfs4.OpPutRootFH}, {Op: nfs4.OpGetattr, Args: &nfs4.GetattrArgs{AttrRequest: nfs4.NewBitmap(nfs4.AttrLeaseTime)}}}
}

// create is one CREATE: not idempotent, so its reply is cached.
func create() []nfs4.Argop {
	return []nfs4.Argop{{Op: nfs4.OpPutRootFH}, {Op: nfs4.OpCreate, Args: &nfs4.CreateArgs{Type: nfs4.TypeDir, Name: []byte("d")}}}
}

func mustCompound(t *testing.T, s *Session, ops []nfs4.Argop) *Result {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	var res Result
	if err := s.Compound(ctx, testCred, ops, &res); err != nil {
		t.Fatalf("COMPOUND: %v", err)
	}
	if res.Status != nfs4.OK || len(res.Ops) != len(ops) {
		t.Fatalf("COMPOUND: %v, %d results", res.Status, len(res.Ops))
	}
	return &res
}

// concurrently runs n COMPOUNDs at once and returns the slots they used.
func concurrently(t *testing.T, s *Session, n int) map[uint32]bool {
	t.Helper()
	var mu sync.Mutex
	used := map[uint32]bool{}
	var wg sync.WaitGroup
	for range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			var res Result
			if err := s.Compound(ctx, testCred, getattr(), &res); err != nil || res.Status != nfs4.OK {
				t.Errorf("COMPOUND: %v %v", err, res.Status)
				return
			}
			mu.Lock()
			used[res.Seq.SlotID] = true
			mu.Unlock()
		}()
	}
	wg.Wait()
	return used
}

func maxKey(m map[uint32]bool) uint32 {
	var hi uint32
	for k := range m {
		hi = max(hi, k)
	}
	return hi
}

// TestSlotLimits: the session uses the slots CREATE_SESSION granted, no
// more than the server's target when it lowers it, none of those it drops
// (sr_highest_slotid), and grows to a higher limit up to what it asked
// for; slots the server dropped and made again start at sequence id 1.
func TestSlotLimits(t *testing.T) {
	ts := startTestServer(t, func(ts *testServer) { ts.delay = 20 * time.Millisecond })
	opts := ts.options(t)
	opts.Slots = 16
	s := newTestSession(t, opts)
	if i := s.Info(); i.Fore.MaxRequests != 8 || i.Slots != 8 {
		t.Fatalf("granted %d slots, %d usable; the server grants 8", i.Fore.MaxRequests, i.Slots)
	}
	if used := concurrently(t, s, 32); maxKey(used) > 7 || len(used) < 2 {
		t.Fatalf("slots used %v of 8", used)
	}

	ts.setLimits(7, 1) // fewer wanted
	mustCompound(t, s, getattr())
	if n := s.Info().Slots; n != 2 {
		t.Fatalf("%d slots usable after a target of 1", n)
	}
	from := len(ts.seqs())
	if used := concurrently(t, s, 16); maxKey(used) > 1 {
		t.Fatalf("slots %v used under a target of 1", used)
	}
	for _, a := range ts.seqs()[from:] {
		if a.SlotID > 1 || a.HighestSlotID > 1 {
			t.Fatalf("SEQUENCE on slot %d (highest %d) under a target of 1", a.SlotID, a.HighestSlotID)
		}
	}

	ts.setLimits(3, 3) // slots 4 to 7 dropped
	mustCompound(t, s, getattr())
	if n := s.Info().Slots; n != 4 {
		t.Fatalf("%d slots usable after a highest slot of 3", n)
	}
	ts.setLimits(31, 31) // more than asked for: the session takes 16
	mustCompound(t, s, getattr())
	if n := s.Info().Slots; n != 16 {
		t.Fatalf("%d slots usable after a highest slot of 31, 16 asked for", n)
	}
	from = len(ts.seqs())
	used := concurrently(t, s, 48)
	if maxKey(used) > 15 || maxKey(used) < 8 {
		t.Fatalf("slots %v used with 16 usable", used)
	}
	first := map[uint32]uint32{}
	for _, a := range ts.seqs()[from:] {
		if _, ok := first[a.SlotID]; !ok {
			first[a.SlotID] = a.SequenceID
		}
	}
	for id := uint32(4); id < 16; id++ {
		if seq, ok := first[id]; ok && seq != 1 {
			t.Fatalf("slot %d made again started at sequence id %d", id, seq)
		}
	}
	if st := s.Stats(); st.NewSessions != 0 {
		t.Fatalf("%d new sessions", st.NewSessions)
	}
}

// TestSequenceErrors: DELAY is retried on the same slot with the same
// sequence id; SEQ_FALSE_RETRY moves on to the next id; BADSLOT stops the
// use of the slot and above; DEADSESSION replaces the session (the old one
// destroyed) under the same client ID.
func TestSequenceErrors(t *testing.T) {
	ts := startTestServer(t, func(ts *testServer) { ts.slots = 4 })
	s := newTestSession(t, ts.options(t))

	delays := 2
	ts.mu.Lock()
	ts.seqHook = func(a *nfs4.SequenceArgs) (nfs4.Status, bool) {
		if delays > 0 {
			delays--
			return nfs4.ErrDelay, true
		}
		return 0, false
	}
	ts.mu.Unlock()
	from := len(ts.seqs())
	before := s.Stats().Calls
	mustCompound(t, s, create())
	got := ts.seqs()[from:]
	if len(got) != 3 || got[0] != got[1] || got[1] != got[2] || s.Stats().Calls != before+3 {
		t.Fatalf("DELAY twice: SEQUENCEs %+v", got)
	}

	ts.mu.Lock()
	ts.seqHook = func(a *nfs4.SequenceArgs) (nfs4.Status, bool) {
		// Another request ran with this id: the server's slot is at it.
		ts.sessions[a.SessionID].slots[a.SlotID].seq = a.SequenceID
		ts.seqHook = nil
		return nfs4.ErrSeqFalseRetry, true
	}
	ts.mu.Unlock()
	from = len(ts.seqs())
	mustCompound(t, s, create())
	got = ts.seqs()[from:]
	if len(got) != 2 || got[1].SlotID != got[0].SlotID || got[1].SequenceID != got[0].SequenceID+1 {
		t.Fatalf("SEQ_FALSE_RETRY: SEQUENCEs %+v", got)
	}

	// The server drops slots 2 and 3 before the client hears of it: the
	// requests on them get BADSLOT and go again on the others.
	ts.mu.Lock()
	ts.delay = 20 * time.Millisecond
	ts.mu.Unlock()
	ts.setLimits(1, 1)
	from = len(ts.seqs())
	if used := concurrently(t, s, 8); maxKey(used) > 1 {
		t.Fatalf("slots %v used after BADSLOT from slot 2", used)
	}
	bad := 0
	for _, a := range ts.seqs()[from:] {
		if a.SlotID >= 2 {
			bad++
		}
	}
	if n := s.Info().Slots; n != 2 || bad == 0 {
		t.Fatalf("%d slots usable after %d BADSLOT from slot 2", n, bad)
	}

	ts.mu.Lock()
	ts.delay = 0
	ts.seqHook = func(a *nfs4.SequenceArgs) (nfs4.Status, bool) {
		ts.seqHook = nil
		return nfs4.ErrDeadSession, true
	}
	ts.mu.Unlock()
	old := s.Info()
	mustCompound(t, s, getattr())
	st, now := s.Stats(), s.Info()
	ts.mu.Lock()
	destroyed, oldKnown := ts.single[nfs4.OpDestroySession], ts.sessions[old.SessionID] != nil
	ts.mu.Unlock()
	if st.NewSessions != 1 || st.NewClientIDs != 0 || now.SessionID == old.SessionID || now.ClientID != old.ClientID ||
		destroyed != 1 || oldKnown {
		t.Fatalf("after DEADSESSION: %+v, session %x (was %x), DESTROY_SESSION %d, old one known %v",
			st, now.SessionID, old.SessionID, destroyed, oldKnown)
	}
}

// TestLostReply: a CREATE whose fate the client cannot know (the call
// timed out) leaves its slot in doubt. If the server ran it, the slot's
// next request, with the id after it, is simply new; if it never ran, the
// server answers SEQ_MISORDERED and the request goes again with the lost
// id. Neither is ever taken for a retry of the lost CREATE.
func TestLostReply(t *testing.T) {
	for _, ran := range []bool{true, false} {
		t.Run(fmt.Sprintf("ran=%v", ran), func(t *testing.T) {
			ts := startTestServer(t, func(ts *testServer) { ts.slots = 1 })
			opts := ts.options(t)
			opts.RPC.Timeout, opts.RPC.Retrans = 300*time.Millisecond, -1
			s := newTestSession(t, opts)
			mustCompound(t, s, getattr())
			ts.mu.Lock()
			ts.dropHook = func(a *nfs4.SequenceArgs) (bool, bool) {
				ts.dropHook = nil
				return ran, true
			}
			ts.mu.Unlock()
			from := len(ts.seqs())
			var res Result
			err := s.Compound(context.Background(), testCred, create(), &res)
			if !errors.Is(err, rpc.ErrTimeout) {
				t.Fatalf("CREATE with its reply lost: %v", err)
			}
			mustCompound(t, s, create())
			got := ts.seqs()[from:]
			lost := got[0].SequenceID
			want := []uint32{lost, lost + 1}
			if !ran {
				want = append(want, lost) // MISORDERED, then the lost id
			}
			var ids []uint32
			for _, a := range got {
				ids = append(ids, a.SequenceID)
			}
			ts.mu.Lock()
			creates := ts.execs[nfs4.OpCreate]
			ts.mu.Unlock()
			wantCreates := 1
			if ran {
				wantCreates = 2
			}
			if fmt.Sprint(ids) != fmt.Sprint(want) || creates != wantCreates || s.Stats().NewSessions != 0 {
				t.Fatalf("sequence ids %v, want %v; CREATE run %d times, want %d; %+v", ids, want, creates, wantCreates, s.Stats())
			}
		})
	}
}

// TestAbandoned: a caller that gives up gets its error at once, while the
// request keeps its slot until the server answers; the slot's next request
// then carries the next sequence id, in order.
func TestAbandoned(t *testing.T) {
	ts := startTestServer(t, func(ts *testServer) { ts.slots = 1 })
	s := newTestSession(t, ts.options(t))
	ts.mu.Lock()
	ts.delay = 300 * time.Millisecond
	ts.mu.Unlock()
	from := len(ts.seqs())
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	start := time.Now()
	var res Result
	if err := s.Compound(ctx, testCred, create(), &res); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("COMPOUND past its deadline: %v", err)
	}
	if d := time.Since(start); d > 250*time.Millisecond {
		t.Fatalf("a COMPOUND given up after 50 ms returned after %v", d)
	}
	ts.mu.Lock()
	ts.delay = 0
	ts.mu.Unlock()
	mustCompound(t, s, create())
	got := ts.seqs()[from:]
	if len(got) != 2 || got[1].SequenceID != got[0].SequenceID+1 {
		t.Fatalf("SEQUENCEs %+v", got)
	}
}

// TestRecoverClientID: a server that forgot the client (restarted) gets a
// new client ID and session; the reclaim hook's COMPOUND goes out before
// the ones waiting, and RECLAIM_COMPLETE after it.
func TestRecoverClientID(t *testing.T) {
	ts := startTestServer(t)
	var order []string
	var mu sync.Mutex
	opts := ts.options(t)
	var s *Session
	opts.OnRecover = func(ctx context.Context, r Recovery) error {
		var res Result
		err := s.Compound(ctx, testCred, getattr(), &res)
		mu.Lock()
		order = append(order, fmt.Sprintf("reclaim %v %v", r.Cause, err))
		mu.Unlock()
		return err
	}
	s = newTestSession(t, opts)
	ts.restart()
	mustCompound(t, s, create())
	ts.mu.Lock()
	rc, creates, gets := ts.execs[nfs4.OpReclaimComplete], ts.execs[nfs4.OpCreate], ts.execs[nfs4.OpGetattr]
	ts.mu.Unlock()
	if fmt.Sprint(order) != "[reclaim NFS4ERR_STALE_CLIENTID <nil>]" || rc != 2 || creates != 1 || gets != 3 {
		t.Fatalf("recovery: %v, RECLAIM_COMPLETE %d, CREATE %d, GETATTR %d", order, rc, creates, gets)
	}
	if st := s.Stats(); st.NewClientIDs != 1 || st.Reclaims != 1 {
		t.Fatalf("%+v", st)
	}
}

// TestCallbacks: CB_NULL; a CB_COMPOUND's CB_SEQUENCE checked against the
// back channel's slots (new request, retry answered with the same reply,
// misordered, bad slot, another session); its operations answered NOTSUPP
// without a handler and by the handler with one; CB_RECALL_SLOT lowering
// the fore channel's slots.
func TestCallbacks(t *testing.T) {
	ts := startTestServer(t)
	var handled []nfs4.CBOpnum
	var mu sync.Mutex
	opts := ts.options(t)
	opts.CBProgram = 0x40000123
	opts.Callback = func(ctx context.Context, seq *nfs4.CBSequenceArgs, op nfs4.CBArgop) nfs4.OpRes {
		mu.Lock()
		handled = append(handled, op.Op)
		mu.Unlock()
		if op.Op == nfs4.CBOpRecall {
			return &nfs4.StatusRes{}
		}
		return nil
	}
	s := newTestSession(t, opts)
	info := s.Info()
	if !info.BackChannel || info.Back.MaxRequests != backSlots {
		t.Fatalf("back channel %v with %d slots", info.BackChannel, info.Back.MaxRequests)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	ts.mu.Lock()
	back := ts.back
	ts.mu.Unlock()
	if err := back.Call(ctx, opts.CBProgram, nfs4.CBVersion, nfs4.CBProcNull, rpc.OpaqueAuth{}, nil, nil); err != nil {
		t.Fatalf("CB_NULL: %v", err)
	}
	seq := func(slot, id uint32, sess nfs4.SessionID) nfs4.CBArgop {
		return nfs4.CBArgop{Op: nfs4.CBOpSequence, Args: &nfs4.CBSequenceArgs{SessionID: sess, SlotID: slot, SequenceID: id}}
	}
	recall := nfs4.CBArgop{Op: nfs4.CBOpRecall, Args: &nfs4.CBRecallArgs{FH: nfs4.FH("fh")}}
	getattr := nfs4.CBArgop{Op: nfs4.CBOpGetattr, Args: &nfs4.CBGetattrArgs{FH: nfs4.FH("fh")}}
	call := func(ops ...nfs4.CBArgop) *nfs4.CBCompoundRes {
		t.Helper()
		res, err := ts.callback(ctx, opts.CBProgram, ops...)
		if err != nil {
			t.Fatalf("CB_COMPOUND: %v", err)
		}
		return res
	}
	statuses := func(res *nfs4.CBCompoundRes) string {
		var out []string
		for _, r := range res.Results {
			out = append(out, fmt.Sprintf("%v:%v", r.Op, r.Res.OpStatus()))
		}
		return fmt.Sprintf("%v %v", res.Status, out)
	}
	for _, c := range []struct {
		ops  []nfs4.CBArgop
		want string
	}{
		{[]nfs4.CBArgop{seq(0, 1, info.SessionID), recall, getattr},
			"NFS4ERR_NOTSUPP [CB_SEQUENCE:NFS4_OK CB_RECALL:NFS4_OK CB_GETATTR:NFS4ERR_NOTSUPP]"},
		// The same request again: the same reply, the handler not run.
		{[]nfs4.CBArgop{seq(0, 1, info.SessionID), recall, getattr},
			"NFS4ERR_NOTSUPP [CB_SEQUENCE:NFS4_OK CB_RECALL:NFS4_OK CB_GETATTR:NFS4ERR_NOTSUPP]"},
		{[]nfs4.CBArgop{seq(0, 3, info.SessionID), recall}, "NFS4ERR_SEQ_MISORDERED [CB_SEQUENCE:NFS4ERR_SEQ_MISORDERED]"},
		{[]nfs4.CBArgop{seq(backSlots, 1, info.SessionID), recall}, "NFS4ERR_BADSLOT [CB_SEQUENCE:NFS4ERR_BADSLOT]"},
		{[]nfs4.CBArgop{seq(1, 1, nfs4.SessionID{9}), recall}, "NFS4ERR_BADSESSION [CB_SEQUENCE:NFS4ERR_BADSESSION]"},
		{[]nfs4.CBArgop{recall}, "NFS4ERR_OP_NOT_IN_SESSION [CB_RECALL:NFS4ERR_OP_NOT_IN_SESSION]"},
		{[]nfs4.CBArgop{seq(0, 2, info.SessionID), seq(1, 1, info.SessionID)},
			"NFS4ERR_SEQUENCE_POS [CB_SEQUENCE:NFS4_OK CB_SEQUENCE:NFS4ERR_SEQUENCE_POS]"},
		{[]nfs4.CBArgop{seq(1, 1, info.SessionID), {Op: nfs4.CBOpRecallSlot, Args: &nfs4.CBRecallSlotArgs{TargetHighestSlotID: 2}}},
			"NFS4_OK [CB_SEQUENCE:NFS4_OK CB_RECALL_SLOT:NFS4_OK]"},
	} {
		if got := statuses(call(c.ops...)); got != c.want {
			t.Errorf("CB_COMPOUND %v: %s, want %s", c.ops, got, c.want)
		}
	}
	mu.Lock()
	if fmt.Sprint(handled) != "[CB_RECALL CB_GETATTR]" {
		t.Errorf("handler ran %v", handled)
	}
	mu.Unlock()
	if n := s.Info().Slots; n != 3 {
		t.Errorf("%d fore channel slots usable after CB_RECALL_SLOT to 2", n)
	}
	st := s.Stats()
	if st.CallbackCalls != 9 || st.Callbacks[nfs4.CBOpSequence] != 8 || st.Callbacks[nfs4.CBOpRecall] != 6 {
		t.Errorf("counted %d callback calls, operations %v", st.CallbackCalls, st.Callbacks)
	}
}

// TestNoBackChannel: a server that refuses the back channel leaves a
// session without one (it works, and says so); a session asked to have
// none does not ask for it.
func TestNoBackChannel(t *testing.T) {
	ts := startTestServer(t, func(ts *testServer) { ts.noBack = true })
	s := newTestSession(t, ts.options(t))
	ts.mu.Lock()
	flags := ts.csFlags
	ts.mu.Unlock()
	if s.Info().BackChannel || flags&nfs4.CreateSessionFlagConnBackChan == 0 {
		t.Fatalf("back channel %v, asked with flags %#x", s.Info().BackChannel, flags)
	}
	mustCompound(t, s, getattr())

	ts2 := startTestServer(t)
	opts := ts2.options(t)
	opts.NoBackChannel = true
	s2 := newTestSession(t, opts)
	ts2.mu.Lock()
	flags = ts2.csFlags
	ts2.mu.Unlock()
	if s2.Info().BackChannel || flags != 0 {
		t.Fatalf("back channel %v, asked with flags %#x", s2.Info().BackChannel, flags)
	}
	mustCompound(t, s2, getattr())
}

// TestStatusFlags: SEQUENCE status flags reach OnStatus, and a back
// channel the server reports down is bound again (BIND_CONN_TO_SESSION).
func TestStatusFlags(t *testing.T) {
	ts := startTestServer(t)
	got := make(chan uint32, 16)
	opts := ts.options(t)
	opts.OnStatus = func(f uint32) { got <- f }
	s := newTestSession(t, opts)
	ts.mu.Lock()
	ts.flags = nfs4.SeqStatusCBPathDown | nfs4.SeqStatusRecallableStateRevoked
	ts.mu.Unlock()
	mustCompound(t, s, getattr())
	select {
	case f := <-got:
		if f != nfs4.SeqStatusCBPathDown|nfs4.SeqStatusRecallableStateRevoked {
			t.Fatalf("OnStatus(%#x)", f)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("OnStatus not called")
	}
	deadline := time.Now().Add(5 * time.Second)
	for {
		ts.mu.Lock()
		binds := ts.single[nfs4.OpBindConnToSession]
		ts.mu.Unlock()
		if binds == 1 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d BIND_CONN_TO_SESSION after CB_PATH_DOWN", binds)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// TestRenewal: on the session's clock, an idle session sends a lone
// SEQUENCE once half the lease has passed since the server last took one,
// and none before.
func TestRenewal(t *testing.T) {
	ts := startTestServer(t, func(ts *testServer) { ts.lease = 60 })
	clock := &fakeClock{now: time.Unix(1e9, 0)}
	opts := ts.options(t)
	opts.Clock = clock
	s := newTestSession(t, opts)
	waitTimer := func() {
		t.Helper()
		deadline := time.Now().Add(5 * time.Second)
		for clock.waiting() == 0 {
			if time.Now().After(deadline) {
				t.Fatal("the renewer set no timer")
			}
			time.Sleep(time.Millisecond)
		}
	}
	lone := func() int {
		ts.mu.Lock()
		defer ts.mu.Unlock()
		return ts.lone
	}
	waitTimer()
	clock.Advance(29 * time.Second)
	time.Sleep(50 * time.Millisecond)
	if n := lone(); n != 0 {
		t.Fatalf("%d renewals 29 s into a 60 s lease", n)
	}
	waitTimer()
	clock.Advance(time.Second)
	deadline := time.Now().Add(5 * time.Second)
	for lone() != 1 {
		if time.Now().After(deadline) {
			t.Fatalf("%d renewals 30 s into a 60 s lease", lone())
		}
		time.Sleep(time.Millisecond)
	}
	// A COMPOUND renews the lease too: 20 s on, nothing is due.
	waitTimer()
	clock.Advance(20 * time.Second)
	mustCompound(t, s, getattr())
	waitTimer()
	clock.Advance(20 * time.Second)
	time.Sleep(50 * time.Millisecond)
	if n := lone(); n != 1 || s.Stats().Renewals != 1 {
		t.Fatalf("%d renewals (%d counted) with a COMPOUND 20 s before", n, s.Stats().Renewals)
	}
}

// TestCloseBounded: Close of a session whose server answers nothing
// returns by its deadline; a COMPOUND with too many operations fails
// without going out.
func TestCloseBounded(t *testing.T) {
	ts := startTestServer(t)
	opts := ts.options(t)
	opts.RPC.Hard = true
	opts.MaxOps = 4
	s := newTestSession(t, opts)
	var res Result
	before := s.Stats().Calls
	if err := s.Compound(context.Background(), testCred, make([]nfs4.Argop, 4), &res); !errors.Is(err, nfs4.ErrTooManyOps) ||
		s.Stats().Calls != before {
		t.Fatalf("COMPOUND of 5 operations in a session of 4: %v", err)
	}
	ts.mu.Lock()
	ts.mute = true
	ts.mu.Unlock()
	ctx, cancel := context.WithTimeout(context.Background(), 500*time.Millisecond)
	defer cancel()
	start := time.Now()
	err := s.Close(ctx)
	if d := time.Since(start); err == nil || d > 3*time.Second {
		t.Fatalf("Close with a mute server: %v after %v", err, d)
	}
}
