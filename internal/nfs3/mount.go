package nfs3

import (
	"fmt"
	"slices"

	"hushfs/internal/xdr"
)

// MOUNT version 3 procedure numbers.
const (
	MountProcNull    = 0
	MountProcMnt     = 1
	MountProcDump    = 2
	MountProcUmnt    = 3
	MountProcUmntall = 4
	MountProcExport  = 5
	NumMountProcs    = 6
)

var mountProcNames = [NumMountProcs]string{"NULL", "MNT", "DUMP", "UMNT", "UMNTALL", "EXPORT"}

// MountProcName returns the MOUNT procedure's name as RFC 1813 spells it
// (without the MOUNTPROC3_ prefix).
func MountProcName(proc uint32) string {
	if proc < NumMountProcs {
		return mountProcNames[proc]
	}
	return "UNKNOWN"
}

// MOUNT protocol limits.
const (
	MountPathLen = 1024 // MNTPATHLEN: longest dirpath
	MountNameLen = 255  // MNTNAMLEN: longest host or group name
	// MaxAuthFlavors bounds the flavors list of a MNT reply we decode; real
	// servers offer a handful.
	MaxAuthFlavors = 64
)

// MountStat is mountstat3. It implements error for every value but MntOK.
type MountStat uint32

const (
	MntOK             MountStat = 0
	MntErrPerm        MountStat = 1
	MntErrNoEnt       MountStat = 2
	MntErrIO          MountStat = 5
	MntErrAcces       MountStat = 13
	MntErrNotDir      MountStat = 20
	MntErrInval       MountStat = 22
	MntErrNameTooLong MountStat = 63
	MntErrNotSupp     MountStat = 10004
	MntErrServerFault MountStat = 10006
)

func (s MountStat) String() string {
	switch s {
	case MntOK:
		return "MNT3_OK"
	case MntErrPerm:
		return "MNT3ERR_PERM"
	case MntErrNoEnt:
		return "MNT3ERR_NOENT"
	case MntErrIO:
		return "MNT3ERR_IO"
	case MntErrAcces:
		return "MNT3ERR_ACCES"
	case MntErrNotDir:
		return "MNT3ERR_NOTDIR"
	case MntErrInval:
		return "MNT3ERR_INVAL"
	case MntErrNameTooLong:
		return "MNT3ERR_NAMETOOLONG"
	case MntErrNotSupp:
		return "MNT3ERR_NOTSUPP"
	case MntErrServerFault:
		return "MNT3ERR_SERVERFAULT"
	}
	return fmt.Sprintf("mountstat3(%d)", uint32(s))
}

func (s MountStat) Error() string { return s.String() }

// MntArgs is the argument of MNT: the path to mount (at most MountPathLen
// bytes, opaque).
type MntArgs struct {
	Path []byte
}

// Append encodes the arguments.
func (a *MntArgs) Append(b []byte) []byte { return xdr.AppendOpaque(b, a.Path) }

// Decode decodes the arguments.
func (a *MntArgs) Decode(d *xdr.Decoder) { a.Path = d.Opaque(MountPathLen) }

// UmntArgs is the argument of UMNT: the path to forget.
type UmntArgs struct {
	Path []byte
}

// Append encodes the arguments.
func (a *UmntArgs) Append(b []byte) []byte { return xdr.AppendOpaque(b, a.Path) }

// Decode decodes the arguments.
func (a *UmntArgs) Decode(d *xdr.Decoder) { a.Path = d.Opaque(MountPathLen) }

// MntRes is mountres3. The failure arm is empty.
type MntRes struct {
	Status MountStat
	// MntOK only:
	FH          FH
	AuthFlavors []uint32 // RPC authentication flavors, preferred first
}

// Append encodes the result.
func (r *MntRes) Append(b []byte) []byte {
	b = xdr.AppendUint32(b, uint32(r.Status))
	if r.Status != MntOK {
		return b
	}
	b = r.FH.Append(b)
	b = xdr.AppendUint32(b, uint32(len(r.AuthFlavors)))
	for _, f := range r.AuthFlavors {
		b = xdr.AppendUint32(b, f)
	}
	return b
}

