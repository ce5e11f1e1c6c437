package client

import (
	"cmp"
	"syscall"
	"time"

	"hushfs/internal/proto"
)

// Timespec is a time as the kernel takes it.
type Timespec struct {
	Sec  int64
	Nsec uint32
}

// Attr is a file's attributes in the form the kernel takes them.
type Attr struct {
	Ino    uint64 // the server's fileid, so ls -i and find's cycle checks work
	Mode   uint32 // file type (S_IF*) and permission bits
	Nlink  uint32
	UID    uint32
	GID    uint32
	Size   uint64
	Blocks uint64 // 512-byte blocks
	Rdev   uint32
	Atime  Timespec
	Mtime  Timespec
	Ctime  Timespec
}

var typeBits = map[proto.FileType]uint32{
	proto.TypeReg: syscall.S_IFREG, proto.TypeDir: syscall.S_IFDIR, proto.TypeBlk: syscall.S_IFBLK,
	proto.TypeChr: syscall.S_IFCHR, proto.TypeLnk: syscall.S_IFLNK, proto.TypeSock: syscall.S_IFSOCK,
	proto.TypeFifo: syscall.S_IFIFO,
}

func attrFromProto(a *proto.Attr) Attr {
	return Attr{
		Ino:    a.Fileid,
		Mode:   typeBits[a.Type] | a.Mode&07777,
		Nlink:  a.Nlink,
		UID:    a.UID,
		GID:    a.GID,
		Size:   a.Size,
		Blocks: (a.Used + 511) / 512,
		Rdev:   uint32(a.Rdev.Major&0xfff)<<8 | a.Rdev.Minor&0xff | (a.Rdev.Minor&^0xff)<<12,
		Atime:  Timespec{a.Atime.Sec, a.Atime.Nsec},
		Mtime:  Timespec{a.Mtime.Sec, a.Mtime.Nsec},
		Ctime:  Timespec{a.Ctime.Sec, a.Ctime.Nsec},
	}
}

// IsDir reports whether the attributes are a directory's.
func (a *Attr) IsDir() bool { return a.Mode&syscall.S_IFMT == syscall.S_IFDIR }

// sameChange reports whether two attribute sets show the same version of
// the file's data and metadata.
func sameChange(a, b *proto.Attr) bool {
	return a.Size == b.Size && a.Mtime == b.Mtime && a.Ctime == b.Ctime
}

// sameVersion reports whether a and b describe the same version of a
// file's data: sameChange, and the same change attribute where both have
// one (it moves where timestamps may not).
func sameVersion(a, b *proto.Attr) bool {
	return sameChange(a, b) && (!a.HasChange || !b.HasChange || a.Change == b.Change)
}

// timeoBounds returns the attribute cache lifetime bounds for a file type.
func (fs *FS) timeoBounds(t proto.FileType) (min, max time.Duration) {
	if fs.opts.NoAC {
		return 0, 0
	}
	if t == proto.TypeDir {
		return fs.opts.AcDirMin, fs.opts.AcDirMax
	}
	return fs.opts.AcRegMin, fs.opts.AcRegMax
}

// applyAttrLocked records attributes fetched by an RPC sent at 'at', unless
// they are older than what the node has (staleLocked). The lifetime doubles
// while the file stays unchanged and drops back to the minimum when it
// changes, as nfs(5) describes. Cached data stays valid only while mtime
// and size are those it was read at; a directory's names only while it
// keeps the version they were cached for. What stops being valid, the
// kernel is told to forget.
//
// LOCKS_REQUIRED(n.mu)
func (fs *FS) applyAttrLocked(n *inode, a *proto.Attr, at time.Time) {
	if fs.staleLocked(n, a, at) {
		return
	}
	fs.setAttrLocked(n, a, at)
}

