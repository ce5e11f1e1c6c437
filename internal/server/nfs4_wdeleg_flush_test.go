package server

import (
	"os"
	"path/filepath"
	"testing"
	"time"

	"hushfs/internal/nfs4"
)

// A client may return a recalled write delegation while it still has the
// file open for writing and data to send (Linux 6.1 does: its close(2)
// under the delegation did not wait for the write-back, and its
// DELEGRETURN does not either). A local reader whose open broke the lease
// must then wait for those WRITEs, until the client closes, else it reads
// a prefix of what the client's application had already closed.
func TestV4LocalReaderWaitsForReturnedWriterToClose(t *testing.T) {
	e := startEnvTuned(t, false, func(c *Config) { c.Delegations = true })
	a, h := e.v4cb(false, false)
	open, fh := writeDelegated(t, e, a, "f")
	a.must(putFH(fh), writeOp(open.Delegation.Stateid, 0, "first half, "))

	done := make(chan string, 1)
	go func() {
		b, err := os.ReadFile(filepath.Join(e.root, "f"))
		if err != nil {
			done <- "error: " + err.Error()
			return
		}
		done <- string(b)
	}()
	sid := recallOf(t, h)
	a.must(putFH(fh), nfs4.Argop{Op: nfs4.OpDelegReturn, Args: &nfs4.DelegReturnArgs{Stateid: sid}})
	select {
	case got := <-done:
		t.Fatalf("the local reader went ahead at the DELEGRETURN, the writer's open still held: read %q", got)
	case <-time.After(300 * time.Millisecond):
	}
	a.must(putFH(fh), writeOp(open.Stateid, 12, "second half"))
	a.must(putFH(fh), nfs4.Argop{Op: nfs4.OpClose, Args: &nfs4.CloseArgs{Stateid: open.Stateid}})
	select {
	case got := <-done:
		if got != "first half, second half" {
			t.Fatalf("the local reader read %q", got)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the local reader still waits after the writer's CLOSE")
	}
}

// The holder flushing under its recalled delegation before returning it
// (as the hushfs client does): its first WRITE used to let the lease go,
// and the local reader read what had arrived by then.
func TestV4LocalReaderWaitsForHolderFlush(t *testing.T) {
	e := startEnvTuned(t, false, func(c *Config) { c.Delegations = true })
	a, h := e.v4cb(false, false)
	open, fh := writeDelegated(t, e, a, "f")

	done := make(chan string, 1)
	go func() {
		b, err := os.ReadFile(filepath.Join(e.root, "f"))
		if err != nil {
			done <- "error: " + err.Error()
			return
		}
		done <- string(b)
	}()
	sid := recallOf(t, h)
	a.must(putFH(fh), writeOp(sid, 0, "first half, "))
	select {
	case got := <-done:
		t.Fatalf("the local reader went ahead at the holder's first WRITE: read %q", got)
	case <-time.After(300 * time.Millisecond):
	}
	a.must(putFH(fh), writeOp(sid, 12, "second half"))
	a.must(putFH(fh), nfs4.Argop{Op: nfs4.OpClose, Args: &nfs4.CloseArgs{Stateid: open.Stateid}})
	a.must(putFH(fh), nfs4.Argop{Op: nfs4.OpDelegReturn, Args: &nfs4.DelegReturnArgs{Stateid: sid}})
	select {
	case got := <-done:
		if got != "first half, second half" {
			t.Fatalf("the local reader read %q", got)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the local reader still waits after the DELEGRETURN")
	}
}

// A writer that keeps the file open but sends nothing after returning
// holds a local reader back only briefly (writerIdle), not for the
// lease-break time.
func TestV4LocalReaderNotHeldByIdleWriter(t *testing.T) {
	e := startEnvTuned(t, false, func(c *Config) { c.Delegations = true })
	a, h := e.v4cb(false, false)
	open, fh := writeDelegated(t, e, a, "f")
	a.must(putFH(fh), writeOp(open.Delegation.Stateid, 0, "all of it"))

	done := make(chan string, 1)
	go func() {
		b, _ := os.ReadFile(filepath.Join(e.root, "f"))
		done <- string(b)
	}()
	sid := recallOf(t, h)
	a.must(putFH(fh), nfs4.Argop{Op: nfs4.OpDelegReturn, Args: &nfs4.DelegReturnArgs{Stateid: sid}})
	select {
	case got := <-done:
		if got != "all of it" {
			t.Fatalf("the local reader read %q", got)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("an idle writer's open held the local reader back for 5 s")
	}
}
