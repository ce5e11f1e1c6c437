package nfs4

import (
	"errors"
	"fmt"

	"hushfs/internal/xdr"
)

// Attribute numbers (RFC 8881 §5, RFC 7862 §12.2, RFC 8275, RFC 8276).
const (
	AttrSupportedAttrs    = 0
	AttrType              = 1
	AttrFHExpireType      = 2
	AttrChange            = 3
	AttrSize              = 4
	AttrLinkSupport       = 5
	AttrSymlinkSupport    = 6
	AttrNamedAttr         = 7
	AttrFsid              = 8
	AttrUniqueHandles     = 9
	AttrLeaseTime         = 10
	AttrRdattrError       = 11
	AttrACL               = 12
	AttrACLSupport        = 13
	AttrArchive           = 14
	AttrCanSetTime        = 15
	AttrCaseInsensitive   = 16
	AttrCasePreserving    = 17
	AttrChownRestricted   = 18
	AttrFilehandle        = 19
	AttrFileid            = 20
	AttrFilesAvail        = 21
	AttrFilesFree         = 22
	AttrFilesTotal        = 23
	AttrFsLocations       = 24
	AttrHidden            = 25
	AttrHomogeneous       = 26
	AttrMaxFileSize       = 27
	AttrMaxLink           = 28
	AttrMaxName           = 29
	AttrMaxRead           = 30
	AttrMaxWrite          = 31
	AttrMimetype          = 32
	AttrMode              = 33
	AttrNoTrunc           = 34
	AttrNumLinks          = 35
	AttrOwner             = 36
	AttrOwnerGroup        = 37
	AttrQuotaAvailHard    = 38
	AttrQuotaAvailSoft    = 39
	AttrQuotaUsed         = 40
	AttrRawdev            = 41
	AttrSpaceAvail        = 42
	AttrSpaceFree         = 43
	AttrSpaceTotal        = 44
	AttrSpaceUsed         = 45
	AttrSystem            = 46
	AttrTimeAccess        = 47
	AttrTimeAccessSet     = 48
	AttrTimeBackup        = 49
	AttrTimeCreate        = 50
	AttrTimeDelta         = 51
	AttrTimeMetadata      = 52
	AttrTimeModify        = 53
	AttrTimeModifySet     = 54
	AttrMountedOnFileid   = 55
	AttrDirNotifDelay     = 56
	AttrDirentNotifDelay  = 57
	AttrDACL              = 58
	AttrSACL              = 59
	AttrChangePolicy      = 60
	AttrFsStatus          = 61
	AttrFsLayoutTypes     = 62
	AttrLayoutHint        = 63
	AttrLayoutTypes       = 64
	AttrLayoutBlksize     = 65
	AttrLayoutAlignment   = 66
	AttrFsLocationsInfo   = 67
	AttrMdsThreshold      = 68
	AttrRetentionGet      = 69
	AttrRetentionSet      = 70
	AttrRetentevtGet      = 71
	AttrRetentevtSet      = 72
	AttrRetentionHold     = 73
	AttrModeSetMasked     = 74
	AttrSuppattrExclcreat = 75
	AttrFsCharsetCap      = 76
	AttrCloneBlksize      = 77 // NFSv4.2
	AttrSpaceFreed        = 78 // NFSv4.2
	AttrChangeAttrType    = 79 // NFSv4.2
	AttrSecLabel          = 80 // NFSv4.2
	AttrModeUmask         = 81 // RFC 8275
	AttrXattrSupport      = 82 // RFC 8276
)

// FH expiry types (fh_expire_type).
const (
	FH4Persistent       = 0x0
	FH4NoExpireWithOpen = 0x1
	FH4VolatileAny      = 0x2
	FH4VolMigration     = 0x4
	FH4VolRename        = 0x8
	ACL4SupportAllowACL = 0x1 // aclsupport bits
	ACL4SupportDenyACL  = 0x2
	ACL4SupportAuditACL = 0x4
	ACL4SupportAlarmACL = 0x8

	maxLayoutTypesInAttr = 64
)

// TimeHow is time_how4, how SETATTR sets a time.
type TimeHow uint32

const (
	SetToServerTime TimeHow = 0
	SetToClientTime TimeHow = 1
)

// SetTime is settime4 (time_access_set, time_modify_set).
type SetTime struct {
	How  TimeHow
	Time Time // SetToClientTime only
}

