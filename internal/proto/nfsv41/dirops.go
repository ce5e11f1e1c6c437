package nfsv41

import (
	"bytes"
	"context"
	"syscall"

	"hushfs/internal/nfs4"
	"hushfs/internal/proto"
)

// The methods that change or list a directory. Each brings the
// directory's attributes before and after the operation (GETATTRs around
// it) and its change_info, which become proto.Wcc (wccOf).

// Create makes a regular file: v4 creates them with OPEN, closed at once
// in the same COMPOUND (CLOSE with the current stateid), since the core
// keeps no opens yet. An OPEN whose CLOSE did not run is closed on its own.
func (s *Server) Create(ctx context.Context, c *proto.Cred, dir proto.FH, name string, how proto.CreateHow) (proto.CreateRes, error) {
	open := &nfs4.OpenArgs{
		// Read access: an UNCHECKED create may open an existing file, which
		// v3's CREATE would not check for writing; a new file is its
		// creator's whatever its mode. Truncating needs write access.
		ShareAccess: nfs4.ShareAccessRead | nfs4.ShareAccessWantNoDeleg,
		ShareDeny:   nfs4.ShareDenyNone,
		Owner:       nfs4.StateOwner{ClientID: s.sess.Info().ClientID, Owner: s.owner},
		OpenType:    nfs4.OpenCreate,
		Claim:       nfs4.OpenClaim{Type: nfs4.ClaimNull, File: []byte(name)},
	}
	setCreateHow(open, &how)
	if how.Mode != proto.Exclusive && how.Attrs.SetSize {
		open.ShareAccess = nfs4.ShareAccessWrite | nfs4.ShareAccessWantNoDeleg
	}
	ops := []nfs4.Argop{putfh(dir), getattr(fileAttrs), {Op: nfs4.OpOpen, Args: open}, {Op: nfs4.OpGetFH},
		getattr(fileAttrs), {Op: nfs4.OpClose, Args: &nfs4.CloseArgs{Stateid: nfs4.CurrentStateid}},
		putfh(dir), getattr(fileAttrs)}
	r, err := s.compound(ctx, c, "CREATE", ops)
	if err != nil {
		return proto.CreateRes{}, err
	}
	pre, _ := r.attrs(1)
	out := proto.CreateRes{Status: statusErr(r.status(2))}
	o, ok := r.at(2).(*nfs4.OpenRes)
	if !ok || o.Status != nfs4.OK {
		out.DirWcc = failedWcc(pre)
		return out, nil
	}
	var fh proto.FH
	if g, ok := r.at(3).(*nfs4.GetFHRes); ok && g.Status == nfs4.OK && len(g.FH) > 0 {
		fh = proto.FH(g.FH)
		out.FH = proto.PostFH{Present: true, FH: fh}
	}
	out.Attr, _ = r.attrs(4)
	dirAttr, _ := r.attrs(7)
	out.DirWcc = wccOf(&o.CInfo, pre, dirAttr)
	if r.status(5) != nfs4.OK || o.Delegation.Type == nfs4.DelegateRead || o.Delegation.Type == nfs4.DelegateWrite {
		s.release(ctx, c, fh, o)
	}
	return out, nil
}

// release gives back what an OPEN left us holding: its open, when the
// COMPOUND's CLOSE did not run, and a delegation the server granted
// though we asked for none. A failure is logged: the server frees the
// state when our lease ends.
func (s *Server) release(ctx context.Context, c *proto.Cred, fh proto.FH, o *nfs4.OpenRes) {
	if len(fh) == 0 {
		s.logf("hushfs: NFSv4.1 OPEN of a new file gave no handle: its open state stays until the lease ends")
		return
	}
	ops := []nfs4.Argop{putfh(fh)}
	if o.Delegation.Type == nfs4.DelegateRead || o.Delegation.Type == nfs4.DelegateWrite {
		ops = append(ops, nfs4.Argop{Op: nfs4.OpDelegReturn, Args: &nfs4.DelegReturnArgs{Stateid: o.Delegation.Stateid}})
	}
	ops = append(ops, nfs4.Argop{Op: nfs4.OpClose, Args: &nfs4.CloseArgs{Stateid: o.Stateid}})
	r, err := s.compound(ctx, c, "CLOSE", ops)
	if err == nil && r.res.Status != nfs4.OK && r.res.Status != nfs4.ErrBadStateid && r.res.Status != nfs4.ErrOldStateid {
		err = r.res.Status
	}
	if err != nil {
		s.logf("hushfs: NFSv4.1 closing a new file's open: %v", err)
	}
}

