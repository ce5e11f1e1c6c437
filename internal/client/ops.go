package client

import (
	"context"
	"crypto/rand"
	"encoding/binary"
	"fmt"
	"strconv"
	"syscall"
	"time"

	"hushfs/internal/proto"
)

// Entry is the result of a name lookup or creation.
type Entry struct {
	Node     NodeID // 0 with a negative entry (the name does not exist)
	Attr     Attr
	EntryTTL time.Duration // how long the name → node binding may be trusted
	AttrTTL  time.Duration // how long Attr may be trusted
}

// node returns the node for id, or ESTALE if the kernel names a node we
// no longer have.
func (fs *FS) node(id NodeID) (*inode, error) {
	n := fs.nodes.get(id)
	if n == nil {
		return nil, syscall.ESTALE
	}
	return n, nil
}

// GetAttr returns a node's attributes, from the cache while it is valid.
func (fs *FS) GetAttr(ctx context.Context, c *Cred, id NodeID) (Attr, time.Duration, error) {
	n, err := fs.node(id)
	if err != nil {
		return Attr{}, 0, err
	}
	// A truncate of the file under way here first (inode.sizing), as for
	// an open: the kernel ignores attributes while it runs. A reader that
	// opened just before the truncate began asked for the size there, the
	// kernel dropped the answer, and read with the size it had cached
	// before another client's append (the recall soak: the append's old
	// version, read after its close).
	n.sizing.Lock()
	n.sizing.Unlock()
	return fs.getAttr(ctx, c, n)
}

// getAttr is GetAttr for the core's own callers, which may hold sizing.
func (fs *FS) getAttr(ctx context.Context, c *Cred, n *inode) (Attr, time.Duration, error) {
	var err error
	now := fs.now()
	n.mu.Lock()
	a, ttl, ok := n.cachedAttrLocked(now)
	n.mu.Unlock()
	if !ok {
		// Expired: from a READDIRPLUS pass of its directory if one is
		// under way or due (bulk.go), else by GETATTR.
		if a, ttl, ok, err = fs.attrFromRefresh(ctx, c, n); err != nil {
			return Attr{}, 0, err
		}
	}
	if !ok {
		if a, ttl, err = fs.getattrRPC(ctx, c, n); err != nil {
			return Attr{}, 0, err
		}
	}
	return fs.localAttr(n, &a), ttl, nil
}

// getattrRPC asks the server for a node's attributes and caches them.
// Concurrent calls for one node share one GETATTR.
func (fs *FS) getattrRPC(ctx context.Context, c *Cred, n *inode) (proto.Attr, time.Duration, error) {
	return fs.getattrShared(ctx, c, n, false)
}

// getattrShared is getattrRPC; a fresh caller (close-to-open) joins no
// GETATTR sent before it came, which could miss a change made just before
// the open.
func (fs *FS) getattrShared(ctx context.Context, c *Cred, n *inode, fresh bool) (proto.Attr, time.Duration, error) {
	key := "g" + strconv.FormatUint(uint64(n.id), 10)
	if fs.opts.NoAC {
		key = ""
	}
	v, err := fs.flightOrCall(ctx, key, fresh, func() (any, error) {
		at := fs.now()
		res, err := fs.getattrCall(ctx, c, n, at)
		if err != nil {
			return nil, err
		}
		if res.Status != nil {
			fs.noteStale(n, res.Status)
			return nil, res.Status
		}
		n.mu.Lock()
		fs.applyAttrLocked(n, &res.Attr, at)
		n.mu.Unlock()
		return &res.Attr, nil
	})
	if err != nil {
		return proto.Attr{}, 0, err
	}
	// What the node now holds, not the reply: the reply may be older than
	// what the node learnt meanwhile (a WRITE's reply), or than the call a
	// caller joined it for.
	n.mu.Lock()
	defer n.mu.Unlock()
	if !n.attrValid {
		return *v.(*proto.Attr), 0, nil
	}
	_, left, _ := n.cachedAttrLocked(fs.now())
	return n.attr, left, nil
}

// noteStale marks a node whose handle the server no longer knows, so that
// no cached name leads to it again (the next lookup asks the server).
// (v3: NFS3ERR_STALE and NFS3ERR_BADHANDLE, both ESTALE.)
func (fs *FS) noteStale(n *inode, st error) {
	if proto.ErrnoOf(st) == syscall.ESTALE {
		fs.nodes.markStale(n)
	}
}

