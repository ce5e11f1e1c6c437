package client

import (
	"context"
	"fmt"
	"net"
	"testing"
	"time"

	"hushfs/internal/nfs3"
	"hushfs/internal/rpc"
	"hushfs/internal/xdr"
)

type rawArgs []byte

func (r rawArgs) Append(b []byte) []byte { return append(b, r...) }

type rawRes struct{ b []byte }

func (r *rawRes) Decode(d *xdr.Decoder) { r.b = append(r.b[:0], d.Rest()...) }

// rewriteFunc sees every NFS call a hostileFront forwards: its procedure,
// its arguments and the real server's results. It returns the results to
// send instead (res itself to pass them on), or nil to send none at all
// (the call then goes unanswered, as by a server that lost it).
type rewriteFunc func(proc uint32, args, res []byte) []byte

// hostileFront is a misbehaving NFSv3 server made of a real one: it
// forwards every NFS call to backend and lets rewrite change the results,
// so a test can make a real server's replies break the rules one at a time
// (cookies that loop, short READs, ctimes going back, absurd FSINFO sizes,
// verifiers that never settle, names that cannot be names).
func hostileFront(t *testing.T, backend string, rewrite rewriteFunc) (port int) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	up, err := rpc.Dial(ctx, backend, rpc.ClientOptions{})
	if err != nil {
		t.Fatal(err)
	}
	rs := rpc.NewServer(rpc.ServerOptions{})
	rs.Register(nfs3.Program, nfs3.Version, rpc.HandlerFunc(func(ctx context.Context, call *rpc.Call, reply []byte) ([]byte, error) {
		var res rawRes
		if err := up.Call(ctx, nfs3.Program, nfs3.Version, call.Proc, call.Cred, rawArgs(call.Args), &res); err != nil {
			return nil, rpc.ErrSystem
		}
		out := rewrite(call.Proc, call.Args, res.b)
		if out == nil {
			<-ctx.Done() // never answered; the connection's end releases the handler
			return nil, ctx.Err()
		}
		return append(reply, out...), nil
	}))
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go rs.Serve(l)
	t.Cleanup(func() {
		rs.Close()
		up.Close()
	})
	return l.Addr().(*net.TCPAddr).Port
}

// mountVia mounts ts's export with its NFS calls sent to the given port (a
// hostileFront) and the MOUNT protocol to the real server.
func (ts *testServer) mountVia(t *testing.T, nfsPort int, opts string) *FS {
	t.Helper()
	o, err := ParseOptions(fmt.Sprintf("port=%d,mountport=%d,%s", nfsPort, port(ts.mountL.Addr()), opts))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	fs, err := Mount(ctx, Config{Server: "127.0.0.1", Export: ts.srv.Root(), Options: o})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { fs.Close(context.Background()) })
	return fs
}
