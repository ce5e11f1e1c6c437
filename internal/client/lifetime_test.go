package client

import (
	"bytes"
	"context"
	"errors"
	"os"
	"path/filepath"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"hushfs/internal/nfs3"
)

// writeHolder fronts ts with a server that leaves WRITEs unanswered while
// hold is set (their retransmissions too), as a server that went away.
func writeHolder(t *testing.T, ts *testServer) (port int, hold *atomic.Bool) {
	hold = &atomic.Bool{}
	hold.Store(true)
	port = hostileFront(t, ts.nfsL.Addr().String(), func(proc uint32, args, res []byte) []byte {
		if proc == nfs3.ProcWrite && hold.Load() {
			return nil
		}
		return res
	})
	return port, hold
}

// TestFlushLetGoKeepsData: a close whose write-back the server does not
// answer (hard mount) returns when its caller gives up (a killed process),
// and the data, kept, reaches the server once it answers.
func TestFlushLetGoKeepsData(t *testing.T) {
	ts := startServer(t)
	port, hold := writeHolder(t, ts)
	fs := ts.mountVia(t, port, "hard,timeo=1,retrans=1")
	t.Cleanup(func() { hold.Store(false) }) // before the unmount at cleanup
	ctx := ctxT(t)
	_, fh, err := fs.Create(ctx, root, RootID, "f", uint32(os.O_WRONLY), 0o644)
	if err != nil {
		t.Fatal(err)
	}
	data := bytes.Repeat([]byte("let go, keep the data. "), 4000)
	if _, err := fs.Write(ctx, root, fh, 0, data); err != nil {
		t.Fatal(err)
	}
	gone, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- fs.Flush(gone, root, fh) }()
	select {
	case err := <-done:
		t.Fatalf("Flush returned %v with its WRITE unanswered", err)
	case <-time.After(300 * time.Millisecond):
	}
	cancel() // the caller is killed
	select {
	case err := <-done:
		if !errors.Is(err, context.Canceled) || Errno(err) != syscall.EINTR {
			t.Fatalf("Flush let go: %v (errno %v), want Canceled (EINTR)", err, Errno(err))
		}
	case <-time.After(5 * time.Second):
		t.Fatal("Flush still waiting 5 s after its caller gave up")
	}
	hold.Store(false) // the server is back: the retransmitted WRITE gets through
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		if got, _ := os.ReadFile(filepath.Join(ts.dir, "f")); bytes.Equal(got, data) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the data of the abandoned close never reached the server")
		}
	}
	fs.Release(ctx, fh)
	if err := fs.Close(ctx); err != nil {
		t.Fatalf("Close: %v", err)
	}
}

// TestCloseReportsUnwritten: unmounting a hard mount whose server does not
// answer ends at the server's next major timeout (100 + 200 ms here) and
// names each file left unwritten, with its bytes.
func TestCloseReportsUnwritten(t *testing.T) {
	ts := startServer(t)
	port, hold := writeHolder(t, ts)
	fs := ts.mountVia(t, port, "hard,timeo=1,retrans=1")
	t.Cleanup(func() { hold.Store(false) }) // before the unmount at cleanup
	ctx := ctxT(t)
	sub, err := fs.Mkdir(ctx, root, RootID, "sub", 0o755)
	if err != nil {
		t.Fatal(err)
	}
	_, fh, err := fs.Create(ctx, root, sub.Node, "f", uint32(os.O_WRONLY), 0o644)
	if err != nil {
		t.Fatal(err)
	}
	data := make([]byte, 12345)
	if _, err := fs.Write(ctx, root, fh, 0, data); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	done := make(chan error, 1)
	go func() { done <- fs.Close(context.Background()) }()
	var err2 error
	select {
	case err2 = <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("Close still writing back 10 s after it began, its server not answering")
	}
	t.Logf("Close after %v: %v", time.Since(start).Round(time.Millisecond), err2)
	var lost *UnwrittenError
	if !errors.As(err2, &lost) {
		t.Fatalf("Close: %v, want an UnwrittenError", err2)
	}
	if len(lost.Files) != 1 || lost.Files[0].Path != "/sub/f" || lost.Files[0].Bytes != uint64(len(data)) {
		t.Fatalf("unwritten: %+v, want /sub/f with %d bytes", lost.Files, len(data))
	}
}
