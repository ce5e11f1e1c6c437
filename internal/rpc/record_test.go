package rpc

import (
	"bufio"
	"bytes"
	"encoding/binary"
	"errors"
	"io"
	"math/rand/v2"
	"runtime"
	"testing"
	"testing/iotest"
)

// fragment returns the record mark and payload of one fragment.
func fragment(p []byte, last bool) []byte {
	mark := uint32(len(p))
	if last {
		mark |= 1 << 31
	}
	return append(binary.BigEndian.AppendUint32(nil, mark), p...)
}

// readers yields the ways a stream can reach ReadRecord: whole, a byte at a
// time, and through a bufio.Reader (which takes the no-copy mark path).
func readers(data []byte) map[string]func() io.Reader {
	return map[string]func() io.Reader{
		"bytes":   func() io.Reader { return bytes.NewReader(data) },
		"onebyte": func() io.Reader { return iotest.OneByteReader(bytes.NewReader(data)) },
		"bufio":   func() io.Reader { return bufio.NewReaderSize(bytes.NewReader(data), 16) },
	}
}

func TestRecordFragmentsReassemble(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	var stream, want []byte
	var records [][]byte
	for range 20 {
		var rec []byte
		nfrag := 1 + rng.IntN(6)
		for i := range nfrag {
			p := make([]byte, rng.IntN(300)) // includes empty fragments
			for j := range p {
				p[j] = byte(rng.Uint32())
			}
			stream = append(stream, fragment(p, i == nfrag-1)...)
			rec = append(rec, p...)
		}
		records = append(records, rec)
		want = append(want, rec...)
	}
	for name, mk := range readers(stream) {
		t.Run(name, func(t *testing.T) {
			r := mk()
			buf := make([]byte, 0, 7) // too small: must grow
			for i, wantRec := range records {
				got, err := ReadRecord(r, buf, 4096)
				if err != nil {
					t.Fatalf("record %d: %v", i, err)
				}
				if !bytes.Equal(got, wantRec) {
					t.Fatalf("record %d: got %d bytes, want %d", i, len(got), len(wantRec))
				}
				buf = got
			}
			if _, err := ReadRecord(r, buf, 4096); err != io.EOF {
				t.Fatalf("after last record: err = %v, want io.EOF", err)
			}
		})
	}
}

func TestRecordMaxSize(t *testing.T) {
	const max = 100
	exact := fragment(make([]byte, max), true)
	over := fragment(make([]byte, max+1), true)
	split := append(fragment(make([]byte, 60), false), fragment(make([]byte, 41), true)...)
	splitOK := append(fragment(make([]byte, 60), false), fragment(make([]byte, 40), true)...)
	for name, tc := range map[string]struct {
		in   []byte
		fail bool
	}{"exact": {exact, false}, "over": {over, true}, "split-over": {split, true}, "split-exact": {splitOK, false}} {
		for rname, mk := range readers(tc.in) {
			got, err := ReadRecord(mk(), nil, max)
			if tc.fail {
				if !errors.Is(err, ErrRecordTooLarge) {
					t.Errorf("%s/%s: err = %v, want ErrRecordTooLarge", name, rname, err)
				}
			} else if err != nil || len(got) != max {
				t.Errorf("%s/%s: %d bytes, err %v; want %d bytes", name, rname, len(got), err, max)
			}
			if len(got) > max {
				t.Errorf("%s/%s: returned %d bytes, over max", name, rname, len(got))
			}
		}
	}
}

// A 2 GiB fragment header must be refused from the header alone.
func TestRecordHugeFragmentDoesNotAllocate(t *testing.T) {
	hdr := binary.BigEndian.AppendUint32(nil, 1<<31|(1<<31-1))
	buf := make([]byte, 0, 64)
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	for range 100 {
		_, err := ReadRecord(bytes.NewReader(hdr), buf, DefaultMaxRecord)
		if !errors.Is(err, ErrRecordTooLarge) {
			t.Fatalf("err = %v, want ErrRecordTooLarge", err)
		}
	}
	runtime.ReadMemStats(&after)
	if grew := after.TotalAlloc - before.TotalAlloc; grew > 256<<10 {
		t.Fatalf("100 refused 2 GiB headers allocated %d bytes", grew)
	}
	r := bytes.NewReader(hdr)
	allocs := testing.AllocsPerRun(50, func() {
		r.Reset(hdr)
		ReadRecord(r, buf, DefaultMaxRecord)
	})
	if allocs > 8 { // formatting the error, nothing sized by the header
		t.Fatalf("refusing a 2 GiB header took %v allocations", allocs)
	}
}

// A peer that declares a large fragment and sends little must not cost the
// declared size in memory.
func TestRecordGrowsWithData(t *testing.T) {
	in := append(binary.BigEndian.AppendUint32(nil, 1<<31|2<<20), make([]byte, 1000)...)
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	_, err := ReadRecord(bytes.NewReader(in), nil, DefaultMaxRecord)
	runtime.ReadMemStats(&after)
	if !errors.Is(err, io.ErrUnexpectedEOF) {
		t.Fatalf("err = %v, want io.ErrUnexpectedEOF", err)
	}
	if grew := after.TotalAlloc - before.TotalAlloc; grew > 512<<10 {
		t.Fatalf("1000 bytes of a declared 2 MiB fragment allocated %d bytes", grew)
	}
}

