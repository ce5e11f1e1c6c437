package server

import (
	"bytes"
	"encoding/binary"
	"errors"
	"math"

	"golang.org/x/sys/unix"

	"hushfs/internal/nfs3"
)

// Directory listing.
//
// Cookies are the d_off values getdents64 reports: the position after each
// entry, which lseek accepts to resume there. On ext4 (and tmpfs, btrfs,
// xfs) these positions do not move when other entries are created or
// removed, so a cookie stays valid for the life of the directory and the
// cookie verifier never has to change. Every call seeks to the cookie on
// the directory's cached descriptor and reads from there.

// getdentsBufSize is the buffer getdents64 fills per system call.
const getdentsBufSize = 16 << 10

// dirListing is one READDIR or READDIRPLUS request, normalised.
type dirListing struct {
	fh       nfs3.FH
	cookie   uint64
	verf     nfs3.Verf
	dircount uint32 // READDIRPLUS only; 0 = no limit
	maxcount uint32
	plus     bool
}

func (s *Server) readdir(id *identity, a *nfs3.ReaddirArgs, reply []byte) []byte {
	return s.listDir(id, &dirListing{fh: a.Dir, cookie: a.Cookie, verf: a.CookieVerf, maxcount: a.Count}, reply)
}

func (s *Server) readdirplus(id *identity, a *nfs3.ReaddirplusArgs, reply []byte) []byte {
	return s.listDir(id, &dirListing{fh: a.Dir, cookie: a.Cookie, verf: a.CookieVerf,
		dircount: a.DirCount, maxcount: a.MaxCount, plus: true}, reply)
}

// dirent is one parsed linux_dirent64.
type dirent struct {
	ino  uint64
	off  int64
	name []byte
}

// nextDirent parses the record at the start of buf and returns it and the
// rest of the buffer. ok is false on a malformed record.
func nextDirent(buf []byte) (d dirent, rest []byte, ok bool) {
	const hdr = 8 + 8 + 2 + 1 // d_ino, d_off, d_reclen, d_type
	if len(buf) < hdr {
		return d, nil, false
	}
	reclen := int(binary.NativeEndian.Uint16(buf[16:18]))
	if reclen < hdr || reclen > len(buf) {
		return d, nil, false
	}
	d.ino = binary.NativeEndian.Uint64(buf[0:8])
	d.off = int64(binary.NativeEndian.Uint64(buf[8:16]))
	name := buf[hdr:reclen]
	if i := bytes.IndexByte(name, 0); i >= 0 {
		name = name[:i]
	}
	d.name = name
	return d, buf[reclen:], true
}

