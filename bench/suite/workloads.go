package main

import (
	"bufio"
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"time"

	"hushfs/bench/benchfmt"
	"hushfs/test/harness"
)

// workload is one of the experiments: what it creates directly in the
// export before the server starts, its phases (at an RTT), how it runs
// them, and (if it has one) the same work on local disk, the figure a user
// compares with: local prepares a local directory (r.export) and returns
// the steps to run there.
type workload struct {
	phases func(sz sizes, rtt time.Duration) []phaseName
	setup  func(r *wrun) error
	run    func(r *wrun)
	local  func(r *wrun) []step
}

var workloads = map[string]workload{
	"lua":   {luaPhases, luaSetup, luaRun, luaLocal},
	"ls":    {lsPhases, lsSetup, lsRun, lsLocal},
	"rmrf":  {rmrfPhases, rmrfSetup, rmrfRun, nil},
	"write": {writePhases, writeSetup, writeRun, nil},
	"untar": {untarPhases, untarSetup, untarRun, untarLocal},
	"git":   {gitPhases, gitSetup, gitRun, gitLocal},
	"zlib":  {zlibPhases, zlibSetup, zlibRun, zlibLocal},
}

// limit is a phase's time limit: the full-mode default, or at most two
// minutes in quick mode (whose sizes are small).
func (r *wrun) limit(full time.Duration) time.Duration {
	if r.s.cfg.quick {
		return min(full, 2*time.Minute)
	}
	return full
}

// ---- W-lua: build lua 5.4.4 on the mount.

const luaDir = "lua-5.4.4"

var (
	luaClean1 = phaseName{"clean1", "make clean (1)"}
	luaBuild1 = phaseName{"build1", "build1"}
	luaClean2 = phaseName{"clean2", "make clean (2)"}
	luaBuild2 = phaseName{"build2", "build2"}
)

func luaNoop(i int) phaseName {
	if i == 0 {
		return phaseName{"noop", "noop"}
	}
	return phaseName{"noop", fmt.Sprintf("noop #%d", i+1)}
}

func luaPhases(sz sizes, _ time.Duration) []phaseName {
	ps := []phaseName{luaClean1, luaBuild1, luaClean2, luaBuild2}
	for i := range sz.noopRuns {
		ps = append(ps, luaNoop(i))
	}
	return ps
}

func luaSetup(r *wrun) error {
	return untar(r, r.s.cfg.luaTar, r.export)
}

func untar(r *wrun, tarball, dir string) error {
	if out, err := runQuiet(r.s.ctx, 2*time.Minute, dir, "tar", "xf", tarball); err != nil {
		return fmt.Errorf("tar xf %s: %w\n%s", tarball, err, out)
	}
	return nil
}

const buildCmd = "make -C src linux"

func luaSteps(r *wrun, dir, exportDir string) []step {
	clean := func(pn phaseName) step {
		return step{phaseName: pn, script: "make clean", dir: dir, limit: r.limit(2 * time.Minute),
			check: func(x *execResult) (string, bool) { return checkClean(x, exportDir) }}
	}
	build := func(pn phaseName) step {
		return step{phaseName: pn, script: buildCmd, dir: dir, limit: r.limit(10 * time.Minute),
			check: func(x *execResult) (string, bool) { return checkBuild(r, x, dir, false) }}
	}
	steps := []step{clean(luaClean1), build(luaBuild1), clean(luaClean2), build(luaBuild2)}
	for i := range r.s.cfg.sizes.noopRuns {
		steps = append(steps, step{phaseName: luaNoop(i), script: buildCmd, dir: dir, limit: r.limit(2 * time.Minute),
			check: func(x *execResult) (string, bool) { return checkBuild(r, x, dir, true) }})
	}
	return steps
}

func luaRun(r *wrun) {
	m := r.mount()
	for _, st := range luaSteps(r, filepath.Join(m.Dir, luaDir), filepath.Join(r.export, luaDir)) {
		if _, ok := r.phase(m, st); !ok {
			return // the rest depends on this phase; reported as not run
		}
	}
	r.unmount(m, false)
}

