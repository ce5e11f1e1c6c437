package client

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"
)

// clock is a settable clock for Config.Now.
type clock struct {
	mu  sync.Mutex
	now time.Time
}

func (c *clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *clock) advance(d time.Duration) {
	c.mu.Lock()
	c.now = c.now.Add(d)
	c.mu.Unlock()
}

// mountClocked mounts ts's export through its counting proxy with an
// injected clock.
func (ts *testServer) mountClocked(t *testing.T, opts string) (*FS, *clock) {
	t.Helper()
	clk := &clock{now: time.Now()}
	o, err := ParseOptions(fmt.Sprintf("port=%d,mountport=%d,timeo=50,%s", port(ts.proxy.Addr()), port(ts.mountL.Addr()), opts))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	fs, err := Mount(ctx, Config{Server: "127.0.0.1", Export: ts.srv.Root(), Options: o, Now: clk.Now})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { fs.Close(context.Background()) })
	return fs, clk
}

// makeTree makes directories (paths under dir, parents first) on the
// server, each holding files empty files f0000, f0001, ...
func makeTree(t *testing.T, dir string, dirs []string, files int) {
	t.Helper()
	for _, d := range dirs {
		p := filepath.Join(dir, d)
		if err := os.MkdirAll(p, 0o777); err != nil {
			t.Fatal(err)
		}
		for i := 0; i < files; i++ {
			if err := os.WriteFile(filepath.Join(p, fmt.Sprintf("f%04d", i)), nil, 0o666); err != nil {
				t.Fatal(err)
			}
		}
	}
}

// kernel plays the kernel's part over the client core as a FUSE mount
// with default_permissions drives it: dentries and attributes kept for
// the times the core hands out; a path walked name by name (LOOKUP where
// the dentry expired), each directory walked through checked for search
// permission from its attributes (GETATTR where they expired); stat a
// GETATTR where the attributes expired; readdirplus entries taken as
// dentries and attributes. It keeps every reference it is given.
type kernel struct {
	t          *testing.T
	ctx        context.Context
	fs         *FS
	clk        *clock
	mu         sync.Mutex
	node       map[string]NodeID    // path → node ("" the root)
	entryUntil map[string]time.Time // path → dentry valid until
	attrUntil  map[NodeID]time.Time
	isDir      map[NodeID]bool
}

func newKernel(t *testing.T, fs *FS, clk *clock) *kernel {
	return &kernel{t: t, ctx: ctxT(t), fs: fs, clk: clk,
		node: map[string]NodeID{"": RootID}, entryUntil: map[string]time.Time{},
		attrUntil: map[NodeID]time.Time{}, isDir: map[NodeID]bool{RootID: true}}
}

func (k *kernel) takeEntry(path string, e *Entry) {
	now := k.clk.Now()
	k.mu.Lock()
	defer k.mu.Unlock()
	k.node[path] = e.Node
	k.entryUntil[path] = now.Add(e.EntryTTL)
	k.attrUntil[e.Node] = now.Add(e.AttrTTL)
	k.isDir[e.Node] = e.Attr.IsDir()
}

// attr makes the kernel's attributes of id valid: a GETATTR if expired.
func (k *kernel) attr(id NodeID) {
	k.t.Helper()
	k.mu.Lock()
	valid := k.clk.Now().Before(k.attrUntil[id])
	k.mu.Unlock()
	if valid {
		return
	}
	a, ttl, err := k.fs.GetAttr(k.ctx, root, id)
	if err != nil {
		k.t.Errorf("getattr node %d: %v", id, err)
		return
	}
	k.mu.Lock()
	k.attrUntil[id] = k.clk.Now().Add(ttl)
	k.isDir[id] = a.IsDir()
	k.mu.Unlock()
}

// walk resolves path as the kernel's path walk does and returns its node.
func (k *kernel) walk(path string) NodeID {
	k.t.Helper()
	cur, at := RootID, ""
	if path == "" {
		return cur
	}
	for _, name := range strings.Split(path, "/") {
		k.attr(cur) // search permission on the directory
		p := strings.TrimPrefix(at+"/"+name, "/")
		k.mu.Lock()
		id, ok := k.node[p]
		valid := ok && k.clk.Now().Before(k.entryUntil[p])
		k.mu.Unlock()
		if !valid {
			e, err := k.fs.Lookup(k.ctx, root, cur, name)
			if err != nil {
				k.t.Errorf("lookup %s in %q: %v", name, at, err)
				return 0
			}
			k.takeEntry(p, &e)
			id = e.Node
		}
		cur, at = id, p
	}
	return cur
}

// stat is lstat(path).
func (k *kernel) stat(path string) {
	k.t.Helper()
	if id := k.walk(path); id != 0 {
		k.attr(id)
	}
}

// list is opendir(path) and readdir to the end with readdirplus; it
// returns the names (no "." and "..") and which are directories.
func (k *kernel) list(path string) (names []string, dirs map[string]bool) {
	k.t.Helper()
	id := k.walk(path)
	k.attr(id) // read permission
	dh, err := k.fs.OpenDir(k.ctx, root, id)
	if err != nil {
		k.t.Errorf("opendir %s: %v", path, err)
		return nil, nil
	}
	defer k.fs.ReleaseDir(dh)
	dirs = map[string]bool{}
	err = k.fs.ReadDir(k.ctx, root, dh, 0, true, func(e *DirEntry) bool {
		if e.Name == "." || e.Name == ".." {
			return true
		}
		names = append(names, e.Name)
		dirs[e.Name] = e.Mode == 0o040000
		if e.Entry.Node != 0 {
			k.takeEntry(strings.TrimPrefix(path+"/"+e.Name, "/"), &e.Entry)
		}
		return true
	})
	if err != nil {
		k.t.Errorf("readdir %s: %v", path, err)
	}
	sort.Strings(names)
	return names, dirs
}

// du walks the tree under path as du does: lists each directory, stats
// each entry, descends into the subdirectories.
func (k *kernel) du(path string) {
	names, dirs := k.list(path)
	for _, name := range names {
		k.stat(path + "/" + name)
	}
	for _, name := range names {
		if dirs[name] {
			k.du(path + "/" + name)
		}
	}
}

// find walks the tree as find does: lists each directory and descends,
// stat'ing nothing but what the walk needs.
func (k *kernel) find(path string) {
	names, dirs := k.list(path)
	for _, name := range names {
		if dirs[name] {
			k.find(path + "/" + name)
		}
	}
}

// calls returns the NFS calls per procedure since the counters were last
// reset, and resets them.
func calls(fs *FS) map[string]uint64 {
	s := fs.Stats().Snapshot()
	fs.Stats().Reset()
	out := map[string]uint64{}
	for _, k := range s.Names() {
		if isNFSKey(k) {
			out[k] = s.Count(k)
		}
	}
	return out
}

func total(m map[string]uint64) (n uint64) {
	for _, v := range m {
		n += v
	}
	return n
}
