package nfs4

import (
	"hushfs/internal/rpc"
	"hushfs/internal/xdr"
)

// EXCHANGE_ID flags.
const (
	ExchgIDFlagSuppMovedRefer   = 0x00000001
	ExchgIDFlagSuppMovedMigr    = 0x00000002
	ExchgIDFlagSuppFenceOps     = 0x00000004
	ExchgIDFlagBindPrincStateid = 0x00000100
	ExchgIDFlagUseNonPNFS       = 0x00010000
	ExchgIDFlagUsePNFSMDS       = 0x00020000
	ExchgIDFlagUsePNFSDS        = 0x00040000
	ExchgIDFlagMaskPNFS         = 0x00070000
	ExchgIDFlagUpdConfirmedRecA = 0x40000000
	ExchgIDFlagConfirmedR       = 0x80000000
)

// State protection (state_protect_how4).
const (
	SP4None     = 0
	SP4MachCred = 1
	SP4SSV      = 2
)

// CREATE_SESSION flags.
const (
	CreateSessionFlagPersist      = 0x1
	CreateSessionFlagConnBackChan = 0x2
	CreateSessionFlagConnRDMA     = 0x4
)

// SEQUENCE status flags.
const (
	SeqStatusCBPathDown              = 0x00000001
	SeqStatusCBGSSContextsExpiring   = 0x00000002
	SeqStatusCBGSSContextsExpired    = 0x00000004
	SeqStatusExpiredAllStateRevoked  = 0x00000008
	SeqStatusExpiredSomeStateRevoked = 0x00000010
	SeqStatusAdminStateRevoked       = 0x00000020
	SeqStatusRecallableStateRevoked  = 0x00000040
	SeqStatusLeaseMoved              = 0x00000080
	SeqStatusRestartReclaimNeeded    = 0x00000100
	SeqStatusCBPathDownSession       = 0x00000200
	SeqStatusBackchannelFault        = 0x00000400
	SeqStatusDevidChanged            = 0x00000800
	SeqStatusDevidDeleted            = 0x00001000
)

// Channel directions of BIND_CONN_TO_SESSION (channel_dir_from_client4,
// channel_dir_from_server4).
const (
	CDFC4Fore       = 0x1
	CDFC4Back       = 0x2
	CDFC4ForeOrBoth = 0x3
	CDFC4BackOrBoth = 0x7

	CDFS4Fore = 0x1
	CDFS4Back = 0x2
	CDFS4Both = 0x3
)

// ImplID is nfs_impl_id4: an implementation's name, for logs.
type ImplID struct {
	Domain []byte
	Name   []byte
	Date   Time
}

// optImplID is nfs_impl_id4<1>.
func appendOptImplID(b []byte, present bool, id *ImplID) []byte {
	if !present {
		return xdr.AppendUint32(b, 0)
	}
	b = xdr.AppendUint32(b, 1)
	b = xdr.AppendOpaque(b, id.Domain)
	b = xdr.AppendOpaque(b, id.Name)
	return id.Date.Append(b)
}

func decodeOptImplID(d *xdr.Decoder, id *ImplID) bool {
	*id = ImplID{}
	if d.ArrayLen(1, 4+4+12) == 0 {
		return false
	}
	id.Domain = d.Opaque(OpaqueLimit)
	id.Name = d.Opaque(OpaqueLimit)
	id.Date.Decode(d)
	return true
}

// StateProtectOps is state_protect_ops4: the operations that must, or may,
// use the machine credential or SSV.
type StateProtectOps struct {
	MustEnforce Bitmap
	MustAllow   Bitmap
}

func (s *StateProtectOps) append(b []byte) []byte {
	b = s.MustEnforce.Append(b)
	return s.MustAllow.Append(b)
}

func (s *StateProtectOps) decode(d *xdr.Decoder) {
	s.MustEnforce.Decode(d)
	s.MustAllow.Decode(d)
}

// StateProtectArgs is state_protect4_a.
type StateProtectArgs struct {
	How uint32 // SP4None, SP4MachCred, SP4SSV
	Ops StateProtectOps
	// SP4SSV (ssv_sp_parms4):
	HashAlgs      [][]byte
	EncrAlgs      [][]byte
	Window        uint32
	NumGSSHandles uint32
}

