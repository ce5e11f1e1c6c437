package xdr

import (
	"bytes"
	"errors"
	"fmt"
	"math"
	"testing"
)

func TestRoundTrip(t *testing.T) {
	var b []byte
	b = AppendUint32(b, 7)
	b = AppendInt32(b, -2)
	b = AppendUint64(b, math.MaxUint64-1)
	b = AppendInt64(b, -3)
	b = AppendBool(b, true)
	b = AppendOpaque(b, []byte{1, 2, 3})
	b = AppendString(b, "h\xffé")
	b = AppendFixedOpaque(b, []byte{9, 9, 9, 9, 9})
	if len(b)%4 != 0 {
		t.Fatalf("encoding not 4-aligned: %d bytes", len(b))
	}
	d := NewDecoder(b)
	if d.Uint32() != 7 || d.Int32() != -2 || d.Uint64() != math.MaxUint64-1 || d.Int64() != -3 || !d.Bool() {
		t.Fatal("scalar mismatch")
	}
	if got := d.Opaque(3); !bytes.Equal(got, []byte{1, 2, 3}) {
		t.Fatalf("opaque = %v", got)
	}
	if got := d.String(16); got != "h\xffé" {
		t.Fatalf("string = %q (names are opaque bytes)", got)
	}
	if got := d.FixedOpaque(5); !bytes.Equal(got, []byte{9, 9, 9, 9, 9}) {
		t.Fatalf("fixed = %v", got)
	}
	if d.Err() != nil || d.Remaining() != 0 {
		t.Fatalf("err=%v remaining=%d", d.Err(), d.Remaining())
	}
}

func TestHostileLengthsDoNotAllocate(t *testing.T) {
	b := AppendUint32(nil, math.MaxUint32)
	d := NewDecoder(b)
	allocs := testing.AllocsPerRun(100, func() {
		d.Reset(b)
		_ = d.Opaque(math.MaxUint32)
	})
	if allocs != 0 {
		t.Fatalf("hostile length allocated %v times", allocs)
	}
	if !errors.Is(d.Err(), ErrShort) {
		t.Fatalf("err = %v, want ErrShort", d.Err())
	}
	d.Reset(b)
	d.Opaque(64)
	var le *LengthError
	if !errors.As(d.Err(), &le) {
		t.Fatalf("err = %v, want LengthError", d.Err())
	}
	d.Reset(AppendUint32(nil, 1<<30))
	if n := d.ArrayLen(math.MaxUint32, 4); n != 0 || d.Err() == nil {
		t.Fatalf("array of 2^30 accepted over 0 bytes: n=%d err=%v", n, d.Err())
	}
}

func TestStickyError(t *testing.T) {
	d := NewDecoder([]byte{0, 0, 0, 1, 0, 0})
	d.Uint32()
	d.Uint32()
	first := d.Err()
	if first == nil {
		t.Fatal("short read not reported")
	}
	if d.Uint64() != 0 || d.Opaque(10) != nil || d.Err() != first {
		t.Fatal("error not sticky")
	}
	d = NewDecoder(AppendUint32(nil, 2))
	d.Bool()
	if d.Err() == nil {
		t.Fatal("bool 2 accepted")
	}
}

func TestWrapErr(t *testing.T) {
	d := NewDecoder(nil)
	wrap := func(err error) error { return fmt.Errorf("element 3: %w", err) }
	d.WrapErr(wrap)
	if d.Err() != nil {
		t.Fatal("WrapErr made an error out of none")
	}
	d.Uint32()
	d.WrapErr(wrap)
	if !errors.Is(d.Err(), ErrShort) || d.Err().Error() != "element 3: "+ErrShort.Error() {
		t.Fatalf("err = %v", d.Err())
	}
}

func TestPaddingAndTruncation(t *testing.T) {
	b := AppendOpaque(nil, []byte{1})
	if len(b) != 8 {
		t.Fatalf("len %d, want 8", len(b))
	}
	d := NewDecoder(b[:6]) // padding missing
	if d.Opaque(8); d.Err() == nil {
		t.Fatal("missing padding accepted")
	}
}

func TestDecodeAllocsZero(t *testing.T) {
	var b []byte
	b = AppendUint32(b, 1)
	b = AppendOpaque(b, make([]byte, 64))
	b = AppendUint64(b, 5)
	d := NewDecoder(nil)
	allocs := testing.AllocsPerRun(100, func() {
		d.Reset(b)
		d.Uint32()
		d.Opaque(64)
		d.Uint64()
	})
	if allocs != 0 {
		t.Fatalf("decode allocated %v times", allocs)
	}
	buf := make([]byte, 0, 256)
	allocs = testing.AllocsPerRun(100, func() {
		o := AppendUint32(buf[:0], 1)
		o = AppendOpaque(o, b)
		_ = o
	})
	if allocs != 0 {
		t.Fatalf("encode into sized buffer allocated %v times", allocs)
	}
}

func FuzzDecoder(f *testing.F) {
	f.Add(AppendOpaque(AppendUint32(nil, 3), []byte("abc")))
	f.Add([]byte{0xff, 0xff, 0xff, 0xff})
	f.Fuzz(func(t *testing.T, in []byte) {
		d := NewDecoder(in)
		for d.Err() == nil && d.Remaining() > 0 {
			switch d.Uint32() % 4 {
			case 0:
				d.Opaque(1 << 20)
			case 1:
				d.Uint64()
			case 2:
				d.ArrayLen(1<<20, 4)
			case 3:
				d.Bool()
			}
		}
		if d.Offset() > len(in) {
			t.Fatalf("offset %d beyond input %d", d.Offset(), len(in))
		}
	})
}
