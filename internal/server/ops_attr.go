package server

import (
	"math"

	"golang.org/x/sys/unix"

	"hushfs/internal/nfs3"
)

func (s *Server) getattr(a *nfs3.GetattrArgs) nfs3.GetattrRes {
	n, err := s.resolve(a.Obj)
	if err != nil {
		return nfs3.GetattrRes{Status: s.statusOf(err)}
	}
	defer s.cache.release(n)
	var st unix.Stat_t
	if err := s.stat(n, &st); err != nil {
		return nfs3.GetattrRes{Status: s.statusOf(err)}
	}
	return nfs3.GetattrRes{Status: nfs3.OK, Attr: s.fattr(&st)}
}

func (s *Server) setattr(id *identity, a *nfs3.SetattrArgs) (r nfs3.SetattrRes) {
	n, st, status := s.resolveStat(a.Obj)
	if status != nfs3.OK {
		r.Status = status
		return r
	}
	defer s.cache.release(n)
	r.Wcc.Before = preOp(&st)
	switch {
	case s.readOnly:
		r.Status = nfs3.ErrROFS
	case a.Guard && nfsTime(st.Ctim) != a.GuardCtime:
		r.Status = nfs3.ErrNotSync
	case a.Attr.SetSize && n.isDir():
		r.Status = nfs3.ErrIsDir
	case a.Attr.SetSize && !n.isReg():
		r.Status = nfs3.ErrInval
	}
	if r.Status != nfs3.OK {
		r.Wcc.After = s.postOp(&st)
		return r
	}
	rw := -1
	var err error
	if a.Attr.SetSize {
		// Opened with the server's credentials (open_by_handle_at needs
		// them); applySattr checks the caller's right to truncate.
		var done func()
		if rw, done, err = s.writeFd(n); err != nil {
			r.Status = s.statusOf(err)
			r.Wcc.After = s.postOpOf(n)
			return r
		}
		defer done()
	}
	err = s.as(id, func() error { return s.applySattr(id, n.fd, &st, &a.Attr, rw) })
	if err == nil {
		err = s.commitAttrs(n)
	}
	if err != nil {
		r.Status = s.statusOf(err)
	}
	r.Wcc.After = s.postOpOf(n)
	return r
}

// applySattr applies sa to the inode fd refers to, in the order size, owner,
// mode, times: a chown may clear set-id bits that the mode then sets, and
// times come last as every other change touches them. It runs with the
// caller's credentials, so the kernel decides who may do what; cur holds
// the attributes before. rw, if not -1, is a descriptor open for writing,
// used to truncate; the owner may then truncate whatever the mode bits say
// (like writes, see write), anyone else needs write permission. Without rw
// the truncation goes through the path and the kernel checks it.
func (s *Server) applySattr(id *identity, fd int, cur *unix.Stat_t, sa *nfs3.Sattr, rw int) error {
	ftype := cur.Mode & unix.S_IFMT
	if sa.SetSize {
		switch {
		case ftype == unix.S_IFDIR:
			return nfs3.ErrIsDir
		case ftype != unix.S_IFREG:
			return nfs3.ErrInval
		case sa.Size > math.MaxInt64:
			return nfs3.ErrFBig
		}
		if rw >= 0 {
			if !id.isRoot() && id.uid != cur.Uid {
				if err := accessOK(fd, unix.W_OK); err != nil {
					return err
				}
			}
			if err := unix.Ftruncate(rw, int64(sa.Size)); err != nil {
				return err
			}
		} else if err := unix.Truncate(procFdPath(fd), int64(sa.Size)); err != nil {
			return err
		}
	}
	uid, gid := -1, -1
	// chown(2) of a file clears its set-id bits even when the owner stays
	// (the client asks with the owner it has: FUSE's KILL_SUIDGID, or an
	// application's chown): such a file is chowned whatever the ids.
	setID := ftype != unix.S_IFDIR && cur.Mode&(unix.S_ISUID|unix.S_ISGID) != 0
	if sa.SetUID && (sa.UID != cur.Uid || setID) {
		uid = int(sa.UID)
	}
	if sa.SetGID && (sa.GID != cur.Gid || setID) {
		gid = int(sa.GID)
	}
	chowned := false
	if uid != -1 || gid != -1 {
		if err := unix.Fchownat(fd, "", uid, gid, unix.AT_EMPTY_PATH|unix.AT_SYMLINK_NOFOLLOW); err != nil {
			return err
		}
		chowned = true
	}
	// A symbolic link's mode means nothing on Linux and cannot be changed.
	if sa.SetMode && ftype != unix.S_IFLNK {
		want := sa.Mode & 0o7777
		if chowned || cur.Mode&0o7777 != want {
			if err := fchmodEmpty(fd, want); err != nil {
				return err
			}
		}
	}
	if sa.Atime.How != nfs3.DontChange || sa.Mtime.How != nfs3.DontChange {
		ts := []unix.Timespec{timespecOf(sa.Atime), timespecOf(sa.Mtime)}
		if err := unix.UtimesNanoAt(fd, "", ts, unix.AT_EMPTY_PATH|unix.AT_SYMLINK_NOFOLLOW); err != nil {
			return err
		}
	}
	return nil
}

