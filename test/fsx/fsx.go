// Package fsx is a file system exerciser in the manner of the classic fsx:
// it applies a seeded random sequence of writes (write and pwrite, often
// beyond end of file, leaving holes), truncates up and down (ftruncate and
// truncate by path), reads (pread and mmap), fsyncs and close+reopen to one
// file, and checks the file against an in-memory model of what it must
// hold after every operation.
//
// After every operation the file's size (fstat) must equal the model's;
// every read and mapped read compares the bytes it covers; every reopen and
// the end of the run compare the whole file. A run is reproducible from its
// seed: the same Config gives the same operations, and a failure names the
// seed and the last operations.
package fsx

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"math/bits"
	"math/rand/v2"
	"os"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// Config configures a run. Zero fields take the defaults noted.
type Config struct {
	Seed int64
	// Ops is the number of operations; 10,000 when zero.
	Ops int
	// MaxLen bounds the file's size; 256 KiB when zero.
	MaxLen int64
	// MaxIO bounds one write or read; 64 KiB (or MaxLen if smaller) when
	// zero. Lengths are log-uniform, so most are small and some are large.
	MaxIO int64
	// Deadline, when not zero, ends the run with an error if it has not
	// finished by then.
	Deadline time.Time
	// Logf, when set, receives progress lines.
	Logf func(format string, args ...any)
	// OnOp, when set, is called after operation i has been applied and
	// before its result is checked, with the operation's description.
	OnOp func(i int, desc string)
	// OtherPath, when set, is the same file as another client sees it (on
	// the server, directly in the export). Between a close and the next
	// open, half the time, that client changes the file — a write at a
	// random place or a truncate — and the model with it: the reopen must
	// see the change (close-to-open).
	OtherPath string
}

// logTail is how many operations a failure report lists.
const logTail = 24

// Op kinds and their weights (out of the sum).
type opKind int

const (
	opWrite opKind = iota
	opPwrite
	opTruncate
	opTruncatePath
	opRead
	opMapRead
	opFsync
	opReopen
	numOps
)

var opWeights = [numOps]int{
	opWrite:        22,
	opPwrite:       22,
	opTruncate:     8,
	opTruncatePath: 3,
	opRead:         22,
	opMapRead:      16,
	opFsync:        2,
	opReopen:       3,
}

var opNames = [numOps]string{"write", "pwrite", "ftruncate", "truncate", "read", "mapread", "fsync", "reopen"}

// run is one run's state.
type run struct {
	path  string
	cfg   Config
	rng   *rand.Rand
	f     *os.File
	model []byte // the file's expected contents; len is its size
	log   []string
	op    int
}

// Run exercises the file at path (created or truncated) and returns the
// first disagreement between the file and the model, or nil. The file is
// left closed and in place.
func Run(path string, cfg Config) error {
	if cfg.Ops == 0 {
		cfg.Ops = 10000
	}
	if cfg.MaxLen <= 0 {
		cfg.MaxLen = 256 << 10
	}
	if cfg.MaxIO <= 0 {
		cfg.MaxIO = 64 << 10
	}
	cfg.MaxIO = min(cfg.MaxIO, cfg.MaxLen)
	if cfg.Logf == nil {
		cfg.Logf = func(string, ...any) {}
	}
	r := &run{path: path, cfg: cfg,
		rng: rand.New(rand.NewPCG(uint64(cfg.Seed), 0x6673785f68757368))}
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE|os.O_TRUNC, 0o644)
	if err != nil {
		return fmt.Errorf("fsx seed %d: open %s: %w", cfg.Seed, path, err)
	}
	r.f = f
	defer func() {
		if r.f != nil {
			r.f.Close()
		}
	}()
	total := 0
	for _, w := range opWeights {
		total += w
	}
	start := time.Now()
	for r.op = 0; r.op < cfg.Ops; r.op++ {
		if !cfg.Deadline.IsZero() && time.Now().After(cfg.Deadline) {
			return r.fail(fmt.Errorf("out of time after %d of %d operations (%v)", r.op, cfg.Ops, time.Since(start)))
		}
		pick := r.rng.IntN(total)
		kind := opKind(0)
		for ; pick >= opWeights[kind]; kind++ {
			pick -= opWeights[kind]
		}
		if err := r.do(kind); err != nil {
			return r.fail(err)
		}
		if err := r.checkSize(); err != nil {
			return r.fail(err)
		}
		if (r.op+1)%1000 == 0 {
			cfg.Logf("fsx seed %d: %d operations, size %d, %v", cfg.Seed, r.op+1, len(r.model), time.Since(start).Round(time.Millisecond))
		}
	}
	r.op = cfg.Ops
	r.record("final compare")
	if err := r.compareAll("final compare"); err != nil {
		return r.fail(err)
	}
	err = r.f.Close()
	r.f = nil
	if err != nil {
		return r.fail(fmt.Errorf("final close: %w", err))
	}
	return nil
}

