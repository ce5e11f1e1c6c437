package client

import (
	"slices"
	"sort"
)

// extent is a run of file data at an offset.
type extent struct {
	off  uint64
	data []byte
}

func (e *extent) end() uint64 { return e.off + uint64(len(e.data)) }

// extents is a sorted list of non-overlapping extents; insert also keeps
// them non-adjacent, insertShared does not.
type extents []extent

// insert copies p at off into the list, merging it with every extent it
// overlaps or touches; the new bytes win where they overlap old ones.
func (l extents) insert(off uint64, p []byte) extents {
	end := off + uint64(len(p))
	// Fast path: appending to the last extent (sequential writes).
	if n := len(l); n > 0 && l[n-1].end() == off {
		l[n-1].data = append(l[n-1].data, p...)
		return l
	}
	i := sort.Search(len(l), func(i int) bool { return l[i].end() >= off })
	// Overwrite inside one extent: the list owns its buffers, copy in place.
	if i < len(l) && l[i].off <= off && end <= l[i].end() {
		copy(l[i].data[off-l[i].off:], p)
		return l
	}
	j := i
	for j < len(l) && l[j].off <= end {
		j++
	}
	if i == j { // touches nothing: insert a copy
		l = append(l, extent{})
		copy(l[i+1:], l[i:])
		l[i] = extent{off: off, data: append([]byte(nil), p...)}
		return l
	}
	lo, hi := min(off, l[i].off), max(end, l[j-1].end())
	buf := make([]byte, hi-lo)
	for k := i; k < j; k++ {
		copy(buf[l[k].off-lo:], l[k].data)
	}
	copy(buf[off-lo:], p)
	l[i] = extent{off: lo, data: buf}
	return append(l[:i+1], l[j:]...)
}

// insertShared adds p at off to a list whose buffers are shared (clean data
// keeps the very buffers the unstable data holds for a resend) and takes p
// itself, not a copy: it never writes into a buffer already in the list or
// in p. Where p overlaps extents, they and p are replaced by one new
// buffer, p's bytes winning; extents that only touch are left apart.
func (l extents) insertShared(off uint64, p []byte) extents {
	end := off + uint64(len(p))
	i := sort.Search(len(l), func(i int) bool { return l[i].end() > off })
	j := i
	for j < len(l) && l[j].off < end {
		j++
	}
	if i == j {
		return slices.Insert(l, i, extent{off: off, data: p[:len(p):len(p)]})
	}
	lo, hi := min(off, l[i].off), max(end, l[j-1].end())
	buf := make([]byte, hi-lo)
	for k := i; k < j; k++ {
		copy(buf[l[k].off-lo:], l[k].data)
	}
	copy(buf[off-lo:], p)
	l[i] = extent{off: lo, data: buf}
	return append(l[:i+1], l[j:]...)
}

// overlay copies the list's bytes that fall in [off, off+len(dst)) into dst
// and returns the end of the furthest byte copied relative to off (0 if none).
func (l extents) overlay(off uint64, dst []byte) int {
	end := off + uint64(len(dst))
	reach := 0
	for i := range l {
		e := &l[i]
		if e.end() <= off || e.off >= end {
			continue
		}
		lo, hi := max(off, e.off), min(end, e.end())
		copy(dst[lo-off:hi-off], e.data[lo-e.off:hi-e.off])
		reach = max(reach, int(hi-off))
	}
	return reach
}

// bytes returns the total size of the list's data.
func (l extents) bytes() uint64 {
	var n uint64
	for i := range l {
		n += uint64(len(l[i].data))
	}
	return n
}

// lastEnd returns the end of the last extent, or 0.
func (l extents) lastEnd() uint64 {
	if len(l) == 0 {
		return 0
	}
	return l[len(l)-1].end()
}

// truncate drops the data at and beyond size.
func (l extents) truncate(size uint64) extents {
	out := l[:0]
	for _, e := range l {
		if e.off >= size {
			continue
		}
		if e.end() > size {
			e.data = e.data[:size-e.off]
		}
		out = append(out, e)
	}
	return out
}

// trim replaces each buffer with much more capacity than data (grown by
// append, or left behind the chunks streamed from its front) with a
// right-sized copy, before the data is sent and kept as unstable and clean
// data, which would otherwise pin the spare capacity uncounted.
func (l extents) trim() {
	for i := range l {
		d := l[i].data
		if spare := cap(d) - len(d); spare > 4<<10 && spare > len(d)/8 {
			l[i].data = slices.Clone(d)
		}
	}
}

// chunks splits the list into pieces of at most max bytes (sub-slices, no
// copies), in offset order.
func (l extents) chunks(max int) []extent {
	var out []extent
	for _, e := range l {
		for p := 0; p < len(e.data); p += max {
			q := min(p+max, len(e.data))
			out = append(out, extent{off: e.off + uint64(p), data: e.data[p:q]})
		}
	}
	return out
}
