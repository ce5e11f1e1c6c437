package server

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"hushfs/internal/nfs3"
	"hushfs/internal/rpc"
	"hushfs/internal/xdr"
)

// squashEnv exports a directory holding a 0600 file of uid 1000, a file
// readable only by group 0, and a world-writable directory.
func squashEnv(t *testing.T, tune func(*Config)) *env {
	e := startEnvTuned(t, false, tune)
	priv := filepath.Join(e.root, "private")
	if err := os.WriteFile(priv, []byte("uid 1000's"), 0o600); err != nil {
		t.Fatal(err)
	}
	os.Chown(priv, 1000, 1000)
	g0 := filepath.Join(e.root, "group0")
	os.WriteFile(g0, []byte("group 0's"), 0o040)
	os.Chmod(g0, 0o040)
	pub := filepath.Join(e.root, "pub")
	os.Mkdir(pub, 0o777)
	os.Chmod(pub, 0o777)
	return e
}

// createdBy creates a file and a directory in pub and returns their owners.
func createdBy(t *testing.T, e *env, c *client, name string) (uid, gid uint32) {
	t.Helper()
	pub := c.mustLookup(c.rootFH(), "pub")
	c.mustCreate(pub, name, 0o644)
	c.mustMkdir(pub, name+".d", 0o755)
	st := lstat(t, filepath.Join(e.root, "pub", name))
	dst := lstat(t, filepath.Join(e.root, "pub", name+".d"))
	if st.Uid != dst.Uid || st.Gid != dst.Gid {
		t.Fatalf("file owned by %d:%d, directory by %d:%d", st.Uid, st.Gid, dst.Uid, dst.Gid)
	}
	return st.Uid, st.Gid
}

func TestRootSquash(t *testing.T) {
	// The zero Config squashes root.
	e := squashEnv(t, func(c *Config) { c.Squash = Config{}.Squash })
	rc := e.root0()
	root := rc.rootFH()
	priv := rc.mustLookup(root, "private")
	readWant(t, rc, "root reading uid 1000's 0600 file", priv, nfs3.ErrAcces)
	if got, st := rc.access(priv, allAccess); st != nfs3.OK || got != 0 {
		t.Fatalf("ACCESS of uid 1000's 0600 file as squashed root: %v %#x", st, got)
	}
	if w := rc.write(priv, 0, []byte("x"), nfs3.FileSync); w.Status != nfs3.ErrAcces {
		t.Fatalf("WRITE as squashed root: %v", w.Status)
	}
	var sr nfs3.SetattrRes
	rc.call(nfs3.ProcSetattr, &nfs3.SetattrArgs{Obj: priv, Attr: nfs3.Sattr{SetUID: true, UID: 0}}, &sr)
	wantStatus(t, "chown as squashed root", sr.Status, nfs3.ErrPerm)
	rc.call(nfs3.ProcSetattr, &nfs3.SetattrArgs{Obj: priv, Attr: nfs3.Sattr{SetSize: true}}, &sr)
	wantStatus(t, "truncate as squashed root", sr.Status, nfs3.ErrAcces)
	if _, st := rc.create(root, "x", 0o644); st != nfs3.ErrAcces {
		t.Fatalf("CREATE in the root-owned 0755 export root as squashed root: %v", st)
	}
	var mr nfs3.MknodRes
	rc.call(nfs3.ProcMknod, &nfs3.MknodArgs{Where: nfs3.DirOpArgs{Dir: rc.mustLookup(root, "pub"), Name: []byte("null")},
		Type: nfs3.TypeChr, Spec: nfs3.SpecData{Major: 1, Minor: 3}}, &mr)
	wantStatus(t, "MKNOD of a device as squashed root", mr.Status, nfs3.ErrPerm)
	if uid, gid := createdBy(t, e, rc, "byroot"); uid != DefaultAnonID || gid != DefaultAnonID {
		t.Fatalf("file created by squashed root owned by %d:%d", uid, gid)
	}
	// Root with another group keeps that group.
	if uid, gid := createdBy(t, e, e.client(0, 50), "byroot50"); uid != DefaultAnonID || gid != 50 {
		t.Fatalf("file created by squashed root, gid 50, owned by %d:%d", uid, gid)
	}
	// Group 0, as primary or auxiliary group, is squashed too.
	g0 := rc.mustLookup(root, "group0")
	readWant(t, e.client(1000, 0), "group0 file as gid 0", g0, nfs3.ErrAcces)
	readWant(t, e.client(1000, 1000, 0), "group0 file with auxiliary group 0", g0, nfs3.ErrAcces)
	// Other users are untouched.
	if r := e.client(1000, 1000).read(priv, 0, 100); r.Status != nfs3.OK || string(r.Data) != "uid 1000's" {
		t.Fatalf("uid 1000 reading its file: %v", r.Status)
	}
	if uid, gid := createdBy(t, e, e.client(1000, 1000), "by1000"); uid != 1000 || gid != 1000 {
		t.Fatalf("file created by uid 1000 owned by %d:%d", uid, gid)
	}
	// AUTH_NONE is anonymous.
	if uid, gid := createdBy(t, e, e.clientCred(rpc.NoAuth), "bynone"); uid != DefaultAnonID || gid != DefaultAnonID {
		t.Fatalf("file created with AUTH_NONE owned by %d:%d", uid, gid)
	}
}

