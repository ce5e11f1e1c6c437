package client

import (
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"sync/atomic"
	"testing"

	"hushfs/internal/nfs3"
	"hushfs/internal/xdr"
)

// badCookieFront forwards NFS calls to a real server and answers the first
// `inject` READDIR/READDIRPLUS calls with a non-zero cookie with
// NFS3ERR_BAD_COOKIE, as a server does whose cookies went stale.
func badCookieFront(t *testing.T, backend string, inject int32) (port int, injected *atomic.Int32) {
	t.Helper()
	injected = &atomic.Int32{}
	port = hostileFront(t, backend, func(proc uint32, args, res []byte) []byte {
		if proc == nfs3.ProcReaddir || proc == nfs3.ProcReaddirplus {
			d := xdr.NewDecoder(args)
			var fh nfs3.FH
			fh.Decode(d)
			if cookie := d.Uint64(); cookie != 0 && injected.Load() < inject {
				injected.Add(1)
				return (&nfs3.ReaddirRes{Status: nfs3.ErrBadCookie}).Append(nil)
			}
		}
		return res
	})
	return port, injected
}

// TestBadCookieRestartSkipsReturnedNames: when the server rejects a cookie
// mid-listing, the listing restarts from the beginning but the reader gets
// every name exactly once and the listing ends.
func TestBadCookieRestartSkipsReturnedNames(t *testing.T) {
	for _, opts := range []string{"nordirplus", "rdirplus"} {
		t.Run(opts, func(t *testing.T) {
			ts := startServer(t)
			const n = 3000
			sub := filepath.Join(ts.dir, "big")
			os.Mkdir(sub, 0o755)
			for i := 0; i < n; i++ {
				os.WriteFile(filepath.Join(sub, "f"+strconv.Itoa(i)), nil, 0o644)
			}
			port, injected := badCookieFront(t, ts.nfsL.Addr().String(), 2)
			o, _ := ParseOptions(fmt.Sprintf("port=%d,mountport=%d,rsize=4096,%s", port, ts.mountL.Addr().(*net.TCPAddr).Port, opts))
			ctx := ctxT(t)
			fs, err := Mount(ctx, Config{Server: "127.0.0.1", Export: ts.srv.Root(), Options: o})
			if err != nil {
				t.Fatal(err)
			}
			defer fs.Close(ctx)
			e, err := fs.Lookup(ctx, root, RootID, "big")
			if err != nil {
				t.Fatal(err)
			}
			dh, err := fs.OpenDir(ctx, root, e.Node)
			if err != nil {
				t.Fatal(err)
			}
			seen := map[string]int{}
			var off uint64
			refs := map[NodeID]uint64{}
			for calls := 0; ; calls++ {
				got := 0
				err := fs.ReadDir(ctx, root, dh, off, opts == "rdirplus", func(de *DirEntry) bool {
					if got == 50 {
						return false
					}
					got++
					seen[de.Name]++
					off = de.Cookie
					if de.Entry.Node != 0 {
						refs[de.Entry.Node]++
					}
					return true
				})
				if err != nil {
					t.Fatal(err)
				}
				if got == 0 {
					break
				}
				if calls > 10*n {
					t.Fatal("the listing does not end")
				}
			}
			fs.ReleaseDir(dh)
			if injected.Load() != 2 {
				t.Fatalf("injected %d BAD_COOKIE replies, want 2 (is the listing continuing by cookie?)", injected.Load())
			}
			for i := 0; i < n; i++ {
				if c := seen["f"+strconv.Itoa(i)]; c != 1 {
					t.Fatalf("f%d listed %d times", i, c)
				}
			}
			for name, c := range seen {
				if c != 1 {
					t.Fatalf("%q listed %d times", name, c)
				}
			}
			for id, k := range refs {
				fs.Forget(id, k)
			}
		})
	}
}
