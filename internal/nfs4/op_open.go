package nfs4

import "hushfs/internal/xdr"

// OPEN share_access and share_deny bits, and the delegation wants of
// share_access (4.1).
const (
	ShareAccessRead  = 0x1
	ShareAccessWrite = 0x2
	ShareAccessBoth  = 0x3

	ShareDenyNone  = 0x0
	ShareDenyRead  = 0x1
	ShareDenyWrite = 0x2
	ShareDenyBoth  = 0x3

	ShareAccessWantDelegMask                 = 0xff00
	ShareAccessWantNoPreference              = 0x0000
	ShareAccessWantReadDeleg                 = 0x0100
	ShareAccessWantWriteDeleg                = 0x0200
	ShareAccessWantAnyDeleg                  = 0x0300
	ShareAccessWantNoDeleg                   = 0x0400
	ShareAccessWantCancel                    = 0x0500
	ShareAccessWantSignalDelegWhenResrcAvail = 0x10000
	ShareAccessWantPushDelegWhenUncontended  = 0x20000
)

// OPEN result flags (rflags).
const (
	OpenResultConfirm          = 0x02
	OpenResultLocktypePosix    = 0x04
	OpenResultPreserveUnlinked = 0x08
	OpenResultMayNotifyLock    = 0x20
)

// OpenType is opentype4.
type OpenType uint32

const (
	OpenNoCreate OpenType = 0
	OpenCreate   OpenType = 1
)

// CreateMode is createmode4.
type CreateMode uint32

const (
	Unchecked   CreateMode = 0
	Guarded     CreateMode = 1
	Exclusive   CreateMode = 2
	Exclusive41 CreateMode = 3
)

// ClaimType is open_claim_type4.
type ClaimType uint32

const (
	ClaimNull         ClaimType = 0
	ClaimPrevious     ClaimType = 1
	ClaimDelegateCur  ClaimType = 2
	ClaimDelegatePrev ClaimType = 3
	ClaimFH           ClaimType = 4
	ClaimDelegCurFH   ClaimType = 5
	ClaimDelegPrevFH  ClaimType = 6
)

// DelegationType is open_delegation_type4.
type DelegationType uint32

const (
	DelegateNone    DelegationType = 0
	DelegateRead    DelegationType = 1
	DelegateWrite   DelegationType = 2
	DelegateNoneExt DelegationType = 3
)

// Why no delegation was granted (why_no_delegation4).
const (
	WNDNotWanted              = 0
	WNDContention             = 1
	WNDResource               = 2
	WNDNotSuppFtype           = 3
	WNDWriteDelegNotSuppFtype = 4
	WNDNotSuppUpgrade         = 5
	WNDNotSuppDowngrade       = 6
	WNDCancelled              = 7
	WNDIsDir                  = 8
)

func decodeDelegationType(d *xdr.Decoder) DelegationType {
	t := DelegationType(d.Uint32())
	if t > DelegateNoneExt {
		d.SetErr(errBadEnum("open_delegation_type4", uint32(t)))
		return DelegateNone
	}
	return t
}

// OpenClaim is open_claim4: what an OPEN opens.
type OpenClaim struct {
	Type ClaimType
	// ClaimNull, ClaimDelegateCur, ClaimDelegatePrev: a name in the
	// current directory.
	File []byte
	// ClaimPrevious: the delegation held before the server restarted.
	DelegateType DelegationType
	// ClaimDelegateCur, ClaimDelegCurFH.
	DelegateStateid Stateid
}

func (c *OpenClaim) append(b []byte) []byte {
	b = xdr.AppendUint32(b, uint32(c.Type))
	switch c.Type {
	case ClaimNull, ClaimDelegatePrev:
		b = xdr.AppendOpaque(b, c.File)
	case ClaimPrevious:
		b = xdr.AppendUint32(b, uint32(c.DelegateType))
	case ClaimDelegateCur:
		b = c.DelegateStateid.Append(b)
		b = xdr.AppendOpaque(b, c.File)
	case ClaimDelegCurFH:
		b = c.DelegateStateid.Append(b)
	}
	return b
}

func (c *OpenClaim) decode(d *xdr.Decoder) {
	*c = OpenClaim{Type: ClaimType(d.Uint32())}
	switch c.Type {
	case ClaimNull, ClaimDelegatePrev:
		c.File = d.Opaque(MaxNameArg)
	case ClaimPrevious:
		c.DelegateType = decodeDelegationType(d)
	case ClaimDelegateCur:
		c.DelegateStateid.Decode(d)
		c.File = d.Opaque(MaxNameArg)
	case ClaimDelegCurFH:
		c.DelegateStateid.Decode(d)
	case ClaimFH, ClaimDelegPrevFH:
	default:
		d.SetErr(errBadUnion("open_claim4", uint32(c.Type)))
	}
}