// luaLocal is the same build on local disk.
func luaLocal(r *wrun) []step {
	if err := untar(r, r.s.cfg.luaTar, r.export); err != nil {
		r.t.Fatalf("%s: %v", r.tag, err)
	}
	src := filepath.Join(r.export, luaDir)
	return luaSteps(r, src, src)
}

func exitProblem(x *execResult) (string, bool) {
	if x.exit == 0 {
		return "", true
	}
	msg := fmt.Sprintf("exit status %d", x.exit)
	if e := strings.TrimSpace(x.stderr); e != "" {
		msg += ": " + strings.ReplaceAll(tailString(e, 400), "\n", " | ")
	}
	return msg, false
}

func checkClean(x *execResult, exportDir string) (string, bool) {
	if msg, ok := exitProblem(x); !ok {
		return msg, false
	}
	objs, _ := filepath.Glob(filepath.Join(exportDir, "src", "*.o"))
	for _, bin := range []string{"lua", "luac", "liblua.a"} {
		if _, err := os.Lstat(filepath.Join(exportDir, "src", bin)); err == nil {
			objs = append(objs, bin)
		}
	}
	if len(objs) > 0 {
		return fmt.Sprintf("%d build products left after make clean (%s)", len(objs), filepath.Base(objs[0])), false
	}
	return "clean", true
}

// checkBuild checks that make succeeded (and, for a no-op build, that it
// had nothing to do) and that the lua binary on the mount runs.
func checkBuild(r *wrun, x *execResult, dir string, noop bool) (string, bool) {
	if msg, ok := exitProblem(x); !ok {
		return msg, false
	}
	if noop {
		out, _ := os.ReadFile(x.stdout)
		if !bytes.Contains(out, []byte("Nothing to be done for 'all'")) {
			return "the no-op build did something: " + tailString(string(out), 300), false
		}
	}
	v, err := runQuiet(r.s.ctx, time.Minute, dir, "src/lua", "-v")
	if err != nil || !strings.Contains(v, "Lua 5.4.4") {
		return fmt.Sprintf("src/lua -v: %v: %q", err, tailString(v, 200)), false
	}
	out, err := runQuiet(r.s.ctx, time.Minute, dir, "src/lua", "-e", `print(("hushfs"):upper(), 6*7)`)
	if err != nil || strings.TrimSpace(out) != "HUSHFS\t42" {
		return fmt.Sprintf("src/lua -e: %v: %q", err, tailString(out, 200)), false
	}
	if noop {
		return "nothing to do; src/lua runs", true
	}
	return "src/lua runs (Lua 5.4.4)", true
}

// ---- W-ls: list a big directory, with and without concurrent changes.

var (
	lsF        = phaseName{"ls-f", "ls -f"}
	lsL        = phaseName{"ls-l", "ls -l"}
	lsLCached  = phaseName{"ls-l-cached", "ls -l, cached"}
	lsLExpired = phaseName{"ls-l-expired", "ls -l, expired"}
	lsFChurn   = phaseName{"ls-f-churn", "ls -f + churn"}
	lsLChurn   = phaseName{"ls-l-churn", "ls -l + churn"}
)

// lsPhases: the listings again, fully cached and with every attribute
// expired, at RTT 0 only (expired, it is one GETATTR per entry today:
// 100,000 × 10 ms would be 17 minutes).
func lsPhases(_ sizes, rtt time.Duration) []phaseName {
	if rtt == 0 {
		return []phaseName{lsF, lsL, lsLCached, lsLExpired, lsFChurn, lsLChurn}
	}
	return []phaseName{lsF, lsL, lsFChurn, lsLChurn}
}

// bigdirAge is how old bigdir and its files look: a directory that has been
// there a while, whose attributes the client keeps for acregmax/acdirmax
// (a tenth of the age, capped) from the listing that brought them, so that
// the cached listing finds every one still valid however long the cold
// listing took.
const bigdirAge = time.Hour

