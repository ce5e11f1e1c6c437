package main

import (
	"bytes"
	"fmt"
	"strings"
	"testing"
	"time"

	"hushfs/internal/client"
)

func TestParseMountArgs(t *testing.T) {
	// mount.fuse3's order: positional arguments, then -o.
	a, err := parseMountArgs([]string{"srv:/export", "/mnt", "-o", "rw,port=1", "-f", "--log=/tmp/l", "-oro", "-d"})
	if err != nil {
		t.Fatal(err)
	}
	if a.remote != "srv:/export" || a.mountpoint != "/mnt" || !a.foreground || !a.debug || a.logFile != "/tmp/l" ||
		strings.Join(a.options, ",") != "rw,port=1,ro" {
		t.Errorf("parsed %+v", a)
	}
	a, err = parseMountArgs([]string{"-f", "--log", "x", "s:/e", "m"})
	if err != nil || a.logFile != "x" || a.remote != "s:/e" || a.mountpoint != "m" {
		t.Errorf("flags first: %+v, %v", a, err)
	}
	for _, bad := range [][]string{
		{"s:/e"}, {"s:/e", "m", "extra"}, {"s:/e", "m", "-o"}, {"s:/e", "m", "--log"}, {"s:/e", "m", "-x"},
	} {
		if _, err := parseMountArgs(bad); err == nil {
			t.Errorf("parseMountArgs(%q) succeeded", bad)
		}
	}
}

func TestParseRemote(t *testing.T) {
	for in, want := range map[string]string{
		"server:/export":      "server /export",
		"127.0.0.1:/a:b":      "127.0.0.1 /a:b",
		"[::1]:/srv/x":        "::1 /srv/x",
		"host.example:/":      "host.example /",
		"[fe80::1%eth0]:/exp": "fe80::1%eth0 /exp",
	} {
		h, e, err := parseRemote(in)
		if err != nil || h+" "+e != want {
			t.Errorf("parseRemote(%q) = %q %q, %v; want %s", in, h, e, err, want)
		}
		if !isRemoteSpec(in) {
			t.Errorf("isRemoteSpec(%q) = false", in)
		}
	}
	for _, bad := range []string{"serve", "mount", "server", "server:export", ":/export", "[::1/x", "[::1]/x", "/dir"} {
		if _, _, err := parseRemote(bad); err == nil {
			t.Errorf("parseRemote(%q) succeeded", bad)
		}
		if isRemoteSpec(bad) {
			t.Errorf("isRemoteSpec(%q) = true", bad)
		}
	}
	// No command name looks like a source, so dispatch stays unambiguous.
	for name := range commands() {
		if isRemoteSpec(name) {
			t.Errorf("command %q looks like SERVER:/EXPORT", name)
		}
	}
}

func TestPrintStats(t *testing.T) {
	since := time.Date(2025, 1, 2, 3, 4, 5, 0, time.UTC)
	s := client.Snapshot{Since: since, Ops: map[string]client.OpStats{
		"GETATTR":   {Ops: 4, Transmissions: 5, Timeouts: 1, BytesSent: 400, BytesReceived: 800, Queue: 4 * time.Millisecond, RTT: 10 * time.Millisecond, Execute: 16 * time.Millisecond},
		"WRITE":     {Ops: 2, Transmissions: 2, Errors: 1, BytesSent: 2 << 20, BytesReceived: 300, RTT: 7 * time.Millisecond},
		"MOUNT:MNT": {Ops: 1, Transmissions: 1, BytesSent: 84, BytesReceived: 80},
	}}
	var b bytes.Buffer
	printStats(&b, "/mnt", "srv:/e", &s, since.Add(90*time.Second))
	out := b.String()
	lines := strings.Split(strings.TrimRight(out, "\n"), "\n")
	if len(lines) != 6 || !strings.HasPrefix(lines[0], "srv:/e on /mnt: RPC statistics since 2025-01-02T03:04:05Z (1m30s)") {
		t.Fatalf("table:\n%s", out)
	}
	want := map[string]string{
		"GETATTR":   "GETATTR 4 5 1 0 400 800 1.000 2.500 4.000",
		"WRITE":     fmt.Sprintf("WRITE 2 2 0 1 %d 300 0.000 3.500 0.000", 2<<20),
		"total":     fmt.Sprintf("total NFS 6 7 1 1 %d 1100 0.667 2.833 2.667", 400+2<<20),
		"MOUNT:MNT": "MOUNT:MNT 1 1 0 0 84 80 0.000 0.000 0.000",
	}
	got := map[string]string{}
	for _, l := range lines[2:] {
		f := strings.Join(strings.Fields(l), " ")
		got[strings.Fields(l)[0]] = f
	}
	for k, w := range want {
		if got[k] != w {
			t.Errorf("%s line %q, want %q", k, got[k], w)
		}
	}
	if !strings.Contains(lines[4], "total NFS") || !strings.Contains(lines[5], "MOUNT:MNT") {
		t.Errorf("order: totals before MOUNT lines:\n%s", out)
	}

	// Data sent again after a write verifier change gets a line of its own.
	s.Resends = client.WriteResends{Commits: 2, Bytes: 3 << 20}
	b.Reset()
	printStats(&b, "/mnt", "srv:/e", &s, since.Add(90*time.Second))
	lines = strings.Split(strings.TrimRight(b.String(), "\n"), "\n")
	if want := fmt.Sprintf("write verifier changed at 2 COMMITs (server restarts): %d bytes sent again", 3<<20); len(lines) != 7 || lines[6] != want {
		t.Errorf("with resends:\n%s\nwant a last line %q", b.String(), want)
	}
}
