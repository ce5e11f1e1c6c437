package server

import (
	"fmt"
	"slices"
	"time"

	"golang.org/x/sys/unix"

	"hushfs/internal/server/v4state"
)

// Local changes to delegated directories. No lease holds back a local
// process adding, removing or renaming an entry, or changing a
// directory's attributes: while a directory is delegated the server
// watches it with inotify (IN_CREATE, IN_DELETE, IN_MOVED_FROM/TO,
// IN_ATTRIB of the directory itself, IN_DELETE_SELF) and recalls the
// delegation as soon as such an event arrives, revoking it a lease later
// if it is not returned. The watch is taken under the watch's lock
// together with v4state's grant, so no directory delegation exists
// without it.
//
// The server's own changes for an NFS client show up in the same watch.
// Another client's change has already waited for the delegations of
// others (Conflicts), so such an event could only recall the changing
// client's own delegation, which its own changes must not: before the
// server changes a delegated directory it says which event it will cause
// (expect), and the event is consumed instead of recalling. An
// expectation whose change failed is dropped, and if an event matched it
// meanwhile that event was somebody else's: the delegation is recalled.
// One whose event never comes (a rename between two links of one file)
// is forgotten expectTTL after its change: a local change of that very
// name in that time would go unseen, which is why the time is short.
// A change of the directory's own attributes is not expected, even the
// holder's (rare): one SETATTR makes an event per attribute, too many to
// tell from a local chmod, so it recalls the holder's delegation too.

// expectTTL is how long after its change an expected event may still be
// read: the events are queued when the change is made, the reader takes
// them at once.
const expectTTL = 2 * time.Second

// dirEvents are the events of a delegated directory that recall it.
// IN_MODIFY and a named IN_ATTRIB are an entry's: they recall only the
// delegations that cover entries (nfs4_dirchild.go).
const dirEvents = unix.IN_CREATE | unix.IN_DELETE | unix.IN_MOVED_FROM | unix.IN_MOVED_TO | unix.IN_ATTRIB |
	unix.IN_MODIFY | unix.IN_DELETE_SELF | unix.IN_ONLYDIR

// expectation is an event the server's own change of a delegated
// directory will cause.
type expectation struct {
	name    string // the entry
	mask    uint32 // the event it stands for
	matched bool
	ended   bool      // the change is over
	until   time.Time // ended: when it is forgotten
}

// grantDir runs grantFn (v4state's grant of a delegation of the
// directory n) while the server watches the directory, adding the watch
// first if needed.
func (w *leaseWatch) grantDir(n *node, grantFn func() bool) bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	l := w.files[n.key]
	fresh := l == nil
	if fresh {
		if len(w.files) >= w.limit {
			return false
		}
		var err error
		if l, err = w.watchDir(n); err != nil {
			w.s.logf("hushfs server: no directory delegation: %v", err)
			return false
		}
		w.files[n.key] = l
		w.count.Add(1)
	}
	if !l.dir || l.broken {
		return false
	}
	if grantFn() {
		return true
	}
	if fresh {
		w.releaseLocked(n.key, l)
	}
	return false
}

// watchDir opens the directory n and watches it for entry and attribute
// changes.
func (w *leaseWatch) watchDir(n *node) (*leased, error) {
	fd, err := unix.OpenByHandleAt(w.s.mountFd, n.kh, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC|unix.O_NOCTTY|unix.O_NONBLOCK)
	if err != nil {
		return nil, fmt.Errorf("opening a directory to watch: %w", err)
	}
	wd, err := unix.InotifyAddWatch(w.inFd, procFdPath(fd), dirEvents)
	if err != nil {
		unix.Close(fd)
		return nil, fmt.Errorf("inotify_add_watch of a directory: %w", err)
	}
	w.byWD[int32(wd)] = n.key
	return &leased{fd: fd, wd: int32(wd), dir: true}, nil
}

