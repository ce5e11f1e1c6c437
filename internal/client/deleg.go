package client

import (
	"context"
	"slices"
	"sync"
	"time"

	"hushfs/internal/proto"
)

// Read delegations (NFSv4.1, proto.Delegator; RFC 8881 §10.2-10.4), and
// what every delegation shares (write delegations' own part: wdeleg.go). An
// OPEN for reading asks for one; while it is held the server promises that
// nobody else changes the file without recalling it first, so:
//   - an open() for reading by an identity whose rights are cached sends no
//     call at all (close-to-open needs no revalidation: the delegation is
//     the proof nothing changed), and its last close sends no CLOSE either,
//     since nothing was opened at the server (ownerOpen.viaDeleg; READs go
//     under the delegation's stateid);
//   - the file's cached attributes stay valid past their lifetime, and its
//     cached data with them.
//
// A real OPEN's last close still sends its CLOSE: the open is a share
// reservation and the anchor of locks at the server, and keeping it past
// the close would need its own bookkeeping and return; the delegation
// makes every later open free, so a file read again and again costs one
// OPEN and one CLOSE per delegation, not per open.
//
// A CB_RECALL is answered at once; the return runs on a goroutine of its
// own: readers opened under the delegation get a real OPEN first (their
// READs would otherwise name a stateid about to go), then DELEGRETURN, and
// the attributes are revalidated normally from then on. A delegation the
// server revoked (SEQUENCE's status flags, which do not say which) is
// dropped at once with all others, before anything is asked: nothing is
// served from it after. Delegations unused for Options.DelegIdle go back, and all
// of them at unmount, so that the server's table does not fill.

// DefaultDelegIdle is how long a delegation no open has used is kept
// (Options.DelegIdle).
const DefaultDelegIdle = 60 * time.Second

// DefaultDelegMax is how many file delegations a mount keeps (Linux's
// delegation watermark is 5,000 too): each is a record on the server and
// in the kernel's lease table there, and one kept for a file read once
// long ago only makes another client's open of it wait for a recall.
const DefaultDelegMax = 5000

// heldDeleg is a delegation the mount holds.
type heldDeleg struct {
	n  *inode // the node it was granted on (its attributes stay valid)
	fh proto.FH
	st proto.StateID
	// write: a write delegation (wdeleg.go), whose space limit is limit.
	write bool
	limit uint64
	// dir: a directory delegation's trust (dirdeleg.go); nil for a file's.
	dir     *dirTrust
	counted bool      // GUARDED_BY(delegTable.mu): a dir delegation in ndir
	cred    Cred      // who got it: it goes back under that identity
	used    time.Time // last open under it
	// returning: recalled, revoked, idle or unmounting: no open may use it
	// any more.
	returning bool
}

// delegTable is the mount's delegations.
type delegTable struct {
	mu   sync.Mutex
	held map[string]*heldDeleg // GUARDED_BY(mu), by file handle
	// early are recalls of delegations not yet known: the CB_RECALL may
	// overtake the OPEN's reply that grants it. GUARDED_BY(mu)
	early   map[[12]byte]time.Time
	ndir    int  // GUARDED_BY(mu): directory delegations held
	closed  bool // GUARDED_BY(mu): unmounting, no more kept
	sweeper bool // GUARDED_BY(mu): the idle sweeper runs
	wg      sync.WaitGroup
}

// delegCallbacks is the mount's proto.Callbacks.
type delegCallbacks struct{ fs *FS }

func (d delegCallbacks) Recall(fh proto.FH, st proto.StateID, _ bool) { d.fs.recallDeleg(fh, st) }

func (d delegCallbacks) GetAttr(fh proto.FH) (uint64, uint64, bool) { return d.fs.heldAttrs(fh) }

func (d delegCallbacks) Revoked() { d.fs.dropAllDelegs("the server revoked state of ours") }

