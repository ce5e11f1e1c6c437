package main

import (
	"bufio"
	"encoding/json"
	"flag"
	"io"
	"net"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"hushfs/internal/proxy"
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
