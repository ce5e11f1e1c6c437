package test

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"hushfs/test/harness"
)

// lockHelperEnv makes the test binary a process that locks a file and
// waits to be killed (TestNFSv41LockHelper).
const lockHelperEnv = "HUSHFS_LOCK_HELPER"

// lockHelperWaitEnv makes the helper wait for the lock and report how
// the wait ended instead.
const lockHelperWaitEnv = "HUSHFS_LOCK_HELPER_WAIT"

// TestNFSv41LockHelper is not a test: run with lockHelperEnv naming a
// file, it takes a whole-file write lock on it (F_SETLKW), says "locked"
// and sleeps until killed (at most a minute).
func TestNFSv41LockHelper(t *testing.T) {
	path := os.Getenv(lockHelperEnv)
	if path == "" {
		t.Skip("helper process only")
	}
	fd, err := unix.Open(path, unix.O_RDWR, 0)
	if err != nil {
		t.Fatalf("open: %v", err)
	}
	if os.Getenv(lockHelperWaitEnv) != "" {
		// Wait for the lock until the test's signal ends us.
		fmt.Println("waiting")
		err := unix.FcntlFlock(uintptr(fd), unix.F_SETLKW, &unix.Flock_t{Type: unix.F_WRLCK})
		fmt.Printf("setlkw: %v\n", err)
		return
	}
	if err := unix.FcntlFlock(uintptr(fd), unix.F_SETLKW, &unix.Flock_t{Type: unix.F_WRLCK}); err != nil {
		t.Fatalf("lock: %v", err)
	}
	os.Stdout.WriteString("locked\n")
	time.Sleep(time.Minute)
}

func setlk(fd int, typ int16, start, length int64) error {
	return unix.FcntlFlock(uintptr(fd), unix.F_SETLK, &unix.Flock_t{Type: typ, Start: start, Len: length})
}

