package nfsv41

import (
	"context"
	"fmt"
	"slices"
	"strings"

	"hushfs/internal/nfs4"
	"hushfs/internal/proto"
)

// Each method is one COMPOUND (SEQUENCE, then the operations below),
// counted under the NFSv3 procedure it stands for; see proto.Server.

func putfh(fh proto.FH) nfs4.Argop {
	return nfs4.Argop{Op: nfs4.OpPutFH, Args: &nfs4.PutFHArgs{FH: nfs4.FH(fh)}}
}

func getattr(b nfs4.Bitmap) nfs4.Argop {
	return nfs4.Argop{Op: nfs4.OpGetattr, Args: &nfs4.GetattrArgs{AttrRequest: b}}
}

// walkExport finds the export: PUTROOTFH, a LOOKUP per component of path,
// GETFH and GETATTR of the attributes and limits, in one COMPOUND.
func (s *Server) walkExport(ctx context.Context, c *proto.Cred, path string) (proto.Export, error) {
	ops := []nfs4.Argop{{Op: nfs4.OpPutRootFH}}
	for _, name := range strings.Split(path, "/") {
		if name == "" || name == "." {
			continue
		}
		ops = append(ops, nfs4.Argop{Op: nfs4.OpLookup, Args: &nfs4.LookupArgs{Name: []byte(name)}})
	}
	// The space attributes too: a statfs right after the mount needs no
	// COMPOUND of its own (statfs.go).
	ops = append(ops, nfs4.Argop{Op: nfs4.OpGetFH}, getattr(limitAttrs.Or(spaceAttrs)))
	// And the root's first listing page and the directory delegation
	// probe, which may fail without failing the mount (rootlist.go).
	n := len(ops)
	extra, wantDeleg := s.rootListOps(n)
	at := s.now()
	r, err := s.compound(ctx, c, "MOUNT", append(slices.Clip(ops), extra...))
	if err == nil && len(extra) > 0 && r.res.Status != nfs4.OK && len(r.res.Ops) <= n {
		// Failed in the walk: or did the extras make the reply too big?
		// The walk alone says which.
		r, err = s.compound(ctx, c, "MOUNT", ops)
		extra = nil
	}
	if err != nil {
		return proto.Export{}, err
	}
	if r.res.Status != nfs4.OK && len(r.res.Ops) <= n {
		failed := len(r.res.Ops) - 1
		what := "the root"
		if failed > 0 && failed < len(ops)-2 {
			what = fmt.Sprintf("%q", ops[failed].Args.(*nfs4.LookupArgs).Name)
		}
		return proto.Export{}, fmt.Errorf("walking the path at %s: %w", what, statusErr(r.res.Status))
	}
	gfh, ok1 := r.at(n - 2).(*nfs4.GetFHRes)
	g, ok2 := r.at(n - 1).(*nfs4.GetattrRes)
	if !ok1 || !ok2 {
		return proto.Export{}, errShort
	}
	fh := gfh.FH
	if len(fh) == 0 {
		return proto.Export{}, fmt.Errorf("the server gave the export an empty file handle")
	}
	a := attrOf(&g.Attrs)
	if a.Type != proto.TypeDir {
		return proto.Export{}, fmt.Errorf("the export is not a directory (type %d)", a.Type)
	}
	s.space.keep(&g.Attrs, at)
	exp := proto.Export{
		Root:        append(proto.FH(nil), fh...),
		RootAttrs:   []proto.TimedAttr{{Attr: a, At: at}},
		Rtmax:       clamp32(g.Attrs.MaxRead),
		Wtmax:       clamp32(g.Attrs.MaxWrite),
		MaxFileSize: g.Attrs.MaxFileSize,
		NameMax:     g.Attrs.MaxName,
		Limits:      limits,
	}
	if len(extra) > 0 {
		s.root = exp.Root
		s.keepRootList(ctx, c, exp.Root, r, n, wantDeleg, at)
	}
	return exp, nil
}

func clamp32(v uint64) uint32 { return uint32(min(v, 1<<32-1)) }

func (s *Server) GetAttr(ctx context.Context, c *proto.Cred, fh proto.FH) (proto.AttrRes, error) {
	r, err := s.compound(ctx, c, "GETATTR", []nfs4.Argop{putfh(fh), getattr(fileAttrs)})
	if err != nil {
		return proto.AttrRes{}, err
	}
	a, ok := r.attrs(1)
	if !ok {
		return proto.AttrRes{Status: statusErr(r.status(1))}, nil
	}
	return proto.AttrRes{Attr: a.Attr}, nil
}

// SetAttr sends GETATTR before and after SETATTR: the attributes before
// stand in for v3's pre-operation attributes (size, mtime and ctime equal
// to the cache's: the change was ours). A size goes with the anonymous
// stateid (no open).
func (s *Server) SetAttr(ctx context.Context, c *proto.Cred, fh proto.FH, in proto.SetAttrs) (proto.WccRes, error) {
	return s.setattr(ctx, c, nfs4.AnonymousStateid, statusErr, fh, in)
}

