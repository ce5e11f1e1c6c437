package test

import (
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"hushfs/test/harness"
)

// gitIn runs git in dir with a private configuration, within 60 s.
func gitIn(t *testing.T, dir string, args ...string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, "git", args...)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "HOME="+dir, "GIT_CONFIG_NOSYSTEM=1", "GIT_AUTHOR_NAME=t",
		"GIT_AUTHOR_EMAIL=t@example.com", "GIT_COMMITTER_NAME=t", "GIT_COMMITTER_EMAIL=t@example.com")
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("git %s in %s: %v\n%.2000s", strings.Join(args, " "), dir, err, out)
	}
	return string(out)
}

// TestNFSv41GitStatusQuiet: git status of an unchanged repository on a
// v4.1 mount of `hushfs serve`, again past the attributes' lifetime
// (actimeo=1), costs only what git changes itself. The .git files it
// reads are held under read delegations; the directories it stats but
// never lists (.git, .git/objects, .git/refs/heads, the mount's root)
// get a delegation with their GETATTR; the names it finds absent in
// delegated directories (.gitignore everywhere, .git/info/exclude's
// neighbours) stay absent without a GETATTR of the directory. What is
// left is git's own index.lock: git status always takes it (O_CREAT|
// O_EXCL, to refresh the index) and unlinks it when nothing changed, and
// the server must see both (a directory delegation lets no client create
// or remove names on its own). Another client's creates (.gitignore
// among them) are seen by the next git status.
func TestNFSv41GitStatusQuiet(t *testing.T) {
	requireMountTools(t)
	if _, err := exec.LookPath("git"); err != nil {
		t.Skip("no git")
	}
	bin := harness.BuildHushfs(t)
	export := t.TempDir()
	repo := filepath.Join(export, "repo")
	// A small tree, made on the host: files in nested directories, all
	// dated an hour back so that the index written after them is not
	// racy (git would rewrite it at the first status).
	old := time.Now().Add(-time.Hour)
	for _, d := range []string{"src", "src/lib", "src/lib/util", "doc", "test", "test/data"} {
		must(t, "mkdir", os.MkdirAll(filepath.Join(repo, d), 0o755))
		for i := range 8 {
			p := filepath.Join(repo, d, fmt.Sprintf("f%d.c", i))
			must(t, "create", os.WriteFile(p, []byte(fmt.Sprintf("file %s %d\n", d, i)), 0o644))
			must(t, "chtimes", os.Chtimes(p, old, old))
		}
	}
	must(t, "create", os.WriteFile(filepath.Join(repo, "README"), []byte("readme\n"), 0o644))
	must(t, "chtimes", os.Chtimes(filepath.Join(repo, "README"), old, old))
	gitIn(t, repo, "init", "-q")
	gitIn(t, repo, "add", ".")
	gitIn(t, repo, "commit", "-q", "-m", "one")
	if out := gitIn(t, repo, "status", "--porcelain"); out != "" {
		t.Fatalf("git status on the host: %q, want a clean tree", out)
	}

	s := harness.StartServe(t, export)
	_, port, _ := net.SplitHostPort(s.NFSAddr)
	dir := t.TempDir()
	m := harness.StartMount(t, harness.MountSpec{Bin: bin, Server: "127.0.0.1", Export: s.ExportPath,
		Dir: dir, Options: "vers=4.1,actimeo=1,port=" + port})
	work := filepath.Join(dir, "repo")

	for run := 1; run <= 3; run++ {
		if run > 1 {
			time.Sleep(2500 * time.Millisecond) // past actimeo=1: only delegations keep what is cached
		}
		prev := m.Stats(t)
		if out := gitIn(t, work, "status", "--porcelain"); out != "" {
			t.Fatalf("run %d: git status on the mount: %q, want a clean tree", run, out)
		}
		d := delta(prev, m.Stats(t))
		t.Logf("git status, run %d: calls {%s}", run, opsLine(d.Ops))
		if run == 3 {
			// index.lock: its create (an OPEN that creates, with a write
			// delegation), its REMOVE, and the return of that delegation,
			// which the server recalls at the holder's own REMOVE.
			expectCounts(t, "git status of an unchanged repository, third run", d,
				map[string]uint64{"CREATE": 1, "REMOVE": 1, "DELEGRETURN": 1})
		}
	}

	// What the delegations kept must go at another client's change: B
	// adds .gitignore (a name A holds absent in a delegated directory)
	// and two files, one of them ignored; A's next status sees all that
	// at once (B's creates waited for A's return).
	dirB := t.TempDir()
	b := harness.StartMount(t, harness.MountSpec{Bin: bin, Server: "127.0.0.1", Export: s.ExportPath,
		Dir: dirB, Options: "vers=4.1,actimeo=1,port=" + port})
	for name, data := range map[string]string{".gitignore": "ignored.txt\n", "ignored.txt": "x\n", "src/lib/new.c": "new\n"} {
		within(t, "B creates "+name, 30*time.Second, func() error {
			return os.WriteFile(filepath.Join(dirB, "repo", name), []byte(data), 0o644)
		})
	}
	if out, want := gitIn(t, work, "status", "--porcelain"), "?? .gitignore\n?? src/lib/new.c\n"; out != want {
		t.Errorf("A's git status after B's changes: %q, want %q", out, want)
	}
	must(t, "unmount B", b.Unmount(false))
	must(t, "unmount", m.Unmount(false))
}
