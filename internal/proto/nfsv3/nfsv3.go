// Package nfsv3 is proto.Server over NFSv3 (RFC 1813): each method one
// call of the procedure it is named after, over internal/rpc with the
// internal/nfs3 codec, and mounting with the MOUNT protocol.
//
// (Not "v3": an import path ending in a version element reads to Go's
// tools as a module's major version, and they would guess the package's
// name to be "proto".)
package nfsv3

import (
	"context"
	"fmt"
	"net"
	"sync"
	"time"

	"hushfs/internal/nfs3"
	"hushfs/internal/proto"
	"hushfs/internal/rpc"
)

// Config says which export to mount and how to reach it.
type Config struct {
	Server    string // host name or address
	Export    string // exported path, as MOUNT knows it
	Port      int    // NFS port; 0: ask the portmapper
	MountPort int    // MOUNT port; 0: ask the portmapper
	// Timeo, Retrans and Hard are nfs(5)'s: the first timeout, the
	// retransmissions before a major timeout, and whether calls go on
	// after it (MOUNT and the portmapper are always soft).
	Timeo   time.Duration
	Retrans int
	Hard    bool
	// Dial connects to addr (host:port); nil dials TCP.
	Dial func(ctx context.Context, addr string) (net.Conn, error)
	// Now is the clock the mount's attributes are timed with; nil: time.Now.
	Now     func() time.Time
	Logf    func(format string, args ...any)
	Machine string // AUTH_SYS machine name
	Hooks   proto.Hooks
}

// Server is a mounted NFSv3 export.
type Server struct {
	nfs     *rpc.Client
	hooks   proto.Hooks
	machine string

	credMu sync.Mutex
	creds  map[string]rpc.OpaqueAuth // GUARDED_BY(credMu): encoded AUTH_SYS per identity
}

var _ proto.Server = (*Server)(nil)

// MaxHandle is NFS3_FHSIZE.
const MaxHandle = nfs3.FHSize

// limits are what NFSv3 can carry: handles of up to 64 bytes, times whose
// seconds are unsigned 32 bits (nfstime3).
var limits = proto.Limits{MaxHandle: nfs3.FHSize, MinTime: 0, MaxTime: 1<<32 - 1}

// Close ends the NFS connection.
func (s *Server) Close() error { return s.nfs.Close() }

// MajorTimeout is closed at the next major timeout of a hard call.
func (s *Server) MajorTimeout() <-chan struct{} { return s.nfs.MajorTimeout() }

// auth returns the AUTH_SYS credential for c, encoded once per identity.
func (s *Server) auth(c *proto.Cred) rpc.OpaqueAuth {
	key := make([]byte, 0, 8+4*len(c.Groups))
	key = fmt.Appendf(key, "%d:%d", c.UID, c.GID)
	for _, g := range c.Groups {
		key = fmt.Appendf(key, ",%d", g)
	}
	s.credMu.Lock()
	defer s.credMu.Unlock()
	if a, ok := s.creds[string(key)]; ok {
		return a
	}
	if len(s.creds) > 4096 {
		clear(s.creds) // bounded: identities are few; a flood just re-encodes
	}
	a := rpc.SysCred(c.UID, c.GID, c.Groups, s.machine)
	s.creds[string(key)] = a
	return a
}

// call sends one NFSv3 request with the caller's credential.
func (s *Server) call(ctx context.Context, c *proto.Cred, proc uint32, args rpc.Marshaler, res rpc.Unmarshaler) error {
	if s.hooks.Calling != nil {
		s.hooks.Calling(ctx, nfs3.ProcName(proc))
	}
	return s.nfs.Call(ctx, nfs3.Program, nfs3.Version, proc, s.auth(c), args, res)
}

// observer turns the RPC client's per-call statistics into the hooks'.
func observer(h proto.Hooks) func(*rpc.CallStats) {
	if h.Finished == nil {
		return nil
	}
	return func(c *rpc.CallStats) {
		h.Finished(&proto.CallStats{
			Name:          procKey(c.Prog, c.Proc),
			Transmissions: c.Transmissions,
			Timeouts:      c.Timeouts,
			BytesSent:     c.BytesSent,
			BytesReceived: c.BytesReceived,
			Queue:         c.Queue,
			RTT:           c.RTT,
			Execute:       c.Execute,
			Err:           c.Err,
		})
	}
}

// procKey names a call for the statistics: NFS procedures by their RFC
// names, MOUNT's and the portmapper's prefixed with their program.
func procKey(prog, proc uint32) string {
	switch prog {
	case nfs3.Program:
		return nfs3.ProcName(proc)
	case nfs3.MountProgram:
		return "MOUNT:" + nfs3.MountProcName(proc)
	case rpc.PortmapProgram:
		return "PORTMAP:" + map[uint32]string{3: "GETPORT"}[proc]
	}
	return "OTHER"
}
