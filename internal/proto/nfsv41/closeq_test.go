package nfsv41

import (
	"sync"
	"testing"
	"time"

	"hushfs/internal/nfs4"
	"hushfs/internal/nfs4/session"
	"hushfs/internal/proto"
)

// fakeTimers is the queue's clock: timers run when the test fires them.
type fakeTimers struct {
	mu    sync.Mutex
	armed []*func()
}

func (f *fakeTimers) afterFunc(d time.Duration, fn func()) func() bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	p := &fn
	f.armed = append(f.armed, p)
	return func() bool {
		f.mu.Lock()
		defer f.mu.Unlock()
		stopped := *p != nil
		*p = nil
		return stopped
	}
}

func (f *fakeTimers) count() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	n := 0
	for _, p := range f.armed {
		if *p != nil {
			n++
		}
	}
	return n
}

func (f *fakeTimers) fire() {
	f.mu.Lock()
	armed := f.armed
	f.armed = nil
	f.mu.Unlock()
	for _, p := range armed {
		if fn := *p; fn != nil {
			fn()
		}
	}
}

func st(b byte) proto.StateID { return proto.StateID{Seq: 1, Other: [12]byte{b}} }

func fhs(q []*pendingClose) []string {
	var out []string
	for _, p := range q {
		out = append(out, string(p.fh))
	}
	return out
}

func equal(a, b []string) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

// CLOSEs ride oldest first, only in COMPOUNDs of their credential, and
// at most as many as asked; the rest wait.
func TestCloseQueueOrder(t *testing.T) {
	var clock fakeTimers
	q := newCloseQueue(clock.afterFunc, func() {})
	alice, bob := &proto.Cred{UID: 1000, GID: 1000}, &proto.Cred{UID: 1001, GID: 1001}
	q.add(alice, proto.FH("a"), st(1))
	q.add(bob, proto.FH("b"), st(2))
	q.add(alice, proto.FH("c"), st(3))
	q.add(alice, proto.FH("d"), st(4))
	if got := fhs(q.takeTrail(alice, 2)); !equal(got, []string{"a", "c"}) {
		t.Errorf("alice's first two: %q, want a, c", got)
	}
	if got := fhs(q.takeTrail(&proto.Cred{UID: 1000, GID: 5}, 8)); len(got) != 0 {
		t.Errorf("another credential of uid 1000 took %q", got)
	}
	if got := fhs(q.takeTrail(bob, 8)); !equal(got, []string{"b"}) {
		t.Errorf("bob's: %q, want b", got)
	}
	if q.pending() != 1 {
		t.Errorf("%d queued, want alice's d", q.pending())
	}
	if clock.count() != 1 {
		t.Errorf("%d timers armed, want one for the queue", clock.count())
	}
}

// An OPEN of the same file by the same owner takes the CLOSE back when it
// asks for at least the access the old open had; otherwise the CLOSE goes
// first. An OPEN waits for a CLOSE of its open on its way.
func TestCloseQueueReclaim(t *testing.T) {
	var clock fakeTimers
	q := newCloseQueue(clock.afterFunc, func() {})
	c := &proto.Cred{UID: 7}
	q.opened(st(1), proto.ShareRead)
	q.add(c, proto.FH("f"), st(1))
	if first, taken := q.reclaim(&proto.Cred{UID: 8}, proto.FH("f"), proto.ShareRead); first != nil || taken != nil {
		t.Errorf("another owner's OPEN touched the CLOSE")
	}
	if first, taken := q.reclaim(c, proto.FH("f"), proto.ShareBoth); first != nil || taken == nil || taken.st != st(1) {
		t.Errorf("a reader's open reopened for both: first %v, taken %v; want it taken back", first, taken)
	}
	if q.pending() != 0 {
		t.Errorf("%d still queued", q.pending())
	}

	q.opened(st(2), proto.ShareBoth)
	q.add(c, proto.FH("g"), st(2))
	first, taken := q.reclaim(c, proto.FH("g"), proto.ShareRead)
	if first == nil || taken != nil {
		t.Fatalf("a writer's open reopened for reading: first %v, taken %v; want its CLOSE first", first, taken)
	}
	// That CLOSE is on its way now: another OPEN of g waits for it.
	done := make(chan struct{})
	go func() {
		q.reclaim(c, proto.FH("g"), proto.ShareRead)
		close(done)
	}()
	select {
	case <-done:
		t.Fatalf("an OPEN went ahead of the CLOSE of its open on its way")
	case <-time.After(50 * time.Millisecond):
	}
	q.sent([]*pendingClose{first})
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		t.Fatalf("the OPEN still waits after the CLOSE was answered")
	}
}

