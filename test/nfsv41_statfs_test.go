package test

import (
	"context"
	"net"
	"sync"
	"testing"
	"time"

	"hushfs/internal/proto"
	"hushfs/internal/proto/nfsv41"
	"hushfs/test/harness"
)

// TestNFSv41StatfsFromMount: the mount's COMPOUND brings the export's
// space attributes, and a statfs of a file on the export's file system
// right after is answered from them with no COMPOUND (the same sizes as
// the server's FSSTAT); not for another file system, not once the mount
// has sent anything that may change the file system (a create), not
// from a second after the mount on.
func TestNFSv41StatfsFromMount(t *testing.T) {
	g := harness.StartGanesha(t, harness.GaneshaOptions{NFSv4: true})
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	var log compoundLog
	var mu sync.Mutex
	now := time.Now()
	clock := func() time.Time { mu.Lock(); defer mu.Unlock(); return now }
	advance := func(d time.Duration) { mu.Lock(); now = now.Add(d); mu.Unlock() }
	mount := func() (*nfsv41.Server, proto.Export) {
		t.Helper()
		srv, exp, err := nfsv41.Mount(ctx, nfsv41.Config{
			Server: g.Addr, Export: g.ExportPath, Port: g.NFSPort, Timeo: 10 * time.Second, Retrans: 2,
			Dial: func(ctx context.Context, addr string) (net.Conn, error) { return g.NS.Dial(ctx, addr) },
			Logf: t.Logf, Hooks: log.hooks(), Now: clock,
		}, &proto.Cred{})
		if err != nil {
			t.Fatalf("mount over NFSv4.1: %v", err)
		}
		return srv, exp
	}
	c := &proto.Cred{}
	// known reports whether a statfs of a file on fsid is answered with no
	// call, and checks what it answers.
	known := func(srv *nfsv41.Server, fsid proto.Fsid) bool {
		t.Helper()
		r, ok := srv.KnownFsStat(fsid)
		if ok && (r.Tbytes == 0 || r.Tfiles == 0 || r.Abytes > r.Tbytes || r.Attr.Present) {
			t.Errorf("statfs from the mount: %+v, want the sizes and no attributes", r)
		}
		return ok
	}

	srv, exp := mount()
	defer srv.Close()
	if len(log.take()) != 1 {
		t.Errorf("the mount: want one COMPOUND")
	}
	fsid := exp.RootAttrs[len(exp.RootAttrs)-1].Attr.Fsid
	real, err := srv.FsStat(ctx, c, exp.Root)
	okStatus(t, "statfs", err, real.Status)
	if !known(srv, fsid) {
		t.Errorf("statfs right after the mount (and a GETATTR-only COMPOUND) asks the server")
	}
	if r, _ := srv.KnownFsStat(fsid); r.Tbytes != real.Tbytes {
		t.Errorf("statfs from the mount: %d bytes in all, the server says %d", r.Tbytes, real.Tbytes)
	}
	if known(srv, proto.Fsid{Major: fsid.Major + 1, Minor: fsid.Minor}) {
		t.Errorf("another file system's statfs answered from the export's")
	}
	cr, err := srv.Create(ctx, c, exp.Root, "f", proto.CreateHow{Mode: proto.Unchecked})
	okStatus(t, "create", err, cr.Status)
	if known(srv, fsid) {
		t.Errorf("statfs after a create answered from before it")
	}

	srv2, exp2 := mount()
	defer srv2.Close()
	fsid2 := exp2.RootAttrs[len(exp2.RootAttrs)-1].Attr.Fsid
	if !known(srv2, fsid2) {
		t.Errorf("statfs right after a second mount asks the server")
	}
	advance(time.Second)
	if known(srv2, fsid2) {
		t.Errorf("statfs a second after the mount answered from it")
	}
}
