package main

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"hushfs/bench/benchfmt"
	"hushfs/internal/client"
)

// The everyday workloads: what people do with a source tree every day
// (untar, git clone/status, grep -r, du, rm -rf, configure && make), on
// real trees from Debian's source packages.

// tree is a real source tree: an upstream tarball from a Debian bookworm
// source package that bench/run fetches into bench/.cache.
type tree struct {
	name    string // for people: "sqlite 3.40.1"
	tarball string // file name in the cache
	top     string // the directory it unpacks into
}

var (
	sqliteTree  = tree{"sqlite 3.40.1", "sqlite3_3.40.1.orig.tar.xz", "sqlite3-3.40.1"}
	busyboxTree = tree{"busybox 1.35.0", "busybox_1.35.0.orig.tar.bz2", "busybox-1.35.0"}
	zlibTree    = tree{"zlib 1.2.13", "zlib_1.2.13.dfsg.orig.tar.bz2", "zlib-1.2.13.dfsg"}
)

func (s *suite) tarball(t tree) string { return filepath.Join(s.cfg.cache, t.tarball) }

// repoPath is the bare repository made from a tree, in the cache.
func (s *suite) repoPath(t tree) string { return filepath.Join(s.cfg.cache, t.top+".git") }

var (
	untarPhase   = phaseName{"untar", "untar"}
	clonePhase   = phaseName{"git-clone", "git clone"}
	statusPhase  = phaseName{"git-status", "git status, expired"}
	grepPhase    = phaseName{"grep-r", "grep -r, fresh mount"}
	duPhase      = phaseName{"du-s", "du -s, expired"}
	rmClonePhase = phaseName{"rm-clone", "rm -rf clone"}
	zlibPhase    = phaseName{"configure-make", "configure && make"}
)

// everyday reports whether a phase belongs to the everyday workloads (the
// ls workload's cached and expired listings included).
func everyday(p *Phase) bool {
	switch p.Workload {
	case "untar", "git", "zlib":
		return true
	}
	return p.ID == lsLCached.id || p.ID == lsLExpired.id
}

// expireMargin is added to the longest attribute lifetime before a phase
// that needs every cached attribute expired.
const expireMargin = 2 * time.Second

// expireWait is how long a mount must stay idle for every attribute it has
// cached to be expired, as after a coffee break: the longest lifetime the
// mount options allow (acregmax, acdirmax, negtimeo; the kernel's caches
// hold what is left of the client's, never longer) and a margin. Nothing
// refreshes attributes of an idle mount, so after it the count of the next
// phase does not depend on timing.
func expireWait(mountOpts string) (time.Duration, error) {
	o, err := client.ParseOptions(mountOpts)
	if err != nil {
		return 0, err
	}
	if o.NoAC {
		return 0, nil
	}
	return max(o.AcRegMax, o.AcDirMax, o.NegTimeo) + expireMargin, nil
}

// idle lets the mounts of this run sit idle until their cached attributes
// have expired; false if the run was interrupted meanwhile.
func (r *wrun) idle() bool {
	d := r.s.expire
	r.s.logf("%s: idle %s, past the longest attribute lifetime, so that every cached attribute has expired", r.tag, benchfmt.Secs(d))
	select {
	case <-time.After(d):
		return true
	case <-r.s.ctx.Done():
		r.stopped = "interrupted"
		return false
	}
}

func (r *wrun) expiredNote() string {
	return fmt.Sprintf("after %s idle: every cached attribute had expired", benchfmt.Secs(r.s.expire))
}

// ---- untar: a source tarball unpacked on the mount.

func untarPhases(sizes, time.Duration) []phaseName { return []phaseName{untarPhase} }

func untarSetup(*wrun) error { return nil }

func untarStep(r *wrun, dir, checkDir string) step {
	tb := r.s.tarball(r.s.cfg.sizes.untar)
	return step{phaseName: untarPhase, script: "tar xf " + shQuote(tb), dir: dir, limit: r.limit(15 * time.Minute),
		check: func(x *execResult) (string, bool) {
			if msg, ok := exitProblem(x); !ok {
				return msg, false
			}
			return checkUntar(r.s.ctx, checkDir, tb)
		}}
}

