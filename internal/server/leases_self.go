package server

import (
	"slices"
	"time"

	"golang.org/x/sys/unix"
)

// The holder of a write delegation changing its own file through the
// server — a LINK (the link count and ctime), a SETATTR (a build's chmod
// of the binary it linked, a truncate, times) — makes the file's inotify
// watch see IN_ATTRIB, which recalls every delegation of a leased file,
// the holder's own too. So the server tells the watch of the change it is
// about to make, and the watch takes the events that come while the
// change runs, and after it those that find the file still as the change
// left it (one change may be several system calls, each its own event,
// read by the watch later). The file's attributes decide: those after our
// change must differ from those before only as the change says, and when
// an event comes the file must still have them; anything else is a local
// change (or the holder writing meanwhile, which only costs the holder its
// delegation), and recalls.

// attrExpectation is a change of a write-leased file's attributes the
// server is making for the holder of its delegation.
type attrExpectation struct {
	before, after unix.Stat_t
	matched       bool      // an event came while the change ran
	ended         bool      // the change is over and its attributes checked
	until         time.Time // ended: when it is forgotten
}

// expectLink is asked before the server links the write-delegated file
// key for the delegation's holder; done(ok) says whether the link was
// made. Safe to call without a watch or a lease (done does nothing then).
func (w *leaseWatch) expectLink(key string) (done func(ok bool)) {
	return w.expectSelf(key, linkedOnly)
}

// expectSelf is asked before the server changes the attributes of the
// write-delegated file key for the delegation's holder; done(ok) says
// whether the change was made, and as(before, after) whether the file's
// attributes after it are what the change alone makes of those before.
// Safe to call without a watch or a lease (done does nothing then).
func (w *leaseWatch) expectSelf(key string, as func(before, after *unix.Stat_t) bool) (done func(ok bool)) {
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
		if ok && unix.Fstat(l.fd, &e.after) == nil && as(&e.before, &e.after) {
			return // kept until expectTTL for the change's late events
		}
		l.selfAttrs = slices.DeleteFunc(l.selfAttrs, func(x *attrExpectation) bool { return x == e })
		if ok || e.matched {
			// Made, but something else changed the file too; or not
			// made, so an event that came was another's.
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
	var st unix.Stat_t
	stated := false
	for _, e := range l.selfAttrs {
		if !e.ended {
			e.matched = true // judged when the change ends
			return false
		}
		if now.After(e.until) {
			continue
		}
		if !stated {
			if unix.Fstat(l.fd, &st) != nil {
				return true
			}
			stated = true
		}
		if sameAttrs(&st, &e.after) {
			return false
		}
	}
	return true
}

// forgetSelfLocked drops the expectations whose time is over.
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
