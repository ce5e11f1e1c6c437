package test

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"hushfs/internal/client"
	"hushfs/test/harness"
)

// makeTree writes a small source tree: nested directories, files of
// several sizes (empty to 300 KiB), a symbolic link, a hard link, modes.
func makeTree(t *testing.T, root string) {
	t.Helper()
	for d := 0; d < 4; d++ {
		for s := 0; s < 3; s++ {
			dir := filepath.Join(root, fmt.Sprintf("d%d", d), fmt.Sprintf("s%d", s))
			must(t, "mkdir", os.MkdirAll(dir, 0o755))
			for f := 0; f < 8; f++ {
				size := (d*24 + s*8 + f) * 3000
				must(t, "write", os.WriteFile(filepath.Join(dir, fmt.Sprintf("f%d", f)), pattern(size, byte(d+s+f)), 0o640))
			}
		}
	}
	must(t, "symlink", os.Symlink("d0/s0/f1", filepath.Join(root, "link")))
	must(t, "link", os.Link(filepath.Join(root, "d1/s1/f1"), filepath.Join(root, "hard")))
	must(t, "chmod", os.Chmod(filepath.Join(root, "d2"), 0o700))
	must(t, "write", os.WriteFile(filepath.Join(root, "exec.sh"), []byte("#!/bin/sh\necho hi\n"), 0o755))
}

// runCmd runs a command with a bound, failing the test with its output.
func runCmd(t *testing.T, name string, args ...string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	if out, err := exec.CommandContext(ctx, name, args...).CombinedOutput(); err != nil {
		t.Fatalf("%s %v: %v\n%s", name, args, err, out)
	}
}

// TestNFSv41Mount mounts ganesha's export with `hushfs mount -o vers=4.1`
// and runs a small POSIX workload on the real FUSE mount: tar -x of a
// tree, diff -r against the source, stat, rename, rm -rf; then counts the
// COMPOUNDs of single operations (one per core call, as NFSv3's RPCs).
func TestNFSv41Mount(t *testing.T) {
	requireMountTools(t)
	bin := harness.BuildHushfs(t)
	g := harness.StartGanesha(t, harness.GaneshaOptions{NFSv4: true})
	mnt := t.TempDir()
	m := harness.StartMount(t, harness.MountSpec{Bin: bin, Server: g.Addr, Export: g.ExportPath, Dir: mnt,
		Options: fmt.Sprintf("vers=4.1,port=%d", g.NFSPort), NS: g.NS})

	s0 := m.Stats(t)
	expectCounts(t, "mount", s0, map[string]uint64{"MOUNT": 1})
	var st unix.Stat_t
	must(t, "stat root", unix.Stat(mnt, &st))
	expectCounts(t, "stat of the root", delta(s0, m.Stats(t)), nil)

	src := t.TempDir()
	makeTree(t, src)
	tarFile := filepath.Join(t.TempDir(), "tree.tar")
	runCmd(t, "tar", "-cf", tarFile, "-C", src, ".")
	dest := filepath.Join(mnt, "untar")
	must(t, "mkdir", os.Mkdir(dest, 0o755))
	m.ResetStats(t)
	runCmd(t, "tar", "-xf", tarFile, "-C", dest)
	untar := m.Stats(t)
	t.Logf("untar over v4.1: %s", opsLine(untar.Ops))
	runCmd(t, "diff", "-r", "--no-dereference", src, dest)
	// The server holds what was written, as the local file system sees it.
	runCmd(t, "diff", "-r", "--no-dereference", src, filepath.Join(g.ExportDir, "untar"))
	var a, b unix.Stat_t
	must(t, "stat", unix.Lstat(filepath.Join(dest, "hard"), &a))
	must(t, "stat", unix.Lstat(filepath.Join(dest, "d1/s1/f1"), &b))
	if a.Ino != b.Ino || a.Nlink != 2 {
		t.Errorf("hard link: inodes %d %d, nlink %d", a.Ino, b.Ino, a.Nlink)
	}
	must(t, "stat", unix.Lstat(filepath.Join(dest, "d2"), &a))
	if a.Mode&0o7777 != 0o700 {
		t.Errorf("d2 mode %o", a.Mode&0o7777)
	}
	must(t, "rename", os.Rename(filepath.Join(dest, "d3"), filepath.Join(mnt, "d3moved")))
	runCmd(t, "diff", "-r", filepath.Join(src, "d3"), filepath.Join(mnt, "d3moved"))
	must(t, "truncate", os.Truncate(filepath.Join(mnt, "d3moved/s0/f5"), 10))
	must(t, "stat", unix.Stat(filepath.Join(g.ExportDir, "d3moved/s0/f5"), &a))
	if a.Size != 10 {
		t.Errorf("truncated to 10, the server has %d", a.Size)
	}
	m.ResetStats(t)
	runCmd(t, "rm", "-rf", dest, filepath.Join(mnt, "d3moved"))
	t.Logf("rm -rf over v4.1: %s", opsLine(m.Stats(t).Ops))
	if left, _ := os.ReadDir(g.ExportDir); len(left) != 0 {
		t.Errorf("after rm -rf the export holds %d entries", len(left))
	}

	// One COMPOUND per core call, counted under v3's names.
	mib := pattern(1<<20, 1)
	steps := []struct {
		name string
		do   func()
		want map[string]uint64
	}{
		{"create, write 1 MiB, close", func() {
			f, err := os.Create(filepath.Join(mnt, "one"))
			must(t, "create", err)
			_, err = f.Write(mib)
			must(t, "write", err)
			must(t, "close", f.Close())
		}, map[string]uint64{"LOOKUP": 1, "CREATE": 1, "WRITE": 1}}, // its CLOSE rides with the next call
		{"stat of the written file", func() { must(t, "stat", unix.Stat(filepath.Join(mnt, "one"), &st)) }, nil},
		{"mkdir", func() { must(t, "mkdir", unix.Mkdir(filepath.Join(mnt, "d"), 0o755)) },
			map[string]uint64{"LOOKUP": 1, "MKDIR": 1}},
		{"chmod", func() { must(t, "chmod", unix.Chmod(filepath.Join(mnt, "one"), 0o600)) },
			map[string]uint64{"SETATTR": 1}},
		{"unlink", func() { must(t, "unlink", unix.Unlink(filepath.Join(mnt, "one"))) },
			map[string]uint64{"REMOVE": 1}},
		{"rmdir", func() { must(t, "rmdir", unix.Rmdir(filepath.Join(mnt, "d"))) },
			map[string]uint64{"RMDIR": 1}},
	}
	prev := m.Stats(t)
	for _, s := range steps {
		s.do()
		cur := m.Stats(t)
		d := delta(prev, cur)
		t.Logf("%s: %s", s.name, opsLine(d.Ops))
		expectCounts(t, s.name, d, s.want)
		prev = cur
	}
	if err := m.Unmount(false); err != nil {
		t.Fatalf("unmount: %v\n%s", err, m.Output())
	}
}

// opsLine prints counts by name, sorted.
func opsLine(ops map[string]client.OpStats) string {
	var parts []string
	for k, v := range ops {
		if n := v.Ops; n > 0 {
			parts = append(parts, fmt.Sprintf("%s %d", k, n))
		}
	}
	sort.Strings(parts)
	return strings.Join(parts, ", ")
}
