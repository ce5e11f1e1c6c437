package nfsv41

import (
	"context"
	"testing"
	"time"

	"hushfs/internal/nfs4"
	"hushfs/internal/proto"
)

// newTestRider is a read-ahead READDIR of dir (PUTFH, READDIR, GETATTR)
// for credential c, asking for want bytes.
func newTestRider(c *proto.Cred, dir string, want uint32) *rider {
	rd := &nfs4.ReaddirArgs{DirCount: want, MaxCount: want}
	ops := []nfs4.Argop{putfh(proto.FH(dir)), {Op: nfs4.OpReaddir, Args: rd}, getattr(fileAttrs)}
	return &rider{cred: *c, ckey: credKey(c), ops: ops, rd: rd, want: want}
}

// waitResult is what riderQueue.wait returned.
type waitResult struct {
	res     *reply
	carried bool
}

// startWait runs q.wait for r on its own goroutine, once r is queued.
func startWait(t *testing.T, q *riderQueue, r *rider, wanted <-chan struct{}) <-chan waitResult {
	t.Helper()
	out := make(chan waitResult, 1)
	go func() {
		res, _, carried := q.wait(context.Background(), r, wanted)
		out <- waitResult{res, carried}
	}()
	deadline := time.Now().Add(5 * time.Second)
	for q.pending() == 0 || q.doneChan(r) == nil {
		if time.Now().After(deadline) {
			t.Fatalf("the rider was never queued")
		}
		time.Sleep(time.Millisecond)
	}
	return out
}

func result(t *testing.T, ch <-chan waitResult) waitResult {
	t.Helper()
	select {
	case w := <-ch:
		return w
	case <-time.After(5 * time.Second):
		t.Fatalf("the rider's wait did not end")
		return waitResult{}
	}
}

func noResult(t *testing.T, ch <-chan waitResult, why string) {
	t.Helper()
	select {
	case <-ch:
		t.Fatalf("the rider's wait ended %s", why)
	case <-time.After(50 * time.Millisecond):
	}
}

// readdirReply is a COMPOUND's answer whose operations from at on are a
// rider's, answered OK.
func readdirReply(host int) *reply {
	ok := &nfs4.StatusRes{Status: nfs4.OK}
	r := &reply{}
	for i := 0; i < host; i++ {
		r.res.Ops = append(r.res.Ops, nfs4.Resop{Op: nfs4.OpPutFH, Res: ok})
	}
	r.res.Ops = append(r.res.Ops, nfs4.Resop{Op: nfs4.OpPutFH, Res: ok},
		nfs4.Resop{Op: nfs4.OpReaddir, Res: &nfs4.ReaddirRes{Status: nfs4.OK, EOF: true}},
		nfs4.Resop{Op: nfs4.OpGetattr, Res: &nfs4.GetattrRes{Status: nfs4.OK}})
	return r
}

// A rider is carried: the next COMPOUND of its credential takes it (not
// another credential's), with its page bounded, and its wait returns the
// answer of its own operations.
func TestRiderCarried(t *testing.T) {
	var clock fakeTimers
	q := newRiderQueue(clock.afterFunc)
	s := &Server{rq: q}
	alice, bob := &proto.Cred{UID: 1000}, &proto.Cred{UID: 1001}
	r := newTestRider(alice, "d", 1<<20)
	ch := startWait(t, q, r, nil)
	if got := q.take(credKey(bob), 60, 256<<10); len(got) != 0 {
		t.Fatalf("another credential's COMPOUND took the rider")
	}
	got := q.take(credKey(alice), 60, 256<<10)
	if len(got) != 1 || got[0] != r {
		t.Fatalf("took %d riders, want alice's", len(got))
	}
	if r.rd.MaxCount != riderPage || r.rd.DirCount != riderPage {
		t.Errorf("carried with maxcount %d, dircount %d; want both %d", r.rd.MaxCount, r.rd.DirCount, riderPage)
	}
	noResult(t, ch, "before its carrier's answer")
	s.ridersDone(got, readdirReply(2), 2)
	w := result(t, ch)
	if !w.carried || w.res == nil || w.res.res.Status != nfs4.OK || len(w.res.res.Ops) != 3 {
		t.Fatalf("carried %v, answer %+v; want its three results", w.carried, w.res)
	}
	if rd, ok := w.res.at(1).(*nfs4.ReaddirRes); !ok || !rd.EOF {
		t.Errorf("its READDIR's result is not its own: %+v", w.res.at(1))
	}
}

