package client

import (
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"sort"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"hushfs/internal/nfs3"
)

// settle waits until no directory pass runs (read-ahead goes on behind
// the calls that started it).
func settle(t *testing.T, fs *FS) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for quiet := 0; quiet < 3; {
		if fs.passes.Load() == 0 {
			quiet++
		} else {
			quiet = 0
		}
		if time.Now().After(deadline) {
			t.Fatalf("directory passes still running after 20 s")
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// expect compares the NFS calls since the last reset with want exactly.
func expect(t *testing.T, what string, fs *FS, want map[string]uint64) {
	t.Helper()
	settle(t, fs)
	if got := calls(fs); !maps.Equal(got, want) {
		t.Errorf("%s: NFS calls %v, want %v", what, got, want)
	}
}

// Files expire after 3 s, directories after 60: the stats below find their
// directories fresh, so what they cost is the entries' alone.
const filesExpire = "acregmin=3,acregmax=3,acdirmin=60,acdirmax=60"

// TestBulkListThenStat: ls -l of a directory whose entries' attributes
// expired: the listing (from the complete listing kept) and the stat of
// every entry cost the directory's READDIRPLUS pass — as many calls as
// the cold listing took — and no GETATTR. (It was a GETATTR per entry:
// 100,001 for ls -l of 100,000 entries.)
func TestBulkListThenStat(t *testing.T) {
	for _, tc := range []struct {
		name  string
		opts  string
		files int
	}{
		{"one reply", "", 300},
		{"many replies", "rsize=4096", 300}, // about 20 entries a reply
	} {
		t.Run(tc.name, func(t *testing.T) {
			ts := startServer(t)
			makeTree(t, ts.dir, []string{"d"}, tc.files)
			fs, clk := ts.mountClocked(t, filesExpire+","+tc.opts)
			k := newKernel(t, fs, clk)
			names, _ := k.list("d")
			cold := calls(fs)["READDIRPLUS"]
			if len(names) != tc.files || cold == 0 {
				t.Fatalf("cold listing: %d names, %d READDIRPLUS", len(names), cold)
			}
			for _, name := range names {
				k.stat("d/" + name)
			}
			expect(t, "stat after the listing", fs, map[string]uint64{})

			clk.advance(10 * time.Second)
			names, _ = k.list("d")
			for _, name := range names {
				k.stat("d/" + name)
			}
			expect(t, "ls -l with the attributes expired", fs, map[string]uint64{"READDIRPLUS": cold})
		})
	}
}

// TestBulkLoneStat: a stat of one entry whose attributes expired is one
// GETATTR, in a small directory and in a large one whose listing is kept;
// a second stat in the small directory (its pass is one call) sends the
// pass, and the rest of the directory is then fresh.
func TestBulkLoneStat(t *testing.T) {
	ts := startServer(t)
	makeTree(t, ts.dir, []string{"small", "large"}, 0)
	makeTree(t, ts.dir, []string{"small"}, 10) // one reply of 4 KiB
	makeTree(t, ts.dir, []string{"large"}, 400)
	fs, clk := ts.mountClocked(t, filesExpire+",rsize=4096")
	k := newKernel(t, fs, clk)
	k.list("small")
	k.list("large")
	calls(fs)

	clk.advance(10 * time.Second)
	k.stat("large/f0007")
	expect(t, "a lone stat in the large directory", fs, map[string]uint64{"GETATTR": 1})
	k.stat("small/f0007")
	expect(t, "a lone stat in the small directory", fs, map[string]uint64{"GETATTR": 1})
	clk.advance(5 * time.Second) // not together with the last one
	k.stat("small/f0008")
	expect(t, "another lone stat", fs, map[string]uint64{"GETATTR": 1})
	k.stat("small/f0009")
	expect(t, "a second stat right after", fs, map[string]uint64{"READDIRPLUS": 1})
	for i := 0; i < 10; i++ {
		k.stat(fmt.Sprintf("small/f%04d", i))
	}
	expect(t, "the rest of the small directory", fs, map[string]uint64{})
}

// TestBulkStatsWait: stats of many entries at once, while the pass their
// directory's first stat started is under way, wait for the reply that
// carries them instead of sending GETATTRs.
func TestBulkStatsWait(t *testing.T) {
	ts := startServer(t)
	makeTree(t, ts.dir, []string{"d"}, 400)
	fs, clk := ts.mountClocked(t, filesExpire+",rsize=4096")
	k := newKernel(t, fs, clk)
	names, _ := k.list("d")
	cold := calls(fs)["READDIRPLUS"]

	clk.advance(10 * time.Second)
	k.list("d")
	var wg sync.WaitGroup
	for w := 0; w < 16; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := w; i < len(names); i += 16 {
				a, _, err := fs.GetAttr(k.ctx, root, k.node["d/"+names[i]])
				if err != nil || a.Ino == 0 {
					t.Errorf("getattr %s: %+v %v", names[i], a, err)
				}
			}
		}()
	}
	wg.Wait()
	expect(t, "16 stats at a time", fs, map[string]uint64{"READDIRPLUS": cold})
}

