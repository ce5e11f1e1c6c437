package test

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"hushfs/test/harness"
)

// TestNFSv41AppendAfterOtherWriter: client B rewrites a file that client
// A read before (A's size of it is older), and B's close returns; A's
// open with O_APPEND then appends at B's end of file, never at the end A
// saw: close-to-open covers the size an append writes at.
//
// The kernel sends an O_APPEND write at the size it cached, which the
// open does not refresh: the append landed inside B's data (over NFSv3
// too), until the client placed it at the end it knows.
func TestNFSv41AppendAfterOtherWriter(t *testing.T) {
	requireMountTools(t)
	bin := harness.BuildHushfs(t)
	export := t.TempDir()
	s := harness.StartServe(t, export)
	_, dirA := serveV41(t, bin, s)
	_, dirB := serveV41(t, bin, s)
	want := []byte("0123456789")
	must(t, "create f", os.WriteFile(filepath.Join(dirB, "f"), want, 0o644))
	for i := 1; i <= 10; i++ {
		readBack(t, "A: read", filepath.Join(dirA, "f"), want)
		want = bytes.Repeat([]byte{byte('a' + i)}, 10+i*7)
		must(t, "B: rewrite", os.WriteFile(filepath.Join(dirB, "f"), want, 0o644))
		add := []byte(fmt.Sprintf("<A%d>", i))
		f, err := os.OpenFile(filepath.Join(dirA, "f"), os.O_WRONLY|os.O_APPEND, 0)
		must(t, "A: open to append", err)
		_, err = f.Write(add)
		must(t, "A: append", err)
		must(t, "A: close", f.Close())
		want = append(want, add...)
		got, err := os.ReadFile(filepath.Join(export, "f"))
		must(t, "read on the server", err)
		if !bytes.Equal(got, want) {
			t.Fatalf("round %d: the server's file is %q, want %q", i, got, want)
		}
	}
}

// TestAppendStream: one process appending thousands of records through
// O_APPEND descriptors (two, alternating) on one mount, over NFSv3 and
// NFSv4.1, with write-back sending them meanwhile: the file is exactly
// the records in order (the client places each append at the end it
// knows, its unsent and in-flight data included).
func TestAppendStream(t *testing.T) {
	requireMountTools(t)
	bin := harness.BuildHushfs(t)
	export := t.TempDir()
	s := harness.StartServe(t, export)
	_, v41 := serveV41(t, bin, s)
	v3 := t.TempDir()
	harness.MountServe(t, bin, s, v3, "")
	for _, dir := range []string{v3, v41} {
		p := filepath.Join(dir, "log")
		must(t, "create", os.WriteFile(p, nil, 0o644))
		var fds [2]*os.File
		for i := range fds {
			f, err := os.OpenFile(p, os.O_WRONLY|os.O_APPEND, 0)
			must(t, "open O_APPEND", err)
			defer f.Close()
			fds[i] = f
		}
		var want []byte
		for i := range 3000 {
			rec := []byte(fmt.Sprintf("record %d %s\n", i, bytes.Repeat([]byte{'x'}, i%97)))
			_, err := fds[i%2].Write(rec)
			must(t, "append", err)
			want = append(want, rec...)
		}
		for _, f := range fds {
			must(t, "close", f.Close())
		}
		got, err := os.ReadFile(filepath.Join(export, "log"))
		must(t, "read on the server", err)
		if !bytes.Equal(got, want) {
			t.Fatalf("%s: the server's log is %d bytes, want %d; first difference at %d", dir, len(got), len(want), firstDiff(got, want))
		}
		must(t, "remove", os.Remove(p))
	}
}