// fail wraps err with the seed and the last operations.
func (r *run) fail(err error) error {
	return fmt.Errorf("fsx seed %d failed at operation %d of %d on %s: %w\nlast operations:\n  %s",
		r.cfg.Seed, r.op, r.cfg.Ops, r.path, err, strings.Join(r.log, "\n  "))
}

func (r *run) record(desc string) {
	if len(r.log) == logTail {
		r.log = append(r.log[:0], r.log[1:]...)
	}
	r.log = append(r.log, fmt.Sprintf("#%d %s", r.op, desc))
}

// ioLen picks a length in [1, max], log-uniformly.
func (r *run) ioLen(max int64) int64 {
	if max <= 1 {
		return 1
	}
	b := bits.Len64(uint64(max))
	limit := int64(1) << r.rng.IntN(b+1)
	return 1 + r.rng.Int64N(min(limit, max))
}

// pattern fills p with bytes that say which operation wrote them and where.
func (r *run) pattern(p []byte, off int64) {
	tag := byte(r.op*31 + 1)
	for i := range p {
		p[i] = byte((off+int64(i))%251) ^ tag
	}
}

func (r *run) do(kind opKind) error {
	switch kind {
	case opWrite, opPwrite:
		off := r.rng.Int64N(r.cfg.MaxLen)
		n := min(r.ioLen(r.cfg.MaxIO), r.cfg.MaxLen-off)
		p := make([]byte, n)
		r.pattern(p, off)
		desc := fmt.Sprintf("%s off=%d len=%d (size %d)", opNames[kind], off, n, len(r.model))
		if off > int64(len(r.model)) {
			desc += " hole"
		}
		r.record(desc)
		var got int
		var err error
		if kind == opWrite {
			if _, err = r.f.Seek(off, io.SeekStart); err != nil {
				return fmt.Errorf("seek to %d: %w", off, err)
			}
			got, err = r.f.Write(p)
		} else {
			got, err = unix.Pwrite(int(r.f.Fd()), p, off)
		}
		if err != nil {
			return fmt.Errorf("%s: %w", desc, err)
		}
		if got != len(p) {
			return fmt.Errorf("%s: wrote %d bytes", desc, got)
		}
		r.applyWrite(off, p)
		r.notify(desc)
	case opTruncate, opTruncatePath:
		size := r.rng.Int64N(r.cfg.MaxLen + 1)
		desc := fmt.Sprintf("%s %d -> %d", opNames[kind], len(r.model), size)
		r.record(desc)
		var err error
		if kind == opTruncate {
			err = r.f.Truncate(size)
		} else {
			err = os.Truncate(r.path, size)
		}
		if err != nil {
			return fmt.Errorf("%s: %w", desc, err)
		}
		r.applyTruncate(size)
		r.notify(desc)
	case opRead:
		off := r.rng.Int64N(r.cfg.MaxLen)
		n := r.ioLen(r.cfg.MaxIO)
		desc := fmt.Sprintf("read off=%d len=%d (size %d)", off, n, len(r.model))
		r.record(desc)
		buf := make([]byte, n)
		got, err := preadFull(r.f, buf, off)
		if err != nil {
			return fmt.Errorf("%s: %w", desc, err)
		}
		r.notify(desc)
		if err := r.compare(desc, off, n, buf[:got]); err != nil {
			return err
		}
	case opMapRead:
		size := int64(len(r.model))
		if size == 0 {
			r.record("mapread skipped (empty file)")
			r.notify("mapread skipped")
			return nil
		}
		off := r.rng.Int64N(size)
		n := min(r.ioLen(r.cfg.MaxIO), size-off)
		desc := fmt.Sprintf("mapread off=%d len=%d (size %d)", off, n, size)
		r.record(desc)
		m, err := syscall.Mmap(int(r.f.Fd()), 0, int(size), syscall.PROT_READ, syscall.MAP_SHARED)
		if err != nil {
			return fmt.Errorf("%s: mmap: %w", desc, err)
		}
		buf := append([]byte(nil), m[off:off+n]...)
		if err := syscall.Munmap(m); err != nil {
			return fmt.Errorf("%s: munmap: %w", desc, err)
		}
		r.notify(desc)
		if err := r.compare(desc, off, n, buf); err != nil {
			return err
		}
	case opFsync:
		r.record("fsync")
		if err := r.f.Sync(); err != nil {
			return fmt.Errorf("fsync: %w", err)
		}
		r.notify("fsync")
	case opReopen:
		r.record("close+reopen")
		err := r.f.Close()
		r.f = nil
		if err != nil {
			return fmt.Errorf("close: %w", err)
		}
		if r.cfg.OtherPath != "" && r.rng.IntN(2) == 0 {
			if err := r.otherChange(); err != nil {
				return err
			}
		}
		if r.f, err = os.OpenFile(r.path, os.O_RDWR, 0); err != nil {
			return fmt.Errorf("reopen: %w", err)
		}
		r.notify("close+reopen")
		return r.compareAll("close+reopen")
	}
	return nil
}

