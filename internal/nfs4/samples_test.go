package nfs4

import (
	"fmt"
	"reflect"

	"hushfs/internal/rpc"
	"hushfs/internal/xdr"
)

// codec is what every argument and result type implements.
type codec interface {
	Append([]byte) []byte
	Decode(*xdr.Decoder)
}

// sample is one value of an operation's arguments or result.
type sample struct {
	name string
	op   uint32 // Opnum, or CBOpnum when cb
	cb   bool   // a callback operation
	res  bool   // a result, not arguments
	// hostile: a reply breaking the protocol's limits or UTF-8 (names no
	// file system takes, invalid UTF-8) that a client must decode so as to
	// refuse only what it cannot use; the oracle, which enforces UTF-8,
	// does not take it.
	hostile bool
	v       codec
}

// gen makes sample values in which every scalar differs from every other,
// so that a field encoded in another's place shows.
type gen struct{ n uint32 }

func (g *gen) u32() uint32 { g.n++; return 0x01000000 + g.n*0x10101 }
func (g *gen) u64() uint64 { g.n++; return 0x0123456700000000 + uint64(g.n)*0x10000001 }
func (g *gen) i64() int64  { g.n++; return -1700000000 - int64(g.n) }

// bytes returns n distinct bytes: lengths not a multiple of 4 exercise
// padding.
func (g *gen) bytes(n int) []byte {
	g.n++
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(g.n*31 + uint32(i)*7)
	}
	return b
}

// name returns a valid UTF-8 name with non-ASCII runes and an odd length.
func (g *gen) name() []byte { g.n++; return []byte(fmt.Sprintf("näme-%d.tx", g.n)) }

func (g *gen) fh() FH { return FH(g.bytes(17 + int(g.n%40))) }

func (g *gen) verf() (v Verifier) {
	copy(v[:], g.bytes(VerifierSize))
	return v
}

func (g *gen) sessionID() (s SessionID) {
	copy(s[:], g.bytes(SessionIDSize))
	return s
}

func (g *gen) stateid() Stateid {
	s := Stateid{Seqid: g.u32()}
	copy(s.Other[:], g.bytes(OtherSize))
	return s
}

func (g *gen) time() Time { return Time{Seconds: g.i64(), Nseconds: g.u32() % 1e9} }

func (g *gen) owner() StateOwner { return StateOwner{ClientID: g.u64(), Owner: g.bytes(21)} }

func (g *gen) cinfo(atomic bool) ChangeInfo {
	return ChangeInfo{Atomic: atomic, Before: g.u64(), After: g.u64()}
}

func (g *gen) bitmap(bits ...int) Bitmap { return NewBitmap(bits...) }

// fattrAll returns attributes with every attribute of the codec set.
func (g *gen) fattrAll() Fattr {
	f := Fattr{
		Mask:              codecAttrs,
		SupportedAttrs:    codecAttrs,
		Type:              TypeLnk,
		FHExpireType:      FH4VolatileAny | FH4VolRename,
		Change:            g.u64(),
		Size:              g.u64(),
		LinkSupport:       true,
		SymlinkSupport:    false,
		NamedAttr:         true,
		Fsid:              Fsid{Major: g.u64(), Minor: g.u64()},
		UniqueHandles:     true,
		LeaseTime:         g.u32(),
		RdattrError:       ErrAccess,
		ACLSupport:        ACL4SupportAllowACL,
		Archive:           true,
		CanSetTime:        true,
		CaseInsensitive:   false,
		CasePreserving:    true,
		ChownRestricted:   true,
		Filehandle:        g.fh(),
		Fileid:            g.u64(),
		FilesAvail:        g.u64(),
		FilesFree:         g.u64(),
		FilesTotal:        g.u64(),
		Hidden:            true,
		Homogeneous:       true,
		MaxFileSize:       g.u64(),
		MaxLink:           g.u32(),
		MaxName:           g.u32(),
		MaxRead:           g.u64(),
		MaxWrite:          g.u64(),
		Mimetype:          []byte("text/plain"),
		Mode:              0o4755,
		NoTrunc:           true,
		NumLinks:          g.u32(),
		Owner:             []byte("1000"),
		OwnerGroup:        []byte("staff@example.org"),
		QuotaAvailHard:    g.u64(),
		QuotaAvailSoft:    g.u64(),
		QuotaUsed:         g.u64(),
		Rawdev:            Specdata{Major: g.u32(), Minor: g.u32()},
		SpaceAvail:        g.u64(),
		SpaceFree:         g.u64(),
		SpaceTotal:        g.u64(),
		SpaceUsed:         g.u64(),
		System:            true,
		TimeAccess:        g.time(),
		TimeAccessSet:     SetTime{How: SetToClientTime, Time: g.time()},
		TimeBackup:        g.time(),
		TimeCreate:        g.time(),
		TimeDelta:         Time{Seconds: 0, Nseconds: 1},
		TimeMetadata:      g.time(),
		TimeModify:        g.time(),
		TimeModifySet:     SetTime{How: SetToServerTime},
		MountedOnFileid:   g.u64(),
		DirNotifDelay:     g.time(),
		DirentNotifDelay:  g.time(),
		ChangePolicy:      ChangePolicy{Major: g.u64(), Minor: g.u64()},
		FsLayoutTypes:     []uint32{LayoutNFSv41Files, LayoutFlexFiles},
		LayoutTypes:       []uint32{LayoutBlockVolume},
		LayoutBlksize:     g.u32(),
		LayoutAlignment:   g.u32(),
		ModeSetMasked:     ModeMasked{Value: 0o640, Mask: 0o777},
		SuppattrExclcreat: NewBitmap(AttrSize, AttrMode, AttrOwner, AttrTimeAccessSet),
		FsCharsetCap:      g.u32(),
		CloneBlksize:      g.u32(),
		SpaceFreed:        g.u64(),
		ChangeAttrType:    2,
		ModeUmask:         ModeMasked{Value: 0o666, Mask: 0o022},
		XattrSupport:      true,
	}
	return f
}

