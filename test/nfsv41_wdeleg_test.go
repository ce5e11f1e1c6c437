package test

import (
	"bytes"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"syscall"
	"testing"
	"time"

	"hushfs/internal/client"
	"hushfs/test/harness"
)

// Write delegations in the NFSv4.1 client against `hushfs serve`, which
// grants one to a client that alone has a file open for writing (and on
// the OPEN that creates it). Two mounts of one export are two clients.

// serveV41Opts is serveV41 with more mount options.
func serveV41Opts(t *testing.T, bin string, s *harness.Serve, opts string) (*harness.Mount, string) {
	t.Helper()
	dir := t.TempDir()
	_, port, _ := net.SplitHostPort(s.NFSAddr)
	return harness.StartMount(t, harness.MountSpec{Bin: bin, Server: "127.0.0.1", Export: s.ExportPath,
		Dir: dir, Options: joinOptsV41("vers=4.1,port="+port, opts)}), dir
}

func joinOptsV41(a, b string) string {
	if b == "" {
		return a
	}
	return a + "," + b
}

// waitCalls waits (at most 10 s) until m has sent at least want calls of
// name since prev, and returns the counts since prev.
func waitCalls(t *testing.T, m *harness.Mount, prev client.Snapshot, name string, want uint64) client.Snapshot {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		d := delta(prev, m.Stats(t))
		if d.Ops[name].Ops >= want || time.Now().After(deadline) {
			if d.Ops[name].Ops < want {
				t.Fatalf("%d %s calls after 10 s (calls {%s}), want %d", d.Ops[name].Ops, name, opsLine(d.Ops), want)
			}
			return d
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// noCalls fails if any of names was sent in d.
func noCalls(t *testing.T, what string, d client.Snapshot, names ...string) {
	t.Helper()
	for _, n := range names {
		if d.Ops[n].Ops != 0 {
			t.Errorf("%s: calls {%s}: want no %s", what, opsLine(d.Ops), n)
		}
	}
}

// within runs f, failing the test if it does not return within limit.
func within(t *testing.T, what string, limit time.Duration, f func() error) {
	t.Helper()
	done := make(chan error, 1)
	go func() { done <- f() }()
	select {
	case err := <-done:
		must(t, what, err)
	case <-time.After(limit):
		t.Fatalf("%s: not done after %v", what, limit)
	}
}

// serverOps reads the server's count of an NFSv4.1 operation from its
// metrics.
func serverOps(t *testing.T, metricsAddr, op string) int {
	t.Helper()
	resp, err := http.Get("http://" + metricsAddr + "/metrics")
	must(t, "metrics", err)
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	must(t, "metrics", err)
	re := regexp.MustCompile(`(?m)^hushfs_rpc_calls_total\{prog="nfs4op",proc="` + op + `"\} (\d+)$`)
	m := re.FindSubmatch(body)
	if m == nil {
		return 0
	}
	n, _ := strconv.Atoi(string(m[1]))
	return n
}

// freeAddr is a 127.0.0.1 address with a port free now.
func freeAddr(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	must(t, "free port", err)
	addr := l.Addr().String()
	l.Close()
	return addr
}

// TestNFSv41WriteDelegation: A creates, writes and closes a file under a
// write delegation: the close sends no CLOSE, COMMIT or GETATTR; re-opens
// cost no call; fsync writes and commits; B's stat of the file while A
// holds data asks A (CB_GETATTR) and sees A's size; B's open recalls A's
// delegation, A writes, commits and returns it, and B reads A's bytes.
func TestNFSv41WriteDelegation(t *testing.T) {
	requireMountTools(t)
	bin := harness.BuildHushfs(t)
	export := t.TempDir()
	metrics := freeAddr(t)
	s := harness.StartServe(t, export, "--metrics", metrics)
	a, dirA := serveV41(t, bin, s)
	b, dirB := serveV41(t, bin, s)
	pa, pb := filepath.Join(dirA, "f"), filepath.Join(dirB, "f")

	// Create, write, close: CREATE and the WRITE (sent by the close, as
	// one FILE_SYNC WRITE); no CLOSE, no COMMIT, no GETATTR.
	data := pattern(100<<10, 1)
	prev := a.Stats(t)
	must(t, "A: create and write", os.WriteFile(pa, data, 0o644))
	time.Sleep(200 * time.Millisecond) // anything late would show
	d := delta(prev, a.Stats(t))
	t.Logf("A: create, write 100 KiB, close under a write delegation: calls {%s}", opsLine(d.Ops))
	noCalls(t, "A: create+write+close", d, "CLOSE", "COMMIT", "GETATTR", "OPEN", "SETATTR", "DELEGRETURN")
	if d.Ops["CREATE"].Ops != 1 || d.Ops["WRITE"].Ops != 1 {
		t.Errorf("A: create+write+close: calls {%s}, want CREATE 1, WRITE 1", opsLine(d.Ops))
	}

	// Re-open for reading and for writing: no call; a write's data goes
	// out at the close, without COMMIT or CLOSE.
	prev = a.Stats(t)
	readBack(t, "A: read under the write delegation", pa, data)
	expectCounts(t, "A: open, read, close under the write delegation", delta(prev, a.Stats(t)), nil)
	tail := pattern(10<<10, 2)
	f, err := os.OpenFile(pa, os.O_WRONLY|os.O_APPEND, 0)
	must(t, "A: open for appending", err)
	_, err = f.Write(tail)
	must(t, "A: append", err)
	must(t, "A: close", f.Close())
	data = append(data, tail...)
	d = waitCalls(t, a, prev, "WRITE", 1)
	noCalls(t, "A: open, append, close", d, "OPEN", "CLOSE", "COMMIT", "GETATTR")

	// fsync under the delegation writes and commits before it returns
	// (large writes stream out as they are made; the rest goes at fsync).
	big := pattern(3<<20, 3)
	f, err = os.OpenFile(pa, os.O_RDWR, 0)
	must(t, "A: open", err)
	prev = a.Stats(t)
	_, err = f.WriteAt(big, int64(len(data)))
	must(t, "A: write 3 MiB", err)
	must(t, "A: fsync", f.Sync())
	d = delta(prev, a.Stats(t))
	t.Logf("A: write 3 MiB and fsync under the write delegation: calls {%s}", opsLine(d.Ops))
	if d.Ops["WRITE"].Ops == 0 || d.Ops["COMMIT"].Ops != 1 {
		t.Errorf("A: write and fsync: calls {%s}, want WRITEs and one COMMIT by the time fsync returns", opsLine(d.Ops))
	}
	data = append(data, big...)

	// A holds more data than the server has (written, not yet sent: the
	// descriptor is open). B's stat asks A through the server (CB_GETATTR;
	// or the server recalls if it cannot ask) and sees A's size.
	more := pattern(5000, 4)
	_, err = f.WriteAt(more, int64(len(data)))
	must(t, "A: write more", err)
	data = append(data, more...)
	returns := serverOps(t, metrics, "DELEGRETURN")
	closes := serverOps(t, metrics, "CLOSE")
	beforeStat := a.Stats(t)
	prev = beforeStat
	var st syscall.Stat_t
	within(t, "B: stat", 30*time.Second, func() error { return syscall.Stat(pb, &st) })
	if st.Size != int64(len(data)) {
		t.Errorf("B: stat while A holds the write delegation: size %d, want A's %d", st.Size, len(data))
	}
	t.Logf("A while B stats: calls {%s} (none: CB_GETATTR answered)", opsLine(delta(prev, a.Stats(t)).Ops))
	must(t, "A: close", f.Close())

	// B opens: A's delegation is recalled; A writes, commits, closes the
	// open it kept and returns the delegation; B reads A's bytes.
	prev = a.Stats(t)
	var got []byte
	within(t, "B: read", 30*time.Second, func() (err error) { got, err = os.ReadFile(pb); return err })
	if !bytes.Equal(got, data) {
		t.Fatalf("B: read %d bytes, want A's %d (first difference at %d)", len(got), len(data), firstDiff(got, data))
	}
	d = delta(prev, a.Stats(t))
	t.Logf("A, recalled by B's open: calls {%s}", opsLine(d.Ops))
	// Once, with the open kept past the close closed, whether B's stat
	// or B's open recalled it. The CLOSE rides in a COMPOUND (the
	// DELEGRETURN's, or alone after the queue's delay): the server counts
	// it.
	if d := delta(beforeStat, a.Stats(t)); d.Ops["DELEGRETURN"].Ops != 1 || d.Ops["CLOSE"].Ops > 1 {
		t.Errorf("A, from B's stat to B's read: calls {%s}, want one DELEGRETURN (and the kept open's CLOSE in it or alone)", opsLine(d.Ops))
	}
	within(t, "server: the kept open's CLOSE", 5*time.Second, func() error {
		if n := serverOps(t, metrics, "CLOSE") - closes; n != 1 {
			return fmt.Errorf("%d CLOSEs from B's stat to B's read, want 1 (A's kept open)", n)
		}
		return nil
	})
	if n := serverOps(t, metrics, "DELEGRETURN") - returns; n != 1 {
		t.Errorf("server: %d DELEGRETURNs from B's stat to B's read, want 1", n)
	}
	readBack(t, "A: read after the return", pa, data)

	// Unmounting A with a new delegation held (and the open kept past the
	// close) returns it; what A wrote is on the server's disk.
	g := filepath.Join(dirA, "g")
	gdata := pattern(200<<10, 5)
	must(t, "A: write g", os.WriteFile(g, gdata, 0o644))
	returns = serverOps(t, metrics, "DELEGRETURN")
	must(t, "A: unmount", a.Unmount(false))
	if n := serverOps(t, metrics, "DELEGRETURN") - returns; n < 1 {
		t.Errorf("server: %d DELEGRETURNs at A's unmount, want the delegation of g back", n)
	}
	readBack(t, "B: g after A's unmount", filepath.Join(dirB, "g"), gdata)
	onDisk, err := os.ReadFile(filepath.Join(export, "g"))
	must(t, "read g on the server", err)
	if !bytes.Equal(onDisk, gdata) {
		t.Errorf("g on the server's disk: %d bytes, want A's %d", len(onDisk), len(gdata))
	}
	_ = b
}

// firstDiff is the first offset where a and b differ.
func firstDiff(a, b []byte) int {
	for i := range min(len(a), len(b)) {
		if a[i] != b[i] {
			return i
		}
	}
	return min(len(a), len(b))
}

// TestNFSv41WriteDelegationIdle: a write delegation nothing used for the
// idle time (delegidle=2 here, 60 s by default) goes back by itself, with
// the open kept past the close: B's open then recalls nothing.
func TestNFSv41WriteDelegationIdle(t *testing.T) {
	requireMountTools(t)
	bin := harness.BuildHushfs(t)
	export := t.TempDir()
	s := harness.StartServe(t, export)
	a, dirA := serveV41Opts(t, bin, s, "delegidle=2")
	b, dirB := serveV41(t, bin, s)
	data := pattern(64<<10, 6)
	prev := a.Stats(t)
	must(t, "A: create and write", os.WriteFile(filepath.Join(dirA, "f"), data, 0o644))
	d := waitCalls(t, a, prev, "DELEGRETURN", 1)
	t.Logf("A: create, write, close, idle return: calls {%s}", opsLine(d.Ops))
	// The kept open's CLOSE rides in the DELEGRETURN's COMPOUND, or goes
	// alone after the CLOSE queue's delay.
	if d.Ops["CLOSE"].Ops > 1 || d.Ops["DELEGRETURN"].Ops != 1 {
		t.Errorf("A: calls {%s}, want one DELEGRETURN (and at most one CLOSE) at the idle return", opsLine(d.Ops))
	}
	prev = a.Stats(t)
	start := time.Now()
	readBack(t, "B: read", filepath.Join(dirB, "f"), data)
	if el := time.Since(start); el > 2*time.Second {
		t.Errorf("B: read took %v: waited for a recall?", el)
	}
	expectCounts(t, "A while B reads after the idle return", delta(prev, a.Stats(t)), nil)
	_ = b
}

// TestNFSv41WriteDelegationRevoked: A holds a write delegation and does
// not answer its recall (its daemon stopped for longer than the lease):
// the server revokes it and B goes ahead. Resumed, A serves nothing from
// the revoked delegation (it reads B's data, not its cached size) and no
// data A had written before is lost.
func TestNFSv41WriteDelegationRevoked(t *testing.T) {
	requireMountTools(t)
	bin := harness.BuildHushfs(t)
	export := t.TempDir()
	const lease = 3 * time.Second
	s := harness.StartServe(t, export, "--lease", lease.String())
	a, dirA := serveV41(t, bin, s)
	_, dirB := serveV41(t, bin, s)
	pa, pb := filepath.Join(dirA, "f"), filepath.Join(dirB, "f")
	data1 := pattern(64<<10, 7)
	prev := a.Stats(t)
	must(t, "A: create and write", os.WriteFile(pa, data1, 0o644))
	waitCalls(t, a, prev, "WRITE", 1)
	readBack(t, "A: read under the delegation", pa, data1)

	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("A's log:\n%s\nserver's log:\n%s", a.Output(), s.Output())
		}
	})
	pid := a.Pid()
	must(t, "SIGSTOP A's daemon", syscall.Kill(pid, syscall.SIGSTOP))
	stopped := true
	resume := func() {
		if stopped {
			stopped = false
			must(t, "SIGCONT A's daemon", syscall.Kill(pid, syscall.SIGCONT))
		}
	}
	t.Cleanup(resume)

	// B appends: its OPEN waits for the recall, which A does not answer,
	// until the server revokes the delegation a lease later.
	data2 := pattern(32<<10, 8)
	start := time.Now()
	within(t, "B: append", 30*time.Second, func() error {
		f, err := os.OpenFile(pb, os.O_WRONLY|os.O_APPEND, 0)
		if err != nil {
			return err
		}
		if _, err := f.Write(data2); err != nil {
			f.Close()
			return err
		}
		return f.Close()
	})
	t.Logf("B: append done %v after A stopped (lease %v)", time.Since(start).Round(10*time.Millisecond), lease)
	// Past A's lease too: nothing may renew it while A is stopped.
	time.Sleep(time.Until(start.Add(2*lease + time.Second)))
	resume()

	want := append(append([]byte(nil), data1...), data2...)
	// At once: the read races A's renewal, whose reply says the state was
	// revoked (the lease check and the flags hold it off until acted on).
	within(t, "A: read after resuming", 30*time.Second, func() error {
		got, err := os.ReadFile(pa)
		if err != nil {
			return err
		}
		if !bytes.Equal(got, want) {
			return fmt.Errorf("read %d bytes, want %d (A's then B's; first difference at %d)", len(got), len(want), firstDiff(got, want))
		}
		return nil
	})
	onDisk, err := os.ReadFile(filepath.Join(export, "f"))
	must(t, "read on the server", err)
	if !bytes.Equal(onDisk, want) {
		t.Errorf("on the server's disk: %d bytes, want %d", len(onDisk), len(want))
	}
}

