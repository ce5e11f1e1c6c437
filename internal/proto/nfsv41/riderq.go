package nfsv41

import (
	"context"
	"slices"
	"sync"
	"time"

	"hushfs/internal/nfs4"
	"hushfs/internal/nfs4/session"
	"hushfs/internal/proto"
)

// Listings read ahead ride in COMPOUNDs sent anyway. When the core sees a
// tree walk it lists the directories the walk will reach next before the
// walk gets there (client/walk.go), marking those calls proto.WithAhead:
// nobody waits for them yet. Sent alone, each costs a COMPOUND; grep -r
// of 2,868 files in 169 directories sent 169 of them beside its 2,868
// OPENs. Instead such a READDIR (PUTFH, READDIR, GETATTR, and LOOKUPP,
// GETATTR for "..") waits here as a rider, and the next COMPOUND of the
// same credential carries it after its own operations and after the
// CLOSEs it carries (closeq.go):
//   - last, so that a rider's failure (a directory we may not read, one
//     removed meanwhile) stops nothing but the riders after it, which go
//     again; and a failing host operation or CLOSE leaves the riders to
//     the next carrier, as it does the CLOSEs. A rider's own statuses are
//     its answer, never the host's;
//   - with a reply bounded so that the whole COMPOUND's reply fits what
//     the server may keep of it for a retry (ca_maxresponsesize_cached,
//     when the host or a CLOSE makes the server cache the reply; an
//     OPEN's first READ counts) or send (ca_maxresponsesize): each
//     carried READDIR asks for at most riderPage bytes, and none is
//     carried below riderMinPage. A listing longer than its page goes on
//     with ordinary READDIRs from the page's last cookie;
//   - at most maxRidersPerCompound per COMPOUND, within ca_maxoperations.
//
// A rider goes alone (taking other riders of its credential with it, as
// any COMPOUND does) when riderDelay passes with nothing to carry it, at
// once when the core starts waiting for it (the walk got there: it must
// not wait for a carrier), and at unmount. A COMPOUND of its credential
// on its way that could have carried it (sent just before it was queued:
// grep's OPEN of the next file, slow with the riders it carries) gives it
// riderDelay more, up to riderMaxWait: its caller's next COMPOUND follows
// its reply. Without that, 1–2 riders a grep -r of busybox went alone.

const (
	// riderDelay is how long a rider waits for a carrier. A walk's opens
	// come one round trip apart (grep reads a file, then opens the next),
	// so on a LAN or a 10 ms link a few carriers pass in that time; longer
	// would only hold the read-ahead window (client/walk.go: 8 passes in
	// flight) for a walk that opens nothing (find, du), whose own listings
	// promote what they reach anyway.
	riderDelay = 50 * time.Millisecond
	// riderMaxWait bounds a rider's wait while carriers are on their way.
	riderMaxWait = 4 * riderDelay
	// maxRidersPerCompound bounds the riders one COMPOUND carries (up to
	// five operations each).
	maxRidersPerCompound = 4
	// riderPage is the most a carried READDIR's reply may take, and
	// riderMinPage the least worth carrying: about 250 and 30 entries with
	// the attributes the core asks for.
	riderPage    = 64 << 10
	riderMinPage = 8 << 10
	// riderRoom is a rider's results besides its READDIR's entries (PUTFH,
	// the READDIR's header, GETATTRs, LOOKUPP).
	riderRoom = 1 << 10
)

// rider is a read-ahead READDIR waiting for a COMPOUND to carry it.
type rider struct {
	cred proto.Cred
	ckey string // credKey(cred)
	ops  []nfs4.Argop
	rd   *nfs4.ReaddirArgs // ops' READDIR: a carrier sets its MaxCount
	want uint32            // the MaxCount the core asked for

	// Set by its carrier (under the queue's mu) before done is closed.
	done  chan struct{}
	res   *reply
	err   error
	again bool // it did not run, or hit a limit of the carrier's: send it again
}

// riderQueue holds the riders, oldest first.
type riderQueue struct {
	afterFunc func(time.Duration, func()) func() bool // the clock; returns stop
	delay     time.Duration
	shutCh    chan struct{} // closed at unmount: every rider goes alone

	mu     sync.Mutex
	queued []*rider // GUARDED_BY(mu)
	closed bool     // GUARDED_BY(mu)
	// carrying counts, by credential, the COMPOUNDs on their way that had
	// room for a rider.
	carrying map[string]int // GUARDED_BY(mu)
}

// carrierSent notes a COMPOUND of credential ck on its way with room for
// a rider; carrierDone its answer (or failure).
func (q *riderQueue) carrierSent(ck string) {
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.carrying == nil {
		q.carrying = map[string]int{}
	}
	q.carrying[ck]++
}

