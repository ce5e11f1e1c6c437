package conformance

import (
	"bufio"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"
)

// pjdfstestFileLimit bounds one test file; the slowest (chown/00.t, 1,280
// subtests) takes well under a minute. A file that runs longer has hung on
// the mount, and so would every file after it.
const pjdfstestFileLimit = 5 * time.Minute

// runPjdfstest runs the whole suite as `prove -r TREE/tests` would, in the
// same order and each file with the interpreter its #! line names, from
// dir on the mount under test, as root. It reads each file's TAP itself so
// that every failing subtest is named with its line, and bounds each file.
// only, when not empty, restricts the run to those directories of tests/
// (chmod, rename…) for a developer's quicker loop.
func runPjdfstest(t *testing.T, tree, dir, server string, only []string) suiteResult {
	t.Helper()
	files := pjdfstestFiles(t, filepath.Join(tree, "tests"), only)
	res := suiteResult{suite: "pjdfstest", server: server}
	start := time.Now()
	for i, path := range files {
		name := strings.TrimPrefix(path, filepath.Join(tree, "tests")+"/")
		interp, err := shebang(path)
		if err != nil {
			t.Fatalf("pjdfstest %s: %v", name, err)
		}
		r := run(dir, nil, pjdfstestFileLimit, interp, path)
		if r.err != nil {
			t.Fatalf("pjdfstest %s: %v", name, r.err)
		}
		v := parseTAP(name, r.stdout, r.exit)
		if r.timedOut {
			// Its short plan and exit status say nothing more.
			v.failures = slices.DeleteFunc(v.failures, func(f failure) bool { return f.num == 0 })
			v.failures = append(v.failures, failure{file: name,
				line: fmt.Sprintf("no end within %v; last line: %s", pjdfstestFileLimit, lastWords(r.stdout, r.stderr))})
		}
		res.add(v)
		if r.timedOut && i+1 < len(files) {
			res.failures = append(res.failures, failure{file: "(rest)",
				line: fmt.Sprintf("%d test files after %s not run: the mount hung", len(files)-i-1, name)})
			break
		}
	}
	res.took = time.Since(start)
	return res
}

// pjdfstestFiles lists the test files in prove's order (sorted paths).
func pjdfstestFiles(t *testing.T, tests string, only []string) []string {
	t.Helper()
	roots := []string{tests}
	if len(only) > 0 {
		roots = roots[:0]
		for _, o := range only {
			roots = append(roots, filepath.Join(tests, o))
		}
	}
	var files []string
	for _, root := range roots {
		err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
			if err == nil && !d.IsDir() && strings.HasSuffix(p, ".t") {
				files = append(files, p)
			}
			return err
		})
		if err != nil {
			t.Fatalf("pjdfstest tests: %v", err)
		}
	}
	if len(files) == 0 {
		t.Fatalf("pjdfstest: no test files under %s", strings.Join(roots, ", "))
	}
	return files
}

// shebang returns the interpreter of a script's #! line (prove runs a
// test through perl, which hands a file with a foreign #! line to it).
func shebang(path string) (string, error) {
	f, err := os.Open(path)
	if err != nil {
		return "", err
	}
	defer f.Close()
	line, _ := bufio.NewReader(f).ReadString('\n')
	fields := strings.Fields(strings.TrimPrefix(line, "#!"))
	if !strings.HasPrefix(line, "#!") || len(fields) != 1 {
		return "", fmt.Errorf("want a #! line naming one interpreter, found %q", strings.TrimSpace(line))
	}
	return fields[0], nil
}
