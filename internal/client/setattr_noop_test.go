package client

import (
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"hushfs/internal/server"
)

func noErr(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

// TestTruncateToStaleSize: truncate(2) to the size the cache holds, after
// another writer changed the file, still reaches the server, over NFSv3
// and NFSv4.1: attributes within their lifetime may be stale, and a
// truncation dropped on their word is a lost write (the recall soak: a
// client's truncate then append left the other writer's whole file
// before the append). Under a delegation, whose attributes are the
// server's promise, the no-op is still dropped.
func TestTruncateToStaleSize(t *testing.T) {
	for _, vers := range []string{"vers=3", "vers=4.1"} {
		t.Run(vers, func(t *testing.T) {
			ts := startServerWith(t, func(c *server.Config) { c.Delegations = true })
			p := filepath.Join(ts.dir, "f")
			noErr(t, os.WriteFile(p, []byte("0123456789"), 0o644))
			noErr(t, os.Chmod(p, 0o666)) // root is squashed
			fs := ts.mount(t, vers+",actimeo=600")
			ctx := ctxT(t)
			e, err := fs.Lookup(ctx, root, RootID, "f")
			noErr(t, err)
			if e.Attr.Size != 10 {
				t.Fatalf("size %d after LOOKUP, want 10", e.Attr.Size)
			}
			// Another writer makes it longer; the cache still says 10.
			noErr(t, os.WriteFile(p, []byte("0123456789abcdefghij"), 0o644))
			if _, _, err := fs.SetAttr(ctx, root, e.Node, SetAttrIn{SetSize: true, Size: 10}); err != nil {
				t.Fatal(err)
			}
			if got, _ := os.ReadFile(p); string(got) != "0123456789" {
				t.Errorf("the server's file after truncate(10): %q, want %q", got, "0123456789")
			}
			if vers != "vers=4.1" {
				return
			}
			// Read under a delegation: its size is the server's promise.
			// (The server grants none until the back channel answered
			// its CB_NULL, nor while its own descriptor that truncated f
			// may still be open for writing: another file.)
			noErr(t, os.WriteFile(filepath.Join(ts.dir, "g"), []byte("0123456789"), 0o644))
			e, err = fs.Lookup(ctx, root, RootID, "g")
			noErr(t, err)
			n, _ := fs.node(e.Node)
			for i := 0; ; i++ {
				fh, _, err := fs.Open(ctx, root, e.Node, syscall.O_RDONLY)
				noErr(t, err)
				fs.Release(ctx, fh)
				n.mu.Lock()
				delegated := n.delegated
				n.mu.Unlock()
				if delegated {
					break
				}
				if i == 50 {
					t.Fatal("no read delegation after 50 opens for reading")
				}
				time.Sleep(100 * time.Millisecond)
			}
			before := fs.Stats().Snapshot().Count("SETATTR")
			if _, _, err := fs.SetAttr(ctx, root, e.Node, SetAttrIn{SetSize: true, Size: 10}); err != nil {
				t.Fatal(err)
			}
			if n := fs.Stats().Snapshot().Count("SETATTR") - before; n != 0 {
				t.Errorf("truncate to the delegated size: %d SETATTRs, want 0", n)
			}
		})
	}
}
