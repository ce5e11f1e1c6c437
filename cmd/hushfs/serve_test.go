package main

import (
	"bufio"
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"hushfs/internal/nfs3"
	"hushfs/internal/rpc"
	"hushfs/internal/server"
)

func TestParseServeArgs(t *testing.T) {
	o, err := parseServeArgs([]string{"--ro", "/srv/x", "--nfs-port", "0", "--listen=127.0.0.1", "--state-dir", "/tmp/s"})
	if err != nil {
		t.Fatal(err)
	}
	if o.dir != "/srv/x" || !o.readOnly || o.nfsPort != 0 || o.mountPort != 20048 || o.listen != "127.0.0.1" || o.stateDir != "/tmp/s" ||
		o.lease != 90*time.Second {
		t.Fatalf("%+v", o)
	}
	if o, err := parseServeArgs([]string{"/x", "--lease", "5s"}); err != nil || o.lease != 5*time.Second {
		t.Fatalf("--lease 5s: %v %+v", err, o)
	}
	for _, bad := range [][]string{{}, {"a", "b"}, {"a", "--nfs-port", "70000"}, {"a", "--bogus"},
		{"a", "--lease", "0s"}, {"a", "--lease", "1500ms"}, {"a", "--lease", "2h"}} {
		if _, err := parseServeArgs(bad); err == nil {
			t.Errorf("%q accepted", bad)
		}
	}
}

func TestParseServeAccessFlags(t *testing.T) {
	o, err := parseServeArgs([]string{"/x"})
	if err != nil {
		t.Fatal(err)
	}
	if o.squash() != server.RootSquash || o.anonUID != 65534 || o.anonGID != 65534 || o.securePort ||
		o.allowGiven || !slices.Equal(o.allow, loopbackOnly) {
		t.Fatalf("defaults: %+v", o)
	}
	cases := []struct {
		args   []string
		squash server.Squash
	}{
		{[]string{"--no-root-squash"}, server.NoRootSquash},
		{[]string{"--no-root-squash=false"}, server.RootSquash},
		{[]string{"--no-root-squash", "--root-squash"}, server.RootSquash},
		{[]string{"--root-squash", "--no-root-squash"}, server.NoRootSquash},
		{[]string{"--all-squash"}, server.AllSquash},
		{[]string{"--no-root-squash", "--all-squash"}, server.AllSquash},
	}
	for _, tc := range cases {
		o, err := parseServeArgs(append([]string{"/x"}, tc.args...))
		if err != nil || o.squash() != tc.squash {
			t.Errorf("%q: %v %v, want %v", tc.args, o.squash(), err, tc.squash)
		}
	}
	o, err = parseServeArgs([]string{"--anonuid", "4000", "/x", "--anongid=4001", "--secure-port",
		"--allow", "127.0.0.0/8,::1", "--allow", " 10.1.2.3/16 ", "--allow=::ffff:192.168.0.0/120"})
	if err != nil {
		t.Fatal(err)
	}
	want := []netip.Prefix{netip.MustParsePrefix("127.0.0.0/8"), netip.MustParsePrefix("::1/128"),
		netip.MustParsePrefix("10.1.2.3/16"), netip.MustParsePrefix("::ffff:192.168.0.0/120")}
	if o.anonUID != 4000 || o.anonGID != 4001 || !o.securePort || !o.allowGiven || !slices.Equal(o.allow, want) {
		t.Fatalf("%+v", o)
	}
	for _, bad := range []struct {
		args    []string
		message string
	}{
		{[]string{"--anonuid", "0"}, "--no-root-squash"},
		{[]string{"--anonuid", "-1"}, "not a numeric id"},
		{[]string{"--anongid", "4294967295"}, "not a valid id"},
		{[]string{"--anongid", "nobody"}, "not a numeric id"},
		{[]string{"--anonuid", "4294967296"}, "not a numeric id"},
		{[]string{"--allow", "10.0.0.0/33"}, "10.0.0.0/33"},
		{[]string{"--allow", "10.0.0.0/8,"}, "empty network"},
		{[]string{"--allow", "example.com"}, "example.com"},
		{[]string{"--allow", ""}, "empty network"},
		{[]string{"--allow", "fe80::1%eth0"}, "zones"},
		{[]string{"--no-root-squash=perhaps"}, "no-root-squash"},
	} {
		_, err := parseServeArgs(append([]string{"/x"}, bad.args...))
		if err == nil || !strings.Contains(err.Error(), bad.message) {
			t.Errorf("%q: error %v, want one mentioning %q", bad.args, err, bad.message)
		}
	}
}

