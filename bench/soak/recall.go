package main

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"sync"
	"syscall"
	"time"

	"hushfs/bench/benchfmt"
	"hushfs/test/harness"
)

// The recall soak (--recall): `hushfs serve` with delegations on (its
// default) and a short lease, two hushfs mounts of it over NFSv4.1 (two
// clients) and a local writer working directly in the export directory,
// all hammering the same 100 files with reads, reopens, whole-file
// rewrites, appends, truncates, renames over the file and chmods, checked
// against a close-to-open model (recall_model.go): once a writer's close
// returned, an open() anywhere that starts later reads that version or a
// newer one; at the end every file, on the disk and through both mounts,
// is the model's latest version. No operation may wait longer than the
// lease: a delegation outliving a conflicting change by more than that
// (the server revokes after a lease) shows as one.

const (
	recallFiles = 100
	recallLease = 10 * time.Second
)

// recallActor is one of the three writers and readers.
type recallActor struct {
	name    string
	dir     string // where it sees the files: a mount, or the export
	workers int

	mu      sync.Mutex
	ops     map[string]int
	maxWait map[string]time.Duration // longest operation, by kind
}

func (a *recallActor) record(kind string, d time.Duration) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.ops[kind]++
	if d > a.maxWait[kind] {
		a.maxWait[kind] = d
	}
}

// recallRun is one run of the recall soak.
type recallRun struct {
	ctx     context.Context
	cfg     config
	model   *recallModel
	actors  []*recallActor
	mu      sync.Mutex
	probs   []string
	failed  int
	report  strings.Builder
	metrics string // the server's metrics address
	export  string // the exported directory, on the server's disk
}

func (r *recallRun) problem(format string, args ...any) {
	msg := fmt.Sprintf(format, args...)
	r.mu.Lock()
	defer r.mu.Unlock()
	r.failed++
	if len(r.probs) < 50 {
		r.probs = append(r.probs, msg)
		fmt.Fprintf(os.Stderr, "soak: PROBLEM: %s\n", msg)
	}
}

func (r *recallRun) logf(format string, args ...any) {
	fmt.Fprintf(os.Stderr, "soak: "+format+"\n", args...)
	fmt.Fprintf(&r.report, format+"\n", args...)
}

// runRecall runs the recall soak and returns the exit status.
func runRecall(ctx context.Context, c config) int {
	if c.duration == 0 {
		c.duration = 2 * time.Minute
		if c.quick {
			c.duration = 25 * time.Second
		}
	}
	if c.out == "" {
		c.out = filepath.Join("bench", "results", "tmp", "soak-recall")
	}
	r := &recallRun{ctx: ctx, cfg: c, model: newRecallModel(recallFiles)}
	start := time.Now()
	ok := harness.Run(r.run)
	harness.CleanupBuild()
	if !ok && ctx.Err() == nil {
		r.problem("setup or cleanup failed (see the messages above)")
	}
	r.logf("wall time %s", benchfmt.Secs(time.Since(start)))
	if err := os.MkdirAll(c.out, 0o755); err == nil {
		md := "# Recall soak (NFSv4.1, `hushfs serve`)\n\n```\n" + r.report.String() + "```\n"
		if len(r.probs) > 0 {
			md += fmt.Sprintf("\n%d problems:\n\n- %s\n", r.failed, strings.Join(r.probs, "\n- "))
		}
		os.WriteFile(filepath.Join(c.out, "results.md"), []byte(md), 0o644)
	}
	if r.failed > 0 {
		fmt.Fprintf(os.Stderr, "soak: FAIL: %d problems\n", r.failed)
		return 1
	}
	fmt.Fprintf(os.Stderr, "soak: PASS: recall soak, results in %s\n", c.out)
	return 0
}

func freePort() (string, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", err
	}
	defer l.Close()
	return l.Addr().String(), nil
}