// walkTree is 4 directories of 4 directories of 4 (85 with the top), each
// with 10 files.
func walkTree(t *testing.T, dir string) int {
	var dirs []string
	for a := 0; a < 4; a++ {
		for b := 0; b < 4; b++ {
			for c := 0; c < 4; c++ {
				dirs = append(dirs, fmt.Sprintf("top/a%d/b%d/c%d", a, b, c))
			}
		}
	}
	makeTree(t, dir, dirs, 10)
	for a := 0; a < 4; a++ {
		makeTree(t, dir, []string{fmt.Sprintf("top/a%d", a)}, 10)
		for b := 0; b < 4; b++ {
			makeTree(t, dir, []string{fmt.Sprintf("top/a%d/b%d", a, b)}, 10)
		}
	}
	makeTree(t, dir, []string{"top"}, 10)
	return 1 + 4 + 16 + 64
}

// TestWalkExpired: du, find and git status's sweep of a tree whose
// attributes all expired cost at most 1.3 calls per directory: the walk is
// seen and the directories ahead of it are read ahead with READDIRPLUS.
// (du was a GETATTR per entry; the sweep a GETATTR per file and
// directory.)
func TestWalkExpired(t *testing.T) {
	for _, tc := range []struct {
		name string
		walk func(k *kernel)
	}{
		{"du", func(k *kernel) { k.du("top") }},
		{"find", func(k *kernel) { k.find("top") }},
		{"lstat sweep", func(k *kernel) {
			for _, p := range sweepPaths() {
				k.stat(p)
			}
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ts := startServer(t)
			dirs := walkTree(t, ts.dir)
			fs, clk := ts.mountClocked(t, "")
			k := newKernel(t, fs, clk)
			k.du("top") // the kernel and the core know the tree
			calls(fs)

			clk.advance(2 * time.Minute) // past acregmax and acdirmax
			tc.walk(k)
			settle(t, fs)
			got := calls(fs)
			if n := total(got); float64(n) > 1.3*float64(dirs) {
				t.Errorf("%d calls for %d directories (%.2f each), want at most 1.3 each: %v", n, dirs, float64(n)/float64(dirs), got)
			} else {
				t.Logf("%d calls for %d directories: %v", n, dirs, got)
			}
			tc.walk(k)
			expect(t, "the same walk again", fs, map[string]uint64{})
		})
	}
}

// sweepPaths is what git status lstat()s in walkTree's tree: every file,
// in the index's order (sorted by path).
func sweepPaths() []string {
	var out []string
	var add func(dir string, depth int)
	add = func(dir string, depth int) {
		var names []string
		for i := 0; i < 10; i++ {
			names = append(names, fmt.Sprintf("%s/f%04d", dir, i))
		}
		if depth < 3 {
			pre := []string{"a", "b", "c"}[depth]
			for i := 0; i < 4; i++ {
				names = append(names, fmt.Sprintf("%s/%s%d/", dir, pre, i))
			}
		}
		// Index order: byte order of whole paths ("a0/" sorts before "f").
		sort.Strings(names)
		for _, n := range names {
			if n[len(n)-1] == '/' {
				add(n[:len(n)-1], depth+1)
			} else {
				out = append(out, n)
			}
		}
	}
	add("top", 0)
	return out
}

// TestLoneListingReadsNothingAhead: ls -l of one directory (expired) with
// subdirectories reads none of them ahead, nor does ls -l of one of its
// subdirectories right after (as git clone lists the directory it clones
// into, then stats in .git): no walk.
func TestLoneListingReadsNothingAhead(t *testing.T) {
	ts := startServer(t)
	walkTree(t, ts.dir)
	fs, clk := ts.mountClocked(t, "")
	k := newKernel(t, fs, clk)
	k.du("top")
	calls(fs)

	lsl := func(path string) {
		names, _ := k.list(path)
		for _, name := range names {
			k.stat(path + "/" + name)
		}
	}
	clk.advance(2 * time.Minute)
	lsl("top/a1")
	settle(t, fs)
	s := fs.Stats().Snapshot()
	if n := s.Total(); n > 4 || len(s.Origins["readahead"]) > 0 {
		t.Errorf("ls -l top/a1: %d calls, %v read ahead; want at most 4 (the path, the directory's pass), none ahead", n, s.Origins["readahead"])
	}
	lsl("top/a1/b2")
	settle(t, fs)
	if s := fs.Stats().Snapshot(); len(s.Origins["readahead"]) > 0 {
		t.Errorf("ls -l of a subdirectory next: %v read ahead, want none", s.Origins["readahead"])
	}
}

