package test

import (
	"fmt"
	"maps"
	"net"
	"os"
	"path/filepath"
	"regexp"
	"testing"
	"time"

	"hushfs/internal/proxy"
	"hushfs/test/harness"
)

// TestNFSv41CountsThroughProxy: a v4.1 mount of `hushfs serve` through
// `hushfs proxy` creates, writes, reads, lists, renames and removes files.
// The proxy decodes each COMPOUND and counts it as one call and its
// operations apart; the client counts the same COMPOUNDs (under the name
// of what each does) and the same operations, SEQUENCE included, and
// reports bytes and a round trip time for each call name. `hushfs stats`
// prints the operations below the calls.
func TestNFSv41CountsThroughProxy(t *testing.T) {
	requireMountTools(t)
	bin := harness.BuildHushfs(t)
	export := t.TempDir()
	s := harness.StartServe(t, export)
	p := startFaultProxy(t, bin, s.NFSAddr)
	_, port, _ := net.SplitHostPort(p.Addr)
	dir := t.TempDir()
	m := harness.StartMount(t, harness.MountSpec{Bin: bin, Server: "127.0.0.1", Export: s.ExportPath,
		Dir: dir, Options: "vers=4.1,port=" + port})
	m.ResetStats(t)
	p.ctlJSON(t, new(proxy.Counts), "counts", "--json", "--reset") // the mount's own calls are not the workload's

	for i := range 5 {
		name := filepath.Join(dir, fmt.Sprintf("f%d", i))
		must(t, "write", os.WriteFile(name, pattern(10<<10, byte(i)), 0o644))
		readBack(t, "read", name, pattern(10<<10, byte(i)))
	}
	must(t, "mkdir", os.Mkdir(filepath.Join(dir, "d"), 0o755))
	must(t, "rename", os.Rename(filepath.Join(dir, "f0"), filepath.Join(dir, "d", "g")))
	ents, err := os.ReadDir(dir)
	must(t, "readdir", err)
	if len(ents) != 5 {
		t.Fatalf("listed %d entries, want 5", len(ents))
	}
	must(t, "remove", os.Remove(filepath.Join(dir, "f1")))

	// The proxy counts a call when it arrives, the client when its reply
	// is in: read until they agree (a lone SEQUENCE renewing the lease
	// would be the proxy's alone; the lease is far longer than this test).
	var (
		st       = m.Stats(t)
		c        proxy.Counts
		calls    uint64
		compound = proxy.ProcKey{Prog: 100003, Vers: 4, Proc: 1}
	)
	for deadline := time.Now().Add(3 * time.Second); ; {
		st, c = m.Stats(t), p.Counts(t)
		calls = st.Total()
		if (calls == c.Calls[compound] && maps.Equal(st.Operations, c.NFS4Ops)) || time.Now().After(deadline) {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	t.Logf("client: %d calls {%s}, operations %v; proxy: %d COMPOUNDs, operations %v",
		calls, opsLine(st.Ops), st.Operations, c.Calls[compound], c.NFS4Ops)
	if calls == 0 || calls != c.Calls[compound] {
		t.Errorf("client counted %d calls, the proxy %d COMPOUNDs", calls, c.Calls[compound])
	}
	if !maps.Equal(st.Operations, c.NFS4Ops) {
		t.Errorf("operations: client %v, proxy %v", st.Operations, c.NFS4Ops)
	}
	if st.Operations["SEQUENCE"] != calls || st.Operations["OPEN"] == 0 || st.Operations["WRITE"] != 5 || st.Operations["RENAME"] != 1 {
		t.Errorf("operations %v: want one SEQUENCE per call (%d), OPENs, 5 WRITEs, 1 RENAME", st.Operations, calls)
	}
	if c.NFS4Incomplete != 0 || c.UnparsedCalls != 0 {
		t.Errorf("proxy: %d COMPOUNDs not decoded whole, %d records not calls", c.NFS4Incomplete, c.UnparsedCalls)
	}
	for name, o := range st.Ops {
		if o.Ops > 0 && (o.BytesSent == 0 || o.BytesReceived == 0 || o.RTT <= 0) {
			t.Errorf("%s: %d calls with bytes sent %d, received %d, RTT %v", name, o.Ops, o.BytesSent, o.BytesReceived, o.RTT)
		}
	}
	out, err := harness.RunHushfs(bin, 30*time.Second, "stats", dir)
	must(t, "hushfs stats", err)
	for _, re := range []string{`(?m)^operations in COMPOUNDs: \d+ in \d+ calls$`, `(?m)^ +SEQUENCE +\d+$`, `(?m)^ +WRITE +5$`} {
		if !regexp.MustCompile(re).MatchString(out) {
			t.Errorf("hushfs stats: no line %s in\n%s", re, out)
		}
	}
}
