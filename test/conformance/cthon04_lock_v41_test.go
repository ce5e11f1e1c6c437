package conformance

import (
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"hushfs/test/harness"
)

// TestCthon04LocksV41 runs cthon04's lock group (tlocklfs and tlock64, as
// runtests runs them on Linux) on an NFSv4.1 mount of nfs-ganesha, where
// locks are the server's (LOCK, LOCKU, LOCKT), not the kernel's. Both
// programs fork a child that locks through its own descriptors, so the
// two lock owners meet at the server. Like TestConformance, it runs only
// when HUSHFS_CONFORMANCE names the suites' directory.
func TestCthon04LocksV41(t *testing.T) {
	src := os.Getenv(envSuites)
	if src == "" {
		t.Skipf("%s is not set: it names the directory of the suites' tarballs", envSuites)
	}
	harness.RequireRoot(t)
	bin := harness.BuildHushfs(t)
	scratch := sharedTempDir(t)
	cthon := buildCthon04(t, src, scratch)
	export, mnt := filepath.Join(scratch, "lock-v41-export"), filepath.Join(scratch, "lock-v41-mnt")
	mkdir(t, export)
	mkdir(t, mnt)
	g := harness.StartGanesha(t, harness.GaneshaOptions{ExportDir: export, NFSv4: true})
	m := harness.StartMount(t, harness.MountSpec{Bin: bin, Server: g.Addr, Export: g.ExportPath, Dir: mnt,
		Options: fmt.Sprintf("vers=4.1,port=%d,allow_other", g.NFSPort), NS: g.NS})
	dir := workDir(t, mnt)
	lockDir := filepath.Join(dir, "lock")
	mkdir(t, lockDir)
	res := suiteResult{suite: "cthon04-lock", server: "ganesha-v4.1"}
	start := time.Now()
	for _, p := range []string{"tlocklfs", "tlock64"} {
		r := run(filepath.Join(cthon, "lock"), nil, cthon04TestLimit, "sh", umask0("./"+p, "-r", lockDir)...)
		res.run++
		if r.err == nil && !r.timedOut && r.exit == 0 {
			res.passed++
			continue
		}
		res.failures = append(res.failures, failure{file: "lock/" + p,
			line: describeExit(r, cthon04TestLimit) + ": " + lastWords(r.stdout, r.stderr)})
		t.Logf("%s output:\n%s\n%s", p, r.stdout, r.stderr)
	}
	res.took = time.Since(start)
	s := m.Stats(t)
	t.Logf("calls: LOCK %d, LOCKU %d, LOCKT %d, OPEN %d, CLOSE %d", s.Ops["LOCK"].Ops, s.Ops["LOCKU"].Ops,
		s.Ops["LOCKT"].Ops, s.Ops["OPEN"].Ops, s.Ops["CLOSE"].Ops)
	if n := report(os.Stdout, []suiteResult{res}, nil); n > 0 {
		t.Errorf("%d cthon04 lock programs failed on NFSv4.1 (listed above)", n)
	}
}
