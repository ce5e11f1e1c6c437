package client

import (
	"bytes"
	"math/rand"
	"testing"
)

// TestExtentsAgainstModel checks insert/overlay/truncate against a flat
// byte-slice model with random writes.
func TestExtentsAgainstModel(t *testing.T) {
	r := rand.New(rand.NewSource(1))
	const size = 4096
	for round := 0; round < 200; round++ {
		var l extents
		model := make([]byte, size)
		written := make([]bool, size)
		for k := 0; k < 30; k++ {
			off := r.Intn(size - 1)
			n := 1 + r.Intn(min(300, size-off))
			p := make([]byte, n)
			r.Read(p)
			l = l.insert(uint64(off), p)
			copy(model[off:], p)
			for i := off; i < off+n; i++ {
				written[i] = true
			}
			if r.Intn(10) == 0 {
				cut := r.Intn(size)
				l = l.truncate(uint64(cut))
				for i := cut; i < size; i++ {
					written[i], model[i] = false, 0
				}
			}
		}
		for i := 1; i < len(l); i++ {
			if l[i-1].end() >= l[i].off {
				t.Fatalf("round %d: extents %d and %d overlap or touch", round, i-1, i)
			}
		}
		got := make([]byte, size)
		l.overlay(0, got)
		var want []byte
		for i := range model {
			if written[i] {
				want = append(want, model[i])
			} else {
				want = append(want, 0)
			}
		}
		if !bytes.Equal(got, want) {
			t.Fatalf("round %d: overlay differs from model", round)
		}
		var n uint64
		for i := range written {
			if written[i] {
				n++
			}
		}
		if l.bytes() != n {
			t.Fatalf("round %d: bytes %d, model %d", round, l.bytes(), n)
		}
		for _, c := range l.chunks(100) {
			if len(c.data) > 100 || !bytes.Equal(c.data, model[c.off:c.end()]) {
				t.Fatalf("round %d: chunk at %d wrong", round, c.off)
			}
		}
	}
}

// TestInsertSharedNeverWritesBuffers checks insertShared against a model,
// and that no buffer handed to it (which may be shared with unstable data
// kept for a resend) is ever changed afterwards.
func TestInsertSharedNeverWritesBuffers(t *testing.T) {
	r := rand.New(rand.NewSource(2))
	const size = 4096
	for round := 0; round < 200; round++ {
		var l extents
		model := make([]byte, size)
		written := make([]bool, size)
		type given struct{ buf, orig []byte }
		var gave []given
		for k := 0; k < 30; k++ {
			off := r.Intn(size - 1)
			n := 1 + r.Intn(min(300, size-off))
			// A sub-slice with spare capacity, as chunks of a larger
			// buffer are: appending to it would overwrite its neighbour.
			big := make([]byte, n+64)
			r.Read(big)
			p := big[:n]
			gave = append(gave, given{big, bytes.Clone(big)})
			l = l.insertShared(uint64(off), p)
			copy(model[off:], p)
			for i := off; i < off+n; i++ {
				written[i] = true
			}
		}
		for i := 1; i < len(l); i++ {
			if l[i-1].end() > l[i].off {
				t.Fatalf("round %d: extents %d and %d overlap", round, i-1, i)
			}
		}
		for i, g := range gave {
			if !bytes.Equal(g.buf, g.orig) {
				t.Fatalf("round %d: buffer %d was written to", round, i)
			}
		}
		got := make([]byte, size)
		l.overlay(0, got)
		for i := range model {
			if !written[i] {
				model[i] = 0
			}
		}
		if !bytes.Equal(got, model) {
			t.Fatalf("round %d: overlay differs from model", round)
		}
	}
}

// TestTrimRightSizes: trim copies a buffer whose spare capacity is large
// into a right-sized one with the same bytes, and leaves a nearly full one.
func TestTrimRightSizes(t *testing.T) {
	big := make([]byte, 100<<10, 1<<20)
	for i := range big {
		big[i] = byte(i * 7)
	}
	full := make([]byte, 64<<10, 65<<10)
	l := extents{{off: 0, data: big}, {off: 1 << 20, data: full}}
	l.trim()
	if c := cap(l[0].data); c > 104<<10 {
		t.Errorf("100 KiB of data in a 1 MiB buffer: capacity %d after trim", c)
	}
	if !bytes.Equal(l[0].data, big) {
		t.Error("trim changed the bytes")
	}
	if &l[1].data[0] != &full[0] {
		t.Error("a buffer with little spare capacity was copied")
	}
}
