package nfs4

import (
	"bytes"
	"errors"
	"math"
	"reflect"
	"testing"

	"hushfs/internal/xdr"
)

func decodeAll(t *testing.T, v codec, b []byte) {
	t.Helper()
	d := xdr.NewDecoder(b)
	v.Decode(d)
	if d.Err() != nil {
		t.Fatalf("decode: %v", d.Err())
	}
	if d.Remaining() != 0 {
		t.Fatalf("decode left %d of %d bytes", d.Remaining(), len(b))
	}
}

func TestRoundTrip(t *testing.T) {
	for _, s := range samples() {
		t.Run(s.name, func(t *testing.T) {
			b := s.v.Append(nil)
			if len(b)%4 != 0 {
				t.Fatalf("encoding is %d bytes, not a multiple of 4", len(b))
			}
			got := newLike(s.v)
			decodeAll(t, got, b)
			if !deepEqual(got, s.v) {
				t.Fatalf("round trip:\n got %+v\nwant %+v", got, s.v)
			}
			if b2 := got.Append(nil); !bytes.Equal(b2, b) {
				t.Fatalf("re-encoding differs:\n% x\n% x", b2, b)
			}
			pre := []byte{1, 2, 3, 4}
			if b3 := s.v.Append(pre); !bytes.Equal(b3[:4], pre) || !bytes.Equal(b3[4:], b) {
				t.Fatal("Append does not append")
			}
			// Every proper prefix fails to decode: nothing is read past
			// the end, and no truncation goes unnoticed.
			for n := 0; n < len(b); n += 4 {
				d := xdr.NewDecoder(b[:n])
				newLike(s.v).Decode(d)
				if d.Err() == nil {
					t.Fatalf("a %d-byte prefix of %d decodes", n, len(b))
				}
			}
		})
	}
}

// Decode must overwrite every field: a value reused for a message of
// another arm keeps nothing of the previous one.
func TestDecodeResetsReceiver(t *testing.T) {
	for _, s := range samples() {
		t.Run(s.name, func(t *testing.T) {
			v := newLike(s.v)
			dirty(reflect.ValueOf(v).Elem())
			decodeAll(t, v, s.v.Append(nil))
			if !deepEqual(v, s.v) {
				t.Fatalf("decoding into a used value:\n got %+v\nwant %+v", v, s.v)
			}
		})
	}
}

// dirty sets every exported field reachable from v to a non-zero value.
func dirty(v reflect.Value) {
	switch v.Kind() {
	case reflect.Struct:
		for i := range v.NumField() {
			if v.Type().Field(i).IsExported() {
				dirty(v.Field(i))
			}
		}
	case reflect.Array:
		for i := range v.Len() {
			dirty(v.Index(i))
		}
	case reflect.Slice:
		v.Set(reflect.MakeSlice(v.Type(), 2, 2))
		for i := range v.Len() {
			dirty(v.Index(i))
		}
	case reflect.Bool:
		v.SetBool(true)
	case reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		v.SetUint(0x5a)
	case reflect.Int64:
		v.SetInt(-7)
	case reflect.String:
		v.SetString("dirty")
	case reflect.Interface:
	default:
		panic("dirty: unhandled kind " + v.Kind().String())
	}
}

// compoundOf wraps argument samples in one COMPOUND, result samples in one
// COMPOUND reply (and callback samples likewise).
func compoundOf(ss []sample) (*CompoundArgs, *CompoundRes, *CBCompoundArgs, *CBCompoundRes) {
	a := &CompoundArgs{Tag: []byte("täg"), MinorVersion: 1}
	r := &CompoundRes{Status: ErrNoEnt, Tag: []byte("täg")}
	ca := &CBCompoundArgs{Tag: []byte("cb"), MinorVersion: 1, CallbackIdent: 7}
	cr := &CBCompoundRes{Status: OK, Tag: []byte("cb")}
	for _, s := range ss {
		switch {
		case s.cb && s.res:
			cr.Results = append(cr.Results, CBResop{Op: CBOpnum(s.op), Res: s.v.(OpRes)})
		case s.cb:
			ca.Ops = append(ca.Ops, CBArgop{Op: CBOpnum(s.op), Args: s.v.(OpArgs)})
		case s.res:
			r.Results = append(r.Results, Resop{Op: Opnum(s.op), Res: s.v.(OpRes)})
		default:
			a.Ops = append(a.Ops, Argop{Op: Opnum(s.op), Args: s.v.(OpArgs)})
		}
	}
	for _, op := range []Opnum{OpGetFH, OpLookupP, OpPutPubFH, OpPutRootFH, OpReadlink, OpRestoreFH, OpSaveFH, OpIllegal} {
		a.Ops = append(a.Ops, Argop{Op: op})
	}
	ca.Ops = append(ca.Ops, CBArgop{Op: CBOpIllegal})
	return a, r, ca, cr
}