func (q *riderQueue) carrierDone(ck string) {
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.carrying[ck]--; q.carrying[ck] <= 0 {
		delete(q.carrying, ck)
	}
}

// carriersOnWay reports whether a COMPOUND of credential ck with room
// for a rider is on its way.
func (q *riderQueue) carriersOnWay(ck string) bool {
	q.mu.Lock()
	defer q.mu.Unlock()
	return q.carrying[ck] > 0
}

func newRiderQueue(afterFunc func(time.Duration, func()) func() bool) *riderQueue {
	if afterFunc == nil {
		afterFunc = func(d time.Duration, f func()) func() bool { return time.AfterFunc(d, f).Stop }
	}
	return &riderQueue{afterFunc: afterFunc, delay: riderDelay, shutCh: make(chan struct{})}
}

// add queues r (false once the mount is closing: send it now).
func (q *riderQueue) add(r *rider) bool {
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.closed {
		return false
	}
	r.done, r.res, r.err, r.again = make(chan struct{}), nil, nil, false
	q.queued = append(q.queued, r)
	return true
}

// requeue puts r back first, for the next carrier.
func (q *riderQueue) requeue(r *rider) bool {
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.closed {
		return false
	}
	r.done, r.res, r.err, r.again = make(chan struct{}), nil, nil, false
	q.queued = append([]*rider{r}, q.queued...)
	return true
}

// remove takes r out of the queue if no carrier took it.
func (q *riderQueue) remove(r *rider) bool {
	q.mu.Lock()
	defer q.mu.Unlock()
	i := slices.Index(q.queued, r)
	if i < 0 {
		return false
	}
	q.queued = slices.Delete(q.queued, i, i+1)
	return true
}

// doneChan is r's current done channel.
func (q *riderQueue) doneChan(r *rider) chan struct{} {
	q.mu.Lock()
	defer q.mu.Unlock()
	return r.done
}

// take takes riders of credential ck for a COMPOUND with ops operations
// to spare and budget bytes of reply to spare, setting each one's page.
func (q *riderQueue) take(ck string, ops int, budget int64) []*rider {
	q.mu.Lock()
	defer q.mu.Unlock()
	var out []*rider
	q.queued = slices.DeleteFunc(q.queued, func(r *rider) bool {
		if len(out) >= maxRidersPerCompound || r.ckey != ck || len(r.ops) > ops ||
			budget < riderRoom+riderMinPage {
			return false
		}
		page := uint32(min(int64(r.want), riderPage, budget-riderRoom))
		if page < riderMinPage && page < r.want {
			return false
		}
		r.rd.MaxCount = page
		r.rd.DirCount = min(r.rd.DirCount, page)
		ops -= len(r.ops)
		budget -= int64(page) + riderRoom
		out = append(out, r)
		return true
	})
	return out
}

// settle gives r its answer (res nil: send it again).
func (q *riderQueue) settle(r *rider, res *reply, err error) {
	q.mu.Lock()
	defer q.mu.Unlock()
	r.res, r.err, r.again = res, err, res == nil && err == nil
	close(r.done)
}

// shut sends every rider alone from now on (unmount).
func (q *riderQueue) shut() {
	q.mu.Lock()
	defer q.mu.Unlock()
	if !q.closed {
		q.closed = true
		close(q.shutCh)
	}
}

// pending reports how many riders wait.
func (q *riderQueue) pending() int {
	q.mu.Lock()
	defer q.mu.Unlock()
	return len(q.queued)
}

var _ proto.AheadCarrier = (*Server)(nil)

// CarriesAhead says read-ahead listings ride here (proto.AheadCarrier).
func (s *Server) CarriesAhead() bool { return s.rq != nil }

// compoundAhead sends a read-ahead READDIR COMPOUND (ops, whose READDIR
// is rd) as a rider, and returns its answer as compound would.
func (s *Server) compoundAhead(ctx context.Context, c *proto.Cred, name string, ops []nfs4.Argop, rd *nfs4.ReaddirArgs, wanted <-chan struct{}) (*reply, error) {
	r := &rider{cred: copyCred(c), ckey: credKey(c), ops: ops, rd: rd, want: rd.MaxCount}
	if res, err, carried := s.rq.wait(ctx, r, wanted); carried {
		return res, err
	}

	if err := ctx.Err(); err != nil {
		return nil, err
	}
	// Alone, it may carry others: its own page leaves them room.
	rd.MaxCount, rd.DirCount = r.want, r.want
	if fore := s.sess.Info().Fore; int64(fore.MaxResponseSize) > readFirstRoom+int64(maxRidersPerCompound)*(riderPage+riderRoom)+riderPage {
		rd.MaxCount = min(r.want, fore.MaxResponseSize-readFirstRoom-(maxRidersPerCompound-1)*(riderPage+riderRoom))
	}
	rd.DirCount = min(rd.DirCount, rd.MaxCount)
	return s.compound(ctx, c, name, ops)
}

