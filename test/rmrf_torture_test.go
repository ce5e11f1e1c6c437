package test

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"hushfs/test/harness"
)

// The rm -rf torture: one client removes a tree while another creates
// files in it.
const (
	tortureDirs  = 40
	tortureFiles = 50
	// rmAttempts bounds the passes over one directory (list, remove,
	// rmdir) before the remover moves on and leaves it for its final pass.
	rmAttempts = 200
	// stuckAfter is how long a worker may spend in one operation before
	// the test calls it a hang.
	stuckAfter = 20 * time.Second
	// bMountOpts: the creating client keeps directory attributes three
	// seconds at most, so after that long its view must agree with the
	// server's. The remover runs with the defaults (30 to 60 s), which only
	// its own changes may move.
	bMountOpts = "acdirmin=1,acdirmax=3"
)

// TestRmRfTorture: 40 directories of 50 files each on the export. Client A
// (a hushfs mount) removes the tree as rm -rf does on NFS, two workers
// each taking half the directories: list, unlink every entry, rmdir, and
// on ENOTEMPTY list again and retry. Meanwhile client B (a second hushfs
// mount of the same export: its own daemon and caches) creates files in
// those directories, half of them in a directory A is working on, and a
// few in a directory A leaves alone.
//
// B looks each name up before creating it (exclusively), as tar and cp
// do, then writes and closes the file. The only errors allowed are
// ENOTEMPTY for A's rmdir (counted, retried), ENOENT for B's creates into
// directories already removed (counted), and ESTALE from B's close when
// A removed the file before its data was written back (counted, and
// checked: the file is gone from the server's disk). A must never give up
// on a directory (at most 200 passes each). Every operation is watched: one that takes longer than 20 s fails the
// test with the stacks of the test's goroutines and of both mount daemons.
// Afterwards what is left of the tree (if anything) is B's files only; a
// final pass by A, with B stopped, must remove it with at most one
// ENOTEMPTY per directory (a listing cached before B's last create, after
// which A must ask the server), and then a fresh listing through A at
// once, and through B once its attribute lifetime has passed, agrees with
// the server's disk.
//
// Run against `hushfs serve` and against nfs-ganesha.
func TestRmRfTorture(t *testing.T) {
	requireMountTools(t)
	bin := harness.BuildHushfs(t)
	t.Run("hushfs-serve", func(t *testing.T) {
		setup := time.Now()
		export, mntA, mntB := t.TempDir(), t.TempDir(), t.TempDir()
		populateTorture(t, export)
		s := harness.StartServe(t, export)
		a := harness.MountServe(t, bin, s, mntA, "")
		b := harness.MountServe(t, bin, s, mntB, bMountOpts)
		t.Logf("export populated, server and mounts ready in %v", time.Since(setup).Round(time.Millisecond))
		runRmRfTorture(t, export, a, b)
		if t.Failed() {
			t.Logf("hushfs serve said:\n%s", s.Output())
			t.Logf("B said:\n%s", b.Output())
		}
	})
	t.Run("ganesha", func(t *testing.T) {
		setup := time.Now()
		export, mntA, mntB := t.TempDir(), t.TempDir(), t.TempDir()
		populateTorture(t, export)
		g := harness.StartGanesha(t, harness.GaneshaOptions{ExportDir: export})
		a := harness.MountGanesha(t, bin, g, mntA, "")
		b := harness.MountGanesha(t, bin, g, mntB, bMountOpts)
		t.Logf("export populated, server and mounts ready in %v", time.Since(setup).Round(time.Millisecond))
		runRmRfTorture(t, export, a, b)
		if t.Failed() {
			t.Logf("ganesha log:\n%s", g.LogTail())
			t.Logf("B said:\n%s", b.Output())
		}
	})
}

