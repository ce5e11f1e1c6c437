package client

import (
	"bytes"
	"context"
	"errors"
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"hushfs/internal/proto"
)

// holdOpener holds the reply of the first OPEN it sends until hold is
// closed, telling held once that reply is in.
type holdOpener struct {
	proto.Opener
	held, hold chan struct{}
	first      bool
}

func (h *holdOpener) Open(ctx context.Context, c *proto.Cred, a proto.OpenArgs) (proto.OpenRes, error) {
	res, err := h.Opener.Open(ctx, c, a)
	if !h.first {
		h.first = true
		close(h.held)
		<-h.hold
	}
	return res, err
}

// TestOpenFirstReadOfOlderVersion: two opens of a file for reading, the
// file rewritten on the server between them, and the first open's reply
// (its OPEN's attributes and the data its READ brought) taken after the
// second's. The older reply's attributes are refused; its data must go
// with them, not become the newer version's (the recall soak read a
// rewritten file's new size filled with the old version's bytes).
func TestOpenFirstReadOfOlderVersion(t *testing.T) {
	ts := startServer(t)
	path := filepath.Join(ts.dir, "f")
	older := bytes.Repeat([]byte("older version\n"), 100)
	newer := bytes.Repeat([]byte("newer\n"), 77)
	if err := os.WriteFile(path, older, 0o644); err != nil {
		t.Fatal(err)
	}
	fs := ts.mount(t, "vers=4.1")
	if fs.opener == nil {
		t.Fatal("vers=4.1 mount without an opener")
	}
	h := &holdOpener{Opener: fs.opener, held: make(chan struct{}), hold: make(chan struct{})}
	fs.opener = h
	ctx := ctxT(t)
	e, err := fs.Lookup(ctx, root, RootID, "f")
	if err != nil {
		t.Fatal(err)
	}
	type opened struct {
		fh  uint64
		err error
	}
	done := make(chan opened, 1)
	go func() {
		fh, _, err := fs.Open(ctx, root, e.Node, syscall.O_RDONLY)
		done <- opened{fh, err}
	}()
	select {
	case <-h.held:
	case <-time.After(10 * time.Second):
		t.Fatal("the first OPEN never came back")
	}
	time.Sleep(10 * time.Millisecond) // another ctime, whatever the clock's grain
	if err := os.WriteFile(path, newer, 0o644); err != nil {
		t.Fatal(err)
	}
	fh2, _, err := fs.Open(ctx, root, e.Node, syscall.O_RDONLY)
	if err != nil {
		t.Fatal(err)
	}
	defer fs.Release(ctx, fh2)
	close(h.hold)
	o := <-done
	if o.err != nil {
		t.Fatal(o.err)
	}
	defer fs.Release(ctx, o.fh)
	for _, fh := range []uint64{fh2, o.fh} {
		buf := make([]byte, 4096)
		n, err := fs.Read(ctx, root, fh, 0, buf)
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(buf[:n], newer) {
			t.Errorf("read %d bytes %q…, want the newer version (%d bytes)", n, buf[:min(n, 20)], len(newer))
		}
	}
}

