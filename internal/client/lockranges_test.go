package client

import (
	"math"
	"reflect"
	"testing"

	"hushfs/internal/proto"
)

func TestLockRanges(t *testing.T) {
	const (
		R = proto.ReadLock
		W = proto.WriteLock
		E = math.MaxUint64
	)
	var r lockRanges
	r = r.set(0, 100, W)
	r = r.set(50, 60, R) // splits
	want := lockRanges{{0, 50, W}, {50, 60, R}, {60, 100, W}}
	if !reflect.DeepEqual(r, want) {
		t.Fatalf("after a read lock inside a write lock: %v, want %v", r, want)
	}
	r = r.set(50, 60, W) // merges back
	if want := (lockRanges{{0, 100, W}}); !reflect.DeepEqual(r, want) {
		t.Fatalf("after the write lock again: %v, want %v", r, want)
	}
	r = r.set(200, E, R)
	r = r.clear(10, 20)
	want = lockRanges{{0, 10, W}, {20, 100, W}, {200, E, R}}
	if !reflect.DeepEqual(r, want) {
		t.Fatalf("after an unlock inside: %v, want %v", r, want)
	}
	r = r.set(100, 200, W) // fills the gap and joins the write ranges
	want = lockRanges{{0, 10, W}, {20, 200, W}, {200, E, R}}
	if !reflect.DeepEqual(r, want) {
		t.Fatalf("after filling a gap: %v, want %v", r, want)
	}
	if r = r.clear(0, E); len(r) != 0 {
		t.Fatalf("after unlocking all: %v, want none", r)
	}
	a := lockRange{5, E, R}.args(nil, 9)
	if a.Offset != 5 || a.Length != 0 || a.Type != R || a.Owner != 9 {
		t.Errorf("args of a range to the end: %+v", a)
	}
	if s, e := rangeOf(&proto.LockArgs{Offset: 5, Length: 10}); s != 5 || e != 15 {
		t.Errorf("rangeOf: [%d, %d)", s, e)
	}
}
