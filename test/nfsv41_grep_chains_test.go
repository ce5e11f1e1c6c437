package test

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"hushfs/test/harness"
)

// TestNFSv41GrepChains: grep -r over directories that hold only a
// directory (d*/s/t, the files all in t) on a fresh v4.1 mount of ganesha
// behind `hushfs proxy`: the walk enters d, s and t one after another with
// no file opened in between, so each listing must have been read ahead
// (riding in the opens of the subtree before) before grep gets there.
// Only the first chain's three go alone (nothing is opened before its
// files); every later one rides: one COMPOUND per file. Read ahead oldest
// first, each later chain cost listings of its own (a subdirectory found
// by a listing read ahead waited behind every sibling of its parent), and
// so did the export's other top directories (a walk that showed itself
// below d_0 read ahead only d_0's subtree).
func TestNFSv41GrepChains(t *testing.T) {
	requireMountTools(t)
	bin := harness.BuildHushfs(t)
	g := harness.StartGanesha(t, harness.GaneshaOptions{NFSv4: true})
	const tops, per = 8, 8
	for d := 0; d < tops; d++ {
		leaf := filepath.Join(g.ExportDir, fmt.Sprintf("d%d", d), "s", "t")
		must(t, "mkdir on the server", os.MkdirAll(leaf, 0o755))
		for f := 0; f < per; f++ {
			body := append(pattern(300+41*f+7*d, byte(d*per+f)), "\nneedle\n"...)
			must(t, "write on the server", os.WriteFile(filepath.Join(leaf, fmt.Sprintf("f%d", f)), body, 0o644))
		}
	}
	p := startFaultProxyNS(t, bin, g.NS, fmt.Sprintf("%s:%d", g.Addr, g.NFSPort), "--rtt", "5ms")
	mnt := t.TempDir()
	m := harness.StartMount(t, harness.MountSpec{Bin: bin, Server: g.Addr, Export: g.ExportPath, Dir: mnt, NS: g.NS,
		Options: fmt.Sprintf("vers=4.1,port=%s", p.Port)})

	// The root's listing and the space come with the mount's COMPOUND
	// for a second (TestNFSv41GrepRiders); grep's statfs is taken first
	// here so that a slow start costs nothing this test counts.
	runCmd(t, "stat", "-f", mnt)
	runCmd(t, "ls", mnt)
	before := p.Counts(t)
	prev := m.Stats(t)
	out, err := exec.Command("grep", "-r", "-l", "needle", mnt).CombinedOutput()
	must(t, "grep -r\n"+string(out), err)
	atExit := total(proxyDelta(before, p.Counts(t)))
	d := delta(prev, m.Stats(t))
	calls := proxyDelta(before, p.Counts(t))
	t.Logf("grep -r of %d files: proxy %d COMPOUNDs when it exited {%s}; mount: %s", tops*per, atExit,
		callsLine(calls), opsLine(d.Ops))
	if n := len(strings.Fields(string(out))); n != tops*per {
		t.Errorf("grep found the needle in %d files, want %d", n, tops*per)
	}
	if got := d.Ops["READDIRPLUS"].Ops; got != 3 {
		t.Errorf("READDIRPLUS alone: %d, want 3 (the first chain's d, s and t)", got)
	}
	if got := d.Ops["OPEN"].Ops; got != tops*per {
		t.Errorf("OPEN: %d, want %d", got, tops*per)
	}
	must(t, "unmount", m.Unmount(false))
}
