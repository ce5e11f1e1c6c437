package nfs4

import "hushfs/internal/xdr"

// ACCESS bits.
const (
	AccessRead    = 0x01
	AccessLookup  = 0x02
	AccessModify  = 0x04
	AccessExtend  = 0x08
	AccessDelete  = 0x10
	AccessExecute = 0x20
)

// AccessArgs is ACCESS4args.
type AccessArgs struct {
	Access uint32
}

// Append encodes the arguments.
func (a *AccessArgs) Append(b []byte) []byte { return xdr.AppendUint32(b, a.Access) }

// Decode decodes the arguments.
func (a *AccessArgs) Decode(d *xdr.Decoder) { a.Access = d.Uint32() }

// AccessRes is ACCESS4res.
type AccessRes struct {
	Status Status
	// NFS4_OK only:
	Supported uint32
	Access    uint32
}

// Append encodes the result.
func (r *AccessRes) Append(b []byte) []byte {
	b = appendStatus(b, r.Status)
	if r.Status == OK {
		b = xdr.AppendUint32(b, r.Supported)
		b = xdr.AppendUint32(b, r.Access)
	}
	return b
}

// Decode decodes the result.
func (r *AccessRes) Decode(d *xdr.Decoder) {
	*r = AccessRes{Status: decodeStatus(d)}
	if r.Status == OK {
		r.Supported = d.Uint32()
		r.Access = d.Uint32()
	}
}

// OpStatus returns the status.
func (r *AccessRes) OpStatus() Status { return r.Status }

// GetattrArgs is GETATTR4args: the attributes asked for.
type GetattrArgs struct {
	AttrRequest Bitmap
}

// Append encodes the arguments.
func (a *GetattrArgs) Append(b []byte) []byte { return a.AttrRequest.Append(b) }

// Decode decodes the arguments.
func (a *GetattrArgs) Decode(d *xdr.Decoder) { a.AttrRequest.Decode(d) }

// GetattrRes is GETATTR4res.
type GetattrRes struct {
	Status Status
	Attrs  Fattr // NFS4_OK only
}

// Append encodes the result.
func (r *GetattrRes) Append(b []byte) []byte {
	b = appendStatus(b, r.Status)
	if r.Status == OK {
		b = r.Attrs.Append(b)
	}
	return b
}

// Decode decodes the result.
func (r *GetattrRes) Decode(d *xdr.Decoder) {
	r.Status = decodeStatus(d)
	if r.Status == OK {
		r.Attrs.Decode(d)
	} else {
		r.Attrs.reset()
	}
}

// OpStatus returns the status.
func (r *GetattrRes) OpStatus() Status { return r.Status }

// reset zeroes the attributes, keeping the storage of their lists.
func (f *Fattr) reset() {
	fsl, lt := f.FsLayoutTypes[:0], f.LayoutTypes[:0]
	*f = Fattr{FsLayoutTypes: fsl, LayoutTypes: lt}
}

// SetattrArgs is SETATTR4args.
type SetattrArgs struct {
	Stateid Stateid
	Attrs   Fattr
}

// Append encodes the arguments.
func (a *SetattrArgs) Append(b []byte) []byte {
	b = a.Stateid.Append(b)
	return a.Attrs.Append(b)
}

// Decode decodes the arguments.
func (a *SetattrArgs) Decode(d *xdr.Decoder) {
	a.Stateid.Decode(d)
	a.Attrs.Decode(d)
}

// SetattrRes is SETATTR4res: the attributes set, in both arms.
type SetattrRes struct {
	Status   Status
	AttrsSet Bitmap
}

// Append encodes the result.
func (r *SetattrRes) Append(b []byte) []byte {
	b = appendStatus(b, r.Status)
	return r.AttrsSet.Append(b)
}

// Decode decodes the result.
func (r *SetattrRes) Decode(d *xdr.Decoder) {
	r.Status = decodeStatus(d)
	r.AttrsSet.Decode(d)
}

// OpStatus returns the status.
func (r *SetattrRes) OpStatus() Status { return r.Status }

// VerifyArgs is VERIFY4args and NVERIFY4args.
type VerifyArgs struct {
	Attrs Fattr
}

// Append encodes the arguments.
func (a *VerifyArgs) Append(b []byte) []byte { return a.Attrs.Append(b) }

// Decode decodes the arguments.
func (a *VerifyArgs) Decode(d *xdr.Decoder) { a.Attrs.Decode(d) }
