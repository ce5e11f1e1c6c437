package test

import (
	"archive/tar"
	"bytes"
	"context"
	"crypto/sha256"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"hushfs/internal/nfs3"
	"hushfs/test/harness"
)

// tarRecord is GNU tar's default record size (20 blocks of 512 bytes): tar
// reading a pipe processes whole records only, so the archive is fed in
// multiples of it.
const tarRecord = 20 * 512

// tarMember is one regular file of an archive made by makeSizedTar.
type tarMember struct {
	name  string
	size  int
	start int // offset of its data in the archive
	sum   [sha256.Size]byte
}

// tarModTime is the modification time of every member: tar sets it once a
// file's data is written, so a file on disk with this mtime has all its
// data there (the mount sends what it holds before setting times).
var tarModTime = time.Unix(1_700_000_000, 0)

// makeSizedTar builds a tar of n files in ten directories from a seeded
// generator: 0 to 64 KiB of random bytes each, except the files whose index
// is in big, which get that many bytes. The archive is padded to whole tar
// records.
func makeSizedTar(t *testing.T, n int, seed uint64, big map[int]int) ([]tarMember, []byte) {
	t.Helper()
	r := rand.New(rand.NewPCG(seed, seed+1))
	src := rand.NewChaCha8([32]byte{byte(seed), byte(seed >> 8), 'h', 'u', 's', 'h'})
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for d := range 10 {
		if err := tw.WriteHeader(&tar.Header{Typeflag: tar.TypeDir, Name: fmt.Sprintf("d%02d/", d), Mode: 0o755, ModTime: tarModTime}); err != nil {
			t.Fatal(err)
		}
	}
	members := make([]tarMember, 0, n)
	for i := range n {
		size := r.IntN(64<<10 + 1)
		if b, ok := big[i]; ok {
			size = b
		}
		data := make([]byte, size)
		src.Read(data)
		m := tarMember{name: fmt.Sprintf("d%02d/f%04d", i%10, i), size: size, sum: sha256.Sum256(data)}
		hdr := &tar.Header{Typeflag: tar.TypeReg, Name: m.name, Mode: 0o644, Size: int64(size), ModTime: tarModTime}
		if err := tw.WriteHeader(hdr); err != nil {
			t.Fatal(err)
		}
		// The header is out once the next write starts.
		if _, err := tw.Write(nil); err != nil {
			t.Fatal(err)
		}
		m.start = buf.Len()
		if _, err := tw.Write(data); err != nil {
			t.Fatal(err)
		}
		members = append(members, m)
	}
	if err := tw.Close(); err != nil {
		t.Fatal(err)
	}
	if pad := buf.Len() % tarRecord; pad != 0 {
		buf.Write(make([]byte, tarRecord-pad))
	}
	return members, buf.Bytes()
}

// roundUp rounds n up to a multiple of m.
func roundUp(n, m int) int { return (n + m - 1) / m * m }

// tarFeeder runs `tar -xf -` and feeds it an archive up to offsets the test
// chooses, so that the test knows how far tar can have got.
type tarFeeder struct {
	cmd     *exec.Cmd
	out     *lockedBuffer
	targets chan int
	fed     chan error    // one per target: nil once tar has been given everything up to it
	exited  chan struct{} // closed when tar has exited; err is then set
	err     error
}

func startTarFeeder(t *testing.T, ctx context.Context, archive []byte, dest string) *tarFeeder {
	t.Helper()
	f := &tarFeeder{out: &lockedBuffer{}, targets: make(chan int), fed: make(chan error, 4), exited: make(chan struct{})}
	f.cmd = exec.CommandContext(ctx, "tar", "-xf", "-", "-C", dest)
	f.cmd.Stdout, f.cmd.Stderr = f.out, f.out
	f.cmd.Dir = "/"
	f.cmd.WaitDelay = 2 * time.Second
	stdin, err := f.cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := f.cmd.Start(); err != nil {
		t.Fatalf("start tar: %v", err)
	}
	go func() {
		f.err = f.cmd.Wait()
		close(f.exited)
	}()
	t.Cleanup(func() {
		f.cmd.Process.Kill()
		select {
		case <-f.exited:
		case <-time.After(10 * time.Second):
			t.Errorf("tar pid %d still running 10 s after SIGKILL", f.cmd.Process.Pid)
		}
	})
	go func() {
		off := 0
		for to := range f.targets {
			_, err := stdin.Write(archive[off:to])
			off = to
			if off == len(archive) {
				stdin.Close() // end of archive
			}
			f.fed <- err
		}
	}()
	t.Cleanup(func() { close(f.targets) })
	return f
}

