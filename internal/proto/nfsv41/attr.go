package nfsv41

import (
	"hushfs/internal/nfs4"
	"hushfs/internal/proto"
)

// Attribute sets asked for with GETATTR and READDIR.
var (
	// changeAttr is the change attribute alone.
	changeAttr = nfs4.NewBitmap(nfs4.AttrChange)
	// fileAttrs are what the core keeps of a file: what v3's fattr3 holds,
	// and the change attribute.
	fileAttrs = nfs4.NewBitmap(nfs4.AttrType, nfs4.AttrChange, nfs4.AttrSize, nfs4.AttrFsid,
		nfs4.AttrFileid, nfs4.AttrMode, nfs4.AttrNumLinks, nfs4.AttrOwner, nfs4.AttrOwnerGroup,
		nfs4.AttrRawdev, nfs4.AttrSpaceUsed, nfs4.AttrTimeAccess, nfs4.AttrTimeMetadata,
		nfs4.AttrTimeModify)
	// plusAttrs are a READDIR entry's for ReadDirPlus: the file's
	// attributes, its handle, and rdattr_error, so that one entry the
	// server cannot describe fails alone (its status instead of the
	// attributes) rather than the listing.
	plusAttrs = fileAttrs.Or(nfs4.NewBitmap(nfs4.AttrFilehandle, nfs4.AttrRdattrError))
	// nameAttrs are a READDIR entry's for ReadDir: the fileid only (and
	// rdattr_error, as above).
	nameAttrs = nfs4.NewBitmap(nfs4.AttrFileid, nfs4.AttrRdattrError)
	// limitAttrs are the server's limits (FSINFO and PATHCONF in v3).
	limitAttrs = fileAttrs.Or(nfs4.NewBitmap(nfs4.AttrMaxRead, nfs4.AttrMaxWrite, nfs4.AttrMaxFileSize,
		nfs4.AttrMaxName, nfs4.AttrMaxLink))
	// spaceAttrs are FSSTAT's.
	spaceAttrs = fileAttrs.Or(nfs4.NewBitmap(nfs4.AttrSpaceTotal, nfs4.AttrSpaceFree, nfs4.AttrSpaceAvail,
		nfs4.AttrFilesTotal, nfs4.AttrFilesFree, nfs4.AttrFilesAvail))
	// fileidAttr is the fileid alone (a directory's parent, for "..").
	fileidAttr = nfs4.NewBitmap(nfs4.AttrFileid)
	// typeAttr is the file type alone (VERIFY before a REMOVE).
	typeAttr = nfs4.NewBitmap(nfs4.AttrType)
)

// nobody is the id of an owner whose string names no number.
const nobody = 65534

// attrOf turns fattr4 into the core's attributes. Attributes the server
// left out stay zero; the change attribute counts only when present.
func attrOf(f *nfs4.Fattr) proto.Attr {
	a := proto.Attr{
		Type:   proto.FileType(f.Type),
		Mode:   f.Mode & 0o7777,
		Nlink:  f.NumLinks,
		UID:    idOf(f.Owner),
		GID:    idOf(f.OwnerGroup),
		Size:   f.Size,
		Used:   f.SpaceUsed,
		Rdev:   proto.Device{Major: f.Rawdev.Major, Minor: f.Rawdev.Minor},
		Fsid:   proto.Fsid{Major: f.Fsid.Major, Minor: f.Fsid.Minor},
		Fileid: f.Fileid,
		Atime:  timeOf(f.TimeAccess),
		Mtime:  timeOf(f.TimeModify),
		Ctime:  timeOf(f.TimeMetadata),
	}
	if f.Mask.Has(nfs4.AttrChange) {
		a.Change, a.HasChange = f.Change, true
	}
	if a.Type != proto.TypeChr && a.Type != proto.TypeBlk {
		a.Rdev = proto.Device{}
	}
	return a
}

