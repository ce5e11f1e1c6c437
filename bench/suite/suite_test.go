package main

import (
	"context"
	"encoding/json"
	"encoding/xml"
	"errors"
	"fmt"
	"io"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"
)

// The C program and the checksum the suite expects of it must stay in
// step: compile and run it, and compare.
func TestFixupSumMatchesProgram(t *testing.T) {
	if _, err := exec.LookPath("gcc"); err != nil {
		t.Skip("no gcc")
	}
	dir := t.TempDir()
	bin := filepath.Join(dir, "fixup")
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if out, err := exec.CommandContext(ctx, "gcc", "-O2", "-Wall", "-Werror", "-o", bin, "../workloads/fixup.c").CombinedOutput(); err != nil {
		t.Fatalf("gcc: %v\n%s", err, out)
	}
	file := filepath.Join(dir, "fixup.bin")
	if out, err := exec.CommandContext(ctx, bin, file).CombinedOutput(); err != nil {
		t.Fatalf("fixup: %v\n%s", err, out)
	}
	msg, ok := checkSum(file, fixupSum())
	if !ok {
		t.Fatal(msg)
	}
	// And the check notices a single changed byte.
	f, err := os.OpenFile(file, os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.WriteAt([]byte{0x5a}, 512<<10); err != nil {
		t.Fatal(err)
	}
	f.Close()
	if msg, ok := checkSum(file, fixupSum()); ok {
		t.Fatalf("a changed byte passed the check: %s", msg)
	}
}

func TestSetCounts(t *testing.T) {
	stats := func() *statsJSON {
		s := &statsJSON{}
		if err := json.Unmarshal([]byte(`{"ops":{"GETATTR":{"ops":3,"transmissions":3},"WRITE":{"ops":2,"transmissions":3},"MOUNT:MNT":{"ops":1,"transmissions":1}}}`), s); err != nil {
			t.Fatal(err)
		}
		return s
	}
	proxy := func(calls string) *proxyJSON {
		p := &proxyJSON{}
		if err := json.Unmarshal([]byte(`{"calls":`+calls+`,"write_stable":{"0":1,"2":1},"commits":0}`), p); err != nil {
			t.Fatal(err)
		}
		return p
	}
	for _, c := range []struct {
		name   string
		calls  string
		agree  bool
		detail []string
	}{
		{"equal", `{"100003/3/1":3,"100003/3/7":2}`, true, nil},
		{"one more GETATTR at the proxy", `{"100003/3/1":4,"100003/3/7":2}`, false, []string{"GETATTR stats 3 proxy 4"}},
		{"retransmission", `{"100003/3/1":3,"100003/3/7":3}`, false, []string{"WRITE stats 2 proxy 3", "transmissions 3"}},
		{"procedure only the proxy saw", `{"100003/3/1":3,"100003/3/7":2,"100003/3/21":1}`, false, []string{"COMMIT stats 0 proxy 1"}},
		{"another program", `{"100003/3/1":3,"100003/3/7":2,"100005/3/1":1}`, false, []string{"100005/3/1"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			p := &Phase{}
			setCounts(p, stats(), nil, proxy(c.calls), nil)
			if p.Agree != c.agree {
				t.Fatalf("agree %v, want %v (%s)", p.Agree, c.agree, p.AgreeDetail)
			}
			for _, d := range c.detail {
				if !strings.Contains(p.AgreeDetail, d) {
					t.Errorf("detail %q lacks %q", p.AgreeDetail, d)
				}
			}
			if p.StatsTotal != 5 || p.Stats["MOUNT:MNT"] != 0 {
				t.Errorf("stats total %d %v: MOUNT calls must not count", p.StatsTotal, p.Stats)
			}
			if p.WriteStable["UNSTABLE"] != 1 || p.WriteStable["FILE_SYNC"] != 1 {
				t.Errorf("write_stable %v", p.WriteStable)
			}
		})
	}
	p := &Phase{}
	setCounts(p, nil, errors.New("stats unreadable"), proxy(`{"100003/3/1":3}`), nil)
	if p.Agree || !strings.Contains(p.AgreeDetail, "stats unreadable") || p.Total() != 3 {
		t.Errorf("unreadable stats: agree %v detail %q total %d", p.Agree, p.AgreeDetail, p.Total())
	}
}

func TestCheckLs(t *testing.T) {
	dir := t.TempDir()
	names := func(n int) []string {
		var l []string
		for i := 1; i <= n; i++ {
			l = append(l, lsName(i))
		}
		return l
	}
	long := func(l []string) []string {
		out := []string{"total 0"}
		for _, n := range l {
			out = append(out, "-rw-r--r-- 1 root root 0 Nov 23 02:17 "+n)
		}
		return out
	}
	run := func(lines []string, exit int, stderr string, isLong, churn bool) (string, bool) {
		path := filepath.Join(dir, "out")
		if err := os.WriteFile(path, []byte(strings.Join(lines, "\n")+"\n"), 0o644); err != nil {
			t.Fatal(err)
		}
		return checkLs(&execResult{exit: exit, stdout: path, stderr: stderr}, 5, isLong, churn)
	}
	all := names(5)
	// with returns all plus extra in a fresh slice (cases must not share
	// a backing array).
	with := func(extra ...string) []string { return slices.Concat(all, extra) }
	cases := []struct {
		name          string
		lines         []string
		exit          int
		stderr        string
		isLong, churn bool
		ok            bool
	}{
		{"ls -f", slices.Concat([]string{".", ".."}, all), 0, "", false, false, true},
		{"missing", slices.Concat([]string{"."}, all[:4]), 0, "", false, false, false},
		{"duplicate", with(all[2]), 0, "", false, false, false},
		{"beyond the range", with(lsName(6)), 0, "", false, false, false},
		{"churn name without churn", with(".churn-3"), 0, "", false, false, false},
		{"churn name with churn", with(".churn-3"), 0, "", false, true, true},
		{"stranger", with("core"), 0, "", false, true, false},
		{"ls -l", long(all), 0, "", true, false, true},
		{"ls -l without attributes", slices.Concat(long(all[:4]), []string{"-????????? ? ? ? ? ? " + all[4]}), 1, "", true, false, false},
		{"vanished churn entry", slices.Concat(long(all), []string{"-????????? ? ? ? ? ? .churn-9"}), 1,
			"ls: cannot access 'bigdir/.churn-9': No such file or directory", true, true, true},
		{"other error with churn", long(all), 1, "ls: reading directory 'bigdir': Input/output error", true, true, false},
		{"failed ls -f", all, 2, "ls: cannot open directory", false, false, false},
	}
	for _, c := range cases {
		msg, ok := run(c.lines, c.exit, c.stderr, c.isLong, c.churn)
		if ok != c.ok {
			t.Errorf("%s: ok %v (%s), want %v", c.name, ok, msg, c.ok)
		}
	}
}

func TestIntactBigdir(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "bigdir")
	if err := makeBigdir(context.Background(), dir, 50); err != nil {
		t.Fatal(err)
	}
	if !intactBigdir(dir, 50) {
		t.Fatal("fresh bigdir not intact")
	}
	if intactBigdir(dir, 51) {
		t.Error("50 names taken for 51")
	}
	os.WriteFile(filepath.Join(dir, ".churn-7"), nil, 0o644)
	os.Remove(filepath.Join(dir, lsName(7)))
	if intactBigdir(dir, 50) {
		t.Error("a churn leftover in place of a name passed")
	}
}

