// Package nfs4 holds the NFS version 4.1 protocol (RFC 8881, XDR in RFC
// 5662): the COMPOUND procedure with the arguments and results of every
// operation, the callback program (CB_COMPOUND), file attributes (fattr4),
// status codes, and their XDR encoding.
//
// The conventions are internal/nfs3's:
//   - Append(b []byte) []byte appends the XDR encoding to b;
//   - Decode(d *xdr.Decoder) decodes into the receiver, leaving any error in
//     d (checked once by the caller); []byte fields (file handles, names,
//     owners, data) alias the decoder's input, so they stay valid only as
//     long as that buffer does;
//   - names, link targets and owners are opaque bytes, never checked for a
//     character set (utf8str_* on the wire);
//   - a result type carries the fields of every arm of its union; only those
//     of the arm selected by its status (or other discriminant) are encoded
//     or decoded;
//   - Decode overwrites the whole receiver, zeroing what the message does not
//     carry; list slices keep and reuse their storage, so a value reused for
//     many messages stops allocating;
//   - every variable length is checked against the bytes left and a maximum,
//     so hostile input costs at most allocations proportional to its size.
//
// The types are written by hand from the XDR of RFC 5662 (checked against an
// independent decoder generated from the RFC 7863 XDR in oracle_test.go), so
// that each can choose its representation: unions as flat structs, fixed
// arrays for verifiers and stateids, bitmaps without allocation.
package nfs4

import "hushfs/internal/xdr"

// Program numbers and versions.
const (
	Program      = 100003
	Version      = 4
	MinorVersion = 1 // the only minor version this package speaks

	ProcNull     = 0
	ProcCompound = 1

	// CBVersion is the callback program's version; its program number is
	// the client's choice (CREATE_SESSION's csa_cb_program).
	CBVersion      = 1
	CBProcNull     = 0
	CBProcCompound = 1
)

// Protocol limits.
const (
	FHSize        = 128  // NFS4_FHSIZE: largest file handle
	VerifierSize  = 8    // NFS4_VERIFIER_SIZE
	OtherSize     = 12   // NFS4_OTHER_SIZE: the "other" part of a stateid
	OpaqueLimit   = 1024 // NFS4_OPAQUE_LIMIT: owners, server owner and scope
	SessionIDSize = 16   // NFS4_SESSIONID_SIZE
	DeviceIDSize  = 16   // NFS4_DEVICEID4_SIZE

	MaxNameLen = 255  // longest filename component a client hands the kernel
	MaxPathLen = 4096 // longest symlink target we accept in arguments
	// MaxNameArg bounds a name in a call's arguments when decoding: no
	// name is longer than a path. A server answers NAMETOOLONG for names
	// its file system cannot take; refusing them at the decoder would make
	// the operation BADXDR.
	MaxNameArg = MaxPathLen
	// MaxData bounds READ and WRITE payloads we decode; sessions negotiate
	// less.
	MaxData = 4 << 20
	// MaxTag bounds a COMPOUND's tag (utf8str_cs, unbounded in the XDR).
	MaxTag = OpaqueLimit
	// MaxCompoundOps bounds the operations of a COMPOUND or CB_COMPOUND a
	// decoder takes. A session's ca_maxoperations is far lower; this only
	// keeps a hostile count from costing memory.
	MaxCompoundOps = 1024
	// maxList bounds the other lists of the protocol (security flavors,
	// stateids to test, referring calls, ...).
	maxList = 1024
)

// restOfReply is the bound of the items of a reply that a client must be
// able to refuse one by one, as in internal/nfs3: a READDIR entry's name, a
// READLINK target, and attribute values (owners, the filehandle attribute)
// are bounded only by the bytes left in the reply, whose size the RPC layer
// bounds. A name no file system takes is the client's to skip, and must not
// cost it the rest of a listing.
const restOfReply = 1<<32 - 1

// Ftype is nfs_ftype4.
type Ftype uint32

const (
	TypeReg       Ftype = 1
	TypeDir       Ftype = 2
	TypeBlk       Ftype = 3
	TypeChr       Ftype = 4
	TypeLnk       Ftype = 5
	TypeSock      Ftype = 6
	TypeFifo      Ftype = 7
	TypeAttrDir   Ftype = 8
	TypeNamedAttr Ftype = 9
)

// FH is nfs_fh4, an opaque file handle of at most FHSize bytes.
type FH []byte

// Append encodes the handle.
func (fh FH) Append(b []byte) []byte { return xdr.AppendOpaque(b, fh) }

// Decode decodes a handle (aliasing the input).
func (fh *FH) Decode(d *xdr.Decoder) { *fh = d.Opaque(FHSize) }

// Verifier is verifier4: a boot, cookie, create or write verifier.
type Verifier [VerifierSize]byte

// Append encodes the verifier.
func (v *Verifier) Append(b []byte) []byte { return append(b, v[:]...) }

// Decode decodes a verifier.
func (v *Verifier) Decode(d *xdr.Decoder) { copy(v[:], d.FixedOpaque(VerifierSize)) }

// SessionID is sessionid4.
type SessionID [SessionIDSize]byte

// Append encodes the session id.
func (s *SessionID) Append(b []byte) []byte { return append(b, s[:]...) }

// Decode decodes a session id.
func (s *SessionID) Decode(d *xdr.Decoder) { copy(s[:], d.FixedOpaque(SessionIDSize)) }

// DeviceID is deviceid4 (pNFS).
type DeviceID [DeviceIDSize]byte

// Stateid is stateid4.
type Stateid struct {
	Seqid uint32
	Other [OtherSize]byte
}

