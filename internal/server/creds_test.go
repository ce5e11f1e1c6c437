package server

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"hushfs/internal/nfs3"
	"hushfs/internal/rpc"
)

// threadCreds is what the calling thread's credentials are, read with
// calls that change nothing.
type threadCreds struct {
	fsuid, fsgid uint32
	groups       []uint32
	effective    [2]uint32
}

func readThreadCreds(t *testing.T) threadCreds {
	t.Helper()
	var c threadCreds
	u, _, _ := unix.RawSyscall(unix.SYS_SETFSUID, ^uintptr(0), 0, 0)
	g, _, _ := unix.RawSyscall(unix.SYS_SETFSGID, ^uintptr(0), 0, 0)
	c.fsuid, c.fsgid = uint32(u), uint32(g)
	gs, err := unix.Getgroups()
	if err != nil {
		t.Fatal(err)
	}
	for _, x := range gs {
		c.groups = append(c.groups, uint32(x))
	}
	hdr := unix.CapUserHeader{Version: unix.LINUX_CAPABILITY_VERSION_3}
	var data [2]unix.CapUserData
	if err := unix.Capget(&hdr, &data[0]); err != nil {
		t.Fatal(err)
	}
	c.effective = [2]uint32{data[0].Effective, data[1].Effective}
	return c
}

// as switches only what differs from the server's own credentials, and
// leaves the thread exactly as it found it, whatever the identity before:
// groups, ids and capabilities.
func TestAsSwitchesAndRestores(t *testing.T) {
	e := startEnv(t, false)
	s := e.srv
	runtime.LockOSThread() // as then runs on this very thread
	defer runtime.UnlockOSThread()
	own := readThreadCreds(t)
	ids := []identity{
		{uid: 1000, gid: 1000},
		{uid: 1000, gid: 1000, groups: []uint32{17, 4242}},
		{uid: 1000, gid: 1000},
		{uid: 0, gid: 5},
		{uid: 1000, gid: own.fsgid},
		{uid: 65534, gid: 65534, groups: slices.Clone(own.groups)},
		{uid: 0, gid: 0, groups: []uint32{3}},
		{uid: 2000, gid: 2000, groups: []uint32{own.fsgid}},
	}
	for round := range 3 {
		for _, id := range ids {
			var in threadCreds
			if err := s.as(&id, func() error { in = readThreadCreds(t); return nil }); err != nil {
				t.Fatalf("as %+v: %v", id, err)
			}
			if id.privileged() {
				// Runs with the server's own credentials.
				id = identity{uid: own.fsuid, gid: own.fsgid, groups: own.groups}
			}
			if in.fsuid != id.uid || in.fsgid != id.gid || !slices.Equal(in.groups, id.groups) {
				t.Fatalf("round %d: inside as %+v the thread had %+v", round, id, in)
			}
			if id.uid != 0 && in.effective != [2]uint32{} {
				t.Fatalf("round %d: as uid %d with effective capabilities %#x", round, id.uid, in.effective)
			}
			if id.uid == 0 && in.effective != own.effective {
				t.Fatalf("round %d: as root with capabilities %#x, the server's are %#x", round, in.effective, own.effective)
			}
			if after := readThreadCreds(t); after.fsuid != own.fsuid || after.fsgid != own.fsgid ||
				!slices.Equal(after.groups, own.groups) || after.effective != own.effective {
				t.Fatalf("round %d: after as %+v the thread has %+v, want %+v", round, id, after, own)
			}
		}
	}
	// A panic in fn is an error, and the credentials are restored first.
	err := s.as(&identity{uid: 1000, gid: 1000}, func() error { panic("boom") })
	if !errors.Is(err, nfs3.ErrServerFault) {
		t.Fatalf("panic in as: %v", err)
	}
	if after := readThreadCreds(t); after.fsuid != own.fsuid || after.effective != own.effective {
		t.Fatalf("after a panic the thread has %+v", after)
	}
}

