package nfs4

import (
	"fmt"
	"slices"

	"hushfs/internal/xdr"
)

// CreateArgs is CREATE4args: a directory, symbolic link, device, socket or
// FIFO named Name in the current directory (regular files are OPENed).
// Type is sent as is: the XDR gives every other type an empty arm, which a
// server answers with NFS4ERR_BADTYPE.
type CreateArgs struct {
	Type     Ftype
	LinkData []byte   // TypeLnk: the target
	Dev      Specdata // TypeBlk, TypeChr
	Name     []byte
	Attrs    Fattr
}

// Append encodes the arguments.
func (a *CreateArgs) Append(b []byte) []byte {
	b = xdr.AppendUint32(b, uint32(a.Type))
	switch a.Type {
	case TypeLnk:
		b = xdr.AppendOpaque(b, a.LinkData)
	case TypeBlk, TypeChr:
		b = a.Dev.append(b)
	}
	b = xdr.AppendOpaque(b, a.Name)
	return a.Attrs.Append(b)
}

// Decode decodes the arguments.
func (a *CreateArgs) Decode(d *xdr.Decoder) {
	a.Type = Ftype(d.Uint32())
	a.LinkData, a.Dev = nil, Specdata{}
	switch a.Type {
	case TypeLnk:
		a.LinkData = d.Opaque(MaxPathLen)
	case TypeBlk, TypeChr:
		a.Dev.decode(d)
	}
	a.Name = d.Opaque(MaxNameArg)
	a.Attrs.Decode(d)
}

// CreateRes is CREATE4res.
type CreateRes struct {
	Status Status
	// NFS4_OK only:
	CInfo   ChangeInfo
	AttrSet Bitmap
}

// Append encodes the result.
func (r *CreateRes) Append(b []byte) []byte {
	b = appendStatus(b, r.Status)
	if r.Status == OK {
		b = r.CInfo.append(b)
		b = r.AttrSet.Append(b)
	}
	return b
}

// Decode decodes the result.
func (r *CreateRes) Decode(d *xdr.Decoder) {
	*r = CreateRes{Status: decodeStatus(d)}
	if r.Status == OK {
		r.CInfo.decode(d)
		r.AttrSet.Decode(d)
	}
}

// OpStatus returns the status.
func (r *CreateRes) OpStatus() Status { return r.Status }

// LinkArgs is LINK4args: a new name, in the current directory, for the
// saved filehandle.
type LinkArgs struct {
	NewName []byte
}

// Append encodes the arguments.
func (a *LinkArgs) Append(b []byte) []byte { return xdr.AppendOpaque(b, a.NewName) }

// Decode decodes the arguments.
func (a *LinkArgs) Decode(d *xdr.Decoder) { a.NewName = d.Opaque(MaxNameArg) }

// ChangeRes is the result of the operations that report one directory's
// change: LINK4res and REMOVE4res.
type ChangeRes struct {
	Status Status
	CInfo  ChangeInfo // NFS4_OK only
}

// LinkRes is LINK4res.
type LinkRes = ChangeRes

// RemoveRes is REMOVE4res.
type RemoveRes = ChangeRes

// Append encodes the result.
func (r *ChangeRes) Append(b []byte) []byte {
	b = appendStatus(b, r.Status)
	if r.Status == OK {
		b = r.CInfo.append(b)
	}
	return b
}

// Decode decodes the result.
func (r *ChangeRes) Decode(d *xdr.Decoder) {
	*r = ChangeRes{Status: decodeStatus(d)}
	if r.Status == OK {
		r.CInfo.decode(d)
	}
}

// OpStatus returns the status.
func (r *ChangeRes) OpStatus() Status { return r.Status }

// RemoveArgs is REMOVE4args: a name in the current directory.
type RemoveArgs struct {
	Target []byte
}

// Append encodes the arguments.
func (a *RemoveArgs) Append(b []byte) []byte { return xdr.AppendOpaque(b, a.Target) }

// Decode decodes the arguments.
func (a *RemoveArgs) Decode(d *xdr.Decoder) { a.Target = d.Opaque(MaxNameArg) }