// wait queues r and waits until a carrier answers it (carried), or until
// it must go alone (carried false): riderDelay passed, someone waits for
// it (wanted), the mount is closing or ctx ended. A carrier that did not
// get to run it gives it back: it waits for the next one.
func (q *riderQueue) wait(ctx context.Context, r *rider, wanted <-chan struct{}) (res *reply, err error, carried bool) {
	if !q.add(r) {
		return nil, nil, false
	}
	arm := func() (chan struct{}, func() bool) {
		expired := make(chan struct{})
		return expired, q.afterFunc(q.delay, func() { close(expired) })
	}
	expired, stop := arm()
	defer func() { stop() }()
	extra := q.delay // waited beyond the first delay, and the next
	for {
		done := q.doneChan(r)
		hurry := false
		select {
		case <-done:
		case <-wanted:
			hurry = true
		case <-expired:
			if extra < riderMaxWait && q.carriersOnWay(r.ckey) {
				// Its carrier's caller goes on after the answer.
				extra += q.delay
				expired, stop = arm()
				continue
			}
			hurry = true
		case <-q.shutCh:
			hurry = true
		case <-ctx.Done():
			hurry = true
		}
		if q.remove(r) {
			return nil, nil, false
		}
		<-done // a carrier took it: it settles it whatever happens
		if !r.again {
			return r.res, r.err, true
		}
		if hurry || !q.requeue(r) {
			return nil, nil, false
		}
	}
}

// takeRiders takes the riders a COMPOUND of c can carry after all (its
// operations and the CLOSEs around them): as many operations as the
// session allows beside them, and as much reply as the server will keep
// (cached: a non-idempotent operation or a CLOSE is among them) or send.
func (s *Server) takeRiders(c *proto.Cred, all []nfs4.Argop, cached bool) []*rider {
	if s.rq == nil || s.rq.pending() == 0 {
		return nil
	}
	ops, budget := s.riderRoomIn(all, cached)
	return s.rq.take(credKey(c), ops, budget)
}

// carrierRoom reports whether a COMPOUND of all (the reply cached or
// not) has room for a rider.
func (s *Server) carrierRoom(all []nfs4.Argop, cached bool) bool {
	ops, budget := s.riderRoomIn(all, cached)
	return ops >= 3 && budget >= riderRoom+riderMinPage
}

// riderRoomIn is the operations and reply bytes a COMPOUND of all (its
// reply cached or not) leaves to riders.
func (s *Server) riderRoomIn(all []nfs4.Argop, cached bool) (int, int64) {
	fore := s.sess.Info().Fore
	limit := int64(fore.MaxResponseSize)
	if cached {
		limit = min(limit, int64(fore.MaxResponseSizeCached))
	}
	budget := limit - readFirstRoom
	for i := range all {
		switch a := all[i].Args.(type) {
		case *nfs4.ReadArgs:
			budget -= int64(a.Count)
		case *nfs4.ReaddirArgs:
			budget -= int64(max(a.MaxCount, a.DirCount))
		}
	}
	return int(fore.MaxOperations) - 1 - len(all), budget
}

// ridersDone settles the riders whose operations begin at result at of r
// (nil: no answer).
func (s *Server) ridersDone(riders []*rider, r *reply, at int) {
	for _, rd := range riders {
		if r == nil {
			s.rq.settle(rd, nil, nil)
			continue
		}
		sub := riderReply(r, at, len(rd.ops))
		sub.setOps(rd.ops)
		s.rq.settle(rd, sub, nil)
		at += len(rd.ops)
	}
}

// riderReply is the answer of the n operations from result at of r, nil
// if they did not run or hit a limit of the COMPOUND's (they go again).
func riderReply(r *reply, at, n int) *reply {
	if at >= len(r.res.Ops) {
		return nil
	}
	end := min(at+n, len(r.res.Ops))
	out := &reply{res: session.Result{Status: nfs4.OK, Ops: r.res.Ops[at:end], Seq: r.res.Seq}}
	if st := out.res.Ops[end-at-1].Res.OpStatus(); st != nfs4.OK {
		out.res.Status = st
	}
	switch out.res.Status {
	case nfs4.ErrDelay, nfs4.ErrRepTooBig, nfs4.ErrRepTooBigToCache, nfs4.ErrTooManyOps, nfs4.ErrResource:
		return nil
	}
	return out
}

func (r *reply) setOps(ops []nfs4.Argop) {
	if r != nil {
		r.ops = ops
	}
}
