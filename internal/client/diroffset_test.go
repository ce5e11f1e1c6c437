package client

import (
	"context"
	"os"
	"path/filepath"
	"strconv"
	"syscall"
	"testing"
)

// dirReader reads one open directory as the kernel does: calls of at most
// chunk entries, each continuing from the offset of the last entry taken.
type dirReader struct {
	t     *testing.T
	ctx   context.Context
	fs    *FS
	dh    uint64
	chunk int
}

// posEntry is an entry and the offset a telldir before it returned: where
// a seekdir must resume to read it next.
type posEntry struct {
	before uint64
	name   string
	off    uint64
}

// pass reads the directory from offset 0 to its end.
func (r *dirReader) pass() []posEntry {
	r.t.Helper()
	var out []posEntry
	off := uint64(0)
	for calls := 0; ; calls++ {
		got := 0
		err := r.fs.ReadDir(r.ctx, root, r.dh, off, false, func(de *DirEntry) bool {
			if got == r.chunk {
				return false
			}
			got++
			out = append(out, posEntry{before: off, name: de.Name, off: de.Cookie})
			off = de.Cookie
			return true
		})
		if err != nil {
			r.t.Fatalf("readdir at offset %d: %v", off, err)
		}
		if got == 0 {
			return out
		}
		if calls > 10_000 {
			r.t.Fatal("the listing does not end")
		}
	}
}

// at reads the entry after a seekdir to offset ("" at the end).
func (r *dirReader) at(offset uint64) string {
	r.t.Helper()
	name := ""
	err := r.fs.ReadDir(r.ctx, root, r.dh, offset, false, func(de *DirEntry) bool {
		if name != "" {
			return false
		}
		name = de.Name
		return true
	})
	if err != nil {
		r.t.Fatalf("readdir after seekdir to %d: %v", offset, err)
	}
	return name
}

// checkSeeks seekdirs to every offset of want (handed out by any earlier
// pass of the stream), in reverse order, and checks the entry read next is
// the one that followed it there, as order says now.
func (r *dirReader) checkSeeks(what string, offsets []posEntry, order []posEntry) {
	r.t.Helper()
	next := map[string]string{} // name → the name after it in order
	for i, e := range order {
		if i+1 < len(order) {
			next[e.name] = order[i+1].name
		} else {
			next[e.name] = ""
		}
	}
	for i := len(offsets) - 1; i >= 0; i-- {
		e := offsets[i]
		want, ok := next[e.name]
		if !ok {
			continue // gone: where it resumes is the server's to say
		}
		if got := r.at(e.off); got != want {
			r.t.Fatalf("%s: seekdir to the offset after %q read %q, want %q", what, e.name, got, want)
		}
	}
}

func names(p []posEntry) []string {
	var out []string
	for _, e := range p {
		out = append(out, e.name)
	}
	return out
}

// TestDirOffsetsStableAcrossPasses: the offsets one open directory hands
// out (telldir) stay valid in every later pass of it (rewinddir), whether
// a pass is read from the server or from the cached complete listing, and
// while the directory changes: a seekdir resumes after the same entry,
// and a rewound pass of an unchanged directory lists it in the same order.
func TestDirOffsetsStableAcrossPasses(t *testing.T) {
	ts := startServer(t)
	sub := filepath.Join(ts.dir, "d")
	os.Mkdir(sub, 0o777)
	os.Chmod(sub, 0o777) // the test server squashes root
	const n = 200
	for i := 0; i < n; i++ {
		os.WriteFile(filepath.Join(sub, strconv.Itoa(i)), nil, 0o666)
	}
	// actimeo=0: every pass from offset 0 revalidates the directory, so
	// another client's change is seen at the next rewind.
	fs := ts.mount(t, "actimeo=0,rsize=4096")
	ctx := ctxT(t)
	e, err := fs.Lookup(ctx, root, RootID, "d")
	if err != nil {
		t.Fatal(err)
	}
	dh, err := fs.OpenDir(ctx, root, e.Node)
	if err != nil {
		t.Fatal(err)
	}
	defer fs.ReleaseDir(dh)
	r := &dirReader{t: t, ctx: ctx, fs: fs, dh: dh, chunk: 7}
	readdirs := func() uint64 { return fs.Stats().Snapshot().Count("READDIR") }

	// Pass 1, from the server; seekdir within it.
	p1 := r.pass()
	if len(p1) != n+2 {
		t.Fatalf("pass 1 listed %d entries, want %d", len(p1), n+2)
	}
	r.checkSeeks("pass 1 (server)", p1, p1)

	// Pass 2, from the complete listing: the same order, and pass 1's
	// offsets lead to the same entries.
	sent := readdirs()
	p2 := r.pass()
	if readdirs() != sent {
		t.Fatalf("pass 2 sent %d READDIRs, want it served from the complete listing", readdirs()-sent)
	}
	if a, b := names(p1), names(p2); len(a) != len(b) {
		t.Fatalf("pass 2 listed %d entries, pass 1 %d", len(b), len(a))
	} else {
		for i := range a {
			if a[i] != b[i] {
				t.Fatalf("pass 2 lists %q at position %d where pass 1 listed %q", b[i], i, a[i])
			}
		}
	}
	r.checkSeeks("pass 2 (cached) with pass 1's offsets", p1, p2)
	// seekdir to 0 is a new pass, read from its first entry.
	if got := r.at(0); got != p1[0].name {
		t.Fatalf("seekdir to 0 read %q, want %q", got, p1[0].name)
	}

	// Our own changes patch the listing: one name goes, one comes.
	gone := p1[len(p1)/2].name
	if err := fs.Unlink(ctx, root, e.Node, gone); err != nil {
		t.Fatal(err)
	}
	ne, err := fs.Mknod(ctx, root, e.Node, "new", syscall.S_IFREG|0o644, 0)
	if err != nil {
		t.Fatal(err)
	}
	fs.Forget(ne.Node, 1)
	sent = readdirs()
	p3 := r.pass()
	if readdirs() != sent {
		t.Fatalf("pass 3 sent %d READDIRs, want it served from the patched listing", readdirs()-sent)
	}
	r.checkSeeks("pass 3 (cached, patched) with pass 1's offsets", p1, p3)
	r.checkSeeks("pass 3 (cached, patched) with its own offsets", p3, p3)
	// The offset after the removed name resumes where it stood.
	for i, pe := range p1 {
		if pe.name == gone {
			if got := r.at(pe.off); got != p1[i+1].name {
				t.Fatalf("seekdir to the offset after removed %q read %q, want %q", gone, got, p1[i+1].name)
			}
		}
	}

	// Another client's change: the next pass comes from the server, and
	// the offsets of the cached passes still lead after the same entries.
	os.WriteFile(filepath.Join(sub, "other"), nil, 0o666)
	sent = readdirs()
	p4 := r.pass()
	if readdirs() == sent {
		t.Fatal("pass 4 sent no READDIR after another client's change")
	}
	if len(p4) != n+3 {
		t.Fatalf("pass 4 listed %d entries, want %d", len(p4), n+3)
	}
	r.checkSeeks("pass 4 (server) with pass 3's offsets", p3, p4)
	r.checkSeeks("pass 4 (server) with pass 1's offsets", p1, p4)
	r.checkSeeks("pass 4 (server) with its own offsets", p4, p4)
}
