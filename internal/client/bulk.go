package client

import (
	"context"
	"errors"
	"sync"
	"time"

	"hushfs/internal/proto"
)

// Bulk revalidation. When the attributes of many entries of one directory
// are asked for after they expired — ls -l and du stat every entry they
// list, git status lstat()s every tracked file, the kernel checks each
// directory a walk goes through — one READDIRPLUS pass of the directory
// (⌈bytes/maxcount⌉ calls) brings them all, instead of a GETATTR each.
// Its attributes are as fresh as a GETATTR's (each reply was made after its
// call was sent) and are applied under the same ordering rules as any
// reply (staleLocked: the time the call was sent, the time the cached
// attributes arrived). Close-to-open is untouched: an open sends its own
// GETATTR (getattrShared, fresh) and never takes a refresh sent earlier.
//
// The trigger is the demand: a GETATTR of an entry whose attributes
// expired counts against its directory (the one it was last reached from).
// A lone stat stays one GETATTR. The pass is sent when the GETATTRs it
// would save have come to what it costs (ski rental: never more than twice
// the calls of the better choice in hindsight), at once when the kernel has
// just listed the directory and now stats an entry (ls -l, du, ls --color),
// or when a walk is at the directory (walk.go). GETATTRs of entries of a
// directory being refreshed wait for the reply that carries them.

const (
	// bulkHintWindow: a stat of an expired entry this soon after a listing
	// of its directory began is a listing being stat'ed (ls -l, du).
	bulkHintWindow = 2 * time.Second
	// bulkDemandWindow: GETATTRs of expired entries of one directory count
	// together while each comes within this of the one before; a refresh
	// that failed or just ended is not tried again within it.
	bulkDemandWindow = 2 * time.Second
	// bulkWalkCalls: a walk refreshes a directory at its first demand if
	// its pass takes at most this many calls.
	bulkWalkCalls = 4
	// plusEntryBytes is about what a READDIRPLUS entry takes in a reply
	// (name, cookie, attributes, handle); dirEntryBytes about what an
	// entry takes in a server's directory (its size estimates the entries
	// of a directory never listed whole).
	plusEntryBytes = 200
	dirEntryBytes  = 24
)

// dirBulk is a directory's bulk-revalidation and walk bookkeeping,
// allocated when first needed. GUARDED_BY(the directory's mu)
type dirBulk struct {
	listedAt time.Time // a listing pass from offset 0 began
	enumAt   time.Time // a listing pass or a refresh began: its entries are being enumerated
	demands  int       // GETATTRs of expired entries in the current run of them
	demandAt time.Time // the last one
	calls    int       // READDIRPLUS calls of the last complete pass (0: unknown)
	freshAt  time.Time // when that pass was sent: its entries' attributes are as of then
	failAt   time.Time // a refresh failed (no read permission, say)
	refresh  *dirRefresh

	visitAt   time.Time // the kernel's last visit (walk.go), at most one per visitGap
	visitWalk bool      // and whether it was in a walk
	walkSeen  uint64    // the walk it was visited in
	aheadIn   uint64    // the walk it was read ahead for
	listedIn  uint64    // the walk it was enumerated in
	chain     int       // enumerated directories down to this one, each soon after its parent
	kids      int       // subdirectories enumerated since this one was
	lastKid   NodeID    // the last of them
}

// bulkLocked returns dir's bookkeeping, allocating it.
//
// LOCKS_REQUIRED(dir.mu)
func (dir *inode) bulkLocked() *dirBulk {
	if dir.bulk == nil {
		dir.bulk = &dirBulk{}
	}
	return dir.bulk
}

// dirRefresh is one READDIRPLUS pass over a directory, shared by everyone
// waiting for attributes it brings.
type dirRefresh struct {
	done chan struct{} // closed when the pass ends
	err  error         // why it ended early; set before done is closed
	// wanted is closed when someone first waits for the pass: a read-ahead
	// one may be held by the protocol until then (proto.WithAhead).
	wanted   chan struct{}
	wantOnce sync.Once

	mu       sync.Mutex
	progress chan struct{} // GUARDED_BY(mu): closed and replaced as each reply is applied
}

