package client

import (
	"os"
	"path/filepath"
	"slices"
	"syscall"
	"testing"
)

// TestMadeDirectoryListing: a directory our MKDIR made answers lookups of
// absent names without a call, but is listed by the server (with "." and
// "..", which no listing of ours has).
func TestMadeDirectoryListing(t *testing.T) {
	ts := startServer(t)
	fs := ts.mount(t, "")
	ctx := ctxT(t)
	d, err := fs.Mkdir(ctx, user, RootID, "d", 0o755)
	if err != nil {
		t.Fatal(err)
	}
	_, fh, err := fs.Create(ctx, user, d.Node, "f", syscall.O_WRONLY|syscall.O_CREAT|syscall.O_EXCL, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	fs.Release(ctx, fh)
	resetCounts(ts, fs)
	if _, err := fs.Lookup(ctx, user, d.Node, "absent"); Errno(err) != syscall.ENOENT {
		t.Fatalf("lookup of an absent name: %v", err)
	}
	wantCalls(t, "lookup of an absent name", wireCalls(t, ts, fs), map[string]uint64{})
	dh, err := fs.OpenDir(ctx, user, d.Node)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	if err := fs.ReadDir(ctx, user, dh, 0, true, func(de *DirEntry) bool {
		names = append(names, de.Name)
		if de.Entry.Node != 0 {
			fs.Forget(de.Entry.Node, 1)
		}
		return true
	}); err != nil {
		t.Fatal(err)
	}
	fs.ReleaseDir(dh)
	slices.Sort(names)
	if !slices.Equal(names, []string{".", "..", "f"}) {
		t.Errorf("listing of the new directory: %q", names)
	}
	wantCalls(t, "listing", wireCalls(t, ts, fs), map[string]uint64{"READDIRPLUS": 1})
}

// TestMadeDirectoryChangedByAnother: once the directory we made shows a
// change we did not make, its names are asked of the server again.
func TestMadeDirectoryChangedByAnother(t *testing.T) {
	ts := startServer(t)
	fs := ts.mount(t, "")
	ctx := ctxT(t)
	d, err := fs.Mkdir(ctx, user, RootID, "d", 0o777)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := fs.Lookup(ctx, user, d.Node, "x"); Errno(err) != syscall.ENOENT {
		t.Fatalf("lookup before: %v", err)
	}
	if err := os.WriteFile(filepath.Join(ts.dir, "d", "x"), []byte("theirs"), 0o644); err != nil {
		t.Fatal(err)
	}
	fs.invalidateAttr(fs.nodes.get(d.Node)) // as when the attributes expire
	e, err := fs.Lookup(ctx, user, d.Node, "x")
	if err != nil || e.Attr.Size != 6 {
		t.Fatalf("lookup after another client's create: %v, %+v", err, e.Attr)
	}
}
