package nfs4

import "hushfs/internal/xdr"

// DelegPurgeArgs is DELEGPURGE4args.
type DelegPurgeArgs struct {
	ClientID uint64
}

// Append encodes the arguments.
func (a *DelegPurgeArgs) Append(b []byte) []byte { return xdr.AppendUint64(b, a.ClientID) }

// Decode decodes the arguments.
func (a *DelegPurgeArgs) Decode(d *xdr.Decoder) { a.ClientID = d.Uint64() }

// StateidArgs is the arguments of the operations that take a stateid
// alone: DELEGRETURN4args and FREE_STATEID4args.
type StateidArgs struct {
	Stateid Stateid
}

// DelegReturnArgs is DELEGRETURN4args.
type DelegReturnArgs = StateidArgs

// FreeStateidArgs is FREE_STATEID4args.
type FreeStateidArgs = StateidArgs

// Append encodes the arguments.
func (a *StateidArgs) Append(b []byte) []byte { return a.Stateid.Append(b) }

// Decode decodes the arguments.
func (a *StateidArgs) Decode(d *xdr.Decoder) { a.Stateid.Decode(d) }

// TestStateidArgs is TEST_STATEID4args.
type TestStateidArgs struct {
	Stateids []Stateid
}

// Append encodes the arguments.
func (a *TestStateidArgs) Append(b []byte) []byte {
	b = xdr.AppendUint32(b, uint32(len(a.Stateids)))
	for i := range a.Stateids {
		b = a.Stateids[i].Append(b)
	}
	return b
}

// Decode decodes the arguments, reusing Stateids' storage.
func (a *TestStateidArgs) Decode(d *xdr.Decoder) {
	a.Stateids = decodeList(d, a.Stateids, maxList, 16)
	for i := range a.Stateids {
		a.Stateids[i].Decode(d)
	}
}

// TestStateidRes is TEST_STATEID4res: a status per stateid tested.
type TestStateidRes struct {
	Status      Status
	StatusCodes []Status // NFS4_OK only
}

// Append encodes the result.
func (r *TestStateidRes) Append(b []byte) []byte {
	b = appendStatus(b, r.Status)
	if r.Status == OK {
		b = xdr.AppendUint32(b, uint32(len(r.StatusCodes)))
		for _, s := range r.StatusCodes {
			b = appendStatus(b, s)
		}
	}
	return b
}

// Decode decodes the result, reusing StatusCodes' storage.
func (r *TestStateidRes) Decode(d *xdr.Decoder) {
	r.Status = decodeStatus(d)
	r.StatusCodes = r.StatusCodes[:0]
	if r.Status == OK {
		r.StatusCodes = decodeList(d, r.StatusCodes, maxList, 4)
		for i := range r.StatusCodes {
			r.StatusCodes[i] = decodeStatus(d)
		}
	}
}

// OpStatus returns the status.
func (r *TestStateidRes) OpStatus() Status { return r.Status }

// WantDelegationArgs is WANT_DELEGATION4args. Claim.Type is ClaimFH,
// ClaimDelegPrevFH or ClaimPrevious (with Claim.DelegateType); any other is
// an error (deleg_claim4 has no other arm).
type WantDelegationArgs struct {
	Want  uint32 // ShareAccessWant* bits
	Claim OpenClaim
}

// Append encodes the arguments.
func (a *WantDelegationArgs) Append(b []byte) []byte {
	b = xdr.AppendUint32(b, a.Want)
	b = xdr.AppendUint32(b, uint32(a.Claim.Type))
	if a.Claim.Type == ClaimPrevious {
		b = xdr.AppendUint32(b, uint32(a.Claim.DelegateType))
	}
	return b
}

// Decode decodes the arguments.
func (a *WantDelegationArgs) Decode(d *xdr.Decoder) {
	a.Want = d.Uint32()
	a.Claim = OpenClaim{Type: ClaimType(d.Uint32())}
	switch a.Claim.Type {
	case ClaimFH, ClaimDelegPrevFH:
	case ClaimPrevious:
		a.Claim.DelegateType = decodeDelegationType(d)
	default:
		d.SetErr(errBadUnion("deleg_claim4", uint32(a.Claim.Type)))
	}
}

// WantDelegationRes is WANT_DELEGATION4res.
type WantDelegationRes struct {
	Status     Status
	Delegation OpenDelegation // NFS4_OK only
}