func (t *SetTime) append(b []byte) []byte {
	b = xdr.AppendUint32(b, uint32(t.How))
	if t.How == SetToClientTime {
		b = t.Time.Append(b)
	}
	return b
}

func (t *SetTime) decode(d *xdr.Decoder) {
	*t = SetTime{How: TimeHow(d.Uint32())}
	switch t.How {
	case SetToServerTime:
	case SetToClientTime:
		t.Time.Decode(d)
	default:
		d.SetErr(errBadEnum("time_how4", uint32(t.How)))
	}
}

// ChangePolicy is change_policy4.
type ChangePolicy struct {
	Major uint64
	Minor uint64
}

// ModeMasked is mode_masked4 (mode_set_masked) and, with the umask in Mask,
// mode_umask4 (mode_umask, RFC 8275: mode then umask).
type ModeMasked struct {
	Value uint32
	Mask  uint32
}

// Fattr is fattr4 decoded: the attributes whose bits are set in Mask, each
// in its field. Mask says which fields a message carries; the others are
// zero. Attribute values are encoded in bitmap order inside the opaque
// attrlist4.
//
// The attributes the codec handles are those of CodecAttrs: every REQUIRED
// attribute and the RECOMMENDED ones of fixed shape. Decoding an
// attribute outside that set fails with an *AttrError whose Unsupported is
// true (an attrlist4 cannot be skipped value by value: only its known
// attributes tell where the next one starts), so a server can answer
// NFS4ERR_ATTRNOTSUPP; encoding one is a programming error (the bit is
// dropped from the encoded mask with its value).
//
// Filehandle, Owner, OwnerGroup and Mimetype alias the input and are
// bounded only by the attribute list, which is bounded by the message: a
// client checks a handle against FHSize before using it.
type Fattr struct {
	Mask Bitmap

	SupportedAttrs    Bitmap
	Type              Ftype
	FHExpireType      uint32
	Change            uint64
	Size              uint64
	LinkSupport       bool
	SymlinkSupport    bool
	NamedAttr         bool
	Fsid              Fsid
	UniqueHandles     bool
	LeaseTime         uint32
	RdattrError       Status
	ACLSupport        uint32
	Archive           bool
	CanSetTime        bool
	CaseInsensitive   bool
	CasePreserving    bool
	ChownRestricted   bool
	Filehandle        []byte
	Fileid            uint64
	FilesAvail        uint64
	FilesFree         uint64
	FilesTotal        uint64
	Hidden            bool
	Homogeneous       bool
	MaxFileSize       uint64
	MaxLink           uint32
	MaxName           uint32
	MaxRead           uint64
	MaxWrite          uint64
	Mimetype          []byte
	Mode              uint32
	NoTrunc           bool
	NumLinks          uint32
	Owner             []byte
	OwnerGroup        []byte
	QuotaAvailHard    uint64
	QuotaAvailSoft    uint64
	QuotaUsed         uint64
	Rawdev            Specdata
	SpaceAvail        uint64
	SpaceFree         uint64
	SpaceTotal        uint64
	SpaceUsed         uint64
	System            bool
	TimeAccess        Time
	TimeAccessSet     SetTime
	TimeBackup        Time
	TimeCreate        Time
	TimeDelta         Time
	TimeMetadata      Time
	TimeModify        Time
	TimeModifySet     SetTime
	MountedOnFileid   uint64
	DirNotifDelay     Time
	DirentNotifDelay  Time
	ChangePolicy      ChangePolicy
	FsLayoutTypes     []uint32
	LayoutTypes       []uint32
	LayoutBlksize     uint32
	LayoutAlignment   uint32
	ModeSetMasked     ModeMasked
	SuppattrExclcreat Bitmap
	FsCharsetCap      uint32
	CloneBlksize      uint32
	SpaceFreed        uint64
	ChangeAttrType    uint32
	ModeUmask         ModeMasked // Value: mode, Mask: umask
	XattrSupport      bool
}