// idOf reads an owner or group string: a number ("1000", what we send and
// what servers send without an id mapping), or "user@domain" whose user
// part is a number; any other name is nobody (we map no names).
func idOf(s []byte) uint32 {
	o := nfs4.ParseOwner(s)
	if o.Numeric {
		return o.ID
	}
	if id, ok := nfs4.ParseID(o.Name); ok {
		return id
	}
	return nobody
}

func timeOf(t nfs4.Time) proto.Time { return proto.Time{Sec: t.Seconds, Nsec: t.Nseconds} }

// fattrOf encodes the attributes s sets (SETATTR, CREATE and OPEN's
// createattrs). Owners go as numbers.
func fattrOf(s *proto.SetAttrs) nfs4.Fattr {
	var f nfs4.Fattr
	if s.SetMode {
		f.Mask.Set(nfs4.AttrMode)
		f.Mode = s.Mode & 0o7777
	}
	if s.SetUID {
		f.Mask.Set(nfs4.AttrOwner)
		f.Owner = nfs4.AppendID(nil, s.UID)
	}
	if s.SetGID {
		f.Mask.Set(nfs4.AttrOwnerGroup)
		f.OwnerGroup = nfs4.AppendID(nil, s.GID)
	}
	if s.SetSize {
		f.Mask.Set(nfs4.AttrSize)
		f.Size = s.Size
	}
	if t, ok := setTimeOf(s.Atime); ok {
		f.Mask.Set(nfs4.AttrTimeAccessSet)
		f.TimeAccessSet = t
	}
	if t, ok := setTimeOf(s.Mtime); ok {
		f.Mask.Set(nfs4.AttrTimeModifySet)
		f.TimeModifySet = t
	}
	return f
}

func setTimeOf(t proto.SetTime) (nfs4.SetTime, bool) {
	switch t.How {
	case proto.SetToServerTime:
		return nfs4.SetTime{How: nfs4.SetToServerTime}, true
	case proto.SetToClientTime:
		return nfs4.SetTime{How: nfs4.SetToClientTime, Time: nfs4.Time{Seconds: t.Time.Sec, Nseconds: t.Time.Nsec}}, true
	}
	return nfs4.SetTime{}, false
}

// wccOf is a directory's change around an operation, from its
// change_info, the GETATTR just before the operation (pre) and the one
// just after (after), all in the operation's COMPOUND:
//   - atomic change_info: its before value, which the core checks against
//     its cached change attribute (nothing else changed the directory);
//   - otherwise (ganesha's), the attributes before, as v3's pre-operation
//     attributes, but only when change_info's before and after are the
//     change attributes the GETATTRs around it saw: then nothing else
//     changed the directory between them either, so the core can tell a
//     change that was ours alone as it does with v3's wcc data.
//
// Either way there is no proof when the values differ.
func wccOf(ci *nfs4.ChangeInfo, pre proto.PostAttr, after proto.PostAttr) proto.Wcc {
	w := proto.Wcc{After: after}
	switch {
	case ci.Atomic:
		w.Before = proto.PreAttr{Present: true, Attr: proto.WccAttr{Change: ci.Before, HasChange: true}}
		w.Atomic = true
	case pre.Present && pre.Attr.HasChange && pre.Attr.Change == ci.Before &&
		after.Present && after.Attr.HasChange && after.Attr.Change == ci.After:
		w.Before = preOf(pre)
	}
	return w
}

// failedWcc is a directory's wcc data when the operation failed, so
// changed nothing: its attributes before it, as before and after.
func failedWcc(pre proto.PostAttr) proto.Wcc {
	if !pre.Present {
		return proto.Wcc{}
	}
	return proto.Wcc{Before: preOf(pre), After: pre}
}

func preOf(a proto.PostAttr) proto.PreAttr {
	return proto.PreAttr{Present: true, Attr: proto.WccAttr{Size: a.Attr.Size, Mtime: a.Attr.Mtime, Ctime: a.Attr.Ctime}}
}