// RenameArgs is RENAME4args: OldName in the saved directory becomes NewName
// in the current one.
type RenameArgs struct {
	OldName []byte
	NewName []byte
}

// Append encodes the arguments.
func (a *RenameArgs) Append(b []byte) []byte {
	b = xdr.AppendOpaque(b, a.OldName)
	return xdr.AppendOpaque(b, a.NewName)
}

// Decode decodes the arguments.
func (a *RenameArgs) Decode(d *xdr.Decoder) {
	a.OldName = d.Opaque(MaxNameArg)
	a.NewName = d.Opaque(MaxNameArg)
}

// RenameRes is RENAME4res.
type RenameRes struct {
	Status Status
	// NFS4_OK only:
	SourceCInfo ChangeInfo
	TargetCInfo ChangeInfo
}

// Append encodes the result.
func (r *RenameRes) Append(b []byte) []byte {
	b = appendStatus(b, r.Status)
	if r.Status == OK {
		b = r.SourceCInfo.append(b)
		b = r.TargetCInfo.append(b)
	}
	return b
}

// Decode decodes the result.
func (r *RenameRes) Decode(d *xdr.Decoder) {
	*r = RenameRes{Status: decodeStatus(d)}
	if r.Status == OK {
		r.SourceCInfo.decode(d)
		r.TargetCInfo.decode(d)
	}
}

// OpStatus returns the status.
func (r *RenameRes) OpStatus() Status { return r.Status }

// ReadlinkRes is READLINK4res. A decoded Link is bounded only by the reply:
// one longer than a client can take is its to refuse (ENAMETOOLONG).
type ReadlinkRes struct {
	Status Status
	Link   []byte // NFS4_OK only
}

// Append encodes the result.
func (r *ReadlinkRes) Append(b []byte) []byte {
	b = appendStatus(b, r.Status)
	if r.Status == OK {
		b = xdr.AppendOpaque(b, r.Link)
	}
	return b
}

// Decode decodes the result.
func (r *ReadlinkRes) Decode(d *xdr.Decoder) {
	*r = ReadlinkRes{Status: decodeStatus(d)}
	if r.Status == OK {
		r.Link = d.Opaque(restOfReply)
	}
}

// OpStatus returns the status.
func (r *ReadlinkRes) OpStatus() Status { return r.Status }

// ReaddirArgs is READDIR4args.
type ReaddirArgs struct {
	Cookie      uint64
	CookieVerf  Verifier
	DirCount    uint32
	MaxCount    uint32
	AttrRequest Bitmap
}

// Append encodes the arguments.
func (a *ReaddirArgs) Append(b []byte) []byte {
	b = xdr.AppendUint64(b, a.Cookie)
	b = a.CookieVerf.Append(b)
	b = xdr.AppendUint32(b, a.DirCount)
	b = xdr.AppendUint32(b, a.MaxCount)
	return a.AttrRequest.Append(b)
}

// Decode decodes the arguments.
func (a *ReaddirArgs) Decode(d *xdr.Decoder) {
	a.Cookie = d.Uint64()
	a.CookieVerf.Decode(d)
	a.DirCount = d.Uint32()
	a.MaxCount = d.Uint32()
	a.AttrRequest.Decode(d)
}

// Entry is entry4, one READDIR entry. A decoded Name may be anything a peer
// sent (empty, over MaxNameLen, holding '/' or NUL): see restOfReply.
type Entry struct {
	Cookie uint64
	Name   []byte
	Attrs  Fattr
}

// Sizes of the fixed parts of a READDIR reply.
const (
	// ReaddirHeadSize is the part of READDIR4resok before the first entry
	// (the cookie verifier).
	ReaddirHeadSize = VerifierSize
	// DirListEndSize is the end of the entry list: value_follows FALSE and
	// eof.
	DirListEndSize = 8
	// entryMin is the smallest entry after its value_follows word: cookie,
	// empty name, empty bitmap, empty attribute list.
	entryMin = 8 + 4 + 4 + 4
)

