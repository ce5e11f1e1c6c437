package conformance

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// unpack extracts the one NAME-*.tar.gz of src into scratch and returns
// the directory it holds.
func unpack(t *testing.T, src, scratch, name string) string {
	t.Helper()
	tars, _ := filepath.Glob(filepath.Join(src, name+"-*.tar.gz"))
	if len(tars) != 1 {
		t.Fatalf("conformance suites: want one %s-*.tar.gz in %s, found %d (%s names the directory of the suites' tarballs; CI uses ../shared/conformance from the repository root)",
			name, src, len(tars), envSuites)
	}
	dest := filepath.Join(scratch, name)
	if err := os.Mkdir(dest, 0o755); err != nil {
		t.Fatal(err)
	}
	// The tarballs hold one top directory: strip it, whatever its name.
	mustRun(t, dest, 2*time.Minute, "tar", "-xzf", tars[0], "--no-same-owner", "--strip-components=1")
	return dest
}

// buildPjdfstest unpacks and builds pjdfstest; its tests are in DIR/tests.
func buildPjdfstest(t *testing.T, src, scratch string) string {
	t.Helper()
	dir := unpack(t, src, scratch, "pjdfstest")
	mustRun(t, dir, 5*time.Minute, "autoreconf", "-ifs")
	mustRun(t, dir, 5*time.Minute, "./configure")
	mustRun(t, dir, 5*time.Minute, "make")
	return dir
}

// buildCthon04 unpacks and builds cthon04. glibc has no libnsl any more:
// the Linux flags of tests.init take the RPC headers and library from
// libtirpc, and old-style C (-std=gnu89, warnings off).
func buildCthon04(t *testing.T, src, scratch string) string {
	t.Helper()
	dir := unpack(t, src, scratch, "cthon04")
	init := filepath.Join(dir, "tests.init")
	b, err := os.ReadFile(init)
	if err != nil {
		t.Fatal(err)
	}
	const (
		cflags = "CFLAGS=`echo -DLINUX -DHAVE_SOCKLEN_T -DGLIBC=22 -DMMAP -DSTDARG`\nLIBS=`echo -lnsl`\n"
		ours   = "CFLAGS=`echo -DLINUX -DHAVE_SOCKLEN_T -DGLIBC=22 -DMMAP -DSTDARG -I/usr/include/tirpc -std=gnu89 -w`\nLIBS=`echo -ltirpc`\n"
	)
	if bytes.Count(b, []byte(cflags)) != 1 {
		t.Fatalf("cthon04 %s: the Linux 2.6 CFLAGS/LIBS lines to adapt are not there (a new version of the suite?)", init)
	}
	if err := os.WriteFile(init, bytes.Replace(b, []byte(cflags), []byte(ours), 1), 0o644); err != nil {
		t.Fatal(err)
	}
	mustRun(t, dir, 5*time.Minute, "make")
	return dir
}

// mustRun runs a build step and fails the test with its output if it fails.
func mustRun(t *testing.T, dir string, limit time.Duration, name string, args ...string) {
	t.Helper()
	r := run(dir, nil, limit, name, args...)
	if r.err != nil || r.exit != 0 {
		t.Fatalf("%s %s (in %s): exit %d %v\n%s%s", name, strings.Join(args, " "), dir, r.exit, r.err,
			lastLines(r.stdout, 30), lastLines(r.stderr, 30))
	}
}

// ran is what run saw of a process.
type ran struct {
	stdout, stderr string
	exit           int   // -1 when it did not exit by itself
	timedOut       bool  // killed at the limit
	err            error // it could not be started or waited for
	took           time.Duration
	pid            int // also its process group
}

// run runs a command in dir with extra environment, bounded by limit. The
// command gets its own process group, and at the limit the whole group
// (the command and whatever it started: a suite's shell, its helpers) is
// killed by its id; if the test binary dies, the command dies with it.
func run(dir string, env []string, limit time.Duration, name string, args ...string) ran {
	ctx, cancel := context.WithTimeout(context.Background(), limit)
	defer cancel()
	cmd := exec.CommandContext(ctx, name, args...)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), env...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
	cmd.WaitDelay = 5 * time.Second // a grandchild holding the pipes open
	start := time.Now()
	err := cmd.Run()
	r := ran{stdout: stdout.String(), stderr: stderr.String(), exit: -1, took: time.Since(start)}
	if cmd.Process != nil {
		r.pid = cmd.Process.Pid
	}
	r.timedOut = ctx.Err() != nil
	var ee *exec.ExitError
	switch {
	case err == nil:
		r.exit = 0
	case errors.As(err, &ee) && ee.Exited():
		r.exit = ee.ExitCode()
	case r.timedOut:
	default:
		r.err = err
	}
	return r
}

// lastLines returns the last n lines of s, each ending in a newline.
func lastLines(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	if len(lines) == 1 && lines[0] == "" {
		return ""
	}
	return strings.Join(lines, "\n") + "\n"
}

// lastWords is the last non-empty line of a test's output, to name what
// went wrong in one line.
func lastWords(out ...string) string {
	for _, s := range out {
		if l := strings.TrimSpace(lastLines(s, 1)); l != "" {
			return l
		}
	}
	return "(no output)"
}

func describeExit(r ran, limit time.Duration) string {
	switch {
	case r.timedOut:
		return fmt.Sprintf("no end within %v", limit)
	case r.err != nil:
		return r.err.Error()
	default:
		return fmt.Sprintf("exit status %d", r.exit)
	}
}