// TestNFSv41WriteDelegationChmod: a linker's pattern — create, write,
// close, chmod — in a directory this mount made. The server recalls the
// holder's own delegation for its SETATTR; once returned, the attributes
// the create brought (kept with the directory's listing) must not come
// back: they made the binary read as empty and not executable.
func TestNFSv41WriteDelegationChmod(t *testing.T) {
	requireMountTools(t)
	bin := harness.BuildHushfs(t)
	export := t.TempDir()
	s := harness.StartServe(t, export)
	_, dir := serveV41(t, bin, s)
	sub := filepath.Join(dir, "bin")
	must(t, "mkdir", os.Mkdir(sub, 0o755))
	// A listing of it from the server, kept: the creates patch it.
	must(t, "write", os.WriteFile(filepath.Join(sub, "x"), nil, 0o644))
	if _, err := os.ReadDir(sub); err != nil {
		t.Fatalf("readdir: %v", err)
	}
	data := pattern(300<<10, 9)
	for i := range 5 {
		p := filepath.Join(sub, fmt.Sprintf("prog%d", i))
		f, err := os.OpenFile(p, os.O_RDWR|os.O_CREATE|os.O_TRUNC, 0o666)
		must(t, "create", err)
		_, err = f.Write(data)
		must(t, "write", err)
		must(t, "close", f.Close())
		must(t, "chmod", os.Chmod(p, 0o755))
	}
	time.Sleep(500 * time.Millisecond) // the recalls are answered and returned
	for round := range 2 {
		if _, err := os.ReadDir(sub); err != nil {
			t.Fatalf("readdir: %v", err)
		}
		for i := range 5 {
			p := filepath.Join(sub, fmt.Sprintf("prog%d", i))
			st, err := os.Stat(p)
			must(t, "stat", err)
			if st.Size() != int64(len(data)) || st.Mode().Perm() != 0o755 {
				t.Errorf("round %d: %s: size %d mode %o, want %d and 755", round, p, st.Size(), st.Mode().Perm(), len(data))
			}
		}
		time.Sleep(time.Second)
	}
}

