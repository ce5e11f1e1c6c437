package main

import (
	"bufio"
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"io/fs"
	"maps"
	"net"
	"os"
	"os/signal"
	"slices"
	"strings"
	"sync"
	"syscall"
	"time"

	"hushfs/internal/nfs3"
	"hushfs/internal/proxy"
)

// runProxy runs the latency and RPC-counting proxy until SIGINT or SIGTERM,
// or, as "proxy counts", queries a running one through its control socket.
func runProxy(args []string) error {
	if len(args) > 0 {
		switch args[0] {
		case "counts":
			return runProxyCounts(args[1:])
		case "faults":
			return runProxyFaults(args[1:])
		case "blackhole":
			return runProxyBlackhole(args[1:])
		}
	}
	fl := flag.NewFlagSet("proxy", flag.ContinueOnError)
	fl.Usage = func() {
		fmt.Fprintln(fl.Output(), "usage: hushfs proxy --target HOST:PORT [--listen ADDR] [--rtt D] [--control PATH] [--json] [FAULT FLAGS]")
		fmt.Fprintln(fl.Output(), "       hushfs proxy counts --control PATH [--reset] [--json]")
		fmt.Fprintln(fl.Output(), "       hushfs proxy faults --control PATH [--off | FAULT FLAGS]")
		fmt.Fprintln(fl.Output(), "       hushfs proxy blackhole --control PATH DURATION")
		fl.PrintDefaults()
	}
	listen := fl.String("listen", "127.0.0.1:0", "TCP address to listen on")
	target := fl.String("target", "", "host:port to forward to (required)")
	rtt := fl.Duration("rtt", 0, "round trip time to add (half in each direction)")
	control := fl.String("control", "", "unix socket answering command lines (counts, reset, faults, blackhole) in JSON")
	asJSON := fl.Bool("json", false, "print the counts at exit as JSON (procedures keyed prog/vers/proc), not by name")
	faults := faultFlags(fl)
	if err := parseFlagsOnly(fl, args); err != nil {
		return err
	}
	if *target == "" {
		return errors.New("--target is required")
	}
	f, err := faults()
	if err != nil {
		return err
	}

	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()

	p, err := proxy.Start(proxy.Config{
		Listen: *listen,
		Target: *target,
		RTT:    *rtt,
		Faults: f,
		Logf: func(format string, a ...any) {
			fmt.Fprintf(os.Stderr, "hushfs "+format+"\n", a...)
		},
	})
	if err != nil {
		return err
	}
	defer p.Close()

	var ctl *controlServer
	if *control != "" {
		ctl, err = startControl(*control, p)
		if err != nil {
			return err
		}
		defer ctl.close()
	}

	line := fmt.Sprintf("hushfs proxy: listening %s target %s rtt %v", p.Addr(), *target, *rtt)
	if *control != "" {
		line += " control " + *control
	}
	fmt.Println(line)
	if f.Active() {
		b, _ := json.Marshal(f)
		fmt.Printf("hushfs proxy: faults %s\n", b)
	}

	<-ctx.Done()
	if ctl != nil {
		ctl.close()
	}
	if err := p.Close(); err != nil {
		return err
	}
	if *asJSON {
		return json.NewEncoder(os.Stdout).Encode(p.Counts())
	}
	printCounts(os.Stdout, p.Counts())
	return nil
}

