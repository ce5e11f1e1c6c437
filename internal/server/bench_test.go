package server

import (
	"context"
	"os"
	"path/filepath"
	"sync"
	"testing"

	"hushfs/internal/nfs3"
	"hushfs/internal/rpc"
)

// Round trips over a real socket, one call at a time or 8 in parallel, as
// root (no credential switch) and as an unprivileged user.
func BenchmarkProcs(b *testing.B) {
	if os.Geteuid() != 0 {
		b.Skip("needs root")
	}
	e := startEnv(b, false)
	os.WriteFile(filepath.Join(e.root, "f"), make([]byte, 1<<20), 0o666)
	for _, who := range []struct {
		name     string
		uid, gid uint32
	}{{"root", 0, 0}, {"user", 1000, 1000}} {
		c := e.client(who.uid, who.gid).c
		root := e.srv.RootHandle()
		var lr nfs3.LookupRes
		c.Call(context.Background(), nfs3.Program, nfs3.Version, nfs3.ProcLookup, rpc.SysCred(who.uid, who.gid, nil, "bench"),
			&nfs3.LookupArgs{What: nfs3.DirOpArgs{Dir: root, Name: []byte("f")}}, &lr)
		f := lr.Obj
		run := func(name string, parallel int, proc uint32, args interface{ Append([]byte) []byte }, bytes int64) {
			b.Run(who.name+"/"+name, func(b *testing.B) {
				b.SetBytes(bytes)
				var wg sync.WaitGroup
				per := b.N/parallel + 1
				for range parallel {
					wg.Add(1)
					go func() {
						defer wg.Done()
						for range per {
							if err := c.Call(context.Background(), nfs3.Program, nfs3.Version, proc, rpc.SysCred(who.uid, who.gid, nil, "bench"), args, nil); err != nil {
								b.Error(err)
								return
							}
						}
					}()
				}
				wg.Wait()
			})
		}
		run("GETATTR", 1, nfs3.ProcGetattr, &nfs3.GetattrArgs{Obj: f}, 0)
		run("GETATTRx8", 8, nfs3.ProcGetattr, &nfs3.GetattrArgs{Obj: f}, 0)
		run("LOOKUP", 1, nfs3.ProcLookup, &nfs3.LookupArgs{What: nfs3.DirOpArgs{Dir: root, Name: []byte("f")}}, 0)
		run("READ4K", 1, nfs3.ProcRead, &nfs3.ReadArgs{File: f, Count: 4096}, 4096)
		run("READ1M", 1, nfs3.ProcRead, &nfs3.ReadArgs{File: f, Count: 1 << 20}, 1<<20)
		run("WRITE4K", 1, nfs3.ProcWrite, &nfs3.WriteArgs{File: f, Count: 4096, Data: make([]byte, 4096)}, 4096)
		run("WRITE1M", 1, nfs3.ProcWrite, &nfs3.WriteArgs{File: f, Count: 1 << 20, Data: make([]byte, 1<<20)}, 1<<20)
		run("READDIRPLUS", 1, nfs3.ProcReaddirplus, &nfs3.ReaddirplusArgs{Dir: root, DirCount: 8192, MaxCount: 32768}, 0)
	}
}
