package server

import (
	"bytes"

	"golang.org/x/sys/unix"

	"hushfs/internal/nfs3"
	"hushfs/internal/nfs4"
)

// CREATE, REMOVE, RENAME, LINK, READLINK: the v3 procedures do the work
// (with the caller's credentials, durably), and their wcc data, taken
// under the directory's lock around the change (dirop.go), is the
// change_info4, atomic.

// cinfoOf is the change_info4 of a directory change from its wcc data:
// atomic when both sides were taken (under the directory's lock).
func cinfoOf(w *nfs3.WccData) nfs4.ChangeInfo {
	ci := nfs4.ChangeInfo{Atomic: w.Before.Present && w.After.Present}
	if w.Before.Present {
		ci.Before = changeOf3(w.Before.Attr.Ctime)
	}
	if w.After.Present {
		ci.After = changeOf3(w.After.Attr.Ctime)
	}
	return ci
}

func (c *compound) create(a *nfs4.CreateArgs) nfs4.Status {
	dir, st := c.realDir()
	if st == nfs4.OK {
		st = checkName4(a.Name)
	}
	if st != nfs4.OK {
		return c.status(st)
	}
	sa, far, st := c.s.sattrOf(&a.Attrs)
	if st == nfs4.OK && (sa.SetSize || far != nil) {
		st = nfs4.ErrInval
	}
	if st != nfs4.OK {
		return c.status(st)
	}
	if a.Type == nfs4.TypeReg {
		return c.status(nfs4.ErrBadType) // regular files are OPENed
	}
	done, st := c.mayChangeDir(dir, a.Name, unix.IN_CREATE)
	if st != nfs4.OK {
		return c.status(st)
	}
	where := nfs3.DirOpArgs{Dir: dir.fh, Name: a.Name}
	var r nfs3.DirOpRes
	switch a.Type {
	case nfs4.TypeDir:
		r = c.s.mkdir(&c.id, &nfs3.MkdirArgs{Where: where, Attr: sa})
	case nfs4.TypeLnk:
		r = c.s.symlink(&c.id, &nfs3.SymlinkArgs{Where: where, Attr: sa, Data: a.LinkData})
	case nfs4.TypeBlk, nfs4.TypeChr, nfs4.TypeSock, nfs4.TypeFifo:
		r = c.s.mknod(&c.id, &nfs3.MknodArgs{Where: where, Type: nfs3.Ftype(a.Type), Attr: sa,
			Spec: nfs3.SpecData{Major: a.Dev.Major, Minor: a.Dev.Minor}})
	default:
		done(false)
		return c.status(nfs4.ErrBadType)
	}
	done(r.Status == nfs3.OK)
	if r.Status != nfs3.OK {
		return c.status(status4(r.Status))
	}
	n, err := c.s.resolve(r.Obj.FH)
	if err != nil {
		return c.status(c.s.statusOf4(err))
	}
	res := nfs4.CreateRes{Status: nfs4.OK, CInfo: cinfoOf(&r.DirWcc), AttrSet: a.Attrs.Mask}
	c.reply = res.Append(c.reply)
	c.setCur(n, 0)
	return nfs4.OK
}

func (c *compound) remove(a *nfs4.RemoveArgs) nfs4.Status {
	dir, st := c.realDir()
	if st == nfs4.OK {
		st = checkName4(a.Target)
	}
	if st != nfs4.OK {
		return c.status(st)
	}
	if st := c.mayChangeName(dir, a.Target); st != nfs4.OK {
		return c.status(st)
	}
	done, st := c.mayChangeDir(dir, a.Target, unix.IN_DELETE)
	if st != nfs4.OK {
		return c.status(st)
	}
	args := nfs3.DirOpArgs{Dir: dir.fh, Name: a.Target}
	r := c.s.remove(&c.id, &args, false)
	if r.Status == nfs3.ErrIsDir {
		r = c.s.remove(&c.id, &args, true)
	}
	done(r.Status == nfs3.OK)
	if r.Status != nfs3.OK {
		return c.status(status4(r.Status))
	}
	res := nfs4.RemoveRes{Status: nfs4.OK, CInfo: cinfoOf(&r.DirWcc)}
	c.reply = res.Append(c.reply)
	return nfs4.OK
}

