package test

import (
	"os"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"hushfs/test/fsx"
	"hushfs/test/harness"
)

// fsxSeedEnv overrides the exerciser's seed, to replay a failure.
const fsxSeedEnv = "HUSHFS_FSX_SEED"

// TestFSX runs the fsx-style exerciser on one file through a hushfs mount of
// each server (ganesha over NFSv3 and NFSv4.1, hushfs serve), with another
// client changing the file on the server between close and open: 10,000 random writes, truncates, reads, mapped reads, fsyncs
// and reopens, each checked against the exerciser's model. The file left
// behind must also be byte for byte the one the same seed leaves in a local
// file, and the one on the server's disk.
func TestFSX(t *testing.T) {
	requireMountTools(t)
	bin := harness.BuildHushfs(t)
	seed := int64(20261123)
	if v := os.Getenv(fsxSeedEnv); v != "" {
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil {
			t.Fatalf("%s=%q: %v", fsxSeedEnv, v, err)
		}
		seed = n
	}
	t.Logf("fsx seed %d (set %s to replay another)", seed, fsxSeedEnv)
	// other is the file as another client sees it: directly on the
	// server's disk (for the local reference, the same local file).
	config := func(t *testing.T, other string) fsx.Config {
		return fsx.Config{Seed: seed, Ops: 10000, MaxLen: 3 << 20, MaxIO: 1280 << 10,
			Deadline: time.Now().Add(2 * time.Minute), Logf: t.Logf, OtherPath: other}
	}

	// The reference: the same operations on a local file.
	local := filepath.Join(t.TempDir(), "fsx")
	if err := fsx.Run(local, config(t, local)); err != nil {
		t.Fatalf("local reference run: %v", err)
	}
	want, err := os.ReadFile(local)
	if err != nil {
		t.Fatal(err)
	}

	check := func(t *testing.T, mnt, export string) {
		start := time.Now()
		if err := fsx.Run(filepath.Join(mnt, "fsx"), config(t, filepath.Join(export, "fsx"))); err != nil {
			t.Fatal(err)
		}
		t.Logf("10,000 operations in %v", time.Since(start).Round(time.Millisecond))
		sameBytes(t, "file through the mount vs the local run", readFile(t, filepath.Join(mnt, "fsx")), want)
		sameBytes(t, "file on the server's disk vs the local run", readFile(t, filepath.Join(export, "fsx")), want)
	}
	t.Run("ganesha", func(t *testing.T) {
		g := harness.StartGanesha(t, harness.GaneshaOptions{})
		mnt := t.TempDir()
		// No ports given: the mount asks ganesha's rpcbind for them.
		harness.StartMount(t, harness.MountSpec{Bin: bin, Server: g.Addr, Export: g.ExportPath, Dir: mnt, NS: g.NS})
		check(t, mnt, g.ExportDir)
	})
	t.Run("ganesha-v4.1", func(t *testing.T) {
		g := harness.StartGanesha(t, harness.GaneshaOptions{NFSv4: true})
		mnt := t.TempDir()
		harness.MountGaneshaV41(t, bin, g, mnt, "")
		check(t, mnt, g.ExportDir)
	})
	t.Run("hushfs-serve", func(t *testing.T) {
		export, mnt := t.TempDir(), t.TempDir()
		s := harness.StartServe(t, export)
		harness.MountServe(t, bin, s, mnt, "")
		check(t, mnt, export)
	})
}
