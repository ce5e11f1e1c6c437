package test

import (
	"bytes"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"hushfs/test/harness"
)

// TestLazyUnmountNamespaceCopy: a mount namespace made while a mount
// exists (here unshare -m; in test runs every ganesha's ip netns exec)
// holds a copy of it that `hushfs umount -l` does not reach ("/" is a
// private mount). Nothing uses the copy, so the daemon must exit at once
// after writing back, as without the copy, not when the namespace's last
// process does (it waited until killed 20 s later). A file the test still
// holds open keeps the detached mount served until it is closed. Over
// NFSv3 and NFSv4.1 against hushfs serve.
func TestLazyUnmountNamespaceCopy(t *testing.T) {
	requireMountTools(t)
	if _, err := exec.LookPath("unshare"); err != nil {
		t.Skip("no unshare: ", err)
	}
	bin := harness.BuildHushfs(t)
	for _, vers := range []string{"3", "4.1"} {
		t.Run("v"+vers, func(t *testing.T) {
			export, mnt := t.TempDir(), t.TempDir()
			s := harness.StartServe(t, export)
			var m *harness.Mount
			if vers == "3" {
				m = harness.MountServe(t, bin, s, mnt, "")
			} else {
				m, mnt = serveV41(t, bin, s)
			}
			// A short workload as the benchmarks' phases: create, read,
			// remove; the last file is written just before the unmount.
			for i := range 100 {
				must(t, "write", os.WriteFile(filepath.Join(mnt, fmt.Sprintf("f%d", i)), []byte(strconv.Itoa(i)), 0o644))
			}
			for i := range 100 {
				readFile(t, filepath.Join(mnt, fmt.Sprintf("f%d", i)))
				if i%2 == 0 {
					must(t, "remove", os.Remove(filepath.Join(mnt, fmt.Sprintf("f%d", i))))
				}
			}
			want := bytes.Repeat([]byte("last "), 50_000)
			must(t, "write last", os.WriteFile(filepath.Join(mnt, "last"), want, 0o644))
			held, err := os.Open(filepath.Join(mnt, "f1"))
			must(t, "open f1", err)
			defer held.Close()

			startNamespaceCopy(t, mnt)
			if out, err := harness.RunHushfs(bin, 20*time.Second, "umount", mnt, "-l"); err != nil {
				t.Fatalf("hushfs umount -l: %v\n%s", err, out)
			}
			// Still open here: the detached mount is in use.
			time.Sleep(1500 * time.Millisecond)
			if !m.Alive() {
				t.Fatalf("the daemon exited while a file of the detached mount was open\n%s", m.Output())
			}
			if b, err := io.ReadAll(held); err != nil || string(b) != "1" {
				t.Fatalf("reading the open file of the detached mount: %q, %v", b, err)
			}
			closed := time.Now()
			must(t, "close f1", held.Close())
			for deadline := closed.Add(5 * time.Second); m.Alive() && time.Now().Before(deadline); {
				time.Sleep(20 * time.Millisecond)
			}
			if m.Alive() {
				t.Fatalf("mount daemon %d still running 5 s after the last use of its lazily unmounted mount, held only by another namespace's copy\n%s", m.Pid(), m.Output())
			}
			t.Logf("daemon exited %.2f s after the last file was closed", time.Since(closed).Seconds())
			if got, err := os.ReadFile(filepath.Join(export, "last")); err != nil || !bytes.Equal(got, want) {
				t.Fatalf("the server has %d bytes of the last file (%v), want %d", len(got), err, len(want))
			}
			if !strings.Contains(m.Output(), "nothing uses it but copies") {
				t.Errorf("the daemon's log does not say why it ended:\n%s", m.Output())
			}
		})
	}
}

// startNamespaceCopy starts a process in a new private mount namespace,
// with a copy of every mount (mnt's included), alive until the test ends,
// and returns once the copy is there. Its working directory is "/": it
// does not use mnt.
func startNamespaceCopy(t *testing.T, mnt string) {
	t.Helper()
	holder := exec.Command("unshare", "--mount", "--propagation", "private", "cat")
	stdin, err := holder.StdinPipe()
	must(t, "stdin pipe", err)
	holder.Dir = "/"
	holder.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	must(t, "start unshare", holder.Start())
	exited := make(chan struct{})
	go func() { holder.Wait(); close(exited) }()
	t.Cleanup(func() {
		stdin.Close()
		holder.Process.Kill()
		select {
		case <-exited:
		case <-time.After(10 * time.Second):
			t.Errorf("unshare pid %d still running 10 s after SIGKILL", holder.Process.Pid)
		}
	})
	pid := strconv.Itoa(holder.Process.Pid)
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		// cat's own: unshare execs it once the namespace is set up.
		comm, _ := os.ReadFile("/proc/" + pid + "/comm")
		b, _ := os.ReadFile("/proc/" + pid + "/mountinfo")
		if strings.TrimSpace(string(comm)) == "cat" && strings.Contains(string(b), " "+mnt+" ") {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("the new namespace shows no copy of %s:\n%s", mnt, b)
		}
	}
}
