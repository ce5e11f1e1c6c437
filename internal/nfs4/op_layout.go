package nfs4

import "hushfs/internal/xdr"

// The pNFS operations. We neither offer layouts (fs_layout_types is empty)
// nor ask for them; they are decoded completely so that a server can
// refuse them with NFS4ERR_NOTSUPP wherever they stand in a COMPOUND, and
// a client can read any reply.

// Layout types (layouttype4) and I/O modes (layoutiomode4).
const (
	LayoutNFSv41Files  = 1
	LayoutOSD2Objects  = 2
	LayoutBlockVolume  = 3
	LayoutFlexFiles    = 4 // RFC 8435
	LayoutSCSI         = 5 // RFC 8154
	LayoutIOModeRead   = 1
	LayoutIOModeRW     = 2
	LayoutIOModeAny    = 3
	LayoutReturnFile   = 1 // layoutreturn_type4
	LayoutReturnFsid   = 2
	LayoutReturnAll    = 3
	maxLayoutBody      = 1 << 20
	maxDevicesInReply  = 1 << 16
	maxLayoutsInReply  = maxList
	layoutMinOnTheWire = 8 + 8 + 4 + 4 + 4
)

// TypedBody is a layout-type-specific opaque body: layout_content4,
// device_addr4, layouthint4 and layoutupdate4 all have this shape.
type TypedBody struct {
	Type uint32
	Body []byte
}

func (t *TypedBody) append(b []byte) []byte {
	b = xdr.AppendUint32(b, t.Type)
	return xdr.AppendOpaque(b, t.Body)
}

func (t *TypedBody) decode(d *xdr.Decoder) {
	t.Type = d.Uint32()
	t.Body = d.Opaque(maxLayoutBody)
}

// GetDeviceInfoArgs is GETDEVICEINFO4args.
type GetDeviceInfoArgs struct {
	DeviceID    DeviceID
	LayoutType  uint32
	MaxCount    uint32
	NotifyTypes Bitmap
}

// Append encodes the arguments.
func (a *GetDeviceInfoArgs) Append(b []byte) []byte {
	b = append(b, a.DeviceID[:]...)
	b = xdr.AppendUint32(b, a.LayoutType)
	b = xdr.AppendUint32(b, a.MaxCount)
	return a.NotifyTypes.Append(b)
}

// Decode decodes the arguments.
func (a *GetDeviceInfoArgs) Decode(d *xdr.Decoder) {
	copy(a.DeviceID[:], d.FixedOpaque(DeviceIDSize))
	a.LayoutType = d.Uint32()
	a.MaxCount = d.Uint32()
	a.NotifyTypes.Decode(d)
}

// GetDeviceInfoRes is GETDEVICEINFO4res.
type GetDeviceInfoRes struct {
	Status Status
	// NFS4_OK:
	DeviceAddr   TypedBody
	Notification Bitmap
	// NFS4ERR_TOOSMALL:
	MinCount uint32
}

// Append encodes the result.
func (r *GetDeviceInfoRes) Append(b []byte) []byte {
	b = appendStatus(b, r.Status)
	switch r.Status {
	case OK:
		b = r.DeviceAddr.append(b)
		b = r.Notification.Append(b)
	case ErrTooSmall:
		b = xdr.AppendUint32(b, r.MinCount)
	}
	return b
}

// Decode decodes the result.
func (r *GetDeviceInfoRes) Decode(d *xdr.Decoder) {
	*r = GetDeviceInfoRes{Status: decodeStatus(d)}
	switch r.Status {
	case OK:
		r.DeviceAddr.decode(d)
		r.Notification.Decode(d)
	case ErrTooSmall:
		r.MinCount = d.Uint32()
	}
}

// OpStatus returns the status.
func (r *GetDeviceInfoRes) OpStatus() Status { return r.Status }

// GetDeviceListArgs is GETDEVICELIST4args.
type GetDeviceListArgs struct {
	LayoutType uint32
	MaxDevices uint32
	Cookie     uint64
	CookieVerf Verifier
}

// Append encodes the arguments.
func (a *GetDeviceListArgs) Append(b []byte) []byte {
	b = xdr.AppendUint32(b, a.LayoutType)
	b = xdr.AppendUint32(b, a.MaxDevices)
	b = xdr.AppendUint64(b, a.Cookie)
	return a.CookieVerf.Append(b)
}

// Decode decodes the arguments.
func (a *GetDeviceListArgs) Decode(d *xdr.Decoder) {
	a.LayoutType = d.Uint32()
	a.MaxDevices = d.Uint32()
	a.Cookie = d.Uint64()
	a.CookieVerf.Decode(d)
}

// GetDeviceListRes is GETDEVICELIST4res.
type GetDeviceListRes struct {
	Status Status
	// NFS4_OK only:
	Cookie     uint64
	CookieVerf Verifier
	DeviceIDs  []DeviceID
	EOF        bool
}

