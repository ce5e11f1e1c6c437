package client

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"hushfs/internal/nfs3"
	"hushfs/internal/xdr"
)

// logLines collects a mount's log lines.
type logLines struct {
	mu    sync.Mutex
	lines []string
}

func (l *logLines) logf(format string, args ...any) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.lines = append(l.lines, fmt.Sprintf(format, args...))
}

// count returns how many lines hold every one of words.
func (l *logLines) count(words ...string) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	n := 0
next:
	for _, line := range l.lines {
		for _, w := range words {
			if !strings.Contains(line, w) {
				continue next
			}
		}
		n++
	}
	return n
}

// mountLogged is mountVia with the mount's log lines collected.
func (ts *testServer) mountLogged(t *testing.T, nfsPort int, opts string) (*FS, *logLines) {
	t.Helper()
	o, err := ParseOptions(fmt.Sprintf("port=%d,mountport=%d,%s", nfsPort, port(ts.mountL.Addr()), opts))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	logs := &logLines{}
	fs, err := Mount(ctx, Config{Server: "127.0.0.1", Export: ts.srv.Root(), Options: o, Logf: logs.logf})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { fs.Close(context.Background()) })
	return fs, logs
}

// readdirCookie returns the cookie of READDIR or READDIRPLUS arguments.
func readdirCookie(args []byte) uint64 {
	d := xdr.NewDecoder(args)
	var fh nfs3.FH
	fh.Decode(d)
	return d.Uint64()
}

// listing is a READDIR or READDIRPLUS reply a test rewrites through one
// shape: entries as READDIRPLUS has them.
type listing struct {
	plus bool
	res  nfs3.ReaddirplusRes
}

func decodeListing(proc uint32, b []byte) *listing {
	l := &listing{plus: proc == nfs3.ProcReaddirplus}
	d := xdr.NewDecoder(b)
	if l.plus {
		l.res.Decode(d)
	} else {
		var r nfs3.ReaddirRes
		r.Decode(d)
		l.res = nfs3.ReaddirplusRes{Status: r.Status, DirAttr: r.DirAttr, CookieVerf: r.CookieVerf, EOF: r.EOF}
		for _, e := range r.Entries {
			l.res.Entries = append(l.res.Entries, nfs3.DirEntryPlus{Fileid: e.Fileid, Name: e.Name, Cookie: e.Cookie})
		}
	}
	if d.Err() != nil {
		panic(d.Err())
	}
	return l
}

func (l *listing) encode() []byte {
	if l.plus {
		return l.res.Append(nil)
	}
	r := nfs3.ReaddirRes{Status: l.res.Status, DirAttr: l.res.DirAttr, CookieVerf: l.res.CookieVerf, EOF: l.res.EOF}
	for _, e := range l.res.Entries {
		r.Entries = append(r.Entries, nfs3.DirEntry{Fileid: e.Fileid, Name: e.Name, Cookie: e.Cookie})
	}
	return r.Append(nil)
}

func isListing(proc uint32) bool { return proc == nfs3.ProcReaddir || proc == nfs3.ProcReaddirplus }

