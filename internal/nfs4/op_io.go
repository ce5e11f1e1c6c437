package nfs4

import "hushfs/internal/xdr"

// ReadArgs is READ4args.
type ReadArgs struct {
	Stateid Stateid
	Offset  uint64
	Count   uint32
}

// Append encodes the arguments.
func (a *ReadArgs) Append(b []byte) []byte {
	b = a.Stateid.Append(b)
	b = xdr.AppendUint64(b, a.Offset)
	return xdr.AppendUint32(b, a.Count)
}

// Decode decodes the arguments.
func (a *ReadArgs) Decode(d *xdr.Decoder) {
	a.Stateid.Decode(d)
	a.Offset = d.Uint64()
	a.Count = d.Uint32()
}

// ReadRes is READ4res. Data holds at most MaxData bytes.
type ReadRes struct {
	Status Status
	// NFS4_OK only:
	EOF  bool
	Data []byte
}

// Append encodes the result.
func (r *ReadRes) Append(b []byte) []byte {
	b = appendStatus(b, r.Status)
	if r.Status == OK {
		b = xdr.AppendBool(b, r.EOF)
		b = xdr.AppendOpaque(b, r.Data)
	}
	return b
}

// Decode decodes the result.
func (r *ReadRes) Decode(d *xdr.Decoder) {
	*r = ReadRes{Status: decodeStatus(d)}
	if r.Status == OK {
		r.EOF = d.Bool()
		r.Data = d.Opaque(MaxData)
	}
}

// OpStatus returns the status.
func (r *ReadRes) OpStatus() Status { return r.Status }

// WriteArgs is WRITE4args. Data holds at most MaxData bytes.
type WriteArgs struct {
	Stateid Stateid
	Offset  uint64
	Stable  StableHow
	Data    []byte
}

// Append encodes the arguments.
func (a *WriteArgs) Append(b []byte) []byte {
	b = a.Stateid.Append(b)
	b = xdr.AppendUint64(b, a.Offset)
	b = xdr.AppendUint32(b, uint32(a.Stable))
	return xdr.AppendOpaque(b, a.Data)
}

// Decode decodes the arguments; an unknown stable_how4 is an error.
func (a *WriteArgs) Decode(d *xdr.Decoder) {
	a.Stateid.Decode(d)
	a.Offset = d.Uint64()
	a.Stable = decodeStableHow(d)
	a.Data = d.Opaque(MaxData)
}

// WriteRes is WRITE4res.
type WriteRes struct {
	Status Status
	// NFS4_OK only:
	Count     uint32
	Committed StableHow
	Verf      Verifier
}

// Append encodes the result.
func (r *WriteRes) Append(b []byte) []byte {
	b = appendStatus(b, r.Status)
	if r.Status == OK {
		b = xdr.AppendUint32(b, r.Count)
		b = xdr.AppendUint32(b, uint32(r.Committed))
		b = r.Verf.Append(b)
	}
	return b
}

// Decode decodes the result; an unknown stable_how4 is an error.
func (r *WriteRes) Decode(d *xdr.Decoder) {
	*r = WriteRes{Status: decodeStatus(d)}
	if r.Status == OK {
		r.Count = d.Uint32()
		r.Committed = decodeStableHow(d)
		r.Verf.Decode(d)
	}
}

// OpStatus returns the status.
func (r *WriteRes) OpStatus() Status { return r.Status }

// CommitArgs is COMMIT4args. Count 0 means "to the end of the file".
type CommitArgs struct {
	Offset uint64
	Count  uint32
}

// Append encodes the arguments.
func (a *CommitArgs) Append(b []byte) []byte {
	b = xdr.AppendUint64(b, a.Offset)
	return xdr.AppendUint32(b, a.Count)
}

// Decode decodes the arguments.
func (a *CommitArgs) Decode(d *xdr.Decoder) {
	a.Offset = d.Uint64()
	a.Count = d.Uint32()
}

// CommitRes is COMMIT4res.
type CommitRes struct {
	Status Status
	Verf   Verifier // NFS4_OK only
}

// Append encodes the result.
func (r *CommitRes) Append(b []byte) []byte {
	b = appendStatus(b, r.Status)
	if r.Status == OK {
		b = r.Verf.Append(b)
	}
	return b
}

// Decode decodes the result.
func (r *CommitRes) Decode(d *xdr.Decoder) {
	*r = CommitRes{Status: decodeStatus(d)}
	if r.Status == OK {
		r.Verf.Decode(d)
	}
}

// OpStatus returns the status.
func (r *CommitRes) OpStatus() Status { return r.Status }