// fattrSome returns the attributes a client usually asks for.
func (g *gen) fattrSome() Fattr {
	return Fattr{
		Mask: NewBitmap(AttrType, AttrChange, AttrSize, AttrFsid, AttrFileid, AttrMode,
			AttrNumLinks, AttrOwner, AttrOwnerGroup, AttrSpaceUsed, AttrTimeAccess,
			AttrTimeMetadata, AttrTimeModify, AttrMountedOnFileid),
		Type: TypeReg, Change: g.u64(), Size: g.u64(), Fsid: Fsid{Major: g.u64(), Minor: g.u64()},
		Fileid: g.u64(), Mode: 0o644, NumLinks: 1, Owner: []byte("0"), OwnerGroup: []byte("4294967295"),
		SpaceUsed: g.u64(), TimeAccess: g.time(), TimeMetadata: g.time(), TimeModify: g.time(),
		MountedOnFileid: g.u64(),
	}
}

// fattrSet returns attributes a client sets (SETATTR, OPEN, CREATE).
func (g *gen) fattrSet() Fattr {
	return Fattr{
		Mask: NewBitmap(AttrSize, AttrMode, AttrOwner, AttrOwnerGroup, AttrTimeAccessSet, AttrTimeModifySet),
		Size: g.u64(), Mode: 0o600, Owner: []byte("1001"), OwnerGroup: []byte("users@localdomain"),
		TimeAccessSet: SetTime{How: SetToServerTime}, TimeModifySet: SetTime{How: SetToClientTime, Time: g.time()},
	}
}

func (g *gen) ace() ACE {
	return ACE{Type: 0, Flag: g.u32() & 0xff, AccessMask: g.u32(), Who: []byte("EVERYONE@")}
}

func (g *gen) chanAttrs(rdma bool) ChannelAttrs {
	c := ChannelAttrs{HeaderPadSize: g.u32(), MaxRequestSize: g.u32(), MaxResponseSize: g.u32(),
		MaxResponseSizeCached: g.u32(), MaxOperations: g.u32(), MaxRequests: g.u32()}
	if rdma {
		c.HasRDMAIRD, c.RDMAIRD = true, g.u32()
	}
	return c
}

func (g *gen) entry() Entry {
	f := g.fattrSome()
	f.Mask.Set(AttrRdattrError)
	f.RdattrError = OK
	return Entry{Cookie: g.u64(), Name: g.name(), Attrs: f}
}

func (g *gen) notifyEntry() NotifyEntry {
	return NotifyEntry{Name: g.name(), Attrs: g.fattrSome()}
}

func (g *gen) notifyAdd(full bool) NotifyAdd {
	a := NotifyAdd{NewEntry: g.notifyEntry(), LastEntry: full}
	if full {
		a.HasOldEntry, a.OldEntry = true, NotifyRemove{Entry: g.notifyEntry(), Cookie: g.u64()}
		a.HasNewCookie, a.NewCookie = true, g.u64()
		a.HasPrevEntry, a.PrevEntry, a.PrevCookie = true, g.notifyEntry(), g.u64()
	}
	return a
}

