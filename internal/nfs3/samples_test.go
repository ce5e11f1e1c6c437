package nfs3

import (
	"bytes"
	"fmt"
	"reflect"

	"hushfs/internal/xdr"
)

// codec is what every argument and result type implements.
type codec interface {
	Append([]byte) []byte
	Decode(*xdr.Decoder)
}

// sample is one value of a procedure's argument or result.
type sample struct {
	name  string
	proc  uint32
	mount bool // a MOUNT procedure
	res   bool // a result, not arguments
	// hostile: a reply breaking the protocol's limits (names no file
	// system takes, handles over NFS3_FHSIZE, targets over PATH_MAX) that a
	// client must decode so as to refuse only what it cannot use; the
	// oracle, which enforces the limits, does not take it.
	hostile bool
	v       codec
}

// argsFor returns a zero argument value of an NFS procedure (nil for NULL or
// an unknown procedure).
func argsFor(proc uint32) codec {
	switch proc {
	case ProcGetattr:
		return new(GetattrArgs)
	case ProcSetattr:
		return new(SetattrArgs)
	case ProcLookup:
		return new(LookupArgs)
	case ProcAccess:
		return new(AccessArgs)
	case ProcReadlink:
		return new(ReadlinkArgs)
	case ProcRead:
		return new(ReadArgs)
	case ProcWrite:
		return new(WriteArgs)
	case ProcCreate:
		return new(CreateArgs)
	case ProcMkdir:
		return new(MkdirArgs)
	case ProcSymlink:
		return new(SymlinkArgs)
	case ProcMknod:
		return new(MknodArgs)
	case ProcRemove:
		return new(RemoveArgs)
	case ProcRmdir:
		return new(RmdirArgs)
	case ProcRename:
		return new(RenameArgs)
	case ProcLink:
		return new(LinkArgs)
	case ProcReaddir:
		return new(ReaddirArgs)
	case ProcReaddirplus:
		return new(ReaddirplusArgs)
	case ProcFsstat:
		return new(FsstatArgs)
	case ProcFsinfo:
		return new(FsinfoArgs)
	case ProcPathconf:
		return new(PathconfArgs)
	case ProcCommit:
		return new(CommitArgs)
	}
	return nil
}

// resFor returns a zero result value of an NFS procedure.
func resFor(proc uint32) codec {
	switch proc {
	case ProcGetattr:
		return new(GetattrRes)
	case ProcSetattr:
		return new(SetattrRes)
	case ProcLookup:
		return new(LookupRes)
	case ProcAccess:
		return new(AccessRes)
	case ProcReadlink:
		return new(ReadlinkRes)
	case ProcRead:
		return new(ReadRes)
	case ProcWrite:
		return new(WriteRes)
	case ProcCreate:
		return new(CreateRes)
	case ProcMkdir:
		return new(MkdirRes)
	case ProcSymlink:
		return new(SymlinkRes)
	case ProcMknod:
		return new(MknodRes)
	case ProcRemove:
		return new(RemoveRes)
	case ProcRmdir:
		return new(RmdirRes)
	case ProcRename:
		return new(RenameRes)
	case ProcLink:
		return new(LinkRes)
	case ProcReaddir:
		return new(ReaddirRes)
	case ProcReaddirplus:
		return new(ReaddirplusRes)
	case ProcFsstat:
		return new(FsstatRes)
	case ProcFsinfo:
		return new(FsinfoRes)
	case ProcPathconf:
		return new(PathconfRes)
	case ProcCommit:
		return new(CommitRes)
	}
	return nil
}

// mountArgsFor and mountResFor do the same for MOUNT procedures.
func mountArgsFor(proc uint32) codec {
	switch proc {
	case MountProcMnt:
		return new(MntArgs)
	case MountProcUmnt:
		return new(UmntArgs)
	}
	return nil
}

func mountResFor(proc uint32) codec {
	switch proc {
	case MountProcMnt:
		return new(MntRes)
	case MountProcDump:
		return new(DumpRes)
	case MountProcExport:
		return new(ExportRes)
	}
	return nil
}

