package metrics

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"hushfs/internal/nfs3"
	"hushfs/internal/rpc"
	"hushfs/internal/server"
	"hushfs/internal/xdr"
)

// sample is one parsed line of the exposition.
type sample struct {
	name   string
	labels map[string]string
	value  float64
}

// exposition is a parsed scrape: samples in order, and each family's type.
type exposition struct {
	samples []sample
	types   map[string]string
	helps   map[string]bool
}

// parseText parses the Prometheus text format strictly enough to catch
// what a scraper would reject: every sample belongs to a family declared
// (HELP and TYPE) before it, label values are quoted, values are floats.
func parseText(t *testing.T, text string) *exposition {
	t.Helper()
	e := &exposition{types: map[string]string{}, helps: map[string]bool{}}
	sc := bufio.NewScanner(strings.NewReader(text))
	for n := 1; sc.Scan(); n++ {
		line := sc.Text()
		if f, ok := strings.CutPrefix(line, "# HELP "); ok {
			name, help, _ := strings.Cut(f, " ")
			if help == "" {
				t.Fatalf("line %d: HELP without text", n)
			}
			e.helps[name] = true
			continue
		}
		if f, ok := strings.CutPrefix(line, "# TYPE "); ok {
			name, typ, _ := strings.Cut(f, " ")
			switch typ {
			case "counter", "gauge", "histogram":
			default:
				t.Fatalf("line %d: type %q", n, typ)
			}
			if _, dup := e.types[name]; dup {
				t.Fatalf("line %d: %s declared twice", n, name)
			}
			e.types[name] = typ
			continue
		}
		if line == "" || strings.HasPrefix(line, "#") {
			t.Fatalf("line %d: unexpected %q", n, line)
		}
		i := strings.LastIndexByte(line, ' ')
		if i < 0 {
			t.Fatalf("line %d: no value: %q", n, line)
		}
		v, err := strconv.ParseFloat(line[i+1:], 64)
		if err != nil {
			t.Fatalf("line %d: value: %v", n, err)
		}
		s := sample{labels: map[string]string{}, value: v}
		head := line[:i]
		if j := strings.IndexByte(head, '{'); j >= 0 {
			if !strings.HasSuffix(head, "}") {
				t.Fatalf("line %d: labels not closed: %q", n, line)
			}
			s.name = head[:j]
			for _, kv := range strings.Split(head[j+1:len(head)-1], ",") {
				k, qv, ok := strings.Cut(kv, "=")
				uv, err := strconv.Unquote(qv)
				if !ok || err != nil {
					t.Fatalf("line %d: label %q", n, kv)
				}
				s.labels[k] = uv
			}
		} else {
			s.name = head
		}
		family := s.name
		if e.types[family] == "" {
			for _, suf := range []string{"_bucket", "_sum", "_count"} {
				if f, ok := strings.CutSuffix(s.name, suf); ok && e.types[f] == "histogram" {
					family = f
				}
			}
		}
		if e.types[family] == "" || !e.helps[family] {
			t.Fatalf("line %d: sample of %s before its HELP and TYPE", n, family)
		}
		e.samples = append(e.samples, s)
	}
	return e
}

// get returns the value of the sample with this name and labels (in k, v
// pairs), failing if there is none.
func (e *exposition) get(t *testing.T, name string, kv ...string) float64 {
	t.Helper()
	v, ok := e.lookup(name, kv...)
	if !ok {
		t.Fatalf("no sample %s%v", name, kv)
	}
	return v
}

func (e *exposition) lookup(name string, kv ...string) (float64, bool) {
next:
	for _, s := range e.samples {
		if s.name != name || len(s.labels) != len(kv)/2 {
			continue
		}
		for i := 0; i < len(kv); i += 2 {
			if s.labels[kv[i]] != kv[i+1] {
				continue next
			}
		}
		return s.value, true
	}
	return 0, false
}

