package rpc

import (
	"context"
	"errors"
	"fmt"
	"net"
	"slices"

	"hushfs/internal/xdr"
)

// Calls and replies as both ends see them: the Server serves calls from its
// clients, and a Client serves calls its server sends back on the same
// connection (NFSv4.1's back channel). Both decode calls and build replies
// here.

// ConnInfo describes the connection a call arrived on. On a Server, its
// BackChannel calls the client at the other end of that connection.
type ConnInfo struct {
	RemoteAddr, LocalAddr net.Addr

	conn *serverConn // nil unless the call came to a Server
}

// Call is a decoded call as handed to a Handler. The server reuses Call
// values and their buffers: nothing in a Call may be retained after the
// handler returns.
type Call struct {
	XID              uint32
	Prog, Vers, Proc uint32
	Cred, Verf       OpaqueAuth // bodies alias the record buffer
	Args             []byte     // procedure arguments; alias the record buffer, valid until the handler returns
	Conn             *ConnInfo
}

// Handler serves the procedures of one program version. Handlers run
// concurrently: on a Server, on a pool shared by all connections; on a
// Client (calls from the server, Client.Register), each on a goroutine of
// its own. The context passed to ServeRPC is cancelled when the call's
// connection breaks or the server (client) is closed.
type Handler interface {
	// ServeRPC appends the procedure's results to reply, which already holds
	// the accepted-reply header (xid, REPLY, MSG_ACCEPTED, AUTH_NONE verifier,
	// SUCCESS), and returns it. If it returns an error of type *AcceptError
	// (ProcUnavail, GarbageArgs, SystemErr) or *DeniedError (AuthError), the
	// server discards what was appended and sends that reply instead; ErrDrop
	// means send no reply at all; any other error is logged and answered with
	// SYSTEM_ERR.
	ServeRPC(ctx context.Context, call *Call, reply []byte) ([]byte, error)
}

// HandlerFunc adapts a function to Handler.
type HandlerFunc func(ctx context.Context, call *Call, reply []byte) ([]byte, error)

// ServeRPC calls f.
func (f HandlerFunc) ServeRPC(ctx context.Context, call *Call, reply []byte) ([]byte, error) {
	return f(ctx, call, reply)
}

// Errors a handler returns to select a reply other than SUCCESS.
var (
	ErrProcUnavail = &AcceptError{Stat: ProcUnavail}
	ErrGarbageArgs = &AcceptError{Stat: GarbageArgs}
	ErrSystem      = &AcceptError{Stat: SystemErr}
	ErrDrop        = errors.New("rpc: drop reply")
)

// AuthErr returns the error that makes the server deny a call with
// AUTH_ERROR and auth_stat s.
func AuthErr(s AuthStat) error {
	return &DeniedError{RejectStat: AuthError, Auth: s}
}

// progTable maps program numbers to their versions. It is replaced, never
// modified, so the per-call lookup takes no lock.
type progTable map[uint32][]progVers

type progVers struct {
	vers uint32
	h    Handler
	ni   NonIdempotentHandler // h, if it has procedures for the cache
}

// with returns a copy of t in which pv serves version pv.vers of prog,
// replacing any handler it had.
func (t *progTable) with(prog uint32, pv progVers) *progTable {
	n := make(progTable, len(*t)+1)
	for p, vs := range *t {
		n[p] = vs
	}
	vs := slices.DeleteFunc(slices.Clone(n[prog]), func(v progVers) bool { return v.vers == pv.vers })
	n[prog] = append(vs, pv)
	return &n
}

// verdict is what the connection does with a record.
type verdict int

const (
	verdictDispatch verdict = iota // a valid call: run the handler
	verdictReply                   // answered already (an error reply)
	verdictIgnore                  // not a call (a stray reply): skip it
	verdictClose                   // unparseable: close the connection
)