// newLike returns a new zero value of v's type.
func newLike(v codec) codec { return reflect.New(reflect.TypeOf(v).Elem()).Interface().(codec) }

// names yields the filenames samples use: with ascii false they hold bytes
// 0x80-0xff, and their lengths are odd or not a multiple of 4, so padding
// is exercised.
type names struct{ ascii bool }

func (n names) name(i int) []byte {
	if n.ascii {
		return []byte(fmt.Sprintf("file-%d.txt"+"xyz"[:i%3], i))
	}
	return append([]byte{0x80, 'a', 0xff, 0xc3}, []byte(fmt.Sprintf("\xfe%d"+"\x81\x82"[:i%3], i))...)
}

func (n names) path() []byte {
	if n.ascii {
		return []byte("/srv/export/dir")
	}
	return []byte("/srv/\xe9t\xe9/\xff")
}

func fh(seed byte, n int) FH {
	b := make(FH, n)
	for i := range b {
		b[i] = seed + byte(i)*7
	}
	return b
}

func fattr(seed uint32) Fattr {
	return Fattr{
		Type: TypeReg, Mode: 0o100644 ^ seed&0o777, Nlink: seed + 1, UID: 1000 + seed, GID: 2000 + seed,
		Size: 1<<40 + uint64(seed), Used: 1<<33 + uint64(seed), Rdev: SpecData{Major: 8, Minor: seed},
		Fsid: 0xfedcba9876543210, Fileid: 1<<63 + uint64(seed),
		Atime: Time{Seconds: 1700000000 + seed, Nseconds: 999999999},
		Mtime: Time{Seconds: 1600000000, Nseconds: seed},
		Ctime: Time{Seconds: 0xffffffff, Nseconds: 1},
	}
}

func postAttr(seed uint32) PostOpAttr { return PostOpAttr{Present: true, Attr: fattr(seed)} }

func wcc(seed uint32) WccData {
	return WccData{
		Before: PreOpAttr{Present: true, Attr: WccAttr{Size: uint64(seed) << 20,
			Mtime: Time{Seconds: seed, Nseconds: 5}, Ctime: Time{Seconds: seed + 1, Nseconds: 6}}},
		After: postAttr(seed + 10),
	}
}

func verf(seed byte) Verf { return Verf{seed, 0xff, 0x80, 3, 4, 5, 6, seed ^ 0x55} }

// sattrs covers every arm of every field of sattr3.
func sattrs() []Sattr {
	return []Sattr{
		{},
		{SetMode: true, Mode: 0o4755, SetUID: true, UID: 0, SetGID: true, GID: 0xfffffffe, SetSize: true, Size: 1<<63 + 3,
			Atime: SetTime{How: SetToServerTime}, Mtime: SetTime{How: SetToClientTime, Time: Time{Seconds: 12, Nseconds: 34}}},
		{SetSize: true, Size: 0, Atime: SetTime{How: SetToClientTime, Time: Time{Seconds: 1, Nseconds: 2}}, Mtime: SetTime{How: SetToServerTime}},
	}
}

