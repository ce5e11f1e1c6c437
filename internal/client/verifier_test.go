package client

import (
	"bytes"
	"crypto/rand"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"hushfs/internal/nfs3"
)

// TestVerifierThatNeverSettles: a server that answers every WRITE and
// COMMIT with a new write verifier. The close fails with EIO after a
// bounded number of resends; the data is kept and retried by the age
// flusher with a back-off that doubles (injected clock), never more than one
// round per retry; once the server behaves again the data reaches it
// intact. The whole file used to be rewritten 9 times every 5 s until
// unmount.
func TestVerifierThatNeverSettles(t *testing.T) {
	ts := startServer(t)
	var broken atomic.Bool
	broken.Store(true)
	var verf atomic.Uint64
	var writes, commits atomic.Int64
	port := hostileFront(t, ts.nfsL.Addr().String(), func(proc uint32, args, res []byte) []byte {
		fresh := func(v *nfs3.Verf) {
			if broken.Load() {
				*v = nfs3.Verf{}
				copy(v[:], fmt.Sprint(verf.Add(1)))
			}
		}
		switch proc {
		case nfs3.ProcWrite:
			writes.Add(1)
			return recode(t, res, func(r *nfs3.WriteRes) { fresh(&r.Verf) })
		case nfs3.ProcCommit:
			commits.Add(1)
			return recode(t, res, func(r *nfs3.CommitRes) { fresh(&r.Verf) })
		}
		return res
	})
	var mu sync.Mutex
	start := time.Unix(2_000_000_000, 0)
	now := start
	clock := func() time.Time { mu.Lock(); defer mu.Unlock(); return now }
	setClock := func(d time.Duration) { mu.Lock(); now = start.Add(d); mu.Unlock() }
	var logs atomic.Int64
	fs := ts.mountViaWith(t, port, "", clock, func(f string, a ...any) {
		if strings.Contains(fmt.Sprintf(f, a...), "retried in") {
			logs.Add(1)
		}
	})
	fs.wb.close() // the test drives the age flusher (flushAged) itself
	ctx := ctxT(t)

	const size = 3 << 20 // three WRITEs of 1 MiB and a COMMIT per round
	data := make([]byte, size)
	rand.Read(data)
	e, fh, err := fs.Create(ctx, root, RootID, "v", syscall.O_WRONLY, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	for off := 0; off < size; off += 128 << 10 {
		if _, err := fs.Write(ctx, root, fh, uint64(off), data[off:off+128<<10]); err != nil {
			t.Fatal(err)
		}
	}
	if err := fs.Flush(ctx, root, fh); Errno(err) != syscall.EIO {
		t.Fatalf("close with a verifier that never settles: %v, want EIO", err)
	}
	if c := commits.Load(); c != maxCommitRetries+1 {
		t.Errorf("%d COMMITs at close, want %d", c, maxCommitRetries+1)
	}
	if logs.Load() != 1 {
		t.Errorf("%d log lines about the retry, want 1", logs.Load())
	}
	// Until the retry time, a close or fsync fails at once, sending nothing.
	w0, c0 := writes.Load(), commits.Load()
	if err := fs.Flush(ctx, root, fh); Errno(err) != syscall.EIO {
		t.Errorf("fsync while backing off: %v, want EIO", err)
	}
	if w, c := writes.Load(), commits.Load(); w != w0 || c != c0 {
		t.Errorf("fsync while backing off sent %d WRITEs and %d COMMITs", w-w0, c-c0)
	}

	// Ten minutes of the age flusher, ticking every 5 s.
	var retries []time.Duration
	for at := 5 * time.Second; at <= 10*time.Minute; at += 5 * time.Second {
		setClock(at)
		w0, c0 := writes.Load(), commits.Load()
		fs.wb.flushAged(ctx)
		w, c := writes.Load()-w0, commits.Load()-c0
		if c == 0 && w == 0 {
			continue
		}
		retries = append(retries, at)
		if c != 1 || w != 3 {
			t.Errorf("retry at %v: %d WRITEs, %d COMMITs; want one round: 3 and 1", at, w, c)
		}
		if len(retries) > 8 {
			t.Fatalf("retries at %v: no back-off", retries)
		}
		fs.wb.mu.Lock()
		held, clean := fs.wb.bytes, fs.wb.cleanBytes
		fs.wb.mu.Unlock()
		if held > size || clean > size {
			t.Errorf("after the retry at %v: %d bytes held and %d clean, for a %d-byte file", at, held, clean, size)
		}
	}
	t.Logf("retries at %v", retries)
	if len(retries) < 3 || retries[0] < retryMin {
		t.Fatalf("retries at %v: want a few, the first after %v", retries, retryMin)
	}
	for i := 2; i < len(retries); i++ {
		if gap, last := retries[i]-retries[i-1], retries[i-1]-retries[i-2]; gap < min(2*last, retryMax) {
			t.Errorf("retries at %v: the gap after %v does not double", retries, retries[i-1])
		}
	}
	if int(logs.Load()) != 1+len(retries) {
		t.Errorf("%d log lines about retries, want %d", logs.Load(), 1+len(retries))
	}

	// The server behaves again: the next retry makes the data durable.
	broken.Store(false)
	setClock(10*time.Minute + retryMax)
	fs.wb.flushAged(ctx)
	if got, _ := os.ReadFile(filepath.Join(ts.dir, "v")); !bytes.Equal(got, data) {
		t.Fatalf("server has %d bytes, equal prefix %d of %d", len(got), commonPrefix(got, data), size)
	}
	w0, c0 = writes.Load(), commits.Load()
	if err := fs.Flush(ctx, root, fh); err != nil {
		t.Errorf("close once the data is durable: %v", err)
	}
	if w, c := writes.Load(), commits.Load(); w != w0 || c != c0 {
		t.Errorf("close once the data is durable sent %d WRITEs and %d COMMITs", w-w0, c-c0)
	}
	fs.Release(ctx, fh)
	if a, _, err := fs.GetAttr(ctx, root, e.Node); err != nil || a.Size != size {
		t.Errorf("size %d, %v", a.Size, err)
	}
}
