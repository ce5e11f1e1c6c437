package main

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/sys/unix"

	"hushfs/internal/nfs3"
	"hushfs/internal/rpc"
	"hushfs/test/harness"
)

// The scenarios below are the server comparison the project's targets are
// stated in: metadata operations from several clients at once (each with
// its own connection), random small reads, and whole-file sequential
// transfers of seqSize with the file's pages dropped from the server's
// cache first, so the server's own readahead and write clustering count.

const (
	seqSize     = 1 << 30
	seqInFlight = 8 // 1 MiB READs/WRITEs in flight, as a client's readahead keeps
)

// call makes one NFS call on s.
func (s *session) call(ctx context.Context, proc uint32, args rpc.Marshaler, res rpc.Unmarshaler) error {
	return s.c.Call(ctx, nfs3.Program, nfs3.Version, proc, s.cred, args, res)
}

func check(what string, err error, st nfs3.Status) error {
	if err != nil {
		return fmt.Errorf("%s: %w", what, err)
	}
	if st != nfs3.OK {
		return fmt.Errorf("%s: %w", what, st)
	}
	return nil
}

// metaOps runs CREATE + GETATTR + REMOVE of a fresh name in the "meta"
// directory from clients connections at once for d, and returns the
// triples completed per second.
func metaOps(t *harness.Program, tg *target, metaDir func(*session) nfs3.FH, clients int, d time.Duration) float64 {
	sessions := make([]*session, clients)
	for i := range sessions {
		sessions[i] = connect(t, tg)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var done atomic.Uint64
	var firstErr atomic.Value
	var wg sync.WaitGroup
	start := time.Now()
	stop := start.Add(d)
	for c, s := range sessions {
		wg.Add(1)
		go func() {
			defer wg.Done()
			dir := metaDir(s)
			for i := 0; time.Now().Before(stop); i++ {
				name := []byte(fmt.Sprintf("m%02d-%d", c, i))
				var cr nfs3.CreateRes
				err := s.call(ctx, nfs3.ProcCreate, &nfs3.CreateArgs{Where: nfs3.DirOpArgs{Dir: dir, Name: name},
					Mode: nfs3.Unchecked, Attr: nfs3.Sattr{SetMode: true, Mode: 0o644}}, &cr)
				if err = check("CREATE", err, cr.Status); err == nil && !cr.Obj.Present {
					err = fmt.Errorf("CREATE %s: no handle in the reply", name)
				}
				if err == nil {
					var gr nfs3.GetattrRes
					err = s.call(ctx, nfs3.ProcGetattr, &nfs3.GetattrArgs{Obj: cr.Obj.FH}, &gr)
					err = check("GETATTR", err, gr.Status)
				}
				if err == nil {
					var rr nfs3.RemoveRes
					err = s.call(ctx, nfs3.ProcRemove, &nfs3.RemoveArgs{Obj: nfs3.DirOpArgs{Dir: dir, Name: name}}, &rr)
					err = check("REMOVE", err, rr.Status)
				}
				if err != nil {
					firstErr.CompareAndSwap(nil, err)
					return
				}
				done.Add(1)
			}
		}()
	}
	wg.Wait()
	if err, _ := firstErr.Load().(error); err != nil {
		t.Fatalf("%s: create+stat+remove with %d clients: %v", tg.name, clients, err)
	}
	for _, s := range sessions {
		s.c.Close()
	}
	return float64(done.Load()) / time.Since(start).Seconds()
}

// dropCache writes back and evicts a file's pages from the page cache, so
// the next read comes from the disk.
func dropCache(path string) error {
	f, err := os.Open(path)
	if err != nil {
		return err
	}
	defer f.Close()
	if err := f.Sync(); err != nil {
		return err
	}
	return unix.Fadvise(int(f.Fd()), 0, 0, unix.FADV_DONTNEED)
}

// eachMiB calls fn for every 1 MiB offset below seqSize, from seqInFlight
// goroutines taking offsets in order, and returns the first error (which
// stops the goroutine that met it).
func eachMiB(fn func(off uint64) error) error {
	var next atomic.Uint64
	var firstErr atomic.Value
	var wg sync.WaitGroup
	for range seqInFlight {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				off := (next.Add(1) - 1) << 20
				if off >= seqSize {
					return
				}
				if err := fn(off); err != nil {
					firstErr.CompareAndSwap(nil, err)
					return
				}
			}
		}()
	}
	wg.Wait()
	err, _ := firstErr.Load().(error)
	return err
}