// samples returns values of every argument and result type, with every
// arm of every union.
func samples() []sample {
	g := &gen{}
	var s []sample
	args := func(name string, op Opnum, v codec) { s = append(s, sample{name: name, op: uint32(op), v: v}) }
	res := func(name string, op Opnum, v codec) {
		s = append(s, sample{name: name, op: uint32(op), res: true, v: v})
	}
	cbArgs := func(name string, op CBOpnum, v codec) {
		s = append(s, sample{name: name, op: uint32(op), cb: true, v: v})
	}
	cbRes := func(name string, op CBOpnum, v codec) {
		s = append(s, sample{name: name, op: uint32(op), cb: true, res: true, v: v})
	}
	status := func(op Opnum, st Status) {
		res(fmt.Sprintf("%s-res-%s", op, st), op, &StatusRes{Status: st})
	}

	args("access", OpAccess, &AccessArgs{Access: AccessRead | AccessLookup | AccessExecute})
	res("access-ok", OpAccess, &AccessRes{Status: OK, Supported: 0x3f, Access: 0x21})
	res("access-err", OpAccess, &AccessRes{Status: ErrStale})
	args("close", OpClose, &CloseArgs{Seqid: g.u32(), Stateid: g.stateid()})
	res("close-ok", OpClose, &CloseRes{Status: OK, Stateid: g.stateid()})
	res("close-err", OpClose, &CloseRes{Status: ErrBadStateid})
	args("commit", OpCommit, &CommitArgs{Offset: g.u64(), Count: g.u32()})
	res("commit-ok", OpCommit, &CommitRes{Status: OK, Verf: g.verf()})
	res("commit-err", OpCommit, &CommitRes{Status: ErrIO})
	args("create-dir", OpCreate, &CreateArgs{Type: TypeDir, Name: g.name(), Attrs: g.fattrSet()})
	args("create-lnk", OpCreate, &CreateArgs{Type: TypeLnk, LinkData: g.bytes(13), Name: g.name(), Attrs: Fattr{Mask: NewBitmap(AttrMode), Mode: 0o777}})
	args("create-chr", OpCreate, &CreateArgs{Type: TypeChr, Dev: Specdata{Major: g.u32(), Minor: g.u32()}, Name: g.name()})
	args("create-blk", OpCreate, &CreateArgs{Type: TypeBlk, Dev: Specdata{Major: g.u32(), Minor: g.u32()}, Name: g.name()})
	args("create-fifo", OpCreate, &CreateArgs{Type: TypeFifo, Name: g.name()})
	args("create-reg", OpCreate, &CreateArgs{Type: TypeReg, Name: g.name()}) // BADTYPE for a server
	res("create-ok", OpCreate, &CreateRes{Status: OK, CInfo: g.cinfo(true), AttrSet: NewBitmap(AttrMode, AttrOwner)})
	res("create-err", OpCreate, &CreateRes{Status: ErrExist})
	args("delegpurge", OpDelegPurge, &DelegPurgeArgs{ClientID: g.u64()})
	status(OpDelegPurge, ErrNotSupp)
	args("delegreturn", OpDelegReturn, &DelegReturnArgs{Stateid: g.stateid()})
	status(OpDelegReturn, OK)
	args("getattr", OpGetattr, &GetattrArgs{AttrRequest: BitmapOf(0x0010011a, 0x00b0a23a, 0)})
	args("getattr-empty", OpGetattr, &GetattrArgs{})
	res("getattr-ok", OpGetattr, &GetattrRes{Status: OK, Attrs: g.fattrSome()})
	res("getattr-all", OpGetattr, &GetattrRes{Status: OK, Attrs: g.fattrAll()})
	res("getattr-none", OpGetattr, &GetattrRes{Status: OK, Attrs: Fattr{Mask: BitmapOf(0, 0)}})
	res("getattr-err", OpGetattr, &GetattrRes{Status: ErrDelay})
	res("getfh-ok", OpGetFH, &GetFHRes{Status: OK, FH: g.fh()})
	res("getfh-err", OpGetFH, &GetFHRes{Status: ErrNoFileHandle})
	args("link", OpLink, &LinkArgs{NewName: g.name()})
	res("link-ok", OpLink, &LinkRes{Status: OK, CInfo: g.cinfo(false)})
	res("link-err", OpLink, &LinkRes{Status: ErrMLink})
	args("lock-new", OpLock, &LockArgs{LockType: WriteWLT, Reclaim: true, Offset: g.u64(), Length: g.u64(),
		NewLockOwner: true, OpenSeqid: g.u32(), OpenStateid: g.stateid(), LockSeqid: g.u32(), LockOwner: g.owner()})
	args("lock-exist", OpLock, &LockArgs{LockType: ReadLT, Offset: g.u64(), Length: g.u64(),
		LockStateid: g.stateid(), LockSeqid: g.u32()})
	res("lock-ok", OpLock, &LockRes{Status: OK, Stateid: g.stateid()})
	res("lock-denied", OpLock, &LockRes{Status: ErrDenied, Denied: LockDenied{Offset: g.u64(), Length: g.u64(), LockType: WriteLT, Owner: g.owner()}})
	res("lock-err", OpLock, &LockRes{Status: ErrGrace})
	args("lockt", OpLockT, &LockTArgs{LockType: ReadWLT, Offset: g.u64(), Length: g.u64(), Owner: g.owner()})
	res("lockt-ok", OpLockT, &LockTRes{Status: OK})
	res("lockt-denied", OpLockT, &LockTRes{Status: ErrDenied, Denied: LockDenied{Offset: g.u64(), Length: g.u64(), LockType: ReadLT, Owner: g.owner()}})
	args("locku", OpLockU, &LockUArgs{LockType: WriteLT, Seqid: g.u32(), Stateid: g.stateid(), Offset: g.u64(), Length: g.u64()})
	res("locku-ok", OpLockU, &LockURes{Status: OK, Stateid: g.stateid()})
	res("locku-err", OpLockU, &LockURes{Status: ErrLockRange})
	args("lookup", OpLookup, &LookupArgs{Name: g.name()})
	status(OpLookup, ErrNoEnt)
	status(OpLookupP, OK)
	args("nverify", OpNverify, &VerifyArgs{Attrs: g.fattrSome()})
	status(OpNverify, ErrSame)
	args("open-null", OpOpen, &OpenArgs{Seqid: g.u32(), ShareAccess: ShareAccessRead | ShareAccessWantNoDeleg, ShareDeny: ShareDenyNone,
		Owner: g.owner(), OpenType: OpenNoCreate, Claim: OpenClaim{Type: ClaimNull, File: g.name()}})
	args("open-unchecked", OpOpen, &OpenArgs{Seqid: g.u32(), ShareAccess: ShareAccessBoth, ShareDeny: ShareDenyWrite,
		Owner: g.owner(), OpenType: OpenCreate, CreateMode: Unchecked, CreateAttrs: g.fattrSet(),
		Claim: OpenClaim{Type: ClaimNull, File: g.name()}})
	args("open-guarded", OpOpen, &OpenArgs{Seqid: g.u32(), ShareAccess: ShareAccessWrite, Owner: g.owner(),
		OpenType: OpenCreate, CreateMode: Guarded, CreateAttrs: Fattr{Mask: NewBitmap(AttrMode), Mode: 0o640},
		Claim: OpenClaim{Type: ClaimNull, File: g.name()}})
	args("open-exclusive", OpOpen, &OpenArgs{Seqid: g.u32(), ShareAccess: ShareAccessWrite, Owner: g.owner(),
		OpenType: OpenCreate, CreateMode: Exclusive, CreateVerf: g.verf(), Claim: OpenClaim{Type: ClaimNull, File: g.name()}})
	args("open-exclusive41", OpOpen, &OpenArgs{Seqid: g.u32(), ShareAccess: ShareAccessBoth, Owner: g.owner(),
		OpenType: OpenCreate, CreateMode: Exclusive41, CreateVerf: g.verf(), CreateAttrs: Fattr{Mask: NewBitmap(AttrMode), Mode: 0o600},
		Claim: OpenClaim{Type: ClaimNull, File: g.name()}})
	args("open-previous", OpOpen, &OpenArgs{ShareAccess: ShareAccessRead, Owner: g.owner(),
		Claim: OpenClaim{Type: ClaimPrevious, DelegateType: DelegateWrite}})
	args("open-delegate-cur", OpOpen, &OpenArgs{ShareAccess: ShareAccessRead, Owner: g.owner(),
		Claim: OpenClaim{Type: ClaimDelegateCur, DelegateStateid: g.stateid(), File: g.name()}})
	args("open-delegate-prev", OpOpen, &OpenArgs{ShareAccess: ShareAccessRead, Owner: g.owner(),
		Claim: OpenClaim{Type: ClaimDelegatePrev, File: g.name()}})
	args("open-fh", OpOpen, &OpenArgs{ShareAccess: ShareAccessRead, Owner: g.owner(), Claim: OpenClaim{Type: ClaimFH}})
	args("open-deleg-cur-fh", OpOpen, &OpenArgs{ShareAccess: ShareAccessBoth, Owner: g.owner(),
		Claim: OpenClaim{Type: ClaimDelegCurFH, DelegateStateid: g.stateid()}})
	args("open-deleg-prev-fh", OpOpen, &OpenArgs{ShareAccess: ShareAccessBoth, Owner: g.owner(), Claim: OpenClaim{Type: ClaimDelegPrevFH}})
	res("open-ok-none", OpOpen, &OpenRes{Status: OK, Stateid: g.stateid(), CInfo: g.cinfo(false),
		Rflags: OpenResultLocktypePosix, AttrSet: NewBitmap(AttrMode), Delegation: OpenDelegation{Type: DelegateNone}})
	res("open-ok-read", OpOpen, &OpenRes{Status: OK, Stateid: g.stateid(), CInfo: g.cinfo(true),
		Delegation: OpenDelegation{Type: DelegateRead, Stateid: g.stateid(), Recall: true, Permissions: g.ace()}})
	res("open-ok-write-size", OpOpen, &OpenRes{Status: OK, Stateid: g.stateid(), CInfo: g.cinfo(true),
		Delegation: OpenDelegation{Type: DelegateWrite, Stateid: g.stateid(),
			SpaceLimit: SpaceLimit{LimitBy: LimitSize, FileSize: g.u64()}, Permissions: g.ace()}})
	res("open-ok-write-blocks", OpOpen, &OpenRes{Status: OK, Stateid: g.stateid(), CInfo: g.cinfo(true),
		Delegation: OpenDelegation{Type: DelegateWrite, Stateid: g.stateid(),
			SpaceLimit: SpaceLimit{LimitBy: LimitBlocks, NumBlocks: g.u32(), BytesPerBlock: g.u32()}, Permissions: g.ace()}})
	res("open-ok-none-ext", OpOpen, &OpenRes{Status: OK, Stateid: g.stateid(), CInfo: g.cinfo(true),
		Delegation: OpenDelegation{Type: DelegateNoneExt, WhyNone: WNDNotSuppFtype}})
	res("open-ok-none-contention", OpOpen, &OpenRes{Status: OK, Stateid: g.stateid(), CInfo: g.cinfo(true),
		Delegation: OpenDelegation{Type: DelegateNoneExt, WhyNone: WNDContention, WillPushOrSignal: true}})
	res("open-ok-none-resource", OpOpen, &OpenRes{Status: OK, Stateid: g.stateid(), CInfo: g.cinfo(true),
		Delegation: OpenDelegation{Type: DelegateNoneExt, WhyNone: WNDResource}})
	res("open-err", OpOpen, &OpenRes{Status: ErrShareDenied})
	args("openattr", OpOpenattr, &OpenattrArgs{CreateDir: true})
	status(OpOpenattr, ErrNotSupp)
	args("open-downgrade", OpOpenDowngrade, &OpenDowngradeArgs{Stateid: g.stateid(), Seqid: g.u32(), ShareAccess: ShareAccessRead, ShareDeny: ShareDenyNone})
	res("open-downgrade-ok", OpOpenDowngrade, &OpenDowngradeRes{Status: OK, Stateid: g.stateid()})
	args("putfh", OpPutFH, &PutFHArgs{FH: g.fh()})
	status(OpPutFH, ErrBadHandle)
	status(OpPutPubFH, OK)
	status(OpPutRootFH, OK)
	args("read", OpRead, &ReadArgs{Stateid: g.stateid(), Offset: g.u64(), Count: g.u32()})
	res("read-ok", OpRead, &ReadRes{Status: OK, EOF: true, Data: g.bytes(1021)})
	res("read-empty", OpRead, &ReadRes{Status: OK, EOF: true})
	res("read-err", OpRead, &ReadRes{Status: ErrOpenMode})
	args("readdir", OpReaddir, &ReaddirArgs{Cookie: g.u64(), CookieVerf: g.verf(), DirCount: g.u32(), MaxCount: g.u32(),
		AttrRequest: NewBitmap(AttrType, AttrFileid, AttrRdattrError, AttrMountedOnFileid)})
	res("readdir-ok", OpReaddir, &ReaddirRes{Status: OK, CookieVerf: g.verf(),
		Entries: []Entry{g.entry(), g.entry(), {Cookie: g.u64(), Name: []byte{}, Attrs: Fattr{Mask: NewBitmap(AttrRdattrError), RdattrError: ErrAccess}}, g.entry()}})
	res("readdir-empty", OpReaddir, &ReaddirRes{Status: OK, CookieVerf: g.verf(), EOF: true})
	res("readdir-err", OpReaddir, &ReaddirRes{Status: ErrBadCookie})
	res("readdir-hostile", OpReaddir, &ReaddirRes{Status: OK, Entries: []Entry{
		{Cookie: 1, Name: []byte("a/b\x00\xff\xfe")}, {Cookie: 2, Name: make([]byte, 300)},
		{Cookie: 3, Name: []byte("x"), Attrs: Fattr{Mask: NewBitmap(AttrFilehandle, AttrOwner), Filehandle: make([]byte, 200), Owner: []byte("\xff\xfe")}}}})
	s[len(s)-1].hostile = true
	res("readlink-ok", OpReadlink, &ReadlinkRes{Status: OK, Link: g.bytes(39)})
	res("readlink-long", OpReadlink, &ReadlinkRes{Status: OK, Link: make([]byte, 5000)})
	res("readlink-err", OpReadlink, &ReadlinkRes{Status: ErrInval})
	args("remove", OpRemove, &RemoveArgs{Target: g.name()})
	res("remove-ok", OpRemove, &RemoveRes{Status: OK, CInfo: g.cinfo(true)})
	res("remove-err", OpRemove, &RemoveRes{Status: ErrNotEmpty})
	args("rename", OpRename, &RenameArgs{OldName: g.name(), NewName: g.name()})
	res("rename-ok", OpRename, &RenameRes{Status: OK, SourceCInfo: g.cinfo(true), TargetCInfo: g.cinfo(false)})
	res("rename-err", OpRename, &RenameRes{Status: ErrXDev})
	status(OpRestoreFH, ErrRestoreFH)
	status(OpSaveFH, OK)
	args("secinfo", OpSecinfo, &SecinfoArgs{Name: g.name()})
	res("secinfo-ok", OpSecinfo, &SecinfoRes{Status: OK, Flavors: []SecinfoFlavor{
		{Flavor: AuthRPCSECGSS, OID: g.bytes(11), QOP: g.u32(), Service: GSSSvcPrivacy}, {Flavor: AuthSys}, {Flavor: AuthNone}}})
	res("secinfo-err", OpSecinfo, &SecinfoRes{Status: ErrWrongSec})
	args("setattr", OpSetattr, &SetattrArgs{Stateid: g.stateid(), Attrs: g.fattrSet()})
	res("setattr-ok", OpSetattr, &SetattrRes{Status: OK, AttrsSet: NewBitmap(AttrSize, AttrMode)})
	res("setattr-err", OpSetattr, &SetattrRes{Status: ErrPerm, AttrsSet: BitmapOf(0, 0)})
	args("verify", OpVerify, &VerifyArgs{Attrs: g.fattrAll()})
	status(OpVerify, ErrNotSame)
	args("write-unstable", OpWrite, &WriteArgs{Stateid: g.stateid(), Offset: g.u64(), Stable: Unstable, Data: g.bytes(4095)})
	args("write-filesync", OpWrite, &WriteArgs{Stateid: g.stateid(), Offset: g.u64(), Stable: FileSync, Data: g.bytes(2)})
	res("write-ok", OpWrite, &WriteRes{Status: OK, Count: g.u32(), Committed: DataSync, Verf: g.verf()})
	res("write-err", OpWrite, &WriteRes{Status: ErrNoSpc})

	args("backchannel-ctl", OpBackchannelCtl, &BackchannelCtlArgs{CBProgram: 0x40000000, SecParms: []CallbackSecParms{
		{Flavor: AuthSys, Sys: rpc.AuthSysParms{Stamp: g.u32(), Machine: "client.example", UID: 1000, GID: 100, GIDs: []uint32{4, 24, 27}}},
		{Flavor: AuthNone}}})
	status(OpBackchannelCtl, OK)
	args("bind-conn", OpBindConnToSession, &BindConnToSessionArgs{SessionID: g.sessionID(), Dir: CDFC4BackOrBoth, UseRDMA: true})
	res("bind-conn-ok", OpBindConnToSession, &BindConnToSessionRes{Status: OK, SessionID: g.sessionID(), Dir: CDFS4Both})
	res("bind-conn-err", OpBindConnToSession, &BindConnToSessionRes{Status: ErrBadSession})
	args("exchange-id", OpExchangeID, &ExchangeIDArgs{ClientOwner: ClientOwner{Verifier: g.verf(), OwnerID: []byte("Linux NFSv4.1 lcguest")},
		Flags:        ExchgIDFlagSuppMovedRefer | ExchgIDFlagSuppMovedMigr | ExchgIDFlagBindPrincStateid,
		StateProtect: StateProtectArgs{How: SP4None}, HasImplID: true,
		ImplID: ImplID{Domain: []byte("kernel.org"), Name: []byte("Linux 6.1.0 #1 SMP x86_64"), Date: g.time()}})
	args("exchange-id-mach-cred", OpExchangeID, &ExchangeIDArgs{ClientOwner: ClientOwner{Verifier: g.verf(), OwnerID: g.bytes(30)},
		StateProtect: StateProtectArgs{How: SP4MachCred, Ops: StateProtectOps{MustEnforce: NewBitmap(int(OpBindConnToSession), int(OpExchangeID)), MustAllow: NewBitmap(int(OpClose))}}})
	args("exchange-id-ssv", OpExchangeID, &ExchangeIDArgs{ClientOwner: ClientOwner{Verifier: g.verf(), OwnerID: g.bytes(3)},
		StateProtect: StateProtectArgs{How: SP4SSV, Ops: StateProtectOps{MustEnforce: NewBitmap(int(OpSequence))},
			HashAlgs: [][]byte{g.bytes(9), g.bytes(11)}, EncrAlgs: [][]byte{g.bytes(9)}, Window: g.u32(), NumGSSHandles: g.u32()}})
	res("exchange-id-ok", OpExchangeID, &ExchangeIDRes{Status: OK, ClientID: g.u64(), SequenceID: g.u32(),
		Flags: ExchgIDFlagUseNonPNFS | ExchgIDFlagConfirmedR, StateProtect: StateProtectRes{How: SP4None},
		ServerOwner: ServerOwner{MinorID: g.u64(), MajorID: g.bytes(12)}, ServerScope: g.bytes(7),
		HasImplID: true, ImplID: ImplID{Domain: []byte("nfs-ganesha"), Name: []byte("4.3"), Date: g.time()}})
	res("exchange-id-ok-mach", OpExchangeID, &ExchangeIDRes{Status: OK, ClientID: g.u64(), SequenceID: g.u32(),
		StateProtect: StateProtectRes{How: SP4MachCred, Ops: StateProtectOps{MustAllow: NewBitmap(int(OpClose))}},
		ServerOwner:  ServerOwner{MinorID: g.u64(), MajorID: g.bytes(1)}})
	res("exchange-id-ok-ssv", OpExchangeID, &ExchangeIDRes{Status: OK, ClientID: g.u64(), SequenceID: g.u32(),
		StateProtect: StateProtectRes{How: SP4SSV, HashAlg: g.u32(), EncrAlg: g.u32(), SSVLen: g.u32(), Window: g.u32(),
			Handles: [][]byte{g.bytes(5), g.bytes(6)}},
		ServerOwner: ServerOwner{MinorID: g.u64(), MajorID: g.bytes(4)}, ServerScope: g.bytes(4)})
	res("exchange-id-err", OpExchangeID, &ExchangeIDRes{Status: ErrClidInUse})
	args("create-session", OpCreateSession, &CreateSessionArgs{ClientID: g.u64(), Sequence: g.u32(),
		Flags: CreateSessionFlagConnBackChan | CreateSessionFlagPersist, Fore: g.chanAttrs(false), Back: g.chanAttrs(true),
		CBProgram: 0x40000000, SecParms: []CallbackSecParms{
			{Flavor: AuthSys, Sys: rpc.AuthSysParms{Stamp: g.u32(), Machine: "lcguest", UID: 0, GID: 0}},
			{Flavor: AuthRPCSECGSS, GSSService: GSSSvcIntegrity, GSSHandleFromServer: g.bytes(10), GSSHandleFromClient: g.bytes(3)},
			{Flavor: AuthNone}}})
	res("create-session-ok", OpCreateSession, &CreateSessionRes{Status: OK, SessionID: g.sessionID(), Sequence: g.u32(),
		Flags: CreateSessionFlagConnBackChan, Fore: g.chanAttrs(false), Back: g.chanAttrs(false)})
	res("create-session-err", OpCreateSession, &CreateSessionRes{Status: ErrStaleClientID})
	args("destroy-session", OpDestroySession, &DestroySessionArgs{SessionID: g.sessionID()})
	status(OpDestroySession, ErrBackChanBusy)
	args("free-stateid", OpFreeStateid, &FreeStateidArgs{Stateid: g.stateid()})
	status(OpFreeStateid, ErrLocksHeld)
	args("get-dir-delegation", OpGetDirDelegation, &GetDirDelegationArgs{SignalDelegAvail: true,
		NotificationTypes: NewBitmap(NotifyAddEntry, NotifyRemoveEntry, NotifyRenameEntry), ChildAttrDelay: g.time(), DirAttrDelay: g.time(),
		ChildAttributes: NewBitmap(AttrSize, AttrChange), DirAttributes: NewBitmap(AttrChange)})
	res("get-dir-delegation-ok", OpGetDirDelegation, &GetDirDelegationRes{Status: OK, NonFatal: GDD4OK, CookieVerf: g.verf(),
		Stateid: g.stateid(), Notification: NewBitmap(NotifyAddEntry), ChildAttributes: NewBitmap(AttrSize), DirAttributes: BitmapOf(0)})
	res("get-dir-delegation-unavail", OpGetDirDelegation, &GetDirDelegationRes{Status: OK, NonFatal: GDD4Unavail, WillSignalDelegAvail: true})
	res("get-dir-delegation-err", OpGetDirDelegation, &GetDirDelegationRes{Status: ErrDirDelegUnavail})
	args("getdeviceinfo", OpGetDeviceInfo, &GetDeviceInfoArgs{DeviceID: DeviceID(g.bytes(DeviceIDSize)), LayoutType: LayoutNFSv41Files,
		MaxCount: g.u32(), NotifyTypes: NewBitmap(1, 2)})
	res("getdeviceinfo-ok", OpGetDeviceInfo, &GetDeviceInfoRes{Status: OK, DeviceAddr: TypedBody{Type: LayoutNFSv41Files, Body: g.bytes(33)}, Notification: NewBitmap(1)})
	res("getdeviceinfo-toosmall", OpGetDeviceInfo, &GetDeviceInfoRes{Status: ErrTooSmall, MinCount: g.u32()})
	res("getdeviceinfo-err", OpGetDeviceInfo, &GetDeviceInfoRes{Status: ErrNotSupp})
	args("getdevicelist", OpGetDeviceList, &GetDeviceListArgs{LayoutType: LayoutBlockVolume, MaxDevices: g.u32(), Cookie: g.u64(), CookieVerf: g.verf()})
	res("getdevicelist-ok", OpGetDeviceList, &GetDeviceListRes{Status: OK, Cookie: g.u64(), CookieVerf: g.verf(),
		DeviceIDs: []DeviceID{DeviceID(g.bytes(16)), DeviceID(g.bytes(16))}, EOF: true})
	res("getdevicelist-err", OpGetDeviceList, &GetDeviceListRes{Status: ErrNotSupp})
	args("layoutcommit", OpLayoutCommit, &LayoutCommitArgs{Offset: g.u64(), Length: g.u64(), Reclaim: true, Stateid: g.stateid(),
		NewOffset: true, LastWriteOffset: g.u64(), TimeChanged: true, TimeModify: g.time(), LayoutUpdate: TypedBody{Type: LayoutBlockVolume, Body: g.bytes(5)}})
	args("layoutcommit-min", OpLayoutCommit, &LayoutCommitArgs{Stateid: g.stateid(), LayoutUpdate: TypedBody{Type: LayoutNFSv41Files}})
	res("layoutcommit-ok", OpLayoutCommit, &LayoutCommitRes{Status: OK, SizeChanged: true, NewSize: g.u64()})
	res("layoutcommit-ok-same", OpLayoutCommit, &LayoutCommitRes{Status: OK})
	args("layoutget", OpLayoutGet, &LayoutGetArgs{SignalLayoutAvail: true, LayoutType: LayoutNFSv41Files, IOMode: LayoutIOModeRW,
		Offset: g.u64(), Length: g.u64(), MinLength: g.u64(), Stateid: g.stateid(), MaxCount: g.u32()})
	res("layoutget-ok", OpLayoutGet, &LayoutGetRes{Status: OK, ReturnOnClose: true, Stateid: g.stateid(), Layouts: []Layout{
		{Offset: g.u64(), Length: g.u64(), IOMode: LayoutIOModeRead, Content: TypedBody{Type: LayoutNFSv41Files, Body: g.bytes(17)}}}})
	res("layoutget-trylater", OpLayoutGet, &LayoutGetRes{Status: ErrLayoutTryLater, WillSignalLayoutAvail: true})
	res("layoutget-err", OpLayoutGet, &LayoutGetRes{Status: ErrLayoutUnavailable})
	args("layoutreturn-file", OpLayoutReturn, &LayoutReturnArgs{Reclaim: true, LayoutType: LayoutNFSv41Files, IOMode: LayoutIOModeAny,
		ReturnType: LayoutReturnFile, Offset: g.u64(), Length: g.u64(), Stateid: g.stateid(), Body: g.bytes(6)})
	args("layoutreturn-all", OpLayoutReturn, &LayoutReturnArgs{LayoutType: LayoutNFSv41Files, IOMode: LayoutIOModeRead, ReturnType: LayoutReturnAll})
	res("layoutreturn-ok", OpLayoutReturn, &LayoutReturnRes{Status: OK, HasStateid: true, Stateid: g.stateid()})
	res("layoutreturn-ok-none", OpLayoutReturn, &LayoutReturnRes{Status: OK})
	res("layoutreturn-err", OpLayoutReturn, &LayoutReturnRes{Status: ErrNoMatchingLayout})
	args("secinfo-no-name", OpSecinfoNoName, &SecinfoNoNameArgs{Style: SecinfoStyleParent})
	res("secinfo-no-name-ok", OpSecinfoNoName, &SecinfoRes{Status: OK, Flavors: []SecinfoFlavor{{Flavor: AuthSys}}})
	args("sequence", OpSequence, &SequenceArgs{SessionID: g.sessionID(), SequenceID: g.u32(), SlotID: g.u32(), HighestSlotID: g.u32(), CacheThis: true})
	res("sequence-ok", OpSequence, &SequenceRes{Status: OK, SessionID: g.sessionID(), SequenceID: g.u32(), SlotID: g.u32(),
		HighestSlotID: g.u32(), TargetHighestSlotID: g.u32(), StatusFlags: SeqStatusRecallableStateRevoked | SeqStatusCBPathDown})
	res("sequence-err", OpSequence, &SequenceRes{Status: ErrSeqMisordered})
	args("set-ssv", OpSetSSV, &SetSSVArgs{SSV: g.bytes(32), Digest: g.bytes(20)})
	res("set-ssv-ok", OpSetSSV, &SetSSVRes{Status: OK, Digest: g.bytes(20)})
	res("set-ssv-err", OpSetSSV, &SetSSVRes{Status: ErrNotSupp})
	args("test-stateid", OpTestStateid, &TestStateidArgs{Stateids: []Stateid{g.stateid(), g.stateid(), g.stateid()}})
	args("test-stateid-none", OpTestStateid, &TestStateidArgs{})
	res("test-stateid-ok", OpTestStateid, &TestStateidRes{Status: OK, StatusCodes: []Status{OK, ErrBadStateid, ErrExpired}})
	res("test-stateid-err", OpTestStateid, &TestStateidRes{Status: ErrBadXDR})
	args("want-delegation-fh", OpWantDelegation, &WantDelegationArgs{Want: ShareAccessWantReadDeleg, Claim: OpenClaim{Type: ClaimFH}})
	args("want-delegation-prev", OpWantDelegation, &WantDelegationArgs{Want: ShareAccessWantWriteDeleg, Claim: OpenClaim{Type: ClaimPrevious, DelegateType: DelegateRead}})
	args("want-delegation-prev-fh", OpWantDelegation, &WantDelegationArgs{Want: ShareAccessWantAnyDeleg, Claim: OpenClaim{Type: ClaimDelegPrevFH}})
	res("want-delegation-ok", OpWantDelegation, &WantDelegationRes{Status: OK, Delegation: OpenDelegation{Type: DelegateRead,
		Stateid: g.stateid(), Permissions: g.ace()}})
	res("want-delegation-err", OpWantDelegation, &WantDelegationRes{Status: ErrDelegAlreadyWanted})
	args("destroy-clientid", OpDestroyClientID, &DestroyClientIDArgs{ClientID: g.u64()})
	status(OpDestroyClientID, ErrClientIDBusy)
	args("reclaim-complete", OpReclaimComplete, &ReclaimCompleteArgs{OneFS: false})
	args("reclaim-complete-onefs", OpReclaimComplete, &ReclaimCompleteArgs{OneFS: true})
	status(OpReclaimComplete, ErrCompleteAlready)
	status(OpIllegal, ErrOpIllegal)

	cbArgs("cb-getattr", CBOpGetattr, &CBGetattrArgs{FH: g.fh(), AttrRequest: NewBitmap(AttrChange, AttrSize)})
	cbRes("cb-getattr-ok", CBOpGetattr, &CBGetattrRes{Status: OK, Attrs: Fattr{Mask: NewBitmap(AttrChange, AttrSize), Change: g.u64(), Size: g.u64()}})
	cbRes("cb-getattr-err", CBOpGetattr, &CBGetattrRes{Status: ErrBadHandle})
	cbArgs("cb-recall", CBOpRecall, &CBRecallArgs{Stateid: g.stateid(), Truncate: true, FH: g.fh()})
	cbRes("cb-recall-res", CBOpRecall, &StatusRes{Status: OK})
	cbArgs("cb-layoutrecall-file", CBOpLayoutRecall, &CBLayoutRecallArgs{LayoutType: LayoutNFSv41Files, IOMode: LayoutIOModeRW,
		Changed: true, RecallType: LayoutRecallFile, FH: g.fh(), Offset: g.u64(), Length: g.u64(), Stateid: g.stateid()})
	cbArgs("cb-layoutrecall-fsid", CBOpLayoutRecall, &CBLayoutRecallArgs{LayoutType: LayoutBlockVolume, IOMode: LayoutIOModeAny,
		RecallType: LayoutRecallFsid, Fsid: Fsid{Major: g.u64(), Minor: g.u64()}})
	cbArgs("cb-layoutrecall-all", CBOpLayoutRecall, &CBLayoutRecallArgs{LayoutType: LayoutNFSv41Files, IOMode: LayoutIOModeRead, RecallType: LayoutRecallAll})
	cbRes("cb-layoutrecall-res", CBOpLayoutRecall, &StatusRes{Status: ErrNoMatchingLayout})
	cbArgs("cb-notify", CBOpNotify, &CBNotifyArgs{Stateid: g.stateid(), FH: g.fh(), Changes: []Notify{
		{Mask: NewBitmap(NotifyAddEntry), Add: g.notifyAdd(false)},
		{Mask: NewBitmap(NotifyRemoveEntry), Remove: NotifyRemove{Entry: g.notifyEntry(), Cookie: g.u64()}},
		{Mask: NewBitmap(NotifyRenameEntry), Rename: NotifyRename{OldEntry: NotifyRemove{Entry: g.notifyEntry(), Cookie: g.u64()}, NewEntry: g.notifyAdd(true)}},
		{Mask: NewBitmap(NotifyChangeChildAttrs, NotifyChangeDirAttrs, NotifyChangeCookieVerifier, NotifyAddEntry),
			ChildAttrs: g.notifyEntry(), DirAttrs: g.notifyEntry(), Add: g.notifyAdd(true),
			Verifier: NotifyVerifier{OldCookieVerf: g.verf(), NewCookieVerf: g.verf()}},
	}})
	cbRes("cb-notify-res", CBOpNotify, &StatusRes{Status: OK})
	cbArgs("cb-push-deleg", CBOpPushDeleg, &CBPushDelegArgs{FH: g.fh(), Delegation: OpenDelegation{Type: DelegateWrite, Stateid: g.stateid(),
		Recall: true, SpaceLimit: SpaceLimit{LimitBy: LimitSize, FileSize: g.u64()}, Permissions: g.ace()}})
	cbRes("cb-push-deleg-res", CBOpPushDeleg, &StatusRes{Status: ErrRejectDeleg})
	cbArgs("cb-recall-any", CBOpRecallAny, &CBRecallAnyArgs{ObjectsToKeep: g.u32(), TypeMask: NewBitmap(RCA4TypeMaskRdataDlg, RCA4TypeMaskDirDlg)})
	cbRes("cb-recall-any-res", CBOpRecallAny, &StatusRes{Status: OK})
	cbArgs("cb-recallable-obj-avail", CBOpRecallableObjAvail, &CBRecallAnyArgs{ObjectsToKeep: g.u32(), TypeMask: NewBitmap(RCA4TypeMaskWdataDlg)})
	cbRes("cb-recallable-obj-avail-res", CBOpRecallableObjAvail, &StatusRes{Status: OK})
	cbArgs("cb-recall-slot", CBOpRecallSlot, &CBRecallSlotArgs{TargetHighestSlotID: g.u32()})
	cbRes("cb-recall-slot-res", CBOpRecallSlot, &StatusRes{Status: OK})
	cbArgs("cb-sequence", CBOpSequence, &CBSequenceArgs{SessionID: g.sessionID(), SequenceID: g.u32(), SlotID: g.u32(), HighestSlotID: g.u32(),
		CacheThis: true, ReferringCallLists: []ReferringCallList{
			{SessionID: g.sessionID(), Calls: []ReferringCall{{SequenceID: g.u32(), SlotID: g.u32()}, {SequenceID: g.u32(), SlotID: g.u32()}}},
			{SessionID: g.sessionID()}}})
	cbArgs("cb-sequence-plain", CBOpSequence, &CBSequenceArgs{SessionID: g.sessionID(), SequenceID: g.u32()})
	cbRes("cb-sequence-ok", CBOpSequence, &CBSequenceRes{Status: OK, SessionID: g.sessionID(), SequenceID: g.u32(), SlotID: g.u32(),
		HighestSlotID: g.u32(), TargetHighestSlotID: g.u32()})
	cbRes("cb-sequence-err", CBOpSequence, &CBSequenceRes{Status: ErrBadSlot})
	cbArgs("cb-wants-cancelled", CBOpWantsCancelled, &CBWantsCancelledArgs{ContendedWantsCancelled: true})
	cbRes("cb-wants-cancelled-res", CBOpWantsCancelled, &StatusRes{Status: OK})
	cbArgs("cb-notify-lock", CBOpNotifyLock, &CBNotifyLockArgs{FH: g.fh(), LockOwner: g.owner()})
	cbRes("cb-notify-lock-res", CBOpNotifyLock, &StatusRes{Status: OK})
	cbArgs("cb-notify-deviceid", CBOpNotifyDeviceID, &CBNotifyDeviceIDArgs{Changes: []RawNotify{
		{Mask: NewBitmap(1), Vals: append(xdr.AppendUint32(nil, LayoutNFSv41Files), g.bytes(20)...)}}})
	cbRes("cb-notify-deviceid-res", CBOpNotifyDeviceID, &StatusRes{Status: ErrNotSupp})
	cbRes("cb-illegal-res", CBOpIllegal, &StatusRes{Status: ErrOpIllegal})
	return s
}

