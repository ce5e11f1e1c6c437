package test

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"hushfs/test/fsx"
	"hushfs/test/harness"
)

// fuseV41 mounts ganesha's export over NFSv4.1 at a new directory.
func fuseV41(t *testing.T, bin string, g *harness.Ganesha, extra string) (*harness.Mount, string) {
	t.Helper()
	dir := t.TempDir()
	opts := fmt.Sprintf("vers=4.1,port=%d", g.NFSPort)
	if extra != "" {
		opts += "," + extra
	}
	return harness.StartMount(t, harness.MountSpec{Bin: bin, Server: g.Addr, Export: g.ExportPath, Dir: dir,
		Options: opts, NS: g.NS}), dir
}

// TestNFSv41Opens: each open() of a file is one COMPOUND (OPEN with the
// attributes and rights that close-to-open needs), a close that leaves a
// writer's descriptor's reader narrows the open (OPEN_DOWNGRADE), the last
// close queues a CLOSE, which an OPEN of the file takes back and which
// otherwise goes alone within a second, and the data goes through under
// the open.
func TestNFSv41Opens(t *testing.T) {
	requireMountTools(t)
	bin := harness.BuildHushfs(t)
	g := harness.StartGanesha(t, harness.GaneshaOptions{NFSv4: true})
	m, mnt := fuseV41(t, bin, g, "")
	// Larger than an OPEN reads in its COMPOUND (1 MiB): the reads go
	// under the open.
	data := pattern(1200<<10, 7)
	must(t, "write on the server", os.WriteFile(filepath.Join(g.ExportDir, "f"), data, 0o644))
	p := filepath.Join(mnt, "f")
	var st unix.Stat_t
	must(t, "stat", unix.Stat(p, &st)) // the name looked up: what follows counts opens only

	type step struct {
		name string
		do   func()
		want map[string]uint64
	}
	var rw, ro int
	var err error
	steps := []step{
		{"open O_RDWR", func() { rw, err = unix.Open(p, unix.O_RDWR, 0); must(t, "open", err) }, map[string]uint64{"OPEN": 1}},
		{"open O_RDONLY", func() { ro, err = unix.Open(p, unix.O_RDONLY, 0); must(t, "open", err) }, map[string]uint64{"OPEN": 1}},
		{"close the writer", func() { must(t, "close", unix.Close(rw)) }, map[string]uint64{"OPEN_DOWNGRADE": 1}},
		{"read it all", func() {
			got := make([]byte, len(data)+1)
			n, err := unix.Pread(ro, got, 0)
			must(t, "read", err)
			if !bytes.Equal(got[:n], data) {
				t.Errorf("read %d bytes, not what the server holds", n)
			}
		}, nil}, // counted below: READs under the open
		{"close the reader", func() { must(t, "close", unix.Close(ro)) }, map[string]uint64{}},
		{"open and close again", func() {
			fd, err := unix.Open(p, unix.O_RDONLY, 0)
			must(t, "open", err)
			must(t, "close", unix.Close(fd))
		}, map[string]uint64{"OPEN": 1}},
		{"a second", func() { time.Sleep(time.Second) }, map[string]uint64{"CLOSE": 1}},
	}
	prev := m.Stats(t)
	for _, s := range steps {
		s.do()
		cur := m.Stats(t)
		d := delta(prev, cur)
		t.Logf("%s: %s", s.name, opsLine(d.Ops))
		if s.want != nil {
			expectCounts(t, s.name, d, s.want)
		} else if d.Ops["READ"].Ops == 0 || len(d.Ops) != 1 {
			t.Errorf("%s: NFS calls %s, want READs only", s.name, opsLine(d.Ops))
		}
		prev = cur
	}

	// Written through the mount under an open, read back on the server.
	q := filepath.Join(mnt, "new")
	must(t, "write", os.WriteFile(q, data, 0o600))
	got, err := os.ReadFile(filepath.Join(g.ExportDir, "new"))
	must(t, "read on the server", err)
	if !bytes.Equal(got, data) {
		t.Errorf("the server holds %d bytes, not what was written", len(got))
	}
	// O_TRUNC: the SETATTR of the size goes under the open.
	must(t, "truncate", os.WriteFile(q, []byte("short"), 0o600))
	if got, _ := os.ReadFile(filepath.Join(g.ExportDir, "new")); string(got) != "short" {
		t.Errorf("after O_TRUNC the server holds %q", got)
	}
	// A file the caller may not write cannot be opened for writing.
	must(t, "chmod", os.Chmod(filepath.Join(g.ExportDir, "f"), 0o444))
	if os.Getuid() != 0 {
		if _, err := os.OpenFile(p, os.O_WRONLY, 0); err == nil {
			t.Errorf("opened a mode 0444 file for writing")
		}
	}
	if err := m.Unmount(false); err != nil {
		t.Fatalf("unmount: %v\n%s", err, m.Output())
	}
}

