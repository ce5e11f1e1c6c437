// Command serverbench measures NFS server throughput against `hushfs serve`
// and nfs-ganesha side by side, with the same client and load, one after
// the other in one run: metadata (CREATE + GETATTR + REMOVE) from 1 and 16
// clients, each with its own connection; over one connection, GETATTR,
// LOOKUP and 4 KiB READ (cached and random) operations per second with 1
// and 16 calls in flight and MB/s of 1 MiB READ and WRITE; and whole-file
// sequential read and write of 1 GiB (UNSTABLE + COMMIT) with the file's
// pages dropped from the server's cache first; and over NFSv4.1 (v41.go)
// GETATTR, LOOKUP, OPEN+CLOSE, create+stat+remove and 4 KiB READ as a
// Linux client's COMPOUNDs from 1 and 16 clients, each its own session and
// connection (ganesha then serves NFSv4 too). It prints markdown tables
// with the ratio hushfs/ganesha and writes them to -out.
//
// It needs root (ganesha runs in a private network namespace) and the
// packages scripts/install-deps.sh installs. Run it from the repository.
package main

import (
	"context"
	"crypto/rand"
	"flag"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"hushfs/internal/nfs3"
	"hushfs/internal/rpc"
	"hushfs/test/harness"
)

type target struct {
	name   string
	dial   func(ctx context.Context) (net.Conn, error)
	mount  func(ctx context.Context) (net.Conn, error)
	export string
	dir    string
}

type cell struct {
	op    string
	conc  int
	who   string // "in flight" or "clients"
	unit  string // "ops/s" or "MB/s"
	value map[string]float64
	v41   bool
	// compounds is COMPOUNDs per operation (v41 only), per server.
	compounds map[string]float64
}

func main() {
	duration := flag.Duration("duration", 3*time.Second, "time per measurement")
	rounds := flag.Int("rounds", 3, "split each timed measurement into this many rounds, the servers taking turns")
	concs := flag.String("conc", "1,16", "calls in flight over the one connection")
	servers := flag.String("servers", "hushfs,hushfs-async,ganesha", "servers to measure: hushfs, hushfs-async (serve --async), ganesha")
	out := flag.String("out", "bench/results/server-ops.md", "markdown file to write ('' for none)")
	only := flag.String("only", "meta,random,seq,calls,v41", "scenarios to run: meta (create+stat+remove), random (4 KiB random READ), seq (1 GiB sequential read and write), calls (GETATTR, LOOKUP, READ, WRITE over one connection), v41 (NFSv4.1 GETATTR, LOOKUP, OPEN+CLOSE, create+stat+remove, READ from 1 and 16 clients)")
	v41only := flag.String("v41", "", "with v41: only these of its scenarios, comma-separated ("+strings.Join(v41Names(), ", ")+")")
	flag.Parse()
	v41set := map[string]bool{}
	for _, s := range strings.Split(*v41only, ",") {
		if s = strings.TrimSpace(s); s != "" {
			if !slices.Contains(v41Names(), s) {
				fmt.Fprintf(os.Stderr, "serverbench: unknown -v41 scenario %q\n", s)
				os.Exit(2)
			}
			v41set[s] = true
		}
	}
	if *rounds < 1 {
		fmt.Fprintln(os.Stderr, "serverbench: -rounds must be at least 1")
		os.Exit(2)
	}
	var conc []int
	for _, s := range strings.Split(*concs, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(s))
		if err != nil || n < 1 {
			fmt.Fprintf(os.Stderr, "serverbench: bad -conc %q\n", *concs)
			os.Exit(2)
		}
		conc = append(conc, n)
	}
	var table string
	ok := harness.Run(func(t *harness.Program) {
		set := scenarioSet(t, *only)
		var targets []*target
		for _, s := range strings.Split(*servers, ",") {
			s = strings.TrimSpace(s)
			switch s {
			case "hushfs", "hushfs-async":
				dir := t.TempDir()
				populate(t, dir, set["seq"])
				name, args := "hushfs serve", []string(nil)
				if s == "hushfs-async" {
					// Replies to metadata changes before they are on disk,
					// as ganesha does: the comparison at equal durability.
					name, args = "hushfs serve --async", []string{"--async"}
				}
				sv := harness.StartServe(t, dir, args...)
				var d net.Dialer
				targets = append(targets, &target{name: name, export: sv.ExportPath, dir: dir,
					dial:  func(ctx context.Context) (net.Conn, error) { return d.DialContext(ctx, "tcp", sv.NFSAddr) },
					mount: func(ctx context.Context) (net.Conn, error) { return d.DialContext(ctx, "tcp", sv.MountAddr) }})
			case "ganesha":
				dir := t.TempDir()
				populate(t, dir, set["seq"])
				g := harness.StartGanesha(t, harness.GaneshaOptions{ExportDir: dir, NFSv4: set["v41"]})
				targets = append(targets, &target{name: "ganesha 4.3", export: g.ExportPath, dir: dir,
					dial: g.Dial, mount: g.DialMount})
			default:
				t.Fatalf("unknown server %q", s)
			}
		}
		table = run(t, targets, conc, *duration, *rounds, set, v41set)
	})
	if !ok {
		os.Exit(1)
	}
	fmt.Print(table)
	if *out != "" {
		if err := os.MkdirAll(filepath.Dir(*out), 0o755); err == nil {
			err = os.WriteFile(*out, []byte(table), 0o644)
		}
	}
}