// Every sample in one COMPOUND: decoding a mixed message, twice into the
// same value (the second time from its cache), gives the same operations.
func TestCompoundRoundTrip(t *testing.T) {
	a, r, ca, cr := compoundOf(samples())
	for _, c := range []struct {
		v    codec
		zero codec
	}{{a, new(CompoundArgs)}, {r, new(CompoundRes)}, {ca, new(CBCompoundArgs)}, {cr, new(CBCompoundRes)}} {
		b := c.v.Append(nil)
		for range 2 {
			decodeAll(t, c.zero, b)
			if !deepEqual(c.zero, c.v) {
				t.Fatalf("%T round trip differs", c.v)
			}
			if b2 := c.zero.Append(nil); !bytes.Equal(b, b2) {
				t.Fatalf("%T re-encoding differs", c.v)
			}
		}
	}
	// The cache hands out the values of the previous message: reused.
	var got CompoundArgs
	decodeAll(t, &got, a.Append(nil))
	first := got.Ops[0].Args
	decodeAll(t, &got, a.Append(nil))
	if got.Ops[0].Args != first {
		t.Fatal("second decode made a new argument value")
	}
}

// The streaming helpers a server uses build the bytes CompoundRes encodes.
func TestCompoundResStreaming(t *testing.T) {
	_, r, _, _ := compoundOf(samples())
	b, h := AppendCompoundResHead([]byte{9, 9, 9, 9}, r.Tag)
	for _, res := range r.Results {
		b = AppendResop(b, res.Op, res.Res)
	}
	h.Finish(b, r.Status, len(r.Results))
	if want := r.Append([]byte{9, 9, 9, 9}); !bytes.Equal(b, want) {
		t.Fatal("streamed COMPOUND reply differs from CompoundRes.Append")
	}
}

// A READDIR reply streamed with the helpers is the one ReaddirRes encodes,
// and DirCountSize is the size of an entry's cookie and name.
func TestReaddirStreaming(t *testing.T) {
	for _, s := range samples() {
		r, ok := s.v.(*ReaddirRes)
		if !ok || r.Status != OK {
			continue
		}
		b := AppendReaddirResHead(nil, r.CookieVerf)
		if len(b) != 4+ReaddirHeadSize {
			t.Fatalf("head of %d bytes", len(b))
		}
		for i := range r.Entries {
			e := &r.Entries[i]
			n := len(b)
			b = AppendEntry(b, e)
			if got := len(b) - n - 4 - len(e.Attrs.Append(nil)); got != e.DirCountSize() {
				t.Fatalf("%s: cookie and name take %d bytes, DirCountSize says %d", s.name, got, e.DirCountSize())
			}
		}
		n := len(b)
		if b = AppendDirListEnd(b, r.EOF); len(b)-n != DirListEndSize {
			t.Fatal("DirListEndSize")
		}
		if !bytes.Equal(b, r.Append(nil)) {
			t.Fatalf("%s: streamed reply differs from ReaddirRes.Append", s.name)
		}
	}
}

// rawArgs builds a COMPOUND4args of minor version 1 claiming n operations,
// followed by the given bytes.
func rawArgs(n uint32, parts ...[]byte) []byte {
	b := xdr.AppendUint32(xdr.AppendUint32(xdr.AppendOpaque(nil, nil), 1), n)
	for _, p := range parts {
		b = append(b, p...)
	}
	return b
}

// rawOp is an operation number followed by its encoded arguments.
func rawOp(op Opnum, args OpArgs) []byte {
	return AppendArgop(nil, op, args)
}

