// Package metrics counts the RPC server's calls and renders them, with the
// server's own counters, in the Prometheus text exposition format (version
// 0.0.4) for an HTTP scrape of GET /metrics.
//
// Per-procedure counts and latency histograms live in fixed arrays of
// atomics, one per NFS and MOUNT procedure: recording a call takes no lock
// and allocates nothing.
package metrics

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strconv"
	"sync/atomic"
	"time"

	"hushfs/internal/nfs3"
	"hushfs/internal/nfs4"
	"hushfs/internal/rpc"
)

// bounds are the upper bounds of the latency histogram's buckets, from
// 50 µs (a cached GETATTR) to 10 s (a COMMIT of a large file on a slow
// disk), in 1-2.5-5 steps.
var bounds = [...]time.Duration{
	50 * time.Microsecond, 100 * time.Microsecond, 250 * time.Microsecond, 500 * time.Microsecond,
	time.Millisecond, 2500 * time.Microsecond, 5 * time.Millisecond,
	10 * time.Millisecond, 25 * time.Millisecond, 50 * time.Millisecond,
	100 * time.Millisecond, 250 * time.Millisecond, 500 * time.Millisecond,
	time.Second, 2500 * time.Millisecond, 5 * time.Second, 10 * time.Second,
}

// BucketBounds returns the upper bounds of the latency histogram's buckets
// (the last, +Inf, not included).
func BucketBounds() []time.Duration { return append([]time.Duration(nil), bounds[:]...) }

// histogram counts calls per bucket (not cumulated: one add per call; the
// last bucket is +Inf) and their total duration.
type histogram struct {
	buckets [len(bounds) + 1]atomic.Uint64
	sum     atomic.Int64 // nanoseconds
}

func (h *histogram) observe(d time.Duration) {
	i := 0
	for i < len(bounds) && d > bounds[i] {
		i++
	}
	h.buckets[i].Add(1)
	h.sum.Add(int64(max(d, 0)))
}

// RPC records calls per procedure. Its Observe method is meant for
// rpc.ServerOptions.Observe.
type RPC struct {
	nfs   [nfs3.NumProcs]histogram
	mount [nfs3.NumMountProcs]histogram
	nfs4  [2]histogram          // NFSv4 NULL and COMPOUND
	ops   [numOps + 1]histogram // NFSv4.1 operations by number; the last: ILLEGAL and unknown
	other histogram             // any other program, version or procedure
	// The NFSv4.1 server's callbacks (CB_NULL as 0, then by CB operation:
	// CB_RECALL, CB_GETATTR) and the delegations it granted, by type.
	cb     [numCBOps]histogram
	grants [3]atomic.Uint64
}

// numCBOps bounds the callback operation numbers counted (CB_RECALL_SLOT
// and below); others are not counted.
const numCBOps = 11

// grantNames are the delegation types Granted counts.
var grantNames = [...]string{"read", "write", "directory"}

// numOps bounds the NFSv4 operation numbers counted one by one (4.2's
// included, for a server that serves them one day).
const numOps = 72

// NewRPC returns an empty recorder.
func NewRPC() *RPC { return &RPC{} }

// Observe records one call that took d.
func (r *RPC) Observe(prog, vers, proc uint32, d time.Duration) {
	r.hist(prog, vers, proc).observe(d)
}

func (r *RPC) hist(prog, vers, proc uint32) *histogram {
	switch {
	case prog == nfs3.Program && vers == nfs3.Version && proc < nfs3.NumProcs:
		return &r.nfs[proc]
	case prog == nfs3.MountProgram && vers == nfs3.MountVersion && proc < nfs3.NumMountProcs:
		return &r.mount[proc]
	case prog == nfs4.Program && vers == nfs4.Version && proc < 2:
		return &r.nfs4[proc]
	}
	return &r.other
}

// ObserveOp records one NFSv4.1 operation of a COMPOUND that took d (for
// server.Config.ObserveOp).
func (r *RPC) ObserveOp(op uint32, d time.Duration) {
	if op >= numOps {
		op = numOps
	}
	r.ops[op].observe(d)
}

// ObserveCallback records one callback the server sent and the time to
// its answer: op is the CB operation after CB_SEQUENCE (CB_RECALL,
// CB_GETATTR), or 0 for CB_NULL.
func (r *RPC) ObserveCallback(op uint32, d time.Duration) {
	if op < numCBOps {
		r.cb[op].observe(d)
	}
}

