package main

import (
	"bufio"
	"context"
	"encoding/json"
	"flag"
	"io"
	"net"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"hushfs/internal/nfs3"
	"hushfs/internal/proxy"
	"hushfs/internal/rpc"
)

// TestProxyControl drives the control socket of a real proxy: faults are
// shown, set, refused when malformed or out of range, and turned off; a
// blackhole starts on demand; the counts carry the fault counts.
func TestProxyControl(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	p, err := proxy.Start(proxy.Config{Target: ln.Addr().String(), Faults: proxy.Faults{CloseEvery: 7}})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	ctl, err := startControl(filepath.Join(t.TempDir(), "ctl"), p)
	if err != nil {
		t.Fatal(err)
	}
	defer ctl.close()
	c, err := net.Dial("unix", ctl.path)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(10 * time.Second))
	br := bufio.NewReader(c)
	ask := func(cmd string) string {
		t.Helper()
		if _, err := io.WriteString(c, cmd+"\n"); err != nil {
			t.Fatal(err)
		}
		line, err := br.ReadString('\n')
		if err != nil {
			t.Fatalf("%s: %v", cmd, err)
		}
		return strings.TrimSpace(line)
	}

	if got := ask("faults"); got != `{"close_every":7}` {
		t.Errorf("faults: %s", got)
	}
	if got := ask(`faults {"dup_prob":1,"dup_procs":["100003/3/12"],"dup_delay":5000000}`); got != `{"dup_prob":1,"dup_procs":["100003/3/12"],"dup_delay":5000000}` {
		t.Errorf("faults set: %s", got)
	}
	if f := p.Faults(); f.DupProb != 1 || len(f.DupProcs) != 1 || f.DupDelay != 5*time.Millisecond || f.CloseEvery != 0 {
		t.Errorf("faults in force: %+v", f)
	}
	for _, bad := range []string{`faults {"bogus":1}`, `faults {"close_prob":3}`, `faults {`, "blackhole soon", "blackhole 2h", "frobnicate", "counts now"} {
		if got := ask(bad); !strings.HasPrefix(got, `{"error":`) {
			t.Errorf("%s: %s, want an error", bad, got)
		}
	}
	if f := p.Faults(); f.DupProb != 1 {
		t.Errorf("a refused command changed the faults: %+v", f)
	}
	var bh struct{ Until time.Time }
	if err := json.Unmarshal([]byte(ask("blackhole 2s")), &bh); err != nil || time.Until(bh.Until) < time.Second || time.Until(bh.Until) > 2*time.Second {
		t.Errorf("blackhole 2s: until %v, %v", bh.Until, err)
	}
	if !p.BlackholeUntil().Equal(bh.Until) {
		t.Errorf("proxy's blackhole ends %v, control said %v", p.BlackholeUntil(), bh.Until)
	}
	if got := ask("faults off"); got != `{}` {
		t.Errorf("faults off: %s", got)
	}
	if !p.BlackholeUntil().IsZero() {
		t.Error("faults off left the blackhole in force")
	}
	var cnt proxy.Counts
	if err := json.Unmarshal([]byte(ask("counts")), &cnt); err != nil {
		t.Errorf("counts: %v", err)
	}
	if !strings.Contains(ask("counts"), `"faults":{"closes":0`) {
		t.Error("counts carry no fault counts")
	}
}

// TestFaultFlags parses the fault flags shared by `hushfs proxy` and
// `hushfs proxy faults`.
func TestFaultFlags(t *testing.T) {
	fl := flag.NewFlagSet("x", flag.ContinueOnError)
	fl.SetOutput(io.Discard)
	get := faultFlags(fl)
	err := fl.Parse([]string{"--close-every", "50", "--blackhole", "5s", "--blackhole-after", "100", "--blackhole-count", "-1",
		"--jitter", "3ms", "--dup-procs", "create,REMOVE", "--dup-prob", "0.5", "--truncate-prob", "0.01",
		"--slow-read", "512", "--slow-read-pause", "1ms", "--seed", "9"})
	if err != nil {
		t.Fatal(err)
	}
	f, err := get()
	if err != nil {
		t.Fatal(err)
	}
	if f.CloseEvery != 50 || f.BlackholeFor != 5*time.Second || f.BlackholeAfter != 100 || f.BlackholeCount != -1 ||
		f.Jitter != 3*time.Millisecond || len(f.DupProcs) != 2 || f.DupProcs[1] != proxy.NFS3(12) || f.DupProb != 0.5 ||
		f.TruncateProb != 0.01 || f.SlowRead != 512 || f.SlowReadPause != time.Millisecond || f.Seed != 9 {
		t.Errorf("%+v", f)
	}
	for _, bad := range [][]string{{"--dup-procs", "nosuch"}, {"--close-prob", "1.5"}, {"--blackhole-at", "1s"}, {"--blackhole", "1us"}} {
		fl := flag.NewFlagSet("x", flag.ContinueOnError)
		fl.SetOutput(io.Discard)
		get := faultFlags(fl)
		if err := fl.Parse(bad); err != nil {
			continue
		}
		if _, err := get(); err == nil {
			t.Errorf("%q accepted", bad)
		}
	}
}

