package main

import (
	"archive/tar"
	"bytes"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"
	"unsafe"

	"hushfs/test/fsx"
)

// ---- build: a generated C project, built, run, changed, rebuilt.

type buildJob struct {
	files int
	prev  string // the previous iteration's directory, removed once the next one built
}

func (j *buildJob) about() string {
	return fmt.Sprintf("a generated C project (%d .c files, a header, a Makefile): make -j2, run the program and check its output; change one file, make, run and check again; remove the previous iteration's tree", j.files+1)
}

func (j *buildJob) setup(w *workload) error { j.prev = ""; return nil }

// cFunc is one generated function: f(x) = x*mul + add (unsigned long).
type cFunc struct{ mul, add uint64 }

func (j *buildJob) source(i int, f cFunc) []byte {
	return fmt.Appendf(nil, "#include \"soak.h\"\n\nunsigned long f%02d(unsigned long x) { return x * %dUL + %dUL; }\n", i, f.mul, f.add)
}

// expected is what the program prints: the sum of f_i(i+1), wrapping as
// unsigned long does.
func expected(fs []cFunc) string {
	var s uint64
	for i, f := range fs {
		s += uint64(i+1)*f.mul + f.add
	}
	return strconv.FormatUint(s, 10) + "\n"
}

func (j *buildJob) iterate(ctx context.Context, w *workload, n int) error {
	dir := fmt.Sprintf("b%04d", n)
	if err := w.mkdir(dir); err != nil {
		return err
	}
	fns := make([]cFunc, j.files)
	var hdr, mainC, objs bytes.Buffer
	hdr.WriteString("#ifndef SOAK_H\n#define SOAK_H\n")
	mainC.WriteString("#include <stdio.h>\n#include \"soak.h\"\n\nint main(void) {\n\tunsigned long s = 0;\n")
	for i := range fns {
		fns[i] = cFunc{mul: 1 + w.rng.Uint64N(1<<31), add: w.rng.Uint64N(1 << 31)}
		fmt.Fprintf(&hdr, "unsigned long f%02d(unsigned long x);\n", i)
		fmt.Fprintf(&mainC, "\ts += f%02d(%d);\n", i, i+1)
		fmt.Fprintf(&objs, " f%02d.o", i)
	}
	hdr.WriteString("#endif\n")
	mainC.WriteString("\tprintf(\"%lu\\n\", s);\n\treturn 0;\n}\n")
	makefile := fmt.Sprintf("OBJS =%s main.o\n\nprog: $(OBJS)\n\t$(CC) -o prog $(OBJS)\n\n%%.o: %%.c soak.h\n\t$(CC) -O1 -c -o $@ $<\n", objs.String())
	files := map[string][]byte{"soak.h": hdr.Bytes(), "main.c": mainC.Bytes(), "Makefile": []byte(makefile)}
	for i, f := range fns {
		files[fmt.Sprintf("f%02d.c", i)] = j.source(i, f)
	}
	for _, name := range sortedKeys(files) {
		if err := w.writeFile(filepath.Join(dir, name), files[name]); err != nil {
			return err
		}
	}
	if ctx.Err() != nil {
		return errStopped
	}
	if err := j.makeAndRun(w, dir, fns, "build"); err != nil {
		return err
	}
	// Change one function and rebuild: make must see the new mtime. A
	// clock tick first, so that the source is strictly newer than its
	// object even on coarse timestamps.
	time.Sleep(10 * time.Millisecond)
	k := w.rng.IntN(len(fns))
	fns[k].add = (fns[k].add + 1 + w.rng.Uint64N(1000)) % (1 << 31)
	if err := w.writeFile(filepath.Join(dir, fmt.Sprintf("f%02d.c", k)), j.source(k, fns[k])); err != nil {
		return err
	}
	if err := j.makeAndRun(w, dir, fns, fmt.Sprintf("rebuild after changing f%02d.c", k)); err != nil {
		return err
	}
	if j.prev != "" {
		if err := w.removeAll(j.prev); err != nil {
			return err
		}
	}
	j.prev = dir
	return nil
}

func (j *buildJob) makeAndRun(w *workload, dir string, fns []cFunc, what string) error {
	r, err := w.command(w.path(dir), "make", "-j2", "-s")
	if err != nil {
		return fmt.Errorf("%s: %w", what, err)
	}
	if r.exit != 0 {
		return fmt.Errorf("%s: make exited %d:\n%s%s", what, r.exit, r.stdout, r.stderr)
	}
	for i := range fns {
		w.model.set(filepath.Join(dir, fmt.Sprintf("f%02d.o", i)), expect{kind: kindFile, size: -1})
	}
	w.model.set(filepath.Join(dir, "main.o"), expect{kind: kindFile, size: -1})
	w.model.set(filepath.Join(dir, "prog"), expect{kind: kindFile, size: -1, perm: 0o755})
	r, err = w.command(w.path(dir), "./prog")
	if err != nil {
		return fmt.Errorf("%s: %w", what, err)
	}
	if r.exit != 0 {
		return fmt.Errorf("%s: ./prog exited %d: %s", what, r.exit, r.stderr)
	}
	if want := expected(fns); r.stdout != want {
		return mismatchf("%s in %s: ./prog printed %q, want %q", what, dir, r.stdout, want)
	}
	return nil
}