// expect tells the watch that the server is about to change the
// delegated directory key itself (for an NFS client whose change may not
// recall its own delegation), causing the event mask for the entry name.
// done(ok) says the change is over and whether it caused the event; it is
// safe to call without a watch.
func (w *leaseWatch) expect(key string, name []byte, mask uint32) (done func(ok bool)) {
	if !w.held() {
		return func(bool) {}
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	l := w.files[key]
	if l == nil || !l.dir {
		return func(bool) {}
	}
	e := &expectation{name: string(name), mask: mask}
	l.expects = append(l.expects, e)
	return func(ok bool) {
		w.mu.Lock()
		defer w.mu.Unlock()
		e.ended, e.until = true, w.s.now().Add(expectTTL)
		if ok {
			return
		}
		if e.matched {
			// The change failed, so the event was another's.
			l.broken = true
			w.poke()
		}
		l.expects = slices.DeleteFunc(l.expects, func(x *expectation) bool { return x == e })
	}
}

// dirEvent judges an event of the delegated directory l: whether it
// recalls the delegation. An attribute change of an entry (named
// IN_ATTRIB, IN_MODIFY) is no change of the directory: it recalls only
// delegations covering entries (l.children); an expected event of the
// server's own change is consumed.
func (w *leaseWatch) dirEvent(l *leased, mask uint32, name string) bool {
	if mask&(unix.IN_ATTRIB|unix.IN_MODIFY) != 0 && name != "" {
		if until, ok := l.childExpects[name]; !ok || w.s.now().After(until) {
			if len(l.localAttrs) >= maxNotifyQueued {
				return true // too many to tell: every delegation goes
			}
			l.children = true
			if l.localAttrs == nil {
				l.localAttrs = map[string]bool{}
			}
			l.localAttrs[name] = true
		}
		return false
	}
	now := w.s.now()
	for i, e := range l.expects {
		if e.name != name || e.mask&mask == 0 || e.matched || (e.ended && now.After(e.until)) {
			continue
		}
		e.matched = true
		if e.ended {
			l.expects = slices.Delete(l.expects, i, i+1)
		}
		return false
	}
	if mask&entryEvents != 0 && mask&unix.IN_ATTRIB == 0 && name != "" && len(l.localDirty) < maxNotifyQueued {
		// A local change of an entry, which the delegations that take
		// notifications are told of (the next scan: localDirChangeLocked).
		if l.localDirty == nil {
			l.localDirty = map[string]bool{}
		}
		l.localDirty[name] = true
		return false
	}
	return true
}

// localAttrsLocked tells the holders of the delegated directory key
// covering its entries that take notifications of the entries whose
// attributes or data local processes changed (l.localAttrs).
//
// LOCKS_REQUIRED(w.mu)
func (w *leaseWatch) localAttrsLocked(key string, l *leased) {
	names := l.localAttrs
	l.localAttrs = nil
	notify := w.s.v4.state.NotifyChildren(key)
	for name := range names {
		w.s.v4.notifier.markAttrs(notify, name) // not waited for: the change is made
	}
}

// entryEvents are a directory's events that add, remove or rename an
// entry: what CB_NOTIFY can tell.
const entryEvents = unix.IN_CREATE | unix.IN_DELETE | unix.IN_MOVED_FROM | unix.IN_MOVED_TO

// localDirChangeLocked tells the holders of the delegated directory key
// that take notifications of the entries local processes changed
// (l.localDirty), and returns the other delegations to recall.
//
// LOCKS_REQUIRED(w.mu)
func (w *leaseWatch) localDirChangeLocked(key string, l *leased) []v4state.Recall {
	names := make([]string, 0, len(l.localDirty))
	for name := range l.localDirty {
		names = append(names, name)
	}
	l.localDirty = nil
	recalls, notify := w.s.v4.state.LocalDirChange(key, w.s.v4.state.Lease())
	w.s.v4.notifier.mark(notify, names...) // not waited for: the change is made
	return recalls
}

// expectChild tells the watch of the delegated directory key that the
// server is about to change its entry name for the holder of a delegation
// covering entries: the entry's events for expectTTL from now are its.
func (w *leaseWatch) expectChild(key, name string) {
	if !w.held() {
		return
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	l := w.files[key]
	if l == nil || !l.dir {
		return
	}
	if l.childExpects == nil {
		l.childExpects = map[string]time.Time{}
	}
	l.childExpects[name] = w.s.now().Add(expectTTL)
}

// forgetExpectsLocked drops the expectations whose time is over.
func (w *leaseWatch) forgetExpectsLocked(l *leased) {
	now := w.s.now()
	for name, until := range l.childExpects {
		if now.After(until) {
			delete(l.childExpects, name)
		}
	}
	l.expects = slices.DeleteFunc(l.expects, func(e *expectation) bool {
		return e.ended && (now.After(e.until) || e.matched)
	})
}
