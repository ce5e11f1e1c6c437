// Package rpc implements ONC RPC version 2 (RFC 5531) over TCP: record
// marking, message headers, AUTH_NONE and AUTH_SYS credentials, a pipelined
// client and a concurrent server.
package rpc

import (
	"fmt"

	"hushfs/internal/xdr"
)

// RPCVersion is the only RPC protocol version (RFC 5531 §9).
const RPCVersion = 2

// Message types.
const (
	MsgCall  = 0
	MsgReply = 1
)

// reply_stat.
const (
	MsgAccepted = 0
	MsgDenied   = 1
)

// AcceptStat is the accept_stat of an accepted reply.
type AcceptStat uint32

const (
	Success      AcceptStat = 0 // RPC executed successfully
	ProgUnavail  AcceptStat = 1 // remote hasn't exported program
	ProgMismatch AcceptStat = 2 // remote can't support version
	ProcUnavail  AcceptStat = 3 // program can't support procedure
	GarbageArgs  AcceptStat = 4 // procedure can't decode params
	SystemErr    AcceptStat = 5 // e.g. memory allocation failure
)

func (s AcceptStat) String() string {
	switch s {
	case Success:
		return "SUCCESS"
	case ProgUnavail:
		return "PROG_UNAVAIL"
	case ProgMismatch:
		return "PROG_MISMATCH"
	case ProcUnavail:
		return "PROC_UNAVAIL"
	case GarbageArgs:
		return "GARBAGE_ARGS"
	case SystemErr:
		return "SYSTEM_ERR"
	}
	return fmt.Sprintf("accept_stat(%d)", uint32(s))
}

// reject_stat.
const (
	RPCMismatch = 0
	AuthError   = 1
)

// AuthStat is the auth_stat of a reply denied with AUTH_ERROR.
type AuthStat uint32

const (
	AuthOK           AuthStat = 0
	AuthBadCred      AuthStat = 1 // bad credential (seal broken)
	AuthRejectedCred AuthStat = 2 // client must begin new session
	AuthBadVerf      AuthStat = 3 // bad verifier (seal broken)
	AuthRejectedVerf AuthStat = 4 // verifier expired or replayed
	AuthTooWeak      AuthStat = 5 // rejected for security reasons
	AuthInvalidResp  AuthStat = 6 // bogus response verifier
	AuthFailed       AuthStat = 7 // reason unknown
)

func (s AuthStat) String() string {
	names := [...]string{"AUTH_OK", "AUTH_BADCRED", "AUTH_REJECTEDCRED", "AUTH_BADVERF",
		"AUTH_REJECTEDVERF", "AUTH_TOOWEAK", "AUTH_INVALIDRESP", "AUTH_FAILED"}
	if int(s) < len(names) {
		return names[s]
	}
	return fmt.Sprintf("auth_stat(%d)", uint32(s))
}

// Authentication flavors.
const (
	AuthNone  = 0
	AuthSys   = 1
	AuthShort = 2
)

// MaxAuthBytes is the largest opaque_auth body (RFC 5531 §8.2).
const MaxAuthBytes = 400

// OpaqueAuth is a credential or verifier: a flavor and its opaque body.
// After decoding, Body aliases the message buffer.
type OpaqueAuth struct {
	Flavor uint32
	Body   []byte
}

// Append encodes the opaque_auth.
func (a OpaqueAuth) Append(b []byte) []byte {
	b = xdr.AppendUint32(b, a.Flavor)
	return xdr.AppendOpaque(b, a.Body)
}

// Decode decodes an opaque_auth, enforcing the 400-byte limit.
func (a *OpaqueAuth) Decode(d *xdr.Decoder) {
	a.Flavor = d.Uint32()
	a.Body = d.Opaque(MaxAuthBytes)
}

// NoAuth is the AUTH_NONE credential and verifier.
var NoAuth = OpaqueAuth{Flavor: AuthNone}

// Limits of authsys_parms (RFC 5531 Appendix A).
const (
	MaxMachineName = 255
	MaxAuthSysGIDs = 16
)

// AuthSysParms is the body of an AUTH_SYS credential.
type AuthSysParms struct {
	Stamp   uint32
	Machine string
	UID     uint32
	GID     uint32
	GIDs    []uint32
}

// Append encodes the parameters (the credential body, without flavor and
// length). More than 16 auxiliary groups are truncated to 16, as the
// protocol allows no more.
func (p *AuthSysParms) Append(b []byte) []byte {
	b = xdr.AppendUint32(b, p.Stamp)
	m := p.Machine
	if len(m) > MaxMachineName {
		m = m[:MaxMachineName]
	}
	b = xdr.AppendString(b, m)
	b = xdr.AppendUint32(b, p.UID)
	b = xdr.AppendUint32(b, p.GID)
	g := p.GIDs
	if len(g) > MaxAuthSysGIDs {
		g = g[:MaxAuthSysGIDs]
	}
	b = xdr.AppendUint32(b, uint32(len(g)))
	for _, id := range g {
		b = xdr.AppendUint32(b, id)
	}
	return b
}

// Decode decodes authsys_parms. GIDs reuses the slice's capacity when it is
// large enough, so a decoder kept per worker does not allocate.
func (p *AuthSysParms) Decode(d *xdr.Decoder) {
	p.Stamp = d.Uint32()
	p.Machine = string(d.Opaque(MaxMachineName))
	p.UID = d.Uint32()
	p.GID = d.Uint32()
	n := d.ArrayLen(MaxAuthSysGIDs, 4)
	p.GIDs = p.GIDs[:0]
	for i := 0; i < n; i++ {
		p.GIDs = append(p.GIDs, d.Uint32())
	}
}

// Cred returns the AUTH_SYS credential carrying p.
func (p *AuthSysParms) Cred() OpaqueAuth {
	return OpaqueAuth{Flavor: AuthSys, Body: p.Append(nil)}
}

// AcceptError is a reply that was accepted with a status other than SUCCESS.
type AcceptError struct {
	Stat AcceptStat
	Low  uint32 // with PROG_MISMATCH: lowest version supported
	High uint32 // with PROG_MISMATCH: highest version supported
}

func (e *AcceptError) Error() string {
	if e.Stat == ProgMismatch {
		return fmt.Sprintf("rpc: %v (versions %d..%d supported)", e.Stat, e.Low, e.High)
	}
	return "rpc: " + e.Stat.String()
}

// DeniedError is a reply of MSG_DENIED.
type DeniedError struct {
	RejectStat uint32   // RPCMismatch or AuthError
	Auth       AuthStat // with AuthError
	Low, High  uint32   // with RPCMismatch
}

func (e *DeniedError) Error() string {
	if e.RejectStat == AuthError {
		return "rpc: denied: " + e.Auth.String()
	}
	return fmt.Sprintf("rpc: denied: RPC_MISMATCH (versions %d..%d)", e.Low, e.High)
}