// localAttr converts attributes for the kernel, accounting for what was
// done here and not yet sent: the file is as large as its dirty data
// reaches, and has the times held for that data.
//
// A WRITE of ours that completes after a was copied puts its reply's
// attributes into the node before it takes its data off the in-flight
// list (sendOne), so a copied before and the lists read after show
// neither: the size before the data, which the kernel takes as the
// file's (a read right after a close returned nothing). So once the
// lists are read, the node's attributes are used instead of a when they
// are newer (newestAttr): those of a WRITE completed meanwhile, or of a
// reply answered before the one a came from but run after it.
func (fs *FS) localAttr(n *inode, a *proto.Attr) Attr {
	for try := 1; ; try++ {
		out := attrFromProto(a)
		fs.sendingShown(n, &out)
		fs.wb.localAttrs(n, &out)
		fs.dirTimesShown(n, &out)
		newer := fs.newestAttr(n, a)
		if try == 3 || newer.Ctime == a.Ctime {
			return out
		}
		a = &newer
	}
}

// entryFor builds the kernel's entry for node n (already referenced). The
// timeouts are what is left of our own cache lifetimes, so the kernel never
// trusts a fact longer than we would.
func (fs *FS) entryFor(n *inode, a *proto.Attr, dir *inode) Entry {
	now := fs.now()
	return Entry{Node: n.id, Attr: fs.localAttr(n, a), EntryTTL: dir.attrLeft(now), AttrTTL: n.attrLeft(now)}
}

// attrLeft returns how long the node's cached attributes stay valid.
func (n *inode) attrLeft(now time.Time) time.Duration {
	n.mu.Lock()
	defer n.mu.Unlock()
	_, left, _ := n.cachedAttrLocked(now)
	return left
}

// refEntry returns an entry for a node we already have, with a reference.
func (fs *FS) refEntry(ctx context.Context, c *Cred, n, dir *inode) (Entry, error) {
	a, err := fs.attrOrFetch(ctx, c, n)
	if err != nil {
		return Entry{}, err
	}
	fs.nodes.ref(n.fh)
	return fs.entryFor(n, &a, dir), nil
}

// attrOrFetch returns the node's cached attributes if valid, else fetches.
func (fs *FS) attrOrFetch(ctx context.Context, c *Cred, n *inode) (proto.Attr, error) {
	n.mu.Lock()
	a, _, ok := n.cachedAttrLocked(fs.now())
	n.mu.Unlock()
	if ok {
		return a, nil
	}
	a, _, err := fs.getattrRPC(ctx, c, n)
	return a, err
}

// Forget drops nlookup kernel references on a node.
func (fs *FS) Forget(id NodeID, nlookup uint64) { fs.nodes.forget(id, nlookup) }

// TimeHow says how SetAttr sets a time.
type TimeHow int

const (
	TimeOmit TimeHow = iota // leave unchanged
	TimeNow                 // the server's current time
	TimeSet                 // the given time
)

// SetTime is one time of a SetAttr.
type SetTime struct {
	How  TimeHow
	Time Timespec
}

// fits reports whether the protocol can carry the time (NFSv3: nfstime3
// seconds are unsigned 32 bits, so nothing before 1970 or from 2106 on).
// Anything else would be stored as another time (2^32 as 1970), so it is
// refused with EOVERFLOW, as the C library refuses times a 32-bit time_t
// cannot hold.
func (t SetTime) fits(l proto.Limits) bool {
	return t.How != TimeSet || l.TimeFits(t.Time.Sec)
}

// SetAttrIn says which attributes to change.
type SetAttrIn struct {
	SetMode bool
	Mode    uint32
	SetUID  bool
	UID     uint32
	SetGID  bool
	GID     uint32
	SetSize bool
	Size    uint64
	Atime   SetTime
	Mtime   SetTime
	// KillSetID is FUSE's KILL_SUIDGID: the change clears set-id bits on
	// the server (a size change by a caller without CAP_FSETID, any change
	// of owner), so one that would otherwise change nothing is still sent
	// for a file with such bits.
	KillSetID bool
}

