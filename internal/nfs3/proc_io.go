package nfs3

import "hushfs/internal/xdr"

func decodeStableHow(d *xdr.Decoder) StableHow {
	s := StableHow(d.Uint32())
	if s > FileSync {
		d.SetErr(errBadUnion("stable_how", uint32(s)))
		return Unstable
	}
	return s
}

// ReadlinkArgs is READLINK3args.
type ReadlinkArgs struct {
	Symlink FH
}

// Append encodes the arguments.
func (a *ReadlinkArgs) Append(b []byte) []byte { return a.Symlink.Append(b) }

// Decode decodes the arguments.
func (a *ReadlinkArgs) Decode(d *xdr.Decoder) { a.Symlink.Decode(d) }

// ReadlinkRes is READLINK3res. Data is the link target as opaque bytes. A
// decoded target is bounded only by the reply's size: one longer than a
// client can take is the client's to refuse (ENAMETOOLONG), which it can
// only do if the reply decodes.
type ReadlinkRes struct {
	Status      Status
	SymlinkAttr PostOpAttr // both arms
	Data        []byte     // NFS3_OK only
}

// Append encodes the result.
func (r *ReadlinkRes) Append(b []byte) []byte {
	b = appendStatus(b, r.Status)
	b = r.SymlinkAttr.Append(b)
	if r.Status == OK {
		b = xdr.AppendOpaque(b, r.Data)
	}
	return b
}

// Decode decodes the result.
func (r *ReadlinkRes) Decode(d *xdr.Decoder) {
	*r = ReadlinkRes{Status: decodeStatus(d)}
	r.SymlinkAttr.Decode(d)
	if r.Status == OK {
		r.Data = d.Opaque(restOfReply)
	}
}

// ReadArgs is READ3args.
type ReadArgs struct {
	File   FH
	Offset uint64
	Count  uint32
}

// Append encodes the arguments.
func (a *ReadArgs) Append(b []byte) []byte {
	b = a.File.Append(b)
	b = xdr.AppendUint64(b, a.Offset)
	return xdr.AppendUint32(b, a.Count)
}

// Decode decodes the arguments.
func (a *ReadArgs) Decode(d *xdr.Decoder) {
	a.File.Decode(d)
	a.Offset = d.Uint64()
	a.Count = d.Uint32()
}

// ReadRes is READ3res. Data holds at most MaxData bytes; Count repeats its
// length on the wire (a decoder does not check that they agree).
type ReadRes struct {
	Status   Status
	FileAttr PostOpAttr // both arms
	// NFS3_OK only:
	Count uint32
	EOF   bool
	Data  []byte
}

// Append encodes the result.
func (r *ReadRes) Append(b []byte) []byte {
	b = appendStatus(b, r.Status)
	b = r.FileAttr.Append(b)
	if r.Status == OK {
		b = xdr.AppendUint32(b, r.Count)
		b = xdr.AppendBool(b, r.EOF)
		b = xdr.AppendOpaque(b, r.Data)
	}
	return b
}

// Decode decodes the result.
func (r *ReadRes) Decode(d *xdr.Decoder) {
	*r = ReadRes{Status: decodeStatus(d)}
	r.FileAttr.Decode(d)
	if r.Status == OK {
		r.Count = d.Uint32()
		r.EOF = d.Bool()
		r.Data = d.Opaque(MaxData)
	}
}

// WriteArgs is WRITE3args. Data holds at most MaxData bytes; Count repeats
// its length on the wire (the server checks that they agree, not Decode).
type WriteArgs struct {
	File   FH
	Offset uint64
	Count  uint32
	Stable StableHow
	Data   []byte
}

// Append encodes the arguments.
func (a *WriteArgs) Append(b []byte) []byte {
	b = a.File.Append(b)
	b = xdr.AppendUint64(b, a.Offset)
	b = xdr.AppendUint32(b, a.Count)
	b = xdr.AppendUint32(b, uint32(a.Stable))
	return xdr.AppendOpaque(b, a.Data)
}

// Decode decodes the arguments; an unknown stable_how is an error.
func (a *WriteArgs) Decode(d *xdr.Decoder) {
	a.File.Decode(d)
	a.Offset = d.Uint64()
	a.Count = d.Uint32()
	a.Stable = decodeStableHow(d)
	a.Data = d.Opaque(MaxData)
}

// WriteRes is WRITE3res.
type WriteRes struct {
	Status Status
	Wcc    WccData // both arms
	// NFS3_OK only:
	Count     uint32
	Committed StableHow
	Verf      Verf
}

// Append encodes the result.
func (r *WriteRes) Append(b []byte) []byte {
	b = appendStatus(b, r.Status)
	b = r.Wcc.Append(b)
	if r.Status == OK {
		b = xdr.AppendUint32(b, r.Count)
		b = xdr.AppendUint32(b, uint32(r.Committed))
		b = r.Verf.Append(b)
	}
	return b
}

// Decode decodes the result; an unknown stable_how is an error.
func (r *WriteRes) Decode(d *xdr.Decoder) {
	*r = WriteRes{Status: decodeStatus(d)}
	r.Wcc.Decode(d)
	if r.Status == OK {
		r.Count = d.Uint32()
		r.Committed = decodeStableHow(d)
		r.Verf.Decode(d)
	}
}

// CommitArgs is COMMIT3args. Count 0 means "to the end of the file".
type CommitArgs struct {
	File   FH
	Offset uint64
	Count  uint32
}

// Append encodes the arguments.
func (a *CommitArgs) Append(b []byte) []byte {
	b = a.File.Append(b)
	b = xdr.AppendUint64(b, a.Offset)
	return xdr.AppendUint32(b, a.Count)
}

// Decode decodes the arguments.
func (a *CommitArgs) Decode(d *xdr.Decoder) {
	a.File.Decode(d)
	a.Offset = d.Uint64()
	a.Count = d.Uint32()
}

// CommitRes is COMMIT3res.
type CommitRes struct {
	Status Status
	Wcc    WccData // both arms
	Verf   Verf    // NFS3_OK only
}

// Append encodes the result.
func (r *CommitRes) Append(b []byte) []byte {
	b = appendStatus(b, r.Status)
	b = r.Wcc.Append(b)
	if r.Status == OK {
		b = r.Verf.Append(b)
	}
	return b
}

// Decode decodes the result.
func (r *CommitRes) Decode(d *xdr.Decoder) {
	*r = CommitRes{Status: decodeStatus(d)}
	r.Wcc.Decode(d)
	if r.Status == OK {
		r.Verf.Decode(d)
	}
}