// Decode decodes the result; AuthFlavors reuses its capacity.
func (r *MntRes) Decode(d *xdr.Decoder) {
	fl := r.AuthFlavors[:0]
	*r = MntRes{Status: MountStat(d.Uint32())}
	if r.Status == MntOK {
		r.FH.Decode(d)
		n := d.ArrayLen(MaxAuthFlavors, 4)
		for range n {
			fl = append(fl, d.Uint32())
		}
	}
	r.AuthFlavors = fl
}

// MountEntry is one mountbody of a DUMP reply: a client and the path it
// mounted.
type MountEntry struct {
	Hostname  []byte
	Directory []byte
}

// DumpRes is mountlist, the result of DUMP.
type DumpRes struct {
	Mounts []MountEntry
}

// Append encodes the list.
func (r *DumpRes) Append(b []byte) []byte {
	for i := range r.Mounts {
		b = xdr.AppendBool(b, true)
		b = xdr.AppendOpaque(b, r.Mounts[i].Hostname)
		b = xdr.AppendOpaque(b, r.Mounts[i].Directory)
	}
	return xdr.AppendBool(b, false)
}

// Decode decodes the list into r.Mounts' storage, grown at most once;
// entries alias the input.
func (r *DumpRes) Decode(d *xdr.Decoder) {
	ms := r.Mounts[:0]
	probe := *d
	n := 0
	var e MountEntry
	for listFollows(&probe, 4+4, "mount entry", n) {
		e.decode(&probe)
		n++
	}
	d.SetErr(probe.Err())
	if d.Err() == nil {
		ms = slices.Grow(ms, n)[:n]
		for i := range ms {
			d.Bool()
			ms[i].decode(d)
		}
		d.Bool()
	}
	if d.Err() != nil {
		ms = ms[:0]
	}
	r.Mounts = ms
}

func (e *MountEntry) decode(d *xdr.Decoder) {
	e.Hostname = d.Opaque(MountNameLen)
	e.Directory = d.Opaque(MountPathLen)
}

// ExportNode is one exportnode of an EXPORT reply: an exported path and the
// groups (host names or netgroups) allowed to mount it.
type ExportNode struct {
	Dir    []byte
	Groups [][]byte
}

// ExportRes is exports, the result of EXPORT.
type ExportRes struct {
	Exports []ExportNode
}

// Append encodes the list.
func (r *ExportRes) Append(b []byte) []byte {
	for i := range r.Exports {
		e := &r.Exports[i]
		b = xdr.AppendBool(b, true)
		b = xdr.AppendOpaque(b, e.Dir)
		for _, g := range e.Groups {
			b = xdr.AppendBool(b, true)
			b = xdr.AppendOpaque(b, g)
		}
		b = xdr.AppendBool(b, false)
	}
	return xdr.AppendBool(b, false)
}

// Decode decodes the list into r.Exports' storage, grown at most once,
// reusing the storage of the nodes' Groups too; names alias the input.
func (r *ExportRes) Decode(d *xdr.Decoder) {
	ex := r.Exports[:0]
	probe := *d
	n := 0
	for listFollows(&probe, 4+4, "export", n) {
		probe.Opaque(MountPathLen)
		for g := 0; listFollows(&probe, 4, "export group", g); g++ {
			probe.Opaque(MountNameLen)
		}
		n++
	}
	d.SetErr(probe.Err())
	if d.Err() == nil {
		// Old nodes past len keep their Groups storage for reuse.
		ex = slices.Grow(ex, n)[:n]
		for i := range ex {
			d.Bool()
			ex[i].decode(d)
		}
		d.Bool()
	}
	if d.Err() != nil {
		ex = ex[:0]
	}
	r.Exports = ex
}

func (e *ExportNode) decode(d *xdr.Decoder) {
	e.Dir = d.Opaque(MountPathLen)
	probe := *d
	n := 0
	for listFollows(&probe, 4, "export group", n) {
		probe.Opaque(MountNameLen)
		n++
	}
	d.SetErr(probe.Err())
	gs := e.Groups[:0]
	if d.Err() == nil {
		gs = slices.Grow(gs, n)[:n]
		for i := range gs {
			d.Bool()
			gs[i] = d.Opaque(MountNameLen)
		}
		d.Bool()
	}
	e.Groups = gs
}
