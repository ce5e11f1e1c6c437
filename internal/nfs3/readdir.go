package nfs3

import (
	"fmt"
	"slices"

	"hushfs/internal/xdr"
)

// Sizes of fixed parts on the wire.
const (
	// FattrSize is the size of fattr3.
	FattrSize = 84
	// DirListEndSize is the end of a directory list: value_follows FALSE
	// and eof.
	DirListEndSize = 8
)

// Smallest encodings of one list entry after its value_follows word, so a
// decoder rejects an entry count the remaining bytes cannot hold.
const (
	dirEntryMin     = 8 + 4 + 8 // fileid, empty name, cookie
	dirEntryPlusMin = dirEntryMin + 4 + 4
)

// restOfReply is the bound of the items of a reply that a client must be
// able to refuse one by one: a READDIR(PLUS) entry's name, a post_op_fh3
// handle and a READLINK target are bounded only by the bytes left in the
// reply. An entry a client cannot use (a name no file system takes, a
// handle over NFS3_FHSIZE) is the client's to skip, and must not cost it
// the rest of the listing; a target too long for it gets its own error,
// not EIO. The reply's size is bounded by the RPC layer, and these slices
// alias it.
const restOfReply = 1<<32 - 1

// opaqueSize is the encoded size of variable-length opaque data of n bytes.
func opaqueSize(n int) int { return 4 + (n+3)&^3 }

// XDRSize is the encoded size of the optional attributes.
func (p *PostOpAttr) XDRSize() int {
	if p.Present {
		return 4 + FattrSize
	}
	return 4
}

// XDRSize is the encoded size of the optional handle.
func (p *PostOpFH) XDRSize() int {
	if p.Present {
		return 4 + opaqueSize(len(p.FH))
	}
	return 4
}

// ReaddirHeadSize is the size of the part of READDIR3resok or
// READDIRPLUS3resok before the first entry (dir_attributes and cookieverf);
// the status word is not included, as count and maxcount do not include it.
func ReaddirHeadSize(dirAttr *PostOpAttr) int { return dirAttr.XDRSize() + CookieVerfSize }

// DirEntry is entry3, one READDIR entry. A decoded Name may be anything a
// peer sent (empty, over MaxNameLen, holding '/' or NUL): see restOfReply.
type DirEntry struct {
	Fileid uint64
	Name   []byte
	Cookie uint64
}

// XDRSize is the number of bytes AppendDirEntry adds for e, value_follows
// word included.
func (e *DirEntry) XDRSize() int { return 4 + 8 + opaqueSize(len(e.Name)) + 8 }

// AppendDirEntry appends value_follows TRUE and the entry.
func AppendDirEntry(b []byte, e *DirEntry) []byte {
	b = xdr.AppendBool(b, true)
	b = xdr.AppendUint64(b, e.Fileid)
	b = xdr.AppendOpaque(b, e.Name)
	return xdr.AppendUint64(b, e.Cookie)
}

// decode decodes an entry, without its value_follows word.
func (e *DirEntry) decode(d *xdr.Decoder) {
	e.Fileid = d.Uint64()
	e.Name = d.Opaque(restOfReply)
	e.Cookie = d.Uint64()
}

// AppendDirListEnd appends the end of a READDIR or READDIRPLUS entry list:
// value_follows FALSE and eof.
func AppendDirListEnd(b []byte, eof bool) []byte {
	b = xdr.AppendBool(b, false)
	return xdr.AppendBool(b, eof)
}

// AppendReaddirResHead appends a successful READDIR3res up to its first
// entry: status NFS3_OK, dir_attributes and cookieverf. Entries
// (AppendDirEntry) and the list end (AppendDirListEnd) follow, so a server
// streams a reply into its buffer without building a slice:
//
//	b = AppendReaddirResHead(b, &dirAttr, verf)
//	used := ReaddirHeadSize(&dirAttr) + DirListEndSize
//	for each entry e, eof = true {
//		if used+e.XDRSize() > int(args.Count) { eof = false; break }
//		used += e.XDRSize()
//		b = AppendDirEntry(b, &e)
//	}
//	b = AppendDirListEnd(b, eof)
//
// The client's count is the largest size of the whole READDIR3resok, XDR
// overhead included and the status word excluded; the sizes above add up
// exactly those bytes, so used never exceeds it. A server that cannot fit a
// single entry answers NFS3ERR_TOOSMALL.
func AppendReaddirResHead(b []byte, dirAttr *PostOpAttr, verf Verf) []byte {
	b = appendStatus(b, OK)
	b = dirAttr.Append(b)
	return append(b, verf[:]...)
}

