package main

import (
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"hushfs/bench/benchfmt"
	"hushfs/internal/client"
	"hushfs/internal/proxy"
	"hushfs/test/harness"
)

// The processes sampled, in the order of Sample's arrays.
var procNames = [3]string{"mount daemon", "server", "proxy"}

// faultArgs are the proxy's fault flags: a connection closed after about
// one call in 300 and a call cut short (then closed) after one in 2,000,
// up to 1 ms of extra delay on every reply, and one non-idempotent call in
// 20 (WRITE included) executed twice, its first reply dropped, the copy
// sent 20 ms later as a retransmission after a lost reply would be. The
// blackholes are started through the control socket (see blackholes).
func faultArgs(seed uint64) []string {
	return []string{"--seed", strconv.FormatUint(seed, 10), "--close-prob", "0.0033", "--truncate-prob", "0.0005",
		"--jitter", "1ms", "--dup-prob", "0.05", "--dup-procs", "nonidempotent,WRITE", "--dup-delay", "20ms"}
}

// Blackholes: one every blackholeEvery on average (±40%), each 1–2 s.
// The mount's first retransmission comes after timeo (5 s): a call lost
// in a blackhole costs that much, nothing more.
func blackholeEvery(quick bool) time.Duration {
	if quick {
		return 12 * time.Second
	}
	return time.Minute
}

// soak is one run.
type soak struct {
	ctx context.Context
	cfg config
	rep *Report

	start        time.Time
	hardDeadline time.Time
	// aborted is set once a hang or a dead process ended the run: failures
	// after it are consequences, not findings.
	aborted atomic.Bool

	bin, work, export, mnt, ref string
	sv                          *harness.Serve
	px                          *proxyProc
	m                           *harness.Mount
	wls                         []*workload

	mu    sync.Mutex // guards rep.Problems, rep.Warnings, rep.Samples, rep.Blackholes
	logMu sync.Mutex

	// Sampling runs from the start of the workloads until stopSampler
	// (after the final checks, before the unmount).
	sampleStop  chan struct{}
	stopOnce    sync.Once
	samplerDone chan struct{}

	logs map[string]string // the processes' output, by file name
}

func newSoak(ctx context.Context, c config) *soak {
	return &soak{ctx: ctx, cfg: c, rep: &Report{}, sampleStop: make(chan struct{})}
}

func (s *soak) logf(format string, args ...any) {
	s.logMu.Lock()
	defer s.logMu.Unlock()
	fmt.Fprintf(os.Stderr, "soak: "+format+"\n", args...)
}

// problem records a failure of the run.
func (s *soak) problem(format string, args ...any) {
	msg := fmt.Sprintf(format, args...)
	s.mu.Lock()
	s.rep.Problems = append(s.rep.Problems, msg)
	s.mu.Unlock()
	s.logf("PROBLEM: %s", msg)
}

// warn records something worth a look that does not fail the run.
func (s *soak) warn(format string, args ...any) {
	msg := fmt.Sprintf(format, args...)
	s.mu.Lock()
	s.rep.Warnings = append(s.rep.Warnings, msg)
	s.mu.Unlock()
	s.logf("warning: %s", msg)
}

// runAll sets up, runs, checks and tears down; the report has the outcome.
func (s *soak) runAll() {
	c := s.cfg
	s.rep.Mode = map[bool]string{true: "quick", false: "full"}[c.quick]
	s.rep.DurationS = c.duration.Seconds()
	s.rep.MountOpts = c.mountOpts
	s.rep.Seed = c.seed
	s.rep.SampleS = c.sample.Seconds()
	s.rep.BlackholeEvery = blackholeEvery(c.quick).String()
	n, how := len(workloadNames), "a proxy injecting faults"
	if len(c.only) > 0 {
		n = len(c.only)
	}
	if c.noFaults {
		how = "a proxy without faults"
	}
	s.rep.NoFaults = c.noFaults
	s.logf("%s mode: %d workloads for %v on one hard mount through %s; results in %s", s.rep.Mode, n, c.duration, how, c.out)
	ok := harness.Run(func(t *harness.Program) {
		s.setup(t)
		s.runWorkloads()
		s.finish()
	})
	harness.CleanupBuild()
	if !ok && s.ctx.Err() == nil {
		s.problem("setup or cleanup failed (see the messages above)")
	}
	s.analyze()
}

