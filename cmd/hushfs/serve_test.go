package main

import (
	"bufio"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"syscall"
	"testing"
	"time"

	"hushfs/internal/nfs3"
	"hushfs/internal/rpc"
)

func TestParseServeArgs(t *testing.T) {
	o, err := parseServeArgs([]string{"--ro", "/srv/x", "--nfs-port", "0", "--listen=127.0.0.1", "--state-dir", "/tmp/s"})
	if err != nil {
		t.Fatal(err)
	}
	if o.dir != "/srv/x" || !o.readOnly || o.nfsPort != 0 || o.mountPort != 20048 || o.listen != "127.0.0.1" || o.stateDir != "/tmp/s" {
		t.Fatalf("%+v", o)
	}
	for _, bad := range [][]string{{}, {"a", "b"}, {"a", "--nfs-port", "70000"}, {"a", "--bogus"}} {
		if _, err := parseServeArgs(bad); err == nil {
			t.Errorf("%q accepted", bad)
		}
	}
}

// The real binary: prints its ports, serves MOUNT and NFS on both, and
// exits cleanly on SIGTERM.
func TestServeCommand(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root")
	}
	dir := t.TempDir()
	bin := filepath.Join(dir, "hushfs")
	build := exec.Command("go", "build", "-o", bin, ".")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("build: %v\n%s", err, out)
	}
	export := filepath.Join(dir, "export")
	os.Mkdir(export, 0o755)
	os.WriteFile(filepath.Join(export, "hello"), []byte("hi"), 0o644)

	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin, "serve", export, "--nfs-port", "0", "--mount-port", "0",
		"--listen", "127.0.0.1", "--state-dir", filepath.Join(dir, "state"))
	cmd.Stderr = os.Stderr
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer cmd.Process.Kill()
	line, err := bufio.NewReader(stdout).ReadString('\n')
	if err != nil {
		t.Fatalf("reading the address line: %v", err)
	}
	m := regexp.MustCompile(`^hushfs serve: nfs (127\.0\.0\.1:\d+) mount (127\.0\.0\.1:\d+)\n$`).FindStringSubmatch(line)
	if m == nil {
		t.Fatalf("address line %q", line)
	}
	if m[1] == m[2] {
		t.Fatalf("NFS and MOUNT on the same port with both 0: %q", line)
	}
	for _, addr := range []string{m[1], m[2]} {
		c, err := rpc.Dial(ctx, addr, rpc.ClientOptions{Timeout: 10 * time.Second, Retrans: -1})
		if err != nil {
			t.Fatal(err)
		}
		cred := rpc.SysCred(0, 0, nil, "test")
		var mr nfs3.MntRes
		if err := c.Call(ctx, nfs3.MountProgram, nfs3.MountVersion, nfs3.MountProcMnt, cred, &nfs3.MntArgs{Path: []byte("/")}, &mr); err != nil || mr.Status != nfs3.MntOK {
			t.Fatalf("MNT via %s: %v %v", addr, err, mr.Status)
		}
		var lr nfs3.LookupRes
		if err := c.Call(ctx, nfs3.Program, nfs3.Version, nfs3.ProcLookup, cred,
			&nfs3.LookupArgs{What: nfs3.DirOpArgs{Dir: mr.FH, Name: []byte("hello")}}, &lr); err != nil || lr.Status != nfs3.OK {
			t.Fatalf("LOOKUP via %s: %v %v", addr, err, lr.Status)
		}
		c.Close()
	}
	cmd.Process.Signal(syscall.SIGTERM)
	if err := cmd.Wait(); err != nil {
		t.Fatalf("exit after SIGTERM: %v", err)
	}
}