func untarRun(r *wrun) {
	m := r.mount()
	if _, ok := r.phase(m, untarStep(r, m.Dir, r.export)); ok {
		r.unmount(m, false)
	}
}

func untarLocal(r *wrun) []step { return []step{untarStep(r, r.export, r.export)} }

// checkUntar checks the unpacked tree against its tarball: every entry's
// type, mode, owner, size, mtime and contents (tar --compare), and no entry
// the tarball lacks.
//
// GNU tar opens the files it reads with O_NONBLOCK: on the server's disk,
// a file an NFSv4.1 client holds a write delegation of (hushfs serve keeps
// a write lease on it) fails that open with EWOULDBLOCK and starts the
// recall (the kernel's lease rule). The client returns it at once, so the
// comparison runs once more, after a second, when the first failed so.
func checkUntar(ctx context.Context, dir, tarball string) (string, bool) {
	out, err := runQuiet(ctx, 5*time.Minute, dir, "tar", "--compare", "-f", tarball)
	if err != nil && strings.Contains(out, "Resource temporarily unavailable") {
		time.Sleep(time.Second)
		out, err = runQuiet(ctx, 5*time.Minute, dir, "tar", "--compare", "-f", tarball)
	}
	if err != nil {
		return fmt.Sprintf("tar --compare: %v: %s", err, tailString(strings.TrimSpace(out), 300)), false
	}
	want, err := tarEntries(ctx, tarball)
	if err != nil {
		return err.Error(), false
	}
	var got []string
	for _, name := range want.tops() {
		err := filepath.WalkDir(filepath.Join(dir, name), func(path string, d fs.DirEntry, err error) error {
			if err != nil {
				return err
			}
			rel, _ := filepath.Rel(dir, path)
			got = append(got, rel)
			return nil
		})
		if err != nil {
			return err.Error(), false
		}
	}
	if extra := slices.DeleteFunc(got, func(n string) bool { return want.has(n) }); len(extra) > 0 {
		return fmt.Sprintf("%d entries the tarball lacks (e.g. %s)", len(extra), extra[0]), false
	}
	return fmt.Sprintf("%s files, %d dirs, as in the tarball", benchfmt.Commas(uint64(want.files)), want.dirs), true
}

// entries is a tarball's listing: every path, with the directories its
// paths imply.
type entries struct {
	paths       map[string]bool
	files, dirs int
}

func (e *entries) has(p string) bool { return e.paths[p] }

func (e *entries) tops() []string {
	var l []string
	for p := range e.paths {
		if !strings.Contains(p, "/") {
			l = append(l, p)
		}
	}
	slices.Sort(l)
	return l
}

func tarEntries(ctx context.Context, tarball string) (*entries, error) {
	out, err := runQuiet(ctx, 2*time.Minute, "/", "tar", "tf", tarball)
	if err != nil {
		return nil, fmt.Errorf("tar tf %s: %w: %s", tarball, err, tailString(out, 300))
	}
	return parseTarList(out), nil
}

func parseTarList(list string) *entries {
	e := &entries{paths: map[string]bool{}}
	dirs := map[string]bool{}
	for line := range strings.SplitSeq(list, "\n") {
		if line == "" {
			continue
		}
		p := strings.TrimPrefix(strings.TrimSuffix(line, "/"), "./")
		if strings.HasSuffix(line, "/") {
			dirs[p] = true
		} else {
			e.paths[p] = true
		}
		for d := filepath.Dir(p); d != "." && d != "/"; d = filepath.Dir(d) {
			dirs[d] = true
		}
	}
	e.files = len(e.paths)
	for d := range dirs {
		if !e.paths[d] {
			e.paths[d] = true
			e.dirs++
		}
	}
	return e
}

// treeSummary describes a tree for the report: "sqlite 3.40.1
// (sqlite3_3.40.1.orig.tar.xz): 2,057 files, 49 dirs".
func treeSummary(ctx context.Context, t tree, tarball string) string {
	s := fmt.Sprintf("%s (%s)", t.name, t.tarball)
	if e, err := tarEntries(ctx, tarball); err == nil {
		s += fmt.Sprintf(": %s files, %d dirs", benchfmt.Commas(uint64(e.files)), e.dirs)
	}
	return s
}