// create makes a directory, symbolic link, device, socket or FIFO
// (CREATE), with its handle and attributes.
func (s *Server) create(ctx context.Context, c *proto.Cred, proc string, dir proto.FH, args *nfs4.CreateArgs) (proto.CreateRes, error) {
	r, err := s.compound(ctx, c, proc, []nfs4.Argop{putfh(dir), getattr(fileAttrs), {Op: nfs4.OpCreate, Args: args},
		{Op: nfs4.OpGetFH}, getattr(fileAttrs), putfh(dir), getattr(fileAttrs)})
	if err != nil {
		return proto.CreateRes{}, err
	}
	pre, _ := r.attrs(1)
	out := proto.CreateRes{Status: statusErr(r.status(2))}
	cr, ok := r.at(2).(*nfs4.CreateRes)
	if !ok || cr.Status != nfs4.OK {
		out.DirWcc = failedWcc(pre)
		return out, nil
	}
	if g, ok := r.at(3).(*nfs4.GetFHRes); ok && g.Status == nfs4.OK && len(g.FH) > 0 {
		out.FH = proto.PostFH{Present: true, FH: proto.FH(g.FH)}
	}
	out.Attr, _ = r.attrs(4)
	dirAttr, _ := r.attrs(6)
	out.DirWcc = wccOf(&cr.CInfo, pre, dirAttr)
	return out, nil
}

func (s *Server) Mkdir(ctx context.Context, c *proto.Cred, dir proto.FH, name string, sa proto.SetAttrs) (proto.CreateRes, error) {
	return s.create(ctx, c, "MKDIR", dir, &nfs4.CreateArgs{Type: nfs4.TypeDir, Name: []byte(name), Attrs: fattrOf(&sa)})
}

func (s *Server) Symlink(ctx context.Context, c *proto.Cred, dir proto.FH, name, target string, sa proto.SetAttrs) (proto.CreateRes, error) {
	return s.create(ctx, c, "SYMLINK", dir, &nfs4.CreateArgs{Type: nfs4.TypeLnk, LinkData: []byte(target),
		Name: []byte(name), Attrs: fattrOf(&sa)})
}

func (s *Server) Mknod(ctx context.Context, c *proto.Cred, dir proto.FH, name string, t proto.FileType, sa proto.SetAttrs, dev proto.Device) (proto.CreateRes, error) {
	args := &nfs4.CreateArgs{Type: nfs4.Ftype(t), Name: []byte(name), Attrs: fattrOf(&sa)}
	if t == proto.TypeChr || t == proto.TypeBlk {
		args.Dev = nfs4.Specdata{Major: dev.Major, Minor: dev.Minor}
	}
	return s.create(ctx, c, "MKNOD", dir, args)
}

// Remove and Rmdir are both REMOVE in v4, which removes whatever the name
// is. unlink(2) must not remove a directory nor rmdir(2) a file, so the
// COMPOUND first looks the name up and checks its type (NVERIFY: not a
// directory; VERIFY: a directory), in the same round trip.
func (s *Server) Remove(ctx context.Context, c *proto.Cred, dir proto.FH, name string) (proto.RemoveRes, error) {
	return s.remove(ctx, c, "REMOVE", dir, name, nfs4.OpNverify, nil)
}

func (s *Server) Rmdir(ctx context.Context, c *proto.Cred, dir proto.FH, name string) (proto.RemoveRes, error) {
	return s.remove(ctx, c, "RMDIR", dir, name, nfs4.OpVerify, nil)
}

var _ proto.RemoveReturner = (*Server)(nil)