// Identities following each other on the server's threads never inherit
// anything from the one before: groups, gid and ownership of new files are
// each caller's own, whether or not they differ from the server's.
func TestIdentitySequence(t *testing.T) {
	e := startEnv(t, false)
	rootc := e.root0()
	root := rootc.rootFH()
	grp := filepath.Join(e.root, "grp")
	os.Mkdir(grp, 0o770)
	os.Chown(grp, 0, 4242)
	os.Chmod(grp, 0o770)
	pub := filepath.Join(e.root, "pub")
	os.Mkdir(pub, 0o777)
	os.Chmod(pub, 0o777)
	grpFH := rootc.mustLookup(root, "grp")
	pubFH := rootc.mustLookup(root, "pub")
	own := os.Getegid()

	member := e.client(1000, 1000, 4242)
	nonmember := e.client(1000, 1000)
	r5 := e.client(0, 5)
	u0 := e.client(1000, uint32(own))
	owner := func(name string, uid, gid uint32) {
		t.Helper()
		if st := lstat(t, filepath.Join(pub, name)); st.Uid != uid || st.Gid != gid {
			t.Fatalf("%s owned by %d:%d, want %d:%d", name, st.Uid, st.Gid, uid, gid)
		}
	}
	for i := range 10 {
		n := func(p string) string { return p + string(rune('a'+i)) }
		member.mustCreate(grpFH, n("m"), 0o644)
		if _, st := nonmember.create(grpFH, n("x"), 0o644); st != nfs3.ErrAcces {
			t.Fatalf("round %d: CREATE in the group's directory right after a member: %v", i, st)
		}
		rootc.mustCreate(pubFH, n("root"), 0o644)
		owner(n("root"), 0, 0)
		r5.mustCreate(pubFH, n("r5"), 0o644)
		owner(n("r5"), 0, 5)
		u0.mustCreate(pubFH, n("u0"), 0o644)
		owner(n("u0"), 1000, uint32(own))
		nonmember.mustCreate(pubFH, n("u"), 0o644)
		owner(n("u"), 1000, 1000)
	}
}

// When the credentials of a thread cannot be restored, the thread is not
// reused: its goroutine ends, the call's connection is dropped, the client
// resends on a new one and gets its answer, and later calls run with the
// right identities.
func TestRestoreFailureRetiresThread(t *testing.T) {
	var mu sync.Mutex
	var logs []string
	e := startEnvTuned(t, false, func(c *Config) {
		logf := c.Logf
		c.Logf = func(format string, args ...any) {
			mu.Lock()
			logs = append(logs, format)
			mu.Unlock()
			logf(format, args...)
		}
	})
	rootc := e.root0()
	root := rootc.rootFH()
	pub := filepath.Join(e.root, "pub")
	os.Mkdir(pub, 0o777)
	os.Chmod(pub, 0o777)
	os.WriteFile(filepath.Join(pub, "f"), nil, 0o644)
	pubFH := rootc.mustLookup(root, "pub")

	var fail atomic.Int32
	fail.Store(1)
	fault := func() error {
		if fail.Add(-1) >= 0 {
			return errors.New("injected failure to restore")
		}
		return nil
	}
	e.srv.creds.leaveFault.Store(&fault)

	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	c, err := rpc.Dial(ctx, e.addr, rpc.ClientOptions{Timeout: time.Second, Retrans: 5})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	accepted := e.rs.Stats().ConnsAccepted
	var lr nfs3.LookupRes
	err = c.Call(ctx, nfs3.Program, nfs3.Version, nfs3.ProcLookup, rpc.SysCred(1000, 1000, nil, "t"),
		&nfs3.LookupArgs{What: nfs3.DirOpArgs{Dir: pubFH, Name: []byte("f")}}, &lr)
	if err != nil || lr.Status != nfs3.OK {
		t.Fatalf("LOOKUP as uid 1000 across the failure: %v %v", err, lr.Status)
	}
	if fail.Load() >= 0 {
		t.Fatal("the fault was not hit")
	}
	if got := e.rs.Stats().ConnsAccepted; got == accepted {
		t.Fatal("the connection of the failed call was not replaced")
	}
	mu.Lock()
	retired := slices.ContainsFunc(logs, func(l string) bool { return strings.Contains(l, "retiring the thread") })
	mu.Unlock()
	if !retired {
		t.Fatal("the failure was not logged")
	}
	// Root's files are root's, a user's the user's.
	rootc.mustCreate(pubFH, "r", 0o644)
	e.client(1000, 1000).mustCreate(pubFH, "u", 0o644)
	for name, want := range map[string]uint32{"r": 0, "u": 1000} {
		if st := lstat(t, filepath.Join(pub, name)); st.Uid != want {
			t.Fatalf("%s owned by %d, want %d", name, st.Uid, want)
		}
	}
}