// holdingFront is a hostileFront that, while hold is set, keeps each
// READDIRPLUS reply (made by the real server when the call came) until
// release is closed, telling held when it has one.
func holdingFront(t *testing.T, ts *testServer) (port int, hold *atomic.Bool, held chan struct{}, release chan struct{}) {
	hold = &atomic.Bool{}
	held, release = make(chan struct{}, 64), make(chan struct{})
	port = hostileFront(t, ts.nfsL.Addr().String(), func(proc uint32, args, res []byte) []byte {
		if proc == nfs3.ProcReaddirplus && hold.Load() {
			held <- struct{}{}
			<-release
		}
		return res
	})
	return port, hold, held, release
}

// TestBulkRepliesKeepOrder: the attributes a READDIRPLUS pass brings are
// applied under the rules of any reply. A pass sent before our own WRITE,
// whose reply (the size from before) arrives after the WRITE's, must not
// shrink the file; and close-to-open stays exact: an open while the pass
// is on its way sends its own GETATTR, sees another client's change made
// after the pass was answered, and does not wait for the pass.
func TestBulkRepliesKeepOrder(t *testing.T) {
	ts := startServer(t)
	makeTree(t, ts.dir, []string{"d"}, 20)
	for _, name := range []string{"ours", "theirs"} {
		p := filepath.Join(ts.dir, "d", name)
		if err := os.WriteFile(p, []byte("abc"), 0o666); err != nil {
			t.Fatal(err)
		}
		os.Chmod(p, 0o666) // the test server squashes root
	}
	port, hold, held, release := holdingFront(t, ts)
	clk := &clock{now: time.Now()}
	fs := ts.mountViaWith(t, port, filesExpire, clk.Now, t.Logf)
	k := newKernel(t, fs, clk)
	k.list("d")
	fs.Stats().Reset()

	clk.advance(10 * time.Second)
	k.list("d") // from the complete listing: every entry expired
	hold.Store(true)
	statted := make(chan struct{})
	go func() {
		defer close(statted)
		k.stat("d/f0000") // starts the pass, waits for it
	}()
	select { // the server has answered the pass: "ours" and "theirs" have 3 bytes
	case <-held:
	case <-time.After(10 * time.Second):
		t.Fatal("the stat of an entry of a listed directory sent no READDIRPLUS pass")
	}
	clk.advance(time.Millisecond)

	// Our write of 10 bytes, answered while the pass's reply is held.
	fh, _, err := fs.Open(k.ctx, root, k.node["d/ours"], syscall.O_WRONLY)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := fs.Write(k.ctx, root, fh, 0, []byte("0123456789")); err != nil {
		t.Fatal(err)
	}
	if err := fs.Flush(k.ctx, root, fh); err != nil {
		t.Fatal(err)
	}
	fs.Release(k.ctx, fh)

	// Another client's change to "theirs", then our open of it: its own
	// call (a GETATTR, or an ACCESS, which carries the attributes, when
	// the permission cache has no answer), answered while the pass is
	// still held.
	if err := os.WriteFile(filepath.Join(ts.dir, "d", "theirs"), []byte("0123456"), 0o666); err != nil {
		t.Fatal(err)
	}
	openCalls := func() uint64 {
		s := fs.Stats().Snapshot()
		return s.Count("GETATTR") + s.Count("ACCESS")
	}
	before := openCalls()
	opened := make(chan error, 1)
	go func() {
		fh, _, err := fs.Open(k.ctx, root, k.node["d/theirs"], syscall.O_RDONLY)
		if err == nil {
			fs.Release(k.ctx, fh)
		}
		opened <- err
	}()
	select {
	case err := <-opened:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("open waited for the READDIRPLUS pass under way")
	}
	if n := openCalls() - before; n != 1 {
		t.Errorf("open sent %d GETATTRs and ACCESSes, want its own 1", n)
	}
	if a, _, _ := fs.GetAttr(k.ctx, root, k.node["d/theirs"]); a.Size != 7 {
		t.Errorf("after the open: theirs has %d bytes, want the 7 the server has", a.Size)
	}

	close(release)
	<-statted
	settle(t, fs)
	for name, want := range map[string]uint64{"ours": 10, "theirs": 7} {
		if a, _, _ := fs.GetAttr(k.ctx, root, k.node["d/"+name]); a.Size != want {
			t.Errorf("after the pass's older reply: %s has %d bytes, want %d", name, a.Size, want)
		}
	}
	// The stats of the directory's entries were the pass's: no GETATTR
	// beyond the open's.
	for i := 0; i < 20; i++ {
		k.stat(fmt.Sprintf("d/f%04d", i))
	}
	s := fs.Stats().Snapshot()
	if s.Count("READDIRPLUS") != 1 || s.Count("GETATTR")+s.Count("ACCESS") != 2 {
		t.Errorf("READDIRPLUS %d, GETATTR %d, ACCESS %d; want the pass and the two opens' calls", s.Count("READDIRPLUS"), s.Count("GETATTR"), s.Count("ACCESS"))
	}
}

