package nfs3

import "hushfs/internal/xdr"

// LookupArgs is LOOKUP3args.
type LookupArgs struct {
	What DirOpArgs
}

// Append encodes the arguments.
func (a *LookupArgs) Append(b []byte) []byte { return a.What.Append(b) }

// Decode decodes the arguments.
func (a *LookupArgs) Decode(d *xdr.Decoder) { a.What.Decode(d) }

// LookupRes is LOOKUP3res.
type LookupRes struct {
	Status  Status
	Obj     FH         // NFS3_OK only
	ObjAttr PostOpAttr // NFS3_OK only
	DirAttr PostOpAttr // both arms
}

// Append encodes the result.
func (r *LookupRes) Append(b []byte) []byte {
	b = appendStatus(b, r.Status)
	if r.Status == OK {
		b = r.Obj.Append(b)
		b = r.ObjAttr.Append(b)
	}
	return r.DirAttr.Append(b)
}

// Decode decodes the result.
func (r *LookupRes) Decode(d *xdr.Decoder) {
	*r = LookupRes{Status: decodeStatus(d)}
	if r.Status == OK {
		r.Obj.Decode(d)
		r.ObjAttr.Decode(d)
	}
	r.DirAttr.Decode(d)
}

// DirOpRes is the result shared by the procedures that make a directory
// entry (CREATE3res, MKDIR3res, SYMLINK3res, MKNOD3res).
type DirOpRes struct {
	Status  Status
	Obj     PostOpFH   // NFS3_OK only
	ObjAttr PostOpAttr // NFS3_OK only
	DirWcc  WccData    // both arms
}

// Append encodes the result.
func (r *DirOpRes) Append(b []byte) []byte {
	b = appendStatus(b, r.Status)
	if r.Status == OK {
		b = r.Obj.Append(b)
		b = r.ObjAttr.Append(b)
	}
	return r.DirWcc.Append(b)
}

// Decode decodes the result.
func (r *DirOpRes) Decode(d *xdr.Decoder) {
	*r = DirOpRes{Status: decodeStatus(d)}
	if r.Status == OK {
		r.Obj.Decode(d)
		r.ObjAttr.Decode(d)
	}
	r.DirWcc.Decode(d)
}

// The results of CREATE, MKDIR, SYMLINK and MKNOD have one shape.
type (
	CreateRes  = DirOpRes
	MkdirRes   = DirOpRes
	SymlinkRes = DirOpRes
	MknodRes   = DirOpRes
)

// CreateArgs is CREATE3args. Attr goes with Unchecked and Guarded, Verf
// with Exclusive.
type CreateArgs struct {
	Where DirOpArgs
	Mode  CreateMode
	Attr  Sattr
	Verf  Verf
}

// Append encodes the arguments. A Mode outside the three defined ones is
// written without a body (and will not decode).
func (a *CreateArgs) Append(b []byte) []byte {
	b = a.Where.Append(b)
	b = xdr.AppendUint32(b, uint32(a.Mode))
	switch a.Mode {
	case Unchecked, Guarded:
		b = a.Attr.Append(b)
	case Exclusive:
		b = a.Verf.Append(b)
	}
	return b
}

// Decode decodes the arguments; an unknown createmode3 is an error.
func (a *CreateArgs) Decode(d *xdr.Decoder) {
	*a = CreateArgs{}
	a.Where.Decode(d)
	a.Mode = CreateMode(d.Uint32())
	switch a.Mode {
	case Unchecked, Guarded:
		a.Attr.Decode(d)
	case Exclusive:
		a.Verf.Decode(d)
	default:
		d.SetErr(errBadUnion("createmode3", uint32(a.Mode)))
	}
}

// MkdirArgs is MKDIR3args.
type MkdirArgs struct {
	Where DirOpArgs
	Attr  Sattr
}

// Append encodes the arguments.
func (a *MkdirArgs) Append(b []byte) []byte {
	b = a.Where.Append(b)
	return a.Attr.Append(b)
}

// Decode decodes the arguments.
func (a *MkdirArgs) Decode(d *xdr.Decoder) {
	*a = MkdirArgs{}
	a.Where.Decode(d)
	a.Attr.Decode(d)
}

// SymlinkArgs is SYMLINK3args. Data is the link target as opaque bytes (at
// most MaxPathLen).
type SymlinkArgs struct {
	Where DirOpArgs
	Attr  Sattr
	Data  []byte
}

// Append encodes the arguments.
func (a *SymlinkArgs) Append(b []byte) []byte {
	b = a.Where.Append(b)
	b = a.Attr.Append(b)
	return xdr.AppendOpaque(b, a.Data)
}

// Decode decodes the arguments.
func (a *SymlinkArgs) Decode(d *xdr.Decoder) {
	*a = SymlinkArgs{}
	a.Where.Decode(d)
	a.Attr.Decode(d)
	a.Data = d.Opaque(MaxPathLen)
}

// MknodArgs is MKNOD3args. Attr goes with TypeChr, TypeBlk, TypeSock and
// TypeFifo, Spec with TypeChr and TypeBlk. Any other type carries nothing
// and decodes without error, so that the server can answer NFS3ERR_BADTYPE.
type MknodArgs struct {
	Where DirOpArgs
	Type  Ftype
	Attr  Sattr
	Spec  SpecData
}