// setup builds hushfs and starts the server, the proxy and the mount.
func (s *soak) setup(t *harness.Program) {
	c := s.cfg
	setupStart := time.Now()
	s.bin = harness.BuildHushfs(t)
	work, err := os.MkdirTemp(c.tmp, "hushfs-soak-")
	if err != nil {
		t.Fatalf("work directory: %v", err)
	}
	s.work = work
	s.export = filepath.Join(work, "export")
	s.mnt = filepath.Join(work, "mnt")
	s.ref = filepath.Join(work, "ref")
	// Registered first, so it runs last: after the mount is gone.
	t.Cleanup(func() {
		if busy, _ := harness.MountedAny(s.mnt); busy {
			t.Errorf("%s is still mounted: leaving %s in place", s.mnt, work)
			return
		}
		os.RemoveAll(work)
	})
	for _, d := range []string{s.export, s.mnt, s.ref} {
		if err := os.Mkdir(d, 0o755); err != nil {
			t.Fatalf("%v", err)
		}
	}
	archive := filepath.Join(work, "untar.tar")
	entries, err := makeArchive(archive, c.sizes.tarFiles, c.seed)
	if err != nil {
		t.Fatalf("archive: %v", err)
	}
	s.sv = harness.StartServe(t, s.export)
	var flags []string
	switch {
	case c.noFaults:
	case c.faults != "":
		flags = strings.Fields(c.faults)
	default:
		flags = faultArgs(c.seed)
	}
	s.px = startProxy(t, s.bin, s.sv.NFSAddr, filepath.Join(work, "proxy.ctl"), flags)
	var f proxy.Faults
	if err := s.px.call("faults", &f); err != nil {
		t.Fatalf("proxy faults: %v", err)
	}
	s.rep.Faults = f
	_, mountPort, _ := net.SplitHostPort(s.sv.MountAddr)
	opts := "port=" + s.px.port + ",mountport=" + mountPort
	if c.mountOpts != "" {
		opts += "," + c.mountOpts
	}
	s.m = harness.StartMount(t, harness.MountSpec{Bin: s.bin, Server: "127.0.0.1", Export: s.sv.ExportPath, Dir: s.mnt, Options: opts})
	s.wls = jobsFor(s, archive, entries, s.ref)
	for _, w := range s.wls {
		if err := os.Mkdir(w.mnt, 0o755); err != nil {
			t.Fatalf("%v", err)
		}
		s.rep.Workloads = append(s.rep.Workloads, &WorkloadResult{Name: w.name, About: w.job.about()})
	}
	s.rep.SetupS = time.Since(setupStart).Seconds()
	s.logf("ready in %s: hushfs serve pid %d (%s), proxy pid %d (%s), mount daemon pid %d (%s -o %s)",
		benchfmt.Secs(time.Since(setupStart)), s.sv.Cmd.Process.Pid, s.sv.NFSAddr, s.px.pid, s.px.addr, s.m.Pid(), s.mnt, opts)
}

func (s *soak) pids() [3]int { return [3]int{s.m.Pid(), s.sv.Cmd.Process.Pid, s.px.pid} }

// runWorkloads runs the workloads until the deadline, watching for hangs
// and dead processes; on either it aborts the run.
func (s *soak) runWorkloads() {
	c := s.cfg
	s.start = time.Now()
	end := s.start.Add(c.duration)
	s.hardDeadline = end.Add(c.grace)
	wctx, cancel := context.WithDeadline(s.ctx, end)
	defer cancel()

	samplerDone := make(chan struct{})
	go func() { defer close(samplerDone); s.sampler() }()
	s.samplerDone = samplerDone
	if !c.noFaults && !c.noHoles {
		go s.blackholes(wctx)
	}
	for _, w := range s.wls {
		go w.loop(wctx)
	}
	all := make(chan struct{})
	go func() {
		for _, w := range s.wls {
			<-w.done
		}
		close(all)
	}()
	abort := make(chan string, 1)
	watchStop := make(chan struct{})
	go s.watchdog(abort, watchStop, all)
	select {
	case <-all:
	case why := <-abort:
		s.hang(why, all)
	}
	close(watchStop)
	s.rep.WorkSeconds = time.Since(s.start).Seconds()
	s.logf("workloads over after %s", benchfmt.Secs(time.Since(s.start)))
}