func (r *recallRun) run(t *harness.Program) {
	c := r.cfg
	bin := harness.BuildHushfs(t)
	work, err := os.MkdirTemp(c.tmp, "hushfs-recall-")
	if err != nil {
		t.Fatalf("work directory: %v", err)
	}
	export := filepath.Join(work, "export")
	r.export = export
	mnts := []string{filepath.Join(work, "a"), filepath.Join(work, "b")}
	t.Cleanup(func() {
		for _, m := range mnts {
			if busy, _ := harness.MountedAny(m); busy {
				t.Errorf("%s is still mounted: leaving %s in place", m, work)
				return
			}
		}
		os.RemoveAll(work)
	})
	for _, d := range append([]string{export}, mnts...) {
		if err := os.Mkdir(d, 0o755); err != nil {
			t.Fatalf("%v", err)
		}
	}
	// Every file starts as version 1, made before anyone mounts.
	for _, f := range r.model.files {
		v := f.beginWrite(time.Now())
		content := line(f, v, "init", 0)
		err := os.WriteFile(filepath.Join(export, f.name), []byte(content), 0o644)
		f.endWrite(v, content, "init", err == nil, time.Now())
		if err != nil {
			t.Fatalf("%v", err)
		}
	}
	if r.metrics, err = freePort(); err != nil {
		t.Fatalf("metrics port: %v", err)
	}
	sv := harness.StartServe(t, export, "--lease", recallLease.String(), "--metrics", r.metrics)
	var ms []*harness.Mount
	for _, m := range mnts {
		ms = append(ms, harness.MountServe(t, bin, sv, m, "vers=4.1,hard"))
	}
	for _, a := range []*recallActor{
		{name: "client A", dir: mnts[0], workers: 3},
		{name: "client B", dir: mnts[1], workers: 3},
		{name: "local", dir: export, workers: 2},
	} {
		if len(c.recallActors) == 0 || slices.Contains(c.recallActors, strings.Fields(a.name)[len(strings.Fields(a.name))-1]) {
			r.actors = append(r.actors, a)
		}
	}
	r.logf("%s: hushfs serve pid %d (lease %v, delegations on), mounts vers=4.1 pids %d, %d; %d files; %v",
		time.Now().UTC().Format(time.RFC3339), sv.Cmd.Process.Pid, recallLease, ms[0].Pid(), ms[1].Pid(), recallFiles, c.duration)

	wctx, cancel := context.WithTimeout(r.ctx, c.duration)
	defer cancel()
	var wg sync.WaitGroup
	for ai, a := range r.actors {
		a.ops, a.maxWait = map[string]int{}, map[string]time.Duration{}
		for w := range a.workers {
			wg.Add(1)
			go func() {
				defer wg.Done()
				r.worker(wctx, a, w, rand.New(rand.NewPCG(c.seed, uint64(ai*16+w))))
			}()
		}
	}
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(c.duration + 2*recallLease + 30*time.Second):
		r.problem("workers still running %v after the end: a hang", 2*recallLease+30*time.Second)
		// Where the kernel holds them (a FUSE request unanswered, a
		// directory lock a notification waits for): the goroutine dumps
		// below show only the daemons' side.
		r.logf("kernel stacks of the soak's and the mounts' waiting threads:\n%s",
			blockedStacks(os.Getpid(), ms[0].Pid(), ms[1].Pid()))
		for _, pid := range []int{ms[0].Pid(), ms[1].Pid(), sv.Cmd.Process.Pid} {
			syscall.Kill(pid, syscall.SIGQUIT)
		}
		return // the harness's cleanups detach the mounts and stop the server by pid
	}
	for i, m := range ms {
		if !m.Alive() {
			r.problem("the mount daemon of client %d exited", i)
		}
	}
	if !sv.Alive() {
		r.problem("the server exited")
	}
	r.finalCheck(export, mnts)
	r.summary(ms, t)
	for i, m := range ms {
		start := time.Now()
		if err := m.Unmount(false); err != nil {
			r.problem("unmount %s: %v", mnts[i], err)
		} else {
			r.logf("unmount %s: clean in %s", mnts[i], benchfmt.Secs(time.Since(start)))
		}
	}
	if out := sv.Output(); strings.Contains(out, "panic") || strings.Contains(out, "DATA RACE") {
		r.problem("server output:\n%s", out)
	}
}

type recallKind struct {
	kind   string
	weight int
}

var recallKinds = []recallKind{{"read", 40}, {"reopen", 12}, {"rewrite", 14}, {"append", 10}, {"truncate", 7}, {"rename", 10}, {"chmod", 7}}

func (r *recallRun) worker(ctx context.Context, a *recallActor, w int, rng *rand.Rand) {
	kinds := slices.DeleteFunc(slices.Clone(recallKinds), func(k recallKind) bool {
		return len(r.cfg.recallOps) > 0 && !slices.Contains(r.cfg.recallOps, k.kind)
	})
	total := 0
	for _, k := range kinds {
		total += k.weight
	}
	for ctx.Err() == nil {
		f := r.model.files[rng.IntN(len(r.model.files))]
		n := rng.IntN(total)
		kind := ""
		for _, k := range kinds {
			if n < k.weight {
				kind = k.kind
				break
			}
			n -= k.weight
		}
		start := time.Now()
		if err := r.op(a, w, f, kind, rng); err != nil {
			r.problem("%s %s of %s: %v", a.name, kind, f.name, err)
		}
		a.record(kind, time.Since(start))
	}
}

