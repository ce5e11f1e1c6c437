package proto

import (
	"context"
	"time"
)

// Server is what a file server can do for the client core: one mounted
// export, reached with the caller's credential on every call. For NFSv3
// each method is one RPC of the procedure it is named after (ReadDirPlus:
// READDIRPLUS, FsStat: FSSTAT, ...), counted under that name.
//
// Names are the core's strings, sent as they are (opaque bytes on the
// wire). Methods are safe for concurrent use; calls run concurrently on
// the server, so replies come back in any order.
type Server interface {
	// Null checks the server answers (NULL).
	Null(ctx context.Context) error

	GetAttr(ctx context.Context, c *Cred, fh FH) (AttrRes, error)
	SetAttr(ctx context.Context, c *Cred, fh FH, s SetAttrs) (WccRes, error)
	Lookup(ctx context.Context, c *Cred, dir FH, name string) (LookupRes, error)
	// Access asks which of the Access* bits in mask c is granted on fh.
	Access(ctx context.Context, c *Cred, fh FH, mask uint32) (AccessRes, error)
	Readlink(ctx context.Context, c *Cred, fh FH) (ReadlinkRes, error)

	// Read reads into dst from off; a reply may bring less than asked
	// without reaching the end of the file (the caller reads on).
	Read(ctx context.Context, c *Cred, fh FH, off uint64, dst []byte) (ReadRes, error)
	Write(ctx context.Context, c *Cred, fh FH, off uint64, data []byte, stable Stable) (WriteRes, error)
	// Commit makes data written Unstable in [off, off+count) durable
	// (count 0: to the end of the file).
	Commit(ctx context.Context, c *Cred, fh FH, off uint64, count uint32) (CommitRes, error)

	Create(ctx context.Context, c *Cred, dir FH, name string, how CreateHow) (CreateRes, error)
	Mkdir(ctx context.Context, c *Cred, dir FH, name string, s SetAttrs) (CreateRes, error)
	Symlink(ctx context.Context, c *Cred, dir FH, name, target string, s SetAttrs) (CreateRes, error)
	// Mknod makes a FIFO, socket or device (dev: with TypeChr and TypeBlk).
	Mknod(ctx context.Context, c *Cred, dir FH, name string, t FileType, s SetAttrs, dev Device) (CreateRes, error)
	Remove(ctx context.Context, c *Cred, dir FH, name string) (RemoveRes, error)
	Rmdir(ctx context.Context, c *Cred, dir FH, name string) (RemoveRes, error)
	Rename(ctx context.Context, c *Cred, fromDir FH, fromName string, toDir FH, toName string) (RenameRes, error)
	// Link makes name in dir another name of fh.
	Link(ctx context.Context, c *Cred, fh, dir FH, name string) (LinkRes, error)

	// ReadDir and ReadDirPlus read one page of a listing; ReadDirPlus's
	// entries come with their handles and attributes. A cookie the server
	// no longer honours is ErrBadCookie; a server without ReadDirPlus
	// answers ErrNotSupp.
	ReadDir(ctx context.Context, c *Cred, a ReadDirArgs) (ReadDirRes, error)
	ReadDirPlus(ctx context.Context, c *Cred, a ReadDirArgs) (ReadDirRes, error)

	FsStat(ctx context.Context, c *Cred, fh FH) (FsStatRes, error)
	FsInfo(ctx context.Context, c *Cred, fh FH) (FsInfoRes, error)
	PathConf(ctx context.Context, c *Cred, fh FH) (PathConfRes, error)

	// MajorTimeout is closed at the next major timeout of a hard mount's
	// call (nfs(5)): where a soft mount's calls would fail. Unmount stops
	// waiting for write-back there.
	MajorTimeout() <-chan struct{}
	// Close ends the connection; calls in flight fail.
	Close() error
}

// Export is what mounting told the core about the export.
type Export struct {
	Root FH
	// RootAttrs are the root's attributes as the mount's calls brought
	// them, oldest first, each with the time its call was sent.
	RootAttrs []TimedAttr
	// Transfer sizes as the server gave them (0: it did not say); the
	// core picks its own within them.
	Rtmax, Wtmax, Dtpref uint32
	MaxFileSize          uint64 // 0: no limit given
	NameMax              uint32 // longest name the server takes; 0: unknown
	Limits               Limits
}

// SpaceKnower is a server that may know a file system's space without a
// call (NFSv4.1: what the mount's COMPOUND brought, for a short while).
// KnownFsStat returns it for the file system fsid, if it does; the
// result carries no attributes.
type SpaceKnower interface {
	KnownFsStat(fsid Fsid) (FsStatRes, bool)
}

// TimedAttr is attributes and when the call that brought them was sent.
type TimedAttr struct {
	Attr Attr
	At   time.Time
}

// Limits are what a protocol can carry at all.
type Limits struct {
	MaxHandle int // longest file handle (v3: 64 bytes; v4: 128)
	// MinTime and MaxTime bound the seconds of a time the protocol can
	// set (v3: 0 to 2^32-1). Anything else would be stored as another
	// time; the core refuses it with EOVERFLOW.
	MinTime, MaxTime int64
}

// TimeFits reports whether a time of sec seconds can be set.
func (l Limits) TimeFits(sec int64) bool { return sec >= l.MinTime && sec <= l.MaxTime }

// Hooks let the core count a protocol's calls (hushfs stats). Either may
// be nil.
type Hooks struct {
	// Calling is told of each NFS call just before it goes out, with the
	// caller's context: the core attributes the call to the kernel
	// operation behind it (--origins). Not MOUNT or portmapper calls.
	Calling func(ctx context.Context, name string)
	// Finished is told of every RPC once it ends, NFS or not.
	Finished func(*CallStats)
}

// CallStats describes one finished RPC.
type CallStats struct {
	// Name is the key it is counted under: the procedure as its RFC
	// spells it for NFS ("GETATTR"), prefixed by its program for others
	// ("MOUNT:MNT", "PORTMAP:GETPORT"); "OTHER" for what the protocol
	// cannot name.
	Name string
	// Ops are the operations the call carried where one call carries
	// several (a v4.1 COMPOUND's, by their RFC names); nil for v3, whose
	// call is its one operation.
	Ops           []string
	Transmissions int // 1 + retransmissions
	Timeouts      int
	BytesSent     int
	BytesReceived int
	Queue         time.Duration // waiting to be sent
	RTT           time.Duration // last transmission to reply
	Execute       time.Duration // the whole call
	Err           error
}
