package nfs4

import (
	"testing"

	"hushfs/internal/xdr"
)

// The hot paths of a client and a server — SEQUENCE + PUTFH + READ, WRITE
// or GETATTR, and a READDIR — allocate nothing per message once the values
// they decode into have seen one: decoding the arguments (server), encoding
// the results into a pre-sized buffer as a server streams them, decoding
// the results (client), and encoding the arguments (client).
func TestZeroAllocs(t *testing.T) {
	g := &gen{}
	seq := &SequenceArgs{SessionID: g.sessionID(), SequenceID: 7, SlotID: 3, HighestSlotID: 15}
	seqRes := &SequenceRes{Status: OK, SessionID: seq.SessionID, SequenceID: 7, SlotID: 3, HighestSlotID: 15, TargetHighestSlotID: 15}
	putfh := &PutFHArgs{FH: g.fh()}
	data := make([]byte, 1<<20)
	attrs := g.fattrSome()
	attrs.Owner, attrs.OwnerGroup = AppendID(make([]byte, 0, 10), 1000), AppendID(make([]byte, 0, 10), 100)
	cases := []struct {
		name string
		op   Opnum
		args OpArgs
		res  OpRes
	}{
		{"read", OpRead, &ReadArgs{Stateid: g.stateid(), Offset: 1 << 30, Count: 1 << 20}, &ReadRes{Status: OK, Data: data}},
		{"write", OpWrite, &WriteArgs{Stateid: g.stateid(), Offset: 1 << 30, Stable: Unstable, Data: data},
			&WriteRes{Status: OK, Count: 1 << 20, Committed: Unstable, Verf: g.verf()}},
		{"getattr", OpGetattr, &GetattrArgs{AttrRequest: attrs.Mask}, &GetattrRes{Status: OK, Attrs: attrs}},
		{"readdir", OpReaddir, &ReaddirArgs{MaxCount: 1 << 16, AttrRequest: attrs.Mask},
			&ReaddirRes{Status: OK, Entries: []Entry{g.entry(), g.entry(), g.entry(), g.entry()}, EOF: true}},
	}
	buf := make([]byte, 0, 2<<20)
	var d xdr.Decoder
	for _, c := range cases {
		args := &CompoundArgs{MinorVersion: 1, Ops: []Argop{{OpSequence, seq}, {OpPutFH, putfh}, {c.op, c.args}}}
		res := &CompoundRes{Status: OK, Results: []Resop{{OpSequence, seqRes}, {OpPutFH, &StatusRes{}}, {c.op, c.res}}}
		argBytes := args.Append(nil)
		resBytes := res.Append(nil)

		var serverArgs CompoundArgs
		var clientRes CompoundRes
		for name, f := range map[string]func(){
			"client encodes the call": func() { buf = args.Append(buf[:0]) },
			"server decodes the call": func() {
				d.Reset(argBytes)
				serverArgs.Decode(&d)
			},
			"server streams the reply": func() {
				b, h := AppendCompoundResHead(buf[:0], serverArgs.Tag)
				for _, r := range res.Results {
					b = AppendResop(b, r.Op, r.Res)
				}
				h.Finish(b, OK, len(res.Results))
				buf = b
			},
			"client decodes the reply": func() {
				d.Reset(resBytes)
				clientRes.Decode(&d)
			},
		} {
			f() // the first message fills the decoders' caches
			if n := testing.AllocsPerRun(100, f); n != 0 || d.Err() != nil {
				t.Errorf("%s: %s: %v allocations, err %v", c.name, name, n, d.Err())
			}
		}
		if !deepEqual(&serverArgs, args) || !deepEqual(&clientRes, res) {
			t.Errorf("%s: decoded messages differ", c.name)
		}
	}
}