func (s *StateProtectArgs) append(b []byte) []byte {
	b = xdr.AppendUint32(b, s.How)
	switch s.How {
	case SP4MachCred:
		b = s.Ops.append(b)
	case SP4SSV:
		b = s.Ops.append(b)
		b = appendOpaques(b, s.HashAlgs)
		b = appendOpaques(b, s.EncrAlgs)
		b = xdr.AppendUint32(b, s.Window)
		b = xdr.AppendUint32(b, s.NumGSSHandles)
	}
	return b
}

func (s *StateProtectArgs) decode(d *xdr.Decoder) {
	*s = StateProtectArgs{How: d.Uint32(), HashAlgs: s.HashAlgs[:0], EncrAlgs: s.EncrAlgs[:0]}
	switch s.How {
	case SP4None:
	case SP4MachCred:
		s.Ops.decode(d)
	case SP4SSV:
		s.Ops.decode(d)
		s.HashAlgs = decodeOpaques(d, s.HashAlgs, OpaqueLimit)
		s.EncrAlgs = decodeOpaques(d, s.EncrAlgs, OpaqueLimit)
		s.Window = d.Uint32()
		s.NumGSSHandles = d.Uint32()
	default:
		d.SetErr(errBadUnion("state_protect4_a", s.How))
	}
}

// ClientOwner is client_owner4.
type ClientOwner struct {
	Verifier Verifier
	OwnerID  []byte // at most OpaqueLimit bytes
}

// ExchangeIDArgs is EXCHANGE_ID4args.
type ExchangeIDArgs struct {
	ClientOwner  ClientOwner
	Flags        uint32
	StateProtect StateProtectArgs
	HasImplID    bool
	ImplID       ImplID
}

// Append encodes the arguments.
func (a *ExchangeIDArgs) Append(b []byte) []byte {
	b = a.ClientOwner.Verifier.Append(b)
	b = xdr.AppendOpaque(b, a.ClientOwner.OwnerID)
	b = xdr.AppendUint32(b, a.Flags)
	b = a.StateProtect.append(b)
	return appendOptImplID(b, a.HasImplID, &a.ImplID)
}

// Decode decodes the arguments.
func (a *ExchangeIDArgs) Decode(d *xdr.Decoder) {
	a.ClientOwner.Verifier.Decode(d)
	a.ClientOwner.OwnerID = d.Opaque(OpaqueLimit)
	a.Flags = d.Uint32()
	a.StateProtect.decode(d)
	a.HasImplID = decodeOptImplID(d, &a.ImplID)
}

// StateProtectRes is state_protect4_r.
type StateProtectRes struct {
	How uint32 // SP4None, SP4MachCred, SP4SSV
	Ops StateProtectOps
	// SP4SSV (ssv_prot_info4):
	HashAlg uint32
	EncrAlg uint32
	SSVLen  uint32
	Window  uint32
	Handles [][]byte
}

func (s *StateProtectRes) append(b []byte) []byte {
	b = xdr.AppendUint32(b, s.How)
	switch s.How {
	case SP4MachCred:
		b = s.Ops.append(b)
	case SP4SSV:
		b = s.Ops.append(b)
		b = xdr.AppendUint32(b, s.HashAlg)
		b = xdr.AppendUint32(b, s.EncrAlg)
		b = xdr.AppendUint32(b, s.SSVLen)
		b = xdr.AppendUint32(b, s.Window)
		b = appendOpaques(b, s.Handles)
	}
	return b
}

func (s *StateProtectRes) decode(d *xdr.Decoder) {
	*s = StateProtectRes{How: d.Uint32(), Handles: s.Handles[:0]}
	switch s.How {
	case SP4None:
	case SP4MachCred:
		s.Ops.decode(d)
	case SP4SSV:
		s.Ops.decode(d)
		s.HashAlg = d.Uint32()
		s.EncrAlg = d.Uint32()
		s.SSVLen = d.Uint32()
		s.Window = d.Uint32()
		s.Handles = decodeOpaques(d, s.Handles, restOfReply)
	default:
		d.SetErr(errBadUnion("state_protect4_r", s.How))
	}
}