const bigSize = 256 << 20

// populate makes the files the workloads use (the 1 GiB one only if seq),
// and syncs them: write-back of what it wrote must not run during the
// measurements, where it would slow down every sync the servers make.
func populate(t *harness.Program, dir string, seq bool) {
	buf := make([]byte, 1<<20)
	rand.Read(buf)
	f, err := os.Create(filepath.Join(dir, "big"))
	if err != nil {
		t.Fatalf("populate: %v", err)
	}
	for off := 0; off < bigSize; off += len(buf) {
		if _, err := f.Write(buf); err != nil {
			t.Fatalf("populate: %v", err)
		}
	}
	if err := f.Sync(); err != nil {
		t.Fatalf("populate: %v", err)
	}
	f.Close()
	if err := os.WriteFile(filepath.Join(dir, "small"), buf[:64<<10], 0o644); err != nil {
		t.Fatalf("populate: %v", err)
	}
	if err := os.WriteFile(filepath.Join(dir, "w"), nil, 0o666); err != nil {
		t.Fatalf("populate: %v", err)
	}
	if err := os.Mkdir(filepath.Join(dir, "meta"), 0o777); err != nil {
		t.Fatalf("populate: %v", err)
	}
	// Without seq an empty "seq", as connect looks it up.
	f, err = os.Create(filepath.Join(dir, "seq"))
	if err != nil {
		t.Fatalf("populate: %v", err)
	}
	if seq {
		for off := 0; off < seqSize; off += len(buf) {
			if _, err := f.Write(buf); err != nil {
				t.Fatalf("populate: %v", err)
			}
		}
	}
	if err := f.Sync(); err != nil {
		t.Fatalf("populate: %v", err)
	}
	if err := f.Close(); err != nil {
		t.Fatalf("populate: %v", err)
	}
	d, err := os.Open(dir)
	if err == nil {
		err = d.Sync()
		d.Close()
	}
	if err != nil {
		t.Fatalf("populate: %v", err)
	}
}

// session is one connection to a server with the handles the workloads use.
type session struct {
	c                *rpc.Client
	cred             rpc.OpaqueAuth
	root, small, big nfs3.FH
	w, seq, meta     nfs3.FH
}