// zeroArgs returns a zero value of a sample's type.
func newLike(v codec) codec { return reflect.New(reflect.TypeOf(v).Elem()).Interface().(codec) }

// deepEqual compares values as decoding defines them: nil and empty slices
// are equal (a decoded list reuses storage), unexported fields (decoders'
// caches) are ignored.
func deepEqual(a, b any) bool { return eqValue(reflect.ValueOf(a), reflect.ValueOf(b)) }

func eqValue(a, b reflect.Value) bool {
	if a.IsValid() != b.IsValid() {
		return false
	}
	if !a.IsValid() {
		return true
	}
	if a.Type() != b.Type() {
		return false
	}
	switch a.Kind() {
	case reflect.Pointer, reflect.Interface:
		if a.IsNil() || b.IsNil() {
			return a.IsNil() == b.IsNil()
		}
		return eqValue(a.Elem(), b.Elem())
	case reflect.Struct:
		for i := range a.NumField() {
			f := a.Type().Field(i)
			if !f.IsExported() && a.Type() != reflect.TypeOf(Bitmap{}) {
				continue
			}
			if !eqValue(a.Field(i), b.Field(i)) {
				return false
			}
		}
		return true
	case reflect.Slice, reflect.Array:
		if a.Len() != b.Len() {
			return false
		}
		for i := range a.Len() {
			if !eqValue(a.Index(i), b.Index(i)) {
				return false
			}
		}
		return true
	case reflect.Bool:
		return a.Bool() == b.Bool()
	case reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		return a.Uint() == b.Uint()
	case reflect.Int32, reflect.Int64:
		return a.Int() == b.Int()
	case reflect.String:
		return a.String() == b.String()
	}
	panic("deepEqual: unhandled kind " + a.Kind().String())
}
