package test

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"maps"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"hushfs/internal/client"
	"hushfs/internal/nfs3"
	"hushfs/test/harness"
)

// TestMountRPCCounts asserts how many RPCs of each procedure a few
// deterministic operations cost through a fresh mount of `hushfs serve`,
// as `hushfs stats --json` reports them, and checks once that those
// statistics are what went over the wire: tshark's decode of a capture of
// the server's NFS port must show exactly the same calls.
func TestMountRPCCounts(t *testing.T) {
	requireMountTools(t)
	bin := harness.BuildHushfs(t)
	export, mnt := t.TempDir(), t.TempDir()
	s := harness.StartServe(t, export)
	m := harness.MountServe(t, bin, s, mnt, "")

	// Mounting costs one MNT, one FSINFO and one PATHCONF (the longest
	// name), whose attributes are the root's: nothing else.
	s0 := m.Stats(t)
	expectCounts(t, "mount", s0, map[string]uint64{"FSINFO": 1, "PATHCONF": 1})
	if n := s0.Count("MOUNT:MNT"); n != 1 {
		t.Errorf("mount: %d MNT calls, want 1 (%v)", n, s0.Ops)
	}

	// The root's attributes came with FSINFO: stat sends nothing.
	var st unix.Stat_t
	must(t, "stat root", unix.Stat(mnt, &st))
	s1 := m.Stats(t)
	expectCounts(t, "stat of the root", delta(s0, s1), nil)

	// The wire check covers every step from here on.
	_, nfsPort, _ := net.SplitHostPort(s.NFSAddr)
	capture := startCapture(t, nfsPort)
	m.ResetStats(t)

	type step struct {
		name string
		do   func()
		want map[string]uint64
	}
	mib := pattern(1<<20, 1)
	steps := []step{
		// The name is looked up (not there), created; 1 MiB is held until
		// close, where all that is pending fits in one WRITE: it goes out
		// FILE_SYNC, so no COMMIT is needed.
		{"create, write 1 MiB, close", func() {
			f, err := os.Create(filepath.Join(mnt, "one"))
			must(t, "create", err)
			_, err = f.Write(mib)
			must(t, "write", err)
			must(t, "close", f.Close())
		}, map[string]uint64{"LOOKUP": 1, "CREATE": 1, "WRITE": 1}},
		// 2 MiB + 1 byte in three writes: when the second full wsize chunk
		// is dirty, the first is streamed out UNSTABLE; close sends the
		// other two pieces UNSTABLE (more than one WRITE is needed, so
		// FILE_SYNC would not save the COMMIT) and one COMMIT.
		{"create, write 2 MiB + 1, close", func() {
			f, err := os.Create(filepath.Join(mnt, "two"))
			must(t, "create", err)
			for _, p := range [][]byte{mib, mib, {'!'}} {
				_, err = f.Write(p)
				must(t, "write", err)
			}
			must(t, "close", f.Close())
		}, map[string]uint64{"LOOKUP": 1, "CREATE": 1, "WRITE": 3, "COMMIT": 1}},
		// Attributes of a file just written are cached.
		{"stat of the written files", func() {
			must(t, "stat", unix.Stat(filepath.Join(mnt, "one"), &st))
			must(t, "stat", unix.Stat(filepath.Join(mnt, "two"), &st))
		}, nil},
		{"mkdir", func() {
			must(t, "mkdir", unix.Mkdir(filepath.Join(mnt, "d"), 0o755))
		}, map[string]uint64{"LOOKUP": 1, "MKDIR": 1}},
		// The kernel looks the target name up first: not there, as the
		// core knows without asking (it made the directory, and every
		// change since is its own), then renames.
		{"rename into the new directory", func() {
			must(t, "rename", unix.Rename(filepath.Join(mnt, "two"), filepath.Join(mnt, "d", "two")))
		}, map[string]uint64{"RENAME": 1}},
		{"unlink", func() {
			must(t, "unlink", unix.Unlink(filepath.Join(mnt, "one")))
		}, map[string]uint64{"REMOVE": 1}},
	}
	prev := m.Stats(t)
	want := map[string]uint64{}
	for _, s := range steps {
		s.do()
		cur := m.Stats(t)
		expectCounts(t, s.name, delta(prev, cur), s.want)
		for k, v := range s.want {
			want[k] += v
		}
		prev = cur
	}
	final := m.Stats(t)
	// Loopback loses nothing: one transmission per call.
	for name, o := range final.Ops {
		if o.Transmissions != o.Ops || o.Timeouts != 0 || o.Errors != 0 {
			t.Errorf("%s: %d calls, %d transmissions, %d timeouts, %d errors; want one transmission each and no failures",
				name, o.Ops, o.Transmissions, o.Timeouts, o.Errors)
		}
	}
	if b := final.Ops["WRITE"].BytesSent; b < 3<<20+1 {
		t.Errorf("WRITE bytes sent %d, less than the 3 MiB + 1 written", b)
	}

	// The wire: every call the statistics count, and no other.
	wire := capture.stop(t)
	got := map[string]uint64{}
	for proc, n := range wire.calls {
		got[nfs3.ProcName(proc)] = n
	}
	stats := map[string]uint64{}
	for _, name := range final.Names() {
		if !strings.Contains(name, ":") && name != "OTHER" {
			stats[name] = final.Ops[name].Ops
		}
	}
	if !maps.Equal(got, stats) {
		t.Errorf("calls on the wire %v, hushfs stats %v; tshark's warnings on the capture (a segment not captured or not reassembled is the capture's fault, not the mount's):\n%s",
			got, stats, capture.expert(t))
	}
	if !maps.Equal(stats, want) {
		t.Errorf("hushfs stats over all steps %v, want %v", stats, want)
	}
	if wire.replies != wire.total() {
		t.Errorf("%d replies on the wire for %d calls", wire.replies, wire.total())
	}
	// The stability of each WRITE: the 1 MiB file FILE_SYNC, the others
	// UNSTABLE.
	wantStable := map[uint32]uint64{uint32(nfs3.FileSync): 1, uint32(nfs3.Unstable): 3}
	if !maps.Equal(wire.stable, wantStable) {
		t.Errorf("WRITE stability on the wire (0 UNSTABLE, 2 FILE_SYNC): %v, want %v", wire.stable, wantStable)
	}
	t.Logf("per procedure (stats = wire): %v; WRITE stability %v", stats, wire.stable)

	// And the data got there.
	if b, err := os.ReadFile(filepath.Join(export, "d", "two")); err != nil || len(b) != 2<<20+1 || b[2<<20] != '!' {
		t.Errorf("d/two on disk: %d bytes, %v", len(b), err)
	}
}

