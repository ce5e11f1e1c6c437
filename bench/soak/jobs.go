package main

import (
	"archive/tar"
	"bytes"
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"math/rand/v2"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"

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

// ---- ls: listings of a directory while another goroutine churns in it.

type lsJob struct {
	base   int
	passes int
	keep   int
	names  []string // the fixed files
	sizes  map[string]int64
	// Churn counters: c-N may exist for removed < N <= creating, and
	// does for removing < N <= created.
	creating, created, removing, removed atomic.Int64
	churnT                               *tracker
}

func (j *lsJob) about() string {
	return fmt.Sprintf("ls -lR and readdir+lstat of a directory of %d fixed files while another goroutine creates c-N and removes c-(N-%d) in it through the mount; every fixed name listed once with its size, no name removed before the listing began, none never created", j.base, j.keep)
}

func (j *lsJob) setup(w *workload) error {
	j.names, j.sizes = nil, map[string]int64{}
	if j.churnT == nil {
		j.churnT = w.tracker("churn")
	}
	j.creating.Store(0)
	j.created.Store(0)
	j.removing.Store(0)
	j.removed.Store(0)
	for i := range j.base {
		name := fmt.Sprintf("base-%04d", i)
		data := bytes.Repeat([]byte(name+"\n"), 1+i%7)
		if err := w.writeFile(name, data); err != nil {
			return err
		}
		j.names = append(j.names, name)
		j.sizes[name] = int64(len(data))
	}
	return nil
}

func churnName(n int64) string { return fmt.Sprintf("c-%06d", n) }

func (j *lsJob) iterate(ctx context.Context, w *workload, n int) error {
	stop := make(chan struct{})
	churnErr := make(chan error, 1)
	t := j.churnT
	go func() {
		defer t.idle()
		churnErr <- j.churn(w, t, stop)
	}()
	var err error
	for p := 0; p < j.passes && err == nil; p++ {
		if err = j.readdirPass(w); err == nil {
			err = j.lsPass(w)
		}
		if ctx.Err() != nil && err == nil {
			err = errStopped
		}
	}
	close(stop)
	w.step("waiting for the churn to stop")
	cerr := <-churnErr
	if cerr != nil && (err == nil || errors.Is(err, errStopped)) {
		err = fmt.Errorf("churn: %w", cerr)
	}
	return err
}

// churn creates and removes names until stop is closed.
func (j *lsJob) churn(w *workload, t *tracker, stop chan struct{}) error {
	for {
		select {
		case <-stop:
			return nil
		default:
		}
		n := j.created.Load() + 1
		name := churnName(n)
		t.set("create " + name)
		w.ops.Add(1)
		j.creating.Store(n)
		data := []byte(name + "\n")
		if err := os.WriteFile(w.path(name), data, 0o644); err != nil {
			return err
		}
		w.model.set(name, fileExpect(data, 0o644))
		j.created.Store(n)
		if old := n - int64(j.keep); old > 0 {
			name := churnName(old)
			t.set("remove " + name)
			w.ops.Add(1)
			j.removing.Store(old)
			if err := os.Remove(w.path(name)); err != nil {
				return err
			}
			w.model.del(name)
			j.removed.Store(old)
		}
	}
}

// span is what the churn had done around a listing: c-N may be listed
// for lo < N <= hi, and must be for mustLo < N <= mustHi (it existed from
// before the listing began until after it ended).
type span struct{ lo, hi, mustLo, mustHi int64 }

// begin and end take the churn's counters before and after a listing.
func (j *lsJob) begin() span { return span{lo: j.removed.Load(), mustHi: j.created.Load()} }

func (j *lsJob) end(sp span) span {
	sp.hi, sp.mustLo = j.creating.Load(), j.removing.Load()
	return sp
}

// checkNames checks a listing: every fixed name once, churn names only
// those that may exist during the listing and all that existed throughout
// it, nothing else.
func (j *lsJob) checkNames(what string, names []string, sp span) error {
	lo, hi := sp.lo, sp.hi
	d := &diffList{}
	seen := map[string]int{}
	for _, name := range names {
		seen[name]++
		if _, ok := j.sizes[name]; ok {
			continue
		}
		num, ok := strings.CutPrefix(name, "c-")
		n, err := strconv.ParseInt(num, 10, 64)
		switch {
		case !ok || err != nil:
			d.add("unexpected name %q", name)
		case n <= lo:
			d.add("%s listed, but it was removed before the listing began (c-%06d and older were)", name, lo)
		case n > hi:
			d.add("%s listed, but its creation had not begun when the listing ended (c-%06d was the last)", name, hi)
		}
	}
	for name, c := range seen {
		if c > 1 {
			d.add("%s listed %d times", name, c)
		}
	}
	for _, name := range j.names {
		if seen[name] == 0 {
			d.add("%s missing", name)
		}
	}
	for n := sp.mustLo + 1; n <= sp.mustHi; n++ {
		if seen[churnName(n)] == 0 {
			d.add("%s missing: it existed from before the listing began until after it ended", churnName(n))
		}
	}
	return d.err(what)
}

func (j *lsJob) readdirPass(w *workload) error {
	sp := j.begin()
	w.step("readdir %s", w.mnt)
	ents, err := os.ReadDir(w.mnt)
	if err != nil {
		return err
	}
	sp = j.end(sp)
	names := make([]string, len(ents))
	for i, e := range ents {
		names[i] = e.Name()
	}
	if err := j.checkNames("readdir", names, sp); err != nil {
		return err
	}
	d := &diffList{}
	for _, name := range j.names {
		w.step("lstat %s", name)
		fi, err := os.Lstat(w.path(name))
		if err != nil {
			return err
		}
		if fi.Size() != j.sizes[name] || !fi.Mode().IsRegular() {
			d.add("%s: %v of %d bytes, want a file of %d", name, fi.Mode(), fi.Size(), j.sizes[name])
		}
	}
	return d.err("lstat of the fixed files")
}

func (j *lsJob) lsPass(w *workload) error {
	sp := j.begin()
	r, err := w.command(w.mnt, "ls", "-lR", ".")
	if err != nil {
		return err
	}
	sp = j.end(sp)
	// ls -l stats each name after reading the directory: one the churn
	// removed in between is reported as gone (exit 1). Only that is
	// acceptable.
	if r.exit != 0 {
		for _, line := range strings.Split(strings.TrimSpace(r.stderr), "\n") {
			if !(isCannotAccess(line) && strings.HasSuffix(line, "No such file or directory")) {
				return fmt.Errorf("ls -lR exited %d: %s", r.exit, r.stderr)
			}
		}
	}
	var names []string
	d := &diffList{}
	for _, line := range strings.Split(r.stdout, "\n") {
		f := strings.Fields(line)
		if len(f) < 9 || line[0] == 't' || line[0] == '.' {
			continue // "total N", ".:", blank
		}
		name := f[len(f)-1]
		names = append(names, name)
		if want, ok := j.sizes[name]; ok {
			if size, err := strconv.ParseInt(f[4], 10, 64); err != nil || size != want {
				d.add("ls -l says %s has %s bytes, want %d", name, f[4], want)
			}
		}
	}
	// A name that ls could not stat is printed in the listing as "?"
	// fields by some versions and not at all by others: add the ones it
	// complained about.
	for _, line := range strings.Split(r.stderr, "\n") {
		if isCannotAccess(line) {
			name := cannotAccessName(line)
			if n, err := strconv.ParseInt(strings.TrimPrefix(name, "c-"), 10, 64); err == nil && n > sp.mustLo && n <= sp.mustHi {
				d.add("ls could not stat %s, which existed throughout the listing", name)
			}
			if !slices.Contains(names, name) {
				names = append(names, name)
			}
		}
	}
	if err := j.checkNames("ls -lR", names, sp); err != nil {
		return err
	}
	return d.err("ls -lR sizes")
}

// isCannotAccess reports whether an ls error line is about a churn name
// that went away while ls looked at it: its lstat failed ("ls: cannot
// access 'c-000012': ...", or './c-000012' with some versions) or, after
// the lstat, its extended attributes ("ls: c-000012: ...").
func isCannotAccess(line string) bool { return strings.HasPrefix(cannotAccessName(line), "c-") }

func cannotAccessName(line string) string {
	if rest, ok := strings.CutPrefix(line, "ls: cannot access '"); ok {
		name, _, _ := strings.Cut(strings.TrimPrefix(rest, "./"), "'")
		return name
	}
	if rest, ok := strings.CutPrefix(line, "ls: "); ok {
		name, _, _ := strings.Cut(strings.TrimPrefix(rest, "./"), ":")
		return name
	}
	return ""
}

// ---- rmrf: a tree made through the mount, then rm -rf.

type rmrfJob struct{ dirs, files int }

func (j *rmrfJob) about() string {
	return fmt.Sprintf("a tree of %d directories × (%d files of 0–4 KiB, a subdirectory of 3 files, a symbolic link) made through the mount, listed and checked, then rm -rf; gone through the mount and on the server's disk", j.dirs, j.files)
}

func (j *rmrfJob) setup(w *workload) error { return nil }

func (j *rmrfJob) iterate(ctx context.Context, w *workload, n int) error {
	root := fmt.Sprintf("r%04d", n)
	if err := w.mkdir(root); err != nil {
		return err
	}
	for d := range j.dirs {
		dir := filepath.Join(root, fmt.Sprintf("d%02d", d))
		if err := w.mkdir(dir); err != nil {
			return err
		}
		for f := range j.files {
			data := make([]byte, w.rng.IntN(4097))
			fillRandom(w.rng, data)
			if err := w.writeFile(filepath.Join(dir, fmt.Sprintf("f%02d", f)), data); err != nil {
				return err
			}
		}
		sub := filepath.Join(dir, "sub")
		if err := w.mkdir(sub); err != nil {
			return err
		}
		for f := range 3 {
			if err := w.writeFile(filepath.Join(sub, fmt.Sprintf("s%d", f)), fmt.Appendf(nil, "%s/s%d\n", sub, f)); err != nil {
				return err
			}
		}
		link := filepath.Join(dir, "link")
		w.step("symlink %s", link)
		if err := os.Symlink("f00", w.path(link)); err != nil {
			return err
		}
		w.model.set(link, expect{kind: kindSymlink, size: -1, target: "f00"})
		if ctx.Err() != nil {
			return errStopped
		}
	}
	// The tree as the mount shows it, against the model.
	w.step("scan %s", root)
	got, err := scanTree(w.path(root), nil)
	if err != nil {
		return err
	}
	want := map[string]expect{}
	for rel, e := range w.model.snapshot() {
		if r, ok := strings.CutPrefix(rel, root+"/"); ok {
			want[r] = e
		}
	}
	if d := compareTrees(want, got, got); d.n > 0 {
		return d.err("the tree before rm -rf")
	}
	r, err := w.command(w.mnt, "rm", "-rf", root)
	if err != nil {
		return err
	}
	if r.exit != 0 {
		return fmt.Errorf("rm -rf %s exited %d: %s", root, r.exit, r.stderr)
	}
	w.model.delTree(root)
	for _, p := range []struct{ where, path string }{{"through the mount", w.path(root)}, {"on the server's disk", w.diskPath(root)}} {
		if _, err := os.Lstat(p.path); !isNotExist(err) {
			return mismatchf("%s still there %s after rm -rf (lstat: %v)", root, p.where, err)
		}
	}
	return nil
}

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

// ---- meta: create, write, rename, link, unlink, chmod, symlink, mkdir,
// rmdir at random, against a model checked after every round.

type metaJob struct {
	ops      int
	maxNames int
	names    map[string]*mnode
	nextID   int
	nextName int
	round    int
}

// mnode is one object of the metadata model.
type mnode struct {
	id     int
	kind   byte
	data   []byte
	perm   fs.FileMode
	target string
}

func (j *metaJob) about() string {
	return fmt.Sprintf("rounds of %d random create/write/rename (also over an existing file)/link/unlink/chmod/symlink/mkdir/rmdir in one directory (at most %d names); after each round every name, kind, mode, link count, hard-link inode, content and target checked through the mount and on the server's disk", j.ops, j.maxNames)
}

func (j *metaJob) setup(w *workload) error {
	j.names, j.nextID, j.nextName, j.round = map[string]*mnode{}, 0, 0, 0
	return nil
}

func (j *metaJob) newName(prefix string) string {
	j.nextName++
	return fmt.Sprintf("%s%05d", prefix, j.nextName)
}

// pick returns a random name whose node is of one of the kinds, or "".
func (j *metaJob) pick(w *workload, kinds string) string {
	var c []string
	for name, nd := range j.names {
		if strings.IndexByte(kinds, nd.kind) >= 0 {
			c = append(c, name)
		}
	}
	if len(c) == 0 {
		return ""
	}
	slices.Sort(c)
	return c[w.rng.IntN(len(c))]
}

var metaPerms = []fs.FileMode{0o600, 0o640, 0o644, 0o700, 0o755, 0o444}

// export turns the model into expectations for the final check.
func (j *metaJob) export() map[string]expect {
	links := map[int]int{}
	for _, nd := range j.names {
		links[nd.id]++
	}
	m := map[string]expect{}
	for name, nd := range j.names {
		switch nd.kind {
		case kindFile:
			e := fileExpect(nd.data, nd.perm)
			e.nlink = links[nd.id]
			e.group = strconv.Itoa(nd.id)
			m[name] = e
		case kindDir:
			m[name] = expect{kind: kindDir, size: -1, perm: nd.perm, nlink: 2}
		case kindSymlink:
			m[name] = expect{kind: kindSymlink, size: int64(len(nd.target)), target: nd.target}
		}
	}
	return m
}

func (j *metaJob) iterate(ctx context.Context, w *workload, n int) error {
	j.round = n
	defer func() { w.model.replace(j.export()) }()
	for i := 0; i < j.ops; i++ {
		if ctx.Err() != nil {
			return errStopped
		}
		if err := j.op(w); err != nil {
			return err
		}
	}
	return j.check(w)
}

// op does one random operation through the mount and applies it to the
// model once it returned.
func (j *metaJob) op(w *workload) error {
	full := len(j.names) >= j.maxNames
	switch k := w.rng.IntN(36); {
	case k < 8 && !full: // create
		name := j.newName("m")
		data := make([]byte, w.rng.IntN(300))
		fillRandom(w.rng, data)
		w.step("create %s (%d bytes)", name, len(data))
		f, err := os.OpenFile(w.path(name), os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o644)
		if err != nil {
			return err
		}
		j.nextID++
		nd := &mnode{id: j.nextID, kind: kindFile, perm: 0o644}
		j.names[name] = nd
		if _, err := f.Write(data); err != nil {
			f.Close()
			return err
		}
		if err := f.Close(); err != nil {
			return err
		}
		nd.data = data
	case k < 12: // write
		name := j.pick(w, "f")
		if name == "" {
			return nil
		}
		nd := j.names[name]
		if nd.perm&0o200 == 0 {
			return nil // root could, but keep modes meaningful
		}
		data := make([]byte, w.rng.IntN(2000))
		fillRandom(w.rng, data)
		w.step("rewrite %s (%d bytes)", name, len(data))
		if err := os.WriteFile(w.path(name), data, 0); err != nil {
			return err
		}
		nd.data = data
	case k < 18: // rename
		from := j.pick(w, "fdl")
		if from == "" {
			return nil
		}
		nd := j.names[from]
		to := j.newName("r")
		if nd.kind != kindDir && w.rng.IntN(2) == 0 {
			if t := j.pick(w, "f"); t != "" && t != from {
				to = t // replace an existing file
			}
		}
		w.step("rename %s to %s", from, to)
		if err := os.Rename(w.path(from), w.path(to)); err != nil {
			return err
		}
		if j.names[to] == nd {
			// Both names are links to one file: POSIX says rename does
			// nothing then.
			return nil
		}
		delete(j.names, from)
		j.names[to] = nd
	case k < 21 && !full: // link
		from := j.pick(w, "f")
		if from == "" {
			return nil
		}
		to := j.newName("h")
		w.step("link %s to %s", to, from)
		if err := os.Link(w.path(from), w.path(to)); err != nil {
			return err
		}
		j.names[to] = j.names[from]
	case k < 26 || full && k < 30: // unlink
		name := j.pick(w, "fl")
		if name == "" {
			return nil
		}
		w.step("unlink %s", name)
		if err := os.Remove(w.path(name)); err != nil {
			return err
		}
		delete(j.names, name)
	case k < 30: // chmod
		name := j.pick(w, "fd")
		if name == "" {
			return nil
		}
		perm := metaPerms[w.rng.IntN(len(metaPerms))]
		if j.names[name].kind == kindDir {
			perm |= 0o700 // stays usable
		}
		w.step("chmod %#o %s", perm, name)
		if err := os.Chmod(w.path(name), perm); err != nil {
			return err
		}
		j.names[name].perm = perm
	case k < 33 && !full: // symlink
		name := j.newName("s")
		target := fmt.Sprintf("target/%d/%s", w.rng.IntN(1000), strings.Repeat("x", w.rng.IntN(40)))
		w.step("symlink %s -> %s", name, target)
		if err := os.Symlink(target, w.path(name)); err != nil {
			return err
		}
		j.nextID++
		j.names[name] = &mnode{id: j.nextID, kind: kindSymlink, target: target}
	case k < 34 && !full: // mkdir
		name := j.newName("d")
		w.step("mkdir %s", name)
		if err := os.Mkdir(w.path(name), 0o755); err != nil {
			return err
		}
		j.nextID++
		j.names[name] = &mnode{id: j.nextID, kind: kindDir, perm: 0o755}
	default: // rmdir
		name := j.pick(w, "d")
		if name == "" {
			return nil
		}
		w.step("rmdir %s", name)
		if err := syscall.Rmdir(w.path(name)); err != nil {
			return &fs.PathError{Op: "rmdir", Path: w.path(name), Err: err}
		}
		delete(j.names, name)
	}
	return nil
}

// check compares the directory, through the mount and on disk, with the
// model.
func (j *metaJob) check(w *workload) error {
	w.step("round %d: scan through the mount", j.round)
	mnt, err := scanTree(w.mnt, nil)
	if err != nil {
		return err
	}
	w.step("round %d: scan the server's disk", j.round)
	disk, err := scanTree(w.disk, nil)
	if err != nil {
		return err
	}
	return compareTrees(j.export(), mnt, disk).err(fmt.Sprintf("round %d", j.round))
}

// ---- helpers shared by the jobs' construction.

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