// ServerOwner is server_owner4.
type ServerOwner struct {
	MinorID uint64
	MajorID []byte // at most OpaqueLimit bytes
}

// ExchangeIDRes is EXCHANGE_ID4res.
type ExchangeIDRes struct {
	Status Status
	// NFS4_OK only:
	ClientID     uint64
	SequenceID   uint32
	Flags        uint32
	StateProtect StateProtectRes
	ServerOwner  ServerOwner
	ServerScope  []byte // at most OpaqueLimit bytes
	HasImplID    bool
	ImplID       ImplID
}

// Append encodes the result.
func (r *ExchangeIDRes) Append(b []byte) []byte {
	b = appendStatus(b, r.Status)
	if r.Status != OK {
		return b
	}
	b = xdr.AppendUint64(b, r.ClientID)
	b = xdr.AppendUint32(b, r.SequenceID)
	b = xdr.AppendUint32(b, r.Flags)
	b = r.StateProtect.append(b)
	b = xdr.AppendUint64(b, r.ServerOwner.MinorID)
	b = xdr.AppendOpaque(b, r.ServerOwner.MajorID)
	b = xdr.AppendOpaque(b, r.ServerScope)
	return appendOptImplID(b, r.HasImplID, &r.ImplID)
}

// Decode decodes the result.
func (r *ExchangeIDRes) Decode(d *xdr.Decoder) {
	handles := r.StateProtect.Handles[:0]
	*r = ExchangeIDRes{Status: decodeStatus(d)}
	r.StateProtect.Handles = handles
	if r.Status != OK {
		return
	}
	r.ClientID = d.Uint64()
	r.SequenceID = d.Uint32()
	r.Flags = d.Uint32()
	r.StateProtect.decode(d)
	r.ServerOwner.MinorID = d.Uint64()
	r.ServerOwner.MajorID = d.Opaque(OpaqueLimit)
	r.ServerScope = d.Opaque(OpaqueLimit)
	r.HasImplID = decodeOptImplID(d, &r.ImplID)
}

// OpStatus returns the status.
func (r *ExchangeIDRes) OpStatus() Status { return r.Status }

// ChannelAttrs is channel_attrs4.
type ChannelAttrs struct {
	HeaderPadSize         uint32
	MaxRequestSize        uint32
	MaxResponseSize       uint32
	MaxResponseSizeCached uint32
	MaxOperations         uint32
	MaxRequests           uint32
	HasRDMAIRD            bool
	RDMAIRD               uint32
}

func (c *ChannelAttrs) append(b []byte) []byte {
	b = xdr.AppendUint32(b, c.HeaderPadSize)
	b = xdr.AppendUint32(b, c.MaxRequestSize)
	b = xdr.AppendUint32(b, c.MaxResponseSize)
	b = xdr.AppendUint32(b, c.MaxResponseSizeCached)
	b = xdr.AppendUint32(b, c.MaxOperations)
	b = xdr.AppendUint32(b, c.MaxRequests)
	if !c.HasRDMAIRD {
		return xdr.AppendUint32(b, 0)
	}
	b = xdr.AppendUint32(b, 1)
	return xdr.AppendUint32(b, c.RDMAIRD)
}

func (c *ChannelAttrs) decode(d *xdr.Decoder) {
	c.HeaderPadSize = d.Uint32()
	c.MaxRequestSize = d.Uint32()
	c.MaxResponseSize = d.Uint32()
	c.MaxResponseSizeCached = d.Uint32()
	c.MaxOperations = d.Uint32()
	c.MaxRequests = d.Uint32()
	c.HasRDMAIRD = d.ArrayLen(1, 4) == 1
	c.RDMAIRD = 0
	if c.HasRDMAIRD {
		c.RDMAIRD = d.Uint32()
	}
}

// CallbackSecParms is callback_sec_parms4: how the server authenticates its
// callbacks.
type CallbackSecParms struct {
	Flavor uint32 // AuthNone, AuthSys, AuthRPCSECGSS
	// AuthSys:
	Sys rpc.AuthSysParms
	// AuthRPCSECGSS (gss_cb_handles4):
	GSSService          uint32
	GSSHandleFromServer []byte
	GSSHandleFromClient []byte
}