// samples returns values of every argument and result type, covering both
// arms of every union.
func samples(n names) []sample {
	var s []sample
	add := func(name string, proc uint32, res bool, v codec) {
		s = append(s, sample{name: name, proc: proc, res: res, v: v})
	}
	addMount := func(name string, proc uint32, res bool, v codec) {
		s = append(s, sample{name: name, proc: proc, mount: true, res: res, v: v})
	}
	dirop := func(i int) DirOpArgs { return DirOpArgs{Dir: fh(byte(i), 28+i%5), Name: n.name(i)} }
	sa := sattrs()

	add("getattr", ProcGetattr, false, &GetattrArgs{Obj: fh(1, 32)})
	add("getattr-ok", ProcGetattr, true, &GetattrRes{Status: OK, Attr: fattr(1)})
	add("getattr-stale", ProcGetattr, true, &GetattrRes{Status: ErrStale})

	for i, a := range sa {
		add(fmt.Sprintf("setattr-%d", i), ProcSetattr, false, &SetattrArgs{Obj: fh(2, 17), Attr: a})
		add(fmt.Sprintf("setattr-guard-%d", i), ProcSetattr, false, &SetattrArgs{Obj: fh(2, 64), Attr: a, Guard: true, GuardCtime: Time{Seconds: 77, Nseconds: 88}})
	}
	add("setattr-ok", ProcSetattr, true, &SetattrRes{Status: OK, Wcc: wcc(3)})
	add("setattr-notsync", ProcSetattr, true, &SetattrRes{Status: ErrNotSync, Wcc: WccData{After: postAttr(4)}})

	add("lookup", ProcLookup, false, &LookupArgs{What: dirop(1)})
	add("lookup-ok", ProcLookup, true, &LookupRes{Status: OK, Obj: fh(9, 21), ObjAttr: postAttr(5), DirAttr: postAttr(6)})
	add("lookup-ok-noattr", ProcLookup, true, &LookupRes{Status: OK, Obj: fh(9, 8)})
	add("lookup-noent", ProcLookup, true, &LookupRes{Status: ErrNoEnt, DirAttr: postAttr(7)})

	add("access", ProcAccess, false, &AccessArgs{Obj: fh(3, 3), Access: AccessRead | AccessLookup | AccessExecute})
	add("access-ok", ProcAccess, true, &AccessRes{Status: OK, ObjAttr: postAttr(8), Access: AccessRead})
	add("access-acces", ProcAccess, true, &AccessRes{Status: ErrAcces, ObjAttr: postAttr(9)})

	add("readlink", ProcReadlink, false, &ReadlinkArgs{Symlink: fh(4, 31)})
	add("readlink-ok", ProcReadlink, true, &ReadlinkRes{Status: OK, SymlinkAttr: postAttr(10), Data: n.path()})
	add("readlink-inval", ProcReadlink, true, &ReadlinkRes{Status: ErrInval})
	hostile := func(name string, proc uint32, v codec) {
		s = append(s, sample{name: name, proc: proc, res: true, hostile: true, v: v})
	}
	hostile("readlink-ok-pathmax", ProcReadlink, &ReadlinkRes{Status: OK, Data: bytes.Repeat([]byte("l"), MaxPathLen)})
	hostile("readlink-ok-overlong", ProcReadlink, &ReadlinkRes{Status: OK, SymlinkAttr: postAttr(10), Data: bytes.Repeat(n.path(), 400)})

	add("read", ProcRead, false, &ReadArgs{File: fh(5, 32), Offset: 1<<62 + 1, Count: 65536})
	add("read-ok", ProcRead, true, &ReadRes{Status: OK, FileAttr: postAttr(11), Count: 5, EOF: true, Data: []byte("\x00\x01\xfe\xffz")})
	add("read-ok-empty", ProcRead, true, &ReadRes{Status: OK, Count: 0, EOF: true, Data: []byte{}})
	add("read-io", ProcRead, true, &ReadRes{Status: ErrIO, FileAttr: postAttr(12)})

	add("write", ProcWrite, false, &WriteArgs{File: fh(6, 32), Offset: 4096, Count: 7, Stable: DataSync, Data: []byte("\xffwrite\x80")})
	add("write-unstable", ProcWrite, false, &WriteArgs{File: fh(6, 1), Offset: 0, Count: 0, Stable: Unstable, Data: []byte{}})
	add("write-ok", ProcWrite, true, &WriteRes{Status: OK, Wcc: wcc(13), Count: 7, Committed: FileSync, Verf: verf(1)})
	add("write-nospc", ProcWrite, true, &WriteRes{Status: ErrNoSpc, Wcc: wcc(14)})

	add("create-unchecked", ProcCreate, false, &CreateArgs{Where: dirop(2), Mode: Unchecked, Attr: sa[1]})
	add("create-guarded", ProcCreate, false, &CreateArgs{Where: dirop(3), Mode: Guarded, Attr: sa[2]})
	add("create-exclusive", ProcCreate, false, &CreateArgs{Where: dirop(4), Mode: Exclusive, Verf: verf(2)})
	dirRes := func(name string, proc uint32) {
		add(name+"-ok", proc, true, &DirOpRes{Status: OK, Obj: PostOpFH{Present: true, FH: fh(byte(proc), 19)}, ObjAttr: postAttr(proc), DirWcc: wcc(proc)})
		add(name+"-ok-nofh", proc, true, &DirOpRes{Status: OK, DirWcc: WccData{Before: PreOpAttr{Present: true}}})
		add(name+"-exist", proc, true, &DirOpRes{Status: ErrExist, DirWcc: wcc(proc + 1)})
	}
	dirRes("create", ProcCreate)
	hostile("create-ok-widefh", ProcCreate, &DirOpRes{Status: OK, Obj: PostOpFH{Present: true, FH: fh(1, FHSize+1)}, ObjAttr: postAttr(3), DirWcc: wcc(4)})
	hostile("mkdir-ok-emptyfh", ProcMkdir, &DirOpRes{Status: OK, Obj: PostOpFH{Present: true, FH: FH{}}, DirWcc: wcc(5)})

	add("mkdir", ProcMkdir, false, &MkdirArgs{Where: dirop(5), Attr: sa[1]})
	dirRes("mkdir", ProcMkdir)

	add("symlink", ProcSymlink, false, &SymlinkArgs{Where: dirop(6), Attr: sa[0], Data: n.path()})
	dirRes("symlink", ProcSymlink)

	add("mknod-chr", ProcMknod, false, &MknodArgs{Where: dirop(7), Type: TypeChr, Attr: sa[1], Spec: SpecData{Major: 1, Minor: 3}})
	add("mknod-blk", ProcMknod, false, &MknodArgs{Where: dirop(8), Type: TypeBlk, Attr: sa[0], Spec: SpecData{Major: 8, Minor: 0xffffffff}})
	add("mknod-sock", ProcMknod, false, &MknodArgs{Where: dirop(9), Type: TypeSock, Attr: sa[2]})
	add("mknod-fifo", ProcMknod, false, &MknodArgs{Where: dirop(10), Type: TypeFifo, Attr: sa[1]})
	add("mknod-reg", ProcMknod, false, &MknodArgs{Where: dirop(11), Type: TypeReg})
	add("mknod-dir", ProcMknod, false, &MknodArgs{Where: dirop(12), Type: TypeDir})
	add("mknod-lnk", ProcMknod, false, &MknodArgs{Where: dirop(13), Type: TypeLnk})
	dirRes("mknod", ProcMknod)

	add("remove", ProcRemove, false, &RemoveArgs{Obj: dirop(14)})
	add("remove-ok", ProcRemove, true, &RemoveRes{Status: OK, DirWcc: wcc(15)})
	add("remove-noent", ProcRemove, true, &RemoveRes{Status: ErrNoEnt, DirWcc: wcc(16)})

	add("rmdir", ProcRmdir, false, &RmdirArgs{Obj: dirop(15)})
	add("rmdir-ok", ProcRmdir, true, &RmdirRes{Status: OK, DirWcc: wcc(17)})
	add("rmdir-notempty", ProcRmdir, true, &RmdirRes{Status: ErrNotEmpty})

	add("rename", ProcRename, false, &RenameArgs{From: dirop(16), To: dirop(17)})
	add("rename-ok", ProcRename, true, &RenameRes{Status: OK, FromDirWcc: wcc(18), ToDirWcc: wcc(19)})
	add("rename-xdev", ProcRename, true, &RenameRes{Status: ErrXDev, ToDirWcc: wcc(20)})

	add("link", ProcLink, false, &LinkArgs{File: fh(7, 12), Link: dirop(18)})
	add("link-ok", ProcLink, true, &LinkRes{Status: OK, FileAttr: postAttr(21), LinkDirWcc: wcc(22)})
	add("link-mlink", ProcLink, true, &LinkRes{Status: ErrMLink, FileAttr: postAttr(23), LinkDirWcc: wcc(24)})

	add("readdir", ProcReaddir, false, &ReaddirArgs{Dir: fh(8, 32), Cookie: 1<<63 + 5, CookieVerf: verf(3), Count: 8192})
	ents := make([]DirEntry, 5)
	for i := range ents {
		ents[i] = DirEntry{Fileid: uint64(i)<<40 + 1, Name: n.name(i), Cookie: uint64(i) + 1<<32}
	}
	add("readdir-ok", ProcReaddir, true, &ReaddirRes{Status: OK, DirAttr: postAttr(25), CookieVerf: verf(4), Entries: ents, EOF: true})
	add("readdir-ok-empty", ProcReaddir, true, &ReaddirRes{Status: OK, CookieVerf: verf(5), EOF: false})
	add("readdir-badcookie", ProcReaddir, true, &ReaddirRes{Status: ErrBadCookie, DirAttr: postAttr(26)})
	var bad []DirEntry
	for i, name := range [][]byte{[]byte("a/b"), {}, []byte("x\x00y"), bytes.Repeat([]byte("n"), MaxNameLen+1), n.name(1), bytes.Repeat(n.name(2), 700)} {
		bad = append(bad, DirEntry{Fileid: uint64(i) + 9, Name: name, Cookie: uint64(i) + 1})
	}
	hostile("readdir-ok-badnames", ProcReaddir, &ReaddirRes{Status: OK, DirAttr: postAttr(25), CookieVerf: verf(4), Entries: bad, EOF: true})

	add("readdirplus", ProcReaddirplus, false, &ReaddirplusArgs{Dir: fh(9, 32), Cookie: 77, CookieVerf: verf(6), DirCount: 4096, MaxCount: 32768})
	pents := make([]DirEntryPlus, 4)
	for i := range pents {
		pents[i] = DirEntryPlus{Fileid: uint64(i) + 100, Name: n.name(i + 3), Cookie: uint64(i) * 3}
		if i%2 == 0 {
			pents[i].Attr = postAttr(uint32(i))
		}
		if i != 1 {
			pents[i].FH = PostOpFH{Present: true, FH: fh(byte(i), 13+i)}
		}
	}
	add("readdirplus-ok", ProcReaddirplus, true, &ReaddirplusRes{Status: OK, DirAttr: postAttr(27), CookieVerf: verf(7), Entries: pents, EOF: false})
	add("readdirplus-ok-empty", ProcReaddirplus, true, &ReaddirplusRes{Status: OK, CookieVerf: verf(8), EOF: true})
	badPlus := []DirEntryPlus{
		{Fileid: 1, Name: n.name(1), Cookie: 1, Attr: postAttr(1), FH: PostOpFH{Present: true, FH: fh(1, FHSize+1)}},
		{Fileid: 2, Name: n.name(2), Cookie: 2, Attr: postAttr(2), FH: PostOpFH{Present: true, FH: FH{}}},
		{Fileid: 3, Name: bytes.Repeat([]byte("/"), 300), Cookie: 3, FH: PostOpFH{Present: true, FH: fh(3, 4096)}},
		{Fileid: 4, Name: n.name(4), Cookie: 4, Attr: postAttr(4), FH: PostOpFH{Present: true, FH: fh(4, 32)}},
	}
	hostile("readdirplus-ok-badhandles", ProcReaddirplus, &ReaddirplusRes{Status: OK, DirAttr: postAttr(27), CookieVerf: verf(7), Entries: badPlus, EOF: true})
	add("readdirplus-toosmall", ProcReaddirplus, true, &ReaddirplusRes{Status: ErrTooSmall})

	add("fsstat", ProcFsstat, false, &FsstatArgs{Root: fh(10, 32)})
	add("fsstat-ok", ProcFsstat, true, &FsstatRes{Status: OK, ObjAttr: postAttr(28),
		Tbytes: 1 << 50, Fbytes: 1<<49 + 1, Abytes: 1<<48 + 2, Tfiles: 1 << 30, Ffiles: 1<<29 + 3, Afiles: 1<<28 + 4, Invarsec: 0xffffffff})
	add("fsstat-io", ProcFsstat, true, &FsstatRes{Status: ErrIO})

	add("fsinfo", ProcFsinfo, false, &FsinfoArgs{Root: fh(11, 32)})
	add("fsinfo-ok", ProcFsinfo, true, &FsinfoRes{Status: OK, ObjAttr: postAttr(29), Rtmax: 1 << 20, Rtpref: 1 << 17, Rtmult: 4096,
		Wtmax: 1 << 20, Wtpref: 1 << 16, Wtmult: 512, Dtpref: 8192, MaxFileSize: 1<<63 - 1,
		TimeDelta: Time{Seconds: 0, Nseconds: 1}, Properties: FSFLink | FSFSymlink | FSFHomogeneous | FSFCanSetTime})
	add("fsinfo-stale", ProcFsinfo, true, &FsinfoRes{Status: ErrStale, ObjAttr: postAttr(30)})

	add("pathconf", ProcPathconf, false, &PathconfArgs{Obj: fh(12, 32)})
	add("pathconf-ok", ProcPathconf, true, &PathconfRes{Status: OK, ObjAttr: postAttr(31), Linkmax: 65000, NameMax: 255,
		NoTrunc: true, ChownRestricted: false, CaseInsensitive: true, CasePreserving: true})
	add("pathconf-badhandle", ProcPathconf, true, &PathconfRes{Status: ErrBadHandle})

	add("commit", ProcCommit, false, &CommitArgs{File: fh(13, 32), Offset: 1 << 33, Count: 0})
	add("commit-ok", ProcCommit, true, &CommitRes{Status: OK, Wcc: wcc(32), Verf: verf(9)})
	add("commit-jukebox", ProcCommit, true, &CommitRes{Status: ErrJukebox, Wcc: wcc(33)})

	addMount("mnt", MountProcMnt, false, &MntArgs{Path: n.path()})
	addMount("umnt", MountProcUmnt, false, &UmntArgs{Path: n.path()[:5]})
	addMount("mnt-ok", MountProcMnt, true, &MntRes{Status: MntOK, FH: fh(14, 33), AuthFlavors: []uint32{1, 0, 390003}})
	addMount("mnt-ok-noflavors", MountProcMnt, true, &MntRes{Status: MntOK, FH: fh(15, 64)})
	addMount("mnt-acces", MountProcMnt, true, &MntRes{Status: MntErrAcces})
	addMount("dump", MountProcDump, true, &DumpRes{Mounts: []MountEntry{
		{Hostname: n.name(1), Directory: n.path()}, {Hostname: []byte("h"), Directory: []byte("/")}}})
	addMount("dump-empty", MountProcDump, true, &DumpRes{})
	addMount("export", MountProcExport, true, &ExportRes{Exports: []ExportNode{
		{Dir: n.path(), Groups: [][]byte{n.name(2), []byte("127.0.0.1"), n.name(3)}},
		{Dir: []byte("/b")},
		{Dir: []byte("/cc"), Groups: [][]byte{[]byte("*")}},
	}})
	addMount("export-empty", MountProcExport, true, &ExportRes{})
	return s
}

// deepEqual compares like reflect.DeepEqual, except that a nil slice equals
// an empty one (an encoding cannot tell them apart).
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
	case reflect.String:
		return a.String() == b.String()
	case reflect.Bool:
		return a.Bool() == b.Bool()
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
		return a.Int() == b.Int()
	case reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		return a.Uint() == b.Uint()
	}
	panic("deepEqual: unhandled kind " + a.Kind().String())
}
