package conformance

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// cthon04TestLimit bounds one test program (the slowest, the lock tests,
// sleep about 9 s by design).
const cthon04TestLimit = 5 * time.Minute

// A cthon04 test is one program and its arguments.
type cthonTest struct {
	name string
	args []string
}

// The basic group, every program in order: runtests leaves out 4a, 5a, 5b,
// 7a and 7b (variants of 4, 5 and 7), which we run too. -t is runtests'
// default (timed, full iteration counts).
var cthonBasic = []string{"test1", "test2", "test3", "test4", "test4a", "test5", "test5a", "test5b",
	"test6", "test7", "test7a", "test7b", "test8", "test9"}

// The special group as special/runtests.wrk runs it, with its arguments,
// less fstat (a statfs check the suite disables itself as a known protocol
// problem). runtests.wrk stops at the first failure; we run every program,
// each in a fresh directory so one failure leaves nothing for the next.
var cthonSpecial = []cthonTest{
	{"op_unlk", nil}, {"op_ren", nil}, {"op_chmod", nil},
	{"dupreq", []string{"100", "testfile"}}, {"excltest", nil},
	{"negseek", []string{"testfile"}}, {"rename", []string{"100"}},
	{"truncate", nil}, {"holey", nil}, {"nfsidem", []string{"50", "testdir"}},
	{"rewind", nil}, {"telldir", nil}, {"freesp", nil},
	{"bigfile", []string{"-s", "30", "bigfile"}}, {"bigfile2", []string{"bigfile"}},
}

// The general group's parts, as its script announces them: a failure is
// named by the part it happened in.
var cthonGeneralParts = []string{"Small Compile", "Tbl", "Nroff", "Large Compile",
	"Four simultaneous large compiles", "Makefile"}

// umask0 is the argument list of sh running a program with umask 0, as
// the suite's scripts do.
func umask0(prog string, args ...string) []string {
	return append([]string{"-c", `umask 0; exec "$@"`, "sh", prog}, args...)
}

// runCthon04 runs the basic, general, special and (with lock) lock groups
// of the suite built in tree against the mount directory dir, every test
// program on its own, and returns the verdict (one "subtest" per program).
func runCthon04(t *testing.T, tree, dir, server string, lock bool) suiteResult {
	t.Helper()
	res := suiteResult{suite: "cthon04", server: server}
	start := time.Now()
	one := func(name string, r ran, failLine string) {
		res.run++
		if r.err == nil && !r.timedOut && r.exit == 0 {
			res.passed++
			return
		}
		if failLine == "" {
			failLine = lastWords(r.stdout, r.stderr)
		}
		res.failures = append(res.failures, failure{file: name,
			line: describeExit(r, cthon04TestLimit) + ": " + failLine})
	}

	// basic: the programs take their directory from NFSTESTDIR.
	basicDir := filepath.Join(dir, "basic")
	mkdir(t, basicDir)
	env := []string{"NFSTESTDIR=" + basicDir}
	for _, p := range cthonBasic {
		one("basic/"+p, run(filepath.Join(tree, "basic"), env, cthon04TestLimit, "./"+p, "-t"), "")
	}

	// general: its runtests copies the sources to NFSTESTDIR and compiles,
	// formats and makes there.
	genDir := filepath.Join(dir, "general")
	r := run(filepath.Join(tree, "general"), []string{"NFSTESTDIR=" + genDir}, cthon04TestLimit, "sh", "runtests", "-t")
	part := "setup"
	for _, l := range strings.Split(r.stdout, "\n") {
		for _, p := range cthonGeneralParts {
			if l == p {
				part = p
			}
		}
	}
	one("general", r, "in "+part+": "+lastWords(r.stdout, r.stderr))

	// special: the programs run from a copy on the mount (make copy), as
	// runtests does, each in its own directory.
	spDir := filepath.Join(dir, "special")
	mkdir(t, spDir)
	mustRun(t, filepath.Join(tree, "special"), time.Minute, "make", "copy", "DESTDIR="+spDir)
	for _, p := range cthonSpecial {
		d := filepath.Join(spDir, p.name+".d")
		mkdir(t, d)
		// TMPDIR empty: op_* make their files with tempnam in the current
		// directory, not in /tmp.
		args := umask0(filepath.Join(spDir, p.name), p.args...)
		one("special/"+p.name, run(d, []string{"TMPDIR="}, cthon04TestLimit, "sh", args...), "")
	}

	// lock: both programs runtests runs on Linux, with -r as with -t.
	if lock {
		lockDir := filepath.Join(dir, "lock")
		mkdir(t, lockDir)
		for _, p := range []string{"tlocklfs", "tlock64"} {
			args := umask0("./"+p, "-r", lockDir)
			one("lock/"+p, run(filepath.Join(tree, "lock"), nil, cthon04TestLimit, "sh", args...), "")
		}
	}
	res.took = time.Since(start)
	return res
}

func mkdir(t *testing.T, d string) {
	t.Helper()
	if err := os.Mkdir(d, 0o777); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(d, 0o777); err != nil { // whatever the umask
		t.Fatal(err)
	}
}
