package proxy

import (
	"hushfs/internal/nfs4"
	"hushfs/internal/xdr"
)

// nfs4Compound is the key of NFSv4's COMPOUND procedure (RFC 8881 §16.2).
var nfs4Compound = ProcKey{nfs4.Program, nfs4.Version, nfs4.ProcCompound}

// maxCompoundArgs bounds the bytes of one COMPOUND's arguments the proxy
// gathers to decode its operations: a 1 MiB WRITE and what goes with it
// fit (sessions carry at most MaxIO plus a little). Beyond it the
// operations that decode from the first maxCompoundArgs bytes are counted
// and the compound is reported incomplete.
const maxCompoundArgs = 1<<20 + 64<<10

// compoundDecoder gathers a COMPOUND's arguments as they arrive and decodes
// their operation list with internal/nfs4's decoder at the record's end.
// Unlike the rest of the parser it copies the record's body: an
// operation's length is only known by decoding its arguments. Its buffer,
// decoder and argument values are reused from record to record.
type compoundDecoder struct {
	buf  []byte
	over bool // more than maxCompoundArgs arrived
	dec  xdr.Decoder
	args nfs4.CompoundArgs
}

func (c *compoundDecoder) reset() {
	c.buf = c.buf[:0]
	c.over = false
}

// gather appends b to the arguments, up to maxCompoundArgs.
func (c *compoundDecoder) gather(b []byte) {
	room := maxCompoundArgs - len(c.buf)
	if len(b) > room {
		b = b[:room]
		c.over = true
	}
	c.buf = append(c.buf, b...)
}

// decode reports the operations of the gathered arguments. A malformed
// list (garbage, an unknown operation, arguments cut short) reports those
// before the failure, never more.
func (c *compoundDecoder) decode(out sink) {
	c.dec.Reset(c.buf)
	c.args.Decode(&c.dec)
	out.compound(c.args.Ops, c.dec.Err() == nil && !c.over)
}
