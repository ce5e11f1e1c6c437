package main

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"time"

	"hushfs/bench/benchfmt"
	"hushfs/test/harness"
)

// wrun is one workload against one server at one RTT: a fresh export, a
// fresh server, a proxy in front of it, and the mounts the phases ask for.
// Everything it starts is stopped through its harness.Program's cleanups.
type wrun struct {
	s        *suite
	t        *harness.Program
	server   string
	vers     string // NFS version mounted: "3" or "4.1"
	rtt      time.Duration
	workload string
	tag      string // "[ganesha v4.1 rtt=10ms] lua", for messages

	work       string
	export     string // the exported directory, on local disk
	exportPath string // what the client MOUNTs
	target     string // the server's NFS address, for the proxy
	mountPort  int    // the server's MOUNT port (MOUNT bypasses the proxy)
	ns         *harness.NetNS
	ctl        string // the proxy's control socket
	proxyPort  string
	nmounts    int

	// stopped is set once a phase timed out: later phases that depend on
	// it are reported as not run.
	stopped string
}

// runWorkload runs one workload with fresh processes and records its
// phases; whatever happens, everything it started is gone when it returns.
func (s *suite) runWorkload(server, vers string, rtt time.Duration, workload string) {
	r := &wrun{s: s, server: server, vers: vers, rtt: rtt, workload: workload,
		tag: fmt.Sprintf("[%s%s rtt=%s] %s", server, versTag(vers), rttName(rtt), workload)}
	start := time.Now()
	var declared []phaseName
	recorded := map[string]bool{}
	before := len(s.report.Phases)
	ok := harness.Run(func(t *harness.Program) {
		r.t = t
		r.work = t.TempDir()
		r.export = filepath.Join(r.work, "export")
		if err := os.Mkdir(r.export, 0o755); err != nil {
			t.Fatalf("%s: %v", r.tag, err)
		}
		w := workloads[workload]
		declared = w.phases(s.cfg.sizes, rtt)
		s.logf("%s: preparing the export", r.tag)
		prep := time.Now()
		if err := w.setup(r); err != nil {
			t.Fatalf("%s: setup: %v", r.tag, err)
		}
		s.logf("%s: export ready in %s; starting %s and the proxy (rtt %s)", r.tag, benchfmt.Secs(time.Since(prep)), server, rttName(rtt))
		r.startServer()
		r.startProxy()
		w.run(r)
	})
	s.mu.Lock()
	for _, p := range s.report.Phases[before:] {
		recorded[p.Label] = true
	}
	s.mu.Unlock()
	// A phase the workload never reached is reported, not dropped.
	for _, pn := range declared {
		if recorded[pn.label] {
			continue
		}
		p := r.newPhase(pn)
		switch {
		case s.ctx.Err() != nil:
			p.Status, p.Check = "not run", "interrupted"
		case !ok:
			p.Status, p.Check = "failed", "the workload failed before this phase (see the log)"
		default:
			p.Status, p.Check = "not run", r.stopped
		}
		s.add(p)
	}
	if !ok && s.ctx.Err() == nil {
		s.problem("%s: the workload failed to run (see the messages above)", r.tag)
	}
	s.logf("%s: done in %s", r.tag, benchfmt.Secs(time.Since(start)))
}

func (r *wrun) newPhase(pn phaseName) *Phase {
	return &Phase{Workload: r.workload, ID: pn.id, Label: pn.label, Server: r.server, Vers: r.vers,
		RTTms: float64(r.rtt) / float64(time.Millisecond)}
}

// versTag names a version in messages: nothing for NFSv3 (as before
// there was a choice), " v4.1" for the other.
func versTag(vers string) string {
	if vers == "" || vers == "3" {
		return ""
	}
	return " v" + vers
}

// v41 reports whether the run mounts over NFSv4.1.
func (r *wrun) v41() bool { return r.vers == "4.1" }

func (r *wrun) startServer() {
	switch r.server {
	case "hushfs":
		sv := harness.StartServe(r.t, r.export)
		r.target = sv.NFSAddr
		_, port, err := net.SplitHostPort(sv.MountAddr)
		if err != nil {
			r.t.Fatalf("%s: MOUNT address %q: %v", r.tag, sv.MountAddr, err)
		}
		r.mountPort, _ = strconv.Atoi(port)
		r.exportPath = sv.ExportPath
	case "ganesha":
		// NFSv4 only where it is measured: the v3 runs stay as they were.
		g := harness.StartGanesha(r.t, harness.GaneshaOptions{ExportDir: r.export, NFSv4: r.v41()})
		r.ns = g.NS
		r.target = net.JoinHostPort(g.Addr, strconv.Itoa(g.NFSPort))
		r.mountPort = g.MountPort
		r.exportPath = g.ExportPath
	default:
		r.t.Fatalf("unknown server %q", r.server)
	}
}

