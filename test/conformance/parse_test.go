package conformance

import (
	"bytes"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"
)

// The TAP reader and the expected-failure list, on output the suites
// really print (taken from runs on hushfs mounts).
func TestParseTAP(t *testing.T) {
	cases := []struct {
		name, out string
		exit      int
		run, pass int
		failures  []failure
	}{
		{"all ok", "1..3\nok 1\nok 2\nok 3\n", 0, 3, 3, nil},
		{"a failure", "1..3\nok 1\nnot ok 2 - tried 'mkdir x 0755', expected ENAMETOOLONG, got EIO\nok 3\n", 0, 3, 2,
			[]failure{{"f.t", 2, "not ok 2 - tried 'mkdir x 0755', expected ENAMETOOLONG, got EIO"}}},
		{"todo is the suite's own verdict", "1..2\nnot ok 1 # TODO Linux says so\nok 2 # TODO unexpectedly fine\n", 0, 2, 2, nil},
		{"bail out names why", "1..7\nok 1\nCould not determine X\nBail out!\n", 1, 1, 1,
			[]failure{{"f.t", 0, "Bail out! (after: Could not determine X)"}}},
		{"short plan", "1..3\nok 1\n", 0, 1, 1, []failure{{"f.t", 0, "planned 3 subtests, ran 1; exit status 0"}}},
		{"no plan", "", 2, 0, 0, []failure{{"f.t", 0, "no plan (1..N) in its output; exit status 2"}}},
		{"exit status", "1..1\nok 1\n", 1, 1, 1, []failure{{"f.t", 0, "exit status 1"}}},
		{"numbers from the stream", "1..2\nok 1\nnot ok 7\n", 0, 2, 1,
			[]failure{{"f.t", 7, "not ok 7"}}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			v := parseTAP("f.t", c.out, c.exit)
			if v.run != c.run || v.passed != c.pass || !slices.Equal(v.failures, c.failures) {
				t.Errorf("got run %d passed %d failures %q; want %d %d %q", v.run, v.passed, v.failures, c.run, c.pass, c.failures)
			}
		})
	}
}

func TestExpectedFailuresMatchPrecisely(t *testing.T) {
	exp := expectedFailures()
	// Lines as pjdfstest printed them on hushfs mounts.
	unlink := "not ok 4 - tried 'open pjdfstest_865cfb7edf3e0aec1dc51f3746609a0a O_RDONLY : unlink pjdfstest_865cfb7edf3e0aec1dc51f3746609a0a : fstat 0 nlink', expected 0, got 1"
	probe := parseTAP("utimensat/09.t", "1..7\nok 1\nCould not determine if file system has 32-bit or 64-bit st_* fields (probe_atime='1795642179'; DATE1='2147483648')\nBail out!\n", 1)
	device := failure{"link/00.t", 70, "not ok 70 - tried 'lstat pjdfstest_00578edc1af94068b36de856844b8070 type,mode,nlink,uid,gid', expected block,0201,2,65534,65533, got EINVAL"}
	fs := []failure{
		{"unlink/14.t", 4, unlink},
		probe.failures[0],
		device,
		// Not expected: the same line in another file or subtest, another
		// line in the same subtest, the wrapped time itself.
		{"unlink/13.t", 4, unlink},
		{"unlink/14.t", 5, strings.Replace(unlink, "ok 4", "ok 5", 1)},
		{"unlink/14.t", 4, "not ok 4 - tried 'open x O_RDONLY : unlink x : fstat 0 nlink', expected 0, got 2"},
		{"utimensat/09.t", 5, "not ok 5 - tried 'lstat pjdfstest_85e0 mtime', expected 4294967296, got 0"},
		{"utimensat/09.t", 0, "planned 7 subtests, ran 1; exit status 1"},
		{"link/00.t", 71, strings.Replace(device.line, "got EINVAL", "got ENOENT", 1)},
	}
	check := func(server string, fs []failure, wantExp, wantUn []failure) {
		t.Helper()
		ex, un, _ := classify("pjdfstest", server, fs, exp)
		var got []failure
		for _, m := range ex {
			got = append(got, m.failure)
		}
		if !slices.Equal(got, wantExp) || !slices.Equal(un, wantUn) {
			t.Errorf("%s: expected %v, unexpected %v; want %v and %v", server, got, un, wantExp, wantUn)
		}
	}
	check("ganesha", fs, fs[:3], fs[3:])
	// ganesha's bugs are not hushfs serve's.
	check("hushfs-serve", fs, fs[:2], fs[2:])
	// Over NFSv4.1 times are 64-bit: the probe's bail-out is a failure
	// there; the silly rename (no opens yet) and ganesha's bugs are not.
	check("ganesha-v4.1", fs, []failure{fs[0], fs[2]}, append([]failure{fs[1]}, fs[3:]...))
	if ex, _, _ := classify("pjdfstest", "ganesha-v4.1", fs[:1], exp); len(ex) != 1 || ex[0].exp.key != "silly-rename-v41" {
		t.Errorf("the v4.1 silly rename matched %v", ex)
	}
	if ex, _, _ := classify("cthon04", "hushfs-serve", fs[:2], exp); len(ex) != 0 {
		t.Errorf("pjdfstest's expectations matched cthon04 failures: %v", ex)
	}

	var out bytes.Buffer
	n := report(&out, []suiteResult{{suite: "pjdfstest", server: "ganesha", run: 9, passed: 5, failures: fs}}, exp)
	if n != 6 {
		t.Errorf("report counted %d unexpected failures, want 6:\n%s", n, &out)
	}
	for _, want := range []string{
		"9 run,     5 passed, 3 expected failures (2 NFSv3, 1 ganesha bug), 6 unexpected failures",
		"FAIL     pjdfstest ganesha unlink/13.t #4: " + unlink,
		"expected pjdfstest ganesha [silly-rename] unlink/14.t #4: " + unlink,
		"note     pjdfstest ganesha link/00.t #71: listed as expected [ganesha-special-files], did not fail so",
		"[ganesha-special-files] ganesha bug: ganesha's FSAL VFS finds",
	} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("report lacks %q:\n%s", want, &out)
		}
	}
}

