package nfsv41

import (
	"slices"
	"sync"
	"time"

	"hushfs/internal/nfs4"
	"hushfs/internal/proto"
)

// Deferred CLOSEs. The core closes an open at its last release; sent at
// once, that CLOSE is a round trip of its own, so an open() costs two
// where NFSv3's close-to-open costs one (grep -r of 100 files: OPEN 100,
// READ 100, CLOSE 100). Instead CloseOpen queues it, and the next COMPOUND
// this mount sends for the same identity carries it after its own
// operations (PUTFH, CLOSE): a CLOSE that fails then cannot stop the
// operation its caller waits for, and a COMPOUND whose own operation fails
// leaves its CLOSEs to the next one.
//
// What must see the file closed gets it first:
//   - an OPEN of the same file by the same open owner (identity) takes the
//     open back instead: the server answers it with the same open, so no
//     CLOSE is sent at all. Only when the queued open had access the new
//     one lacks (a writer's open, reopened for reading) would the server
//     keep more than the core asks for; that CLOSE then goes in the OPEN's
//     COMPOUND, before the OPEN. An OPEN waits for a CLOSE of its file on
//     its way in another COMPOUND: sent after the OPEN, it would close the
//     open the OPEN just took;
//   - an OPEN by name (a create, which may find the file there) and a
//     REMOVE or RENAME (the file may be the name removed or replaced, and a
//     server may refuse to remove an open file) carry the identity's
//     queued CLOSEs before their own operations;
//   - a LOCK needs nothing: it is taken under an open the core holds, and
//     while the core holds an open of a file for an identity no CLOSE of
//     that file by that identity is queued (the OPEN took it back);
//     opens holding locks are never queued (their CLOSE may find
//     LOCKS_HELD), nor are any once the mount is closing.
//
// A queued CLOSE goes alone if no COMPOUND takes it within closeDelay, at
// unmount, and when more than maxQueuedCloses wait. Only COMPOUNDs of the
// same credential carry a CLOSE (a server may check that the open's
// principal closes it), and none whose reply may be large (READ, READDIR:
// a CLOSE makes the reply one the server must keep for a retry, within
// the session's ca_maxresponsesize_cached).

// closeDelay is how long a CLOSE waits for a COMPOUND to carry it. Long
// enough to span the gap between one file and the next of a tool going
// through files (grep, cat in a shell loop, a compiler reading headers:
// process start-up is milliseconds), short enough that the server does not
// keep opens we are done with for long: it costs it only memory (the
// core never asks to deny others) and delays another client's write
// delegation of the file by as much.
const closeDelay = 500 * time.Millisecond

// maxQueuedCloses bounds the queue; maxClosesPerCompound the CLOSEs one
// COMPOUND carries (two operations each, within the session's
// ca_maxoperations).
const (
	maxQueuedCloses      = 64
	maxClosesPerCompound = 16
)

// pendingClose is a CLOSE not yet sent.
type pendingClose struct {
	cred   proto.Cred
	ckey   string // cred's identity, credKey
	fh     proto.FH
	st     proto.StateID
	access uint32 // the share access the server holds for the open
	// done is closed when the CLOSE, taken to go in a COMPOUND, has gone
	// (or is queued again); made when it is taken. GUARDED_BY(closeQueue.mu)
	done chan struct{}
}

func (p *pendingClose) key() closeKey { return closeKey{fh: string(p.fh), uid: p.cred.UID} }

// closeKey names an open at the server: the open owner is the uid.
type closeKey struct {
	fh  string
	uid uint32
}

// closeQueue holds the deferred CLOSEs and the share access of the opens
// this mount holds.
type closeQueue struct {
	delay     time.Duration
	afterFunc func(time.Duration, func()) func() bool // the clock; returns stop
	flush     func()                                  // sends what is queued (on its own goroutine)

	mu     sync.Mutex
	queued []*pendingClose // GUARDED_BY(mu), oldest first
	// inflight are the CLOSEs on their way, by open. One open may have
	// more than one: a CLOSE queued while another of the same file and
	// owner is on its way (a delegation's return closing an open kept past
	// its last close). Each is waited for by its own done channel: with
	// one channel per open, the second's replaced the first's, which was
	// never closed, and an OPEN or create waiting for it waited for ever
	// (the recall soak: a FUSE CREATE unanswered, the directory locked).
	inflight map[closeKey][]*pendingClose // GUARDED_BY(mu)
	access   map[[12]byte]uint32          // GUARDED_BY(mu): by open stateid
	stop     func() bool                  // GUARDED_BY(mu): the armed timer's
	closed   bool                         // GUARDED_BY(mu): unmounting: nothing queued
}