// A server learns, from a COMPOUND it cannot fully decode, which operation
// failed, after which decoded ones, and what to answer.
func TestCompoundArgsDecodeErrors(t *testing.T) {
	seq := rawOp(OpSequence, &SequenceArgs{SlotID: 1})
	putroot := rawOp(OpPutRootFH, nil)
	// Bit 12 (acl) with an empty ACE list: well framed, not decodable.
	acl := append(NewBitmap(AttrACL).Append(nil), xdr.AppendOpaque(nil, xdr.AppendUint32(nil, 0))...)
	cases := []struct {
		name    string
		in      []byte
		decoded int
		status  Status
		resOp   uint32
	}{
		{"unknown op", rawArgs(3, seq, putroot, xdr.AppendUint32(nil, 9999)), 2, ErrOpIllegal, uint32(OpIllegal)},
		{"4.2 op", rawArgs(2, seq, xdr.AppendUint32(nil, 69)), 1, ErrOpIllegal, uint32(OpIllegal)},
		{"4.0 op", rawArgs(2, seq, xdr.AppendUint32(nil, uint32(OpRenew))), 1, ErrNotSupp, uint32(OpRenew)},
		{"unknown attribute", rawArgs(3, seq, xdr.AppendUint32(nil, uint32(OpVerify)), acl, putroot), 1, ErrAttrNotSupp, uint32(OpVerify)},
		{"bad bool", rawArgs(2, seq, xdr.AppendUint32(nil, uint32(OpReclaimComplete)), xdr.AppendUint32(nil, 2)), 1, ErrBadXDR, uint32(OpReclaimComplete)},
		{"short", rawArgs(2, seq, rawOp(OpPutFH, &PutFHArgs{FH: FH("abcdefgh")})[:8]), 1, ErrBadXDR, uint32(OpPutFH)},
		{"too many", rawArgs(MaxCompoundOps+1, seq), 0, ErrTooManyOps, uint32(OpSequence)},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			var a CompoundArgs
			d := xdr.NewDecoder(c.in)
			a.Decode(d)
			var oe *OpDecodeError
			if !errors.As(d.Err(), &oe) {
				t.Fatalf("error %v, want an OpDecodeError", d.Err())
			}
			if len(a.Ops) != c.decoded || oe.Index != c.decoded {
				t.Fatalf("%d operations decoded, error at %d; want %d", len(a.Ops), oe.Index, c.decoded)
			}
			if oe.Status() != c.status || oe.ResOp() != c.resOp {
				t.Fatalf("answer %v for op %d, want %v for %d", oe.Status(), oe.ResOp(), c.status, c.resOp)
			}
			if a.MinorVersion != 1 {
				t.Fatalf("minor version %d lost", a.MinorVersion)
			}
		})
	}
}

// A count the bytes cannot hold is refused before anything is allocated.
func TestCompoundHostileCount(t *testing.T) {
	b := xdr.AppendUint32(xdr.AppendUint32(xdr.AppendOpaque(nil, nil), 1), 1000)
	var a CompoundArgs
	d := xdr.NewDecoder(b)
	if n := testing.AllocsPerRun(20, func() { d.Reset(b); a.Decode(d) }); n != 0 {
		t.Fatalf("%v allocations", n)
	}
	if !errors.Is(d.Err(), xdr.ErrShort) {
		t.Fatalf("err %v", d.Err())
	}
	var r CompoundRes
	b = xdr.AppendUint32(xdr.AppendOpaque(xdr.AppendUint32(nil, 0), nil), math.MaxUint32)
	d.Reset(b)
	r.Decode(d)
	if d.Err() == nil {
		t.Fatal("a reply with 2^32-1 results decoded")
	}
}

// An operation a client cannot decode fails the reply, with what it was.
func TestCompoundResUnknownOp(t *testing.T) {
	b := xdr.AppendUint32(xdr.AppendOpaque(xdr.AppendUint32(nil, 0), nil), 2)
	b = AppendResop(b, OpPutRootFH, &StatusRes{})
	b = xdr.AppendUint32(xdr.AppendUint32(b, 77), 0)
	var r CompoundRes
	d := xdr.NewDecoder(b)
	r.Decode(d)
	var oe *OpDecodeError
	if !errors.As(d.Err(), &oe) || oe.Index != 1 || oe.Op != 77 {
		t.Fatalf("err %v", d.Err())
	}
}

func TestAttrErrors(t *testing.T) {
	// An attribute the codec does not know.
	f := Fattr{Mask: NewBitmap(AttrSize, AttrFsLocations)}
	b := f.Mask.Append(nil)
	b = xdr.AppendOpaque(b, xdr.AppendUint64(nil, 7))
	var got Fattr
	d := xdr.NewDecoder(b)
	got.Decode(d)
	var ae *AttrError
	if !errors.As(d.Err(), &ae) || !ae.Unsupported() || ae.Attr != AttrFsLocations {
		t.Fatalf("err %v", d.Err())
	}
	if d.Remaining() != 0 {
		t.Fatal("decoder not left after the attribute list")
	}
	// A value left over.
	b = NewBitmap(AttrSize).Append(nil)
	b = xdr.AppendOpaque(b, xdr.AppendUint64(xdr.AppendUint64(nil, 7), 8))
	d.Reset(b)
	got.Decode(d)
	if !errors.As(d.Err(), &ae) || ae.Unsupported() || ae.Attr != -1 {
		t.Fatalf("err %v", d.Err())
	}
	// A value cut short.
	b = NewBitmap(AttrSize).Append(nil)
	b = xdr.AppendOpaque(b, xdr.AppendUint32(nil, 7))
	d.Reset(b)
	got.Decode(d)
	if !errors.As(d.Err(), &ae) || ae.Unsupported() || ae.Attr != AttrSize {
		t.Fatalf("err %v", d.Err())
	}
	// Encoding drops what it cannot encode, value and bit.
	f = Fattr{Mask: NewBitmap(AttrSize, AttrACL), Size: 9}
	d.Reset(f.Append(nil))
	got.Decode(d)
	if d.Err() != nil || got.Mask.Has(AttrACL) || !got.Mask.Has(AttrSize) || got.Size != 9 {
		t.Fatalf("err %v, %+v", d.Err(), got)
	}
}