// The report renders every kind of phase, and the chart is well-formed
// SVG naming every phase.
func TestReportRenders(t *testing.T) {
	linux, err := loadLinux("../linux-6.1.json")
	if err != nil {
		t.Fatal(err)
	}
	r := &Report{Mode: "full", Servers: []string{"ganesha", "hushfs"}, RTTs: []string{"0", "10ms"}, Linux: linux}
	for _, rtt := range []float64{0, 10} {
		for _, server := range r.Servers {
			r.Phases = append(r.Phases,
				&Phase{Workload: "lua", ID: "build2", Label: "build2", Server: server, RTTms: rtt, Status: "ok",
					Stats: map[string]uint64{"GETATTR": 500, "READ": 100}, StatsTotal: 600, Agree: true, CheckOK: true, Check: "runs", WallS: 12},
				&Phase{Workload: "ls", ID: "ls-l-churn", Label: "ls -l + churn", Server: server, RTTms: rtt, Status: "timeout",
					Proxy: map[string]uint64{"LOOKUP": 25000}, ProxyTotal: 25000, Agree: true, Check: "timed out after 300 s"},
				&Phase{Workload: "write", ID: "dd", Label: "dd", Server: server, RTTms: rtt, Status: "ok",
					Stats: map[string]uint64{"WRITE": 64, "COMMIT": 1, "CREATE": 1}, StatsTotal: 66,
					WriteStable: map[string]uint64{"UNSTABLE": 64}, Agree: true, CheckOK: true, Check: "sha256 right"},
				&Phase{Workload: "write", ID: "fixup", Label: "fixup", Server: server, RTTms: rtt, Status: "not run", Check: "interrupted"},
			)
		}
	}
	// The everyday workloads, declared in another order than they ran.
	r.Phases = append(r.Phases,
		&Phase{Workload: "git", ID: "du-s", Label: "du -s, expired", Server: "hushfs", Status: "ok",
			Stats: map[string]uint64{"GETATTR": 2178, "READDIRPLUS": 82}, StatsTotal: 2260, Agree: true, CheckOK: true, Check: "right", WallS: 25},
		&Phase{Workload: "git", ID: "git-status", Label: "git status, expired", Server: "hushfs", RTTms: 10, Status: "ok",
			Stats: map[string]uint64{"GETATTR": 2066, "READDIRPLUS": 179}, StatsTotal: 2245, Agree: true, CheckOK: true, Check: "clean", WallS: 10.9})
	r.Local = []*Phase{{Workload: "lua", ID: "build2", Label: "build2", Server: "local disk", Status: "ok", WallS: 6, CheckOK: true},
		{Workload: "git", ID: "du-s", Label: "du -s, expired", Server: "local disk", Status: "ok", WallS: 0.0125, CheckOK: true},
		{Workload: "git", ID: "git-status", Label: "git status, expired", Server: "local disk", Status: "ok", WallS: 0.09, CheckOK: true}}
	r.Sizes.Repo = "busybox 1.35.0 (busybox_1.35.0.orig.tar.bz2): 2,768 files, 167 dirs"
	r.Sizes.ExpireWaitS = 62
	md := markdown(r)
	for _, want := range []string{"| lua | build2 | nfs-ganesha | 0 | 600 |", "787", "0.76×", "(2.0× local)",
		"≥ 25,000", "> 24,000", "65 (WRITE+COMMIT)", "1.00×", "WRITE 64 (UNSTABLE 64)", "not run: interrupted",
		"- git clone: busybox 1.35.0", "idle 62.0 s",
		"| git status, expired | hushfs serve | 10 ms | 0.09 s | 10.9 s | 121× | 2,245 | GETATTR 2,066, READDIRPLUS 179 |",
		"| du -s, expired | hushfs serve | 0 | 0.01 s | 25.0 s | 2000× | 2,260 |"} {
		if !strings.Contains(md, want) {
			t.Errorf("results.md lacks %q:\n%s", want, md)
		}
	}
	svg := chart(r)
	d := xml.NewDecoder(strings.NewReader(svg))
	for {
		_, err := d.Token()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatalf("chart.svg is not well-formed: %v", err)
		}
	}
	for _, want := range []string{"build2", "ls -l + churn", "dd", "fixup", "RTT 10 ms", "≥25k"} {
		if !strings.Contains(svg, want) {
			t.Errorf("chart lacks %q", want)
		}
	}
	// The git phases in the order people read them, not the order they ran.
	if i, j := strings.Index(md, "| git status, expired | hushfs"), strings.Index(md, "| du -s, expired | hushfs"); i < 0 || j < 0 || i > j {
		t.Errorf("git status (at %d) not before du -s (at %d)", i, j)
	}
}

