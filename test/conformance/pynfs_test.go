package conformance

import (
	"bufio"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"hushfs/test/harness"
)

// pynfs's NFSv4.1 server tests (nfs4.1/testserver.py) against `hushfs
// serve`: the tests flagged "all" (every 4.1 operation the suite knows
// but pNFS, the NFSv4.2 additions and the server reboot tests).

const (
	// pynfsLease is the server's lease time for the run: the tests of lease
	// expiry sleep a lease and 10 s each, and EID9 needs at least 10 s.
	pynfsLease = "10s"
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

// runPynfs runs the tests against a fresh `hushfs serve` with a short lease.
func runPynfs(t *testing.T, dir, scratch string) suiteResult {
	t.Helper()
	export := filepath.Join(scratch, "pynfs-export")
	mkdir(t, export)
	s := harness.StartServe(t, export, "--lease", pynfsLease)
	target := s.NFSAddr + s.ExportPath
	r := run(dir, pynfsEnv, pynfsLimit, "/usr/bin/python3", "testserver.py", target, "--minorversion=1", "--maketree", "all")
	res := suiteResult{suite: "pynfs", server: "hushfs-serve", took: r.took}
	v, ok := parsePynfs(r.stdout)
	if !ok || r.timedOut || r.err != nil {
		res.failures = append(res.failures, failure{file: "testserver.py", line: describeExit(r, pynfsLimit) + ": " + lastWords(r.stdout, r.stderr)})
		t.Logf("pynfs output:\n%s%s", lastLines(r.stdout, 40), lastLines(r.stderr, 40))
	}
	res.run, res.passed = v.run, v.passed
	res.failures = append(res.failures, v.failures...)
	return res
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