func (in *SetAttrIn) sattr() proto.SetAttrs {
	s := proto.SetAttrs{
		SetMode: in.SetMode, Mode: in.Mode & 07777,
		SetUID: in.SetUID, UID: in.UID,
		SetGID: in.SetGID, GID: in.GID,
		SetSize: in.SetSize, Size: in.Size,
	}
	conv := func(t SetTime) proto.SetTime {
		switch t.How {
		case TimeNow:
			return proto.SetTime{How: proto.SetToServerTime}
		case TimeSet:
			return proto.SetTime{How: proto.SetToClientTime, Time: proto.Time{Sec: t.Time.Sec, Nsec: t.Time.Nsec}}
		}
		return proto.SetTime{How: proto.DontChange}
	}
	s.Atime, s.Mtime = conv(in.Atime), conv(in.Mtime)
	return s
}

// SetAttr changes attributes. Dirty data is written first, so that a size
// or time set now is not undone by data sent later; times alone set by the
// owner while data is pending are held until it is sent (heldtimes.go),
// and go out with the next SETATTR.
func (fs *FS) SetAttr(ctx context.Context, c *Cred, id NodeID, in SetAttrIn) (Attr, time.Duration, error) {
	n, err := fs.node(id)
	if err != nil {
		return Attr{}, 0, err
	}
	if !in.Atime.fits(fs.limits) || !in.Mtime.fits(fs.limits) {
		return Attr{}, 0, syscall.EOVERFLOW
	}
	if in.SetSize {
		n.sizing.RLock() // opens wait (Open)
		defer n.sizing.RUnlock()
	}
	if fs.dropNoops(n, &in) || in.timesOnly() && (fs.wb.holdTimes(n, c, &in) || fs.holdDirTimes(n, c, &in)) {
		// Nothing would change, or nothing yet: answer from the cache
		// (valid either way, if maybe past its lifetime), send nothing.
		n.mu.Lock()
		a, left := n.attr, time.Duration(0)
		if _, l, ok := n.cachedAttrLocked(fs.now()); ok {
			left = l
		}
		n.mu.Unlock()
		return fs.localAttr(n, &a), left, nil
	}
	held, dirHeld := fs.wb.takeTimes(n), fs.takeDirTimes(n)
	in.mergeHeld(held)
	in.mergeHeld(dirHeld)
	if held != nil || dirHeld != nil {
		defer fs.sendingTimes(n, &in, held, dirHeld)()
	}
	if in.SetSize || in.Atime.How != TimeOmit || in.Mtime.How != TimeOmit {
		// Never abandoned half-way (see await): the data would be lost.
		flush := func(ctx context.Context) error { return fs.wb.flushOrdered(ctx, n) }
		if err := fs.await(ctx, flush); err != nil {
			fs.wb.restoreTimes(n, held)
			fs.restoreDirTimes(n, dirHeld)
			return Attr{}, 0, err
		}
	}
	a, ttl, err := fs.setattrRPC(ctx, c, n, in)
	if err != nil {
		fs.wb.restoreTimes(n, held)
		fs.restoreDirTimes(n, dirHeld)
	}
	return a, ttl, err
}

// notOurs drops the pre-operation attributes of a SETATTR that set
// neither size nor mtime but whose reply shows them changed: another
// writer ran between the attributes before and the SETATTR (v4.1's are a
// GETATTR in the same COMPOUND, not atomic with it), and its data must
// not be taken for what we had (a chmod beside a rewrite on the server
// kept the old bytes as the new size's).
func notOurs(w *proto.Wcc, in SetAttrIn) {
	if in.SetSize || in.Mtime.How != TimeOmit || !w.Before.Present || !w.After.Present {
		return
	}
	if b, a := &w.Before.Attr, &w.After.Attr; b.Size != a.Size || b.Mtime != a.Mtime {
		w.Before.Present = false
	}
}

