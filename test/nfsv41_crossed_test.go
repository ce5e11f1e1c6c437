package test

import (
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"hushfs/test/harness"
)

// TestNFSv41CrossedWriteOpens: two clients hold read delegations of the
// same files and open each for writing at the same moment. Each OPEN
// recalls the other's delegation and is answered NFS4ERR_DELAY until it is
// returned; the return of our own delegation must not wait for our OPEN
// (it did: the OPEN's retries held the lock the recall needs, each side
// waited for the other until the server revoked a delegation a lease
// later).
func TestNFSv41CrossedWriteOpens(t *testing.T) {
	requireMountTools(t)
	bin := harness.BuildHushfs(t)
	export := t.TempDir()
	const files = 12
	for i := range files {
		must(t, "write on the server", os.WriteFile(filepath.Join(export, fmt.Sprint("f", i)), []byte("before"), 0o644))
	}
	s := harness.StartServe(t, export, "--lease", "10s")
	_, dirA := serveV41(t, bin, s)
	_, dirB := serveV41(t, bin, s)
	for i := range files {
		name := fmt.Sprint("f", i)
		readBack(t, "A: read (read delegation)", filepath.Join(dirA, name), []byte("before"))
		readBack(t, "B: read (read delegation)", filepath.Join(dirB, name), []byte("before"))
		start := time.Now()
		var wg sync.WaitGroup
		errs := make([]error, 2)
		gate := make(chan struct{})
		for k, dir := range []string{dirA, dirB} {
			wg.Add(1)
			go func() {
				defer wg.Done()
				<-gate
				f, err := os.OpenFile(filepath.Join(dir, name), os.O_WRONLY, 0)
				if err == nil {
					_, err = f.WriteAt([]byte{'A' + byte(k)}, int64(k))
					if cerr := f.Close(); err == nil {
						err = cerr
					}
				}
				errs[k] = err
			}()
		}
		close(gate)
		done := make(chan struct{})
		go func() { wg.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(5 * time.Second):
			t.Fatalf("%s: the crossed opens for writing are not done after 5 s (lease 10 s)", name)
		}
		for k, err := range errs {
			must(t, fmt.Sprintf("%s: client %c: open for writing, write, close", name, 'A'+k), err)
		}
		t.Logf("%s: both opens for writing done in %v", name, time.Since(start).Round(time.Millisecond))
		got, err := os.ReadFile(filepath.Join(export, name))
		must(t, "read on the server", err)
		if string(got) != "ABfore" {
			t.Fatalf("%s on the server: %q, want %q", name, got, "ABfore")
		}
	}
}
