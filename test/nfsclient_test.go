package test

import (
	"context"
	"errors"
	"net"
	"os"
	"testing"
	"time"

	"hushfs/internal/nfs3"
	"hushfs/internal/rpc"
	"hushfs/test/harness"
)

func TestMain(m *testing.M) {
	code := m.Run()
	harness.CleanupBuild()
	os.Exit(code)
}

// rootCred is the AUTH_SYS credential every test call carries: uid 0 on
// an export without root squashing, so permissions never get in the way of
// what a test means to check.
var rootCred = rpc.SysCred(0, 0, nil, "hushfs-e2e")

// clientOpts bounds every call: 5 s per transmission, one retransmission,
// then fail (soft).
func clientOpts(dial func(ctx context.Context) (net.Conn, error)) rpc.ClientOptions {
	return rpc.ClientOptions{Dial: dial, Timeout: 5 * time.Second, Retrans: 1}
}

// tcpDialer dials addr on the host.
func tcpDialer(addr string) func(ctx context.Context) (net.Conn, error) {
	return func(ctx context.Context) (net.Conn, error) {
		var d net.Dialer
		return d.DialContext(ctx, "tcp", addr)
	}
}

// newClient connects an RPC client and closes it at cleanup.
func newClient(t testing.TB, ctx context.Context, dial func(ctx context.Context) (net.Conn, error)) *rpc.Client {
	t.Helper()
	c, err := rpc.NewClient(ctx, clientOpts(dial))
	if err != nil {
		t.Fatalf("connect: %v", err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// mountRoot sends MOUNT v3 MNT for path and returns the root handle.
func mountRoot(t testing.TB, ctx context.Context, mc *rpc.Client, path string) nfs3.FH {
	t.Helper()
	var res nfs3.MntRes
	args := nfs3.MntArgs{Path: []byte(path)}
	if err := mc.Call(ctx, nfs3.MountProgram, nfs3.MountVersion, nfs3.MountProcMnt, rootCred, &args, &res); err != nil {
		t.Fatalf("MNT %s: %v", path, err)
	}
	if res.Status != nfs3.MntOK {
		t.Fatalf("MNT %s: %v", path, res.Status)
	}
	if len(res.FH) == 0 {
		t.Fatalf("MNT %s: empty root handle", path)
	}
	return res.FH
}

// nfsc calls NFSv3 procedures for a test; a transport or RPC-level error
// fails the test at once, the NFS status is the caller's to check.
type nfsc struct {
	t   testing.TB
	ctx context.Context
	c   *rpc.Client
}

func (n *nfsc) call(proc uint32, args rpc.Marshaler, res rpc.Unmarshaler) {
	n.t.Helper()
	if err := n.c.Call(n.ctx, nfs3.Program, nfs3.Version, proc, rootCred, args, res); err != nil {
		n.t.Fatalf("%s: %v", nfs3.ProcName(proc), err)
	}
}

func (n *nfsc) getattr(fh nfs3.FH) nfs3.GetattrRes {
	n.t.Helper()
	var res nfs3.GetattrRes
	n.call(nfs3.ProcGetattr, &nfs3.GetattrArgs{Obj: fh}, &res)
	return res
}

// lookup returns the handle and attributes of name in dir, failing the
// test unless the status is OK.
func (n *nfsc) lookup(dir nfs3.FH, name string) (nfs3.FH, nfs3.Fattr) {
	n.t.Helper()
	res := n.lookupRes(dir, name)
	if res.Status != nfs3.OK {
		n.t.Fatalf("LOOKUP %q: %v", name, res.Status)
	}
	if !res.ObjAttr.Present {
		n.t.Fatalf("LOOKUP %q: no attributes", name)
	}
	return res.Obj, res.ObjAttr.Attr
}

func (n *nfsc) lookupRes(dir nfs3.FH, name string) nfs3.LookupRes {
	n.t.Helper()
	var res nfs3.LookupRes
	n.call(nfs3.ProcLookup, &nfs3.LookupArgs{What: nfs3.DirOpArgs{Dir: dir, Name: []byte(name)}}, &res)
	return res
}

// readAll reads a whole file with READs of at most chunk bytes.
func (n *nfsc) readAll(fh nfs3.FH, chunk uint32) []byte {
	n.t.Helper()
	var out []byte
	for {
		var res nfs3.ReadRes
		n.call(nfs3.ProcRead, &nfs3.ReadArgs{File: fh, Offset: uint64(len(out)), Count: chunk}, &res)
		if res.Status != nfs3.OK {
			n.t.Fatalf("READ at %d: %v", len(out), res.Status)
		}
		if int(res.Count) != len(res.Data) {
			n.t.Fatalf("READ at %d: count %d but %d data bytes", len(out), res.Count, len(res.Data))
		}
		out = append(out, res.Data...)
		if res.EOF {
			return out
		}
		if res.Count == 0 {
			n.t.Fatalf("READ at %d: zero bytes without eof", len(out))
		}
	}
}

// statusIn reports whether got is one of want.
func statusIn(got nfs3.Status, want ...nfs3.Status) bool {
	for _, w := range want {
		if got == w {
			return true
		}
	}
	return false
}

// isAccept reports whether err is an accepted-but-failed RPC reply with stat.
func isAccept(err error, stat rpc.AcceptStat) bool {
	var ae *rpc.AcceptError
	return errors.As(err, &ae) && ae.Stat == stat
}
