package test

import (
	"errors"
	"fmt"
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

// softBound is how long a soft mount's call waits before it fails: the
// client waits timeo after the first transmission and one timeo more after
// each retransmission than after the one before (timeo, 2·timeo, ...,
// (retrans+1)·timeo; see rpc.Client), timeo in tenths of a second.
func softBound(timeo, retrans int) time.Duration {
	var d time.Duration
	for n := 1; n <= retrans+1; n++ {
		d += time.Duration(n*timeo) * 100 * time.Millisecond
	}
	return d
}

// TestFaultBlackholeSoft: a 5 s blackhole under a soft,timeo=10,retrans=2
// mount. A stat of a name never looked up fails with EIO once the call's
// last retransmission times out (6 s: 1 + 2 + 3 s), and that major timeout
// resets the connection, as a hard mount's does: the calls still waiting,
// a direct read and a read through the page cache started 0.3 s and 0.6 s
// later, are resent on the new connection, after the blackhole, and
// answered before their own major timeouts. `hushfs stats` shows the
// timeouts and transmissions per procedure, and once the blackhole is over
// the same stat and reads work. (The calls are staggered so that which
// major timeout comes first is known.)
func TestFaultBlackholeSoft(t *testing.T) {
	requireMountTools(t)
	bin := harness.BuildHushfs(t)
	export, mnt := t.TempDir(), t.TempDir()
	must(t, "write on disk", os.WriteFile(filepath.Join(export, "a"), []byte("a"), 0o644))
	content := pattern(100<<10, 5)
	must(t, "write on disk", os.WriteFile(filepath.Join(export, "r"), content, 0o644))
	s := harness.StartServe(t, export)
	p := startFaultProxy(t, bin, s.NFSAddr)
	const timeo, retrans, hole = 10, 2, 5 * time.Second
	bound := softBound(timeo, retrans) // 6 s: longer than the blackhole
	m := mountThrough(t, bin, s, p, mnt, fmt.Sprintf("soft,timeo=%d,retrans=%d", timeo, retrans))
	// Opened now, read only in the blackhole.
	r, err := os.Open(filepath.Join(mnt, "r"))
	must(t, "open", err)
	defer r.Close()
	direct, err := os.OpenFile(filepath.Join(mnt, "r"), os.O_RDONLY|syscall.O_DIRECT, 0)
	must(t, "open O_DIRECT", err)
	defer direct.Close()
	m.ResetStats(t)

	// The calls start at the start of the blackhole, 0.3 s apart: each
	// one's last retransmission (at 3 s) falls inside it.
	type result struct {
		what string
		err  error
		n    int
		took time.Duration
	}
	until := p.Blackhole(t, hole)
	res := make(chan result, 3)
	buf := make([]byte, 4096)
	go func() {
		start := time.Now()
		var st unix.Stat_t
		err := unix.Stat(filepath.Join(mnt, "a"), &st)
		res <- result{"stat", err, 0, time.Since(start)}
	}()
	const gap = 300 * time.Millisecond
	go func() {
		time.Sleep(gap)
		start := time.Now()
		n, err := unix.Pread(int(direct.Fd()), make([]byte, 8192), 4096)
		res <- result{"direct read", err, n, time.Since(start)}
	}()
	go func() {
		time.Sleep(2 * gap)
		start := time.Now()
		n, err := unix.Read(int(r.Fd()), buf)
		res <- result{"read", err, n, time.Since(start)}
	}()
	for range 3 {
		select {
		case rr := <-res:
			t.Logf("%s in a %v blackhole: %v after %v (bound %v)", rr.what, hole, rr.err, rr.took.Round(time.Millisecond), bound)
			// Each answered when the stat's major timeout reset the
			// connection, 6 s after the first call began.
			want := bound
			switch rr.what {
			case "stat":
				wantErrno(t, "stat in the blackhole", rr.err, unix.EIO)
			case "direct read":
				want -= gap
				if rr.err != nil || rr.n != 8192 {
					t.Errorf("direct read: %d bytes, %v; want its READ resent on the new connection and answered", rr.n, rr.err)
				}
			case "read":
				want -= 2 * gap
				if rr.err != nil || rr.n != len(buf) || !bytesEqual(buf, content[:len(buf)]) {
					t.Errorf("read through the page cache: %d bytes, %v; want its READ resent on the new connection and answered", rr.n, rr.err)
				}
			}
			// Timers fire a little late, never early.
			if rr.took < want-200*time.Millisecond || rr.took > want+time.Second {
				t.Errorf("%s returned after %v, want %v (soft, timeo=%d, retrans=%d)", rr.what, rr.took, want, timeo, retrans)
			}
		case <-time.After(bound + 10*time.Second):
			t.Fatalf("a call still blocked %v into the blackhole\n%s", bound+10*time.Second, m.Output())
		}
	}
	if time.Now().Before(until) {
		t.Errorf("the calls failed before the blackhole ended (%v early): the bound is wrong", time.Until(until))
	}

	// The statistics show what happened, per procedure: one LOOKUP that
	// got no reply to any of its transmissions, and two READs whose n
	// transmissions went into the blackhole (n-1 timed out) before a
	// resend on the new connection was answered.
	st := m.Stats(t)
	for name, o := range st.Ops {
		t.Logf("stats %s: %d ops, %d transmissions, %d timeouts, %d errors", name, o.Ops, o.Transmissions, o.Timeouts, o.Errors)
	}
	n := uint64(retrans + 1)
	if lk := st.Ops["LOOKUP"]; lk.Ops != 1 || lk.Timeouts != n || lk.Transmissions != n || lk.Errors != 1 {
		t.Errorf("LOOKUP stats %+v: want 1 call, %d transmissions, %d timeouts, 1 error", lk, n, n)
	}
	if rd := st.Ops["READ"]; rd.Ops != 2 || rd.Timeouts != 2*(n-1) || rd.Transmissions != 2*(n+1) || rd.Errors != 0 {
		t.Errorf("READ stats %+v: want 2 calls, %d transmissions, %d timeouts, 0 errors", rd, 2*(n+1), 2*(n-1))
	}
	out, err := harness.RunHushfs(bin, 20*time.Second, "stats", mnt)
	if err != nil {
		t.Fatalf("hushfs stats: %v\n%s", err, out)
	}
	checkStatsTable(t, out, "LOOKUP", n, n)
	checkStatsTable(t, out, "READ", 2*(n+1), 2*(n-1))

	c := p.Counts(t).Faults
	if c.Blackholes != 1 || c.BlackholedCalls != 3*n {
		t.Errorf("proxy: %d blackholes, %d calls dropped; want 1, %d", c.Blackholes, c.BlackholedCalls, 3*n)
	}

	// Over: the mount works again.
	var sta unix.Stat_t
	must(t, "stat after the blackhole", unix.Stat(filepath.Join(mnt, "a"), &sta))
	got := make([]byte, len(content))
	if n, err := r.ReadAt(got, 0); err != nil || n != len(content) {
		t.Fatalf("read after the blackhole: %d bytes, %v", n, err)
	}
	sameBytes(t, "read after the blackhole", got, content)
	dgot := make([]byte, 8192)
	if n, err := unix.Pread(int(direct.Fd()), dgot, 4096); err != nil || n != len(dgot) {
		t.Fatalf("direct read after the blackhole: %d bytes, %v", n, err)
	}
	sameBytes(t, "direct read after the blackhole", dgot, content[4096:4096+8192])
	must(t, "close", r.Close())
	must(t, "close", direct.Close())
	if err := m.Unmount(false); err != nil {
		t.Errorf("unmount: %v\n%s", err, m.Output())
	}
}

// checkStatsTable finds procedure's line in `hushfs stats` output and
// checks its trans and timeouts columns.
func checkStatsTable(t *testing.T, out, procedure string, trans, timeouts uint64) {
	t.Helper()
	lines := strings.Split(out, "\n")
	col := map[string]int{}
	for _, l := range lines {
		f := strings.Fields(l)
		if len(f) > 0 && f[0] == "procedure" {
			for i, name := range f {
				col[name] = i
			}
		}
		if len(f) == 0 || f[0] != procedure || len(col) == 0 {
			continue
		}
		ti, ok1 := col["trans"]
		to, ok2 := col["timeouts"]
		if !ok1 || !ok2 || ti >= len(f) || to >= len(f) {
			t.Fatalf("hushfs stats: no trans/timeouts columns:\n%s", out)
		}
		gotTrans, _ := strconv.ParseUint(f[ti], 10, 64)
		gotTimeouts, _ := strconv.ParseUint(f[to], 10, 64)
		if gotTrans != trans || gotTimeouts != timeouts {
			t.Errorf("hushfs stats %s: trans %d timeouts %d, want %d %d:\n%s", procedure, gotTrans, gotTimeouts, trans, timeouts, out)
		}
		return
	}
	t.Errorf("hushfs stats shows no %s line:\n%s", procedure, out)
}

// TestFaultInterruptHard: on a hard mount, a process blocked in a call
// during a blackhole is interrupted by SIGINT, which it handles: the call
// fails with EINTR within the check interval. SIGURG (the Go runtime's
// preemption signal) does not interrupt it, and neither does a SIGINT it
// ignores: that call completes once the blackhole ends. cat, blocked too,
// dies of SIGINT at once. The mount is usable throughout.
func TestFaultInterruptHard(t *testing.T) {
	requireMountTools(t)
	bin := harness.BuildHushfs(t)
	export, mnt := t.TempDir(), t.TempDir()
	for _, n := range []string{"handled", "ignored", "after", "cat"} {
		must(t, "write on disk", os.WriteFile(filepath.Join(export, n), []byte(n), 0o644))
	}
	s := harness.StartServe(t, export)
	p := startFaultProxy(t, bin, s.NFSAddr)
	m := mountThrough(t, bin, s, p, mnt, "hard,timeo=10,retrans=2")

	const hole = 6 * time.Second
	until := p.Blackhole(t, hole)
	handled := startBlocker(t, "stat", filepath.Join(mnt, "handled"), "handle")
	ignored := startBlocker(t, "stat", filepath.Join(mnt, "ignored"), "ignore")

	// Blocked: neither returns on its own.
	if _, _, ok := handled.result(t, 500*time.Millisecond); ok {
		t.Fatal("stat returned in the blackhole of a hard mount")
	}
	handled.signal(t, syscall.SIGURG)
	if errno, _, ok := handled.result(t, time.Second); ok {
		t.Fatalf("SIGURG ended the blocked stat: errno %v", errno)
	}
	for _, b := range []*blocker{handled, ignored} {
		if st := b.threadState(); st != "S" && st != "D" {
			t.Errorf("helper thread state %q, want blocked (S or D)", st)
		}
	}
	// cat, blocked in the same blackhole, as a user would stop it: SIGINT
	// to the process, whose default action kills.
	cat := exec.Command("cat", filepath.Join(mnt, "cat"))
	cat.Dir = "/"
	must(t, "start cat", cat.Start())
	catDone := make(chan error, 1)
	go func() { catDone <- cat.Wait() }()
	t.Cleanup(func() { cat.Process.Kill() })
	select {
	case err := <-catDone:
		t.Fatalf("cat ended in the blackhole of a hard mount: %v", err)
	case <-time.After(300 * time.Millisecond):
	}

	sent := time.Now()
	handled.signal(t, syscall.SIGINT)
	ignored.signal(t, syscall.SIGINT)
	must(t, "kill -INT cat", cat.Process.Signal(syscall.SIGINT))
	errno, _, ok := handled.result(t, 3*time.Second)
	if !ok {
		t.Fatalf("stat still blocked 3 s after SIGINT (handled)\n%s", m.Output())
	}
	latency := time.Since(sent)
	if errno != unix.EINTR {
		t.Errorf("stat interrupted by a handled SIGINT: %v, want EINTR", errno)
	}
	if latency > 1500*time.Millisecond {
		t.Errorf("EINTR came %v after SIGINT, want within the 200 ms check interval (and slack)", latency)
	}
	t.Logf("handled SIGINT: %v after %v, %v before the blackhole's end", errno, latency.Round(time.Millisecond), time.Until(until).Round(time.Millisecond))
	select {
	case err := <-catDone:
		var ee *exec.ExitError
		if !errors.As(err, &ee) || ee.Sys().(syscall.WaitStatus).Signal() != syscall.SIGINT {
			t.Errorf("cat after SIGINT: %v, want killed by SIGINT", err)
		}
		t.Logf("cat killed by SIGINT %v after it was sent", time.Since(sent).Round(time.Millisecond))
	case <-time.After(3 * time.Second):
		t.Errorf("cat still blocked 3 s after SIGINT")
	}
	if errno, _, ok := ignored.result(t, 500*time.Millisecond); ok {
		t.Errorf("an ignored SIGINT ended the blocked stat: errno %v", errno)
	}

	// The mount still works: the other call completes when the blackhole
	// ends, and new calls succeed.
	errno, took, ok := ignored.result(t, time.Until(until)+20*time.Second)
	if !ok {
		t.Fatalf("stat with SIGINT ignored still blocked 20 s after the blackhole\n%s", m.Output())
	}
	if errno != 0 || time.Now().Before(until) {
		t.Errorf("stat with SIGINT ignored: errno %v after %v; want success after the blackhole", errno, took)
	}
	t.Logf("stat with SIGINT ignored: errno %d after %v", errno, took.Round(time.Millisecond))
	for _, n := range []string{"handled", "after"} {
		var st unix.Stat_t
		must(t, "stat "+n+" after the blackhole", unix.Stat(filepath.Join(mnt, n), &st))
	}
	if got := readFile(t, filepath.Join(mnt, "handled")); string(got) != "handled" {
		t.Errorf("read after the blackhole: %q", got)
	}
	if err := m.Unmount(false); err != nil {
		t.Errorf("unmount: %v\n%s", err, m.Output())
	}
}

// TestFaultUmountServerGone: `hushfs umount` of a hard mount whose server
// is gone. Unused, it unmounts at once and the daemon exits. With a process
// blocked in a call it is busy: umount says so, -l detaches it, and once
// the process is interrupted the daemon exits.
func TestFaultUmountServerGone(t *testing.T) {
	requireMountTools(t)
	bin := harness.BuildHushfs(t)

	t.Run("idle", func(t *testing.T) {
		export, mnt := t.TempDir(), t.TempDir()
		s := harness.StartServe(t, export)
		m := harness.MountServe(t, bin, s, mnt, "hard,timeo=10,retrans=2")
		must(t, "write through the mount", os.WriteFile(filepath.Join(mnt, "f"), []byte("x"), 0o644))
		killServe(t, s)
		start := time.Now()
		if err := m.Unmount(false); err != nil {
			t.Fatalf("hushfs umount with the server gone: %v\n%s", err, m.Output())
		}
		t.Logf("unmounted, daemon gone, %v after the command", time.Since(start).Round(time.Millisecond))
	})

	t.Run("blocked", func(t *testing.T) {
		export, mnt := t.TempDir(), t.TempDir()
		s := harness.StartServe(t, export)
		m := harness.MountServe(t, bin, s, mnt, "hard,timeo=10,retrans=2")
		killServe(t, s)
		b := startBlocker(t, "stat", filepath.Join(mnt, "never-looked-up"), "handle")
		if _, _, ok := b.result(t, 500*time.Millisecond); ok {
			t.Fatal("stat returned with the server gone on a hard mount")
		}
		out, err := harness.RunHushfs(bin, 20*time.Second, "umount", mnt)
		if err == nil {
			t.Fatalf("hushfs umount with a process inside succeeded:\n%s", out)
		}
		if !strings.Contains(out, "busy") || !strings.Contains(out, "-l") {
			t.Errorf("hushfs umount of a busy mount should say it is busy and suggest -l:\n%s", out)
		}
		out, err = harness.RunHushfs(bin, 20*time.Second, "umount", "-l", mnt)
		if err != nil {
			t.Fatalf("hushfs umount -l: %v\n%s", err, out)
		}
		if ok, _ := harness.MountedAny(mnt); ok {
			t.Errorf("%s still mounted after umount -l", mnt)
		}
		b.signal(t, syscall.SIGINT)
		errno, _, ok := b.result(t, 5*time.Second)
		if !ok || errno != unix.EINTR {
			t.Errorf("blocked stat after SIGINT: errno %v, returned %v; want EINTR", errno, ok)
		}
		deadline := time.Now().Add(15 * time.Second)
		for m.Alive() && time.Now().Before(deadline) {
			time.Sleep(20 * time.Millisecond)
		}
		if m.Alive() {
			t.Errorf("mount daemon %d still running 15 s after its last user left the detached mount\n%s", m.Pid(), m.Output())
		}
	})
}
