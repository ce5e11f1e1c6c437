package test

import (
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

// TestUnmountLeavesOthersMount: another mount namespace holds a copy of
// mount A and works in it, so `hushfs umount` here removes A from this
// namespace only and A's daemon lives on (serving the copy). Mount B is
// made at the same path. SIGTERM to A's daemon must end it without touching B: B stays
// mounted and working.
func TestUnmountLeavesOthersMount(t *testing.T) {
	requireMountTools(t)
	if _, err := exec.LookPath("unshare"); err != nil {
		t.Skip("no unshare: ", err)
	}
	bin := harness.BuildHushfs(t)
	exportA, exportB, mnt := t.TempDir(), t.TempDir(), t.TempDir()
	must(t, "write on disk", os.WriteFile(filepath.Join(exportB, "b"), []byte("B"), 0o644))
	sa := harness.StartServe(t, exportA)
	sb := harness.StartServe(t, exportB)
	a := harness.MountServe(t, bin, sa, mnt, "")

	// A private mount namespace with a copy of every mount, A included,
	// kept alive by a process that waits on its stdin, in A's copy (a
	// copy nothing uses does not keep A's daemon:
	// TestLazyUnmountNamespaceCopy).
	holder := exec.Command("unshare", "--mount", "--propagation", "private", "cat")
	stdin, err := holder.StdinPipe()
	must(t, "stdin pipe", err)
	holder.Dir = mnt
	holder.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	must(t, "start unshare", holder.Start())
	held := make(chan struct{})
	go func() { holder.Wait(); close(held) }()
	t.Cleanup(func() {
		stdin.Close()
		holder.Process.Kill()
		select {
		case <-held:
		case <-time.After(10 * time.Second):
			t.Errorf("unshare pid %d still running 10 s after SIGKILL", holder.Process.Pid)
		}
	})
	mountinfo := "/proc/" + strconv.Itoa(holder.Process.Pid) + "/mountinfo"
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		// cat's own: unshare execs it once the namespace is set up.
		comm, _ := os.ReadFile("/proc/" + strconv.Itoa(holder.Process.Pid) + "/comm")
		b, _ := os.ReadFile(mountinfo)
		if strings.TrimSpace(string(comm)) == "cat" && strings.Contains(string(b), " "+mnt+" ") {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the new namespace shows no copy of %s:\n%s", mnt, b)
		}
	}

	if out, err := harness.RunHushfs(bin, 20*time.Second, "umount", mnt); err != nil {
		t.Fatalf("hushfs umount: %v\n%s", err, out)
	}
	time.Sleep(300 * time.Millisecond)
	if !a.Alive() {
		t.Fatalf("A's daemon exited although another namespace still uses its mount\n%s", a.Output())
	}
	b := harness.MountServe(t, bin, sb, mnt, "")
	var before unix.Stat_t
	must(t, "stat B", unix.Stat(mnt, &before))

	must(t, "SIGTERM A's daemon", syscall.Kill(a.Pid(), syscall.SIGTERM))
	for deadline := time.Now().Add(20 * time.Second); a.Alive() && time.Now().Before(deadline); {
		time.Sleep(20 * time.Millisecond)
	}
	if a.Alive() {
		t.Errorf("A's daemon still running 20 s after SIGTERM")
	}
	t.Logf("A's daemon after SIGTERM:\n%s", a.Output())
	if ok, _ := harness.Mounted(mnt); !ok {
		t.Fatalf("B is no longer mounted at %s after A's daemon ended\nA:\n%s", mnt, a.Output())
	}
	var after unix.Stat_t
	must(t, "stat B after A's daemon ended", unix.Stat(mnt, &after))
	if after.Dev != before.Dev {
		t.Fatalf("the mount at %s changed (device %d, was B's %d)", mnt, after.Dev, before.Dev)
	}
	if got := readFile(t, filepath.Join(mnt, "b")); string(got) != "B" {
		t.Fatalf("B's file reads %q", got)
	}
	if !b.Alive() {
		t.Fatalf("B's daemon died\n%s", b.Output())
	}
	if err := b.Unmount(false); err != nil {
		t.Errorf("unmount B: %v\n%s", err, b.Output())
	}
}
