package server

import (
	"errors"
	"math"

	"golang.org/x/sys/unix"

	"hushfs/internal/nfs4"
	"hushfs/internal/xdr"
)

// READDIR: cookies and the cookie verifier are the v3 server's (getdents
// offsets, stable while the directory changes; readdir.go), each entry
// with the attributes asked for, an entry whose attributes cannot be had
// with rdattr_error. The reply is streamed into the reply buffer, bounded
// by maxcount and the session's reply size; dircount bounds the entries'
// cookies and names but never keeps out the first.

// pseudoCookie is the cookie of a pseudo directory's one entry (1 and 2
// are reserved).
const pseudoCookie = 3

func (c *compound) readdir(a *nfs4.ReaddirArgs) nfs4.Status {
	if !c.cur.set {
		return c.status(nfs4.ErrNoFileHandle)
	}
	if c.cur.n == nil {
		return c.readdirPseudo(a)
	}
	dir := c.cur.n
	switch {
	case dir.ftype == unix.S_IFLNK:
		return c.status(nfs4.ErrSymlink)
	case !dir.isDir():
		return c.status(nfs4.ErrNotDir)
	}
	verf := nfs4.Verifier(dir.cverf)
	switch {
	case a.Cookie == 1 || a.Cookie == 2 || a.Cookie > math.MaxInt64:
		return c.status(nfs4.ErrBadCookie)
	case a.Cookie != 0 && a.CookieVerf != (nfs4.Verifier{}) && a.CookieVerf != verf:
		return c.status(nfs4.ErrNotSame)
	}
	opStart := len(c.reply) // after the operation number
	limit := int(a.MaxCount)
	if c.sess != nil {
		limit = min(limit, int(c.sess.Fore.MaxResponseSize)-(opStart-c.start))
	}
	limit = min(limit, maxDirReply)
	const head = 4 + nfs4.ReaddirHeadSize + nfs4.DirListEndSize
	if limit < head+24 {
		return c.status(nfs4.ErrTooSmall)
	}
	dircount := int(a.DirCount)
	if dircount == 0 {
		dircount = math.MaxInt
	}
	mask := a.AttrRequest.And(supportedAttrs)

	dir.dirMu.Lock()
	defer dir.dirMu.Unlock()
	dfd, err := c.s.dirFd(dir)
	if err != nil {
		return c.status(c.s.statusOf4(err))
	}
	buf := c.s.getdentsBuf()
	defer c.s.putdentsBuf(buf)
	entries, dirUsed, eof := 0, 0, false
	c.reply = nfs4.AppendReaddirResHead(c.reply, verf)
	err = c.s.as(&c.id, func() error {
		if !c.id.isRoot() {
			if err := accessOK(dir.fd, unix.R_OK); err != nil {
				return err
			}
		}
		if _, err := unix.Seek(dfd, int64(a.Cookie), unix.SEEK_SET); err != nil {
			if errors.Is(err, unix.EINVAL) {
				return nfs4.ErrBadCookie
			}
			return err
		}
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
			for rest := buf[:k]; len(rest) > 0; {
				var d dirent
				var ok bool
				if d, rest, ok = nextDirent(rest); !ok {
					return errors.New("malformed getdents64 record")
				}
				if isDot(d.name) {
					continue
				}
				if d.off <= 0 {
					return errors.New("directory offset 0 after an entry")
				}
				e := nfs4.Entry{Cookie: uint64(d.off), Name: d.name}
				if !c.entryAttrs(dir, &d, mask, &e.Attrs) {
					continue // removed since getdents read it
				}
				dsize := e.DirCountSize()
				if entries > 0 && dirUsed+dsize > dircount {
					return nil
				}
				mark := len(c.reply)
				c.reply = nfs4.AppendEntry(c.reply, &e)
				if len(c.reply)-opStart+nfs4.DirListEndSize > limit {
					c.reply = c.reply[:mark]
					return nil
				}
				entries++
				dirUsed += dsize
			}
		}
	})
	if err != nil {
		c.reply = c.reply[:opStart]
		if !errors.Is(err, nfs4.ErrBadCookie) {
			c.s.logf("hushfs server: listing directory inode %d: %v", dir.ino, err)
		}
		return c.status(c.s.statusOf4(err))
	}
	if entries == 0 && !eof {
		c.reply = c.reply[:opStart]
		return c.status(nfs4.ErrTooSmall)
	}
	c.reply = nfs4.AppendDirListEnd(c.reply, eof)
	return nfs4.OK
}

