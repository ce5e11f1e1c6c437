package nfs3

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"strconv"
	"strings"
	"testing"

	"hushfs/internal/xdr"
)

// checkCodec is the property every fuzz target asserts: decoding arbitrary
// bytes never panics, and a value that decodes re-encodes to as many bytes
// as it consumed, which decode to an equal value that encodes identically.
func checkCodec(t *testing.T, zero func() codec, data []byte) {
	v1 := zero()
	d := xdr.NewDecoder(data)
	v1.Decode(d)
	if d.Err() != nil {
		return
	}
	b1 := v1.Append(nil)
	if len(b1) != d.Offset() {
		t.Fatalf("%T consumed %d bytes but re-encodes to %d", v1, d.Offset(), len(b1))
	}
	v2 := zero()
	d2 := xdr.NewDecoder(b1)
	v2.Decode(d2)
	if d2.Err() != nil || d2.Remaining() != 0 {
		t.Fatalf("%T re-encoding does not decode: err %v, %d bytes left", v1, d2.Err(), d2.Remaining())
	}
	if !reflect.DeepEqual(v1, v2) {
		t.Fatalf("%T round trip changed the value:\n%+v\n%+v", v1, v1, v2)
	}
	if b2 := v2.Append(nil); !bytes.Equal(b1, b2) {
		t.Fatalf("%T encodings differ", v1)
	}
}

func fuzzArgs(f *testing.F, proc uint32) {
	f.Fuzz(func(t *testing.T, data []byte) {
		checkCodec(t, func() codec { return argsFor(proc) }, data)
	})
}

func FuzzGetattrArgs(f *testing.F)     { fuzzArgs(f, ProcGetattr) }
func FuzzSetattrArgs(f *testing.F)     { fuzzArgs(f, ProcSetattr) }
func FuzzLookupArgs(f *testing.F)      { fuzzArgs(f, ProcLookup) }
func FuzzAccessArgs(f *testing.F)      { fuzzArgs(f, ProcAccess) }
func FuzzReadlinkArgs(f *testing.F)    { fuzzArgs(f, ProcReadlink) }
func FuzzReadArgs(f *testing.F)        { fuzzArgs(f, ProcRead) }
func FuzzWriteArgs(f *testing.F)       { fuzzArgs(f, ProcWrite) }
func FuzzCreateArgs(f *testing.F)      { fuzzArgs(f, ProcCreate) }
func FuzzMkdirArgs(f *testing.F)       { fuzzArgs(f, ProcMkdir) }
func FuzzSymlinkArgs(f *testing.F)     { fuzzArgs(f, ProcSymlink) }
func FuzzMknodArgs(f *testing.F)       { fuzzArgs(f, ProcMknod) }
func FuzzRemoveArgs(f *testing.F)      { fuzzArgs(f, ProcRemove) }
func FuzzRmdirArgs(f *testing.F)       { fuzzArgs(f, ProcRmdir) }
func FuzzRenameArgs(f *testing.F)      { fuzzArgs(f, ProcRename) }
func FuzzLinkArgs(f *testing.F)        { fuzzArgs(f, ProcLink) }
func FuzzReaddirArgs(f *testing.F)     { fuzzArgs(f, ProcReaddir) }
func FuzzReaddirplusArgs(f *testing.F) { fuzzArgs(f, ProcReaddirplus) }
func FuzzFsstatArgs(f *testing.F)      { fuzzArgs(f, ProcFsstat) }
func FuzzFsinfoArgs(f *testing.F)      { fuzzArgs(f, ProcFsinfo) }
func FuzzPathconfArgs(f *testing.F)    { fuzzArgs(f, ProcPathconf) }
func FuzzCommitArgs(f *testing.F)      { fuzzArgs(f, ProcCommit) }

// FuzzMountArgs covers MNT and UMNT arguments; proc picks the procedure.
func FuzzMountArgs(f *testing.F) {
	f.Fuzz(func(t *testing.T, proc byte, data []byte) {
		if v := mountArgsFor(uint32(proc)); v != nil {
			checkCodec(t, func() codec { return newLike(v) }, data)
		}
	})
}