func lsName(i int) string { return fmt.Sprintf("f%06d", i) }

// lsSetup puts bigdir in the export. Creating 100,000 files takes from
// seconds to a minute, so the suite makes them once and moves the
// directory from one export to the next (a rename), checking that it is
// intact each time; the server is started afresh all the same.
func lsSetup(r *wrun) error {
	dir := filepath.Join(r.export, "bigdir")
	kept, err := ensureBigdir(r.s)
	if err != nil {
		return err
	}
	if err := os.Rename(kept, dir); err != nil {
		return err
	}
	// The churn phases of an earlier run changed the directory.
	old := time.Now().Add(-bigdirAge)
	if err := os.Chtimes(dir, old, old); err != nil {
		return err
	}
	// Registered before the server and the mounts start, so run after
	// they are gone.
	r.t.Cleanup(func() {
		if err := os.Rename(dir, kept); err != nil {
			r.s.logf("  %s: keeping bigdir for the next run: %v", r.tag, err)
		}
	})
	return nil
}

// intactBigdir reports whether dir holds exactly bigdir's n names.
func intactBigdir(dir string, n int) bool {
	f, err := os.Open(dir)
	if err != nil {
		return false
	}
	defer f.Close()
	names, err := f.Readdirnames(-1)
	if err != nil || len(names) != n {
		return false
	}
	for _, name := range names {
		var i int
		if _, err := fmt.Sscanf(name, "f%06d", &i); err != nil || i < 1 || i > n || lsName(i) != name {
			return false
		}
	}
	return true
}

// makeBigdir makes dir with n empty files, all dated bigdirAge back.
func makeBigdir(ctx context.Context, dir string, n int) error {
	if err := os.Mkdir(dir, 0o755); err != nil {
		return err
	}
	old := time.Now().Add(-bigdirAge)
	for i := 1; i <= n; i++ {
		if i%1000 == 0 && ctx.Err() != nil {
			return ctx.Err()
		}
		name := filepath.Join(dir, lsName(i))
		f, err := os.OpenFile(name, os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o644)
		if err != nil {
			return err
		}
		if err := f.Close(); err != nil {
			return err
		}
		if err := os.Chtimes(name, old, old); err != nil {
			return err
		}
	}
	return os.Chtimes(dir, old, old)
}

// ensureBigdir makes the suite's bigdir (kept in its scratch directory
// between runs) unless it is there, intact.
func ensureBigdir(s *suite) (string, error) {
	kept := filepath.Join(s.work, "bigdir")
	if intactBigdir(kept, s.cfg.sizes.lsFiles) {
		return kept, nil
	}
	os.RemoveAll(kept)
	return kept, makeBigdir(s.ctx, kept, s.cfg.sizes.lsFiles)
}

// lsStep lists bigdir (in dir) with ls -f or ls -l.
func lsStep(r *wrun, pn phaseName, dir string, long, churn bool, limit time.Duration) step {
	st := step{phaseName: pn, script: "ls -f bigdir", dir: dir, limit: r.limit(limit),
		check: func(x *execResult) (string, bool) {
			return checkLs(x, r.s.cfg.sizes.lsFiles, long, churn)
		}}
	if long {
		st.script = "ls -l bigdir"
	}
	return st
}

// lsLocal lists bigdir on local disk with ls -l, once for each of the
// cached and expired listings (local disk has no attributes to expire).
func lsLocal(r *wrun) []step {
	kept, err := ensureBigdir(r.s)
	if err != nil {
		r.t.Fatalf("%s: bigdir: %v", r.tag, err)
	}
	dir := filepath.Dir(kept)
	return []step{lsStep(r, lsLCached, dir, true, false, 5*time.Minute), lsStep(r, lsLExpired, dir, true, false, 5*time.Minute)}
}

