package client

import (
	"context"
	"fmt"
	"testing"
	"time"

	"hushfs/internal/xdr"
)

// recode decodes a reply's results as a T, lets change alter them and
// encodes them again: how a hostileFront's rewrite breaks one rule of a
// real server's reply. Results that do not decode go out unchanged.
func recode[T any, P interface {
	*T
	Decode(*xdr.Decoder)
	Append([]byte) []byte
}](t *testing.T, res []byte, change func(P)) []byte {
	var v T
	p := P(&v)
	d := xdr.NewDecoder(res)
	p.Decode(d)
	if d.Err() != nil {
		t.Errorf("decoding a %T: %v", v, d.Err())
		return res
	}
	change(p)
	return p.Append(nil)
}

// mountViaWith is mountVia with the caller's clock and log.
func (ts *testServer) mountViaWith(t *testing.T, nfsPort int, opts string, now func() time.Time, logf func(string, ...any)) *FS {
	t.Helper()
	o, err := ParseOptions(fmt.Sprintf("port=%d,mountport=%d,%s", nfsPort, port(ts.mountL.Addr()), opts))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	fs, err := Mount(ctx, Config{Server: "127.0.0.1", Export: ts.srv.Root(), Options: o, Now: now, Logf: logf})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { fs.Close(context.Background()) })
	return fs
}

// readAsKernel reads a file as the kernel does: requests of 128 KiB from
// offset 0 until one comes back short (the end of the file, to FUSE).
func readAsKernel(t *testing.T, ctx context.Context, fs *FS, fh uint64) ([]byte, error) {
	t.Helper()
	const req = 128 << 10
	var out []byte
	buf := make([]byte, req)
	for off := uint64(0); ; off += req {
		n, err := fs.Read(ctx, root, fh, off, buf)
		if err != nil {
			return out, err
		}
		out = append(out, buf[:n]...)
		if n < req {
			return out, nil
		}
	}
}
