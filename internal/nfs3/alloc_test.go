package nfs3

import (
	"testing"

	"hushfs/internal/xdr"
)

// The hot paths of a server (decoding the common arguments, encoding
// GETATTR and READ replies) and of a client (decoding a READDIR reply into a
// pre-sized slice) must not allocate.
func TestZeroAllocs(t *testing.T) {
	var d xdr.Decoder
	decodes := []struct {
		name string
		v    codec
		in   codec
	}{
		{"GetattrArgs", new(GetattrArgs), &GetattrArgs{Obj: fh(1, 32)}},
		{"LookupArgs", new(LookupArgs), &LookupArgs{What: DirOpArgs{Dir: fh(1, 32), Name: []byte("name.txt")}}},
		{"ReadArgs", new(ReadArgs), &ReadArgs{File: fh(1, 32), Offset: 1 << 20, Count: 1 << 16}},
		{"WriteArgs", new(WriteArgs), &WriteArgs{File: fh(1, 32), Offset: 8, Count: 5, Stable: FileSync, Data: []byte("hello")}},
		{"ReaddirplusArgs", new(ReaddirplusArgs), &ReaddirplusArgs{Dir: fh(1, 32), DirCount: 1, MaxCount: 2}},
	}
	for _, c := range decodes {
		b := c.in.Append(nil)
		if n := testing.AllocsPerRun(200, func() {
			d.Reset(b)
			c.v.Decode(&d)
		}); n != 0 || d.Err() != nil {
			t.Errorf("decoding %s: %v allocations, err %v", c.name, n, d.Err())
		}
	}

	gr := &GetattrRes{Status: OK, Attr: fattr(1)}
	data := make([]byte, 1<<16)
	rr := &ReadRes{Status: OK, FileAttr: postAttr(2), Count: uint32(len(data)), EOF: true, Data: data}
	buf := make([]byte, 0, 1<<17)
	for name, v := range map[string]codec{"GetattrRes": gr, "ReadRes": rr} {
		if n := testing.AllocsPerRun(200, func() { buf = v.Append(buf[:0]) }); n != 0 {
			t.Errorf("encoding %s into a pre-sized buffer: %v allocations", name, n)
		}
	}

	// A READDIR reply decoded into a slice of sufficient capacity.
	src := samples(names{})
	var enc []byte
	for _, s := range src {
		if s.name == "readdir-ok" {
			enc = s.v.Append(nil)
		}
	}
	res := ReaddirRes{Entries: make([]DirEntry, 0, 8)}
	if n := testing.AllocsPerRun(200, func() {
		d.Reset(enc)
		res.Decode(&d)
	}); n != 0 || d.Err() != nil || len(res.Entries) != 5 {
		t.Errorf("decoding ReaddirRes into capacity: %v allocations, err %v, %d entries", n, d.Err(), len(res.Entries))
	}
}

// TestReaddirSizing checks the sizing helpers against real encodings: a
// reply streamed with the helpers is byte for byte the reply a ReaddirRes
// encodes, and the sizes the helpers predict are the sizes appended.
func TestReaddirSizing(t *testing.T) {
	n := names{}
	for _, dirAttr := range []PostOpAttr{{}, postAttr(1)} {
		ents := []DirEntry{{Fileid: 1, Name: []byte{}, Cookie: 1}, {Fileid: 2, Name: n.name(1), Cookie: 2},
			{Fileid: 3, Name: []byte("abcd"), Cookie: 3}, {Fileid: 4, Name: n.name(2), Cookie: 4}}
		b := AppendReaddirResHead(nil, &dirAttr, verf(1))
		if got, want := len(b)-4, ReaddirHeadSize(&dirAttr); got != want {
			t.Fatalf("head: %d bytes after status, ReaddirHeadSize says %d", got, want)
		}
		for i := range ents {
			before := len(b)
			b = AppendDirEntry(b, &ents[i])
			if len(b)-before != ents[i].XDRSize() {
				t.Fatalf("entry %d: appended %d bytes, XDRSize says %d", i, len(b)-before, ents[i].XDRSize())
			}
		}
		before := len(b)
		b = AppendDirListEnd(b, true)
		if len(b)-before != DirListEndSize {
			t.Fatal("DirListEndSize")
		}
		want := (&ReaddirRes{Status: OK, DirAttr: dirAttr, CookieVerf: verf(1), Entries: ents, EOF: true}).Append(nil)
		if string(b) != string(want) {
			t.Fatal("streamed READDIR reply differs from ReaddirRes.Append")
		}

		pents := []DirEntryPlus{
			{Fileid: 1, Name: n.name(3), Cookie: 1, Attr: postAttr(2), FH: PostOpFH{Present: true, FH: fh(1, 13)}},
			{Fileid: 2, Name: []byte("ab"), Cookie: 2},
			{Fileid: 3, Name: n.name(4), Cookie: 3, FH: PostOpFH{Present: true, FH: fh(1, 64)}},
		}
		b = AppendReaddirplusResHead(nil, &dirAttr, verf(2))
		for i := range pents {
			e := &pents[i]
			before := len(b)
			b = AppendDirEntryPlus(b, e)
			if len(b)-before != e.XDRSize() {
				t.Fatalf("plus entry %d: appended %d bytes, XDRSize says %d", i, len(b)-before, e.XDRSize())
			}
			// dircount covers fileid, name and cookie: the bytes between
			// value_follows and the attributes.
			dc := len(b) - before - 4 - e.Attr.XDRSize() - e.FH.XDRSize()
			if dc != e.DirCountSize() {
				t.Fatalf("plus entry %d: fileid+name+cookie take %d bytes, DirCountSize says %d", i, dc, e.DirCountSize())
			}
		}
		b = AppendDirListEnd(b, false)
		want = (&ReaddirplusRes{Status: OK, DirAttr: dirAttr, CookieVerf: verf(2), Entries: pents}).Append(nil)
		if string(b) != string(want) {
			t.Fatal("streamed READDIRPLUS reply differs from ReaddirplusRes.Append")
		}
	}
}
