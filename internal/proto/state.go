package proto

import "context"

// Where NFSv4.1 plugs in beyond Server. A protocol implements these
// optional interfaces alongside Server; the core finds them by type
// assertion (srv.(proto.Opener)) and keeps its v3 behaviour where they are
// absent. NFSv3 implements none. They are declared here so that the v4.1
// protocol and the core meet at one place; their shapes will be refined
// as they get their first implementation.

// StateID is v4 state the server hands out: an open, a lock, a
// delegation (stateid4).
type StateID struct {
	Seq   uint32
	Other [12]byte
}

// Share access and deny bits of an open (v4 OPEN4_SHARE_*).
const (
	ShareRead  = 1
	ShareWrite = 2
	ShareBoth  = 3
)

// DelegType is the kind of delegation a server granted.
type DelegType uint8

const (
	DelegNone  DelegType = iota
	DelegRead            // the file does not change but through us: reopen without a call
	DelegWrite           // nobody else has it open: writes and attributes are ours to hold
)

// Delegation is a delegation the server granted with an open. Limit is a
// write delegation's space limit (nfs_space_limit4, in bytes): the size
// up to which the holder may extend the file without writing through.
type Delegation struct {
	Type  DelegType
	State StateID
	Limit uint64
}

// DirDelegation is a delegation of a directory (v4.1 GET_DIR_DELEGATION):
// while it is held, the server recalls it before anyone else changes the
// directory's entries or attributes. ChildAttrs: the server also tells
// of (or recalls for) every change of its entries' attributes, so these
// stay valid too.
type DirDelegation struct {
	Granted    bool
	State      StateID
	ChildAttrs bool
	// Entries: entries added and removed by others are told (Notify:
	// EntryAdded, EntryRemoved), not recalled; DirAttrs: the directory's
	// attributes come with them (DirAttrsChanged).
	Entries, DirAttrs bool
}

// OpenArgs opens a file: by name in Dir (Create, if set, makes it), or an
// already known FH. Access and Deny are Share* bits. The open is the
// caller's identity's (one open owner per uid, as Linux has). Check, if
// not zero, are the ACCESS bits to ask for in the same round trip.
// WantDeleg asks for a delegation: a read delegation with an open for
// reading, a write delegation with one for writing (a server that grants
// one returns it in OpenRes.Deleg, and the core must keep or return it);
// otherwise none is wanted. ReadFirst, if not zero, asks for up to that
// many bytes from offset 0 in the same round trip (an open for reading by
// handle; the protocol may read less, or nothing). NoWait returns a
// server's "not yet" (OpenRes.Status ErrDelay) instead of waiting it out:
// a caller holding what the answer to a recall needs must let go first.
type OpenArgs struct {
	Dir       FH
	Name      string
	FH        FH
	Access    uint32
	Deny      uint32
	Create    *CreateHow
	Check     uint32
	WantDeleg bool
	ReadFirst uint32
	NoWait    bool
}

// OpenRes is what an open brought: the file, its state and, in the same
// round trip, its attributes and the caller's rights (what v3's
// close-to-open GETATTR and ACCESS give).
type OpenRes struct {
	Status  error
	FH      FH
	Attr    PostAttr
	DirWcc  Wcc // a create's
	State   StateID
	Deleg   Delegation
	Access  uint32 // Access* bits granted, when Granted
	Granted bool
	// Data is the file's first bytes (ReadFirst), when HasData: the file
	// as Attr describes it (nothing changed it between them); DataEOF
	// says they reach its end.
	Data    []byte
	DataEOF bool
	HasData bool
}

// Opener is a server with open state (v4.1 OPEN, CLOSE, OPEN_DOWNGRADE).
// The core opens through it where v3 sends close-to-open's GETATTR, and
// closes at the last release of the file.
type Opener interface {
	Open(ctx context.Context, c *Cred, a OpenArgs) (OpenRes, error)
	CloseOpen(ctx context.Context, c *Cred, fh FH, st StateID) error
	Downgrade(ctx context.Context, c *Cred, fh FH, st StateID, access, deny uint32) (StateID, error)
}

// StateIO is a server whose I/O names the open it is done under (v4.1's
// READ, WRITE and SETATTR of a size take the open's stateid); the core
// uses it for files it holds open through an Opener. A Status with
// CondBadState says the server no longer knows the state.
type StateIO interface {
	ReadState(ctx context.Context, c *Cred, st StateID, fh FH, off uint64, dst []byte) (ReadRes, error)
	WriteState(ctx context.Context, c *Cred, st StateID, fh FH, off uint64, data []byte, stable Stable) (WriteRes, error)
	SetAttrState(ctx context.Context, c *Cred, st StateID, fh FH, in SetAttrs) (WccRes, error)
}

// LockType is a byte-range lock's kind.
type LockType uint8

const (
	ReadLock LockType = iota + 1
	WriteLock
)

