package server

import (
	"bytes"
	"testing"

	"hushfs/internal/nfs3"
	"hushfs/internal/rpc"
	"hushfs/internal/xdr"
)

// rawArgs sends bytes as they are.
type rawArgs []byte

func (r rawArgs) Append(b []byte) []byte { return append(b, r...) }

// Every procedure answers a truncated or malformed argument body with
// GARBAGE_ARGS, and the server goes on serving, on the same connection.
func TestGarbageArgs(t *testing.T) {
	e := startEnv(t, false)
	c := e.root0()
	root := c.rootFH()
	f := c.mustCreate(root, "f", 0o644)
	where := nfs3.DirOpArgs{Dir: root, Name: []byte("name")}
	sattr := nfs3.Sattr{SetMode: true, Mode: 0o644, Mtime: nfs3.SetTime{How: nfs3.SetToClientTime}}
	samples := map[uint32]rpc.Marshaler{
		nfs3.ProcGetattr:     &nfs3.GetattrArgs{Obj: f},
		nfs3.ProcSetattr:     &nfs3.SetattrArgs{Obj: f, Attr: sattr, Guard: true},
		nfs3.ProcLookup:      &nfs3.LookupArgs{What: where},
		nfs3.ProcAccess:      &nfs3.AccessArgs{Obj: f, Access: 0x3f},
		nfs3.ProcReadlink:    &nfs3.ReadlinkArgs{Symlink: f},
		nfs3.ProcRead:        &nfs3.ReadArgs{File: f, Count: 10},
		nfs3.ProcWrite:       &nfs3.WriteArgs{File: f, Count: 5, Data: []byte("hello")},
		nfs3.ProcCreate:      &nfs3.CreateArgs{Where: where, Mode: nfs3.Guarded, Attr: sattr},
		nfs3.ProcMkdir:       &nfs3.MkdirArgs{Where: where, Attr: sattr},
		nfs3.ProcSymlink:     &nfs3.SymlinkArgs{Where: where, Attr: sattr, Data: []byte("target")},
		nfs3.ProcMknod:       &nfs3.MknodArgs{Where: where, Type: nfs3.TypeChr, Attr: sattr, Spec: nfs3.SpecData{Major: 1}},
		nfs3.ProcRemove:      &nfs3.RemoveArgs{Obj: where},
		nfs3.ProcRmdir:       &nfs3.RmdirArgs{Obj: where},
		nfs3.ProcRename:      &nfs3.RenameArgs{From: where, To: where},
		nfs3.ProcLink:        &nfs3.LinkArgs{File: f, Link: where},
		nfs3.ProcReaddir:     &nfs3.ReaddirArgs{Dir: root, Count: 4096},
		nfs3.ProcReaddirplus: &nfs3.ReaddirplusArgs{Dir: root, DirCount: 4096, MaxCount: 4096},
		nfs3.ProcFsstat:      &nfs3.FsstatArgs{Root: root},
		nfs3.ProcFsinfo:      &nfs3.FsinfoArgs{Root: root},
		nfs3.ProcPathconf:    &nfs3.PathconfArgs{Obj: root},
		nfs3.ProcCommit:      &nfs3.CommitArgs{File: f},
	}
	for proc := uint32(1); proc < nfs3.NumProcs; proc++ {
		full := samples[proc].Append(nil)
		bodies := [][]byte{nil, full[:1], full[:len(full)/2], full[:len(full)-1]}
		// A handle length far beyond the limit.
		bodies = append(bodies, xdr.AppendUint32(nil, 0xffffffff))
		for _, body := range bodies {
			err := c.callErr(nfs3.Program, nfs3.Version, proc, rawArgs(body), nil)
			if !isAcceptErr(err, rpc.GarbageArgs) {
				t.Fatalf("%s with %d of %d bytes: %v, want GARBAGE_ARGS", nfs3.ProcName(proc), len(body), len(full), err)
			}
		}
	}
	// Bad unions: an unknown createmode, stable_how, time_how.
	create := (&nfs3.CreateArgs{Where: where, Mode: nfs3.Guarded, Attr: nfs3.Sattr{}}).Append(nil)
	modeAt := len(create) - 4*7 // createmode, then 6 words of an empty sattr3
	bad := bytes.Clone(create)
	xdr.PutUint32(bad, modeAt, 7)
	if err := c.callErr(nfs3.Program, nfs3.Version, nfs3.ProcCreate, rawArgs(bad), nil); !isAcceptErr(err, rpc.GarbageArgs) {
		t.Fatalf("CREATE with createmode 7: %v", err)
	}
	// MOUNT procedures with arguments.
	for _, proc := range []uint32{nfs3.MountProcMnt, nfs3.MountProcUmnt} {
		for _, body := range [][]byte{nil, {0, 0}, xdr.AppendUint32(nil, 5000)} {
			if err := c.callErr(nfs3.MountProgram, nfs3.MountVersion, proc, rawArgs(body), nil); !isAcceptErr(err, rpc.GarbageArgs) {
				t.Fatalf("%s with %d bytes: %v", nfs3.MountProcName(proc), len(body), err)
			}
		}
	}
	// Still serving, on this connection and on a new one.
	if r := c.read(f, 0, 10); r.Status != nfs3.OK {
		t.Fatalf("READ after garbage: %v", r.Status)
	}
	e.root0().mustGetattr(root)
	if got := e.srv.Stats()[nfs3.ProcWrite]; got != 5 {
		t.Fatalf("garbage WRITE calls counted %d, want 5", got)
	}
}
