package client

import (
	"context"
	"errors"
	"fmt"
	"time"
)

// Times set while a file has data not yet on the server (tar: write, then
// utimensat of the mtime, then fchmod, then close) must reach the server
// after that data: a WRITE landing later would move the mtime again. Sent
// at once, they cost a WRITE to flush the data first and then their own
// SETATTR, with the fchmod's SETATTR right behind. So they are held
// instead, shown by stat meanwhile, and sent after the data: merged into
// the next SETATTR (the fchmod's), or alone once the data is written at
// close, fsync or the dirty-age flush. Only the file's owner's times are
// held: the owner may always set them, so the server's answer, which
// comes later, can only be yes (another caller's are sent at once and its
// EPERM comes back to utimensat). A write after them moves the mtime, as
// locally: the held mtime is dropped and the server's write time stands;
// so does a truncation.

// heldTimes are times an application set while its data was pending.
type heldTimes struct {
	atime, mtime SetTime  // TimeOmit: not held
	shownA       Timespec // what stat shows for a held time meanwhile
	shownM       Timespec
	cred         Cred      // who set them (the owner)
	at           time.Time // when first held (the dirty-age flush sends them)
}

// timesOnly reports whether in changes times and nothing else.
func (in *SetAttrIn) timesOnly() bool {
	return !in.SetMode && !in.SetUID && !in.SetGID && !in.SetSize && !in.KillSetID &&
		(in.Atime.How != TimeOmit || in.Mtime.How != TimeOmit)
}

// holdTimes holds the times of in, a times-only change by c, if n has data
// not yet sent and c owns n. It reports whether it did.
func (w *writeback) holdTimes(n *inode, c *Cred, in *SetAttrIn) bool {
	n.mu.Lock()
	owner := n.attrValid && n.attr.UID == c.UID
	n.mu.Unlock()
	st := peek(n)
	if !owner || st == nil {
		return false
	}
	now := w.fs.now()
	st.mu.Lock()
	defer st.mu.Unlock()
	if len(st.dirty) == 0 && len(st.inflight) == 0 {
		return false // nothing for the times to wait for
	}
	h := st.times
	if h == nil {
		h = &heldTimes{at: now}
		st.times = h
	}
	if in.Atime.How != TimeOmit {
		h.atime, h.shownA = in.Atime, shownTime(in.Atime, now)
	}
	if in.Mtime.How != TimeOmit {
		h.mtime, h.shownM = in.Mtime, shownTime(in.Mtime, now)
	}
	h.cred = Cred{UID: c.UID, GID: c.GID, Groups: append([]uint32(nil), c.Groups...)}
	return true
}

// writtenLocked drops a held mtime: data written after it moves the mtime.
//
// LOCKS_REQUIRED(st.mu)
func (st *fileState) writtenLocked() {
	if h := st.times; h != nil && h.mtime.How != TimeOmit {
		h.mtime = SetTime{}
		if h.atime.How == TimeOmit {
			st.times = nil
		}
	}
}

// takeTimes removes n's held times and returns them (nil if none).
func (w *writeback) takeTimes(n *inode) *heldTimes {
	st := peek(n)
	if st == nil {
		return nil
	}
	st.mu.Lock()
	defer st.mu.Unlock()
	h := st.times
	st.times = nil
	return h
}

// restoreTimes holds h again after the SETATTR that was to carry it did not
// happen, unless times were held since.
func (w *writeback) restoreTimes(n *inode, h *heldTimes) {
	if h == nil {
		return
	}
	st := w.state(n)
	st.mu.Lock()
	if st.times == nil {
		st.times = h
	}
	st.mu.Unlock()
}

// mergeHeld adds the held times h to in, unless in sets its own; a held
// mtime is dropped by a size change, which moves the mtime after it.
func (in *SetAttrIn) mergeHeld(h *heldTimes) {
	if h == nil {
		return
	}
	if in.Atime.How == TimeOmit {
		in.Atime = h.atime
	}
	if in.Mtime.How == TimeOmit && !in.SetSize {
		in.Mtime = h.mtime
	}
}