func (s *Server) access(id *identity, a *nfs3.AccessArgs) (r nfs3.AccessRes) {
	n, attr, st := s.resolveAttr(a.Obj)
	r.ObjAttr = attr
	if st != nfs3.OK {
		r.Status = st
		return r
	}
	defer s.cache.release(n)
	want := a.Access
	var granted uint32
	err := s.as(id, func() error {
		// Ask the kernel once per permission needed.
		var asked, ok [8]bool
		can := func(mode uint32) bool {
			if !asked[mode] {
				asked[mode] = true
				ok[mode] = accessOK(n.fd, mode) == nil
			}
			return ok[mode]
		}
		if want&nfs3.AccessRead != 0 && can(unix.R_OK) {
			granted |= nfs3.AccessRead
		}
		if n.isDir() {
			if want&nfs3.AccessLookup != 0 && can(unix.X_OK) {
				granted |= nfs3.AccessLookup
			}
			// Changing entries needs write and search permission.
			for _, bit := range []uint32{nfs3.AccessModify, nfs3.AccessExtend, nfs3.AccessDelete} {
				if want&bit != 0 && can(unix.W_OK) && can(unix.X_OK) {
					granted |= bit
				}
			}
			return nil
		}
		// Whether a file may be deleted depends on its directory, which a
		// handle does not name: DELETE is not granted on non-directories.
		if want&nfs3.AccessExecute != 0 && can(unix.X_OK) {
			granted |= nfs3.AccessExecute
		}
		for _, bit := range []uint32{nfs3.AccessModify, nfs3.AccessExtend} {
			if want&bit != 0 && can(unix.W_OK) {
				granted |= bit
			}
		}
		return nil
	})
	if err != nil {
		r.Status = s.statusOf(err)
		return r
	}
	if s.readOnly {
		granted &^= nfs3.AccessModify | nfs3.AccessExtend | nfs3.AccessDelete
	}
	r.Access = granted
	return r
}

func (s *Server) readlink(a *nfs3.ReadlinkArgs) (r nfs3.ReadlinkRes) {
	n, st, status := s.resolveStat(a.Symlink)
	if status != nfs3.OK {
		r.Status = status
		return r
	}
	defer s.cache.release(n)
	r.SymlinkAttr = s.postOp(&st)
	if n.ftype != unix.S_IFLNK {
		r.Status = nfs3.ErrInval
		return r
	}
	buf := make([]byte, nfs3.MaxPathLen+1)
	k, err := unix.Readlinkat(n.fd, "", buf)
	switch {
	case err != nil:
		r.Status = s.statusOf(err)
	case k > nfs3.MaxPathLen:
		r.Status = nfs3.ErrNameTooLong
	default:
		r.Data = buf[:k]
	}
	return r
}

// resolveAttr resolves a handle and stats it, for the procedures that
// answer with the object's attributes. The caller releases n when the
// status is OK.
func (s *Server) resolveAttr(fh nfs3.FH) (n *node, attr nfs3.PostOpAttr, status nfs3.Status) {
	n, st, status := s.resolveStat(fh)
	if status != nfs3.OK {
		return nil, attr, status
	}
	return n, s.postOp(&st), nfs3.OK
}

// resolveStat resolves a handle and stats it (for pre-op attributes). The
// caller releases n when the status is OK.
func (s *Server) resolveStat(fh nfs3.FH) (n *node, st unix.Stat_t, status nfs3.Status) {
	n, err := s.resolve(fh)
	if err != nil {
		return nil, st, s.statusOf(err)
	}
	if err := s.stat(n, &st); err != nil {
		s.cache.release(n)
		return nil, st, s.statusOf(err)
	}
	return n, st, nfs3.OK
}

func (s *Server) fsstat(a *nfs3.FsstatArgs) (r nfs3.FsstatRes) {
	n, attr, st := s.resolveAttr(a.Root)
	r.ObjAttr = attr
	if st != nfs3.OK {
		r.Status = st
		return r
	}
	defer s.cache.release(n)
	var sf unix.Statfs_t
	if err := unix.Fstatfs(n.fd, &sf); err != nil {
		r.Status = s.statusOf(err)
		return r
	}
	bs := uint64(sf.Bsize)
	r.Tbytes = sf.Blocks * bs
	r.Fbytes = sf.Bfree * bs
	r.Abytes = sf.Bavail * bs
	r.Tfiles = sf.Files
	r.Ffiles = sf.Ffree
	r.Afiles = sf.Ffree
	r.Invarsec = 0
	return r
}

func (s *Server) fsinfo(a *nfs3.FsinfoArgs) (r nfs3.FsinfoRes) {
	n, attr, st := s.resolveAttr(a.Root)
	r.ObjAttr = attr
	if st != nfs3.OK {
		r.Status = st
		return r
	}
	defer s.cache.release(n)
	r.Rtmax, r.Rtpref, r.Rtmult = maxIO, maxIO, ioMult
	r.Wtmax, r.Wtpref, r.Wtmult = maxIO, maxIO, ioMult
	r.Dtpref = prefDir
	r.MaxFileSize = math.MaxInt64
	r.TimeDelta = nfs3.Time{Nseconds: 1}
	r.Properties = nfs3.FSFLink | nfs3.FSFSymlink | nfs3.FSFHomogeneous | nfs3.FSFCanSetTime
	return r
}

func (s *Server) pathconf(a *nfs3.PathconfArgs) (r nfs3.PathconfRes) {
	n, attr, st := s.resolveAttr(a.Obj)
	r.ObjAttr = attr
	if st != nfs3.OK {
		r.Status = st
		return r
	}
	defer s.cache.release(n)
	var sf unix.Statfs_t
	if err := unix.Fstatfs(n.fd, &sf); err != nil {
		r.Status = s.statusOf(err)
		return r
	}
	r.Linkmax = linkMax(sf.Type)
	r.NameMax = uint32(sf.Namelen)
	if r.NameMax == 0 || r.NameMax > nfs3.MaxNameLen {
		r.NameMax = nfs3.MaxNameLen
	}
	r.NoTrunc = true
	r.ChownRestricted = true
	r.CaseInsensitive = false
	r.CasePreserving = true
	return r
}
