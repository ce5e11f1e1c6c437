package test

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"hushfs/test/harness"
)

// TestNFSv41OneCompoundPerOpen counts the COMPOUNDs of a v4.1 mount of
// ganesha (which grants no delegations): open+read+close of a small file
// in a listed directory is one COMPOUND (the OPEN, its first READ, the
// previous file's CLOSE), the last CLOSE goes alone within a second; a
// re-open of a file whose CLOSE is queued is one OPEN and no CLOSE; rm of
// a just-closed file is one COMPOUND (its CLOSE and the REMOVE); a change
// made on the server is read at the next open (the OPEN's data is that
// version's); and another client reads at once what this one wrote and
// closed (the WRITEs and COMMIT are not deferred, only the CLOSE).
func TestNFSv41OneCompoundPerOpen(t *testing.T) {
	requireMountTools(t)
	bin := harness.BuildHushfs(t)
	g := harness.StartGanesha(t, harness.GaneshaOptions{NFSv4: true})
	const n = 20
	must(t, "mkdir on the server", os.Mkdir(filepath.Join(g.ExportDir, "d"), 0o755))
	content := func(i int) []byte { return pattern(3000+i*100, byte(i)) }
	for i := 0; i < n; i++ {
		must(t, "write on the server", os.WriteFile(filepath.Join(g.ExportDir, "d", fmt.Sprintf("f%02d", i)), content(i), 0o644))
	}
	m, mnt := fuseV41(t, bin, g, "")
	dir := filepath.Join(mnt, "d")
	ents, err := os.ReadDir(dir)
	must(t, "list", err)
	if len(ents) != n {
		t.Fatalf("listed %d entries, want %d", len(ents), n)
	}
	step := func(what string, do func(), want map[string]uint64) {
		t.Helper()
		prev := m.Stats(t)
		do()
		d := delta(prev, m.Stats(t))
		t.Logf("%s: %s", what, opsLine(d.Ops))
		expectCounts(t, what, d, want)
	}
	readAs := func(name string, want []byte) func() {
		return func() {
			got, err := os.ReadFile(filepath.Join(dir, name))
			must(t, "read "+name, err)
			if !bytes.Equal(got, want) {
				t.Errorf("read %s: %d bytes, not what the server holds (%d)", name, len(got), len(want))
			}
		}
	}

	prev := m.Stats(t)
	for i := 0; i < n; i++ {
		step(fmt.Sprintf("open+read+close f%02d", i), readAs(fmt.Sprintf("f%02d", i), content(i)), map[string]uint64{"OPEN": 1})
	}
	step("a second after the last close", func() { time.Sleep(time.Second) }, map[string]uint64{"CLOSE": 1})
	t.Logf("%d files read: %s", n, opsLine(delta(prev, m.Stats(t)).Ops))

	step("read f00, then again at once", func() {
		readAs("f00", content(0))()
		readAs("f00", content(0))()
	}, map[string]uint64{"OPEN": 2})
	step("a second after", func() { time.Sleep(time.Second) }, map[string]uint64{"CLOSE": 1})

	step("read f01 and rm it", func() {
		readAs("f01", content(1))()
		must(t, "rm", os.Remove(filepath.Join(dir, "f01")))
	}, map[string]uint64{"OPEN": 1, "REMOVE": 1})
	step("a second after", func() { time.Sleep(time.Second) }, nil)
	if _, err := os.Stat(filepath.Join(g.ExportDir, "d", "f01")); !os.IsNotExist(err) {
		t.Errorf("f01 is still on the server: %v", err)
	}

	// Changed on the server (same size, a new mtime): the next open reads
	// the new bytes, never the cached ones. The OPEN asked for no data (the
	// file's was cached), so the kernel's read is a READ.
	newer := pattern(len(content(2)), 99)
	p2 := filepath.Join(g.ExportDir, "d", "f02")
	must(t, "rewrite on the server", os.WriteFile(p2, newer, 0o644))
	later := time.Now().Add(time.Hour)
	must(t, "touch on the server", os.Chtimes(p2, later, later))
	step("read f02 after the server's change", readAs("f02", newer), map[string]uint64{"OPEN": 1, "READ": 1})

	// Close-to-open across clients: B reads A's data as soon as A closed.
	m2, mnt2 := fuseV41(t, bin, g, "")
	for i, data := range [][]byte{pattern(5000, 1), pattern(7000, 2)} {
		must(t, "A: write", os.WriteFile(filepath.Join(dir, "w"), data, 0o644))
		got, err := os.ReadFile(filepath.Join(mnt2, "d", "w"))
		must(t, "B: read", err)
		if !bytes.Equal(got, data) {
			t.Errorf("B read %d bytes of A's write %d (%d bytes), not A's data", len(got), i, len(data))
		}
	}
	must(t, "unmount B", m2.Unmount(false))
	must(t, "unmount A", m.Unmount(false))
}