func (c *CallbackSecParms) append(b []byte) []byte {
	b = xdr.AppendUint32(b, c.Flavor)
	switch c.Flavor {
	case AuthSys:
		b = c.Sys.Append(b)
	case AuthRPCSECGSS:
		b = xdr.AppendUint32(b, c.GSSService)
		b = xdr.AppendOpaque(b, c.GSSHandleFromServer)
		b = xdr.AppendOpaque(b, c.GSSHandleFromClient)
	}
	return b
}

func (c *CallbackSecParms) decode(d *xdr.Decoder) {
	gids := c.Sys.GIDs[:0]
	*c = CallbackSecParms{Flavor: d.Uint32(), Sys: rpc.AuthSysParms{GIDs: gids}}
	switch c.Flavor {
	case AuthNone:
	case AuthSys:
		c.Sys.Decode(d)
	case AuthRPCSECGSS:
		c.GSSService = d.Uint32()
		if c.GSSService < GSSSvcNone || c.GSSService > GSSSvcPrivacy {
			d.SetErr(errBadEnum("rpc_gss_svc_t", c.GSSService))
		}
		c.GSSHandleFromServer = d.Opaque(OpaqueLimit)
		c.GSSHandleFromClient = d.Opaque(OpaqueLimit)
	default:
		d.SetErr(errBadUnion("callback_sec_parms4", c.Flavor))
	}
}

func appendSecParms(b []byte, s []CallbackSecParms) []byte {
	b = xdr.AppendUint32(b, uint32(len(s)))
	for i := range s {
		b = s[i].append(b)
	}
	return b
}

func decodeSecParms(d *xdr.Decoder, s []CallbackSecParms) []CallbackSecParms {
	s = decodeList(d, s, 16, 4)
	for i := range s {
		s[i].decode(d)
	}
	return s
}

// CreateSessionArgs is CREATE_SESSION4args.
type CreateSessionArgs struct {
	ClientID  uint64
	Sequence  uint32
	Flags     uint32
	Fore      ChannelAttrs
	Back      ChannelAttrs
	CBProgram uint32
	SecParms  []CallbackSecParms
}

// Append encodes the arguments.
func (a *CreateSessionArgs) Append(b []byte) []byte {
	b = xdr.AppendUint64(b, a.ClientID)
	b = xdr.AppendUint32(b, a.Sequence)
	b = xdr.AppendUint32(b, a.Flags)
	b = a.Fore.append(b)
	b = a.Back.append(b)
	b = xdr.AppendUint32(b, a.CBProgram)
	return appendSecParms(b, a.SecParms)
}

// Decode decodes the arguments.
func (a *CreateSessionArgs) Decode(d *xdr.Decoder) {
	a.ClientID = d.Uint64()
	a.Sequence = d.Uint32()
	a.Flags = d.Uint32()
	a.Fore.decode(d)
	a.Back.decode(d)
	a.CBProgram = d.Uint32()
	a.SecParms = decodeSecParms(d, a.SecParms)
}

// CreateSessionRes is CREATE_SESSION4res.
type CreateSessionRes struct {
	Status Status
	// NFS4_OK only:
	SessionID SessionID
	Sequence  uint32
	Flags     uint32
	Fore      ChannelAttrs
	Back      ChannelAttrs
}

// Append encodes the result.
func (r *CreateSessionRes) Append(b []byte) []byte {
	b = appendStatus(b, r.Status)
	if r.Status == OK {
		b = r.SessionID.Append(b)
		b = xdr.AppendUint32(b, r.Sequence)
		b = xdr.AppendUint32(b, r.Flags)
		b = r.Fore.append(b)
		b = r.Back.append(b)
	}
	return b
}

// Decode decodes the result.
func (r *CreateSessionRes) Decode(d *xdr.Decoder) {
	*r = CreateSessionRes{Status: decodeStatus(d)}
	if r.Status == OK {
		r.SessionID.Decode(d)
		r.Sequence = d.Uint32()
		r.Flags = d.Uint32()
		r.Fore.decode(d)
		r.Back.decode(d)
	}
}

// OpStatus returns the status.
func (r *CreateSessionRes) OpStatus() Status { return r.Status }