// TestDataGenMovesWithEveryVersion: attributes of another version of a
// file move its data generation even while no data is held valid (after
// an invalidation, during an open): data read from the version before —
// a READ in flight, an OPEN's first read — is then never kept as the new
// version's.
func TestDataGenMovesWithEveryVersion(t *testing.T) {
	ts := startServer(t)
	if err := os.WriteFile(filepath.Join(ts.dir, "f"), []byte("data\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	fs := ts.mount(t, "vers=4.1")
	e, err := fs.Lookup(ctxT(t), root, RootID, "f")
	if err != nil {
		t.Fatal(err)
	}
	n, err := fs.node(e.Node)
	if err != nil {
		t.Fatal(err)
	}
	n.mu.Lock()
	defer n.mu.Unlock()
	for _, valid := range []bool{true, false} {
		n.dataValid, n.dataMtime, n.dataSize = valid, n.attr.Mtime, n.attr.Size
		gen := n.dataGen
		same := n.attr
		fs.setAttrLocked(n, &same, fs.now())
		if n.dataGen != gen {
			t.Errorf("data valid %v: the same version moved the data generation", valid)
		}
		next := n.attr
		next.Size += 10
		next.Ctime.Nsec = (next.Ctime.Nsec + 1) % 1e9
		next.Change++
		fs.setAttrLocked(n, &next, fs.now())
		if n.dataGen == gen {
			t.Errorf("data valid %v: another version left the data generation at %d", valid, gen)
		}
	}
}

// TestOpenOfRenamedOverFile: a file renamed over on the server while a
// descriptor of it is open here. An open() through the name the kernel
// cached reaches the old file, which the server keeps for that
// descriptor: the open fails ESTALE (the kernel then looks the name up
// again) instead of reading the old file, and the name leads to the new
// one; the descriptor still reads what it opened.
func TestOpenOfRenamedOverFile(t *testing.T) {
	ts := startServer(t)
	path := filepath.Join(ts.dir, "f")
	if err := os.WriteFile(path, []byte("old\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	fs := ts.mount(t, "vers=4.1")
	ctx := ctxT(t)
	e, err := fs.Lookup(ctx, root, RootID, "f")
	if err != nil {
		t.Fatal(err)
	}
	held, _, err := fs.Open(ctx, root, e.Node, syscall.O_RDONLY)
	if err != nil {
		t.Fatal(err)
	}
	defer fs.Release(ctx, held)
	if err := os.WriteFile(path+".tmp", []byte("new\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(path+".tmp", path); err != nil {
		t.Fatal(err)
	}
	read := func(fh uint64) string {
		t.Helper()
		buf := make([]byte, 64)
		n, err := fs.Read(ctx, root, fh, 0, buf)
		if err != nil {
			t.Fatal(err)
		}
		return string(buf[:n])
	}
	if fh, _, err := fs.Open(ctx, root, e.Node, syscall.O_RDONLY); !errors.Is(err, syscall.ESTALE) {
		if err == nil {
			t.Errorf("open of the renamed-over file through its old name: read %q, want ESTALE", read(fh))
			fs.Release(ctx, fh)
		} else {
			t.Errorf("open of the renamed-over file through its old name: %v, want ESTALE", err)
		}
	}
	e2, err := fs.Lookup(ctx, root, RootID, "f")
	if err != nil {
		t.Fatal(err)
	}
	if e2.Node == e.Node {
		t.Fatal("the name still leads to the renamed-over file")
	}
	fh, _, err := fs.Open(ctx, root, e2.Node, syscall.O_RDONLY)
	if err != nil {
		t.Fatal(err)
	}
	defer fs.Release(ctx, fh)
	if got := read(fh); got != "new\n" {
		t.Errorf("through the name looked up again: %q, want the new file's", got)
	}
	if got := read(held); got != "old\n" {
		t.Errorf("the descriptor held: %q, want what it opened", got)
	}
}

// TestOpenKeepsNoPagesBeforeDrop: an open that finds the file changed
// tells the kernel to drop its pages (no FOPEN_KEEP_CACHE); the kernel
// does so as that open returns to its caller. Another open answered
// before the kernel used the first descriptor must not tell it to keep
// them: its reader could read the old version from the pages (the recall
// soak: two readers of one client, the second open answered by the
// delegation the first one's OPEN brought, its reply in the kernel
// first). Once the kernel uses the first descriptor, or lets it go, the
// pages are the new version's and kept again. Over NFSv3 and NFSv4.1.
func TestOpenKeepsNoPagesBeforeDrop(t *testing.T) {
	for _, vers := range []string{"", "vers=4.1"} {
		ts := startServer(t)
		path := filepath.Join(ts.dir, "f")
		if err := os.WriteFile(path, []byte("first version\n"), 0o644); err != nil {
			t.Fatal(err)
		}
		fs := ts.mount(t, vers)
		ctx := ctxT(t)
		e, err := fs.Lookup(ctx, root, RootID, "f")
		if err != nil {
			t.Fatal(err)
		}
		open := func(what string, wantKeep bool) uint64 {
			t.Helper()
			fh, keep, err := fs.Open(ctx, root, e.Node, syscall.O_RDONLY)
			if err != nil {
				t.Fatalf("%q %s: %v", vers, what, err)
			}
			if keep != wantKeep {
				t.Errorf("%q %s: keep the kernel's pages %v, want %v", vers, what, keep, wantKeep)
			}
			return fh
		}
		fh := open("first open", false)
		buf := make([]byte, 100)
		if _, err := fs.Read(ctx, root, fh, 0, buf); err != nil {
			t.Fatal(err)
		}
		fs.Release(ctx, fh)
		fs.Release(ctx, open("open of the version the kernel holds", true))

		time.Sleep(10 * time.Millisecond) // another ctime, whatever the clock's grain
		if err := os.WriteFile(path, []byte("second, longer version\n"), 0o644); err != nil {
			t.Fatal(err)
		}
		fh1 := open("open after the change", false)
		fh2 := open("open before the kernel used the first", false)
		if _, err := fs.Read(ctx, root, fh1, 0, buf); err != nil {
			t.Fatal(err)
		}
		fh3 := open("open after the kernel used the first", false) // fh2 is not yet past its open
		fs.Release(ctx, fh2)
		if err := fs.Flush(ctx, root, fh3); err != nil {
			t.Fatal(err)
		}
		fs.Release(ctx, open("open with every dropping open past", true))
		fs.Release(ctx, fh1)
		fs.Release(ctx, fh3)
		n := fs.nodes.get(e.Node)
		n.mu.Lock()
		if n.dropping != 0 {
			t.Errorf("%q: %d opens still counted as dropping the pages after every release", vers, n.dropping)
		}
		n.mu.Unlock()
	}
}