// Quick mode's assertions pass on the counts the design promises and fail
// on anything else.
func TestAssertQuick(t *testing.T) {
	dd := func(unstable, fileSync, commits uint64) *Phase {
		return &Phase{ID: "dd", Label: "dd", Server: "hushfs", Status: "ok",
			Stats:       map[string]uint64{"WRITE": unstable + fileSync, "COMMIT": commits},
			WriteStable: map[string]uint64{"UNSTABLE": unstable, "FILE_SYNC": fileSync}, Commits: commits}
	}
	fixup := func(unstable, fileSync, commits uint64) *Phase {
		p := dd(unstable, fileSync, commits)
		p.ID, p.Label = "fixup", "fixup"
		return p
	}
	noop := func(n uint64) *Phase {
		return &Phase{ID: "noop", Label: "noop", Server: "hushfs", Status: "ok", Stats: map[string]uint64{"GETATTR": n}, StatsTotal: n}
	}
	for _, c := range []struct {
		name   string
		phases []*Phase
		fails  int
	}{
		{"as designed", []*Phase{dd(8, 0, 1), fixup(0, 1, 0), noop(2), noop(1)}, 0},
		{"dd with a FILE_SYNC tail", []*Phase{dd(7, 1, 1), fixup(0, 1, 0)}, 1},
		{"dd with two COMMITs", []*Phase{dd(8, 0, 2)}, 1},
		{"fixup through COMMIT", []*Phase{fixup(1, 0, 1)}, 1},
		{"noop over budget", []*Phase{noop(2), noop(noopBudget + 1)}, 1},
		{"dd not finished", []*Phase{{ID: "dd", Label: "dd", Server: "hushfs", Status: "timeout", Check: "timed out"}}, 1},
	} {
		t.Run(c.name, func(t *testing.T) {
			s := &suite{cfg: config{sizes: quickSizes}}
			s.report.Phases = c.phases
			s.assertQuick()
			failed := 0
			for _, a := range s.report.Asserts {
				if !a.OK {
					failed++
				}
			}
			if failed != c.fails || len(s.report.Problems) != c.fails {
				t.Errorf("%d assertions failed, %d problems, want %d: %+v", failed, len(s.report.Problems), c.fails, s.report.Asserts)
			}
		})
	}
}