// buildHushfs builds the command into a temporary directory.
func buildHushfs(t *testing.T) string {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("needs root")
	}
	bin := filepath.Join(t.TempDir(), "hushfs")
	build := exec.Command("go", "build", "-o", bin, ".")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("build: %v\n%s", err, out)
	}
	return bin
}

// serveProc is a running "hushfs serve".
type serveProc struct {
	cmd              *exec.Cmd
	nfsAddr, mntAddr string
	stdout           *bufio.Reader // what it prints after the address line
}

// startServe runs "hushfs serve export" on 127.0.0.1 with kernel-chosen
// ports and a fresh state directory, plus args; it reads the address line
// and kills the server by pid at cleanup.
func startServe(t *testing.T, bin, export string, args ...string) *serveProc {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	t.Cleanup(cancel)
	args = append([]string{"serve", export, "--nfs-port", "0", "--mount-port", "0",
		"--listen", "127.0.0.1", "--state-dir", filepath.Join(t.TempDir(), "state")}, args...)
	cmd := exec.CommandContext(ctx, bin, args...)
	cmd.Stderr = os.Stderr
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		cmd.Process.Kill()
		cmd.Wait()
	})
	br := bufio.NewReader(stdout)
	line, err := br.ReadString('\n')
	if err != nil {
		t.Fatalf("reading the address line: %v", err)
	}
	m := regexp.MustCompile(`^hushfs serve: nfs (127\.0\.0\.1:\d+) mount (127\.0\.0\.1:\d+)\n$`).FindStringSubmatch(line)
	if m == nil {
		t.Fatalf("address line %q", line)
	}
	return &serveProc{cmd: cmd, nfsAddr: m[1], mntAddr: m[2], stdout: br}
}

