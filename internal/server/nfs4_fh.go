package server

import (
	"crypto/hmac"
	"encoding/binary"
	"path/filepath"
	"strings"

	"golang.org/x/sys/unix"

	"hushfs/internal/nfs3"
	"hushfs/internal/nfs4"
)

// Filehandles in a COMPOUND, and the pseudo file system.
//
// NFSv4 clients start from the root filehandle (PUTROOTFH) and walk to
// the export by name, as `mount server:/srv/export` does: the server
// offers a read-only pseudo file system of the directories on the
// export's path, "/", "/srv", whose last LOOKUP reaches the export's real
// root. Pseudo directories have handles of their own (sealed like real
// ones, but never valid for NFSv3), their own fsid (the client sees the
// export as a file system mounted there), and list only the next
// component of the path.

// fhState is the current or saved filehandle: a real object (a node with
// a reference) or a pseudo directory (its depth: 0 is "/").
type fhState struct {
	set   bool
	n     *node
	depth int
}

func (f *fhState) clear(s *Server) {
	if f.n != nil {
		s.cache.release(f.n)
	}
	*f = fhState{}
}

// setCur makes n (whose reference the compound takes over) or the pseudo
// directory at depth the current filehandle; the current stateid is then
// none (RFC 8881 §16.2.3.1.2).
func (c *compound) setCur(n *node, depth int) {
	c.cur.clear(c.s)
	c.cur = fhState{set: true, n: n, depth: depth}
	c.curSidOK = false
}

// pseudoFH layout: [0] fhPseudo, [1:3] the export's short id, [3] depth,
// [4:16] MAC over the first four bytes and the export's path.
const (
	fhPseudo    = 0xfe
	pseudoFHLen = 4 + fhMACLen
)

func (s *Server) pseudoFH(depth int) nfs4.FH {
	b := make([]byte, 4, pseudoFHLen)
	b[0] = fhPseudo
	binary.BigEndian.PutUint16(b[1:3], fhShortID(s.codec.exportID))
	b[3] = byte(depth)
	m := s.codec.derive("pseudo", b, []byte(s.rootArg))
	return append(b, m[:fhMACLen]...)
}

// pseudoDepth returns the depth of a pseudo directory's handle, or ok
// false if fh is not one of ours.
func (s *Server) pseudoDepth(fh []byte) (int, bool) {
	if len(fh) != pseudoFHLen || fh[0] != fhPseudo || int(fh[3]) >= len(s.v4.pseudo) {
		return 0, false
	}
	want := s.pseudoFH(int(fh[3]))
	return int(fh[3]), hmac.Equal(want, fh)
}

// pseudoPath splits the export's path into the pseudo file system's
// components ("/srv/export": "srv", "export").
func pseudoPath(root string) []string {
	root = filepath.Clean(root)
	if root == "/" {
		return nil
	}
	return strings.Split(strings.TrimPrefix(root, "/"), "/")
}

// curFH returns the current filehandle's bytes.
func (c *compound) fhOf(f *fhState) nfs4.FH {
	if f.n != nil {
		return nfs4.FH(f.n.fh)
	}
	return c.s.pseudoFH(f.depth)
}

// realDir returns the current filehandle as a real directory, or the
// status to fail with: NOFILEHANDLE, ROFS for a pseudo directory (when
// changing), NOTDIR (SYMLINK for a link).
func (c *compound) realDir() (*node, nfs4.Status) {
	switch {
	case !c.cur.set:
		return nil, nfs4.ErrNoFileHandle
	case c.cur.n == nil:
		return nil, nfs4.ErrROFS
	case c.cur.n.ftype == unix.S_IFLNK:
		return nil, nfs4.ErrSymlink
	case !c.cur.n.isDir():
		return nil, nfs4.ErrNotDir
	}
	return c.cur.n, nfs4.OK
}

func (c *compound) putFH(a *nfs4.PutFHArgs) nfs4.Status {
	if d, ok := c.s.pseudoDepth(a.FH); ok {
		c.setCur(nil, d)
		return c.status(nfs4.OK)
	}
	n, err := c.s.resolve(nfs3.FH(a.FH))
	if err != nil {
		return c.status(c.s.statusOf4(err))
	}
	c.setCur(n, 0)
	return c.status(nfs4.OK)
}

func (c *compound) putRootFH() nfs4.Status {
	if len(c.s.v4.pseudo) == 0 {
		n, err := c.s.resolve(c.s.rootFH)
		if err != nil {
			return c.status(c.s.statusOf4(err))
		}
		c.setCur(n, 0)
		return c.status(nfs4.OK)
	}
	c.setCur(nil, 0)
	return c.status(nfs4.OK)
}

func (c *compound) getFH() nfs4.Status {
	if !c.cur.set {
		return c.status(nfs4.ErrNoFileHandle)
	}
	res := nfs4.GetFHRes{Status: nfs4.OK, FH: c.fhOf(&c.cur)}
	c.reply = res.Append(c.reply)
	return nfs4.OK
}

func (c *compound) saveFH() nfs4.Status {
	if !c.cur.set {
		return c.status(nfs4.ErrNoFileHandle)
	}
	c.saved.clear(c.s)
	c.saved = c.cur
	if c.saved.n != nil {
		c.s.cache.ref(c.saved.n)
	}
	c.savedSid, c.savedSidOK = c.curSid, c.curSidOK
	return c.status(nfs4.OK)
}

