package test

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"hushfs/test/harness"
)

// TestMountBadInput: a mount that cannot be made says why (naming the
// option, the address or the export), exits non-zero and leaves nothing
// mounted and no daemon, against either server. The command runs as users
// run it (daemonizing, no -f).
func TestMountBadInput(t *testing.T) {
	requireMountTools(t)
	bin := harness.BuildHushfs(t)

	type target struct {
		remote, ports string
		run           func(ctx context.Context, args ...string) *exec.Cmd
		closedPort    string // a port nothing listens on, where the server is
	}
	check := func(t *testing.T, tg target) {
		mnt := t.TempDir()
		for _, c := range []struct {
			name   string
			args   []string
			expect []string
		}{
			{"bad option", []string{"mount", tg.remote, mnt, "-o", tg.ports + ",wsize=65536,bogus_opt=1"},
				[]string{`"bogus_opt=1"`, "unknown option"}},
			{"bad option value", []string{"mount", tg.remote, mnt, "-o", tg.ports + ",retrans=many"},
				[]string{`"retrans=many"`}},
			{"unreachable server", []string{"mount", tg.remote, mnt, "-o", "port=" + tg.closedPort + ",mountport=" + tg.closedPort},
				[]string{"127.0.0.1:" + tg.closedPort, "connection refused"}},
			{"export that does not exist", []string{"mount", "127.0.0.1:/no/such/export", mnt, "-o", tg.ports},
				[]string{"/no/such/export"}},
		} {
			t.Run(c.name, func(t *testing.T) {
				ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
				defer cancel()
				cmd := tg.run(ctx, c.args...)
				cmd.WaitDelay = 2 * time.Second
				start := time.Now()
				out, err := cmd.CombinedOutput()
				var ee *exec.ExitError
				if !errors.As(err, &ee) || ee.ExitCode() == 0 {
					t.Errorf("exit: %v, want a non-zero status\n%s", err, out)
				}
				for _, w := range c.expect {
					if !strings.Contains(string(out), w) {
						t.Errorf("message does not name %q:\n%s", w, out)
					}
				}
				if ok, _ := harness.MountedAny(mnt); ok {
					t.Errorf("%s is mounted after a failed mount", mnt)
					syscall.Unmount(mnt, syscall.MNT_DETACH)
				}
				if pids := mountDaemonsFor(mnt); len(pids) > 0 {
					t.Errorf("mount daemons left running: %v", pids)
					for _, pid := range pids {
						syscall.Kill(pid, syscall.SIGKILL)
					}
				}
				t.Logf("%v, exit %v: %s", time.Since(start).Round(time.Millisecond), err, strings.TrimSpace(string(out)))
			})
		}
	}

	t.Run("ganesha", func(t *testing.T) {
		g := harness.StartGanesha(t, harness.GaneshaOptions{})
		check(t, target{
			remote: g.Addr + ":" + g.ExportPath,
			ports:  fmt.Sprintf("port=%d,mountport=%d", g.NFSPort, g.MountPort),
			run: func(ctx context.Context, args ...string) *exec.Cmd {
				return g.NS.Command(ctx, bin, args...)
			},
			closedPort: "2050", // nothing else runs in ganesha's namespace
		})
	})
	t.Run("hushfs-serve", func(t *testing.T) {
		s := harness.StartServe(t, t.TempDir())
		_, nfsPort, _ := net.SplitHostPort(s.NFSAddr)
		_, mountPort, _ := net.SplitHostPort(s.MountAddr)
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		closed := strconv.Itoa(l.Addr().(*net.TCPAddr).Port)
		l.Close()
		check(t, target{
			remote: "127.0.0.1:" + s.ExportPath,
			ports:  "port=" + nfsPort + ",mountport=" + mountPort,
			run: func(ctx context.Context, args ...string) *exec.Cmd {
				return exec.CommandContext(ctx, bin, args...)
			},
			closedPort: closed,
		})
	})
}