// feed hands tar the archive up to offset to (a multiple of tarRecord), and
// waits (at most 30 s) until tar has read all but what a pipe buffers.
func (f *tarFeeder) feed(t *testing.T, to int) {
	t.Helper()
	f.targets <- to
	select {
	case err := <-f.fed:
		if err != nil {
			t.Fatalf("feeding tar up to offset %d: %v\n%s", to, err, f.out.String())
		}
	case <-f.exited:
		t.Fatalf("tar exited while being fed up to offset %d: %v\n%s", to, f.err, f.out.String())
	case <-time.After(30 * time.Second):
		t.Fatalf("tar has not read up to offset %d after 30 s\n%s", to, f.out.String())
	}
}

// feedRest hands tar the rest of the archive without waiting; wait
// collects the outcome.
func (f *tarFeeder) feedRest(archive []byte) { go func() { f.targets <- len(archive) }() }

// wait waits for tar to exit after the last feed and returns its error.
func (f *tarFeeder) wait(d time.Duration) error {
	select {
	case <-f.exited:
		if f.err != nil {
			return fmt.Errorf("tar: %w\n%s", f.err, f.out.String())
		}
		select {
		case err := <-f.fed:
			return err
		default:
		}
		return nil
	case <-time.After(d):
		return fmt.Errorf("tar still running after %v\n%s", d, f.out.String())
	}
}