func newCloseQueue(afterFunc func(time.Duration, func()) func() bool, flush func()) *closeQueue {
	if afterFunc == nil {
		afterFunc = func(d time.Duration, f func()) func() bool { return time.AfterFunc(d, f).Stop }
	}
	return &closeQueue{delay: closeDelay, afterFunc: afterFunc, flush: flush,
		inflight: map[closeKey][]*pendingClose{}, access: map[[12]byte]uint32{}}
}

func credKey(c *proto.Cred) string {
	b := make([]byte, 0, 8+4*len(c.Groups))
	for _, v := range append([]uint32{c.UID, c.GID}, c.Groups...) {
		b = append(b, byte(v>>24), byte(v>>16), byte(v>>8), byte(v))
	}
	return string(b)
}

// opened records the access an OPEN added to open st.
func (q *closeQueue) opened(st proto.StateID, access uint32) {
	q.mu.Lock()
	q.access[st.Other] |= access
	q.mu.Unlock()
}

// downgraded records open st's access after OPEN_DOWNGRADE.
func (q *closeQueue) downgraded(st proto.StateID, access uint32) {
	q.mu.Lock()
	q.access[st.Other] = access
	q.mu.Unlock()
}

// add queues a CLOSE; false if the mount is closing (send it now).
func (q *closeQueue) add(c *proto.Cred, fh proto.FH, st proto.StateID) bool {
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.closed {
		return false
	}
	p := &pendingClose{cred: copyCred(c), ckey: credKey(c), fh: slices.Clone(fh), st: st, access: q.access[st.Other]}
	q.queued = append(q.queued, p)
	if len(q.queued) > maxQueuedCloses {
		go q.flush()
	} else if q.stop == nil {
		q.stop = q.afterFunc(q.delay, func() {
			q.mu.Lock()
			q.stop = nil
			q.mu.Unlock()
			q.flush()
		})
	}
	return true
}

func copyCred(c *proto.Cred) proto.Cred {
	out := *c
	out.Groups = slices.Clone(c.Groups)
	return out
}

// reclaim is what an OPEN of fh by c's open owner does with a CLOSE of
// the same open: it waits for one on its way, takes a queued one back
// (taken: no CLOSE needed, unless the OPEN fails) when the new open asks
// for all the access the old one had, and otherwise returns it (first)
// to go before the OPEN.
func (q *closeQueue) reclaim(c *proto.Cred, fh proto.FH, access uint32) (first, taken *pendingClose) {
	k := closeKey{fh: string(fh), uid: c.UID}
	q.mu.Lock()
	defer q.mu.Unlock()
	for len(q.inflight[k]) > 0 {
		ch := q.inflight[k][0].done
		q.mu.Unlock()
		<-ch
		q.mu.Lock()
	}
	for i, p := range q.queued {
		if p.key() != k {
			continue
		}
		q.queued = slices.Delete(q.queued, i, i+1)
		if p.access&^access == 0 {
			return nil, p // taken back
		}
		q.departLocked(p)
		return p, nil
	}
	return nil, nil
}

// takeLead takes c's queued CLOSEs to go before a COMPOUND's operations
// (an OPEN by name, REMOVE, RENAME), after waiting for c's CLOSEs on their
// way in other COMPOUNDs (an OPEN by name may be of one of their files).
func (q *closeQueue) takeLead(c *proto.Cred) []*pendingClose {
	ck := credKey(c)
	q.mu.Lock()
	defer q.mu.Unlock()
	for {
		var wait chan struct{}
		for k, ps := range q.inflight {
			if k.uid == c.UID {
				wait = ps[0].done
				break
			}
		}
		if wait == nil {
			break
		}
		q.mu.Unlock()
		<-wait
		q.mu.Lock()
	}
	return q.takeLocked(ck, maxClosesPerCompound)
}