// TestWalkReadAheadBounded: a walk that stops after three directories
// reads at most aheadWindow more ahead of it, of the hundred it could.
func TestWalkReadAheadBounded(t *testing.T) {
	ts := startServer(t)
	var dirs []string
	for i := 0; i < 100; i++ {
		dirs = append(dirs, fmt.Sprintf("top/s%03d", i))
	}
	makeTree(t, ts.dir, dirs, 5)
	fs, clk := ts.mountClocked(t, "")
	k := newKernel(t, fs, clk)
	k.du("top")
	calls(fs)

	clk.advance(2 * time.Minute)
	k.list("top")
	k.list("top/s000")
	k.list("top/s001")
	settle(t, fs)
	got := calls(fs)
	if n := got["READDIRPLUS"]; n < 10 || n > 3+aheadWindow+3 {
		t.Errorf("a walk of 3 directories read %d directories, want some ahead and at most %d: %v", n, 3+aheadWindow+3, got)
	}
}

// TestBulkConfirmsNames: names kept across a change of their directory
// that we did not make (another client's, or ours on a server whose wcc
// data does not prove it: ganesha's) and now too old to trust are
// confirmed by one READDIRPLUS pass of the directory, not a LOOKUP each
// (git status on a ganesha clone: 289 LOOKUPs).
func TestBulkConfirmsNames(t *testing.T) {
	ts := startServer(t)
	makeTree(t, ts.dir, []string{"d"}, 30)
	fs, clk := ts.mountClocked(t, "")
	k := newKernel(t, fs, clk)
	for i := 0; i < 30; i++ {
		k.stat(fmt.Sprintf("d/f%04d", i))
	}
	calls(fs)

	// Another client adds a file: the directory's version moves on.
	if err := os.WriteFile(filepath.Join(ts.dir, "d", "new"), nil, 0o666); err != nil {
		t.Fatal(err)
	}
	clk.advance(2 * time.Minute)
	for i := 0; i < 30; i++ {
		k.stat(fmt.Sprintf("d/f%04d", i))
	}
	// The root's and d's own attributes, one LOOKUP before the pass pays.
	expect(t, "stat of every name after the change", fs, map[string]uint64{"GETATTR": 2, "LOOKUP": 1, "READDIRPLUS": 1})
}

// TestWalkFresh: find and a stat of every file (grep -r's path walk) on a
// fresh mount: the walk reads ahead directories never listed, and a
// listing read ahead gives the kernel its entries with nodes, so each
// directory costs its one READDIRPLUS (most of them read ahead) and no
// file a LOOKUP or GETATTR. (Before, none was read ahead; without nodes
// from the listing each file was a LOOKUP.)
func TestWalkFresh(t *testing.T) {
	ts := startServer(t)
	dirs := walkTree(t, ts.dir)
	fs, clk := ts.mountClocked(t, "")
	k := newKernel(t, fs, clk)
	var walk func(path string)
	walk = func(path string) {
		names, sub := k.list(path)
		for _, name := range names {
			if sub[name] {
				walk(path + "/" + name)
			} else {
				k.stat(path + "/" + name)
			}
		}
	}
	calls(fs)
	walk("top")
	settle(t, fs)
	s := fs.Stats().Snapshot()
	got := calls(fs)
	ahead := s.Origins["readahead"]["READDIRPLUS"]
	t.Logf("%d directories: %v, %d READDIRPLUS read ahead", dirs, got, ahead)
	// The LOOKUP is of top itself: the root was never listed.
	if want := map[string]uint64{"LOOKUP": 1, "READDIRPLUS": uint64(dirs)}; !maps.Equal(got, want) {
		t.Errorf("NFS calls %v, want %v", got, want)
	}
	if ahead < uint64(dirs)*3/4 {
		t.Errorf("%d of %d directories read ahead, want most", ahead, dirs)
	}
}
