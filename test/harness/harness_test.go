package harness

import (
	"context"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"
)

// TestGaneshaLifecycle starts ganesha, checks that its three services are
// reachable through the namespace dialer, and that cleanup kills both
// processes and removes the namespace.
func TestGaneshaLifecycle(t *testing.T) {
	var nsPath string
	var pids []int
	t.Run("start", func(t *testing.T) {
		g := StartGanesha(t, GaneshaOptions{})
		nsPath = g.NS.Path
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		for _, dial := range []func(context.Context) (net.Conn, error){g.Dial, g.DialMount, g.DialRPCBind} {
			c, err := dial(ctx)
			if err != nil {
				t.Fatalf("dial in namespace: %v", err)
			}
			c.Close()
		}
		// The namespace is not the host: a port nobody listens on there
		// refuses the connection.
		if c, err := g.DialPort(ctx, 1); err == nil {
			c.Close()
			t.Error("connection to port 1 in a fresh namespace succeeded")
		}
		if !g.Running() {
			t.Fatal("ganesha not running")
		}
		// Commands run in the namespace see loopback only...
		out, err := g.NS.Command(ctx, "ip", "-o", "link", "show").CombinedOutput()
		if err != nil {
			t.Fatalf("ip link in namespace: %v\n%s", err, out)
		}
		if lines := strings.Split(strings.TrimSpace(string(out)), "\n"); len(lines) != 1 || !strings.Contains(lines[0], ": lo:") {
			t.Errorf("namespace has interfaces other than lo:\n%s", out)
		}
		// ...and reach ganesha: an independent client lists a file made
		// directly in the export.
		if err := os.WriteFile(filepath.Join(g.ExportDir, "visible"), []byte("12345"), 0o644); err != nil {
			t.Fatal(err)
		}
		url := fmt.Sprintf("nfs://%s%s/?version=3&nfsport=%d&mountport=%d", g.Addr, g.ExportPath, g.NFSPort, g.MountPort)
		out, err = g.NS.Command(ctx, "nfs-ls", url).CombinedOutput()
		if err != nil {
			t.Fatalf("nfs-ls %s: %v\n%s", url, err, out)
		}
		if !strings.Contains(string(out), " 5 visible") {
			t.Errorf("nfs-ls in the namespace does not list the 5-byte file:\n%s", out)
		}
		// unshare, ganesha and rpcbind, as the host sees them.
		pids = groupPids(t, g.cmd.Process.Pid)
		names := map[string]bool{}
		for _, pid := range pids {
			comm, _ := os.ReadFile(fmt.Sprintf("/proc/%d/comm", pid))
			names[strings.TrimSpace(string(comm))] = true
		}
		for _, want := range []string{"unshare", "ganesha.nfsd", "rpcbind"} {
			if !names[want] {
				t.Errorf("no %s among the processes started (%v)", want, names)
			}
		}
	})
	if nsPath == "" {
		t.Fatal("ganesha did not start")
	}
	if _, err := os.Stat(nsPath); !os.IsNotExist(err) {
		t.Errorf("namespace %s still exists after cleanup: %v", nsPath, err)
	}
	// Give the kernel a moment to finish tearing the PID namespace down.
	deadline := time.Now().Add(5 * time.Second)
	for _, pid := range pids {
		for alive(pid) && time.Now().Before(deadline) {
			time.Sleep(20 * time.Millisecond)
		}
		if alive(pid) {
			t.Errorf("pid %d still alive after cleanup", pid)
		}
	}
}

// alive reports whether pid exists and is not a zombie.
func alive(pid int) bool {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return false
	}
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	return i < 0 || !strings.HasPrefix(s[i+1:], " Z")
}

// groupPids lists the processes in process group pgid.
func groupPids(t *testing.T, pgid int) []int {
	t.Helper()
	ents, err := os.ReadDir("/proc")
	if err != nil {
		t.Fatal(err)
	}
	var pids []int
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
		if err != nil {
			continue
		}
		s := string(b)
		// Fields after the parenthesised command: state ppid pgrp ...
		f := strings.Fields(s[strings.LastIndexByte(s, ')')+1:])
		if len(f) > 2 && f[2] == strconv.Itoa(pgid) {
			pids = append(pids, pid)
		}
	}
	return pids
}