// Nothing carries it: once riderDelay passes it goes alone; and at once
// when someone waits for it (wanted), without waiting for the delay.
func TestRiderAloneAndPromoted(t *testing.T) {
	var clock fakeTimers
	q := newRiderQueue(clock.afterFunc)
	c := &proto.Cred{}
	ch := startWait(t, q, newTestRider(c, "d", 4096), nil)
	noResult(t, ch, "with neither a carrier nor the delay")
	clock.fire()
	if w := result(t, ch); w.carried {
		t.Fatalf("the delay passed: want it sent alone")
	}
	if q.pending() != 0 {
		t.Errorf("%d riders still queued after it went alone", q.pending())
	}

	wanted := make(chan struct{})
	ch = startWait(t, q, newTestRider(c, "e", 4096), wanted)
	noResult(t, ch, "before anyone waited for it")
	close(wanted)
	if w := result(t, ch); w.carried {
		t.Fatalf("waited for: want it sent alone at once")
	}
	if q.pending() != 0 {
		t.Errorf("%d riders still queued after the promoted one went", q.pending())
	}

	// At unmount every rider goes alone, and none is queued after.
	ch = startWait(t, q, newTestRider(c, "f", 4096), nil)
	q.shut()
	if w := result(t, ch); w.carried {
		t.Fatalf("unmount: want it sent alone")
	}
	if q.add(newTestRider(c, "g", 4096)) {
		t.Errorf("a rider was queued after shut")
	}
}

// A carrier whose own operation (or a CLOSE before the riders) failed did
// not run them: they wait for the next carrier, first; a rider whose
// READDIR failed has that answer; the riders after it go again; and one
// that hit the reply limit (REP_TOO_BIG_TO_CACHE) goes again.
func TestRiderHostFailure(t *testing.T) {
	var clock fakeTimers
	q := newRiderQueue(clock.afterFunc)
	s := &Server{rq: q}
	c := &proto.Cred{}
	r := newTestRider(c, "d", 4096)
	ch := startWait(t, q, r, nil)
	got := q.take(credKey(c), 60, 256<<10)
	// PUTFH, OPEN failing: the rider after them did not run.
	failed := &reply{res: resultOf(nfs4.ErrAccess, nfs4.Resop{Op: nfs4.OpPutFH, Res: &nfs4.StatusRes{Status: nfs4.OK}},
		nfs4.Resop{Op: nfs4.OpOpen, Res: &nfs4.OpenRes{Status: nfs4.ErrAccess}})}
	s.ridersDone(got, failed, 2)
	noResult(t, ch, "when its carrier did not run it")
	deadline := time.Now().Add(5 * time.Second)
	for q.pending() != 1 {
		if time.Now().After(deadline) {
			t.Fatalf("the rider was not queued again for the next carrier")
		}
		time.Sleep(time.Millisecond)
	}
	got = q.take(credKey(c), 60, 256<<10)
	if len(got) != 1 {
		t.Fatalf("the next carrier took %d riders, want 1", len(got))
	}
	s.ridersDone(got, readdirReply(0), 0)
	if w := result(t, ch); !w.carried || w.res.res.Status != nfs4.OK {
		t.Fatalf("the second carrier's answer was not returned: %+v", w)
	}

	// Three riders: the first's READDIR fails (its answer), the second
	// and third did not run (alone once their delay passes).
	var chs []<-chan waitResult
	for _, d := range []string{"a", "b", "c"} {
		chs = append(chs, startWait(t, q, newTestRider(c, d, 4096), nil))
		for q.pending() != len(chs) {
			time.Sleep(time.Millisecond)
		}
	}
	got = q.take(credKey(c), 60, 256<<10)
	if len(got) != 3 {
		t.Fatalf("took %d riders, want 3", len(got))
	}
	ok := &nfs4.StatusRes{Status: nfs4.OK}
	s.ridersDone(got, &reply{res: resultOf(nfs4.ErrAccess, nfs4.Resop{Op: nfs4.OpPutFH, Res: ok},
		nfs4.Resop{Op: nfs4.OpReaddir, Res: &nfs4.ReaddirRes{Status: nfs4.ErrAccess}})}, 0)
	if w := result(t, chs[0]); !w.carried || w.res.res.Status != nfs4.ErrAccess || w.res.status(1) != nfs4.ErrAccess {
		t.Fatalf("the failed READDIR's answer: %+v, want ACCESS", w)
	}
	noResult(t, chs[1], "for a rider that did not run")
	clock.fire()
	for _, ch := range chs[1:] {
		if w := result(t, ch); w.carried {
			t.Errorf("a rider that did not run came back carried")
		}
	}

	// The reply limit: not carried, goes again.
	r = newTestRider(c, "big", 4096)
	ch = startWait(t, q, r, nil)
	got = q.take(credKey(c), 60, 256<<10)
	tooBig := readdirReply(0)
	tooBig.res.Ops = tooBig.res.Ops[:2]
	tooBig.res.Ops[1].Res = &nfs4.ReaddirRes{Status: nfs4.ErrRepTooBigToCache}
	tooBig.res.Status = nfs4.ErrRepTooBigToCache
	s.ridersDone(got, tooBig, 0)
	noResult(t, ch, "with REP_TOO_BIG_TO_CACHE as its answer")
	clock.fire()
	if w := result(t, ch); w.carried {
		t.Errorf("REP_TOO_BIG_TO_CACHE was returned as the rider's answer")
	}
}

