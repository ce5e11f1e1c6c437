package server

import (
	"slices"
	"time"

	"golang.org/x/sys/unix"
)

// The holder of a write delegation adding a name to its own file (LINK)
// changes the file's link count and ctime through the server; the file's
// inotify watch sees IN_ATTRIB, which recalls every delegation of a leased
// file, the holder's own too. So the server tells the watch of the change
// it is about to make, and the watch consumes the event that change
// causes. Only that event: inotify merges an event with an identical one
// still queued, so a local chmod right after our LINK may arrive as the
// same single event. The file's attributes decide: those after our change
// must differ from those before only by the one link more, and when the
// event comes the file must still have them; anything else is a local
// change (or the holder writing meanwhile, which only costs the holder its
// delegation), and recalls.

// attrExpectation is a change of a write-leased file's attributes the
// server is making for the holder of its delegation.
type attrExpectation struct {
	before, after unix.Stat_t
	matched       bool      // its event came while the change ran
	ended         bool      // the change is over and its attributes checked
	until         time.Time // ended: when it is forgotten if its event never comes
}

// expectLink is asked before the server links the write-delegated file
// key for the delegation's holder; done(ok) says whether the link was
// made. Safe to call without a watch or a lease (done does nothing then).
func (w *leaseWatch) expectLink(key string) (done func(ok bool)) {
	nothing := func(bool) {}
	if !w.held() {
		return nothing
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	l := w.files[key]
	if l == nil || l.dir || !l.write || l.broken {
		return nothing
	}
	e := &attrExpectation{}
	if unix.Fstat(l.fd, &e.before) != nil {
		return nothing
	}
	l.selfAttrs = append(l.selfAttrs, e)
	return func(ok bool) {
		w.mu.Lock()
		defer w.mu.Unlock()
		e.ended, e.until = true, w.s.now().Add(expectTTL)
		if ok && unix.Fstat(l.fd, &e.after) == nil && linkedOnly(&e.before, &e.after) {
			if e.matched {
				l.selfAttrs = slices.DeleteFunc(l.selfAttrs, func(x *attrExpectation) bool { return x == e })
			}
			return
		}
		l.selfAttrs = slices.DeleteFunc(l.selfAttrs, func(x *attrExpectation) bool { return x == e })
		if ok || e.matched {
			// Made, but something else changed the file too; or not
			// made, so the event that came was another's.
			l.broken = true
			w.poke()
		}
	}
}

// fileEvent judges an inotify event of the leased file l: whether it
// recalls the delegations. Called with w.mu held.
func (w *leaseWatch) fileEvent(l *leased, mask uint32) bool {
	if mask != unix.IN_ATTRIB {
		return true
	}
	now := w.s.now()
	for i, e := range l.selfAttrs {
		if e.matched || (e.ended && now.After(e.until)) {
			continue
		}
		if !e.ended {
			e.matched = true // judged when the change ends
			return false
		}
		l.selfAttrs = slices.Delete(l.selfAttrs, i, i+1)
		var st unix.Stat_t
		return unix.Fstat(l.fd, &st) != nil || !sameAttrs(&st, &e.after)
	}
	return true
}

// forgetSelfLocked drops the expectations whose event never came.
func (w *leaseWatch) forgetSelfLocked(l *leased) {
	now := w.s.now()
	l.selfAttrs = slices.DeleteFunc(l.selfAttrs, func(e *attrExpectation) bool {
		return e.ended && now.After(e.until)
	})
}

// linkedOnly reports whether after differs from before only as one more
// link makes it (the link count, and the ctime).
func linkedOnly(before, after *unix.Stat_t) bool {
	b := *before
	b.Nlink++
	b.Ctim = after.Ctim
	return sameAttrs(&b, after)
}

// sameAttrs compares what a local change of a file's attributes or data
// would move.
func sameAttrs(a, b *unix.Stat_t) bool {
	return a.Mode == b.Mode && a.Uid == b.Uid && a.Gid == b.Gid && a.Nlink == b.Nlink &&
		a.Size == b.Size && a.Mtim == b.Mtim && a.Ctim == b.Ctim
}