// printCounts prints the counts for people: the totals, then the calls of
// each procedure by name (NFS3 GETATTR, MOUNT3 MNT, ...) in program and
// procedure order, WRITEs by stability and the faults injected.
func printCounts(w io.Writer, c proxy.Counts) {
	keys := slices.SortedFunc(maps.Keys(c.Calls), func(a, b proxy.ProcKey) int {
		return cmp.Or(cmp.Compare(a.Prog, b.Prog), cmp.Compare(a.Vers, b.Vers), cmp.Compare(a.Proc, b.Proc))
	})
	var calls uint64
	for _, k := range keys {
		calls += c.Calls[k]
	}
	fmt.Fprintf(w, "calls %d, replies %d, unparsed records %d from clients and %d from the target\n",
		calls, c.Replies, c.UnparsedCalls, c.UnparsedReplies)
	fmt.Fprintf(w, "connections %d (%d could not reach the target), bytes %d in and %d out\n",
		c.Conns, c.DialErrors, c.BytesIn, c.BytesOut)
	for _, k := range keys {
		fmt.Fprintf(w, "%-20s %10d\n", k.Name(), c.Calls[k])
	}
	// A COMPOUND's operations, apart from the calls: each COMPOUND is
	// one call (one round trip) carrying several of them.
	if len(c.NFS4Ops) > 0 {
		var ops uint64
		for _, n := range c.NFS4Ops {
			ops += n
		}
		fmt.Fprintf(w, "operations in NFS4 COMPOUNDs %d\n", ops)
		for _, op := range slices.Sorted(maps.Keys(c.NFS4Ops)) {
			fmt.Fprintf(w, "  %-18s %10d\n", "NFS4 "+op, c.NFS4Ops[op])
		}
	}
	if c.BackCalls+c.BackReplies > 0 {
		fmt.Fprintf(w, "calls from the target on clients' connections (callbacks) %d, their replies %d\n", c.BackCalls, c.BackReplies)
	}
	if c.NFS4Incomplete > 0 {
		fmt.Fprintf(w, "NFS4 COMPOUNDs whose operations could not all be read: %d\n", c.NFS4Incomplete)
	}
	if len(c.WriteStable) > 0 {
		var parts []string
		for _, how := range slices.Sorted(maps.Keys(c.WriteStable)) {
			parts = append(parts, fmt.Sprintf("%v %d", nfs3.StableHow(how), c.WriteStable[how]))
		}
		fmt.Fprintf(w, "NFS3 WRITE by stability: %s\n", strings.Join(parts, ", "))
	}
	f := c.Faults
	var faults []string
	for _, x := range []struct {
		name string
		n    uint64
	}{
		{"connections closed", f.Closes}, {"calls cut short", f.Truncated}, {"blackholes", f.Blackholes},
		{"calls blackholed", f.BlackholedCalls}, {"replies blackholed", f.BlackholedReplies},
		{"calls duplicated", f.Duplicated}, {"duplicates' replies dropped", f.DupRepliesDropped},
		{"duplicates skipped", f.DupSkipped}, {"replies jittered", f.JitteredReplies}, {"slow reads", f.SlowReads},
	} {
		if x.n > 0 {
			faults = append(faults, fmt.Sprintf("%s %d", x.name, x.n))
		}
	}
	if f.Jitter > 0 {
		faults = append(faults, fmt.Sprintf("jitter %v in all", f.Jitter))
	}
	if len(faults) > 0 {
		fmt.Fprintf(w, "faults: %s\n", strings.Join(faults, ", "))
	}
}

// controlServer answers line commands on a unix socket, each with one JSON
// line:
//
//	counts          → the counts
//	reset           → the counts, zeroed in the same step
//	faults          → the faults in force (proxy.Faults)
//	faults off      → turns every fault off; answers the faults in force
//	faults {JSON}   → sets the faults (proxy.Faults); answers them
//	blackhole DUR   → starts a blackhole of DUR (e.g. 5s) now; answers
//	                  {"until": TIME}
//
// Anything else, or a failure, gets {"error": "..."}.
type controlServer struct {
	path string
	ln   net.Listener
	wg   sync.WaitGroup
	once sync.Once

	mu    sync.Mutex
	conns map[net.Conn]struct{}
}

func startControl(path string, p *proxy.Proxy) (*controlServer, error) {
	// A socket left by a proxy that died would make Listen fail; replace
	// it, but never remove anything that is not a socket.
	if fi, err := os.Lstat(path); err == nil {
		if fi.Mode().Type() != fs.ModeSocket {
			return nil, fmt.Errorf("control socket %s: exists and is not a socket", path)
		}
		if c, err := net.DialTimeout("unix", path, time.Second); err == nil {
			c.Close()
			return nil, fmt.Errorf("control socket %s: in use by another process", path)
		}
		if err := os.Remove(path); err != nil {
			return nil, fmt.Errorf("control socket: remove stale %s: %w", path, err)
		}
	}
	ln, err := net.Listen("unix", path)
	if err != nil {
		return nil, fmt.Errorf("control socket: %w", err)
	}
	s := &controlServer{path: path, ln: ln, conns: map[net.Conn]struct{}{}}
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			s.mu.Lock()
			s.conns[c] = struct{}{}
			s.mu.Unlock()
			s.wg.Add(1)
			go func() {
				defer s.wg.Done()
				s.handle(c, p)
				s.mu.Lock()
				delete(s.conns, c)
				s.mu.Unlock()
				c.Close()
			}()
		}
	}()
	return s, nil
}