// sendHeldTimes sends n's held times, once its data is on the server. A
// failure is a write-back error: reported to the descriptors open now, as
// their data's would be.
func (w *writeback) sendHeldTimes(ctx context.Context, n *inode) error {
	h := w.takeTimes(n)
	if h == nil {
		return nil
	}
	in := SetAttrIn{Atime: h.atime, Mtime: h.mtime}
	done := w.fs.sendingTimes(n, &in, h)
	_, _, err := w.fs.setattrRPC(ctx, &h.cred, n, in)
	done()
	switch {
	case err == nil:
		return nil
	case errors.Is(err, context.Canceled), errors.Is(err, context.DeadlineExceeded):
		w.restoreTimes(n, h) // the caller gave up: sent by a later flush
		return err
	}
	err = fmt.Errorf("setting the times held until the data was written: %w", err)
	st := w.state(n)
	st.mu.Lock()
	st.setErrLocked(err)
	st.mu.Unlock()
	return err
}

// sendingTimes marks the times of in, a SETATTR about to carry held times
// (held: a file's or a directory's, nil if none), as on their way: until
// done, stat shows them over the cached attributes, which are from before
// the SETATTR, as it showed the held times before. Without, a stat while
// the SETATTR was on its way showed the times from before the utimensat
// that had returned (pjdfstest utimensat/00.t on a directory made here,
// its times sent when their hold ended).
func (fs *FS) sendingTimes(n *inode, in *SetAttrIn, held ...*heldTimes) (done func()) {
	now := fs.now()
	h := &heldTimes{atime: in.Atime, mtime: in.Mtime, shownA: shownTime(in.Atime, now), shownM: shownTime(in.Mtime, now)}
	for _, p := range held {
		// A time that was held shows as it did while held.
		if p != nil && p.atime.How != TimeOmit && p.atime == in.Atime {
			h.shownA = p.shownA
		}
		if p != nil && p.mtime.How != TimeOmit && p.mtime == in.Mtime {
			h.shownM = p.shownM
		}
	}
	n.mu.Lock()
	n.sendingTimes = h
	n.mu.Unlock()
	return func() {
		n.mu.Lock()
		if n.sendingTimes == h {
			n.sendingTimes = nil
		}
		n.mu.Unlock()
	}
}

// sendingShown lays the times of a SETATTR on its way (sendingTimes) over
// a; times held since lie over those (localAttr).
func (fs *FS) sendingShown(n *inode, a *Attr) {
	n.mu.Lock()
	defer n.mu.Unlock()
	n.sendingTimes.showOn(a)
}

// shownTime is what stat shows for a time t set at now.
func shownTime(t SetTime, now time.Time) Timespec {
	if t.How == TimeNow {
		return Timespec{Sec: now.Unix(), Nsec: uint32(now.Nanosecond())}
	}
	return t.Time
}

// showOn lays the times h holds (h may be nil: none) over a, as stat
// shows them.
func (h *heldTimes) showOn(a *Attr) {
	if h == nil {
		return
	}
	if h.atime.How != TimeOmit {
		a.Atime = h.shownA
	}
	if h.mtime.How != TimeOmit {
		a.Mtime = h.shownM
	}
}

// localAttrs lays over a what the server does not know yet: the file is as
// large as its pending data reaches, and has the times held for it.
func (w *writeback) localAttrs(n *inode, a *Attr) {
	st := peek(n)
	if st == nil {
		return
	}
	st.mu.Lock()
	defer st.mu.Unlock()
	end := st.dirty.lastEnd()
	for i := range st.inflight {
		end = max(end, st.inflight[i].end())
	}
	a.Size = max(a.Size, end)
	st.times.showOn(a)
}
