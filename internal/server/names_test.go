package server

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"hushfs/internal/nfs3"
	"hushfs/internal/rpc"
	"hushfs/internal/xdr"
)

// statusRes decodes only the nfsstat3 every NFSv3 result starts with.
type statusRes struct{ status nfs3.Status }

func (r *statusRes) Decode(d *xdr.Decoder) {
	r.status = nfs3.Status(d.Uint32())
	d.Rest()
}

// Every procedure that takes a name answers one longer than the export's
// NAME_MAX with NAMETOOLONG (ENAMETOOLONG for the application), whether a
// byte too long or far too long; only a name longer than any path is
// refused as garbage by the decoder.
func TestNameTooLong(t *testing.T) {
	e := startEnv(t, false)
	c := e.root0()
	root := c.rootFH()
	d := c.mustMkdir(root, "d", 0o755)
	f := c.mustCreate(d, "f", 0o644)
	c.mustMkdir(d, "sub", 0o755)
	max := strings.Repeat("m", nfs3.MaxNameLen)
	// The longest name works, in every procedure that makes one.
	if _, st := c.create(d, max, 0o644); st != nfs3.OK {
		t.Fatalf("CREATE of a %d-byte name: %v", len(max), st)
	}
	wantStatus(t, "REMOVE of the longest name", c.remove(d, max), nfs3.OK)

	sattr := nfs3.Sattr{SetMode: true, Mode: 0o644}
	at := func(name string) nfs3.DirOpArgs { return nfs3.DirOpArgs{Dir: d, Name: []byte(name)} }
	for _, n := range []int{nfs3.MaxNameLen + 1, 1000, nfs3.MaxNameArg} {
		long := strings.Repeat("x", n)
		calls := []struct {
			proc uint32
			args rpc.Marshaler
		}{
			{nfs3.ProcLookup, &nfs3.LookupArgs{What: at(long)}},
			{nfs3.ProcCreate, &nfs3.CreateArgs{Where: at(long), Mode: nfs3.Unchecked, Attr: sattr}},
			{nfs3.ProcMkdir, &nfs3.MkdirArgs{Where: at(long), Attr: sattr}},
			{nfs3.ProcSymlink, &nfs3.SymlinkArgs{Where: at(long), Attr: sattr, Data: []byte("f")}},
			{nfs3.ProcMknod, &nfs3.MknodArgs{Where: at(long), Type: nfs3.TypeFifo, Attr: sattr}},
			{nfs3.ProcRemove, &nfs3.RemoveArgs{Obj: at(long)}},
			{nfs3.ProcRmdir, &nfs3.RmdirArgs{Obj: at(long)}},
			{nfs3.ProcRename, &nfs3.RenameArgs{From: at("f"), To: at(long)}},
			{nfs3.ProcRename, &nfs3.RenameArgs{From: at(long), To: at("g")}},
			{nfs3.ProcLink, &nfs3.LinkArgs{File: f, Link: at(long)}},
		}
		for _, call := range calls {
			var r statusRes
			if err := c.callErr(nfs3.Program, nfs3.Version, call.proc, call.args, &r); err != nil {
				t.Fatalf("%s of a %d-byte name: %v, want NAMETOOLONG", nfs3.ProcName(call.proc), n, err)
			}
			if r.status != nfs3.ErrNameTooLong {
				t.Errorf("%s of a %d-byte name: %v, want NAMETOOLONG", nfs3.ProcName(call.proc), n, r.status)
			}
		}
	}
	// Nothing was made or moved.
	ents, err := os.ReadDir(filepath.Join(e.root, "d"))
	if err != nil || len(ents) != 2 {
		t.Fatalf("directory holds %d entries (%v), want f and sub", len(ents), err)
	}
	// Past any path length the arguments are garbage, and the connection
	// goes on serving.
	huge := strings.Repeat("x", nfs3.MaxNameArg+1)
	err = c.callErr(nfs3.Program, nfs3.Version, nfs3.ProcLookup, &nfs3.LookupArgs{What: at(huge)}, &statusRes{})
	if !isAcceptErr(err, rpc.GarbageArgs) {
		t.Fatalf("LOOKUP of a %d-byte name: %v, want GARBAGE_ARGS", len(huge), err)
	}
	c.mustLookup(d, "f")
	// PATHCONF reports the limit the server enforces.
	var pc nfs3.PathconfRes
	c.call(nfs3.ProcPathconf, &nfs3.PathconfArgs{Obj: d}, &pc)
	if pc.Status != nfs3.OK || pc.NameMax != nfs3.MaxNameLen {
		t.Fatalf("PATHCONF: %v name_max %d, want %d", pc.Status, pc.NameMax, nfs3.MaxNameLen)
	}
}
