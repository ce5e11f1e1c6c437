package server

import (
	"errors"
	"fmt"
	"net"
	"net/netip"

	"hushfs/internal/rpc"
)

// accessConfig is the validated client-access part of a Config.
type accessConfig struct {
	squash           Squash
	anonUID, anonGID uint32
	allow            []netip.Prefix
}

func newAccessConfig(cfg *Config) (accessConfig, error) {
	a := accessConfig{squash: cfg.Squash, anonUID: cfg.AnonUID, anonGID: cfg.AnonGID}
	switch a.squash {
	case RootSquash, NoRootSquash, AllSquash:
	default:
		return a, fmt.Errorf("unknown squash mode %d", int(a.squash))
	}
	if a.anonUID == 0 {
		a.anonUID = DefaultAnonID
	}
	if a.anonGID == 0 {
		a.anonGID = DefaultAnonID
	}
	// -1 is the kernel's "leave unchanged", never an identity.
	if a.anonUID == ^uint32(0) || a.anonGID == ^uint32(0) {
		return a, errors.New("anonymous uid and gid must not be 4294967295 (-1)")
	}
	for _, p := range cfg.Allow {
		np, err := normalizePrefix(p)
		if err != nil {
			return a, err
		}
		a.allow = append(a.allow, np)
	}
	return a, nil
}

// normalizePrefix masks the host bits and turns an IPv4-mapped IPv6 prefix
// (::ffff:10.0.0.0/104) into the IPv4 prefix it means, since client
// addresses are compared unmapped.
func normalizePrefix(p netip.Prefix) (netip.Prefix, error) {
	if !p.IsValid() {
		return p, fmt.Errorf("invalid allowed network %v", p)
	}
	if p.Addr().Zone() != "" {
		return p, fmt.Errorf("allowed network %v: zones are not supported", p)
	}
	if p.Addr().Is4In6() {
		if p.Bits() < 96 {
			return p, fmt.Errorf("allowed network %v: an IPv4-mapped prefix needs at least 96 bits", p)
		}
		p = netip.PrefixFrom(p.Addr().Unmap(), p.Bits()-96)
	}
	return p.Masked(), nil
}

// privilegedPorts is the range of source ports only root may bind.
const privilegedPorts = 1024

// peerOf returns the address and port of the call's peer, IPv4-mapped
// addresses unmapped and without zone. ok is false when the transport has
// no IP peer address.
func peerOf(call *rpc.Call) (netip.AddrPort, bool) {
	if call.Conn == nil || call.Conn.RemoteAddr == nil {
		return netip.AddrPort{}, false
	}
	var ap netip.AddrPort
	switch a := call.Conn.RemoteAddr.(type) {
	case *net.TCPAddr:
		ap = a.AddrPort()
	case *net.UDPAddr:
		ap = a.AddrPort()
	default:
		var err error
		if ap, err = netip.ParseAddrPort(a.String()); err != nil {
			return netip.AddrPort{}, false
		}
	}
	if !ap.IsValid() {
		return netip.AddrPort{}, false
	}
	return netip.AddrPortFrom(ap.Addr().Unmap().WithZone(""), ap.Port()), true
}

// admitted reports whether the call's peer may use the export: its address
// lies in an allowed network (when a list is configured) and, with
// SecurePort, its source port is privileged.
func (s *Server) admitted(call *rpc.Call) bool { return s.refusal(call) == "" }

// refusal is why the call's peer may not use the export, or "" if it may.
// A peer whose address is unknown is admitted only when no restriction is
// configured.
func (s *Server) refusal(call *rpc.Call) string {
	if len(s.allow) == 0 && !s.secure {
		return ""
	}
	ap, ok := peerOf(call)
	if !ok {
		return "no IP peer address"
	}
	if s.secure && (ap.Port() == 0 || ap.Port() >= privilegedPorts) {
		return fmt.Sprintf("source port %d is not privileged", ap.Port())
	}
	if len(s.allow) == 0 {
		return ""
	}
	addr := ap.Addr()
	for _, p := range s.allow {
		if p.Contains(addr) {
			return ""
		}
	}
	return "address not in the allowed networks"
}

// errNotAdmitted is how an NFS call from a peer that may not use the export
// is denied: AUTH_ERROR with AUTH_TOOWEAK, "rejected for security reasons"
// (RFC 5531 §9). AUTH_REJECTEDCRED would tell the client to begin a new
// session and try again with a fresh credential, which cannot help: the
// refusal is about where the call comes from, not about the credential, and
// it stands until the server's configuration changes.
var errNotAdmitted = rpc.AuthErr(rpc.AuthTooWeak)
