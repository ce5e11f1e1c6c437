package rpc

import (
	"fmt"
	"sync"

	"hushfs/internal/xdr"
)

// SysCred returns an AUTH_SYS credential for uid, gid and the auxiliary
// groups gids (at most 16 are sent). The stamp is 0: the credential is then a
// pure function of its inputs, so callers may build it once and reuse it, and
// a retransmitted request stays byte-identical.
func SysCred(uid, gid uint32, gids []uint32, machine string) OpaqueAuth {
	p := AuthSysParms{Machine: machine, UID: uid, GID: gid, GIDs: gids}
	return p.Cred()
}

// SysCreds encodes AUTH_SYS credentials once per identity, for a client
// that calls as many users (a mount daemon calls as each caller). The zero
// value is ready; Machine is the machine name they carry.
type SysCreds struct {
	Machine string
	mu      sync.Mutex
	m       map[string]OpaqueAuth // GUARDED_BY(mu)
}

// Get returns the credential of uid, gid and the groups gids.
func (s *SysCreds) Get(uid, gid uint32, gids []uint32) OpaqueAuth {
	key := make([]byte, 0, 8+4*len(gids))
	key = fmt.Appendf(key, "%d:%d", uid, gid)
	for _, g := range gids {
		key = fmt.Appendf(key, ",%d", g)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if a, ok := s.m[string(key)]; ok {
		return a
	}
	if s.m == nil || len(s.m) > 4096 {
		s.m = map[string]OpaqueAuth{} // bounded: identities are few; a flood just re-encodes
	}
	a := SysCred(uid, gid, gids, s.Machine)
	s.m[string(key)] = a
	return a
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