// Append encodes the result.
func (r *GetDeviceListRes) Append(b []byte) []byte {
	b = appendStatus(b, r.Status)
	if r.Status == OK {
		b = xdr.AppendUint64(b, r.Cookie)
		b = r.CookieVerf.Append(b)
		b = xdr.AppendUint32(b, uint32(len(r.DeviceIDs)))
		for i := range r.DeviceIDs {
			b = append(b, r.DeviceIDs[i][:]...)
		}
		b = xdr.AppendBool(b, r.EOF)
	}
	return b
}

// Decode decodes the result.
func (r *GetDeviceListRes) Decode(d *xdr.Decoder) {
	ids := r.DeviceIDs[:0]
	*r = GetDeviceListRes{Status: decodeStatus(d), DeviceIDs: ids}
	if r.Status == OK {
		r.Cookie = d.Uint64()
		r.CookieVerf.Decode(d)
		r.DeviceIDs = decodeList(d, r.DeviceIDs, maxDevicesInReply, DeviceIDSize)
		for i := range r.DeviceIDs {
			copy(r.DeviceIDs[i][:], d.FixedOpaque(DeviceIDSize))
		}
		r.EOF = d.Bool()
	}
}

// OpStatus returns the status.
func (r *GetDeviceListRes) OpStatus() Status { return r.Status }

// LayoutCommitArgs is LAYOUTCOMMIT4args.
type LayoutCommitArgs struct {
	Offset          uint64
	Length          uint64
	Reclaim         bool
	Stateid         Stateid
	NewOffset       bool // newoffset4
	LastWriteOffset uint64
	TimeChanged     bool // newtime4
	TimeModify      Time
	LayoutUpdate    TypedBody
}

// Append encodes the arguments.
func (a *LayoutCommitArgs) Append(b []byte) []byte {
	b = xdr.AppendUint64(b, a.Offset)
	b = xdr.AppendUint64(b, a.Length)
	b = xdr.AppendBool(b, a.Reclaim)
	b = a.Stateid.Append(b)
	b = xdr.AppendBool(b, a.NewOffset)
	if a.NewOffset {
		b = xdr.AppendUint64(b, a.LastWriteOffset)
	}
	b = xdr.AppendBool(b, a.TimeChanged)
	if a.TimeChanged {
		b = a.TimeModify.Append(b)
	}
	return a.LayoutUpdate.append(b)
}

// Decode decodes the arguments.
func (a *LayoutCommitArgs) Decode(d *xdr.Decoder) {
	*a = LayoutCommitArgs{Offset: d.Uint64(), Length: d.Uint64(), Reclaim: d.Bool()}
	a.Stateid.Decode(d)
	if a.NewOffset = d.Bool(); a.NewOffset {
		a.LastWriteOffset = d.Uint64()
	}
	if a.TimeChanged = d.Bool(); a.TimeChanged {
		a.TimeModify.Decode(d)
	}
	a.LayoutUpdate.decode(d)
}

// LayoutCommitRes is LAYOUTCOMMIT4res.
type LayoutCommitRes struct {
	Status Status
	// NFS4_OK only (newsize4):
	SizeChanged bool
	NewSize     uint64
}

// Append encodes the result.
func (r *LayoutCommitRes) Append(b []byte) []byte {
	b = appendStatus(b, r.Status)
	if r.Status == OK {
		b = xdr.AppendBool(b, r.SizeChanged)
		if r.SizeChanged {
			b = xdr.AppendUint64(b, r.NewSize)
		}
	}
	return b
}

// Decode decodes the result.
func (r *LayoutCommitRes) Decode(d *xdr.Decoder) {
	*r = LayoutCommitRes{Status: decodeStatus(d)}
	if r.Status == OK {
		if r.SizeChanged = d.Bool(); r.SizeChanged {
			r.NewSize = d.Uint64()
		}
	}
}

// OpStatus returns the status.
func (r *LayoutCommitRes) OpStatus() Status { return r.Status }

// LayoutGetArgs is LAYOUTGET4args.
type LayoutGetArgs struct {
	SignalLayoutAvail bool
	LayoutType        uint32
	IOMode            uint32
	Offset            uint64
	Length            uint64
	MinLength         uint64
	Stateid           Stateid
	MaxCount          uint32
}

// Append encodes the arguments.
func (a *LayoutGetArgs) Append(b []byte) []byte {
	b = xdr.AppendBool(b, a.SignalLayoutAvail)
	b = xdr.AppendUint32(b, a.LayoutType)
	b = xdr.AppendUint32(b, a.IOMode)
	b = xdr.AppendUint64(b, a.Offset)
	b = xdr.AppendUint64(b, a.Length)
	b = xdr.AppendUint64(b, a.MinLength)
	b = a.Stateid.Append(b)
	return xdr.AppendUint32(b, a.MaxCount)
}