// Append encodes the arguments.
func (a *MknodArgs) Append(b []byte) []byte {
	b = a.Where.Append(b)
	b = xdr.AppendUint32(b, uint32(a.Type))
	switch a.Type {
	case TypeChr, TypeBlk:
		b = a.Attr.Append(b)
		b = xdr.AppendUint32(b, a.Spec.Major)
		b = xdr.AppendUint32(b, a.Spec.Minor)
	case TypeSock, TypeFifo:
		b = a.Attr.Append(b)
	}
	return b
}

// Decode decodes the arguments.
func (a *MknodArgs) Decode(d *xdr.Decoder) {
	*a = MknodArgs{}
	a.Where.Decode(d)
	a.Type = Ftype(d.Uint32())
	switch a.Type {
	case TypeChr, TypeBlk:
		a.Attr.Decode(d)
		a.Spec.Major = d.Uint32()
		a.Spec.Minor = d.Uint32()
	case TypeSock, TypeFifo:
		a.Attr.Decode(d)
	}
}

// RemoveArgs is REMOVE3args.
type RemoveArgs struct {
	Obj DirOpArgs
}

// Append encodes the arguments.
func (a *RemoveArgs) Append(b []byte) []byte { return a.Obj.Append(b) }

// Decode decodes the arguments.
func (a *RemoveArgs) Decode(d *xdr.Decoder) { a.Obj.Decode(d) }

// RemoveRes is REMOVE3res; both arms carry the directory's wcc data.
type RemoveRes struct {
	Status Status
	DirWcc WccData
}

// Append encodes the result.
func (r *RemoveRes) Append(b []byte) []byte {
	b = appendStatus(b, r.Status)
	return r.DirWcc.Append(b)
}

// Decode decodes the result.
func (r *RemoveRes) Decode(d *xdr.Decoder) {
	*r = RemoveRes{Status: decodeStatus(d)}
	r.DirWcc.Decode(d)
}

// RmdirArgs is RMDIR3args (the shape of RemoveArgs).
type RmdirArgs struct {
	Obj DirOpArgs
}

// Append encodes the arguments.
func (a *RmdirArgs) Append(b []byte) []byte { return (*RemoveArgs)(a).Append(b) }

// Decode decodes the arguments.
func (a *RmdirArgs) Decode(d *xdr.Decoder) { (*RemoveArgs)(a).Decode(d) }

// RmdirRes is RMDIR3res (the shape of RemoveRes).
type RmdirRes struct {
	Status Status
	DirWcc WccData
}

// Append encodes the result.
func (r *RmdirRes) Append(b []byte) []byte { return (*RemoveRes)(r).Append(b) }

// Decode decodes the result.
func (r *RmdirRes) Decode(d *xdr.Decoder) { (*RemoveRes)(r).Decode(d) }

// RenameArgs is RENAME3args.
type RenameArgs struct {
	From DirOpArgs
	To   DirOpArgs
}

// Append encodes the arguments.
func (a *RenameArgs) Append(b []byte) []byte {
	b = a.From.Append(b)
	return a.To.Append(b)
}

// Decode decodes the arguments.
func (a *RenameArgs) Decode(d *xdr.Decoder) {
	a.From.Decode(d)
	a.To.Decode(d)
}

// RenameRes is RENAME3res; both arms carry both directories' wcc data.
type RenameRes struct {
	Status     Status
	FromDirWcc WccData
	ToDirWcc   WccData
}

// Append encodes the result.
func (r *RenameRes) Append(b []byte) []byte {
	b = appendStatus(b, r.Status)
	b = r.FromDirWcc.Append(b)
	return r.ToDirWcc.Append(b)
}

// Decode decodes the result.
func (r *RenameRes) Decode(d *xdr.Decoder) {
	*r = RenameRes{Status: decodeStatus(d)}
	r.FromDirWcc.Decode(d)
	r.ToDirWcc.Decode(d)
}

// LinkArgs is LINK3args: make Link a new name for File.
type LinkArgs struct {
	File FH
	Link DirOpArgs
}

// Append encodes the arguments.
func (a *LinkArgs) Append(b []byte) []byte {
	b = a.File.Append(b)
	return a.Link.Append(b)
}

// Decode decodes the arguments.
func (a *LinkArgs) Decode(d *xdr.Decoder) {
	a.File.Decode(d)
	a.Link.Decode(d)
}

// LinkRes is LINK3res; both arms carry both fields.
type LinkRes struct {
	Status     Status
	FileAttr   PostOpAttr
	LinkDirWcc WccData
}

// Append encodes the result.
func (r *LinkRes) Append(b []byte) []byte {
	b = appendStatus(b, r.Status)
	b = r.FileAttr.Append(b)
	return r.LinkDirWcc.Append(b)
}

// Decode decodes the result.
func (r *LinkRes) Decode(d *xdr.Decoder) {
	*r = LinkRes{Status: decodeStatus(d)}
	r.FileAttr.Decode(d)
	r.LinkDirWcc.Decode(d)
}