// pynfs's report, as testserver.py prints it: passes, failures with their
// reasons, warnings, and the summary that must agree.
func TestParsePynfs(t *testing.T) {
	out := `INFO   :test.env:Sleeping for 20 seconds: the lease period + 10 secs
COUR2    st_courtesy.testLockSleepLock                            : PASS
DELEG24  st_delegation.testDelegCapabilities                      : FAILURE
           FATTR4_OPEN_ARGUMENTS not supported
CSESS27  st_create_session.testRepTooBigToCache                   : FAILURE
           OP_SEQUENCE should return
           NFS4ERR_REP_TOO_BIG_TO_CACHE, instead got NFS4_OK
COUR1    st_courtesy.testLockSleepLockU                           : WARNING
           LOCKU should return NFS4_OK
EID4     st_exchange_id.testBadFlags                              : PASS
**************************************************
Command line asked for 5 of 264 tests
Of those: 0 Skipped, 2 Failed, 1 Warned, 2 Passed
`
	v, ok := parsePynfs(out)
	want := []failure{
		{"DELEG24", 0, "FATTR4_OPEN_ARGUMENTS not supported"},
		{"CSESS27", 0, "OP_SEQUENCE should return NFS4ERR_REP_TOO_BIG_TO_CACHE, instead got NFS4_OK"},
		{"COUR1", 0, "WARNING: LOCKU should return NFS4_OK"},
	}
	if !ok || v.run != 5 || v.passed != 2 || !slices.Equal(v.failures, want) {
		t.Fatalf("ok %v run %d passed %d failures %q", ok, v.run, v.passed, v.failures)
	}
	if _, ok := parsePynfs(strings.Replace(out, "2 Passed", "3 Passed", 1)); ok {
		t.Error("a summary that disagrees with the lines was taken")
	}
	if _, ok := parsePynfs(out[:strings.Index(out, "***")]); ok {
		t.Error("a report without its summary was taken")
	}
	ex, un, _ := classify("pynfs", "hushfs-serve", want, expectedFailures())
	if len(ex) != 1 || len(un) != 2 {
		t.Errorf("pynfs failures: expected %v, unexpected %v", ex, un)
	}
}

// A test that outlives its limit is killed with everything it started,
// however it ignores signals.
func TestRunKillsTheGroupAtItsLimit(t *testing.T) {
	start := time.Now()
	r := run(t.TempDir(), nil, 300*time.Millisecond, "sh", "-c", `trap "" TERM INT; sleep 60 & echo started; wait`)
	if !r.timedOut || r.exit != -1 || r.err != nil {
		t.Fatalf("timedOut %v exit %d err %v, want a timeout", r.timedOut, r.exit, r.err)
	}
	if took := time.Since(start); took > 10*time.Second {
		t.Errorf("run returned after %v", took)
	}
	if r.stdout != "started\n" {
		t.Errorf("stdout %q", r.stdout)
	}
	// The background sleep was in the group: nothing of it is left.
	deadline := time.Now().Add(5 * time.Second)
	for syscall.Kill(-r.pid, 0) == nil {
		if time.Now().After(deadline) {
			t.Fatalf("process group %d still has members", r.pid)
		}
		time.Sleep(10 * time.Millisecond)
	}
}
