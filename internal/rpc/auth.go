package rpc

import "hushfs/internal/xdr"

// SysCred returns an AUTH_SYS credential for uid, gid and the auxiliary
// groups gids (at most 16 are sent). The stamp is 0: the credential is then a
// pure function of its inputs, so callers may build it once and reuse it, and
// a retransmitted request stays byte-identical.
func SysCred(uid, gid uint32, gids []uint32, machine string) OpaqueAuth {
	p := AuthSysParms{Machine: machine, UID: uid, GID: gid, GIDs: gids}
	return p.Cred()
}

// AuthSys decodes the call's AUTH_SYS credential. It reports false when the
// credential is of another flavor or does not decode. The result does not
// alias the call's buffers and may be kept.
func (c *Call) AuthSys() (AuthSysParms, bool) {
	var p AuthSysParms
	if c.Cred.Flavor != AuthSys {
		return p, false
	}
	var d xdr.Decoder
	d.Reset(c.Cred.Body)
	p.Decode(&d)
	if d.Err() != nil || d.Remaining() != 0 {
		return AuthSysParms{}, false
	}
	return p, true
}

// validAuthSys reports whether body is exactly one well-formed authsys_parms
// within the protocol's limits. It checks without allocating, for the
// server's per-call path.
func validAuthSys(body []byte) bool {
	var d xdr.Decoder
	d.Reset(body)
	d.Uint32()               // stamp
	d.Opaque(MaxMachineName) // machine name
	d.Uint32()               // uid
	d.Uint32()               // gid
	n := d.ArrayLen(MaxAuthSysGIDs, 4)
	for i := 0; i < n; i++ {
		d.Uint32()
	}
	return d.Err() == nil && d.Remaining() == 0
}