func connect(t *harness.Program, tg *target) *session {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	opts := rpc.ClientOptions{Timeout: 30 * time.Second, Retrans: 3, Hard: false}
	mopts := opts
	mopts.Dial = tg.mount
	mc, err := rpc.NewClient(ctx, mopts)
	if err != nil {
		t.Fatalf("%s: MOUNT connection: %v", tg.name, err)
	}
	defer mc.Close()
	s := &session{cred: rpc.SysCred(0, 0, nil, "serverbench")}
	var mres nfs3.MntRes
	if err := mc.Call(ctx, nfs3.MountProgram, nfs3.MountVersion, nfs3.MountProcMnt, s.cred,
		&nfs3.MntArgs{Path: []byte(tg.export)}, &mres); err != nil || mres.Status != nfs3.MntOK {
		t.Fatalf("%s: MNT %s: %v %v", tg.name, tg.export, err, mres.Status)
	}
	s.root = append(nfs3.FH(nil), mres.FH...)
	opts.Dial = tg.dial
	if s.c, err = rpc.NewClient(ctx, opts); err != nil {
		t.Fatalf("%s: NFS connection: %v", tg.name, err)
	}
	t.Cleanup(func() { s.c.Close() })
	look := func(name string) nfs3.FH {
		var res nfs3.LookupRes
		err := s.c.Call(ctx, nfs3.Program, nfs3.Version, nfs3.ProcLookup, s.cred,
			&nfs3.LookupArgs{What: nfs3.DirOpArgs{Dir: s.root, Name: []byte(name)}}, &res)
		if err != nil || res.Status != nfs3.OK {
			t.Fatalf("%s: LOOKUP %s: %v %v", tg.name, name, err, res.Status)
		}
		return append(nfs3.FH(nil), res.Obj...)
	}
	s.small, s.big, s.w, s.seq, s.meta = look("small"), look("big"), look("w"), look("seq"), look("meta")
	return s
}

// workload issues one call; i is a per-call sequence number.
type workload struct {
	name  string
	unit  string
	bytes int // payload per call, for MB/s
	call  func(ctx context.Context, s *session, i uint64) error
}

func workloads() []workload {
	status := func(err error, st nfs3.Status) error {
		if err != nil {
			return err
		}
		if st != nfs3.OK {
			return st
		}
		return nil
	}
	return []workload{
		{name: "GETATTR", unit: "ops/s", call: func(ctx context.Context, s *session, i uint64) error {
			var res nfs3.GetattrRes
			err := s.c.Call(ctx, nfs3.Program, nfs3.Version, nfs3.ProcGetattr, s.cred, &nfs3.GetattrArgs{Obj: s.small}, &res)
			return status(err, res.Status)
		}},
		{name: "LOOKUP", unit: "ops/s", call: func(ctx context.Context, s *session, i uint64) error {
			var res nfs3.LookupRes
			err := s.c.Call(ctx, nfs3.Program, nfs3.Version, nfs3.ProcLookup, s.cred,
				&nfs3.LookupArgs{What: nfs3.DirOpArgs{Dir: s.root, Name: []byte("small")}}, &res)
			return status(err, res.Status)
		}},
		{name: "READ 4 KiB", unit: "ops/s", bytes: 4096, call: func(ctx context.Context, s *session, i uint64) error {
			var res nfs3.ReadRes
			off := (i * 4096) % (64 << 10)
			err := s.c.Call(ctx, nfs3.Program, nfs3.Version, nfs3.ProcRead, s.cred,
				&nfs3.ReadArgs{File: s.small, Offset: off, Count: 4096}, &res)
			return status(err, res.Status)
		}},
		{name: "READ 1 MiB", unit: "MB/s", bytes: 1 << 20, call: func(ctx context.Context, s *session, i uint64) error {
			var res nfs3.ReadRes
			off := (i << 20) % bigSize
			err := s.c.Call(ctx, nfs3.Program, nfs3.Version, nfs3.ProcRead, s.cred,
				&nfs3.ReadArgs{File: s.big, Offset: off, Count: 1 << 20}, &res)
			if err == nil && res.Status == nfs3.OK && len(res.Data) != 1<<20 {
				return fmt.Errorf("short READ: %d bytes", len(res.Data))
			}
			return status(err, res.Status)
		}},
		{name: "WRITE 1 MiB", unit: "MB/s", bytes: 1 << 20, call: writeCall(status)},
	}
}

var writeData = func() []byte {
	b := make([]byte, 1<<20)
	rand.Read(b)
	return b
}()