// setattr is one SETATTR under stateid st, with GETATTRs around it for its
// pre-operation attributes; errOf maps the status.
func (s *Server) setattr(ctx context.Context, c *proto.Cred, st nfs4.Stateid, errOf func(nfs4.Status) error, fh proto.FH, in proto.SetAttrs) (proto.WccRes, error) {
	sa := &nfs4.SetattrArgs{Stateid: st, Attrs: fattrOf(&in)}
	r, err := s.compound(ctx, c, "SETATTR", []nfs4.Argop{putfh(fh), getattr(fileAttrs),
		{Op: nfs4.OpSetattr, Args: sa}, getattr(fileAttrs)})
	if err != nil {
		return proto.WccRes{}, err
	}
	out := proto.WccRes{Status: errOf(r.status(2))}
	if before, ok := r.attrs(1); ok {
		out.Wcc.Before = preOf(before)
		if out.Status != nil {
			out.Wcc.After = before // it changed nothing
		}
	}
	if after, ok := r.attrs(3); ok {
		out.Wcc.After = after
	}
	return out, nil
}

// Lookup brings the directory's attributes (GETATTR before LOOKUP, so that
// they come with a failure too, as v3's do) and the file's handle and
// attributes.
func (s *Server) Lookup(ctx context.Context, c *proto.Cred, dir proto.FH, name string) (proto.LookupRes, error) {
	r, err := s.compound(ctx, c, "LOOKUP", []nfs4.Argop{putfh(dir), getattr(fileAttrs),
		{Op: nfs4.OpLookup, Args: &nfs4.LookupArgs{Name: []byte(name)}}, {Op: nfs4.OpGetFH}, getattr(fileAttrs)})
	if err != nil {
		return proto.LookupRes{}, err
	}
	out := proto.LookupRes{Status: statusErr(r.status(2))}
	out.DirAttr, _ = r.attrs(1)
	if out.Status != nil {
		return out, nil
	}
	if g, ok := r.at(3).(*nfs4.GetFHRes); ok && g.Status == nfs4.OK {
		out.FH = proto.FH(g.FH)
	} else {
		out.Status = statusErr(r.status(3))
		return out, nil
	}
	out.Attr, _ = r.attrs(4)
	return out, nil
}

func (s *Server) Access(ctx context.Context, c *proto.Cred, fh proto.FH, mask uint32) (proto.AccessRes, error) {
	r, err := s.compound(ctx, c, "ACCESS", []nfs4.Argop{putfh(fh),
		{Op: nfs4.OpAccess, Args: &nfs4.AccessArgs{Access: mask}}, getattr(fileAttrs)})
	if err != nil {
		return proto.AccessRes{}, err
	}
	out := proto.AccessRes{Status: statusErr(r.status(1))}
	out.Attr, _ = r.attrs(2)
	if a, ok := r.at(1).(*nfs4.AccessRes); ok && a.Status == nfs4.OK {
		// Only what was asked and the server could check counts as granted.
		out.Access = a.Access & a.Supported & mask
	}
	return out, nil
}

func (s *Server) Readlink(ctx context.Context, c *proto.Cred, fh proto.FH) (proto.ReadlinkRes, error) {
	r, err := s.compound(ctx, c, "READLINK", []nfs4.Argop{putfh(fh), {Op: nfs4.OpReadlink}, getattr(fileAttrs)})
	if err != nil {
		return proto.ReadlinkRes{}, err
	}
	out := proto.ReadlinkRes{Status: statusErr(r.status(1))}
	out.Attr, _ = r.attrs(2)
	if l, ok := r.at(1).(*nfs4.ReadlinkRes); ok && l.Status == nfs4.OK {
		out.Target = l.Link
	}
	return out, nil
}

// Read uses the anonymous stateid: the file is not open here (see the
// package comment).
func (s *Server) Read(ctx context.Context, c *proto.Cred, fh proto.FH, off uint64, dst []byte) (proto.ReadRes, error) {
	return s.read(ctx, c, nfs4.AnonymousStateid, statusErr, fh, off, dst)
}

// read is one READ into dst under stateid st; errOf maps the status.
func (s *Server) read(ctx context.Context, c *proto.Cred, st nfs4.Stateid, errOf func(nfs4.Status) error, fh proto.FH, off uint64, dst []byte) (proto.ReadRes, error) {
	args := &nfs4.ReadArgs{Stateid: st, Offset: off, Count: uint32(len(dst))}
	r, err := s.compound(ctx, c, "READ", []nfs4.Argop{putfh(fh), {Op: nfs4.OpRead, Args: args}, getattr(fileAttrs)})
	if err != nil {
		return proto.ReadRes{}, err
	}
	out := proto.ReadRes{Status: errOf(r.status(1))}
	out.Attr, _ = r.attrs(2)
	if rd, ok := r.at(1).(*nfs4.ReadRes); ok && rd.Status == nfs4.OK {
		if len(rd.Data) > len(dst) {
			return proto.ReadRes{}, fmt.Errorf("READ: %d bytes in the reply to a read of %d", len(rd.Data), len(dst))
		}
		out.N, out.EOF = copy(dst, rd.Data), rd.EOF
	}
	return out, nil
}