func lsRun(r *wrun) {
	churnDir := filepath.Join(r.export, "bigdir")
	for _, c := range []struct {
		pn    phaseName
		long  bool
		churn bool
		limit time.Duration
	}{
		{lsF, false, false, 5 * time.Minute},
		{lsL, true, false, 10 * time.Minute},
		{lsFChurn, false, true, 400 * time.Second},
		{lsLChurn, true, true, 5 * time.Minute},
	} {
		if r.s.ctx.Err() != nil {
			return
		}
		// A fresh mount for each: nothing cached from the previous phase.
		m := r.mount()
		st := lsStep(r, c.pn, m.Dir, c.long, c.churn, c.limit)
		if c.churn {
			st.churn = churnDir
		}
		if _, ok := r.phase(m, st); !ok {
			continue
		}
		if c.pn == lsL && r.rtt == 0 && !r.lsAgain(m) {
			continue
		}
		r.unmount(m, false)
	}
}

// lsAgain lists bigdir again on the mount of the cold ls -l: at once, with
// everything cached, then once every cached attribute has expired.
func (r *wrun) lsAgain(m *harness.Mount) bool {
	if _, ok := r.phase(m, lsStep(r, lsLCached, m.Dir, true, false, 5*time.Minute)); !ok {
		return false
	}
	if !r.idle() {
		r.unmount(m, true)
		return false
	}
	st := lsStep(r, lsLExpired, m.Dir, true, false, 10*time.Minute)
	st.note = r.expiredNote()
	_, ok := r.phase(m, st)
	return ok
}

// checkLs checks that the listing names every bigdir entry exactly once and
// nothing else (.churn-N entries excepted while the directory churns), and
// for ls -l that every entry's attributes were read.
func checkLs(x *execResult, n int, long, churn bool) (string, bool) {
	f, err := os.Open(x.stdout)
	if err != nil {
		return err.Error(), false
	}
	defer f.Close()
	seen := make(map[string]int, n)
	var churned, unstatted, extra int
	var firstExtra, firstUnstatted string
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	first := true
	for sc.Scan() {
		line := sc.Text()
		if long && first && strings.HasPrefix(line, "total ") {
			first = false
			continue
		}
		first = false
		name := line
		if long {
			fields := strings.Fields(line)
			if len(fields) == 0 {
				continue
			}
			name = fields[len(fields)-1]
			if strings.Contains(fields[0], "?") && !strings.HasPrefix(name, ".churn-") {
				unstatted++
				if firstUnstatted == "" {
					firstUnstatted = line
				}
			}
		}
		switch {
		case name == "." || name == "..":
		case strings.HasPrefix(name, ".churn-"):
			churned++
			if !churn {
				extra++
			}
		case len(name) == 7 && name[0] == 'f':
			seen[name]++
		default:
			extra++
			if firstExtra == "" {
				firstExtra = name
			}
		}
	}
	if err := sc.Err(); err != nil {
		return "reading the listing: " + err.Error(), false
	}
	var missing, dups int
	var firstMissing, firstDup string
	for i := 1; i <= n; i++ {
		switch c := seen[lsName(i)]; {
		case c == 0:
			missing++
			if firstMissing == "" {
				firstMissing = lsName(i)
			}
		case c > 1:
			dups++
			if firstDup == "" {
				firstDup = lsName(i)
			}
		}
	}
	if len(seen) > n-missing {
		extra += len(seen) - (n - missing) // f-names beyond the range
	}
	var bad []string
	if missing > 0 {
		bad = append(bad, fmt.Sprintf("%d names missing (e.g. %s)", missing, firstMissing))
	}
	if dups > 0 {
		bad = append(bad, fmt.Sprintf("%d names listed more than once (e.g. %s)", dups, firstDup))
	}
	if extra > 0 {
		bad = append(bad, fmt.Sprintf("%d unexpected names (e.g. %q)", extra, firstExtra))
	}
	if unstatted > 0 {
		bad = append(bad, fmt.Sprintf("%d entries without attributes (e.g. %q)", unstatted, firstUnstatted))
	}
	// ls exits 1 for an entry that vanished between readdir and stat; with
	// churn that is expected of .churn-N and of nothing else.
	if x.exit != 0 {
		ok := churn && long && x.exit == 1
		for _, l := range strings.Split(strings.TrimSpace(x.stderr), "\n") {
			if l != "" && !strings.Contains(l, ".churn-") {
				ok = false
			}
		}
		if !ok {
			msg, _ := exitProblem(x)
			bad = append(bad, msg)
		}
	}
	if len(bad) > 0 {
		return strings.Join(bad, "; "), false
	}
	msg := fmt.Sprintf("%s names", benchfmt.Commas(uint64(n)))
	if churn {
		msg += fmt.Sprintf(" + %d .churn", churned)
	}
	return msg, true
}

