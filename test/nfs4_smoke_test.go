package test

import (
	"bytes"
	"context"
	"crypto/rand"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"hushfs/internal/nfs4"
	"hushfs/test/harness"
)

// v4session is a minimal NFSv4.1 session over our RPC client: one slot;
// in the session, each COMPOUND starts with SEQUENCE on it with the next
// sequence id.
type v4session struct {
	t         *testing.T
	call      func(args *nfs4.CompoundArgs, res *nfs4.CompoundRes) error
	inSession bool
	id        nfs4.SessionID
	seq       uint32 // the last sequence id of slot 0
}

// compound sends ops (after SEQUENCE in the session) and returns the
// reply; it fails the test if the call fails or the reply does not decode.
func (s *v4session) compound(ops ...nfs4.Argop) *nfs4.CompoundRes {
	s.t.Helper()
	if s.inSession {
		s.seq++
		seq := &nfs4.SequenceArgs{SessionID: s.id, SequenceID: s.seq}
		ops = append([]nfs4.Argop{{Op: nfs4.OpSequence, Args: seq}}, ops...)
	}
	var res nfs4.CompoundRes
	if err := s.call(&nfs4.CompoundArgs{Tag: []byte("hushfs smoke"), MinorVersion: 1, Ops: ops}, &res); err != nil {
		s.t.Fatalf("COMPOUND %v: %v", opNames(ops), err)
	}
	if string(res.Tag) != "hushfs smoke" {
		s.t.Fatalf("reply tag %q", res.Tag)
	}
	return &res
}

func opNames(ops []nfs4.Argop) []string {
	var n []string
	for _, o := range ops {
		n = append(n, o.Op.String())
	}
	return n
}

// result returns the i-th result after SEQUENCE, failing the test unless
// the reply holds it with status want.
func (s *v4session) result(res *nfs4.CompoundRes, i int, op nfs4.Opnum, want nfs4.Status) nfs4.OpRes {
	s.t.Helper()
	if s.inSession {
		i++
	}
	if i >= len(res.Results) || res.Results[i].Op != op || res.Results[i].Res.OpStatus() != want {
		var got []string
		for _, r := range res.Results {
			got = append(got, fmt.Sprintf("%v:%v", r.Op, r.Res.OpStatus()))
		}
		s.t.Fatalf("result %d: want %v %v, reply %v %v", i, op, want, res.Status, got)
	}
	return res.Results[i].Res
}

