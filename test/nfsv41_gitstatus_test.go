package test

import (
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"hushfs/internal/proto"
	"hushfs/internal/proto/nfsv41"
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
// delegated directories (.gitignore in each, .git/objects/pack's
// multi-pack-index) stay absent without a GETATTR of the directory. What is
// left is git's own index.lock: git status always takes it (O_CREAT|
// O_EXCL, to refresh the index) and unlinks it when nothing changed, and
// the server must see both (a directory delegation lets no client create
// or remove names on its own); the write delegation of index.lock goes
// back in the REMOVE's COMPOUND, so the server recalls nothing. Without
// that lock (git --no-optional-locks) the status costs no call. Another
// client's creates (.gitignore among them) are seen by the next status.
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

	metrics := freeAddr(t)
	s := harness.StartServe(t, export, "--metrics", metrics)
	_, port, _ := net.SplitHostPort(s.NFSAddr)
	dir := t.TempDir()
	m := harness.StartMount(t, harness.MountSpec{Bin: bin, Server: "127.0.0.1", Export: s.ExportPath,
		Dir: dir, Options: "vers=4.1,actimeo=1,port=" + port})
	work := filepath.Join(dir, "repo")

	for run := 1; run <= 3; run++ {
		if run > 1 {
			time.Sleep(2500 * time.Millisecond) // past actimeo=1: only delegations keep what is cached
		}
		prev, recalls := m.Stats(t), serverCallbacks(t, metrics, "CB_RECALL")
		if out := gitIn(t, work, "status", "--porcelain"); out != "" {
			t.Fatalf("run %d: git status on the mount: %q, want a clean tree", run, out)
		}
		d := delta(prev, m.Stats(t))
		t.Logf("git status, run %d: calls {%s}", run, opsLine(d.Ops))
		if run == 3 {
			// index.lock: its create (an OPEN that creates, with a write
			// delegation) and its REMOVE, which carries the delegation's
			// return (the server would recall it at the REMOVE).
			expectCounts(t, "git status of an unchanged repository, third run", d,
				map[string]uint64{"CREATE": 1, "REMOVE": 1})
			if n := serverCallbacks(t, metrics, "CB_RECALL") - recalls; n != 0 {
				t.Errorf("server: %d CB_RECALLs during the third run, want none", n)
			}
		}
	}
	// Without the optional lock (git --no-optional-locks, as editors run
	// it: nothing to write back), git status changes nothing, and costs
	// nothing.
	time.Sleep(2500 * time.Millisecond)
	prev := m.Stats(t)
	if out := gitIn(t, work, "--no-optional-locks", "status", "--porcelain"); out != "" {
		t.Fatalf("git --no-optional-locks status on the mount: %q, want a clean tree", out)
	}
	d := delta(prev, m.Stats(t))
	t.Logf("git --no-optional-locks status: calls {%s}", opsLine(d.Ops))
	expectCounts(t, "git --no-optional-locks status of an unchanged repository", d, nil)

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

// TestNFSv41RemoveReturningFallback: a removal carrying a delegation's
// return whose DELEGRETURN fails (a stateid the server does not know, with
// a removed file's handle or the directory's: the delegation is gone,
// which counts as returned) still removes the name, in a second COMPOUND
// of its own.
func TestNFSv41RemoveReturningFallback(t *testing.T) {
	export := t.TempDir()
	for _, name := range []string{"a", "b", "gone"} {
		must(t, "create", os.WriteFile(filepath.Join(export, name), []byte(name), 0o644))
	}
	s := harness.StartServe(t, export)
	host, portS, _ := net.SplitHostPort(s.NFSAddr)
	port, _ := strconv.Atoi(portS)
	var seen v41calls
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	srv, exp, err := nfsv41.Mount(ctx, nfsv41.Config{Server: host, Export: s.ExportPath, Port: port,
		Timeo: 10 * time.Second, Retrans: 2, Logf: t.Logf, Hooks: seen.hooks()}, &proto.Cred{})
	if err != nil {
		t.Fatalf("mount over NFSv4.1: %v", err)
	}
	defer srv.Close()
	c := &proto.Cred{}
	lk, err := srv.Lookup(ctx, c, exp.Root, "gone")
	okStatus(t, "lookup gone", err, lk.Status)
	must(t, "remove gone on the host", os.Remove(filepath.Join(export, "gone")))
	unknown := proto.StateID{Seq: 1, Other: [12]byte{1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12}}
	for _, tc := range []struct {
		name string
		file proto.FH
	}{{"a", lk.FH}, {"b", exp.Root}} {
		seen.take()
		res, returned, err := srv.RemoveReturning(ctx, c, exp.Root, tc.name, tc.file, unknown)
		okStatus(t, "remove "+tc.name, err, res.Status)
		if !returned {
			t.Errorf("remove %s: not returned, want returned (the server knows no such delegation)", tc.name)
		}
		if calls := seen.take(); len(calls) != 2 {
			t.Errorf("remove %s: calls %v, want REMOVE twice (the return's, then the removal alone)", tc.name, calls)
		}
		if _, err := os.Lstat(filepath.Join(export, tc.name)); !os.IsNotExist(err) {
			t.Errorf("remove %s: on the export: %v, want it gone", tc.name, err)
		}
	}
}