// ---- W-rmrf: remove a tree of small files.

var rmrfPhase = phaseName{"rm-rf", "rm -rf"}

func rmrfPhases(sizes, time.Duration) []phaseName { return []phaseName{rmrfPhase} }

func rmrfSetup(r *wrun) error {
	sz := r.s.cfg.sizes
	rng := rand.New(rand.NewPCG(5, 1813)) // the same tree every run
	buf := make([]byte, 4096)
	for d := range sz.treeDirs {
		if err := r.s.ctx.Err(); err != nil {
			return err
		}
		dir := filepath.Join(r.export, "tree", fmt.Sprintf("d%03d", d))
		if err := os.MkdirAll(dir, 0o755); err != nil {
			return err
		}
		for f := range sz.treeFiles {
			n := 1 + rng.IntN(4096)
			for i := range n {
				buf[i] = byte(rng.Uint32())
			}
			if err := os.WriteFile(filepath.Join(dir, fmt.Sprintf("f%02d", f)), buf[:n], 0o644); err != nil {
				return err
			}
		}
	}
	return nil
}

func rmrfRun(r *wrun) {
	m := r.mount()
	st := step{phaseName: rmrfPhase, script: "rm -rf tree", dir: m.Dir, limit: r.limit(15 * time.Minute),
		check: func(x *execResult) (string, bool) {
			if msg, ok := exitProblem(x); !ok {
				return msg, false
			}
			if _, err := os.Lstat(filepath.Join(r.export, "tree")); !errors.Is(err, os.ErrNotExist) {
				return fmt.Sprintf("tree/ still on the server: %v", err), false
			}
			sz := r.s.cfg.sizes
			return fmt.Sprintf("tree gone (%d dirs, %s files)", sz.treeDirs+1, benchfmt.Commas(uint64(sz.treeDirs*sz.treeFiles))), true
		}}
	if _, ok := r.phase(m, st); ok {
		r.unmount(m, false)
	}
}

// ---- W-write: a large sequential write, reads of it and of a bigger file
// (each on a fresh mount, so nothing is cached on the client), then small
// scattered writes.

var (
	ddPhase      = phaseName{"dd", "dd"}
	ddReadPhase  = phaseName{"dd-read", "dd read"}
	seqReadPhase = phaseName{"seq-read", "sequential read"}
	fixupPhase   = phaseName{"fixup", "fixup"}
)

const seqFile = "seq.bin"

func writePhases(sizes, time.Duration) []phaseName {
	return []phaseName{ddPhase, ddReadPhase, seqReadPhase, fixupPhase}
}

// writeSetup writes the file the sequential read reads, directly in the
// export (real blocks, not a hole: the server reads what it would read).
func writeSetup(r *wrun) error {
	f, err := os.Create(filepath.Join(r.export, seqFile))
	if err != nil {
		return err
	}
	buf := make([]byte, 1<<20)
	for i := range buf {
		buf[i] = byte(i*131 + 7)
	}
	for range r.s.cfg.sizes.seqMiB {
		if _, err := f.Write(buf); err != nil {
			f.Close()
			return err
		}
	}
	return f.Close()
}

