package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"io/fs"
	"net"
	"os"
	"os/signal"
	"strings"
	"sync"
	"syscall"
	"time"

	"hushfs/internal/proxy"
)

// runProxy runs the latency and RPC-counting proxy until SIGINT or SIGTERM,
// or, as "proxy counts", queries a running one through its control socket.
func runProxy(args []string) error {
	if len(args) > 0 && args[0] == "counts" {
		return runProxyCounts(args[1:])
	}
	fl := flag.NewFlagSet("proxy", flag.ContinueOnError)
	fl.Usage = func() {
		fmt.Fprintln(fl.Output(), "usage: hushfs proxy --target HOST:PORT [--listen ADDR] [--rtt D] [--control PATH]")
		fmt.Fprintln(fl.Output(), "       hushfs proxy counts --control PATH [--reset]")
		fl.PrintDefaults()
	}
	listen := fl.String("listen", "127.0.0.1:0", "TCP address to listen on")
	target := fl.String("target", "", "host:port to forward to (required)")
	rtt := fl.Duration("rtt", 0, "round trip time to add (half in each direction)")
	control := fl.String("control", "", "unix socket answering \"counts\" and \"reset\" lines with the counts as JSON")
	if err := fl.Parse(args); err != nil {
		return err
	}
	if fl.NArg() > 0 {
		return fmt.Errorf("unexpected arguments %q", fl.Args())
	}
	if *target == "" {
		return errors.New("--target is required")
	}

	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()

	p, err := proxy.Start(proxy.Config{
		Listen: *listen,
		Target: *target,
		RTT:    *rtt,
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

	<-ctx.Done()
	if ctl != nil {
		ctl.close()
	}
	if err := p.Close(); err != nil {
		return err
	}
	return json.NewEncoder(os.Stdout).Encode(p.Counts())
}

// controlServer answers line commands on a unix socket:
//
//	counts  → the counts as one JSON line
//	reset   → the counts as one JSON line, zeroed in the same step
//
// Anything else gets {"error": "..."}.
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
		switch cmd := strings.TrimSpace(sc.Text()); cmd {
		case "":
			continue
		case "counts":
			err = enc.Encode(p.Counts())
		case "reset":
			err = enc.Encode(p.TakeCounts())
		default:
			err = enc.Encode(map[string]string{"error": fmt.Sprintf("unknown command %q (want counts or reset)", cmd)})
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

// runProxyCounts prints the counts of a running proxy, as one JSON line.
func runProxyCounts(args []string) error {
	fl := flag.NewFlagSet("proxy counts", flag.ContinueOnError)
	control := fl.String("control", "", "control socket of the running proxy (required)")
	reset := fl.Bool("reset", false, "zero the counts after reading them (atomically)")
	if err := fl.Parse(args); err != nil {
		return err
	}
	if fl.NArg() > 0 {
		return fmt.Errorf("unexpected arguments %q", fl.Args())
	}
	if *control == "" {
		return errors.New("--control is required")
	}
	c, err := net.DialTimeout("unix", *control, 5*time.Second)
	if err != nil {
		return fmt.Errorf("control socket: %w", err)
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(10 * time.Second))
	cmd := "counts\n"
	if *reset {
		cmd = "reset\n"
	}
	if _, err := io.WriteString(c, cmd); err != nil {
		return fmt.Errorf("control socket: send: %w", err)
	}
	line, err := bufio.NewReader(c).ReadString('\n')
	if err != nil {
		return fmt.Errorf("control socket: read reply: %w", err)
	}
	var reply struct {
		Error string `json:"error"`
	}
	if err := json.Unmarshal([]byte(line), &reply); err != nil {
		return fmt.Errorf("control socket: bad reply %q: %w", line, err)
	}
	if reply.Error != "" {
		return fmt.Errorf("control socket: %s", reply.Error)
	}
	_, err = os.Stdout.WriteString(line)
	return err
}
