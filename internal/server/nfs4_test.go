package server

import (
	"bytes"
	"encoding/binary"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"golang.org/x/sys/unix"

	"hushfs/internal/nfs3"
	"hushfs/internal/nfs4"
	"hushfs/internal/rpc"
	"hushfs/internal/xdr"
)

// The walk from the pseudo-root to the export, one LOOKUP per component
// of the export's path, ends at the v3 root handle; the pseudo
// directories list only the next component, are read-only, and their
// handles mean nothing to NFSv3.
func TestV4PseudoWalk(t *testing.T) {
	e := startEnv(t, false)
	v := e.v4(0, 0)
	comps := strings.Split(strings.Trim(e.root, "/"), "/")

	res := v.must(putRoot(), getFH(), getattrOp(nfs4.AttrType, nfs4.AttrFsid),
		nfs4.Argop{Op: nfs4.OpReaddir, Args: &nfs4.ReaddirArgs{DirCount: 4096, MaxCount: 8192, AttrRequest: nfs4.NewBitmap(nfs4.AttrType)}})
	pseudoRoot := fhOf(res.Results[1].Res)
	pa := attrsOf(res.Results[2].Res)
	rd := res.Results[3].Res.(*nfs4.ReaddirRes)
	if pa.Type != nfs4.TypeDir || len(rd.Entries) != 1 || string(rd.Entries[0].Name) != comps[0] || !rd.EOF {
		t.Fatalf("pseudo-root: %+v, entries %+v", pa, rd.Entries)
	}

	walk := []nfs4.Argop{putRoot()}
	for _, c := range comps {
		walk = append(walk, lookupOp(c))
	}
	walk = append(walk, getFH(), getattrOp(nfs4.AttrType, nfs4.AttrFsid, nfs4.AttrFileid))
	res = v.must(walk...)
	exportFH := fhOf(res.Results[len(comps)+1].Res)
	ea := attrsOf(res.Results[len(comps)+2].Res)
	if !bytes.Equal(exportFH, e.srv.RootHandle()) {
		t.Fatalf("export handle over v4.1 %x, over v3 %x", exportFH, e.srv.RootHandle())
	}
	if ea.Fileid != lstat(t, e.root).Ino || ea.Fsid == pa.Fsid {
		t.Fatalf("export attributes %+v (pseudo fsid %+v)", ea, pa.Fsid)
	}

	// LOOKUPP leaves the export for the last pseudo directory, and from
	// there LOOKUP finds the export again.
	res = v.must(putFH(exportFH), nfs4.Argop{Op: nfs4.OpLookupP}, getFH(), lookupOp(comps[len(comps)-1]), getFH())
	if up := fhOf(res.Results[2].Res); bytes.Equal(up, exportFH) || bytes.Equal(up, pseudoRoot) && len(comps) > 1 {
		t.Fatalf("LOOKUPP of the export: %x", up)
	}
	if back := fhOf(res.Results[4].Res); !bytes.Equal(back, exportFH) {
		t.Fatalf("LOOKUP from the last pseudo directory: %x", back)
	}

	v.fails(nfs4.ErrNoEnt, 1, putRoot(), lookupOp("not-"+comps[0]))
	v.fails(nfs4.ErrROFS, 1, putRoot(), nfs4.Argop{Op: nfs4.OpCreate, Args: &nfs4.CreateArgs{Type: nfs4.TypeDir, Name: []byte("x")}})
	v.fails(nfs4.ErrNoEnt, 1, putRoot(), nfs4.Argop{Op: nfs4.OpLookupP})

	// A pseudo handle is no v3 handle.
	c3 := e.root0()
	if _, st := c3.getattr(nfs3.FH(pseudoRoot)); st == nfs3.OK {
		t.Fatal("v3 GETATTR of the pseudo-root's handle succeeded")
	}
}

