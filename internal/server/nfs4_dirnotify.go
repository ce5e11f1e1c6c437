package server

import (
	"sync"
	"time"

	"golang.org/x/sys/unix"

	"hushfs/internal/nfs4"
	"hushfs/internal/server/v4state"
)

// CB_NOTIFY of entries added and removed (RFC 8881 §20.4) for directory
// delegations whose holder asked for them (v4state/dirnotify.go): the
// change goes ahead at once instead of waiting for a recall, and the
// holder is told which names changed.
//
// What is sent is not the change itself but each changed name's state
// when the notification is built: present (NOTIFY4_ADD_ENTRY with the
// attributes the holder asked for, its handle among them) or absent
// (NOTIFY4_REMOVE_ENTRY). Notifications of one delegation go one at a
// time, in order, so whatever order concurrent changes of one name took,
// the last one the holder hears is the name's latest state; a rename is
// its old name removed and its new one added. The directory's attributes
// go last (NOTIFY4_CHANGE_DIR_ATTRS), read before the names are taken, so
// they never describe a state the names sent do not reach: a change
// between shows in the next notification.
//
// An NFSv4.1 client's change is answered only once its holders have
// taken the notification (bounded by notifyWait; a holder that has not by
// then is recalled): another client told of the change by the changer
// finds it in the holder's listing, as a recall would have made sure.
// A local change is told after the fact, as a recall would be. A
// notification that cannot be delivered (no back channel, an error, a
// refusal, too many names waiting) recalls the delegation instead.

const (
	// maxNotifyQueued bounds the names waiting for one holder: beyond,
	// it is recalled (a listing costs it less than so many names).
	maxNotifyQueued = 1024
	// notifyBudget bounds a CB_NOTIFY's changes in bytes: within any
	// back channel's ca_maxrequestsize that takes callbacks at all.
	notifyBudget = 3 << 10
	// notifyWait bounds how long a change waits for its holders.
	notifyWait = 2 * time.Second
	// maxNotifyDelay bounds the delay a holder may ask for.
	maxNotifyDelay = time.Second
	// A holder to be told of more than maxNotifyBurst names within
	// notifyBurstWindow is recalled instead: each notification costs the
	// changer a round trip to the holder, the holder's new listing one
	// (an untar into a listed directory paid a round trip per file).
	maxNotifyBurst    = 8
	notifyBurstWindow = time.Second
)

// dirNotifier queues and sends the notifications of every notifying
// directory delegation.
type dirNotifier struct {
	s      *Server
	mu     sync.Mutex
	qs     map[[nfs4.OtherSize]byte]*notifyQueue
	bursts map[[nfs4.OtherSize]byte]*notifyBurst
}

// notifyQueue is what waits to be told to one delegation's holder.
type notifyQueue struct {
	r       v4state.Recall
	dirty   map[string]uint8 // what changed of each name: dirtyEntry, dirtyAttrs
	order   []string
	waiters []chan bool // told when the names queued before them went (true) or will not (false)
	sending bool        // its sender goroutine runs
	failed  bool        // recalled instead: nothing more is sent
}

// notifyBurst is what one delegation's holder was told of since start
// (maxNotifyBurst): a name created and then written counts once. It
// outlives the queue, which goes whenever it is drained.
type notifyBurst struct {
	start time.Time
	names map[string]struct{}
}

// What changed of a name queued.
const (
	dirtyEntry uint8 = 1 << iota // added, removed or replaced
	dirtyAttrs                   // its attributes (the directory covers them)
)

func newDirNotifier(s *Server) *dirNotifier {
	return &dirNotifier{s: s, qs: map[[nfs4.OtherSize]byte]*notifyQueue{}, bursts: map[[nfs4.OtherSize]byte]*notifyBurst{}}
}

// mark queues the names of a directory changed for each holder of
// targets (v4state.DirConflicts, LocalDirChange) and returns a function
// that waits until each holder asking for no delay has been told of them
// (or recalled), at most notifyWait. It never blocks.
func (dn *dirNotifier) mark(targets []v4state.Recall, names ...string) (wait func()) {
	return dn.queue(targets, dirtyEntry, names)
}

// markAttrs is mark for a change of the attributes of the entry name.
func (dn *dirNotifier) markAttrs(targets []v4state.Recall, name string) (wait func()) {
	return dn.queue(targets, dirtyAttrs, []string{name})
}