func TestNoRootSquash(t *testing.T) {
	e := squashEnv(t, func(c *Config) { c.Squash = NoRootSquash })
	rc := e.root0()
	root := rc.rootFH()
	priv := rc.mustLookup(root, "private")
	if r := rc.read(priv, 0, 100); r.Status != nfs3.OK || string(r.Data) != "uid 1000's" {
		t.Fatalf("root reading uid 1000's 0600 file: %v", r.Status)
	}
	if uid, gid := createdBy(t, e, rc, "byroot"); uid != 0 || gid != 0 {
		t.Fatalf("file created by root owned by %d:%d", uid, gid)
	}
	var sr nfs3.SetattrRes
	rc.call(nfs3.ProcSetattr, &nfs3.SetattrArgs{Obj: priv, Attr: nfs3.Sattr{SetUID: true, UID: 4242}}, &sr)
	wantStatus(t, "chown as root", sr.Status, nfs3.OK)
	g0 := rc.mustLookup(root, "group0")
	for _, c := range []*client{e.client(1000, 0), e.client(1000, 1000, 0)} {
		if r := c.read(g0, 0, 100); r.Status != nfs3.OK || string(r.Data) != "group 0's" {
			t.Fatalf("group 0 member reading the group0 file: %v", r.Status)
		}
	}
	// AUTH_NONE is still anonymous.
	if uid, gid := createdBy(t, e, e.clientCred(rpc.NoAuth), "bynone"); uid != DefaultAnonID || gid != DefaultAnonID {
		t.Fatalf("file created with AUTH_NONE owned by %d:%d", uid, gid)
	}
}

func TestAllSquash(t *testing.T) {
	e := squashEnv(t, func(c *Config) { c.Squash = AllSquash; c.AnonUID, c.AnonGID = 4000, 4001 })
	u := e.client(1000, 1000)
	root := u.rootFH()
	priv := u.mustLookup(root, "private")
	readWant(t, u, "uid 1000 reading its own 0600 file under all_squash", priv, nfs3.ErrAcces)
	for i, c := range []*client{u, e.root0(), e.client(5, 5, 1000, 0), e.clientCred(rpc.NoAuth)} {
		if uid, gid := createdBy(t, e, c, fmt.Sprint("by", i)); uid != 4000 || gid != 4001 {
			t.Fatalf("client %d: file owned by %d:%d, want 4000:4001", i, uid, gid)
		}
	}
	// The anonymous identity has no auxiliary groups.
	readWant(t, e.client(1000, 1000, 0), "group0 file under all_squash", u.mustLookup(root, "group0"), nfs3.ErrAcces)
}

