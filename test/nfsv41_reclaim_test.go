package test

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"hushfs/test/harness"
)

// Recovery from a server restart over NFSv4.1: the client reclaims its
// opens (OPEN CLAIM_PREVIOUS) and locks (LOCK reclaim) in the server's
// grace period, and the application notices nothing.
//
// The files open across the restart are held by helper processes, never
// by the test process: it forks to restart the server, and the child's
// exec closes its copies of the test's descriptors, each close a FLUSH
// that waits for the server the child was to start.

// reclaimHelperEnv makes the test binary a helper process
// (TestNFSv41ReclaimHelper): "write PATH" writes reclaimFile to PATH,
// "lock DIR" holds locks on DIR/f and DIR/g.
const reclaimHelperEnv = "HUSHFS_RECLAIM_HELPER"

// reclaimFile is what the writing helper writes: 64 MiB, 1 MiB a write.
const reclaimSize, reclaimChunk = 64 << 20, 1 << 20

func reclaimData() []byte { return pattern(reclaimSize, 5) }

// TestNFSv41ReclaimHelper is not a test: with reclaimHelperEnv set it is
// the process holding files across a server restart. Writing, it says
// "written N" after each MiB (20 ms apart, so that the restart lands
// mid-file), then fsyncs and closes and says "done" (or "error ...").
// Locking, it takes a write lock on [0,100) and a read lock on [200,300)
// of f and an flock of g, holds r open for reading if there is one, says
// "locked", then for each line read from
// stdin: "write" writes "after" at 10 of f and fsyncs, "unlock" releases
// all; each answered "ok" or "error ...".
func TestNFSv41ReclaimHelper(t *testing.T) {
	what, arg, _ := strings.Cut(os.Getenv(reclaimHelperEnv), " ")
	switch what {
	case "write":
		data := reclaimData()
		f, err := os.Create(arg)
		if err != nil {
			fmt.Printf("error create: %v\n", err)
			return
		}
		for off := 0; off < reclaimSize; off += reclaimChunk {
			if _, err := f.WriteAt(data[off:off+reclaimChunk], int64(off)); err != nil {
				fmt.Printf("error write at %d: %v\n", off, err)
				return
			}
			fmt.Printf("written %d\n", off+reclaimChunk)
			time.Sleep(20 * time.Millisecond)
		}
		if err := f.Sync(); err != nil {
			fmt.Printf("error fsync: %v\n", err)
			return
		}
		if err := f.Close(); err != nil {
			fmt.Printf("error close: %v\n", err)
			return
		}
		fmt.Println("done")
	case "lock":
		fa, err := unix.Open(filepath.Join(arg, "f"), unix.O_RDWR, 0)
		if err == nil {
			err = setlk(fa, unix.F_WRLCK, 0, 100)
		}
		if err == nil {
			err = setlk(fa, unix.F_RDLCK, 200, 100)
		}
		ga, err2 := unix.Open(filepath.Join(arg, "g"), unix.O_RDWR, 0)
		if err == nil && err2 == nil {
			err = unix.Flock(ga, unix.LOCK_EX|unix.LOCK_NB)
		}
		if err = errors.Join(err, err2); err != nil {
			fmt.Printf("error locking: %v\n", err)
			return
		}
		// r, if there, is held open for reading (and read: a server
		// that grants read delegations grants one).
		if rfd, err := unix.Open(filepath.Join(arg, "r"), unix.O_RDONLY, 0); err == nil {
			defer unix.Close(rfd)
			if _, err := unix.Pread(rfd, make([]byte, 1<<20), 0); err != nil {
				fmt.Printf("error reading r: %v\n", err)
				return
			}
		}
		fmt.Println("locked")
		in := bufio.NewScanner(os.Stdin)
		for in.Scan() {
			switch in.Text() {
			case "write":
				_, err = unix.Pwrite(fa, []byte("after"), 10)
				if err == nil {
					err = unix.Fsync(fa)
				}
			case "unlock":
				err = errors.Join(setlk(fa, unix.F_UNLCK, 0, 0), unix.Flock(ga, unix.LOCK_UN))
			}
			if err != nil {
				fmt.Printf("error %s: %v\n", in.Text(), err)
			} else {
				fmt.Println("ok")
			}
		}
	default:
		t.Skip("helper process only")
	}
}

// helper is a running TestNFSv41ReclaimHelper.
type helper struct {
	cmd   *exec.Cmd
	in    io.WriteCloser
	lines chan string
}