// seqRead reads the seqSize file "seq" with seqInFlight 1 MiB READs in
// flight, in offset order as far as the pipeline allows, and returns MB/s.
func seqRead(t *harness.Program, tg *target, s *session) float64 {
	if err := dropCache(filepath.Join(tg.dir, "seq")); err != nil {
		t.Fatalf("dropping seq from the page cache: %v", err)
	}
	ctx := context.Background()
	start := time.Now()
	err := eachMiB(func(off uint64) error {
		var res nfs3.ReadRes
		err := s.call(ctx, nfs3.ProcRead, &nfs3.ReadArgs{File: s.seq, Offset: off, Count: 1 << 20}, &res)
		if err = check("READ", err, res.Status); err == nil && len(res.Data) != 1<<20 {
			err = fmt.Errorf("READ at %d: %d bytes", off, len(res.Data))
		}
		return err
	})
	if err != nil {
		t.Fatalf("%s: sequential read: %v", tg.name, err)
	}
	return seqSize / 1e6 / time.Since(start).Seconds()
}

// seqWrite writes seqSize to a new file with seqInFlight UNSTABLE 1 MiB
// WRITEs in flight, then COMMITs; MB/s includes the COMMIT.
func seqWrite(t *harness.Program, tg *target, s *session, name string) float64 {
	ctx := context.Background()
	var cr nfs3.CreateRes
	err := s.call(ctx, nfs3.ProcCreate, &nfs3.CreateArgs{Where: nfs3.DirOpArgs{Dir: s.root, Name: []byte(name)},
		Mode: nfs3.Unchecked, Attr: nfs3.Sattr{SetMode: true, Mode: 0o644}}, &cr)
	if err = check("CREATE", err, cr.Status); err != nil || !cr.Obj.Present {
		t.Fatalf("%s: creating %s: %v", tg.name, name, err)
	}
	fh := cr.Obj.FH
	start := time.Now()
	err = eachMiB(func(off uint64) error {
		var res nfs3.WriteRes
		err := s.call(ctx, nfs3.ProcWrite, &nfs3.WriteArgs{File: fh, Offset: off, Count: 1 << 20,
			Stable: nfs3.Unstable, Data: writeData}, &res)
		return check("WRITE", err, res.Status)
	})
	if err != nil {
		t.Fatalf("%s: sequential write: %v", tg.name, err)
	}
	var res nfs3.CommitRes
	if err := check("COMMIT", s.call(ctx, nfs3.ProcCommit, &nfs3.CommitArgs{File: fh}, &res), res.Status); err != nil {
		t.Fatalf("%s: sequential write: %v", tg.name, err)
	}
	mbps := seqSize / 1e6 / time.Since(start).Seconds()
	os.Remove(filepath.Join(tg.dir, name))
	return mbps
}

// randomRead4K reads 4 KiB at random aligned offsets of "big" with conc
// calls in flight for d; ops/s.
func randomRead4K(t *harness.Program, tg *target, s *session, conc int, d time.Duration) float64 {
	w := workload{name: "READ 4 KiB random", unit: "ops/s", call: func(ctx context.Context, s *session, i uint64) error {
		var res nfs3.ReadRes
		off := rand.Uint64N(bigSize/4096) * 4096
		err := s.call(ctx, nfs3.ProcRead, &nfs3.ReadArgs{File: s.big, Offset: off, Count: 4096}, &res)
		return check("READ", err, res.Status)
	}}
	return measure(t, s, w, conc, d)
}
