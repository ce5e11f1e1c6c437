package proxy

// The proxy's counts against the hushfs server's own, for a mixed NFS
// workload on several connections.

import (
	"context"
	"fmt"
	"maps"
	"sync"
	"testing"
	"time"

	"hushfs/internal/nfs3"
	"hushfs/internal/rpc"
	"hushfs/internal/server"
)

func TestCountsMatchServer(t *testing.T) {
	// The test acts as root in a root-owned export: no squashing.
	srv, err := server.New(server.Config{Root: t.TempDir(), StateDir: t.TempDir(), Squash: server.NoRootSquash, Logf: t.Logf})
	if err != nil {
		t.Fatal(err)
	}
	rs := rpc.NewServer(rpc.ServerOptions{Logf: t.Logf})
	srv.Register(rs)
	ln := listen(t)
	served := make(chan error, 1)
	go func() { served <- rs.Serve(ln) }()
	// Cleanups run last registered first: the clients and the proxy go
	// before the server.
	t.Cleanup(func() {
		rs.Close()
		if err := <-served; err != nil {
			t.Errorf("rpc server: %v", err)
		}
		srv.Close()
	})

	p := startProxy(t, ln.Addr().String(), 2*time.Millisecond)
	clients := []*rpc.Client{rpcDial(t, p.Addr()), rpcDial(t, p.Addr()), rpcDial(t, p.Addr())}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cred := (&rpc.AuthSysParms{Machine: "proxy-test", UID: 0, GID: 0}).Cred()

	// The test's own tally: a third account to hold both against.
	var mu sync.Mutex
	sent := map[ProcKey]uint64{}
	stable := map[uint32]uint64{}
	call := func(c *rpc.Client, prog, vers, proc uint32, args rpc.Marshaler, res rpc.Unmarshaler) error {
		mu.Lock()
		sent[ProcKey{prog, vers, proc}]++
		mu.Unlock()
		return c.Call(ctx, prog, vers, proc, cred, args, res)
	}
	nfs := func(c *rpc.Client, proc uint32, args rpc.Marshaler, res rpc.Unmarshaler) error {
		return call(c, nfs3.Program, nfs3.Version, proc, args, res)
	}
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}

	// MNT's outcome does not matter here: the call is counted either way.
	var mnt nfs3.MntRes
	must(call(clients[0], nfs3.MountProgram, nfs3.MountVersion, nfs3.MountProcMnt, &nfs3.MntArgs{Path: []byte(srv.Root())}, &mnt))
	must(call(clients[0], nfs3.MountProgram, nfs3.MountVersion, nfs3.MountProcNull, nil, nil))
	root := srv.RootHandle()

	must(nfs(clients[0], nfs3.ProcNull, nil, nil))
	must(nfs(clients[0], nfs3.ProcFsinfo, &nfs3.FsinfoArgs{Root: root}, nil))
	must(nfs(clients[0], nfs3.ProcFsstat, &nfs3.FsstatArgs{Root: root}, nil))
	must(nfs(clients[0], nfs3.ProcPathconf, &nfs3.PathconfArgs{Obj: root}, nil))
	var created nfs3.DirOpRes
	must(nfs(clients[0], nfs3.ProcCreate, &nfs3.CreateArgs{
		Where: nfs3.DirOpArgs{Dir: root, Name: []byte("data")},
		Mode:  nfs3.Unchecked,
		Attr:  nfs3.Sattr{SetMode: true, Mode: 0o644},
	}, &created))
	if created.Status != 0 || !created.Obj.Present {
		t.Fatalf("CREATE: status %v, handle present %v", created.Status, created.Obj.Present)
	}
	file := created.Obj.FH
	must(nfs(clients[0], nfs3.ProcMkdir, &nfs3.MkdirArgs{
		Where: nfs3.DirOpArgs{Dir: root, Name: []byte("dir")},
		Attr:  nfs3.Sattr{SetMode: true, Mode: 0o755},
	}, nil))

	// The bulk, concurrently over all three connections: WRITEs of every
	// stable_how, READs, GETATTRs, LOOKUPs (some of names that do not
	// exist: errors are calls too), ACCESS and READDIRPLUS.
	var wg sync.WaitGroup
	errs := make(chan error, 1000)
	for i := range 60 {
		c := clients[i%len(clients)]
		wg.Add(1)
		go func() {
			defer wg.Done()
			var err error
			switch i % 6 {
			case 0, 1:
				how := nfs3.StableHow(i / 6 % 3)
				data := make([]byte, 4096+i*1000)
				mu.Lock()
				stable[uint32(how)]++
				mu.Unlock()
				var res nfs3.WriteRes
				err = nfs(c, nfs3.ProcWrite, &nfs3.WriteArgs{File: file, Offset: uint64(i) << 16, Count: uint32(len(data)), Stable: how, Data: data}, &res)
				if err == nil && res.Status != 0 {
					err = fmt.Errorf("WRITE: %v", res.Status)
				}
			case 2:
				err = nfs(c, nfs3.ProcRead, &nfs3.ReadArgs{File: file, Offset: uint64(i) << 10, Count: 8192}, nil)
			case 3:
				err = nfs(c, nfs3.ProcGetattr, &nfs3.GetattrArgs{Obj: file}, nil)
			case 4:
				name := []byte("data")
				if i%4 == 0 {
					name = []byte(fmt.Sprint("missing", i))
				}
				err = nfs(c, nfs3.ProcLookup, &nfs3.LookupArgs{What: nfs3.DirOpArgs{Dir: root, Name: name}}, nil)
			case 5:
				if i%2 == 0 {
					err = nfs(c, nfs3.ProcAccess, &nfs3.AccessArgs{Obj: file, Access: nfs3.AccessRead | nfs3.AccessModify}, nil)
				} else {
					err = nfs(c, nfs3.ProcReaddirplus, &nfs3.ReaddirplusArgs{Dir: root, DirCount: 4096, MaxCount: 32768}, nil)
				}
			}
			if err != nil {
				errs <- err
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	for range 2 {
		must(nfs(clients[1], nfs3.ProcCommit, &nfs3.CommitArgs{File: file}, nil))
	}
	must(nfs(clients[2], nfs3.ProcRemove, &nfs3.RemoveArgs{Obj: nfs3.DirOpArgs{Dir: root, Name: []byte("data")}}, nil))
	must(nfs(clients[2], nfs3.ProcRmdir, &nfs3.RmdirArgs{Obj: nfs3.DirOpArgs{Dir: root, Name: []byte("dir")}}, nil))

	got := p.Counts()
	// Per program: the proxy's counts, the server's and the test's own.
	for _, prog := range []struct {
		name        string
		prog, vers  uint32
		serverStats map[uint32]uint64
	}{
		{"NFS", nfs3.Program, nfs3.Version, srv.Stats()},
		{"MOUNT", nfs3.MountProgram, nfs3.MountVersion, srv.MountStats()},
	} {
		proxyStats, ours := map[uint32]uint64{}, map[uint32]uint64{}
		for k, n := range got.Calls {
			if k.Prog == prog.prog && k.Vers == prog.vers {
				proxyStats[k.Proc] = n
			}
		}
		for k, n := range sent {
			if k.Prog == prog.prog && k.Vers == prog.vers {
				ours[k.Proc] = n
			}
		}
		if !maps.Equal(proxyStats, prog.serverStats) {
			t.Errorf("%s calls per procedure:\nproxy  %v\nserver %v", prog.name, proxyStats, prog.serverStats)
		}
		if !maps.Equal(proxyStats, ours) {
			t.Errorf("%s calls per procedure:\nproxy %v\nsent  %v", prog.name, proxyStats, ours)
		}
	}
	if len(got.Calls) != len(sent) {
		t.Errorf("proxy saw procedures %v, test sent %v", got.Calls, sent)
	}
	if !maps.Equal(got.WriteStable, stable) {
		t.Errorf("WRITE stable_how: proxy %v, sent %v", got.WriteStable, stable)
	}
	var total uint64
	for _, n := range sent {
		total += n
	}
	if got.Replies != total || got.Commits != 2 || got.UnparsedCalls+got.UnparsedReplies != 0 || got.Conns != 3 {
		t.Errorf("replies %d (want %d), commits %d, unparsed %d/%d, conns %d",
			got.Replies, total, got.Commits, got.UnparsedCalls, got.UnparsedReplies, got.Conns)
	}
	t.Logf("proxy counts: %d calls over %d procedures, writes by stable_how %v", total, len(got.Calls), got.WriteStable)
}
