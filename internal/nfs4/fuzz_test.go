package nfs4

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"hushfs/internal/xdr"
)

// checkCodec is the property every fuzz target asserts: decoding arbitrary
// bytes never panics; a value that decodes re-encodes to as many bytes as
// it consumed, which decode to an equal value that encodes identically; and
// decoding into a value already used for that message (the decoders' caches
// and reused lists) gives the same value.
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
	if !deepEqual(v1, v2) {
		t.Fatalf("%T round trip changed the value:\n%+v\n%+v", v1, v1, v2)
	}
	if b2 := v2.Append(nil); !bytes.Equal(b1, b2) {
		t.Fatalf("%T encodings differ", v1)
	}
	d2.Reset(b1)
	v2.Decode(d2)
	if d2.Err() != nil || !deepEqual(v1, v2) {
		t.Fatalf("%T decoding again into the same value differs: %v", v1, d2.Err())
	}
}

func FuzzCompoundArgs(f *testing.F) {
	f.Fuzz(func(t *testing.T, data []byte) {
		checkCodec(t, func() codec { return new(CompoundArgs) }, data)
	})
}

func FuzzCompoundRes(f *testing.F) {
	f.Fuzz(func(t *testing.T, data []byte) {
		checkCodec(t, func() codec { return new(CompoundRes) }, data)
	})
}

func FuzzCBCompoundArgs(f *testing.F) {
	f.Fuzz(func(t *testing.T, data []byte) {
		checkCodec(t, func() codec { return new(CBCompoundArgs) }, data)
	})
}

func FuzzCBCompoundRes(f *testing.F) {
	f.Fuzz(func(t *testing.T, data []byte) {
		checkCodec(t, func() codec { return new(CBCompoundRes) }, data)
	})
}

func FuzzFattr(f *testing.F) {
	f.Fuzz(func(t *testing.T, data []byte) {
		checkCodec(t, func() codec { return new(Fattr) }, data)
	})
}

// seed is one file of a fuzz target's checked-in corpus.
type seed struct {
	target, name string
	data         []byte
}

// seeds returns the corpus: every sample in a one-operation message, all
// samples in one message per kind, every attribute sample, and the real
// messages of testdata/wire.
func seeds(t *testing.T) []seed {
	var out []seed
	for _, s := range samples() {
		data, _ := oracleMessage(s)
		target := map[[2]bool]string{{false, false}: "FuzzCompoundArgs", {false, true}: "FuzzCompoundRes",
			{true, false}: "FuzzCBCompoundArgs", {true, true}: "FuzzCBCompoundRes"}[[2]bool{s.cb, s.res}]
		out = append(out, seed{target, s.name, data})
		if g, ok := s.v.(*GetattrRes); ok && g.Status == OK {
			out = append(out, seed{"FuzzFattr", s.name, g.Attrs.Append(nil)})
		}
	}
	a, r, ca, cr := compoundOf(samples())
	out = append(out, seed{"FuzzCompoundArgs", "all", a.Append(nil)}, seed{"FuzzCompoundRes", "all", r.Append(nil)},
		seed{"FuzzCBCompoundArgs", "all", ca.Append(nil)}, seed{"FuzzCBCompoundRes", "all", cr.Append(nil)})
	for _, m := range wireMessages(t) {
		target := "FuzzCompoundArgs"
		if m.reply {
			target = "FuzzCompoundRes"
		}
		out = append(out, seed{target, fmt.Sprintf("wire-%03d", m.frame), m.body})
	}
	return out
}

// corpusFile is a seed in the fuzzing engine's corpus file format.
func corpusFile(data []byte) string {
	return fmt.Sprintf("go test fuzz v1\n[]byte(%q)\n", data)
}

// parseCorpusFile reads back what corpusFile writes.
func parseCorpusFile(s string) ([]byte, error) {
	lines := strings.Split(strings.TrimSuffix(s, "\n"), "\n")
	if len(lines) != 2 || lines[0] != "go test fuzz v1" {
		return nil, fmt.Errorf("not a corpus file")
	}
	q, ok := strings.CutPrefix(lines[1], "[]byte(")
	if !ok {
		return nil, fmt.Errorf("bad data line %q", lines[1])
	}
	u, err := strconv.Unquote(strings.TrimSuffix(q, ")"))
	return []byte(u), err
}

// TestFuzzCorpus checks the committed seed corpus: every seed has its file,
// with exactly the bytes it encodes to today, and decodes; no other file is
// there. With HUSHFS_WRITE_CORPUS=1 it (re)writes the files instead.
func TestFuzzCorpus(t *testing.T) {
	write := os.Getenv("HUSHFS_WRITE_CORPUS") == "1"
	targets := map[string]bool{}
	want := map[string]bool{}
	for _, s := range seeds(t) {
		targets[s.target] = true
		path := filepath.Join("testdata", "fuzz", s.target, s.name)
		want[path] = true
		content := corpusFile(s.data)
		if write {
			if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
				t.Fatal(err)
			}
			continue
		}
		got, err := os.ReadFile(path)
		if err != nil {
			t.Fatalf("seed missing (regenerate with HUSHFS_WRITE_CORPUS=1): %v", err)
		}
		if string(got) != content {
			t.Fatalf("%s: seed differs from what it encodes to today", path)
		}
		data, err := parseCorpusFile(string(got))
		if err != nil {
			t.Fatalf("%s: %v", path, err)
		}
		var v codec
		switch s.target {
		case "FuzzCompoundArgs":
			v = new(CompoundArgs)
		case "FuzzCompoundRes":
			v = new(CompoundRes)
		case "FuzzCBCompoundArgs":
			v = new(CBCompoundArgs)
		case "FuzzCBCompoundRes":
			v = new(CBCompoundRes)
		case "FuzzFattr":
			v = new(Fattr)
		}
		decodeAll(t, v, data)
	}
	for _, target := range []string{"FuzzCompoundArgs", "FuzzCompoundRes", "FuzzCBCompoundArgs", "FuzzCBCompoundRes", "FuzzFattr"} {
		if !targets[target] {
			t.Errorf("%s has no seeds", target)
		}
	}
	files, _ := filepath.Glob(filepath.Join("testdata", "fuzz", "*", "*"))
	for _, f := range files {
		if want[f] {
			continue
		}
		if write {
			os.Remove(f)
		} else {
			t.Errorf("%s: not a seed of today's samples (regenerate with HUSHFS_WRITE_CORPUS=1)", f)
		}
	}
}
