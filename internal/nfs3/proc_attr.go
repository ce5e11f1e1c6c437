package nfs3

import "hushfs/internal/xdr"

func appendStatus(b []byte, s Status) []byte { return xdr.AppendUint32(b, uint32(s)) }

func decodeStatus(d *xdr.Decoder) Status { return Status(d.Uint32()) }

// GetattrArgs is GETATTR3args.
type GetattrArgs struct {
	Obj FH
}

// Append encodes the arguments.
func (a *GetattrArgs) Append(b []byte) []byte { return a.Obj.Append(b) }

// Decode decodes the arguments.
func (a *GetattrArgs) Decode(d *xdr.Decoder) { a.Obj.Decode(d) }

// GetattrRes is GETATTR3res. The failure arm is empty.
type GetattrRes struct {
	Status Status
	Attr   Fattr // NFS3_OK only
}

// Append encodes the result.
func (r *GetattrRes) Append(b []byte) []byte {
	b = appendStatus(b, r.Status)
	if r.Status == OK {
		b = r.Attr.Append(b)
	}
	return b
}

// Decode decodes the result.
func (r *GetattrRes) Decode(d *xdr.Decoder) {
	*r = GetattrRes{Status: decodeStatus(d)}
	if r.Status == OK {
		r.Attr.Decode(d)
	}
}

// SetattrArgs is SETATTR3args. With Guard set the server applies the change
// only if the object's ctime still equals GuardCtime.
type SetattrArgs struct {
	Obj        FH
	Attr       Sattr
	Guard      bool
	GuardCtime Time
}

// Append encodes the arguments.
func (a *SetattrArgs) Append(b []byte) []byte {
	b = a.Obj.Append(b)
	b = a.Attr.Append(b)
	b = xdr.AppendBool(b, a.Guard)
	if a.Guard {
		b = a.GuardCtime.Append(b)
	}
	return b
}

// Decode decodes the arguments.
func (a *SetattrArgs) Decode(d *xdr.Decoder) {
	*a = SetattrArgs{}
	a.Obj.Decode(d)
	a.Attr.Decode(d)
	if a.Guard = d.Bool(); a.Guard {
		a.GuardCtime.Decode(d)
	}
}

// SetattrRes is SETATTR3res; both arms carry the wcc data.
type SetattrRes struct {
	Status Status
	Wcc    WccData
}

// Append encodes the result.
func (r *SetattrRes) Append(b []byte) []byte {
	b = appendStatus(b, r.Status)
	return r.Wcc.Append(b)
}

// Decode decodes the result.
func (r *SetattrRes) Decode(d *xdr.Decoder) {
	*r = SetattrRes{Status: decodeStatus(d)}
	r.Wcc.Decode(d)
}

// AccessArgs is ACCESS3args: Access holds the Access* bits asked about.
type AccessArgs struct {
	Obj    FH
	Access uint32
}

// Append encodes the arguments.
func (a *AccessArgs) Append(b []byte) []byte {
	b = a.Obj.Append(b)
	return xdr.AppendUint32(b, a.Access)
}

// Decode decodes the arguments.
func (a *AccessArgs) Decode(d *xdr.Decoder) {
	a.Obj.Decode(d)
	a.Access = d.Uint32()
}

// AccessRes is ACCESS3res.
type AccessRes struct {
	Status  Status
	ObjAttr PostOpAttr // both arms
	Access  uint32     // NFS3_OK only: the bits granted
}

// Append encodes the result.
func (r *AccessRes) Append(b []byte) []byte {
	b = appendStatus(b, r.Status)
	b = r.ObjAttr.Append(b)
	if r.Status == OK {
		b = xdr.AppendUint32(b, r.Access)
	}
	return b
}

// Decode decodes the result.
func (r *AccessRes) Decode(d *xdr.Decoder) {
	*r = AccessRes{Status: decodeStatus(d)}
	r.ObjAttr.Decode(d)
	if r.Status == OK {
		r.Access = d.Uint32()
	}
}