// readStep reads a file with dd into /dev/null: the phase's MB/s is the
// client's read path (the server has the file in its page cache).
func readStep(r *wrun, pn phaseName, dir, name string, size int64, limit time.Duration) step {
	return step{phaseName: pn, script: fmt.Sprintf("dd if=%s of=/dev/null bs=1M", name), dir: dir,
		limit: r.limit(limit), bytes: size,
		check: func(x *execResult) (string, bool) {
			if msg, ok := exitProblem(x); !ok {
				return msg, false
			}
			want := fmt.Sprintf("%d bytes", size)
			if !strings.Contains(x.stderr, want) {
				return fmt.Sprintf("dd did not report %s: %q", want, x.stderr), false
			}
			return fmt.Sprintf("%s MiB read", benchfmt.Commas(uint64(size>>20))), true
		}}
}

func writeRun(r *wrun) {
	mib := r.s.cfg.sizes.ddMiB
	// Each phase runs on a fresh mount, so it starts with empty client
	// caches and the daemon's peak RSS is the phase's own.
	m := r.mount()
	dd := step{phaseName: ddPhase, script: fmt.Sprintf("dd if=/dev/zero of=w64 bs=1M count=%d", mib), dir: m.Dir,
		limit: r.limit(5 * time.Minute), bytes: int64(mib) << 20,
		check: func(x *execResult) (string, bool) {
			if msg, ok := exitProblem(x); !ok {
				return msg, false
			}
			return checkSum(filepath.Join(r.export, "w64"), zeroSum(mib<<20))
		}}
	steps := []func(m *harness.Mount) step{
		func(m *harness.Mount) step { return dd },
		func(m *harness.Mount) step {
			return readStep(r, ddReadPhase, m.Dir, "w64", int64(mib)<<20, 5*time.Minute)
		},
		func(m *harness.Mount) step {
			return readStep(r, seqReadPhase, m.Dir, seqFile, int64(r.s.cfg.sizes.seqMiB)<<20, 10*time.Minute)
		},
		func(m *harness.Mount) step {
			return step{phaseName: fixupPhase, script: r.s.fixup + " fixup.bin", dir: m.Dir, limit: r.limit(2 * time.Minute),
				check: func(x *execResult) (string, bool) {
					if msg, ok := exitProblem(x); !ok {
						return msg, false
					}
					return checkSum(filepath.Join(r.export, "fixup.bin"), fixupSum())
				}}
		},
	}
	for i, mk := range steps {
		if i > 0 {
			m = r.mount()
		}
		if _, ok := r.phase(m, mk(m)); !ok {
			// A phase that failed or timed out abandoned its mount; the next
			// one needs nothing from it but (for dd read) the file.
			if r.s.ctx.Err() != nil {
				return
			}
			r.stopped = ""
			continue
		}
		r.unmount(m, false)
	}
}

// checkSum compares a file's SHA-256 with the expected one.
func checkSum(path, want string) (string, bool) {
	f, err := os.Open(path)
	if err != nil {
		return err.Error(), false
	}
	defer f.Close()
	h := sha256.New()
	n, err := io.Copy(h, f)
	if err != nil {
		return err.Error(), false
	}
	got := hex.EncodeToString(h.Sum(nil))
	if got != want {
		return fmt.Sprintf("sha256 of %s (%d bytes) is %.12s…, want %.12s…", filepath.Base(path), n, got, want), false
	}
	return fmt.Sprintf("sha256 %.12s… right", got), true
}

func zeroSum(n int) string {
	h := sha256.New()
	h.Write(make([]byte, n))
	return hex.EncodeToString(h.Sum(nil))
}

// fixupSum is the SHA-256 of what bench/workloads/fixup.c writes: keep the
// two in step.
func fixupSum() string {
	const block, blocks, patches = 4096, 256, 100
	buf := make([]byte, block*blocks)
	for b := range uint32(blocks) {
		for j := range uint32(block) {
			buf[b*block+j] = byte(b*7 + j*31)
		}
	}
	size := uint32(len(buf))
	for k := range uint32(patches) {
		off := ((k + 1) * 2654435761) % (size - 4)
		copy(buf[off:], []byte{0xde, 0xad, byte(k), byte(k ^ 0xff)})
	}
	sum := sha256.Sum256(buf)
	return hex.EncodeToString(sum[:])
}