// What one COMPOUND carries is bounded: maxRidersPerCompound riders, the
// operations the session has room for, and the reply the server will keep:
// each page within what is left, none below riderMinPage; a small listing
// keeps its own smaller page.
func TestRiderBounds(t *testing.T) {
	var clock fakeTimers
	q := newRiderQueue(clock.afterFunc)
	c := &proto.Cred{}
	for i := 0; i < maxRidersPerCompound+2; i++ {
		if r := newTestRider(c, string(rune('a'+i)), 1<<20); !q.add(r) {
			t.Fatal("add")
		}
	}
	if got := q.take(credKey(c), 60, riderRoom+riderMinPage-1); len(got) != 0 {
		t.Fatalf("a reply budget under one minimal page took %d riders", len(got))
	}
	if got := q.take(credKey(c), 2*3-1, 1<<20); len(got) != 1 {
		t.Fatalf("room for 5 operations took %d riders of 3, want 1", len(got))
	}
	// 100 KiB of reply: one full page, then what is left.
	got := q.take(credKey(c), 60, 100<<10)
	if len(got) != 2 || got[0].rd.MaxCount != riderPage || got[1].rd.MaxCount != 100<<10-riderPage-2*riderRoom {
		t.Fatalf("100 KiB: took %d riders, want 2: a full page and what is left", len(got))
	}
	for i := 0; i < 2; i++ {
		q.add(newTestRider(c, "more", 1<<20))
	}
	if got := q.take(credKey(c), 60, 1<<30); len(got) != maxRidersPerCompound {
		t.Fatalf("a roomy COMPOUND took %d riders, want %d", len(got), maxRidersPerCompound)
	}
	if q.pending() != 1 {
		t.Fatalf("%d riders left, want 1", q.pending())
	}
	q.take(credKey(c), 60, 1<<30)
	small := newTestRider(c, "small", 4096)
	q.add(small)
	q.take(credKey(c), 60, 1<<30)
	if small.rd.MaxCount != 4096 {
		t.Errorf("a rider asking for 4096 bytes was given %d", small.rd.MaxCount)
	}
}

// A COMPOUND of its credential on its way with room for it (its caller
// sends the next after the answer) holds a rider past riderDelay, by
// riderDelay at a time up to riderMaxWait; one of another credential
// does not. Before, it went alone at the first riderDelay.
func TestRiderWaitsForCarrierOnWay(t *testing.T) {
	var clock fakeTimers
	q := newRiderQueue(clock.afterFunc)
	alice, bob := &proto.Cred{UID: 1000}, &proto.Cred{UID: 1001}
	q.carrierSent(credKey(alice))
	ch := startWait(t, q, newTestRider(alice, "d", 4096), nil)
	clock.fire()
	noResult(t, ch, "with a carrier on its way")
	q.carrierDone(credKey(alice))
	waitArmed(t, &clock)
	clock.fire()
	if w := result(t, ch); w.carried {
		t.Fatalf("no carrier on its way: want it sent alone")
	}

	// Another credential's carrier does not hold it.
	q.carrierSent(credKey(bob))
	ch = startWait(t, q, newTestRider(alice, "e", 4096), nil)
	clock.fire()
	if w := result(t, ch); w.carried {
		t.Fatalf("another credential's carrier held it")
	}
	q.carrierDone(credKey(bob))

	// Carriers always on their way: alone after riderMaxWait.
	q.carrierSent(credKey(alice))
	defer q.carrierDone(credKey(alice))
	ch = startWait(t, q, newTestRider(alice, "f", 4096), nil)
	for waited := riderDelay; waited < riderMaxWait; waited += riderDelay {
		clock.fire()
		noResult(t, ch, "before riderMaxWait")
		waitArmed(t, &clock)
	}
	clock.fire()
	if w := result(t, ch); w.carried {
		t.Fatalf("past riderMaxWait: want it sent alone")
	}
}

// waitArmed waits until a timer is armed.
func waitArmed(t *testing.T, clock *fakeTimers) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for clock.count() == 0 {
		if time.Now().After(deadline) {
			t.Fatalf("no timer armed")
		}
		time.Sleep(time.Millisecond)
	}
}
