package proto

// The results of Server's methods. Status is nil when the operation
// succeeded, else an Error; the other fields are what the server's answer
// carried (on failure, only what the protocol returns with one: in v3, the
// attributes and wcc data).

// AttrRes is GetAttr's result.
type AttrRes struct {
	Status error
	Attr   Attr // on success
}

// WccRes is SetAttr's result.
type WccRes struct {
	Status error
	Wcc    Wcc
}

// LookupRes is Lookup's result.
type LookupRes struct {
	Status  error
	FH      FH       // on success
	Attr    PostAttr // on success: the file's
	DirAttr PostAttr // the directory's
}

// AccessRes is Access's result.
type AccessRes struct {
	Status error
	Attr   PostAttr
	Access uint32 // on success: the Access* bits granted of those asked
}

// ReadlinkRes is Readlink's result.
type ReadlinkRes struct {
	Status error
	Attr   PostAttr
	Target []byte // on success
}

// ReadRes is Read's result; the data is in the caller's buffer.
type ReadRes struct {
	Status error
	Attr   PostAttr
	N      int  // bytes read into the buffer
	EOF    bool // the read reached the end of the file
}

// WriteRes is Write's result.
type WriteRes struct {
	Status    error
	Wcc       Wcc
	Count     uint32 // on success: bytes written, from the start of the data
	Committed Stable // how durable they are
	Verf      Verf   // the write verifier: a COMMIT with another one lost them
}

// CommitRes is Commit's result.
type CommitRes struct {
	Status error
	Wcc    Wcc
	Verf   Verf // on success
}

// CreateRes is the result of Create, Mkdir, Symlink and Mknod. A server
// may leave the new file's handle or attributes out (v3 allows it): the
// core then looks the name up.
type CreateRes struct {
	Status error
	FH     PostFH   // on success
	Attr   PostAttr // on success
	DirWcc Wcc
}

// RemoveRes is the result of Remove and Rmdir.
type RemoveRes struct {
	Status error
	DirWcc Wcc
}

// RenameRes is Rename's result.
type RenameRes struct {
	Status     error
	FromDirWcc Wcc
	ToDirWcc   Wcc
}

// LinkRes is Link's result.
type LinkRes struct {
	Status error
	Attr   PostAttr // the file's
	DirWcc Wcc      // the directory the new name is in
}

// ReadDirArgs asks for one page of a listing: the entries after Cookie
// (0: from the start), read with the cookie verifier the page before it
// came with (zero from the start). Count bounds the reply (READDIR), or
// the names and cookies in it (READDIRPLUS, whose whole reply MaxCount
// bounds).
type ReadDirArgs struct {
	Dir      FH
	Cookie   uint64
	Verf     Verf
	Count    uint32
	MaxCount uint32 // ReadDirPlus only
	// WantDirDeleg asks, in the same round trip and before the listing is
	// read, for a delegation of the directory (a proto.Delegator's
	// servers only; ReadDirRes.DirDeleg).
	WantDirDeleg bool
}

// ReadDirRes is one page of a listing.
type ReadDirRes struct {
	Status  error
	DirAttr PostAttr
	Verf    Verf // on success: the cookie verifier to read on with
	Entries []DirEntry
	EOF     bool // no entries after these
	// DirDeleg is the directory delegation WantDirDeleg brought, granted
	// before the listing was read (whatever Status says: the core keeps
	// or returns it).
	DirDeleg DirDelegation
}

// DirEntry is one entry of a listing page. Name and FH.FH may be anything
// the server sent (empty, too long, holding '/' or NUL): the core checks
// them, so that one bad entry never costs the listing.
type DirEntry struct {
	Fileid uint64
	Name   []byte
	Cookie uint64   // where a listing reads on after this entry
	Attr   PostAttr // ReadDirPlus only
	FH     PostFH   // ReadDirPlus only
}

// FsStatRes is FsStat's result: bytes and files, total (T), free (F) and
// available to the caller (A).
type FsStatRes struct {
	Status                 error
	Attr                   PostAttr
	Tbytes, Fbytes, Abytes uint64
	Tfiles, Ffiles, Afiles uint64
}

// FsInfoRes is FsInfo's result: the server's transfer sizes and limits.
// A zero size means the server did not say.
type FsInfoRes struct {
	Status      error
	Attr        PostAttr
	Rtmax       uint32 // largest READ
	Wtmax       uint32 // largest WRITE
	Dtpref      uint32 // preferred listing page
	MaxFileSize uint64
}

// PathConfRes is PathConf's result.
type PathConfRes struct {
	Status  error
	Attr    PostAttr
	NameMax uint32 // longest name
	LinkMax uint32
}
