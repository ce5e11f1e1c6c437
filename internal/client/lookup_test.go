package client

import (
	"os"
	"path/filepath"
	"testing"
)

// TestLookedUpNameLeadsToHeldNode: a name learned by LOOKUP leads to the
// node the kernel was given. (It was recorded with a node made only for
// the recording and gone from the table at once: the kernel's next lookup
// of the name, when its dentry expired, was a LOOKUP again — one per name
// of every tree walked twice.)
func TestLookedUpNameLeadsToHeldNode(t *testing.T) {
	ts := startServer(t)
	if err := os.Mkdir(filepath.Join(ts.dir, "d"), 0o777); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(ts.dir, "d", "f"), nil, 0o666); err != nil {
		t.Fatal(err)
	}
	fs := ts.mount(t, "")
	ctx := ctxT(t)
	d, err := fs.Lookup(ctx, root, RootID, "d")
	if err != nil {
		t.Fatal(err)
	}
	f, err := fs.Lookup(ctx, root, d.Node, "f")
	if err != nil {
		t.Fatal(err)
	}
	before := fs.Stats().Snapshot().Total()
	for i := 0; i < 3; i++ {
		again, err := fs.Lookup(ctx, root, d.Node, "f")
		if err != nil || again.Node != f.Node {
			t.Fatalf("lookup again: node %d %v, want %d", again.Node, err, f.Node)
		}
	}
	if n := fs.Stats().Snapshot().Total() - before; n != 0 {
		t.Errorf("looking the name up again sent %d calls, want none", n)
	}
}