func (s *controlServer) handle(c net.Conn, p *proxy.Proxy) {
	// Scanner bounds a line at 64 KiB, so garbage cannot grow memory.
	sc := bufio.NewScanner(c)
	enc := json.NewEncoder(c)
	for sc.Scan() {
		var err error
		cmd, arg, _ := strings.Cut(strings.TrimSpace(sc.Text()), " ")
		arg = strings.TrimSpace(arg)
		fail := func(e error) error { return enc.Encode(map[string]string{"error": e.Error()}) }
		switch {
		case cmd == "":
			continue
		case cmd == "counts" && arg == "":
			err = enc.Encode(p.Counts())
		case cmd == "reset" && arg == "":
			err = enc.Encode(p.TakeCounts())
		case cmd == "faults":
			var f proxy.Faults
			var perr error
			switch arg {
			case "":
				f = p.Faults()
			case "off":
				perr = p.SetFaults(proxy.Faults{})
			default:
				dec := json.NewDecoder(strings.NewReader(arg))
				dec.DisallowUnknownFields()
				if perr = dec.Decode(&f); perr == nil {
					perr = p.SetFaults(f)
				}
			}
			if perr != nil {
				err = fail(perr)
			} else {
				err = enc.Encode(p.Faults())
			}
		case cmd == "blackhole":
			d, perr := time.ParseDuration(arg)
			var until time.Time
			if perr == nil {
				until, perr = p.Blackhole(d)
			}
			if perr != nil {
				err = fail(fmt.Errorf("blackhole %q: %w", arg, perr))
			} else {
				err = enc.Encode(map[string]time.Time{"until": until})
			}
		default:
			err = fail(fmt.Errorf("unknown command %q (want counts, reset, faults or blackhole)", sc.Text()))
		}
		if err != nil {
			return
		}
	}
}

func (s *controlServer) close() {
	s.once.Do(func() {
		s.ln.Close()
		s.mu.Lock()
		for c := range s.conns {
			c.Close()
		}
		s.mu.Unlock()
		s.wg.Wait()
		os.Remove(s.path)
	})
}

// faultFlags registers the fault flags on fl; the function returned reads
// them into a proxy.Faults once fl is parsed.
func faultFlags(fl *flag.FlagSet) func() (proxy.Faults, error) {
	var f proxy.Faults
	fl.Uint64Var(&f.Seed, "seed", 0, "seed of the fault generator (probabilities, jitter)")
	fl.Uint64Var(&f.CloseEvery, "close-every", 0, "close a connection right after every Nth call is forwarded")
	fl.Float64Var(&f.CloseProb, "close-prob", 0, "close a connection after a call with this probability")
	fl.DurationVar(&f.BlackholeFor, "blackhole", 0, "blackhole length: forward nothing, drop every record, for this long")
	fl.Uint64Var(&f.BlackholeAfter, "blackhole-after", 0, "start the blackhole after N calls (and the next N calls after one ends)")
	fl.DurationVar(&f.BlackholeAt, "blackhole-at", 0, "start the blackhole this long after start (and after one ends); used without --blackhole-after")
	fl.IntVar(&f.BlackholeCount, "blackhole-count", 0, "number of blackholes (0: one, -1: no limit)")
	fl.DurationVar(&f.Jitter, "jitter", 0, "delay each reply by a further random time up to this")
	fl.Uint64Var(&f.DupEvery, "dup-every", 0, "send every Nth call to the server twice (the first reply dropped, the call resent)")
	fl.Float64Var(&f.DupProb, "dup-prob", 0, "send a call twice with this probability")
	procs := fl.String("dup-procs", "", "duplicate only these procedures: NFSv3 names, prog/vers/proc, or nonidempotent")
	fl.BoolVar(&f.DupImmediate, "dup-immediate", false, "send the copy right behind the call and forward the first reply")
	fl.DurationVar(&f.DupDelay, "dup-delay", 0, "send the copy this long after the first reply (without --dup-immediate)")
	fl.Uint64Var(&f.TruncateEvery, "truncate-every", 0, "cut every Nth call short, then close its connection")
	fl.Float64Var(&f.TruncateProb, "truncate-prob", 0, "cut a call short with this probability")
	fl.IntVar(&f.SlowRead, "slow-read", 0, "read from the server at most N bytes at a time")
	fl.DurationVar(&f.SlowReadPause, "slow-read-pause", 0, "pause after each slow read")
	fl.IntVar(&f.SlowReadBuffer, "slow-read-buffer", 0, "receive buffer (bytes) of connections to the server")
	return func() (proxy.Faults, error) {
		if *procs != "" {
			k, err := proxy.ParseProcs(*procs)
			if err != nil {
				return f, fmt.Errorf("--dup-procs: %w", err)
			}
			f.DupProcs = k
		}
		return f, f.Validate()
	}
}