// populateTorture makes export/tree/dNN/fMMM (0 to 4 KiB each) and an
// empty export/keep, directly on the server's disk.
func populateTorture(t *testing.T, export string) {
	t.Helper()
	r := rand.New(rand.NewPCG(40, 50))
	buf := make([]byte, 4096)
	for d := range tortureDirs {
		dir := filepath.Join(export, "tree", fmt.Sprintf("d%02d", d))
		must(t, "mkdir", os.MkdirAll(dir, 0o755))
		for f := range tortureFiles {
			for i := range buf {
				buf[i] = byte(r.Uint32())
			}
			must(t, "create", os.WriteFile(filepath.Join(dir, fmt.Sprintf("f%03d", f)), buf[:r.IntN(len(buf)+1)], 0o644))
		}
	}
	must(t, "mkdir", os.Mkdir(filepath.Join(export, "keep"), 0o755))
}

// worker is one goroutine of the torture, watched for hangs: it says what
// it is doing before each operation.
type worker struct {
	name  string
	mu    sync.Mutex
	op    string    // GUARDED_BY(mu)
	since time.Time // GUARDED_BY(mu)
	done  atomic.Bool
}

func newWorker(name string) *worker {
	return &worker{name: name, op: "starting", since: time.Now()}
}

func (w *worker) doing(op string) {
	w.mu.Lock()
	w.op, w.since = op, time.Now()
	w.mu.Unlock()
}

func (w *worker) state() (string, time.Duration) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.op, time.Since(w.since)
}