func TestRecordTruncated(t *testing.T) {
	full := append(fragment([]byte("abcdefgh"), false), fragment([]byte("ijkl"), true)...)
	for n := 1; n < len(full); n++ {
		for rname, mk := range readers(full[:n]) {
			_, err := ReadRecord(mk(), nil, 1024)
			if !errors.Is(err, io.ErrUnexpectedEOF) {
				t.Errorf("cut at %d (%s): err = %v, want io.ErrUnexpectedEOF", n, rname, err)
			}
		}
	}
	if _, err := ReadRecord(bytes.NewReader(nil), nil, 1024); err != io.EOF {
		t.Errorf("empty stream: err = %v, want io.EOF", err)
	}
}

func TestRecordEmptyFragmentsBounded(t *testing.T) {
	var in []byte
	for range 10000 {
		in = append(in, fragment(nil, false)...)
	}
	_, err := ReadRecord(bytes.NewReader(in), nil, 1024)
	if err == nil || errors.Is(err, io.ErrUnexpectedEOF) {
		t.Fatalf("10000 empty fragments: err = %v, want a refusal", err)
	}
	// A few empty fragments are legal.
	ok := append(append(fragment(nil, false), fragment(nil, false)...), fragment([]byte("x"), true)...)
	if got, err := ReadRecord(bytes.NewReader(ok), nil, 1024); err != nil || string(got) != "x" {
		t.Fatalf("got %q, %v", got, err)
	}
}

func TestBeginFinishRecord(t *testing.T) {
	b := []byte("prefix")
	b, start := BeginRecord(b)
	b = append(b, "hello, world"...)
	FinishRecord(b, start)
	if string(b[:6]) != "prefix" {
		t.Fatal("prefix clobbered")
	}
	got, err := ReadRecord(bytes.NewReader(b[6:]), nil, 100)
	if err != nil || string(got) != "hello, world" {
		t.Fatalf("got %q, %v", got, err)
	}
	if mark := binary.BigEndian.Uint32(b[6:]); mark != 1<<31|12 {
		t.Fatalf("mark %#x", mark)
	}
}

// refRecord parses the first record of in independently: the bytes of
// its fragments, and whether in holds a complete, acceptable record.
func refRecord(in []byte, max int) (rec []byte, complete, tooLarge, tooManyEmpty bool) {
	empty := 0
	for {
		if len(in) < 4 {
			return rec, false, false, false
		}
		mark := binary.BigEndian.Uint32(in)
		n := int(mark & 0x7fffffff)
		in = in[4:]
		if len(rec)+n > max {
			return rec, false, true, false
		}
		if n == 0 && mark>>31 == 0 {
			empty++
			if empty > maxEmptyFragments {
				return rec, false, false, true
			}
		}
		if len(in) < n {
			return rec, false, false, false
		}
		rec = append(rec, in[:n]...)
		in = in[n:]
		if mark>>31 == 1 {
			return rec, true, false, false
		}
	}
}

func FuzzReadRecord(f *testing.F) {
	f.Add(fragment([]byte("hello"), true), uint16(64))
	f.Add(append(fragment([]byte("ab"), false), fragment([]byte("cd"), true)...), uint16(4))
	f.Add(binary.BigEndian.AppendUint32(nil, 0xffffffff), uint16(1024))
	f.Fuzz(func(t *testing.T, in []byte, max16 uint16) {
		max := int(max16)
		want, complete, tooLarge, tooManyEmpty := refRecord(in, max)
		for rname, mk := range readers(in) {
			got, err := ReadRecord(mk(), nil, max)
			if len(got) > max {
				t.Fatalf("%s: %d bytes returned, max %d", rname, len(got), max)
			}
			switch {
			case complete:
				if err != nil || !bytes.Equal(got, want) {
					t.Fatalf("%s: got %x, %v; want %x", rname, got, err, want)
				}
			case tooLarge:
				if !errors.Is(err, ErrRecordTooLarge) {
					t.Fatalf("%s: err = %v, want ErrRecordTooLarge", rname, err)
				}
			case tooManyEmpty:
				if err == nil || errors.Is(err, ErrRecordTooLarge) || errors.Is(err, io.ErrUnexpectedEOF) {
					t.Fatalf("%s: err = %v, want the empty-fragment refusal", rname, err)
				}
			case len(in) == 0:
				if err != io.EOF {
					t.Fatalf("%s: err = %v, want io.EOF", rname, err)
				}
			default:
				if !errors.Is(err, io.ErrUnexpectedEOF) {
					t.Fatalf("%s: err = %v, want io.ErrUnexpectedEOF", rname, err)
				}
			}
		}
	})
}