// startHelper starts the helper doing what (reclaimHelperEnv), bounded by
// a few minutes, killed by pid at cleanup.
// lockedPair mounts g twice over v4.1 (clients A and B), writes f and g
// through A and starts the helper that locks them through A.
func lockedPair(t *testing.T, bin string, g *harness.Ganesha) (ma *harness.Mount, a, b string, holder *helper) {
	t.Helper()
	ma, a = fuseV41(t, bin, g, "hard")
	_, b = fuseV41(t, bin, g, "hard")
	must(t, "write f", os.WriteFile(filepath.Join(a, "f"), pattern(4096, 1), 0o644))
	must(t, "write g", os.WriteFile(filepath.Join(a, "g"), pattern(4096, 2), 0o644))
	return ma, a, b, startLocker(t, a)
}

// startLocker starts the helper that takes the locks in dir, once it
// says it holds them.
func startLocker(t *testing.T, dir string) *helper {
	t.Helper()
	holder := startHelper(t, "lock "+dir)
	if l := holder.next(t, 30*time.Second); l != "locked" {
		t.Fatalf("the holder: %s", l)
	}
	return holder
}

func startHelper(t *testing.T, what string) *helper {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	cmd := exec.CommandContext(ctx, os.Args[0], "-test.run=^TestNFSv41ReclaimHelper$")
	cmd.Env = append(os.Environ(), reclaimHelperEnv+"="+what)
	in, err := cmd.StdinPipe()
	must(t, "pipe", err)
	out, err := cmd.StdoutPipe()
	must(t, "pipe", err)
	cmd.Stderr = cmd.Stdout
	must(t, "start the helper", cmd.Start())
	h := &helper{cmd: cmd, in: in, lines: make(chan string, 1024)}
	go func() {
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			h.lines <- sc.Text()
		}
		close(h.lines)
	}()
	t.Cleanup(func() {
		in.Close()
		cmd.Process.Kill()
		cmd.Wait()
		cancel()
	})
	return h
}

// next returns the helper's next line (bounded).
func (h *helper) next(t *testing.T, within time.Duration) string {
	t.Helper()
	select {
	case l, ok := <-h.lines:
		if !ok {
			t.Fatalf("the helper ended")
		}
		return l
	case <-time.After(within):
		t.Fatalf("the helper said nothing within %v", within)
	}
	return ""
}

// ask sends the helper a command and fails the test unless it answers ok.
func (h *helper) ask(t *testing.T, cmd string, within time.Duration) {
	t.Helper()
	fmt.Fprintln(h.in, cmd)
	if l := h.next(t, within); l != "ok" {
		t.Errorf("helper %s: %s", cmd, l)
	}
}

// reclaimGanesha starts ganesha with a grace period after each restart
// (10 s lease, 20 s grace) for the reclaim tests.
func reclaimGanesha(t *testing.T) *harness.Ganesha {
	return harness.StartGanesha(t, harness.GaneshaOptions{NFSv4: true, LeaseLifetime: 10, Grace: 20})
}

