package nfs4

import "hushfs/internal/xdr"

// PutFHArgs is PUTFH4args.
type PutFHArgs struct {
	FH FH
}

// Append encodes the arguments.
func (a *PutFHArgs) Append(b []byte) []byte { return a.FH.Append(b) }

// Decode decodes the arguments.
func (a *PutFHArgs) Decode(d *xdr.Decoder) { a.FH.Decode(d) }

// GetFHRes is GETFH4res.
type GetFHRes struct {
	Status Status
	FH     FH // NFS4_OK only
}

// Append encodes the result.
func (r *GetFHRes) Append(b []byte) []byte {
	b = appendStatus(b, r.Status)
	if r.Status == OK {
		b = r.FH.Append(b)
	}
	return b
}

// Decode decodes the result.
func (r *GetFHRes) Decode(d *xdr.Decoder) {
	*r = GetFHRes{Status: decodeStatus(d)}
	if r.Status == OK {
		r.FH.Decode(d)
	}
}

// OpStatus returns the status.
func (r *GetFHRes) OpStatus() Status { return r.Status }

// LookupArgs is LOOKUP4args: a name in the current directory.
type LookupArgs struct {
	Name []byte
}

// Append encodes the arguments.
func (a *LookupArgs) Append(b []byte) []byte { return xdr.AppendOpaque(b, a.Name) }

// Decode decodes the arguments.
func (a *LookupArgs) Decode(d *xdr.Decoder) { a.Name = d.Opaque(MaxNameArg) }

// OpenattrArgs is OPENATTR4args (named attributes, which we do not serve).
type OpenattrArgs struct {
	CreateDir bool
}

// Append encodes the arguments.
func (a *OpenattrArgs) Append(b []byte) []byte { return xdr.AppendBool(b, a.CreateDir) }

// Decode decodes the arguments.
func (a *OpenattrArgs) Decode(d *xdr.Decoder) { a.CreateDir = d.Bool() }

// SecinfoArgs is SECINFO4args: a name in the current directory.
type SecinfoArgs struct {
	Name []byte
}

// Append encodes the arguments.
func (a *SecinfoArgs) Append(b []byte) []byte { return xdr.AppendOpaque(b, a.Name) }

// Decode decodes the arguments.
func (a *SecinfoArgs) Decode(d *xdr.Decoder) { a.Name = d.Opaque(MaxNameArg) }

// SecinfoStyle is secinfo_style4.
type SecinfoStyle uint32

const (
	SecinfoStyleCurrentFH SecinfoStyle = 0
	SecinfoStyleParent    SecinfoStyle = 1
)

// SecinfoNoNameArgs is SECINFO_NO_NAME4args.
type SecinfoNoNameArgs struct {
	Style SecinfoStyle
}

// Append encodes the arguments.
func (a *SecinfoNoNameArgs) Append(b []byte) []byte { return xdr.AppendUint32(b, uint32(a.Style)) }

// Decode decodes the arguments; an unknown style is an error.
func (a *SecinfoNoNameArgs) Decode(d *xdr.Decoder) {
	a.Style = SecinfoStyle(d.Uint32())
	if a.Style > SecinfoStyleParent {
		d.SetErr(errBadEnum("secinfo_style4", uint32(a.Style)))
		a.Style = 0
	}
}

// Security flavors (auth_flavor).
const (
	AuthNone      = 0
	AuthSys       = 1
	AuthRPCSECGSS = 6
)

// RPC_GSS services (rpc_gss_svc_t).
const (
	GSSSvcNone      = 1
	GSSSvcIntegrity = 2
	GSSSvcPrivacy   = 3
)

// SecinfoFlavor is secinfo4: a flavor and, for RPCSEC_GSS, its mechanism.
type SecinfoFlavor struct {
	Flavor uint32
	// RPCSEC_GSS only:
	OID     []byte
	QOP     uint32
	Service uint32
}

func (s *SecinfoFlavor) append(b []byte) []byte {
	b = xdr.AppendUint32(b, s.Flavor)
	if s.Flavor == AuthRPCSECGSS {
		b = xdr.AppendOpaque(b, s.OID)
		b = xdr.AppendUint32(b, s.QOP)
		b = xdr.AppendUint32(b, s.Service)
	}
	return b
}

func (s *SecinfoFlavor) decode(d *xdr.Decoder) {
	*s = SecinfoFlavor{Flavor: d.Uint32()}
	if s.Flavor == AuthRPCSECGSS {
		s.OID = d.Opaque(OpaqueLimit)
		s.QOP = d.Uint32()
		s.Service = d.Uint32()
		if s.Service < GSSSvcNone || s.Service > GSSSvcPrivacy {
			d.SetErr(errBadEnum("rpc_gss_svc_t", s.Service))
		}
	}
}

// SecinfoRes is SECINFO4res and SECINFO_NO_NAME4res.
type SecinfoRes struct {
	Status  Status
	Flavors []SecinfoFlavor // NFS4_OK only
}

// Append encodes the result.
func (r *SecinfoRes) Append(b []byte) []byte {
	b = appendStatus(b, r.Status)
	if r.Status == OK {
		b = xdr.AppendUint32(b, uint32(len(r.Flavors)))
		for i := range r.Flavors {
			b = r.Flavors[i].append(b)
		}
	}
	return b
}

// Decode decodes the result.
func (r *SecinfoRes) Decode(d *xdr.Decoder) {
	r.Status = decodeStatus(d)
	r.Flavors = r.Flavors[:0]
	if r.Status == OK {
		r.Flavors = decodeList(d, r.Flavors, maxList, 4)
		for i := range r.Flavors {
			r.Flavors[i].decode(d)
		}
	}
}

// OpStatus returns the status.
func (r *SecinfoRes) OpStatus() Status { return r.Status }