// LockArgs names a byte-range lock: [Offset, Offset+Length) (Length 0: to
// the end) of FH, held by Owner (the kernel's lock owner) under the open
// State. Wait says the caller will wait for it (a hint for the server's
// fairness: v4's blocking lock types).
type LockArgs struct {
	FH     FH
	State  StateID
	Owner  uint64
	Type   LockType
	Offset uint64
	Length uint64
	Wait   bool
}

// LockRes is a lock call's result; Conflict describes a lock in the way
// (Status EAGAIN).
type LockRes struct {
	Status   error
	State    StateID
	Conflict *LockArgs
}

// Locker is a server with byte-range locks between clients (v4.1 LOCK,
// LOCKU, LOCKT), which the core wires to fcntl and flock. A lock owner's
// locks on a file are kept under the open State they were first taken
// with; closing that open (Opener.CloseOpen) forgets them.
type Locker interface {
	Lock(ctx context.Context, c *Cred, a LockArgs) (LockRes, error)
	Unlock(ctx context.Context, c *Cred, a LockArgs) (LockRes, error)
	TestLock(ctx context.Context, c *Cred, a LockArgs) (LockRes, error)
}

// Callbacks is what the core answers a server's calls with (v4.1's back
// channel).
type Callbacks interface {
	// Recall: the server wants the delegation back (CB_RECALL). The core
	// writes what it holds under it and returns it (ReturnDelegation)
	// without blocking the caller.
	Recall(fh FH, st StateID, truncate bool)
	// GetAttr: the size and change the core holds for a file under a
	// write delegation (CB_GETATTR); ok false if it holds none.
	GetAttr(fh FH) (size, change uint64, ok bool)
	// Revoked: the server says it revoked some of our recallable state
	// (v4.1's SEQUENCE status flags), without saying which: no delegation
	// may be trusted any more. Must not block the caller.
	Revoked()
}

// DirChangeKind is what changed in a delegated directory.
type DirChangeKind uint8

const (
	ChildAttrsChanged DirChangeKind = iota + 1 // Name's attributes
	EntryAdded                                 // Name
	EntryRemoved                               // Name
	EntryRenamed                               // Name became NewName
	DirAttrsChanged                            // the directory's attributes are Attr
)

// DirChange is one change the server told of in a delegated directory
// (v4.1 CB_NOTIFY). Attr is the entry's new attributes where sent, FH
// its handle where sent (an added entry).
type DirChange struct {
	Kind    DirChangeKind
	Name    string
	NewName string
	Attr    PostAttr
	FH      FH
}

// DirDelegator is a server that may grant directory delegations with
// listings (ReadDirArgs.WantDirDeleg). DirDelegations reports whether it
// has answered such a request (granted or not): until then, and for a
// server that does not know the operation, the core reads no listing
// from it only to ask for one.
type DirDelegator interface {
	DirDelegations() bool
}

// DirAttrDelegator is a DirDelegator that also asks for a directory's
// delegation in its GETATTR's round trip: for a directory whose
// attributes are revalidated but which is never listed (the directories
// on a path, .git's). Granted as with a listing (the DirDelegation);
// the attributes come after the grant, so they are covered.
type DirAttrDelegator interface {
	GetAttrDirDeleg(ctx context.Context, c *Cred, fh FH) (AttrRes, DirDelegation, error)
}

// RemoveReturner is a Delegator that gives a file's delegation back in
// the COMPOUND that removes its name, before the removal: the server
// would otherwise recall it at the REMOVE (the file is going), and the
// return be a round trip of its own. returned reports that the server
// has it back, or had it no longer; else the caller returns it as usual
// (ReturnDelegation). The removal is done whether or not it was.
type RemoveReturner interface {
	RemoveReturning(ctx context.Context, c *Cred, dir FH, name string, file FH, st StateID) (res RemoveRes, returned bool, err error)
}

// DirNotifier is Callbacks that also take a delegated directory's
// changes. Notify reports whether the delegation (dir, st) is held here;
// it must not block the caller.
type DirNotifier interface {
	Notify(dir FH, st StateID, changes []DirChange) bool
}

// Delegator is a server that grants delegations. ReturnDelegation gives
// one back (DELEGRETURN); one the server already revoked or forgot is
// gone too, which is not an error (the protocol frees what the server
// still keeps of it).
//
// LeaseValid reports whether the lease our delegations hang on is known
// to be current (the server took a SEQUENCE within it): a client whose
// lease may have expired, one stopped for longer than the lease, must not
// act on a delegation the server may have revoked meanwhile (RFC 8881
// §10.2).
type Delegator interface {
	SetCallbacks(cb Callbacks)
	ReturnDelegation(ctx context.Context, c *Cred, fh FH, st StateID) error
	LeaseValid() bool
}

// PathWalker is a server that looks up several names in one round trip (a
// v4.1 COMPOUND of LOOKUPs): the results, in order, up to and including
// the first that failed.
type PathWalker interface {
	LookupPath(ctx context.Context, c *Cred, dir FH, names []string) ([]LookupRes, error)
}
