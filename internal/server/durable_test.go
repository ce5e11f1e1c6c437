package server

import (
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"hushfs/internal/nfs3"
)

// Every caller of syncGroup.sync returns only after a run of the sync that
// started after the caller's change; concurrent callers share runs.
func TestSyncGroupCoversEveryCaller(t *testing.T) {
	var g syncGroup
	var changes, durable, runs atomic.Int64
	do := func() error {
		runs.Add(1)
		snap := changes.Load() // what this run covers: changes made before it started
		time.Sleep(200 * time.Microsecond)
		for cur := durable.Load(); snap > cur && !durable.CompareAndSwap(cur, snap); cur = durable.Load() {
		}
		return nil
	}
	const callers, rounds = 16, 50
	var wg sync.WaitGroup
	var bad atomic.Int64
	for range callers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range rounds {
				mine := changes.Add(1)
				if err := g.sync(do); err != nil {
					t.Error(err)
					return
				}
				if durable.Load() < mine {
					bad.Add(1)
				}
			}
		}()
	}
	wg.Wait()
	if bad.Load() > 0 {
		t.Fatalf("%d callers returned before a sync covering their change", bad.Load())
	}
	n := runs.Load()
	t.Logf("%d changes, %d syncs", callers*rounds, n)
	if n*2 > callers*rounds {
		t.Fatalf("%d syncs for %d concurrent changes: not shared", n, callers*rounds)
	}
}

// A failed sync fails every caller it was to cover, and only those: the
// next caller gets a fresh sync.
func TestSyncGroupError(t *testing.T) {
	var g syncGroup
	gate := make(chan struct{})
	entered := make(chan struct{})
	first := make(chan error, 1)
	go func() {
		first <- g.sync(func() error {
			close(entered)
			<-gate
			return nil
		})
	}()
	<-entered
	const waiting = 5
	errs := make(chan error, waiting)
	var runs atomic.Int64
	for range waiting {
		go func() {
			errs <- g.sync(func() error {
				runs.Add(1)
				return unix.EIO
			})
		}()
	}
	waitUntil(t, "the callers to wait for the next sync", func() bool {
		g.mu.Lock()
		defer g.mu.Unlock()
		return g.waiters == waiting
	})
	close(gate)
	if err := <-first; err != nil {
		t.Fatalf("the first sync: %v", err)
	}
	for range waiting {
		if err := <-errs; !errors.Is(err, unix.EIO) {
			t.Fatalf("a caller covered by the failed sync got %v", err)
		}
	}
	if n := runs.Load(); n != 1 {
		t.Fatalf("%d syncs for the waiting callers, want 1", n)
	}
	if err := g.sync(func() error { return nil }); err != nil {
		t.Fatalf("a later caller got %v", err)
	}
}

