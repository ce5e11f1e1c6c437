package rpc

import (
	"bufio"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"slices"
)

// DefaultMaxRecord bounds a record: a 1 MiB READ or WRITE payload plus
// headers fits, with margin.
const DefaultMaxRecord = 2<<20 + 64<<10

// ErrRecordTooLarge is returned when a record's fragments add up to more than
// the allowed maximum.
var ErrRecordTooLarge = errors.New("rpc: record too large")

// maxEmptyFragments bounds the zero-length non-final fragments accepted in one
// record. Non-empty fragments are bounded by the record size limit, but empty
// ones make no progress, so without this cap a peer could keep a reader busy
// forever inside a single record.
const maxEmptyFragments = 64

// lastFragment is the record mark bit flagging the final fragment.
const lastFragment = 1 << 31

// growChunk is how much buffer ReadRecord adds at a time beyond what the
// caller supplied: memory then follows the bytes actually received rather
// than what a peer merely declares in a fragment header.
const growChunk = 64 << 10

// ReadRecord reads one record, reassembling any number of fragments, appends
// it to buf[:0] and returns it. A record whose size exceeds max fails with
// ErrRecordTooLarge before any memory is allocated for it. At a clean end of
// stream (no byte of a new record read) the error is io.EOF; a stream ending
// inside a record gives io.ErrUnexpectedEOF.
func ReadRecord(r io.Reader, buf []byte, max int) ([]byte, error) {
	return readRecord(r, buf, max, 0)
}

// readRecord is ReadRecord with a policy for growth: a record up to eager
// bytes is allocated at once from its fragment header; beyond that the buffer
// grows in chunks as data arrives. Clients trust their server's lengths
// (bounded by max) and read eagerly; servers pass 0.
func readRecord(r io.Reader, buf []byte, max, eager int) ([]byte, error) {
	buf = buf[:0]
	empty := 0
	for first := true; ; first = false {
		mark, err := readMark(r, buf)
		if err != nil {
			if errors.Is(err, io.EOF) {
				if first {
					return buf, io.EOF
				}
				err = io.ErrUnexpectedEOF
			}
			return buf, fmt.Errorf("rpc: reading record mark: %w", err)
		}
		n := int(mark &^ lastFragment)
		if n > max-len(buf) {
			return buf, fmt.Errorf("%w: fragment of %d bytes after %d exceeds %d",
				ErrRecordTooLarge, n, len(buf), max)
		}
		if n == 0 && mark&lastFragment == 0 {
			if empty++; empty > maxEmptyFragments {
				return buf, fmt.Errorf("rpc: more than %d empty fragments in a record", maxEmptyFragments)
			}
		}
		for n > 0 {
			if cap(buf) == len(buf) {
				want := n
				if len(buf)+n > eager {
					want = min(n, growChunk+len(buf))
				}
				buf = slices.Grow(buf, want)
			}
			k := min(n, cap(buf)-len(buf))
			m, err := io.ReadFull(r, buf[len(buf):len(buf)+k])
			buf = buf[:len(buf)+m]
			n -= m
			if err != nil {
				if errors.Is(err, io.EOF) {
					err = io.ErrUnexpectedEOF
				}
				return buf, fmt.Errorf("rpc: reading record fragment: %w", err)
			}
		}
		if mark&lastFragment != 0 {
			return buf, nil
		}
	}
}

// readMark reads a 4-byte record mark without allocating: from a
// bufio.Reader's buffer when possible, else through spare capacity of buf.
func readMark(r io.Reader, buf []byte) (uint32, error) {
	if br, ok := r.(*bufio.Reader); ok {
		p, err := br.Peek(4)
		if err != nil {
			if len(p) > 0 && errors.Is(err, io.EOF) {
				err = io.ErrUnexpectedEOF
			}
			return 0, err
		}
		v := binary.BigEndian.Uint32(p)
		_, _ = br.Discard(4)
		return v, nil
	}
	var h []byte
	if cap(buf)-len(buf) >= 4 {
		h = buf[len(buf) : len(buf)+4]
	} else {
		h = make([]byte, 4)
	}
	if _, err := io.ReadFull(r, h); err != nil {
		return 0, err
	}
	return binary.BigEndian.Uint32(h), nil
}

// BeginRecord appends a 4-byte placeholder for a record mark and returns the
// extended slice and the placeholder's offset, for FinishRecord.
func BeginRecord(b []byte) (out []byte, start int) {
	return append(b, 0, 0, 0, 0), len(b)
}

// FinishRecord fills in the record mark at start as a single, last fragment
// covering b[start+4:]. A message is thus built in one buffer and sent with a
// single Write.
func FinishRecord(b []byte, start int) {
	binary.BigEndian.PutUint32(b[start:start+4], lastFragment|uint32(len(b)-start-4))
}
