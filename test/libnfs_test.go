package test

import (
	"bufio"
	"bytes"
	"context"
	"crypto/sha256"
	"fmt"
	"io"
	"io/fs"
	"math/rand/v2"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"hushfs/test/harness"
)

// libnfs-utils (nfs-ls, nfs-cp, nfs-cat) is an NFSv3 client nobody here
// wrote; these tests run it against the `hushfs serve` process.

// libnfsURL is the URL of path (relative to the export) on s, with the
// ports given explicitly because `hushfs serve` does not register with a
// portmapper.
func libnfsURL(s *harness.Serve, path string) string {
	_, nfsPort, _ := net.SplitHostPort(s.NFSAddr)
	_, mountPort, _ := net.SplitHostPort(s.MountAddr)
	p := strings.TrimSuffix(s.ExportPath, "/") + "/" + strings.TrimPrefix(path, "/")
	return fmt.Sprintf("nfs://127.0.0.1%s?version=3&nfsport=%s&mountport=%s", p, nfsPort, mountPort)
}

// runTool runs one libnfs-utils command with a deadline and returns stdout.
func runTool(t testing.TB, timeout time.Duration, name string, args ...string) []byte {
	t.Helper()
	if _, err := exec.LookPath(name); err != nil {
		t.Fatalf("%s not installed (scripts/install-deps.sh installs libnfs-utils): %v", name, err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, name, args...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	start := time.Now()
	if err := cmd.Run(); err != nil {
		t.Fatalf("%s %s: %v (after %v)\nstderr: %s\nstdout: %s", name, strings.Join(args, " "), err,
			time.Since(start).Round(time.Millisecond), stderr.String(), tail(stdout.String(), 20))
	}
	return stdout.Bytes()
}

func tail(s string, n int) string {
	lines := strings.Split(s, "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

// writeRandomFile writes size pseudo-random bytes (seeded) and returns
// their SHA-256.
func writeRandomFile(t testing.TB, path string, size int64, seed uint64) [32]byte {
	t.Helper()
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	h := sha256.New()
	rnd := rand.NewChaCha8([32]byte{byte(seed), byte(seed >> 8), 7})
	w := bufio.NewWriterSize(io.MultiWriter(f, h), 1<<20)
	if _, err := io.CopyN(w, rnd, size); err != nil {
		t.Fatalf("write %s: %v", path, err)
	}
	if err := w.Flush(); err != nil {
		t.Fatal(err)
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
	var sum [32]byte
	copy(sum[:], h.Sum(nil))
	return sum
}

func sha256File(t testing.TB, path string) ([32]byte, int64) {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	h := sha256.New()
	n, err := io.Copy(h, f)
	if err != nil {
		t.Fatalf("read %s: %v", path, err)
	}
	var sum [32]byte
	copy(sum[:], h.Sum(nil))
	return sum, n
}

// nfsLsLine is one line of nfs-ls: mode, nlink, uid, gid, size, path.
var nfsLsLine = regexp.MustCompile(`^([-dlpcbs][-rwxsStT]{9})\s+(\d+)\s+(\d+)\s+(\d+)\s+(\d+) (.+)$`)

// TestLibnfsList lists a tree recursively with nfs-ls and compares it with
// the directory on disk: every path, type and size.
func TestLibnfsList(t *testing.T) {
	dir := t.TempDir()
	files := map[string]int{
		"top.txt":                  5,
		"empty":                    0,
		"a/b/c/deep.bin":           70000,
		"a/b/sibling":              1,
		"name with spaces":         3,
		"ünïcødé-名前":               2,
		"a/many/" + "f" + "000":    0,
		"a/many/" + "f" + "001":    0,
		"a/emptydir/.hidden":       4,
		"a/b/c/d/e/f/g/h/i/j/leaf": 9,
	}
	for i := 2; i < 150; i++ {
		files[fmt.Sprintf("a/many/f%03d", i)] = i % 7
	}
	for p, size := range files {
		full := filepath.Join(dir, p)
		if err := os.MkdirAll(filepath.Dir(full), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(full, bytes.Repeat([]byte{'z'}, size), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Symlink("top.txt", filepath.Join(dir, "link")); err != nil {
		t.Fatal(err)
	}
	s := harness.StartServe(t, dir)

	want := map[string]string{}
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil || p == dir {
			return err
		}
		info, err := os.Lstat(p)
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(dir, p)
		typ := byte('-')
		switch {
		case info.IsDir():
			typ = 'd'
		case info.Mode()&fs.ModeSymlink != 0:
			typ = 'l'
		}
		want[rel] = lsKey(typ, info.Size(), info.IsDir())
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}

	out := runTool(t, 30*time.Second, "nfs-ls", "-R", libnfsURL(s, "/"))
	got := map[string]string{}
	for _, line := range strings.Split(strings.TrimRight(string(out), "\n"), "\n") {
		m := nfsLsLine.FindStringSubmatch(line)
		if m == nil {
			t.Errorf("unparsable nfs-ls line %q", line)
			continue
		}
		size, _ := strconv.ParseInt(m[5], 10, 64)
		name := m[6]
		if name == "." || name == ".." || strings.HasSuffix(name, "/.") || strings.HasSuffix(name, "/..") {
			continue
		}
		if _, dup := got[name]; dup {
			t.Errorf("nfs-ls listed %q twice", name)
		}
		got[name] = lsKey(m[1][0], size, m[1][0] == 'd')
	}
	for p, w := range want {
		if g, ok := got[p]; !ok {
			t.Errorf("nfs-ls -R misses %q", p)
		} else if g != w {
			t.Errorf("nfs-ls -R %q: %s, want %s", p, g, w)
		}
	}
	for p := range got {
		if _, ok := want[p]; !ok {
			t.Errorf("nfs-ls -R lists %q, not on disk", p)
		}
	}
	if len(want) < 150 {
		t.Fatalf("tree has only %d entries", len(want))
	}
}

// lsKey is the type and (for non-directories) size of an entry: directory
// sizes are file system specific.
func lsKey(typ byte, size int64, isDir bool) string {
	if isDir {
		return "d"
	}
	return fmt.Sprintf("%c %d", typ, size)
}

// TestLibnfsCopy copies files of 0 B, 1 B, 1 MiB + 1 and 256 MiB into and
// out of `hushfs serve` with nfs-cp and compares SHA-256 at every step;
// nfs-cat reads a small one.
func TestLibnfsCopy(t *testing.T) {
	dir := t.TempDir()   // exported
	local := t.TempDir() // the client side
	s := harness.StartServe(t, dir)

	for i, size := range []int64{0, 1, 1<<20 + 1, 256 << 20} {
		name := fmt.Sprintf("f-%d", size)
		t.Run(name, func(t *testing.T) {
			src := filepath.Join(local, name+".src")
			sum := writeRandomFile(t, src, size, uint64(i+1))
			defer os.Remove(src)

			start := time.Now()
			runTool(t, 90*time.Second, "nfs-cp", src, libnfsURL(s, name))
			in := time.Since(start)
			served := filepath.Join(dir, name)
			if got, n := sha256File(t, served); got != sum || n != size {
				t.Fatalf("after nfs-cp in: served file has %d bytes, sha256 %x; want %d bytes, %x", n, got, size, sum)
			}

			dst := filepath.Join(local, name+".dst")
			start = time.Now()
			runTool(t, 90*time.Second, "nfs-cp", libnfsURL(s, name), dst)
			out := time.Since(start)
			defer os.Remove(dst)
			if got, n := sha256File(t, dst); got != sum || n != size {
				t.Fatalf("after nfs-cp out: %d bytes, sha256 %x; want %d bytes, %x", n, got, size, sum)
			}
			t.Logf("%d bytes: in %v, out %v", size, in.Round(time.Millisecond), out.Round(time.Millisecond))
			if size > 1<<20 {
				os.Remove(served)
			}
		})
	}

	t.Run("nfs-cat", func(t *testing.T) {
		want := []byte("cat me\x00\xff\n")
		if err := os.WriteFile(filepath.Join(dir, "cat.txt"), want, 0o644); err != nil {
			t.Fatal(err)
		}
		if got := runTool(t, 30*time.Second, "nfs-cat", libnfsURL(s, "cat.txt")); !bytes.Equal(got, want) {
			t.Errorf("nfs-cat = %q, want %q", got, want)
		}
	})

	if !s.Alive() {
		t.Fatalf("server died:\n%s", s.Output())
	}
}
