package rpc

import (
	"bytes"
	"testing"

	"hushfs/internal/xdr"
)

// TestSysCreds: one encoding per identity, each the identity's own.
func TestSysCreds(t *testing.T) {
	s := SysCreds{Machine: "m"}
	a := s.Get(1000, 100, []uint32{4, 5})
	if b := s.Get(1000, 100, []uint32{4, 5}); !bytes.Equal(a.Body, b.Body) {
		t.Error("the same identity encoded twice differently")
	}
	for _, other := range []OpaqueAuth{s.Get(1000, 100, []uint32{4}), s.Get(1001, 100, []uint32{4, 5}), s.Get(1000, 101, []uint32{4, 5})} {
		if bytes.Equal(a.Body, other.Body) {
			t.Error("two identities share one credential")
		}
	}
	var p AuthSysParms
	d := xdr.NewDecoder(a.Body)
	p.Decode(d)
	if d.Err() != nil || p.UID != 1000 || p.GID != 100 || len(p.GIDs) != 2 || p.Machine != "m" {
		t.Errorf("decoded %+v", p)
	}
}