func (c *compound) restoreFH() nfs4.Status {
	if !c.saved.set {
		return c.status(nfs4.ErrRestoreFH)
	}
	c.cur.clear(c.s)
	c.cur = c.saved
	if c.cur.n != nil {
		c.s.cache.ref(c.cur.n)
	}
	c.curSid, c.curSidOK = c.savedSid, c.savedSidOK
	return c.status(nfs4.OK)
}

// checkName4 validates a component name from a client: empty is INVAL,
// "." and ".." and names with '/' or NUL are BADNAME, over 255 bytes
// NAMETOOLONG.
func checkName4(name []byte) nfs4.Status {
	switch {
	case len(name) == 0:
		return nfs4.ErrInval
	case len(name) > nfs3.MaxNameLen:
		return nfs4.ErrNameTooLong
	case isDot(name), strings.ContainsAny(string(name), "/\x00"):
		return nfs4.ErrBadName
	}
	return nfs4.OK
}

// lookupNode finds name in the current directory: a pseudo directory, the
// export's root, or a real object (with a reference). It runs as the
// caller, who needs search permission.
func (c *compound) lookupNode(name []byte) (n *node, depth int, st nfs4.Status) {
	if !c.cur.set {
		return nil, 0, nfs4.ErrNoFileHandle
	}
	if c.cur.n == nil {
		if st := checkName4(name); st != nfs4.OK {
			return nil, 0, st
		}
		d := c.cur.depth
		if string(name) != c.s.v4.pseudo[d] {
			return nil, 0, nfs4.ErrNoEnt
		}
		if d+1 < len(c.s.v4.pseudo) {
			return nil, d + 1, nfs4.OK
		}
		n, err := c.s.resolve(c.s.rootFH)
		if err != nil {
			return nil, 0, c.s.statusOf4(err)
		}
		return n, 0, nfs4.OK
	}
	dir := c.cur.n
	switch {
	case dir.ftype == unix.S_IFLNK:
		return nil, 0, nfs4.ErrSymlink
	case !dir.isDir():
		return nil, 0, nfs4.ErrNotDir
	}
	if st := checkName4(name); st != nfs4.OK {
		return nil, 0, st
	}
	err := c.s.as(&c.id, func() error {
		fd, err := openEntry(dir.fd, string(name), 0)
		if err != nil {
			return err
		}
		var st unix.Stat_t
		if err := unix.Fstat(fd, &st); err != nil {
			unix.Close(fd)
			return err
		}
		n, err = c.s.nodeFromFd(fd, &st)
		return err
	})
	if err != nil {
		st := c.s.statusOf4(err)
		if st == nfs4.ErrStale {
			st = nfs4.ErrNoEnt // removed under us
		}
		return nil, 0, st
	}
	return n, 0, nfs4.OK
}

func (c *compound) lookup(a *nfs4.LookupArgs) nfs4.Status {
	n, depth, st := c.lookupNode(a.Name)
	if st != nfs4.OK {
		return c.status(st)
	}
	c.setCur(n, depth)
	return c.status(nfs4.OK)
}

func (c *compound) lookupp() nfs4.Status {
	if !c.cur.set {
		return c.status(nfs4.ErrNoFileHandle)
	}
	if c.cur.n == nil {
		if c.cur.depth == 0 {
			return c.status(nfs4.ErrNoEnt)
		}
		c.setCur(nil, c.cur.depth-1)
		return c.status(nfs4.OK)
	}
	dir := c.cur.n
	switch {
	case dir.ftype == unix.S_IFLNK:
		return c.status(nfs4.ErrSymlink)
	case !dir.isDir():
		return c.status(nfs4.ErrNotDir)
	case dir.isRoot:
		if len(c.s.v4.pseudo) == 0 {
			return c.status(nfs4.ErrNoEnt)
		}
		c.setCur(nil, len(c.s.v4.pseudo)-1)
		return c.status(nfs4.OK)
	}
	pfd := -1
	err := c.s.as(&c.id, func() error {
		fd, err := openDotDot(dir.fd)
		pfd = fd
		return err
	})
	if err != nil {
		return c.status(c.s.statusOf4(err))
	}
	n, err := c.s.parentNode(pfd)
	if err != nil {
		return c.status(c.s.statusOf4(err))
	}
	c.setCur(n, 0)
	return c.status(nfs4.OK)
}

// The security flavors of the export, best first.
var secFlavors = []nfs4.SecinfoFlavor{{Flavor: nfs4.AuthSys}, {Flavor: nfs4.AuthNone}}

func (c *compound) secinfoReply() nfs4.Status {
	res := nfs4.SecinfoRes{Status: nfs4.OK, Flavors: secFlavors}
	c.reply = res.Append(c.reply)
	// SECINFO consumes the current filehandle (RFC 8881 §2.6.3.1.1.8).
	c.cur.clear(c.s)
	c.curSidOK = false
	return nfs4.OK
}

func (c *compound) secinfo(a *nfs4.SecinfoArgs) nfs4.Status {
	n, _, st := c.lookupNode(a.Name)
	if st != nfs4.OK {
		return c.status(st)
	}
	if n != nil {
		c.s.cache.release(n)
	}
	return c.secinfoReply()
}

func (c *compound) secinfoNoName(a *nfs4.SecinfoNoNameArgs) nfs4.Status {
	if !c.cur.set {
		return c.status(nfs4.ErrNoFileHandle)
	}
	if a.Style == nfs4.SecinfoStyleParent {
		if c.cur.n == nil && c.cur.depth == 0 {
			return c.status(nfs4.ErrNoEnt)
		}
		if c.cur.n != nil && !c.cur.n.isDir() {
			return c.status(nfs4.ErrNotDir)
		}
	}
	return c.secinfoReply()
}
