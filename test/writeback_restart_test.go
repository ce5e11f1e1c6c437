package test

import (
	"bytes"
	"crypto/rand"
	"os"
	"path/filepath"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"hushfs/internal/client"
	"hushfs/internal/fusefs"
	"hushfs/test/harness"
)

// statsNoFork reads a mount's statistics without starting a process: a
// child would close the test's inherited descriptors at exec, and every
// close of a descriptor is a flush.
func statsNoFork(t *testing.T, mnt string) client.Snapshot {
	t.Helper()
	s, err := fusefs.ReadSnapshot(mnt)
	if err != nil {
		t.Fatalf("statistics of %s: %v", mnt, err)
	}
	return s
}

// TestWriteBackSurvivesServerSIGKILL: data written UNSTABLE, the server
// process SIGKILLed and restarted before the COMMIT: after close the file on
// the server is byte-exact, and the counts show the data was sent again
// (the acknowledged WRITEs again and a second COMMIT, after the verifier
// change).
func TestWriteBackSurvivesServerSIGKILL(t *testing.T) {
	requireMountTools(t)
	bin := harness.BuildHushfs(t)
	export, mnt := t.TempDir(), t.TempDir()
	s := harness.StartServe(t, export)
	harness.MountServe(t, bin, s, mnt, "hard")
	data := make([]byte, 4<<20)
	rand.Read(data)
	// Not close-on-exec: restarting the server forks, and a child closing
	// this descriptor at exec would be a flush that needs the very server
	// being started (a deadlock of the test's own making). Inherited, the
	// descriptor just stays open in the new server process.
	fd, err := unix.Open(filepath.Join(mnt, "big"), unix.O_CREAT|unix.O_WRONLY|unix.O_TRUNC, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	// Four 1 MiB chunks: three stream out UNSTABLE at once (two dirty back
	// to back), the last stays dirty until close.
	for off := 0; off < len(data); off += 1 << 20 {
		if _, err := unix.Write(fd, data[off:off+1<<20]); err != nil {
			t.Fatal(err)
		}
	}
	// Wait until the streamed chunks are acknowledged UNSTABLE.
	var before client.Snapshot
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		if before = statsNoFork(t, mnt); before.Count("WRITE") >= 2 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("streamed WRITEs not acknowledged: %d", before.Count("WRITE"))
		}
	}
	// The server dies with the UNSTABLE data in its page cache, uncommitted.
	s.Restart(t)
	if err := unix.Close(fd); err != nil {
		t.Fatalf("close after the server restarted: %v", err)
	}
	after := statsNoFork(t, mnt)
	writes := after.Count("WRITE") - before.Count("WRITE")
	commits := after.Count("COMMIT") - before.Count("COMMIT")
	t.Logf("before restart: WRITE %d COMMIT %d; after close: %d more WRITE, %d more COMMIT",
		before.Count("WRITE"), before.Count("COMMIT"), writes, commits)
	if before.Count("COMMIT") != 0 {
		t.Fatalf("COMMIT before close: %d", before.Count("COMMIT"))
	}
	// What was still dirty goes out at close; the first COMMIT shows a new
	// write verifier, so every chunk acknowledged before the restart is
	// sent again and committed by a second COMMIT.
	if minW := 1 + before.Count("WRITE"); writes < minW || commits != 2 {
		t.Fatalf("after the restart: %d WRITE, %d COMMIT; want at least %d and exactly 2 (the verifier change resends)", writes, commits, minW)
	}
	got, err := os.ReadFile(filepath.Join(export, "big"))
	if err != nil || !bytes.Equal(got, data) {
		t.Fatalf("file on the server differs after the restart (%d bytes, %v)", len(got), err)
	}
}
