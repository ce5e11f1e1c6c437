// Package conformance runs the public conformance suites on hushfs mounts:
// pjdfstest (POSIX file system behaviour, ~8,800 subtests) against
// `hushfs serve` and against nfs-ganesha over NFSv3, and cthon04 (the
// Connectathon NFS tests: basic, general, special, lock) against `hushfs
// serve`; both on a `vers=4.1` mount of nfs-ganesha (cthon04's lock group
// on the server's locks); and pynfs's NFSv4.1
// server tests against `hushfs serve` itself. The suites are built from
// their tarballs in a scratch directory; every failure is named, and any
// failure but those the protocol itself imposes, ganesha's own bugs and
// what the v4.1 server does not implement (expectedFailures) fails the
// test.
//
// It runs only when HUSHFS_CONFORMANCE names the directory of the tarballs
// (`make conformance` sets it to ../shared/conformance).
package conformance

import (
	"fmt"
	"io"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"hushfs/test/harness"
)

const (
	// envSuites names the directory holding pjdfstest-*.tar.gz and
	// cthon04-*.tar.gz.
	envSuites = "HUSHFS_CONFORMANCE"
	// envPjdfstestOnly, a comma-separated list of pjdfstest's test
	// directories (chmod,rename), restricts pjdfstest to them: for a
	// developer's loop, never CI.
	envPjdfstestOnly = "HUSHFS_PJDFSTEST_ONLY"
)

func TestMain(m *testing.M) {
	code := m.Run()
	harness.CleanupBuild()
	os.Exit(code)
}

// TestConformance builds the suites, then runs pjdfstest against both
// servers and cthon04 against `hushfs serve` at the same time (each on its
// own server and mount), and prints one summary line per suite and server
// and every failure.
func TestConformance(t *testing.T) {
	src := os.Getenv(envSuites)
	if src == "" {
		t.Skipf("%s is not set: it names the directory of the suites' tarballs (`make conformance` runs this with ../shared/conformance)", envSuites)
	}
	harness.RequireRoot(t)
	if _, err := os.Stat("/dev/fuse"); err != nil {
		t.Fatalf("no FUSE: %v", err)
	}
	if st, err := os.Stat(src); err != nil || !st.IsDir() {
		t.Fatalf("%s=%s: the conformance suites' directory is missing (CI expects it at ../shared/conformance from the repository root): %v", envSuites, src, err)
	}
	var only []string
	if o := os.Getenv(envPjdfstestOnly); o != "" {
		only = strings.Split(o, ",")
	}
	bin := harness.BuildHushfs(t)
	scratch := sharedTempDir(t)

	start := time.Now()
	pjd := buildPjdfstest(t, src, scratch)
	cthon := buildCthon04(t, src, scratch)
	pynfs := buildPynfs(t, src, scratch)
	t.Logf("suites built in %v in %s", time.Since(start).Round(time.Second), scratch)

	var mu sync.Mutex
	var results []suiteResult
	record := func(r suiteResult) {
		mu.Lock()
		results = append(results, r)
		mu.Unlock()
	}
	// Runs after the parallel subtests below have all finished.
	t.Cleanup(func() {
		mu.Lock()
		defer mu.Unlock()
		if n := report(os.Stdout, results, expectedFailures()); n > 0 {
			t.Errorf("%d unexpected conformance failures (listed above)", n)
		}
	})

	t.Run("pjdfstest-hushfs-serve", func(t *testing.T) {
		t.Parallel()
		mnt := serveMount(t, bin, scratch, "pjdfstest-serve")
		record(runPjdfstest(t, pjd, mnt, "hushfs-serve", only))
	})
	t.Run("pjdfstest-ganesha", func(t *testing.T) {
		t.Parallel()
		export, mnt := filepath.Join(scratch, "pjdfstest-ganesha-export"), filepath.Join(scratch, "pjdfstest-ganesha-mnt")
		mkdir(t, export)
		mkdir(t, mnt)
		g := harness.StartGanesha(t, harness.GaneshaOptions{ExportDir: export})
		harness.MountGanesha(t, bin, g, mnt, "allow_other")
		record(runPjdfstest(t, pjd, workDir(t, mnt), "ganesha", only))
	})
	t.Run("cthon04-hushfs-serve", func(t *testing.T) {
		t.Parallel()
		mnt := serveMount(t, bin, scratch, "cthon04-serve")
		record(runCthon04(t, cthon, mnt, "hushfs-serve", true))
	})
	t.Run("pynfs-hushfs-serve", func(t *testing.T) {
		t.Parallel()
		record(runPynfs(t, pynfs, scratch, "pynfs", "all"))
	})
	t.Run("pynfs-reboot-hushfs-serve", func(t *testing.T) {
		t.Parallel()
		record(runPynfs(t, pynfs, scratch, "pynfs-reboot", pynfsReboot...))
	})
	// The same suites over NFSv4.1, each on its own ganesha; there cthon04's
	// lock group runs on the server's locks (LOCK, LOCKU, LOCKT).
	t.Run("pjdfstest-ganesha-v4.1", func(t *testing.T) {
		t.Parallel()
		mnt := ganeshaV41Mount(t, bin, scratch, "pjdfstest-ganesha-v41")
		record(runPjdfstest(t, pjd, mnt, serverGaneshaV41, only))
	})
	t.Run("cthon04-ganesha-v4.1", func(t *testing.T) {
		t.Parallel()
		mnt := ganeshaV41Mount(t, bin, scratch, "cthon04-ganesha-v41")
		record(runCthon04(t, cthon, mnt, serverGaneshaV41, true))
	})
}