// ---- untar: an archive of small files unpacked, every file checked.

type untarJob struct {
	archive string // on local disk
	entries []tarEntry
	prev    string
}

type tarEntry struct {
	name string
	dir  bool
	data []byte
}

// makeArchive builds a tar of n files of 0–8 KiB of seeded random bytes in
// ten directories and writes it to path.
func makeArchive(path string, n int, seed uint64) ([]tarEntry, error) {
	r := rand.New(rand.NewPCG(seed, seed+1))
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	mtime := time.Unix(1_700_000_000, 0)
	var ents []tarEntry
	for d := range 10 {
		name := fmt.Sprintf("d%02d", d)
		if err := tw.WriteHeader(&tar.Header{Typeflag: tar.TypeDir, Name: name + "/", Mode: 0o755, ModTime: mtime}); err != nil {
			return nil, err
		}
		ents = append(ents, tarEntry{name: name, dir: true})
	}
	for i := range n {
		data := make([]byte, r.IntN(8<<10+1))
		for j := range data {
			data[j] = byte(r.Uint32())
		}
		name := fmt.Sprintf("d%02d/f%04d", i%10, i)
		if err := tw.WriteHeader(&tar.Header{Typeflag: tar.TypeReg, Name: name, Mode: 0o644, Size: int64(len(data)), ModTime: mtime}); err != nil {
			return nil, err
		}
		if _, err := tw.Write(data); err != nil {
			return nil, err
		}
		ents = append(ents, tarEntry{name: name, data: data})
	}
	if err := tw.Close(); err != nil {
		return nil, err
	}
	return ents, os.WriteFile(path, buf.Bytes(), 0o644)
}

func (j *untarJob) about() string {
	return fmt.Sprintf("tar -xf of an archive of %d files (0–8 KiB, 10 directories); every file read back through the mount and on the server's disk; the previous iteration's tree removed", len(j.entries)-10)
}

func (j *untarJob) setup(w *workload) error { j.prev = ""; return nil }

func (j *untarJob) iterate(ctx context.Context, w *workload, n int) error {
	dir := fmt.Sprintf("u%04d", n)
	if err := w.mkdir(dir); err != nil {
		return err
	}
	r, err := w.command(w.path(dir), "tar", "-xf", j.archive)
	if err != nil {
		return err
	}
	// Whatever tar managed is on the mount: the model says what it holds.
	for _, e := range j.entries {
		if e.dir {
			w.model.set(filepath.Join(dir, e.name), expect{kind: kindDir, size: -1, perm: 0o755})
		} else {
			w.model.set(filepath.Join(dir, e.name), fileExpect(e.data, 0o644))
		}
	}
	if r.exit != 0 {
		return fmt.Errorf("tar -xf exited %d: %s", r.exit, r.stderr)
	}
	for _, e := range j.entries {
		if e.dir {
			continue
		}
		if err := w.checkFile(filepath.Join(dir, e.name), e.data); err != nil {
			return err
		}
	}
	if j.prev != "" {
		if err := w.removeAll(j.prev); err != nil {
			return err
		}
	}
	j.prev = dir
	return nil
}

// ---- fsx: the seeded exerciser, its result compared with a local run.

type fsxJob struct {
	seed  int64
	other bool   // another client changes the file between close and open (on the server's disk)
	ref   string // local directory for the reference runs
	ops   int
	max   int64
}

func (j *fsxJob) about() string {
	s := fmt.Sprintf("fsx (test/fsx): %d operations per run on one file of up to %d KiB, checked against its model after every operation; the file compared with a local run of the same seed through the mount and on the server's disk",
		j.ops, j.max>>10)
	if j.other {
		s += "; another client (the server's disk) changes the file between close and open"
	}
	return s
}

func (j *fsxJob) setup(w *workload) error { return nil }

func (j *fsxJob) config(n int, other string, onOp func(int, string)) fsx.Config {
	return fsx.Config{Seed: j.seed*100_000 + int64(n), Ops: j.ops, MaxLen: j.max, MaxIO: 128 << 10,
		OtherPath: other, OnOp: onOp}
}

