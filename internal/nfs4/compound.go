package nfs4

import (
	"errors"
	"fmt"

	"hushfs/internal/xdr"
)

// Argop is nfs_argop4: an operation and its arguments (nil for the
// operations that take none: GETFH, LOOKUPP, PUTPUBFH, PUTROOTFH, READLINK,
// RESTOREFH, SAVEFH, ILLEGAL).
type Argop struct {
	Op   Opnum
	Args OpArgs
}

// Resop is nfs_resop4: an operation and its result.
type Resop struct {
	Op  Opnum
	Res OpRes
}

// CompoundArgs is COMPOUND4args.
//
// Decode stops at the first operation it cannot decode and records an
// *OpDecodeError in the decoder: Ops then holds the operations before it,
// which a server runs before answering the failed one with the error's
// Status (RFC 8881 §16.2.3: a COMPOUND stops at its first failure anyway).
// An operation number outside 4.1 is such a failure (OP_ILLEGAL), as is
// one of the 4.0 operations 4.1 forbids (NOTSUPP), an attribute the codec
// does not know (ATTRNOTSUPP) and malformed arguments (BADXDR).
//
// The argument values Decode makes are kept and reused by the next Decode
// into the same CompoundArgs, so a server decoding into one value per
// worker stops allocating once it has seen each operation it is sent.
type CompoundArgs struct {
	Tag          []byte
	MinorVersion uint32
	Ops          []Argop

	cache opCache[OpArgs]
}

// Append encodes the arguments.
func (c *CompoundArgs) Append(b []byte) []byte {
	b = AppendCompoundArgsHead(b, c.Tag, c.MinorVersion, len(c.Ops))
	for i := range c.Ops {
		b = AppendArgop(b, c.Ops[i].Op, c.Ops[i].Args)
	}
	return b
}

// AppendCompoundArgsHead appends a COMPOUND4args up to its first operation
// (AppendArgop each of the n operations after it).
func AppendCompoundArgsHead(b []byte, tag []byte, minor uint32, n int) []byte {
	b = xdr.AppendOpaque(b, tag)
	b = xdr.AppendUint32(b, minor)
	return xdr.AppendUint32(b, uint32(n))
}

// AppendArgop appends an operation and its arguments (nil for none).
func AppendArgop(b []byte, op Opnum, args OpArgs) []byte {
	b = xdr.AppendUint32(b, uint32(op))
	if args != nil {
		b = args.Append(b)
	}
	return b
}

// Decode decodes the arguments; see CompoundArgs for what it does with an
// operation it cannot decode.
func (c *CompoundArgs) Decode(d *xdr.Decoder) {
	ops := c.Ops[:0]
	for i := range ops[:cap(ops)] {
		ops[:cap(ops)][i] = Argop{} // drop references to old arguments
	}
	c.Tag = d.Opaque(MaxTag)
	c.MinorVersion = d.Uint32()
	n, ok := compoundCount(d)
	var used [maxOp41 + 1]uint16
	for i := 0; ok && i < n; i++ {
		op := Opnum(d.Uint32())
		if d.Err() != nil {
			break
		}
		var args OpArgs
		switch classOf(op) {
		case opIllegal:
			d.SetErr(&OpDecodeError{Index: i, Op: uint32(op), Err: ErrIllegalOp})
		case opNotSupp:
			d.SetErr(&OpDecodeError{Index: i, Op: uint32(op), Err: ErrNotSuppOp})
		case opArgs:
			args = c.cache.get(int(op), int(used[op]), newArgsAt)
			used[op]++
			decodeOp(d, args, i, uint32(op))
		}
		if d.Err() != nil {
			break
		}
		ops = append(ops, Argop{Op: op, Args: args})
	}
	if n > MaxCompoundOps && d.Err() == nil {
		// The first operation's number, so that a server can answer it.
		op := d.Uint32()
		d.SetErr(&OpDecodeError{Index: 0, Op: op, Err: ErrOpCount})
	}
	c.Ops = ops
}

func newArgsAt(op int) OpArgs { return NewArgs(Opnum(op)) }

// compoundCount reads the count of an operation array. Beyond
// MaxCompoundOps it returns ok false and the count, for the caller to
// report; a count the remaining bytes cannot hold (every operation takes
// at least its 4-byte number) is an error.
func compoundCount(d *xdr.Decoder) (int, bool) {
	n := d.Uint32()
	if d.Err() != nil {
		return 0, false
	}
	if n > MaxCompoundOps {
		return int(n), false
	}
	if int(n) > d.Remaining()/4 {
		d.SetErr(xdr.ErrShort)
		return 0, false
	}
	return int(n), true
}

// decodeOp decodes one operation's arguments or result into v, wrapping a
// failure in an *OpDecodeError. (Decoding on a copy of d instead would cost
// the copy an allocation: it escapes through the interface call.)
func decodeOp(d *xdr.Decoder, v interface{ Decode(*xdr.Decoder) }, i int, op uint32) {
	v.Decode(d)
	d.WrapErr(func(err error) error { return &OpDecodeError{Index: i, Op: op, Err: err} })
}