// watchdog reports on abort the first hang or dead process it sees: an
// operation running longer than the operation limit, workloads still
// running at the hard deadline, or the mount daemon, the server or the
// proxy gone.
func (s *soak) watchdog(abort chan<- string, stop, all <-chan struct{}) {
	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	for {
		select {
		case <-stop:
			return
		case <-all:
			return
		case <-tick.C:
		}
		now := time.Now()
		why := ""
		switch {
		case !s.m.Alive():
			why = "the mount daemon exited"
		case !s.sv.Alive():
			why = "the server exited"
		case !s.px.alive():
			why = "the proxy exited"
		case now.After(s.hardDeadline):
			why = fmt.Sprintf("workloads still running %v after the end of the run", s.cfg.grace)
		}
		for _, w := range s.wls {
			for _, tr := range w.allTrackers() {
				if doing, age, busy := tr.state(now); why == "" && busy && age > s.cfg.opTimeout {
					why = fmt.Sprintf("workload %s (%s) stuck for %s: %s", w.name, tr.name, benchfmt.Secs(age), doing)
				}
			}
		}
		if why != "" {
			abort <- why
			return
		}
	}
}

// hang records what every workload was doing, has the mount daemon and
// the server print their goroutines (SIGQUIT), detaches the mount so that
// the stuck calls fail, and waits a little for the workloads to return.
func (s *soak) hang(why string, all <-chan struct{}) {
	s.aborted.Store(true)
	s.problem("run aborted: %s", why)
	now := time.Now()
	for _, w := range s.wls {
		for _, tr := range w.allTrackers() {
			doing, age, busy := tr.state(now)
			state := "idle"
			if busy {
				state = fmt.Sprintf("for %s: %s", benchfmt.Secs(age), doing)
			}
			line := fmt.Sprintf("%s (%s) %s", w.name, tr.name, state)
			s.rep.Hang = append(s.rep.Hang, line)
			s.logf("  %s", line)
		}
	}
	for _, pid := range []int{s.m.Pid(), s.sv.Cmd.Process.Pid} {
		syscall.Kill(pid, syscall.SIGQUIT)
	}
	deadline := time.Now().Add(5 * time.Second)
	for (s.m.Alive() || s.sv.Alive()) && time.Now().Before(deadline) {
		time.Sleep(50 * time.Millisecond)
	}
	s.rep.HangDumps = true
	if out, err := harness.RunHushfs(s.bin, 20*time.Second, "umount", s.mnt, "-l"); err != nil {
		s.logf("hushfs umount -l %s: %v %s", s.mnt, err, out)
	}
	select {
	case <-all:
	case <-time.After(20 * time.Second):
		for _, w := range s.wls {
			select {
			case <-w.done:
			default:
				doing, age, _ := w.main.state(time.Now())
				s.problem("workload %s still stuck 20 s after the mount was detached (for %s: %s)", w.name, benchfmt.Secs(age), doing)
			}
		}
	}
}

// blackholes starts a blackhole of 1–2 s in the proxy at random times
// until ctx ends.
func (s *soak) blackholes(ctx context.Context) {
	r := rand.New(rand.NewPCG(s.cfg.seed, 0xb1ac))
	every := blackholeEvery(s.cfg.quick)
	for {
		wait := time.Duration(float64(every) * (0.6 + 0.8*r.Float64()))
		select {
		case <-ctx.Done():
			return
		case <-time.After(wait):
		}
		d := time.Second + time.Duration(r.Int64N(int64(time.Second)))
		d = d.Round(time.Millisecond)
		var res struct {
			Until time.Time `json:"until"`
		}
		at := time.Since(s.start)
		if err := s.px.call("blackhole "+d.String(), &res); err != nil {
			s.warn("starting a blackhole: %v", err)
			continue
		}
		s.mu.Lock()
		s.rep.Blackholes = append(s.rep.Blackholes, Window{StartS: at.Seconds(), LenS: d.Seconds()})
		s.mu.Unlock()
	}
}

