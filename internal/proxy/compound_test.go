package proxy

import (
	"bytes"
	"encoding/binary"
	"maps"
	"math/rand/v2"
	"testing"

	"hushfs/internal/nfs3"
	"hushfs/internal/nfs4"
)

// compoundBody is an NFSv4 COMPOUND call carrying ops.
func compoundBody(xid uint32, ops ...nfs4.Argop) []byte {
	args := (&nfs4.CompoundArgs{Tag: []byte("t"), MinorVersion: 1, Ops: ops}).Append(nil)
	return callBody(xid, nfs4Compound, authSys("m", 1000, 1000), none, args)
}

func seqOp() nfs4.Argop {
	return nfs4.Argop{Op: nfs4.OpSequence, Args: &nfs4.SequenceArgs{SequenceID: 1}}
}

func putfhOp() nfs4.Argop {
	return nfs4.Argop{Op: nfs4.OpPutFH, Args: &nfs4.PutFHArgs{FH: bytes.Repeat([]byte{3}, 28)}}
}

func getattrOp() nfs4.Argop { return nfs4.Argop{Op: nfs4.OpGetattr, Args: &nfs4.GetattrArgs{}} }

// TestParserCompound: NFSv4 COMPOUNDs are counted as calls ("NFS4
// COMPOUND") and their operations apart, whatever the pieces the stream
// comes in; a 1 MiB WRITE's operations after its data are counted too.
func TestParserCompound(t *testing.T) {
	r := rand.New(rand.NewPCG(7, 8))
	write := nfs4.Argop{Op: nfs4.OpWrite, Args: &nfs4.WriteArgs{Stable: nfs4.Unstable, Data: make([]byte, 1<<20)}}
	var stream []byte
	for i, ops := range [][]nfs4.Argop{
		{seqOp()},
		{seqOp(), putfhOp(), getattrOp()},
		{seqOp(), putfhOp(), write, getattrOp()},
		{seqOp(), putfhOp(), {Op: nfs4.OpGetFH}, getattrOp(), getattrOp()},
	} {
		stream = append(stream, frameRandom(r, compoundBody(uint32(i+1), ops...))...)
	}
	stream = append(stream, frame(callBody(9, NFS3(nfs3.ProcGetattr), none, none, xdrOpaque([]byte{1})))...)
	wantOps := map[string]uint64{"SEQUENCE": 4, "PUTFH": 3, "GETATTR": 4, "WRITE": 1, "GETFH": 1}
	for _, max := range []int{len(stream), 1 << 16, 100, 7} {
		got, _ := feedSplit(stream, r, max)
		if got.Calls[nfs4Compound] != 4 || got.Calls[NFS3(nfs3.ProcGetattr)] != 1 || !maps.Equal(got.NFS4Ops, wantOps) ||
			got.NFS4Incomplete != 0 || got.UnparsedCalls != 0 {
			t.Errorf("pieces up to %d: calls %v ops %v incomplete %d unparsed %d; want 4 COMPOUNDs, ops %v",
				max, got.Calls, got.NFS4Ops, got.NFS4Incomplete, got.UnparsedCalls, wantOps)
		}
	}
	if n := nfs4Compound.Name(); n != "NFS4 COMPOUND" {
		t.Errorf("name %q", n)
	}
}

// TestParserCompoundHostile: COMPOUNDs that do not decode are counted as
// calls, their operations as far as they decode and no further, and the
// compound as incomplete; nothing panics, and what is gathered is bounded.
func TestParserCompoundHostile(t *testing.T) {
	good := (&nfs4.CompoundArgs{MinorVersion: 1, Ops: []nfs4.Argop{seqOp(), putfhOp()}}).Append(nil)
	huge := xdrOpaque(nil)
	huge = binary.BigEndian.AppendUint32(huge, 1)
	huge = binary.BigEndian.AppendUint32(huge, 0xffffffff) // 2^32-1 operations
	cut := (&nfs4.CompoundArgs{MinorVersion: 1, Ops: []nfs4.Argop{seqOp(), putfhOp()}}).Append(nil)
	cut = cut[:len(cut)-10] // PUTFH's handle cut short
	illegal := binary.BigEndian.AppendUint32(bytes.Clone(good[:len(good)]), 9999)
	binary.BigEndian.PutUint32(illegal[8:], 3) // three operations, the third unknown
	over := (&nfs4.CompoundArgs{MinorVersion: 1, Ops: []nfs4.Argop{seqOp(),
		{Op: nfs4.OpWrite, Args: &nfs4.WriteArgs{Data: make([]byte, maxCompoundArgs)}}, getattrOp()}}).Append(nil)
	cases := []struct {
		name string
		args []byte
		ops  map[string]uint64
	}{
		{"garbage", []byte("GET / HTTP/1.1\r\nHost: x\r\n\r\n"), map[string]uint64{}},
		{"no arguments", nil, map[string]uint64{}},
		{"2^32-1 operations", huge, map[string]uint64{}},
		{"arguments cut short", cut, map[string]uint64{"SEQUENCE": 1}},
		{"unknown operation", illegal, map[string]uint64{"SEQUENCE": 1, "PUTFH": 1}},
		{"over the bound", over, map[string]uint64{"SEQUENCE": 1}},
	}
	for _, c := range cases {
		rec := frame(callBody(1, nfs4Compound, none, none, c.args))
		got, _ := feedSplit(rec, rand.New(rand.NewPCG(1, 2)), 1000)
		if got.Calls[nfs4Compound] != 1 || !maps.Equal(got.NFS4Ops, c.ops) || got.NFS4Incomplete != 1 {
			t.Errorf("%s: calls %v ops %v incomplete %d; want 1 COMPOUND, ops %v, incomplete", c.name,
				got.Calls, got.NFS4Ops, got.NFS4Incomplete, c.ops)
		}
	}
	p := newStreamParser(true, newCounters())
	p.feed(frame(callBody(1, nfs4Compound, none, none, over)))
	if n := cap(p.msg.comp.buf); n > 2*maxCompoundArgs {
		t.Errorf("gathered %d bytes for one COMPOUND", n)
	}
}