// decodeCall parses a call record into call. With verdictDispatch it returns
// the program version's entry; with verdictReply it returns reply extended by a complete reply
// record (record mark included). It never panics and retains nothing.
//
// Credentials: AUTH_NONE and AUTH_SYS are accepted. Any other flavor is
// denied with AUTH_REJECTEDCRED, which tells a client to start over with a
// credential of another kind. A credential whose body is malformed (beyond
// the 400-byte limit, or AUTH_SYS that is not exactly one authsys_parms
// within its limits) is denied with AUTH_BADCRED, a malformed verifier with
// AUTH_BADVERF. The verifier's flavor is not checked: with AUTH_NONE and
// AUTH_SYS it carries nothing.
func decodeCall(progs *progTable, rec []byte, call *Call, reply []byte) (*progVers, []byte, verdict) {
	var d xdr.Decoder
	d.Reset(rec)
	xid := d.Uint32()
	mtype := d.Uint32()
	if d.Err() != nil {
		return nil, reply, verdictClose
	}
	switch mtype {
	case MsgCall:
	case MsgReply:
		return nil, reply, verdictIgnore
	default:
		return nil, reply, verdictClose
	}
	rpcvers := d.Uint32()
	if d.Err() != nil {
		return nil, reply, verdictClose
	}
	if rpcvers != RPCVersion {
		return nil, denyReply(reply, xid, &DeniedError{RejectStat: RPCMismatch, Low: RPCVersion, High: RPCVersion}), verdictReply
	}
	prog, vers, proc := d.Uint32(), d.Uint32(), d.Uint32()
	if d.Err() != nil {
		return nil, reply, verdictClose
	}
	var cred, verf OpaqueAuth
	cred.Decode(&d)
	if d.Err() != nil {
		return nil, denyReply(reply, xid, &DeniedError{RejectStat: AuthError, Auth: AuthBadCred}), verdictReply
	}
	verf.Decode(&d)
	if d.Err() != nil {
		return nil, denyReply(reply, xid, &DeniedError{RejectStat: AuthError, Auth: AuthBadVerf}), verdictReply
	}
	switch cred.Flavor {
	case AuthNone:
	case AuthSys:
		if !validAuthSys(cred.Body) {
			return nil, denyReply(reply, xid, &DeniedError{RejectStat: AuthError, Auth: AuthBadCred}), verdictReply
		}
	default:
		return nil, denyReply(reply, xid, &DeniedError{RejectStat: AuthError, Auth: AuthRejectedCred}), verdictReply
	}
	versions := (*progs)[prog]
	if len(versions) == 0 {
		return nil, acceptReply(reply, xid, &AcceptError{Stat: ProgUnavail}), verdictReply
	}
	var pv *progVers
	low, high := versions[0].vers, versions[0].vers
	for i, v := range versions {
		if v.vers == vers {
			pv = &versions[i]
		}
		low, high = min(low, v.vers), max(high, v.vers)
	}
	if pv == nil {
		return nil, acceptReply(reply, xid, &AcceptError{Stat: ProgMismatch, Low: low, High: high}), verdictReply
	}
	*call = Call{XID: xid, Prog: prog, Vers: vers, Proc: proc, Cred: cred, Verf: verf, Args: d.Rest()}
	return pv, reply, verdictDispatch
}

// appendAccepted appends an accepted reply header with AUTH_NONE verifier and
// the given accept_stat.
func appendAccepted(b []byte, xid uint32, stat AcceptStat) []byte {
	b = xdr.AppendUint32(b, xid)
	b = xdr.AppendUint32(b, MsgReply)
	b = xdr.AppendUint32(b, MsgAccepted)
	b = NoAuth.Append(b)
	return xdr.AppendUint32(b, uint32(stat))
}

func appendAcceptError(b []byte, xid uint32, e *AcceptError) []byte {
	stat := e.Stat
	if stat == Success { // would be read as results: make it an honest failure
		stat = SystemErr
	}
	b = appendAccepted(b, xid, stat)
	if stat == ProgMismatch {
		b = xdr.AppendUint32(b, e.Low)
		b = xdr.AppendUint32(b, e.High)
	}
	return b
}

func appendDenied(b []byte, xid uint32, e *DeniedError) []byte {
	b = xdr.AppendUint32(b, xid)
	b = xdr.AppendUint32(b, MsgReply)
	b = xdr.AppendUint32(b, MsgDenied)
	switch e.RejectStat {
	case RPCMismatch:
		b = xdr.AppendUint32(b, RPCMismatch)
		b = xdr.AppendUint32(b, e.Low)
		b = xdr.AppendUint32(b, e.High)
	default:
		b = xdr.AppendUint32(b, AuthError)
		b = xdr.AppendUint32(b, uint32(e.Auth))
	}
	return b
}