// DirEntryPlus is entryplus3, one READDIRPLUS entry. A decoded Name, and
// FH.FH (empty, or over FHSize), may be anything a peer sent: see
// restOfReply.
type DirEntryPlus struct {
	Fileid uint64
	Name   []byte
	Cookie uint64
	Attr   PostOpAttr
	FH     PostOpFH
}

// XDRSize is the number of bytes AppendDirEntryPlus adds for e,
// value_follows word included; it counts against maxcount.
func (e *DirEntryPlus) XDRSize() int {
	return 4 + 8 + opaqueSize(len(e.Name)) + 8 + e.Attr.XDRSize() + e.FH.XDRSize()
}

// DirCountSize is the part of e that counts against READDIRPLUS's
// dircount: the encoded fileid, name and cookie.
func (e *DirEntryPlus) DirCountSize() int { return 8 + opaqueSize(len(e.Name)) + 8 }

// AppendDirEntryPlus appends value_follows TRUE and the entry.
func AppendDirEntryPlus(b []byte, e *DirEntryPlus) []byte {
	b = xdr.AppendBool(b, true)
	b = xdr.AppendUint64(b, e.Fileid)
	b = xdr.AppendOpaque(b, e.Name)
	b = xdr.AppendUint64(b, e.Cookie)
	b = e.Attr.Append(b)
	return e.FH.Append(b)
}

// decode decodes an entry, without its value_follows word.
func (e *DirEntryPlus) decode(d *xdr.Decoder) {
	*e = DirEntryPlus{Fileid: d.Uint64()}
	e.Name = d.Opaque(restOfReply)
	e.Cookie = d.Uint64()
	e.Attr.Decode(d)
	e.FH.Decode(d)
}

// skipDirEntryPlus consumes an entry, checking what decode checks.
func skipDirEntryPlus(d *xdr.Decoder) {
	d.Uint64()
	d.Opaque(restOfReply)
	d.Uint64()
	if d.Bool() {
		d.FixedOpaque(FattrSize)
	}
	if d.Bool() {
		d.Opaque(restOfReply)
	}
}

// AppendReaddirplusResHead appends a successful READDIRPLUS3res up to its
// first entry: status NFS3_OK, dir_attributes and cookieverf. Entries
// (AppendDirEntryPlus) and the list end (AppendDirListEnd) follow, as with
// AppendReaddirResHead. Two limits apply: maxcount bounds the whole
// READDIRPLUS3resok like READDIR's count (ReaddirHeadSize, XDRSize,
// DirListEndSize), and dircount bounds the sum of the entries'
// DirCountSize (their fileid, name and cookie, without attributes and
// handle); a server stops at whichever is reached first.
func AppendReaddirplusResHead(b []byte, dirAttr *PostOpAttr, verf Verf) []byte {
	return AppendReaddirResHead(b, dirAttr, verf)
}

// Decoding a linked list.
//
// A list is walked twice: first on a copy of the cursor, to count and check
// its entries without storing them, then to decode them into a slice grown
// once to the exact count. Growing the slice entry by entry instead would
// allocate several times its final size on the way; a hostile peer's long
// list would be costly even though it ends in an error.

// listFollows reads a value_follows word and, when an entry follows, checks
// that the bytes left can hold one of at least min bytes. Every entry thus
// consumes input, so a list never counts more entries than its bytes allow
// and the loop always ends.
func listFollows(d *xdr.Decoder, min int, what string, n int) bool {
	if !d.Bool() || d.Err() != nil {
		return false
	}
	if d.Remaining() < min {
		d.SetErr(fmt.Errorf("nfs3: %s %d: %w", what, n, xdr.ErrShort))
		return false
	}
	return true
}

// ReaddirArgs is READDIR3args.
type ReaddirArgs struct {
	Dir        FH
	Cookie     uint64
	CookieVerf Verf
	Count      uint32
}

// Append encodes the arguments.
func (a *ReaddirArgs) Append(b []byte) []byte {
	b = a.Dir.Append(b)
	b = xdr.AppendUint64(b, a.Cookie)
	b = a.CookieVerf.Append(b)
	return xdr.AppendUint32(b, a.Count)
}

// Decode decodes the arguments.
func (a *ReaddirArgs) Decode(d *xdr.Decoder) {
	a.Dir.Decode(d)
	a.Cookie = d.Uint64()
	a.CookieVerf.Decode(d)
	a.Count = d.Uint32()
}

