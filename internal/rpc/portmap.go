package rpc

import (
	"context"
	"fmt"

	"hushfs/internal/xdr"
)

// Portmapper protocol, version 2 (RFC 1833 §3).
const (
	PortmapProgram = 100000
	PortmapVersion = 2
	PortmapPort    = 111
	IPProtoTCP     = 6
	IPProtoUDP     = 17
)

// pmapProcGetPort is PMAPPROC_GETPORT.
const pmapProcGetPort = 3

// pmapMapping is the portmapper's struct mapping.
type pmapMapping struct {
	Prog, Vers, Prot, Port uint32
}

func (m *pmapMapping) Append(b []byte) []byte {
	b = xdr.AppendUint32(b, m.Prog)
	b = xdr.AppendUint32(b, m.Vers)
	b = xdr.AppendUint32(b, m.Prot)
	return xdr.AppendUint32(b, m.Port)
}

type pmapPort struct{ port uint32 }

func (p *pmapPort) Decode(d *xdr.Decoder) { p.port = d.Uint32() }

// GetPort asks a portmapper (rpcbind) for the port of prog/vers over proto
// (IPProtoTCP or IPProtoUDP) with PMAPPROC_GETPORT. A program that is not
// registered is an error.
func GetPort(ctx context.Context, c *Client, prog, vers, proto uint32) (int, error) {
	var res pmapPort
	args := pmapMapping{Prog: prog, Vers: vers, Prot: proto}
	if err := c.Call(ctx, PortmapProgram, PortmapVersion, pmapProcGetPort, NoAuth, &args, &res); err != nil {
		return 0, fmt.Errorf("rpc: portmapper GETPORT prog %d vers %d proto %d: %w", prog, vers, proto, err)
	}
	if res.port == 0 {
		return 0, fmt.Errorf("rpc: portmapper: prog %d vers %d proto %d is not registered", prog, vers, proto)
	}
	if res.port > 65535 {
		return 0, fmt.Errorf("rpc: portmapper: prog %d vers %d proto %d: invalid port %d", prog, vers, proto, res.port)
	}
	return int(res.port), nil
}