// runStdout runs a phase's script directly on the server's disk, for its
// check, and returns what it printed on standard output, as the phase's
// output file holds it (grep reports binary files that match on standard
// error).
func runStdout(ctx context.Context, dir string, env []string, script string) (string, error) {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "sh", "-c", script)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), env...)
	cmd.WaitDelay = 2 * time.Second
	out, err := cmd.Output()
	return string(out), err
}

// ---- git: clone a repository made from a real tree, then work on the clone.

const cloneDir = "clone"

// grepPattern is what grep -r looks for in the clone: a word of every C
// tree (and of the paths in .git/index).
const grepPattern = "include"

func gitPhases(sizes, time.Duration) []phaseName {
	return []phaseName{clonePhase, statusPhase, grepPhase, duPhase, rmClonePhase}
}

func gitSetup(*wrun) error { return nil }

func (r *wrun) gitStep(pn phaseName, script, dir string, limit time.Duration, check func(x *execResult) (string, bool)) step {
	return step{phaseName: pn, script: script, dir: dir, limit: r.limit(limit), env: r.s.gitEnv, check: check}
}

func cloneStep(r *wrun, dir, checkDir string) step {
	repo := r.s.repoPath(r.s.cfg.sizes.repo)
	// --no-local: the objects come as a pack from upload-pack and index-pack
	// writes them, as from a server, instead of a copy of the repository's
	// files.
	return r.gitStep(clonePhase, "git clone -q --no-local "+shQuote(repo)+" "+cloneDir, dir, 15*time.Minute,
		func(x *execResult) (string, bool) {
			if msg, ok := exitProblem(x); !ok {
				return msg, false
			}
			return checkClone(r, filepath.Join(checkDir, cloneDir))
		})
}

// checkClone checks the clone on the server's disk, without writing to it
// (no index refresh): HEAD is the repository's, every object is sound and
// the working tree is HEAD's.
func checkClone(r *wrun, dir string) (string, bool) {
	git := func(args ...string) (string, error) {
		return runEnv(r.s.ctx, 5*time.Minute, dir, r.s.gitEnv, "git", append([]string{"--no-optional-locks"}, args...)...)
	}
	head, err := git("rev-parse", "HEAD")
	if err != nil || strings.TrimSpace(head) != r.s.gitHead {
		return fmt.Sprintf("HEAD of the clone %q (%v), want %s", strings.TrimSpace(head), err, r.s.gitHead), false
	}
	if out, err := git("fsck", "--no-progress", "--no-dangling"); err != nil {
		return fmt.Sprintf("git fsck: %v: %s", err, tailString(out, 300)), false
	}
	out, err := git("status", "--porcelain")
	if err != nil || strings.TrimSpace(out) != "" {
		return fmt.Sprintf("git status --porcelain: %v: %q", err, tailString(out, 300)), false
	}
	return fmt.Sprintf("HEAD %.12s, fsck and status clean", r.s.gitHead), true
}

func statusStep(r *wrun, dir string) step {
	return r.gitStep(statusPhase, "git status", filepath.Join(dir, cloneDir), 5*time.Minute,
		func(x *execResult) (string, bool) {
			if msg, ok := exitProblem(x); !ok {
				return msg, false
			}
			out, _ := os.ReadFile(x.stdout)
			if !strings.Contains(string(out), "working tree clean") {
				return "git status: " + tailString(string(out), 300), false
			}
			return "working tree clean", true
		})
}

func grepStep(r *wrun, dir, checkDir string) step {
	script := "grep -r " + grepPattern + " " + cloneDir
	return r.gitStep(grepPhase, script, dir, 10*time.Minute, func(x *execResult) (string, bool) {
		if msg, ok := exitProblem(x); !ok {
			return msg, false
		}
		got, err := os.ReadFile(x.stdout)
		if err != nil {
			return err.Error(), false
		}
		want, err := runStdout(r.s.ctx, checkDir, r.s.gitEnv, script)
		if err != nil {
			return fmt.Sprintf("%s on the server's disk: %v", script, err), false
		}
		return compareLines(string(got), want)
	})
}