// otherChange changes the file as another client would, through
// OtherPath, and applies the change to the model.
func (r *run) otherChange() error {
	// Timestamps move in clock ticks (a few ms): a change within the tick of
	// our own last write could leave mtime and size as they were, which no
	// NFSv3 client can detect. Let a tick pass first.
	time.Sleep(10 * time.Millisecond)
	f, err := os.OpenFile(r.cfg.OtherPath, os.O_RDWR, 0)
	if err != nil {
		return fmt.Errorf("other client: open: %w", err)
	}
	defer f.Close()
	if r.rng.IntN(3) == 0 {
		size := r.rng.Int64N(r.cfg.MaxLen + 1)
		r.record(fmt.Sprintf("other client: truncate to %d", size))
		if err := f.Truncate(size); err != nil {
			return fmt.Errorf("other client: truncate: %w", err)
		}
		r.applyTruncate(size)
		return nil
	}
	n := 1 + r.rng.Int64N(min(r.cfg.MaxIO, 4096))
	off := r.rng.Int64N(r.cfg.MaxLen - n + 1)
	p := make([]byte, n)
	r.pattern(p, off)
	r.record(fmt.Sprintf("other client: write %d at %d", n, off))
	if _, err := f.WriteAt(p, off); err != nil {
		return fmt.Errorf("other client: write: %w", err)
	}
	r.applyWrite(off, p)
	return nil
}

func (r *run) notify(desc string) {
	if r.cfg.OnOp != nil {
		r.cfg.OnOp(r.op, desc)
	}
}

func (r *run) applyWrite(off int64, p []byte) {
	end := off + int64(len(p))
	if end > int64(len(r.model)) {
		r.applyTruncate(end)
	}
	copy(r.model[off:], p)
}

// applyTruncate resizes the model; bytes a file grows by read as zeros.
func (r *run) applyTruncate(size int64) {
	if size <= int64(len(r.model)) {
		r.model = r.model[:size]
		return
	}
	old := len(r.model)
	if size <= int64(cap(r.model)) {
		r.model = r.model[:size]
		clear(r.model[old:])
		return
	}
	m := make([]byte, size, max(size, r.cfg.MaxLen))
	copy(m, r.model)
	r.model = m
}

func (r *run) checkSize() error {
	st, err := r.f.Stat()
	if err != nil {
		return fmt.Errorf("fstat: %w", err)
	}
	if st.Size() != int64(len(r.model)) {
		return fmt.Errorf("size: fstat says %d, want %d", st.Size(), len(r.model))
	}
	return nil
}

// compare checks got, the result of reading n bytes at off, against the
// model: it must be exactly the model's bytes from off up to off+n or the
// end of the file, whichever comes first.
func (r *run) compare(what string, off, n int64, got []byte) error {
	want := []byte{}
	if off < int64(len(r.model)) {
		want = r.model[off:min(int64(len(r.model)), off+n)]
	}
	if bytes.Equal(got, want) {
		return nil
	}
	return fmt.Errorf("%s: %s", what, diff(off, got, want))
}

func (r *run) compareAll(what string) error {
	buf := make([]byte, len(r.model)+1) // one more: nothing may follow
	got, err := preadFull(r.f, buf, 0)
	if err != nil {
		return fmt.Errorf("%s: reading the whole file: %w", what, err)
	}
	return r.compare(what+" (whole file)", 0, int64(len(buf)), buf[:got])
}

// preadFull reads len(buf) bytes at off unless the file ends first; a read
// never returns more than was asked, and a short one only at end of file.
func preadFull(f *os.File, buf []byte, off int64) (int, error) {
	done := 0
	for done < len(buf) {
		n, err := unix.Pread(int(f.Fd()), buf[done:], off+int64(done))
		if errors.Is(err, unix.EINTR) {
			continue
		}
		if err != nil {
			return done, err
		}
		if n == 0 {
			break
		}
		done += n
	}
	return done, nil
}

// diff describes how got differs from want (both read at off).
func diff(off int64, got, want []byte) string {
	var b strings.Builder
	if len(got) != len(want) {
		fmt.Fprintf(&b, "read %d bytes at %d, want %d (the file should end at %d); ", len(got), off, len(want), off+int64(len(want)))
	}
	n := min(len(got), len(want))
	first, count := -1, 0
	for i := 0; i < n; i++ {
		if got[i] != want[i] {
			if first < 0 {
				first = i
			}
			count++
		}
	}
	if first >= 0 {
		end := min(n, first+16)
		fmt.Fprintf(&b, "%d bytes differ, first at offset %d: got % x, want % x", count, off+int64(first), got[first:end], want[first:end])
	} else if len(got) == len(want) {
		b.WriteString("no difference")
	}
	return b.String()
}
