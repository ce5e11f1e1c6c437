package server

import (
	"context"
	"errors"
	"net"
	"os"
	"path/filepath"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"hushfs/internal/nfs3"
	"hushfs/internal/rpc"
)

// env is an exported directory served on an ephemeral port of 127.0.0.1.
type env struct {
	t     testing.TB
	root  string
	state string
	srv   *Server
	rs    *rpc.Server
	addr  string
	done  chan error
	// tune, if set, adjusts the configuration before each start.
	tune func(*Config)
	// samePort: a restart listens on the address of the start before, as
	// a restarted server does (clients reconnect there).
	samePort bool
	// cbClients counts v4cb's clients: each is a client record of its own.
	cbClients int
}

func requireRoot(t testing.TB) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("the server needs root (CAP_DAC_READ_SEARCH, credential switching)")
	}
}

// startEnv exports a fresh temporary directory.
func startEnv(t testing.TB, ro bool) *env {
	t.Helper()
	return startEnvTuned(t, ro, nil)
}

func startEnvTuned(t testing.TB, ro bool, tune func(*Config)) *env {
	t.Helper()
	requireRoot(t)
	base := t.TempDir()
	// t.TempDir's parents are 0700: make the path searchable for the
	// unprivileged identities the tests use.
	for p := base; p != "/" && p != os.TempDir(); p = filepath.Dir(p) {
		os.Chmod(p, 0o755)
	}
	root := filepath.Join(base, "export")
	if err := os.Mkdir(root, 0o755); err != nil {
		t.Fatal(err)
	}
	e := &env{t: t, root: root, state: filepath.Join(base, "state"), tune: tune}
	e.start(ro)
	t.Cleanup(e.stop)
	return e
}

func (e *env) start(ro bool) {
	e.t.Helper()
	// The tests act as root and expect root's powers unless they tune the
	// squashing themselves.
	// Recalls are answered NFS4ERR_DELAY at once, as the tests of the
	// recall path expect; TestV4RecallWaited tunes the wait in.
	cfg := Config{Root: e.root, StateDir: e.state, ReadOnly: ro, Squash: NoRootSquash, Logf: e.t.Logf, RecallWait: -1}
	if e.tune != nil {
		e.tune(&cfg)
	}
	srv, err := New(cfg)
	if err != nil {
		e.t.Fatal(err)
	}
	addr := "127.0.0.1:0"
	if e.samePort && e.addr != "" {
		addr = e.addr
	}
	l, err := net.Listen("tcp", addr)
	if err != nil {
		srv.Close()
		e.t.Fatal(err)
	}
	rs := rpc.NewServer(rpc.ServerOptions{Logf: e.t.Logf})
	srv.Register(rs)
	e.srv, e.rs, e.addr = srv, rs, l.Addr().String()
	e.done = make(chan error, 1)
	go func() { e.done <- rs.Serve(l) }()
}

// stop shuts the server down (idempotent).
func (e *env) stop() {
	if e.rs == nil {
		return
	}
	e.rs.Close()
	select {
	case <-e.done:
	case <-time.After(10 * time.Second):
		e.t.Error("rpc server did not stop")
	}
	e.srv.Close()
	e.rs, e.srv = nil, nil
}

// restart stops the server and starts a new one on the same directory and
// state directory.
func (e *env) restart(ro bool) {
	e.stop()
	e.start(ro)
}

// client is an NFS client with one identity.
type client struct {
	t    testing.TB
	c    *rpc.Client
	cred rpc.OpaqueAuth
}

func (e *env) client(uid, gid uint32, gids ...uint32) *client {
	return e.clientCred(rpc.SysCred(uid, gid, gids, "hushfs-test"))
}

func (e *env) clientCred(cred rpc.OpaqueAuth) *client {
	e.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	c, err := rpc.Dial(ctx, e.addr, rpc.ClientOptions{Timeout: 20 * time.Second, Retrans: -1})
	if err != nil {
		e.t.Fatal(err)
	}
	e.t.Cleanup(func() { c.Close() })
	return &client{t: e.t, c: c, cred: cred}
}

func (e *env) root0() *client { return e.client(0, 0) }

// call makes an NFS call; an RPC-level failure fails the test.
func (c *client) call(proc uint32, args rpc.Marshaler, res rpc.Unmarshaler) {
	c.t.Helper()
	if err := c.callErr(nfs3.Program, nfs3.Version, proc, args, res); err != nil {
		c.t.Fatalf("%s: %v", nfs3.ProcName(proc), err)
	}
}

func (c *client) callErr(prog, vers, proc uint32, args rpc.Marshaler, res rpc.Unmarshaler) error {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	return c.c.Call(ctx, prog, vers, proc, c.cred, args, res)
}

func (c *client) mount(path string) nfs3.MntRes {
	c.t.Helper()
	var r nfs3.MntRes
	if err := c.callErr(nfs3.MountProgram, nfs3.MountVersion, nfs3.MountProcMnt, &nfs3.MntArgs{Path: []byte(path)}, &r); err != nil {
		c.t.Fatalf("MNT: %v", err)
	}
	return r
}