func TestIdentityOf(t *testing.T) {
	sys := func(uid, gid uint32, gids ...uint32) rpc.OpaqueAuth { return rpc.SysCred(uid, gid, gids, "m") }
	cases := []struct {
		squash Squash
		cred   rpc.OpaqueAuth
		want   identity
	}{
		{RootSquash, sys(0, 0, 0, 5), identity{7, 8, []uint32{8, 5}}},
		{RootSquash, sys(0, 5), identity{7, 5, nil}},
		{RootSquash, sys(5, 0, 0), identity{5, 8, []uint32{8}}},
		{RootSquash, sys(5, 6, 7), identity{5, 6, []uint32{7}}},
		{RootSquash, rpc.NoAuth, identity{7, 8, nil}},
		{RootSquash, sys(^uint32(0), 5), identity{7, 8, nil}},
		{NoRootSquash, sys(0, 0, 0, 5), identity{0, 0, []uint32{0, 5}}},
		{NoRootSquash, rpc.NoAuth, identity{7, 8, nil}},
		{NoRootSquash, sys(5, ^uint32(0)), identity{7, 8, nil}},
		{NoRootSquash, sys(5, 6, ^uint32(0), 9), identity{5, 6, []uint32{9}}},
		{AllSquash, sys(5, 6, 7), identity{7, 8, nil}},
		{AllSquash, sys(0, 0), identity{7, 8, nil}},
		{AllSquash, rpc.NoAuth, identity{7, 8, nil}},
	}
	for i, tc := range cases {
		s := &Server{squash: tc.squash, anonUID: 7, anonGID: 8}
		got := s.identityOf(&rpc.Call{Cred: tc.cred})
		if got.uid != tc.want.uid || got.gid != tc.want.gid || fmt.Sprint(got.groups) != fmt.Sprint(tc.want.groups) {
			t.Errorf("case %d (%v): %+v, want %+v", i, tc.squash, got, tc.want)
		}
	}
}

func TestAccessConfigValidation(t *testing.T) {
	good := []Config{
		{},
		{Squash: AllSquash, AnonUID: 1, AnonGID: 1},
		{Allow: []netip.Prefix{netip.MustParsePrefix("10.1.2.3/8"), netip.MustParsePrefix("::ffff:127.0.0.0/104")}},
	}
	for i, cfg := range good {
		a, err := newAccessConfig(&cfg)
		if err != nil {
			t.Fatalf("config %d: %v", i, err)
		}
		if i == 0 && (a.anonUID != DefaultAnonID || a.anonGID != DefaultAnonID || a.squash != RootSquash) {
			t.Fatalf("defaults: %+v", a)
		}
		if i == 2 && (a.allow[0] != netip.MustParsePrefix("10.0.0.0/8") || a.allow[1] != netip.MustParsePrefix("127.0.0.0/8")) {
			t.Fatalf("normalised prefixes: %v", a.allow)
		}
	}
	bad := []Config{
		{Squash: Squash(3)},
		{AnonUID: ^uint32(0)},
		{AnonGID: ^uint32(0)},
		{Allow: []netip.Prefix{{}}},
		{Allow: []netip.Prefix{netip.MustParsePrefix("::ffff:0.0.0.0/64")}},
	}
	for i, cfg := range bad {
		if _, err := newAccessConfig(&cfg); err == nil {
			t.Errorf("bad config %d accepted", i)
		}
	}
}

// callHandler runs one call through a handler as if it came from peer
// (nil: no connection information).
func callHandler(t *testing.T, h rpc.Handler, prog, proc uint32, peer net.Addr, args rpc.Marshaler) ([]byte, error) {
	t.Helper()
	call := &rpc.Call{Prog: prog, Proc: proc, Cred: rpc.SysCred(0, 0, nil, "t")}
	if prog == nfs3.Program {
		call.Vers = nfs3.Version
	} else {
		call.Vers = nfs3.MountVersion
	}
	if args != nil {
		call.Args = args.Append(nil)
	}
	if peer != nil {
		call.Conn = &rpc.ConnInfo{RemoteAddr: peer}
	}
	return h.ServeRPC(context.Background(), call, nil)
}

func isTooWeak(err error) bool {
	var de *rpc.DeniedError
	return errors.As(err, &de) && de.RejectStat == rpc.AuthError && de.Auth == rpc.AuthTooWeak
}