var proxyLine = regexp.MustCompile(`^hushfs proxy: listening (\S+) `)

// startProxy starts `hushfs proxy` in front of the server's NFS port (in
// ganesha's namespace for ganesha) with a control socket for the counts.
func (r *wrun) startProxy() {
	r.ctl = filepath.Join(r.work, "proxy.ctl")
	args := []string{"proxy", "--listen", "127.0.0.1:0", "--target", r.target,
		"--rtt", r.rtt.String(), "--control", r.ctl}
	var cmd *exec.Cmd
	if r.ns != nil {
		cmd = r.ns.Command(context.Background(), r.s.cfg.bin, args...) // nsenter execs: the pid is the proxy's
	} else {
		cmd = exec.Command(r.s.cfg.bin, args...)
	}
	errf, err := os.Create(filepath.Join(r.work, "proxy.err"))
	if err != nil {
		r.t.Fatalf("%s: %v", r.tag, err)
	}
	defer errf.Close()
	cmd.Stderr = errf
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		r.t.Fatalf("%s: %v", r.tag, err)
	}
	// Its own process group keeps a terminal's Ctrl-C away from it: the
	// suite stops it after reading the last counts.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	cmd.Dir = "/"
	if err := cmd.Start(); err != nil {
		r.t.Fatalf("%s: start proxy: %v", r.tag, err)
	}
	exited := make(chan struct{})
	ready := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			if m := proxyLine.FindStringSubmatch(sc.Text()); m != nil {
				select {
				case ready <- m[1]:
				default:
				}
			}
		}
		io.Copy(io.Discard, stdout)
		cmd.Wait()
		close(exited)
	}()
	pid := cmd.Process.Pid
	r.t.Cleanup(func() {
		syscall.Kill(pid, syscall.SIGTERM)
		select {
		case <-exited:
			return
		case <-time.After(5 * time.Second):
		}
		syscall.Kill(pid, syscall.SIGKILL)
		select {
		case <-exited:
		case <-time.After(10 * time.Second):
			r.t.Errorf("%s: proxy pid %d survived SIGKILL", r.tag, pid)
		}
	})
	select {
	case addr := <-ready:
		_, port, err := net.SplitHostPort(addr)
		if err != nil {
			r.t.Fatalf("%s: proxy address %q: %v", r.tag, addr, err)
		}
		r.proxyPort = port
	case <-exited:
		b, _ := os.ReadFile(errf.Name())
		r.t.Fatalf("%s: proxy exited before it listened:\n%s", r.tag, b)
	case <-time.After(20 * time.Second):
		r.t.Fatalf("%s: proxy printed no listening line within 20 s", r.tag)
	}
}

// mount makes a fresh mount through the proxy on a new mount point.
func (r *wrun) mount() *harness.Mount {
	r.nmounts++
	dir := filepath.Join(r.work, fmt.Sprintf("mnt%d", r.nmounts))
	if err := os.Mkdir(dir, 0o755); err != nil {
		r.t.Fatalf("%s: %v", r.tag, err)
	}
	opts := fmt.Sprintf("port=%s,mountport=%d,%s", r.proxyPort, r.mountPort, r.s.cfg.mountOpts)
	if r.v41() {
		// No MOUNT protocol: the session and the path walk go through
		// the proxy too.
		opts = fmt.Sprintf("vers=4.1,port=%s,%s", r.proxyPort, r.s.cfg.mountOpts)
	}
	return harness.StartMount(r.t, harness.MountSpec{
		Bin: r.s.cfg.bin, Server: "127.0.0.1", Export: r.exportPath, Dir: dir,
		Options: strings.TrimSuffix(opts, ","),
		NS:      r.ns,
	})
}