// ReaddirRes is READDIR3res.
type ReaddirRes struct {
	Status  Status
	DirAttr PostOpAttr // both arms
	// NFS3_OK only:
	CookieVerf Verf
	Entries    []DirEntry
	EOF        bool
}

// Append encodes the result.
func (r *ReaddirRes) Append(b []byte) []byte {
	if r.Status != OK {
		b = appendStatus(b, r.Status)
		return r.DirAttr.Append(b)
	}
	b = AppendReaddirResHead(b, &r.DirAttr, r.CookieVerf)
	for i := range r.Entries {
		b = AppendDirEntry(b, &r.Entries[i])
	}
	return AppendDirListEnd(b, r.EOF)
}

// Decode decodes the result. Entries are decoded into r.Entries' storage,
// which is grown at most once, to the exact count, so a caller that sized it
// in advance decodes without allocating; names alias the input. On an error
// or a failure status Entries is empty.
func (r *ReaddirRes) Decode(d *xdr.Decoder) {
	ents := r.Entries[:0]
	*r = ReaddirRes{Status: decodeStatus(d)}
	r.DirAttr.Decode(d)
	if r.Status == OK {
		r.CookieVerf.Decode(d)
		// Count the entries on a copy of the cursor first.
		probe := *d
		n := 0
		var e DirEntry
		for listFollows(&probe, dirEntryMin, "directory entry", n) {
			e.decode(&probe)
			n++
		}
		d.SetErr(probe.Err())
		if d.Err() == nil {
			ents = slices.Grow(ents, n)[:n]
			for i := range ents {
				d.Bool() // value_follows, TRUE as counted
				ents[i].decode(d)
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

// ReaddirplusArgs is READDIRPLUS3args.
type ReaddirplusArgs struct {
	Dir        FH
	Cookie     uint64
	CookieVerf Verf
	DirCount   uint32
	MaxCount   uint32
}

// Append encodes the arguments.
func (a *ReaddirplusArgs) Append(b []byte) []byte {
	b = a.Dir.Append(b)
	b = xdr.AppendUint64(b, a.Cookie)
	b = a.CookieVerf.Append(b)
	b = xdr.AppendUint32(b, a.DirCount)
	return xdr.AppendUint32(b, a.MaxCount)
}

// Decode decodes the arguments.
func (a *ReaddirplusArgs) Decode(d *xdr.Decoder) {
	a.Dir.Decode(d)
	a.Cookie = d.Uint64()
	a.CookieVerf.Decode(d)
	a.DirCount = d.Uint32()
	a.MaxCount = d.Uint32()
}

// ReaddirplusRes is READDIRPLUS3res.
type ReaddirplusRes struct {
	Status  Status
	DirAttr PostOpAttr // both arms
	// NFS3_OK only:
	CookieVerf Verf
	Entries    []DirEntryPlus
	EOF        bool
}

// Append encodes the result.
func (r *ReaddirplusRes) Append(b []byte) []byte {
	if r.Status != OK {
		b = appendStatus(b, r.Status)
		return r.DirAttr.Append(b)
	}
	b = AppendReaddirplusResHead(b, &r.DirAttr, r.CookieVerf)
	for i := range r.Entries {
		b = AppendDirEntryPlus(b, &r.Entries[i])
	}
	return AppendDirListEnd(b, r.EOF)
}

// Decode decodes the result. Entries are decoded into r.Entries' storage,
// which is grown at most once, to the exact count, so a caller that sized it
// in advance decodes without allocating; names and handles alias the input.
// On an error or a failure status Entries is empty.
func (r *ReaddirplusRes) Decode(d *xdr.Decoder) {
	ents := r.Entries[:0]
	*r = ReaddirplusRes{Status: decodeStatus(d)}
	r.DirAttr.Decode(d)
	if r.Status == OK {
		r.CookieVerf.Decode(d)
		probe := *d
		n := 0
		for listFollows(&probe, dirEntryPlusMin, "directory entry", n) {
			skipDirEntryPlus(&probe)
			n++
		}
		d.SetErr(probe.Err())
		if d.Err() == nil {
			ents = slices.Grow(ents, n)[:n]
			for i := range ents {
				d.Bool()
				ents[i].decode(d)
			}
			d.Bool()
			r.EOF = d.Bool()
		}
	}
	if d.Err() != nil {
		ents = ents[:0]
	}
	r.Entries = ents
}