// Append encodes the result.
func (r *WantDelegationRes) Append(b []byte) []byte {
	b = appendStatus(b, r.Status)
	if r.Status == OK {
		b = r.Delegation.append(b)
	}
	return b
}

// Decode decodes the result.
func (r *WantDelegationRes) Decode(d *xdr.Decoder) {
	*r = WantDelegationRes{Status: decodeStatus(d)}
	if r.Status == OK {
		r.Delegation.decode(d)
	}
}

// OpStatus returns the status.
func (r *WantDelegationRes) OpStatus() Status { return r.Status }

// Directory notification types (notify_type4), the bits of
// GET_DIR_DELEGATION's notification bitmaps and of CB_NOTIFY's notify4.
const (
	NotifyChangeChildAttrs     = 0
	NotifyChangeDirAttrs       = 1
	NotifyRemoveEntry          = 2
	NotifyAddEntry             = 3
	NotifyRenameEntry          = 4
	NotifyChangeCookieVerifier = 5
)

// GetDirDelegationArgs is GET_DIR_DELEGATION4args.
type GetDirDelegationArgs struct {
	SignalDelegAvail  bool
	NotificationTypes Bitmap
	ChildAttrDelay    Time
	DirAttrDelay      Time
	ChildAttributes   Bitmap
	DirAttributes     Bitmap
}

// Append encodes the arguments.
func (a *GetDirDelegationArgs) Append(b []byte) []byte {
	b = xdr.AppendBool(b, a.SignalDelegAvail)
	b = a.NotificationTypes.Append(b)
	b = a.ChildAttrDelay.Append(b)
	b = a.DirAttrDelay.Append(b)
	b = a.ChildAttributes.Append(b)
	return a.DirAttributes.Append(b)
}

// Decode decodes the arguments.
func (a *GetDirDelegationArgs) Decode(d *xdr.Decoder) {
	a.SignalDelegAvail = d.Bool()
	a.NotificationTypes.Decode(d)
	a.ChildAttrDelay.Decode(d)
	a.DirAttrDelay.Decode(d)
	a.ChildAttributes.Decode(d)
	a.DirAttributes.Decode(d)
}

// gddrnf4_status: whether GET_DIR_DELEGATION granted one.
const (
	GDD4OK      = 0
	GDD4Unavail = 1
)

// GetDirDelegationRes is GET_DIR_DELEGATION4res. With status NFS4_OK,
// NonFatal says whether a delegation was granted (GDD4OK: the fields
// after it) or not (GDD4Unavail: WillSignalDelegAvail).
type GetDirDelegationRes struct {
	Status   Status
	NonFatal uint32
	// GDD4OK:
	CookieVerf      Verifier
	Stateid         Stateid
	Notification    Bitmap
	ChildAttributes Bitmap
	DirAttributes   Bitmap
	// GDD4Unavail:
	WillSignalDelegAvail bool
}

// Append encodes the result.
func (r *GetDirDelegationRes) Append(b []byte) []byte {
	b = appendStatus(b, r.Status)
	if r.Status != OK {
		return b
	}
	b = xdr.AppendUint32(b, r.NonFatal)
	switch r.NonFatal {
	case GDD4OK:
		b = r.CookieVerf.Append(b)
		b = r.Stateid.Append(b)
		b = r.Notification.Append(b)
		b = r.ChildAttributes.Append(b)
		b = r.DirAttributes.Append(b)
	case GDD4Unavail:
		b = xdr.AppendBool(b, r.WillSignalDelegAvail)
	}
	return b
}

// Decode decodes the result.
func (r *GetDirDelegationRes) Decode(d *xdr.Decoder) {
	*r = GetDirDelegationRes{Status: decodeStatus(d)}
	if r.Status != OK {
		return
	}
	r.NonFatal = d.Uint32()
	switch r.NonFatal {
	case GDD4OK:
		r.CookieVerf.Decode(d)
		r.Stateid.Decode(d)
		r.Notification.Decode(d)
		r.ChildAttributes.Decode(d)
		r.DirAttributes.Decode(d)
	case GDD4Unavail:
		r.WillSignalDelegAvail = d.Bool()
	default:
		d.SetErr(errBadUnion("GET_DIR_DELEGATION4res_non_fatal", r.NonFatal))
	}
}

// OpStatus returns the status.
func (r *GetDirDelegationRes) OpStatus() Status { return r.Status }
