package fusefs

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"syscall"
	"testing"
	"time"

	"github.com/hanwen/go-fuse/v2/fuse"
)

// sleeper starts a process with the given credentials (by pid: its
// /proc/PID/status carries the groups) and kills it at cleanup.
func sleeper(t *testing.T, uid, gid uint32, groups []uint32) int {
	t.Helper()
	cmd := exec.Command("sleep", "60")
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: uid, Gid: gid, Groups: groups}}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		cmd.Process.Kill()
		cmd.Wait()
	})
	return cmd.Process.Pid
}

func TestCredentialCache(t *testing.T) {
	requireRoot(t)
	clock := newFakeClock()
	c := newCredCache(clock.Now, "/proc")
	pid := sleeper(t, 1234, 1234, []uint32{42, 7, 4242})
	h := fuse.InHeader{Caller: fuse.Caller{Owner: fuse.Owner{Uid: 1234, Gid: 1234}, Pid: uint32(pid)}}
	cr := c.cred(&h)
	got := append([]uint32(nil), cr.Groups...)
	sort.Slice(got, func(i, j int) bool { return got[i] < got[j] })
	if cr.UID != 1234 || cr.GID != 1234 || fmt.Sprint(got) != "[7 42 4242]" {
		t.Fatalf("cred %+v, want uid/gid 1234 groups [7 42 4242]", cr)
	}
	if again := c.cred(&h); again != cr {
		t.Error("second call within the TTL read /proc again")
	}
	clock.Advance(credTTL)
	if again := c.cred(&h); again == cr {
		t.Error("the cached credential outlived its TTL")
	}
	// The kernel's own requests: no process, no groups.
	if k := c.cred(&fuse.InHeader{Caller: fuse.Caller{Owner: fuse.Owner{Uid: 5, Gid: 6}}}); k.UID != 5 || k.GID != 6 || len(k.Groups) != 0 {
		t.Errorf("pid 0 cred %+v", k)
	}
	// A process that is gone: uid and gid still count.
	if k := c.cred(&fuse.InHeader{Caller: fuse.Caller{Owner: fuse.Owner{Uid: 5, Gid: 6}, Pid: 1 << 30}}); k.UID != 5 || len(k.Groups) != 0 {
		t.Errorf("vanished process cred %+v", k)
	}
	// Bounded.
	for i := range 3 * maxCreds {
		c.cred(&fuse.InHeader{Caller: fuse.Caller{Owner: fuse.Owner{Uid: uint32(i)}, Pid: uint32(os.Getpid())}})
	}
	c.mu.Lock()
	size := len(c.m)
	c.mu.Unlock()
	if size > maxCreds {
		t.Errorf("cache holds %d entries, bound %d", size, maxCreds)
	}
}

// TestGroupsReachServer checks that a caller's supplementary groups,
// which FUSE does not pass, decide permissions on the server.
func TestGroupsReachServer(t *testing.T) {
	e := newEnv(t, envOpts{})
	shared := filepath.Join(e.dir, "shared")
	if err := os.Mkdir(shared, 0o770); err != nil {
		t.Fatal(err)
	}
	if err := os.Chown(shared, 0, 4242); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(shared, 0o770); err != nil { // past the umask
		t.Fatal(err)
	}
	dir := e.lookup(1, "shared").NodeId
	member := sleeper(t, 1234, 1234, []uint32{4242})
	outsider := sleeper(t, 1235, 1235, []uint32{99})
	mkdir := func(pid int, uid uint32, name string) fuse.Status {
		h := fuse.InHeader{NodeId: dir, Caller: fuse.Caller{Owner: fuse.Owner{Uid: uid, Gid: uid}, Pid: uint32(pid)}}
		var out fuse.EntryOut
		return e.fs.Mkdir(nil, &fuse.MkdirIn{InHeader: h, Mode: 0o755}, name, &out)
	}
	if st := mkdir(member, 1234, "by-member"); st != fuse.OK {
		t.Errorf("Mkdir by a member of the directory's group = %v, want OK", st)
	}
	if st := mkdir(outsider, 1235, "by-outsider"); st != fuse.EACCES {
		t.Errorf("Mkdir by a non-member = %v, want EACCES", st)
	}
	var st syscall.Stat_t
	if err := syscall.Stat(filepath.Join(shared, "by-member"), &st); err != nil || st.Uid != 1234 {
		t.Errorf("created directory: uid %d, %v", st.Uid, err)
	}
	// access(2) goes to the server too.
	h := fuse.InHeader{NodeId: dir, Caller: fuse.Caller{Owner: fuse.Owner{Uid: 1235, Gid: 1235}, Pid: uint32(outsider)}}
	if s := e.fs.Access(nil, &fuse.AccessIn{InHeader: h, Mask: fuse.W_OK}); s != fuse.EACCES {
		t.Errorf("Access(W_OK) by a non-member = %v, want EACCES", s)
	}
	h = fuse.InHeader{NodeId: dir, Caller: fuse.Caller{Owner: fuse.Owner{Uid: 1234, Gid: 1234}, Pid: uint32(member)}}
	if s := e.fs.Access(nil, &fuse.AccessIn{InHeader: h, Mask: fuse.W_OK | fuse.X_OK}); s != fuse.OK {
		t.Errorf("Access(W_OK|X_OK) by a member = %v, want OK", s)
	}
}

// TestInterrupt checks that INTERRUPT (the request's cancel channel
// closing) does not end a call whose reply has not come: it completes,
// successfully, once the server answers (see reqCtx).
func TestInterrupt(t *testing.T) {
	e := newEnv(t, envOpts{stall: true})
	if err := os.WriteFile(filepath.Join(e.dir, "f"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	e.stall.stalled.Store(true)
	cancel := make(chan struct{})
	done := make(chan fuse.Status, 1)
	go func() {
		h := e.hdr(1)
		var out fuse.EntryOut
		done <- e.fs.Lookup(cancel, &h, "f", &out)
	}()
	select {
	case st := <-done:
		t.Fatalf("Lookup returned %v while the server's replies were held", st)
	case <-time.After(200 * time.Millisecond):
	}
	close(cancel)
	select {
	case st := <-done:
		t.Fatalf("interrupted Lookup returned %v while the server's replies were held", st)
	case <-time.After(300 * time.Millisecond):
	}
	e.stall.stalled.Store(false)
	select {
	case st := <-done:
		if st != fuse.OK {
			t.Errorf("interrupted Lookup = %v once the server answered, want OK", st)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("interrupted Lookup did not return once the server answered")
	}
	e.lookup(1, "f") // the mount still works
}