// TestNFSv41Reopen: ganesha restarted (its opens lost) while a file is
// open for writing here: the next WRITE is refused for its stateid, the
// file is opened again by its handle, and the data is all there.
func TestNFSv41Reopen(t *testing.T) {
	requireMountTools(t)
	bin := harness.BuildHushfs(t)
	g := harness.StartGanesha(t, harness.GaneshaOptions{NFSv4: true})
	m, mnt := fuseV41(t, bin, g, "hard")
	f, err := os.Create(filepath.Join(mnt, "f"))
	must(t, "create", err)
	first, second := pattern(64<<10, 1), pattern(64<<10, 2)
	_, err = f.Write(first)
	must(t, "write", err)
	must(t, "fsync", f.Sync())
	// ganesha's stateids carry its start time in seconds: restarted within
	// the same second, it may take our old stateid for one of its own
	// making (it was once seen to accept the WRITE).
	time.Sleep(1100 * time.Millisecond)
	g.Restart(t)
	_, err = f.Write(second)
	must(t, "write", err)
	must(t, "fsync after the server's restart", f.Sync())
	must(t, "close", f.Close())
	t.Logf("calls: %s", opsLine(m.Stats(t).Ops))
	got, err := os.ReadFile(filepath.Join(g.ExportDir, "f"))
	must(t, "read on the server", err)
	if want := append(append([]byte(nil), first...), second...); !bytes.Equal(got, want) {
		t.Errorf("the server holds %d bytes, want %d (both writes)", len(got), len(want))
	}
	if !bytes.Contains([]byte(m.Output()), []byte("opening it again")) {
		t.Logf("daemon output:\n%s", m.Output())
		t.Errorf("no reopen logged: the WRITE after the restart was not refused for its state?")
	}
}

// TestNFSv41FSX runs the fsx exerciser (10,000 random writes, truncates,
// reads, mapped reads, fsyncs and reopens, another client's view checked
// between close and open) on an NFSv4.1 mount of ganesha, where every
// open is an OPEN and the I/O goes under it; the file must end byte for
// byte what a local run of the same seed leaves.
func TestNFSv41FSX(t *testing.T) {
	requireMountTools(t)
	bin := harness.BuildHushfs(t)
	seed := int64(20261126)
	config := func(other string) fsx.Config {
		return fsx.Config{Seed: seed, Ops: 10000, MaxLen: 3 << 20, MaxIO: 1280 << 10,
			Deadline: time.Now().Add(2 * time.Minute), Logf: t.Logf, OtherPath: other}
	}
	local := filepath.Join(t.TempDir(), "fsx")
	if err := fsx.Run(local, config(local)); err != nil {
		t.Fatalf("local reference run: %v", err)
	}
	want := readFile(t, local)
	g := harness.StartGanesha(t, harness.GaneshaOptions{NFSv4: true})
	m, mnt := fuseV41(t, bin, g, "")
	start := time.Now()
	if err := fsx.Run(filepath.Join(mnt, "fsx"), config(filepath.Join(g.ExportDir, "fsx"))); err != nil {
		out := m.Output()
		if len(out) > 3000 {
			out = out[len(out)-3000:]
		}
		t.Fatalf("%v\n%s", err, out)
	}
	elapsed := time.Since(start)
	// The last close's CLOSE goes 500 ms after it (a reopen within that
	// time takes a CLOSE back, so a quick run may have sent none before).
	time.Sleep(1500 * time.Millisecond)
	s := m.Stats(t)
	t.Logf("10,000 operations in %v: %s", elapsed.Round(time.Millisecond), opsLine(s.Ops))
	sameBytes(t, "file through the mount vs the local run", readFile(t, filepath.Join(mnt, "fsx")), want)
	sameBytes(t, "file on the server's disk vs the local run", readFile(t, filepath.Join(g.ExportDir, "fsx")), want)
	if s.Ops["OPEN"].Ops == 0 || s.Ops["CLOSE"].Ops == 0 {
		t.Errorf("no OPEN or CLOSE counted: the exerciser's opens did not go to the server")
	}
}

// TestNFSv41ConcurrentOpens: 16 processes' worth of opens and closes of one
// file at once (readers and writers, so the open is widened, narrowed and
// closed while OPENs are in flight) all succeed and read what is there;
// after the last close a write through the mount still lands.
func TestNFSv41ConcurrentOpens(t *testing.T) {
	requireMountTools(t)
	bin := harness.BuildHushfs(t)
	g := harness.StartGanesha(t, harness.GaneshaOptions{NFSv4: true})
	m, mnt := fuseV41(t, bin, g, "")
	data := pattern(8192, 3)
	p := filepath.Join(mnt, "f")
	must(t, "write", os.WriteFile(p, data, 0o644))
	errs := make(chan error, 16)
	for w := 0; w < 16; w++ {
		go func() {
			flags := unix.O_RDONLY
			if w%4 == 0 {
				flags = unix.O_RDWR
			}
			for i := 0; i < 40; i++ {
				fd, err := unix.Open(p, flags, 0)
				if err != nil {
					errs <- fmt.Errorf("open: %w", err)
					return
				}
				buf := make([]byte, len(data)+1)
				n, err := unix.Pread(fd, buf, 0)
				unix.Close(fd)
				if err != nil || !bytes.Equal(buf[:n], data) {
					errs <- fmt.Errorf("read %d bytes: %v", n, err)
					return
				}
			}
			errs <- nil
		}()
	}
	for w := 0; w < 16; w++ {
		if err := <-errs; err != nil {
			t.Error(err)
		}
	}
	s := m.Stats(t)
	t.Logf("calls: %s", opsLine(s.Ops))
	if s.Ops["OPEN"].Ops != 16*40 {
		t.Errorf("OPEN %d (want %d, one per open)", s.Ops["OPEN"].Ops, 16*40)
	}
	must(t, "write after", os.WriteFile(p, []byte("after"), 0o644))
	if got, _ := os.ReadFile(filepath.Join(g.ExportDir, "f")); string(got) != "after" {
		t.Errorf("the server holds %q", got)
	}
}
