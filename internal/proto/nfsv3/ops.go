package nfsv3

import (
	"context"

	"hushfs/internal/nfs3"
	"hushfs/internal/proto"
	"hushfs/internal/rpc"
)

// Each method is one call of its procedure; see proto.Server.

func (s *Server) Null(ctx context.Context) error {
	if s.hooks.Calling != nil {
		s.hooks.Calling(ctx, nfs3.ProcName(nfs3.ProcNull))
	}
	return s.nfs.Call(ctx, nfs3.Program, nfs3.Version, nfs3.ProcNull, rpc.NoAuth, nil, nil)
}

func (s *Server) GetAttr(ctx context.Context, c *proto.Cred, fh proto.FH) (proto.AttrRes, error) {
	var res nfs3.GetattrRes
	if err := s.call(ctx, c, nfs3.ProcGetattr, &nfs3.GetattrArgs{Obj: nfs3.FH(fh)}, &res); err != nil {
		return proto.AttrRes{}, err
	}
	if res.Status != nfs3.OK {
		return proto.AttrRes{Status: statusErr(res.Status)}, nil
	}
	return proto.AttrRes{Attr: attrOf(&res.Attr)}, nil
}

func (s *Server) SetAttr(ctx context.Context, c *proto.Cred, fh proto.FH, in proto.SetAttrs) (proto.WccRes, error) {
	var res nfs3.SetattrRes
	if err := s.call(ctx, c, nfs3.ProcSetattr, &nfs3.SetattrArgs{Obj: nfs3.FH(fh), Attr: sattr(&in)}, &res); err != nil {
		return proto.WccRes{}, err
	}
	return proto.WccRes{Status: statusErr(res.Status), Wcc: wccOf(&res.Wcc)}, nil
}

func (s *Server) Lookup(ctx context.Context, c *proto.Cred, dir proto.FH, name string) (proto.LookupRes, error) {
	var res nfs3.LookupRes
	if err := s.call(ctx, c, nfs3.ProcLookup, &nfs3.LookupArgs{What: dirOp(dir, name)}, &res); err != nil {
		return proto.LookupRes{}, err
	}
	return proto.LookupRes{Status: statusErr(res.Status), FH: proto.FH(res.Obj),
		Attr: postAttr(&res.ObjAttr), DirAttr: postAttr(&res.DirAttr)}, nil
}

func (s *Server) Access(ctx context.Context, c *proto.Cred, fh proto.FH, mask uint32) (proto.AccessRes, error) {
	var res nfs3.AccessRes
	if err := s.call(ctx, c, nfs3.ProcAccess, &nfs3.AccessArgs{Obj: nfs3.FH(fh), Access: mask}, &res); err != nil {
		return proto.AccessRes{}, err
	}
	return proto.AccessRes{Status: statusErr(res.Status), Attr: postAttr(&res.ObjAttr), Access: res.Access}, nil
}

func (s *Server) Readlink(ctx context.Context, c *proto.Cred, fh proto.FH) (proto.ReadlinkRes, error) {
	var res nfs3.ReadlinkRes
	if err := s.call(ctx, c, nfs3.ProcReadlink, &nfs3.ReadlinkArgs{Symlink: nfs3.FH(fh)}, &res); err != nil {
		return proto.ReadlinkRes{}, err
	}
	return proto.ReadlinkRes{Status: statusErr(res.Status), Attr: postAttr(&res.SymlinkAttr), Target: res.Data}, nil
}

func (s *Server) Read(ctx context.Context, c *proto.Cred, fh proto.FH, off uint64, dst []byte) (proto.ReadRes, error) {
	var res nfs3.ReadRes
	args := nfs3.ReadArgs{File: nfs3.FH(fh), Offset: off, Count: uint32(len(dst))}
	if err := s.call(ctx, c, nfs3.ProcRead, &args, &res); err != nil {
		return proto.ReadRes{}, err
	}
	out := proto.ReadRes{Status: statusErr(res.Status), Attr: postAttr(&res.FileAttr)}
	if res.Status == nfs3.OK {
		out.N, out.EOF = copy(dst, res.Data), res.EOF
	}
	return out, nil
}

func (s *Server) Write(ctx context.Context, c *proto.Cred, fh proto.FH, off uint64, data []byte, stable proto.Stable) (proto.WriteRes, error) {
	var res nfs3.WriteRes
	args := nfs3.WriteArgs{File: nfs3.FH(fh), Offset: off, Count: uint32(len(data)), Stable: nfs3.StableHow(stable), Data: data}
	if err := s.call(ctx, c, nfs3.ProcWrite, &args, &res); err != nil {
		return proto.WriteRes{}, err
	}
	return proto.WriteRes{Status: statusErr(res.Status), Wcc: wccOf(&res.Wcc), Count: res.Count,
		Committed: proto.Stable(res.Committed), Verf: proto.Verf(res.Verf)}, nil
}