// TestNFSv4Smoke speaks NFSv4.1 to nfs-ganesha with the nfs4 codec over our
// RPC client — NULL, EXCHANGE_ID, CREATE_SESSION, RECLAIM_COMPLETE, the
// root's attributes, a walk to the export, READDIR, OPEN+READ+CLOSE with
// the current stateid, an error, an operation that does not exist,
// DESTROY_SESSION and DESTROY_CLIENTID — and checks every answer against
// the exported directory as the local file system sees it.
func TestNFSv4Smoke(t *testing.T) {
	g := harness.StartGanesha(t, harness.GaneshaOptions{NFSv4: true})
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	content := []byte("hello over NFSv4.1\n")
	if err := os.WriteFile(filepath.Join(g.ExportDir, "hello.txt"), content, 0o640); err != nil {
		t.Fatal(err)
	}
	if err := os.Mkdir(filepath.Join(g.ExportDir, "sub"), 0o755); err != nil {
		t.Fatal(err)
	}
	c := newClient(t, ctx, g.Dial)
	if err := c.Call(ctx, nfs4.Program, nfs4.Version, nfs4.ProcNull, rootCred, nil, nil); err != nil {
		t.Fatalf("NULL: %v", err)
	}
	s := &v4session{t: t, call: func(a *nfs4.CompoundArgs, r *nfs4.CompoundRes) error {
		return c.Call(ctx, nfs4.Program, nfs4.Version, nfs4.ProcCompound, rootCred, a, r)
	}}

	var verf nfs4.Verifier
	rand.Read(verf[:])
	owner := fmt.Appendf(nil, "hushfs smoke %d", os.Getpid())
	res := s.compound(nfs4.Argop{Op: nfs4.OpExchangeID, Args: &nfs4.ExchangeIDArgs{
		ClientOwner: nfs4.ClientOwner{Verifier: verf, OwnerID: owner}, StateProtect: nfs4.StateProtectArgs{How: nfs4.SP4None},
		HasImplID: true, ImplID: nfs4.ImplID{Domain: []byte("hushfs"), Name: []byte("smoke test")}}})
	eid := s.result(res, 0, nfs4.OpExchangeID, nfs4.OK).(*nfs4.ExchangeIDRes)
	if eid.Flags&nfs4.ExchgIDFlagConfirmedR != 0 || eid.StateProtect.How != nfs4.SP4None || len(eid.ServerOwner.MajorID) == 0 {
		t.Fatalf("EXCHANGE_ID: %+v", eid)
	}
	t.Logf("ganesha: clientid %#x, server %q %q", eid.ClientID, eid.ImplID.Domain, eid.ImplID.Name)

	fore := nfs4.ChannelAttrs{MaxRequestSize: 1 << 20, MaxResponseSize: 1 << 20, MaxResponseSizeCached: 4096, MaxOperations: 8, MaxRequests: 4}
	back := nfs4.ChannelAttrs{MaxRequestSize: 4096, MaxResponseSize: 4096, MaxOperations: 2, MaxRequests: 1}
	res = s.compound(nfs4.Argop{Op: nfs4.OpCreateSession, Args: &nfs4.CreateSessionArgs{ClientID: eid.ClientID,
		Sequence: eid.SequenceID, Fore: fore, Back: back, CBProgram: 0x40000000,
		SecParms: []nfs4.CallbackSecParms{{Flavor: nfs4.AuthNone}}}})
	cs := s.result(res, 0, nfs4.OpCreateSession, nfs4.OK).(*nfs4.CreateSessionRes)
	if cs.Sequence != eid.SequenceID || cs.Fore.MaxOperations == 0 || cs.Fore.MaxRequests == 0 {
		t.Fatalf("CREATE_SESSION: %+v", cs)
	}
	s.id, s.inSession = cs.SessionID, true

	res = s.compound(nfs4.Argop{Op: nfs4.OpReclaimComplete, Args: &nfs4.ReclaimCompleteArgs{}})
	s.result(res, 0, nfs4.OpReclaimComplete, nfs4.OK)
	seqRes := res.Results[0].Res.(*nfs4.SequenceRes)
	if seqRes.SessionID != s.id || seqRes.SequenceID != s.seq || seqRes.SlotID != 0 {
		t.Fatalf("SEQUENCE answered %+v", seqRes)
	}

	attrs := nfs4.NewBitmap(nfs4.AttrSupportedAttrs, nfs4.AttrType, nfs4.AttrFHExpireType, nfs4.AttrChange,
		nfs4.AttrSize, nfs4.AttrFsid, nfs4.AttrLeaseTime, nfs4.AttrFileid, nfs4.AttrMode, nfs4.AttrNumLinks,
		nfs4.AttrOwner, nfs4.AttrOwnerGroup, nfs4.AttrTimeModify, nfs4.AttrMaxRead, nfs4.AttrMaxWrite,
		nfs4.AttrFsLayoutTypes, nfs4.AttrSuppattrExclcreat, nfs4.AttrMountedOnFileid)
	res = s.compound(nfs4.Argop{Op: nfs4.OpPutRootFH}, nfs4.Argop{Op: nfs4.OpGetFH},
		nfs4.Argop{Op: nfs4.OpGetattr, Args: &nfs4.GetattrArgs{AttrRequest: attrs}})
	root := s.result(res, 2, nfs4.OpGetattr, nfs4.OK).(*nfs4.GetattrRes).Attrs
	if root.Type != nfs4.TypeDir || root.LeaseTime == 0 || !root.SupportedAttrs.Has(nfs4.AttrMode) || root.MaxRead == 0 {
		t.Fatalf("root attributes: %+v", root)
	}
	t.Logf("ganesha: pseudo root supports %v, lease %d s, fs_layout_types %v", root.SupportedAttrs, root.LeaseTime, root.FsLayoutTypes)

	// The export, one LOOKUP per component of its pseudo path.
	walk := []nfs4.Argop{{Op: nfs4.OpPutRootFH}}
	for _, name := range strings.Split(strings.Trim(g.ExportPath, "/"), "/") {
		walk = append(walk, nfs4.Argop{Op: nfs4.OpLookup, Args: &nfs4.LookupArgs{Name: []byte(name)}})
	}
	n := len(walk)
	walk = append(walk, nfs4.Argop{Op: nfs4.OpGetFH}, nfs4.Argop{Op: nfs4.OpGetattr, Args: &nfs4.GetattrArgs{AttrRequest: attrs}})
	res = s.compound(walk...)
	exportFH := append(nfs4.FH(nil), s.result(res, n, nfs4.OpGetFH, nfs4.OK).(*nfs4.GetFHRes).FH...)
	export := s.result(res, n+1, nfs4.OpGetattr, nfs4.OK).(*nfs4.GetattrRes).Attrs
	checkV4Attrs(t, g.ExportPath, &export, g.ExportDir)

	// READDIR: the names and attributes of the directory.
	res = s.compound(nfs4.Argop{Op: nfs4.OpPutFH, Args: &nfs4.PutFHArgs{FH: exportFH}},
		nfs4.Argop{Op: nfs4.OpReaddir, Args: &nfs4.ReaddirArgs{DirCount: 8192, MaxCount: 32768,
			AttrRequest: nfs4.NewBitmap(nfs4.AttrType, nfs4.AttrSize, nfs4.AttrFileid, nfs4.AttrMode, nfs4.AttrNumLinks, nfs4.AttrOwner, nfs4.AttrTimeModify)}})
	rd := s.result(res, 1, nfs4.OpReaddir, nfs4.OK).(*nfs4.ReaddirRes)
	ents, err := os.ReadDir(g.ExportDir)
	if err != nil {
		t.Fatal(err)
	}
	var want, got []string
	for _, e := range ents {
		want = append(want, e.Name())
	}
	for i := range rd.Entries {
		e := &rd.Entries[i]
		got = append(got, string(e.Name))
		checkV4Attrs(t, string(e.Name), &e.Attrs, filepath.Join(g.ExportDir, string(e.Name)))
	}
	slices.Sort(got)
	if !rd.EOF || !slices.Equal(got, want) {
		t.Fatalf("READDIR: %q eof %v, directory holds %q", got, rd.EOF, want)
	}

	// OPEN, READ and CLOSE in one COMPOUND, the READ and the CLOSE with
	// the current stateid (RFC 8881 §16.2.3.1.2).
	res = s.compound(nfs4.Argop{Op: nfs4.OpPutFH, Args: &nfs4.PutFHArgs{FH: exportFH}},
		nfs4.Argop{Op: nfs4.OpOpen, Args: &nfs4.OpenArgs{ShareAccess: nfs4.ShareAccessRead | nfs4.ShareAccessWantNoDeleg,
			ShareDeny: nfs4.ShareDenyNone, Owner: nfs4.StateOwner{ClientID: eid.ClientID, Owner: []byte("smoke open owner")},
			OpenType: nfs4.OpenNoCreate, Claim: nfs4.OpenClaim{Type: nfs4.ClaimNull, File: []byte("hello.txt")}}},
		nfs4.Argop{Op: nfs4.OpRead, Args: &nfs4.ReadArgs{Stateid: nfs4.CurrentStateid, Count: 4096}},
		nfs4.Argop{Op: nfs4.OpClose, Args: &nfs4.CloseArgs{Stateid: nfs4.CurrentStateid}})
	open := s.result(res, 1, nfs4.OpOpen, nfs4.OK).(*nfs4.OpenRes)
	read := s.result(res, 2, nfs4.OpRead, nfs4.OK).(*nfs4.ReadRes)
	s.result(res, 3, nfs4.OpClose, nfs4.OK)
	if !bytes.Equal(read.Data, content) || !read.EOF || open.Delegation.Type == nfs4.DelegateRead || open.Delegation.Type == nfs4.DelegateWrite {
		t.Fatalf("OPEN+READ: %+v, data %q eof %v", open, read.Data, read.EOF)
	}

	// A name that is not there: the COMPOUND stops at LOOKUP with NOENT.
	res = s.compound(nfs4.Argop{Op: nfs4.OpPutFH, Args: &nfs4.PutFHArgs{FH: exportFH}},
		nfs4.Argop{Op: nfs4.OpLookup, Args: &nfs4.LookupArgs{Name: []byte("absent")}}, nfs4.Argop{Op: nfs4.OpGetFH})
	s.result(res, 1, nfs4.OpLookup, nfs4.ErrNoEnt)
	if res.Status != nfs4.ErrNoEnt || len(res.Results) != 3 || res.Status.Errno() != syscall.ENOENT {
		t.Fatalf("LOOKUP absent: %v with %d results", res.Status, len(res.Results))
	}

	// An operation number that does not exist: OP_ILLEGAL, in a result
	// named ILLEGAL.
	res = s.compound(nfs4.Argop{Op: 9999})
	s.result(res, 0, nfs4.OpIllegal, nfs4.ErrOpIllegal)

	s.inSession = false // DESTROY_SESSION and DESTROY_CLIENTID may come alone
	res = s.compound(nfs4.Argop{Op: nfs4.OpDestroySession, Args: &nfs4.DestroySessionArgs{SessionID: s.id}})
	s.result(res, 0, nfs4.OpDestroySession, nfs4.OK)
	res = s.compound(nfs4.Argop{Op: nfs4.OpDestroyClientID, Args: &nfs4.DestroyClientIDArgs{ClientID: eid.ClientID}})
	s.result(res, 0, nfs4.OpDestroyClientID, nfs4.OK)
}