// watch waits for every worker to finish, failing the test with a
// description of where they stand, the test's goroutines and the mount
// daemons' goroutines (SIGQUIT makes a Go program print them and exit,
// which also ends any system call stuck on its mount) if one spends longer
// than stuckAfter in one operation.
func watch(t *testing.T, workers []*worker, mounts ...*harness.Mount) {
	t.Helper()
	for {
		all := true
		for _, w := range workers {
			if w.done.Load() {
				continue
			}
			all = false
			if op, d := w.state(); d > stuckAfter {
				var b strings.Builder
				for _, w := range workers {
					op, d := w.state()
					fmt.Fprintf(&b, "  %s: done=%v, %q for %v\n", w.name, w.done.Load(), op, d.Round(time.Millisecond))
				}
				stacks := make([]byte, 1<<20)
				stacks = stacks[:runtime.Stack(stacks, true)]
				var daemons strings.Builder
				for _, m := range mounts {
					syscall.Kill(m.Pid(), syscall.SIGQUIT)
					syscall.Kill(m.Pid(), syscall.SIGCONT) // should it be stopped
				}
				time.Sleep(time.Second) // let them write their stacks
				for _, m := range mounts {
					fmt.Fprintf(&daemons, "--- mount daemon %d (%s):\n%s\n", m.Pid(), m.Dir, m.Output())
				}
				t.Fatalf("%s hangs: %q for %v\nworkers:\n%s\ntest goroutines:\n%s\n%s", w.name, op, d.Round(time.Millisecond), b.String(), stacks, daemons.String())
			}
		}
		if all {
			return
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// errCounts counts errors by errno name, and keeps one example of each.
type errCounts struct {
	mu      sync.Mutex
	n       map[string]int    // GUARDED_BY(mu)
	example map[string]string // GUARDED_BY(mu)
}

func (e *errCounts) add(what string, err error) {
	name := errnoName(errnoOf(err))
	if errnoOf(err) == 0 {
		name = "other"
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.n == nil {
		e.n, e.example = map[string]int{}, map[string]string{}
	}
	e.n[name]++
	if _, ok := e.example[name]; !ok {
		e.example[name] = fmt.Sprintf("%s: %v", what, err)
	}
}

// unexpected returns the counts of errors other than those allowed.
func (e *errCounts) unexpected(allowed ...syscall.Errno) []string {
	e.mu.Lock()
	defer e.mu.Unlock()
	var out []string
	for name, n := range e.n {
		ok := false
		for _, a := range allowed {
			ok = ok || name == errnoName(a)
		}
		if !ok {
			out = append(out, fmt.Sprintf("%s ×%d (first: %s)", name, n, e.example[name]))
		}
	}
	sort.Strings(out)
	return out
}

func (e *errCounts) count(errno syscall.Errno) int {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.n[errnoName(errno)]
}

// remover is client A's rm -rf.
type remover struct {
	w        *worker
	errs     *errCounts
	notEmpty atomic.Int64 // rmdir answered ENOTEMPTY (or EEXIST)
	unlinks  atomic.Int64
	current  atomic.Pointer[string] // the directory being emptied, for B to aim at
	maxTries atomic.Int64           // most attempts one directory needed
	gaveUp   []string               // directories left after rmAttempts
}

// rmDir empties and removes dir: list it, unlink every entry, rmdir; on
// ENOTEMPTY, again. It reports whether dir is gone.
func (r *remover) rmDir(dir string, attempts int) bool {
	r.current.Store(&dir)
	defer r.current.Store(nil)
	for try := 1; try <= attempts; try++ {
		r.w.doing("list " + dir)
		names, err := listNames(dir)
		if err != nil {
			r.errs.add("list "+dir, err)
			return false
		}
		for _, name := range names {
			p := filepath.Join(dir, name)
			r.w.doing("unlink " + p)
			if err := syscall.Unlink(p); err != nil {
				// B only ever adds names: one listed here exists.
				r.errs.add("unlink "+p, err)
				continue
			}
			r.unlinks.Add(1)
		}
		r.w.doing("rmdir " + dir)
		err = syscall.Rmdir(dir)
		switch {
		case err == nil:
			for m := r.maxTries.Load(); int64(try) > m && !r.maxTries.CompareAndSwap(m, int64(try)); m = r.maxTries.Load() {
			}
			return true
		case errors.Is(err, syscall.ENOTEMPTY), errors.Is(err, syscall.EEXIST):
			r.notEmpty.Add(1)
		default:
			r.errs.add("rmdir "+dir, err)
			return false
		}
	}
	return false
}

// listNames lists a directory as rm does (getdents, no stat).
func listNames(dir string) ([]string, error) {
	f, err := os.Open(dir)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	return f.Readdirnames(-1)
}

// creator is client B.
type creator struct {
	errs    *errCounts
	created atomic.Int64
	intoAs  atomic.Int64 // creates aimed at a directory A was emptying
	lost    atomic.Int64 // files A removed before their data was written back
}

func runRmRfTorture(t *testing.T, export string, a, b *harness.Mount) {
	tree := func(root string) string { return filepath.Join(root, "tree") }
	dirName := func(d int) string { return fmt.Sprintf("d%02d", d) }
	start := time.Now()

	aErrs, bErrs := &errCounts{}, &errCounts{}
	const removers, creators = 2, 2
	rms := make([]*remover, removers)
	var workers []*worker
	for i := range rms {
		rms[i] = &remover{w: newWorker(fmt.Sprintf("A%d (rm -rf)", i)), errs: aErrs}
		workers = append(workers, rms[i].w)
	}
	cr := &creator{errs: bErrs}
	var stopB atomic.Bool
	var removersLeft atomic.Int64
	removersLeft.Store(removers)

	// A: each worker takes every other directory, then the first to find
	// the other finished removes the tree itself.
	for i, r := range rms {
		go func() {
			defer r.w.done.Store(true)
			defer func() {
				if removersLeft.Add(-1) == 0 {
					stopB.Store(true)
				}
			}()
			for d := i; d < tortureDirs; d += removers {
				dir := filepath.Join(tree(a.Dir), dirName(d))
				if !r.rmDir(dir, rmAttempts) {
					r.gaveUp = append(r.gaveUp, dir)
				}
			}
		}()
	}
	// B: creates until A is done, half of them into a directory A is
	// emptying, one in twenty into keep/.
	for i := range creators {
		w := newWorker(fmt.Sprintf("B%d (create)", i))
		workers = append(workers, w)
		go func() {
			defer w.done.Store(true)
			rng := rand.New(rand.NewPCG(uint64(i), 7))
			for k := 0; !stopB.Load(); k++ {
				var dir string
				switch x := rng.IntN(20); {
				case x == 0:
					dir = filepath.Join(b.Dir, "keep")
				case x < 10:
					if cur := rms[rng.IntN(removers)].current.Load(); cur != nil {
						dir = filepath.Join(tree(b.Dir), filepath.Base(*cur))
						cr.intoAs.Add(1)
						break
					}
					fallthrough
				default:
					dir = filepath.Join(tree(b.Dir), dirName(rng.IntN(tortureDirs)))
				}
				p := filepath.Join(dir, fmt.Sprintf("b%d-%05d", i, k))
				// What the server's disk and a second look say, for
				// the message of an unexpected error.
				explain := func(err error) error {
					rel, _ := filepath.Rel(b.Dir, dir)
					_, onDisk := os.Lstat(filepath.Join(export, rel))
					_, again := os.Lstat(p)
					return fmt.Errorf("%w (the directory on the server's disk: %v; a second stat: %v)", err, onDisk, again)
				}
				// Look first, as tar and cp do: the name is new, so the
				// kernel keeps a negative entry for it and creates
				// without another LOOKUP.
				w.doing("stat " + p)
				if _, err := os.Lstat(p); !errors.Is(err, os.ErrNotExist) {
					bErrs.add("stat "+p, explain(err))
					continue
				}
				w.doing("create " + p)
				f, err := os.OpenFile(p, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o644)
				if err != nil {
					if !errors.Is(err, os.ErrNotExist) {
						err = explain(err)
					}
					bErrs.add("create "+p, err)
					continue
				}
				cr.created.Add(1)
				_, err = f.Write([]byte(p))
				if cerr := f.Close(); err == nil {
					err = cerr
				}
				if err != nil {
					// A may have removed the file before its data
					// reached the server: then, and only then, the
					// write-back fails with ESTALE.
					rel, _ := filepath.Rel(b.Dir, p)
					if _, serr := os.Lstat(filepath.Join(export, rel)); errnoOf(err) == syscall.ESTALE && errors.Is(serr, os.ErrNotExist) {
						cr.lost.Add(1)
						continue
					}
					bErrs.add("write "+p, err)
				}
			}
		}()
	}
	watch(t, workers, a, b)
	tortured := time.Since(start)

	var notEmpty, unlinks, maxTries int64
	var gaveUp []string
	for _, r := range rms {
		notEmpty += r.notEmpty.Load()
		unlinks += r.unlinks.Load()
		maxTries = max(maxTries, r.maxTries.Load())
		gaveUp = append(gaveUp, r.gaveUp...)
	}
	t.Logf("torture in %v: A unlinked %d files, rmdir ENOTEMPTY %d times (at most %d attempts for one directory), gave up on %d directories; "+
		"B created %d files (%d aimed at A's directory), ENOENT %d times, %d files removed by A before their data was written",
		tortured.Round(time.Millisecond), unlinks, notEmpty, maxTries, len(gaveUp), cr.created.Load(), cr.intoAs.Load(), bErrs.count(syscall.ENOENT), cr.lost.Load())
	if bad := aErrs.unexpected(); len(bad) > 0 {
		t.Errorf("client A (rm -rf): unexpected errors: %s", strings.Join(bad, "; "))
	}
	if bad := bErrs.unexpected(syscall.ENOENT); len(bad) > 0 {
		t.Errorf("client B (create): unexpected errors: %s", strings.Join(bad, "; "))
	}
	if len(gaveUp) > 0 {
		t.Errorf("A gave up on %d directories after %d attempts each (B stops only when A is done): %v", len(gaveUp), rmAttempts, gaveUp)
	}
	if unlinks < tortureDirs*tortureFiles {
		t.Errorf("A unlinked %d files, fewer than the %d there were", unlinks, tortureDirs*tortureFiles)
	}
	if cr.created.Load() == 0 || bErrs.count(syscall.ENOENT) == 0 {
		t.Errorf("B created %d files and met %d removed directories: the clients did not overlap", cr.created.Load(), bErrs.count(syscall.ENOENT))
	}

	// What is left of the tree on the server's disk is B's files only.
	left := 0
	for d := range tortureDirs {
		ents, err := os.ReadDir(filepath.Join(tree(export), dirName(d)))
		if errors.Is(err, os.ErrNotExist) {
			continue
		}
		must(t, "list on disk", err)
		for _, e := range ents {
			left++
			if !strings.HasPrefix(e.Name(), "b") || e.IsDir() {
				t.Errorf("%s/%s left on the server after A's pass: not one of B's files", dirName(d), e.Name())
			}
		}
	}

	// A's final pass, with B stopped: the tree itself goes too.
	final := &remover{w: newWorker("A (final rm -rf)"), errs: aErrs}
	go func() {
		defer final.w.done.Store(true)
		ents, err := listNames(tree(a.Dir))
		if err != nil {
			aErrs.add("list "+tree(a.Dir), err)
			return
		}
		for _, name := range ents {
			final.rmDir(filepath.Join(tree(a.Dir), name), 2)
		}
		final.rmDir(tree(a.Dir), 2)
	}()
	watch(t, []*worker{final.w}, a, b)
	t.Logf("final pass: %d files left by B, %d unlinked, rmdir ENOTEMPTY %d times", left, final.unlinks.Load(), final.notEmpty.Load())
	if bad := aErrs.unexpected(); len(bad) > 0 {
		t.Fatalf("client A's final pass: unexpected errors: %s", strings.Join(bad, "; "))
	}
	if _, err := os.Lstat(tree(export)); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("the tree is still on the server after A's final pass: %v", err)
	}
	if final.unlinks.Load() != int64(left) {
		t.Errorf("A's final pass unlinked %d files, %d were left", final.unlinks.Load(), left)
	}

	// A fresh listing agrees with the disk: through A at once (its own
	// changes), through B once its directory attributes have expired.
	agree := func(who, root string) {
		t.Helper()
		want := treeListing(t, export)
		if got := treeListing(t, root); !slices.Equal(got, want) {
			t.Errorf("listing through %s: %v\non the server's disk: %v", who, got, want)
		}
	}
	agree("A", a.Dir)
	time.Sleep(3*time.Second + 500*time.Millisecond)
	agree("B", b.Dir)

	// Both mounts unmount, and their daemons exit, promptly: nothing is
	// left waiting on the server. (Unless a process of another test run
	// copied the mount into a mount namespace of its own, which keeps it
	// alive whatever the daemon does: that is said, not failed.)
	for _, m := range []*harness.Mount{a, b} {
		if err := m.Unmount(false); err != nil {
			if held := otherNamespacesHolding(m.Dir); len(held) > 0 {
				t.Logf("unmount %s: %v; the mount lives on in other mount namespaces: %s", m.Dir, err, strings.Join(held, "; "))
				continue
			}
			syscall.Kill(m.Pid(), syscall.SIGQUIT) // its goroutines, for the message
			syscall.Kill(m.Pid(), syscall.SIGCONT)
			time.Sleep(time.Second)
			t.Errorf("unmount %s: %v\n%s", m.Dir, err, m.Output())
		}
	}
	t.Logf("done in %v", time.Since(start).Round(time.Millisecond))
}

// treeListing walks root and returns every path under it with its type.
func treeListing(t *testing.T, root string) []string {
	t.Helper()
	var out []string
	err := filepath.WalkDir(root, func(p string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(root, p)
		out = append(out, fmt.Sprintf("%s %v", rel, d.Type()))
		return nil
	})
	if err != nil {
		t.Fatalf("walking %s: %v", root, err)
	}
	return out
}

// otherNamespacesHolding lists the processes (pid and command) whose mount
// namespace, not ours, has something mounted on dir.
func otherNamespacesHolding(dir string) []string {
	self, _ := os.Readlink("/proc/self/ns/mnt")
	seen := map[string]bool{self: true}
	ents, _ := os.ReadDir("/proc")
	var out []string
	for _, e := range ents {
		pid := e.Name()
		ns, err := os.Readlink("/proc/" + pid + "/ns/mnt")
		if err != nil || seen[ns] {
			continue
		}
		seen[ns] = true
		info, err := os.ReadFile("/proc/" + pid + "/mountinfo")
		if err != nil {
			continue
		}
		for _, line := range strings.Split(string(info), "\n") {
			if f := strings.Fields(line); len(f) > 4 && f[4] == dir {
				cmd, _ := os.ReadFile("/proc/" + pid + "/cmdline")
				name, _, _ := strings.Cut(string(cmd), "\x00")
				out = append(out, fmt.Sprintf("pid %s (%s)", pid, name))
				break
			}
		}
	}
	return out
}