// RemoveReturning is Remove with PUTFH of the file and DELEGRETURN
// before its operations (proto.RemoveReturner). A DELEGRETURN that
// fails stops the COMPOUND before the removal, which then goes alone.
func (s *Server) RemoveReturning(ctx context.Context, c *proto.Cred, dir proto.FH, name string, file proto.FH, st proto.StateID) (proto.RemoveRes, bool, error) {
	ret := []nfs4.Argop{putfh(file), {Op: nfs4.OpDelegReturn, Args: &nfs4.DelegReturnArgs{Stateid: stateidOf(st)}}}
	var returned bool
	res, err := s.remove(ctx, c, "REMOVE", dir, name, nfs4.OpNverify, func(r *reply) {
		switch r.status(1) {
		case nfs4.OK, nfs4.ErrBadStateid, nfs4.ErrStaleStateid, nfs4.ErrExpired:
			returned = true // back, or gone already (as ReturnDelegation)
		}
	}, ret...)
	return res, returned, err
}

// remove sends the removal of name, with ret (a delegation's return)
// before its operations; seen, if set, sees the first reply.
func (s *Server) remove(ctx context.Context, c *proto.Cred, proc string, dir proto.FH, name string, check nfs4.Opnum, seen func(*reply), ret ...nfs4.Argop) (proto.RemoveRes, error) {
	isDir := &nfs4.VerifyArgs{Attrs: nfs4.Fattr{Mask: typeAttr, Type: nfs4.TypeDir}}
	k := len(ret) // the removal's operations' indices are k on
	// The name may be a file whose CLOSE is queued: closed first, in the
	// same COMPOUND (closeq.go).
	r, err := s.compoundLead(ctx, c, proc, s.cq.takeLead(c), append(ret, putfh(dir), getattr(fileAttrs),
		nfs4.Argop{Op: nfs4.OpLookup, Args: &nfs4.LookupArgs{Name: []byte(name)}}, nfs4.Argop{Op: check, Args: isDir},
		putfh(dir), nfs4.Argop{Op: nfs4.OpRemove, Args: &nfs4.RemoveArgs{Target: []byte(name)}}, getattr(fileAttrs)))
	if err != nil {
		return proto.RemoveRes{}, err
	}
	if seen != nil {
		seen(r)
	}
	if k > 0 && r.at(k) == nil {
		// Stopped in ret: the removal goes alone.
		return s.remove(ctx, c, proc, dir, name, check, nil)
	}
	switch st := r.status(k + 3); {
	case r.at(k+3) == nil: // the lookup failed: that is the answer
	case check == nfs4.OpNverify && st == nfs4.ErrSame:
		pre, _ := r.attrs(k + 1)
		return proto.RemoveRes{Status: proto.Error{Errno: syscall.EISDIR, Name: "NFS4ERR_SAME (a directory)"}, DirWcc: failedWcc(pre)}, nil
	case check == nfs4.OpVerify && st == nfs4.ErrNotSame:
		pre, _ := r.attrs(k + 1)
		return proto.RemoveRes{Status: proto.Error{Errno: syscall.ENOTDIR, Name: "NFS4ERR_NOT_SAME (not a directory)"}, DirWcc: failedWcc(pre)}, nil
	case check == nfs4.OpNverify && st != nfs4.OK:
		// The server could not read the file's type (ganesha answers
		// INVAL for a device or socket whose first name is gone, a bug
		// of its own): unlink removes it without the check. At worst
		// that removes an empty directory where EISDIR was due; never
		// data, and the kernel refuses unlink of a directory it knows.
		// rmdir gets the error instead: it must never remove a file.
		r, err = s.compound(ctx, c, proc, []nfs4.Argop{putfh(dir), getattr(fileAttrs),
			{Op: nfs4.OpRemove, Args: &nfs4.RemoveArgs{Target: []byte(name)}}, getattr(fileAttrs)})
		if err != nil {
			return proto.RemoveRes{}, err
		}
		return removeRes(r, 1, 2), nil
	}
	return removeRes(r, k+1, k+5), nil
}

