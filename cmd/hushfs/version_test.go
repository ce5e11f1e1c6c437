package main

import (
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// copyModule copies what building cmd/hushfs needs (go.mod, go.sum and the
// non-test Go files of cmd/ and internal/) from the module at src to dst.
func copyModule(t *testing.T, src, dst string) {
	t.Helper()
	for _, f := range []string{"go.mod", "go.sum"} {
		b, err := os.ReadFile(filepath.Join(src, f))
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dst, f), b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	for _, dir := range []string{"cmd", "internal"} {
		err := filepath.WalkDir(filepath.Join(src, dir), func(p string, d fs.DirEntry, err error) error {
			if err != nil || d.IsDir() || !strings.HasSuffix(p, ".go") || strings.HasSuffix(p, "_test.go") {
				return err
			}
			rel, _ := filepath.Rel(src, p)
			b, err := os.ReadFile(p)
			if err != nil {
				return err
			}
			if err := os.MkdirAll(filepath.Dir(filepath.Join(dst, rel)), 0o755); err != nil {
				return err
			}
			return os.WriteFile(filepath.Join(dst, rel), b, 0o644)
		})
		if err != nil {
			t.Fatal(err)
		}
	}
}

// `go build` in a git checkout stamps the module version and commit, and
// `hushfs --version` and `hushfs version` print them. The checkout is a
// fresh repository of this module's sources (a git worktree, whose .git is
// a file, is not stamped by the go command).
func TestVersionCommand(t *testing.T) {
	git, err := exec.LookPath("git")
	if err != nil {
		t.Skip("no git: ", err)
	}
	out, err := exec.Command("go", "env", "GOMOD").Output()
	if err != nil {
		t.Fatal(err)
	}
	repo := t.TempDir()
	copyModule(t, filepath.Dir(strings.TrimSpace(string(out))), repo)
	run := func(name string, args ...string) string {
		t.Helper()
		cmd := exec.Command(name, args...)
		cmd.Dir = repo
		cmd.Env = append(os.Environ(), "GOFLAGS=-buildvcs=true", "GIT_CONFIG_GLOBAL=/dev/null",
			"GIT_AUTHOR_NAME=t", "GIT_AUTHOR_EMAIL=t@example.org", "GIT_COMMITTER_NAME=t", "GIT_COMMITTER_EMAIL=t@example.org")
		b, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("%s %v: %v\n%s", name, args, err, b)
		}
		return strings.TrimSpace(string(b))
	}
	run(git, "init", "-q")
	run(git, "add", ".")
	run(git, "commit", "-q", "-m", "version test")
	commit := run(git, "rev-parse", "HEAD")
	bin := filepath.Join(t.TempDir(), "hushfs")
	run("go", "build", "-o", bin, "./cmd/hushfs")

	long := run(bin, "--version")
	if short := run(bin, "version"); short != long {
		t.Errorf("hushfs version %q, hushfs --version %q: want the same", short, long)
	}
	// A pseudo-version naming the commit (no tag), then the full commit.
	want := regexp.MustCompile(`^hushfs v0\.0\.0-\d{14}-` + commit[:12] + ` \(commit ` + commit + `, \d{4}-\d\d-\d\dT[^,]*; go[^)]*\)$`)
	if !want.MatchString(long) {
		t.Errorf("hushfs --version = %q, want the module version and commit %s", long, commit)
	}
	t.Logf("%s", long)
}