// A handle got over v3 works over v4.1 and the other way round.
func TestV4SameHandlesAsV3(t *testing.T) {
	e := startEnv(t, false)
	os.WriteFile(filepath.Join(e.root, "f"), []byte("shared"), 0o644)
	os.Mkdir(filepath.Join(e.root, "d"), 0o755)
	c3 := e.root0()
	f3 := c3.mustLookup(c3.rootFH(), "f")
	v := e.v4(0, 0)

	res := v.must(putFH(f3), getattrOp(nfs4.AttrSize, nfs4.AttrFileid),
		nfs4.Argop{Op: nfs4.OpRead, Args: &nfs4.ReadArgs{Stateid: nfs4.AnonymousStateid, Count: 100}})
	if a := attrsOf(res.Results[1].Res); a.Size != 6 || a.Fileid != lstat(t, filepath.Join(e.root, "f")).Ino {
		t.Fatalf("v4 GETATTR of a v3 handle: %+v", a)
	}
	if r := res.Results[2].Res.(*nfs4.ReadRes); string(r.Data) != "shared" || !r.EOF {
		t.Fatalf("v4 READ of a v3 handle: %q %v", r.Data, r.EOF)
	}

	res = v.must(putFH(e.srv.RootHandle()), lookupOp("d"), getFH())
	d4 := fhOf(res.Results[2].Res)
	if d3 := c3.mustLookup(c3.rootFH(), "d"); !bytes.Equal(d3, d4) {
		t.Fatalf("handles of d: v3 %x, v4 %x", d3, d4)
	}
	if a := c3.mustGetattr(nfs3.FH(d4)); a.Type != nfs3.TypeDir {
		t.Fatalf("v3 GETATTR of a v4 handle: %+v", a)
	}
}

// OPEN creates, WRITE and READ go through its stateid (the current one),
// CLOSE ends it; a file open for reading is not written through its
// stateid, a closed stateid is refused, and a file removed while open
// stays readable through it until CLOSE.
func TestV4OpenReadWriteClose(t *testing.T) {
	e := startEnv(t, false)
	v := e.v4(0, 0)
	root := e.srv.RootHandle()
	data := []byte("written over NFSv4.1")
	res := v.must(putFH(root), v.openOp("f", nfs4.ShareAccessBoth, true), getFH(),
		nfs4.Argop{Op: nfs4.OpWrite, Args: &nfs4.WriteArgs{Stateid: nfs4.CurrentStateid, Stable: nfs4.FileSync, Data: data}},
		nfs4.Argop{Op: nfs4.OpRead, Args: &nfs4.ReadArgs{Stateid: nfs4.CurrentStateid, Count: 1000}},
		nfs4.Argop{Op: nfs4.OpClose, Args: &nfs4.CloseArgs{Stateid: nfs4.CurrentStateid}})
	open := res.Results[1].Res.(*nfs4.OpenRes)
	fh := fhOf(res.Results[2].Res)
	if w := res.Results[3].Res.(*nfs4.WriteRes); w.Count != uint32(len(data)) || w.Committed != nfs4.FileSync {
		t.Fatalf("WRITE: %+v", w)
	}
	if r := res.Results[4].Res.(*nfs4.ReadRes); !bytes.Equal(r.Data, data) || !r.EOF {
		t.Fatalf("READ: %q eof %v", r.Data, r.EOF)
	}
	if !open.CInfo.Atomic || open.CInfo.Before == open.CInfo.After || open.Delegation.Type != nfs4.DelegateNoneExt {
		t.Fatalf("OPEN: %+v", open)
	}
	if got, _ := os.ReadFile(filepath.Join(e.root, "f")); !bytes.Equal(got, data) {
		t.Fatalf("file on disk: %q", got)
	}
	if st := lstat(t, filepath.Join(e.root, "f")); st.Mode&0o7777 != 0o644 {
		t.Fatalf("mode %o", st.Mode&0o7777)
	}
	closed := open.Stateid
	v.fails(nfs4.ErrBadStateid, 1, putFH(fh), nfs4.Argop{Op: nfs4.OpRead, Args: &nfs4.ReadArgs{Stateid: closed, Count: 10}})

	// Open for reading only: no WRITE through it.
	res = v.must(putFH(root), v.openOp("f", nfs4.ShareAccessRead, false))
	ro := res.Results[1].Res.(*nfs4.OpenRes).Stateid
	v.fails(nfs4.ErrOpenMode, 1, putFH(fh), nfs4.Argop{Op: nfs4.OpWrite, Args: &nfs4.WriteArgs{Stateid: ro, Data: []byte("x")}})

	// Removed while open: still read through the stateid, gone after CLOSE.
	v.must(putFH(root), removeOp("f"))
	res = v.must(putFH(fh), nfs4.Argop{Op: nfs4.OpRead, Args: &nfs4.ReadArgs{Stateid: ro, Count: 100}},
		nfs4.Argop{Op: nfs4.OpClose, Args: &nfs4.CloseArgs{Stateid: ro}})
	if r := res.Results[1].Res.(*nfs4.ReadRes); !bytes.Equal(r.Data, data) {
		t.Fatalf("READ of the removed open file: %q", r.Data)
	}
	v.fails(nfs4.ErrStale, 0, putFH(fh))
}