// OpenArgs is OPEN4args.
type OpenArgs struct {
	Seqid       uint32 // ignored in 4.1
	ShareAccess uint32
	ShareDeny   uint32
	Owner       StateOwner
	OpenType    OpenType
	// OpenCreate only:
	CreateMode  CreateMode
	CreateAttrs Fattr    // Unchecked, Guarded, Exclusive41
	CreateVerf  Verifier // Exclusive, Exclusive41
	Claim       OpenClaim
}

// Append encodes the arguments.
func (a *OpenArgs) Append(b []byte) []byte {
	b = xdr.AppendUint32(b, a.Seqid)
	b = xdr.AppendUint32(b, a.ShareAccess)
	b = xdr.AppendUint32(b, a.ShareDeny)
	b = a.Owner.append(b)
	b = xdr.AppendUint32(b, uint32(a.OpenType))
	if a.OpenType == OpenCreate {
		b = xdr.AppendUint32(b, uint32(a.CreateMode))
		switch a.CreateMode {
		case Unchecked, Guarded:
			b = a.CreateAttrs.Append(b)
		case Exclusive:
			b = a.CreateVerf.Append(b)
		case Exclusive41:
			b = a.CreateVerf.Append(b)
			b = a.CreateAttrs.Append(b)
		}
	}
	return a.Claim.append(b)
}

// Decode decodes the arguments; an unknown opentype4, createmode4 or claim
// is an error.
func (a *OpenArgs) Decode(d *xdr.Decoder) {
	a.Seqid = d.Uint32()
	a.ShareAccess = d.Uint32()
	a.ShareDeny = d.Uint32()
	a.Owner.decode(d)
	a.OpenType = OpenType(d.Uint32())
	a.CreateMode, a.CreateVerf = Unchecked, Verifier{}
	a.CreateAttrs.reset()
	switch a.OpenType {
	case OpenNoCreate:
	case OpenCreate:
		a.CreateMode = CreateMode(d.Uint32())
		switch a.CreateMode {
		case Unchecked, Guarded:
			a.CreateAttrs.Decode(d)
		case Exclusive:
			a.CreateVerf.Decode(d)
		case Exclusive41:
			a.CreateVerf.Decode(d)
			a.CreateAttrs.Decode(d)
		default:
			d.SetErr(errBadUnion("createhow4", uint32(a.CreateMode)))
		}
	default:
		d.SetErr(errBadEnum("opentype4", uint32(a.OpenType)))
	}
	a.Claim.decode(d)
}

// Space limit kinds (limit_by4).
const (
	LimitSize   = 1
	LimitBlocks = 2
)

// SpaceLimit is nfs_space_limit4: how far a write delegation's holder may
// extend the file without flushing.
type SpaceLimit struct {
	LimitBy       uint32
	FileSize      uint64 // LimitSize
	NumBlocks     uint32 // LimitBlocks
	BytesPerBlock uint32 // LimitBlocks
}

// OpenDelegation is open_delegation4: the delegation an OPEN or
// WANT_DELEGATION granted, or why none was.
type OpenDelegation struct {
	Type DelegationType
	// DelegateRead, DelegateWrite:
	Stateid     Stateid
	Recall      bool
	Permissions ACE
	// DelegateWrite:
	SpaceLimit SpaceLimit
	// DelegateNoneExt:
	WhyNone uint32
	// DelegateNoneExt with WNDContention (the server will push a
	// delegation) or WNDResource (it will signal one is available).
	WillPushOrSignal bool
}

func (o *OpenDelegation) append(b []byte) []byte {
	b = xdr.AppendUint32(b, uint32(o.Type))
	switch o.Type {
	case DelegateRead:
		b = o.Stateid.Append(b)
		b = xdr.AppendBool(b, o.Recall)
		b = o.Permissions.append(b)
	case DelegateWrite:
		b = o.Stateid.Append(b)
		b = xdr.AppendBool(b, o.Recall)
		b = xdr.AppendUint32(b, o.SpaceLimit.LimitBy)
		switch o.SpaceLimit.LimitBy {
		case LimitSize:
			b = xdr.AppendUint64(b, o.SpaceLimit.FileSize)
		case LimitBlocks:
			b = xdr.AppendUint32(b, o.SpaceLimit.NumBlocks)
			b = xdr.AppendUint32(b, o.SpaceLimit.BytesPerBlock)
		}
		b = o.Permissions.append(b)
	case DelegateNoneExt:
		b = xdr.AppendUint32(b, o.WhyNone)
		if o.WhyNone == WNDContention || o.WhyNone == WNDResource {
			b = xdr.AppendBool(b, o.WillPushOrSignal)
		}
	}
	return b
}

