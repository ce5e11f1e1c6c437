package test

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"hushfs/test/harness"
)

// serverHasDRC says whether `hushfs serve` answers a retransmitted
// non-idempotent call from a duplicate request cache. Without one, a
// REMOVE executed once and sent again fails with NFS3ERR_NOENT (and so on
// for every non-idempotent procedure), as the resend test shows.
// drcEnv=1 runs that test regardless.
const (
	serverHasDRC = true
	drcEnv       = "HUSHFS_TEST_DRC"
)

// dupMountOpts: hard, and a call whose copy the server dropped is
// retransmitted after 1 s, not 60.
const dupMountOpts = "hard,timeo=10"

// TestFaultDuplicateCalls runs a build-like workload (create, write,
// rename, hard and symbolic links, chmod, mkdir, rmdir, remove) on a hard
// mount while the proxy sends every non-idempotent call to `hushfs serve`
// twice. It must complete without an error and leave exactly the expected
// tree on the server's disk.
//
// resend: the server executes the call, the proxy drops the reply and
// sends the same call again 20 ms later (what a retransmission after a
// lost reply looks like); the client gets the reply to the second, so the
// server must answer it from its duplicate request cache. immediate: the
// copy follows the call at once (a retransmission while the server still
// works on the call) and the client gets the first reply, so the server
// must not execute the copy too.
//
// Each runs against nfs-ganesha, which has a duplicate request cache, and
// against `hushfs serve` once it has one (serverHasDRC).
func TestFaultDuplicateCalls(t *testing.T) {
	requireMountTools(t)
	bin := harness.BuildHushfs(t)
	run := func(t *testing.T, mode, mnt, export string, p *faultProxy, m *harness.Mount) {
		start := time.Now()
		want := buildWorkload(t, mnt, 25)
		t.Logf("workload in %v", time.Since(start).Round(time.Millisecond))
		checkTree(t, export, want)
		checkTree(t, mnt, want)
		c := p.Counts(t)
		var nonIdem uint64
		for _, k := range []uint32{2, 8, 9, 10, 11, 12, 13, 14, 15} {
			nonIdem += c.NFS3(k)
		}
		f := c.Faults
		t.Logf("proxy: %d non-idempotent calls, %+v", nonIdem, f)
		// Copies never count as calls: each non-idempotent call is one
		// duplicate, with the reply dropped for it, except the client's
		// own retransmissions of a call whose copy a server dropped (a
		// server may take a copy that comes too soon for one in progress).
		if f.Duplicated == 0 || f.Duplicated+f.DupSkipped != nonIdem || f.DupSkipped > nonIdem/20 {
			t.Errorf("%d calls duplicated, %d skipped; want (nearly) all %d non-idempotent calls",
				f.Duplicated, f.DupSkipped, nonIdem)
		}
		// Resent, every first reply is dropped. Sent twice at once, the
		// second reply is, if the server sends one: a server with a
		// duplicate request cache drops a copy of a call in progress.
		if mode == "resend" && f.DupRepliesDropped != f.Duplicated || f.DupRepliesDropped > f.Duplicated {
			t.Errorf("%d replies dropped for %d duplicates (%s)", f.DupRepliesDropped, f.Duplicated, mode)
		}
		if err := m.Unmount(false); err != nil {
			t.Errorf("unmount: %v\n%s", err, m.Output())
		}
	}
	for _, mode := range []string{"resend", "immediate"} {
		// The copy of a call goes 20 ms after its reply: a retransmission
		// comes no sooner than a timeout, and a server may take an earlier
		// copy for a call still in progress and drop it.
		flags := []string{"--dup-procs", "nonidempotent", "--dup-prob", "1", "--dup-delay", "20ms"}
		if mode == "immediate" {
			flags = []string{"--dup-procs", "nonidempotent", "--dup-prob", "1", "--dup-immediate"}
		}
		// ganesha has a duplicate request cache: the proxy and the client
		// are checked against it whatever our server can do.
		t.Run("ganesha-"+mode, func(t *testing.T) {
			g := harness.StartGanesha(t, harness.GaneshaOptions{})
			mnt := t.TempDir()
			p := startFaultProxyNS(t, bin, g.NS, fmt.Sprintf("%s:%d", g.Addr, g.NFSPort), flags...)
			m := harness.StartMount(t, harness.MountSpec{Bin: bin, Server: g.Addr, Export: g.ExportPath, Dir: mnt, NS: g.NS,
				Options: fmt.Sprintf("port=%s,mountport=%d,%s", p.Port, g.MountPort, dupMountOpts)})
			run(t, mode, mnt, g.ExportDir, p, m)
		})
		t.Run("hushfs-serve-"+mode, func(t *testing.T) {
			if !serverHasDRC && os.Getenv(drcEnv) != "1" {
				t.Skipf("needs the server duplicate request cache (serverHasDRC is false; %s=1 runs it)", drcEnv)
			}
			export, mnt := t.TempDir(), t.TempDir()
			s := harness.StartServe(t, export)
			p := startFaultProxy(t, bin, s.NFSAddr, flags...)
			run(t, mode, mnt, export, p, mountThrough(t, bin, s, p, mnt, dupMountOpts))
		})
	}
}

