package test

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"testing"
	"time"

	"hushfs/internal/proxy"
	"hushfs/test/harness"
)

// measureTreeEnv names a source tarball (bench/.cache's busybox) for
// TestMeasureOpens; unset, it is skipped: it measures, it asserts nothing
// but that the tools ran.
const measureTreeEnv = "HUSHFS_MEASURE_TREE"

// measureVersEnv, when set, names the versions TestMeasureOpens measures
// ("4.1", "3" or "4.1,3", the default).
const measureVersEnv = "HUSHFS_MEASURE_VERS"

// TestMeasureOpens measures what reading many small files costs over
// NFSv4.1 beside NFSv3, on one ganesha behind `hushfs proxy --rtt 10ms`:
// grep -r on a fresh mount of the tree, and cat of 100 small files of one
// listed directory; calls as the proxy counted them (COMPOUNDs for v4.1)
// and as the mount counted them, and wall time.
func TestMeasureOpens(t *testing.T) {
	tarball := os.Getenv(measureTreeEnv)
	if tarball == "" {
		t.Skipf("%s unset (e.g. bench/.cache/busybox_1.35.0.orig.tar.bz2)", measureTreeEnv)
	}
	requireMountTools(t)
	bin := harness.BuildHushfs(t)
	g := harness.StartGanesha(t, harness.GaneshaOptions{NFSv4: true})
	runCmd(t, "tar", "-xf", tarball, "-C", g.ExportDir)
	// 100 small files in one directory, for cat.
	must(t, "mkdir", os.Mkdir(filepath.Join(g.ExportDir, "small"), 0o755))
	for i := 0; i < 100; i++ {
		must(t, "write", os.WriteFile(filepath.Join(g.ExportDir, "small", fmt.Sprintf("f%03d", i)), pattern(1000+37*i, byte(i)), 0o644))
	}
	files, dirs := 0, 0
	filepath.Walk(g.ExportDir, func(p string, fi os.FileInfo, err error) error {
		if err == nil && fi.Mode().IsRegular() {
			files++
		} else if err == nil && fi.IsDir() {
			dirs++
		}
		return nil
	})
	t.Logf("tree: %d files, %d directories", files, dirs)
	p := startFaultProxyNS(t, bin, g.NS, fmt.Sprintf("%s:%d", g.Addr, g.NFSPort), "--rtt", "10ms")

	versions := []string{"4.1", "3"}
	if v := os.Getenv(measureVersEnv); v != "" {
		versions = strings.Split(v, ",")
	}
	for _, vers := range versions {
		opts := fmt.Sprintf("vers=4.1,port=%s", p.Port)
		if vers == "3" {
			opts = fmt.Sprintf("port=%s,mountport=%d", p.Port, g.MountPort)
		}
		work := []struct {
			name string
			cmd  func(mnt string) *exec.Cmd
		}{
			{"grep -r", func(mnt string) *exec.Cmd { return exec.Command("grep", "-r", "-c", "zzz-no-such-text-zzz", mnt) }},
			{"ls + cat of 100 files", func(mnt string) *exec.Cmd {
				return exec.Command("sh", "-c", `cd "$1/small" && ls >/dev/null && for f in f*; do cat "$f"; done >/dev/null`, "sh", mnt)
			}},
		}
		for _, w := range work {
			dir := t.TempDir()
			m := harness.StartMount(t, harness.MountSpec{Bin: bin, Server: g.Addr, Export: g.ExportPath, Dir: dir, NS: g.NS, Options: opts})
			before := p.Counts(t)
			prev := m.Stats(t)
			start := time.Now()
			out, err := w.cmd(dir).CombinedOutput()
			wall := time.Since(start)
			atExit := total(proxyDelta(before, p.Counts(t)))
			if ee, ok := err.(*exec.ExitError); err != nil && !(ok && ee.ExitCode() == 1 && w.name == "grep -r") {
				t.Fatalf("%s: %v\n%s", w.name, err, out)
			}
			// The CLOSEs still queued go out within a second.
			time.Sleep(1500 * time.Millisecond)
			d := delta(prev, m.Stats(t))
			calls := proxyDelta(before, p.Counts(t))
			n := uint64(files)
			if w.name != "grep -r" {
				n = 100
			}
			t.Logf("v%s %s: %.2f s (%.1f ms/file), proxy %d calls (%.2f/file; %d when the command exited) {%s}; mount: %s",
				vers, w.name, wall.Seconds(), wall.Seconds()*1000/float64(n), total(calls),
				float64(total(calls))/float64(n), atExit, callsLine(calls), opsLine(d.Ops))
			must(t, "unmount", m.Unmount(false))
		}
	}
}

func proxyDelta(a, b proxy.Counts) map[string]uint64 {
	out := map[string]uint64{}
	for k, v := range b.Calls {
		if d := v - a.Calls[k]; d > 0 {
			out[k.Name()] = d
		}
	}
	return out
}

func total(m map[string]uint64) uint64 {
	var n uint64
	for _, v := range m {
		n += v
	}
	return n
}

func callsLine(m map[string]uint64) string {
	var parts []string
	for k, v := range m {
		parts = append(parts, fmt.Sprintf("%s %d", k, v))
	}
	sort.Strings(parts)
	return strings.Join(parts, ", ")
}