func dial(t *testing.T, addr string) *rpc.Client {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	c, err := rpc.Dial(ctx, addr, rpc.ClientOptions{Timeout: 10 * time.Second, Retrans: -1})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

func call(c *rpc.Client, prog, vers, proc uint32, cred rpc.OpaqueAuth, args rpc.Marshaler, res rpc.Unmarshaler) error {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	return c.Call(ctx, prog, vers, proc, cred, args, res)
}

// The real binary: prints its ports, serves MOUNT and NFS on both, and
// exits cleanly on SIGTERM.
func TestServeCommand(t *testing.T) {
	bin := buildHushfs(t)
	export := filepath.Join(t.TempDir(), "export")
	os.Mkdir(export, 0o755)
	os.WriteFile(filepath.Join(export, "hello"), []byte("hi"), 0o644)

	p := startServe(t, bin, export)
	if p.nfsAddr == p.mntAddr {
		t.Fatalf("NFS and MOUNT on the same port with both 0: %s", p.nfsAddr)
	}
	for _, addr := range []string{p.nfsAddr, p.mntAddr} {
		c := dial(t, addr)
		cred := rpc.SysCred(0, 0, nil, "test")
		var mr nfs3.MntRes
		if err := call(c, nfs3.MountProgram, nfs3.MountVersion, nfs3.MountProcMnt, cred, &nfs3.MntArgs{Path: []byte("/")}, &mr); err != nil || mr.Status != nfs3.MntOK {
			t.Fatalf("MNT via %s: %v %v", addr, err, mr.Status)
		}
		var lr nfs3.LookupRes
		if err := call(c, nfs3.Program, nfs3.Version, nfs3.ProcLookup, cred,
			&nfs3.LookupArgs{What: nfs3.DirOpArgs{Dir: mr.FH, Name: []byte("hello")}}, &lr); err != nil || lr.Status != nfs3.OK {
			t.Fatalf("LOOKUP via %s: %v %v", addr, err, lr.Status)
		}
	}
	p.cmd.Process.Signal(syscall.SIGTERM)
	if err := p.cmd.Wait(); err != nil {
		t.Fatalf("exit after SIGTERM: %v", err)
	}
}

func isTooWeak(err error) bool {
	var de *rpc.DeniedError
	return errors.As(err, &de) && de.RejectStat == rpc.AuthError && de.Auth == rpc.AuthTooWeak
}

// Squashing, --allow and --secure-port through the real binary and real
// sockets.
func TestServeAccessFlags(t *testing.T) {
	bin := buildHushfs(t)
	export := filepath.Join(t.TempDir(), "export")
	os.Mkdir(export, 0o755)
	root := rpc.SysCred(0, 0, nil, "test")

	// mount returns the root handle, or the MNT status.
	mount := func(c *rpc.Client) (nfs3.FH, nfs3.MountStat) {
		t.Helper()
		var mr nfs3.MntRes
		if err := call(c, nfs3.MountProgram, nfs3.MountVersion, nfs3.MountProcMnt, root, &nfs3.MntArgs{Path: []byte(export)}, &mr); err != nil {
			t.Fatalf("MNT: %v", err)
		}
		return mr.FH, mr.Status
	}
	create := func(c *rpc.Client, dir nfs3.FH, name string) nfs3.Status {
		t.Helper()
		var r nfs3.CreateRes
		if err := call(c, nfs3.Program, nfs3.Version, nfs3.ProcCreate, root, &nfs3.CreateArgs{
			Where: nfs3.DirOpArgs{Dir: dir, Name: []byte(name)}, Mode: nfs3.Guarded}, &r); err != nil {
			t.Fatalf("CREATE: %v", err)
		}
		return r.Status
	}

	// Root squashing is the default: client root cannot write the
	// root-owned 0755 export root; with --no-root-squash it can.
	p := startServe(t, bin, export)
	c := dial(t, p.nfsAddr)
	fh, st := mount(c)
	if st != nfs3.MntOK {
		t.Fatalf("MNT: %v", st)
	}
	if st := create(c, fh, "squashed"); st != nfs3.ErrAcces {
		t.Fatalf("CREATE as client root by default: %v, want NFS3ERR_ACCES", st)
	}
	p = startServe(t, bin, export, "--no-root-squash")
	c = dial(t, p.nfsAddr)
	fh, _ = mount(c)
	if st := create(c, fh, "asroot"); st != nfs3.OK {
		t.Fatalf("CREATE as root with --no-root-squash: %v", st)
	}
	if fi, err := os.Stat(filepath.Join(export, "asroot")); err != nil || fi.Sys().(*syscall.Stat_t).Uid != 0 {
		t.Fatalf("file created with --no-root-squash: %v", err)
	}
	// --all-squash with --anonuid/--anongid, in a world-writable directory.
	os.Mkdir(filepath.Join(export, "pub"), 0o777)
	os.Chmod(filepath.Join(export, "pub"), 0o777)
	p = startServe(t, bin, export, "--all-squash", "--anonuid", "4000", "--anongid", "4001")
	c = dial(t, p.nfsAddr)
	fh, _ = mount(c)
	var lr nfs3.LookupRes
	if err := call(c, nfs3.Program, nfs3.Version, nfs3.ProcLookup, root, &nfs3.LookupArgs{What: nfs3.DirOpArgs{Dir: fh, Name: []byte("pub")}}, &lr); err != nil || lr.Status != nfs3.OK {
		t.Fatalf("LOOKUP pub: %v %v", err, lr.Status)
	}
	if st := create(c, lr.Obj, "anon"); st != nfs3.OK {
		t.Fatalf("CREATE with --all-squash: %v", st)
	}
	if fi, err := os.Stat(filepath.Join(export, "pub", "anon")); err != nil ||
		fi.Sys().(*syscall.Stat_t).Uid != 4000 || fi.Sys().(*syscall.Stat_t).Gid != 4001 {
		t.Fatalf("file created with --all-squash --anonuid 4000 --anongid 4001: %v %+v", err, fi.Sys())
	}

	// --allow: 127.0.0.1 is refused by 127.0.0.2/32, admitted by 127.0.0.0/8.
	p = startServe(t, bin, export, "--no-root-squash", "--allow", "127.0.0.2/32")
	c = dial(t, p.nfsAddr)
	if _, st := mount(c); st != nfs3.MntErrAcces {
		t.Fatalf("MNT from 127.0.0.1 with --allow 127.0.0.2/32: %v", st)
	}
	if err := call(c, nfs3.Program, nfs3.Version, nfs3.ProcNull, root, nil, nil); !isTooWeak(err) {
		t.Fatalf("NULL from 127.0.0.1 with --allow 127.0.0.2/32: %v", err)
	}
	var gr nfs3.GetattrRes
	if err := call(c, nfs3.Program, nfs3.Version, nfs3.ProcGetattr, root, &nfs3.GetattrArgs{Obj: fh}, &gr); !isTooWeak(err) {
		t.Fatalf("GETATTR from 127.0.0.1 with --allow 127.0.0.2/32: %v", err)
	}
	p = startServe(t, bin, export, "--no-root-squash", "--allow", "10.0.0.0/8,127.0.0.0/8")
	c = dial(t, p.nfsAddr)
	if fh, st = mount(c); st != nfs3.MntOK {
		t.Fatalf("MNT from 127.0.0.1 with --allow 127.0.0.0/8: %v", st)
	}
	if err := call(c, nfs3.Program, nfs3.Version, nfs3.ProcGetattr, root, &nfs3.GetattrArgs{Obj: fh}, &gr); err != nil || gr.Status != nfs3.OK {
		t.Fatalf("GETATTR with --allow 127.0.0.0/8: %v %v", err, gr.Status)
	}

	// --secure-port: an ordinary (ephemeral) source port is refused.
	p = startServe(t, bin, export, "--no-root-squash", "--secure-port")
	c = dial(t, p.nfsAddr)
	if _, st := mount(c); st != nfs3.MntErrAcces {
		t.Fatalf("MNT from an unprivileged port with --secure-port: %v", st)
	}
	if err := call(c, nfs3.Program, nfs3.Version, nfs3.ProcGetattr, root, &nfs3.GetattrArgs{Obj: fh}, &gr); !isTooWeak(err) {
		t.Fatalf("GETATTR from an unprivileged port with --secure-port: %v", err)
	}
	// ...and a privileged one is served.
	c = dialPrivileged(t, p.nfsAddr)
	if fh, st = mount(c); st != nfs3.MntOK {
		t.Fatalf("MNT from a privileged port with --secure-port: %v", st)
	}
	if err := call(c, nfs3.Program, nfs3.Version, nfs3.ProcGetattr, root, &nfs3.GetattrArgs{Obj: fh}, &gr); err != nil || gr.Status != nfs3.OK {
		t.Fatalf("GETATTR from a privileged port with --secure-port: %v %v", err, gr.Status)
	}
}

// dialPrivileged connects from the first free port of 127.0.0.1 below 1024,
// from 1023 down.
func dialPrivileged(t *testing.T, addr string) *rpc.Client {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for port := 1023; port >= 600; port-- {
		d := net.Dialer{LocalAddr: &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1), Port: port}}
		nc, err := d.DialContext(ctx, "tcp", addr)
		if errors.Is(err, syscall.EADDRINUSE) || errors.Is(err, syscall.EADDRNOTAVAIL) {
			continue
		}
		if err != nil {
			t.Fatalf("dial from port %d: %v", port, err)
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
			Timeout: 10 * time.Second, Retrans: -1,
		})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		return c
	}
	t.Fatal("no free privileged port on 127.0.0.1")
	return nil
}

