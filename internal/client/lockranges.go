package client

import (
	"math"

	"hushfs/internal/proto"
)

// lockRanges are the byte ranges one lock owner holds on a file, as the
// server granted them: what a reclaim after a server restart asks for
// again. One owner's locks never conflict with each other, so POSIX's
// rules make this a map from bytes to a lock type: a new lock replaces
// what it covers, an unlock removes it. Kept sorted and disjoint.
type lockRanges []lockRange

// lockRange is [start, end) of one type; end math.MaxUint64 is to the end
// of the file, whatever it becomes.
type lockRange struct {
	start, end uint64
	typ        proto.LockType
}

// rangeOf is a's [start, end).
func rangeOf(a *proto.LockArgs) (uint64, uint64) {
	if a.Length == 0 || a.Offset+a.Length < a.Offset {
		return a.Offset, math.MaxUint64
	}
	return a.Offset, a.Offset + a.Length
}

// clear removes [start, end) from r.
func (r lockRanges) clear(start, end uint64) lockRanges {
	var out lockRanges
	for _, x := range r {
		if x.end <= start || x.start >= end {
			out = append(out, x)
			continue
		}
		if x.start < start {
			out = append(out, lockRange{x.start, start, x.typ})
		}
		if x.end > end {
			out = append(out, lockRange{end, x.end, x.typ})
		}
	}
	return out
}

// set makes [start, end) held as typ, merging with neighbours of the same
// type.
func (r lockRanges) set(start, end uint64, typ proto.LockType) lockRanges {
	r = r.clear(start, end)
	out := make(lockRanges, 0, len(r)+1)
	placed := false
	for _, x := range r {
		if !placed && x.start >= end {
			out = append(out, lockRange{start, end, typ})
			placed = true
		}
		out = append(out, x)
	}
	if !placed {
		out = append(out, lockRange{start, end, typ})
	}
	merged := out[:1]
	for _, x := range out[1:] {
		last := &merged[len(merged)-1]
		if last.end == x.start && last.typ == x.typ {
			last.end = x.end
			continue
		}
		merged = append(merged, x)
	}
	return merged
}

// args is the range as a lock of owner on fh.
func (x lockRange) args(fh proto.FH, owner uint64) proto.LockArgs {
	a := proto.LockArgs{FH: fh, Owner: owner, Type: x.typ, Offset: x.start}
	if x.end != math.MaxUint64 {
		a.Length = x.end - x.start
	}
	return a
}