// unmount detaches the mount (`hushfs umount -l`) and makes sure its daemon
// is gone, killing it by pid if it does not exit by itself; kill skips the
// wait (the mount is being abandoned after a timeout).
func (r *wrun) unmount(m *harness.Mount, kill bool) {
	if ok, _ := harness.Mounted(m.Dir); ok {
		if out, err := harness.RunHushfs(r.s.cfg.bin, 20*time.Second, "umount", m.Dir, "-l"); err != nil {
			r.s.logf("  %s: hushfs umount -l %s: %v\n%s", r.tag, m.Dir, err, out)
		}
	}
	wait := 20 * time.Second
	if kill {
		wait = 2 * time.Second
	}
	if !waitDaemon(m, wait) {
		if !kill {
			r.s.logf("  %s: mount daemon %d still running %s after umount -l; killing it", r.tag, m.Pid(), wait)
		}
		syscall.Kill(m.Pid(), syscall.SIGKILL)
		if !waitDaemon(m, 10*time.Second) {
			r.t.Errorf("%s: mount daemon %d survived SIGKILL", r.tag, m.Pid())
		}
	}
	for range 3 {
		if ok, _ := harness.MountedAny(m.Dir); !ok {
			return
		}
		syscall.Unmount(m.Dir, syscall.MNT_DETACH)
	}
}

// waitDaemon waits at most d for the mount's daemon to exit.
func waitDaemon(m *harness.Mount, d time.Duration) bool {
	deadline := time.Now().Add(d)
	for m.Alive() {
		if time.Now().After(deadline) {
			return false
		}
		time.Sleep(20 * time.Millisecond)
	}
	return true
}

// step is one phase to run: a shell command in a directory of the mount.
type step struct {
	phaseName
	script string // run with sh -c
	dir    string
	limit  time.Duration
	churn  string   // a directory (on the export) to churn during the phase
	bytes  int64    // data the phase moves, for its MB/s (0: not a throughput phase)
	env    []string // added to the workload's environment
	note   string   // for the report (how the phase started)
	check  func(x *execResult) (string, bool)
}

type phaseName struct{ id, label string }

// execResult is how a phase's command ended.
type execResult struct {
	exit     int // -1 when killed
	timedOut bool
	stopped  bool // interrupted by Ctrl-C / SIGTERM
	stuck    bool // did not die even once its mount was aborted
	wall     time.Duration
	user     time.Duration
	sys      time.Duration
	stdout   string // path of the captured standard output
	stderr   string // the end of its standard error
}

// phase runs one step on mount m and records it: counters reset before,
// the command in its own process group under the step's time limit, both
// counters read after (until they agree, briefly, as calls may still be in
// flight), then the step's check. After a timeout the mount is torn down
// and phase returns false; the caller needs a fresh mount to go on.
func (r *wrun) phase(m *harness.Mount, st step) (*Phase, bool) {
	s := r.s
	p := r.newPhase(st.phaseName)
	limit := st.limit
	if s.cfg.maxPhase > 0 && limit > s.cfg.maxPhase {
		limit = s.cfg.maxPhase
	}
	p.LimitS = limit.Seconds()
	fmt.Printf("%s: %-16s ", r.tag, st.label)
	if err := r.resetCounts(m); err != nil {
		fmt.Println()
		p.Status, p.Check = "failed", "resetting counters: "+err.Error()
		s.add(p)
		s.problem("%s %s: %v", r.tag, st.label, err)
		return p, false
	}
	var stopChurn func() (int, error)
	if st.churn != "" {
		stopChurn = startChurn(st.churn)
		time.Sleep(50 * time.Millisecond) // the directory is already changing when the phase starts
	}
	h, err := r.start(st)
	if err != nil {
		if stopChurn != nil {
			stopChurn()
		}
		fmt.Println()
		p.Status, p.Check = "failed", err.Error()
		s.add(p)
		s.problem("%s %s: %v", r.tag, st.label, err)
		return p, false
	}
	x := h.wait(s.ctx, limit)
	if x.timedOut || x.stopped {
		// Stopped early: read what the counters saw, then abandon the mount
		// (killing its daemon ends any request the workload still waits for).
		h.kill(5 * time.Second)
		r.fill(p, m)
		if !h.done() {
			syscall.Kill(m.Pid(), syscall.SIGKILL)
			h.kill(15 * time.Second)
		}
		y := h.result()
		y.timedOut, y.stopped = x.timedOut, x.stopped
		x = y
	} else {
		r.fill(p, m)
	}
	p.Note = st.note
	if stopChurn != nil {
		n, err := stopChurn()
		p.Note = fmt.Sprintf("churn: %d files created and removed", n)
		if err != nil {
			p.Note += fmt.Sprintf("; churn error: %v", err)
			s.problem("%s %s: churn loop: %v", r.tag, st.label, err)
		}
	}
	p.WallS, p.UserS, p.SysS = x.wall.Seconds(), x.user.Seconds(), x.sys.Seconds()
	p.MountPeakRSSKiB = peakRSS(m.Pid())
	if st.bytes > 0 && !x.timedOut && !x.stopped && x.wall > 0 {
		p.Bytes = st.bytes
		p.MBps = float64(st.bytes) / 1e6 / x.wall.Seconds()
	}
	switch {
	case x.stopped:
		p.Status = "not run"
		p.Check = fmt.Sprintf("interrupted after %s, %d RPCs so far", benchfmt.Secs(x.wall), p.Total())
	case x.timedOut:
		p.Status = "timeout"
		p.Check = fmt.Sprintf("timed out after %s, %s RPCs so far", benchfmt.Secs(limit), benchfmt.Commas(p.Total()))
		if x.stuck {
			p.Check += "; the workload did not die even after its mount was aborted"
			s.problem("%s %s: workload process group %d survived SIGKILL and the mount's abort", r.tag, st.label, h.pid)
		}
	default:
		p.Status = "ok"
		p.Check, p.CheckOK = st.check(&x)
		if !p.CheckOK {
			s.problem("%s %s: wrong result: %s", r.tag, st.label, p.Check)
		}
	}
	if !p.Agree {
		s.problem("%s %s: hushfs stats and the proxy disagree: %s", r.tag, st.label, p.AgreeDetail)
	}
	s.add(p)
	fmt.Println(phaseLine(p))
	if x.timedOut || x.stopped {
		r.unmount(m, true)
		if x.timedOut {
			r.stopped = fmt.Sprintf("not run: %s timed out", st.label)
		} else {
			r.stopped = "interrupted"
		}
		return p, false
	}
	return p, true
}