func writeCall(status func(error, nfs3.Status) error) func(ctx context.Context, s *session, i uint64) error {
	return func(ctx context.Context, s *session, i uint64) error {
		var res nfs3.WriteRes
		off := (i << 20) % (128 << 20)
		err := s.c.Call(ctx, nfs3.Program, nfs3.Version, nfs3.ProcWrite, s.cred,
			&nfs3.WriteArgs{File: s.w, Offset: off, Count: 1 << 20, Stable: nfs3.Unstable, Data: writeData}, &res)
		return status(err, res.Status)
	}
}

// measure runs w with conc calls in flight for d and returns ops/s or MB/s.
func measure(t *harness.Program, s *session, w workload, conc int, d time.Duration) float64 {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var seq, done atomic.Uint64
	var firstErr atomic.Value
	var wg sync.WaitGroup
	stop := time.Now().Add(d)
	start := time.Now()
	for g := 0; g < conc; g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for time.Now().Before(stop) {
				if err := w.call(ctx, s, seq.Add(1)); err != nil {
					firstErr.CompareAndSwap(nil, err)
					return
				}
				done.Add(1)
			}
		}()
	}
	wg.Wait()
	if err, _ := firstErr.Load().(error); err != nil {
		t.Fatalf("%s with %d in flight: %v", w.name, conc, err)
	}
	secs := time.Since(start).Seconds()
	if w.unit == "MB/s" {
		return float64(done.Load()) * float64(w.bytes) / 1e6 / secs
	}
	return float64(done.Load()) / secs
}

// scenarioSet parses -only.
func scenarioSet(t *harness.Program, list string) map[string]bool {
	set := map[string]bool{}
	for _, s := range strings.Split(list, ",") {
		switch s = strings.TrimSpace(s); s {
		case "meta", "random", "seq", "calls", "v41":
			set[s] = true
		default:
			t.Fatalf("unknown scenario %q in -only", s)
		}
	}
	return set
}