func TestBitmap(t *testing.T) {
	b := NewBitmap(0, 31, 32, 75)
	if b.Count() != 4 || !b.Has(75) || b.Has(74) || b.Has(-1) || b.Has(1000) || len(b.Words()) != 3 {
		t.Fatalf("%v", b)
	}
	var got []int
	for a := b.Next(0); a >= 0; a = b.Next(a + 1) {
		got = append(got, a)
	}
	if !reflect.DeepEqual(got, []int{0, 31, 32, 75}) {
		t.Fatalf("Next walks %v", got)
	}
	b.Clear(75)
	tr := b.Trimmed()
	if b.Has(75) || len(b.Words()) != 3 || len(tr.Words()) != 2 {
		t.Fatal("Clear/Trimmed")
	}
	w := BitmapOf(1, 0, 0)
	x := NewBitmap(0)
	if !w.Equal(&x) || w.String() != "{0}" {
		t.Fatal("Equal ignores the word count")
	}
	and := NewBitmap(1, 2, 40).And(NewBitmap(2, 40, 41))
	if and.String() != "{2,40}" || NewBitmap(1).Or(NewBitmap(64)).String() != "{1,64}" ||
		NewBitmap(1, 2).AndNot(NewBitmap(2)).String() != "{1}" {
		t.Fatal("And/Or/AndNot")
	}
	// Longer than MaxBitmapWords: refused.
	d := xdr.NewDecoder(xdr.AppendUint32(nil, MaxBitmapWords+1))
	b.Decode(d)
	if d.Err() == nil {
		t.Fatal("9-word bitmap decoded")
	}
	defer func() {
		if recover() == nil {
			t.Fatal("Set(256) did not panic")
		}
	}()
	b.Set(MaxBitmapWords * 32)
}

func TestOwners(t *testing.T) {
	for s, want := range map[string]Owner{
		"1000":           {Numeric: true, ID: 1000},
		"0":              {Numeric: true},
		"4294967295":     {Numeric: true, ID: 4294967295},
		"4294967296":     {Name: []byte("4294967296")},
		"01":             {Name: []byte("01")},
		"-1":             {Name: []byte("-1")},
		"":               {Name: []byte("")},
		"alice@EXAMPLE":  {Name: []byte("alice"), Domain: []byte("EXAMPLE")},
		"a@b@c":          {Name: []byte("a@b"), Domain: []byte("c")},
		"nobody":         {Name: []byte("nobody")},
		"1000@localhost": {Name: []byte("1000"), Domain: []byte("localhost")},
	} {
		if got := ParseOwner([]byte(s)); !deepEqual(got, want) {
			t.Errorf("ParseOwner(%q) = %+v, want %+v", s, got, want)
		}
	}
	if string(AppendID([]byte("x"), 4294967295)) != "x4294967295" || string(AppendOwner(nil, "bob", "dom")) != "bob@dom" {
		t.Fatal("AppendID/AppendOwner")
	}
	if n := testing.AllocsPerRun(100, func() { _ = AppendID(make([]byte, 0, 16), 1000) }); n != 0 {
		t.Fatalf("AppendID allocates %v times", n)
	}
}

func TestNames(t *testing.T) {
	if OpReclaimComplete.String() != "RECLAIM_COMPLETE" || OpIllegal.String() != "ILLEGAL" ||
		Opnum(71).String() != "CLONE" || Opnum(1).String() != "nfs_opnum4(1)" {
		t.Fatal("Opnum names")
	}
	if CBOpNotifyLock.String() != "CB_NOTIFY_LOCK" || CBOpIllegal.String() != "CB_ILLEGAL" || CBOpnum(99).String() != "nfs_cb_opnum4(99)" {
		t.Fatal("CBOpnum names")
	}
	if ErrOpIllegal.Error() != "NFS4ERR_OP_ILLEGAL" || Status(77).String() != "nfsstat4(77)" || OK.String() != "NFS4_OK" {
		t.Fatal("Status names")
	}
	if FileSync.String() != "FILE_SYNC4" {
		t.Fatal("StableHow names")
	}
}