// DestroySessionArgs is DESTROY_SESSION4args.
type DestroySessionArgs struct {
	SessionID SessionID
}

// Append encodes the arguments.
func (a *DestroySessionArgs) Append(b []byte) []byte { return a.SessionID.Append(b) }

// Decode decodes the arguments.
func (a *DestroySessionArgs) Decode(d *xdr.Decoder) { a.SessionID.Decode(d) }

// SequenceArgs is SEQUENCE4args.
type SequenceArgs struct {
	SessionID     SessionID
	SequenceID    uint32
	SlotID        uint32
	HighestSlotID uint32
	CacheThis     bool
}

// Append encodes the arguments.
func (a *SequenceArgs) Append(b []byte) []byte {
	b = a.SessionID.Append(b)
	b = xdr.AppendUint32(b, a.SequenceID)
	b = xdr.AppendUint32(b, a.SlotID)
	b = xdr.AppendUint32(b, a.HighestSlotID)
	return xdr.AppendBool(b, a.CacheThis)
}

// Decode decodes the arguments.
func (a *SequenceArgs) Decode(d *xdr.Decoder) {
	a.SessionID.Decode(d)
	a.SequenceID = d.Uint32()
	a.SlotID = d.Uint32()
	a.HighestSlotID = d.Uint32()
	a.CacheThis = d.Bool()
}

// SequenceRes is SEQUENCE4res.
type SequenceRes struct {
	Status Status
	// NFS4_OK only:
	SessionID           SessionID
	SequenceID          uint32
	SlotID              uint32
	HighestSlotID       uint32
	TargetHighestSlotID uint32
	StatusFlags         uint32
}

// Append encodes the result.
func (r *SequenceRes) Append(b []byte) []byte {
	b = appendStatus(b, r.Status)
	if r.Status == OK {
		b = r.SessionID.Append(b)
		b = xdr.AppendUint32(b, r.SequenceID)
		b = xdr.AppendUint32(b, r.SlotID)
		b = xdr.AppendUint32(b, r.HighestSlotID)
		b = xdr.AppendUint32(b, r.TargetHighestSlotID)
		b = xdr.AppendUint32(b, r.StatusFlags)
	}
	return b
}

// Decode decodes the result.
func (r *SequenceRes) Decode(d *xdr.Decoder) {
	*r = SequenceRes{Status: decodeStatus(d)}
	if r.Status == OK {
		r.SessionID.Decode(d)
		r.SequenceID = d.Uint32()
		r.SlotID = d.Uint32()
		r.HighestSlotID = d.Uint32()
		r.TargetHighestSlotID = d.Uint32()
		r.StatusFlags = d.Uint32()
	}
}

// OpStatus returns the status.
func (r *SequenceRes) OpStatus() Status { return r.Status }

// BindConnToSessionArgs is BIND_CONN_TO_SESSION4args.
type BindConnToSessionArgs struct {
	SessionID SessionID
	Dir       uint32 // CDFC4*
	UseRDMA   bool
}

// Append encodes the arguments.
func (a *BindConnToSessionArgs) Append(b []byte) []byte {
	b = a.SessionID.Append(b)
	b = xdr.AppendUint32(b, a.Dir)
	return xdr.AppendBool(b, a.UseRDMA)
}

// Decode decodes the arguments; an unknown direction is an error.
func (a *BindConnToSessionArgs) Decode(d *xdr.Decoder) {
	a.SessionID.Decode(d)
	a.Dir = d.Uint32()
	switch a.Dir {
	case CDFC4Fore, CDFC4Back, CDFC4ForeOrBoth, CDFC4BackOrBoth:
	default:
		d.SetErr(errBadEnum("channel_dir_from_client4", a.Dir))
	}
	a.UseRDMA = d.Bool()
}

// BindConnToSessionRes is BIND_CONN_TO_SESSION4res.
type BindConnToSessionRes struct {
	Status Status
	// NFS4_OK only:
	SessionID SessionID
	Dir       uint32 // CDFS4*
	UseRDMA   bool
}

// Append encodes the result.
func (r *BindConnToSessionRes) Append(b []byte) []byte {
	b = appendStatus(b, r.Status)
	if r.Status == OK {
		b = r.SessionID.Append(b)
		b = xdr.AppendUint32(b, r.Dir)
		b = xdr.AppendBool(b, r.UseRDMA)
	}
	return b
}