// setattrRPC sends one SETATTR and caches its result.
func (fs *FS) setattrRPC(ctx context.Context, c *Cred, n *inode, in SetAttrIn) (Attr, time.Duration, error) {
	at := fs.now()
	var res proto.WccRes
	call := func(st *proto.StateID) (error, error) {
		var err error
		if st == nil {
			res, err = fs.srv.SetAttr(ctx, c, n.fh, in.sattr())
		} else {
			res, err = fs.sio.SetAttrState(ctx, c, *st, n.fh, in.sattr())
		}
		return res.Status, err
	}
	var err error
	if in.SetSize {
		err = fs.underState(ctx, n, c, true, call) // a size goes under an open
	} else {
		_, err = call(nil)
	}
	if err != nil {
		return Attr{}, 0, err
	}
	notOurs(&res.Wcc, in)
	fs.applyWcc(n, &res.Wcc, at, false)
	if res.Status != nil {
		fs.noteStale(n, res.Status)
		return Attr{}, 0, res.Status
	}
	if fs.lostLastName(n, &res.Wcc.After) {
		// Came through a name cached before another client renamed over
		// or removed the file (the server kept it for an open of ours
		// whose CLOSE is still queued): the kernel looks the name up again
		// (ESTALE) and changes the file it leads to now, as an OPEN does
		// (openstate.go).
		fs.nodes.markStale(n)
		return Attr{}, 0, syscall.ESTALE
	}
	if in.SetSize {
		fs.wb.truncated(n, in.Size)
	}
	if !res.Wcc.After.Present {
		return fs.getAttr(ctx, c, n)
	}
	// localAttr tells the kernel the node's attributes instead if they are
	// newer (newestAttr).
	return fs.localAttr(n, &res.Wcc.After.Attr), n.attrLeft(fs.now()), nil
}

// newestAttr is what the kernel is told a reply's call left: the reply's
// attributes, or the node's cached ones if they are newer (a later ctime:
// the server ran another call of ours after this one, and its reply came
// first). The kernel takes a SETATTR reply's size as the file's: a chmod
// that the server ran before our WRITE, answered after the WRITE's reply,
// told it the size before the data, and a read right after the write and
// close returned nothing.
func (fs *FS) newestAttr(n *inode, a *proto.Attr) proto.Attr {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.attrValid && n.attr.Type == a.Type && compareTime(n.attr.Ctime, a.Ctime) > 0 {
		return n.attr
	}
	return *a
}

// lostLastName reports whether attributes of n a reply brought show a
// regular file with no name left that has no descriptor open here (NFSv4.1
// opens only: a name the kernel reached it by is stale).
func (fs *FS) lostLastName(n *inode, a *proto.PostAttr) bool {
	if fs.opener == nil || !a.Present || a.Attr.Type != proto.TypeReg || a.Attr.Nlink != 0 {
		return false
	}
	return !fs.opensOf(n).descriptors()
}

// dropNoops clears the parts of a SETATTR that a valid cache shows would
// change nothing — chmod to the current mode, chown to the current owner,
// truncate to the current size with nothing dirty under a file delegation
// (unless they clear set-id bits: KillSetID) — and reports whether
// nothing is left to send. A time is never dropped: the kernel sends no
// atime updates of its own to a FUSE file system (its inodes are
// S_NOATIME), so every time that arrives is an explicit utimensat. A size
// is dropped only on a delegation's word: attributes within their
// lifetime may be another writer's old ones (truncate(2) opens nothing,
// so close-to-open did not refresh them), and a truncation dropped on
// them is lost (the recall soak: a truncate to the length of a version
// since rewritten on the server's disk, then an append, left the whole
// rewrite before the appended line).
func (fs *FS) dropNoops(n *inode, in *SetAttrIn) bool {
	n.mu.Lock()
	a, _, valid := n.cachedAttrLocked(fs.now())
	delegated := n.delegated
	n.mu.Unlock()
	if !valid {
		return false
	}
	if in.SetMode && in.Mode&07777 == a.Mode&07777 {
		in.SetMode = false
	}
	// Locally a chown or truncation clears set-id bits even when it
	// changes nothing else; the server does it when asked.
	kills := in.KillSetID && a.Type == proto.TypeReg && a.Mode&(syscall.S_ISUID|syscall.S_ISGID) != 0
	if in.SetUID && in.UID == a.UID && !kills {
		in.SetUID = false
	}
	if in.SetGID && in.GID == a.GID && !kills {
		in.SetGID = false
	}
	if in.SetSize && in.Size == a.Size && delegated && fs.wb.dirtyEnd(n) == 0 && !kills {
		in.SetSize = false
	}
	return !in.SetMode && !in.SetUID && !in.SetGID && !in.SetSize &&
		in.Atime.How == TimeOmit && in.Mtime.How == TimeOmit
}