// delta returns b's counters minus a's (per procedure, calls only).
func delta(a, b client.Snapshot) client.Snapshot {
	out := client.Snapshot{Since: b.Since, Ops: map[string]client.OpStats{}}
	for k, v := range b.Ops {
		v.Ops -= a.Ops[k].Ops
		if v.Ops != 0 {
			out.Ops[k] = v
		}
	}
	return out
}

// expectCounts compares a snapshot's NFS calls with want exactly (MOUNT and
// PORTMAP calls aside).
func expectCounts(t *testing.T, what string, s client.Snapshot, want map[string]uint64) {
	t.Helper()
	got := map[string]uint64{}
	for k, v := range s.Ops {
		if !strings.Contains(k, ":") && k != "OTHER" && v.Ops != 0 {
			got[k] = v.Ops
		}
	}
	if want == nil {
		want = map[string]uint64{}
	}
	if !maps.Equal(got, want) {
		t.Errorf("%s: NFS calls %v, want %v", what, got, want)
	}
}

// pcap is a running dumpcap.
type pcap struct {
	cmd    *exec.Cmd
	file   string
	port   string
	exited chan struct{}
	stderr *strings.Builder
}

// startCapture starts dumpcap on lo for one TCP port and returns once it is
// capturing. It is stopped by pid at cleanup if the test does not stop it.
func startCapture(t *testing.T, port string) *pcap {
	t.Helper()
	for _, tool := range []string{"dumpcap", "tshark"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Fatalf("%s not found (scripts/install-deps.sh installs tshark): %v", tool, err)
		}
	}
	p := &pcap{file: filepath.Join(t.TempDir(), "nfs.pcapng"), port: port, exited: make(chan struct{}), stderr: &strings.Builder{}}
	// A large buffer: a 1 MiB WRITE is a burst of 64 KiB loopback frames.
	p.cmd = exec.Command("dumpcap", "-B", "64", "-i", "lo", "-f", "tcp port "+port, "-w", p.file)
	p.cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	stderr, err := p.cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := p.cmd.Start(); err != nil {
		t.Fatalf("dumpcap: %v", err)
	}
	// dumpcap says "Capturing on" before packets actually flow into its
	// buffer; it is ready once its live counter ("\rPackets: N") has
	// counted something. Bare TCP connections to the port (no RPC in them)
	// give it something to count.
	ready := make(chan bool, 1)
	go func() {
		sc := bufio.NewScanner(stderr)
		sc.Split(splitCRLF)
		said := false
		for sc.Scan() {
			line := strings.TrimSpace(sc.Text())
			p.stderr.WriteString(line + "\n")
			var n int
			if _, err := fmt.Sscanf(line, "Packets: %d", &n); err == nil && n > 0 && !said {
				said = true
				ready <- true
			}
		}
		io.Copy(io.Discard, stderr)
		p.cmd.Wait()
		close(p.exited)
	}()
	t.Cleanup(func() {
		p.cmd.Process.Kill()
		<-p.exited
	})
	deadline := time.After(20 * time.Second)
	probe := time.NewTicker(50 * time.Millisecond)
	defer probe.Stop()
	for {
		select {
		case <-ready:
			return p
		case <-p.exited:
			t.Fatalf("dumpcap exited: %s", p.stderr.String())
		case <-deadline:
			t.Fatalf("dumpcap counted no packet within 20 s:\n%s", p.stderr.String())
		case <-probe.C:
			if c, err := net.DialTimeout("tcp", "127.0.0.1:"+port, time.Second); err == nil {
				c.Close()
			}
		}
	}
}

