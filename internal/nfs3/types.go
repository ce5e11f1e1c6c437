// Package nfs3 holds the NFS version 3 protocol (RFC 1813) and the MOUNT
// version 3 protocol (RFC 1813 Appendix I): constants, the argument and
// result of every procedure, and their XDR encoding.
//
// Conventions, kept by every type in the package:
//   - Append(b []byte) []byte appends the XDR encoding to b;
//   - Decode(d *xdr.Decoder) decodes into the receiver, leaving any error in
//     d (checked once by the caller); []byte fields (file handles, names,
//     data) alias the decoder's input, so they stay valid only as long as
//     that buffer does;
//   - filenames and paths are opaque bytes, never checked for a character set;
//   - a result type carries the fields of both arms of its union; only those
//     of the arm selected by Status are encoded or decoded;
//   - Decode overwrites the whole receiver, zeroing the fields the message
//     does not carry, so one value can be reused for many messages; list
//     slices keep and reuse their storage;
//   - lists are decoded with their length checked against the bytes left,
//     so hostile input costs at most allocations proportional to its size.
package nfs3

import "hushfs/internal/xdr"

// Program numbers and versions.
const (
	Program      = 100003
	Version      = 3
	MountProgram = 100005
	MountVersion = 3
)

// NFSv3 procedure numbers.
const (
	ProcNull        = 0
	ProcGetattr     = 1
	ProcSetattr     = 2
	ProcLookup      = 3
	ProcAccess      = 4
	ProcReadlink    = 5
	ProcRead        = 6
	ProcWrite       = 7
	ProcCreate      = 8
	ProcMkdir       = 9
	ProcSymlink     = 10
	ProcMknod       = 11
	ProcRemove      = 12
	ProcRmdir       = 13
	ProcRename      = 14
	ProcLink        = 15
	ProcReaddir     = 16
	ProcReaddirplus = 17
	ProcFsstat      = 18
	ProcFsinfo      = 19
	ProcPathconf    = 20
	ProcCommit      = 21
	NumProcs        = 22
)

var procNames = [NumProcs]string{"NULL", "GETATTR", "SETATTR", "LOOKUP", "ACCESS",
	"READLINK", "READ", "WRITE", "CREATE", "MKDIR", "SYMLINK", "MKNOD", "REMOVE",
	"RMDIR", "RENAME", "LINK", "READDIR", "READDIRPLUS", "FSSTAT", "FSINFO",
	"PATHCONF", "COMMIT"}

// ProcName returns the procedure's name as RFC 1813 spells it.
func ProcName(proc uint32) string {
	if proc < NumProcs {
		return procNames[proc]
	}
	return "UNKNOWN"
}

// Protocol limits.
const (
	FHSize         = 64   // NFS3_FHSIZE: largest file handle
	CookieVerfSize = 8    // NFS3_COOKIEVERFSIZE
	CreateVerfSize = 8    // NFS3_CREATEVERFSIZE
	WriteVerfSize  = 8    // NFS3_WRITEVERFSIZE
	MaxNameLen     = 255  // longest filename component we accept
	MaxPathLen     = 4096 // longest symlink target or MOUNT path we accept
	// MaxNameArg bounds a name in a call's arguments when decoding: no
	// name is longer than a path. A server answers NAMETOOLONG for names
	// its file system cannot take; refusing them at the decoder would
	// make the call GARBAGE_ARGS, an EIO for the application.
	MaxNameArg = MaxPathLen
	// MaxData bounds READ/WRITE payloads we decode; servers advertise less.
	MaxData = 4 << 20
)

// Ftype is ftype3.
type Ftype uint32

const (
	TypeReg  Ftype = 1
	TypeDir  Ftype = 2
	TypeBlk  Ftype = 3
	TypeChr  Ftype = 4
	TypeLnk  Ftype = 5
	TypeSock Ftype = 6
	TypeFifo Ftype = 7
)

// ACCESS procedure bits.
const (
	AccessRead    = 0x0001
	AccessLookup  = 0x0002
	AccessModify  = 0x0004
	AccessExtend  = 0x0008
	AccessDelete  = 0x0010
	AccessExecute = 0x0020
)

// StableHow is stable_how, the durability of a WRITE.
type StableHow uint32

const (
	Unstable StableHow = 0
	DataSync StableHow = 1
	FileSync StableHow = 2
)

func (s StableHow) String() string {
	switch s {
	case Unstable:
		return "UNSTABLE"
	case DataSync:
		return "DATA_SYNC"
	case FileSync:
		return "FILE_SYNC"
	}
	return "stable_how(?)"
}

// CreateMode is createmode3.
type CreateMode uint32

const (
	Unchecked CreateMode = 0
	Guarded   CreateMode = 1
	Exclusive CreateMode = 2
)

