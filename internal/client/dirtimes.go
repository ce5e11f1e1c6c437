package client

import (
	"context"
	"errors"
	"syscall"
	"time"

	"hushfs/internal/proto"
)

// Times of a directory this client made, held briefly. tar restores a
// directory's times and then its mode once it has extracted what the
// directory holds: utimensat, then chmod — two SETATTRs, one round trip
// each, where one SETATTR carries both. So the times its owner sets on a
// directory the client made, and of which it knows every change (its
// listing is still the one it made: listcache.go), are held for at most
// dirTimesHold and merged into the next SETATTR of the directory, or sent
// alone when the hold ends, before any change of a name in it (which moves
// its mtime on the server, as it would locally after the utimensat), at
// fsyncdir and at unmount. stat shows them meanwhile.
//
// Why this may answer utimensat before the server has: the owner may
// always set a directory's times, and the server could refuse nothing
// else — the client made the directory on this export (so it is writable)
// and nobody else has changed it since. What is given up is how soon
// another client can see the times: dirTimesHold later, well within the
// attribute lifetime (acdirmin, 30 s) for which other clients keep a
// directory's attributes anyway. A failure when they are finally sent
// (the server lost the directory, say) is logged.

// dirTimesHold is the longest a directory's times are held.
const dirTimesHold = time.Second

// heldDir is a directory's held times. GUARDED_BY(the directory's mu)
type heldDir struct {
	heldTimes
	timer *time.Timer // sends them when the hold ends
}

// holdDirTimes holds in's times, a times-only change of directory n by c,
// if c owns n and the client made n and knows all its changes. It reports
// whether it did.
func (fs *FS) holdDirTimes(n *inode, c *Cred, in *SetAttrIn) bool {
	if !fs.cachingNames() {
		return false
	}
	now := fs.now()
	n.mu.Lock()
	defer n.mu.Unlock()
	if !n.attrValid || n.attr.Type != proto.TypeDir || n.attr.UID != c.UID || n.list == nil || !n.list.made {
		return false
	}
	h := n.dirTimes
	if h == nil {
		h = &heldDir{heldTimes: heldTimes{at: now}}
		n.dirTimes = h
		h.timer = time.AfterFunc(fs.dirHold, func() { fs.dirHoldEnded(n) })
	}
	if in.Atime.How != TimeOmit {
		h.atime, h.shownA = in.Atime, shownTime(in.Atime, now)
	}
	if in.Mtime.How != TimeOmit {
		h.mtime, h.shownM = in.Mtime, shownTime(in.Mtime, now)
	}
	h.cred = Cred{UID: c.UID, GID: c.GID, Groups: append([]uint32(nil), c.Groups...)}
	fs.dirTimesMu.Lock()
	fs.heldDirs[n] = struct{}{}
	fs.dirTimesMu.Unlock()
	return true
}

// takeDirTimes removes n's held times and returns them (nil if none).
func (fs *FS) takeDirTimes(n *inode) *heldTimes {
	n.mu.Lock()
	h := n.dirTimes
	n.dirTimes = nil
	n.mu.Unlock()
	if h == nil {
		return nil
	}
	h.timer.Stop()
	fs.dirTimesMu.Lock()
	delete(fs.heldDirs, n)
	fs.dirTimesMu.Unlock()
	return &h.heldTimes
}

// restoreDirTimes holds h again after the SETATTR that was to carry it did
// not happen (the caller gave up, say), unless times were held since; the
// hold ends at once, so that they are sent soon.
func (fs *FS) restoreDirTimes(n *inode, h *heldTimes) {
	if h == nil {
		return
	}
	n.mu.Lock()
	if n.dirTimes != nil {
		n.mu.Unlock()
		return
	}
	n.dirTimes = &heldDir{heldTimes: *h, timer: time.AfterFunc(fs.dirHold, func() { fs.dirHoldEnded(n) })}
	n.mu.Unlock()
	fs.dirTimesMu.Lock()
	fs.heldDirs[n] = struct{}{}
	fs.dirTimesMu.Unlock()
}

// sendDirTimes sends the held times of dirs, if any, before a change of a
// name in them. Only the caller giving up stops the change: the times'
// own failure is logged (sendDirTimesOf), not the change's.
func (fs *FS) sendDirTimes(ctx context.Context, dirs ...*inode) error {
	for _, dir := range dirs {
		if err := fs.sendDirTimesOf(ctx, dir); err != nil && ctx.Err() != nil {
			return err
		}
	}
	return nil
}

// sendDirTimesOf sends dir's held times, if any: before a change of a name
// in it, at fsyncdir, when the hold ends and at unmount.
func (fs *FS) sendDirTimesOf(ctx context.Context, dir *inode) error {
	h := fs.takeDirTimes(dir)
	if h == nil {
		return nil
	}
	in := SetAttrIn{Atime: h.atime, Mtime: h.mtime}
	done := fs.sendingTimes(dir, &in, h)
	_, _, err := fs.setattrRPC(ctx, &h.cred, dir, in)
	done()
	switch {
	case err == nil:
		return nil
	case errors.Is(err, context.Canceled), errors.Is(err, context.DeadlineExceeded):
		fs.restoreDirTimes(dir, h)
		return err
	case errors.Is(err, syscall.ESTALE), errors.Is(err, syscall.ENOENT):
		return nil // the directory is gone: its times with it
	}
	fs.logf("hushfs: setting the times held for directory %s: %v", fs.pathOf(dir), err)
	return err
}

// dirHoldEnded sends dir's held times once their hold is over, detached
// from any caller (ended by unmount, which sends what is left itself).
func (fs *FS) dirHoldEnded(dir *inode) {
	fs.bgMu.Lock()
	if fs.closing {
		fs.bgMu.Unlock()
		return
	}
	fs.bg.Add(1)
	fs.bgMu.Unlock()
	defer fs.bg.Done()
	_ = fs.sendDirTimesOf(fs.life, dir)
}

// sendAllDirTimes sends every directory's held times (unmount).
func (fs *FS) sendAllDirTimes(ctx context.Context) error {
	fs.dirTimesMu.Lock()
	dirs := make([]*inode, 0, len(fs.heldDirs))
	for n := range fs.heldDirs {
		dirs = append(dirs, n)
	}
	fs.dirTimesMu.Unlock()
	var first error
	for _, n := range dirs {
		if err := fs.sendDirTimesOf(ctx, n); err != nil && first == nil {
			first = err
		}
	}
	return first
}

// FsyncDir makes what was done to directory id durable on the server: its
// held times are sent (every other directory operation already is).
func (fs *FS) FsyncDir(ctx context.Context, id NodeID) error {
	n, err := fs.node(id)
	if err != nil {
		return err
	}
	return fs.sendDirTimesOf(ctx, n)
}

// dirTimesShown lays n's held times over a.
func (fs *FS) dirTimesShown(n *inode, a *Attr) {
	n.mu.Lock()
	defer n.mu.Unlock()
	if h := n.dirTimes; h != nil {
		h.showOn(a)
	}
}