// finish checks every workload's files, reads the counters, unmounts, and
// keeps the processes' logs.
func (s *soak) finish() {
	defer s.collectLogs()
	if s.aborted.Load() {
		s.stopSampler()
		return
	}
	s.finalChecks()
	if s.aborted.Load() {
		s.stopSampler()
		return
	}
	if out, err := harness.RunHushfs(s.bin, 30*time.Second, "stats", s.mnt, "--json"); err != nil {
		s.problem("hushfs stats --json: %v: %s", err, out)
	} else {
		var snap client.Snapshot
		if err := json.Unmarshal([]byte(out), &snap); err != nil {
			s.problem("hushfs stats --json: %v", err)
		} else {
			s.rep.setRPC(snap)
		}
	}
	var pc proxy.Counts
	if err := s.px.call("counts", &pc); err != nil {
		s.problem("proxy counts: %v", err)
	} else {
		s.rep.setProxy(pc)
	}
	s.stopSampler()
	start := time.Now()
	if err := s.m.Unmount(false); err != nil {
		if holders := mountHolders(s.mnt); len(holders) > 0 && s.m.Alive() {
			// Not the daemon's doing: another process's mount namespace
			// (unshare, ip netns exec) copied the mount, and the kernel
			// keeps the file system alive for it. bench/run avoids this by
			// running the soak in a private mount namespace.
			s.warn("unmount: %v; the mount lives on in other mount namespaces (%s), so the daemon cannot see it go", err, strings.Join(holders, ", "))
			s.rep.Unmount = "detached here; the daemon stayed up: copies of the mount in other mount namespaces (" + strings.Join(holders, ", ") + ")"
		} else {
			s.problem("unmount: %v", err)
			s.rep.Unmount = "failed: " + err.Error()
		}
	} else {
		s.rep.Unmount = fmt.Sprintf("clean (hushfs umount, the daemon exited) in %s", benchfmt.Secs(time.Since(start)))
	}
}

// finalChecks compares every workload's directory through the mount and
// on the server's disk with its model, with a time limit.
func (s *soak) finalChecks() {
	done := make(chan struct{})
	var cur atomic.Pointer[workload]
	go func() {
		defer close(done)
		for i, w := range s.wls {
			cur.Store(w)
			res := s.rep.Workloads[i]
			n, err := s.finalCheck(w)
			res.FinalFiles = n
			if err != nil {
				res.FinalCheck = err.Error()
				w.fail(fmt.Errorf("final check: %w", err))
			} else {
				res.FinalCheck = "ok"
			}
			w.main.idle()
		}
	}()
	limit := 4 * s.cfg.opTimeout
	select {
	case <-done:
	case <-time.After(limit):
		w := cur.Load()
		doing, age, _ := w.main.state(time.Now())
		s.hang(fmt.Sprintf("final check of %s not done after %v: for %s: %s", w.name, limit, benchfmt.Secs(age), doing), done)
	}
}

// finalCheck scans one workload's directory through the mount and on disk
// and compares both with its model; it returns the number of names.
func (s *soak) finalCheck(w *workload) (int, error) {
	mnt, err := scanTree(w.mnt, func(rel string) { w.main.set("final check through the mount: " + rel) })
	if err != nil {
		return 0, err
	}
	disk, err := scanTree(w.disk, func(rel string) { w.main.set("final check on disk: " + rel) })
	if err != nil {
		return len(mnt), err
	}
	return len(mnt), compareTrees(w.model.snapshot(), mnt, disk).err(fmt.Sprintf("%d names", len(mnt)))
}

// collectLogs keeps the end of each process's output for the results
// (written if the run fails), and reports a panic or a data race in any of
// them.
func (s *soak) collectLogs() {
	s.logs = map[string]string{}
	if s.m != nil {
		s.logs["mount.log"] = s.m.Output()
	}
	if s.sv != nil {
		s.logs["serve.log"] = s.sv.Output()
	}
	if s.px != nil {
		s.logs["proxy.log"] = s.px.out.String()
	}
	bad := regexp.MustCompile(`(?m)^(panic: |fatal error: |WARNING: DATA RACE)`)
	for name, text := range s.logs {
		if !s.rep.HangDumps && bad.MatchString(text) {
			s.problem("%s shows a panic, fatal error or data race (kept in the results directory)", name)
		}
		const keep = 1 << 20
		if len(text) > keep {
			s.logs[name] = "…(earlier output dropped)\n" + text[len(text)-keep:]
		}
	}
}