// admission checks one peer against a server's MNT and NFS handlers.
func admission(t *testing.T, s *Server, peer net.Addr) (mnt nfs3.MountStat, nfsOK bool) {
	t.Helper()
	out, err := callHandler(t, mountHandler{s}, nfs3.MountProgram, nfs3.MountProcMnt, peer, &nfs3.MntArgs{Path: []byte("/")})
	if err != nil {
		t.Fatalf("MNT from %v: %v", peer, err)
	}
	var mr nfs3.MntRes
	var d xdr.Decoder
	d.Reset(out)
	mr.Decode(&d)
	if d.Err() != nil {
		t.Fatalf("MNT reply: %v", d.Err())
	}
	for i, proc := range []uint32{nfs3.ProcNull, nfs3.ProcGetattr, nfs3.ProcLookup, nfs3.ProcRead} {
		var args rpc.Marshaler
		switch proc {
		case nfs3.ProcGetattr:
			args = &nfs3.GetattrArgs{Obj: s.RootHandle()}
		case nfs3.ProcLookup:
			args = &nfs3.LookupArgs{What: nfs3.DirOpArgs{Dir: s.RootHandle(), Name: []byte("f")}}
		case nfs3.ProcRead:
			args = &nfs3.ReadArgs{File: s.RootHandle(), Count: 10}
		}
		out, err := callHandler(t, nfsHandler{s}, nfs3.Program, proc, peer, args)
		ok := err == nil
		switch {
		case !ok && !isTooWeak(err):
			t.Fatalf("%s from %v: %v", nfs3.ProcName(proc), peer, err)
		case ok && proc != nfs3.ProcNull && len(out) == 0:
			t.Fatalf("%s from %v: empty reply", nfs3.ProcName(proc), peer)
		case i == 0:
			nfsOK = ok
		case ok != nfsOK:
			t.Fatalf("%s from %v admitted %v, NULL %v", nfs3.ProcName(proc), peer, ok, nfsOK)
		}
	}
	return mr.Status, nfsOK
}

func tcpPeer(ap string) net.Addr { return net.TCPAddrFromAddrPort(netip.MustParseAddrPort(ap)) }

func TestAllowHandlers(t *testing.T) {
	cases := []struct {
		allow []string
		peers map[string]bool
	}{
		{nil, map[string]bool{"127.0.0.1:700": true, "[::1]:40000": true, "10.9.8.7:40000": true}},
		{[]string{"127.0.0.2/32"}, map[string]bool{
			"127.0.0.1:40000": false, "127.0.0.2:40000": true, "[::ffff:127.0.0.2]:40000": true,
			"[::ffff:127.0.0.1]:40000": false, "[::1]:40000": false,
		}},
		{[]string{"127.0.0.0/8"}, map[string]bool{
			"127.0.0.1:40000": true, "127.255.0.9:1": true, "[::ffff:127.0.0.1]:40000": true,
			"[::1]:40000": false, "128.0.0.1:40000": false,
		}},
		{[]string{"::ffff:127.0.0.1/128", "::1/128", "fe80::/10"}, map[string]bool{
			"127.0.0.1:40000": true, "[::1]:40000": true, "[::2]:40000": false, "[fe80::1%lo]:40000": true,
			"127.0.0.2:40000": false,
		}},
	}
	for _, tc := range cases {
		var allow []netip.Prefix
		for _, p := range tc.allow {
			allow = append(allow, netip.MustParsePrefix(p))
		}
		e := startEnvTuned(t, false, func(c *Config) { c.Allow = allow })
		for peer, want := range tc.peers {
			mnt, nfsOK := admission(t, e.srv, tcpPeer(peer))
			wantMnt := nfs3.MntOK
			if !want {
				wantMnt = nfs3.MntErrAcces
			}
			if mnt != wantMnt || nfsOK != want {
				t.Errorf("allow %v, peer %s: MNT %v, NFS admitted %v; want admitted %v", tc.allow, peer, mnt, nfsOK, want)
			}
		}
		// Without a peer address nothing can be checked: refused when a
		// list is configured.
		mnt, nfsOK := admission(t, e.srv, nil)
		if want := len(allow) == 0; nfsOK != want || (mnt == nfs3.MntOK) != want {
			t.Errorf("allow %v, no peer address: MNT %v, NFS %v", tc.allow, mnt, nfsOK)
		}
		e.stop()
	}
}

func TestSecurePortHandlers(t *testing.T) {
	e := startEnvTuned(t, false, func(c *Config) { c.SecurePort = true })
	for peer, want := range map[string]bool{
		"127.0.0.1:1023": true, "127.0.0.1:1": true, "[::1]:111": true, "[::ffff:127.0.0.1]:900": true,
		"127.0.0.1:1024": false, "127.0.0.1:40000": false, "127.0.0.1:0": false, "[::1]:2049": false,
	} {
		mnt, nfsOK := admission(t, e.srv, tcpPeer(peer))
		if (mnt == nfs3.MntOK) != want || nfsOK != want {
			t.Errorf("secure port, peer %s: MNT %v, NFS %v; want %v", peer, mnt, nfsOK, want)
		}
	}
	// Both restrictions at once: both must hold.
	e2 := startEnvTuned(t, false, func(c *Config) {
		c.SecurePort = true
		c.Allow = []netip.Prefix{netip.MustParsePrefix("127.0.0.2/32")}
	})
	for peer, want := range map[string]bool{"127.0.0.2:800": true, "127.0.0.1:800": false, "127.0.0.2:8000": false} {
		if _, nfsOK := admission(t, e2.srv, tcpPeer(peer)); nfsOK != want {
			t.Errorf("allow+secure, peer %s: %v", peer, nfsOK)
		}
	}
}