// codecAttrs is the set of attributes Fattr encodes and decodes.
var codecAttrs = NewBitmap(
	AttrSupportedAttrs, AttrType, AttrFHExpireType, AttrChange, AttrSize,
	AttrLinkSupport, AttrSymlinkSupport, AttrNamedAttr, AttrFsid, AttrUniqueHandles,
	AttrLeaseTime, AttrRdattrError, AttrACLSupport, AttrArchive, AttrCanSetTime,
	AttrCaseInsensitive, AttrCasePreserving, AttrChownRestricted, AttrFilehandle,
	AttrFileid, AttrFilesAvail, AttrFilesFree, AttrFilesTotal, AttrHidden,
	AttrHomogeneous, AttrMaxFileSize, AttrMaxLink, AttrMaxName, AttrMaxRead,
	AttrMaxWrite, AttrMimetype, AttrMode, AttrNoTrunc, AttrNumLinks, AttrOwner,
	AttrOwnerGroup, AttrQuotaAvailHard, AttrQuotaAvailSoft, AttrQuotaUsed,
	AttrRawdev, AttrSpaceAvail, AttrSpaceFree, AttrSpaceTotal, AttrSpaceUsed,
	AttrSystem, AttrTimeAccess, AttrTimeAccessSet, AttrTimeBackup, AttrTimeCreate,
	AttrTimeDelta, AttrTimeMetadata, AttrTimeModify, AttrTimeModifySet,
	AttrMountedOnFileid, AttrDirNotifDelay, AttrDirentNotifDelay, AttrChangePolicy,
	AttrFsLayoutTypes, AttrLayoutTypes, AttrLayoutBlksize, AttrLayoutAlignment,
	AttrModeSetMasked, AttrSuppattrExclcreat, AttrFsCharsetCap, AttrCloneBlksize,
	AttrSpaceFreed, AttrChangeAttrType, AttrModeUmask, AttrXattrSupport,
)

// CodecAttrs returns the set of attributes Fattr encodes and decodes.
func CodecAttrs() Bitmap { return codecAttrs }

// ErrAttrUnknown is the Err of an AttrError for an attribute this codec
// cannot decode.
var ErrAttrUnknown = errors.New("attribute not supported by the codec")

// AttrError reports an attribute list that could not be decoded: an
// attribute the codec does not know (Err is ErrAttrUnknown), a value that
// is not valid XDR, or bytes left over (Attr is -1).
type AttrError struct {
	Attr int
	Err  error
}

func (e *AttrError) Error() string {
	if e.Attr < 0 {
		return fmt.Sprintf("nfs4: attribute list: %v", e.Err)
	}
	return fmt.Sprintf("nfs4: attribute %d: %v", e.Attr, e.Err)
}

func (e *AttrError) Unwrap() error { return e.Err }

// Unsupported reports whether the attribute is one the codec does not know,
// which a server answers with NFS4ERR_ATTRNOTSUPP.
func (e *AttrError) Unsupported() bool { return e.Err == ErrAttrUnknown }

// Append encodes the attributes of Mask that the codec knows.
func (f *Fattr) Append(b []byte) []byte {
	mask := f.Mask.And(codecAttrs)
	b = mask.Append(b)
	b, off := xdr.Reserve(b)
	start := len(b)
	for a := mask.Next(0); a >= 0; a = mask.Next(a + 1) {
		b = f.appendAttr(b, a)
	}
	// Every attribute value is a multiple of 4 bytes: no padding.
	xdr.PutUint32(b, off, uint32(len(b)-start))
	return b
}

// Decode decodes fattr4. A failure inside the attribute list is an
// *AttrError; the decoder then stands after the list, which is framed by
// its length, so the caller may go on (a server answering one operation
// ATTRNOTSUPP) — the error is recorded in d all the same.
func (f *Fattr) Decode(d *xdr.Decoder) {
	f.reset()
	f.Mask.Decode(d)
	vals := d.Opaque(restOfReply)
	if d.Err() != nil {
		return
	}
	var sub xdr.Decoder
	sub.Reset(vals)
	for a := f.Mask.Next(0); a >= 0; a = f.Mask.Next(a + 1) {
		if !f.decodeAttr(&sub, a) {
			d.SetErr(&AttrError{Attr: a, Err: ErrAttrUnknown})
			return
		}
		if err := sub.Err(); err != nil {
			d.SetErr(&AttrError{Attr: a, Err: err})
			return
		}
	}
	if sub.Remaining() != 0 {
		d.SetErr(&AttrError{Attr: -1, Err: fmt.Errorf("%d bytes after the last attribute", sub.Remaining())})
	}
}

// skipFattr consumes a fattr4 without decoding its values, checking what
// frames it.
func skipFattr(d *xdr.Decoder) {
	var m Bitmap
	m.Decode(d)
	d.Opaque(restOfReply)
}