func (s *Server) Commit(ctx context.Context, c *proto.Cred, fh proto.FH, off uint64, count uint32) (proto.CommitRes, error) {
	var res nfs3.CommitRes
	if err := s.call(ctx, c, nfs3.ProcCommit, &nfs3.CommitArgs{File: nfs3.FH(fh), Offset: off, Count: count}, &res); err != nil {
		return proto.CommitRes{}, err
	}
	return proto.CommitRes{Status: statusErr(res.Status), Wcc: wccOf(&res.Wcc), Verf: proto.Verf(res.Verf)}, nil
}

func (s *Server) Create(ctx context.Context, c *proto.Cred, dir proto.FH, name string, how proto.CreateHow) (proto.CreateRes, error) {
	args := nfs3.CreateArgs{Where: dirOp(dir, name), Attr: sattr(&how.Attrs), Verf: nfs3.Verf(how.Verf)}
	switch how.Mode {
	case proto.Guarded:
		args.Mode = nfs3.Guarded
	case proto.Exclusive:
		args.Mode = nfs3.Exclusive
	default:
		args.Mode = nfs3.Unchecked
	}
	var res nfs3.CreateRes
	if err := s.call(ctx, c, nfs3.ProcCreate, &args, &res); err != nil {
		return proto.CreateRes{}, err
	}
	return createRes(&res), nil
}

func (s *Server) Mkdir(ctx context.Context, c *proto.Cred, dir proto.FH, name string, in proto.SetAttrs) (proto.CreateRes, error) {
	var res nfs3.MkdirRes
	if err := s.call(ctx, c, nfs3.ProcMkdir, &nfs3.MkdirArgs{Where: dirOp(dir, name), Attr: sattr(&in)}, &res); err != nil {
		return proto.CreateRes{}, err
	}
	return createRes(&res), nil
}

func (s *Server) Symlink(ctx context.Context, c *proto.Cred, dir proto.FH, name, target string, in proto.SetAttrs) (proto.CreateRes, error) {
	args := nfs3.SymlinkArgs{Where: dirOp(dir, name), Attr: sattr(&in), Data: []byte(target)}
	var res nfs3.SymlinkRes
	if err := s.call(ctx, c, nfs3.ProcSymlink, &args, &res); err != nil {
		return proto.CreateRes{}, err
	}
	return createRes(&res), nil
}

func (s *Server) Mknod(ctx context.Context, c *proto.Cred, dir proto.FH, name string, t proto.FileType, in proto.SetAttrs, dev proto.Device) (proto.CreateRes, error) {
	args := nfs3.MknodArgs{Where: dirOp(dir, name), Type: nfs3.Ftype(t), Attr: sattr(&in),
		Spec: nfs3.SpecData{Major: dev.Major, Minor: dev.Minor}}
	var res nfs3.MknodRes
	if err := s.call(ctx, c, nfs3.ProcMknod, &args, &res); err != nil {
		return proto.CreateRes{}, err
	}
	return createRes(&res), nil
}

func (s *Server) Remove(ctx context.Context, c *proto.Cred, dir proto.FH, name string) (proto.RemoveRes, error) {
	var res nfs3.RemoveRes
	if err := s.call(ctx, c, nfs3.ProcRemove, &nfs3.RemoveArgs{Obj: dirOp(dir, name)}, &res); err != nil {
		return proto.RemoveRes{}, err
	}
	return proto.RemoveRes{Status: statusErr(res.Status), DirWcc: wccOf(&res.DirWcc)}, nil
}

func (s *Server) Rmdir(ctx context.Context, c *proto.Cred, dir proto.FH, name string) (proto.RemoveRes, error) {
	var res nfs3.RmdirRes
	if err := s.call(ctx, c, nfs3.ProcRmdir, &nfs3.RmdirArgs{Obj: dirOp(dir, name)}, &res); err != nil {
		return proto.RemoveRes{}, err
	}
	return proto.RemoveRes{Status: statusErr(res.Status), DirWcc: wccOf(&res.DirWcc)}, nil
}

func (s *Server) Rename(ctx context.Context, c *proto.Cred, fromDir proto.FH, fromName string, toDir proto.FH, toName string) (proto.RenameRes, error) {
	args := nfs3.RenameArgs{From: dirOp(fromDir, fromName), To: dirOp(toDir, toName)}
	var res nfs3.RenameRes
	if err := s.call(ctx, c, nfs3.ProcRename, &args, &res); err != nil {
		return proto.RenameRes{}, err
	}
	return proto.RenameRes{Status: statusErr(res.Status), FromDirWcc: wccOf(&res.FromDirWcc), ToDirWcc: wccOf(&res.ToDirWcc)}, nil
}