// advance wakes the waiters after a reply has been applied.
func (r *dirRefresh) advance() {
	r.mu.Lock()
	close(r.progress)
	r.progress = make(chan struct{})
	r.mu.Unlock()
}

// want says someone waits for the pass.
func (r *dirRefresh) want() { r.wantOnce.Do(func() { close(r.wanted) }) }

// wait returns once ready() holds or the pass has ended. It returns the
// pass's error only if the server could not be reached (a caller falling
// back to its own call would wait for a major timeout again), or ctx's.
func (r *dirRefresh) wait(ctx context.Context, ready func() bool) error {
	r.want()
	for {
		r.mu.Lock()
		ch := r.progress
		r.mu.Unlock()
		if ready() {
			return nil
		}
		select {
		case <-ch:
		case <-r.done:
			if r.err != nil && !proto.IsAnswer(r.err) {
				return r.err
			}
			return nil
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// bulkOn reports whether entries may be revalidated in bulk: not with
// noac (nothing is cached to revalidate) nor nordirplus (no READDIRPLUS),
// nor once the server said it has no READDIRPLUS.
func (fs *FS) bulkOn() bool {
	return !fs.opts.NoAC && fs.opts.RdirPlus && !fs.noPlus.Load()
}

// passCallsLocked estimates the READDIRPLUS calls of a pass over dir: what
// the last complete one took, else from the entries of its listing or, for
// a directory never listed whole, from its size.
//
// LOCKS_REQUIRED(dir.mu)
func (fs *FS) passCallsLocked(dir *inode) int {
	if b := dir.bulk; b != nil && b.calls > 0 {
		return b.calls
	}
	entries := dir.attr.Size / dirEntryBytes
	if dir.list != nil {
		entries = uint64(len(dir.list.entries))
	}
	per := max(uint64(fs.rsize)/plusEntryBytes, 1)
	return int(max((entries+per-1)/per, 1))
}

// knowsEntriesLocked reports whether the kernel holds entries of dir that
// a refresh could bring up to date (a directory it never listed or looked
// into has none: reading it ahead would only fill a listing).
//
// LOCKS_REQUIRED(dir.mu)
func (dir *inode) knowsEntriesLocked() bool {
	return dir.list != nil || len(dir.names) > 0
}

// attrFromRefresh gets n's expired attributes from a READDIRPLUS pass
// over its directory, if one is under way or worth starting now (a
// directory's own attributes come with the first reply of its own pass).
// ok is false when the caller must send its GETATTR.
func (fs *FS) attrFromRefresh(ctx context.Context, c *Cred, n *inode) (a proto.Attr, left time.Duration, ok bool, err error) {
	if !fs.bulkOn() {
		return a, 0, false, nil
	}
	n.mu.Lock()
	pid := n.parent
	var r *dirRefresh
	if n.bulk != nil {
		r = n.bulk.refresh
	}
	n.mu.Unlock()
	if r == nil {
		dir := fs.nodes.get(pid)
		if pid == 0 || dir == nil || dir == n {
			return a, 0, false, nil
		}
		if r = fs.bulkDemand(ctx, c, dir, fs.getattrAsksDirDeleg(n)); r == nil {
			// A pass that ended since the caller looked may have
			// brought them: no GETATTR for what it did.
			n.mu.Lock()
			a, left, ok = n.cachedAttrLocked(fs.now())
			n.mu.Unlock()
			return a, left, ok, nil
		}
	}
	fresh := func() bool {
		n.mu.Lock()
		defer n.mu.Unlock()
		a, left, ok = n.cachedAttrLocked(fs.now())
		return ok
	}
	if err := r.wait(ctx, fresh); err != nil {
		return a, 0, false, err
	}
	fresh()
	return a, left, ok, nil
}

// bulkDemand counts a GETATTR of an expired entry of dir and returns the
// refresh that will bring it: one under way, or one started now if the
// demand warrants it (see the top of this file); nil if the caller is to
// send its GETATTR. own: the entry is a directory whose GETATTR asks for
// its delegation (dirdeleg.go), which no pass of dir brings: it is a
// demand only where a pass is due at once (ls -l, a walk), else it gets
// its own GETATTR and with it what keeps it (git status stats .git's
// subdirectories but lists none: a pass of .git or .git/refs at each run
// refreshed them for one lifetime only).
func (fs *FS) bulkDemand(ctx context.Context, c *Cred, dir *inode, own bool) *dirRefresh {
	walking := fs.visitDir(c, dir, false)
	now := fs.now()
	dir.mu.Lock()
	if !dir.attrValid || dir.attr.Type != proto.TypeDir {
		dir.mu.Unlock()
		return nil
	}
	b := dir.bulkLocked()
	if r := b.refresh; r != nil {
		dir.mu.Unlock()
		return r
	}
	if now.Sub(b.failAt) < bulkDemandWindow || now.Sub(b.freshAt) < bulkDemandWindow {
		// It failed, or it just brought what it could: the entry is not
		// in the directory's listing (renamed, or a link reached from
		// elsewhere).
		dir.mu.Unlock()
		return nil
	}
	cost := fs.passCallsLocked(dir)
	due := walking && cost <= bulkWalkCalls || now.Sub(b.listedAt) < bulkHintWindow
	if own && !due {
		dir.mu.Unlock()
		return nil
	}
	if now.Sub(b.demandAt) > bulkDemandWindow {
		b.demands = 0
	}
	b.demands++
	b.demandAt = now
	need := cost + 1 // the pass pays once the GETATTRs have cost as much
	if due {
		need = 1
	}
	start := b.demands >= need
	dir.mu.Unlock()
	if !start {
		return nil
	}
	r, _ := fs.startRefresh(ctx, c, dir, 0)
	return r
}

// reviveDir makes dir's own expired attributes fresh: from its pass under
// way, or one started now when a walk is at it and the pass is one call
// (it costs what the GETATTR would, and brings every entry's attributes
// with the directory's), else by GETATTR.
func (fs *FS) reviveDir(ctx context.Context, c *Cred, dir *inode, walking bool) error {
	if fs.bulkOn() {
		now := fs.now()
		dir.mu.Lock()
		b := dir.bulkLocked()
		r := b.refresh
		start := r == nil && walking && dir.attrValid && dir.attr.Type == proto.TypeDir &&
			dir.knowsEntriesLocked() && now.Sub(b.failAt) >= bulkDemandWindow && fs.passCallsLocked(dir) <= 1
		dir.mu.Unlock()
		if start {
			r, _ = fs.startRefresh(ctx, c, dir, 0)
		}
		if r != nil {
			fresh := func() bool {
				dir.mu.Lock()
				defer dir.mu.Unlock()
				_, _, ok := dir.cachedAttrLocked(fs.now())
				return ok
			}
			if err := r.wait(ctx, fresh); err != nil {
				return err
			}
			if fresh() {
				return nil
			}
		}
	}
	_, _, err := fs.getattrRPC(ctx, c, dir)
	return err
}

// startRefresh starts a READDIRPLUS pass over dir, or returns the one under
// way (started false); nil once the mount is closing. It runs detached
// from the caller (others may be waiting for it) for the mount's lifetime,
// with the caller's identity; ahead is the walk it reads ahead for (0: a
// demand).
func (fs *FS) startRefresh(ctx context.Context, c *Cred, dir *inode, ahead uint64) (r *dirRefresh, started bool) {
	fs.bgMu.Lock()
	if fs.closing {
		fs.bgMu.Unlock()
		return nil, false
	}
	fs.bg.Add(1)
	fs.bgMu.Unlock()
	dir.mu.Lock()
	b := dir.bulkLocked()
	if r := b.refresh; r != nil {
		dir.mu.Unlock()
		fs.bg.Done()
		return r, false
	}
	r = &dirRefresh{done: make(chan struct{}), progress: make(chan struct{}), wanted: make(chan struct{})}
	b.refresh = r
	b.enumAt, b.kids, b.lastKid = fs.now(), 0, 0
	if ahead != 0 {
		b.aheadIn = ahead
	}
	dir.mu.Unlock()
	if ahead == 0 {
		fs.visitDir(c, dir, true) // the kernel's demand enumerates it: a walk may begin here
	}
	cred := Cred{UID: c.UID, GID: c.GID, Groups: append([]uint32(nil), c.Groups...)}
	rctx := fs.detach(ctx)
	fs.passes.Add(1)
	go func() {
		defer fs.bg.Done()
		defer fs.passes.Add(-1)
		err := fs.runRefresh(rctx, &cred, dir, r, ahead != 0)
		dir.mu.Lock()
		b.refresh = nil
		if err != nil {
			b.failAt = fs.now()
		}
		dir.mu.Unlock()
		r.err = err
		close(r.done)
		fs.refreshed(dir, ahead != 0, err)
	}()
	return r, true
}

// runRefresh reads dir from cookie 0 to the end with READDIRPLUS, as a
// listing pass does (the same loop checks; a complete pass becomes the
// directory's complete listing), applying each reply's attributes to the
// nodes the kernel holds. A read-ahead pass's first call is marked so
// (proto.WithAhead): the protocol may send it with another call, or hold
// it until someone waits; the rest of a long listing is read as usual.
func (fs *FS) runRefresh(ctx context.Context, c *Cred, dir *inode, r *dirRefresh, ahead bool) error {
	d := &openDir{node: dir, seen: map[uint64]struct{}{}, asked: map[uint64]struct{}{}, listing: fs.cachingNames()}
	d.mu.Lock()
	defer d.mu.Unlock()
	dir.mu.Lock()
	d.pending = fs.beginPendingLocked(dir)
	dir.mu.Unlock()
	for !d.eof {
		fctx := ctx
		if ahead {
			fctx, ahead = proto.WithAhead(ctx, r.wanted), false
		}
		if err := fs.fetchDir(fctx, c, d, true); err != nil {
			if errors.Is(err, proto.ErrNotSupp) {
				fs.noPlus.Store(true) // as Linux does: READDIR and GETATTRs from now on
			}
			return err
		}
		fs.applyRefreshed(dir, d)
		r.advance()
	}
	return nil
}

// applyRefreshed applies the batch a refresh just read: each entry's
// attributes to its node, if the kernel holds one, and the name to the
// name cache. The batch's entries count as returned (for the loop checks
// of fetchDir).
//
// LOCKS_REQUIRED(d.mu)
func (fs *FS) applyRefreshed(dir *inode, d *openDir) {
	for i := range d.batch {
		e := &d.batch[i]
		d.seen[e.Cookie] = struct{}{}
		d.gained++
		if d.plusB == nil || e.Name == "." || e.Name == ".." {
			continue
		}
		p := &d.plusB[i]
		if p.fh == nil {
			continue
		}
		n := fs.nodes.live(p.fh)
		if n == nil {
			continue // not the kernel's: the listing keeps what it is
		}
		n.mu.Lock()
		fs.applyAttrLocked(n, &p.attr, p.at)
		n.setParentLocked(dir)
		if p.attr.Type == proto.TypeDir {
			n.name = e.Name
		}
		n.mu.Unlock()
		fs.confirmName(dir, e.Name, n.id, p)
	}
	d.pos = len(d.batch)
}

// confirmName records that name in dir is node id, as a listing reply
// says, if the reply shows the version the name cache describes. A name
// the kernel was given for another node is taken back from it.
func (fs *FS) confirmName(dir *inode, name string, id NodeID, p *plusData) {
	dir.mu.Lock()
	defer dir.mu.Unlock()
	if p.dirVer == nil || !dir.namesValidLocked() || dir.nameVer != *p.dirVer {
		return
	}
	if de := dir.names[name]; de != nil && de.node == id {
		if p.at.After(de.validated) {
			de.validated = p.at
		}
		return
	} else if de != nil && de.kernel {
		fs.notify.InvalidateEntry(dir.id, name)
	}
	fs.setNameLocked(dir, name, id, p.at, false)
}
