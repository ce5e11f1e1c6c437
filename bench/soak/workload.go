package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"hushfs/bench/benchfmt"
)

// job is one workload's behaviour. setup (re)creates its starting state
// and resets its own fields: it runs at the start and again after an
// iteration failed, once the workload's directory has been emptied.
// iterate runs one iteration; it returns errStopped, leaving its model
// consistent, when ctx ends between operations.
type job interface {
	about() string
	setup(w *workload) error
	iterate(ctx context.Context, w *workload, n int) error
}

// errStopped says an iteration ended early because the run's time is up.
var errStopped = errors.New("stopped: the run's time is up")

// mismatchError is a disagreement between the file system and a model:
// data, a name, a size, a link count. Anything else that fails is an
// (unexpected) error.
type mismatchError struct{ msg string }

func (e *mismatchError) Error() string { return e.msg }

func mismatchf(format string, args ...any) error {
	return &mismatchError{fmt.Sprintf(format, args...)}
}

// tracker says what one goroutine of a workload is doing and since when,
// for the watchdog and for a hang's report.
type tracker struct {
	name  string
	mu    sync.Mutex
	doing string
	since time.Time
	busy  bool
}

func (t *tracker) set(doing string) {
	t.mu.Lock()
	t.doing, t.since, t.busy = doing, time.Now(), true
	t.mu.Unlock()
}

func (t *tracker) idle() {
	t.mu.Lock()
	t.busy = false
	t.mu.Unlock()
}

// state returns what the goroutine is doing, for how long, and whether it
// is doing anything.
func (t *tracker) state(now time.Time) (string, time.Duration, bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.doing, now.Sub(t.since), t.busy
}

// maxDetails bounds the error descriptions kept per workload (all are
// counted).
const maxDetails = 20

// workload is one of the concurrent workloads: its directory on the mount
// and the same directory on the server's disk, its model, counters and
// trackers.
type workload struct {
	s    *soak
	name string
	job  job
	mnt  string // its directory through the mount
	disk string // the same directory in the export, on the server's disk
	rng  *rand.Rand
	// model holds what every file under the directory must be once the
	// operations so far returned.
	model *treeModel

	iterations atomic.Int64
	ops        atomic.Int64
	errs       atomic.Int64
	mismatches atomic.Int64

	main     *tracker
	mu       sync.Mutex
	trackers []*tracker
	details  []string
	done     chan struct{}
}

func newWorkload(s *soak, name string, j job, seed uint64) *workload {
	w := &workload{s: s, name: name, job: j,
		mnt: filepath.Join(s.mnt, name), disk: filepath.Join(s.export, name),
		rng:   rand.New(rand.NewPCG(seed, uint64(len(name)))),
		model: newTreeModel(), done: make(chan struct{})}
	w.main = w.tracker("main")
	return w
}

// tracker adds a tracker for another goroutine of the workload.
func (w *workload) tracker(name string) *tracker {
	t := &tracker{name: name}
	w.mu.Lock()
	w.trackers = append(w.trackers, t)
	w.mu.Unlock()
	return t
}

func (w *workload) allTrackers() []*tracker {
	w.mu.Lock()
	defer w.mu.Unlock()
	return append([]*tracker(nil), w.trackers...)
}

// step records the operation the workload starts now and counts it.
func (w *workload) step(format string, args ...any) {
	w.main.set(fmt.Sprintf(format, args...))
	w.ops.Add(1)
}

// fail counts and describes a failed iteration.
func (w *workload) fail(err error) {
	if w.s.aborted.Load() {
		return // what fails once the mount is torn down says nothing
	}
	var me *mismatchError
	kind := "error"
	if errors.As(err, &me) {
		kind = "MISMATCH"
		w.mismatches.Add(1)
	} else {
		w.errs.Add(1)
	}
	msg := fmt.Sprintf("[%s] %s %s: %v", benchfmt.Secs(time.Since(w.s.start)), w.name, kind, err)
	w.s.logf("%s", msg)
	w.mu.Lock()
	if len(w.details) < maxDetails {
		w.details = append(w.details, msg)
	}
	w.mu.Unlock()
}

// loop runs iterations until ctx ends. After a failed iteration it empties
// the directory and starts afresh; if even that fails, the workload stops.
func (w *workload) loop(ctx context.Context) {
	defer close(w.done)
	defer w.main.idle()
	if err := w.job.setup(w); err != nil {
		w.fail(fmt.Errorf("setup: %w", err))
		return
	}
	for n := 1; ctx.Err() == nil; n++ {
		err := w.job.iterate(ctx, w, n)
		if errors.Is(err, errStopped) {
			return
		}
		if err != nil {
			w.fail(fmt.Errorf("iteration %d: %w", n, err))
			if w.s.aborted.Load() {
				return
			}
			if err := w.restart(); err != nil {
				w.fail(fmt.Errorf("starting afresh after iteration %d: %w", n, err))
				return
			}
			continue
		}
		w.iterations.Add(1)
	}
}

// restart empties the workload's directory and sets the job up again.
func (w *workload) restart() error {
	w.step("emptying %s to start afresh", w.mnt)
	ents, err := os.ReadDir(w.mnt)
	if err != nil {
		return err
	}
	for _, e := range ents {
		if err := os.RemoveAll(filepath.Join(w.mnt, e.Name())); err != nil {
			return err
		}
	}
	w.model.reset()
	return w.job.setup(w)
}

