package proxy

// framer follows the record marking of one direction and cuts the stream
// into runs that each lie within one record: the forwarding path uses it to
// treat records whole (drop, delay, copy or cut one) without ever
// buffering more than a record's first bytes. Like streamParser it holds
// nothing between reads but a partial record mark, so hostile lengths cost
// nothing.
type framer struct {
	inFrag   bool   // false: reading a record mark
	fragLeft uint32 // body bytes left in the current fragment
	last     bool   // the current fragment ends its record
	markAcc  uint32
	markN    int
	inRecord bool // bytes of the current record have gone by
}

// run is the next stretch of the stream within one record.
type run struct {
	n        int  // bytes
	body     bool // record body bytes rather than record mark bytes
	start    bool // the first bytes of a record
	end      bool // the record ends with them
	markDone bool // a record mark completes with these bytes
	fragLen  int  // with markDone: the fragment's length
}

// next returns the run at the head of b (len(b) > 0).
func (f *framer) next(b []byte) run {
	r := run{start: !f.inRecord}
	f.inRecord = true
	if f.inFrag {
		n := len(b)
		if uint64(n) > uint64(f.fragLeft) {
			n = int(f.fragLeft)
		}
		f.fragLeft -= uint32(n)
		r.n, r.body = n, true
		if f.fragLeft == 0 {
			f.inFrag = false
			r.end = f.last
		}
	} else {
		for r.n < len(b) && f.markN < 4 {
			f.markAcc = f.markAcc<<8 | uint32(b[r.n])
			f.markN++
			r.n++
		}
		if f.markN == 4 {
			f.last = f.markAcc&lastFragment != 0
			f.fragLeft = f.markAcc &^ lastFragment
			f.inFrag = f.fragLeft > 0
			r.markDone, r.fragLen = true, int(f.fragLeft)
			r.end = !f.inFrag && f.last
			f.markAcc, f.markN = 0, 0
		}
	}
	if r.end {
		f.inRecord = false
	}
	return r
}

// atBoundary reports whether the stream so far ends between records.
func (f *framer) atBoundary() bool { return !f.inRecord }