func (o *OpenDelegation) decode(d *xdr.Decoder) {
	*o = OpenDelegation{Type: DelegationType(d.Uint32())}
	switch o.Type {
	case DelegateNone:
	case DelegateRead:
		o.Stateid.Decode(d)
		o.Recall = d.Bool()
		o.Permissions.decode(d)
	case DelegateWrite:
		o.Stateid.Decode(d)
		o.Recall = d.Bool()
		o.SpaceLimit.LimitBy = d.Uint32()
		switch o.SpaceLimit.LimitBy {
		case LimitSize:
			o.SpaceLimit.FileSize = d.Uint64()
		case LimitBlocks:
			o.SpaceLimit.NumBlocks = d.Uint32()
			o.SpaceLimit.BytesPerBlock = d.Uint32()
		default:
			d.SetErr(errBadUnion("nfs_space_limit4", o.SpaceLimit.LimitBy))
		}
		o.Permissions.decode(d)
	case DelegateNoneExt:
		o.WhyNone = d.Uint32()
		if o.WhyNone == WNDContention || o.WhyNone == WNDResource {
			o.WillPushOrSignal = d.Bool()
		}
	default:
		d.SetErr(errBadUnion("open_delegation4", uint32(o.Type)))
	}
}

// OpenRes is OPEN4res.
type OpenRes struct {
	Status Status
	// NFS4_OK only:
	Stateid    Stateid
	CInfo      ChangeInfo
	Rflags     uint32
	AttrSet    Bitmap
	Delegation OpenDelegation
}

// Append encodes the result.
func (r *OpenRes) Append(b []byte) []byte {
	b = appendStatus(b, r.Status)
	if r.Status == OK {
		b = r.Stateid.Append(b)
		b = r.CInfo.append(b)
		b = xdr.AppendUint32(b, r.Rflags)
		b = r.AttrSet.Append(b)
		b = r.Delegation.append(b)
	}
	return b
}

// Decode decodes the result.
func (r *OpenRes) Decode(d *xdr.Decoder) {
	*r = OpenRes{Status: decodeStatus(d)}
	if r.Status == OK {
		r.Stateid.Decode(d)
		r.CInfo.decode(d)
		r.Rflags = d.Uint32()
		r.AttrSet.Decode(d)
		r.Delegation.decode(d)
	}
}

// OpStatus returns the status.
func (r *OpenRes) OpStatus() Status { return r.Status }

// OpenDowngradeArgs is OPEN_DOWNGRADE4args.
type OpenDowngradeArgs struct {
	Stateid     Stateid
	Seqid       uint32
	ShareAccess uint32
	ShareDeny   uint32
}

// Append encodes the arguments.
func (a *OpenDowngradeArgs) Append(b []byte) []byte {
	b = a.Stateid.Append(b)
	b = xdr.AppendUint32(b, a.Seqid)
	b = xdr.AppendUint32(b, a.ShareAccess)
	return xdr.AppendUint32(b, a.ShareDeny)
}

// Decode decodes the arguments.
func (a *OpenDowngradeArgs) Decode(d *xdr.Decoder) {
	a.Stateid.Decode(d)
	a.Seqid = d.Uint32()
	a.ShareAccess = d.Uint32()
	a.ShareDeny = d.Uint32()
}

// CloseArgs is CLOSE4args.
type CloseArgs struct {
	Seqid   uint32 // ignored in 4.1
	Stateid Stateid
}

// Append encodes the arguments.
func (a *CloseArgs) Append(b []byte) []byte {
	b = xdr.AppendUint32(b, a.Seqid)
	return a.Stateid.Append(b)
}

// Decode decodes the arguments.
func (a *CloseArgs) Decode(d *xdr.Decoder) {
	a.Seqid = d.Uint32()
	a.Stateid.Decode(d)
}

// StateidRes is the result of the operations that return a stateid:
// CLOSE4res, OPEN_DOWNGRADE4res and LOCKU4res.
type StateidRes struct {
	Status  Status
	Stateid Stateid // NFS4_OK only
}

// CloseRes is CLOSE4res.
type CloseRes = StateidRes

// OpenDowngradeRes is OPEN_DOWNGRADE4res.
type OpenDowngradeRes = StateidRes

// LockURes is LOCKU4res.
type LockURes = StateidRes

// Append encodes the result.
func (r *StateidRes) Append(b []byte) []byte {
	b = appendStatus(b, r.Status)
	if r.Status == OK {
		b = r.Stateid.Append(b)
	}
	return b
}

// Decode decodes the result.
func (r *StateidRes) Decode(d *xdr.Decoder) {
	*r = StateidRes{Status: decodeStatus(d)}
	if r.Status == OK {
		r.Stateid.Decode(d)
	}
}

// OpStatus returns the status.
func (r *StateidRes) OpStatus() Status { return r.Status }