// acceptReply and denyReply append a complete record holding the reply.
func acceptReply(b []byte, xid uint32, e *AcceptError) []byte {
	b, start := BeginRecord(b)
	b = appendAcceptError(b, xid, e)
	FinishRecord(b, start)
	return b
}

func denyReply(b []byte, xid uint32, e *DeniedError) []byte {
	b, start := BeginRecord(b)
	b = appendDenied(b, xid, e)
	FinishRecord(b, start)
	return b
}

// handlerReply turns what a handler returned into the reply record's body.
// hdr is the accepted-reply header the handler was given, begun at start
// (BeginRecord); out and err are the handler's results. It returns the
// body (FinishRecord is the caller's), ErrDrop when no reply is to be sent,
// and, for an error the handler was not meant to return, that error: the
// body is then SYSTEM_ERR and the caller logs it.
func handlerReply(hdr []byte, start int, xid uint32, out []byte, err error) ([]byte, error) {
	if err == nil && len(out) < len(hdr) {
		err = fmt.Errorf("handler returned a reply shorter than its header (%d < %d bytes)", len(out), len(hdr))
	}
	if err == nil {
		return out, nil
	}
	var ae *AcceptError
	var de *DeniedError
	switch {
	case errors.Is(err, ErrDrop):
		return hdr, ErrDrop
	case errors.As(err, &ae):
		return appendAcceptError(hdr[:start+4], xid, ae), nil
	case errors.As(err, &de):
		return appendDenied(hdr[:start+4], xid, de), nil
	}
	return appendAccepted(hdr[:start+4], xid, SystemErr), err
}

// appendCallHeader appends a call header with a zero XID (filled in once
// the XID is chosen) and an AUTH_NONE verifier.
func appendCallHeader(b []byte, prog, vers, proc uint32, cred OpaqueAuth) []byte {
	b = xdr.AppendUint32(b, 0)
	b = xdr.AppendUint32(b, MsgCall)
	b = xdr.AppendUint32(b, RPCVersion)
	b = xdr.AppendUint32(b, prog)
	b = xdr.AppendUint32(b, vers)
	b = xdr.AppendUint32(b, proc)
	b = cred.Append(b)
	return NoAuth.Append(b)
}

// decodeReply interprets a reply record and decodes its results into res.
// Bytes after the results are tolerated.
func decodeReply(d *xdr.Decoder, rec []byte, prog, vers, proc uint32, res Unmarshaler) error {
	d.Reset(rec)
	d.Uint32() // xid, already matched
	d.Uint32() // REPLY, already checked
	malformed := func() error {
		err := d.Err()
		if err == nil {
			err = errors.New("unknown reply status")
		}
		return fmt.Errorf("rpc: malformed reply to prog %d vers %d proc %d: %w", prog, vers, proc, err)
	}
	switch d.Uint32() {
	case MsgAccepted:
		var verf OpaqueAuth
		verf.Decode(d) // AUTH_NONE or AUTH_SYS: nothing to check
		stat := AcceptStat(d.Uint32())
		if d.Err() != nil {
			return malformed()
		}
		switch stat {
		case Success:
			if res == nil {
				return nil
			}
			res.Decode(d)
			if err := d.Err(); err != nil {
				return fmt.Errorf("rpc: decoding reply to prog %d vers %d proc %d: %w", prog, vers, proc, err)
			}
			return nil
		case ProgMismatch:
			low, high := d.Uint32(), d.Uint32()
			if d.Err() != nil {
				return malformed()
			}
			return &AcceptError{Stat: stat, Low: low, High: high}
		default:
			return &AcceptError{Stat: stat}
		}
	case MsgDenied:
		switch d.Uint32() {
		case RPCMismatch:
			low, high := d.Uint32(), d.Uint32()
			if d.Err() != nil {
				return malformed()
			}
			return &DeniedError{RejectStat: RPCMismatch, Low: low, High: high}
		case AuthError:
			s := AuthStat(d.Uint32())
			if d.Err() != nil {
				return malformed()
			}
			return &DeniedError{RejectStat: AuthError, Auth: s}
		}
	}
	return malformed()
}
