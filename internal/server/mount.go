package server

import (
	"context"
	"net"
	"path"
	"slices"

	"hushfs/internal/nfs3"
	"hushfs/internal/rpc"
)

// maxMountRecords bounds the DUMP list, which any client can grow.
const maxMountRecords = 4096

// mountEntry is one (client host, mounted path) pair for DUMP.
type mountEntry struct {
	host, dir string
}

// mountHandler serves MOUNT version 3.
type mountHandler struct{ s *Server }

// exportPath reports whether p names the export: its absolute path (as
// configured or with symbolic links resolved) or "/".
func (s *Server) exportPath(p []byte) bool {
	if len(p) == 0 || p[0] != '/' {
		return false
	}
	c := path.Clean(string(p))
	return c == "/" || c == s.root || c == s.rootArg
}

func clientHost(call *rpc.Call) string {
	if call.Conn == nil || call.Conn.RemoteAddr == nil {
		return "unknown"
	}
	a := call.Conn.RemoteAddr.String()
	if h, _, err := net.SplitHostPort(a); err == nil {
		return h
	}
	return a
}

// clientAddr is the peer's address and port, for logs.
func clientAddr(call *rpc.Call) string {
	if call.Conn == nil || call.Conn.RemoteAddr == nil {
		return "unknown"
	}
	return call.Conn.RemoteAddr.String()
}

// ServeRPC implements rpc.Handler.
func (h mountHandler) ServeRPC(ctx context.Context, call *rpc.Call, reply []byte) ([]byte, error) {
	s := h.s
	if call.Proc >= nfs3.NumMountProcs {
		return nil, rpc.ErrProcUnavail
	}
	s.mountCalls[call.Proc].Add(1)
	switch call.Proc {
	case nfs3.MountProcNull:
		return reply, nil
	case nfs3.MountProcMnt:
		var a nfs3.MntArgs
		if err := decodeArgs(call, &a); err != nil {
			return nil, err
		}
		r := nfs3.MntRes{Status: nfs3.MntErrNoEnt}
		// Only MNT is refused: NULL, EXPORT and DUMP reveal no more than
		// the export's path (as showmount shows anyone), and every NFS
		// call is checked again.
		why := s.refusal(call)
		switch {
		case why != "":
			r.Status = nfs3.MntErrAcces
			s.logf("hushfs server: refusing MNT from %s: %s", clientAddr(call), why)
		case s.exportPath(a.Path):
			r = nfs3.MntRes{Status: nfs3.MntOK, FH: s.rootFH, AuthFlavors: []uint32{rpc.AuthSys, rpc.AuthNone}}
			s.recordMount(clientHost(call), string(a.Path))
		}
		return r.Append(reply), nil
	case nfs3.MountProcDump:
		r := nfs3.DumpRes{Mounts: s.mountList()}
		return r.Append(reply), nil
	case nfs3.MountProcUmnt:
		var a nfs3.UmntArgs
		if err := decodeArgs(call, &a); err != nil {
			return nil, err
		}
		s.forgetMount(clientHost(call), string(a.Path))
		return reply, nil
	case nfs3.MountProcUmntall:
		s.forgetMount(clientHost(call), "")
		return reply, nil
	case nfs3.MountProcExport:
		r := nfs3.ExportRes{Exports: []nfs3.ExportNode{{Dir: []byte(s.root)}}}
		return r.Append(reply), nil
	}
	return nil, rpc.ErrProcUnavail
}

func (s *Server) recordMount(host, dir string) {
	s.mountsMu.Lock()
	defer s.mountsMu.Unlock()
	if len(s.mounts) < maxMountRecords {
		s.mounts[mountEntry{host, dir}] = struct{}{}
	}
}

// forgetMount removes host's record of dir, or all of host's with dir "".
func (s *Server) forgetMount(host, dir string) {
	s.mountsMu.Lock()
	defer s.mountsMu.Unlock()
	for m := range s.mounts {
		if m.host == host && (dir == "" || m.dir == dir) {
			delete(s.mounts, m)
		}
	}
}

func (s *Server) mountList() []nfs3.MountEntry {
	s.mountsMu.Lock()
	ms := make([]mountEntry, 0, len(s.mounts))
	for m := range s.mounts {
		ms = append(ms, m)
	}
	s.mountsMu.Unlock()
	slices.SortFunc(ms, func(a, b mountEntry) int {
		if a.host != b.host {
			if a.host < b.host {
				return -1
			}
			return 1
		}
		if a.dir < b.dir {
			return -1
		}
		if a.dir > b.dir {
			return 1
		}
		return 0
	})
	out := make([]nfs3.MountEntry, len(ms))
	for i, m := range ms {
		out[i] = nfs3.MountEntry{Hostname: []byte(m.host), Directory: []byte(m.dir)}
	}
	return out
}