// entryAttrs fills the attributes of a directory entry; false if the entry
// is gone. An entry whose attributes cannot be had (a mount point, which
// is not exported) carries rdattr_error alone.
func (c *compound) entryAttrs(dir *node, d *dirent, mask nfs4.Bitmap, f *nfs4.Fattr) bool {
	if mask.IsZero() {
		*f = nfs4.Fattr{}
		return true
	}
	s := c.s
	o := objAttrs{}
	err := unix.Fstatat(dir.fd, string(d.name), &o.st, unix.AT_SYMLINK_NOFOLLOW)
	var fh []byte
	if err == nil && o.st.Dev != s.rootDev {
		err = errMountPoint
	}
	if err == nil && mask.Has(nfs4.AttrFilehandle) {
		h, ok := s.handleAt(dir.fd, string(d.name))
		if !ok {
			err = errMountPoint
		}
		fh = h
	}
	if err != nil {
		if errors.Is(err, unix.ENOENT) {
			return false
		}
		*f = nfs4.Fattr{}
		if mask.Has(nfs4.AttrRdattrError) {
			f.Mask.Set(nfs4.AttrRdattrError)
			f.RdattrError = status4(s.statusOf(err))
		}
		return true
	}
	// A stand-in node for fattr: the handle and whether it is the root.
	o.n = &node{fh: fh, fd: dir.fd, isRoot: o.st.Ino == s.rootIno}
	m := mask
	m.Clear(nfs4.AttrFilehandle)
	m.Clear(nfs4.AttrRdattrError)
	if st := c.fattr(m, &o, f); st != nfs4.OK { // the directory's statfs stands for the entry's
		*f = nfs4.Fattr{}
		if mask.Has(nfs4.AttrRdattrError) {
			f.Mask.Set(nfs4.AttrRdattrError)
			f.RdattrError = st
		}
		return true
	}
	if mask.Has(nfs4.AttrFilehandle) {
		f.Mask.Set(nfs4.AttrFilehandle)
		f.Filehandle = fh
	}
	if mask.Has(nfs4.AttrRdattrError) {
		f.Mask.Set(nfs4.AttrRdattrError)
		f.RdattrError = nfs4.OK
	}
	return true
}

// readdirPseudo lists a pseudo directory: its one entry, the next
// component of the export's path.
func (c *compound) readdirPseudo(a *nfs4.ReaddirArgs) nfs4.Status {
	d := c.cur.depth
	opStart := len(c.reply)
	c.reply = nfs4.AppendReaddirResHead(c.reply, nfs4.Verifier{})
	if a.Cookie < pseudoCookie {
		e := nfs4.Entry{Cookie: pseudoCookie, Name: []byte(c.s.v4.pseudo[d])}
		mask := a.AttrRequest.And(supportedAttrs)
		var o objAttrs
		var ok bool
		if d+1 < len(c.s.v4.pseudo) {
			o.depth = d + 1
			c.s.pseudoStat(d+1, &o.st)
			ok = true
		} else if n, err := c.s.resolve(c.s.rootFH); err == nil {
			defer c.s.cache.release(n)
			o.n = n
			ok = c.s.stat(n, &o.st) == nil
		}
		if ok && c.fattr(mask, &o, &e.Attrs) == nfs4.OK {
			if mask.Has(nfs4.AttrRdattrError) {
				e.Attrs.Mask.Set(nfs4.AttrRdattrError)
			}
		} else {
			e.Attrs = nfs4.Fattr{}
			if mask.Has(nfs4.AttrRdattrError) {
				e.Attrs.Mask.Set(nfs4.AttrRdattrError)
				e.Attrs.RdattrError = nfs4.ErrIO
			}
		}
		c.reply = nfs4.AppendEntry(c.reply, &e)
		if len(c.reply)-opStart+nfs4.DirListEndSize > int(a.MaxCount) {
			c.reply = xdr.AppendUint32(c.reply[:opStart], uint32(nfs4.ErrTooSmall))
			return nfs4.ErrTooSmall
		}
	}
	c.reply = nfs4.AppendDirListEnd(c.reply, true)
	return nfs4.OK
}