// initDelegs takes delegations where the server grants them (after the
// opener is known: delegations come with opens only).
func (fs *FS) initDelegs(srv proto.Server) {
	d, ok := srv.(proto.Delegator)
	if !ok || fs.opener == nil {
		return
	}
	fs.delegator = d
	fs.dl.held = map[string]*heldDeleg{}
	fs.dl.early = map[[12]byte]time.Time{}
	d.SetCallbacks(delegCallbacks{fs})
}

// keepDeleg keeps the delegation an OPEN of n by c brought, unless it was
// recalled already (or we are unmounting): then it goes back at once.
func (fs *FS) keepDeleg(n *inode, c *Cred, d proto.Delegation) {
	h := &heldDeleg{n: n, fh: n.fh, st: d.State, used: fs.now(), write: d.Type == proto.DelegWrite, limit: d.Limit,
		cred: Cred{UID: c.UID, GID: c.GID, Groups: append([]uint32(nil), c.Groups...)}}
	fs.dl.mu.Lock()
	_, recalled := fs.dl.early[d.State.Other]
	delete(fs.dl.early, d.State.Other)
	if d.Type == proto.DelegNone || recalled || fs.dl.closed || fs.dl.held[string(n.fh)] != nil {
		h.returning = true
		fs.dl.mu.Unlock()
		fs.returnDelegAsync(h)
		return
	}
	fs.dl.held[string(n.fh)] = h
	n.mu.Lock()
	n.delegated = true
	n.mu.Unlock()
	if !fs.dl.sweeper {
		fs.dl.sweeper = true
		fs.dl.wg.Add(1)
		go fs.sweepDelegs()
	}
	over := fs.overWatermarkLocked()
	fs.dl.mu.Unlock()
	for _, o := range over {
		fs.returnDelegAsync(o)
	}
}

// overWatermarkLocked marks for return, past Options.DelegMax held, the
// least recently used delegations whose file has nothing open here: a
// tenth of the maximum at once, so that a tool going through many files
// sorts the table once per tenth, not once per file. Fewer if more are
// in use.
//
// LOCKS_REQUIRED(fs.dl.mu)
func (fs *FS) overWatermarkLocked() []*heldDeleg {
	max := fs.opts.DelegMax
	if max <= 0 {
		max = DefaultDelegMax
	}
	kept := 0
	for _, h := range fs.dl.held {
		if !h.returning {
			kept++
		}
	}
	if kept <= max {
		return nil
	}
	var idle []*heldDeleg
	for _, h := range fs.dl.held {
		if !h.returning && (h.n == nil || fs.nodes.openCount(h.n) == 0) {
			idle = append(idle, h)
		}
	}
	slices.SortFunc(idle, func(a, b *heldDeleg) int { return a.used.Compare(b.used) })
	n := min(len(idle), kept-max+max/10)
	for _, h := range idle[:n] {
		h.returning = true
	}
	return idle[:n]
}

// openDelegated counts an open() of n by c with share access under the
// file's delegation, with no call, if there is one that covers it (a read
// delegation reading, a write delegation anything) and c's rights are
// known (want: the ACCESS bits the open needs). False: send an OPEN.
func (fs *FS) openDelegated(c *Cred, n *inode, share, want uint32) bool {
	if fs.delegator == nil {
		return false
	}
	if granted, ok := fs.cachedAccess(c, n, want, false); !ok || granted&want != want {
		return false
	}
	no := fs.opensOf(n)
	// Write-locked: a recall (which marks the delegation returning, then
	// takes no.mu to reopen its readers) sees this reader, or this sees
	// the recall; and an OPEN under way sees no owner change under it.
	no.mu.Lock()
	defer no.mu.Unlock()
	fs.dl.mu.Lock()
	h := fs.dl.held[string(n.fh)]
	if h == nil || h.returning || !h.write && share != proto.ShareRead || !fs.delegator.LeaseValid() {
		fs.dl.mu.Unlock()
		return false
	}
	h.used = fs.now()
	st, write := h.st, h.write
	fs.dl.mu.Unlock()
	no.vmu.Lock()
	defer no.vmu.Unlock()
	ow := no.owners[c.UID]
	switch {
	case ow == nil:
		ow = &ownerOpen{cred: Cred{UID: c.UID, GID: c.GID, Groups: append([]uint32(nil), c.Groups...)},
			st: st, viaDeleg: true}
		no.owners[c.UID] = ow
	case ow.viaDeleg || ow.held&share == share:
	case !write:
		return false // its open cannot read: an OPEN widens it
	}
	// A real open without the access is covered by the write delegation
	// meanwhile: I/O goes under the delegation (ioState), and its return
	// widens the open first (returnDeleg).
	if ow.viaDeleg {
		ow.held |= share
	}
	ow.count[share]++
	return true
}