// staleLocked reports whether attributes a, from a call sent at 'at', are
// older than what n has.
//
// A call sent after the reply that brought the cached attributes arrived
// ran after that reply's call: its attributes are newer, whatever their
// ctime. This is what lets a server whose clock went back (a clock step, a
// restore) be believed at once: its ctimes then go backwards, and the
// replies to our own WRITEs and the GETATTR of close-to-open used to be
// dropped as older until the cached attributes expired (30-60 s of an
// application not seeing its own append).
//
// Only among calls that were in flight together is the order unknown: the
// server runs calls concurrently, so the order they were sent in is not
// the order they ran in. A GETATTR sent while our WRITE was on its way may
// run before it and come back after it with the size from before; our
// pipelined WRITEs come back in any order, each with the size the file had
// when it ran; a READ sent after our SETATTR may run before it. Such a
// reply must not undo what the newer one said: it used to shrink the file
// under its writer (the kernel then cut its page cache, and bytes past the
// old size counted as holes, read and even written back as zeros) or bring
// back the size from before a truncate. For a regular file the server's
// ctime tells: it moves with every change, so an older ctime is an earlier
// state while the cached attributes are fresh, a later one a later state.
// An equal ctime with two sizes is a call that ran during a write: the
// larger size is the later state (below). Otherwise an equal ctime
// (timestamps too coarse to tell) falls back to the order the calls were
// sent in, as does an older one once the cached attributes have expired.
// Directories are ordered by sending, their names by version, except that
// a later ctime is a later state for them too.
// (A reply whose pre-operation attributes are the cached ones ran right
// after them: applyWcc takes it without asking here.)
//
// LOCKS_REQUIRED(n.mu)
func (fs *FS) staleLocked(n *inode, a *proto.Attr, at time.Time) bool {
	if at.Before(n.attrStale) {
		return true // sent before a change we know of and it may not show
	}
	if !n.attrValid || at.After(n.attrRecv) {
		return false
	}
	c := compareTime(a.Ctime, n.attr.Ctime)
	if a.Type == proto.TypeReg && n.attr.Type == proto.TypeReg {
		switch {
		case c > 0:
			return false
		case c < 0:
			if _, _, fresh := n.cachedAttrLocked(fs.now()); fresh {
				return true
			}
		case a.Size != n.attr.Size:
			// One ctime, two sizes: a call that ran during a write. The
			// server's file system moves a write's times before it extends
			// the file (Linux's file_update_time comes before the copy),
			// so a call running beside our WRITE shows the WRITE's ctime
			// with the size from before. Whichever was sent first, the
			// larger size is the later state (as Linux's client takes a
			// larger size whatever the attributes' age). The recall soak
			// read 0 bytes of its own 2,235-byte rewrite: a reader's OPEN,
			// sent while the rewrite's WRITE was on its way, came back
			// after it with size 0 and was taken as sent later.
			return a.Size < n.attr.Size
		}
	}
	if a.Type == proto.TypeDir && n.attr.Type == proto.TypeDir && c > 0 {
		// A later ctime is a later state of a directory too: our SETATTR
		// of its times, answered after a GETATTR sent while it was on its
		// way but run before it, was dropped as sent earlier, and the
		// GETATTR's times from before the utimensat stayed (pjdfstest
		// utimensat/00.t on ganesha, which sends no pre-operation
		// attributes to tell).
		return false
	}
	return at.Before(n.attrTime)
}

// compareTime returns -1, 0 or 1 as a is before, equal to or after b.
func compareTime(a, b proto.Time) int {
	if c := cmp.Compare(a.Sec, b.Sec); c != 0 {
		return c
	}
	return cmp.Compare(a.Nsec, b.Nsec)
}

// setAttrLocked records attributes as applyAttrLocked does, without its
// check of their age. Their time never goes back: attributes with a later
// ctime than the node's may come from a call sent before those.
//
// LOCKS_REQUIRED(n.mu)
func (fs *FS) setAttrLocked(n *inode, a *proto.Attr, at time.Time) {
	if n.attrValid && at.Before(n.attrTime) {
		at = n.attrTime
	}
	lo, hi := fs.timeoBounds(a.Type)
	switch {
	case !n.attrValid || !sameChange(&n.attr, a):
		// A file that has not been modified for a long time is unlikely to
		// be modified soon: start at a tenth of its age, as BSD clients do,
		// within [min, max].
		age := at.Sub(time.Unix(a.Mtime.Sec, int64(a.Mtime.Nsec)))
		n.attrTimeo = min(max(age/10, lo), hi)
	default:
		n.attrTimeo *= 2
		if n.attrTimeo < lo {
			n.attrTimeo = lo
		}
		if n.attrTimeo > hi {
			n.attrTimeo = hi
		}
	}
	// Another version, while no data is held valid: the data generation
	// still moves, so that data read from the version before (a READ in
	// flight, an OPEN's first read) is never taken for this one's.
	moved := a.Type == proto.TypeReg && n.attrValid && !sameVersion(&n.attr, a)
	n.attr = *a
	n.attrValid = true
	n.attrTime = at
	n.attrRecv = fs.now()
	if a.Type == proto.TypeDir {
		fs.noteVersionLocked(n, a)
	}
	if n.dataValid && (n.dataMtime != a.Mtime || n.dataSize != a.Size) {
		n.dataValid = false
		n.dataGen++
		if n.opening == 0 {
			fs.notify.InvalidateData(n.id)
		}
	} else if !n.dataValid && moved {
		n.dataGen++
	}
}

