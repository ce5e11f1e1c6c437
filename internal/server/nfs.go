package server

import (
	"context"

	"hushfs/internal/nfs3"
	"hushfs/internal/rpc"
	"hushfs/internal/xdr"
)

// nfsHandler serves NFS version 3.
type nfsHandler struct{ s *Server }

type decoder interface{ Decode(*xdr.Decoder) }

// decodeArgs decodes a procedure's arguments. Trailing bytes are ignored,
// as RFC 1813 servers do; a short or malformed body is GARBAGE_ARGS.
func decodeArgs(call *rpc.Call, a decoder) error {
	var d xdr.Decoder
	d.Reset(call.Args)
	a.Decode(&d)
	if d.Err() != nil {
		return rpc.ErrGarbageArgs
	}
	return nil
}

// ServeRPC implements rpc.Handler.
func (h nfsHandler) ServeRPC(ctx context.Context, call *rpc.Call, reply []byte) ([]byte, error) {
	s := h.s
	if call.Proc >= nfs3.NumProcs {
		return nil, rpc.ErrProcUnavail
	}
	s.nfsCalls[call.Proc].Add(1)
	// Every call is checked, NULL included: a handle obtained while the
	// peer was admitted (or from another host) grants nothing by itself.
	if !s.admitted(call) {
		return nil, errNotAdmitted
	}
	if call.Proc == nfs3.ProcNull {
		return reply, nil
	}
	id := s.identityOf(call)
	switch call.Proc {
	case nfs3.ProcGetattr:
		var a nfs3.GetattrArgs
		if err := decodeArgs(call, &a); err != nil {
			return nil, err
		}
		r := s.getattr3(&a)
		return r.Append(reply), nil
	case nfs3.ProcSetattr:
		var a nfs3.SetattrArgs
		if err := decodeArgs(call, &a); err != nil {
			return nil, err
		}
		if !s.mayChange3(a.Obj) {
			return (&nfs3.SetattrRes{Status: nfs3.ErrJukebox}).Append(reply), nil
		}
		r := s.setattr(&id, &a)
		return r.Append(reply), nil
	case nfs3.ProcLookup:
		var a nfs3.LookupArgs
		if err := decodeArgs(call, &a); err != nil {
			return nil, err
		}
		r := s.lookup(&id, &a)
		return r.Append(reply), nil
	case nfs3.ProcAccess:
		var a nfs3.AccessArgs
		if err := decodeArgs(call, &a); err != nil {
			return nil, err
		}
		r := s.access(&id, &a)
		return r.Append(reply), nil
	case nfs3.ProcReadlink:
		var a nfs3.ReadlinkArgs
		if err := decodeArgs(call, &a); err != nil {
			return nil, err
		}
		r := s.readlink(&a)
		return r.Append(reply), nil
	case nfs3.ProcRead:
		var a nfs3.ReadArgs
		if err := decodeArgs(call, &a); err != nil {
			return nil, err
		}
		if !s.mayRead3(a.File) {
			return (&nfs3.ReadRes{Status: nfs3.ErrJukebox}).Append(reply), nil
		}
		return s.read(&id, &a, reply), nil
	case nfs3.ProcWrite:
		var a nfs3.WriteArgs
		if err := decodeArgs(call, &a); err != nil {
			return nil, err
		}
		if !s.mayChange3(a.File) {
			return (&nfs3.WriteRes{Status: nfs3.ErrJukebox}).Append(reply), nil
		}
		r := s.write(&id, &a)
		return r.Append(reply), nil
	case nfs3.ProcCreate:
		var a nfs3.CreateArgs
		if err := decodeArgs(call, &a); err != nil {
			return nil, err
		}
		if !s.mayChangeDir3(a.Where.Dir) ||
			a.Mode == nfs3.Unchecked && a.Attr.SetSize && !s.mayChangeName3(a.Where.Dir, a.Where.Name) {
			return (&nfs3.CreateRes{Status: nfs3.ErrJukebox}).Append(reply), nil
		}
		r := s.create(&id, &a)
		return r.Append(reply), nil
	case nfs3.ProcMkdir:
		var a nfs3.MkdirArgs
		if err := decodeArgs(call, &a); err != nil {
			return nil, err
		}
		if !s.mayChangeDir3(a.Where.Dir) {
			return (&nfs3.DirOpRes{Status: nfs3.ErrJukebox}).Append(reply), nil
		}
		r := s.mkdir(&id, &a)
		return r.Append(reply), nil
	case nfs3.ProcSymlink:
		var a nfs3.SymlinkArgs
		if err := decodeArgs(call, &a); err != nil {
			return nil, err
		}
		if !s.mayChangeDir3(a.Where.Dir) {
			return (&nfs3.DirOpRes{Status: nfs3.ErrJukebox}).Append(reply), nil
		}
		r := s.symlink(&id, &a)
		return r.Append(reply), nil
	case nfs3.ProcMknod:
		var a nfs3.MknodArgs
		if err := decodeArgs(call, &a); err != nil {
			return nil, err
		}
		if !s.mayChangeDir3(a.Where.Dir) {
			return (&nfs3.DirOpRes{Status: nfs3.ErrJukebox}).Append(reply), nil
		}
		r := s.mknod(&id, &a)
		return r.Append(reply), nil
	case nfs3.ProcRemove:
		var a nfs3.RemoveArgs
		if err := decodeArgs(call, &a); err != nil {
			return nil, err
		}
		if !s.mayChangeDir3(a.Obj.Dir) || !s.mayChangeName3(a.Obj.Dir, a.Obj.Name) {
			return (&nfs3.RemoveRes{Status: nfs3.ErrJukebox}).Append(reply), nil
		}
		r := s.remove(&id, &a.Obj, false)
		return r.Append(reply), nil
	case nfs3.ProcRmdir:
		var a nfs3.RmdirArgs
		if err := decodeArgs(call, &a); err != nil {
			return nil, err
		}
		// The directory removed may be delegated itself.
		if !s.mayChangeDir3(a.Obj.Dir) || !s.mayChangeName3(a.Obj.Dir, a.Obj.Name) {
			return (&nfs3.RemoveRes{Status: nfs3.ErrJukebox}).Append(reply), nil
		}
		r := s.remove(&id, &a.Obj, true)
		return r.Append(reply), nil
	case nfs3.ProcRename:
		var a nfs3.RenameArgs
		if err := decodeArgs(call, &a); err != nil {
			return nil, err
		}
		if !s.mayChangeDir3(a.From.Dir) || !s.mayChangeDir3(a.To.Dir) ||
			!s.mayChangeName3(a.From.Dir, a.From.Name) || !s.mayChangeName3(a.To.Dir, a.To.Name) {
			return (&nfs3.RenameRes{Status: nfs3.ErrJukebox}).Append(reply), nil
		}
		r := s.rename(&id, &a)
		return r.Append(reply), nil
	case nfs3.ProcLink:
		var a nfs3.LinkArgs
		if err := decodeArgs(call, &a); err != nil {
			return nil, err
		}
		// A new name changes the file too (its link count and ctime).
		if !s.mayChangeDir3(a.Link.Dir) || !s.mayChange3(a.File) {
			return (&nfs3.LinkRes{Status: nfs3.ErrJukebox}).Append(reply), nil
		}
		r := s.link(&id, &a)
		return r.Append(reply), nil
	case nfs3.ProcReaddir:
		var a nfs3.ReaddirArgs
		if err := decodeArgs(call, &a); err != nil {
			return nil, err
		}
		return s.readdir(&id, &a, reply), nil
	case nfs3.ProcReaddirplus:
		var a nfs3.ReaddirplusArgs
		if err := decodeArgs(call, &a); err != nil {
			return nil, err
		}
		return s.readdirplus(&id, &a, reply), nil
	case nfs3.ProcFsstat:
		var a nfs3.FsstatArgs
		if err := decodeArgs(call, &a); err != nil {
			return nil, err
		}
		r := s.fsstat(&a)
		return r.Append(reply), nil
	case nfs3.ProcFsinfo:
		var a nfs3.FsinfoArgs
		if err := decodeArgs(call, &a); err != nil {
			return nil, err
		}
		r := s.fsinfo(&a)
		return r.Append(reply), nil
	case nfs3.ProcPathconf:
		var a nfs3.PathconfArgs
		if err := decodeArgs(call, &a); err != nil {
			return nil, err
		}
		r := s.pathconf(&a)
		return r.Append(reply), nil
	case nfs3.ProcCommit:
		var a nfs3.CommitArgs
		if err := decodeArgs(call, &a); err != nil {
			return nil, err
		}
		r := s.commit(&a)
		return r.Append(reply), nil
	}
	return nil, rpc.ErrProcUnavail
}