// Concurrent REMOVEs in one directory share the directory's syncs: those
// that arrive while a sync runs wait for the next one, reply only after it,
// and all of them cost one sync. If that sync fails, all of them fail.
func TestGroupCommit(t *testing.T) {
	for _, fail := range []bool{false, true} {
		name := "ok"
		if fail {
			name = "failing"
		}
		t.Run(name, func(t *testing.T) {
			f := &faultIO{}
			e := startFaultEnv(t, f, nil)
			rootc := e.root0()
			dir := rootc.mustMkdir(rootc.rootFH(), "d", 0o755)
			const n = 8
			for i := range n {
				rootc.mustCreate(dir, string(rune('a'+i)), 0o644)
			}
			dirPath := filepath.Join(e.srv.Root(), "d")
			gate := make(chan struct{})
			entered := make(chan struct{})
			var dirSyncs atomic.Int64
			f.mu.Lock()
			f.before = func(op ioOp, k int) error {
				if op != opFsync {
					return nil
				}
				f.mu.Lock()
				last := f.synced[len(f.synced)-1]
				f.mu.Unlock()
				if last != dirPath {
					return nil
				}
				switch dirSyncs.Add(1) {
				case 1:
					close(entered)
					<-gate
				case 2:
					if fail {
						return unix.EIO
					}
				}
				return nil
			}
			f.mu.Unlock()

			replies := make([]chan nfs3.Status, n)
			for i := range n {
				replies[i] = make(chan nfs3.Status, 1)
				c := e.root0() // a connection each: calls run side by side
				go func() { replies[i] <- c.remove(dir, string(rune('a'+i))) }()
				if i == 0 {
					<-entered // the first REMOVE's sync is under way
				}
			}
			e.withNode(dir, func(nd *node) {
				waitUntil(t, "the other REMOVEs to wait for the directory's next sync", func() bool {
					nd.dirSync.mu.Lock()
					defer nd.dirSync.mu.Unlock()
					return nd.dirSync.waiters == n-1
				})
			})
			for i := range n {
				if _, err := os.Lstat(filepath.Join(dirPath, string(rune('a'+i)))); !os.IsNotExist(err) {
					t.Fatalf("%c still there: %v", 'a'+i, err)
				}
				select {
				case st := <-replies[i]:
					t.Fatalf("REMOVE %c replied (%v) before the sync covering it", 'a'+i, st)
				default:
				}
			}
			close(gate)
			wantStatus(t, "the first REMOVE", <-replies[0], nfs3.OK)
			want := nfs3.OK
			if fail {
				want = nfs3.ErrIO
			}
			for i := 1; i < n; i++ {
				wantStatus(t, "a REMOVE sharing the second sync", <-replies[i], want)
			}
			if got := dirSyncs.Load(); got != 2 {
				t.Fatalf("%d syncs of the directory for %d REMOVEs, want 2", got, n)
			}
		})
	}
}

