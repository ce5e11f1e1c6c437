// Package xdr implements the External Data Representation (RFC 4506) over
// byte slices, without reflection.
//
// Encoding is append-style: every Append* function appends the encoding of a
// value to a slice and returns the extended slice, so a whole message is built
// in one reusable buffer.
//
// Decoding uses a cursor (Decoder) with a sticky error: after the first
// failure every further read returns a zero value and Err reports the first
// failure. Callers decode a whole structure and check Err once. Variable
// length items are returned as sub-slices of the input (no copy, no
// allocation); every length is checked against both the bytes remaining and a
// caller-supplied maximum before it is used, so a hostile length such as
// 2^32-1 never causes an allocation.
package xdr

import (
	"encoding/binary"
	"errors"
	"fmt"
)

// ErrShort is returned when the input ends inside an item.
var ErrShort = errors.New("xdr: input too short")

// LengthError reports a variable-length item whose declared length exceeds
// the allowed maximum.
type LengthError struct {
	What string
	Len  uint32
	Max  uint32
}

func (e *LengthError) Error() string {
	return fmt.Sprintf("xdr: %s length %d exceeds maximum %d", e.What, e.Len, e.Max)
}

// pad returns the number of zero bytes that follow n bytes of opaque data.
func pad(n int) int { return (4 - n&3) & 3 }

// AppendUint32 appends an unsigned int.
func AppendUint32(b []byte, v uint32) []byte {
	return binary.BigEndian.AppendUint32(b, v)
}

// AppendInt32 appends a signed int.
func AppendInt32(b []byte, v int32) []byte { return AppendUint32(b, uint32(v)) }

// AppendUint64 appends an unsigned hyper.
func AppendUint64(b []byte, v uint64) []byte {
	return binary.BigEndian.AppendUint64(b, v)
}

// AppendInt64 appends a hyper.
func AppendInt64(b []byte, v int64) []byte { return AppendUint64(b, uint64(v)) }

// AppendBool appends a bool (an int of 0 or 1).
func AppendBool(b []byte, v bool) []byte {
	if v {
		return AppendUint32(b, 1)
	}
	return AppendUint32(b, 0)
}

var zeros [4]byte

// AppendFixedOpaque appends fixed-length opaque data: the bytes and their
// padding, with no length word.
func AppendFixedOpaque(b []byte, p []byte) []byte {
	b = append(b, p...)
	return append(b, zeros[:pad(len(p))]...)
}

// AppendOpaque appends variable-length opaque data: length, bytes, padding.
func AppendOpaque(b []byte, p []byte) []byte {
	b = AppendUint32(b, uint32(len(p)))
	return AppendFixedOpaque(b, p)
}

// AppendString appends a string with the encoding of variable-length opaque.
func AppendString(b []byte, s string) []byte {
	b = AppendUint32(b, uint32(len(s)))
	b = append(b, s...)
	return append(b, zeros[:pad(len(s))]...)
}

// Reserve appends a 4-byte placeholder and returns the slice and the offset of
// the placeholder, for a length or count that is only known later (PutUint32).
func Reserve(b []byte) ([]byte, int) {
	return append(b, 0, 0, 0, 0), len(b)
}

// PutUint32 overwrites the 4 bytes at off with v.
func PutUint32(b []byte, off int, v uint32) {
	binary.BigEndian.PutUint32(b[off:off+4], v)
}

// Decoder reads XDR items from a byte slice. The zero value decodes nothing;
// use NewDecoder or Reset.
type Decoder struct {
	buf []byte
	off int
	err error
}

// NewDecoder returns a decoder over b.
func NewDecoder(b []byte) *Decoder { return &Decoder{buf: b} }

// Reset points the decoder at b and clears its error, so one Decoder can be
// reused for many messages.
func (d *Decoder) Reset(b []byte) {
	d.buf, d.off, d.err = b, 0, nil
}

// Err returns the first error met, or nil.
func (d *Decoder) Err() error { return d.err }

