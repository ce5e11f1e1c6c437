package nfsv3

import (
	"hushfs/internal/nfs3"
	"hushfs/internal/proto"
)

// statusErr is the proto.Error for a status, nil for NFS3_OK. The errno
// is nfs3's own mapping.
func statusErr(st nfs3.Status) error {
	if st == nfs3.OK {
		return nil
	}
	e := proto.Error{Errno: st.Errno(), Name: st.String()}
	switch st {
	case nfs3.ErrBadCookie:
		e.Cond = proto.CondBadCookie
	case nfs3.ErrNotSupp:
		e.Cond = proto.CondNotSupp
	}
	return e
}

func timeOf(t nfs3.Time) proto.Time { return proto.Time{Sec: int64(t.Seconds), Nsec: t.Nseconds} }

// nfsTime is t as nfstime3; the core keeps times it cannot carry out
// (Limits).
func nfsTime(t proto.Time) nfs3.Time { return nfs3.Time{Seconds: uint32(t.Sec), Nseconds: t.Nsec} }

func attrOf(a *nfs3.Fattr) proto.Attr {
	return proto.Attr{
		Type:   proto.FileType(a.Type),
		Mode:   a.Mode,
		Nlink:  a.Nlink,
		UID:    a.UID,
		GID:    a.GID,
		Size:   a.Size,
		Used:   a.Used,
		Rdev:   proto.Device{Major: a.Rdev.Major, Minor: a.Rdev.Minor},
		Fsid:   proto.Fsid{Major: a.Fsid},
		Fileid: a.Fileid,
		Atime:  timeOf(a.Atime),
		Mtime:  timeOf(a.Mtime),
		Ctime:  timeOf(a.Ctime),
	}
}

func postAttr(p *nfs3.PostOpAttr) proto.PostAttr {
	if !p.Present {
		return proto.PostAttr{}
	}
	return proto.PostAttr{Present: true, Attr: attrOf(&p.Attr)}
}

func wccOf(w *nfs3.WccData) proto.Wcc {
	out := proto.Wcc{After: postAttr(&w.After)}
	if w.Before.Present {
		b := &w.Before.Attr
		out.Before = proto.PreAttr{Present: true, Attr: proto.WccAttr{Size: b.Size, Mtime: timeOf(b.Mtime), Ctime: timeOf(b.Ctime)}}
	}
	return out
}

func postFH(p *nfs3.PostOpFH) proto.PostFH {
	if !p.Present {
		return proto.PostFH{}
	}
	return proto.PostFH{Present: true, FH: proto.FH(p.FH)}
}

func setTime(t proto.SetTime) nfs3.SetTime {
	switch t.How {
	case proto.SetToServerTime:
		return nfs3.SetTime{How: nfs3.SetToServerTime}
	case proto.SetToClientTime:
		return nfs3.SetTime{How: nfs3.SetToClientTime, Time: nfsTime(t.Time)}
	}
	return nfs3.SetTime{How: nfs3.DontChange}
}

func sattr(s *proto.SetAttrs) nfs3.Sattr {
	return nfs3.Sattr{
		SetMode: s.SetMode, Mode: s.Mode,
		SetUID: s.SetUID, UID: s.UID,
		SetGID: s.SetGID, GID: s.GID,
		SetSize: s.SetSize, Size: s.Size,
		Atime: setTime(s.Atime), Mtime: setTime(s.Mtime),
	}
}

func createRes(r *nfs3.DirOpRes) proto.CreateRes {
	return proto.CreateRes{Status: statusErr(r.Status), FH: postFH(&r.Obj), Attr: postAttr(&r.ObjAttr), DirWcc: wccOf(&r.DirWcc)}
}

func dirOp(dir proto.FH, name string) nfs3.DirOpArgs {
	return nfs3.DirOpArgs{Dir: nfs3.FH(dir), Name: []byte(name)}
}