// Special stateids (RFC 8881 §8.2.3). Read-only values.
var (
	// AnonymousStateid: I/O without open state (all zeros).
	AnonymousStateid = Stateid{}
	// BypassStateid: a READ that bypasses share-reservation checks (all
	// bits one).
	BypassStateid = Stateid{Seqid: 0xffffffff, Other: [OtherSize]byte{
		0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff}}
	// CurrentStateid: the current stateid of the COMPOUND (seqid 1,
	// other zero).
	CurrentStateid = Stateid{Seqid: 1}
	// InvalidStateid: never valid (seqid NFS4_UINT32_MAX, other zero).
	InvalidStateid = Stateid{Seqid: 0xffffffff}
)

// Append encodes the stateid.
func (s *Stateid) Append(b []byte) []byte {
	b = xdr.AppendUint32(b, s.Seqid)
	return append(b, s.Other[:]...)
}

// Decode decodes a stateid.
func (s *Stateid) Decode(d *xdr.Decoder) {
	s.Seqid = d.Uint32()
	copy(s.Other[:], d.FixedOpaque(OtherSize))
}

// Time is nfstime4.
type Time struct {
	Seconds  int64
	Nseconds uint32
}

// Append encodes the time.
func (t Time) Append(b []byte) []byte {
	return xdr.AppendUint32(xdr.AppendInt64(b, t.Seconds), t.Nseconds)
}

// Decode decodes the time.
func (t *Time) Decode(d *xdr.Decoder) {
	t.Seconds = d.Int64()
	t.Nseconds = d.Uint32()
}

// Specdata is specdata4 (device numbers).
type Specdata struct {
	Major uint32
	Minor uint32
}

func (s Specdata) append(b []byte) []byte {
	return xdr.AppendUint32(xdr.AppendUint32(b, s.Major), s.Minor)
}

func (s *Specdata) decode(d *xdr.Decoder) {
	s.Major = d.Uint32()
	s.Minor = d.Uint32()
}

// Fsid is fsid4.
type Fsid struct {
	Major uint64
	Minor uint64
}

func (f Fsid) append(b []byte) []byte {
	return xdr.AppendUint64(xdr.AppendUint64(b, f.Major), f.Minor)
}

func (f *Fsid) decode(d *xdr.Decoder) {
	f.Major = d.Uint64()
	f.Minor = d.Uint64()
}

// ChangeInfo is change_info4: a directory's change attribute before and
// after an operation, and whether nothing else happened in between.
type ChangeInfo struct {
	Atomic bool
	Before uint64
	After  uint64
}

func (c *ChangeInfo) append(b []byte) []byte {
	b = xdr.AppendBool(b, c.Atomic)
	b = xdr.AppendUint64(b, c.Before)
	return xdr.AppendUint64(b, c.After)
}

func (c *ChangeInfo) decode(d *xdr.Decoder) {
	c.Atomic = d.Bool()
	c.Before = d.Uint64()
	c.After = d.Uint64()
}

// StateOwner is state_owner4: an open owner or a lock owner.
type StateOwner struct {
	ClientID uint64
	Owner    []byte // at most OpaqueLimit bytes
}

func (o *StateOwner) append(b []byte) []byte {
	b = xdr.AppendUint64(b, o.ClientID)
	return xdr.AppendOpaque(b, o.Owner)
}

func (o *StateOwner) decode(d *xdr.Decoder) {
	o.ClientID = d.Uint64()
	o.Owner = d.Opaque(OpaqueLimit)
}

// StableHow is stable_how4, the durability of a WRITE.
type StableHow uint32

const (
	Unstable StableHow = 0
	DataSync StableHow = 1
	FileSync StableHow = 2
)

func (s StableHow) String() string {
	switch s {
	case Unstable:
		return "UNSTABLE4"
	case DataSync:
		return "DATA_SYNC4"
	case FileSync:
		return "FILE_SYNC4"
	}
	return "stable_how4(?)"
}

func decodeStableHow(d *xdr.Decoder) StableHow {
	s := StableHow(d.Uint32())
	if s > FileSync {
		d.SetErr(errBadEnum("stable_how4", uint32(s)))
		return Unstable
	}
	return s
}

// ACE is nfsace4, an access control entry (a delegation's permissions).
// It comes only in replies and callbacks, so Who is bounded by the message
// alone (restOfReply).
type ACE struct {
	Type       uint32
	Flag       uint32
	AccessMask uint32
	Who        []byte
}

func (a *ACE) append(b []byte) []byte {
	b = xdr.AppendUint32(b, a.Type)
	b = xdr.AppendUint32(b, a.Flag)
	b = xdr.AppendUint32(b, a.AccessMask)
	return xdr.AppendOpaque(b, a.Who)
}

func (a *ACE) decode(d *xdr.Decoder) {
	a.Type = d.Uint32()
	a.Flag = d.Uint32()
	a.AccessMask = d.Uint32()
	a.Who = d.Opaque(restOfReply)
}

// opaqueSize is the encoded size of variable-length opaque data of n bytes.
func opaqueSize(n int) int { return 4 + (n+3)&^3 }

func appendStatus(b []byte, s Status) []byte { return xdr.AppendUint32(b, uint32(s)) }

func decodeStatus(d *xdr.Decoder) Status { return Status(d.Uint32()) }

// decodeList reads the count of an XDR array of at most max elements of at
// least minElem bytes each, and returns s resized to it, reusing its storage
// (growing it once, to the exact count). The count is checked against the
// bytes left before anything is allocated.
func decodeList[T any](d *xdr.Decoder, s []T, max uint32, minElem int) []T {
	n := d.ArrayLen(max, minElem)
	if cap(s) < n {
		s = make([]T, n)
	}
	s = s[:n]
	var zero T
	for i := range s {
		s[i] = zero
	}
	return s
}