func (f *Fattr) appendAttr(b []byte, a int) []byte {
	switch a {
	case AttrSupportedAttrs:
		return f.SupportedAttrs.Append(b)
	case AttrType:
		return xdr.AppendUint32(b, uint32(f.Type))
	case AttrFHExpireType:
		return xdr.AppendUint32(b, f.FHExpireType)
	case AttrChange:
		return xdr.AppendUint64(b, f.Change)
	case AttrSize:
		return xdr.AppendUint64(b, f.Size)
	case AttrLinkSupport:
		return xdr.AppendBool(b, f.LinkSupport)
	case AttrSymlinkSupport:
		return xdr.AppendBool(b, f.SymlinkSupport)
	case AttrNamedAttr:
		return xdr.AppendBool(b, f.NamedAttr)
	case AttrFsid:
		return f.Fsid.append(b)
	case AttrUniqueHandles:
		return xdr.AppendBool(b, f.UniqueHandles)
	case AttrLeaseTime:
		return xdr.AppendUint32(b, f.LeaseTime)
	case AttrRdattrError:
		return appendStatus(b, f.RdattrError)
	case AttrACLSupport:
		return xdr.AppendUint32(b, f.ACLSupport)
	case AttrArchive:
		return xdr.AppendBool(b, f.Archive)
	case AttrCanSetTime:
		return xdr.AppendBool(b, f.CanSetTime)
	case AttrCaseInsensitive:
		return xdr.AppendBool(b, f.CaseInsensitive)
	case AttrCasePreserving:
		return xdr.AppendBool(b, f.CasePreserving)
	case AttrChownRestricted:
		return xdr.AppendBool(b, f.ChownRestricted)
	case AttrFilehandle:
		return xdr.AppendOpaque(b, f.Filehandle)
	case AttrFileid:
		return xdr.AppendUint64(b, f.Fileid)
	case AttrFilesAvail:
		return xdr.AppendUint64(b, f.FilesAvail)
	case AttrFilesFree:
		return xdr.AppendUint64(b, f.FilesFree)
	case AttrFilesTotal:
		return xdr.AppendUint64(b, f.FilesTotal)
	case AttrHidden:
		return xdr.AppendBool(b, f.Hidden)
	case AttrHomogeneous:
		return xdr.AppendBool(b, f.Homogeneous)
	case AttrMaxFileSize:
		return xdr.AppendUint64(b, f.MaxFileSize)
	case AttrMaxLink:
		return xdr.AppendUint32(b, f.MaxLink)
	case AttrMaxName:
		return xdr.AppendUint32(b, f.MaxName)
	case AttrMaxRead:
		return xdr.AppendUint64(b, f.MaxRead)
	case AttrMaxWrite:
		return xdr.AppendUint64(b, f.MaxWrite)
	case AttrMimetype:
		return xdr.AppendOpaque(b, f.Mimetype)
	case AttrMode:
		return xdr.AppendUint32(b, f.Mode)
	case AttrNoTrunc:
		return xdr.AppendBool(b, f.NoTrunc)
	case AttrNumLinks:
		return xdr.AppendUint32(b, f.NumLinks)
	case AttrOwner:
		return xdr.AppendOpaque(b, f.Owner)
	case AttrOwnerGroup:
		return xdr.AppendOpaque(b, f.OwnerGroup)
	case AttrQuotaAvailHard:
		return xdr.AppendUint64(b, f.QuotaAvailHard)
	case AttrQuotaAvailSoft:
		return xdr.AppendUint64(b, f.QuotaAvailSoft)
	case AttrQuotaUsed:
		return xdr.AppendUint64(b, f.QuotaUsed)
	case AttrRawdev:
		return f.Rawdev.append(b)
	case AttrSpaceAvail:
		return xdr.AppendUint64(b, f.SpaceAvail)
	case AttrSpaceFree:
		return xdr.AppendUint64(b, f.SpaceFree)
	case AttrSpaceTotal:
		return xdr.AppendUint64(b, f.SpaceTotal)
	case AttrSpaceUsed:
		return xdr.AppendUint64(b, f.SpaceUsed)
	case AttrSystem:
		return xdr.AppendBool(b, f.System)
	case AttrTimeAccess:
		return f.TimeAccess.Append(b)
	case AttrTimeAccessSet:
		return f.TimeAccessSet.append(b)
	case AttrTimeBackup:
		return f.TimeBackup.Append(b)
	case AttrTimeCreate:
		return f.TimeCreate.Append(b)
	case AttrTimeDelta:
		return f.TimeDelta.Append(b)
	case AttrTimeMetadata:
		return f.TimeMetadata.Append(b)
	case AttrTimeModify:
		return f.TimeModify.Append(b)
	case AttrTimeModifySet:
		return f.TimeModifySet.append(b)
	case AttrMountedOnFileid:
		return xdr.AppendUint64(b, f.MountedOnFileid)
	case AttrDirNotifDelay:
		return f.DirNotifDelay.Append(b)
	case AttrDirentNotifDelay:
		return f.DirentNotifDelay.Append(b)
	case AttrChangePolicy:
		return xdr.AppendUint64(xdr.AppendUint64(b, f.ChangePolicy.Major), f.ChangePolicy.Minor)
	case AttrFsLayoutTypes:
		return appendUint32s(b, f.FsLayoutTypes)
	case AttrLayoutTypes:
		return appendUint32s(b, f.LayoutTypes)
	case AttrLayoutBlksize:
		return xdr.AppendUint32(b, f.LayoutBlksize)
	case AttrLayoutAlignment:
		return xdr.AppendUint32(b, f.LayoutAlignment)
	case AttrModeSetMasked:
		return xdr.AppendUint32(xdr.AppendUint32(b, f.ModeSetMasked.Value), f.ModeSetMasked.Mask)
	case AttrSuppattrExclcreat:
		return f.SuppattrExclcreat.Append(b)
	case AttrFsCharsetCap:
		return xdr.AppendUint32(b, f.FsCharsetCap)
	case AttrCloneBlksize:
		return xdr.AppendUint32(b, f.CloneBlksize)
	case AttrSpaceFreed:
		return xdr.AppendUint64(b, f.SpaceFreed)
	case AttrChangeAttrType:
		return xdr.AppendUint32(b, f.ChangeAttrType)
	case AttrModeUmask:
		return xdr.AppendUint32(xdr.AppendUint32(b, f.ModeUmask.Value), f.ModeUmask.Mask)
	case AttrXattrSupport:
		return xdr.AppendBool(b, f.XattrSupport)
	}
	return b // not in codecAttrs: never reached
}

