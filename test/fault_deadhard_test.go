package test

import (
	"bytes"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"hushfs/test/harness"
)

// closeBlocked starts a helper that writes closeData to NAME on the hard
// mount at mnt, blackholes the proxy for hole, and has the helper close
// the file: it blocks in close(), its data unwritten.
func closeBlocked(t *testing.T, p *faultProxy, mnt, name string, hole time.Duration) (*blocker, time.Time) {
	t.Helper()
	b := startBlocker(t, "close", filepath.Join(mnt, name), "handle")
	until := p.Blackhole(t, hole)
	b.proceed(t)
	if errno, _, ok := b.result(t, time.Second); ok {
		t.Fatalf("close returned (errno %v) in the blackhole of a hard mount", errno)
	}
	if st := b.threadState(); st != "S" && st != "D" {
		t.Fatalf("helper thread state %q, want blocked in close (S or D)", st)
	}
	return b, until
}

// killBlocked SIGKILLs a helper blocked in close and fails the test unless
// it is gone within bound.
func killBlocked(t *testing.T, b *blocker, bound time.Duration, m *harness.Mount) {
	t.Helper()
	start := time.Now()
	must(t, "SIGKILL the helper", b.cmd.Process.Kill())
	select {
	case <-b.done:
		t.Logf("helper blocked in close gone %v after SIGKILL", time.Since(start).Round(time.Millisecond))
	case <-time.After(bound):
		t.Fatalf("helper blocked in close still there %v after SIGKILL (thread state %s)\n%s", bound, b.threadState(), m.Output())
	}
}

// TestFaultKilledCloseHard: a process closes a file with dirty data on a
// hard mount whose server is blackholed, and is SIGKILLed while close()
// waits for the write-back. It is let go at once (not held in D state
// until the server answers). Its data stays with the mount: written when
// the server is back; or, when the daemon is told to stop first (SIGTERM,
// `hushfs umount`), the daemon exits within a bound and its log names the
// file and the bytes it abandons.
func TestFaultKilledCloseHard(t *testing.T) {
	requireMountTools(t)
	bin := harness.BuildHushfs(t)
	const opts = "hard,timeo=10,retrans=2"
	// The daemon gives the write-back at unmount until the server's next
	// major timeout: 1 + 2 + 3 s of retransmissions at timeo=10.
	exitBound := softBound(10, 2) + 10*time.Second
	want := closeData()

	t.Run("server-returns", func(t *testing.T) {
		export, mnt := t.TempDir(), t.TempDir()
		s := harness.StartServe(t, export)
		p := startFaultProxy(t, bin, s.NFSAddr)
		m := mountThrough(t, bin, s, p, mnt, opts)
		b, until := closeBlocked(t, p, mnt, "f", 6*time.Second)
		killBlocked(t, b, 3*time.Second, m)
		if time.Now().After(until) {
			t.Fatal("the blackhole ended before the kill was checked: the test proves nothing")
		}
		// The data reaches the server once it answers again.
		deadline := until.Add(30 * time.Second)
		for {
			got, _ := os.ReadFile(filepath.Join(export, "f"))
			if bytes.Equal(got, want) {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("server's copy: %d bytes, want the %d written before the kill\n%s", len(got), len(want), m.Output())
			}
			time.Sleep(50 * time.Millisecond)
		}
		if err := m.Unmount(false); err != nil {
			t.Errorf("unmount: %v\n%s", err, m.Output())
		}
		if out := m.Output(); strings.Contains(out, "not written back") {
			t.Errorf("daemon reports abandoned data although it was written:\n%s", out)
		}
	})

	for _, how := range []string{"sigterm", "umount"} {
		t.Run(how, func(t *testing.T) {
			export, mnt := t.TempDir(), t.TempDir()
			s := harness.StartServe(t, export)
			p := startFaultProxy(t, bin, s.NFSAddr)
			m := mountThrough(t, bin, s, p, mnt, opts)
			b, _ := closeBlocked(t, p, mnt, "lost", time.Hour)
			killBlocked(t, b, 3*time.Second, m)
			start := time.Now()
			if how == "sigterm" {
				must(t, "SIGTERM the daemon", syscall.Kill(m.Pid(), syscall.SIGTERM))
			} else if out, err := harness.RunHushfs(bin, exitBound, "umount", mnt); err != nil {
				t.Fatalf("hushfs umount: %v\n%s", err, out)
			}
			for m.Alive() && time.Since(start) < exitBound {
				time.Sleep(20 * time.Millisecond)
			}
			if m.Alive() {
				t.Fatalf("mount daemon still running %v after %s with its server blackholed\n%s", exitBound, how, m.Output())
			}
			t.Logf("daemon gone %v after %s", time.Since(start).Round(time.Millisecond), how)
			if ok, _ := harness.MountedAny(mnt); ok {
				t.Errorf("%s still mounted after the daemon exited", mnt)
			}
			out := m.Output()
			line := ""
			for _, l := range strings.Split(out, "\n") {
				if strings.Contains(l, "not written back") && strings.Contains(l, "/lost") {
					line = l
				}
			}
			if line == "" || !strings.Contains(line, strconv.Itoa(len(want))+" bytes") {
				t.Errorf("the daemon's log does not name /lost and its %d bytes as not written back:\n%s", len(want), out)
			}
		})
	}
}
