package test

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"hushfs/internal/client"
	"hushfs/test/harness"
)

// TestNFSv41GrepRiders: grep -r over a tree of 10 directories of 10 small
// files on a fresh v4.1 mount of ganesha (behind `hushfs proxy --rtt 5ms`,
// which counts the COMPOUNDs on the wire) costs one COMPOUND per file and
// almost nothing for its directories: the listings the walk reads ahead
// ride in the files' OPENs. Exactly 102: OPEN 100 (each with its file's
// data and a READDIR rider or a CLOSE now and then); READDIRPLUS 1, d0
// (listed before anything shows a walk; the root's listing came with the
// mount's COMPOUND, proto/nfsv41/rootlist.go, where before it was a
// COMPOUND of its own, sent twice: it asked for a directory delegation,
// which ganesha answers OP_ILLEGAL, and went again without; the mount's
// COMPOUND asks now, last, where the failure stops nothing);
// grep's first open in d0, listed just after its parent, shows a
// recursive reader, and over v4.1, where listings read ahead ride, that
// begins the walk: d1–d9 are read ahead riding on d0's opens
// (client/walk.go's walkRead; one more before, d1, the root's second
// subdirectory, whose listing showed the walk; 2 more before walkRead
// read ahead at a walk's first open, 8 more before listings rode); no
// FSSTAT (grep's statfs, right after the mount, is answered from the
// space attributes the mount's COMPOUND brought: proto/nfsv41/statfs.go;
// one more before); CLOSE 1 (the last file's, alone after half a
// second). Reading two levels ahead (client/walkhold.go) changes nothing
// in this flat tree. grep finds what each file holds.
func TestNFSv41GrepRiders(t *testing.T) {
	requireMountTools(t)
	bin := harness.BuildHushfs(t)
	g := harness.StartGanesha(t, harness.GaneshaOptions{NFSv4: true})
	const dirs, per = 10, 10
	want := map[string]bool{}
	for d := 0; d < dirs; d++ {
		dir := filepath.Join(g.ExportDir, fmt.Sprintf("d%d", d))
		must(t, "mkdir on the server", os.Mkdir(dir, 0o755))
		for f := 0; f < per; f++ {
			body := pattern(500+97*f+13*d, byte(d*per+f))
			name := fmt.Sprintf("f%d", f)
			if (d+f)%3 == 0 {
				body = append(body, "\nneedle\n"...)
				want[fmt.Sprintf("d%d/%s", d, name)] = true
			}
			must(t, "write on the server", os.WriteFile(filepath.Join(dir, name), body, 0o644))
		}
	}
	p, m, mnt := mountV41Proxied(t, bin, g, "5ms")
	mounted := time.Now()

	before := p.Counts(t)
	prev := m.Stats(t)
	start := time.Now()
	// The space the mount brought is kept a second: a machine too loaded
	// to start grep within half a second of the mount may see an FSSTAT.
	statfs := uint64(0)
	if late := start.Sub(mounted); late > 500*time.Millisecond {
		t.Logf("grep started %v after the mount: its statfs may ask the server", late)
		statfs = 1
	}
	out, err := exec.Command("grep", "-r", "-l", "needle", mnt).CombinedOutput()
	wall := time.Since(start)
	must(t, "grep -r\n"+string(out), err)
	time.Sleep(1500 * time.Millisecond) // the last CLOSE goes alone
	d := delta(prev, m.Stats(t))
	calls := proxyDelta(before, p.Counts(t))
	t.Logf("grep -r of %d files: %.2f s, proxy %d COMPOUNDs {%s}; mount: %s", dirs*per, wall.Seconds(),
		total(calls), callsLine(calls), opsLine(d.Ops))

	got := map[string]bool{}
	for _, line := range strings.Fields(string(out)) {
		rel, err := filepath.Rel(mnt, line)
		must(t, "grep's path", err)
		got[rel] = true
	}
	if len(got) != len(want) {
		t.Errorf("grep found the needle in %d files, want %d", len(got), len(want))
	}
	for f := range want {
		if !got[f] {
			t.Errorf("grep missed %s", f)
		}
	}
	// The root's listing from the mount is kept as long as the space
	// (a second): as late, the root may be listed from the server.
	if statfs == 1 && d.Ops["FSSTAT"].Ops == 0 {
		statfs = 0
	}
	root := uint64(0)
	if late := start.Sub(mounted); late > 500*time.Millisecond && d.Ops["READDIRPLUS"].Ops == 2 {
		root = 1
	}
	wantCalls := map[string]uint64{"OPEN": dirs * per, "READDIRPLUS": 1 + root, "CLOSE": 1}
	if statfs > 0 {
		wantCalls["FSSTAT"] = statfs
	}
	expectCounts(t, "grep -r", d, wantCalls)
	if n, w := total(calls), uint64(dirs*per+1+1)+statfs+root; n != w {
		t.Errorf("the proxy counted %d COMPOUNDs, want %d (one per file, d0's listing, 1 CLOSE)", n, w)
	}
	must(t, "unmount", m.Unmount(false))
}

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
	p, m, mnt := mountV41Proxied(t, bin, g, "5ms")
	d := grepNeedles(t, p, m, mnt, tops*per)
	if got := d.Ops["READDIRPLUS"].Ops; got != 3 {
		t.Errorf("READDIRPLUS alone: %d, want 3 (the first chain's d, s and t)", got)
	}
	if got := d.Ops["OPEN"].Ops; got != tops*per {
		t.Errorf("OPEN: %d, want %d", got, tops*per)
	}
	must(t, "unmount", m.Unmount(false))
}