// CompoundRes is COMPOUND4res. Decode keeps the result values it makes for
// the next Decode into the same CompoundRes, as CompoundArgs does; an
// operation it cannot decode fails the whole reply (*OpDecodeError).
type CompoundRes struct {
	Status  Status
	Tag     []byte
	Results []Resop

	cache opCache[OpRes]
}

// Append encodes the result.
func (c *CompoundRes) Append(b []byte) []byte {
	b, h := AppendCompoundResHead(b, c.Tag)
	for i := range c.Results {
		b = AppendResop(b, c.Results[i].Op, c.Results[i].Res)
	}
	h.Finish(b, c.Status, len(c.Results))
	return b
}

// CompoundResHead locates the status and the result count of a COMPOUND4res
// being appended, which a server knows only once it has run the operations.
type CompoundResHead struct{ status, count int }

// AppendCompoundResHead appends a COMPOUND4res up to its first result, with
// the status and the count left for Finish. A server appends each result
// (AppendResop) as it runs the operation, then calls Finish.
func AppendCompoundResHead(b []byte, tag []byte) ([]byte, CompoundResHead) {
	var h CompoundResHead
	b, h.status = xdr.Reserve(b)
	b = xdr.AppendOpaque(b, tag)
	b, h.count = xdr.Reserve(b)
	return b, h
}

// Finish fills in the status and the number of results.
func (h CompoundResHead) Finish(b []byte, status Status, n int) {
	xdr.PutUint32(b, h.status, uint32(status))
	xdr.PutUint32(b, h.count, uint32(n))
}

// AppendResop appends an operation's result.
func AppendResop(b []byte, op Opnum, res OpRes) []byte {
	b = xdr.AppendUint32(b, uint32(op))
	return res.Append(b)
}

// Decode decodes the result.
func (c *CompoundRes) Decode(d *xdr.Decoder) {
	res := c.Results[:0]
	for i := range res[:cap(res)] {
		res[:cap(res)][i] = Resop{}
	}
	c.Status = decodeStatus(d)
	c.Tag = d.Opaque(MaxTag)
	n, ok := compoundCount(d)
	if !ok && d.Err() == nil {
		d.SetErr(fmt.Errorf("nfs4: COMPOUND reply with %d results", n))
	}
	var used [maxOp41 + 1]uint16
	for i := 0; ok && i < n; i++ {
		op := Opnum(d.Uint32())
		if d.Err() != nil {
			break
		}
		var r OpRes
		if op == OpIllegal {
			r = new(StatusRes) // rare: no cache
		} else if classOf(op) == opArgs || classOf(op) == opVoid {
			r = c.cache.get(int(op), int(used[op]), newResAt)
			used[op]++
		}
		if r == nil {
			d.SetErr(&OpDecodeError{Index: i, Op: uint32(op), Err: ErrIllegalOp})
			break
		}
		decodeOp(d, r, i, uint32(op))
		if d.Err() != nil {
			break
		}
		res = append(res, Resop{Op: op, Res: r})
	}
	c.Results = res
}

func newResAt(op int) OpRes { return NewRes(Opnum(op)) }

// Errors of an OpDecodeError, by what a server answers.
var (
	ErrIllegalOp = errors.New("operation not defined in NFSv4.1")
	ErrNotSuppOp = errors.New("operation of NFSv4.0 only")
	ErrOpCount   = errors.New("too many operations")
)

// OpDecodeError reports the operation of a COMPOUND or CB_COMPOUND that
// could not be decoded; the operations before Index were.
type OpDecodeError struct {
	Index int
	Op    uint32 // the operation number as sent
	Err   error
}

func (e *OpDecodeError) Error() string {
	return fmt.Sprintf("nfs4: operation %d (%d): %v", e.Index, e.Op, e.Err)
}

func (e *OpDecodeError) Unwrap() error { return e.Err }

// Status is what a server answers for the operation.
func (e *OpDecodeError) Status() Status {
	var ae *AttrError
	switch {
	case e.Err == ErrIllegalOp:
		return ErrOpIllegal
	case e.Err == ErrNotSuppOp:
		return ErrNotSupp
	case e.Err == ErrOpCount:
		return ErrTooManyOps
	case errors.As(e.Err, &ae) && ae.Unsupported():
		return ErrAttrNotSupp
	}
	return ErrBadXDR
}

// ResOp is the operation number of the result a server answers with: that
// of the operation, or ILLEGAL (CB_ILLEGAL, the same number) for one that
// does not exist.
func (e *OpDecodeError) ResOp() uint32 {
	if e.Err == ErrIllegalOp {
		return uint32(OpIllegal)
	}
	return e.Op
}

// opCache keeps the values a compound decoder made, by operation number and
// occurrence in the message, to decode the next message into them.
type opCache[T any] struct {
	vals [][]T
}

// get returns the k-th value kept for op, made by mk if there is none yet.
func (c *opCache[T]) get(op, k int, mk func(int) T) T {
	if op >= len(c.vals) {
		c.vals = append(c.vals, make([][]T, op+1-len(c.vals))...)
	}
	if k < len(c.vals[op]) {
		return c.vals[op][k]
	}
	v := mk(op)
	c.vals[op] = append(c.vals[op], v)
	return v
}