// finishCreate turns the reply of CREATE, MKDIR, SYMLINK or MKNOD into a
// referenced node, asking for the handle or attributes if the server left
// them out, as RFC 1813 allows.
func (fs *FS) finishCreate(ctx context.Context, c *Cred, dir *inode, name string, res *proto.CreateRes, at time.Time) (Entry, error) {
	fs.applyDirOpWcc(dir, &res.DirWcc, at, res.Status, name, syscall.EEXIST)
	if res.Status != nil {
		// A directory another client removed: its name must stop leading
		// here, or the kernel's retry of the create (a fresh walk of the
		// path) would be handed the same dead directory again.
		fs.noteStale(dir, res.Status)
		return Entry{}, res.Status
	}
	if !res.FH.Present || !fs.usableFH(res.FH.FH) {
		return fs.Lookup(ctx, c, dir.id, name)
	}
	n := fs.nodes.ref(res.FH.FH)
	fs.applyAttr(n, &res.Attr, at)
	a, err := fs.attrOrFetch(ctx, c, n)
	if err != nil {
		fs.nodes.forget(n.id, 1)
		return Entry{}, err
	}
	n.mu.Lock()
	n.setParentLocked(dir)
	if a.Type == proto.TypeDir {
		n.name = name
		// Made just now: empty in the version the reply shows.
		if res.Attr.Present && versionOf(&res.Attr.Attr) == versionOf(&a) {
			fs.madeEmptyLocked(n)
		}
	}
	newFileLocked(n, &a)
	n.mu.Unlock()
	fs.changeName(dir, name, n, at)
	return fs.entryFor(n, &a, dir), nil
}

// newFileLocked records that n was just created by us: its data is what
// we will write, nothing cached to distrust.
//
// LOCKS_REQUIRED(n.mu)
func newFileLocked(n *inode, a *proto.Attr) {
	n.dataValid, n.dataMtime, n.dataSize = true, a.Mtime, a.Size
}

// Mkdir creates a directory.
func (fs *FS) Mkdir(ctx context.Context, c *Cred, parent NodeID, name string, mode uint32) (Entry, error) {
	if err := fs.checkName(name); err != nil {
		return Entry{}, err
	}
	dir, err := fs.node(parent)
	if err != nil {
		return Entry{}, err
	}
	// A name changes: held times go first (dirtimes.go).
	if err := fs.sendDirTimes(ctx, dir); err != nil {
		return Entry{}, err
	}
	at := fs.now()
	res, err := fs.srv.Mkdir(ctx, c, dir.fh, name, proto.SetAttrs{SetMode: true, Mode: mode & 07777})
	if err != nil {
		return Entry{}, err
	}
	return fs.finishCreate(ctx, c, dir, name, &res, at)
}

// Symlink creates a symbolic link holding target verbatim.
func (fs *FS) Symlink(ctx context.Context, c *Cred, parent NodeID, name, target string) (Entry, error) {
	if err := fs.checkName(name); err != nil {
		return Entry{}, err
	}
	dir, err := fs.node(parent)
	if err != nil {
		return Entry{}, err
	}
	// A name changes: held times go first (dirtimes.go).
	if err := fs.sendDirTimes(ctx, dir); err != nil {
		return Entry{}, err
	}
	at := fs.now()
	res, err := fs.srv.Symlink(ctx, c, dir.fh, name, target, proto.SetAttrs{SetMode: true, Mode: 0777})
	if err != nil {
		return Entry{}, err
	}
	return fs.finishCreate(ctx, c, dir, name, &res, at)
}

// Mknod creates a FIFO, socket or device node; a regular file is created
// with CREATE.
func (fs *FS) Mknod(ctx context.Context, c *Cred, parent NodeID, name string, mode, rdev uint32) (Entry, error) {
	if err := fs.checkName(name); err != nil {
		return Entry{}, err
	}
	dir, err := fs.node(parent)
	if err != nil {
		return Entry{}, err
	}
	var typ proto.FileType
	switch mode & syscall.S_IFMT {
	case syscall.S_IFREG, 0:
		e, _, err := fs.create(ctx, c, dir, name, mode, false, false, 0)
		return e, err
	case syscall.S_IFIFO:
		typ = proto.TypeFifo
	case syscall.S_IFSOCK:
		typ = proto.TypeSock
	case syscall.S_IFCHR:
		typ = proto.TypeChr
	case syscall.S_IFBLK:
		typ = proto.TypeBlk
	default:
		return Entry{}, syscall.EINVAL
	}
	// The kernel's dev_t, as major and minor numbers.
	dev := proto.Device{Major: (rdev >> 8) & 0xfff, Minor: rdev&0xff | (rdev>>12)&0xfff00}
	// A name changes: held times go first (dirtimes.go).
	if err := fs.sendDirTimes(ctx, dir); err != nil {
		return Entry{}, err
	}
	at := fs.now()
	res, err := fs.srv.Mknod(ctx, c, dir.fh, name, typ, proto.SetAttrs{SetMode: true, Mode: mode & 07777}, dev)
	if err != nil {
		return Entry{}, err
	}
	return fs.finishCreate(ctx, c, dir, name, &res, at)
}