// SetErr records err as the decoder's error unless one is already recorded.
// Decoders of composite types use it for semantic errors (a bad union
// discriminant, say) so that callers still check a single error.
func (d *Decoder) SetErr(err error) {
	if d.err == nil {
		d.err = err
	}
}

// WrapErr replaces the recorded error, if any, with wrap(err): a decoder
// of a composite type adds context (which element failed) to the first
// failure of its parts.
func (d *Decoder) WrapErr(wrap func(error) error) {
	if d.err != nil {
		d.err = wrap(d.err)
	}
}

// Offset is the number of bytes consumed so far.
func (d *Decoder) Offset() int { return d.off }

// Remaining is the number of bytes not yet consumed.
func (d *Decoder) Remaining() int { return len(d.buf) - d.off }

// Rest returns the unconsumed bytes without consuming them.
func (d *Decoder) Rest() []byte {
	if d.err != nil {
		return nil
	}
	return d.buf[d.off:]
}

// take consumes n bytes, or fails with ErrShort.
func (d *Decoder) take(n int) []byte {
	if d.err != nil {
		return nil
	}
	if n < 0 || n > len(d.buf)-d.off {
		d.err = ErrShort
		return nil
	}
	p := d.buf[d.off : d.off+n : d.off+n]
	d.off += n
	return p
}

// Uint32 reads an unsigned int.
func (d *Decoder) Uint32() uint32 {
	p := d.take(4)
	if p == nil {
		return 0
	}
	return binary.BigEndian.Uint32(p)
}

// Int32 reads a signed int.
func (d *Decoder) Int32() int32 { return int32(d.Uint32()) }

// Uint64 reads an unsigned hyper.
func (d *Decoder) Uint64() uint64 {
	p := d.take(8)
	if p == nil {
		return 0
	}
	return binary.BigEndian.Uint64(p)
}

// Int64 reads a hyper.
func (d *Decoder) Int64() int64 { return int64(d.Uint64()) }

// Bool reads a bool; any value other than 0 or 1 is an error.
func (d *Decoder) Bool() bool {
	v := d.Uint32()
	if v > 1 {
		d.SetErr(fmt.Errorf("xdr: bool value %d", v))
		return false
	}
	return v == 1
}

// FixedOpaque reads n bytes of opaque data and its padding. The result
// aliases the input.
func (d *Decoder) FixedOpaque(n int) []byte {
	p := d.take(n)
	if p == nil && d.err != nil {
		return nil
	}
	d.skipPad(n)
	if d.err != nil {
		return nil
	}
	return p
}

func (d *Decoder) skipPad(n int) {
	if k := pad(n); k > 0 {
		d.take(k)
	}
}

// Opaque reads variable-length opaque data of at most max bytes. The result
// aliases the input; copy it to keep it beyond the input's lifetime.
func (d *Decoder) Opaque(max uint32) []byte {
	n := d.Uint32()
	if d.err != nil {
		return nil
	}
	if n > max {
		d.err = &LengthError{What: "opaque", Len: n, Max: max}
		return nil
	}
	return d.FixedOpaque(int(n))
}

// String reads a string of at most max bytes. The bytes are opaque (no
// character-set check); the conversion copies them.
func (d *Decoder) String(max uint32) string {
	return string(d.Opaque(max))
}

// ArrayLen reads the count of a variable-length array and checks it against
// max and against the bytes remaining, given that every element takes at
// least minElem bytes on the wire. It returns 0 on error.
func (d *Decoder) ArrayLen(max uint32, minElem int) int {
	n := d.Uint32()
	if d.err != nil {
		return 0
	}
	if n > max {
		d.err = &LengthError{What: "array", Len: n, Max: max}
		return 0
	}
	if minElem > 0 && uint64(n)*uint64(minElem) > uint64(d.Remaining()) {
		d.err = ErrShort
		return 0
	}
	return int(n)
}