// realizeLocked gives ow, opened under the delegation only, a real open
// (for a lock, a wider open, or before the delegation goes back).
//
// LOCKS_REQUIRED(no.mu)
func (fs *FS) realizeLocked(ctx context.Context, n *inode, no *nodeOpens, ow *ownerOpen) {
	no.vmu.Lock()
	via := ow.viaDeleg && no.owners[ow.cred.UID] == ow
	no.vmu.Unlock()
	if via {
		fs.reopenOwnerLocked(ctx, n, no, ow)
	}
}

// recallDeleg answers a CB_RECALL: the delegation is marked returning at
// once (no open uses it from now on) and given back from a goroutine, as
// the callback's answer must not wait for our calls.
func (fs *FS) recallDeleg(fh proto.FH, st proto.StateID) {
	if fs.delegator == nil {
		return
	}
	fs.dl.mu.Lock()
	h := fs.dl.held[string(fh)]
	if h == nil || h.st.Other != st.Other {
		// Not known (yet): the OPEN's reply is still on its way, or it went
		// back already. keepDeleg returns it if it comes.
		now := fs.now()
		for k, t := range fs.dl.early {
			if now.Sub(t) > time.Minute {
				delete(fs.dl.early, k)
			}
		}
		fs.dl.early[st.Other] = now
		fs.dl.mu.Unlock()
		return
	}
	if h.returning {
		fs.dl.mu.Unlock()
		return
	}
	h.returning = true
	if h.dir != nil {
		endDirTrust(h.n, h.dir, fs.now()) // at once: the change may be made already (a local one)
	}
	fs.dl.mu.Unlock()
	fs.returnDelegAsync(h)
}

// returnDelegAsync returns h (marked returning) on a goroutine.
func (fs *FS) returnDelegAsync(h *heldDeleg) {
	fs.dl.wg.Add(1)
	go func() {
		defer fs.dl.wg.Done()
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		fs.returnDeleg(ctx, h)
	}()
}

// returnDeleg gives h (marked returning) back: a write delegation's data
// and held times are written and committed first (flushDelegated); the
// descriptors opened under it get a real OPEN, or a wider one, and opens
// kept past their last close go (settleOpensLocked); then DELEGRETURN. The
// file's attributes are revalidated normally from then on.
func (fs *FS) returnDeleg(ctx context.Context, h *heldDeleg) {
	fs.readyReturn(ctx, h)
	fs.finishReturn(ctx, h, false)
}

// readyReturn does what goes before h's DELEGRETURN (returnDeleg).
func (fs *FS) readyReturn(ctx context.Context, h *heldDeleg) {
	if h.write {
		fs.flushDelegated(ctx, h)
	}
	fs.undelegate(h)
	if n := fs.nodes.lookupFH(h.fh); n != nil {
		n.mu.Lock()
		no := n.opens4
		n.mu.Unlock()
		if no != nil {
			no.mu.Lock()
			fs.settleOpensLocked(ctx, n, no, h)
			no.mu.Unlock()
		}
	}
	if h.dir != nil {
		fs.forgetChildrenNow(h)
	}
}

