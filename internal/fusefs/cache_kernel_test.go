package fusefs

import (
	"bytes"
	"crypto/rand"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"testing"
	"time"
)

// These tests check the metadata caches by RPC count, through the kernel.

// counts snapshots the NFS call counts of a mount.
func (e *env) counts() map[string]uint64 {
	out := map[string]uint64{}
	for name, op := range e.core.Stats().Snapshot().Ops {
		out[name] = op.Ops
	}
	return out
}

// delta returns how many calls of each procedure were made since before.
func (e *env) delta(before map[string]uint64) map[string]uint64 {
	out := map[string]uint64{}
	for name, n := range e.counts() {
		if d := n - before[name]; d > 0 {
			out[name] = d
		}
	}
	return out
}

func statMissing(t *testing.T, path string) {
	t.Helper()
	if _, err := os.Stat(path); !os.IsNotExist(err) {
		t.Fatalf("stat %s: %v, want ENOENT", path, err)
	}
}

// TestIncludePathNegativeLookups: 20 missing headers along a 6-directory
// include path, looked up twice: the second pass sends no LOOKUP. After one
// directory changes on the server, only that directory is looked up again,
// and a header created there is found within the negative timeout.
func TestIncludePathNegativeLookups(t *testing.T) {
	const negtimeo = 2 * time.Second
	e, mnt := mountKernel(t, envOpts{options: "negtimeo=2"})
	var dirs []string
	for i := 0; i < 6; i++ {
		d := fmt.Sprintf("inc%d", i)
		if err := os.Mkdir(filepath.Join(e.dir, d), 0o755); err != nil {
			t.Fatal(err)
		}
		dirs = append(dirs, d)
	}
	search := func() {
		for h := 0; h < 20; h++ {
			for _, d := range dirs {
				statMissing(t, filepath.Join(mnt, d, fmt.Sprintf("h%d.h", h)))
			}
		}
	}
	search() // also looks up the six directories
	before := e.counts()
	search()
	if d := e.delta(before); d["LOOKUP"] != 0 || d["GETATTR"] != 0 {
		t.Errorf("second pass: %v, want no LOOKUP and no GETATTR", d)
	}

	// Another client adds a file to inc3 (directly in the export).
	if err := os.WriteFile(filepath.Join(e.dir, "inc3", "other.c"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	time.Sleep(negtimeo + 200*time.Millisecond)
	before = e.counts()
	search()
	d := e.delta(before)
	if d["LOOKUP"] != 20 {
		t.Errorf("after inc3 changed: %d LOOKUPs, want 20 (inc3's names only)", d["LOOKUP"])
	}
	if d["GETATTR"] > 6 {
		t.Errorf("after inc3 changed: %d GETATTRs, want at most one per directory", d["GETATTR"])
	}

	// A header appears on the server: found within the negative timeout.
	if err := os.WriteFile(filepath.Join(e.dir, "inc4", "h7.h"), []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(negtimeo + time.Second)
	for {
		if _, err := os.Stat(filepath.Join(mnt, "inc4", "h7.h")); err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("a header created on the server was not seen within %v", negtimeo)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// TestOpenCloseRevalidation: 100 open/close of a file cost one GETATTR each
// under close-to-open and at most one ACCESS in all; with nocto, none.
func TestOpenCloseRevalidation(t *testing.T) {
	for _, tc := range []struct {
		opts        string
		maxGetattrs uint64
		minGetattrs uint64
	}{{"", 100, 100}, {"nocto", 1, 0}} {
		t.Run("opts="+tc.opts, func(t *testing.T) {
			e, mnt := mountKernel(t, envOpts{options: tc.opts})
			p := filepath.Join(mnt, "f")
			if err := os.WriteFile(p, []byte("hello"), 0o644); err != nil {
				t.Fatal(err)
			}
			before := e.counts()
			for i := 0; i < 100; i++ {
				f, err := os.Open(p)
				if err != nil {
					t.Fatal(err)
				}
				f.Close()
			}
			d := e.delta(before)
			if d["GETATTR"] < tc.minGetattrs || d["GETATTR"] > tc.maxGetattrs {
				t.Errorf("100 opens: %d GETATTR, want %d..%d", d["GETATTR"], tc.minGetattrs, tc.maxGetattrs)
			}
			if d["ACCESS"] > 1 {
				t.Errorf("100 opens: %d ACCESS, want at most 1", d["ACCESS"])
			}
			if d["LOOKUP"] != 0 || d["READ"] != 0 {
				t.Errorf("100 opens: %v", d)
			}
		})
	}
}

// TestDotDotNeverLooksUp: walking a/b/c/../../d and cd ../.. never sends a
// LOOKUP of "..": only the names themselves, once.
func TestDotDotNeverLooksUp(t *testing.T) {
	e, mnt := mountKernel(t, envOpts{})
	for _, d := range []string{"a/b/c", "a/d"} {
		if err := os.MkdirAll(filepath.Join(e.dir, d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	before := e.counts()
	// Not filepath.Join: it would clean the ".." away before the kernel sees it.
	if _, err := os.Stat(mnt + "/a/b/c/../../d"); err != nil {
		t.Fatal(err)
	}
	if d := e.delta(before); d["LOOKUP"] != 4 {
		t.Errorf("a/b/c/../../d: %d LOOKUP, want 4 (a, b, c, d)", d["LOOKUP"])
	}
	wd, _ := os.Getwd()
	defer os.Chdir(wd)
	before = e.counts()
	if err := os.Chdir(filepath.Join(mnt, "a/b/c")); err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 10; i++ {
		if err := os.Chdir("../.."); err != nil {
			t.Fatal(err)
		}
		if err := os.Chdir("b/c"); err != nil {
			t.Fatal(err)
		}
	}
	if d := e.delta(before); d["LOOKUP"] != 0 {
		t.Errorf("cd ../.. and back 10 times: %d LOOKUP, want 0", d["LOOKUP"])
	}
}

// TestNoNoopSetattr: exec and mmap of a file and chmod to its current mode
// send no SETATTR.
func TestNoNoopSetattr(t *testing.T) {
	e, mnt := mountKernel(t, envOpts{})
	prog := filepath.Join(mnt, "prog.sh")
	if err := os.WriteFile(prog, []byte("#!/bin/sh\nexit 0\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	bin, err := os.ReadFile("/bin/true")
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(mnt, "true"), bin, 0o755); err != nil {
		t.Fatal(err)
	}
	before := e.counts()
	// Through sh, so that the exec happens in a process that does not serve
	// this mount (see go-fuse's notes on deadlocks).
	for i := 0; i < 3; i++ {
		if out, err := exec.Command("/bin/sh", "-c", prog+" && "+filepath.Join(mnt, "true")).CombinedOutput(); err != nil {
			t.Fatalf("exec on the mount: %v %s", err, out)
		}
	}
	f, err := os.Open(filepath.Join(mnt, "true"))
	if err != nil {
		t.Fatal(err)
	}
	m, err := syscall.Mmap(int(f.Fd()), 0, len(bin), syscall.PROT_READ, syscall.MAP_SHARED)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(m, bin) {
		t.Error("mapped contents differ")
	}
	syscall.Munmap(m)
	f.Close()
	if err := os.Chmod(prog, 0o755); err != nil {
		t.Fatal(err)
	}
	if d := e.delta(before); d["SETATTR"] != 0 {
		t.Errorf("exec, mmap and chmod to the same mode: %d SETATTR, want 0 (%v)", d["SETATTR"], d)
	}
	if err := os.Chmod(prog, 0o700); err != nil {
		t.Fatal(err)
	}
	if d := e.delta(before); d["SETATTR"] != 1 {
		t.Errorf("a real chmod: %d SETATTR, want 1", d["SETATTR"])
	}
}

// TestWrittenDataIsNotReadBack: a file written through the mount and read
// back sends no READ: the pages stay cached across close and open.
func TestWrittenDataIsNotReadBack(t *testing.T) {
	e, mnt := mountKernel(t, envOpts{})
	data := make([]byte, 2<<20)
	rand.Read(data)
	p := filepath.Join(mnt, "w")
	if err := os.WriteFile(p, data, 0o644); err != nil {
		t.Fatal(err)
	}
	before := e.counts()
	got, err := os.ReadFile(p)
	if err != nil || !bytes.Equal(got, data) {
		t.Fatalf("read back: %v", err)
	}
	if d := e.delta(before); d["READ"] != 0 {
		t.Errorf("read back of written data: %d READ, want 0", d["READ"])
	}
}

// TestCoherenceWithAnotherClient: a change made on the server is seen by
// stat within acregmin, and at the next open (content too) under
// close-to-open.
func TestCoherenceWithAnotherClient(t *testing.T) {
	e, mnt := mountKernel(t, envOpts{options: "acregmin=1,acregmax=1"})
	p := filepath.Join(mnt, "shared")
	if err := os.WriteFile(p, []byte("version one"), 0o644); err != nil {
		t.Fatal(err)
	}
	if got, _ := os.ReadFile(p); string(got) != "version one" {
		t.Fatalf("first read: %q", got)
	}
	// Another client replaces the contents, same size.
	if err := os.WriteFile(filepath.Join(e.dir, "shared"), []byte("VERSION TWO"), 0o644); err != nil {
		t.Fatal(err)
	}
	if got, _ := os.ReadFile(p); string(got) != "VERSION TWO" {
		t.Fatalf("read at the next open: %q, want the other client's data", got)
	}
	// A size change is seen by stat within acregmin, without an open.
	if err := os.WriteFile(filepath.Join(e.dir, "shared"), []byte("three, longer"), 0o644); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(2 * time.Second)
	for {
		st, err := os.Stat(p)
		if err == nil && st.Size() == int64(len("three, longer")) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("stat did not see the new size within acregmin")
		}
		time.Sleep(50 * time.Millisecond)
	}
	// A name created on the server appears within acdirmin... after the
	// directory's attributes expire (here at once, with a fresh lookup).
	if err := os.WriteFile(filepath.Join(e.dir, "new"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(mnt, "new")); err != nil {
		t.Fatalf("a name never looked up: %v", err)
	}
}

func listNames(t *testing.T, dir string) map[string]bool {
	t.Helper()
	ents, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]bool{}
	for _, e := range ents {
		if out[e.Name()] {
			t.Fatalf("%s listed twice", e.Name())
		}
		out[e.Name()] = true
	}
	return out
}

// TestListingCache: a second listing within the directory's cache time
// sends no READDIR, also after our own create and remove there (the wcc
// check keeps the listing); a name missing from a complete listing needs
// no LOOKUP; a change on the server shows once the directory's attributes
// expire.
func TestListingCache(t *testing.T) {
	e, mnt := mountKernel(t, envOpts{options: "acdirmin=1,acdirmax=1"})
	d := filepath.Join(e.dir, "d")
	os.Mkdir(d, 0o755)
	for i := 0; i < 200; i++ {
		os.WriteFile(filepath.Join(d, fmt.Sprintf("f%03d", i)), nil, 0o644)
	}
	md := filepath.Join(mnt, "d")
	if got := listNames(t, md); len(got) != 200 {
		t.Fatalf("first listing: %d names", len(got))
	}
	before := e.counts()
	if got := listNames(t, md); len(got) != 200 {
		t.Fatalf("second listing: %d names", len(got))
	}
	if err := os.WriteFile(filepath.Join(md, "mine"), []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Remove(filepath.Join(md, "f000")); err != nil {
		t.Fatal(err)
	}
	got := listNames(t, md)
	if !got["mine"] || got["f000"] || len(got) != 200 {
		t.Fatalf("listing after our own create and remove: mine=%v f000=%v n=%d", got["mine"], got["f000"], len(got))
	}
	statMissing(t, filepath.Join(md, "never-there"))
	if dl := e.delta(before); dl["READDIR"]+dl["READDIRPLUS"] != 0 || dl["LOOKUP"] != 0 {
		t.Errorf("listings and a lookup answered by the cache sent %v", dl)
	}
	// Another client adds a name: seen after the directory's cache time.
	os.WriteFile(filepath.Join(d, "theirs"), nil, 0o644)
	time.Sleep(1100 * time.Millisecond)
	if got := listNames(t, md); !got["theirs"] || len(got) != 201 {
		t.Fatalf("a name created on the server is missing after acdirmin (n=%d)", len(got))
	}
}

// TestStaleEntriesHeal: a file removed or replaced by another client is
// seen as such once its cached attributes expire — never an ESTALE that
// sticks.
func TestStaleEntriesHeal(t *testing.T) {
	e, mnt := mountKernel(t, envOpts{options: "acregmin=1,acregmax=1,acdirmin=1,acdirmax=1"})
	os.WriteFile(filepath.Join(e.dir, "gone"), []byte("1"), 0o644)
	os.WriteFile(filepath.Join(e.dir, "replaced"), []byte("old"), 0o644)
	for _, n := range []string{"gone", "replaced"} {
		if _, err := os.Stat(filepath.Join(mnt, n)); err != nil {
			t.Fatal(err)
		}
	}
	os.Remove(filepath.Join(e.dir, "gone"))
	os.WriteFile(filepath.Join(e.dir, "new"), []byte("brand new"), 0o644)
	os.Rename(filepath.Join(e.dir, "new"), filepath.Join(e.dir, "replaced"))
	time.Sleep(1100 * time.Millisecond)
	if _, err := os.Stat(filepath.Join(mnt, "gone")); !os.IsNotExist(err) {
		t.Errorf("stat of a file removed on the server: %v, want ENOENT", err)
	}
	if got, err := os.ReadFile(filepath.Join(mnt, "replaced")); err != nil || string(got) != "brand new" {
		t.Errorf("read of a file replaced on the server: %q %v", got, err)
	}
}
