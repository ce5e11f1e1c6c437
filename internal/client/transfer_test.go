package client

import (
	"bytes"
	"crypto/rand"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"hushfs/internal/nfs3"
)

// peakSampler records the most goroutines and heap bytes seen while it runs.
type peakSampler struct {
	stop       chan struct{}
	done       sync.WaitGroup
	goroutines int
	heap       uint64
}

func samplePeaks() *peakSampler {
	p := &peakSampler{stop: make(chan struct{})}
	p.done.Add(1)
	go func() {
		defer p.done.Done()
		var ms runtime.MemStats
		for {
			p.goroutines = max(p.goroutines, runtime.NumGoroutine())
			runtime.ReadMemStats(&ms)
			p.heap = max(p.heap, ms.HeapInuse)
			select {
			case <-p.stop:
				return
			case <-time.After(2 * time.Millisecond):
			}
		}
	}()
	return p
}

func (p *peakSampler) end() (goroutines int, heap uint64) {
	close(p.stop)
	p.done.Wait()
	return p.goroutines, p.heap
}

// TestTinyTransferSizes: a server whose FSINFO says rtmax, wtmax, rtpref
// and wtpref are 8 bytes. Transfer sizes are floored at a page (with a
// log line), and a 2 MiB file written and read through the client is
// exact, with 512 WRITEs and 512 READs of 4 KiB, while the goroutines and
// the heap stay bounded (one goroutine per 8-byte piece took 1.5 GiB and
// hung).
func TestTinyTransferSizes(t *testing.T) {
	ts := startServer(t)
	var writes, reads atomic.Int64
	port := hostileFront(t, ts.nfsL.Addr().String(), func(proc uint32, args, res []byte) []byte {
		switch proc {
		case nfs3.ProcFsinfo:
			return recode(t, res, func(r *nfs3.FsinfoRes) {
				r.Rtmax, r.Wtmax, r.Rtpref, r.Wtpref = 8, 8, 8, 8
			})
		case nfs3.ProcWrite:
			writes.Add(1)
		case nfs3.ProcRead:
			reads.Add(1)
		}
		return res
	})
	var logMu sync.Mutex
	var logged []string
	fs := ts.mountViaWith(t, port, "", nil, func(f string, a ...any) {
		logMu.Lock()
		logged = append(logged, fmt.Sprintf(f, a...))
		logMu.Unlock()
	})
	if r, w, _ := fs.TransferSizes(); r != 4096 || w != 4096 {
		t.Fatalf("rsize %d, wsize %d from an FSINFO saying 8; want 4096", r, w)
	}
	logMu.Lock()
	if !strings.Contains(strings.Join(logged, "\n"), "rtmax") {
		t.Errorf("no log line for the tiny transfer sizes: %q", logged)
	}
	logMu.Unlock()

	ctx := ctxT(t)
	start := time.Now()
	data := make([]byte, 2<<20)
	rand.Read(data)
	runtime.GC()
	baseG := runtime.NumGoroutine()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	baseHeap := ms.HeapInuse
	peaks := samplePeaks()

	_, fh, err := fs.Create(ctx, root, RootID, "w", syscall.O_WRONLY, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	for off := 0; off < len(data); off += 128 << 10 { // as FUSE sends them
		if _, err := fs.Write(ctx, root, fh, uint64(off), data[off:off+128<<10]); err != nil {
			t.Fatal(err)
		}
	}
	if err := fs.Flush(ctx, root, fh); err != nil {
		t.Fatal(err)
	}
	fs.Release(ctx, fh)
	if got, _ := os.ReadFile(filepath.Join(ts.dir, "w")); !bytes.Equal(got, data) {
		t.Fatalf("the server has %d bytes, not the 2 MiB written (equal prefix %d)", len(got), commonPrefix(got, data))
	}

	// Read a file the client has no data of.
	if err := os.WriteFile(filepath.Join(ts.dir, "r"), data, 0o644); err != nil {
		t.Fatal(err)
	}
	e, err := fs.Lookup(ctx, root, RootID, "r")
	if err != nil {
		t.Fatal(err)
	}
	fh, _, err = fs.Open(ctx, root, e.Node, syscall.O_RDONLY)
	if err != nil {
		t.Fatal(err)
	}
	got, err := readAsKernel(t, ctx, fs, fh)
	fs.Release(ctx, fh)
	if err != nil || !bytes.Equal(got, data) {
		t.Fatalf("read %d bytes, %v; equal prefix %d of 2 MiB", len(got), err, commonPrefix(got, data))
	}
	goroutines, heap := peaks.end()
	t.Logf("%v, peak goroutines %d (%d before), peak heap in use %d MiB (%d MiB before)",
		time.Since(start), goroutines, baseG, heap>>20, baseHeap>>20)

	if w, r := writes.Load(), reads.Load(); w != 512 || r < 512 || r > 513 {
		t.Errorf("%d WRITEs, %d READs; want 512 of each (4 KiB) and at most one READ finding the end", w, r)
	}
	// A write streams from one file and a read's pieces go out in windows
	// of rpcWindow: a few windows' worth of goroutines, not one per piece.
	if goroutines > baseG+4*rpcWindow {
		t.Errorf("peak goroutines %d, %d before", goroutines, baseG)
	}
	if heap > baseHeap+64<<20 {
		t.Errorf("peak heap in use %d MiB, %d MiB before", heap>>20, baseHeap>>20)
	}
}