// Each modifying procedure syncs what makes its change durable on the
// export's file system (syncPolicy), and nothing when nothing changed or
// with Config.Async.
func TestSyncsPerProcedure(t *testing.T) {
	cases := []struct {
		async  bool
		policy *syncPolicy // nil: the one detected
	}{
		{false, nil},
		{true, nil},
		{false, &syncPolicy{name: "POSIX only"}},
		{false, &syncPolicy{newCoversEntry: true, name: "ext4 without a journal"}},
		{false, &syncPolicy{newCoversEntry: true, dirCoversInodes: true, name: "journaling"}},
	}
	for _, tc := range cases {
		async := tc.async
		f := &faultIO{}
		e := startEnvTuned(t, false, func(c *Config) {
			c.io.files = f
			c.io.policy = tc.policy
			c.Async = async
		})
		pol := e.srv.policy
		t.Logf("async %v, %s: %+v", async, pol.name, pol)
		c := e.root0()
		root := c.rootFH()
		rootPath := e.srv.Root()
		p := func(name string) string { return filepath.Join(rootPath, name) }
		want := func(what string, paths ...string) {
			t.Helper()
			got := f.syncedPaths()
			if async {
				paths = nil
			}
			if !slices.Equal(got, paths) {
				t.Fatalf("async %v, %s: %s synced %q, want %q", async, pol.name, what, got, paths)
			}
		}
		withEntry := func(obj, dir string) []string {
			switch {
			case pol.dirCoversInodes:
				return []string{dir}
			case pol.newCoversEntry:
				return []string{obj}
			}
			return []string{obj, dir}
		}
		unopenable := func(dir string) []string {
			if pol.dirCoversInodes {
				return []string{dir}
			}
			// syncfs, then the flush covering its last writes.
			return []string{"syncfs " + rootPath, rootPath}
		}
		f.syncedPaths()

		d := c.mustMkdir(root, "d", 0o755)
		want("MKDIR", withEntry(p("d"), rootPath)...)
		file := c.mustCreate(d, "f", 0o644)
		want("CREATE", withEntry(p("d/f"), p("d"))...)

		var cr nfs3.CreateRes
		c.call(nfs3.ProcCreate, &nfs3.CreateArgs{Where: nfs3.DirOpArgs{Dir: d, Name: []byte("f")}, Mode: nfs3.Unchecked}, &cr)
		wantStatus(t, "CREATE UNCHECKED of an existing file", cr.Status, nfs3.OK)
		want("CREATE UNCHECKED of an existing file")
		c.write(file, 0, []byte("data"), nfs3.Unstable)
		c.call(nfs3.ProcCreate, &nfs3.CreateArgs{Where: nfs3.DirOpArgs{Dir: d, Name: []byte("f")}, Mode: nfs3.Unchecked,
			Attr: nfs3.Sattr{SetSize: true, Size: 0}}, &cr)
		wantStatus(t, "CREATE UNCHECKED truncating", cr.Status, nfs3.OK)
		want("CREATE UNCHECKED truncating", p("d/f"))

		var sr nfs3.SymlinkRes
		c.call(nfs3.ProcSymlink, &nfs3.SymlinkArgs{Where: nfs3.DirOpArgs{Dir: d, Name: []byte("l")}, Data: []byte("f")}, &sr)
		wantStatus(t, "SYMLINK", sr.Status, nfs3.OK)
		want("SYMLINK", unopenable(p("d"))...)

		var ar nfs3.SetattrRes
		c.call(nfs3.ProcSetattr, &nfs3.SetattrArgs{Obj: file, Attr: nfs3.Sattr{SetMode: true, Mode: 0o600}}, &ar)
		wantStatus(t, "SETATTR of a file", ar.Status, nfs3.OK)
		want("SETATTR of a file", p("d/f"))
		c.call(nfs3.ProcSetattr, &nfs3.SetattrArgs{Obj: d, Attr: nfs3.Sattr{SetMode: true, Mode: 0o700}}, &ar)
		want("SETATTR of a directory", p("d"))
		c.call(nfs3.ProcSetattr, &nfs3.SetattrArgs{Obj: sr.Obj.FH, Attr: nfs3.Sattr{SetUID: true, UID: 7}}, &ar)
		wantStatus(t, "SETATTR of a link", ar.Status, nfs3.OK)
		if pol.dirCoversInodes {
			want("SETATTR of a link", rootPath)
		} else {
			want("SETATTR of a link", "syncfs "+rootPath, rootPath)
		}

		e2 := c.mustMkdir(root, "e", 0o755)
		f.syncedPaths()
		var rr nfs3.RenameRes
		c.call(nfs3.ProcRename, &nfs3.RenameArgs{From: nfs3.DirOpArgs{Dir: d, Name: []byte("f")},
			To: nfs3.DirOpArgs{Dir: e2, Name: []byte("g")}}, &rr)
		wantStatus(t, "RENAME", rr.Status, nfs3.OK)
		want("RENAME", p("d"), p("e"))
		c.call(nfs3.ProcRename, &nfs3.RenameArgs{From: nfs3.DirOpArgs{Dir: e2, Name: []byte("g")},
			To: nfs3.DirOpArgs{Dir: e2, Name: []byte("h")}}, &rr)
		want("RENAME within a directory", p("e"))
		var lr nfs3.LinkRes
		c.call(nfs3.ProcLink, &nfs3.LinkArgs{File: file, Link: nfs3.DirOpArgs{Dir: d, Name: []byte("hard")}}, &lr)
		wantStatus(t, "LINK", lr.Status, nfs3.OK)
		want("LINK", p("d"))
		wantStatus(t, "REMOVE", c.remove(d, "hard"), nfs3.OK)
		want("REMOVE", p("d"))
		var dr nfs3.RmdirRes
		c.call(nfs3.ProcRmdir, &nfs3.RmdirArgs{Obj: nfs3.DirOpArgs{Dir: root, Name: []byte("e")}}, &dr)
		wantStatus(t, "RMDIR of a non-empty directory", dr.Status, nfs3.ErrNotEmpty)
		want("a failed RMDIR")
		wantStatus(t, "REMOVE", c.remove(e2, "h"), nfs3.OK)
		f.syncedPaths()
		c.call(nfs3.ProcRmdir, &nfs3.RmdirArgs{Obj: nfs3.DirOpArgs{Dir: root, Name: []byte("e")}}, &dr)
		wantStatus(t, "RMDIR", dr.Status, nfs3.OK)
		want("RMDIR", rootPath)
		e.stop()
	}
}