// FuzzRes covers the results a client decodes: proc < NumProcs picks an NFS
// procedure, 100+p the MOUNT procedure p.
func FuzzRes(f *testing.F) {
	f.Fuzz(func(t *testing.T, proc byte, data []byte) {
		var v codec
		if proc >= 100 {
			v = mountResFor(uint32(proc) - 100)
		} else {
			v = resFor(uint32(proc))
		}
		if v != nil {
			checkCodec(t, func() codec { return newLike(v) }, data)
		}
	})
}

// fuzzTarget names the fuzz target whose corpus holds sample s, and the
// proc byte it takes first (-1 for targets that take only data).
func fuzzTarget(s sample) (string, int) {
	switch {
	case s.res && s.mount:
		return "FuzzRes", 100 + int(s.proc)
	case s.res:
		return "FuzzRes", int(s.proc)
	case s.mount:
		return "FuzzMountArgs", int(s.proc)
	}
	return "Fuzz" + strings.ToUpper(ProcName(s.proc)[:1]) + strings.ToLower(ProcName(s.proc)[1:]) + "Args", -1
}

// corpusFile is a seed in the fuzzing engine's corpus file format.
func corpusFile(proc int, data []byte) string {
	var b strings.Builder
	b.WriteString("go test fuzz v1\n")
	if proc >= 0 {
		fmt.Fprintf(&b, "byte(%q)\n", byte(proc))
	}
	fmt.Fprintf(&b, "[]byte(%q)\n", data)
	return b.String()
}

// parseCorpusFile reads back what corpusFile writes.
func parseCorpusFile(s string) (proc int, data []byte, err error) {
	lines := strings.Split(strings.TrimSuffix(s, "\n"), "\n")
	if len(lines) < 2 || lines[0] != "go test fuzz v1" {
		return 0, nil, fmt.Errorf("not a corpus file")
	}
	proc = -1
	if len(lines) == 3 {
		q, ok := strings.CutPrefix(lines[1], "byte(")
		if !ok {
			return 0, nil, fmt.Errorf("bad byte line %q", lines[1])
		}
		r, _, _, err := strconv.UnquoteChar(strings.TrimSuffix(strings.TrimPrefix(q, "'"), "')"), '\'')
		if err != nil {
			return 0, nil, err
		}
		proc = int(r)
		lines = lines[1:]
	}
	q, ok := strings.CutPrefix(lines[1], "[]byte(")
	if !ok {
		return 0, nil, fmt.Errorf("bad data line %q", lines[1])
	}
	u, err := strconv.Unquote(strings.TrimSuffix(q, ")"))
	return proc, []byte(u), err
}

// TestFuzzCorpus checks the committed seed corpus: every sample has its seed
// file, with exactly the bytes the sample encodes to today. With
// HUSHFS_WRITE_CORPUS=1 it (re)writes the files instead.
func TestFuzzCorpus(t *testing.T) {
	write := os.Getenv("HUSHFS_WRITE_CORPUS") == "1"
	targets := map[string]bool{}
	for _, n := range []names{{ascii: false}, {ascii: true}} {
		for _, s := range samples(n) {
			target, proc := fuzzTarget(s)
			targets[target] = true
			path := filepath.Join("testdata", "fuzz", target, fmt.Sprintf("%s-ascii-%v", s.name, n.ascii))
			want := corpusFile(proc, s.v.Append(nil))
			if write {
				if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
					t.Fatal(err)
				}
				if err := os.WriteFile(path, []byte(want), 0o644); err != nil {
					t.Fatal(err)
				}
				continue
			}
			got, err := os.ReadFile(path)
			if err != nil {
				t.Fatalf("seed missing (regenerate with HUSHFS_WRITE_CORPUS=1): %v", err)
			}
			if string(got) != want {
				t.Fatalf("%s: seed differs from the sample's encoding", path)
			}
			p, data, err := parseCorpusFile(string(got))
			if err != nil || p != proc {
				t.Fatalf("%s: unreadable seed: proc %d err %v", path, p, err)
			}
			v := newLike(s.v)
			decodeAll(t, v, data)
		}
	}
	// Every fuzz target has seeds.
	for p := uint32(1); p < NumProcs; p++ {
		target, _ := fuzzTarget(sample{proc: p})
		if !targets[target] {
			t.Errorf("%s has no seeds", target)
		}
	}
}
