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