// decodeAttr decodes attribute a, or reports false if the codec does not
// know it.
func (f *Fattr) decodeAttr(d *xdr.Decoder, a int) bool {
	switch a {
	case AttrSupportedAttrs:
		f.SupportedAttrs.Decode(d)
	case AttrType:
		f.Type = Ftype(d.Uint32())
		if f.Type < TypeReg || f.Type > TypeNamedAttr {
			d.SetErr(errBadEnum("nfs_ftype4", uint32(f.Type)))
		}
	case AttrFHExpireType:
		f.FHExpireType = d.Uint32()
	case AttrChange:
		f.Change = d.Uint64()
	case AttrSize:
		f.Size = d.Uint64()
	case AttrLinkSupport:
		f.LinkSupport = d.Bool()
	case AttrSymlinkSupport:
		f.SymlinkSupport = d.Bool()
	case AttrNamedAttr:
		f.NamedAttr = d.Bool()
	case AttrFsid:
		f.Fsid.decode(d)
	case AttrUniqueHandles:
		f.UniqueHandles = d.Bool()
	case AttrLeaseTime:
		f.LeaseTime = d.Uint32()
	case AttrRdattrError:
		f.RdattrError = decodeStatus(d)
	case AttrACLSupport:
		f.ACLSupport = d.Uint32()
	case AttrArchive:
		f.Archive = d.Bool()
	case AttrCanSetTime:
		f.CanSetTime = d.Bool()
	case AttrCaseInsensitive:
		f.CaseInsensitive = d.Bool()
	case AttrCasePreserving:
		f.CasePreserving = d.Bool()
	case AttrChownRestricted:
		f.ChownRestricted = d.Bool()
	case AttrFilehandle:
		f.Filehandle = d.Opaque(restOfReply)
	case AttrFileid:
		f.Fileid = d.Uint64()
	case AttrFilesAvail:
		f.FilesAvail = d.Uint64()
	case AttrFilesFree:
		f.FilesFree = d.Uint64()
	case AttrFilesTotal:
		f.FilesTotal = d.Uint64()
	case AttrHidden:
		f.Hidden = d.Bool()
	case AttrHomogeneous:
		f.Homogeneous = d.Bool()
	case AttrMaxFileSize:
		f.MaxFileSize = d.Uint64()
	case AttrMaxLink:
		f.MaxLink = d.Uint32()
	case AttrMaxName:
		f.MaxName = d.Uint32()
	case AttrMaxRead:
		f.MaxRead = d.Uint64()
	case AttrMaxWrite:
		f.MaxWrite = d.Uint64()
	case AttrMimetype:
		f.Mimetype = d.Opaque(restOfReply)
	case AttrMode:
		f.Mode = d.Uint32()
	case AttrNoTrunc:
		f.NoTrunc = d.Bool()
	case AttrNumLinks:
		f.NumLinks = d.Uint32()
	case AttrOwner:
		f.Owner = d.Opaque(restOfReply)
	case AttrOwnerGroup:
		f.OwnerGroup = d.Opaque(restOfReply)
	case AttrQuotaAvailHard:
		f.QuotaAvailHard = d.Uint64()
	case AttrQuotaAvailSoft:
		f.QuotaAvailSoft = d.Uint64()
	case AttrQuotaUsed:
		f.QuotaUsed = d.Uint64()
	case AttrRawdev:
		f.Rawdev.decode(d)
	case AttrSpaceAvail:
		f.SpaceAvail = d.Uint64()
	case AttrSpaceFree:
		f.SpaceFree = d.Uint64()
	case AttrSpaceTotal:
		f.SpaceTotal = d.Uint64()
	case AttrSpaceUsed:
		f.SpaceUsed = d.Uint64()
	case AttrSystem:
		f.System = d.Bool()
	case AttrTimeAccess:
		f.TimeAccess.Decode(d)
	case AttrTimeAccessSet:
		f.TimeAccessSet.decode(d)
	case AttrTimeBackup:
		f.TimeBackup.Decode(d)
	case AttrTimeCreate:
		f.TimeCreate.Decode(d)
	case AttrTimeDelta:
		f.TimeDelta.Decode(d)
	case AttrTimeMetadata:
		f.TimeMetadata.Decode(d)
	case AttrTimeModify:
		f.TimeModify.Decode(d)
	case AttrTimeModifySet:
		f.TimeModifySet.decode(d)
	case AttrMountedOnFileid:
		f.MountedOnFileid = d.Uint64()
	case AttrDirNotifDelay:
		f.DirNotifDelay.Decode(d)
	case AttrDirentNotifDelay:
		f.DirentNotifDelay.Decode(d)
	case AttrChangePolicy:
		f.ChangePolicy.Major = d.Uint64()
		f.ChangePolicy.Minor = d.Uint64()
	case AttrFsLayoutTypes:
		f.FsLayoutTypes = decodeUint32s(d, f.FsLayoutTypes)
	case AttrLayoutTypes:
		f.LayoutTypes = decodeUint32s(d, f.LayoutTypes)
	case AttrLayoutBlksize:
		f.LayoutBlksize = d.Uint32()
	case AttrLayoutAlignment:
		f.LayoutAlignment = d.Uint32()
	case AttrModeSetMasked:
		f.ModeSetMasked.Value = d.Uint32()
		f.ModeSetMasked.Mask = d.Uint32()
	case AttrSuppattrExclcreat:
		f.SuppattrExclcreat.Decode(d)
	case AttrFsCharsetCap:
		f.FsCharsetCap = d.Uint32()
	case AttrCloneBlksize:
		f.CloneBlksize = d.Uint32()
	case AttrSpaceFreed:
		f.SpaceFreed = d.Uint64()
	case AttrChangeAttrType:
		f.ChangeAttrType = d.Uint32()
	case AttrModeUmask:
		f.ModeUmask.Value = d.Uint32()
		f.ModeUmask.Mask = d.Uint32()
	case AttrXattrSupport:
		f.XattrSupport = d.Bool()
	default:
		return false
	}
	return true
}

func appendUint32s(b []byte, v []uint32) []byte {
	b = xdr.AppendUint32(b, uint32(len(v)))
	for _, x := range v {
		b = xdr.AppendUint32(b, x)
	}
	return b
}

func decodeUint32s(d *xdr.Decoder, s []uint32) []uint32 {
	s = decodeList(d, s, maxLayoutTypesInAttr, 4)
	for i := range s {
		s[i] = d.Uint32()
	}
	return s
}
