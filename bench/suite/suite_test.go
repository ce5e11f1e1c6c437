package main

import (
	"context"
	"encoding/json"
	"encoding/xml"
	"errors"
	"io"
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
	r.Local = []*Phase{{Workload: "lua", ID: "build2", Label: "build2", Server: "local disk", Status: "ok", WallS: 6, CheckOK: true}}
	md := markdown(r)
	for _, want := range []string{"| lua | build2 | nfs-ganesha | 0 | 600 |", "787", "0.76×", "(2.0× local)",
		"≥ 25,000", "> 24,000", "65 (WRITE+COMMIT)", "1.00×", "WRITE 64 (UNSTABLE 64)", "not run: interrupted"} {
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
