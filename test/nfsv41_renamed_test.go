package test

import (
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"hushfs/test/harness"
)

// TestNFSv41OpenAfterRenameOver: client A reads f, then client B writes a
// new file and renames it over f, then A opens f again: A reads B's file,
// never the old one — though A's name of f still leads to the old file,
// which the server keeps for the open A has not closed yet (its CLOSE
// waits to ride in a later call). A's OPEN of the old file shows it has
// no name left, and A looks the name up again. Without delegations (with
// them, B's rename recalls A's, and A's CLOSE goes with the return).
func TestNFSv41OpenAfterRenameOver(t *testing.T) {
	requireMountTools(t)
	bin := harness.BuildHushfs(t)
	export := t.TempDir()
	s := harness.StartServe(t, export, "--delegations=false")
	_, dirA := serveV41(t, bin, s)
	_, dirB := serveV41(t, bin, s)
	must(t, "create f", os.WriteFile(filepath.Join(dirB, "f"), []byte("version 0"), 0o644))
	for i := 1; i <= 20; i++ {
		old := []byte(fmt.Sprintf("version %d", i-1))
		readBack(t, "A: read before the rename", filepath.Join(dirA, "f"), old)
		tmp := filepath.Join(dirB, fmt.Sprintf("tmp%d", i))
		must(t, "B: write", os.WriteFile(tmp, []byte(fmt.Sprintf("version %d", i)), 0o644))
		must(t, "B: rename over f", os.Rename(tmp, filepath.Join(dirB, "f")))
		readBack(t, fmt.Sprintf("A: read after B's rename %d", i), filepath.Join(dirA, "f"), []byte(fmt.Sprintf("version %d", i)))
	}
}

// TestNFSv41TruncateAfterRenameOver: as above, but A truncates f by its
// path (truncate(2), no open): it reaches B's new file, never the old one
// A's cached name still leads to. The server
// answers a SETATTR of a file with no name left STALE to a client that
// has no open of it, and the client calls one that shows no name left
// stale when it has no descriptor of the file (its own CLOSE may still
// be queued, which keeps the file the server's); the kernel looks the
// name up again and truncates the new file. Before, the truncate went to
// the old file (in the recall soak, the append after it to the new one:
// a truncate lost). With and without delegations.
func TestNFSv41TruncateAfterRenameOver(t *testing.T) {
	requireMountTools(t)
	bin := harness.BuildHushfs(t)
	for _, deleg := range []string{"--delegations=false", "--delegations=true"} {
		t.Run(deleg, func(t *testing.T) {
			export := t.TempDir()
			s := harness.StartServe(t, export, deleg)
			_, dirA := serveV41(t, bin, s)
			_, dirB := serveV41(t, bin, s)
			fA, fB := filepath.Join(dirA, "f"), filepath.Join(dirB, "f")
			must(t, "create f", os.WriteFile(fB, []byte("version 0\n"), 0o644))
			for i := 1; i <= 10; i++ {
				readBack(t, "A: read before the rename", fA, []byte(fmt.Sprintf("version %d\n", i-1)))
				tmp := filepath.Join(dirB, fmt.Sprintf("tmp%d", i))
				content := fmt.Sprintf("version %d\nsecond line\n", i)
				must(t, "B: write", os.WriteFile(tmp, []byte(content), 0o644))
				must(t, "B: rename over f", os.Rename(tmp, fB))
				must(t, "A: truncate f", os.Truncate(fA, int64(len(fmt.Sprintf("version %d\n", i)))))
				want := fmt.Sprintf("version %d\n", i)
				if got, err := os.ReadFile(filepath.Join(export, "f")); err != nil || string(got) != want {
					t.Fatalf("round %d: the server's f after A's truncate: %q (%v), want %q", i, got, err, want)
				}
			}
		})
	}
}
