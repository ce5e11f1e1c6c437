package client

import (
	"os"
	"path/filepath"
	"sync"
	"syscall"
	"testing"
	"time"

	"hushfs/internal/nfs3"
	"hushfs/internal/proto"
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

// TestOpenWaitsForTruncate: an open of a file whose truncate (a SETATTR of
// its size) is under way on this mount answers only once the truncate is
// done. The kernel takes no attributes of a file while its truncate runs
// (FUSE_I_SIZE_UNSTABLE), so an open answered meanwhile could not give it
// the size the open found: a reader stopped at the size the kernel had
// cached, an older version than the last close (the recall soak, while a
// client's truncate waited for another client's delegation to come back).
func TestOpenWaitsForTruncate(t *testing.T) {
	fs, e, release, truncated := heldTruncate(t)
	ctx := ctxT(t)
	opened := make(chan error, 1)
	go func() {
		fh, _, err := fs.Open(ctx, root, e.Node, syscall.O_RDONLY)
		if err == nil {
			fs.Release(ctx, fh)
		}
		opened <- err
	}()
	select {
	case err := <-opened:
		t.Fatalf("the open answered (%v) while the truncate's SETATTR was on its way", err)
	case <-time.After(300 * time.Millisecond):
	}
	release()
	noErr(t, <-truncated)
	select {
	case err := <-opened:
		noErr(t, err)
	case <-time.After(10 * time.Second):
		t.Fatal("the open did not answer after the truncate")
	}
}

// heldTruncate mounts a server whose SETATTRs a front holds, and starts a
// truncate of the file "f" (10 bytes, to 4): it returns once the
// truncate's SETATTR is held, with what releases it and the truncate's
// result.
func heldTruncate(t *testing.T) (*FS, Entry, func(), <-chan error) {
	ts := startServer(t)
	p := filepath.Join(ts.dir, "f")
	noErr(t, os.WriteFile(p, []byte("0123456789"), 0o666))
	noErr(t, os.Chmod(p, 0o666))
	front := startHoldFront(t, ts.nfsL.Addr().String(), func(proc uint32, _ []byte) bool {
		return proc == nfs3.ProcSetattr
	})
	fs := mountVia(t, ts, front.port, "")
	var once sync.Once
	release := func() { once.Do(func() { close(front.released) }) }
	// Before the unmount (cleanups run last first): a failed test must not
	// leave the SETATTR held.
	t.Cleanup(release)
	ctx := ctxT(t)
	e, err := fs.Lookup(ctx, root, RootID, "f")
	noErr(t, err)
	front.armed.Store(true)
	truncated := make(chan error, 1)
	go func() {
		_, _, err := fs.SetAttr(ctx, root, e.Node, SetAttrIn{SetSize: true, Size: 4})
		truncated <- err
	}()
	awaitHeld(t, front)
	return fs, e, release, truncated
}

// TestGetAttrWaitsForTruncate: a GETATTR of a file whose truncate is
// under way on this mount answers only once the truncate is done, as an
// open does (TestOpenWaitsForTruncate): the kernel drops attribute replies
// for the file meanwhile, so a reader that opened just before the truncate
// began read with the size the kernel had cached before another client's
// append (the recall soak: the append's old version, read after its close).
func TestGetAttrWaitsForTruncate(t *testing.T) {
	fs, e, release, truncated := heldTruncate(t)
	ctx := ctxT(t)
	type got struct {
		a   Attr
		err error
	}
	stat := make(chan got, 1)
	go func() {
		a, _, err := fs.GetAttr(ctx, root, e.Node)
		stat <- got{a, err}
	}()
	select {
	case g := <-stat:
		t.Fatalf("GETATTR answered (size %d, %v) while the truncate's SETATTR was on its way", g.a.Size, g.err)
	case <-time.After(300 * time.Millisecond):
	}
	release()
	noErr(t, <-truncated)
	select {
	case g := <-stat:
		noErr(t, g.err)
		if g.a.Size != 4 {
			t.Errorf("GETATTR after the truncate: size %d, want 4", g.a.Size)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("GETATTR did not answer after the truncate")
	}
}

// TestTruncateAfterDowngrade: a truncate(2) that picked its open's
// stateid while the open still had write access, and reached the server
// after a writer's release narrowed it (OPEN_DOWNGRADE), is refused
// OPENMODE; it is sent again under no open (the anonymous stateid, as
// for a file not open here) rather than failing with EBADF (the recall
// soak, once in 2 minutes). The race is made by giving the open back its
// write access here after the downgrade.
func TestTruncateAfterDowngrade(t *testing.T) {
	ts := startServer(t)
	p := filepath.Join(ts.dir, "f")
	noErr(t, os.WriteFile(p, []byte("0123456789"), 0o666))
	noErr(t, os.Chmod(p, 0o666))
	fs := ts.mount(t, "vers=4.1")
	ctx := ctxT(t)
	e, err := fs.Lookup(ctx, root, RootID, "f")
	noErr(t, err)
	w, _, err := fs.Open(ctx, root, e.Node, syscall.O_RDWR)
	noErr(t, err)
	r, _, err := fs.Open(ctx, root, e.Node, syscall.O_RDONLY)
	noErr(t, err)
	defer fs.Release(ctx, r)
	fs.Release(ctx, w)
	if fs.Stats().Snapshot().Count("OPEN_DOWNGRADE") != 1 {
		t.Fatalf("no OPEN_DOWNGRADE at the writer's release: %v", fs.Stats().Snapshot().Ops)
	}
	n, _ := fs.node(e.Node)
	no := fs.opensOf(n)
	no.vmu.Lock()
	no.owners[root.UID].held |= proto.ShareWrite // as picked before the downgrade
	no.vmu.Unlock()
	if _, _, err := fs.SetAttr(ctx, root, e.Node, SetAttrIn{SetSize: true, Size: 4}); err != nil {
		t.Fatalf("truncate: %v", err)
	}
	if got, _ := os.ReadFile(p); string(got) != "0123" {
		t.Errorf("the server's file after truncate(4): %q", got)
	}
}