// compareLines compares two outputs as sets of lines (a tree walk's order
// is the directory's).
func compareLines(got, want string) (string, bool) {
	g, w := strings.Split(strings.TrimSpace(got), "\n"), strings.Split(strings.TrimSpace(want), "\n")
	slices.Sort(g)
	slices.Sort(w)
	if len(w) == 0 || w[0] == "" {
		return "the pattern matches nothing on the server's disk", false
	}
	if !slices.Equal(g, w) {
		for i := range min(len(g), len(w)) {
			if g[i] != w[i] {
				return fmt.Sprintf("%d lines, want %d; first difference %q, want %q", len(g), len(w), g[i], w[i]), false
			}
		}
		return fmt.Sprintf("%d lines, want %d", len(g), len(w)), false
	}
	return fmt.Sprintf("%s lines, as on the server's disk", benchfmt.Commas(uint64(len(g)))), true
}

func duStep(r *wrun, dir, checkDir string) step {
	script := "du -s " + cloneDir
	return r.gitStep(duPhase, script, dir, 5*time.Minute, func(x *execResult) (string, bool) {
		if msg, ok := exitProblem(x); !ok {
			return msg, false
		}
		got, err := os.ReadFile(x.stdout)
		if err != nil {
			return err.Error(), false
		}
		want, err := runStdout(r.s.ctx, checkDir, r.s.gitEnv, script)
		if err != nil {
			return fmt.Sprintf("%s on the server's disk: %v", script, err), false
		}
		if strings.TrimSpace(string(got)) != strings.TrimSpace(want) {
			return fmt.Sprintf("du says %q, on the server's disk %q", strings.TrimSpace(string(got)), strings.TrimSpace(want)), false
		}
		return strings.Fields(want)[0] + " KiB, as on the server's disk", true
	})
}

func rmCloneStep(r *wrun, dir, checkDir string) step {
	return r.gitStep(rmClonePhase, "rm -rf "+cloneDir, dir, 10*time.Minute, func(x *execResult) (string, bool) {
		if msg, ok := exitProblem(x); !ok {
			return msg, false
		}
		if _, err := os.Lstat(filepath.Join(checkDir, cloneDir)); !errors.Is(err, os.ErrNotExist) {
			return fmt.Sprintf("the clone is still on the server: %v", err), false
		}
		return "the clone is gone", true
	})
}

// gitRun clones on mount A, greps on a fresh mount B, lets both sit idle
// until their attributes expire (one wait for both), then runs git status
// on A (the clone's cache, expired) and du -s and rm -rf on B (grep's
// cache, expired). A is unmounted before B's phases: the proxy counts
// every mount's calls.
func gitRun(r *wrun) {
	a := r.mount()
	if _, ok := r.phase(a, cloneStep(r, a.Dir, r.export)); !ok {
		return
	}
	b := r.mount()
	if _, ok := r.phase(b, grepStep(r, b.Dir, r.export)); !ok {
		return
	}
	if !r.idle() {
		return
	}
	st := statusStep(r, a.Dir)
	st.note = r.expiredNote()
	if _, ok := r.phase(a, st); !ok {
		return
	}
	r.unmount(a, false)
	st = duStep(r, b.Dir, r.export)
	st.note = r.expiredNote()
	if _, ok := r.phase(b, st); !ok {
		return
	}
	if _, ok := r.phase(b, rmCloneStep(r, b.Dir, r.export)); !ok {
		return
	}
	r.unmount(b, false)
}

// gitLocal is the same work on local disk (no caches to expire there).
func gitLocal(r *wrun) []step {
	d := r.export
	return []step{cloneStep(r, d, d), statusStep(r, d), grepStep(r, d, d), duStep(r, d, d), rmCloneStep(r, d, d)}
}