// Write uses the anonymous stateid: the file is not open here (see the
// package comment). v4 has no pre-operation attributes for WRITE; the core
// knows its writes are its own.
func (s *Server) Write(ctx context.Context, c *proto.Cred, fh proto.FH, off uint64, data []byte, stable proto.Stable) (proto.WriteRes, error) {
	return s.write(ctx, c, nfs4.AnonymousStateid, statusErr, fh, off, data, stable)
}

// write is one WRITE of data under stateid st; errOf maps the status.
func (s *Server) write(ctx context.Context, c *proto.Cred, st nfs4.Stateid, errOf func(nfs4.Status) error, fh proto.FH, off uint64, data []byte, stable proto.Stable) (proto.WriteRes, error) {
	args := &nfs4.WriteArgs{Stateid: st, Offset: off, Stable: nfs4.StableHow(stable), Data: data}
	r, err := s.compound(ctx, c, "WRITE", []nfs4.Argop{putfh(fh), {Op: nfs4.OpWrite, Args: args}, getattr(fileAttrs)})
	if err != nil {
		return proto.WriteRes{}, err
	}
	out := proto.WriteRes{Status: errOf(r.status(1))}
	out.Wcc.After, _ = r.attrs(2)
	if w, ok := r.at(1).(*nfs4.WriteRes); ok && w.Status == nfs4.OK {
		if w.Count > uint32(len(data)) {
			return proto.WriteRes{}, fmt.Errorf("WRITE: the server wrote %d bytes of %d", w.Count, len(data))
		}
		out.Count, out.Committed, out.Verf = w.Count, proto.Stable(w.Committed), proto.Verf(w.Verf)
	}
	return out, nil
}

func (s *Server) Commit(ctx context.Context, c *proto.Cred, fh proto.FH, off uint64, count uint32) (proto.CommitRes, error) {
	r, err := s.compound(ctx, c, "COMMIT", []nfs4.Argop{putfh(fh),
		{Op: nfs4.OpCommit, Args: &nfs4.CommitArgs{Offset: off, Count: count}}, getattr(fileAttrs)})
	if err != nil {
		return proto.CommitRes{}, err
	}
	out := proto.CommitRes{Status: statusErr(r.status(1))}
	out.Wcc.After, _ = r.attrs(2)
	if cm, ok := r.at(1).(*nfs4.CommitRes); ok && cm.Status == nfs4.OK {
		out.Verf = proto.Verf(cm.Verf)
	}
	return out, nil
}

// fsAttrs is one GETATTR of fh with extra attributes, for FsStat, FsInfo
// and PathConf.
func (s *Server) fsAttrs(ctx context.Context, c *proto.Cred, name string, fh proto.FH, b nfs4.Bitmap) (*nfs4.Fattr, proto.PostAttr, error, error) {
	r, err := s.compound(ctx, c, name, []nfs4.Argop{putfh(fh), getattr(b)})
	if err != nil {
		return nil, proto.PostAttr{}, nil, err
	}
	g, ok := r.at(1).(*nfs4.GetattrRes)
	if !ok || g.Status != nfs4.OK {
		return nil, proto.PostAttr{}, statusErr(r.status(1)), nil
	}
	return &g.Attrs, proto.PostAttr{Present: true, Attr: attrOf(&g.Attrs)}, nil, nil
}

func (s *Server) FsStat(ctx context.Context, c *proto.Cred, fh proto.FH) (proto.FsStatRes, error) {
	f, a, st, err := s.fsAttrs(ctx, c, "FSSTAT", fh, spaceAttrs)
	if err != nil || st != nil {
		return proto.FsStatRes{Status: st}, err
	}
	return proto.FsStatRes{Attr: a, Tbytes: f.SpaceTotal, Fbytes: f.SpaceFree, Abytes: f.SpaceAvail,
		Tfiles: f.FilesTotal, Ffiles: f.FilesFree, Afiles: f.FilesAvail}, nil
}

func (s *Server) FsInfo(ctx context.Context, c *proto.Cred, fh proto.FH) (proto.FsInfoRes, error) {
	f, a, st, err := s.fsAttrs(ctx, c, "FSINFO", fh, limitAttrs)
	if err != nil || st != nil {
		return proto.FsInfoRes{Status: st}, err
	}
	return proto.FsInfoRes{Attr: a, Rtmax: clamp32(f.MaxRead), Wtmax: clamp32(f.MaxWrite), MaxFileSize: f.MaxFileSize}, nil
}

func (s *Server) PathConf(ctx context.Context, c *proto.Cred, fh proto.FH) (proto.PathConfRes, error) {
	f, a, st, err := s.fsAttrs(ctx, c, "PATHCONF", fh, limitAttrs)
	if err != nil || st != nil {
		return proto.PathConfRes{Status: st}, err
	}
	return proto.PathConfRes{Attr: a, NameMax: f.MaxName, LinkMax: f.MaxLink}, nil
}
