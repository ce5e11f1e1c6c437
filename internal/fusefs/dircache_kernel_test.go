package fusefs

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// listSorted lists dir with os.ReadDir (open, getdents to the end, close).
func listSorted(t *testing.T, dir string) []string {
	t.Helper()
	ents, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	names := make([]string, len(ents))
	for i, d := range ents {
		names[i] = d.Name()
	}
	return names
}

// makeFiles makes n empty files f000… in dir (on the server's disk: as
// another client would) and returns their names, sorted.
func makeFiles(t *testing.T, dir string, n int) []string {
	t.Helper()
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	var names []string
	for i := range n {
		name := fmt.Sprintf("f%03d", i)
		if err := os.WriteFile(filepath.Join(dir, name), nil, 0o644); err != nil {
			t.Fatal(err)
		}
		names = append(names, name)
	}
	return names
}

// listings returns the kernel's listing requests that reached the daemon.
func (e *env) listings() uint64 {
	f := e.fs.Stats().FUSE
	return f["readdir"] + f["readdirplus"]
}

// An unchanged directory is listed again from the kernel's cache: after
// the first listing, opening and reading it sends no READDIR(PLUS) request
// to the daemon (and no RPC), only the OPENDIR that asks whether the
// kernel may keep what it has.
func TestKernelDirCacheKept(t *testing.T) {
	e, mnt := mountKernel(t, envOpts{})
	want := makeFiles(t, filepath.Join(e.dir, "d"), 300)
	if got := listSorted(t, filepath.Join(mnt, "d")); !slices.Equal(got, want) {
		t.Fatalf("first listing: %d names, want %d", len(got), len(want))
	}
	if e.listings() == 0 {
		t.Fatal("the first listing sent no listing request")
	}
	e.fs.ResetStats()
	for i := range 3 {
		if got := listSorted(t, filepath.Join(mnt, "d")); !slices.Equal(got, want) {
			t.Fatalf("listing %d: %d names, want %d", i+2, len(got), len(want))
		}
	}
	s := e.fs.Stats()
	if e.listings() != 0 || s.FUSE["opendir"] != 3 || s.Total() != 0 {
		t.Errorf("three listings of an unchanged directory: FUSE requests %v, RPCs %v; want 3 opendir and nothing else", s.FUSE, s.Ops)
	}
}