// splitCRLF splits at carriage returns as well as newlines: dumpcap
// rewrites its live counter in place.
func splitCRLF(data []byte, atEOF bool) (int, []byte, error) {
	for i, b := range data {
		if b == '\r' || b == '\n' {
			return i + 1, data[:i], nil
		}
	}
	if atEOF && len(data) > 0 {
		return len(data), data, nil
	}
	return 0, nil, nil
}

// expert returns tshark's expert information on the capture (segments
// not captured, reassembly errors, malformed packets), for a failure to
// say whether the capture or the mount is at fault.
func (p *pcap) expert(t *testing.T) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	out, err := exec.CommandContext(ctx, "tshark", "-r", p.file, "-d", "tcp.port=="+p.port+",rpc", "-q", "-z", "expert,warn").CombinedOutput()
	if err != nil {
		return fmt.Sprintf("tshark -z expert: %v\n%s", err, out)
	}
	return string(out)
}

// wireCounts is what tshark decoded.
type wireCounts struct {
	calls   map[uint32]uint64 // NFSv3 procedure → calls
	replies uint64
	stable  map[uint32]uint64 // WRITE stable_how → calls
}

func (w *wireCounts) total() uint64 {
	var n uint64
	for _, v := range w.calls {
		n += v
	}
	return n
}

// stop ends the capture (SIGINT, by pid) and decodes it.
func (p *pcap) stop(t *testing.T) *wireCounts {
	t.Helper()
	// dumpcap reads its buffer every half second or so: let it take the
	// last frames before asking it to stop.
	time.Sleep(600 * time.Millisecond)
	if err := p.cmd.Process.Signal(syscall.SIGINT); err != nil {
		t.Fatalf("stopping dumpcap: %v", err)
	}
	select {
	case <-p.exited:
	case <-time.After(20 * time.Second):
		t.Fatalf("dumpcap did not exit within 20 s of SIGINT")
	}
	// A dropped frame would make the decode disagree for no fault of the
	// mount: say so plainly.
	for _, line := range strings.Split(p.stderr.String(), "\n") {
		if _, rest, ok := strings.Cut(line, "Packets received/dropped on interface"); ok {
			var got, dropped int
			if i := strings.LastIndex(rest, "': "); i >= 0 {
				fmt.Sscanf(rest[i+3:], "%d/%d", &got, &dropped)
			}
			if dropped != 0 {
				t.Errorf("dumpcap dropped %d frames (raise -B): %s", dropped, line)
			}
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	// Every RPC message of every frame: its type, and for NFS its
	// procedure and (WRITE calls) stability, in order.
	cmd := exec.CommandContext(ctx, "tshark", "-r", p.file, "-d", "tcp.port=="+p.port+",rpc",
		"-Y", "rpc", "-T", "fields", "-E", "separator=/t", "-E", "occurrence=a", "-E", "aggregator=,",
		"-e", "rpc.msgtyp", "-e", "nfs.procedure_v3", "-e", "nfs.write.stable")
	out, err := cmd.Output()
	if err != nil {
		var stderr string
		if ee, ok := err.(*exec.ExitError); ok {
			stderr = string(ee.Stderr)
		}
		t.Fatalf("tshark: %v\n%s", err, stderr)
	}
	w := &wireCounts{calls: map[uint32]uint64{}, stable: map[uint32]uint64{}}
	ints := func(s string) []uint32 {
		var out []uint32
		for _, f := range strings.Split(s, ",") {
			if f == "" {
				continue
			}
			n, err := strconv.ParseUint(f, 10, 32)
			if err != nil {
				t.Fatalf("tshark field %q: %v", s, err)
			}
			out = append(out, uint32(n))
		}
		return out
	}
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		if line == "" {
			continue
		}
		f := strings.Split(line, "\t")
		for len(f) < 3 {
			f = append(f, "")
		}
		types, procs := ints(f[0]), ints(f[1])
		if len(types) != len(procs) {
			t.Fatalf("tshark line %q: %d messages, %d procedures", line, len(types), len(procs))
		}
		for i, typ := range types {
			if typ == 0 {
				w.calls[procs[i]]++
			} else {
				w.replies++
			}
		}
		for _, s := range ints(f[2]) {
			w.stable[s]++
		}
	}
	if w.total() == 0 {
		t.Fatalf("tshark decoded no NFS call in the capture:\n%s", out)
	}
	return w
}