func run(t *harness.Program, targets []*target, conc []int, d time.Duration, rounds int, only, v41set map[string]bool) string {
	sessions := make([]*session, len(targets))
	for i, tg := range targets {
		sessions[i] = connect(t, tg)
	}
	var cells []cell
	each := func(op, unit, who string, n int, f func(i int, tg *target) float64) {
		cl := cell{op: op, conc: n, who: who, unit: unit, value: map[string]float64{}}
		for i, tg := range targets {
			v := f(i, tg)
			cl.value[tg.name] = v
			fmt.Fprintf(os.Stderr, "serverbench: %-24s %2d %-9s  %-12s %10.0f %s\n", op, n, who, tg.name, v, unit)
		}
		cells = append(cells, cl)
	}
	// Timed cells run in rounds of d/rounds, the servers taking turns and
	// a different one going first each round, and report the mean rate:
	// slow drifts of the machine (the file system's allocator getting
	// slower as deleted inodes pile up, other jobs, the disk's cache) then
	// fall on every server alike rather than on whichever runs last.
	timed := func(op, unit, who string, n int, f func(i int, tg *target, d time.Duration) float64) {
		sum := make([]float64, len(targets))
		for r := range rounds {
			for k := range targets {
				i := (k + r) % len(targets)
				sum[i] += f(i, targets[i], d/time.Duration(rounds))
			}
		}
		each(op, unit, who, n, func(i int, _ *target) float64 { return sum[i] / float64(rounds) })
	}
	for _, c := range conc {
		if only["meta"] {
			timed("create+stat+remove", "ops/s", "clients", c, func(_ int, tg *target, d time.Duration) float64 {
				return metaOps(t, tg, func(s *session) nfs3.FH { return s.meta }, c, d)
			})
		}
	}
	for _, c := range conc {
		if only["random"] {
			timed("READ 4 KiB random", "ops/s", "in flight", c, func(i int, tg *target, d time.Duration) float64 {
				return randomRead4K(t, tg, sessions[i], c, d)
			})
		}
	}
	if only["seq"] {
		each("sequential read 1 GiB", "MB/s", "in flight", seqInFlight, func(i int, tg *target) float64 {
			return seqRead(t, tg, sessions[i])
		})
		each("sequential write 1 GiB", "MB/s", "in flight", seqInFlight, func(i int, tg *target) float64 {
			return seqWrite(t, tg, sessions[i], "seqw")
		})
	}
	for _, w := range workloads() {
		if !only["calls"] {
			break
		}
		for _, c := range conc {
			timed(w.name, w.unit, "in flight", c, func(i int, tg *target, d time.Duration) float64 {
				return measure(t, sessions[i], w, c, d)
			})
		}
	}
	if only["v41"] {
		v41 := runV41(t, targets, conc, d, rounds, v41set)
		cells = append(cells, v41...)
	}
	var b strings.Builder
	var v3, v4 []cell
	for _, cl := range cells {
		if cl.v41 {
			v4 = append(v4, cl)
		} else {
			v3 = append(v3, cl)
		}
	}
	if len(v3) > 0 {
		renderTable(&b, targets, v3)
		fmt.Fprintf(&b, "\n%s per timed cell and server, in %d rounds with the servers taking turns (the mean rate shown); "+
			"the 1 GiB transfers run to their end, the file's pages dropped from the server's cache before the read; "+
			"one TCP connection per server, or one per client for create+stat+remove; 127.0.0.1; measured %s.\n",
			d, rounds, time.Now().UTC().Format("2006-01-02"))
	}
	if len(v4) > 0 {
		if len(v3) > 0 {
			b.WriteString("\n")
		}
		b.WriteString("NFSv4.1:\n\n")
		renderTable(&b, targets, v4)
		fmt.Fprintf(&b, "\n%s per timed cell and server, in %d rounds with the servers taking turns (the mean rate shown); "+
			"each client its own client ID, session and TCP connection, one COMPOUND in flight; "+
			"COMPOUNDs per operation as the sessions counted them (SEQUENCE first in each); opens ask for no delegation; "+
			"127.0.0.1; measured %s.\n", d, rounds, time.Now().UTC().Format("2006-01-02"))
	}
	return b.String()
}

// renderTable writes cells as a markdown table with a ratio to ganesha
// for every other server, when ganesha was measured.
func renderTable(b *strings.Builder, targets []*target, cells []cell) {
	ref := ""
	for _, tg := range targets {
		if strings.HasPrefix(tg.name, "ganesha") {
			ref = tg.name
		}
	}
	v41 := len(cells) > 0 && cells[0].v41
	fmt.Fprintf(b, "| operation | concurrency | unit |")
	if v41 {
		b.WriteString(" COMPOUNDs per op |")
	}
	for _, tg := range targets {
		fmt.Fprintf(b, " %s |", tg.name)
	}
	nratio := 0
	for _, tg := range targets {
		if ref != "" && tg.name != ref {
			fmt.Fprintf(b, " %s / ganesha |", strings.TrimPrefix(tg.name, "hushfs "))
			nratio++
		}
	}
	ncol := len(targets) + nratio
	if v41 {
		ncol++
	}
	fmt.Fprintf(b, "\n|---|---|---|%s\n", strings.Repeat("--:|", ncol))
	for _, cl := range cells {
		fmt.Fprintf(b, "| %s | %d %s | %s |", cl.op, cl.conc, cl.who, cl.unit)
		if v41 {
			// The same for every server unless one answered differently.
			var per []string
			for _, tg := range targets {
				v := fmt.Sprintf("%.2g", cl.compounds[tg.name])
				if len(per) == 0 || per[len(per)-1] != v {
					per = append(per, v)
				}
			}
			fmt.Fprintf(b, " %s |", strings.Join(per, " / "))
		}
		for _, tg := range targets {
			fmt.Fprintf(b, " %.0f |", cl.value[tg.name])
		}
		for _, tg := range targets {
			if ref != "" && tg.name != ref {
				fmt.Fprintf(b, " %.2f |", cl.value[tg.name]/cl.value[ref])
			}
		}
		b.WriteString("\n")
	}
}