// Two CLOSEs of one open on their way at once (a delegation's return
// closes an open kept past its last close while a CLOSE of the same file
// and owner still rides in another COMPOUND): a create or an OPEN of the
// file waits for both, and goes once both are answered, in either order.
// With one channel per open the second CLOSE's replaced the first's,
// which was never closed: the waiter waited for ever (the recall soak: a
// FUSE CREATE unanswered, its directory locked, the mount's notifier
// stuck behind it).
func TestCloseQueueTwoClosesOfOneOpen(t *testing.T) {
	for _, order := range []string{"first answered first", "second answered first"} {
		for _, waiter := range []string{"create", "open"} {
			t.Run(order+", "+waiter, func(t *testing.T) {
				var clock fakeTimers
				q := newCloseQueue(clock.afterFunc, func() {})
				c := &proto.Cred{UID: 7}
				q.add(c, proto.FH("f"), st(1))
				one := q.takeTrail(c, maxClosesPerCompound)
				done := make(chan struct{})
				go func() {
					if waiter == "create" {
						q.takeLead(c)
					} else {
						q.reclaim(c, proto.FH("f"), proto.ShareRead)
					}
					close(done)
				}()
				time.Sleep(20 * time.Millisecond) // the waiter waits for one
				q.add(c, proto.FH("f"), st(1))
				two := q.takeTrail(c, maxClosesPerCompound)
				if len(one) != 1 || len(two) != 1 {
					t.Fatalf("took %d and %d CLOSEs, want 1 and 1", len(one), len(two))
				}
				if order == "second answered first" {
					one, two = two, one
				}
				q.sent(one)
				select {
				case <-done:
					t.Fatalf("the %s went ahead of a CLOSE of its file on its way", waiter)
				case <-time.After(50 * time.Millisecond):
				}
				q.sent(two)
				select {
				case <-done:
				case <-time.After(5 * time.Second):
					t.Fatalf("the %s still waits after both CLOSEs were answered", waiter)
				}
			})
		}
	}
}

// Nothing to carry them: the timer flushes, a full queue flushes at once,
// and after shut (unmount) nothing is queued.
func TestCloseQueueFlush(t *testing.T) {
	var clock fakeTimers
	flushed := make(chan struct{}, 100)
	q := newCloseQueue(clock.afterFunc, func() { flushed <- struct{}{} })
	c := &proto.Cred{}
	q.add(c, proto.FH("a"), st(1))
	q.add(c, proto.FH("b"), st(2))
	if clock.count() != 1 {
		t.Fatalf("%d timers armed, want 1", clock.count())
	}
	clock.fire()
	if len(flushed) != 1 {
		t.Fatalf("the timer flushed %d times, want 1", len(flushed))
	}
	<-flushed
	if got := fhs(q.takeAny(16)); !equal(got, []string{"a", "b"}) {
		t.Errorf("the flush takes %q, want a, b", got)
	}
	q.add(c, proto.FH("c"), st(3))
	if clock.count() != 1 {
		t.Errorf("no timer armed for a CLOSE queued after a flush")
	}
	for i := 0; i < maxQueuedCloses; i++ {
		q.add(c, proto.FH{byte(i)}, st(byte(i)))
	}
	select {
	case <-flushed:
	case <-time.After(5 * time.Second):
		t.Fatalf("a full queue did not flush")
	}
	q.shut()
	if clock.count() != 0 {
		t.Errorf("a timer is still armed after shut")
	}
	if q.add(c, proto.FH("z"), st(9)) {
		t.Errorf("a CLOSE was queued after shut")
	}
}

// A COMPOUND whose own operation failed ran none of the CLOSEs after it:
// they are queued again, first; one whose CLOSEs ran settles them, a
// failed CLOSE stopping those after it.
func TestCloseQueueHostFailure(t *testing.T) {
	var clock fakeTimers
	s := &Server{logf: t.Logf}
	s.cq = newCloseQueue(clock.afterFunc, func() {})
	c := &proto.Cred{}
	s.cq.add(c, proto.FH("a"), st(1))
	s.cq.add(c, proto.FH("b"), st(2))
	s.cq.add(c, proto.FH("later"), st(3))
	trail := s.cq.takeTrail(c, 2)
	ok := &nfs4.StatusRes{Status: nfs4.OK}
	// PUTFH, LOOKUP (NOENT): the CLOSEs after did not run.
	r := &reply{res: resultOf(nfs4.ErrNoEnt, nfs4.Resop{Op: nfs4.OpPutFH, Res: ok},
		nfs4.Resop{Op: nfs4.OpLookup, Res: &nfs4.StatusRes{Status: nfs4.ErrNoEnt}})}
	s.closesDone(trail, r, 2)
	if got := fhs(s.cq.takeAny(16)); !equal(got, []string{"a", "b", "later"}) {
		t.Errorf("after the host's failure the queue holds %q, want a, b first, then later", got)
	}
	// The first CLOSE ran and failed: the second did not run.
	s.cq.add(c, proto.FH("a"), st(1))
	s.cq.add(c, proto.FH("b"), st(2))
	trail = s.cq.takeTrail(c, 2)
	r = &reply{res: resultOf(nfs4.ErrServerFault, nfs4.Resop{Op: nfs4.OpPutFH, Res: ok},
		nfs4.Resop{Op: nfs4.OpPutFH, Res: ok},
		nfs4.Resop{Op: nfs4.OpClose, Res: &nfs4.CloseRes{Status: nfs4.ErrServerFault}})}
	s.closesDone(trail, r, 1)
	if got := fhs(s.cq.takeAny(16)); !equal(got, []string{"b"}) {
		t.Errorf("after a's CLOSE failed the queue holds %q, want b", got)
	}
}

func resultOf(st nfs4.Status, ops ...nfs4.Resop) (r sessionResult) {
	r.Status, r.Ops = st, ops
	return r
}

type sessionResult = session.Result