// listDir serves READDIR and READDIRPLUS, streaming entries into reply until
// the client's size limits are reached.
func (s *Server) listDir(id *identity, l *dirListing, reply []byte) []byte {
	start := len(reply)
	fail := func(status nfs3.Status, attr nfs3.PostOpAttr) []byte {
		r := nfs3.ReaddirRes{Status: status, DirAttr: attr}
		return r.Append(reply[:start])
	}
	n, err := s.resolve(l.fh)
	if err != nil {
		return fail(s.statusOf(err), nfs3.PostOpAttr{})
	}
	defer s.cache.release(n)
	var dst unix.Stat_t
	if err := s.stat(n, &dst); err != nil {
		return fail(s.statusOf(err), nfs3.PostOpAttr{})
	}
	dirAttr := s.postOp(&dst)
	if !n.isDir() {
		return fail(nfs3.ErrNotDir, dirAttr)
	}
	// A zero verifier with a non-zero cookie is accepted: our cookies never
	// expire, and some clients do not echo verifiers.
	if l.cookie != 0 && l.verf != (nfs3.Verf{}) && l.verf != n.cverf {
		return fail(nfs3.ErrBadCookie, dirAttr)
	}
	if l.cookie > math.MaxInt64 {
		return fail(nfs3.ErrBadCookie, dirAttr)
	}
	maxcount := int(min(l.maxcount, maxDirReply))
	if maxcount < nfs3.ReaddirHeadSize(&dirAttr)+nfs3.DirListEndSize {
		return fail(nfs3.ErrTooSmall, dirAttr)
	}
	dircount := int(l.dircount)
	if !l.plus || dircount == 0 {
		dircount = math.MaxInt
	}

	n.dirMu.Lock()
	defer n.dirMu.Unlock()
	dfd, err := s.dirFd(n)
	if err != nil {
		return fail(s.statusOf(err), dirAttr)
	}
	buf := s.getdentsBuf()
	defer s.putdentsBuf(buf)

	var entries int
	eof := false
	err = s.as(id, func() error {
		if !id.isRoot() {
			if err := accessOK(n.fd, unix.R_OK); err != nil {
				return err
			}
		}
		if _, err := unix.Seek(dfd, int64(l.cookie), unix.SEEK_SET); err != nil {
			if errors.Is(err, unix.EINVAL) {
				return nfs3.ErrBadCookie
			}
			return err
		}
		reply = nfs3.AppendReaddirResHead(reply, &dirAttr, n.cverf)
		used := nfs3.ReaddirHeadSize(&dirAttr) + nfs3.DirListEndSize
		dirUsed := 0
		for {
			k, err := unix.Getdents(dfd, buf)
			if err == unix.EINTR {
				continue
			}
			if err != nil {
				return err
			}
			if k == 0 {
				eof = true
				return nil
			}
			rest := buf[:k]
			for len(rest) > 0 {
				var d dirent
				var ok bool
				d, rest, ok = nextDirent(rest)
				if !ok {
					return errors.New("malformed getdents64 record")
				}
				if d.off <= 0 {
					// Cookie 0 means "from the start"; a file system
					// reporting it cannot be listed in pieces.
					return errors.New("directory offset 0 after an entry")
				}
				var size, dsize int
				var pe nfs3.DirEntryPlus
				var e nfs3.DirEntry
				if l.plus {
					var there bool
					if pe, there = s.plusEntry(n, &d, &dirAttr); !there {
						continue // removed since getdents read it: gone, not listed
					}
					size, dsize = pe.XDRSize(), pe.DirCountSize()
				} else {
					e = nfs3.DirEntry{Fileid: s.direntIno(n, &d), Name: d.name, Cookie: uint64(d.off)}
					size = e.XDRSize()
				}
				// dircount never keeps out the first entry: it is a
				// hint about the client's directory cache, maxcount is
				// the hard limit.
				if used+size > maxcount || (entries > 0 && dirUsed+dsize > dircount) {
					return nil
				}
				used += size
				dirUsed += dsize
				entries++
				if l.plus {
					reply = nfs3.AppendDirEntryPlus(reply, &pe)
				} else {
					reply = nfs3.AppendDirEntry(reply, &e)
				}
			}
		}
	})
	if err != nil {
		if !errors.Is(err, nfs3.ErrBadCookie) {
			s.logf("hushfs server: listing directory inode %d: %v", n.ino, err)
		}
		return fail(s.statusOf(err), s.postOpOf(n))
	}
	if entries == 0 && !eof {
		return fail(nfs3.ErrTooSmall, dirAttr)
	}
	return nfs3.AppendDirListEnd(reply, eof)
}

// direntIno is the file id of an entry: ".." of the export root is the root
// itself, since nothing above the root is exported.
func (s *Server) direntIno(dir *node, d *dirent) uint64 {
	if dir.isRoot && string(d.name) == ".." {
		return s.rootIno
	}
	return d.ino
}

// plusEntry builds a READDIRPLUS entry with the entry's attributes and
// handle. An entry removed since getdents read it is not listed at all
// (there is false): listing it without a handle would only make the client
// look up a name that is gone. Mount points, and entries whose handle
// cannot be made, are listed without attributes (the client looks them up).
func (s *Server) plusEntry(dir *node, d *dirent, dirAttr *nfs3.PostOpAttr) (e nfs3.DirEntryPlus, there bool) {
	e = nfs3.DirEntryPlus{Fileid: s.direntIno(dir, d), Name: d.name, Cookie: uint64(d.off)}
	name := string(d.name)
	if name == "." || (name == ".." && dir.isRoot) {
		e.Attr = *dirAttr
		e.FH = nfs3.PostOpFH{Present: true, FH: dir.fh}
		return e, true
	}
	var st unix.Stat_t
	if err := unix.Fstatat(dir.fd, name, &st, unix.AT_SYMLINK_NOFOLLOW); err != nil {
		return e, err != unix.ENOENT
	}
	if st.Dev != s.rootDev {
		return e, true
	}
	fh, ok := s.handleAt(dir.fd, name)
	if !ok {
		return e, true
	}
	e.Fileid = st.Ino
	e.Attr = s.postOp(&st)
	e.FH = nfs3.PostOpFH{Present: true, FH: fh}
	return e, true
}

func (s *Server) getdentsBuf() []byte {
	if b, ok := s.dentsPool.Get().(*[]byte); ok {
		return *b
	}
	return make([]byte, getdentsBufSize)
}

func (s *Server) putdentsBuf(b []byte) { s.dentsPool.Put(&b) }