// takeTrail takes up to max of the CLOSEs queued under c's credential to
// go after a COMPOUND's operations.
func (q *closeQueue) takeTrail(c *proto.Cred, max int) []*pendingClose {
	if max <= 0 {
		return nil
	}
	q.mu.Lock()
	defer q.mu.Unlock()
	if len(q.queued) == 0 {
		return nil
	}
	return q.takeLocked(credKey(c), max)
}

// takeLocked moves up to max CLOSEs of credential ck to the in-flight set.
//
// LOCKS_REQUIRED(q.mu)
func (q *closeQueue) takeLocked(ck string, max int) []*pendingClose {
	var out []*pendingClose
	q.queued = slices.DeleteFunc(q.queued, func(p *pendingClose) bool {
		if len(out) >= max || p.ckey != ck {
			return false
		}
		out = append(out, p)
		q.departLocked(p)
		return true
	})
	if len(q.queued) == 0 && q.stop != nil {
		// Nothing left to wait for: the next CLOSE queued gets its own
		// closeDelay, not what is left of this one's.
		q.stop()
		q.stop = nil
	}
	return out
}

// takeAny takes up to max queued CLOSEs of the oldest one's credential (a
// flush).
func (q *closeQueue) takeAny(max int) []*pendingClose {
	q.mu.Lock()
	defer q.mu.Unlock()
	if len(q.queued) == 0 {
		return nil
	}
	return q.takeLocked(q.queued[0].ckey, max)
}

// sent ends CLOSEs that went out (whatever their answer): their opens are
// gone.
func (q *closeQueue) sent(ps []*pendingClose) {
	q.mu.Lock()
	defer q.mu.Unlock()
	for _, p := range ps {
		delete(q.access, p.st.Other)
		q.landLocked(p)
	}
}

// departLocked records p on its way: OPENs of its open wait for it.
//
// LOCKS_REQUIRED(q.mu)
func (q *closeQueue) departLocked(p *pendingClose) {
	p.done = make(chan struct{})
	q.inflight[p.key()] = append(q.inflight[p.key()], p)
}

// landLocked ends p's way (sent, or queued again) and lets those waiting
// for it go; nothing if p was not on its way (a CLOSE sent at once).
//
// LOCKS_REQUIRED(q.mu)
func (q *closeQueue) landLocked(p *pendingClose) {
	k := p.key()
	ps := q.inflight[k]
	i := slices.Index(ps, p)
	if i < 0 {
		return
	}
	close(p.done)
	p.done = nil
	if ps = slices.Delete(ps, i, i+1); len(ps) > 0 {
		q.inflight[k] = ps
	} else {
		delete(q.inflight, k)
	}
}

// requeue puts back, oldest first, CLOSEs a COMPOUND did not get to run.
func (q *closeQueue) requeue(ps []*pendingClose) {
	if len(ps) == 0 {
		return
	}
	q.mu.Lock()
	defer q.mu.Unlock()
	for _, p := range ps {
		q.landLocked(p)
	}
	q.queued = append(slices.Clone(ps), q.queued...)
	if q.stop == nil && !q.closed {
		q.stop = q.afterFunc(q.delay, func() {
			q.mu.Lock()
			q.stop = nil
			q.mu.Unlock()
			q.flush()
		})
	}
}

// shut stops queueing (unmount): later closes are sent at once.
func (q *closeQueue) shut() {
	q.mu.Lock()
	defer q.mu.Unlock()
	q.closed = true
	if q.stop != nil {
		q.stop()
		q.stop = nil
	}
}

// pending reports how many CLOSEs are queued.
func (q *closeQueue) pending() int {
	q.mu.Lock()
	defer q.mu.Unlock()
	return len(q.queued)
}

// closeOps are a CLOSE's operations.
func closeOps(p *pendingClose) []nfs4.Argop {
	return []nfs4.Argop{putfh(p.fh), {Op: nfs4.OpClose, Args: &nfs4.CloseArgs{Stateid: stateidOf(p.st)}}}
}

// closedStatus reports whether a CLOSE's status leaves the open closed
// (the server no longer knows a state it answers for so).
func closedStatus(st nfs4.Status) bool {
	switch st {
	case nfs4.OK, nfs4.ErrBadStateid, nfs4.ErrExpired, nfs4.ErrAdminRevoked, nfs4.ErrStaleStateid, nfs4.ErrOldStateid:
		return true
	}
	return false
}
