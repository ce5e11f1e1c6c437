package rpc

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"hushfs/internal/xdr"
)

// portmapper answers PMAPPROC_GETPORT from a fixed table, as a stand-in for
// rpcbind that does not touch the host's port 111.
type portmapper map[[3]uint32]uint32

func (pm portmapper) ServeRPC(ctx context.Context, call *Call, reply []byte) ([]byte, error) {
	switch call.Proc {
	case 0:
		return reply, nil
	case pmapProcGetPort:
		d := xdr.NewDecoder(call.Args)
		prog, vers, prot := d.Uint32(), d.Uint32(), d.Uint32()
		d.Uint32() // port: ignored
		if d.Err() != nil || d.Remaining() != 0 {
			return reply, ErrGarbageArgs
		}
		return xdr.AppendUint32(reply, pm[[3]uint32{prog, vers, prot}]), nil
	}
	return reply, ErrProcUnavail
}

func TestGetPort(t *testing.T) {
	s, ln := startServer(t, ServerOptions{}, &testHandler{})
	s.Register(PortmapProgram, PortmapVersion, portmapper{
		{100003, 3, IPProtoTCP}: 2049,
		{100005, 3, IPProtoTCP}: 20048,
		{100005, 3, IPProtoUDP}: 20049,
	})
	c := dialClient(t, ln.Addr().String(), ClientOptions{Timeout: 5 * time.Second})
	ctx := context.Background()
	for _, tc := range []struct {
		prog, vers, proto uint32
		want              int
	}{
		{100003, 3, IPProtoTCP, 2049},
		{100005, 3, IPProtoTCP, 20048},
		{100005, 3, IPProtoUDP, 20049},
	} {
		got, err := GetPort(ctx, c, tc.prog, tc.vers, tc.proto)
		if err != nil || got != tc.want {
			t.Errorf("GetPort(%d, %d, %d) = %d, %v; want %d", tc.prog, tc.vers, tc.proto, got, err, tc.want)
		}
	}
	if _, err := GetPort(ctx, c, 100003, 4, IPProtoTCP); err == nil || !strings.Contains(err.Error(), "not registered") {
		t.Errorf("unregistered program: %v", err)
	}
	// A server without a portmapper: the RPC error comes through.
	_, ln2 := startServer(t, ServerOptions{}, &testHandler{})
	c2 := dialClient(t, ln2.Addr().String(), ClientOptions{Timeout: 5 * time.Second})
	var ae *AcceptError
	if _, err := GetPort(ctx, c2, 100003, 3, IPProtoTCP); err == nil || !errors.As(err, &ae) || ae.Stat != ProgUnavail {
		t.Errorf("no portmapper: %v", err)
	}
}
