package server

import (
	"bytes"
	"math"
	"os/user"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"

	"hushfs/internal/nfs3"
	"hushfs/internal/nfs4"
)

// File attributes (fattr4) from the local file's, GETATTR, SETATTR,
// VERIFY, NVERIFY and ACCESS.
//
// The change attribute is the inode's ctime in nanoseconds: every change
// to a file's data or attributes, or to a directory's entries, sets the
// ctime, and with the multigrain timestamps of Linux 6.13 on (ext4, XFS,
// btrfs, tmpfs) a ctime that has been read is never given again to a later
// change, so two changes never share a value. (On older kernels two
// changes within one clock tick, a few milliseconds, may.) It is the same
// value NFSv3 clients see as ctime, so both agree on what changed.

// supportedAttrs is what GETATTR answers (supported_attrs).
var supportedAttrs = nfs4.NewBitmap(
	nfs4.AttrSupportedAttrs, nfs4.AttrType, nfs4.AttrFHExpireType, nfs4.AttrChange, nfs4.AttrSize,
	nfs4.AttrLinkSupport, nfs4.AttrSymlinkSupport, nfs4.AttrNamedAttr, nfs4.AttrFsid, nfs4.AttrUniqueHandles,
	nfs4.AttrLeaseTime, nfs4.AttrRdattrError, nfs4.AttrACLSupport, nfs4.AttrCanSetTime,
	nfs4.AttrCaseInsensitive, nfs4.AttrCasePreserving, nfs4.AttrChownRestricted, nfs4.AttrFilehandle,
	nfs4.AttrFileid, nfs4.AttrFilesAvail, nfs4.AttrFilesFree, nfs4.AttrFilesTotal, nfs4.AttrHomogeneous,
	nfs4.AttrMaxFileSize, nfs4.AttrMaxLink, nfs4.AttrMaxName, nfs4.AttrMaxRead, nfs4.AttrMaxWrite,
	nfs4.AttrMode, nfs4.AttrNoTrunc, nfs4.AttrNumLinks, nfs4.AttrOwner, nfs4.AttrOwnerGroup,
	nfs4.AttrRawdev, nfs4.AttrSpaceAvail, nfs4.AttrSpaceFree, nfs4.AttrSpaceTotal, nfs4.AttrSpaceUsed,
	nfs4.AttrTimeAccess, nfs4.AttrTimeAccessSet, nfs4.AttrTimeDelta, nfs4.AttrTimeMetadata,
	nfs4.AttrTimeModify, nfs4.AttrTimeModifySet, nfs4.AttrMountedOnFileid, nfs4.AttrSuppattrExclcreat,
)

// writableAttrs is what SETATTR sets.
var writableAttrs = nfs4.NewBitmap(nfs4.AttrSize, nfs4.AttrMode, nfs4.AttrOwner, nfs4.AttrOwnerGroup,
	nfs4.AttrTimeAccessSet, nfs4.AttrTimeModifySet)

// exclCreateAttrs is what an EXCLUSIVE4_1 OPEN sets with the file
// (suppattr_exclcreat): not the times, which keep the create verifier.
var exclCreateAttrs = nfs4.NewBitmap(nfs4.AttrMode, nfs4.AttrOwner, nfs4.AttrOwnerGroup)

// statfsAttrs need statfs(2).
var statfsAttrs = nfs4.NewBitmap(nfs4.AttrFilesAvail, nfs4.AttrFilesFree, nfs4.AttrFilesTotal,
	nfs4.AttrSpaceAvail, nfs4.AttrSpaceFree, nfs4.AttrSpaceTotal, nfs4.AttrMaxLink, nfs4.AttrMaxName)

func ftype4(mode uint32) nfs4.Ftype { return nfs4.Ftype(ftypeOf(mode)) }

// changeOf is a file's change attribute: its ctime in nanoseconds.
func changeOf(sec, nsec int64) uint64 { return uint64(sec)*1e9 + uint64(nsec) }

func changeOf3(t nfs3.Time) uint64 { return changeOf(int64(t.Seconds), int64(t.Nseconds)) }

func time4(ts unix.Timespec) nfs4.Time { return nfs4.Time{Seconds: ts.Sec, Nseconds: uint32(ts.Nsec)} }

// objAttrs is what fattr4 is made from: a real object (n, st) or a pseudo
// directory (n nil, depth).
type objAttrs struct {
	n     *node
	depth int
	st    unix.Stat_t
}

// statObj stats the current or saved filehandle's object.
func (c *compound) statObj(f *fhState) (objAttrs, nfs4.Status) {
	o := objAttrs{n: f.n, depth: f.depth}
	if f.n == nil {
		c.s.pseudoStat(f.depth, &o.st)
		return o, nfs4.OK
	}
	if err := c.s.stat(f.n, &o.st); err != nil {
		return o, c.s.statusOf4(err)
	}
	return o, nfs4.OK
}