// Another client's change is seen by the next listing once the core's
// attributes of the directory expire (close-to-open for directories: the
// OPENDIR revalidates, and the kernel drops what it cached); our own
// changes at once.
func TestKernelDirCacheRefreshed(t *testing.T) {
	e, mnt := mountKernel(t, envOpts{clock: true})
	dir := filepath.Join(e.dir, "d")
	want := makeFiles(t, dir, 300)
	listSorted(t, filepath.Join(mnt, "d"))
	listSorted(t, filepath.Join(mnt, "d"))

	// Another client's: a name added, one removed.
	if err := os.WriteFile(filepath.Join(dir, "new"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Remove(filepath.Join(dir, "f000")); err != nil {
		t.Fatal(err)
	}
	want = append(slices.Clone(want[1:]), "new")
	slices.Sort(want)
	e.clock.Advance(time.Hour)
	if got := listSorted(t, filepath.Join(mnt, "d")); !slices.Equal(got, want) {
		t.Errorf("after another client's change: %d names (new %v, f000 %v), want %d",
			len(got), slices.Contains(got, "new"), slices.Contains(got, "f000"), len(want))
	}

	// Ours, through the mount.
	if err := os.WriteFile(filepath.Join(mnt, "d", "ours"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Remove(filepath.Join(mnt, "d", "f001")); err != nil {
		t.Fatal(err)
	}
	want = append(slices.DeleteFunc(want, func(s string) bool { return s == "f001" }), "ours")
	slices.Sort(want)
	if got := listSorted(t, filepath.Join(mnt, "d")); !slices.Equal(got, want) {
		t.Errorf("after our change: %d names (ours %v, f001 %v), want %d",
			len(got), slices.Contains(got, "ours"), slices.Contains(got, "f001"), len(want))
	}
}

// A change the core learns of while a directory stays open (here: a stat
// of a name another client made, which revalidates the directory) drops
// the kernel's cached listing: rewinding the open directory lists the new
// name, though the kernel's own attributes of the directory are still
// valid.
func TestKernelDirCacheNotified(t *testing.T) {
	e, mnt := mountKernel(t, envOpts{clock: true})
	dir := filepath.Join(e.dir, "d")
	makeFiles(t, dir, 300)
	listSorted(t, filepath.Join(mnt, "d"))
	fd, err := unix.Open(filepath.Join(mnt, "d"), unix.O_RDONLY|unix.O_DIRECTORY, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(fd)
	readAll := func() []string {
		t.Helper()
		if _, err := unix.Seek(fd, 0, 0); err != nil {
			t.Fatal(err)
		}
		var names []string
		for {
			ents := getdents(t, fd, 8192)
			if len(ents) == 0 {
				return names
			}
			for _, d := range ents {
				names = append(names, d.name)
			}
		}
	}
	if names := readAll(); len(names) != 302 { // with . and ..
		t.Fatalf("listing: %d names", len(names))
	}
	if err := os.WriteFile(filepath.Join(dir, "new"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	e.clock.Advance(time.Hour)
	if _, err := os.Stat(filepath.Join(mnt, "d", "new")); err != nil {
		t.Fatalf("stat of the new name: %v", err)
	}
	// The notification is sent in the background: give it a moment.
	deadline := time.Now().Add(5 * time.Second)
	for !slices.Contains(readAll(), "new") {
		if time.Now().After(deadline) {
			t.Fatal("rewinding the open directory does not list the new name")
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// A listing the kernel serves from its cache goes on from the core when
// the kernel loses the pages midway (memory reclaim; here a notification
// drops them), at the offset the reader reached, which the open directory
// never handed out itself: from the core's listing while the directory is
// unchanged, else from the server after the entry. Every name that stayed
// is listed once.
func TestKernelDirCacheResumes(t *testing.T) {
	for _, changed := range []bool{false, true} {
		t.Run(fmt.Sprintf("changed=%v", changed), func(t *testing.T) {
			e, mnt := mountKernel(t, envOpts{clock: true})
			dir := filepath.Join(e.dir, "d")
			want := makeFiles(t, dir, 300)
			listSorted(t, filepath.Join(mnt, "d"))
			id := e.lookup(1, "d").NodeId
			fd, err := unix.Open(filepath.Join(mnt, "d"), unix.O_RDONLY|unix.O_DIRECTORY, 0)
			if err != nil {
				t.Fatal(err)
			}
			defer unix.Close(fd)
			e.fs.ResetStats()
			seen := map[string]int{}
			for _, d := range getdents(t, fd, 1024) {
				seen[d.name]++
			}
			if len(seen) == 0 || e.listings() != 0 {
				t.Fatalf("first read: %d names, %d listing requests; want some from the kernel's cache", len(seen), e.listings())
			}
			if changed {
				// Another client adds a name; the core learns of it.
				if err := os.WriteFile(filepath.Join(dir, "new"), nil, 0o644); err != nil {
					t.Fatal(err)
				}
				e.clock.Advance(time.Hour)
				if _, err := os.Stat(filepath.Join(mnt, "d", "new")); err != nil {
					t.Fatal(err)
				}
			}
			if st := e.fs.notifier.srv.InodeNotify(id, 0, 0); st != 0 {
				t.Fatalf("dropping the directory's pages: %v", st)
			}
			for {
				ents := getdents(t, fd, 1024)
				if len(ents) == 0 {
					break
				}
				for _, d := range ents {
					seen[d.name]++
				}
			}
			s := e.fs.Stats()
			if e.listings() == 0 {
				t.Error("the listing did not go on from the daemon")
			}
			if rpcs := s.Count("READDIRPLUS"); changed != (rpcs > 0) {
				t.Errorf("READDIRPLUS calls %d: want them only when the directory changed", rpcs)
			}
			for _, name := range append(want, ".", "..") {
				if seen[name] != 1 {
					t.Errorf("%s listed %d times", name, seen[name])
				}
			}
			if extra := len(seen) - len(want) - 2; extra != 0 && !(changed && extra == 1 && seen["new"] == 1) {
				t.Errorf("%d names, want %d", len(seen), len(want)+2)
			}
		})
	}
}

// Once the names the kernel got from a listing have expired, the next
// listing is read again (READDIRPLUS requests) rather than from the
// kernel's cache: that refreshes every name in a few requests,
// where listing from the cache makes ls -l look each name up again.
func TestKernelDirCacheRelistsExpiredNames(t *testing.T) {
	e, mnt := mountKernel(t, envOpts{clock: true})
	want := makeFiles(t, filepath.Join(e.dir, "d"), 300)
	listSorted(t, filepath.Join(mnt, "d"))
	e.fs.ResetStats()
	listSorted(t, filepath.Join(mnt, "d"))
	if e.listings() != 0 {
		t.Fatalf("listing within the names' lifetime: %d listing requests, want 0", e.listings())
	}
	e.clock.Advance(time.Hour)
	if got := listSorted(t, filepath.Join(mnt, "d")); !slices.Equal(got, want) {
		t.Fatalf("listing: %d names, want %d", len(got), len(want))
	}
	s := e.fs.Stats()
	// One call revalidates the directory: a GETATTR, or (the directory's
	// attributes expired, its pass one call) the READDIRPLUS pass itself,
	// which also brings its entries' attributes (client/bulk.go).
	if s.FUSE["readdirplus"] == 0 || s.Count("READDIRPLUS")+s.Count("GETATTR") != 1 {
		t.Errorf("listing after the names expired: FUSE requests %v, RPCs %v; want READDIRPLUS requests answered after one call", s.FUSE, s.Ops)
	}
}

// A directory opened before the core held its listing can be served from
// the kernel's cache that another reader's listing filled meanwhile; when
// the kernel then loses the pages, the first reader goes on from the core
// at an offset it got from that cache.
func TestKernelDirCacheResumesAnotherReadersListing(t *testing.T) {
	e, mnt := mountKernel(t, envOpts{})
	want := makeFiles(t, filepath.Join(e.dir, "d"), 300)
	id := e.lookup(1, "d").NodeId
	fd, err := unix.Open(filepath.Join(mnt, "d"), unix.O_RDONLY|unix.O_DIRECTORY, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(fd)
	listSorted(t, filepath.Join(mnt, "d")) // another reader, to the end
	e.fs.ResetStats()
	seen := map[string]int{}
	read := func() int {
		ents := getdents(t, fd, 512)
		for _, d := range ents {
			seen[d.name]++
		}
		return len(ents)
	}
	read()
	if e.listings() != 0 {
		t.Fatalf("the first reader was not served from the kernel's cache (%d listing requests)", e.listings())
	}
	if st := e.fs.notifier.srv.InodeNotify(id, 0, 0); st != 0 {
		t.Fatalf("dropping the directory's pages: %v", st)
	}
	for read() > 0 {
	}
	if e.listings() == 0 {
		t.Error("the listing did not go on from the daemon")
	}
	for _, name := range append(want, ".", "..") {
		if seen[name] != 1 {
			t.Errorf("%s listed %d times", name, seen[name])
		}
	}
	if len(seen) != len(want)+2 {
		t.Errorf("%d names, want %d", len(seen), len(want)+2)
	}
}