// waitUntil polls cond every 5 ms until it holds, failing the test after d
// or when tar exits first.
func (f *tarFeeder) waitUntil(t *testing.T, what string, d time.Duration, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(d)
	for !cond() {
		select {
		case <-f.exited:
			t.Fatalf("tar exited (%v) before %s\n%s", f.err, what, f.out.String())
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("no %s after %v\n%s", what, d, f.out.String())
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// doneOnDisk reports whether tar has written a member, as the server's disk
// shows it: full size and tar's modification time, set after the data.
func doneOnDisk(root string, m tarMember) bool {
	st, err := os.Stat(filepath.Join(root, m.name))
	return err == nil && st.Size() == int64(m.size) && st.ModTime().Equal(tarModTime)
}

// countOnDisk counts the regular files under root's ten directories.
func countOnDisk(root string) int {
	n := 0
	for d := range 10 {
		ents, _ := os.ReadDir(filepath.Join(root, fmt.Sprintf("d%02d", d)))
		n += len(ents)
	}
	return n
}

// TestFaultServerRestartUntar: `hushfs serve` is SIGKILLed twice while tar
// extracts 1,000 files (up to 64 KiB, and five of 1–4 MiB) onto a hard
// mount through the proxy, and each time restarted a second later on the
// same port and state directory (so handles stay valid and the write
// verifier changes). tar must exit 0 and every file be byte-exact through
// the mount and on the server's disk after unmounting.
//
// The first kill is placed, by feeding tar the archive through a pipe, in
// the middle of a 4 MiB file, once a streamed UNSTABLE WRITE of it has been
// acknowledged: that data is then uncommitted when the server dies, and the
// file's COMMIT after the restart must find a new verifier and have it sent
// again (the client's statistics count that). The second kill falls
// wherever tar is, two thirds in. Both outages leave calls to be sent again
// once the server is back, which the statistics show as retransmissions.
func TestFaultServerRestartUntar(t *testing.T) {
	requireMountTools(t)
	bin := harness.BuildHushfs(t)
	export, mnt := t.TempDir(), t.TempDir()
	s := harness.StartServe(t, export)
	p := startFaultProxy(t, bin, s.NFSAddr)
	m := mountThrough(t, bin, s, p, mnt, "hard")

	const n = 1000
	const bigAt = 333 // the file the first kill lands in
	big := map[int]int{150: 3<<20 + 12345, bigAt: 4 << 20, 500: 1<<20 + 777, 700: 2<<20 + 5, 850: 3 << 20}
	members, archive := makeSizedTar(t, n, 9, big)
	dest := filepath.Join(mnt, "untar")
	disk := filepath.Join(export, "untar")
	must(t, "mkdir", os.Mkdir(dest, 0o755))

	ctx, cancel := context.WithTimeout(context.Background(), 120*time.Second)
	defer cancel()
	start := time.Now()
	tf := startTarFeeder(t, ctx, archive, dest)

	// Up to the 4 MiB file's header (whole records, so a few KiB of its
	// data too) and until the file before it is complete: every WRITE
	// counted from here on is the big file's.
	target := members[bigAt]
	tf.feed(t, roundUp(target.start, tarRecord))
	tf.waitUntil(t, "file "+members[bigAt-1].name+" complete on the server", 30*time.Second,
		func() bool { return doneOnDisk(disk, members[bigAt-1]) })
	writes0 := statsNoFork(t, mnt).Count("WRITE")
	// Five eighths of it: at least two 1 MiB chunks are then dirty back to
	// back, and the first streams out UNSTABLE while tar waits for more.
	tf.feed(t, (target.start+target.size*5/8)/tarRecord*tarRecord)
	tf.waitUntil(t, "streamed WRITE of "+target.name+" acknowledged", 30*time.Second,
		func() bool { return statsNoFork(t, mnt).Count("WRITE") > writes0 })
	if r := statsNoFork(t, mnt).Resends; r.Commits != 0 {
		t.Fatalf("data sent again before any restart: %+v", r)
	}
	onDisk1 := countOnDisk(disk)
	killed1 := time.Now()
	s.Kill(t)
	// tar goes on at once: its next calls find the server gone.
	tf.feedRest(archive)
	time.Sleep(time.Second)
	s.StartAgain(t)
	t.Logf("first kill %v after the start, %d of %d files on the server; restarted after %v",
		killed1.Sub(start).Round(time.Millisecond), onDisk1, n, time.Since(killed1).Round(time.Millisecond))

	// The second kill: wherever tar is once two thirds of the files exist.
	tf.waitUntil(t, "two thirds of the files on the server", 60*time.Second,
		func() bool { return countOnDisk(disk) >= 2*n/3 })
	onDisk2 := countOnDisk(disk)
	killed2 := time.Now()
	s.Kill(t)
	time.Sleep(time.Second)
	s.StartAgain(t)
	t.Logf("second kill %v after the start, %d files on the server; restarted after %v",
		killed2.Sub(start).Round(time.Millisecond), onDisk2, time.Since(killed2).Round(time.Millisecond))

	if err := tf.wait(time.Until(start.Add(110 * time.Second))); err != nil {
		t.Fatalf("%v\nmount daemon:\n%s", err, m.Output())
	}
	untarred := time.Since(start)
	sums := map[string][sha256.Size]byte{}
	for _, mb := range members {
		sums[mb.name] = mb.sum
	}
	checkSums(t, sums, dest)

	st := m.Stats(t)
	var ops, trans uint64
	for _, name := range st.Names() {
		if strings.Contains(name, ":") {
			continue
		}
		o := st.Ops[name]
		ops += o.Ops
		trans += o.Transmissions
		if o.Transmissions > o.Ops {
			t.Logf("%s: %d calls, %d transmissions", name, o.Ops, o.Transmissions)
		}
	}
	pc := p.Counts(t)
	t.Logf("untar of %d files (%d MiB) in %v; %d NFS calls, %d retransmissions; WRITE %d, COMMIT %d; "+
		"data sent again after a verifier change: %d COMMITs, %d bytes; proxy: %d WRITE, %d COMMIT, %d connections, %d refused for want of the server",
		n, len(archive)>>20, untarred.Round(time.Millisecond), ops, trans-ops, st.Count("WRITE"), st.Count("COMMIT"),
		st.Resends.Commits, st.Resends.Bytes, pc.NFS3(nfs3.ProcWrite), pc.Commits, pc.Conns, pc.DialErrors)
	if trans <= ops {
		t.Errorf("no retransmissions: %d calls, %d transmissions", ops, trans)
	}
	// The big file's acknowledged chunk (1 MiB at least) was sent again, and
	// its file committed a second time.
	if st.Resends.Commits < 1 || st.Resends.Bytes < 1<<20 {
		t.Errorf("data sent again after the verifier change: %+v; want at least one COMMIT and 1 MiB", st.Resends)
	}
	// tar sets a file's times and mode before closing it: the times wait
	// for the data, which goes out before the chmod's SETATTR, in one
	// FILE_SYNC WRITE where it fits in one. So one COMMIT per file of more
	// than 1 MiB (the big ones), and at most one more per verifier change
	// found (data resent in a single WRITE goes FILE_SYNC and needs none).
	if c := st.Count("COMMIT"); c < uint64(len(big)) || c > uint64(len(big))+st.Resends.Commits {
		t.Errorf("%d COMMITs, want %d to %d", c, len(big), uint64(len(big))+st.Resends.Commits)
	}
	if pc.DialErrors == 0 {
		t.Errorf("the proxy never found the server down: the kills missed the traffic")
	}
	if pc.NFS3(nfs3.ProcWrite) < st.Count("WRITE") {
		t.Errorf("the proxy saw %d WRITEs, the client made %d", pc.NFS3(nfs3.ProcWrite), st.Count("WRITE"))
	}

	// Everything is on the server's disk once the mount is gone (tar's
	// every close committed its file already).
	if err := m.Unmount(false); err != nil {
		if held := otherNamespacesHolding(m.Dir); len(held) > 0 {
			t.Logf("unmount: %v; the mount lives on in other mount namespaces: %s", err, strings.Join(held, "; "))
		} else {
			t.Fatalf("unmount: %v\n%s", err, m.Output())
		}
	}
	checkSums(t, sums, disk)
	if got := countOnDisk(disk); got != n {
		t.Errorf("%d files on the server, want %d", got, n)
	}
}
