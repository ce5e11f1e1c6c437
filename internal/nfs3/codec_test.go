package nfs3

import (
	"bytes"
	"errors"
	"fmt"
	"math"
	"reflect"
	"runtime"
	"testing"
	"unsafe"

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
	for _, n := range []names{{ascii: false}, {ascii: true}} {
		for _, s := range samples(n) {
			t.Run(fmt.Sprintf("%s/ascii=%v", s.name, n.ascii), func(t *testing.T) {
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
				// Appending extends, never overwrites, what the buffer held.
				pre := []byte{1, 2, 3, 4}
				if b3 := s.v.Append(pre); !bytes.Equal(b3[:4], pre) || !bytes.Equal(b3[4:], b) {
					t.Fatal("Append does not append")
				}
			})
		}
	}
}

// Decode must overwrite every field: a value reused for a message of the
// other arm keeps nothing of the previous one.
func TestDecodeResetsReceiver(t *testing.T) {
	for _, s := range samples(names{}) {
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

// dirty sets every field reachable from v to a non-zero value.
func dirty(v reflect.Value) {
	switch v.Kind() {
	case reflect.Struct:
		for i := range v.NumField() {
			dirty(v.Field(i))
		}
	case reflect.Array:
		for i := range v.Len() {
			dirty(v.Index(i))
		}
	case reflect.Slice:
		v.Set(reflect.MakeSlice(v.Type(), 3, 3))
		for i := range v.Len() {
			dirty(v.Index(i))
		}
	case reflect.Bool:
		v.SetBool(true)
	case reflect.Uint8, reflect.Uint32, reflect.Uint64:
		v.SetUint(0x5a)
	default:
		panic("dirty: unhandled kind " + v.Kind().String())
	}
}

func TestProcNames(t *testing.T) {
	if ProcName(ProcReaddirplus) != "READDIRPLUS" || ProcName(NumProcs) != "UNKNOWN" {
		t.Fatal("ProcName")
	}
	want := []string{"NULL", "MNT", "DUMP", "UMNT", "UMNTALL", "EXPORT"}
	for i, w := range want {
		if got := MountProcName(uint32(i)); got != w {
			t.Errorf("MountProcName(%d) = %q, want %q", i, got, w)
		}
	}
	if MountProcName(6) != "UNKNOWN" {
		t.Error("MountProcName(6)")
	}
}

func TestMountStat(t *testing.T) {
	cases := map[MountStat]string{
		MntOK: "MNT3_OK", MntErrPerm: "MNT3ERR_PERM", MntErrNoEnt: "MNT3ERR_NOENT", MntErrIO: "MNT3ERR_IO",
		MntErrAcces: "MNT3ERR_ACCES", MntErrNotDir: "MNT3ERR_NOTDIR", MntErrInval: "MNT3ERR_INVAL",
		MntErrNameTooLong: "MNT3ERR_NAMETOOLONG", MntErrNotSupp: "MNT3ERR_NOTSUPP",
		MntErrServerFault: "MNT3ERR_SERVERFAULT", 7: "mountstat3(7)",
	}
	for st, w := range cases {
		if st.String() != w {
			t.Errorf("%d.String() = %q, want %q", uint32(st), st.String(), w)
		}
	}
	var err error = MntErrAcces
	var ms MountStat
	if !errors.As(fmt.Errorf("mount: %w", err), &ms) || ms != MntErrAcces || err.Error() != "MNT3ERR_ACCES" {
		t.Fatal("MountStat as error")
	}
}

func TestBadDiscriminants(t *testing.T) {
	n := names{}
	cases := []struct {
		name string
		v    codec
		b    []byte
	}{
		{"createmode", new(CreateArgs), xdr.AppendUint32((&DirOpArgs{Dir: fh(1, 8), Name: n.name(1)}).Append(nil), 3)},
		{"stable_how", new(WriteArgs), xdr.AppendUint32(xdr.AppendUint32(xdr.AppendUint64(fh(1, 8).Append(nil), 0), 0), 3)},
		// status OK, no wcc attributes, count, committed
		{"committed", new(WriteRes), words(0, 0, 0, 5, 9)},
		{"time_how", new(SetattrArgs), append(fh(1, 4).Append(nil), 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 3)},
		{"bool", new(SetattrArgs), append(fh(1, 4).Append(nil), 0, 0, 0, 2)},
	}
	for _, c := range cases {
		d := xdr.NewDecoder(append(c.b, make([]byte, 64)...))
		c.v.Decode(d)
		if d.Err() == nil {
			t.Errorf("%s: bad discriminant decoded without error: %+v", c.name, c.v)
		}
	}
	// MKNOD of a type with no body decodes, for the server to answer BADTYPE.
	for _, typ := range []Ftype{TypeReg, TypeDir, TypeLnk, 0, 99} {
		var a MknodArgs
		b := xdr.AppendUint32((&DirOpArgs{Dir: fh(1, 8), Name: []byte("x")}).Append(nil), uint32(typ))
		decodeAll(t, &a, b)
		if a.Type != typ {
			t.Fatalf("type %d decoded as %d", typ, a.Type)
		}
	}
}

func words(w ...uint32) []byte {
	var b []byte
	for _, v := range w {
		b = xdr.AppendUint32(b, v)
	}
	return b
}

// hostile decodes b into a new value of v's type and reports whether it
// failed; it must never panic.
func hostile(t *testing.T, v codec, b []byte) bool {
	t.Helper()
	defer func() {
		if r := recover(); r != nil {
			t.Fatalf("decode of % x panicked: %v", b, r)
		}
	}()
	d := xdr.NewDecoder(b)
	newLike(v).Decode(d)
	return d.Err() != nil
}

func allocatedBytes(f func()) uint64 {
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	f()
	runtime.ReadMemStats(&after)
	return after.TotalAlloc - before.TotalAlloc
}

// TestHostileInput feeds every decoder truncated encodings and encodings
// with one word replaced by a huge length or count: each must fail (or, for a
// replaced word that is a plain number, may succeed) without panicking and
// without allocating more than a small multiple of its input.
func TestHostileInput(t *testing.T) {
	for _, s := range samples(names{}) {
		t.Run(s.name, func(t *testing.T) {
			b := s.v.Append(nil)
			var inputs int
			alloc := allocatedBytes(func() {
				for i := range len(b) {
					inputs += i
					if !hostile(t, s.v, b[:i]) {
						t.Fatalf("a %d-byte prefix of a %d-byte encoding decoded", i, len(b))
					}
				}
				m := bytes.Clone(b)
				for off := 0; off+4 <= len(b); off += 4 {
					for _, w := range []uint32{math.MaxUint32, 1 << 31, 1 << 24, 0x10000, MaxData + 1, 2} {
						xdr.PutUint32(m, off, w)
						hostile(t, s.v, m)
						inputs += len(m)
					}
					copy(m[off:off+4], b[off:off+4])
				}
			})
			// Decoded slices alias the input; what is allocated is the
			// decoded lists, a few times the input at most.
			if limit := uint64(8*inputs) + 1<<16; alloc > limit {
				t.Fatalf("hostile inputs (%d bytes in all) allocated %d bytes", inputs, alloc)
			}
		})
	}
}

// TestHostileLists checks the linked and counted lists: an unending list
// fails at the end of its input after as many entries as the bytes could
// hold, and huge counts fail at once.
func TestHostileLists(t *testing.T) {
	// A READDIR reply whose entries never end.
	head := AppendReaddirResHead(nil, &PostOpAttr{}, Verf{})
	b := head
	for len(b) < 1<<20 {
		b = AppendDirEntry(b, &DirEntry{Fileid: 1, Cookie: 2})
	}
	var rr ReaddirRes
	alloc := allocatedBytes(func() {
		d := xdr.NewDecoder(b)
		rr.Decode(d)
		if !errors.Is(d.Err(), xdr.ErrShort) {
			t.Errorf("unending READDIR list: err = %v", d.Err())
		}
	})
	if len(rr.Entries) != 0 {
		t.Errorf("failed decode left %d entries", len(rr.Entries))
	}
	// Counting before decoding: nothing is allocated for a list that
	// turns out to be bad.
	if alloc > 1<<12 {
		t.Errorf("1 MiB unending list allocated %d bytes", alloc)
	}
	// A good list is allocated once, at its exact size (twice that under
	// the race detector, whose build keeps slices.Grow's temporary).
	b = AppendDirListEnd(b, true)
	alloc = allocatedBytes(func() {
		d := xdr.NewDecoder(b)
		rr.Decode(d)
		if d.Err() != nil {
			t.Errorf("long READDIR list: %v", d.Err())
		}
	})
	if n := len(rr.Entries); n == 0 || alloc > 2*uint64(n)*uint64(unsafe.Sizeof(DirEntry{}))+1<<16 {
		t.Errorf("%d entries allocated %d bytes", n, alloc)
	}
	t.Logf("1 MiB READDIR reply: %d entries, %d bytes allocated", len(rr.Entries), alloc)

	// Entries claimed to follow with too few bytes left for one.
	for _, v := range []codec{new(ReaddirRes), new(ReaddirplusRes)} {
		in := xdr.AppendUint32(bytes.Clone(head), 1)
		in = append(in, make([]byte, 16)...)
		if !hostile(t, v, in) {
			t.Errorf("%T: truncated entry decoded", v)
		}
	}
	// Exports, groups and mounts that never end.
	var ex []byte
	for len(ex) < 1<<16 {
		ex = xdr.AppendBool(ex, true)
		ex = xdr.AppendOpaque(ex, []byte("/x"))
		ex = xdr.AppendBool(ex, true)
		ex = xdr.AppendOpaque(ex, []byte("g"))
	}
	if !hostile(t, new(ExportRes), ex) {
		t.Error("unending export list decoded")
	}
	var ml []byte
	for len(ml) < 1<<16 {
		ml = xdr.AppendBool(ml, true)
		ml = xdr.AppendOpaque(ml, []byte("h"))
		ml = xdr.AppendOpaque(ml, []byte("/d"))
	}
	if !hostile(t, new(DumpRes), ml) {
		t.Error("unending mount list decoded")
	}
	// Counted list: auth flavors.
	for _, n := range []uint32{math.MaxUint32, MaxAuthFlavors + 1, 1000} {
		in := xdr.AppendUint32(fh(1, 8).Append(xdr.AppendUint32(nil, 0)), n)
		in = append(in, make([]byte, 4*8)...)
		var r MntRes
		var failed bool
		if a := allocatedBytes(func() { d := xdr.NewDecoder(in); r.Decode(d); failed = d.Err() != nil }); a > 1<<12 {
			t.Errorf("flavor count %d allocated %d bytes", n, a)
		}
		if !failed {
			t.Errorf("flavor count %d decoded", n)
		}
	}
	// Huge opaque lengths in every opaque position of a list entry.
	for _, v := range []codec{new(ReaddirRes), new(ReaddirplusRes), new(DumpRes), new(ExportRes)} {
		in := xdr.AppendUint32(nil, 1)
		if _, ok := v.(*ReaddirRes); ok {
			in = xdr.AppendUint64(xdr.AppendUint32(bytes.Clone(head), 1), 5)
		}
		if _, ok := v.(*ReaddirplusRes); ok {
			in = xdr.AppendUint64(xdr.AppendUint32(bytes.Clone(head), 1), 5)
		}
		in = xdr.AppendUint32(in, math.MaxUint32)
		in = append(in, make([]byte, 64)...)
		if !hostile(t, v, in) {
			t.Errorf("%T: huge name length decoded", v)
		}
	}
}

// A name argument longer than NAME_MAX still decodes, so that the server
// can answer NAMETOOLONG; past any path's length it is refused.
func TestNameArgBound(t *testing.T) {
	for _, n := range []int{MaxNameLen + 1, MaxNameArg} {
		a := DirOpArgs{Dir: FH{1, 2, 3}, Name: bytes.Repeat([]byte{'x'}, n)}
		var got DirOpArgs
		decodeAll(t, &got, a.Append(nil))
		if len(got.Name) != n {
			t.Fatalf("a %d-byte name decoded as %d bytes", n, len(got.Name))
		}
	}
	a := DirOpArgs{Dir: FH{1}, Name: bytes.Repeat([]byte{'x'}, MaxNameArg+1)}
	d := xdr.NewDecoder(a.Append(nil))
	var got DirOpArgs
	if got.Decode(d); d.Err() == nil {
		t.Fatalf("a %d-byte name decoded", MaxNameArg+1)
	}
}