// peakRSS is a process's peak resident set in KiB (VmHWM), 0 if unknown.
func peakRSS(pid int) uint64 {
	if pid <= 0 {
		return 0
	}
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0
	}
	for line := range strings.SplitSeq(string(b), "\n") {
		if rest, ok := strings.CutPrefix(line, "VmHWM:"); ok {
			n, _ := strconv.ParseUint(strings.TrimSuffix(strings.TrimSpace(rest), " kB"), 10, 64)
			return n
		}
	}
	return 0
}

// phaseLine is the progress line printed once a phase ends.
func phaseLine(p *Phase) string {
	agree := "proxy = stats"
	if !p.Agree {
		agree = "PROXY ≠ STATS: " + p.AgreeDetail
	}
	if p.MBps > 0 {
		agree = fmt.Sprintf("%.0f MB/s, mount peak RSS %s  %s", p.MBps, mib(p.MountPeakRSSKiB), agree)
	}
	res := p.Check
	if p.Status == "ok" && !p.CheckOK {
		res = "WRONG: " + p.Check
	}
	return fmt.Sprintf("%8s  %9s RPCs (%s)  user %s sys %s  %s  %s",
		benchfmt.Secs(time.Duration(p.WallS*float64(time.Second))), benchfmt.Commas(p.Total()), topProcs(p, 4),
		benchfmt.Secs(time.Duration(p.UserS*float64(time.Second))), benchfmt.Secs(time.Duration(p.SysS*float64(time.Second))), agree, res)
}

// handle is a phase's running command.
type handle struct {
	cmd    *exec.Cmd
	pid    int
	start  time.Time
	end    time.Time
	exited chan struct{}
	out    string
	errf   string
}

func (r *wrun) start(st step) (*handle, error) {
	outPath := filepath.Join(r.work, "phase.out")
	errPath := filepath.Join(r.work, "phase.err")
	out, err := os.Create(outPath)
	if err != nil {
		return nil, err
	}
	defer out.Close()
	errf, err := os.Create(errPath)
	if err != nil {
		return nil, err
	}
	defer errf.Close()
	// exec: the shell becomes the workload, so that the rusage of a
	// workload killed at its limit is its own, not an idle shell's (a
	// killed process's children are reaped by init and their rusage lost).
	cmd := exec.Command("sh", "-c", "exec "+st.script)
	cmd.Dir = st.dir
	if len(st.env) > 0 {
		cmd.Env = append(os.Environ(), st.env...)
	}
	cmd.Stdout, cmd.Stderr = out, errf
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	h := &handle{cmd: cmd, exited: make(chan struct{}), out: outPath, errf: errPath}
	h.start = time.Now()
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("start %q: %w", st.script, err)
	}
	h.pid = cmd.Process.Pid
	go func() {
		cmd.Wait()
		h.end = time.Now()
		close(h.exited)
	}()
	return h, nil
}