// The idle time before an "expired" phase is the longest attribute
// lifetime the mount options allow, plus the margin.
func TestExpireWait(t *testing.T) {
	for _, c := range []struct {
		opts string
		want time.Duration
	}{
		{"", 60*time.Second + expireMargin},
		{"actimeo=5", 5*time.Second + expireMargin},
		{"acregmax=10,acdirmin=5,acdirmax=20", 20*time.Second + expireMargin},
		{"acregmin=1,acregmax=1,acdirmin=1,acdirmax=1,negtimeo=9", 9*time.Second + expireMargin},
		{"noac", 0},
	} {
		got, err := expireWait(c.opts)
		if err != nil || got != c.want {
			t.Errorf("expireWait(%q) = %v, %v; want %v", c.opts, got, err, c.want)
		}
	}
	if _, err := expireWait("acregmax=x"); err == nil {
		t.Error("a malformed option gave no error")
	}
}

// Budgets fail a count over budget and slack, name a count well under its
// budget, and hold only hushfs serve at RTT 0.
func TestCheckBudgets(t *testing.T) {
	phase := func(id, server string, rtt float64, counts map[string]uint64) *Phase {
		return &Phase{Workload: "git", ID: id, Label: id, Server: server, RTTms: rtt, Status: "ok", Stats: counts}
	}
	b := quickBudgets["git-status"]
	same := maps.Clone(b)
	over := maps.Clone(b)
	over["GETATTR"] = b["GETATTR"] + budgetSlack(b["GETATTR"]) + 1
	slack := maps.Clone(b)
	slack["GETATTR"] = b["GETATTR"] + budgetSlack(b["GETATTR"])
	under := maps.Clone(b)
	under["GETATTR"] = b["GETATTR"] / 2
	stranger := maps.Clone(b)
	stranger["READ"] = 3
	for _, c := range []struct {
		name         string
		phases       []*Phase
		asserts      int
		fails, lower int
	}{
		{"as measured", []*Phase{phase("git-status", "hushfs", 0, same)}, 1, 0, 0},
		{"within the slack", []*Phase{phase("git-status", "hushfs", 0, slack)}, 1, 0, 0},
		{"over", []*Phase{phase("git-status", "hushfs", 0, over)}, 1, 1, 0},
		{"well under", []*Phase{phase("git-status", "hushfs", 0, under)}, 1, 0, 1},
		{"a procedure without a budget", []*Phase{phase("git-status", "hushfs", 0, stranger)}, 1, 1, 0},
		{"other server and RTT", []*Phase{phase("git-status", "ganesha", 0, over), phase("git-status", "hushfs", 10, over)}, 0, 0, 0},
		{"no budget", []*Phase{phase("build2", "hushfs", 0, over)}, 0, 0, 0},
		{"timed out", []*Phase{{ID: "du-s", Label: "du", Server: "hushfs", Status: "timeout", Check: "timed out"}}, 1, 1, 0},
	} {
		t.Run(c.name, func(t *testing.T) {
			as, lower := checkBudgets(c.phases)
			fails := 0
			for _, a := range as {
				if !a.OK {
					fails++
				}
			}
			if len(as) != c.asserts || fails != c.fails || len(lower) != c.lower {
				t.Errorf("%d assertions, %d failed, %d to lower; want %d, %d, %d: %+v %q", len(as), fails, len(lower),
					c.asserts, c.fails, c.lower, as, lower)
			}
		})
	}
	// Every budget names a phase some workload declares.
	declared := map[string]bool{}
	for _, w := range workloads {
		for _, pn := range w.phases(quickSizes, 0) {
			declared[pn.id] = true
		}
	}
	for id := range quickBudgets {
		if !declared[id] {
			t.Errorf("budget for %q, a phase no workload has", id)
		}
	}
}