// TestNFSv41WriteDelegationTimes: tar's pattern — write, set the times
// while the data is unsent, close — under a write delegation: at the
// close the server's disk has the data and the times (a stat there breaks
// no lease, so nothing may wait for a recall).
func TestNFSv41WriteDelegationTimes(t *testing.T) {
	requireMountTools(t)
	bin := harness.BuildHushfs(t)
	export := t.TempDir()
	s := harness.StartServe(t, export)
	_, dir := serveV41(t, bin, s)
	mtime := time.Date(2001, 2, 3, 4, 5, 6, 0, time.UTC)
	data := pattern(20<<10, 10)
	for i := range 3 {
		name := fmt.Sprintf("f%d", i)
		f, err := os.Create(filepath.Join(dir, name))
		must(t, "create", err)
		_, err = f.Write(data)
		must(t, "write", err)
		must(t, "utimes", os.Chtimes(filepath.Join(dir, name), mtime, mtime))
		must(t, "close", f.Close())
		st, err := os.Stat(filepath.Join(export, name))
		must(t, "stat on the server", err)
		if st.Size() != int64(len(data)) || !st.ModTime().Equal(mtime) {
			t.Errorf("%s on the server's disk after the close: size %d mtime %v, want %d and %v", name, st.Size(), st.ModTime(), len(data), mtime)
		}
	}
}