// pseudoStat describes a pseudo directory: read-only, root's, as old as
// the server.
func (s *Server) pseudoStat(depth int, st *unix.Stat_t) {
	*st = unix.Stat_t{Mode: unix.S_IFDIR | 0o555, Nlink: 2, Size: 4096, Ino: uint64(depth) + 1}
	t := unix.Timespec{Sec: s.v4.started.Seconds, Nsec: int64(s.v4.started.Nseconds)}
	st.Atim, st.Mtim, st.Ctim = t, t, t
}

// fattr builds the attributes of mask (those supported) of o.
func (c *compound) fattr(mask nfs4.Bitmap, o *objAttrs, f *nfs4.Fattr) nfs4.Status {
	s := c.s
	*f = nfs4.Fattr{Mask: mask.And(supportedAttrs)}
	st := &o.st
	m := &f.Mask
	f.SupportedAttrs = supportedAttrs
	f.Type = ftype4(st.Mode)
	f.FHExpireType = nfs4.FH4Persistent
	f.Change = changeOf(st.Ctim.Sec, st.Ctim.Nsec)
	f.Size = uint64(st.Size)
	f.LinkSupport, f.SymlinkSupport, f.UniqueHandles = true, true, true
	f.LeaseTime = uint32(s.v4.state.Lease().Seconds())
	f.CanSetTime, f.CasePreserving, f.ChownRestricted, f.Homogeneous, f.NoTrunc = true, true, true, true, true
	f.Fileid = st.Ino
	f.MountedOnFileid = st.Ino
	f.MaxFileSize = math.MaxInt64
	f.MaxRead, f.MaxWrite = maxIO, maxIO
	f.Mode = st.Mode & 0o7777
	f.NumLinks = uint32(st.Nlink)
	f.Rawdev = nfs4.Specdata{Major: unix.Major(st.Rdev), Minor: unix.Minor(st.Rdev)}
	f.SpaceUsed = uint64(st.Blocks) * 512
	f.TimeAccess, f.TimeModify, f.TimeMetadata = time4(st.Atim), time4(st.Mtim), time4(st.Ctim)
	f.TimeDelta = nfs4.Time{Nseconds: 1}
	f.SuppattrExclcreat = exclCreateAttrs
	f.MaxLink, f.MaxName = 32000, nfs3.MaxNameLen
	if m.Has(nfs4.AttrOwner) {
		f.Owner = nfs4.AppendID(nil, st.Uid)
	}
	if m.Has(nfs4.AttrOwnerGroup) {
		f.OwnerGroup = nfs4.AppendID(nil, st.Gid)
	}
	if o.n == nil {
		f.Fsid = nfs4.Fsid{Major: 0, Minor: 1} // not the export's: the client sees a mount there
		if m.Has(nfs4.AttrFilehandle) {
			f.Filehandle = s.pseudoFH(o.depth)
		}
		return nfs4.OK
	}
	f.Fsid = nfs4.Fsid{Major: s.fsid}
	if o.n.isRoot {
		// Mounted on the last pseudo directory's entry for it.
		f.MountedOnFileid = uint64(len(s.v4.pseudo)) + 1
	}
	if m.Has(nfs4.AttrFilehandle) {
		f.Filehandle = o.n.fh
	}
	if !isEmpty(mask.And(statfsAttrs)) {
		var sf unix.Statfs_t
		if err := unix.Fstatfs(o.n.fd, &sf); err != nil {
			return s.statusOf4(err)
		}
		bs := uint64(sf.Bsize)
		f.FilesAvail, f.FilesFree, f.FilesTotal = sf.Ffree, sf.Ffree, sf.Files
		f.SpaceAvail, f.SpaceFree, f.SpaceTotal = sf.Bavail*bs, sf.Bfree*bs, sf.Blocks*bs
		f.MaxLink = linkMax(sf.Type)
		if sf.Namelen > 0 && sf.Namelen < nfs3.MaxNameLen {
			f.MaxName = uint32(sf.Namelen)
		}
	}
	return nfs4.OK
}

func (c *compound) getattr(a *nfs4.GetattrArgs) nfs4.Status {
	if !c.cur.set {
		return c.status(nfs4.ErrNoFileHandle)
	}
	o, st := c.statObj(&c.cur)
	if st != nfs4.OK {
		return c.status(st)
	}
	res := nfs4.GetattrRes{Status: nfs4.OK}
	if st := c.fattr(a.AttrRequest, &o, &res.Attrs); st != nfs4.OK {
		return c.status(st)
	}
	if o.n != nil {
		if st := c.holderAttrs(o.n, a.AttrRequest, &res.Attrs); st != nfs4.OK {
			return c.status(st)
		}
	}
	c.reply = res.Append(c.reply)
	return nfs4.OK
}