// Decode decodes the result; an unknown direction is an error.
func (r *BindConnToSessionRes) Decode(d *xdr.Decoder) {
	*r = BindConnToSessionRes{Status: decodeStatus(d)}
	if r.Status == OK {
		r.SessionID.Decode(d)
		r.Dir = d.Uint32()
		if r.Dir < CDFS4Fore || r.Dir > CDFS4Both {
			d.SetErr(errBadEnum("channel_dir_from_server4", r.Dir))
		}
		r.UseRDMA = d.Bool()
	}
}

// OpStatus returns the status.
func (r *BindConnToSessionRes) OpStatus() Status { return r.Status }

// BackchannelCtlArgs is BACKCHANNEL_CTL4args.
type BackchannelCtlArgs struct {
	CBProgram uint32
	SecParms  []CallbackSecParms
}

// Append encodes the arguments.
func (a *BackchannelCtlArgs) Append(b []byte) []byte {
	b = xdr.AppendUint32(b, a.CBProgram)
	return appendSecParms(b, a.SecParms)
}

// Decode decodes the arguments.
func (a *BackchannelCtlArgs) Decode(d *xdr.Decoder) {
	a.CBProgram = d.Uint32()
	a.SecParms = decodeSecParms(d, a.SecParms)
}

// DestroyClientIDArgs is DESTROY_CLIENTID4args.
type DestroyClientIDArgs struct {
	ClientID uint64
}

// Append encodes the arguments.
func (a *DestroyClientIDArgs) Append(b []byte) []byte { return xdr.AppendUint64(b, a.ClientID) }

// Decode decodes the arguments.
func (a *DestroyClientIDArgs) Decode(d *xdr.Decoder) { a.ClientID = d.Uint64() }

// ReclaimCompleteArgs is RECLAIM_COMPLETE4args.
type ReclaimCompleteArgs struct {
	OneFS bool
}

// Append encodes the arguments.
func (a *ReclaimCompleteArgs) Append(b []byte) []byte { return xdr.AppendBool(b, a.OneFS) }

// Decode decodes the arguments.
func (a *ReclaimCompleteArgs) Decode(d *xdr.Decoder) { a.OneFS = d.Bool() }

// SetSSVArgs is SET_SSV4args (SP4_SSV state protection, which we refuse).
type SetSSVArgs struct {
	SSV    []byte
	Digest []byte
}

// Append encodes the arguments.
func (a *SetSSVArgs) Append(b []byte) []byte {
	b = xdr.AppendOpaque(b, a.SSV)
	return xdr.AppendOpaque(b, a.Digest)
}

// Decode decodes the arguments.
func (a *SetSSVArgs) Decode(d *xdr.Decoder) {
	a.SSV = d.Opaque(OpaqueLimit)
	a.Digest = d.Opaque(OpaqueLimit)
}

// SetSSVRes is SET_SSV4res.
type SetSSVRes struct {
	Status Status
	Digest []byte // NFS4_OK only
}

// Append encodes the result.
func (r *SetSSVRes) Append(b []byte) []byte {
	b = appendStatus(b, r.Status)
	if r.Status == OK {
		b = xdr.AppendOpaque(b, r.Digest)
	}
	return b
}

// Decode decodes the result.
func (r *SetSSVRes) Decode(d *xdr.Decoder) {
	*r = SetSSVRes{Status: decodeStatus(d)}
	if r.Status == OK {
		r.Digest = d.Opaque(restOfReply)
	}
}

// OpStatus returns the status.
func (r *SetSSVRes) OpStatus() Status { return r.Status }

func appendOpaques(b []byte, s [][]byte) []byte {
	b = xdr.AppendUint32(b, uint32(len(s)))
	for _, p := range s {
		b = xdr.AppendOpaque(b, p)
	}
	return b
}

func decodeOpaques(d *xdr.Decoder, s [][]byte, max uint32) [][]byte {
	s = decodeList(d, s, maxList, 4)
	for i := range s {
		s[i] = d.Opaque(max)
	}
	return s
}