// checkUntar passes the tree its tarball unpacks into, and fails a tree
// with a changed file or an entry the tarball lacks.
func TestCheckUntar(t *testing.T) {
	dir := t.TempDir()
	src := filepath.Join(dir, "src", "top")
	if err := os.MkdirAll(filepath.Join(src, "a", "b"), 0o755); err != nil {
		t.Fatal(err)
	}
	for _, f := range []string{"README", "a/x.c", "a/b/y.h"} {
		if err := os.WriteFile(filepath.Join(src, f), []byte(f+"\n"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	tarball := filepath.Join(dir, "t.tar.gz")
	ctx := context.Background()
	if out, err := runQuiet(ctx, time.Minute, filepath.Dir(src), "tar", "czf", tarball, "top"); err != nil {
		t.Fatalf("tar: %v %s", err, out)
	}
	out := filepath.Join(dir, "out")
	os.Mkdir(out, 0o755)
	if o, err := runQuiet(ctx, time.Minute, out, "tar", "xf", tarball); err != nil {
		t.Fatalf("tar x: %v %s", err, o)
	}
	if msg, ok := checkUntar(ctx, out, tarball); !ok || msg != "3 files, 3 dirs, as in the tarball" {
		t.Fatalf("the tarball's own tree: %q %v", msg, ok)
	}
	extra := filepath.Join(out, "top", "a", "core")
	os.WriteFile(extra, nil, 0o644)
	if msg, ok := checkUntar(ctx, out, tarball); ok || !strings.Contains(msg, "a/core") {
		t.Errorf("an extra file: %q %v", msg, ok)
	}
	os.Remove(extra)
	if err := os.WriteFile(filepath.Join(out, "top", "a", "x.c"), []byte("a/x.C\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if msg, ok := checkUntar(ctx, out, tarball); ok {
		t.Errorf("a changed file passed: %q", msg)
	}
}

func TestCompareLines(t *testing.T) {
	for _, c := range []struct {
		got, want string
		ok        bool
	}{
		{"a:1\nb:2\n", "b:2\na:1\n", true},
		{"a:1\n", "a:1\nb:2\n", false},
		{"a:1\nc:3\n", "a:1\nb:2\n", false},
		{"", "", false}, // a pattern that matches nothing proves nothing
	} {
		if msg, ok := compareLines(c.got, c.want); ok != c.ok {
			t.Errorf("compareLines(%q, %q) = %q %v, want %v", c.got, c.want, msg, ok, c.ok)
		}
	}
}

// The repository holds every file of the tree, ignored ones too, and the
// same tarball always gives the same commit.
func TestEnsureRepo(t *testing.T) {
	if _, err := exec.LookPath("git"); err != nil {
		t.Skip("no git")
	}
	dir := t.TempDir()
	src := filepath.Join(dir, "src", "top")
	os.MkdirAll(filepath.Join(src, "sub"), 0o755)
	os.WriteFile(filepath.Join(src, ".gitignore"), []byte("*.o\n"), 0o644)
	os.WriteFile(filepath.Join(src, "sub", "kept.o"), []byte("object\n"), 0o644)
	os.WriteFile(filepath.Join(src, "main.c"), []byte("int main(void) { return 0; }\n"), 0o644)
	tarball := filepath.Join(dir, "t.tar.gz")
	ctx := context.Background()
	if out, err := runQuiet(ctx, time.Minute, filepath.Dir(src), "tar", "czf", tarball, "top"); err != nil {
		t.Fatalf("tar: %v %s", err, out)
	}
	tr := tree{"test tree", "t.tar.gz", "top"}
	var heads []string
	for i := range 2 {
		repo := filepath.Join(dir, fmt.Sprintf("r%d.git", i))
		head, err := ensureRepo(ctx, tr, tarball, repo, dir)
		if err != nil {
			t.Fatal(err)
		}
		heads = append(heads, head)
		files, err := runQuiet(ctx, time.Minute, repo, "git", "ls-tree", "-r", "--name-only", "HEAD")
		if err != nil || strings.Join(strings.Fields(files), " ") != ".gitignore main.c sub/kept.o" {
			t.Errorf("repository files %q (%v), want .gitignore main.c sub/kept.o", files, err)
		}
		// Made once: a second call finds it.
		if again, err := ensureRepo(ctx, tr, "/nonexistent.tar", repo, dir); err != nil || again != head {
			t.Errorf("second call: %q %v, want %q", again, err, head)
		}
	}
	if heads[0] != heads[1] {
		t.Errorf("the same tarball gave commits %s and %s", heads[0], heads[1])
	}
}

// The local figure is each phase's median run; a run that did not finish
// is reported instead.
func TestMedianPhases(t *testing.T) {
	ph := func(id string, wall float64, status string) *Phase {
		return &Phase{Workload: "git", ID: id, Label: id, Status: status, WallS: wall}
	}
	runs := [][]*Phase{
		{ph("clone", 3, "ok"), ph("status", 0.2, "ok")},
		{ph("clone", 1, "ok"), ph("status", 0.1, "ok")},
		{ph("clone", 2, "ok"), ph("status", 0.1, "timeout")},
	}
	got := medianPhases(runs)
	if len(got) != 2 || got[0].WallS != 2 || got[0].Note != "median of 3 runs: 3.00 s, 1.00 s, 2.00 s" {
		t.Fatalf("clone: %+v", got[0])
	}
	if got[1].Status != "timeout" {
		t.Errorf("status: %+v, want the run that timed out", got[1])
	}
	// A run cut short leaves the later phases to the runs that had them.
	got = medianPhases([][]*Phase{{ph("clone", 5, "ok"), ph("status", 1, "ok")}, {ph("clone", 4, "not run")}})
	if got[0].Status != "not run" || got[1].WallS != 1 {
		t.Errorf("short run: %+v %+v", got[0], got[1])
	}
}