// removeRes reads a REMOVE COMPOUND's answer: the directory's GETATTR at
// pre, REMOVE at rm and its GETATTR right after.
func removeRes(r *reply, pre, rm int) proto.RemoveRes {
	before, _ := r.attrs(pre)
	out := proto.RemoveRes{Status: statusErr(r.status(rm)), DirWcc: failedWcc(before)}
	if res, ok := r.at(rm).(*nfs4.RemoveRes); ok && res.Status == nfs4.OK {
		dirAttr, _ := r.attrs(rm + 1)
		out.DirWcc = wccOf(&res.CInfo, before, dirAttr)
	}
	return out
}

// Rename: the source directory is the saved handle, the target the
// current one; each gets its GETATTR after the RENAME.
func (s *Server) Rename(ctx context.Context, c *proto.Cred, fromDir proto.FH, fromName string, toDir proto.FH, toName string) (proto.RenameRes, error) {
	r, err := s.compoundLead(ctx, c, "RENAME", s.cq.takeLead(c), []nfs4.Argop{putfh(fromDir), getattr(fileAttrs), {Op: nfs4.OpSaveFH},
		putfh(toDir), getattr(fileAttrs),
		{Op: nfs4.OpRename, Args: &nfs4.RenameArgs{OldName: []byte(fromName), NewName: []byte(toName)}},
		getattr(fileAttrs), {Op: nfs4.OpRestoreFH}, getattr(fileAttrs)})
	if err != nil {
		return proto.RenameRes{}, err
	}
	fromPre, _ := r.attrs(1)
	toPre, _ := r.attrs(4)
	out := proto.RenameRes{Status: statusErr(r.status(5)), FromDirWcc: failedWcc(fromPre), ToDirWcc: failedWcc(toPre)}
	if rn, ok := r.at(5).(*nfs4.RenameRes); ok && rn.Status == nfs4.OK {
		toAttr, _ := r.attrs(6)
		fromAttr, _ := r.attrs(8)
		out.ToDirWcc = wccOf(&rn.TargetCInfo, toPre, toAttr)
		out.FromDirWcc = wccOf(&rn.SourceCInfo, fromPre, fromAttr)
	}
	return out, nil
}

// Link: the file is the saved handle, the directory the current one.
func (s *Server) Link(ctx context.Context, c *proto.Cred, fh, dir proto.FH, name string) (proto.LinkRes, error) {
	r, err := s.compound(ctx, c, "LINK", []nfs4.Argop{putfh(fh), {Op: nfs4.OpSaveFH}, putfh(dir), getattr(fileAttrs),
		{Op: nfs4.OpLink, Args: &nfs4.LinkArgs{NewName: []byte(name)}},
		getattr(fileAttrs), {Op: nfs4.OpRestoreFH}, getattr(fileAttrs)})
	if err != nil {
		return proto.LinkRes{}, err
	}
	pre, _ := r.attrs(3)
	out := proto.LinkRes{Status: statusErr(r.status(4)), DirWcc: failedWcc(pre)}
	if l, ok := r.at(4).(*nfs4.LinkRes); ok && l.Status == nfs4.OK {
		dirAttr, _ := r.attrs(5)
		out.DirWcc = wccOf(&l.CInfo, pre, dirAttr)
		out.Attr, _ = r.attrs(7)
	}
	return out, nil
}

func (s *Server) ReadDir(ctx context.Context, c *proto.Cred, a proto.ReadDirArgs) (proto.ReadDirRes, error) {
	return s.readDir(ctx, c, "READDIR", a, nameAttrs, a.Count)
}

// ReadDirPlus is READDIR asking for each entry's attributes and handle.
func (s *Server) ReadDirPlus(ctx context.Context, c *proto.Cred, a proto.ReadDirArgs) (proto.ReadDirRes, error) {
	return s.readDir(ctx, c, "READDIRPLUS", a, plusAttrs, a.MaxCount)
}

// NFSv4's READDIR lists neither "." nor ".." (RFC 8881 §18.23.4), which
// readdir(3) callers expect (cthon04's basic test6 counts them, ls -a
// shows them). As the Linux client does, a listing begins with both, made
// here: "." at cookie 1 and ".." at cookie 2, values the RFC reserves (no
// server hands them out); reading on from either reads the server from
// its start. Their fileids are the directory's and, by LOOKUPP in the same
// COMPOUND, its parent's (the export's root is its own parent, as a mount
// point's ".." is in the mount).
const (
	cookieDot    = 1
	cookieDotDot = 2
)

