package conformance

import (
	"bufio"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"hushfs/test/harness"
)

// pynfs's NFSv4.1 server tests (nfs4.1/testserver.py) against `hushfs
// serve`: the tests flagged "all" (every 4.1 operation the suite knows
// but pNFS, the NFSv4.2 additions and the server reboot tests), and the
// reboot tests (grace period and reclaims: the test restarts the server
// when pynfs's serverhelper asks) on a server of their own.

const (
	// pynfsLease is the server's lease time for the run: the tests of lease
	// expiry sleep a lease and 10 s each, and EID9 needs at least 10 s.
	// More than pynfs's own wait on NFS4ERR_DELAY: its compound() sends a
	// call answered DELAY 10 times, a second apart, before it returns, and
	// DELEG8 renews its first client's lease only between such calls (of
	// its second client's OPEN, held back by the first one's delegation).
	// With a 10 s lease that client's lease could run out during them, the
	// server ended it, and the READ expecting DELEG_REVOKED got BADSESSION
	// (2 CI runs in about 15; DELEG8 alone with 3 busy loops beside it: 2
	// runs of 8 at 10 s, each after "let its lease expire"; 0 of 8 at 15 s).
	pynfsLease = "15s"
	// pynfsLimit bounds the whole run (about 2 minutes, most of it the
	// lease tests' sleeps).
	pynfsLimit = 6 * time.Minute
)

// pynfsEnv runs pynfs with Debian's Python, which has the ply package it
// needs (pyenv's shims may come first on PATH), and its setup.py runs
// "python3" from PATH.
var pynfsEnv = []string{"PATH=/usr/bin:/bin:/usr/sbin:/sbin"}

// buildPynfs unpacks pynfs and generates its XDR code; the 4.1 server
// tests are in DIR/nfs4.1.
func buildPynfs(t *testing.T, src, scratch string) string {
	t.Helper()
	dir := unpack(t, src, scratch, "pynfs")
	r := run(dir, pynfsEnv, 5*time.Minute, "/usr/bin/python3", "setup.py", "build")
	// setup.py reports no failure of its steps: check what they make.
	if _, err := os.Stat(filepath.Join(dir, "nfs4.1", "xdrdef", "nfs4_type.py")); err != nil || r.exit != 0 {
		t.Fatalf("building pynfs (in %s): %s, %v (python3-ply installed?)\n%s%s", dir, describeExit(r, 5*time.Minute), err,
			lastLines(r.stdout, 30), lastLines(r.stderr, 30))
	}
	return filepath.Join(dir, "nfs4.1")
}

// pynfsReboot are the reboot tests run: all but the three with 1,000
// clients (REBT2c, 3c, 4c: a minute each; they pass with the default lease,
// which gives 1,000 clients the time to reclaim one after another).
var pynfsReboot = []string{"REBT1", "REBT2a", "REBT2b", "REBT3a", "REBT3b", "REBT4a", "REBT4b", "REBT5"}

// runPynfs runs the tests (pynfs flags or codes), as suite name, against a fresh `hushfs
// serve` with a short lease, which it restarts when pynfs asks, with a
// SIGKILL (as a crash) and the same ports and state directory.
func runPynfs(t *testing.T, dir, scratch, name string, tests ...string) suiteResult {
	t.Helper()
	export := filepath.Join(scratch, name+"-export")
	mkdir(t, export)
	s := harness.StartServe(t, export, "--lease", pynfsLease, "--delegations")
	helper := serverHelper(t, filepath.Join(scratch, name+"-helper"), func() {
		s.Kill(t)
		s.StartAgain(t)
	})
	target := s.NFSAddr + s.ExportPath
	args := append([]string{"testserver.py", target, "--minorversion=1", "--maketree", "--serverhelper=" + helper}, tests...)
	r := run(dir, pynfsEnv, pynfsLimit, "/usr/bin/python3", args...)
	res := suiteResult{suite: name, server: "hushfs-serve", took: r.took}
	v, ok := parsePynfs(r.stdout)
	if !ok || r.timedOut || r.err != nil {
		res.failures = append(res.failures, failure{file: "testserver.py", line: describeExit(r, pynfsLimit) + ": " + lastWords(r.stdout, r.stderr)})
		t.Logf("pynfs output:\n%s%s", lastLines(r.stdout, 40), lastLines(r.stderr, 40))
	}
	res.run, res.passed = v.run, v.passed
	res.failures = append(res.failures, v.failures...)
	return res
}

