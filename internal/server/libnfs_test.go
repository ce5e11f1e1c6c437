package server

import (
	"bytes"
	"context"
	"crypto/rand"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// Interoperability with an independent client implementation: libnfs's
// command-line tools, when installed.
func TestLibnfsInterop(t *testing.T) {
	for _, tool := range []string{"nfs-cp", "nfs-ls", "nfs-cat"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Skipf("%s not installed", tool)
		}
	}
	e := startEnv(t, false)
	_, port, _ := net.SplitHostPort(e.addr)
	// NFS and MOUNT are served on the same port here.
	url := func(p string) string {
		return fmt.Sprintf("nfs://127.0.0.1%s%s?nfsport=%s&mountport=%s&version=3", e.srv.Root(), p, port, port)
	}
	run := func(args ...string) string {
		t.Helper()
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		out, err := exec.CommandContext(ctx, args[0], args[1:]...).CombinedOutput()
		if err != nil {
			t.Fatalf("%s: %v\n%s", strings.Join(args, " "), err, out)
		}
		return string(out)
	}

	data := make([]byte, 2<<20+777)
	rand.Read(data)
	local := filepath.Join(t.TempDir(), "in")
	os.WriteFile(local, data, 0o644)
	run("nfs-cp", local, url("/copied"))
	if got, _ := os.ReadFile(filepath.Join(e.root, "copied")); !bytes.Equal(got, data) {
		t.Fatal("file written by libnfs differs")
	}
	back := filepath.Join(t.TempDir(), "out")
	run("nfs-cp", url("/copied"), back)
	if got, _ := os.ReadFile(back); !bytes.Equal(got, data) {
		t.Fatal("file read by libnfs differs")
	}
	os.WriteFile(filepath.Join(e.root, "small"), []byte("small file\n"), 0o644)
	if out := run("nfs-cat", url("/small")); out != "small file\n" {
		t.Fatalf("nfs-cat: %q", out)
	}
	dir := filepath.Join(e.root, "many")
	os.Mkdir(dir, 0o755)
	for i := range 500 {
		os.WriteFile(filepath.Join(dir, fmt.Sprintf("entry-%03d", i)), nil, 0o644)
	}
	out := run("nfs-ls", "-R", url(""))
	for i := range 500 {
		if !strings.Contains(out, fmt.Sprintf("entry-%03d\n", i)) {
			t.Fatalf("nfs-ls -R lacks entry-%03d:\n%s", i, out)
		}
	}
}
