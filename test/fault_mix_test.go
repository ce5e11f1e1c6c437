package test

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"hushfs/test/fsx"
	"hushfs/test/harness"
)

// TestFaultMixed: calls cut short and connections closed at random (1% of
// calls each), up to 2 ms of reply jitter and a slow reader (replies read
// 1,500 bytes at a time) in front of the server, all at once, under fsx
// and an untar on a hard mount: both end byte-exact, and every kind of
// fault happened. (No pause after each small read: there are some 50,000
// of them, and each pause took about a millisecond here, however short.)
func TestFaultMixed(t *testing.T) {
	requireMountTools(t)
	bin := harness.BuildHushfs(t)
	export, mnt := t.TempDir(), t.TempDir()
	s := harness.StartServe(t, export)
	p := startFaultProxy(t, bin, s.NFSAddr, "--seed", "11", "--truncate-prob", "0.01", "--close-prob", "0.01",
		"--jitter", "2ms", "--slow-read", "1500")
	m := mountThrough(t, bin, s, p, mnt, "hard")

	seed := int64(20261125)
	cfg := func(other string) fsx.Config {
		return fsx.Config{Seed: seed, Ops: 1500, MaxLen: 1 << 20, MaxIO: 256 << 10,
			Deadline: time.Now().Add(90 * time.Second), Logf: t.Logf, OtherPath: other}
	}
	local := filepath.Join(t.TempDir(), "fsx")
	if err := fsx.Run(local, cfg(local)); err != nil {
		t.Fatalf("local reference run: %v", err)
	}
	want := readFile(t, local)
	start := time.Now()
	if err := fsx.Run(filepath.Join(mnt, "fsx"), cfg(filepath.Join(export, "fsx"))); err != nil {
		t.Fatalf("%v\n%s", err, m.Output())
	}
	t.Logf("fsx: 1,500 operations in %v", time.Since(start).Round(time.Millisecond))
	sameBytes(t, "fsx file through the mount vs the local run", readFile(t, filepath.Join(mnt, "fsx")), want)
	sameBytes(t, "fsx file on the server's disk vs the local run", readFile(t, filepath.Join(export, "fsx")), want)

	files, archive := makeTar(t, 300, 8)
	tarFile := filepath.Join(t.TempDir(), "files.tar")
	must(t, "write tar", os.WriteFile(tarFile, archive, 0o644))
	dest := filepath.Join(mnt, "untar")
	must(t, "mkdir", os.Mkdir(dest, 0o755))
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	start = time.Now()
	cmd := exec.CommandContext(ctx, "tar", "-xf", tarFile, "-C", dest)
	cmd.WaitDelay = 2 * time.Second
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("tar -xf onto the mount: %v\n%s\n%s", err, out, m.Output())
	}
	t.Logf("untar of %d files in %v", len(files), time.Since(start).Round(time.Millisecond))
	checkSums(t, files, dest, filepath.Join(export, "untar"))

	f := p.Counts(t).Faults
	t.Logf("faults: %+v", f)
	if f.Truncated == 0 || f.Closes == 0 || f.JitteredReplies == 0 || f.SlowReads == 0 {
		t.Errorf("not every kind of fault happened: %+v", f)
	}
	if err := m.Unmount(false); err != nil {
		t.Errorf("unmount: %v\n%s", err, m.Output())
	}
}