// TimeHow is time_how, how SETATTR sets a time.
type TimeHow uint32

const (
	DontChange      TimeHow = 0
	SetToServerTime TimeHow = 1
	SetToClientTime TimeHow = 2
)

// FSINFO properties bits.
const (
	FSFLink        = 0x0001
	FSFSymlink     = 0x0002
	FSFHomogeneous = 0x0008
	FSFCanSetTime  = 0x0010
)

// FH is nfs_fh3, an opaque file handle of at most FHSize bytes.
type FH []byte

// Append encodes the handle.
func (fh FH) Append(b []byte) []byte { return xdr.AppendOpaque(b, fh) }

// Decode decodes a handle (aliasing the input).
func (fh *FH) Decode(d *xdr.Decoder) { *fh = d.Opaque(FHSize) }

// Verf is an 8-byte cookie, create or write verifier.
type Verf [8]byte

// Append encodes the verifier.
func (v *Verf) Append(b []byte) []byte { return append(b, v[:]...) }

// Decode decodes a verifier.
func (v *Verf) Decode(d *xdr.Decoder) { copy(v[:], d.FixedOpaque(8)) }

// Time is nfstime3.
type Time struct {
	Seconds  uint32
	Nseconds uint32
}

// Append encodes the time.
func (t Time) Append(b []byte) []byte {
	return xdr.AppendUint32(xdr.AppendUint32(b, t.Seconds), t.Nseconds)
}

// Decode decodes the time.
func (t *Time) Decode(d *xdr.Decoder) {
	t.Seconds = d.Uint32()
	t.Nseconds = d.Uint32()
}

// SpecData is specdata3 (device numbers).
type SpecData struct {
	Major uint32
	Minor uint32
}

// Fattr is fattr3.
type Fattr struct {
	Type   Ftype
	Mode   uint32
	Nlink  uint32
	UID    uint32
	GID    uint32
	Size   uint64
	Used   uint64
	Rdev   SpecData
	Fsid   uint64
	Fileid uint64
	Atime  Time
	Mtime  Time
	Ctime  Time
}

// Append encodes the attributes.
func (a *Fattr) Append(b []byte) []byte {
	b = xdr.AppendUint32(b, uint32(a.Type))
	b = xdr.AppendUint32(b, a.Mode)
	b = xdr.AppendUint32(b, a.Nlink)
	b = xdr.AppendUint32(b, a.UID)
	b = xdr.AppendUint32(b, a.GID)
	b = xdr.AppendUint64(b, a.Size)
	b = xdr.AppendUint64(b, a.Used)
	b = xdr.AppendUint32(b, a.Rdev.Major)
	b = xdr.AppendUint32(b, a.Rdev.Minor)
	b = xdr.AppendUint64(b, a.Fsid)
	b = xdr.AppendUint64(b, a.Fileid)
	b = a.Atime.Append(b)
	b = a.Mtime.Append(b)
	return a.Ctime.Append(b)
}

// Decode decodes the attributes.
func (a *Fattr) Decode(d *xdr.Decoder) {
	a.Type = Ftype(d.Uint32())
	a.Mode = d.Uint32()
	a.Nlink = d.Uint32()
	a.UID = d.Uint32()
	a.GID = d.Uint32()
	a.Size = d.Uint64()
	a.Used = d.Uint64()
	a.Rdev.Major = d.Uint32()
	a.Rdev.Minor = d.Uint32()
	a.Fsid = d.Uint64()
	a.Fileid = d.Uint64()
	a.Atime.Decode(d)
	a.Mtime.Decode(d)
	a.Ctime.Decode(d)
}

// WccAttr is wcc_attr: the pre-operation attributes of weak cache consistency.
type WccAttr struct {
	Size  uint64
	Mtime Time
	Ctime Time
}

// PostOpAttr is post_op_attr.
type PostOpAttr struct {
	Present bool
	Attr    Fattr
}

// Append encodes the optional attributes.
func (p *PostOpAttr) Append(b []byte) []byte {
	b = xdr.AppendBool(b, p.Present)
	if p.Present {
		b = p.Attr.Append(b)
	}
	return b
}

// Decode decodes the optional attributes.
func (p *PostOpAttr) Decode(d *xdr.Decoder) {
	*p = PostOpAttr{Present: d.Bool()}
	if p.Present {
		p.Attr.Decode(d)
	}
}

// PreOpAttr is pre_op_attr.
type PreOpAttr struct {
	Present bool
	Attr    WccAttr
}

// Append encodes the optional pre-operation attributes.
func (p *PreOpAttr) Append(b []byte) []byte {
	b = xdr.AppendBool(b, p.Present)
	if p.Present {
		b = xdr.AppendUint64(b, p.Attr.Size)
		b = p.Attr.Mtime.Append(b)
		b = p.Attr.Ctime.Append(b)
	}
	return b
}

