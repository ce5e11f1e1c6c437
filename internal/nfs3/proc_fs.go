package nfs3

import "hushfs/internal/xdr"

// FsstatArgs is FSSTAT3args.
type FsstatArgs struct {
	Root FH
}

// Append encodes the arguments.
func (a *FsstatArgs) Append(b []byte) []byte { return a.Root.Append(b) }

// Decode decodes the arguments.
func (a *FsstatArgs) Decode(d *xdr.Decoder) { a.Root.Decode(d) }

// FsstatRes is FSSTAT3res: byte and file counts, total (T), free (F) and
// available to the caller (A).
type FsstatRes struct {
	Status  Status
	ObjAttr PostOpAttr // both arms
	// NFS3_OK only:
	Tbytes, Fbytes, Abytes uint64
	Tfiles, Ffiles, Afiles uint64
	Invarsec               uint32
}

// Append encodes the result.
func (r *FsstatRes) Append(b []byte) []byte {
	b = appendStatus(b, r.Status)
	b = r.ObjAttr.Append(b)
	if r.Status == OK {
		b = xdr.AppendUint64(b, r.Tbytes)
		b = xdr.AppendUint64(b, r.Fbytes)
		b = xdr.AppendUint64(b, r.Abytes)
		b = xdr.AppendUint64(b, r.Tfiles)
		b = xdr.AppendUint64(b, r.Ffiles)
		b = xdr.AppendUint64(b, r.Afiles)
		b = xdr.AppendUint32(b, r.Invarsec)
	}
	return b
}

// Decode decodes the result.
func (r *FsstatRes) Decode(d *xdr.Decoder) {
	*r = FsstatRes{Status: decodeStatus(d)}
	r.ObjAttr.Decode(d)
	if r.Status == OK {
		r.Tbytes = d.Uint64()
		r.Fbytes = d.Uint64()
		r.Abytes = d.Uint64()
		r.Tfiles = d.Uint64()
		r.Ffiles = d.Uint64()
		r.Afiles = d.Uint64()
		r.Invarsec = d.Uint32()
	}
}

// FsinfoArgs is FSINFO3args.
type FsinfoArgs struct {
	Root FH
}

// Append encodes the arguments.
func (a *FsinfoArgs) Append(b []byte) []byte { return a.Root.Append(b) }

// Decode decodes the arguments.
func (a *FsinfoArgs) Decode(d *xdr.Decoder) { a.Root.Decode(d) }

// FsinfoRes is FSINFO3res: the server's transfer sizes (max, preferred,
// multiple) for READ (Rt*), WRITE (Wt*) and READDIR (Dtpref), and FSF* bits
// in Properties.
type FsinfoRes struct {
	Status  Status
	ObjAttr PostOpAttr // both arms
	// NFS3_OK only:
	Rtmax, Rtpref, Rtmult uint32
	Wtmax, Wtpref, Wtmult uint32
	Dtpref                uint32
	MaxFileSize           uint64
	TimeDelta             Time
	Properties            uint32
}

// Append encodes the result.
func (r *FsinfoRes) Append(b []byte) []byte {
	b = appendStatus(b, r.Status)
	b = r.ObjAttr.Append(b)
	if r.Status == OK {
		b = xdr.AppendUint32(b, r.Rtmax)
		b = xdr.AppendUint32(b, r.Rtpref)
		b = xdr.AppendUint32(b, r.Rtmult)
		b = xdr.AppendUint32(b, r.Wtmax)
		b = xdr.AppendUint32(b, r.Wtpref)
		b = xdr.AppendUint32(b, r.Wtmult)
		b = xdr.AppendUint32(b, r.Dtpref)
		b = xdr.AppendUint64(b, r.MaxFileSize)
		b = r.TimeDelta.Append(b)
		b = xdr.AppendUint32(b, r.Properties)
	}
	return b
}

// Decode decodes the result.
func (r *FsinfoRes) Decode(d *xdr.Decoder) {
	*r = FsinfoRes{Status: decodeStatus(d)}
	r.ObjAttr.Decode(d)
	if r.Status == OK {
		r.Rtmax = d.Uint32()
		r.Rtpref = d.Uint32()
		r.Rtmult = d.Uint32()
		r.Wtmax = d.Uint32()
		r.Wtpref = d.Uint32()
		r.Wtmult = d.Uint32()
		r.Dtpref = d.Uint32()
		r.MaxFileSize = d.Uint64()
		r.TimeDelta.Decode(d)
		r.Properties = d.Uint32()
	}
}

// PathconfArgs is PATHCONF3args.
type PathconfArgs struct {
	Obj FH
}

// Append encodes the arguments.
func (a *PathconfArgs) Append(b []byte) []byte { return a.Obj.Append(b) }

// Decode decodes the arguments.
func (a *PathconfArgs) Decode(d *xdr.Decoder) { a.Obj.Decode(d) }

// PathconfRes is PATHCONF3res.
type PathconfRes struct {
	Status  Status
	ObjAttr PostOpAttr // both arms
	// NFS3_OK only:
	Linkmax         uint32
	NameMax         uint32
	NoTrunc         bool
	ChownRestricted bool
	CaseInsensitive bool
	CasePreserving  bool
}

// Append encodes the result.
func (r *PathconfRes) Append(b []byte) []byte {
	b = appendStatus(b, r.Status)
	b = r.ObjAttr.Append(b)
	if r.Status == OK {
		b = xdr.AppendUint32(b, r.Linkmax)
		b = xdr.AppendUint32(b, r.NameMax)
		b = xdr.AppendBool(b, r.NoTrunc)
		b = xdr.AppendBool(b, r.ChownRestricted)
		b = xdr.AppendBool(b, r.CaseInsensitive)
		b = xdr.AppendBool(b, r.CasePreserving)
	}
	return b
}

// Decode decodes the result.
func (r *PathconfRes) Decode(d *xdr.Decoder) {
	*r = PathconfRes{Status: decodeStatus(d)}
	r.ObjAttr.Decode(d)
	if r.Status == OK {
		r.Linkmax = d.Uint32()
		r.NameMax = d.Uint32()
		r.NoTrunc = d.Bool()
		r.ChownRestricted = d.Bool()
		r.CaseInsensitive = d.Bool()
		r.CasePreserving = d.Bool()
	}
}