// controlCall sends one command line to a running proxy's control socket
// and returns its JSON answer, or the error it reports.
func controlCall(path, cmd string) (string, error) {
	c, err := net.DialTimeout("unix", path, 5*time.Second)
	if err != nil {
		return "", fmt.Errorf("control socket: %w", err)
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(10 * time.Second))
	if _, err := io.WriteString(c, cmd+"\n"); err != nil {
		return "", fmt.Errorf("control socket: send: %w", err)
	}
	line, err := bufio.NewReader(c).ReadString('\n')
	if err != nil {
		return "", fmt.Errorf("control socket: read reply: %w", err)
	}
	var reply struct {
		Error string `json:"error"`
	}
	if err := json.Unmarshal([]byte(line), &reply); err != nil {
		return "", fmt.Errorf("control socket: bad reply %q: %w", line, err)
	}
	if reply.Error != "" {
		return "", fmt.Errorf("control socket: %s", reply.Error)
	}
	return line, nil
}

// runProxyFaults shows, sets or turns off a running proxy's faults and
// prints those in force as one JSON line. Setting replaces every fault:
// flags not given are off.
func runProxyFaults(args []string) error {
	fl := flag.NewFlagSet("proxy faults", flag.ContinueOnError)
	control := fl.String("control", "", "control socket of the running proxy (required)")
	off := fl.Bool("off", false, "turn every fault off")
	faults := faultFlags(fl)
	if err := parseFlagsOnly(fl, args); err != nil {
		return err
	}
	if *control == "" {
		return errors.New("--control is required")
	}
	set := false
	fl.Visit(func(f *flag.Flag) { set = set || (f.Name != "control" && f.Name != "off") })
	cmd := "faults"
	switch {
	case *off && set:
		return errors.New("--off with fault flags")
	case *off:
		cmd = "faults off"
	case set:
		f, err := faults()
		if err != nil {
			return err
		}
		b, err := json.Marshal(f)
		if err != nil {
			return err
		}
		cmd = "faults " + string(b)
	}
	return controlPrint(*control, cmd)
}

// runProxyBlackhole starts a blackhole in a running proxy now.
func runProxyBlackhole(args []string) error {
	fl := flag.NewFlagSet("proxy blackhole", flag.ContinueOnError)
	control := fl.String("control", "", "control socket of the running proxy (required)")
	if err := fl.Parse(args); err != nil {
		return err
	}
	if fl.NArg() != 1 {
		return errors.New("want one DURATION, e.g. 5s")
	}
	if *control == "" {
		return errors.New("--control is required")
	}
	d, err := time.ParseDuration(fl.Arg(0))
	if err != nil {
		return err
	}
	return controlPrint(*control, "blackhole "+d.String())
}

// controlPrint sends one command to a running proxy and prints its answer.
func controlPrint(path, cmd string) error {
	line, err := controlCall(path, cmd)
	if err != nil {
		return err
	}
	_, err = os.Stdout.WriteString(line)
	return err
}

// runProxyCounts prints the counts of a running proxy by procedure name,
// or with --json as the control socket's JSON line.
func runProxyCounts(args []string) error {
	fl := flag.NewFlagSet("proxy counts", flag.ContinueOnError)
	control := fl.String("control", "", "control socket of the running proxy (required)")
	reset := fl.Bool("reset", false, "zero the counts after reading them (atomically)")
	asJSON := fl.Bool("json", false, "print the counts as JSON (procedures keyed prog/vers/proc)")
	if err := parseFlagsOnly(fl, args); err != nil {
		return err
	}
	if *control == "" {
		return errors.New("--control is required")
	}
	cmd := "counts"
	if *reset {
		cmd = "reset"
	}
	if *asJSON {
		return controlPrint(*control, cmd)
	}
	line, err := controlCall(*control, cmd)
	if err != nil {
		return err
	}
	var c proxy.Counts
	if err := json.Unmarshal([]byte(line), &c); err != nil {
		return fmt.Errorf("proxy counts: %w", err)
	}
	printCounts(os.Stdout, c)
	return nil
}

// parseFlagsOnly parses args into fl and refuses anything left over: the
// proxy's subcommands take flags only.
func parseFlagsOnly(fl *flag.FlagSet, args []string) error {
	if err := fl.Parse(args); err != nil {
		return err
	}
	if fl.NArg() > 0 {
		return fmt.Errorf("unexpected arguments %q", fl.Args())
	}
	return nil
}