// TestNFSv41DelegationWatermark: past delegmax file delegations, the
// least recently used with nothing open go back (a tenth of the maximum
// more, at once), and the files read last keep theirs: re-reading them
// costs no call.
func TestNFSv41DelegationWatermark(t *testing.T) {
	requireMountTools(t)
	bin := harness.BuildHushfs(t)
	export := t.TempDir()
	s := harness.StartServe(t, export)
	const files, max = 40, 20
	for i := range files {
		must(t, "write", os.WriteFile(filepath.Join(export, fmt.Sprintf("f%02d", i)), pattern(1000, byte(i)), 0o644))
	}
	a, dir := serveV41Opts(t, bin, s, fmt.Sprintf("delegmax=%d", max))
	prev := a.Stats(t)
	for i := range files {
		readBack(t, "read", filepath.Join(dir, fmt.Sprintf("f%02d", i)), pattern(1000, byte(i)))
	}
	// 40 granted, at most 20 kept: each grant past 20 returns the oldest
	// down to 18 (21 returns in all).
	d := waitCalls(t, a, prev, "DELEGRETURN", files-max+max/10-2)
	t.Logf("read %d files with delegmax=%d: calls {%s}", files, max, opsLine(d.Ops))
	if n := d.Ops["DELEGRETURN"].Ops; n < files-max || n > files-max/2 {
		t.Errorf("%d DELEGRETURNs for %d delegations granted with delegmax=%d", n, files, max)
	}
	// The last files read are still delegated: no call to read them again.
	prev = a.Stats(t)
	for i := files - 5; i < files; i++ {
		readBack(t, "read again", filepath.Join(dir, fmt.Sprintf("f%02d", i)), pattern(1000, byte(i)))
	}
	if d := delta(prev, a.Stats(t)); d.Total() != 0 {
		t.Errorf("re-reading the newest delegated files: calls {%s}, want none", opsLine(d.Ops))
	}
}
