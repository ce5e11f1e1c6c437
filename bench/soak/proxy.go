package main

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"os/exec"
	"regexp"
	"strings"
	"sync"
	"syscall"
	"time"

	"hushfs/test/harness"
)

// proxyProc is a running `hushfs proxy` and a connection to its control
// socket.
type proxyProc struct {
	pid    int
	addr   string // 127.0.0.1:PORT
	port   string
	ctl    string
	out    *tailBuffer
	exited chan struct{}

	mu   sync.Mutex // one control command at a time
	conn net.Conn
	rd   *bufio.Reader
}

var proxyReady = regexp.MustCompile(`^hushfs proxy: listening (\S+) `)

// startProxy starts `hushfs proxy` in front of target with a control
// socket and the given fault flags, waits (at most 20 s) for it to listen,
// and stops it by pid at cleanup (SIGTERM, then SIGKILL).
func startProxy(t *harness.Program, bin, target, ctl string, flags []string) *proxyProc {
	p := &proxyProc{ctl: ctl, out: &tailBuffer{max: 4 << 20}, exited: make(chan struct{})}
	args := append([]string{"proxy", "--listen", "127.0.0.1:0", "--target", target, "--control", ctl}, flags...)
	cmd := exec.Command(bin, args...)
	cmd.Stderr = p.out
	cmd.Dir = "/"
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatalf("proxy: %v", err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatalf("start hushfs proxy: %v", err)
	}
	p.pid = cmd.Process.Pid
	ready := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(stdout)
		sc.Buffer(make([]byte, 64<<10), 1<<20)
		for sc.Scan() {
			if m := proxyReady.FindStringSubmatch(sc.Text()); m != nil {
				select {
				case ready <- m[1]:
				default:
				}
			}
			fmt.Fprintln(p.out, sc.Text())
		}
		io.Copy(p.out, stdout)
		cmd.Wait()
		close(p.exited)
	}()
	t.Cleanup(func() {
		p.mu.Lock()
		if p.conn != nil {
			p.conn.Close()
			p.conn = nil
		}
		p.mu.Unlock()
		syscall.Kill(p.pid, syscall.SIGTERM)
		select {
		case <-p.exited:
			return
		case <-time.After(5 * time.Second):
		}
		syscall.Kill(p.pid, syscall.SIGKILL)
		select {
		case <-p.exited:
		case <-time.After(10 * time.Second):
			t.Errorf("proxy pid %d survived SIGKILL", p.pid)
		}
	})
	select {
	case p.addr = <-ready:
	case <-p.exited:
		t.Fatalf("hushfs proxy exited before it listened:\n%s", p.out.String())
	case <-time.After(20 * time.Second):
		t.Fatalf("hushfs proxy printed no listening line within 20 s:\n%s", p.out.String())
	}
	if _, p.port, err = net.SplitHostPort(p.addr); err != nil {
		t.Fatalf("proxy address %q: %v", p.addr, err)
	}
	return p
}

func (p *proxyProc) alive() bool {
	select {
	case <-p.exited:
		return false
	default:
		return true
	}
}

// call sends one command line on the control socket (the proxy's line
// protocol: counts, faults, blackhole D, ...) and decodes its JSON answer
// into v.
func (p *proxyProc) call(cmd string, v any) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.conn == nil {
		c, err := net.DialTimeout("unix", p.ctl, 5*time.Second)
		if err != nil {
			return fmt.Errorf("control socket: %w", err)
		}
		p.conn, p.rd = c, bufio.NewReaderSize(c, 64<<10)
	}
	fail := func(err error) error {
		p.conn.Close()
		p.conn = nil
		return err
	}
	p.conn.SetDeadline(time.Now().Add(10 * time.Second))
	if _, err := io.WriteString(p.conn, cmd+"\n"); err != nil {
		return fail(fmt.Errorf("control socket: %q: %w", cmd, err))
	}
	line, err := p.rd.ReadString('\n')
	if err != nil {
		return fail(fmt.Errorf("control socket: %q: %w", cmd, err))
	}
	var e struct {
		Error string `json:"error"`
	}
	if json.Unmarshal([]byte(line), &e) == nil && e.Error != "" {
		return fmt.Errorf("proxy: %q: %s", cmd, e.Error)
	}
	if err := json.Unmarshal([]byte(line), v); err != nil {
		return fmt.Errorf("proxy: %q: %w: %s", cmd, err, strings.TrimSpace(line))
	}
	return nil
}

// tailBuffer keeps the last max bytes written to it (at least; it trims
// in halves).
type tailBuffer struct {
	mu  sync.Mutex
	max int
	b   []byte
	cut bool
}

func (t *tailBuffer) Write(p []byte) (int, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.b = append(t.b, p...)
	if len(t.b) > t.max {
		t.b = append([]byte(nil), t.b[len(t.b)-t.max/2:]...)
		t.cut = true
	}
	return len(p), nil
}

func (t *tailBuffer) String() string {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.cut {
		return "…(earlier output dropped)\n" + string(t.b)
	}
	return string(t.b)
}