// serverGaneshaV41 names nfs-ganesha reached over NFSv4.1 in the summary
// and the expected-failure list.
const serverGaneshaV41 = "ganesha-v4.1"

// ganeshaV41Mount starts ganesha serving NFSv4.1 on a fresh export and
// mounts it with `hushfs mount -o vers=4.1` for every user; it returns a
// fresh directory in the mount.
func ganeshaV41Mount(t *testing.T, bin, scratch, name string) string {
	t.Helper()
	export, mnt := filepath.Join(scratch, name+"-export"), filepath.Join(scratch, name+"-mnt")
	mkdir(t, export)
	mkdir(t, mnt)
	g := harness.StartGanesha(t, harness.GaneshaOptions{ExportDir: export, NFSv4: true})
	harness.MountGaneshaV41(t, bin, g, mnt, "allow_other")
	return workDir(t, mnt)
}

// serveMount starts `hushfs serve` (root not squashed: the suites run as
// root and act as other users) on a fresh export and mounts it for every
// user; it returns a fresh directory in the mount.
func serveMount(t *testing.T, bin, scratch, name string) string {
	t.Helper()
	export, mnt := filepath.Join(scratch, name+"-export"), filepath.Join(scratch, name+"-mnt")
	mkdir(t, export)
	mkdir(t, mnt)
	s := harness.StartServe(t, export)
	harness.MountServe(t, bin, s, mnt, "allow_other")
	return workDir(t, mnt)
}

// workDir makes the directory a suite runs in, 0755 as a root shell's
// mkdir makes it.
func workDir(t *testing.T, mnt string) string {
	t.Helper()
	d := filepath.Join(mnt, "run")
	if err := os.Mkdir(d, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(d, 0o755); err != nil {
		t.Fatal(err)
	}
	return d
}

// sharedTempDir makes a scratch directory every user can traverse (the
// suites act as other users), removed at cleanup.
func sharedTempDir(t *testing.T) string {
	t.Helper()
	d, err := os.MkdirTemp("", "hushfs-conformance-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := os.RemoveAll(d); err != nil {
			t.Logf("removing %s: %v", d, err)
		}
	})
	if err := os.Chmod(d, 0o755); err != nil {
		t.Fatal(err)
	}
	return d
}

// suiteResult is a suite's verdict against one server.
type suiteResult struct {
	suite, server     string
	run, passed, todo int
	failures          []failure
	took              time.Duration
}

func (r *suiteResult) add(v tapFile) {
	r.run += v.run
	r.passed += v.passed
	r.todo += v.todo
	r.failures = append(r.failures, v.failures...)
}

// report prints one line per suite and server, then every failure (the
// expected ones with their reason) and every expected failure that did
// not happen; it returns how many failures were unexpected.
func report(w io.Writer, results []suiteResult, exp []expectation) (unexpected int) {
	slices.SortFunc(results, func(a, b suiteResult) int {
		return strings.Compare(a.suite+" "+a.server, b.suite+" "+b.server)
	})
	var lines, details []string
	reasons := map[string]string{}
	for _, r := range results {
		ex, un, absent := classify(r.suite, r.server, r.failures, exp)
		unexpected += len(un)
		expNote := ""
		if len(ex) > 0 {
			kinds := map[string]int{}
			for _, m := range ex {
				kinds[m.exp.kind]++
			}
			var parts []string
			for _, k := range []string{"NFSv3", "NFSv4.1 client", "ganesha bug", "not implemented", "by design"} {
				if n := kinds[k]; n > 0 {
					if k == "ganesha bug" && n > 1 {
						k = "ganesha bugs"
					}
					parts = append(parts, fmt.Sprintf("%d %s", n, k))
				}
			}
			expNote = " (" + strings.Join(parts, ", ") + ")"
		}
		todo := ""
		if r.todo > 0 {
			todo = fmt.Sprintf(" (%d marked TODO by the suite)", r.todo)
		}
		lines = append(lines, fmt.Sprintf("%-9s %-12s %5d run, %5d passed%s, %d expected failures%s, %d unexpected failures, %.0f s",
			r.suite, r.server, r.run, r.passed, todo, len(ex), expNote, len(un), r.took.Seconds()))
		for _, f := range un {
			details = append(details, fmt.Sprintf("FAIL     %s %s %s", r.suite, r.server, f))
		}
		for _, m := range ex {
			details = append(details, fmt.Sprintf("expected %s %s [%s] %s", r.suite, r.server, m.exp.key, m.failure))
			reasons[m.exp.key] = m.exp.kind + ": " + m.exp.reason
		}
		for _, e := range absent {
			n := "as a whole"
			if e.num != 0 {
				n = fmt.Sprintf("#%d", e.num)
			}
			details = append(details, fmt.Sprintf("note     %s %s %s %s: listed as expected [%s], did not fail so", r.suite, r.server, e.file, n, e.key))
		}
	}
	fmt.Fprintln(w, "conformance summary:")
	for _, l := range lines {
		fmt.Fprintln(w, "  "+l)
	}
	for _, d := range details {
		fmt.Fprintln(w, "  "+d)
	}
	for _, k := range slices.Sorted(maps.Keys(reasons)) {
		fmt.Fprintf(w, "  [%s] %s\n", k, reasons[k])
	}
	return unexpected
}