// Bad flag values stop the command with a message naming the problem.
func TestServeBadFlags(t *testing.T) {
	bin := buildHushfs(t)
	export := t.TempDir()
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--anonuid", "0"}, "--anonuid 0 would map squashed callers to root"},
		{[]string{"--anongid", "x"}, "not a numeric id"},
		{[]string{"--allow", "300.0.0.0/8"}, "--allow \"300.0.0.0/8\""},
	} {
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		cmd := exec.CommandContext(ctx, bin, append([]string{"serve", export, "--nfs-port", "0", "--mount-port", "0",
			"--listen", "127.0.0.1", "--state-dir", filepath.Join(t.TempDir(), "state")}, tc.args...)...)
		out, err := cmd.CombinedOutput()
		cancel()
		var ee *exec.ExitError
		if !errors.As(err, &ee) || ee.ExitCode() == 0 || !strings.Contains(string(out), tc.want) {
			t.Errorf("%q: %v, output %q; want a non-zero exit and %q", tc.args, err, out, tc.want)
		}
	}
}

// --metrics: the endpoint's address is printed, and after real calls it
// counts them per procedure in Prometheus text format.
func TestServeMetrics(t *testing.T) {
	bin := buildHushfs(t)
	export := t.TempDir()
	os.WriteFile(filepath.Join(export, "f"), []byte("x"), 0o644)
	p := startServe(t, bin, export, "--metrics", "127.0.0.1:0")
	line, err := p.stdout.ReadString('\n')
	if err != nil {
		t.Fatalf("reading the metrics line: %v", err)
	}
	m := regexp.MustCompile(`^hushfs serve: metrics (http://127\.0\.0\.1:\d+/metrics)\n$`).FindStringSubmatch(line)
	if m == nil {
		t.Fatalf("metrics line %q", line)
	}
	c := dial(t, p.nfsAddr)
	cred := rpc.SysCred(0, 0, nil, "test")
	var mr nfs3.MntRes
	if err := call(c, nfs3.MountProgram, nfs3.MountVersion, nfs3.MountProcMnt, cred, &nfs3.MntArgs{Path: []byte("/")}, &mr); err != nil || mr.Status != nfs3.MntOK {
		t.Fatalf("MNT: %v %v", err, mr.Status)
	}
	for range 3 {
		var lr nfs3.LookupRes
		if err := call(c, nfs3.Program, nfs3.Version, nfs3.ProcLookup, cred,
			&nfs3.LookupArgs{What: nfs3.DirOpArgs{Dir: mr.FH, Name: []byte("f")}}, &lr); err != nil || lr.Status != nfs3.OK {
			t.Fatalf("LOOKUP: %v %v", err, lr.Status)
		}
	}
	resp, err := http.Get(m[1])
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	for _, want := range []string{
		`hushfs_rpc_calls_total{prog="nfs",proc="LOOKUP"} 3`,
		`hushfs_rpc_calls_total{prog="mount",proc="MNT"} 1`,
		`hushfs_rpc_call_duration_seconds_count{prog="nfs",proc="LOOKUP"} 3`,
	} {
		if !strings.Contains(string(body), want+"\n") {
			t.Errorf("metrics lack %q:\n%s", want, body)
		}
	}
}