// path is rel under the workload's directory on the mount.
func (w *workload) path(rel string) string { return filepath.Join(w.mnt, rel) }

// diskPath is rel under the workload's directory on the server's disk.
func (w *workload) diskPath(rel string) string { return filepath.Join(w.disk, rel) }

// mkdir makes a directory through the mount and records it.
func (w *workload) mkdir(rel string) error {
	w.step("mkdir %s", rel)
	if err := os.Mkdir(w.path(rel), 0o755); err != nil {
		return err
	}
	w.model.set(rel, expect{kind: kindDir, size: -1, perm: 0o755})
	return nil
}

// writeFile writes a whole file through the mount and records it.
func (w *workload) writeFile(rel string, data []byte) error {
	w.step("write %s (%d bytes)", rel, len(data))
	if err := os.WriteFile(w.path(rel), data, 0o644); err != nil {
		return err
	}
	w.model.set(rel, fileExpect(data, 0o644))
	return nil
}

// checkFile reads rel through the mount and on the server's disk and
// compares both with want.
func (w *workload) checkFile(rel string, want []byte) error {
	w.step("read back %s", rel)
	for _, p := range []struct{ where, path string }{{"through the mount", w.path(rel)}, {"on the server's disk", w.diskPath(rel)}} {
		got, err := os.ReadFile(p.path)
		if err != nil {
			return fmt.Errorf("read %s %s: %w", rel, p.where, err)
		}
		if !bytes.Equal(got, want) {
			return mismatchf("%s %s: %s", rel, p.where, describeDiff(0, got, want))
		}
	}
	return nil
}

// removeAll removes a tree through the mount and from the model.
func (w *workload) removeAll(rel string) error {
	w.step("remove tree %s", rel)
	if err := os.RemoveAll(w.path(rel)); err != nil {
		return err
	}
	w.model.delTree(rel)
	return nil
}

// cmdResult is how a command ended.
type cmdResult struct {
	stdout, stderr string
	exit           int
}

// command runs a program in dir (through the mount) with the operation
// time limit; a command still running then is killed and reported as a
// hang. A non-zero exit is not an error here: callers judge it.
func (w *workload) command(dir, name string, args ...string) (cmdResult, error) {
	what := strings.Join(append([]string{name}, args...), " ")
	w.step("running %q in %s", what, dir)
	// A little past the watchdog's own limit: the watchdog reports the
	// hang with everything else's state first.
	ctx, cancel := context.WithTimeout(context.Background(), w.s.cfg.opTimeout+10*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, name, args...)
	cmd.Dir = dir
	// Output goes to unlinked temporary files, not pipes: a pipe's write
	// end is copied into every child another workload forks at the same
	// moment, and one whose chdir into the mount waits on a blackholed
	// server keeps it open for seconds after this command has exited.
	outf, err := anonFile()
	if err != nil {
		return cmdResult{exit: -1}, fmt.Errorf("%q: %w", what, err)
	}
	defer outf.Close()
	errf, err := anonFile()
	if err != nil {
		return cmdResult{exit: -1}, fmt.Errorf("%q: %w", what, err)
	}
	defer errf.Close()
	cmd.Stdout, cmd.Stderr = outf, errf
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	// Kill the whole group: make's compilers die with it.
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
	err = cmd.Run()
	r := cmdResult{stdout: readHead(outf, 1<<20), stderr: readHead(errf, 64<<10), exit: -1}
	if cmd.ProcessState != nil {
		r.exit = cmd.ProcessState.ExitCode()
	}
	if ctx.Err() != nil {
		return r, fmt.Errorf("%q in %s still running after %v: killed", what, dir, w.s.cfg.opTimeout+10*time.Second)
	}
	var ee *exec.ExitError
	if err != nil && !errors.As(err, &ee) {
		return r, fmt.Errorf("%q: %w", what, err)
	}
	return r, nil
}

// anonFile is a temporary file already unlinked: it vanishes with its
// last descriptor, whatever happens to the soak.
func anonFile() (*os.File, error) {
	f, err := os.CreateTemp("", "hushfs-soak-out-*")
	if err != nil {
		return nil, fmt.Errorf("output file: %w", err)
	}
	if err := os.Remove(f.Name()); err != nil {
		f.Close()
		return nil, fmt.Errorf("output file: %w", err)
	}
	return f, nil
}

// readHead returns the first n bytes of f (a command's whole output is
// rarely needed, only enough to judge and report it).
func readHead(f *os.File, n int) string {
	b := make([]byte, n)
	k, _ := f.ReadAt(b, 0)
	return string(b[:k])
}

// describeDiff says how got differs from want (both read at off).
func describeDiff(off int64, got, want []byte) string {
	var b strings.Builder
	if len(got) != len(want) {
		fmt.Fprintf(&b, "%d bytes, want %d; ", len(got), len(want))
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
	} else {
		b.WriteString("the common part is equal")
	}
	return b.String()
}

// isNotExist reports whether err says a name is absent.
func isNotExist(err error) bool { return errors.Is(err, fs.ErrNotExist) }
