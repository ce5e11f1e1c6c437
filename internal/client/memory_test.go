package client

import (
	"fmt"
	"math/rand/v2"
	"os"
	"runtime"
	"runtime/pprof"
	"syscall"
	"testing"
)

// TestCleanDataHeldIsCounted: files written in chunks of mixed sizes and
// closed leave their data as clean data; the heap that data keeps alive
// must be about what cleanBytes counts (the limits are on it), not a
// multiple of it (clean extents that pin the larger buffers they were cut
// from).
func TestCleanDataHeldIsCounted(t *testing.T) {
	ts := startServer(t)
	fs := ts.mount(t, "")
	ctx := ctxT(t)
	const files, size = 4, 32 << 20
	rng := rand.New(rand.NewPCG(1, 2))
	src := make([]byte, 1<<20)
	for i := range src {
		src[i] = byte(rng.Uint32())
	}
	for f := range files {
		_, fh, err := fs.Create(ctx, root, RootID, fmt.Sprintf("m%d", f), syscall.O_WRONLY|syscall.O_TRUNC, 0o644)
		if err != nil {
			t.Fatal(err)
		}
		for off := 0; off < size; {
			n := min(4<<10+rng.IntN(1<<20-4<<10), size-off)
			if _, err := fs.Write(ctx, root, fh, uint64(off), src[:n]); err != nil {
				t.Fatal(err)
			}
			off += n
		}
		if err := fs.Flush(ctx, root, fh); err != nil {
			t.Fatal(err)
		}
		fs.Release(ctx, fh)
	}
	fs.wb.mu.Lock()
	clean, held := fs.wb.cleanBytes, fs.wb.bytes
	fs.wb.mu.Unlock()
	runtime.GC()
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	if p := os.Getenv("HUSHFS_HEAP_PROFILE"); p != "" {
		if f, err := os.Create(p); err == nil {
			pprof.WriteHeapProfile(f)
			f.Close()
		}
	}
	t.Logf("clean %d MiB, write-back %d MiB, live heap %d MiB", clean>>20, held>>20, ms.HeapAlloc>>20)
	if clean < files*size/2 {
		t.Fatalf("only %d MiB kept clean of %d MiB written: the test measures nothing", clean>>20, files*size>>20)
	}
	// The data counted, plus a little for the server and the test's own
	// buffers (the process is both).
	if limit := clean + clean/8 + 16<<20; ms.HeapAlloc > limit {
		t.Errorf("live heap %d MiB holding %d MiB of clean data (limit %d MiB)", ms.HeapAlloc>>20, clean>>20, limit>>20)
	}
}
