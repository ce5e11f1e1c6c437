package test

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"hushfs/internal/proto"
	"hushfs/test/harness"
)

// TestNFSv41LookupPath: a path's LOOKUPs in one COMPOUND (proto.PathWalker)
// against ganesha: the same handles and attributes as a Lookup per name,
// each result with its directory's attributes, the results ending at the
// first failure, and a path longer than one COMPOUND holds walked in as
// few as the session allows.
func TestNFSv41LookupPath(t *testing.T) {
	g := harness.StartGanesha(t, harness.GaneshaOptions{NFSv4: true})
	var seen v41calls
	srv, exp := mountV41(t, g, &seen)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	c := &proto.Cred{}
	deep := make([]string, 40)
	for i := range deep {
		deep[i] = string(rune('a' + i%26))
	}
	must(t, "mkdir on the server", os.MkdirAll(filepath.Join(append([]string{g.ExportDir}, deep...)...), 0o755))
	seen.take()

	got, err := srv.LookupPath(ctx, c, exp.Root, deep[:4])
	if err != nil {
		t.Fatal(err)
	}
	if calls := seen.take(); len(calls) != 1 {
		t.Errorf("a path of 4 names: %d COMPOUNDs %q, want 1", len(calls), calls)
	}
	if len(got) != 4 {
		t.Fatalf("%d results for 4 names", len(got))
	}
	dir := exp.Root
	for i, r := range got {
		one, err := srv.Lookup(ctx, c, dir, deep[i])
		okStatus(t, "lookup "+deep[i], err, one.Status)
		if r.Status != nil || !bytes.Equal(r.FH, one.FH) || r.Attr.Attr.Fileid != one.Attr.Attr.Fileid ||
			r.DirAttr.Attr.Fileid != one.DirAttr.Attr.Fileid {
			t.Errorf("%s: walked %v %x (file %d, dir %d), looked up %x (file %d, dir %d)", deep[i], r.Status, r.FH,
				r.Attr.Attr.Fileid, r.DirAttr.Attr.Fileid, one.FH, one.Attr.Attr.Fileid, one.DirAttr.Attr.Fileid)
		}
		dir = one.FH
	}
	seen.take()

	got, err = srv.LookupPath(ctx, c, exp.Root, []string{"a", "nothing", "c"})
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 2 || got[0].Status != nil || !isErrno(got[1].Status, syscall.ENOENT) {
		t.Errorf("a, nothing, c: %d results %+v, want a and ENOENT", len(got), got)
	}

	seen.take()
	got, err = srv.LookupPath(ctx, c, exp.Root, deep)
	if err != nil {
		t.Fatal(err)
	}
	calls := seen.take()
	t.Logf("a path of %d names: %d COMPOUNDs", len(deep), len(calls))
	if len(got) != len(deep) || got[len(got)-1].Status != nil || got[len(got)-1].Attr.Attr.Type != proto.TypeDir {
		t.Errorf("the path of %d names: %d results, the last %v", len(deep), len(got), got[len(got)-1].Status)
	}
	if len(calls) > 3 {
		t.Errorf("the path of %d names took %d COMPOUNDs: %s", len(deep), len(calls), strings.Join(calls, " "))
	}
}

func isErrno(err error, e syscall.Errno) bool {
	pe, ok := err.(proto.Error)
	return ok && pe.Errno == e
}
