package test

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"hushfs/test/harness"
)

// lsl is `ls -ln --full-time dir`, without its "total" line (blocks as
// the client rounds them), within 60 s.
func lsl(t *testing.T, what, dir string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	out, err := exec.CommandContext(ctx, "ls", "-ln", "--full-time", dir).CombinedOutput()
	if err != nil {
		t.Fatalf("%s: ls -l %s: %v\n%.2000s", what, dir, err, out)
	}
	_, rest, _ := strings.Cut(string(out), "\n")
	lines := strings.Split(rest, "\n")
	for i, l := range lines {
		lines[i] = strings.Join(strings.Fields(l), " ") // column widths follow the sizes
	}
	return strings.Join(lines, "\n")
}

// sameListing fails unless the mount's ls -l equals the host's.
func sameListing(t *testing.T, what, mounted, host string) {
	t.Helper()
	got, want := lsl(t, what, mounted), lsl(t, what+" (host)", host)
	if got == want {
		return
	}
	g, w := strings.Split(got, "\n"), strings.Split(want, "\n")
	for i := 0; i < max(len(g), len(w)); i++ {
		gl, wl := "", ""
		if i < len(g) {
			gl = g[i]
		}
		if i < len(w) {
			wl = w[i]
		}
		if gl != wl {
			t.Fatalf("%s: ls -l differs from the host's at line %d:\n got %q\nwant %q", what, i, gl, wl)
		}
	}
}

// TestNFSv41DirDelegation: a listing asks for the directory's delegation
// in the READDIR's COMPOUND; while it is held, ls -l of 1,000 files again
// after the attributes' lifetime costs no call (the server keeps the
// entries' attributes too, by recalling). Another client's create, remove,
// rename and write, and a change on the server's host, each recall it
// (counted), and the holder's next ls -l shows the change; unmounting
// returns it (the server's count).
func TestNFSv41DirDelegation(t *testing.T) {
	requireMountTools(t)
	bin := harness.BuildHushfs(t)
	export := t.TempDir()
	hostDir := filepath.Join(export, "d")
	must(t, "mkdir", os.Mkdir(hostDir, 0o755))
	for i := range 1000 {
		must(t, "create", os.WriteFile(filepath.Join(hostDir, fmt.Sprintf("f%04d", i)), []byte("x"), 0o644))
	}
	metrics := freeAddr(t)
	s := harness.StartServe(t, export, "--metrics", metrics)
	a, dirA := serveV41Opts(t, bin, s, "actimeo=1")
	b, dirB := serveV41Opts(t, bin, s, "actimeo=1")
	pa, pb := filepath.Join(dirA, "d"), filepath.Join(dirB, "d")

	// The way there is delegated too: the root's listing.
	_, err := os.ReadDir(dirA)
	must(t, "A: list the root", err)
	prev := a.Stats(t)
	sameListing(t, "A: first ls -l", pa, hostDir)
	t.Logf("A: first ls -l of 1,000 files: calls {%s}", opsLine(delta(prev, a.Stats(t)).Ops))
	if n := serverOps(t, metrics, "GET_DIR_DELEGATION"); n < 1 {
		t.Fatalf("server: %d GET_DIR_DELEGATIONs after A's listing, want one", n)
	}
	time.Sleep(2500 * time.Millisecond) // past actimeo=1
	prev = a.Stats(t)
	sameListing(t, "A: ls -l again", pa, hostDir)
	expectCounts(t, "A: ls -l again past the attributes' lifetime, the delegation held", delta(prev, a.Stats(t)), nil)

	// Another client's changes: a create, remove or rename is told to A
	// (CB_NOTIFY, nfsv41_dirnotify_test.go) and so is a write or chmod of
	// an entry (its new attributes); A's next ls -l shows it.
	changes := []struct {
		what string
		do   func() error
	}{
		{"B creates a file", func() error { return os.WriteFile(filepath.Join(pb, "new1"), []byte("new"), 0o644) }},
		{"B removes a file", func() error { return os.Remove(filepath.Join(pb, "f0001")) }},
		{"B renames a file", func() error { return os.Rename(filepath.Join(pb, "f0002"), filepath.Join(pb, "g0002")) }},
		{"B writes a file", func() error {
			f, err := os.OpenFile(filepath.Join(pb, "f0003"), os.O_WRONLY|os.O_APPEND, 0)
			if err != nil {
				return err
			}
			_, err = f.WriteString("more bytes")
			if cerr := f.Close(); err == nil {
				err = cerr
			}
			return err
		}},
		{"B changes a file's mode", func() error { return os.Chmod(filepath.Join(pb, "f0006"), 0o600) }},
	}
	for _, c := range changes {
		prev = a.Stats(t)
		within(t, c.what, 30*time.Second, c.do)
		d := delta(prev, a.Stats(t))
		if d.Ops["DELEGRETURN"].Ops != 0 {
			t.Errorf("A while %s: calls {%s}, want no DELEGRETURN (notified)", c.what, opsLine(d.Ops))
		}
		mid := a.Stats(t)
		sameListing(t, "A after "+c.what, pa, hostDir)
		t.Logf("A, %s: notified; the next ls -l: calls {%s}", c.what, opsLine(delta(mid, a.Stats(t)).Ops))
	}

	// A change on the server's host cannot wait: it is told once seen.
	// A's next ls -l shows it.
	host := []struct {
		what string
		do   func() error
	}{
		{"the host creates a file", func() error { return os.WriteFile(filepath.Join(hostDir, "host1"), []byte("h"), 0o644) }},
		{"the host writes a file", func() error {
			return os.WriteFile(filepath.Join(hostDir, "f0004"), []byte("written on the host"), 0o644)
		}},
		{"the host changes a file's mode", func() error { return os.Chmod(filepath.Join(hostDir, "f0005"), 0o640) }},
	}
	for _, c := range host {
		time.Sleep(1500 * time.Millisecond) // A's attributes expire: only the delegation keeps them
		prev = a.Stats(t)
		notifies := serverCallbacks(t, metrics, "CB_NOTIFY")
		within(t, c.what, 10*time.Second, c.do)
		for deadline := time.Now().Add(10 * time.Second); serverCallbacks(t, metrics, "CB_NOTIFY") == notifies; {
			if time.Now().After(deadline) {
				t.Fatalf("%s: no CB_NOTIFY within 10 s", c.what)
			}
			time.Sleep(20 * time.Millisecond)
		}
		time.Sleep(100 * time.Millisecond) // the rest of the change's events
		sameListing(t, "A after "+c.what, pa, hostDir)
		if d := delta(prev, a.Stats(t)); d.Ops["DELEGRETURN"].Ops != 0 {
			t.Errorf("A after %s: calls {%s}, want no DELEGRETURN (notified)", c.what, opsLine(d.Ops))
		}
	}

	time.Sleep(1500 * time.Millisecond)
	prev = a.Stats(t)
	sameListing(t, "A: ls -l again at the end", pa, hostDir)
	expectCounts(t, "A: ls -l again at the end, the delegation held", delta(prev, a.Stats(t)), nil)
	returns := serverOps(t, metrics, "DELEGRETURN")
	must(t, "unmount A", a.Unmount(false))
	if n := serverOps(t, metrics, "DELEGRETURN") - returns; n < 1 {
		t.Errorf("server: %d DELEGRETURNs at A's unmount, want the directory's delegation back", n)
	}
	must(t, "unmount B", b.Unmount(false))
}