// verify serves VERIFY (NVERIFY when not): whether the attributes given are
// the object's, compared as encoded.
func (c *compound) verify(a *nfs4.VerifyArgs, not bool) nfs4.Status {
	if !c.cur.set {
		return c.status(nfs4.ErrNoFileHandle)
	}
	mask := a.Attrs.Mask
	switch {
	case mask.Has(nfs4.AttrRdattrError):
		return c.status(nfs4.ErrInval)
	case !isEmpty(mask.AndNot(supportedAttrs)):
		return c.status(nfs4.ErrAttrNotSupp)
	}
	o, st := c.statObj(&c.cur)
	if st != nfs4.OK {
		return c.status(st)
	}
	var f nfs4.Fattr
	if st := c.fattr(mask, &o, &f); st != nfs4.OK {
		return c.status(st)
	}
	f.Mask = mask
	same := bytes.Equal(f.Append(nil), a.Attrs.Append(nil))
	switch {
	case not && same:
		return c.status(nfs4.ErrSame)
	case !not && !same:
		return c.status(nfs4.ErrNotSame)
	}
	return c.status(nfs4.OK)
}

// idOf resolves an owner or group string: a number ("1000"), or a name
// of this machine's, with our domain or none ("alice@example.org").
func (s *Server) idOf(str []byte, group bool) (uint32, bool) {
	o := nfs4.ParseOwner(str)
	if o.Numeric {
		return o.ID, true
	}
	if o.Domain != nil && !strings.EqualFold(string(o.Domain), s.v4.domain) {
		return 0, false
	}
	if id, ok := nfs4.ParseID(o.Name); ok {
		return id, true
	}
	var idStr string
	if group {
		g, err := user.LookupGroup(string(o.Name))
		if err != nil {
			return 0, false
		}
		idStr = g.Gid
	} else {
		u, err := user.Lookup(string(o.Name))
		if err != nil {
			return 0, false
		}
		idStr = u.Uid
	}
	id, err := strconv.ParseUint(idStr, 10, 32)
	return uint32(id), err == nil
}

// sattrOf turns the attributes of a SETATTR (or a create) into the v3
// helpers' form. Times outside nfstime3 come back in the last two results
// for the caller to set itself.
func (s *Server) sattrOf(f *nfs4.Fattr) (sa nfs3.Sattr, far []unix.Timespec, st nfs4.Status) {
	mask := f.Mask
	switch {
	case !isEmpty(mask.AndNot(supportedAttrs)):
		return sa, nil, nfs4.ErrAttrNotSupp
	case !isEmpty(mask.AndNot(writableAttrs)):
		return sa, nil, nfs4.ErrInval
	}
	if mask.Has(nfs4.AttrSize) {
		sa.SetSize, sa.Size = true, f.Size
	}
	if mask.Has(nfs4.AttrMode) {
		if f.Mode&^0o7777 != 0 {
			return sa, nil, nfs4.ErrInval
		}
		sa.SetMode, sa.Mode = true, f.Mode
	}
	if mask.Has(nfs4.AttrOwner) {
		id, ok := s.idOf(f.Owner, false)
		if !ok {
			return sa, nil, nfs4.ErrBadOwner
		}
		sa.SetUID, sa.UID = true, id
	}
	if mask.Has(nfs4.AttrOwnerGroup) {
		id, ok := s.idOf(f.OwnerGroup, true)
		if !ok {
			return sa, nil, nfs4.ErrBadOwner
		}
		sa.SetGID, sa.GID = true, id
	}
	setTime := func(t *nfs4.SetTime, dst *nfs3.SetTime, i int) nfs4.Status {
		if t.How == nfs4.SetToServerTime {
			dst.How = nfs3.SetToServerTime
			return nfs4.OK
		}
		if t.Time.Nseconds >= 1e9 {
			return nfs4.ErrInval
		}
		if t.Time.Seconds < 0 || t.Time.Seconds > math.MaxUint32 {
			if far == nil {
				far = []unix.Timespec{{Nsec: unix.UTIME_OMIT}, {Nsec: unix.UTIME_OMIT}}
			}
			far[i] = unix.Timespec{Sec: t.Time.Seconds, Nsec: int64(t.Time.Nseconds)}
			return nfs4.OK
		}
		dst.How = nfs3.SetToClientTime
		dst.Time = nfs3.Time{Seconds: uint32(t.Time.Seconds), Nseconds: t.Time.Nseconds}
		return nfs4.OK
	}
	if mask.Has(nfs4.AttrTimeAccessSet) {
		if st := setTime(&f.TimeAccessSet, &sa.Atime, 0); st != nfs4.OK {
			return sa, nil, st
		}
	}
	if mask.Has(nfs4.AttrTimeModifySet) {
		if st := setTime(&f.TimeModifySet, &sa.Mtime, 1); st != nfs4.OK {
			return sa, nil, st
		}
	}
	return sa, far, nfs4.OK
}