// Decode decodes the arguments.
func (a *LayoutGetArgs) Decode(d *xdr.Decoder) {
	a.SignalLayoutAvail = d.Bool()
	a.LayoutType = d.Uint32()
	a.IOMode = d.Uint32()
	a.Offset = d.Uint64()
	a.Length = d.Uint64()
	a.MinLength = d.Uint64()
	a.Stateid.Decode(d)
	a.MaxCount = d.Uint32()
}

// Layout is layout4.
type Layout struct {
	Offset  uint64
	Length  uint64
	IOMode  uint32
	Content TypedBody
}

// LayoutGetRes is LAYOUTGET4res.
type LayoutGetRes struct {
	Status Status
	// NFS4_OK:
	ReturnOnClose bool
	Stateid       Stateid
	Layouts       []Layout
	// NFS4ERR_LAYOUTTRYLATER:
	WillSignalLayoutAvail bool
}

// Append encodes the result.
func (r *LayoutGetRes) Append(b []byte) []byte {
	b = appendStatus(b, r.Status)
	switch r.Status {
	case OK:
		b = xdr.AppendBool(b, r.ReturnOnClose)
		b = r.Stateid.Append(b)
		b = xdr.AppendUint32(b, uint32(len(r.Layouts)))
		for i := range r.Layouts {
			l := &r.Layouts[i]
			b = xdr.AppendUint64(b, l.Offset)
			b = xdr.AppendUint64(b, l.Length)
			b = xdr.AppendUint32(b, l.IOMode)
			b = l.Content.append(b)
		}
	case ErrLayoutTryLater:
		b = xdr.AppendBool(b, r.WillSignalLayoutAvail)
	}
	return b
}

// Decode decodes the result.
func (r *LayoutGetRes) Decode(d *xdr.Decoder) {
	ls := r.Layouts[:0]
	*r = LayoutGetRes{Status: decodeStatus(d), Layouts: ls}
	switch r.Status {
	case OK:
		r.ReturnOnClose = d.Bool()
		r.Stateid.Decode(d)
		r.Layouts = decodeList(d, r.Layouts, maxLayoutsInReply, layoutMinOnTheWire)
		for i := range r.Layouts {
			l := &r.Layouts[i]
			l.Offset = d.Uint64()
			l.Length = d.Uint64()
			l.IOMode = d.Uint32()
			l.Content.decode(d)
		}
	case ErrLayoutTryLater:
		r.WillSignalLayoutAvail = d.Bool()
	}
}

// OpStatus returns the status.
func (r *LayoutGetRes) OpStatus() Status { return r.Status }

// LayoutReturnArgs is LAYOUTRETURN4args. The file fields go with
// ReturnType LayoutReturnFile; the other types carry nothing.
type LayoutReturnArgs struct {
	Reclaim    bool
	LayoutType uint32
	IOMode     uint32
	ReturnType uint32
	// LayoutReturnFile:
	Offset  uint64
	Length  uint64
	Stateid Stateid
	Body    []byte
}

// Append encodes the arguments.
func (a *LayoutReturnArgs) Append(b []byte) []byte {
	b = xdr.AppendBool(b, a.Reclaim)
	b = xdr.AppendUint32(b, a.LayoutType)
	b = xdr.AppendUint32(b, a.IOMode)
	b = xdr.AppendUint32(b, a.ReturnType)
	if a.ReturnType == LayoutReturnFile {
		b = xdr.AppendUint64(b, a.Offset)
		b = xdr.AppendUint64(b, a.Length)
		b = a.Stateid.Append(b)
		b = xdr.AppendOpaque(b, a.Body)
	}
	return b
}

// Decode decodes the arguments.
func (a *LayoutReturnArgs) Decode(d *xdr.Decoder) {
	*a = LayoutReturnArgs{Reclaim: d.Bool(), LayoutType: d.Uint32(), IOMode: d.Uint32(), ReturnType: d.Uint32()}
	if a.ReturnType == LayoutReturnFile {
		a.Offset = d.Uint64()
		a.Length = d.Uint64()
		a.Stateid.Decode(d)
		a.Body = d.Opaque(maxLayoutBody)
	}
}

// LayoutReturnRes is LAYOUTRETURN4res.
type LayoutReturnRes struct {
	Status Status
	// NFS4_OK only (layoutreturn_stateid):
	HasStateid bool
	Stateid    Stateid
}

// Append encodes the result.
func (r *LayoutReturnRes) Append(b []byte) []byte {
	b = appendStatus(b, r.Status)
	if r.Status == OK {
		b = xdr.AppendBool(b, r.HasStateid)
		if r.HasStateid {
			b = r.Stateid.Append(b)
		}
	}
	return b
}

// Decode decodes the result.
func (r *LayoutReturnRes) Decode(d *xdr.Decoder) {
	*r = LayoutReturnRes{Status: decodeStatus(d)}
	if r.Status == OK {
		if r.HasStateid = d.Bool(); r.HasStateid {
			r.Stateid.Decode(d)
		}
	}
}

// OpStatus returns the status.
func (r *LayoutReturnRes) OpStatus() Status { return r.Status }