func (dn *dirNotifier) queue(targets []v4state.Recall, what uint8, names []string) (wait func()) {
	if len(targets) == 0 || len(names) == 0 {
		return func() {}
	}
	var waits []notifyWaiter
	var recall []nfs4.Stateid
	dn.mu.Lock()
	for _, r := range targets {
		q := dn.qs[r.Stateid.Other]
		if q == nil {
			q = &notifyQueue{r: r, dirty: map[string]uint8{}}
			dn.qs[r.Stateid.Other] = q
		}
		if q.failed {
			continue
		}
		for _, name := range names {
			if q.dirty[name] == 0 {
				q.order = append(q.order, name)
			}
			q.dirty[name] |= what
		}
		if len(q.order) > maxNotifyQueued || r.Session == nil || dn.burstLocked(r.Stateid, names) > maxNotifyBurst {
			recall = append(recall, r.Stateid)
			dn.failLocked(q)
			if r.Notify.Delay <= 0 {
				// Told nothing: the change waits for the return.
				ch := make(chan bool, 1)
				ch <- false
				waits = append(waits, notifyWaiter{ch, r.Stateid})
			}
			continue
		}
		if r.Notify.Delay <= 0 {
			ch := make(chan bool, 1)
			q.waiters = append(q.waiters, ch)
			waits = append(waits, notifyWaiter{ch, r.Stateid})
		}
		if !q.sending {
			q.sending = true
			dn.s.v4.cbWG.Add(1)
			go dn.run(q)
		}
	}
	dn.mu.Unlock()
	dn.recall(recall)
	return func() { dn.wait(waits) }
}

// burstLocked counts names as told to the holder of sid and returns how
// many were within the current burst window.
//
// LOCKS_REQUIRED(dn.mu)
func (dn *dirNotifier) burstLocked(sid nfs4.Stateid, names []string) int {
	now := dn.s.now()
	b := dn.bursts[sid.Other]
	if b == nil || now.Sub(b.start) > notifyBurstWindow {
		if len(dn.bursts) >= 256 {
			for k, o := range dn.bursts {
				if now.Sub(o.start) > notifyBurstWindow {
					delete(dn.bursts, k)
				}
			}
		}
		b = &notifyBurst{start: now, names: map[string]struct{}{}}
		dn.bursts[sid.Other] = b
	}
	for _, name := range names {
		b.names[name] = struct{}{}
	}
	return len(b.names)
}

// notifyWaiter is a change waiting for one holder's notification.
type notifyWaiter struct {
	ch  chan bool
	sid nfs4.Stateid
}

// wait waits for waits, all within notifyWait from now; a holder that
// has not taken its notification by then is recalled. A holder recalled
// instead of told (false) is waited for until it returns the delegation,
// within the same bound: then the change's reply still follows the
// holder's knowing, as a recall before the change would have made sure.
func (dn *dirNotifier) wait(waits []notifyWaiter) {
	if len(waits) == 0 {
		return
	}
	deadline := time.Now().Add(notifyWait)
	t := time.NewTimer(notifyWait)
	defer t.Stop()
	for i, w := range waits {
		select {
		case told := <-w.ch:
			for !told && dn.s.v4.state.DelegHeld(w.sid) && time.Now().Before(deadline) {
				time.Sleep(2 * time.Millisecond)
			}
		case <-t.C:
			dn.s.logf("hushfs server: NFSv4.1 CB_NOTIFY not answered within %v: recalling", notifyWait)
			var late []nfs4.Stateid
			for _, w := range waits[i:] {
				select {
				case <-w.ch:
				default:
					late = append(late, w.sid)
				}
			}
			dn.recall(late)
			return
		}
	}
}

// failLocked ends q: its waiters are let go, nothing more is sent (the
// delegation is being recalled).
//
// LOCKS_REQUIRED(dn.mu)
func (dn *dirNotifier) failLocked(q *notifyQueue) {
	q.failed = true
	for _, ch := range q.waiters {
		ch <- false
	}
	q.waiters, q.order, q.dirty = nil, nil, nil
	if !q.sending {
		delete(dn.qs, q.r.Stateid.Other)
	}
}

// recall recalls the delegations sids, if not yet.
func (dn *dirNotifier) recall(sids []nfs4.Stateid) {
	for _, sid := range sids {
		dn.s.sendRecalls(dn.s.v4.state.RecallOne(sid))
	}
}

// run sends q's notifications until none wait.
func (dn *dirNotifier) run(q *notifyQueue) {
	defer dn.s.v4.cbWG.Done()
	if d := min(q.r.Notify.Delay, maxNotifyDelay); d > 0 {
		t := time.NewTimer(d)
		select {
		case <-t.C:
		case <-dn.s.v4.cbCtx.Done():
			t.Stop()
		}
	}
	for {
		// The directory's attributes before the names are taken: they
		// show no change that the names sent do not.
		dir, dirAttrs, ok := dn.dirAttrs(q.r)
		dn.mu.Lock()
		if len(q.order) == 0 || q.failed {
			q.sending = false
			if len(q.order) == 0 {
				delete(dn.qs, q.r.Stateid.Other)
			}
			dn.mu.Unlock()
			if dir != nil {
				dn.s.cache.release(dir)
			}
			return
		}
		names := q.order
		kinds := make([]uint8, len(names))
		q.order = nil
		for i, name := range names {
			kinds[i] = q.dirty[name]
			delete(q.dirty, name)
		}
		waiters := q.waiters
		q.waiters = nil
		dn.mu.Unlock()
		ok = ok && dn.s.v4.state.NotifyHeld(q.r.Stateid) && dn.send(q.r, dir, dirAttrs, names, kinds)
		if dir != nil {
			dn.s.cache.release(dir)
		}
		if !ok {
			dn.mu.Lock()
			for _, ch := range waiters {
				ch <- false
			}
			dn.failLocked(q)
			q.sending = false
			delete(dn.qs, q.r.Stateid.Other)
			dn.mu.Unlock()
			dn.recall([]nfs4.Stateid{q.r.Stateid})
			return
		}
		for _, ch := range waiters {
			ch <- true
		}
	}
}

