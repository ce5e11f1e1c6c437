package client

import (
	"bytes"
	"crypto/rand"
	"os"
	"path/filepath"
	"sync/atomic"
	"syscall"
	"testing"

	"hushfs/internal/nfs3"
)

// shortReadFront answers every READ with at most max bytes of what the
// server sent, and no end of file where it cut the data short (legal in
// RFC 1813). It counts the READs.
func shortReadFront(t *testing.T, ts *testServer, max int) (port int, reads *atomic.Int64) {
	reads = &atomic.Int64{}
	port = hostileFront(t, ts.nfsL.Addr().String(), func(proc uint32, args, res []byte) []byte {
		if proc != nfs3.ProcRead {
			return res
		}
		reads.Add(1)
		return recode(t, res, func(r *nfs3.ReadRes) {
			if r.Status == nfs3.OK && len(r.Data) > max {
				r.Data, r.Count, r.EOF = r.Data[:max], uint32(max), false
			}
		})
	})
	return port, reads
}

// TestShortReadsReadOn: a server that sends at most 1000 bytes per READ
// (fewer than asked, without end of file) is read on from where each reply
// ended: the file read through the client is byte-exact, including where
// our own unsent data lies past the server's end of file (the bytes
// before it used to be taken as a hole: zeros). It used to take the
// first short reply as the end of the file.
func TestShortReadsReadOn(t *testing.T) {
	ts := startServer(t)
	data := make([]byte, 300<<10+123)
	rand.Read(data)
	if err := os.WriteFile(filepath.Join(ts.dir, "f"), data, 0o644); err != nil {
		t.Fatal(err)
	}
	os.Chmod(filepath.Join(ts.dir, "f"), 0o666) // root is squashed: writable by all
	port, reads := shortReadFront(t, ts, 1000)
	fs := ts.mountVia(t, port, "")
	ctx := ctxT(t)
	e, err := fs.Lookup(ctx, root, RootID, "f")
	if err != nil {
		t.Fatal(err)
	}
	fh, _, err := fs.Open(ctx, root, e.Node, syscall.O_RDWR)
	if err != nil {
		t.Fatal(err)
	}
	defer fs.Release(ctx, fh)

	got, err := readAsKernel(t, ctx, fs, fh)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, data) {
		t.Fatalf("read %d bytes of a %d-byte file through 1000-byte READs (equal prefix %d)", len(got), len(data), commonPrefix(got, data))
	}
	if min := int64(len(data) / 1000); reads.Load() < min {
		t.Fatalf("%d READs; at 1000 bytes each at least %d", reads.Load(), min)
	}

	// Our own data past the server's end of file, not yet sent.
	tail := []byte("tail")
	if _, err := fs.Write(ctx, root, fh, 400<<10, tail); err != nil {
		t.Fatal(err)
	}
	want := append(append(bytes.Clone(data), make([]byte, 400<<10-len(data))...), tail...)
	if got, err = readAsKernel(t, ctx, fs, fh); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, want) {
		t.Fatalf("with our data past the end: read %d bytes, want %d (equal prefix %d)", len(got), len(want), commonPrefix(got, want))
	}
}

// TestReadsWithoutProgressFail: a server whose READ replies carry neither
// data nor end of file gets a bounded number of READs, and the read fails
// with EIO (it used to end there as if at the end of the file: an empty
// file to the application).
func TestReadsWithoutProgressFail(t *testing.T) {
	ts := startServer(t)
	if err := os.WriteFile(filepath.Join(ts.dir, "f"), make([]byte, 5000), 0o644); err != nil {
		t.Fatal(err)
	}
	port, reads := shortReadFront(t, ts, 0)
	var logged atomic.Int64
	fs := ts.mountViaWith(t, port, "", nil, func(string, ...any) { logged.Add(1) })
	ctx := ctxT(t)
	e, err := fs.Lookup(ctx, root, RootID, "f")
	if err != nil {
		t.Fatal(err)
	}
	fh, _, err := fs.Open(ctx, root, e.Node, syscall.O_RDONLY)
	if err != nil {
		t.Fatal(err)
	}
	defer fs.Release(ctx, fh)
	n, err := fs.Read(ctx, root, fh, 0, make([]byte, 128<<10))
	if Errno(err) != syscall.EIO {
		t.Fatalf("read from a server sending no data and no end of file: %d bytes, %v; want EIO", n, err)
	}
	if r := reads.Load(); r != maxNoProgress {
		t.Errorf("%d READs, want %d", r, maxNoProgress)
	}
	if logged.Load() == 0 {
		t.Error("nothing logged")
	}
}

func commonPrefix(a, b []byte) int {
	i := 0
	for i < len(a) && i < len(b) && a[i] == b[i] {
		i++
	}
	return i
}