// TestProxyCountsByName: the real binary prints a proxy's counts by
// procedure name (NFS3, MOUNT3 and PORTMAP2 names; prog/vers/proc for any
// other program), both from `proxy counts` and at exit; --json keeps the
// machine form, keyed prog/vers/proc.
func TestProxyCountsByName(t *testing.T) {
	bin := buildHushfs(t)
	// The target answers every call PROG_UNAVAIL: the proxy counts calls
	// whatever the answer.
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	target := rpc.NewServer(rpc.ServerOptions{})
	go target.Serve(ln)
	defer target.Close()
	ctl := filepath.Join(t.TempDir(), "ctl")
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin, "proxy", "--target", ln.Addr().String(), "--control", ctl)
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer cmd.Process.Kill()
	out := bufio.NewReader(stdout)
	line, err := out.ReadString('\n')
	m := regexp.MustCompile(`^hushfs proxy: listening (\S+) `).FindStringSubmatch(line)
	if err != nil || m == nil {
		t.Fatalf("listening line %q, %v", line, err)
	}
	c := dial(t, m[1])
	for _, k := range []proxy.ProcKey{proxy.NFS3(nfs3.ProcGetattr), proxy.NFS3(nfs3.ProcGetattr), proxy.NFS3(nfs3.ProcGetattr),
		proxy.NFS3(nfs3.ProcReaddirplus), {Prog: nfs3.MountProgram, Vers: nfs3.MountVersion, Proc: nfs3.MountProcMnt},
		{Prog: rpc.PortmapProgram, Vers: rpc.PortmapVersion, Proc: 3}, {Prog: 536870913, Vers: 1, Proc: 7}} {
		call(c, k.Prog, k.Vers, k.Proc, rpc.NoAuth, nil, nil)
	}
	wantLines := []string{`NFS3 GETATTR +3`, `NFS3 READDIRPLUS +1`, `MOUNT3 MNT +1`, `PORTMAP2 GETPORT +1`, `536870913/1/7 +1`, `calls 7, replies 7, .*`}
	checkHuman := func(what, text string) {
		t.Helper()
		for _, w := range wantLines {
			if !regexp.MustCompile(`(?m)^` + w + `$`).MatchString(text) {
				t.Errorf("%s: no line %q in\n%s", what, w, text)
			}
		}
		if strings.Contains(text, "100003/3/") {
			t.Errorf("%s: procedures shown as numbers:\n%s", what, text)
		}
	}
	human, err := runBin(bin, "proxy", "counts", "--control", ctl)
	if err != nil {
		t.Fatalf("proxy counts: %v\n%s", err, human)
	}
	checkHuman("proxy counts", human)
	machine, err := runBin(bin, "proxy", "counts", "--control", ctl, "--json")
	if err != nil {
		t.Fatalf("proxy counts --json: %v\n%s", err, machine)
	}
	var cnt struct {
		Calls map[string]uint64 `json:"calls"`
	}
	if err := json.Unmarshal([]byte(machine), &cnt); err != nil || cnt.Calls["100003/3/1"] != 3 || cnt.Calls["100005/3/1"] != 1 {
		t.Errorf("proxy counts --json: %v, calls %v\n%s", err, cnt.Calls, machine)
	}
	// At exit, the same table.
	cmd.Process.Signal(syscall.SIGINT)
	rest, _ := io.ReadAll(out)
	if err := cmd.Wait(); err != nil {
		t.Fatalf("proxy exit: %v", err)
	}
	checkHuman("counts at exit", string(rest))
}

// runBin runs the binary with a deadline and returns its output.
func runBin(bin string, args ...string) (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	out, err := exec.CommandContext(ctx, bin, args...).CombinedOutput()
	return string(out), err
}

func TestPrintCounts(t *testing.T) {
	var b strings.Builder
	printCounts(&b, proxy.Counts{
		Calls:       map[proxy.ProcKey]uint64{proxy.NFS3(nfs3.ProcWrite): 5, proxy.NFS3(nfs3.ProcGetattr): 106, proxy.NFS3(99): 1},
		Replies:     112,
		WriteStable: map[uint32]uint64{uint32(nfs3.Unstable): 4, uint32(nfs3.FileSync): 1},
		Faults:      proxy.FaultCounts{Closes: 2, Blackholes: 1, BlackholedCalls: 3},
	})
	want := `calls 112, replies 112, unparsed records 0 from clients and 0 from the target
connections 0 (0 could not reach the target), bytes 0 in and 0 out
NFS3 GETATTR                106
NFS3 WRITE                    5
NFS3 proc 99                  1
NFS3 WRITE by stability: UNSTABLE 4, FILE_SYNC 1
faults: connections closed 2, blackholes 1, calls blackholed 3
`
	if b.String() != want {
		t.Errorf("got\n%s\nwant\n%s", b.String(), want)
	}
}
