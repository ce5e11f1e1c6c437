package nfs4

import "hushfs/internal/xdr"

// LockType is nfs_lock_type4.
type LockType uint32

const (
	ReadLT   LockType = 1
	WriteLT  LockType = 2
	ReadWLT  LockType = 3 // blocking read
	WriteWLT LockType = 4 // blocking write
)

func decodeLockType(d *xdr.Decoder) LockType {
	t := LockType(d.Uint32())
	if t < ReadLT || t > WriteWLT {
		d.SetErr(errBadEnum("nfs_lock_type4", uint32(t)))
		return 0
	}
	return t
}

// LockDenied is LOCK4denied: the conflicting lock.
type LockDenied struct {
	Offset   uint64
	Length   uint64
	LockType LockType
	Owner    StateOwner
}

func (l *LockDenied) append(b []byte) []byte {
	b = xdr.AppendUint64(b, l.Offset)
	b = xdr.AppendUint64(b, l.Length)
	b = xdr.AppendUint32(b, uint32(l.LockType))
	return l.Owner.append(b)
}

func (l *LockDenied) decode(d *xdr.Decoder) {
	l.Offset = d.Uint64()
	l.Length = d.Uint64()
	l.LockType = decodeLockType(d)
	l.Owner.decode(d)
}

// LockArgs is LOCK4args. With NewLockOwner the locker is
// open_to_lock_owner4 (the open's stateid and seqid, the lock owner's seqid
// and the new lock owner), otherwise exist_lock_owner4 (the lock stateid
// and the lock owner's seqid).
type LockArgs struct {
	LockType     LockType
	Reclaim      bool
	Offset       uint64
	Length       uint64
	NewLockOwner bool
	// NewLockOwner:
	OpenSeqid   uint32
	OpenStateid Stateid
	LockOwner   StateOwner
	// Both: the lock owner's seqid (ignored in 4.1).
	LockSeqid uint32
	// not NewLockOwner:
	LockStateid Stateid
}

// Append encodes the arguments.
func (a *LockArgs) Append(b []byte) []byte {
	b = xdr.AppendUint32(b, uint32(a.LockType))
	b = xdr.AppendBool(b, a.Reclaim)
	b = xdr.AppendUint64(b, a.Offset)
	b = xdr.AppendUint64(b, a.Length)
	b = xdr.AppendBool(b, a.NewLockOwner)
	if a.NewLockOwner {
		b = xdr.AppendUint32(b, a.OpenSeqid)
		b = a.OpenStateid.Append(b)
		b = xdr.AppendUint32(b, a.LockSeqid)
		return a.LockOwner.append(b)
	}
	b = a.LockStateid.Append(b)
	return xdr.AppendUint32(b, a.LockSeqid)
}

// Decode decodes the arguments; an unknown lock type is an error.
func (a *LockArgs) Decode(d *xdr.Decoder) {
	*a = LockArgs{LockType: decodeLockType(d)}
	a.Reclaim = d.Bool()
	a.Offset = d.Uint64()
	a.Length = d.Uint64()
	a.NewLockOwner = d.Bool()
	if a.NewLockOwner {
		a.OpenSeqid = d.Uint32()
		a.OpenStateid.Decode(d)
		a.LockSeqid = d.Uint32()
		a.LockOwner.decode(d)
	} else {
		a.LockStateid.Decode(d)
		a.LockSeqid = d.Uint32()
	}
}

// LockRes is LOCK4res.
type LockRes struct {
	Status  Status
	Stateid Stateid    // NFS4_OK: the lock stateid
	Denied  LockDenied // NFS4ERR_DENIED
}

// Append encodes the result.
func (r *LockRes) Append(b []byte) []byte {
	b = appendStatus(b, r.Status)
	switch r.Status {
	case OK:
		b = r.Stateid.Append(b)
	case ErrDenied:
		b = r.Denied.append(b)
	}
	return b
}

// Decode decodes the result.
func (r *LockRes) Decode(d *xdr.Decoder) {
	*r = LockRes{Status: decodeStatus(d)}
	switch r.Status {
	case OK:
		r.Stateid.Decode(d)
	case ErrDenied:
		r.Denied.decode(d)
	}
}

// OpStatus returns the status.
func (r *LockRes) OpStatus() Status { return r.Status }

// LockTArgs is LOCKT4args.
type LockTArgs struct {
	LockType LockType
	Offset   uint64
	Length   uint64
	Owner    StateOwner
}

// Append encodes the arguments.
func (a *LockTArgs) Append(b []byte) []byte {
	b = xdr.AppendUint32(b, uint32(a.LockType))
	b = xdr.AppendUint64(b, a.Offset)
	b = xdr.AppendUint64(b, a.Length)
	return a.Owner.append(b)
}

// Decode decodes the arguments; an unknown lock type is an error.
func (a *LockTArgs) Decode(d *xdr.Decoder) {
	a.LockType = decodeLockType(d)
	a.Offset = d.Uint64()
	a.Length = d.Uint64()
	a.Owner.decode(d)
}

// LockTRes is LOCKT4res.
type LockTRes struct {
	Status Status
	Denied LockDenied // NFS4ERR_DENIED only
}

// Append encodes the result.
func (r *LockTRes) Append(b []byte) []byte {
	b = appendStatus(b, r.Status)
	if r.Status == ErrDenied {
		b = r.Denied.append(b)
	}
	return b
}

// Decode decodes the result.
func (r *LockTRes) Decode(d *xdr.Decoder) {
	*r = LockTRes{Status: decodeStatus(d)}
	if r.Status == ErrDenied {
		r.Denied.decode(d)
	}
}

// OpStatus returns the status.
func (r *LockTRes) OpStatus() Status { return r.Status }

// LockUArgs is LOCKU4args.
type LockUArgs struct {
	LockType LockType
	Seqid    uint32 // ignored in 4.1
	Stateid  Stateid
	Offset   uint64
	Length   uint64
}

// Append encodes the arguments.
func (a *LockUArgs) Append(b []byte) []byte {
	b = xdr.AppendUint32(b, uint32(a.LockType))
	b = xdr.AppendUint32(b, a.Seqid)
	b = a.Stateid.Append(b)
	b = xdr.AppendUint64(b, a.Offset)
	return xdr.AppendUint64(b, a.Length)
}

// Decode decodes the arguments; an unknown lock type is an error.
func (a *LockUArgs) Decode(d *xdr.Decoder) {
	a.LockType = decodeLockType(d)
	a.Seqid = d.Uint32()
	a.Stateid.Decode(d)
	a.Offset = d.Uint64()
	a.Length = d.Uint64()
}