// ensureRepo makes the bare repository the git workload clones, once, in
// the cache: the tree's files (all of them: -f overrides the tree's own
// .gitignore files) as one commit with a fixed author and date, so that a
// tarball always gives the same commit, packed. It returns HEAD.
func ensureRepo(ctx context.Context, t tree, tarball, repo, scratch string) (string, error) {
	env := []string{"GIT_CONFIG_NOSYSTEM=1", "GIT_CONFIG_GLOBAL=/dev/null",
		"GIT_AUTHOR_NAME=hushfs bench", "GIT_AUTHOR_EMAIL=bench@hushfs.invalid", "GIT_AUTHOR_DATE=2023-01-01T00:00:00Z",
		"GIT_COMMITTER_NAME=hushfs bench", "GIT_COMMITTER_EMAIL=bench@hushfs.invalid", "GIT_COMMITTER_DATE=2023-01-01T00:00:00Z"}
	git := func(dir string, args ...string) (string, error) {
		out, err := runEnv(ctx, 5*time.Minute, dir, env, "git", args...)
		if err != nil {
			return "", fmt.Errorf("git %s: %w: %s", strings.Join(args, " "), err, tailString(out, 300))
		}
		return strings.TrimSpace(out), nil
	}
	if _, err := os.Stat(filepath.Join(repo, "HEAD")); err != nil {
		dir, err := os.MkdirTemp(scratch, "repo-")
		if err != nil {
			return "", err
		}
		defer os.RemoveAll(dir)
		// Owned by us: git refuses to work in a tree owned by another user.
		if out, err := runQuiet(ctx, 2*time.Minute, dir, "tar", "xf", tarball, "--no-same-owner"); err != nil {
			return "", fmt.Errorf("tar xf %s: %w: %s", tarball, err, out)
		}
		src := filepath.Join(dir, t.top)
		for _, args := range [][]string{{"init", "-q", "-b", "main"}, {"add", "-A", "-f"}, {"commit", "-q", "-m", t.name}} {
			if _, err := git(src, args...); err != nil {
				return "", err
			}
		}
		tmp := repo + ".tmp"
		os.RemoveAll(tmp)
		if _, err := git(dir, "clone", "-q", "--bare", "--no-local", src, tmp); err != nil {
			return "", err
		}
		if err := os.Rename(tmp, repo); err != nil {
			return "", err
		}
	}
	return git(repo, "rev-parse", "HEAD")
}

// writeGitConfig writes the configuration every git command of the
// workload reads instead of the machine's: an identity, and every
// directory trusted (the clone's files are owned by whoever the server
// says).
func writeGitConfig(path string) ([]string, error) {
	const cfg = "[user]\n\tname = hushfs bench\n\temail = bench@hushfs.invalid\n[safe]\n\tdirectory = *\n"
	if err := os.WriteFile(path, []byte(cfg), 0o644); err != nil {
		return nil, err
	}
	return []string{"GIT_CONFIG_NOSYSTEM=1", "GIT_CONFIG_GLOBAL=" + path, "LC_ALL=C"}, nil
}

// ---- zlib: ./configure && make.

func zlibPhases(sizes, time.Duration) []phaseName { return []phaseName{zlibPhase} }

func zlibSetup(r *wrun) error { return untar(r, r.s.tarball(zlibTree), r.export) }

func zlibStep(r *wrun, dir string) step {
	return step{phaseName: zlibPhase, script: "sh -c './configure && make'", dir: filepath.Join(dir, zlibTree.top),
		limit: r.limit(10 * time.Minute), env: []string{"LC_ALL=C"},
		check: func(x *execResult) (string, bool) {
			if msg, ok := exitProblem(x); !ok {
				return msg, false
			}
			// The library built on the mount passes zlib's own tests, run
			// on the mount (everything is built: they only run). Not on
			// the server's disk: hushfs serve keeps the descriptors it
			// wrote the test programs through open for a while, and
			// executing a file open for writing fails (ETXTBSY).
			out, err := runQuiet(r.s.ctx, 5*time.Minute, filepath.Join(dir, zlibTree.top), "make", "test")
			if err != nil || !strings.Contains(out, "*** zlib test OK ***") || !strings.Contains(out, "*** zlib shared test OK ***") {
				return fmt.Sprintf("make test: %v: %s", err, tailString(out, 300)), false
			}
			return "make test OK (static and shared)", true
		}}
}

func zlibRun(r *wrun) {
	m := r.mount()
	if _, ok := r.phase(m, zlibStep(r, m.Dir)); ok {
		r.unmount(m, false)
	}
}

func zlibLocal(r *wrun) []step {
	if err := zlibSetup(r); err != nil {
		r.t.Fatalf("%s: %v", r.tag, err)
	}
	return []step{zlibStep(r, r.export)}
}

// shQuote quotes a word for sh.
func shQuote(s string) string { return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'" }