// serverHelper makes a pynfs serverhelper in dir: a script that asks the
// test to run reboot, and returns when it has. The script writes its
// argument to a FIFO the test reads, and waits (at most a minute) for the
// test's answer on another.
func serverHelper(t *testing.T, dir string, reboot func()) string {
	t.Helper()
	mkdir(t, dir)
	req, done := filepath.Join(dir, "request"), filepath.Join(dir, "done")
	for _, f := range []string{req, done} {
		if err := syscall.Mkfifo(f, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	script := filepath.Join(dir, "serverhelper")
	body := fmt.Sprintf("#!/bin/sh\necho \"$1\" > %s\nexec timeout 60 sh -c 'read answer < %s'\n", req, done)
	if err := os.WriteFile(script, []byte(body), 0o755); err != nil {
		t.Fatal(err)
	}
	stop := make(chan struct{})
	stopped := make(chan struct{})
	go func() {
		defer close(stopped)
		for {
			b, err := os.ReadFile(req) // blocks until the script writes
			if err != nil {
				t.Errorf("serverhelper: %v", err)
				return
			}
			select {
			case <-stop:
				return
			default:
			}
			if strings.TrimSpace(string(b)) == "reboot" {
				reboot()
			}
			if err := writeFIFO(done, "done\n", time.Minute); err != nil {
				t.Errorf("serverhelper: %v", err)
				return
			}
		}
	}()
	t.Cleanup(func() {
		close(stop)
		if writeFIFO(req, "stop\n", 10*time.Second) == nil { // wakes the reader
			<-stopped
		}
	})
	return script
}

// writeFIFO writes s to a FIFO once a reader has it open, waiting at most
// limit for one.
func writeFIFO(path, s string, limit time.Duration) error {
	deadline := time.Now().Add(limit)
	for {
		f, err := os.OpenFile(path, os.O_WRONLY|syscall.O_NONBLOCK, 0)
		if err == nil {
			_, err = f.WriteString(s)
			f.Close()
			return err
		}
		if !errors.Is(err, syscall.ENXIO) || time.Now().After(deadline) {
			return fmt.Errorf("writing %s: %w", path, err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

var (
	// "DELEG1   st_delegation.testReadDeleg    : FAILURE", then the
	// reason on indented lines.
	pynfsResult  = regexp.MustCompile(`^(\S+)\s+st_\w+\.\w+\s+: (PASS|FAILURE|WARNING)$`)
	pynfsSummary = regexp.MustCompile(`^Of those: (\d+) Skipped, (\d+) Failed, (\d+) Warned, (\d+) Passed$`)
)

// parsePynfs reads testserver.py's report: a failure per test that failed
// or warned (a warning is a pass that "could be better": held to passing
// too), named by its code with the reason printed. ok is false without the
// closing summary, or when the summary's counts differ from the lines.
func parsePynfs(out string) (v tapFile, ok bool) {
	var cur *failure
	failed, warned := 0, 0
	sc := bufio.NewScanner(strings.NewReader(out))
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if cur != nil && strings.HasPrefix(line, "    ") {
			cur.line = strings.TrimSpace(cur.line + " " + strings.TrimSpace(line))
			continue
		}
		if cur != nil {
			v.failures = append(v.failures, *cur)
			cur = nil
		}
		if m := pynfsResult.FindStringSubmatch(line); m != nil {
			v.run++
			switch m[2] {
			case "PASS":
				v.passed++
			case "FAILURE":
				failed++
				cur = &failure{file: m[1]}
			case "WARNING":
				warned++
				cur = &failure{file: m[1], line: "WARNING:"}
			}
			continue
		}
		if m := pynfsSummary.FindStringSubmatch(line); m != nil {
			n := func(i int) int { x, _ := strconv.Atoi(m[i]); return x }
			ok = n(2) == failed && n(3) == warned && n(4) == v.passed
		}
	}
	if cur != nil {
		v.failures = append(v.failures, *cur)
	}
	return v, ok
}