func (c *compound) setattr(a *nfs4.SetattrArgs) nfs4.Status {
	res := nfs4.SetattrRes{}
	fail := func(st nfs4.Status) nfs4.Status {
		res.Status = st
		c.reply = res.Append(c.reply)
		return st
	}
	if !c.cur.set {
		return fail(nfs4.ErrNoFileHandle)
	}
	sa, far, st := c.s.sattrOf(&a.Attrs)
	if st != nfs4.OK {
		return fail(st)
	}
	n := c.cur.n
	if n == nil {
		return fail(nfs4.ErrROFS)
	}
	if n.isReg() {
		// A file with no name left, reachable only because a client keeps
		// it open: as for OPEN (nfs4_open.go), another client came
		// through a name cached before the file lost it, and its
		// truncate(2) or chmod(2) is for the file the name leads to now.
		var fst unix.Stat_t
		if err := c.s.stat(n, &fst); err != nil {
			return fail(c.s.statusOf4(err))
		}
		if fst.Nlink == 0 && !c.s.v4.state.Holds(c.client, n.key) {
			return fail(nfs4.ErrStale)
		}
	}
	if sa.SetSize && n.isReg() {
		sid, st := c.stateid(&a.Stateid)
		if st == nfs4.OK {
			st = c.s.v4.state.CheckIO(c.client, &sid, n.key, true)
		}
		if st != nfs4.OK {
			return fail(st)
		}
	}
	if st := c.mayChange(n.key); st != nfs4.OK {
		return fail(st)
	}
	// The holder of the file's write delegation keeps it (leases_self.go).
	self := c.s.v4.leases.expectSelf(n.key, setOnly(&sa, far != nil))
	r := c.s.setattr(&c.id, &nfs3.SetattrArgs{Obj: n.fh, Attr: sa})
	if r.Status != nfs3.OK {
		self(false)
		return fail(status4(r.Status))
	}
	if far != nil {
		err := c.s.as(&c.id, func() error {
			return unix.UtimesNanoAt(n.fd, "", far, unix.AT_EMPTY_PATH|unix.AT_SYMLINK_NOFOLLOW)
		})
		if err == nil {
			err = c.s.commitAttrs(n)
		}
		if err != nil {
			self(true) // the attributes decide what was made
			return fail(c.s.statusOf4(err))
		}
	}
	self(true)
	res.AttrsSet = a.Attrs.Mask
	c.reply = res.Append(c.reply)
	return nfs4.OK
}

func (c *compound) access(a *nfs4.AccessArgs) nfs4.Status {
	if !c.cur.set {
		return c.status(nfs4.ErrNoFileHandle)
	}
	const all = nfs4.AccessRead | nfs4.AccessLookup | nfs4.AccessModify | nfs4.AccessExtend |
		nfs4.AccessDelete | nfs4.AccessExecute
	res := nfs4.AccessRes{Status: nfs4.OK, Supported: a.Access & all}
	if c.cur.n == nil {
		res.Access = a.Access & (nfs4.AccessRead | nfs4.AccessLookup)
	} else {
		r := c.s.access(&c.id, &nfs3.AccessArgs{Obj: c.cur.n.fh, Access: a.Access & all})
		if r.Status != nfs3.OK {
			return c.status(status4(r.Status))
		}
		res.Access = r.Access
	}
	c.reply = res.Append(c.reply)
	return nfs4.OK
}

// isEmpty reports whether no bit of b is set.
func isEmpty(b nfs4.Bitmap) bool { return b.IsZero() }

// setOnly returns whether a file's attributes after a SETATTR of sa (and
// of times beyond nfstime3's, if far) differ from those before only as
// that SETATTR makes them: the attributes it sets have its values (a time
// any, the server's clock may set it), the others are unchanged but the
// ctime, and the mtime when the size is set.
func setOnly(sa *nfs3.Sattr, far bool) func(before, after *unix.Stat_t) bool {
	return func(before, after *unix.Stat_t) bool {
		b := *before
		if sa.SetMode {
			b.Mode = b.Mode&^0o7777 | sa.Mode&0o7777
		}
		if sa.SetUID {
			b.Uid = sa.UID
		}
		if sa.SetGID {
			b.Gid = sa.GID
		}
		if sa.SetSize {
			b.Size = int64(sa.Size)
		}
		if sa.SetSize || sa.Mtime.How != nfs3.DontChange || far {
			b.Mtim = after.Mtim
		}
		b.Ctim = after.Ctim
		return sameAttrs(&b, after)
	}
}