// TestNFSv41Locks: two mounts of one export over NFSv4.1 are two clients,
// and their locks exclude each other: fcntl's F_SETLK is refused (EAGAIN),
// F_GETLK shows the other's lock, F_SETLKW waits for its release, flock
// excludes, and a holder killed with SIGKILL lets go of its lock.
func TestNFSv41Locks(t *testing.T) {
	requireMountTools(t)
	bin := harness.BuildHushfs(t)
	g := harness.StartGanesha(t, harness.GaneshaOptions{NFSv4: true})
	ma, a := fuseV41(t, bin, g, "")
	mb, b := fuseV41(t, bin, g, "")
	must(t, "write", os.WriteFile(filepath.Join(a, "f"), pattern(4096, 1), 0o644))
	fa, err := unix.Open(filepath.Join(a, "f"), unix.O_RDWR, 0)
	must(t, "open on A", err)
	defer unix.Close(fa)
	fb, err := unix.Open(filepath.Join(b, "f"), unix.O_RDWR, 0)
	must(t, "open on B", err)
	defer unix.Close(fb)

	// fcntl: a range held by A is refused to B; the rest of the file is not.
	s0 := ma.Stats(t)
	must(t, "lock [0,100) on A", setlk(fa, unix.F_WRLCK, 0, 100))
	if got := delta(s0, ma.Stats(t)); got.Ops["LOCK"].Ops != 1 || len(got.Ops) != 1 {
		t.Errorf("F_SETLK: NFS calls %s, want one LOCK", opsLine(got.Ops))
	}
	if err := setlk(fb, unix.F_WRLCK, 50, 10); !errors.Is(err, unix.EAGAIN) {
		t.Errorf("B's lock of [50,60) under A's: %v, want EAGAIN", err)
	}
	if err := setlk(fb, unix.F_RDLCK, 99, 1); !errors.Is(err, unix.EAGAIN) {
		t.Errorf("B's read lock of byte 99 under A's write lock: %v, want EAGAIN", err)
	}
	must(t, "B's lock of [200,210)", setlk(fb, unix.F_WRLCK, 200, 10))
	must(t, "B's unlock of [200,210)", setlk(fb, unix.F_UNLCK, 200, 10))
	// F_GETLK on B reports A's lock (its pid is on another machine: 0).
	lk := unix.Flock_t{Type: unix.F_WRLCK, Start: 0, Len: 0}
	must(t, "F_GETLK on B", unix.FcntlFlock(uintptr(fb), unix.F_GETLK, &lk))
	if lk.Type != unix.F_WRLCK || lk.Start != 0 || lk.Len != 100 {
		t.Errorf("F_GETLK on B: type %d [%d, +%d), want A's write lock [0, +100)", lk.Type, lk.Start, lk.Len)
	}
	lk = unix.Flock_t{Type: unix.F_WRLCK, Start: 100, Len: 50}
	must(t, "F_GETLK on B past A's range", unix.FcntlFlock(uintptr(fb), unix.F_GETLK, &lk))
	if lk.Type != unix.F_UNLCK {
		t.Errorf("F_GETLK on B of [100,150): type %d, want F_UNLCK", lk.Type)
	}

	// F_SETLKW on B waits until A unlocks.
	got := make(chan error, 1)
	go func() {
		got <- unix.FcntlFlock(uintptr(fb), unix.F_SETLKW, &unix.Flock_t{Type: unix.F_WRLCK, Start: 0, Len: 10})
	}()
	select {
	case err := <-got:
		t.Fatalf("F_SETLKW on B returned (%v) while A holds the lock", err)
	case <-time.After(500 * time.Millisecond):
	}
	unlocked := time.Now()
	must(t, "A's unlock", setlk(fa, unix.F_UNLCK, 0, 100))
	select {
	case err := <-got:
		must(t, "F_SETLKW on B", err)
		t.Logf("F_SETLKW granted %v after the unlock", time.Since(unlocked).Round(time.Millisecond))
	case <-time.After(10 * time.Second):
		t.Fatalf("F_SETLKW on B not granted 10 s after A's unlock")
	}
	if err := setlk(fa, unix.F_WRLCK, 0, 1); !errors.Is(err, unix.EAGAIN) {
		t.Errorf("A's lock under B's: %v, want EAGAIN", err)
	}
	must(t, "B's unlock", setlk(fb, unix.F_UNLCK, 0, 0))

	// A close releases the process's locks on the file (after its data).
	fa2, err := unix.Open(filepath.Join(a, "f"), unix.O_RDWR, 0)
	must(t, "open on A", err)
	must(t, "lock on A", setlk(fa2, unix.F_WRLCK, 0, 0))
	if err := setlk(fb, unix.F_WRLCK, 0, 1); !errors.Is(err, unix.EAGAIN) {
		t.Errorf("B's lock under A's: %v, want EAGAIN", err)
	}
	must(t, "close on A", unix.Close(fa2))
	must(t, "B's lock after A's close", setlk(fb, unix.F_WRLCK, 0, 1))
	must(t, "B's unlock", setlk(fb, unix.F_UNLCK, 0, 0))

	// flock excludes across clients; the file's release lets it go.
	ga, err := unix.Open(filepath.Join(a, "f"), unix.O_RDWR, 0)
	must(t, "open on A", err)
	gb, err := unix.Open(filepath.Join(b, "f"), unix.O_RDWR, 0)
	must(t, "open on B", err)
	defer unix.Close(gb)
	must(t, "flock on A", unix.Flock(ga, unix.LOCK_EX|unix.LOCK_NB))
	if err := unix.Flock(gb, unix.LOCK_EX|unix.LOCK_NB); !errors.Is(err, unix.EWOULDBLOCK) {
		t.Errorf("flock on B under A's: %v, want EWOULDBLOCK", err)
	}
	must(t, "close of A's flocked file", unix.Close(ga))
	deadline := time.Now().Add(5 * time.Second)
	for {
		err := unix.Flock(gb, unix.LOCK_EX|unix.LOCK_NB)
		if err == nil {
			break
		}
		if !errors.Is(err, unix.EWOULDBLOCK) || time.Now().After(deadline) {
			t.Fatalf("flock on B after A's file was closed: %v", err)
		}
		time.Sleep(50 * time.Millisecond)
	}
	must(t, "flock unlock on B", unix.Flock(gb, unix.LOCK_UN))
	// As with Linux's NFS client (flock(2)): flock is a whole-file lock at
	// the server, so an exclusive one needs the file open for writing; a
	// shared one does not.
	rb, err := unix.Open(filepath.Join(b, "f"), unix.O_RDONLY, 0)
	must(t, "open read-only on B", err)
	if err := unix.Flock(rb, unix.LOCK_EX|unix.LOCK_NB); !errors.Is(err, unix.EBADF) {
		t.Errorf("exclusive flock of a read-only descriptor: %v, want EBADF", err)
	}
	must(t, "shared flock of a read-only descriptor", unix.Flock(rb, unix.LOCK_SH|unix.LOCK_NB))
	must(t, "close", unix.Close(rb))

	// A holder killed with SIGKILL: its lock goes with its death.
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	helper := exec.CommandContext(ctx, os.Args[0], "-test.run=^TestNFSv41LockHelper$", "-test.v")
	helper.Env = append(os.Environ(), lockHelperEnv+"="+filepath.Join(a, "f"))
	out, err := helper.StdoutPipe()
	must(t, "pipe", err)
	helper.Stderr = helper.Stdout
	must(t, "start the holder", helper.Start())
	defer func() {
		helper.Process.Kill()
		helper.Wait()
	}()
	lines := bufio.NewScanner(out)
	for lines.Scan() && !strings.Contains(lines.Text(), "locked") {
	}
	if err := setlk(fb, unix.F_WRLCK, 0, 1); !errors.Is(err, unix.EAGAIN) {
		t.Fatalf("B's lock under the holder's: %v, want EAGAIN", err)
	}
	must(t, "SIGKILL", syscall.Kill(helper.Process.Pid, syscall.SIGKILL))
	killed := time.Now()
	deadline = killed.Add(10 * time.Second)
	for {
		err := setlk(fb, unix.F_WRLCK, 0, 0)
		if err == nil {
			t.Logf("B locked %v after the holder was killed", time.Since(killed).Round(time.Millisecond))
			break
		}
		if !errors.Is(err, unix.EAGAIN) || time.Now().After(deadline) {
			t.Fatalf("B's lock after the holder was killed: %v", err)
		}
		time.Sleep(50 * time.Millisecond)
	}

	// A signal ends F_SETLKW's wait, while B holds the lock: SIGTERM (not
	// caught) kills the waiter at once. (A caught signal ends it too, but
	// the kernel restarts the call when the handler has SA_RESTART, as for
	// local locks; Go's handlers all do.)
	waiter := exec.CommandContext(ctx, os.Args[0], "-test.run=^TestNFSv41LockHelper$", "-test.v")
	waiter.Env = append(os.Environ(), lockHelperEnv+"="+filepath.Join(a, "f"), lockHelperWaitEnv+"=1")
	wout, err := waiter.StdoutPipe()
	must(t, "pipe", err)
	must(t, "start the waiter", waiter.Start())
	wl := bufio.NewScanner(wout)
	for wl.Scan() && wl.Text() != "waiting" {
	}
	time.Sleep(500 * time.Millisecond) // in F_SETLKW, polling
	must(t, "SIGTERM", syscall.Kill(waiter.Process.Pid, syscall.SIGTERM))
	exited := make(chan error, 1)
	go func() {
		for wl.Scan() {
			t.Logf("waiter: %s", wl.Text())
		}
		exited <- waiter.Wait()
	}()
	select {
	case err := <-exited:
		var ee *exec.ExitError
		if !errors.As(err, &ee) || ee.Sys().(syscall.WaitStatus).Signal() != syscall.SIGTERM {
			t.Errorf("the waiter ended with %v, want killed by SIGTERM", err)
		}
	case <-time.After(10 * time.Second):
		waiter.Process.Kill()
		t.Errorf("a waiter in F_SETLKW still there 10 s after SIGTERM")
	}
	must(t, "B's unlock", setlk(fb, unix.F_UNLCK, 0, 0))
	t.Logf("A: %s", opsLine(ma.Stats(t).Ops))
	t.Logf("B: %s", opsLine(mb.Stats(t).Ops))
}