func (c *compound) rename(a *nfs4.RenameArgs) nfs4.Status {
	if !c.saved.set {
		return c.status(nfs4.ErrNoFileHandle)
	}
	to, st := c.realDir()
	if st != nfs4.OK {
		return c.status(st)
	}
	from := c.saved.n
	switch {
	case from == nil:
		return c.status(nfs4.ErrROFS)
	case !from.isDir():
		return c.status(nfs4.ErrNotDir)
	}
	if st := checkName4(a.OldName); st != nfs4.OK {
		return c.status(st)
	}
	if st := checkName4(a.NewName); st != nfs4.OK {
		return c.status(st)
	}
	if st := c.mayChangeName(from, a.OldName); st != nfs4.OK {
		return c.status(st)
	}
	if st := c.mayChangeName(to, a.NewName); st != nfs4.OK {
		return c.status(st)
	}
	doneFrom, st := c.mayChangeDir(from, a.OldName, unix.IN_MOVED_FROM)
	if st != nfs4.OK {
		return c.status(st)
	}
	doneTo, st := c.mayChangeDir(to, a.NewName, unix.IN_MOVED_TO)
	if st != nfs4.OK {
		doneFrom(false)
		return c.status(st)
	}
	r := c.s.rename(&c.id, &nfs3.RenameArgs{From: nfs3.DirOpArgs{Dir: from.fh, Name: a.OldName},
		To: nfs3.DirOpArgs{Dir: to.fh, Name: a.NewName}})
	// A rename of a name onto itself changes nothing and causes no
	// event.
	same := r.Status == nfs3.OK && bytes.Equal(from.fh, to.fh) && bytes.Equal(a.OldName, a.NewName)
	doneFrom(r.Status == nfs3.OK && !same)
	doneTo(r.Status == nfs3.OK && !same)
	if r.Status != nfs3.OK {
		return c.status(status4(r.Status))
	}
	res := nfs4.RenameRes{Status: nfs4.OK, SourceCInfo: cinfoOf(&r.FromDirWcc), TargetCInfo: cinfoOf(&r.ToDirWcc)}
	c.reply = res.Append(c.reply)
	return nfs4.OK
}

func (c *compound) link(a *nfs4.LinkArgs) nfs4.Status {
	if !c.saved.set {
		return c.status(nfs4.ErrNoFileHandle)
	}
	dir, st := c.realDir()
	if st != nfs4.OK {
		return c.status(st)
	}
	file := c.saved.n
	switch {
	case file == nil:
		return c.status(nfs4.ErrXDev)
	case file.isDir():
		return c.status(nfs4.ErrIsDir)
	}
	if st := checkName4(a.NewName); st != nfs4.OK {
		return c.status(st)
	}
	// A new name changes the file too (its link count and ctime): other
	// clients' delegations of it go first.
	if st := c.mayChange(file.key); st != nfs4.OK {
		return c.status(st)
	}
	// The holder of the file's write delegation keeps it (leases_self.go).
	self := c.s.v4.leases.expectLink(file.key)
	done, st := c.mayChangeDir(dir, a.NewName, unix.IN_CREATE)
	if st != nfs4.OK {
		self(false)
		return c.status(st)
	}
	r := c.s.link(&c.id, &nfs3.LinkArgs{File: file.fh, Link: nfs3.DirOpArgs{Dir: dir.fh, Name: a.NewName}})
	self(r.Status == nfs3.OK)
	done(r.Status == nfs3.OK)
	if r.Status != nfs3.OK {
		return c.status(status4(r.Status))
	}
	res := nfs4.LinkRes{Status: nfs4.OK, CInfo: cinfoOf(&r.LinkDirWcc)}
	c.reply = res.Append(c.reply)
	return nfs4.OK
}

func (c *compound) readlink() nfs4.Status {
	switch {
	case !c.cur.set:
		return c.status(nfs4.ErrNoFileHandle)
	case c.cur.n == nil || c.cur.n.ftype != unix.S_IFLNK:
		return c.status(nfs4.ErrInval)
	}
	r := c.s.readlink(&nfs3.ReadlinkArgs{Symlink: c.cur.n.fh})
	if r.Status != nfs3.OK {
		return c.status(status4(r.Status))
	}
	res := nfs4.ReadlinkRes{Status: nfs4.OK, Link: r.Data}
	c.reply = res.Append(c.reply)
	return nfs4.OK
}