// treeEntry is what checkTree expects at a path.
type treeEntry struct {
	mode os.FileMode // type and permissions
	data []byte      // a regular file's content, a link's target
}

// buildWorkload does what a small build does, n units of work, through the
// mount, failing the test at the first error; it returns the tree it must
// leave.
func buildWorkload(t *testing.T, root string, n int) map[string]treeEntry {
	p := func(parts ...string) string { return filepath.Join(append([]string{root}, parts...)...) }
	for _, d := range []string{"src", "obj", "lib", "bin"} {
		must(t, "mkdir "+d, os.Mkdir(p(d), 0o755))
	}
	want := map[string]treeEntry{}
	for _, d := range []string{"src", "obj", "lib", "bin"} {
		want[d] = treeEntry{mode: os.ModeDir | 0o755}
	}
	for i := range n {
		src := fmt.Sprintf("f%03d.c", i)
		body := bytes.Repeat([]byte(fmt.Sprintf("int f%d(void) { return %d; }\n", i, i)), 1+i%7)
		must(t, "write source", os.WriteFile(p("src", src), body, 0o644))
		// The compiler writes a temporary and renames it into place.
		tmpdir := p("obj", fmt.Sprintf(".tmp%03d", i))
		must(t, "mkdir tmp", os.Mkdir(tmpdir, 0o700))
		obj := append([]byte("OBJ\x00"), body...)
		must(t, "write object", os.WriteFile(filepath.Join(tmpdir, "o"), obj, 0o600))
		must(t, "chmod object", os.Chmod(filepath.Join(tmpdir, "o"), 0o644))
		must(t, "rename object", os.Rename(filepath.Join(tmpdir, "o"), p("obj", fmt.Sprintf("f%03d.o", i))))
		must(t, "rmdir tmp", os.Remove(tmpdir))
		// Archive members as hard links, a symlink to the newest.
		must(t, "link", os.Link(p("obj", fmt.Sprintf("f%03d.o", i)), p("lib", fmt.Sprintf("f%03d.o", i))))
		if i > 0 {
			must(t, "remove old symlink", os.Remove(p("lib", "latest")))
		}
		must(t, "symlink", os.Symlink(fmt.Sprintf("f%03d.o", i), p("lib", "latest")))
		// A generated file replaced by rename over an existing one.
		must(t, "write stamp", os.WriteFile(p("bin", "stamp.new"), []byte(fmt.Sprint(i)), 0o644))
		must(t, "rename over", os.Rename(p("bin", "stamp.new"), p("bin", "stamp")))
		// Cleaning: every third object file goes, its link stays.
		if i%3 == 2 {
			must(t, "remove object", os.Remove(p("obj", fmt.Sprintf("f%03d.o", i))))
		} else {
			want["obj/"+fmt.Sprintf("f%03d.o", i)] = treeEntry{mode: 0o644, data: obj}
		}
		want["src/"+src] = treeEntry{mode: 0o644, data: body}
		want["lib/"+fmt.Sprintf("f%03d.o", i)] = treeEntry{mode: 0o644, data: obj}
	}
	want["lib/latest"] = treeEntry{mode: os.ModeSymlink | 0o777, data: []byte(fmt.Sprintf("f%03d.o", n-1))}
	want["bin/stamp"] = treeEntry{mode: 0o644, data: []byte(fmt.Sprint(n - 1))}
	return want
}

// checkTree compares the tree under root with want, exactly.
func checkTree(t *testing.T, root string, want map[string]treeEntry) {
	t.Helper()
	got := map[string]bool{}
	err := filepath.Walk(root, func(path string, fi os.FileInfo, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(root, path)
		if rel == "." {
			return nil
		}
		got[rel] = true
		w, ok := want[rel]
		if !ok {
			t.Errorf("%s: unexpected %v", path, fi.Mode())
			return nil
		}
		if fi.Mode() != w.mode {
			t.Errorf("%s: mode %v, want %v", path, fi.Mode(), w.mode)
		}
		switch {
		case fi.Mode().IsRegular():
			if b, err := os.ReadFile(path); err != nil || !bytes.Equal(b, w.data) {
				t.Errorf("%s: content differs (%d bytes, %v)", path, len(b), err)
			}
		case fi.Mode()&os.ModeSymlink != 0:
			if l, err := os.Readlink(path); err != nil || l != string(w.data) {
				t.Errorf("%s: link to %q (%v), want %q", path, l, err, w.data)
			}
		}
		return nil
	})
	if err != nil {
		t.Errorf("walk %s: %v", root, err)
	}
	var missing []string
	for k := range want {
		if !got[k] {
			missing = append(missing, k)
		}
	}
	slices.Sort(missing)
	if len(missing) > 0 {
		t.Errorf("%s: missing %v", root, missing)
	}
}