// checkV4Attrs compares attributes from the server with the local file.
func checkV4Attrs(t *testing.T, what string, a *nfs4.Fattr, path string) {
	t.Helper()
	var st syscall.Stat_t
	if err := syscall.Lstat(path, &st); err != nil {
		t.Fatal(err)
	}
	typ := nfs4.TypeReg
	if st.Mode&syscall.S_IFMT == syscall.S_IFDIR {
		typ = nfs4.TypeDir
	}
	if a.Mask.Has(nfs4.AttrType) && a.Type != typ ||
		a.Mask.Has(nfs4.AttrFileid) && a.Fileid != st.Ino ||
		a.Mask.Has(nfs4.AttrMode) && a.Mode != st.Mode&0o7777 ||
		a.Mask.Has(nfs4.AttrNumLinks) && uint64(a.NumLinks) != uint64(st.Nlink) ||
		a.Mask.Has(nfs4.AttrSize) && typ == nfs4.TypeReg && a.Size != uint64(st.Size) ||
		a.Mask.Has(nfs4.AttrTimeModify) && (a.TimeModify.Seconds != st.Mtim.Sec || int64(a.TimeModify.Nseconds) != st.Mtim.Nsec) {
		t.Errorf("%s: attributes %+v, local %+v", what, a, st)
	}
	if a.Mask.Has(nfs4.AttrOwner) {
		o := nfs4.ParseOwner(a.Owner)
		if !(o.Numeric && o.ID == st.Uid || !o.Numeric && st.Uid == 0 && string(o.Name) == "root") {
			t.Errorf("%s: owner %q for uid %d", what, a.Owner, st.Uid)
		}
	}
}
