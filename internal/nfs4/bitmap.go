package nfs4

import (
	"fmt"
	"math/bits"

	"hushfs/internal/xdr"
)

// MaxBitmapWords bounds a bitmap4: 8 words, bits 0–255. NFSv4.2 defines
// attributes up to 87; a longer bitmap is refused when decoded.
const MaxBitmapWords = 8

// Bitmap is bitmap4: a set of small numbers (attributes, notification
// types, operations) held without allocation. It remembers how many words
// it has, trailing zero words included, so that a decoded bitmap
// re-encodes byte for byte; Set grows it as needed.
type Bitmap struct {
	n uint8
	w [MaxBitmapWords]uint32
}

// NewBitmap returns the bitmap with the given bits set.
func NewBitmap(bitsSet ...int) Bitmap {
	var b Bitmap
	for _, i := range bitsSet {
		b.Set(i)
	}
	return b
}

// BitmapOf returns the bitmap of the given words, as they are on the wire.
// Words beyond MaxBitmapWords are dropped.
func BitmapOf(words ...uint32) Bitmap {
	var b Bitmap
	b.n = uint8(copy(b.w[:], words))
	return b
}

// Words returns the bitmap's words (aliasing b).
func (b *Bitmap) Words() []uint32 { return b.w[:b.n] }

// Has reports whether bit i is set.
func (b *Bitmap) Has(i int) bool {
	if i < 0 || i >= int(b.n)*32 {
		return false
	}
	return b.w[i/32]&(1<<(i%32)) != 0
}

// Set sets bit i, adding words as needed. It panics for bits a bitmap
// cannot hold: they are a programming error, never input.
func (b *Bitmap) Set(i int) {
	if i < 0 || i >= MaxBitmapWords*32 {
		panic(fmt.Sprintf("nfs4: bitmap bit %d out of range", i))
	}
	if w := uint8(i/32 + 1); w > b.n {
		b.n = w
	}
	b.w[i/32] |= 1 << (i % 32)
}

// Clear clears bit i; the number of words stays.
func (b *Bitmap) Clear(i int) {
	if i >= 0 && i < int(b.n)*32 {
		b.w[i/32] &^= 1 << (i % 32)
	}
}

// IsZero reports whether no bit is set.
func (b *Bitmap) IsZero() bool {
	for _, w := range b.w[:b.n] {
		if w != 0 {
			return false
		}
	}
	return true
}

// Count is the number of bits set.
func (b *Bitmap) Count() int {
	n := 0
	for _, w := range b.w[:b.n] {
		n += bits.OnesCount32(w)
	}
	return n
}

// Next returns the smallest bit set at or above i, or -1:
//
//	for a := m.Next(0); a >= 0; a = m.Next(a + 1) { ... }
func (b *Bitmap) Next(i int) int {
	if i < 0 {
		i = 0
	}
	for wi := i / 32; wi < int(b.n); wi++ {
		w := b.w[wi]
		if wi == i/32 {
			w &^= 1<<(i%32) - 1
		}
		if w != 0 {
			return wi*32 + bits.TrailingZeros32(w)
		}
	}
	return -1
}

// And returns the bits set in both, with b's number of words (a server's
// answer to a request keeps the request's shape).
func (b Bitmap) And(o Bitmap) Bitmap {
	for i := range b.w {
		b.w[i] &= o.w[i]
	}
	return b
}

// AndNot returns the bits of b not set in o, with b's number of words.
func (b Bitmap) AndNot(o Bitmap) Bitmap {
	for i := range b.w {
		b.w[i] &^= o.w[i]
	}
	return b
}

// Or returns the bits set in either, with the larger number of words.
func (b Bitmap) Or(o Bitmap) Bitmap {
	for i := range b.w {
		b.w[i] |= o.w[i]
	}
	b.n = max(b.n, o.n)
	return b
}

// Equal reports whether the same bits are set, whatever the number of words.
func (b *Bitmap) Equal(o *Bitmap) bool { return b.w == o.w }

// Trimmed returns b without trailing zero words: the shortest encoding.
func (b Bitmap) Trimmed() Bitmap {
	for b.n > 0 && b.w[b.n-1] == 0 {
		b.n--
	}
	return b
}

func (b Bitmap) String() string {
	s := "{"
	for a := b.Next(0); a >= 0; a = b.Next(a + 1) {
		if len(s) > 1 {
			s += ","
		}
		s += fmt.Sprint(a)
	}
	return s + "}"
}

// Append encodes the bitmap.
func (b Bitmap) Append(buf []byte) []byte {
	buf = xdr.AppendUint32(buf, uint32(b.n))
	for _, w := range b.w[:b.n] {
		buf = xdr.AppendUint32(buf, w)
	}
	return buf
}

// Decode decodes a bitmap of at most MaxBitmapWords words.
func (b *Bitmap) Decode(d *xdr.Decoder) {
	*b = Bitmap{}
	n := d.ArrayLen(MaxBitmapWords, 4)
	for i := 0; i < n; i++ {
		b.w[i] = d.Uint32()
	}
	if d.Err() == nil {
		b.n = uint8(n)
	}
}

// xdrSize is the encoded size of the bitmap.
func (b *Bitmap) xdrSize() int { return 4 + 4*int(b.n) }