// changeInfoOf returns a change_info4 of a result.
func changeInfoOf(r nfs4.OpRes) nfs4.ChangeInfo {
	switch r := r.(type) {
	case *nfs4.CreateRes:
		return r.CInfo
	case *nfs4.ChangeRes:
		return r.CInfo
	case *nfs4.OpenRes:
		return r.CInfo
	}
	panic("no change_info4")
}

// CREATE, REMOVE, RENAME and LINK answer change_info4 atomic, with before
// and after the directory's change attribute around exactly this change.
func TestV4ChangeInfoAtomic(t *testing.T) {
	e := startEnv(t, false)
	os.Mkdir(filepath.Join(e.root, "a"), 0o755)
	os.Mkdir(filepath.Join(e.root, "b"), 0o755)
	v := e.v4(0, 0)
	res := v.must(putFH(e.srv.RootHandle()), lookupOp("a"), getFH(), putFH(e.srv.RootHandle()), lookupOp("b"), getFH())
	a, b := fhOf(res.Results[2].Res), fhOf(res.Results[5].Res)
	change := func(fh nfs4.FH) uint64 {
		return attrsOf(v.must(putFH(fh), getattrOp(nfs4.AttrChange)).Results[1].Res).Change
	}
	check := func(what string, ci nfs4.ChangeInfo, before, after uint64) {
		t.Helper()
		if !ci.Atomic || ci.Before != before || ci.After != after || before == after {
			t.Fatalf("%s: change_info %+v, directory's change %d before and %d after", what, ci, before, after)
		}
	}

	before := change(a)
	res = v.must(putFH(a), nfs4.Argop{Op: nfs4.OpCreate, Args: &nfs4.CreateArgs{Type: nfs4.TypeDir, Name: []byte("sub")}})
	check("CREATE", changeInfoOf(res.Results[1].Res), before, change(a))

	before = change(a)
	res = v.must(putFH(a), v.openOp("f", nfs4.ShareAccessWrite, true), nfs4.Argop{Op: nfs4.OpClose, Args: &nfs4.CloseArgs{Stateid: nfs4.CurrentStateid}})
	check("OPEN create", changeInfoOf(res.Results[1].Res), before, change(a))

	ba, bb := change(a), change(b)
	res = v.must(putFH(a), saveFH(), putFH(b), nfs4.Argop{Op: nfs4.OpRename, Args: &nfs4.RenameArgs{OldName: []byte("f"), NewName: []byte("g")}})
	rn := res.Results[3].Res.(*nfs4.RenameRes)
	check("RENAME source", rn.SourceCInfo, ba, change(a))
	check("RENAME target", rn.TargetCInfo, bb, change(b))

	before = change(a)
	res = v.must(putFH(b), lookupOp("g"), saveFH(), putFH(a), nfs4.Argop{Op: nfs4.OpLink, Args: &nfs4.LinkArgs{NewName: []byte("h")}})
	check("LINK", changeInfoOf(res.Results[4].Res), before, change(a))

	before = change(b)
	res = v.must(putFH(b), removeOp("g"))
	check("REMOVE", changeInfoOf(res.Results[1].Res), before, change(b))

	// Concurrent changes of one directory from several clients: each
	// reply's before and after enclose its change alone, so the pairs
	// chain up, every value once as a before and once as an after.
	const clients, each = 4, 25
	var mu sync.Mutex
	var pairs []nfs4.ChangeInfo
	var wg sync.WaitGroup
	for i := range clients {
		c := e.v4(0, 0)
		wg.Add(1)
		go func() {
			defer wg.Done()
			for j := range each {
				name := []byte{'c', byte('a' + i), byte('a' + j)}
				r := c.do(putFH(a), nfs4.Argop{Op: nfs4.OpCreate, Args: &nfs4.CreateArgs{Type: nfs4.TypeDir, Name: name}})
				if r.Status != nfs4.OK {
					t.Errorf("CREATE %s: %v", name, resultsOf(r))
					return
				}
				mu.Lock()
				pairs = append(pairs, changeInfoOf(r.Results[1].Res))
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	befores, afters := map[uint64]bool{}, map[uint64]bool{}
	for _, p := range pairs {
		if !p.Atomic || p.Before >= p.After || befores[p.Before] || afters[p.After] {
			t.Fatalf("concurrent CREATE: %+v overlaps another change", p)
		}
		befores[p.Before], afters[p.After] = true, true
	}
	chained := 0
	for x := range afters {
		if befores[x] {
			chained++
		}
	}
	if chained != len(pairs)-1 {
		t.Fatalf("concurrent CREATEs: %d of %d changes follow another directly", chained, len(pairs))
	}
}

// A request retransmitted on its slot with the same sequence id gets the
// first reply's bytes when it asked them cached, and nothing runs again;
// uncached, it is RETRY_UNCACHED_REP; out of order, SEQ_MISORDERED.
func TestV4SlotReplay(t *testing.T) {
	e := startEnv(t, false)
	p := filepath.Join(e.root, "x")
	os.WriteFile(p, nil, 0o644)
	v := e.v4(0, 0)
	args := &nfs4.CompoundArgs{Tag: []byte("t"), MinorVersion: 1,
		Ops: []nfs4.Argop{v.seqOp(true), putFH(e.srv.RootHandle()), removeOp("x")}}
	var first, again rawReply
	if err := v.sendRaw(args, &first); err != nil {
		t.Fatal(err)
	}
	os.WriteFile(p, nil, 0o644) // a REMOVE run again would remove this one
	if err := v.sendRaw(args, &again); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(first.b, again.b) {
		t.Fatalf("replay differs:\n%x\n%x", first.b, again.b)
	}
	if _, err := os.Lstat(p); err != nil {
		t.Fatalf("the retransmitted REMOVE ran again: %v", err)
	}
	var res nfs4.CompoundRes
	if err := v.sendRaw(args, &res); err != nil || res.Status != nfs4.OK || len(res.Results) != 3 {
		t.Fatalf("replayed reply: %v %v", err, resultsOf(&res))
	}

	// Not cached: the retransmission is told so.
	args.Ops = []nfs4.Argop{v.seqOp(false), putFH(e.srv.RootHandle()), getattrOp(nfs4.AttrChange)}
	v.send(args.Ops...)
	if r := v.send(args.Ops...); r.Status != nfs4.ErrRetryUncachedRep {
		t.Fatalf("retransmission of an uncached request: %v", resultsOf(r))
	}

	// A sequence id skipped, and a session that does not exist.
	op := v.seqOp(false)
	op.Args.(*nfs4.SequenceArgs).SequenceID++
	if r := v.send(op); r.Status != nfs4.ErrSeqMisordered {
		t.Fatalf("skipped sequence id: %v", resultsOf(r))
	}
	v.seq--
	if r := v.send(nfs4.Argop{Op: nfs4.OpSequence, Args: &nfs4.SequenceArgs{SequenceID: 1}}); r.Status != nfs4.ErrBadSession {
		t.Fatalf("unknown session: %v", resultsOf(r))
	}
	v.must(putRoot(), getattrOp()) // the slot goes on from where it was
}

// What is not built answers NOTSUPP; what does not exist OP_ILLEGAL;
// the operations of NFSv4.0 alone NOTSUPP; another minor version
// MINOR_VERS_MISMATCH; an operation outside a session OP_NOT_IN_SESSION.
func TestV4NotSupported(t *testing.T) {
	e := startEnv(t, false)
	v := e.v4(0, 0)
	for _, op := range []nfs4.Opnum{nfs4.OpOpenattr, nfs4.OpLayoutGet, nfs4.OpLayoutCommit,
		nfs4.OpLayoutReturn, nfs4.OpGetDeviceInfo, nfs4.OpGetDeviceList, nfs4.OpWantDelegation, nfs4.OpSetSSV,
		nfs4.OpDelegPurge} {
		args := nfs4.NewArgs(op)
		if w, ok := args.(*nfs4.WantDelegationArgs); ok {
			w.Claim.Type = nfs4.ClaimFH
		}
		v.fails(nfs4.ErrNotSupp, 1, putFH(e.srv.RootHandle()), nfs4.Argop{Op: op, Args: args})
	}
	// NFSv4.0's operations (whose results the codec does not decode).
	for _, op := range []nfs4.Opnum{nfs4.OpSetClientID, nfs4.OpRenew, nfs4.OpOpenConfirm, nfs4.OpReleaseLockOwner} {
		var raw rawReply
		args := &nfs4.CompoundArgs{MinorVersion: 1, Ops: []nfs4.Argop{v.seqOp(false), putRoot(), {Op: op}}}
		if err := v.sendRaw(args, &raw); err != nil {
			t.Fatal(err)
		}
		var d xdr.Decoder
		d.Reset(raw.b)
		st, _, n := nfs4.Status(d.Uint32()), d.Opaque(100), d.Uint32()
		tail := raw.b[len(raw.b)-8:]
		if st != nfs4.ErrNotSupp || n != 3 || binary.BigEndian.Uint32(tail) != uint32(op) || nfs4.Status(binary.BigEndian.Uint32(tail[4:])) != nfs4.ErrNotSupp {
			t.Fatalf("%v: %v with %d results, last %x", op, st, n, tail)
		}
	}
	r := v.do(nfs4.Argop{Op: 9999})
	if r.Status != nfs4.ErrOpIllegal || len(r.Results) != 1 || r.Results[0].Op != nfs4.OpIllegal {
		t.Fatalf("operation 9999: %v", resultsOf(r))
	}
	var res nfs4.CompoundRes
	if err := v.sendRaw(&nfs4.CompoundArgs{MinorVersion: 2, Ops: []nfs4.Argop{putRoot()}}, &res); err != nil ||
		res.Status != nfs4.ErrMinorVersMismatch || len(res.Results) != 0 {
		t.Fatalf("minor version 2: %v %v", err, resultsOf(&res))
	}
	if r := v.send(putRoot(), getFH()); r.Status != nfs4.ErrOpNotInSession || len(r.Results) != 1 {
		t.Fatalf("PUTROOTFH outside a session: %v", resultsOf(r))
	}
}

// The v3 security rules hold over v4.1: squashed root, a read-only export,
// the caller's permissions.
func TestV4Security(t *testing.T) {
	e := squashEnv(t, func(c *Config) { c.Squash = Config{}.Squash })
	root := e.srv.RootHandle()
	rv := e.v4(0, 0)
	rv.fails(nfs4.ErrAccess, 1, putFH(root), rv.openOp("private", nfs4.ShareAccessRead, false))
	rv.must(putFH(root), lookupOp("pub"), rv.openOp("byroot", nfs4.ShareAccessWrite, true),
		nfs4.Argop{Op: nfs4.OpClose, Args: &nfs4.CloseArgs{Stateid: nfs4.CurrentStateid}})
	if st := lstat(t, filepath.Join(e.root, "pub", "byroot")); st.Uid != DefaultAnonID || st.Gid != DefaultAnonID {
		t.Fatalf("file created by squashed root owned by %d:%d", st.Uid, st.Gid)
	}
	u := e.v4(1000, 1000)
	res := u.must(putFH(root), u.openOp("private", nfs4.ShareAccessRead, false),
		nfs4.Argop{Op: nfs4.OpRead, Args: &nfs4.ReadArgs{Stateid: nfs4.CurrentStateid, Count: 100}})
	if r := res.Results[2].Res.(*nfs4.ReadRes); string(r.Data) != "uid 1000's" {
		t.Fatalf("owner reading its file: %q", r.Data)
	}
	// The anonymous stateid does not get around permissions.
	rv.fails(nfs4.ErrAccess, 2, putFH(root), lookupOp("private"),
		nfs4.Argop{Op: nfs4.OpRead, Args: &nfs4.ReadArgs{Stateid: nfs4.AnonymousStateid, Count: 100}})

	ro := startEnv(t, true)
	os.WriteFile(filepath.Join(ro.root, "f"), []byte("x"), 0o666)
	v := ro.v4(0, 0)
	rr := ro.srv.RootHandle()
	v.fails(nfs4.ErrROFS, 1, putFH(rr), v.openOp("f", nfs4.ShareAccessWrite, false))
	v.fails(nfs4.ErrROFS, 1, putFH(rr), v.openOp("new", nfs4.ShareAccessWrite, true))
	v.fails(nfs4.ErrROFS, 1, putFH(rr), removeOp("f"))
	v.fails(nfs4.ErrROFS, 2, putFH(rr), lookupOp("f"), nfs4.Argop{Op: nfs4.OpSetattr,
		Args: &nfs4.SetattrArgs{Attrs: nfs4.Fattr{Mask: nfs4.NewBitmap(nfs4.AttrMode), Mode: 0o600}}})
	var st unix.Stat_t
	if unix.Lstat(filepath.Join(ro.root, "new"), &st) == nil {
		t.Fatal("created on a read-only export")
	}

	// A client outside the allowed networks is refused before anything
	// runs, as over v3.
	denied := startEnvTuned(t, false, func(c *Config) { c.Allow = []netip.Prefix{netip.MustParsePrefix("127.0.0.2/32")} })
	dv := &v4client{t: t, c: denied.root0().c, cred: rpc.SysCred(0, 0, nil, "t")}
	var res4 nfs4.CompoundRes
	if err := dv.sendRaw(&nfs4.CompoundArgs{MinorVersion: 1, Ops: []nfs4.Argop{putRoot()}}, &res4); !isTooWeak(err) {
		t.Fatalf("COMPOUND from a client not allowed: %v", err)
	}
}
