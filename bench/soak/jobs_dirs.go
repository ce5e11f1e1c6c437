package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
)

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