// checkHistogram checks one series: buckets in increasing le, cumulative,
// +Inf equal to _count, and returns the count.
func (e *exposition) checkHistogram(t *testing.T, prog, proc string) (count float64, buckets map[string]float64) {
	t.Helper()
	const h = "hushfs_rpc_call_duration_seconds"
	buckets = map[string]float64{}
	prevLe, prev := -1.0, 0.0
	for _, s := range e.samples {
		if s.name != h+"_bucket" || s.labels["prog"] != prog || s.labels["proc"] != proc {
			continue
		}
		le, err := strconv.ParseFloat(s.labels["le"], 64) // "+Inf" parses too
		if err != nil || le <= prevLe {
			t.Fatalf("%s %s: bucket le %q after %v", prog, proc, s.labels["le"], prevLe)
		}
		if s.value < prev {
			t.Fatalf("%s %s: bucket le %s has %v < %v: not cumulative", prog, proc, s.labels["le"], s.value, prev)
		}
		prevLe, prev = le, s.value
		buckets[s.labels["le"]] = s.value
	}
	if len(buckets) != len(bounds)+1 {
		t.Fatalf("%s %s: %d buckets, want %d", prog, proc, len(buckets), len(bounds)+1)
	}
	count = e.get(t, h+"_count", "prog", prog, "proc", proc)
	if buckets["+Inf"] != count {
		t.Fatalf("%s %s: +Inf bucket %v, _count %v", prog, proc, buckets["+Inf"], count)
	}
	return count, buckets
}

// scrape serves the metrics on 127.0.0.1 and fetches them over HTTP.
func scrape(t *testing.T, h http.Handler) (string, *http.Response) {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- Serve(ctx, l, h) }()
	defer func() {
		cancel()
		select {
		case err := <-done:
			if err != nil {
				t.Errorf("Serve: %v", err)
			}
		case <-time.After(10 * time.Second):
			t.Error("Serve did not return")
		}
	}()
	hc := &http.Client{Timeout: 10 * time.Second}
	resp, err := hc.Get("http://" + l.Addr().String() + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("status %s", resp.Status)
	}
	// Other paths and methods.
	if r, err := hc.Get("http://" + l.Addr().String() + "/"); err != nil || r.StatusCode != http.StatusNotFound {
		t.Errorf("GET /: %v %v", r.StatusCode, err)
	} else {
		r.Body.Close()
	}
	if r, err := hc.Post("http://"+l.Addr().String()+"/metrics", "text/plain", nil); err != nil || r.StatusCode != http.StatusMethodNotAllowed {
		t.Errorf("POST /metrics: %v %v", r.StatusCode, err)
	} else {
		r.Body.Close()
	}
	return string(body), resp
}

// plainHandler answers every procedure with empty results; the ones given
// a delay sleep first. It declares REMOVE non-idempotent.
type plainHandler struct{ delay map[uint32]time.Duration }

func (h plainHandler) ServeRPC(ctx context.Context, call *rpc.Call, reply []byte) ([]byte, error) {
	time.Sleep(h.delay[call.Proc])
	return reply, nil
}

func (plainHandler) NonIdempotent(proc uint32) bool { return proc == nfs3.ProcRemove }

type noArgs struct{}

func (noArgs) Append(b []byte) []byte { return b }