// DirCountSize is the part of e that counts against READDIR's dircount:
// its encoded cookie and name.
func (e *Entry) DirCountSize() int { return 8 + opaqueSize(len(e.Name)) }

// AppendEntry appends value_follows TRUE and the entry. A server that finds
// the reply over maxcount afterwards cuts b back to its length before.
func AppendEntry(b []byte, e *Entry) []byte {
	b = xdr.AppendBool(b, true)
	b = xdr.AppendUint64(b, e.Cookie)
	b = xdr.AppendOpaque(b, e.Name)
	return e.Attrs.Append(b)
}

// AppendDirListEnd appends the end of a READDIR entry list: value_follows
// FALSE and eof.
func AppendDirListEnd(b []byte, eof bool) []byte {
	b = xdr.AppendBool(b, false)
	return xdr.AppendBool(b, eof)
}

// AppendReaddirResHead appends a successful READDIR4res up to its first
// entry: status NFS4_OK and the cookie verifier. Entries (AppendEntry) and
// the list end (AppendDirListEnd) follow, so a server streams a reply into
// its buffer after the operation number without building a slice:
//
//	b = xdr.AppendUint32(b, uint32(OpReaddir))
//	b = AppendReaddirResHead(b, verf)
//	for each entry e { n := len(b); b = AppendEntry(b, &e); if over maxcount { b = b[:n]; break } }
//	b = AppendDirListEnd(b, eof)
func AppendReaddirResHead(b []byte, verf Verifier) []byte {
	b = appendStatus(b, OK)
	return append(b, verf[:]...)
}

// ReaddirRes is READDIR4res.
type ReaddirRes struct {
	Status Status
	// NFS4_OK only:
	CookieVerf Verifier
	Entries    []Entry
	EOF        bool
}

// Append encodes the result.
func (r *ReaddirRes) Append(b []byte) []byte {
	if r.Status != OK {
		return appendStatus(b, r.Status)
	}
	b = AppendReaddirResHead(b, r.CookieVerf)
	for i := range r.Entries {
		b = AppendEntry(b, &r.Entries[i])
	}
	return AppendDirListEnd(b, r.EOF)
}

// Decode decodes the result. Entries are decoded into r.Entries' storage,
// grown at most once, to the exact count (the list is walked twice, first
// to count), so a caller that reuses a ReaddirRes decodes without
// allocating; names and attribute values alias the input. On an error or a
// failure status Entries is empty.
func (r *ReaddirRes) Decode(d *xdr.Decoder) {
	ents := r.Entries[:0]
	*r = ReaddirRes{Status: decodeStatus(d)}
	if r.Status == OK {
		r.CookieVerf.Decode(d)
		probe := *d
		n := 0
		for listFollows(&probe, entryMin, "directory entry", n) {
			probe.Uint64()
			probe.Opaque(restOfReply)
			skipFattr(&probe)
			n++
		}
		d.SetErr(probe.Err())
		if d.Err() == nil {
			ents = slices.Grow(ents, n)[:n]
			for i := range ents {
				d.Bool() // value_follows, TRUE as counted
				e := &ents[i]
				e.Cookie = d.Uint64()
				e.Name = d.Opaque(restOfReply)
				e.Attrs.Decode(d)
			}
			d.Bool() // FALSE
			r.EOF = d.Bool()
		}
	}
	if d.Err() != nil {
		ents = ents[:0]
	}
	r.Entries = ents
}

// OpStatus returns the status.
func (r *ReaddirRes) OpStatus() Status { return r.Status }

// listFollows reads a value_follows word and, when an entry follows, checks
// that the bytes left can hold one of at least min bytes. Every entry thus
// consumes input, so a list never counts more entries than its bytes allow
// and the loop always ends.
func listFollows(d *xdr.Decoder, min int, what string, n int) bool {
	if !d.Bool() || d.Err() != nil {
		return false
	}
	if d.Remaining() < min {
		d.SetErr(fmt.Errorf("nfs4: %s %d: %w", what, n, xdr.ErrShort))
		return false
	}
	return true
}