// Granted counts one delegation granted, of type "read", "write" or
// "directory" (others are not counted).
func (r *RPC) Granted(typ string) {
	for i, name := range grantNames {
		if name == typ {
			r.grants[i].Add(1)
		}
	}
}

// Snapshot is the state of one procedure's histogram.
type Snapshot struct {
	Prog, Proc string   // label values: "nfs", "GETATTR"
	Buckets    []uint64 // cumulative counts for BucketBounds, then +Inf (= Count)
	Count      uint64
	Sum        time.Duration
}

// Snapshots returns the procedures called at least once, NFSv3 first, in
// procedure order.
func (r *RPC) Snapshots() []Snapshot {
	var out []Snapshot
	add := func(prog, proc string, h *histogram) {
		s := Snapshot{Prog: prog, Proc: proc, Buckets: make([]uint64, len(h.buckets))}
		var n uint64
		for i := range h.buckets {
			n += h.buckets[i].Load()
			s.Buckets[i] = n
		}
		if n == 0 {
			return
		}
		// Count is derived from the buckets, so that one scrape is
		// consistent: +Inf equals _count equals calls_total.
		s.Count, s.Sum = n, time.Duration(h.sum.Load())
		out = append(out, s)
	}
	for p := range r.nfs {
		add("nfs", nfs3.ProcName(uint32(p)), &r.nfs[p])
	}
	for p := range r.mount {
		add("mount", nfs3.MountProcName(uint32(p)), &r.mount[p])
	}
	add("nfs4", "NULL", &r.nfs4[0])
	add("nfs4", "COMPOUND", &r.nfs4[1])
	for op := range r.ops {
		name := nfs4.Opnum(op).String()
		if op == numOps {
			name = "ILLEGAL"
		}
		add("nfs4op", name, &r.ops[op])
	}
	add("other", "other", &r.other)
	for op := range r.cb {
		name := nfs4.CBOpnum(op).String()
		if op == 0 {
			name = "CB_NULL"
		}
		add("nfs4cb", name, &r.cb[op])
	}
	return out
}

// StatsSource is what WriteText reads server-wide counters from;
// *rpc.Server implements it.
type StatsSource interface{ Stats() rpc.ServerStats }

// WriteText renders the metrics of r and s (either may be nil) in the
// Prometheus text format.
func WriteText(w io.Writer, r *RPC, s StatsSource) error {
	bw := bufio.NewWriter(w)
	if r != nil {
		writeRPC(bw, r.Snapshots())
		const g = "hushfs_nfs4_delegations_granted_total"
		header(bw, g, "counter", "NFSv4.1 delegations granted, by type.")
		for i, name := range grantNames {
			fmt.Fprintf(bw, "%s{type=%q} %d\n", g, name, r.grants[i].Load())
		}
	}
	if s != nil {
		writeServer(bw, s.Stats())
	}
	return bw.Flush()
}

func header(w *bufio.Writer, name, typ, help string) {
	fmt.Fprintf(w, "# HELP %s %s\n# TYPE %s %s\n", name, help, name, typ)
}

func writeRPC(w *bufio.Writer, snaps []Snapshot) {
	header(w, "hushfs_rpc_calls_total", "counter", "RPC calls run by a handler, by program and procedure.")
	for _, s := range snaps {
		fmt.Fprintf(w, "hushfs_rpc_calls_total{prog=%q,proc=%q} %d\n", s.Prog, s.Proc, s.Count)
	}
	const h = "hushfs_rpc_call_duration_seconds"
	header(w, h, "histogram", "Time from a call's last byte read to its reply queued, waiting for a worker included.")
	for _, s := range snaps {
		for i, n := range s.Buckets {
			le := "+Inf"
			if i < len(bounds) {
				le = strconv.FormatFloat(bounds[i].Seconds(), 'g', -1, 64)
			}
			fmt.Fprintf(w, "%s_bucket{prog=%q,proc=%q,le=%q} %d\n", h, s.Prog, s.Proc, le, n)
		}
		fmt.Fprintf(w, "%s_sum{prog=%q,proc=%q} %s\n", h, s.Prog, s.Proc, strconv.FormatFloat(s.Sum.Seconds(), 'g', -1, 64))
		fmt.Fprintf(w, "%s_count{prog=%q,proc=%q} %d\n", h, s.Prog, s.Proc, s.Count)
	}
}