func (c *client) rootFH() nfs3.FH {
	c.t.Helper()
	r := c.mount("/")
	if r.Status != nfs3.MntOK {
		c.t.Fatalf("MNT /: %v", r.Status)
	}
	return r.FH
}

func (c *client) getattr(fh nfs3.FH) (nfs3.Fattr, nfs3.Status) {
	c.t.Helper()
	var r nfs3.GetattrRes
	c.call(nfs3.ProcGetattr, &nfs3.GetattrArgs{Obj: fh}, &r)
	return r.Attr, r.Status
}

func (c *client) mustGetattr(fh nfs3.FH) nfs3.Fattr {
	c.t.Helper()
	a, st := c.getattr(fh)
	if st != nfs3.OK {
		c.t.Fatalf("GETATTR: %v", st)
	}
	return a
}

func (c *client) lookup(dir nfs3.FH, name string) (nfs3.FH, nfs3.Status) {
	c.t.Helper()
	var r nfs3.LookupRes
	c.call(nfs3.ProcLookup, &nfs3.LookupArgs{What: nfs3.DirOpArgs{Dir: dir, Name: []byte(name)}}, &r)
	return r.Obj, r.Status
}

func (c *client) mustLookup(dir nfs3.FH, name string) nfs3.FH {
	c.t.Helper()
	fh, st := c.lookup(dir, name)
	if st != nfs3.OK {
		c.t.Fatalf("LOOKUP %q: %v", name, st)
	}
	return fh
}

func (c *client) create(dir nfs3.FH, name string, mode uint32) (nfs3.FH, nfs3.Status) {
	c.t.Helper()
	var r nfs3.CreateRes
	c.call(nfs3.ProcCreate, &nfs3.CreateArgs{
		Where: nfs3.DirOpArgs{Dir: dir, Name: []byte(name)},
		Mode:  nfs3.Guarded,
		Attr:  nfs3.Sattr{SetMode: true, Mode: mode},
	}, &r)
	return r.Obj.FH, r.Status
}

func (c *client) mustCreate(dir nfs3.FH, name string, mode uint32) nfs3.FH {
	c.t.Helper()
	fh, st := c.create(dir, name, mode)
	if st != nfs3.OK {
		c.t.Fatalf("CREATE %q: %v", name, st)
	}
	return fh
}

func (c *client) mkdir(dir nfs3.FH, name string, mode uint32) (nfs3.FH, nfs3.Status) {
	c.t.Helper()
	var r nfs3.MkdirRes
	c.call(nfs3.ProcMkdir, &nfs3.MkdirArgs{
		Where: nfs3.DirOpArgs{Dir: dir, Name: []byte(name)},
		Attr:  nfs3.Sattr{SetMode: true, Mode: mode},
	}, &r)
	return r.Obj.FH, r.Status
}

func (c *client) mustMkdir(dir nfs3.FH, name string, mode uint32) nfs3.FH {
	c.t.Helper()
	fh, st := c.mkdir(dir, name, mode)
	if st != nfs3.OK {
		c.t.Fatalf("MKDIR %q: %v", name, st)
	}
	return fh
}

func (c *client) write(fh nfs3.FH, off uint64, data []byte, stable nfs3.StableHow) nfs3.WriteRes {
	c.t.Helper()
	var r nfs3.WriteRes
	c.call(nfs3.ProcWrite, &nfs3.WriteArgs{File: fh, Offset: off, Count: uint32(len(data)), Stable: stable, Data: data}, &r)
	return r
}

func (c *client) read(fh nfs3.FH, off uint64, count uint32) nfs3.ReadRes {
	c.t.Helper()
	var r nfs3.ReadRes
	c.call(nfs3.ProcRead, &nfs3.ReadArgs{File: fh, Offset: off, Count: count}, &r)
	return r
}

func (c *client) remove(dir nfs3.FH, name string) nfs3.Status {
	c.t.Helper()
	var r nfs3.RemoveRes
	c.call(nfs3.ProcRemove, &nfs3.RemoveArgs{Obj: nfs3.DirOpArgs{Dir: dir, Name: []byte(name)}}, &r)
	return r.Status
}

func (c *client) access(fh nfs3.FH, bits uint32) (uint32, nfs3.Status) {
	c.t.Helper()
	var r nfs3.AccessRes
	c.call(nfs3.ProcAccess, &nfs3.AccessArgs{Obj: fh, Access: bits}, &r)
	return r.Access, r.Status
}

// wantStatus fails the test unless got == want.
func wantStatus(t testing.TB, what string, got, want nfs3.Status) {
	t.Helper()
	if got != want {
		t.Fatalf("%s: status %v, want %v", what, got, want)
	}
}

// lstat stats a path on the server's file system.
func lstat(t testing.TB, p string) unix.Stat_t {
	t.Helper()
	var st unix.Stat_t
	if err := unix.Lstat(p, &st); err != nil {
		t.Fatal(err)
	}
	return st
}

func isAcceptErr(err error, stat rpc.AcceptStat) bool {
	var ae *rpc.AcceptError
	return errors.As(err, &ae) && ae.Stat == stat
}

const allAccess = nfs3.AccessRead | nfs3.AccessLookup | nfs3.AccessModify | nfs3.AccessExtend |
	nfs3.AccessDelete | nfs3.AccessExecute