// create sends CREATE carrying the mode: GUARDED for O_EXCL, UNCHECKED
// otherwise (see DEVELOPERS.md, "Creating files"). A GUARDED create also
// sets the new file's atime to a verifier (createVerifier), which tells a
// file an earlier transmission of this very call made from someone else's:
// a server without a duplicate request cache answers a retransmitted
// GUARDED CREATE with EEXIST.
//
// With share set (v4.1) the create is an OPEN that creates, and the file
// stays open for the caller's descriptor; the share access it holds is
// returned.
func (fs *FS) create(ctx context.Context, c *Cred, dir *inode, name string, mode uint32, excl, trunc bool, share uint32) (Entry, uint32, error) {
	how := proto.CreateHow{Mode: proto.Unchecked, Attrs: proto.SetAttrs{SetMode: true, Mode: mode & 07777}}
	var verf proto.Time
	if excl {
		var err error
		if verf, err = fs.createVerifier(); err != nil {
			return Entry{}, 0, err
		}
		how.Mode = proto.Guarded
		how.Attrs.Atime = proto.SetTime{How: proto.SetToClientTime, Time: verf}
	} else if trunc {
		how.Attrs.SetSize, how.Attrs.Size = true, 0
	}
	// A name changes: held times go first (dirtimes.go).
	if err := fs.sendDirTimes(ctx, dir); err != nil {
		return Entry{}, 0, err
	}
	at := fs.now()
	var res proto.CreateRes
	var st proto.StateID
	var deleg proto.Delegation
	var err error
	if share != 0 {
		if how.Attrs.SetSize {
			share |= proto.ShareWrite // truncating needs it
		}
		res, st, deleg, err = fs.createOpen(ctx, c, dir, name, how, share)
	} else {
		res, err = fs.srv.Create(ctx, c, dir.fh, name, how)
	}
	if err != nil {
		return Entry{}, 0, err
	}
	e, err := fs.finishCreate(ctx, c, dir, name, &res, at)
	if share != 0 && res.Status == nil {
		// Opened whatever became of the entry: counted, or closed.
		var n *inode
		if err == nil {
			n = fs.nodes.get(e.Node)
		}
		fs.adoptOpen(ctx, c, n, res.FH.FH, st, deleg, share)
		if n == nil && err == nil {
			err = syscall.ESTALE
		}
	}
	// (A session's exactly-once replies leave no retransmitted create to
	// recognise: v4.1's EEXIST is another's file.)
	if excl && share == 0 && proto.ErrnoOf(err) == syscall.EEXIST {
		if mine, ok := fs.createdEarlier(ctx, c, dir, name, verf); ok {
			e, err = mine, nil
		}
	}
	if err != nil {
		return Entry{}, 0, err
	}
	if n := fs.nodes.get(e.Node); n != nil {
		fs.seedAccess(c, n, at)
	}
	return e, share, nil
}

// createVerifier returns the atime a GUARDED CREATE gives its file: now,
// with random nanoseconds. It is the file's creation time to anyone
// looking, and 30 random bits to us.
func (fs *FS) createVerifier() (proto.Time, error) {
	var b [4]byte
	if _, err := rand.Read(b[:]); err != nil {
		return proto.Time{}, fmt.Errorf("create verifier: %w", err)
	}
	return proto.Time{Sec: fs.now().Unix(), Nsec: binary.BigEndian.Uint32(b[:]) % 1e9}, nil
}