// finishReturn sends h's DELEGRETURN, unless returned (it went with
// another operation), and forgets h.
func (fs *FS) finishReturn(ctx context.Context, h *heldDeleg, returned bool) {
	if !returned {
		if err := fs.delegator.ReturnDelegation(ctx, &h.cred, h.fh, h.st); err != nil {
			fs.logf("hushfs: returning the delegation of a file: %v (the server takes it back at the lease's end)", err)
		}
	}
	fs.dl.mu.Lock()
	if fs.dl.held[string(h.fh)] == h {
		delete(fs.dl.held, string(h.fh))
	}
	if h.dir != nil && h.counted {
		h.counted = false
		fs.dl.ndir--
	}
	fs.dl.mu.Unlock()
}

// undelegate ends what h vouched for: its node's attributes expire as
// usual, and are fetched again at the next use.
func (fs *FS) undelegate(h *heldDeleg) {
	if h.n == nil {
		return
	}
	if h.dir != nil {
		fs.undelegateDir(h)
		return
	}
	fs.dl.mu.Lock()
	h.n.mu.Lock()
	h.n.delegated = false
	// Expired. Replies to calls sent before the cached attributes' call
	// stay refused (a listing's entry kept from the create would bring
	// back the size and mode from then), later ones count even if already
	// on their way (not invalidateAttr): nothing of ours changed the file,
	// and the OPEN that finds a revoked delegation out is sent before it is
	// dropped.
	h.n.attrValid = false
	if h.n.attrTime.After(h.n.attrStale) {
		h.n.attrStale = h.n.attrTime
	}
	h.n.mu.Unlock()
	fs.dl.mu.Unlock()
}

// dropAllDelegs stops using every delegation at once (revoked state, or
// unmount) and returns them from goroutines; a revoked one is freed.
func (fs *FS) dropAllDelegs(why string) {
	if fs.delegator == nil {
		return
	}
	fs.dl.mu.Lock()
	var drop []*heldDeleg
	for _, h := range fs.dl.held {
		if !h.returning {
			h.returning = true
			drop = append(drop, h)
		}
	}
	fs.dl.mu.Unlock()
	if len(drop) > 0 {
		fs.logf("hushfs: %s: giving back %d delegations", why, len(drop))
	}
	for _, h := range drop {
		fs.undelegate(h) // at once, before any call: nothing trusts them now
		fs.returnDelegAsync(h)
	}
}

// sweepDelegs returns delegations no open used for Options.DelegIdle
// whose file has no descriptor open here, until unmount.
func (fs *FS) sweepDelegs() {
	defer fs.dl.wg.Done()
	delegIdle := fs.opts.DelegIdle
	if delegIdle <= 0 {
		delegIdle = DefaultDelegIdle
	}
	t := time.NewTicker(delegIdle / 4)
	defer t.Stop()
	for {
		select {
		case <-fs.life.Done():
			return
		case <-t.C:
		}
		now := fs.now()
		fs.dl.mu.Lock()
		var idle []*heldDeleg
		for _, h := range fs.dl.held {
			if !h.returning && now.Sub(h.used) >= delegIdle && (h.n == nil || fs.nodes.openCount(h.n) == 0) {
				h.returning = true
				idle = append(idle, h)
			}
		}
		fs.dl.mu.Unlock()
		for _, h := range idle {
			fs.returnDelegAsync(h)
		}
	}
}

// closeDelegs returns every delegation at unmount, waiting for the returns
// (within ctx: a dead server does not hold the unmount).
func (fs *FS) closeDelegs(ctx context.Context) {
	if fs.delegator == nil {
		return
	}
	fs.dl.mu.Lock()
	fs.dl.closed = true
	fs.dl.mu.Unlock()
	fs.dropAllDelegs("unmounting")
	done := make(chan struct{})
	go func() {
		fs.dl.wg.Wait()
		close(done)
	}()
	select {
	case <-done:
	case <-ctx.Done():
	}
}