// dirAttrs resolves the delegated directory of r and reads the
// attributes its holder asked for (none unless NOTIFY4_CHANGE_DIR_ATTRS
// was granted). The caller releases dir.
func (dn *dirNotifier) dirAttrs(r v4state.Recall) (dir *node, f nfs4.Fattr, ok bool) {
	dir, err := dn.s.resolve([]byte(r.FileKey))
	if err != nil {
		return nil, f, false
	}
	if !r.Notify.DirAttrsOK {
		return dir, f, true
	}
	o := objAttrs{n: dir}
	if err := unix.Fstat(dir.fd, &o.st); err != nil {
		return dir, f, false
	}
	c := &compound{s: dn.s}
	if c.fattr(r.Notify.DirAttrs, &o, &f) != nfs4.OK {
		return dir, f, false
	}
	return dir, f, true
}

// send tells r's holder the state of names in dir, in CB_NOTIFYs within
// notifyBudget each, the directory's attributes with the last: a name
// whose entry changed as added (its attributes) or removed, one whose
// attributes alone changed by NOTIFY4_CHANGE_CHILD_ATTRS (removed if gone
// meanwhile).
func (dn *dirNotifier) send(r v4state.Recall, dir *node, dirAttrs nfs4.Fattr, names []string, kinds []uint8) bool {
	c := &compound{s: dn.s} // for the attributes only (fattr, entryAttrs)
	var changes []nfs4.Notify
	size := 0
	for i, name := range names {
		var n nfs4.Notify
		var f nfs4.Fattr
		switch {
		case !c.entryAttrs(dir, &dirent{name: []byte(name)}, r.Notify.ChildAttrs, &f):
			n.Mask = nfs4.NewBitmap(nfs4.NotifyRemoveEntry)
			n.Remove = nfs4.NotifyRemove{Entry: nfs4.NotifyEntry{Name: []byte(name)}}
		case kinds[i]&dirtyEntry == 0:
			n.Mask = nfs4.NewBitmap(nfs4.NotifyChangeChildAttrs)
			n.ChildAttrs = nfs4.NotifyEntry{Name: []byte(name), Attrs: f}
		default:
			n.Mask = nfs4.NewBitmap(nfs4.NotifyAddEntry)
			n.Add = nfs4.NotifyAdd{NewEntry: nfs4.NotifyEntry{Name: []byte(name), Attrs: f}}
		}
		changes = append(changes, n)
		size += len(n.Append(nil))
		if last := i == len(names)-1; last || size >= notifyBudget {
			if last && r.Notify.DirAttrsOK {
				changes = append(changes, nfs4.Notify{Mask: nfs4.NewBitmap(nfs4.NotifyChangeDirAttrs),
					DirAttrs: nfs4.NotifyEntry{Attrs: dirAttrs}})
			}
			if !dn.s.sendCBNotify(r, changes) {
				return false
			}
			changes, size = nil, 0
		}
	}
	return true
}

// sendCBNotify sends one CB_NOTIFY of changes to r's holder and reports
// whether it took them.
func (s *Server) sendCBNotify(r v4state.Recall, changes []nfs4.Notify) bool {
	cb, ok := s.v4.state.BeginCallback(r.Session)
	if !ok {
		return false
	}
	sequenced := false
	defer func() { s.v4.state.EndCallback(r.Session, sequenced) }()
	cred, credOK := cbCred(cb.Sec)
	bc := backChannelOf(&cb)
	if !credOK || bc == nil {
		return false
	}
	args := &nfs4.CBCompoundArgs{Tag: []byte("hushfs notify"), MinorVersion: nfs4.MinorVersion, Ops: []nfs4.CBArgop{
		{Op: nfs4.CBOpSequence, Args: &cb.Sequence},
		{Op: nfs4.CBOpNotify, Args: &nfs4.CBNotifyArgs{Stateid: r.Stateid, FH: nfs4.FH(r.FileKey), Changes: changes}},
	}}
	var res nfs4.CBCompoundRes
	start := s.now()
	err := bc.Call(s.v4.cbCtx, cb.Program, nfs4.CBVersion, nfs4.CBProcCompound, cred, args, &res)
	s.observeCallback(nfs4.CBOpNotify, start)
	if err == nil && len(res.Results) > 0 && res.Results[0].Op == nfs4.CBOpSequence {
		sequenced = res.Results[0].Res.OpStatus() == nfs4.OK
	}
	switch {
	case err != nil:
		s.logf("hushfs server: NFSv4.1 CB_NOTIFY: %v: recalling", err)
		return false
	case res.Status != nfs4.OK:
		s.logf("hushfs server: NFSv4.1 CB_NOTIFY answered %v: recalling", res.Status)
		return false
	}
	return true
}
