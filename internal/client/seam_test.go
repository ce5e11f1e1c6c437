package client

import (
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
)

// TestCoreKnowsNoProtocol: the core, and the FUSE adapter and mount
// command on top of it, reach the server only through internal/proto; no
// non-test file imports a protocol's codec or the RPC layer. The protocol
// is chosen in protocol.go alone.
func TestCoreKnowsNoProtocol(t *testing.T) {
	forbidden := []string{"hushfs/internal/nfs3", "hushfs/internal/nfs4", "hushfs/internal/rpc", "hushfs/internal/xdr"}
	check := func(path string) {
		f, err := parser.ParseFile(token.NewFileSet(), path, nil, parser.ImportsOnly)
		if err != nil {
			t.Fatal(err)
		}
		for _, imp := range f.Imports {
			p, _ := strconv.Unquote(imp.Path.Value)
			if slices.Contains(forbidden, p) {
				t.Errorf("%s imports %s", path, p)
			}
			if strings.HasPrefix(p, "hushfs/internal/proto/") && filepath.Base(path) != "protocol.go" {
				t.Errorf("%s imports the protocol package %s (only protocol.go chooses one)", path, p)
			}
		}
	}
	for _, dir := range []string{".", "../fusefs"} {
		files, err := filepath.Glob(filepath.Join(dir, "*.go"))
		if err != nil || len(files) == 0 {
			t.Fatalf("no Go files in %s: %v", dir, err)
		}
		for _, f := range files {
			if !strings.HasSuffix(f, "_test.go") {
				check(f)
			}
		}
	}
	if _, err := os.Stat("../../cmd/hushfs/mount.go"); err != nil {
		t.Fatal(err)
	}
	check("../../cmd/hushfs/mount.go")
}