func (h *handle) done() bool {
	select {
	case <-h.exited:
		return true
	default:
		return false
	}
}

// wait waits for the command, at most limit, or until ctx ends.
func (h *handle) wait(ctx context.Context, limit time.Duration) execResult {
	timer := time.NewTimer(limit)
	defer timer.Stop()
	select {
	case <-h.exited:
		return h.result()
	case <-timer.C:
		x := h.result()
		x.timedOut = true
		return x
	case <-ctx.Done():
		x := h.result()
		x.stopped = true
		return x
	}
}

// kill sends SIGKILL to the command's process group and waits at most d
// for it to exit.
func (h *handle) kill(d time.Duration) {
	if h.done() {
		return
	}
	syscall.Kill(-h.pid, syscall.SIGKILL)
	select {
	case <-h.exited:
	case <-time.After(d):
	}
}

// result reads how the command ended (or that it has not).
func (h *handle) result() execResult {
	x := execResult{exit: -1, stdout: h.out}
	if !h.done() {
		x.wall = time.Since(h.start)
		x.stuck = true
		return x
	}
	x.wall = h.end.Sub(h.start)
	if ps := h.cmd.ProcessState; ps != nil {
		x.exit = ps.ExitCode()
		if ru, ok := ps.SysUsage().(*syscall.Rusage); ok {
			x.user = time.Duration(ru.Utime.Nano())
			x.sys = time.Duration(ru.Stime.Nano())
		}
	}
	if b, err := os.ReadFile(h.errf); err == nil {
		x.stderr = tailString(string(b), 2000)
	}
	return x
}

func tailString(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return "…" + s[len(s)-n:]
}

// resetCounts zeroes the client's and the proxy's counters.
func (r *wrun) resetCounts(m *harness.Mount) error {
	if out, err := harness.RunHushfs(r.s.cfg.bin, 30*time.Second, "stats", m.Dir, "--json", "--reset"); err != nil {
		return fmt.Errorf("hushfs stats --reset: %w: %s", err, strings.TrimSpace(out))
	}
	if out, err := harness.RunHushfs(r.s.cfg.bin, 30*time.Second, "proxy", "counts", "--control", r.ctl, "--reset", "--json"); err != nil {
		return fmt.Errorf("hushfs proxy counts --reset: %w: %s", err, strings.TrimSpace(out))
	}
	return nil
}

// startChurn creates dir/.churn-N and removes dir/.churn-(N-1) every 10 ms,
// directly in the exported directory, until the returned function is
// called; that removes the last one and reports how many were made.
func startChurn(dir string) func() (int, error) {
	stop := make(chan struct{})
	done := make(chan struct{})
	var n int
	var firstErr error
	note := func(err error) {
		if err != nil && firstErr == nil {
			firstErr = err
		}
	}
	go func() {
		defer close(done)
		tick := time.NewTicker(10 * time.Millisecond)
		defer tick.Stop()
		for {
			select {
			case <-stop:
				if n > 0 {
					note(os.Remove(filepath.Join(dir, fmt.Sprintf(".churn-%d", n))))
				}
				return
			case <-tick.C:
			}
			n++
			f, err := os.OpenFile(filepath.Join(dir, fmt.Sprintf(".churn-%d", n)), os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o644)
			if err == nil {
				err = f.Close()
			}
			note(err)
			if n > 1 {
				if err := os.Remove(filepath.Join(dir, fmt.Sprintf(".churn-%d", n-1))); err != nil && !errors.Is(err, os.ErrNotExist) {
					note(err)
				}
			}
		}
	}()
	return func() (int, error) {
		close(stop)
		<-done
		return n, firstErr
	}
}

// runQuiet runs a short command (a check) with a deadline and returns its
// combined output.
func runQuiet(ctx context.Context, d time.Duration, dir string, name string, args ...string) (string, error) {
	return runEnv(ctx, d, dir, nil, name, args...)
}

// runEnv is runQuiet with variables added to the environment.
func runEnv(ctx context.Context, d time.Duration, dir string, env []string, name string, args ...string) (string, error) {
	ctx, cancel := context.WithTimeout(ctx, d)
	defer cancel()
	cmd := exec.CommandContext(ctx, name, args...)
	cmd.Dir = dir
	if len(env) > 0 {
		cmd.Env = append(os.Environ(), env...)
	}
	cmd.WaitDelay = 2 * time.Second
	out, err := cmd.CombinedOutput()
	return string(out), err
}