// TestReaddirLoopFails: a server whose cookies repeat, go back, or are
// refused (BAD_COOKIE) whatever the client asks makes no progress; the
// listing fails with EIO after a bounded number of calls, with a log line
// naming the directory, instead of listing forever.
func TestReaddirLoopFails(t *testing.T) {
	variants := []struct {
		name    string
		rewrite func(first *[]byte) rewriteFunc
	}{
		// Every entry's cookie is the same, and the server answers it with
		// the first reply again.
		{"repeat", func(first *[]byte) rewriteFunc {
			return func(proc uint32, args, res []byte) []byte {
				if !isListing(proc) {
					return res
				}
				if readdirCookie(args) != 0 {
					return *first
				}
				l := decodeListing(proc, res)
				for i := range l.res.Entries {
					l.res.Entries[i].Cookie = 4242
				}
				l.res.EOF = false
				*first = l.encode()
				return *first
			}
		}},
		// Past the first reply, the last cookie of every reply is one the
		// listing has passed already.
		{"back", func(first *[]byte) rewriteFunc {
			var back atomic.Uint64
			return func(proc uint32, args, res []byte) []byte {
				if !isListing(proc) {
					return res
				}
				l := decodeListing(proc, res)
				l.res.EOF = false
				if len(l.res.Entries) == 0 {
					panic("the test directory is too small")
				}
				if readdirCookie(args) == 0 {
					back.Store(l.res.Entries[0].Cookie)
				} else {
					l.res.Entries[len(l.res.Entries)-1].Cookie = back.Load()
				}
				return l.encode()
			}
		}},
		// Every cookie but 0 is refused.
		{"badcookie", func(first *[]byte) rewriteFunc {
			return func(proc uint32, args, res []byte) []byte {
				if isListing(proc) && readdirCookie(args) != 0 {
					return (&nfs3.ReaddirRes{Status: nfs3.ErrBadCookie}).Append(nil)
				}
				return res
			}
		}},
	}
	for _, v := range variants {
		for _, opts := range []string{"nordirplus", "rdirplus"} {
			t.Run(v.name+"/"+opts, func(t *testing.T) {
				ts := startServer(t)
				sub := filepath.Join(ts.dir, "loop")
				os.Mkdir(sub, 0o755)
				for i := 0; i < 300; i++ {
					os.WriteFile(filepath.Join(sub, "f"+strconv.Itoa(i)), nil, 0o644)
				}
				var first []byte
				port := hostileFront(t, ts.nfsL.Addr().String(), v.rewrite(&first))
				fs, logs := ts.mountLogged(t, port, "rsize=4096,"+opts)
				ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
				defer cancel()
				e, err := fs.Lookup(ctx, root, RootID, "loop")
				if err != nil {
					t.Fatal(err)
				}
				defer fs.Forget(e.Node, 1)
				dh, err := fs.OpenDir(ctx, root, e.Node)
				if err != nil {
					t.Fatal(err)
				}
				defer fs.ReleaseDir(dh)
				var off uint64
				listed := 0
				refs := map[NodeID]uint64{}
				for calls := 0; ; calls++ {
					got := 0
					err = fs.ReadDir(ctx, root, dh, off, opts == "rdirplus", func(de *DirEntry) bool {
						if got == 50 {
							return false
						}
						got++
						off = de.Cookie
						if de.Entry.Node != 0 {
							refs[de.Entry.Node]++
						}
						return true
					})
					listed += got
					if err != nil || got == 0 {
						break
					}
					if calls > 100 {
						t.Fatalf("%d entries in %d calls and the listing goes on", listed, calls)
					}
				}
				for id, k := range refs {
					fs.Forget(id, k)
				}
				if Errno(err) != syscall.EIO {
					t.Fatalf("listing ended with %v (errno %v) after %d entries, want EIO", err, Errno(err), listed)
				}
				s := fs.Stats().Snapshot()
				if n := s.Count("READDIR") + s.Count("READDIRPLUS"); n > 10 {
					t.Fatalf("%d READDIR(PLUS) calls before the loop was seen, want at most 10", n)
				} else {
					t.Logf("%d entries, %d calls: %q", listed, n, logs.lines)
				}
				if logs.count("readdir loop", "/loop") != 1 {
					t.Fatalf("want one log line of a readdir loop naming the directory; got %q", logs.lines)
				}
				// The stream stays failed: continuing sends nothing more.
				before := s.Count("READDIR") + s.Count("READDIRPLUS")
				err = fs.ReadDir(ctx, root, dh, off, false, func(*DirEntry) bool { return true })
				s = fs.Stats().Snapshot()
				if Errno(err) != syscall.EIO || s.Count("READDIR")+s.Count("READDIRPLUS") != before {
					t.Fatalf("continuing a failed listing: %v, %d more calls", err, s.Count("READDIR")+s.Count("READDIRPLUS")-before)
				}
			})
		}
	}
}

