package main

import (
	"bytes"
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"strings"
	"syscall"
	"unsafe"

	"golang.org/x/sys/unix"
)

func fillRandom(r *rand.Rand, p []byte) {
	for i := 0; i < len(p); i += 8 {
		v := r.Uint64()
		for k := 0; k < 8 && i+k < len(p); k++ {
			p[i+k] = byte(v >> (8 * k))
		}
	}
}

// ---- big: large files written dd-like, read back and checked.

type bigJob struct {
	seed     uint64
	min, max int // MiB
	keep     int
	kept     []string
}

func (j *bigJob) about() string {
	return fmt.Sprintf("large files of %d–%d MiB (plus a ragged tail) of seeded random bytes written in chunks of 4 KiB–1 MiB, closed, read back through the mount (page cache and O_DIRECT alternately) and on the server's disk, SHA-256 compared; the newest %d kept", j.min, j.max, j.keep)
}

func (j *bigJob) setup(w *workload) error { j.kept = nil; return nil }

// stream is the content of big file n.
func (j *bigJob) stream(n int) io.Reader {
	var seed [32]byte
	copy(seed[:], fmt.Appendf(nil, "soak big %d %d", j.seed, n))
	return rand.NewChaCha8(seed)
}

var chunkSizes = []int{4 << 10, 64 << 10, 128 << 10, 1 << 20, 1<<20 + 4096, 300_001}

func (j *bigJob) iterate(ctx context.Context, w *workload, n int) error {
	name := fmt.Sprintf("g%04d", n)
	size := int64(j.min+w.rng.IntN(j.max-j.min+1))<<20 + int64(w.rng.IntN(4096))
	w.step("create %s", name)
	f, err := os.OpenFile(w.path(name), os.O_CREATE|os.O_TRUNC|os.O_WRONLY, 0o644)
	if err != nil {
		return err
	}
	w.model.set(name, expect{kind: kindFile, size: -1, perm: 0o644})
	h := sha256.New()
	src := j.stream(n)
	buf := make([]byte, 2<<20)
	for off := int64(0); off < size; {
		c := int64(chunkSizes[w.rng.IntN(len(chunkSizes))])
		c = min(c, size-off)
		io.ReadFull(src, buf[:c])
		h.Write(buf[:c])
		w.step("write %s: %d bytes at %d of %d", name, c, off, size)
		if _, err := f.Write(buf[:c]); err != nil {
			f.Close()
			return fmt.Errorf("write %s at %d: %w", name, off, err)
		}
		off += c
	}
	w.step("close %s (%d bytes)", name, size)
	if err := f.Close(); err != nil {
		return fmt.Errorf("close %s: %w", name, err)
	}
	var sum [sha256.Size]byte
	h.Sum(sum[:0])
	w.model.set(name, expect{kind: kindFile, sum: &sum, size: size, perm: 0o644})
	direct := n%2 == 0
	how := "through the mount"
	if direct {
		how = "through the mount with O_DIRECT"
	}
	// Both are read before either is judged: which of them differs tells
	// a lost write from a bad read.
	var bad []string
	for _, p := range []struct {
		where, path string
		direct      bool
	}{{how, w.path(name), direct}, {"on the server's disk", w.diskPath(name), false}} {
		w.step("read back %s %s", name, p.where)
		got, gsize, err := hashFile(p.path, p.direct)
		if err != nil {
			return fmt.Errorf("read back %s %s: %w", name, p.where, err)
		}
		if got != sum || gsize != size {
			bad = append(bad, fmt.Sprintf("%s: %s", p.where, j.locate(p.path, n, size)))
		} else {
			bad = append(bad, p.where+": right")
		}
	}
	if !strings.HasSuffix(bad[0], ": right") || !strings.HasSuffix(bad[1], ": right") {
		return mismatchf("%s: %s", name, strings.Join(bad, "; "))
	}
	j.kept = append(j.kept, name)
	for len(j.kept) > j.keep {
		old := j.kept[0]
		w.step("remove %s", old)
		if err := os.Remove(w.path(old)); err != nil {
			return err
		}
		w.model.del(old)
		j.kept = j.kept[1:]
	}
	return nil
}

// hashFile reads a whole file (with O_DIRECT if asked) and returns its
// SHA-256 and length.
func hashFile(path string, direct bool) ([sha256.Size]byte, int64, error) {
	var sum [sha256.Size]byte
	flags := os.O_RDONLY
	if direct {
		flags |= syscall.O_DIRECT
	}
	f, err := os.OpenFile(path, flags, 0)
	if err != nil {
		return sum, 0, err
	}
	defer f.Close()
	// O_DIRECT wants an aligned buffer.
	raw := make([]byte, 1<<20+4096)
	off := 0
	if a := int(uintptr(unsafe.Pointer(&raw[0])) & 4095); a != 0 {
		off = 4096 - a
	}
	buf := raw[off : off+1<<20]
	h := sha256.New()
	var n int64
	for {
		k, err := unix.Read(int(f.Fd()), buf)
		if errors.Is(err, unix.EINTR) {
			continue
		}
		if err != nil {
			return sum, n, err
		}
		if k == 0 {
			break
		}
		h.Write(buf[:k])
		n += int64(k)
	}
	h.Sum(sum[:0])
	return sum, n, nil
}

// locate describes where a big file differs from what was written.
func (j *bigJob) locate(path string, n int, size int64) string {
	f, err := os.Open(path)
	if err != nil {
		return fmt.Sprintf("SHA-256 differs; reopening to locate the difference: %v", err)
	}
	defer f.Close()
	src := j.stream(n)
	want := make([]byte, 1<<20)
	got := make([]byte, 1<<20)
	for off := int64(0); ; off += int64(len(want)) {
		k := int(min(int64(len(want)), max(size-off, 0)))
		io.ReadFull(src, want[:k])
		g, err := io.ReadFull(f, got)
		if err != nil && !errors.Is(err, io.ErrUnexpectedEOF) && !errors.Is(err, io.EOF) {
			return fmt.Sprintf("SHA-256 differs; reading at %d: %v", off, err)
		}
		if !bytes.Equal(got[:g], want[:k]) {
			return fmt.Sprintf("SHA-256 differs (file of %d bytes): %s", size, describeDiff(off, got[:g], want[:k]))
		}
		if k == 0 || g == 0 {
			return fmt.Sprintf("SHA-256 differed but a second read matches (%d bytes): a transient difference", size)
		}
	}
}