func writeServer(w *bufio.Writer, st rpc.ServerStats) {
	for _, m := range []struct {
		name, typ, help string
		v               int64
	}{
		{"hushfs_rpc_connections_open", "gauge", "Connections open.", int64(st.ConnsOpen)},
		{"hushfs_rpc_connections_accepted_total", "counter", "Connections accepted.", int64(st.ConnsAccepted)},
		{"hushfs_rpc_connections_refused_total", "counter", "Connections closed at accept: the limit reached and none idle.", int64(st.ConnsRefused)},
		{"hushfs_rpc_connections_evicted_total", "counter", "Idle connections closed to make room for new ones.", int64(st.ConnsEvicted)},
		{"hushfs_rpc_buffered_bytes", "gauge", "Bytes of calls and replies held by all connections.", st.Buffered},
		{"hushfs_rpc_conn_buffered_bytes_peak", "gauge", "Most bytes one connection ever held at once.", st.BufferedPeak},
		{"hushfs_rpc_drc_hits_total", "counter", "Retransmissions answered from the duplicate request cache.", int64(st.DRCHits)},
		{"hushfs_rpc_drc_drops_total", "counter", "Retransmissions dropped while the original call was running.", int64(st.DRCDrops)},
		{"hushfs_rpc_drc_entries", "gauge", "Calls in the duplicate request cache.", int64(st.DRCEntries)},
		{"hushfs_rpc_drc_bytes", "gauge", "Bytes charged to the duplicate request cache.", int64(st.DRCBytes)},
		{"hushfs_rpc_busy_poll_hits_total", "counter", "Busy polls that found the client's next call.", int64(st.BusyPollHits)},
		{"hushfs_rpc_busy_poll_misses_total", "counter", "Busy polls that gave up and slept.", int64(st.BusyPollMisses)},
	} {
		header(w, m.name, m.typ, m.help)
		fmt.Fprintf(w, "%s %d\n", m.name, m.v)
	}
}

// contentType is the Prometheus text format's.
const contentType = "text/plain; version=0.0.4; charset=utf-8"

// Handler serves the metrics of r and s (either may be nil) to GET and
// HEAD requests, whatever the path.
func Handler(r *RPC, s StatsSource) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		if req.Method != http.MethodGet && req.Method != http.MethodHead {
			w.Header().Set("Allow", "GET, HEAD")
			http.Error(w, "method not allowed", http.StatusMethodNotAllowed)
			return
		}
		var b bytes.Buffer
		if err := WriteText(&b, r, s); err != nil {
			http.Error(w, err.Error(), http.StatusInternalServerError)
			return
		}
		w.Header().Set("Content-Type", contentType)
		w.Header().Set("Content-Length", strconv.Itoa(b.Len()))
		if req.Method == http.MethodGet {
			w.Write(b.Bytes())
		}
	})
}

// Serve serves h at /metrics on l until ctx is done, then shuts down
// (waiting at most 5 s for scrapes in progress) and returns nil. Other
// paths get 404.
func Serve(ctx context.Context, l net.Listener, h http.Handler) error {
	mux := http.NewServeMux()
	mux.Handle("/metrics", h)
	srv := &http.Server{
		Handler:           mux,
		ReadHeaderTimeout: 10 * time.Second,
		WriteTimeout:      30 * time.Second,
		IdleTimeout:       2 * time.Minute,
	}
	errc := make(chan error, 1)
	go func() { errc <- srv.Serve(l) }()
	select {
	case err := <-errc:
		return fmt.Errorf("metrics: serving on %v: %w", l.Addr(), err)
	case <-ctx.Done():
	}
	sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := srv.Shutdown(sctx); err != nil {
		srv.Close()
	}
	if err := <-errc; err != nil && !errors.Is(err, http.ErrServerClosed) {
		return fmt.Errorf("metrics: serving on %v: %w", l.Addr(), err)
	}
	return nil
}

// ListenAndServe listens on addr (host:port, TCP) and calls Serve.
func ListenAndServe(ctx context.Context, addr string, h http.Handler) error {
	l, err := net.Listen("tcp", addr)
	if err != nil {
		return fmt.Errorf("metrics: %w", err)
	}
	return Serve(ctx, l, h)
}