func (s *Server) readDir(ctx context.Context, c *proto.Cred, proc string, a proto.ReadDirArgs, want nfs4.Bitmap, maxCount uint32) (proto.ReadDirRes, error) {
	args := &nfs4.ReaddirArgs{Cookie: a.Cookie, CookieVerf: nfs4.Verifier(a.Verf), DirCount: a.Count,
		MaxCount: max(maxCount, a.Count), AttrRequest: want}
	dots := a.Cookie <= cookieDotDot
	if dots {
		args.Cookie, args.CookieVerf = 0, nfs4.Verifier{}
	}
	ops := []nfs4.Argop{putfh(a.Dir), {Op: nfs4.OpReaddir, Args: args}, getattr(fileAttrs)}
	parent := dots && a.Cookie < cookieDotDot && !bytes.Equal(a.Dir, s.root)
	if parent {
		ops = append(ops, nfs4.Argop{Op: nfs4.OpLookupP}, getattr(fileidAttr))
	}
	var r *reply
	var deleg proto.DirDelegation
	var err error
	if r = s.takeRootList(c, a, args.MaxCount); r != nil {
		// Answered by the mount's COMPOUND (rootlist.go).
	} else if wanted, ahead := proto.AheadOf(ctx); ahead && s.rq != nil {
		// A rider asks for no delegation (dirdeleg.go: the listing's own).
		r, err = s.compoundAhead(ctx, c, proc, ops, args, wanted)
	} else {
		r, deleg, err = s.compoundDirDeleg(ctx, c, proc, a, ops)
	}
	if err != nil {
		return proto.ReadDirRes{}, err
	}
	out := proto.ReadDirRes{DirDeleg: deleg}
	out.DirAttr, _ = r.attrs(2)
	rd, ok := r.at(1).(*nfs4.ReaddirRes)
	if !ok || rd.Status != nfs4.OK {
		st := r.status(1)
		if st == nfs4.ErrBadCookie || st == nfs4.ErrNotSame {
			// NOT_SAME: the cookie verifier is no longer the directory's.
			out.Status = proto.Error{Errno: proto.ErrBadCookie.Errno, Name: st.String(), Cond: proto.CondBadCookie}
		} else {
			out.Status = statusErr(st)
		}
		return out, nil
	}
	out.Verf, out.EOF = proto.Verf(rd.CookieVerf), rd.EOF
	out.Entries = make([]proto.DirEntry, 0, 2+len(rd.Entries))
	if dots {
		self := out.DirAttr.Attr.Fileid
		up := self
		if parent {
			if g, ok := r.at(4).(*nfs4.GetattrRes); ok && g.Status == nfs4.OK && g.Attrs.Mask.Has(nfs4.AttrFileid) {
				up = g.Attrs.Fileid
			}
		}
		if a.Cookie == 0 {
			out.Entries = append(out.Entries, proto.DirEntry{Name: []byte("."), Cookie: cookieDot, Fileid: self})
		}
		if a.Cookie < cookieDotDot {
			out.Entries = append(out.Entries, proto.DirEntry{Name: []byte(".."), Cookie: cookieDotDot, Fileid: up})
		}
	}
	for i := range rd.Entries {
		out.Entries = append(out.Entries, proto.DirEntry{})
		e, f := &out.Entries[len(out.Entries)-1], &rd.Entries[i].Attrs
		e.Name, e.Cookie, e.Fileid = rd.Entries[i].Name, rd.Entries[i].Cookie, f.Fileid
		if f.Mask.Has(nfs4.AttrRdattrError) && f.RdattrError != nfs4.OK {
			continue // no attributes for this one: the core looks it up
		}
		if want.Has(nfs4.AttrFilehandle) {
			if f.Mask.Has(nfs4.AttrType) && f.Mask.Has(nfs4.AttrFileid) {
				e.Attr = proto.PostAttr{Present: true, Attr: attrOf(f)}
			}
			if f.Mask.Has(nfs4.AttrFilehandle) {
				e.FH = proto.PostFH{Present: true, FH: proto.FH(f.Filehandle)}
			}
		}
	}
	return out, nil
}