// TestListingSkipsImpossibleNames: entries whose names no directory can
// hold ("a/b", empty, with a NUL, over NAME_MAX) are skipped, with one log
// line per directory, and the rest is listed; a READDIRPLUS entry whose
// handle is over NFS3_FHSIZE or empty keeps its name, without a node, and
// a LOOKUP of it then finds the file.
func TestListingSkipsImpossibleNames(t *testing.T) {
	bad := [][]byte{[]byte("a/b"), {}, []byte("x\x00y"), bytes.Repeat([]byte("n"), 256), bytes.Repeat([]byte("m"), 5000)}
	for _, opts := range []string{"nordirplus", "rdirplus"} {
		t.Run(opts, func(t *testing.T) {
			ts := startServer(t)
			sub := filepath.Join(ts.dir, "names")
			os.Mkdir(sub, 0o755)
			want := map[string]bool{".": true, "..": true, "wide": true, "empty": true}
			for i := 0; i < 20; i++ {
				want["f"+strconv.Itoa(i)] = true
			}
			for name := range want {
				if name != "." && name != ".." {
					os.WriteFile(filepath.Join(sub, name), nil, 0o644)
				}
			}
			port := hostileFront(t, ts.nfsL.Addr().String(), func(proc uint32, args, res []byte) []byte {
				if !isListing(proc) {
					return res
				}
				l := decodeListing(proc, res)
				if l.res.Status != nfs3.OK || len(l.res.Entries) == 0 {
					return res
				}
				var ents []nfs3.DirEntryPlus
				for i, e := range l.res.Entries {
					switch string(e.Name) {
					case "wide":
						e.FH = nfs3.PostOpFH{Present: true, FH: bytes.Repeat([]byte{7}, nfs3.FHSize+1)}
					case "empty":
						e.FH = nfs3.PostOpFH{Present: true, FH: nfs3.FH{}}
					}
					ents = append(ents, e)
					if i == 0 { // after the first entry, resuming where it does
						for _, name := range bad {
							ents = append(ents, nfs3.DirEntryPlus{Fileid: 999, Name: name, Cookie: e.Cookie, Attr: e.Attr, FH: e.FH})
						}
					}
				}
				l.res.Entries = ents
				return l.encode()
			})
			// lookupcache=none: no complete listing kept, so the second
			// listing reads the same replies again.
			fs, logs := ts.mountLogged(t, port, "lookupcache=none,"+opts)
			ctx := ctxT(t)
			e, err := fs.Lookup(ctx, root, RootID, "names")
			if err != nil {
				t.Fatal(err)
			}
			defer fs.Forget(e.Node, 1)
			for pass := 0; pass < 2; pass++ {
				dh, err := fs.OpenDir(ctx, root, e.Node)
				if err != nil {
					t.Fatal(err)
				}
				seen := map[string]int{}
				err = fs.ReadDir(ctx, root, dh, 0, true, func(de *DirEntry) bool {
					seen[de.Name]++
					switch {
					case opts == "nordirplus", de.Name == "." || de.Name == "..":
					case de.Name == "wide" || de.Name == "empty":
						if de.Entry.Node != 0 {
							t.Errorf("%q listed with a node made of an unusable handle", de.Name)
						}
					case de.Entry.Node == 0:
						t.Errorf("%q listed without its node", de.Name)
					}
					if de.Entry.Node != 0 {
						fs.Forget(de.Entry.Node, 1)
					}
					return true
				})
				fs.ReleaseDir(dh)
				if err != nil {
					t.Fatalf("pass %d: listing failed: %v", pass, err)
				}
				for name := range want {
					if seen[name] != 1 {
						t.Errorf("pass %d: %.40q listed %d times", pass, name, seen[name])
					}
				}
				for name := range seen {
					if !want[name] {
						t.Errorf("pass %d: listed %.40q, which no directory can hold", pass, name)
					}
				}
			}
			if n := logs.count("/names", "cannot be names"); n != 1 {
				t.Errorf("%d log lines of skipped names, want 1: %q", n, logs.lines)
			}
			if n := logs.count("/names", "handle"); opts == "rdirplus" && n != 1 {
				t.Errorf("%d log lines of dropped handles, want 1: %q", n, logs.lines)
			}
			// The handle comes from a LOOKUP.
			for _, name := range []string{"wide", "empty"} {
				le, err := fs.Lookup(ctx, root, e.Node, name)
				if err != nil || le.Node == 0 {
					t.Fatalf("lookup of %q: %v", name, err)
				}
				fs.Forget(le.Node, 1)
			}
		})
	}
}

// TestReadlinkTooLong: a symbolic link's target the kernel cannot take
// (PATH_MAX, 4,096 bytes, or more) is ENAMETOOLONG, never EIO or a
// truncated target; 4,095 bytes is a target like any other.
func TestReadlinkTooLong(t *testing.T) {
	ts := startServer(t)
	sizes := map[string]int{"l4095": 4095, "l4096": 4096, "l70000": 70000}
	for name := range sizes {
		if err := os.Symlink(name, filepath.Join(ts.dir, name)); err != nil {
			t.Fatal(err)
		}
	}
	port := hostileFront(t, ts.nfsL.Addr().String(), func(proc uint32, args, res []byte) []byte {
		if proc != nfs3.ProcReadlink {
			return res
		}
		var r nfs3.ReadlinkRes
		r.Decode(xdr.NewDecoder(res))
		if n, ok := sizes[string(r.Data)]; ok && r.Status == nfs3.OK {
			r.Data = bytes.Repeat([]byte("t"), n)
		}
		return r.Append(nil)
	})
	fs := ts.mountVia(t, port, "")
	ctx := ctxT(t)
	for name, size := range sizes {
		e, err := fs.Lookup(ctx, root, RootID, name)
		if err != nil {
			t.Fatal(err)
		}
		target, err := fs.Readlink(ctx, root, e.Node)
		fs.Forget(e.Node, 1)
		switch {
		case size < 4096 && (err != nil || len(target) != size):
			t.Errorf("%s: readlink: %d bytes, %v; want the %d-byte target", name, len(target), err, size)
		case size >= 4096 && !errors.Is(err, syscall.ENAMETOOLONG):
			t.Errorf("%s: readlink: %d bytes, %v; want ENAMETOOLONG", name, len(target), err)
		}
	}
}