// TestMountServerDown kills `hushfs serve` under a mount. Soft: a stat or a
// read fails with EIO within a bound derived from timeo and retrans, and
// the mount still unmounts cleanly. Hard: a stat, a read and a close with
// data to write back wait for the server and complete, correctly, once it
// is restarted (same ports, same handles).
func TestMountServerDown(t *testing.T) {
	requireMountTools(t)
	bin := harness.BuildHushfs(t)

	t.Run("soft", func(t *testing.T) {
		export, mnt := t.TempDir(), t.TempDir()
		for _, n := range []string{"a", "r"} {
			must(t, "write on disk", os.WriteFile(filepath.Join(export, n), []byte("content of "+n), 0o644))
		}
		s := harness.StartServe(t, export)
		// timeo is in tenths of a second: 1 s, retransmitted once. The
		// wait grows by timeo per try (1 s, then 2 s), so a call fails
		// after about 3 s; 10 s bounds it with room to spare.
		const timeo, retrans = 10, 1
		m := harness.MountServe(t, bin, s, mnt, fmt.Sprintf("soft,timeo=%d,retrans=%d", timeo, retrans))
		bound := 10 * time.Second
		r, err := os.Open(filepath.Join(mnt, "r")) // opened, never read
		must(t, "open", err)
		defer r.Close()

		killServe(t, s)
		var st unix.Stat_t
		start := time.Now()
		err = unix.Stat(filepath.Join(mnt, "a"), &st) // never looked up: needs the server
		took := time.Since(start)
		wantErrno(t, "stat with the server down", err, unix.EIO)
		if took > bound {
			t.Errorf("stat took %v to fail, want < %v", took, bound)
		}
		t.Logf("stat failed after %v: %v", took.Round(time.Millisecond), err)
		start = time.Now()
		_, err = r.Read(make([]byte, 64))
		took = time.Since(start)
		wantErrno(t, "read with the server down", err, unix.EIO)
		if took > bound {
			t.Errorf("read took %v to fail, want < %v", took, bound)
		}
		t.Logf("read failed after %v: %v", took.Round(time.Millisecond), err)

		must(t, "close", r.Close())
		if err := m.Unmount(false); err != nil {
			t.Errorf("unmount with the server down: %v\n%s", err, m.Output())
		}
	})

	t.Run("hard", func(t *testing.T) {
		export, mnt := t.TempDir(), t.TempDir()
		must(t, "write on disk", os.WriteFile(filepath.Join(export, "x"), []byte("x"), 0o644))
		must(t, "write on disk", os.WriteFile(filepath.Join(export, "r"), []byte("read me after the restart"), 0o644))
		s := harness.StartServe(t, export)
		m := harness.MountServe(t, bin, s, mnt, "hard,timeo=10,retrans=1")
		r, err := os.Open(filepath.Join(mnt, "r")) // opened, never read
		must(t, "open", err)
		defer r.Close()
		w, err := os.Create(filepath.Join(mnt, "w"))
		must(t, "create", err)
		defer w.Close()
		data := pattern(300<<10, 3)
		_, err = w.Write(data) // held by the client until close
		must(t, "write", err)

		killServe(t, s)
		type result struct {
			what string
			err  error
		}
		done := make(chan result, 3)
		go func() {
			var st unix.Stat_t
			done <- result{"stat", unix.Stat(filepath.Join(mnt, "x"), &st)}
		}()
		go func() {
			buf := make([]byte, 64)
			n, err := r.Read(buf)
			if err == nil && string(buf[:n]) != "read me after the restart" {
				err = fmt.Errorf("read %q", buf[:n])
			}
			done <- result{"read", err}
		}()
		go func() { done <- result{"close with data to write", w.Close()} }()

		// Hard: nothing fails while the server is away, however long
		// (several timeo periods here).
		select {
		case r := <-done:
			t.Fatalf("%s returned while the server was down: %v", r.what, r.err)
		case <-time.After(4 * time.Second):
		}
		s.Restart(t)
		restarted := time.Now()
		for range 3 {
			select {
			case r := <-done:
				if r.err != nil {
					t.Errorf("%s after the restart: %v", r.what, r.err)
				}
				t.Logf("%s completed %v after the restart", r.what, time.Since(restarted).Round(time.Millisecond))
			case <-time.After(30 * time.Second):
				t.Fatalf("still waiting 30 s after the server came back\n%s", m.Output())
			}
		}
		if got, err := os.ReadFile(filepath.Join(export, "w")); err != nil || !bytesEqual(got, data) {
			t.Errorf("data written before the outage, on disk: %d bytes, %v; want %d", len(got), err, len(data))
		}
		must(t, "close", r.Close())
		if err := m.Unmount(false); err != nil {
			t.Errorf("unmount: %v\n%s", err, m.Output())
		}
	})
}

// killServe kills the server by pid and waits until it is gone.
func killServe(t *testing.T, s *harness.Serve) {
	t.Helper()
	if err := s.Cmd.Process.Kill(); err != nil {
		t.Fatalf("kill hushfs serve: %v", err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for s.Alive() {
		if time.Now().After(deadline) {
			t.Fatal("hushfs serve still alive 10 s after SIGKILL")
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func bytesEqual(a, b []byte) bool { return string(a) == string(b) }