// Decode decodes the optional pre-operation attributes.
func (p *PreOpAttr) Decode(d *xdr.Decoder) {
	*p = PreOpAttr{Present: d.Bool()}
	if p.Present {
		p.Attr.Size = d.Uint64()
		p.Attr.Mtime.Decode(d)
		p.Attr.Ctime.Decode(d)
	}
}

// WccData is wcc_data: attributes before and after a modifying operation.
type WccData struct {
	Before PreOpAttr
	After  PostOpAttr
}

// Append encodes the wcc data.
func (w *WccData) Append(b []byte) []byte {
	b = w.Before.Append(b)
	return w.After.Append(b)
}

// Decode decodes the wcc data.
func (w *WccData) Decode(d *xdr.Decoder) {
	w.Before.Decode(d)
	w.After.Decode(d)
}

// PostOpFH is post_op_fh3.
type PostOpFH struct {
	Present bool
	FH      FH
}

// Append encodes the optional handle.
func (p *PostOpFH) Append(b []byte) []byte {
	b = xdr.AppendBool(b, p.Present)
	if p.Present {
		b = p.FH.Append(b)
	}
	return b
}

// Decode decodes the optional handle. Only replies carry one, and a handle
// a client cannot use (empty, or over FHSize) is bounded only by the reply
// (restOfReply): the client treats it as absent and looks the name up,
// rather than losing the whole reply (a listing, a CREATE that happened).
func (p *PostOpFH) Decode(d *xdr.Decoder) {
	*p = PostOpFH{Present: d.Bool()}
	if p.Present {
		p.FH = d.Opaque(restOfReply)
	}
}

// SetTime is set_atime / set_mtime.
type SetTime struct {
	How  TimeHow
	Time Time // with SetToClientTime
}

// Sattr is sattr3: the attributes a SETATTR, CREATE, MKDIR, SYMLINK or MKNOD
// sets. A field is set when its Set* flag is true.
type Sattr struct {
	SetMode bool
	Mode    uint32
	SetUID  bool
	UID     uint32
	SetGID  bool
	GID     uint32
	SetSize bool
	Size    uint64
	Atime   SetTime
	Mtime   SetTime
}

// Append encodes the settable attributes.
func (s *Sattr) Append(b []byte) []byte {
	b = xdr.AppendBool(b, s.SetMode)
	if s.SetMode {
		b = xdr.AppendUint32(b, s.Mode)
	}
	b = xdr.AppendBool(b, s.SetUID)
	if s.SetUID {
		b = xdr.AppendUint32(b, s.UID)
	}
	b = xdr.AppendBool(b, s.SetGID)
	if s.SetGID {
		b = xdr.AppendUint32(b, s.GID)
	}
	b = xdr.AppendBool(b, s.SetSize)
	if s.SetSize {
		b = xdr.AppendUint64(b, s.Size)
	}
	b = xdr.AppendUint32(b, uint32(s.Atime.How))
	if s.Atime.How == SetToClientTime {
		b = s.Atime.Time.Append(b)
	}
	b = xdr.AppendUint32(b, uint32(s.Mtime.How))
	if s.Mtime.How == SetToClientTime {
		b = s.Mtime.Time.Append(b)
	}
	return b
}

// Decode decodes settable attributes; an unknown time_how is an error.
func (s *Sattr) Decode(d *xdr.Decoder) {
	*s = Sattr{}
	if s.SetMode = d.Bool(); s.SetMode {
		s.Mode = d.Uint32()
	}
	if s.SetUID = d.Bool(); s.SetUID {
		s.UID = d.Uint32()
	}
	if s.SetGID = d.Bool(); s.SetGID {
		s.GID = d.Uint32()
	}
	if s.SetSize = d.Bool(); s.SetSize {
		s.Size = d.Uint64()
	}
	s.Atime.decode(d)
	s.Mtime.decode(d)
}

func (t *SetTime) decode(d *xdr.Decoder) {
	*t = SetTime{How: TimeHow(d.Uint32())}
	switch t.How {
	case DontChange, SetToServerTime:
	case SetToClientTime:
		t.Time.Decode(d)
	default:
		d.SetErr(errBadUnion("time_how", uint32(t.How)))
	}
}

// DirOpArgs is diropargs3: a directory and a name in it.
type DirOpArgs struct {
	Dir  FH
	Name []byte
}

// Append encodes the directory operation arguments.
func (a *DirOpArgs) Append(b []byte) []byte {
	b = a.Dir.Append(b)
	return xdr.AppendOpaque(b, a.Name)
}

// Decode decodes the directory operation arguments.
func (a *DirOpArgs) Decode(d *xdr.Decoder) {
	a.Dir.Decode(d)
	a.Name = d.Opaque(MaxNameArg)
}