// dialFromPort connects to addr from 127.0.0.1:port, trying ports from
// port downwards until one is free; it returns the client and the port.
func dialFromPort(t *testing.T, addr string, port, lowest int) (*rpc.Client, int) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for p := port; p >= lowest; p-- {
		d := net.Dialer{LocalAddr: &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1), Port: p}}
		nc, err := d.DialContext(ctx, "tcp", addr)
		if errors.Is(err, unix.EADDRINUSE) || errors.Is(err, unix.EADDRNOTAVAIL) {
			continue
		}
		if err != nil {
			t.Fatalf("dial from port %d: %v", p, err)
		}
		used := false
		c, err := rpc.NewClient(ctx, rpc.ClientOptions{
			Dial: func(context.Context) (net.Conn, error) {
				if used {
					return nil, errors.New("no reconnecting from a fixed port")
				}
				used = true
				return nc, nil
			},
			Timeout: 20 * time.Second, Retrans: -1,
		})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		return c, p
	}
	t.Fatalf("no free local port in %d..%d", lowest, port)
	return nil, 0
}

// Real sockets: the client's address and port as the kernel reports them.
func TestAllowAndSecurePortOverTCP(t *testing.T) {
	requireRoot(t)
	check := func(e *env, c *rpc.Client, want bool, what string) {
		t.Helper()
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		cred := rpc.SysCred(0, 0, nil, "t")
		var mr nfs3.MntRes
		if err := c.Call(ctx, nfs3.MountProgram, nfs3.MountVersion, nfs3.MountProcMnt, cred, &nfs3.MntArgs{Path: []byte("/")}, &mr); err != nil {
			t.Fatalf("%s: MNT: %v", what, err)
		}
		if (mr.Status == nfs3.MntOK) != want || (!want && mr.Status != nfs3.MntErrAcces) {
			t.Fatalf("%s: MNT %v", what, mr.Status)
		}
		err := c.Call(ctx, nfs3.Program, nfs3.Version, nfs3.ProcNull, cred, nil, nil)
		if want && err != nil || !want && !isTooWeak(err) {
			t.Fatalf("%s: NULL: %v", what, err)
		}
		var gr nfs3.GetattrRes
		err = c.Call(ctx, nfs3.Program, nfs3.Version, nfs3.ProcGetattr, cred, &nfs3.GetattrArgs{Obj: e.srv.RootHandle()}, &gr)
		switch {
		case want && (err != nil || gr.Status != nfs3.OK):
			t.Fatalf("%s: GETATTR: %v %v", what, err, gr.Status)
		case !want && !isTooWeak(err):
			t.Fatalf("%s: GETATTR: %v, want AUTH_TOOWEAK", what, err)
		}
	}
	denied := startEnvTuned(t, false, func(c *Config) { c.Allow = []netip.Prefix{netip.MustParsePrefix("127.0.0.2/32")} })
	check(denied, denied.root0().c, false, "127.0.0.1 with allow 127.0.0.2/32")
	allowed := startEnvTuned(t, false, func(c *Config) { c.Allow = []netip.Prefix{netip.MustParsePrefix("127.0.0.0/8")} })
	check(allowed, allowed.root0().c, true, "127.0.0.1 with allow 127.0.0.0/8")

	secure := startEnvTuned(t, false, func(c *Config) { c.SecurePort = true })
	check(secure, secure.root0().c, false, "ephemeral port with secure-port")
	high, hp := dialFromPort(t, secure.addr, 1100, 1024)
	check(secure, high, false, fmt.Sprintf("port %d with secure-port", hp))
	low, lp := dialFromPort(t, secure.addr, 1023, 600)
	check(secure, low, true, fmt.Sprintf("port %d with secure-port", lp))
}