// applyAttr is applyAttrLocked taking the node's lock.
func (fs *FS) applyAttr(n *inode, p *proto.PostAttr, at time.Time) {
	if !p.Present {
		return
	}
	n.mu.Lock()
	fs.applyAttrLocked(n, &p.Attr, at)
	n.mu.Unlock()
}

// applyWcc records the weak cache consistency data of a modifying reply.
// When the pre-operation attributes equal what we had cached, the change
// was ours alone, so cached data (pages, names) stays valid: it moves to
// the new version instead of being dropped. ours says the caller knows the
// change is its own whatever the pre-operation attributes say (replies to
// our pipelined WRITEs arrive in any order, each with another's pre-op).
func (fs *FS) applyWcc(n *inode, w *proto.Wcc, at time.Time, ours bool) {
	n.mu.Lock()
	defer n.mu.Unlock()
	if !w.After.Present {
		n.attrValid = false
		if at.After(n.attrStale) {
			n.attrStale = at
		}
		return
	}
	// Pre-operation attributes equal to the cached ones: the call ran on
	// the state we have, so its result is the next one, whatever the
	// ctimes say (a server clock gone back) and whichever reply came first.
	b := &w.Before.Attr
	follows := w.Before.Present && n.attrValid && preMatches(&n.attr, b, w.Atomic)
	if !follows && fs.staleLocked(n, &w.After.Attr, at) {
		return // a reply older than what we have
	}
	ours = ours || follows
	if ours && n.attrValid {
		after := &w.After.Attr
		if n.dataValid {
			n.dataMtime, n.dataSize = after.Mtime, after.Size
		}
		if n.nameVerOK && n.nameVer == versionOf(&n.attr) {
			n.nameVer = versionOf(after)
		}
		// Our own change moved ctime; rights change only with mode or
		// owner, which the entries still check.
		for k, e := range n.access {
			if e.matches(&n.attr) {
				e.ctime = after.Ctime
				n.access[k] = e
			}
		}
		// Nor does our own change count as the file changing under us: the
		// attribute lifetime keeps growing instead of restarting at the
		// minimum.
		n.attr.Size, n.attr.Mtime, n.attr.Ctime = after.Size, after.Mtime, after.Ctime
	}
	fs.setAttrLocked(n, &w.After.Attr, at)
}

// preMatches reports whether pre-operation attributes b are those of a:
// v4's change_info before value equal to the change attribute, and atomic
// (nothing else changed the file between before and after); v3's size,
// mtime and ctime.
func preMatches(a *proto.Attr, b *proto.WccAttr, atomic bool) bool {
	if b.HasChange {
		return atomic && a.HasChange && a.Change == b.Change
	}
	return a.Size == b.Size && a.Mtime == b.Mtime && a.Ctime == b.Ctime
}

// invalidateAttr makes the next getattr go to the server: the attributes
// changed now (a link count, a ctime). Replies to calls sent before now
// may predate the change and are not applied.
func (fs *FS) invalidateAttr(n *inode) {
	now := fs.now()
	n.mu.Lock()
	n.attrValid = false
	if now.After(n.attrStale) {
		n.attrStale = now
	}
	n.mu.Unlock()
}

// cachedAttrLocked returns the cached attributes and their remaining
// lifetime, if still valid at now.
//
// LOCKS_REQUIRED(n.mu)
func (n *inode) cachedAttrLocked(now time.Time) (proto.Attr, time.Duration, bool) {
	if !n.attrValid || n.childRecalledLocked() {
		return proto.Attr{}, 0, false
	}
	left := n.attrTime.Add(n.attrTimeo).Sub(now)
	if left <= 0 {
		switch {
		case n.attrTimeo <= 0:
			return proto.Attr{}, 0, false
		case n.delegated:
			// Under a read delegation nobody changes the file without the
			// server recalling it first (deleg.go): the attributes are
			// good, and the kernel may keep them for their usual lifetime.
			left = n.attrTimeo
		case n.childTrustedLocked():
			// Kept by its directory's delegation (dirdeleg.go), as by
			// its own: the return first makes the kernel forget them.
			left = n.attrTimeo
		case n.dirTrustedLocked():
			// Under its delegation (dirdeleg.go): good, and the kernel
			// may keep them, and the names, for their usual lifetime (a
			// recall drops its listing and absent names).
			left = n.attrTimeo
		default:
			return proto.Attr{}, 0, false
		}
	}
	return n.attr, left, true
}