// Calls made over 127.0.0.1 show up in a scrape: each procedure's count
// equals the calls made, histograms are consistent, slow calls land in the
// right buckets, cache hits and connections are counted.
func TestScrapeAfterCalls(t *testing.T) {
	m := NewRPC()
	rs := rpc.NewServer(rpc.ServerOptions{Observe: m.Observe})
	h := plainHandler{delay: map[uint32]time.Duration{nfs3.ProcCommit: 30 * time.Millisecond}}
	rs.Register(nfs3.Program, nfs3.Version, h)
	rs.Register(nfs3.MountProgram, nfs3.MountVersion, h)
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go rs.Serve(l)
	defer rs.Close()

	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	c, err := rpc.Dial(ctx, l.Addr().String(), rpc.ClientOptions{Timeout: 10 * time.Second, Retrans: -1})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	made := map[[2]string]int{}
	send := func(prog, proc uint32, n int) {
		for range n {
			if err := c.Call(ctx, prog, 3, proc, rpc.NoAuth, noArgs{}, nil); err != nil {
				t.Error(err)
				return
			}
		}
	}
	call := func(prog, proc uint32, n int) {
		send(prog, proc, n)
		name, pname := "nfs", nfs3.ProcName(proc)
		if prog == nfs3.MountProgram {
			name, pname = "mount", nfs3.MountProcName(proc)
		}
		made[[2]string{name, pname}] += n
	}
	var wg sync.WaitGroup
	for range 4 { // concurrently, to exercise the atomics
		wg.Add(1)
		go func() {
			defer wg.Done()
			send(nfs3.Program, nfs3.ProcGetattr, 25)
		}()
	}
	wg.Wait()
	if t.Failed() {
		t.FailNow()
	}
	made[[2]string{"nfs", "GETATTR"}] = 100
	call(nfs3.Program, nfs3.ProcNull, 3)
	call(nfs3.Program, nfs3.ProcCommit, 2)
	call(nfs3.MountProgram, nfs3.MountProcMnt, 1)
	// A procedure beyond the tables counts as "other" (the handler
	// answers it all the same).
	if err := c.Call(ctx, nfs3.Program, 3, 99, rpc.NoAuth, noArgs{}, nil); err != nil {
		t.Fatal(err)
	}
	made[[2]string{"other", "other"}] = 1

	// One REMOVE and two retransmissions of it, on new connections.
	rec := rawRecord(0x5151, nfs3.Program, nfs3.ProcRemove)
	for range 3 {
		nc, err := net.Dial("tcp", l.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		nc.SetDeadline(time.Now().Add(10 * time.Second))
		if _, err := nc.Write(rec); err != nil {
			t.Fatal(err)
		}
		if _, err := rpc.ReadRecord(nc, nil, 1<<20); err != nil {
			t.Fatal(err)
		}
		nc.Close()
	}
	made[[2]string{"nfs", "REMOVE"}] = 1

	text, resp := scrape(t, Handler(m, rs))
	if ct := resp.Header.Get("Content-Type"); ct != contentType {
		t.Errorf("Content-Type %q", ct)
	}
	e := parseText(t, text)
	for key, n := range made {
		if got := e.get(t, "hushfs_rpc_calls_total", "prog", key[0], "proc", key[1]); got != float64(n) {
			t.Errorf("calls_total %v = %v, want %d", key, got, n)
		}
		count, buckets := e.checkHistogram(t, key[0], key[1])
		if count != float64(n) {
			t.Errorf("_count %v = %v, want %d", key, count, n)
		}
		sum := e.get(t, "hushfs_rpc_call_duration_seconds_sum", "prog", key[0], "proc", key[1])
		if sum <= 0 {
			t.Errorf("_sum %v = %v", key, sum)
		}
		if key[1] == "COMMIT" {
			// Each took at least its 30 ms; how much longer depends on
			// the machine's load, so no upper bound.
			if buckets["0.025"] != 0 || buckets["+Inf"] != 2 || sum < 0.06 {
				t.Errorf("30 ms COMMITs: buckets %v, sum %v", buckets, sum)
			}
		}
	}
	// Procedures not called have no series.
	if _, ok := e.lookup("hushfs_rpc_calls_total", "prog", "nfs", "proc", "READ"); ok {
		t.Error("READ has a series without calls")
	}
	if got := e.get(t, "hushfs_rpc_drc_hits_total"); got != 2 {
		t.Errorf("drc hits %v, want 2", got)
	}
	if got := e.get(t, "hushfs_rpc_drc_entries"); got != 1 {
		t.Errorf("drc entries %v, want 1", got)
	}
	// The client's connection is open; the three raw ones were closed,
	// though the server may not have noticed every close yet.
	if got := e.get(t, "hushfs_rpc_connections_open"); got < 1 || got > 4 {
		t.Errorf("connections open %v", got)
	}
	if got := e.get(t, "hushfs_rpc_connections_accepted_total"); got != 4 {
		t.Errorf("connections accepted %v, want 4", got)
	}
	for name, typ := range map[string]string{
		"hushfs_rpc_calls_total": "counter", "hushfs_rpc_call_duration_seconds": "histogram",
		"hushfs_rpc_connections_open": "gauge", "hushfs_rpc_drc_hits_total": "counter",
	} {
		if e.types[name] != typ {
			t.Errorf("%s has type %q, want %s", name, e.types[name], typ)
		}
	}
}

// rawRecord is a call record with AUTH_NONE and no arguments.
func rawRecord(xid, prog, proc uint32) []byte {
	b, st := rpc.BeginRecord(nil)
	for _, v := range []uint32{xid, rpc.MsgCall, rpc.RPCVersion, prog, 3, proc} {
		b = xdr.AppendUint32(b, v)
	}
	b = rpc.NoAuth.Append(b)
	b = rpc.NoAuth.Append(b)
	rpc.FinishRecord(b, st)
	return b
}

func TestHistogramBuckets(t *testing.T) {
	m := NewRPC()
	for _, d := range []time.Duration{-time.Second, 0, 50 * time.Microsecond, 50*time.Microsecond + 1, 10 * time.Second, time.Minute} {
		m.Observe(nfs3.Program, nfs3.Version, nfs3.ProcRead, d)
	}
	s := m.Snapshots()
	if len(s) != 1 || s[0].Proc != "READ" || s[0].Count != 6 {
		t.Fatalf("%+v", s)
	}
	want := make([]uint64, len(bounds)+1)
	// le=50µs holds -1s (counted as 0), 0 and 50µs; 50µs+1ns goes to
	// le=100µs; 10 s is le=10; a minute only +Inf.
	for i := range want {
		switch {
		case i == 0:
			want[i] = 3
		case i < len(bounds)-1:
			want[i] = 4
		case i == len(bounds)-1:
			want[i] = 5
		default:
			want[i] = 6
		}
	}
	if fmt.Sprint(s[0].Buckets) != fmt.Sprint(want) {
		t.Fatalf("buckets %v, want %v", s[0].Buckets, want)
	}
	if s[0].Sum != 50*time.Microsecond+50*time.Microsecond+1+10*time.Second+time.Minute {
		t.Fatalf("sum %v", s[0].Sum)
	}
}

// The real NFS server: calls and a retransmitted REMOVE answered from the
// cache, as a scrape shows them.
func TestScrapeRealServer(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("the NFS server needs root")
	}
	base := t.TempDir()
	root := filepath.Join(base, "export")
	if err := os.Mkdir(root, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(root, "f"), []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	srv, err := server.New(server.Config{Root: root, StateDir: filepath.Join(base, "state"), Logf: t.Logf})
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Close()
	m := NewRPC()
	rs := rpc.NewServer(rpc.ServerOptions{Observe: m.Observe, Logf: t.Logf})
	srv.Register(rs)
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go rs.Serve(l)
	defer rs.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	c, err := rpc.Dial(ctx, l.Addr().String(), rpc.ClientOptions{Timeout: 10 * time.Second, Retrans: -1})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	cred := rpc.SysCred(0, 0, nil, "metrics-test")
	fh := srv.RootHandle()
	for range 5 {
		var r nfs3.GetattrRes
		if err := c.Call(ctx, nfs3.Program, nfs3.Version, nfs3.ProcGetattr, cred, &nfs3.GetattrArgs{Obj: fh}, &r); err != nil || r.Status != nfs3.OK {
			t.Fatalf("GETATTR: %v %v", err, r.Status)
		}
	}
	// REMOVE sent twice with one XID, on two connections.
	args := (&nfs3.RemoveArgs{Obj: nfs3.DirOpArgs{Dir: fh, Name: []byte("f")}}).Append(nil)
	b, st := rpc.BeginRecord(nil)
	for _, v := range []uint32{0x7777, rpc.MsgCall, rpc.RPCVersion, nfs3.Program, nfs3.Version, nfs3.ProcRemove} {
		b = xdr.AppendUint32(b, v)
	}
	b = cred.Append(b)
	b = rpc.NoAuth.Append(b)
	b = append(b, args...)
	rpc.FinishRecord(b, st)
	for range 2 {
		nc, err := net.Dial("tcp", l.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		nc.SetDeadline(time.Now().Add(10 * time.Second))
		nc.Write(b)
		if _, err := rpc.ReadRecord(nc, nil, 1<<20); err != nil {
			t.Fatal(err)
		}
		nc.Close()
	}
	text, _ := scrape(t, Handler(m, rs))
	e := parseText(t, text)
	if got := e.get(t, "hushfs_rpc_calls_total", "prog", "nfs", "proc", "GETATTR"); got != 5 {
		t.Errorf("GETATTR calls %v, want 5", got)
	}
	if got := e.get(t, "hushfs_rpc_calls_total", "prog", "nfs", "proc", "REMOVE"); got != 1 {
		t.Errorf("REMOVE calls %v, want 1", got)
	}
	if got := e.get(t, "hushfs_rpc_drc_hits_total"); got != 1 {
		t.Errorf("drc hits %v, want 1", got)
	}
	e.checkHistogram(t, "nfs", "GETATTR")
}

func BenchmarkObserve(b *testing.B) {
	m := NewRPC()
	b.RunParallel(func(pb *testing.PB) {
		d := time.Duration(0)
		for pb.Next() {
			d += 7 * time.Microsecond
			m.Observe(nfs3.Program, nfs3.Version, nfs3.ProcGetattr, d%time.Second)
		}
	})
}
