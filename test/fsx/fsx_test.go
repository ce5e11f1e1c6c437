package fsx

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// The exerciser against a local file, where the kernel's own file system
// is the reference: any disagreement is a bug in fsx itself.

func TestRunLocal(t *testing.T) {
	for _, c := range []struct {
		name          string
		ops           int
		maxLen, maxIO int64
	}{
		{"small file", 10000, 4096, 1024},
		{"default sizes", 10000, 0, 0},
		{"large writes", 3000, 3 << 20, 1 << 20},
	} {
		t.Run(c.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "fsx")
			var ops [numOps]int
			var holes int
			cfg := Config{Seed: 42, Ops: c.ops, MaxLen: c.maxLen, MaxIO: c.maxIO, Logf: t.Logf,
				Deadline: time.Now().Add(2 * time.Minute),
				OnOp: func(i int, desc string) {
					for k, name := range opNames {
						if strings.HasPrefix(desc, name+" ") || desc == name || (opKind(k) == opReopen && desc == "close+reopen") {
							ops[k]++
							break
						}
					}
					if strings.HasSuffix(desc, " hole") {
						holes++
					}
				}}
			if err := Run(path, cfg); err != nil {
				t.Fatal(err)
			}
			// Every kind of operation ran, and writes made holes.
			for k, n := range ops {
				if n == 0 {
					t.Errorf("no %s in %d operations", opNames[k], c.ops)
				}
			}
			if holes == 0 {
				t.Error("no write beyond end of file")
			}
			t.Logf("operations: %v, writes leaving holes: %d", ops, holes)
		})
	}
}

// TestReproducible: the same seed gives the same operations and the same
// file; another seed does not.
func TestReproducible(t *testing.T) {
	dir := t.TempDir()
	trace := func(seed int64, name string) ([]string, []byte) {
		var descs []string
		path := filepath.Join(dir, name)
		err := Run(path, Config{Seed: seed, Ops: 2000, OnOp: func(i int, desc string) {
			descs = append(descs, desc)
		}})
		if err != nil {
			t.Fatal(err)
		}
		b, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		return descs, b
	}
	a, fa := trace(7, "a")
	b, fb := trace(7, "b")
	c, _ := trace(8, "c")
	if len(a) != 2000 {
		t.Fatalf("%d operations reported, want 2000", len(a))
	}
	if strings.Join(a, "\n") != strings.Join(b, "\n") || !bytes.Equal(fa, fb) {
		t.Error("two runs with seed 7 differ")
	}
	if strings.Join(a, "\n") == strings.Join(c, "\n") {
		t.Error("seeds 7 and 8 give the same operations")
	}
}

// TestDetectsCorruption changes the file behind the exerciser's back and
// expects a failure that names the seed and lists the last operations.
func TestDetectsCorruption(t *testing.T) {
	t.Run("size", func(t *testing.T) {
		path := filepath.Join(t.TempDir(), "f")
		err := Run(path, Config{Seed: 3, Ops: 500, OnOp: func(i int, desc string) {
			if i == 100 {
				appendByte(t, path)
			}
		}})
		expectFailure(t, err, "seed 3", "operation 100 ", "size: fstat says")
	})
	t.Run("content", func(t *testing.T) {
		path := filepath.Join(t.TempDir(), "f")
		const ops = 500
		flipped := false
		err := Run(path, Config{Seed: 5, Ops: ops, OnOp: func(i int, desc string) {
			if i != ops-1 {
				return
			}
			// The last operation: only the final compare can see this.
			b, err := os.ReadFile(path)
			if err != nil {
				t.Error(err)
				return
			}
			if len(b) == 0 {
				appendByte(t, path)
				return
			}
			b[len(b)/2] ^= 0x55
			if err := os.WriteFile(path, b, 0o644); err != nil {
				t.Error(err)
			}
			flipped = true
		}})
		if !flipped {
			t.Fatal("the file was empty at the last operation; pick another seed")
		}
		expectFailure(t, err, "seed 5", "final compare", "1 bytes differ")
	})
	t.Run("read", func(t *testing.T) {
		// Zeros where the model has data: a read or reopen must notice
		// before the run ends.
		path := filepath.Join(t.TempDir(), "f")
		done := false
		err := Run(path, Config{Seed: 11, Ops: 3000, MaxLen: 4096, MaxIO: 4096, OnOp: func(i int, desc string) {
			if done || !strings.HasPrefix(desc, "pwrite") {
				return
			}
			st, err := os.Stat(path)
			if err != nil || st.Size() < 4096 {
				return
			}
			if err := os.WriteFile(path, make([]byte, st.Size()), 0o644); err != nil {
				t.Error(err)
			}
			done = true
		}})
		if !done {
			t.Fatal("the file never reached 4096 bytes")
		}
		expectFailure(t, err, "seed 11", "bytes differ", "pwrite off=")
	})
}

func appendByte(t *testing.T, path string) {
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_APPEND, 0)
	if err != nil {
		t.Error(err)
		return
	}
	defer f.Close()
	if _, err := f.Write([]byte{0xee}); err != nil {
		t.Error(err)
	}
}

func expectFailure(t *testing.T, err error, want ...string) {
	t.Helper()
	if err == nil {
		t.Fatal("corruption went unnoticed")
	}
	for _, w := range want {
		if !strings.Contains(err.Error(), w) {
			t.Errorf("failure does not mention %q:\n%v", w, err)
		}
	}
	if !strings.Contains(err.Error(), "last operations:\n  #") {
		t.Errorf("failure lists no operations:\n%v", err)
	}
}