// TestLookupUnusableHandle: a LOOKUP answered with an empty handle or one
// over NFS3_FHSIZE fails with EIO and makes no node (an empty handle would
// be one node for every such name).
func TestLookupUnusableHandle(t *testing.T) {
	ts := startServer(t)
	for _, name := range []string{"empty", "wide", "fine"} {
		os.WriteFile(filepath.Join(ts.dir, name), nil, 0o644)
	}
	port := hostileFront(t, ts.nfsL.Addr().String(), func(proc uint32, args, res []byte) []byte {
		if proc != nfs3.ProcLookup {
			return res
		}
		var a nfs3.LookupArgs
		a.Decode(xdr.NewDecoder(args))
		var r nfs3.LookupRes
		r.Decode(xdr.NewDecoder(res))
		switch string(a.What.Name) {
		case "empty":
			r.Obj = nfs3.FH{}
		case "wide":
			r.Obj = bytes.Repeat([]byte{9}, nfs3.FHSize+1)
		}
		return r.Append(nil)
	})
	fs := ts.mountVia(t, port, "")
	ctx := ctxT(t)
	nodes := fs.NodeCount()
	for _, name := range []string{"empty", "wide", "empty"} {
		if e, err := fs.Lookup(ctx, root, RootID, name); Errno(err) != syscall.EIO {
			t.Errorf("lookup of %q: node %d, %v; want EIO", name, e.Node, err)
		}
	}
	if n := fs.NodeCount(); n != nodes {
		t.Errorf("%d nodes after failed lookups, want %d", n, nodes)
	}
	e, err := fs.Lookup(ctx, root, RootID, "fine")
	if err != nil {
		t.Fatal(err)
	}
	fs.Forget(e.Node, 1)
}

// TestCreateUnusableHandle: a CREATE or MKDIR that happened but was
// answered with an empty handle or one over NFS3_FHSIZE (both optional in
// the reply) succeeds: the new name is looked up for its handle.
func TestCreateUnusableHandle(t *testing.T) {
	ts := startServer(t)
	os.Chmod(ts.dir, 0o777) // the test server squashes root
	port := hostileFront(t, ts.nfsL.Addr().String(), func(proc uint32, args, res []byte) []byte {
		if proc != nfs3.ProcCreate && proc != nfs3.ProcMkdir {
			return res
		}
		var r nfs3.DirOpRes
		r.Decode(xdr.NewDecoder(res))
		if r.Status == nfs3.OK {
			r.Obj = nfs3.PostOpFH{Present: true, FH: bytes.Repeat([]byte{5}, nfs3.FHSize+1)}
			if proc == nfs3.ProcMkdir {
				r.Obj.FH = nfs3.FH{}
			}
		}
		return r.Append(nil)
	})
	fs := ts.mountVia(t, port, "")
	ctx := ctxT(t)
	nodes := fs.NodeCount()
	f, err := fs.Mknod(ctx, root, RootID, "file", syscall.S_IFREG|0o644, 0)
	if err != nil {
		t.Fatalf("create answered with a 65-byte handle: %v", err)
	}
	d, err := fs.Mkdir(ctx, root, RootID, "dir", 0o755)
	if err != nil {
		t.Fatalf("mkdir answered with an empty handle: %v", err)
	}
	if f.Node == d.Node {
		t.Fatal("the file and the directory are one node")
	}
	if s := fs.Stats().Snapshot(); s.Count("LOOKUP") != 2 {
		t.Errorf("%d LOOKUPs, want one per unusable handle", s.Count("LOOKUP"))
	}
	if _, err := fs.Mknod(ctx, root, d.Node, "inside", syscall.S_IFREG|0o644, 0); err != nil {
		t.Fatalf("create in the new directory: %v", err)
	}
	fs.Forget(f.Node, 1)
	fs.Forget(d.Node, 1)
	if n := fs.NodeCount(); n != nodes+1 { // "inside" is still referenced
		t.Errorf("%d nodes, want %d", n, nodes+1)
	}
}