// grepNeedles runs grep -r -l needle over mnt, which must find it in
// files files, and returns the mount's counts for it. The root's listing
// and the space come with the mount's COMPOUND for a second
// (TestNFSv41GrepRiders); grep's statfs and the root's listing are taken
// first so that a slow start costs nothing the caller counts.
func grepNeedles(t *testing.T, p *faultProxy, m *harness.Mount, mnt string, files int) client.Snapshot {
	t.Helper()
	runCmd(t, "stat", "-f", mnt)
	runCmd(t, "ls", mnt)
	before := p.Counts(t)
	prev := m.Stats(t)
	out, err := exec.Command("grep", "-r", "-l", "needle", mnt).CombinedOutput()
	must(t, "grep -r\n"+string(out), err)
	calls := proxyDelta(before, p.Counts(t))
	d := delta(prev, m.Stats(t))
	t.Logf("grep -r of %d files: proxy %d COMPOUNDs when it exited {%s}; mount: %s", files, total(calls),
		callsLine(calls), opsLine(d.Ops))
	if n := len(strings.Fields(string(out))); n != files {
		t.Errorf("grep found the needle in %d files, want %d", n, files)
	}
	return d
}

// mountV41Proxied mounts g's export over NFSv4.1 through `hushfs proxy
// --rtt rtt`, which counts the COMPOUNDs on the wire.
func mountV41Proxied(t *testing.T, bin string, g *harness.Ganesha, rtt string) (*faultProxy, *harness.Mount, string) {
	p := startFaultProxyNS(t, bin, g.NS, fmt.Sprintf("%s:%d", g.Addr, g.NFSPort), "--rtt", rtt)
	mnt := t.TempDir()
	m := harness.StartMount(t, harness.MountSpec{Bin: bin, Server: g.Addr, Export: g.ExportPath, Dir: mnt, NS: g.NS,
		Options: fmt.Sprintf("vers=4.1,port=%s", p.Port)})
	return p, m, mnt
}

// TestNFSv41GrepDeepChains: grep -r over top directories each holding six
// files and v/, in which p/ holds one file and q/ a file and the
// directory log/ — the shape of busybox's examples/var_service, where
// dnsmasq/log went alone in half the runs of grep -r — on a fresh v4.1
// mount of ganesha behind `hushfs proxy`. Going down v, grep enters log
// with at most one file opened since it entered v: log's listing rides in
// an OPEN only if it was read ahead three levels below the top the kernel
// held (client/walkhold.go: aheadHoldDepthCarried; with two, 11
// READDIRPLUS alone). Only the first top's chain may go alone.
func TestNFSv41GrepDeepChains(t *testing.T) {
	requireMountTools(t)
	bin := harness.BuildHushfs(t)
	g := harness.StartGanesha(t, harness.GaneshaOptions{NFSv4: true})
	const tops = 8
	files := 0
	for d := 0; d < tops; d++ {
		top := filepath.Join(g.ExportDir, fmt.Sprintf("d%d", d))
		for _, f := range []string{"f0", "f1", "f2", "f3", "f4", "f5", "v/p/run", "v/q/log/run", "v/q/conf"} {
			p := filepath.Join(top, f)
			must(t, "mkdir on the server", os.MkdirAll(filepath.Dir(p), 0o755))
			body := append(pattern(200+31*files, byte(files)), "\nneedle\n"...)
			must(t, "write on the server", os.WriteFile(p, body, 0o644))
			files++
		}
	}
	p, m, mnt := mountV41Proxied(t, bin, g, "5ms")
	d := grepNeedles(t, p, m, mnt, files)
	// At most the first top's chain alone: nothing was opened before it.
	if got := d.Ops["READDIRPLUS"].Ops; got > 4 {
		t.Errorf("READDIRPLUS alone: %d, want at most 4 (the first top's d, v, q or p, log)", got)
	}
	if got := d.Ops["OPEN"].Ops; got != uint64(files) {
		t.Errorf("OPEN: %d, want %d", got, files)
	}
	must(t, "unmount", m.Unmount(false))
}
