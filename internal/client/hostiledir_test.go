package client

import (
	"context"
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