// waitOutput waits until the mount's log holds want (bounded); the test
// fails, and goes on, if it does not.
func waitOutput(t *testing.T, m *harness.Mount, want string, within time.Duration) {
	t.Helper()
	deadline := time.Now().Add(within)
	for !strings.Contains(m.Output(), want) {
		if time.Now().After(deadline) {
			t.Errorf("the mount did not log %q within %v", want, within)
			return
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// logRecovery logs the mount's lines about the recovery.
func logRecovery(t *testing.T, who string, m *harness.Mount) {
	t.Helper()
	for _, l := range strings.Split(m.Output(), "\n") {
		if strings.Contains(l, "reclaim") || strings.Contains(l, "session") || strings.Contains(l, "lost") {
			t.Logf("%s: %s", who, l)
		}
	}
}

// TestNFSv41ReclaimMidWrite: a process writes a 64 MiB file 1 MiB at a
// time while ganesha is killed (SIGKILL) and restarted with a grace
// period: every write, the fsync and the close succeed on the hard mount,
// and the file on the export is byte for byte what was written; what was
// written UNSTABLE before the restart is sent again (new verifier). The open
// is reclaimed (CLAIM_PREVIOUS), so the WRITEs held back by the recovery
// go on under it during the grace period (a reopen would be refused with
// GRACE).
func TestNFSv41ReclaimMidWrite(t *testing.T) {
	requireMountTools(t)
	bin := harness.BuildHushfs(t)
	g := reclaimGanesha(t)
	m, mnt := fuseV41(t, bin, g, "hard")
	// ganesha's stateids carry its start time in seconds: a restart
	// within the second could hand out the old ones again.
	time.Sleep(1100 * time.Millisecond)
	w := startHelper(t, "write "+filepath.Join(mnt, "big"))
	for {
		l := w.next(t, time.Minute)
		if strings.HasPrefix(l, "error") || l == "done" {
			t.Fatalf("the writer ended before the restart: %s", l)
		}
		if l == fmt.Sprintf("written %d", 8<<20) {
			break
		}
	}
	before := m.Stats(t)
	restarted := time.Now()
	g.Restart(t)
	t.Logf("ganesha restarted in %v", time.Since(restarted).Round(time.Millisecond))
	for {
		l := w.next(t, 2*time.Minute)
		if l == "done" {
			break
		}
		if !strings.HasPrefix(l, "written") {
			t.Fatalf("the writer across the restart: %s", l)
		}
	}
	t.Logf("written, fsynced and closed %v after the restart", time.Since(restarted).Round(time.Millisecond))
	after := m.Stats(t)
	d := delta(before, after)
	t.Logf("calls since the restart: %s; data sent again for a new write verifier: %d bytes by %d COMMITs",
		opsLine(d.Ops), after.Resends.Bytes-before.Resends.Bytes, after.Resends.Commits-before.Resends.Commits)
	// What was acknowledged UNSTABLE before the restart was not yet
	// committed (most of the 8 MiB written; some may still have been on
	// its way): the restarted server's COMMIT verifier is new, and it must
	// have been sent again.
	if after.Resends.Commits == before.Resends.Commits || after.Resends.Bytes == before.Resends.Bytes {
		t.Errorf("nothing sent again after the restart's new write verifier")
	}
	logRecovery(t, "mount", m)
	got, err := os.ReadFile(filepath.Join(g.ExportDir, "big"))
	must(t, "read on the server", err)
	if data := reclaimData(); !bytes.Equal(got, data) {
		i := 0
		for i < min(len(got), len(data)) && got[i] == data[i] {
			i++
		}
		t.Fatalf("the server holds %d bytes, want %d; first difference at %d", len(got), len(data), i)
	}
	if !strings.Contains(m.Output(), "reclaimed 1 opens") {
		t.Errorf("no reclaim of the open logged")
	}
	if strings.Contains(m.Output(), "opening it again") {
		t.Errorf("the file was reopened instead of reclaimed")
	}
}

// TestNFSv41ReclaimLocks: a process on A holds fcntl locks (a write lock
// on [0,100) and a read lock on [200,300) of f) and an flock of g while
// ganesha is killed and restarted with a grace period. A reclaims them:
// B's F_SETLK under either range and B's flock are refused (B's LOCKs
// wait out the grace period first), the holder's own I/O on f goes on,
// and its unlocks work (B then gets the locks).
func TestNFSv41ReclaimLocks(t *testing.T) {
	requireMountTools(t)
	bin := harness.BuildHushfs(t)
	g := reclaimGanesha(t)
	ma, _, b, holder := lockedPair(t, bin, g)

	time.Sleep(1100 * time.Millisecond) // ganesha's stateids: see TestNFSv41ReclaimMidWrite
	before := ma.Stats(t)
	restarted := time.Now()
	g.Restart(t)
	// A finds out at its next call (here) or lease renewal.
	holder.ask(t, "write", time.Minute)
	waitOutput(t, ma, "reclaimed 2 opens", 5*time.Second)
	d := delta(before, ma.Stats(t))
	t.Logf("A's calls since the restart: %s", opsLine(d.Ops))
	if d.Ops["LOCK"].Ops < 3 {
		t.Errorf("A sent %d LOCKs since the restart, want the 3 reclaims", d.Ops["LOCK"].Ops)
	}

	fb, err := unix.Open(filepath.Join(b, "f"), unix.O_RDWR, 0)
	must(t, "open f on B", err)
	defer unix.Close(fb)
	gb, err := unix.Open(filepath.Join(b, "g"), unix.O_RDWR, 0)
	must(t, "open g on B", err)
	defer unix.Close(gb)
	if err := setlk(fb, unix.F_WRLCK, 50, 10); !errors.Is(err, unix.EAGAIN) {
		t.Errorf("B's lock of [50,60) under A's reclaimed write lock: %v, want EAGAIN", err)
	}
	t.Logf("B's first F_SETLK answered %v after the restart", time.Since(restarted).Round(time.Millisecond))
	if err := setlk(fb, unix.F_WRLCK, 250, 1); !errors.Is(err, unix.EAGAIN) {
		t.Errorf("B's write lock of byte 250 under A's reclaimed read lock: %v, want EAGAIN", err)
	}
	must(t, "B's read lock of byte 250 beside A's read lock", setlk(fb, unix.F_RDLCK, 250, 1))
	must(t, "B's unlock of byte 250", setlk(fb, unix.F_UNLCK, 250, 1))
	if err := unix.Flock(gb, unix.LOCK_EX|unix.LOCK_NB); !errors.Is(err, unix.EWOULDBLOCK) {
		t.Errorf("B's flock under A's reclaimed one: %v, want EWOULDBLOCK", err)
	}
	if got, _ := os.ReadFile(filepath.Join(g.ExportDir, "f")); !bytes.Equal(got[10:15], []byte("after")) {
		t.Errorf("the server's f holds %q at 10, want the holder's write", got[10:15])
	}

	holder.ask(t, "unlock", time.Minute)
	must(t, "B's lock of f after A's unlock", setlk(fb, unix.F_WRLCK, 0, 0))
	must(t, "B's flock after A's unlock", unix.Flock(gb, unix.LOCK_EX|unix.LOCK_NB))
	must(t, "B's unlock", setlk(fb, unix.F_UNLCK, 0, 0))
	logRecovery(t, "A", ma)
	if strings.Contains(ma.Output(), "were lost") || strings.Contains(ma.Output(), "was lost") {
		t.Errorf("A logged lost locks")
	}
}

// TestNFSv41ReclaimServe: the same against `hushfs serve` (5 s lease, and
// so grace period), killed with SIGKILL and started again: it knows its
// clients again from its state directory and takes their reclaims. A
// process on A holds an fcntl lock of f, an flock of g and r open for
// reading under a read delegation (f and g, opened for writing by one
// client, are under write delegations). After the restart A reclaims the
// three opens, the locks and the delegations: B's F_SETLK and flock are
// refused; B's opens recall the write delegations and B reads the
// holder's write made after the restart; B's write of r recalls A's
// reclaimed read delegation (a delegation the server had forgotten would
// not be recalled, and A would read its stale cache), and A then reads
// B's data.
func TestNFSv41ReclaimServe(t *testing.T) {
	requireMountTools(t)
	bin := harness.BuildHushfs(t)
	export := t.TempDir()
	for name, seed := range map[string]byte{"f": 1, "g": 2, "r": 3} {
		must(t, "write "+name, os.WriteFile(filepath.Join(export, name), pattern(64<<10, seed), 0o644))
	}
	s := harness.StartServe(t, export, "--lease", "5s")
	_, port, _ := net.SplitHostPort(s.NFSAddr)
	mountServe := func() (*harness.Mount, string) {
		dir := t.TempDir()
		return harness.StartMount(t, harness.MountSpec{Bin: bin, Server: "127.0.0.1", Export: s.ExportPath,
			Dir: dir, Options: "vers=4.1,hard,port=" + port}), dir
	}
	ma, a := mountServe()
	mb, b := mountServe()
	holder := startLocker(t, a)
	readBack(t, "A: read r under the delegation", filepath.Join(a, "r"), pattern(64<<10, 3))

	before := ma.Stats(t)
	restarted := time.Now()
	s.Restart(t)
	holder.ask(t, "write", time.Minute)
	waitOutput(t, ma, "reclaimed 3 opens", 5*time.Second)
	d := delta(before, ma.Stats(t))
	t.Logf("A's calls since the restart: %s", opsLine(d.Ops))
	if d.Ops["LOCK"].Ops < 2 || d.Ops["OPEN"].Ops < 3 {
		t.Errorf("A sent %d OPENs and %d LOCKs since the restart, want the 3 and 2 reclaims",
			d.Ops["OPEN"].Ops, d.Ops["LOCK"].Ops)
	}

	fb, err := unix.Open(filepath.Join(b, "f"), unix.O_RDWR, 0)
	must(t, "open f on B", err)
	defer unix.Close(fb)
	gb, err := unix.Open(filepath.Join(b, "g"), unix.O_RDWR, 0)
	must(t, "open g on B", err)
	defer unix.Close(gb)
	if err := setlk(fb, unix.F_WRLCK, 50, 10); !errors.Is(err, unix.EAGAIN) {
		t.Errorf("B's lock of [50,60) under A's reclaimed write lock: %v, want EAGAIN", err)
	}
	t.Logf("B's first F_SETLK answered %v after the restart", time.Since(restarted).Round(time.Millisecond))
	if err := unix.Flock(gb, unix.LOCK_EX|unix.LOCK_NB); !errors.Is(err, unix.EWOULDBLOCK) {
		t.Errorf("B's flock under A's reclaimed one: %v, want EWOULDBLOCK", err)
	}
	// The holder's write after the restart (under its reclaimed open, and
	// write delegation if it held one: B's open recalled it) reads on B.
	got := make([]byte, 5)
	if _, err := unix.Pread(fb, got, 10); err != nil || string(got) != "after" {
		t.Errorf("B reads %q (%v) at 10 of f, want the holder's write after the restart", got, err)
	}
	t.Logf("A's calls since the restart, B's opens included: %s", opsLine(delta(before, ma.Stats(t)).Ops))

	// B's write of r recalls A's reclaimed delegation; A reads B's data.
	beforeWrite := ma.Stats(t)
	newR := pattern(64<<10, 9)
	must(t, "B: write r", os.WriteFile(filepath.Join(b, "r"), newR, 0o644))
	readBack(t, "A: read r after B's write", filepath.Join(a, "r"), newR)
	if d := delta(beforeWrite, ma.Stats(t)); d.Ops["DELEGRETURN"].Ops != 1 {
		t.Errorf("A's calls around B's write: %s; want its reclaimed delegation recalled (DELEGRETURN 1)", opsLine(d.Ops))
	}

	holder.ask(t, "unlock", time.Minute)
	must(t, "B's lock of f after A's unlock", setlk(fb, unix.F_WRLCK, 0, 0))
	must(t, "B's flock after A's unlock", unix.Flock(gb, unix.LOCK_EX|unix.LOCK_NB))
	must(t, "B's unlock", setlk(fb, unix.F_UNLCK, 0, 0))
	logRecovery(t, "A", ma)
	// Unmount while the server runs: the restarted server's cleanup,
	// registered last, would otherwise run first and leave the hard
	// mounts' last CLOSEs waiting for it.
	unix.Close(fb)
	unix.Close(gb)
	holder.in.Close()
	holder.cmd.Wait()
	for _, m := range []*harness.Mount{mb, ma} {
		if err := m.Unmount(false); err != nil {
			t.Errorf("unmount after the recovery: %v\n%s", err, m.Output())
		}
	}
}

// TestNFSv41ReclaimRefused: ganesha restarted without a grace period
// refuses the reclaims (NO_GRACE), so the lock a process on A held is
// lost: the file is reopened, the loss is logged, and the process's I/O
// on the file fails with EIO (its fsync once the data went out, then its
// writes), as Linux's client does with lost locks; B can take the lock.
func TestNFSv41ReclaimRefused(t *testing.T) {
	requireMountTools(t)
	bin := harness.BuildHushfs(t)
	g := harness.StartGanesha(t, harness.GaneshaOptions{NFSv4: true}) // Graceless
	ma, _, b, holder := lockedPair(t, bin, g)
	time.Sleep(1100 * time.Millisecond) // ganesha's stateids: see TestNFSv41ReclaimMidWrite
	g.Restart(t)
	fmt.Fprintln(holder.in, "write")
	first := holder.next(t, time.Minute)
	fmt.Fprintln(holder.in, "write")
	if l := holder.next(t, time.Minute); !strings.Contains(l, "input/output error") {
		t.Errorf("the holder's write after its lock was lost: %q (the one before: %q), want EIO", l, first)
	}
	waitOutput(t, ma, "were lost", 5*time.Second)
	fb, err := unix.Open(filepath.Join(b, "f"), unix.O_RDWR, 0)
	must(t, "open f on B", err)
	must(t, "B's lock of the lost range", setlk(fb, unix.F_WRLCK, 0, 100))
	must(t, "B's unlock", setlk(fb, unix.F_UNLCK, 0, 0))
	unix.Close(fb)
	logRecovery(t, "A", ma)
}