// mountHolders lists the processes (pid and command) whose mount
// namespace, other than ours, has a mount on dir.
func mountHolders(dir string) []string {
	self, _ := os.Readlink("/proc/self/ns/mnt")
	procs, _ := filepath.Glob("/proc/[0-9]*")
	seen := map[string]bool{}
	var out []string
	for _, p := range procs {
		ns, err := os.Readlink(p + "/ns/mnt")
		if err != nil || ns == self || seen[ns] {
			continue
		}
		b, err := os.ReadFile(p + "/mountinfo")
		if err != nil || !strings.Contains(string(b), " "+dir+" ") {
			continue
		}
		seen[ns] = true
		comm, _ := os.ReadFile(p + "/comm")
		out = append(out, fmt.Sprintf("pid %s %s", filepath.Base(p), strings.TrimSpace(string(comm))))
		if len(out) == 5 {
			break
		}
	}
	return out
}

// ---- sampling

// sampler reads the three processes' memory and descriptors and the
// proxy's counts every interval until stopSampler, printing a progress
// line now and then.
func (s *soak) sampler() {
	tick := time.NewTicker(s.cfg.sample)
	defer tick.Stop()
	lastLine := time.Now()
	s.takeSample()
	for {
		select {
		case <-s.sampleStop:
			s.takeSample()
			return
		case <-tick.C:
		}
		smp := s.takeSample()
		if time.Since(lastLine) >= s.cfg.progress-s.cfg.sample/2 {
			lastLine = time.Now()
			fmt.Println(s.progressLine(smp))
		}
	}
}

// takeSample records one sample.
func (s *soak) takeSample() Sample {
	smp := Sample{T: time.Since(s.start).Seconds()}
	for i, pid := range s.pids() {
		smp.RSSKiB[i] = rssKiB(pid)
		smp.FDs[i] = fdCount(pid)
	}
	var pc proxy.Counts
	if err := s.px.call("counts", &pc); err == nil {
		for _, n := range pc.Calls {
			smp.Calls += n
		}
		smp.Faults = pc.Faults
		smp.Conns = pc.Conns
	}
	s.mu.Lock()
	s.rep.Samples = append(s.rep.Samples, smp)
	s.mu.Unlock()
	return smp
}

func (s *soak) progressLine(smp Sample) string {
	var b strings.Builder
	fmt.Fprintf(&b, "[%4.0fs/%.0fs] RSS MiB mount %.0f serve %.0f proxy %.0f; fds %d/%d/%d; %s calls, faults: %d closes %d truncated %d dups %d blackholes;",
		smp.T, s.cfg.duration.Seconds(), mibF(smp.RSSKiB[0]), mibF(smp.RSSKiB[1]), mibF(smp.RSSKiB[2]),
		smp.FDs[0], smp.FDs[1], smp.FDs[2], benchfmt.Commas(smp.Calls), smp.Faults.Closes, smp.Faults.Truncated, smp.Faults.Duplicated, smp.Faults.Blackholes)
	var errs, mism int64
	for _, w := range s.wls {
		fmt.Fprintf(&b, " %s %d", w.name, w.iterations.Load())
		errs += w.errs.Load()
		mism += w.mismatches.Load()
	}
	fmt.Fprintf(&b, "; errors %d mismatches %d", errs, mism)
	return b.String()
}

// stopSampler ends the sampling (with a last sample) and waits for it.
func (s *soak) stopSampler() {
	s.stopOnce.Do(func() { close(s.sampleStop) })
	if s.samplerDone != nil {
		<-s.samplerDone
	}
}

// rssKiB is a process's resident set (VmRSS) in KiB, 0 if it is gone.
func rssKiB(pid int) uint64 {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0
	}
	for line := range strings.SplitSeq(string(b), "\n") {
		if rest, ok := strings.CutPrefix(line, "VmRSS:"); ok {
			n, _ := strconv.ParseUint(strings.TrimSuffix(strings.TrimSpace(rest), " kB"), 10, 64)
			return n
		}
	}
	return 0
}

// fdCount is the number of a process's open descriptors, 0 if it is gone.
func fdCount(pid int) int {
	ents, err := os.ReadDir(fmt.Sprintf("/proc/%d/fd", pid))
	if err != nil {
		return 0
	}
	return len(ents)
}