func (s *Server) Link(ctx context.Context, c *proto.Cred, fh, dir proto.FH, name string) (proto.LinkRes, error) {
	var res nfs3.LinkRes
	if err := s.call(ctx, c, nfs3.ProcLink, &nfs3.LinkArgs{File: nfs3.FH(fh), Link: dirOp(dir, name)}, &res); err != nil {
		return proto.LinkRes{}, err
	}
	return proto.LinkRes{Status: statusErr(res.Status), Attr: postAttr(&res.FileAttr), DirWcc: wccOf(&res.LinkDirWcc)}, nil
}

func (s *Server) ReadDir(ctx context.Context, c *proto.Cred, a proto.ReadDirArgs) (proto.ReadDirRes, error) {
	args := nfs3.ReaddirArgs{Dir: nfs3.FH(a.Dir), Cookie: a.Cookie, CookieVerf: nfs3.Verf(a.Verf), Count: a.Count}
	var res nfs3.ReaddirRes
	if err := s.call(ctx, c, nfs3.ProcReaddir, &args, &res); err != nil {
		return proto.ReadDirRes{}, err
	}
	out := proto.ReadDirRes{Status: statusErr(res.Status), DirAttr: postAttr(&res.DirAttr),
		Verf: proto.Verf(res.CookieVerf), EOF: res.EOF}
	if len(res.Entries) > 0 {
		out.Entries = make([]proto.DirEntry, len(res.Entries))
		for i := range res.Entries {
			e := &res.Entries[i]
			out.Entries[i] = proto.DirEntry{Fileid: e.Fileid, Name: e.Name, Cookie: e.Cookie}
		}
	}
	return out, nil
}

func (s *Server) ReadDirPlus(ctx context.Context, c *proto.Cred, a proto.ReadDirArgs) (proto.ReadDirRes, error) {
	args := nfs3.ReaddirplusArgs{Dir: nfs3.FH(a.Dir), Cookie: a.Cookie, CookieVerf: nfs3.Verf(a.Verf),
		DirCount: a.Count, MaxCount: a.MaxCount}
	var res nfs3.ReaddirplusRes
	if err := s.call(ctx, c, nfs3.ProcReaddirplus, &args, &res); err != nil {
		return proto.ReadDirRes{}, err
	}
	out := proto.ReadDirRes{Status: statusErr(res.Status), DirAttr: postAttr(&res.DirAttr),
		Verf: proto.Verf(res.CookieVerf), EOF: res.EOF}
	if len(res.Entries) > 0 {
		out.Entries = make([]proto.DirEntry, len(res.Entries))
		for i := range res.Entries {
			e := &res.Entries[i]
			out.Entries[i] = proto.DirEntry{Fileid: e.Fileid, Name: e.Name, Cookie: e.Cookie,
				Attr: postAttr(&e.Attr), FH: postFH(&e.FH)}
		}
	}
	return out, nil
}

func (s *Server) FsStat(ctx context.Context, c *proto.Cred, fh proto.FH) (proto.FsStatRes, error) {
	var res nfs3.FsstatRes
	if err := s.call(ctx, c, nfs3.ProcFsstat, &nfs3.FsstatArgs{Root: nfs3.FH(fh)}, &res); err != nil {
		return proto.FsStatRes{}, err
	}
	return proto.FsStatRes{Status: statusErr(res.Status), Attr: postAttr(&res.ObjAttr),
		Tbytes: res.Tbytes, Fbytes: res.Fbytes, Abytes: res.Abytes,
		Tfiles: res.Tfiles, Ffiles: res.Ffiles, Afiles: res.Afiles}, nil
}

func (s *Server) FsInfo(ctx context.Context, c *proto.Cred, fh proto.FH) (proto.FsInfoRes, error) {
	var res nfs3.FsinfoRes
	if err := s.call(ctx, c, nfs3.ProcFsinfo, &nfs3.FsinfoArgs{Root: nfs3.FH(fh)}, &res); err != nil {
		return proto.FsInfoRes{}, err
	}
	return proto.FsInfoRes{Status: statusErr(res.Status), Attr: postAttr(&res.ObjAttr),
		Rtmax: res.Rtmax, Wtmax: res.Wtmax, Dtpref: res.Dtpref, MaxFileSize: res.MaxFileSize}, nil
}

func (s *Server) PathConf(ctx context.Context, c *proto.Cred, fh proto.FH) (proto.PathConfRes, error) {
	var res nfs3.PathconfRes
	if err := s.call(ctx, c, nfs3.ProcPathconf, &nfs3.PathconfArgs{Obj: nfs3.FH(fh)}, &res); err != nil {
		return proto.PathConfRes{}, err
	}
	return proto.PathConfRes{Status: statusErr(res.Status), Attr: postAttr(&res.ObjAttr),
		NameMax: res.NameMax, LinkMax: res.Linkmax}, nil
}