// createdEarlier handles EEXIST for our GUARDED CREATE of name in dir: if
// the file there has the create's verifier as its atime, an earlier
// transmission of the call made it (a server without a duplicate request
// cache ran it twice), and the create succeeded. It returns the file's
// entry, referenced, if so.
func (fs *FS) createdEarlier(ctx context.Context, c *Cred, dir *inode, name string, verf proto.Time) (Entry, bool) {
	// The EEXIST dropped the name from the caches: this asks the server.
	e, err := fs.Lookup(ctx, c, dir.id, name)
	if err != nil {
		return Entry{}, false
	}
	n := fs.nodes.get(e.Node)
	if n == nil {
		return Entry{}, false
	}
	n.mu.Lock()
	ours := n.attrValid && n.attr.Type == proto.TypeReg && n.attr.Atime == verf
	if ours {
		newFileLocked(n, &n.attr)
	}
	n.mu.Unlock()
	if !ours {
		fs.nodes.forget(e.Node, 1)
		return Entry{}, false
	}
	fs.logf("hushfs: directory %s: CREATE of %q answered EEXIST, but the file is the one an earlier transmission of the same call made (the server ran it twice: no duplicate request cache?); created", fs.describeDir(dir), name)
	return e, true
}

// pathMax is PATH_MAX: a symbolic link's target, with its terminating NUL,
// must fit in it for the kernel to take it whole.
const pathMax = 4096

// Readlink returns a symbolic link's target; one the kernel cannot take
// (PATH_MAX bytes or more) is ENAMETOOLONG.
func (fs *FS) Readlink(ctx context.Context, c *Cred, id NodeID) ([]byte, error) {
	n, err := fs.node(id)
	if err != nil {
		return nil, err
	}
	at := fs.now()
	res, err := fs.srv.Readlink(ctx, c, n.fh)
	if err != nil {
		return nil, err
	}
	fs.applyAttr(n, &res.Attr, at)
	if res.Status != nil {
		return nil, res.Status
	}
	if len(res.Target) >= pathMax {
		return nil, syscall.ENAMETOOLONG // the kernel would cut it short
	}
	return append([]byte(nil), res.Target...), nil
}

// Link makes newName in newParent another name of node id.
func (fs *FS) Link(ctx context.Context, c *Cred, id, newParent NodeID, newName string) (Entry, error) {
	if err := fs.checkName(newName); err != nil {
		return Entry{}, err
	}
	n, err := fs.node(id)
	if err != nil {
		return Entry{}, err
	}
	dir, err := fs.node(newParent)
	if err != nil {
		return Entry{}, err
	}
	// A name changes: held times go first (dirtimes.go).
	if err := fs.sendDirTimes(ctx, dir); err != nil {
		return Entry{}, err
	}
	at := fs.now()
	res, err := fs.srv.Link(ctx, c, n.fh, dir.fh, newName)
	if err != nil {
		return Entry{}, err
	}
	fs.applyDirOpWcc(dir, &res.DirWcc, at, res.Status, newName, syscall.EEXIST)
	fs.applyAttr(n, &res.Attr, at)
	if !res.Attr.Present {
		fs.invalidateAttr(n) // nlink and ctime changed
	}
	if res.Status != nil {
		return Entry{}, res.Status
	}
	a, err := fs.attrOrFetch(ctx, c, n)
	if err != nil {
		return Entry{}, err
	}
	fs.nodes.ref(n.fh)
	fs.changeName(dir, newName, n, at)
	return fs.entryFor(n, &a, dir), nil
}

// StatFS is a file system's capacity, as statfs(2) reports it.
type StatFS struct {
	Blocks, Bfree, Bavail uint64 // in units of Bsize
	Files, Ffree          uint64
	Bsize                 uint32
	NameLen               uint32
}

// StatFS reports the capacity of the file system holding node id.
func (fs *FS) StatFS(ctx context.Context, c *Cred, id NodeID) (StatFS, error) {
	n, err := fs.node(id)
	if err != nil {
		return StatFS{}, err
	}
	var res proto.FsStatRes
	known := false
	if sk, ok := fs.srv.(proto.SpaceKnower); ok {
		n.mu.Lock()
		fsid, valid := n.attr.Fsid, n.attrValid
		n.mu.Unlock()
		if valid {
			res, known = sk.KnownFsStat(fsid)
		}
	}
	if !known {
		at := fs.now()
		res, err = fs.srv.FsStat(ctx, c, n.fh)
		if err != nil {
			return StatFS{}, err
		}
		fs.applyAttr(n, &res.Attr, at)
	}
	if res.Status != nil {
		return StatFS{}, res.Status
	}
	const bsize = 4096
	return StatFS{
		Blocks: res.Tbytes / bsize, Bfree: res.Fbytes / bsize, Bavail: res.Abytes / bsize,
		Files: res.Tfiles, Ffree: res.Afiles, Bsize: bsize, NameLen: fs.nameMax,
	}, nil
}
