package test

import (
	"bytes"
	"net"
	"os"
	"path/filepath"
	"testing"
	"time"

	"hushfs/test/harness"
)

// serveV41 mounts a `hushfs serve` export over NFSv4.1 at a new directory
// (a client of its own: each mount is one).
func serveV41(t *testing.T, bin string, s *harness.Serve) (*harness.Mount, string) {
	t.Helper()
	dir := t.TempDir()
	_, port, _ := net.SplitHostPort(s.NFSAddr)
	return harness.StartMount(t, harness.MountSpec{Bin: bin, Server: "127.0.0.1", Export: s.ExportPath,
		Dir: dir, Options: "vers=4.1,port=" + port}), dir
}

// readBack opens, reads and closes p, failing the test unless it holds
// want.
func readBack(t *testing.T, what, p string, want []byte) {
	t.Helper()
	got, err := os.ReadFile(p)
	must(t, what, err)
	if !bytes.Equal(got, want) {
		t.Fatalf("%s: read %d bytes %q..., want %d bytes %q...", what, len(got), got[:min(len(got), 8)],
			len(want), want[:min(len(want), 8)])
	}
}

// TestNFSv41ReadDelegation: `hushfs serve` grants a read delegation with an
// OPEN for reading; under it a re-open costs no call (v3: one GETATTR).
// Another client's write recalls it, and the holder then reads the new data;
// so does a write made on the server's host (the server leases the file).
func TestNFSv41ReadDelegation(t *testing.T) {
	requireMountTools(t)
	bin := harness.BuildHushfs(t)
	export := t.TempDir()
	data1 := pattern(100<<10, 1)
	must(t, "write on the server", os.WriteFile(filepath.Join(export, "f"), data1, 0o644))
	s := harness.StartServe(t, export)
	a, dirA := serveV41(t, bin, s)
	b, dirB := serveV41(t, bin, s)
	pa, pb := filepath.Join(dirA, "f"), filepath.Join(dirB, "f")

	readBack(t, "A: first read", pa, data1)
	prev := a.Stats(t)
	readBack(t, "A: read again", pa, data1)
	d := delta(prev, a.Stats(t))
	t.Logf("NFSv4.1 re-open and read under the delegation: calls {%s}", opsLine(d.Ops))
	expectCounts(t, "A: open, read and close under the delegation", d, nil)

	// NFSv3 beside it: close-to-open revalidates each open.
	v3dir := t.TempDir()
	v3 := harness.MountServe(t, bin, s, v3dir, "")
	readBack(t, "v3: first read", filepath.Join(v3dir, "f"), data1)
	prev3 := v3.Stats(t)
	readBack(t, "v3: read again", filepath.Join(v3dir, "f"), data1)
	d3 := delta(prev3, v3.Stats(t))
	t.Logf("NFSv3 re-open and read: calls {%s}", opsLine(d3.Ops))
	must(t, "unmount v3", v3.Unmount(false))

	// B writes while A has the file open under the delegation only: A's
	// delegation is recalled, A opens the file for real (its descriptor
	// must not be left with a returned stateid) and returns it, and A
	// reads B's data at its next open.
	data2 := pattern(100<<10, 2)
	prev = a.Stats(t)
	held, err := os.Open(pa)
	must(t, "A: open under the delegation", err)
	done := make(chan error, 1)
	go func() { done <- os.WriteFile(pb, data2, 0o644) }()
	select {
	case err := <-done:
		must(t, "B: write", err)
	case <-time.After(30 * time.Second):
		t.Fatal("B: write not done after 30 s")
	}
	d = delta(prev, a.Stats(t))
	if d.Ops["DELEGRETURN"].Ops != 1 || d.Ops["OPEN"].Ops != 1 {
		t.Errorf("A while B wrote: calls {%s}, want one OPEN (its reader) and one DELEGRETURN", opsLine(d.Ops))
	}
	t.Logf("A, recalled with a reader open: calls {%s}", opsLine(d.Ops))
	must(t, "A: close", held.Close())
	// B's open for writing keeps A from a read delegation until B's
	// CLOSE, queued at B's last close, goes out (alone, within a second).
	for deadline := time.Now().Add(5 * time.Second); b.Stats(t).Ops["CLOSE"].Ops == 0; {
		if time.Now().After(deadline) {
			t.Fatalf("B sent no CLOSE within 5 s of its last close")
		}
		time.Sleep(50 * time.Millisecond)
	}
	readBack(t, "A: read after B's write", pa, data2)

	// A holds a delegation again; a write on the server's host breaks the
	// server's lease of the file, which recalls it; A sees the new data.
	readBack(t, "A: read again after B's write", pa, data2)
	prev = a.Stats(t)
	readBack(t, "A: re-open under the new delegation", pa, data2)
	expectCounts(t, "A: re-open under the new delegation", delta(prev, a.Stats(t)), nil)
	data3 := pattern(50<<10, 3)
	go func() { done <- os.WriteFile(filepath.Join(export, "f"), data3, 0o644) }()
	select {
	case err := <-done:
		must(t, "host write", err)
	case <-time.After(30 * time.Second):
		t.Fatal("write on the server's host not done after 30 s")
	}
	readBack(t, "A: read after the host's write", pa, data3)
	d = delta(prev, a.Stats(t))
	if d.Ops["DELEGRETURN"].Ops != 1 {
		t.Errorf("A around the host's write: calls {%s}, want one DELEGRETURN", opsLine(d.Ops))
	}
}
