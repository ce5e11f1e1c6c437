package proto

// Cred is the identity a call is made with: the calling process's.
type Cred struct {
	UID    uint32
	GID    uint32
	Groups []uint32
}

// FH is a file handle: opaque bytes the server made, at most
// Limits.MaxHandle long. A handle in a result may alias the reply.
type FH []byte

// Verf is an 8-byte verifier: a directory's cookie verifier, a write
// verifier (v3 writeverf3, v4 verifier4), or an exclusive create's.
type Verf [8]byte

// Time is a time as servers keep it: seconds since 1970 and nanoseconds.
// NFSv3 carries only seconds in [0, 2^32) (Limits says what a protocol can
// carry); v4 carries any.
type Time struct {
	Sec  int64
	Nsec uint32
}

// FileType is a file's type. The values are NFSv3's ftype3 and v4's
// nfs_ftype4 alike.
type FileType uint32

const (
	TypeReg  FileType = 1
	TypeDir  FileType = 2
	TypeBlk  FileType = 3
	TypeChr  FileType = 4
	TypeLnk  FileType = 5
	TypeSock FileType = 6
	TypeFifo FileType = 7
)

// Device is a device file's numbers (v3 specdata3, v4 specdata4).
type Device struct {
	Major uint32
	Minor uint32
}

// Fsid names the file system a file is on (v3 has one number: Major).
type Fsid struct {
	Major uint64
	Minor uint64
}

// Attr is a file's attributes as a server reports them.
type Attr struct {
	Type   FileType
	Mode   uint32 // permission, set-id and sticky bits (07777)
	Nlink  uint32
	UID    uint32 // v4's owner strings become numbers in the protocol package
	GID    uint32
	Size   uint64
	Used   uint64 // bytes of storage the file takes
	Rdev   Device
	Fsid   Fsid
	Fileid uint64
	Atime  Time
	Mtime  Time
	Ctime  Time
	// Change is v4's change attribute, which the server moves with every
	// change of the file; HasChange is false where the protocol has none
	// (v3), where mtime and ctime stand for it.
	Change    uint64
	HasChange bool
}

// PostAttr is attributes a reply may carry (v3 post_op_attr; v4 a GETATTR
// in the compound).
type PostAttr struct {
	Present bool
	Attr    Attr
}

// WccAttr is what is known of a file just before an operation changed it:
// v3's wcc_attr (size, mtime, ctime) or v4's change_info before value
// (Change).
type WccAttr struct {
	Size      uint64
	Mtime     Time
	Ctime     Time
	Change    uint64
	HasChange bool
}

// PreAttr is the optional WccAttr of a reply.
type PreAttr struct {
	Present bool
	Attr    WccAttr
}

// Wcc is what changed around an operation that modified a file or
// directory: its attributes before and after (v3 wcc_data). A v4 protocol
// fills Before from change_info's before value and After from the
// compound's GETATTR (whose Change is change_info's after value); Atomic
// is change_info's word that nothing else happened in between (v3: false,
// though the core treats wcc data whose before matches its cache as
// proof).
type Wcc struct {
	Before PreAttr
	After  PostAttr
	Atomic bool
}

// PostFH is a handle a reply may carry (v3 post_op_fh3).
type PostFH struct {
	Present bool
	FH      FH
}

// TimeHow says how SetAttrs sets a time.
type TimeHow uint8

const (
	DontChange      TimeHow = iota // leave it
	SetToServerTime                // the server's clock
	SetToClientTime                // SetTime.Time
)

// SetTime is one time a SetAttrs sets.
type SetTime struct {
	How  TimeHow
	Time Time // with SetToClientTime
}

// SetAttrs are the attributes a SETATTR or a create sets; each only when
// its Set flag is true (times: unless DontChange).
type SetAttrs struct {
	SetMode bool
	Mode    uint32
	SetUID  bool
	UID     uint32
	SetGID  bool
	GID     uint32
	SetSize bool
	Size    uint64
	Atime   SetTime
	Mtime   SetTime
}

// CreateMode is how a create treats an existing name.
type CreateMode uint8

const (
	Unchecked CreateMode = iota // an existing file is opened (truncated if Attrs say so)
	Guarded                     // an existing name fails with EEXIST
	Exclusive                   // the server remembers CreateHow.Verf: a retransmission succeeds
)

// CreateHow says how Create makes a regular file.
type CreateHow struct {
	Mode  CreateMode
	Attrs SetAttrs // Unchecked and Guarded
	Verf  Verf     // Exclusive
}

// Stable is how durable a WRITE's data is when the server answers.
type Stable uint32

const (
	Unstable Stable = 0 // in the server's memory: COMMIT makes it durable
	DataSync Stable = 1 // the data durable, not all metadata
	FileSync Stable = 2 // data and metadata durable
)

func (s Stable) String() string {
	switch s {
	case Unstable:
		return "UNSTABLE"
	case DataSync:
		return "DATA_SYNC"
	case FileSync:
		return "FILE_SYNC"
	}
	return "stable(?)"
}

// Access bits: what Access asks and the server grants. The values are
// v3's and v4's alike.
const (
	AccessRead    = 0x0001 // read data, list a directory
	AccessLookup  = 0x0002 // look up a name in a directory
	AccessModify  = 0x0004 // rewrite data, change a directory's entries
	AccessExtend  = 0x0008 // append data, add a directory entry
	AccessDelete  = 0x0010 // remove a directory entry
	AccessExecute = 0x0020 // execute a file
)
