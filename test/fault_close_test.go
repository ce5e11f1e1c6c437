package test

import (
	"archive/tar"
	"bytes"
	"context"
	"crypto/sha256"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"hushfs/test/fsx"
	"hushfs/test/harness"
)

// TestFaultCloseEvery50: with the proxy closing the connection right after
// every 50th call (the call reaches the server, its reply and any other in
// flight are lost), a hard mount reconnects and resends, and both the fsx
// exerciser and an untar of 1,000 small files end byte-exact, through the
// mount and on the server's disk. The proxy must have closed connections
// as often as its call count says.
func TestFaultCloseEvery50(t *testing.T) {
	requireMountTools(t)
	bin := harness.BuildHushfs(t)
	export, mnt := t.TempDir(), t.TempDir()
	s := harness.StartServe(t, export)
	p := startFaultProxy(t, bin, s.NFSAddr)
	m := mountThrough(t, bin, s, p, mnt, "hard")
	// Set on the running proxy, from the mounted state on.
	if f := p.SetFaults(t, "--close-every", "50"); f.CloseEvery != 50 {
		t.Fatalf("faults in force: %+v", f)
	}

	t.Run("fsx", func(t *testing.T) {
		seed := int64(20261124)
		cfg := func(other string) fsx.Config {
			return fsx.Config{Seed: seed, Ops: 3000, MaxLen: 1 << 20, MaxIO: 256 << 10,
				Deadline: time.Now().Add(90 * time.Second), Logf: t.Logf, OtherPath: other}
		}
		local := filepath.Join(t.TempDir(), "fsx")
		if err := fsx.Run(local, cfg(local)); err != nil {
			t.Fatalf("local reference run: %v", err)
		}
		want := readFile(t, local)
		before := p.Counts(t)
		start := time.Now()
		if err := fsx.Run(filepath.Join(mnt, "fsx"), cfg(filepath.Join(export, "fsx"))); err != nil {
			t.Fatalf("%v\n%s", err, m.Output())
		}
		after := p.Counts(t)
		closes := after.Faults.Closes - before.Faults.Closes
		t.Logf("3,000 operations in %v; the proxy closed the connection %d times", time.Since(start).Round(time.Millisecond), closes)
		sameBytes(t, "fsx file through the mount vs the local run", readFile(t, filepath.Join(mnt, "fsx")), want)
		sameBytes(t, "fsx file on the server's disk vs the local run", readFile(t, filepath.Join(export, "fsx")), want)
		if closes < 10 {
			t.Errorf("only %d connection closes during fsx", closes)
		}
	})

	t.Run("untar", func(t *testing.T) {
		files, archive := makeTar(t, 1000, 7)
		tarFile := filepath.Join(t.TempDir(), "files.tar")
		must(t, "write tar", os.WriteFile(tarFile, archive, 0o644))
		dest := filepath.Join(mnt, "untar")
		must(t, "mkdir", os.Mkdir(dest, 0o755))
		before := p.Counts(t)
		start := time.Now()
		ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
		defer cancel()
		cmd := exec.CommandContext(ctx, "tar", "-xf", tarFile, "-C", dest)
		cmd.WaitDelay = 2 * time.Second
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("tar -xf onto the mount: %v\n%s\n%s", err, out, m.Output())
		}
		untarred := time.Since(start)
		checkSums(t, files, dest, filepath.Join(export, "untar"))
		after := p.Counts(t)
		closes := after.Faults.Closes - before.Faults.Closes
		var calls uint64
		for _, n := range after.Calls {
			calls += n
		}
		for _, n := range before.Calls {
			calls -= n
		}
		t.Logf("untar of %d files in %v, checked in %v; %d calls through the proxy, %d connection closes",
			len(files), untarred.Round(time.Millisecond), (time.Since(start) - untarred).Round(time.Millisecond), calls, closes)
		// Every 50th call forwarded closes: some slack for calls that
		// arrive while a close is under way (counted, never forwarded).
		if closes < 20 || closes > calls/50+1 || closes < calls/50*8/10 {
			t.Errorf("%d connection closes for %d calls, want about one per 50", closes, calls)
		}
	})

	// Off again: no more closes.
	if f := p.SetFaults(t); f.Active() {
		t.Fatalf("faults still in force: %+v", f)
	}
	before := p.Counts(t).Faults.Closes
	for i := range 100 {
		must(t, "write", os.WriteFile(filepath.Join(mnt, fmt.Sprintf("after%d", i)), []byte{byte(i)}, 0o644))
	}
	if after := p.Counts(t).Faults.Closes; after != before {
		t.Errorf("%d connection closes with the faults off", after-before)
	}
	if err := m.Unmount(false); err != nil {
		t.Errorf("unmount: %v\n%s", err, m.Output())
	}
}

// checkSums compares the sha256 of every file under each root with sums.
func checkSums(t *testing.T, sums map[string][sha256.Size]byte, roots ...string) {
	t.Helper()
	for _, root := range roots {
		for name, sum := range sums {
			b, err := os.ReadFile(filepath.Join(root, name))
			if err != nil {
				t.Errorf("%s: %v", name, err)
				continue
			}
			if sha256.Sum256(b) != sum {
				t.Errorf("%s under %s: sha256 differs from the archive's (%d bytes)", name, root, len(b))
			}
		}
	}
}

// makeTar builds a tar of n small files (0 to 8 KiB of random bytes) in a
// few directories from a seeded generator, and returns each file's sha256
// by path.
func makeTar(t *testing.T, n int, seed uint64) (map[string][sha256.Size]byte, []byte) {
	t.Helper()
	r := rand.New(rand.NewPCG(seed, seed+1))
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	sums := map[string][sha256.Size]byte{}
	mtime := time.Unix(1_700_000_000, 0)
	for d := range 10 {
		if err := tw.WriteHeader(&tar.Header{Typeflag: tar.TypeDir, Name: fmt.Sprintf("d%02d/", d), Mode: 0o755, ModTime: mtime}); err != nil {
			t.Fatal(err)
		}
	}
	for i := range n {
		name := fmt.Sprintf("d%02d/f%04d", i%10, i)
		data := make([]byte, r.IntN(8<<10+1))
		for j := range data {
			data[j] = byte(r.Uint32())
		}
		hdr := &tar.Header{Typeflag: tar.TypeReg, Name: name, Mode: 0o644, Size: int64(len(data)), ModTime: mtime}
		if err := tw.WriteHeader(hdr); err != nil {
			t.Fatal(err)
		}
		if _, err := tw.Write(data); err != nil {
			t.Fatal(err)
		}
		sums[name] = sha256.Sum256(data)
	}
	if err := tw.Close(); err != nil {
		t.Fatal(err)
	}
	return sums, buf.Bytes()
}