func (j *fsxJob) iterate(ctx context.Context, w *workload, n int) error {
	other := ""
	if j.other {
		other = w.diskPath("file")
	}
	cfg := j.config(n, other, func(i int, desc string) {
		w.step("fsx seed %d: operation %d after %s", j.seed*100_000+int64(n), i+1, desc)
	})
	w.step("fsx seed %d: start", cfg.Seed)
	err := fsx.Run(w.path("file"), cfg)
	// The file is there whatever happened; its content is known only
	// after a complete run.
	w.model.set("file", expect{kind: kindFile, size: -1, perm: 0o644})
	if err != nil {
		var errno syscall.Errno
		if errors.As(err, &errno) {
			return err
		}
		return &mismatchError{err.Error() + j.probe(w, err.Error())}
	}
	// The same run on local disk says what the file must hold.
	w.step("fsx seed %d: reference run on local disk", cfg.Seed)
	local := filepath.Join(j.ref, w.name)
	lother := ""
	if j.other {
		lother = local
	}
	if err := fsx.Run(local, j.config(n, lother, nil)); err != nil {
		return fmt.Errorf("reference run on local disk: %w", err)
	}
	want, err := os.ReadFile(local)
	if err != nil {
		return err
	}
	w.model.set("file", fileExpect(want, 0o644))
	return w.checkFile("file", want)
}

// differAt finds the offset fsx names in a data mismatch.
var differAt = regexp.MustCompile(`first at offset (\d+)`)

// probe reads the bytes at the offset a data mismatch names, on the
// server's disk and through the mount with O_DIRECT (past every cache but
// the mount daemon's), so the report says where the wrong bytes live.
func (j *fsxJob) probe(w *workload, msg string) string {
	var b strings.Builder
	b.WriteString("\nsize now:")
	for _, p := range []struct{ where, path string }{{"on the server's disk", w.diskPath("file")}, {"through the mount", w.path("file")}} {
		if fi, err := os.Stat(p.path); err != nil {
			fmt.Fprintf(&b, " %s: %v;", p.where, err)
		} else {
			fmt.Fprintf(&b, " %s %d;", p.where, fi.Size())
		}
	}
	m := differAt.FindStringSubmatch(msg)
	if m == nil {
		return b.String()
	}
	off, err := strconv.ParseInt(m[1], 10, 64)
	if err != nil {
		return ""
	}
	b.WriteString("\nat that offset now:")
	for _, p := range []struct {
		where, path string
		flags       int
	}{{"on the server's disk", w.diskPath("file"), os.O_RDONLY}, {"through the mount (O_DIRECT)", w.path("file"), os.O_RDONLY | syscall.O_DIRECT}} {
		f, err := os.OpenFile(p.path, p.flags, 0)
		if err != nil {
			fmt.Fprintf(&b, " %s: %v;", p.where, err)
			continue
		}
		raw := make([]byte, 3*4096)
		a := 4096 - int(uintptr(unsafe.Pointer(&raw[0]))&4095)
		buf := raw[a : a+8192]
		base := off &^ 4095
		n, err := f.ReadAt(buf, base)
		f.Close()
		if int64(n) > off-base {
			fmt.Fprintf(&b, " %s: % x;", p.where, buf[off-base:min(int64(n), off-base+16)])
		} else {
			fmt.Fprintf(&b, " %s: %d bytes read at %d (%v);", p.where, n, base, err)
		}
	}
	return b.String()
}

// workloadNames are the workloads, in report order.
var workloadNames = []string{"build", "untar", "fsx-a", "fsx-b", "ls-churn", "rm-rf", "big-write", "meta"}

// jobsFor returns the workloads of a run.
func jobsFor(s *soak, archive string, entries []tarEntry, refDir string) []*workload {
	c := s.cfg
	z := c.sizes
	seed := c.seed
	all := []*workload{
		newWorkload(s, "build", &buildJob{files: z.buildFiles}, seed+1),
		newWorkload(s, "untar", &untarJob{archive: archive, entries: entries}, seed+2),
		newWorkload(s, "fsx-a", &fsxJob{seed: int64(seed%1_000_000) + 3, ref: refDir, ops: z.fsxOps, max: z.fsxMaxLen}, seed+3),
		newWorkload(s, "fsx-b", &fsxJob{seed: int64(seed%1_000_000) + 4, other: true, ref: refDir, ops: z.fsxOps, max: z.fsxMaxLen}, seed+4),
		newWorkload(s, "ls-churn", &lsJob{base: z.lsBase, passes: z.lsPasses, keep: z.churnKeep}, seed+5),
		newWorkload(s, "rm-rf", &rmrfJob{dirs: z.rmDirs, files: z.rmFiles}, seed+6),
		newWorkload(s, "big-write", &bigJob{seed: seed, min: z.bigMinMiB, max: z.bigMaxMiB, keep: z.bigKeep}, seed+7),
		newWorkload(s, "meta", &metaJob{ops: z.metaOps, maxNames: z.metaMaxNames}, seed+8),
	}
	if len(c.only) == 0 {
		return all
	}
	var out []*workload
	for _, w := range all {
		if slices.Contains(c.only, w.name) {
			out = append(out, w)
		}
	}
	return out
}