// op runs one operation of kind on f as actor a.
func (r *recallRun) op(a *recallActor, w int, f *fileModel, kind string, rng *rand.Rand) error {
	path := filepath.Join(a.dir, f.name)
	switch kind {
	case "read":
		return r.read(f, path)
	case "reopen":
		// Open and close, then open again: the second open is the
		// delegation's to answer, if one stands.
		if err := r.read(f, path); err != nil {
			return err
		}
		return r.read(f, path)
	case "chmod":
		rs := f.beginRead(time.Now())
		err := os.Chmod(path, []os.FileMode{0o644, 0o664, 0o640}[rng.IntN(3)])
		if (errors.Is(err, syscall.ESTALE) || errors.Is(err, syscall.ENOENT)) && f.renameRace(rs) {
			return nil
		}
		return err
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	v := f.beginWrite(time.Now())
	_, old := f.current()
	var content string
	err := func() error {
		switch kind {
		case "rewrite":
			content = lines(f, v, a.name, 1+rng.IntN(40))
			return os.WriteFile(path, []byte(content), 0o644)
		case "append":
			add := lines(f, v, a.name, 1+rng.IntN(4))
			content = old + add
			return appendTo(path, add)
		case "truncate":
			ls := strings.SplitAfter(old, "\n")
			keep := strings.Join(ls[:rng.IntN(len(ls))], "")
			add := line(f, v, a.name, 0)
			content = keep + add
			f.passesThrough(v, keep)
			if err := os.Truncate(path, int64(len(keep))); err != nil {
				return err
			}
			return appendTo(path, add)
		case "rename":
			content = lines(f, v, a.name, 1+rng.IntN(20))
			tmp := fmt.Sprintf("%s.tmp.%s%d", path, strings.ReplaceAll(a.name, " ", ""), w)
			if err := os.WriteFile(tmp, []byte(content), 0o644); err != nil {
				return err
			}
			return os.Rename(tmp, path)
		}
		return fmt.Errorf("unknown operation %q", kind)
	}()
	f.endWrite(v, content, a.name+" "+kind, err == nil, time.Now())
	if err != nil {
		return fmt.Errorf("version %d: %w", v, err)
	}
	if a.dir != r.export && kind != "rename" && f.afterLocalRename(v) {
		// Made in place right after a local rename over the file: it may
		// have gone to the file the rename replaced. The server's disk
		// tells (a write delegation's data is written back when this
		// local open breaks its lease), while this writer still holds
		// the file.
		got, err := os.ReadFile(filepath.Join(r.export, f.name))
		if err != nil {
			return fmt.Errorf("version %d: reading it on the server's disk: %w", v, err)
		}
		f.settleWrite(v, content, string(got))
	}
	return nil
}

func lines(f *fileModel, v int, actor string, n int) string {
	var b strings.Builder
	for k := range n {
		b.WriteString(line(f, v, actor, k))
	}
	return b.String()
}

func appendTo(path, s string) error {
	fd, err := os.OpenFile(path, os.O_WRONLY|os.O_APPEND, 0)
	if err != nil {
		return err
	}
	_, err = fd.WriteString(s)
	if cerr := fd.Close(); err == nil {
		err = cerr
	}
	return err
}

// read opens, reads and closes path and checks what it read.
func (r *recallRun) read(f *fileModel, path string) error {
	rs := f.beginRead(time.Now())
	b, err := os.ReadFile(path)
	if (errors.Is(err, syscall.ESTALE) || errors.Is(err, syscall.ENOENT)) && f.renameRace(rs) {
		return nil
	}
	if err != nil {
		return err
	}
	if msg := f.checkRead(rs, string(b)); msg != "" {
		return errors.New(msg)
	}
	return nil
}

// finalCheck compares every file on the disk and through both mounts
// with the model's latest version.
func (r *recallRun) finalCheck(export string, mnts []string) {
	bad := 0
	for _, f := range r.model.files {
		v, want := f.current()
		for _, dir := range append([]string{export}, mnts...) {
			got, err := os.ReadFile(filepath.Join(dir, f.name))
			switch {
			case err != nil:
				r.problem("final check of %s in %s: %v", f.name, dir, err)
				bad++
			case string(got) != want:
				gv, _ := versionOf(string(got))
				msg := fmt.Sprintf("final check of %s in %s: version %d (%d bytes), the model's is %d (%s, %d bytes)",
					f.name, dir, gv, len(got), v, f.by[v], len(want))
				if bad < 10 {
					r.logf("%s", msg)
				}
				r.problem("%s", msg)
				bad++
			}
		}
	}
	r.logf("final check: %d files × (disk, client A, client B): %d mismatches", len(r.model.files), bad)
	late, lag, races, lost, lostReads := 0, time.Duration(0), 0, 0, 0
	for _, f := range r.model.files {
		f.stateMu.Lock()
		races += f.renameErrs
		lost += f.lostCount
		lostReads += f.lostWrites
		late += f.lateReads
		lag = max(lag, f.maxLag)
		f.stateMu.Unlock()
	}
	r.logf("reads of the file a local rename had just replaced (allowed within %v: the server sees it only after): %d, longest after the rename %s",
		localRenameWindow, late, benchfmt.Secs(lag))
	r.logf("client writes in place (rewrite, append, truncate) begun within %v after a local rename over the file that went (in part) to the file it replaced (found on the server's disk; the server hears of a local rename only after it): %d, reads that then saw the version before: %d",
		localRenameWindow, lost, lostReads)
	r.logf("opens failed with ESTALE or ENOENT racing a rename over the file (a silly rename hides it; a name cached before a rename is STALE, and the kernel's one retry met the next rename): %d", races)
}

// summary records each actor's operations and longest waits, each
// mount's calls and the server's delegation counters.
func (r *recallRun) summary(ms []*harness.Mount, t *harness.Program) {
	var longest time.Duration
	for _, a := range r.actors {
		a.mu.Lock()
		kinds := make([]string, 0, len(a.ops))
		total := 0
		for k, n := range a.ops {
			kinds = append(kinds, k)
			total += n
		}
		sort.Strings(kinds)
		var parts []string
		for _, k := range kinds {
			parts = append(parts, fmt.Sprintf("%s %d (longest %s)", k, a.ops[k], benchfmt.Secs(a.maxWait[k])))
			longest = max(longest, a.maxWait[k])
		}
		a.mu.Unlock()
		r.logf("%s: %d operations: %s", a.name, total, strings.Join(parts, ", "))
	}
	r.logf("longest operation (an upper bound of a delegation outliving a conflicting change): %s, lease %v", benchfmt.Secs(longest), recallLease)
	if longest > recallLease {
		r.problem("an operation waited %s, longer than the lease (%v)", benchfmt.Secs(longest), recallLease)
	}
	for i, m := range ms {
		snap := m.Stats(t)
		var parts []string
		var total uint64
		names := make([]string, 0, len(snap.Ops))
		for k := range snap.Ops {
			names = append(names, k)
		}
		slices.Sort(names)
		for _, k := range names {
			n := snap.Ops[k].Ops
			total += n
			parts = append(parts, fmt.Sprintf("%s %d", k, n))
		}
		r.logf("client %c calls (hushfs stats): %d: %s", 'A'+i, total, strings.Join(parts, ", "))
	}
	resp, err := http.Get("http://" + r.metrics + "/metrics")
	if err != nil {
		r.problem("server metrics: %v", err)
		return
	}
	defer resp.Body.Close()
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	var lines []string
	for sc.Scan() {
		l := sc.Text()
		up := strings.ToUpper(l)
		if !strings.HasPrefix(l, "#") && !strings.Contains(l, "_duration_seconds") &&
			(strings.Contains(up, "DELEG") || strings.Contains(up, "RECALL") || strings.Contains(up, "CB_")) {
			lines = append(lines, l)
		}
	}
	r.logf("server metrics (delegations, callbacks):\n  %s", strings.Join(lines, "\n  "))
}

// blockedStacks returns the kernel stacks (/proc/PID/task/TID/stack, root
// only) of the threads of pids that wait in the file system: in FUSE or on
// a lock, but not a mount daemon's idle read of /dev/fuse.
func blockedStacks(pids ...int) string {
	var b strings.Builder
	for _, pid := range pids {
		tasks, _ := filepath.Glob(fmt.Sprintf("/proc/%d/task/*", pid))
		for _, t := range tasks {
			st, err := os.ReadFile(filepath.Join(t, "stack"))
			s := string(st)
			if err != nil || strings.Contains(s, "fuse_dev_do_read") ||
				!strings.Contains(s, "fuse") && !strings.Contains(s, "rwsem") && !strings.Contains(s, "lock") {
				continue
			}
			comm, _ := os.ReadFile(filepath.Join(t, "comm"))
			fmt.Fprintf(&b, "pid %d thread %s (%s):\n%s", pid, filepath.Base(t), strings.TrimSpace(string(comm)), s)
		}
	}
	if b.Len() == 0 {
		return "(none found)\n"
	}
	return b.String()
}
