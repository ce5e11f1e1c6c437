package server

import (
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"hushfs/internal/nfs3"
)

// TestLookupOfNameBeingRemoved: a LOOKUP racing with the removal of the
// name it looks up (by a local process or another client) answers OK or
// NOENT, never STALE: the only handle in a LOOKUP is the directory's, so a
// client takes STALE to mean the directory is gone, and would stop
// trusting a directory that is still there. Directories and files are made
// and removed in a loop while LOOKUPs of their names run.
func TestLookupOfNameBeingRemoved(t *testing.T) {
	e := startEnv(t, false)
	c := e.root0()
	root := c.rootFH()
	var stop atomic.Bool
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for !stop.Load() {
			os.Mkdir(filepath.Join(e.root, "d"), 0o755)
			os.WriteFile(filepath.Join(e.root, "f"), nil, 0o644)
			os.Remove(filepath.Join(e.root, "d"))
			os.Remove(filepath.Join(e.root, "f"))
		}
	}()
	counts := map[nfs3.Status]int{}
	deadline := time.Now().Add(time.Second)
	for i := 0; time.Now().Before(deadline); i++ {
		name := "d"
		if i%2 == 1 {
			name = "f"
		}
		_, st := c.lookup(root, name)
		counts[st]++
		if st != nfs3.OK && st != nfs3.ErrNoEnt {
			stop.Store(true)
			wg.Wait()
			t.Fatalf("LOOKUP %s while it is being removed: %v (so far: %v)", name, st, counts)
		}
	}
	stop.Store(true)
	wg.Wait()
	t.Logf("LOOKUP results: %v", counts)
	if counts[nfs3.OK] == 0 || counts[nfs3.ErrNoEnt] == 0 {
		t.Errorf("the lookups never met both states: %v", counts)
	}
}