// The policy is what the export's file system needs: the ext4 driver syncs
// a new file's entry with it, and commits whole transactions only with a
// journal (whose presence its options show as a data= mode); XFS journals
// always; anything else gets the POSIX-only policy.
func TestSyncPolicyMatchesFileSystem(t *testing.T) {
	requireRoot(t)
	dir := t.TempDir()
	fd, err := unix.Open(dir, unix.O_RDONLY|unix.O_DIRECTORY, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(fd)
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		t.Fatal(err)
	}
	got := detectSyncPolicy(fd, st.Dev)
	fstype := mountFSType(t, st.Dev)
	var want syncPolicy
	switch fstype {
	case "ext4":
		opts, err := os.ReadFile(filepath.Join("/proc/fs/ext4", blockDevName(st.Dev), "options"))
		if err != nil {
			t.Fatalf("ext4 options: %v", err)
		}
		journal := strings.Contains(string(opts), "data=")
		want = syncPolicy{newCoversEntry: true, dirCoversInodes: journal}
	case "xfs":
		want = syncPolicy{newCoversEntry: true, dirCoversInodes: true}
	case "ext2", "ext3":
		t.Skipf("%s: depends on the driver", fstype)
	}
	t.Logf("%s on %s: %+v", dir, fstype, got)
	if got.newCoversEntry != want.newCoversEntry || got.dirCoversInodes != want.dirCoversInodes {
		t.Fatalf("policy %+v on %s, want %+v", got, fstype, want)
	}
}

// mountFSType returns the type of the file system on device dev, from
// /proc/self/mountinfo.
func mountFSType(t *testing.T, dev uint64) string {
	b, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		t.Fatal(err)
	}
	mm := strconv.FormatUint(uint64(unix.Major(dev)), 10) + ":" + strconv.FormatUint(uint64(unix.Minor(dev)), 10)
	for _, line := range strings.Split(string(b), "\n") {
		f := strings.Fields(line)
		if len(f) < 10 || f[2] != mm {
			continue
		}
		for i, x := range f {
			if x == "-" && i+1 < len(f) {
				return f[i+1]
			}
		}
	}
	t.Fatalf("device %s not in mountinfo", mm)
	return ""
}

// The descriptor CREATE opens the new file with stays with the file's node
// for the WRITEs that follow, instead of being closed and opened again.
func TestCreateKeepsDescriptor(t *testing.T) {
	e := startEnv(t, false)
	c := e.root0()
	fh := c.mustCreate(c.rootFH(), "f", 0o644)
	var st unix.Stat_t
	e.withNode(fh, func(n *node) {
		n.omu.Lock()
		defer n.omu.Unlock()
		if n.rwFd < 0 {
			t.Fatal("no descriptor kept after CREATE")
		}
		if err := unix.Fstat(n.rwFd, &st); err != nil || st.Ino != n.ino {
			t.Fatalf("kept descriptor is not the file's: %v", err)
		}
		fl, err := unix.FcntlInt(uintptr(n.rwFd), unix.F_GETFL, 0)
		if err != nil || fl&unix.O_ACCMODE != unix.O_RDWR {
			t.Fatalf("kept descriptor flags %#x, %v", fl, err)
		}
	})
	if w := c.write(fh, 0, []byte("data"), nfs3.FileSync); w.Status != nfs3.OK {
		t.Fatalf("WRITE: %v", w.Status)
	}
	if b, _ := os.ReadFile(filepath.Join(e.root, "f")); string(b) != "data" {
		t.Fatalf("file holds %q", b)
	}
}