// nonLoopbackAddr returns an address of this machine outside 127.0.0.0/8
// and ::1, or skips the test.
func nonLoopbackAddr(t *testing.T) netip.Addr {
	t.Helper()
	addrs, err := net.InterfaceAddrs()
	if err != nil {
		t.Fatal(err)
	}
	for _, a := range addrs {
		if p, err := netip.ParsePrefix(a.String()); err == nil && p.Addr().Is4() && !p.Addr().IsLoopback() {
			return p.Addr()
		}
	}
	t.Skip("no non-loopback IPv4 address on this machine")
	return netip.Addr{}
}

// Without --allow the server serves this machine's loopback clients only,
// and its start-up line says so; --allow 0.0.0.0/0,::/0 serves everyone.
func TestServeLoopbackByDefault(t *testing.T) {
	bin := buildHushfs(t)
	export := t.TempDir()
	other := nonLoopbackAddr(t)
	root := rpc.SysCred(0, 0, nil, "test")
	for _, tc := range []struct {
		allow      []string
		otherOK    bool
		clientsMsg string
	}{
		{nil, false, "to loopback clients only"},
		{[]string{"--allow", "0.0.0.0/0,::/0"}, true, "to every client"},
	} {
		ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
		// Listening on every address, so that the other address reaches it.
		cmd := exec.CommandContext(ctx, bin, append([]string{"serve", export, "--nfs-port", "0", "--mount-port", "0",
			"--state-dir", filepath.Join(t.TempDir(), "state")}, tc.allow...)...)
		stderr, err := cmd.StderrPipe()
		if err != nil {
			t.Fatal(err)
		}
		stdout, err := cmd.StdoutPipe()
		if err != nil {
			t.Fatal(err)
		}
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		stop := func() {
			cmd.Process.Kill()
			cmd.Wait()
			cancel()
		}
		line, err := bufio.NewReader(stdout).ReadString('\n')
		m := regexp.MustCompile(`^hushfs serve: nfs \S+:(\d+) mount `).FindStringSubmatch(line)
		if err != nil || m == nil {
			stop()
			t.Fatalf("address line %q, %v", line, err)
		}
		logs := bufio.NewReader(stderr)
		logLine := ""
		for !strings.Contains(logLine, "exporting") {
			if logLine, err = logs.ReadString('\n'); err != nil {
				stop()
				t.Fatalf("no start-up line: %v", err)
			}
		}
		if !strings.Contains(logLine, tc.clientsMsg) {
			t.Errorf("%q: start-up line %q does not say %q", tc.allow, logLine, tc.clientsMsg)
		}
		for _, from := range []netip.Addr{netip.MustParseAddr("127.0.0.1"), other} {
			c := dialFrom(t, from, net.JoinHostPort(from.String(), m[1]))
			var mr nfs3.MntRes
			if err := call(c, nfs3.MountProgram, nfs3.MountVersion, nfs3.MountProcMnt, root, &nfs3.MntArgs{Path: []byte(export)}, &mr); err != nil {
				t.Fatalf("MNT from %v: %v", from, err)
			}
			nullErr := call(c, nfs3.Program, nfs3.Version, nfs3.ProcNull, root, nil, nil)
			if want := from.IsLoopback() || tc.otherOK; want != (mr.Status == nfs3.MntOK) || want != (nullErr == nil) {
				t.Errorf("%q: from %v: MNT %v, NULL %v; want served %v", tc.allow, from, mr.Status, nullErr, want)
			} else if !want && !isTooWeak(nullErr) {
				t.Errorf("%q: NULL from %v: %v, want AUTH_TOOWEAK", tc.allow, from, nullErr)
			}
		}
		stop()
	}
}

// dialFrom connects from address from to addr.
func dialFrom(t *testing.T, from netip.Addr, addr string) *rpc.Client {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	d := net.Dialer{LocalAddr: &net.TCPAddr{IP: from.AsSlice()}}
	c, err := rpc.NewClient(ctx, rpc.ClientOptions{
		Dial:    func(ctx context.Context) (net.Conn, error) { return d.DialContext(ctx, "tcp", addr) },
		Timeout: 10 * time.Second, Retrans: -1,
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}
