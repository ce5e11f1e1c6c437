package nfs4

import (
	"fmt"

	"hushfs/internal/xdr"
)

// CBOpnum is nfs_cb_opnum4, an operation of a CB_COMPOUND.
type CBOpnum uint32

// Callback operations. CB_OFFLOAD (15) belongs to 4.2 and is illegal in a
// 4.1 CB_COMPOUND.
const (
	CBOpGetattr            CBOpnum = 3
	CBOpRecall             CBOpnum = 4
	CBOpLayoutRecall       CBOpnum = 5
	CBOpNotify             CBOpnum = 6
	CBOpPushDeleg          CBOpnum = 7
	CBOpRecallAny          CBOpnum = 8
	CBOpRecallableObjAvail CBOpnum = 9
	CBOpRecallSlot         CBOpnum = 10
	CBOpSequence           CBOpnum = 11
	CBOpWantsCancelled     CBOpnum = 12
	CBOpNotifyLock         CBOpnum = 13
	CBOpNotifyDeviceID     CBOpnum = 14
	CBOpIllegal            CBOpnum = 10044
	maxCBOp41                      = CBOpNotifyDeviceID
)

var cbOpNames = [...]string{
	3: "CB_GETATTR", 4: "CB_RECALL", 5: "CB_LAYOUTRECALL", 6: "CB_NOTIFY", 7: "CB_PUSH_DELEG",
	8: "CB_RECALL_ANY", 9: "CB_RECALLABLE_OBJ_AVAIL", 10: "CB_RECALL_SLOT", 11: "CB_SEQUENCE",
	12: "CB_WANTS_CANCELLED", 13: "CB_NOTIFY_LOCK", 14: "CB_NOTIFY_DEVICEID", 15: "CB_OFFLOAD",
}

func (o CBOpnum) String() string {
	if int(o) < len(cbOpNames) && cbOpNames[o] != "" {
		return cbOpNames[o]
	}
	if o == CBOpIllegal {
		return "CB_ILLEGAL"
	}
	return fmt.Sprintf("nfs_cb_opnum4(%d)", uint32(o))
}

// NewCBArgs returns a zero argument value of a callback operation, or nil
// for CB_ILLEGAL (no arguments) or an operation outside 4.1.
func NewCBArgs(op CBOpnum) OpArgs {
	switch op {
	case CBOpGetattr:
		return new(CBGetattrArgs)
	case CBOpRecall:
		return new(CBRecallArgs)
	case CBOpLayoutRecall:
		return new(CBLayoutRecallArgs)
	case CBOpNotify:
		return new(CBNotifyArgs)
	case CBOpPushDeleg:
		return new(CBPushDelegArgs)
	case CBOpRecallAny, CBOpRecallableObjAvail:
		return new(CBRecallAnyArgs)
	case CBOpRecallSlot:
		return new(CBRecallSlotArgs)
	case CBOpSequence:
		return new(CBSequenceArgs)
	case CBOpWantsCancelled:
		return new(CBWantsCancelledArgs)
	case CBOpNotifyLock:
		return new(CBNotifyLockArgs)
	case CBOpNotifyDeviceID:
		return new(CBNotifyDeviceIDArgs)
	}
	return nil
}

// NewCBRes returns a zero result value of a callback operation, or nil for
// one outside 4.1. Every result but CB_GETATTR's and CB_SEQUENCE's is a
// bare status (StatusRes).
func NewCBRes(op CBOpnum) OpRes {
	switch op {
	case CBOpGetattr:
		return new(CBGetattrRes)
	case CBOpSequence:
		return new(CBSequenceRes)
	}
	if op >= CBOpGetattr && op <= maxCBOp41 || op == CBOpIllegal {
		return new(StatusRes)
	}
	return nil
}

// CBArgop is nfs_cb_argop4 (Args nil for CB_ILLEGAL).
type CBArgop struct {
	Op   CBOpnum
	Args OpArgs
}

// CBResop is nfs_cb_resop4.
type CBResop struct {
	Op  CBOpnum
	Res OpRes
}

// CBCompoundArgs is CB_COMPOUND4args. Decode treats an operation it cannot
// decode as CompoundArgs.Decode does (an *OpDecodeError after the
// operations before it).
type CBCompoundArgs struct {
	Tag           []byte
	MinorVersion  uint32
	CallbackIdent uint32 // unused in 4.1
	Ops           []CBArgop

	cache opCache[OpArgs]
}

// Append encodes the arguments.
func (c *CBCompoundArgs) Append(b []byte) []byte {
	b = xdr.AppendOpaque(b, c.Tag)
	b = xdr.AppendUint32(b, c.MinorVersion)
	b = xdr.AppendUint32(b, c.CallbackIdent)
	b = xdr.AppendUint32(b, uint32(len(c.Ops)))
	for i := range c.Ops {
		b = xdr.AppendUint32(b, uint32(c.Ops[i].Op))
		if c.Ops[i].Args != nil {
			b = c.Ops[i].Args.Append(b)
		}
	}
	return b
}

// Decode decodes the arguments.
func (c *CBCompoundArgs) Decode(d *xdr.Decoder) {
	ops := c.Ops[:0]
	for i := range ops[:cap(ops)] {
		ops[:cap(ops)][i] = CBArgop{}
	}
	c.Tag = d.Opaque(MaxTag)
	c.MinorVersion = d.Uint32()
	c.CallbackIdent = d.Uint32()
	n, ok := compoundCount(d)
	var used [maxCBOp41 + 1]uint16
	for i := 0; ok && i < n; i++ {
		op := CBOpnum(d.Uint32())
		if d.Err() != nil {
			break
		}
		var args OpArgs
		switch {
		case op == CBOpIllegal:
		case op >= CBOpGetattr && op <= maxCBOp41:
			args = c.cache.get(int(op), int(used[op]), newCBArgsAt)
			used[op]++
			decodeOp(d, args, i, uint32(op))
		default:
			d.SetErr(&OpDecodeError{Index: i, Op: uint32(op), Err: ErrIllegalOp})
		}
		if d.Err() != nil {
			break
		}
		ops = append(ops, CBArgop{Op: op, Args: args})
	}
	if n > MaxCompoundOps && d.Err() == nil {
		op := d.Uint32()
		d.SetErr(&OpDecodeError{Index: 0, Op: op, Err: ErrOpCount})
	}
	c.Ops = ops
}

func newCBArgsAt(op int) OpArgs { return NewCBArgs(CBOpnum(op)) }

// CBCompoundRes is CB_COMPOUND4res.
type CBCompoundRes struct {
	Status  Status
	Tag     []byte
	Results []CBResop

	cache opCache[OpRes]
}

// Append encodes the result.
func (c *CBCompoundRes) Append(b []byte) []byte {
	b = appendStatus(b, c.Status)
	b = xdr.AppendOpaque(b, c.Tag)
	b = xdr.AppendUint32(b, uint32(len(c.Results)))
	for i := range c.Results {
		b = xdr.AppendUint32(b, uint32(c.Results[i].Op))
		b = c.Results[i].Res.Append(b)
	}
	return b
}

// Decode decodes the result; an operation it cannot decode fails it.
func (c *CBCompoundRes) Decode(d *xdr.Decoder) {
	res := c.Results[:0]
	for i := range res[:cap(res)] {
		res[:cap(res)][i] = CBResop{}
	}
	c.Status = decodeStatus(d)
	c.Tag = d.Opaque(MaxTag)
	n, ok := compoundCount(d)
	if !ok && d.Err() == nil {
		d.SetErr(fmt.Errorf("nfs4: CB_COMPOUND reply with %d results", n))
	}
	var used [maxCBOp41 + 1]uint16
	for i := 0; ok && i < n; i++ {
		op := CBOpnum(d.Uint32())
		if d.Err() != nil {
			break
		}
		var r OpRes
		switch {
		case op == CBOpIllegal:
			r = new(StatusRes)
		case op >= CBOpGetattr && op <= maxCBOp41:
			r = c.cache.get(int(op), int(used[op]), newCBResAt)
			used[op]++
		default:
			d.SetErr(&OpDecodeError{Index: i, Op: uint32(op), Err: ErrIllegalOp})
		}
		if d.Err() != nil {
			break
		}
		decodeOp(d, r, i, uint32(op))
		if d.Err() != nil {
			break
		}
		res = append(res, CBResop{Op: op, Res: r})
	}
	c.Results = res
}

func newCBResAt(op int) OpRes { return NewCBRes(CBOpnum(op)) }

// CBGetattrArgs is CB_GETATTR4args.
type CBGetattrArgs struct {
	FH          FH
	AttrRequest Bitmap
}

// Append encodes the arguments.
func (a *CBGetattrArgs) Append(b []byte) []byte {
	b = a.FH.Append(b)
	return a.AttrRequest.Append(b)
}

// Decode decodes the arguments.
func (a *CBGetattrArgs) Decode(d *xdr.Decoder) {
	a.FH.Decode(d)
	a.AttrRequest.Decode(d)
}

// CBGetattrRes is CB_GETATTR4res: GETATTR4res's shape.
type CBGetattrRes = GetattrRes

// CBRecallArgs is CB_RECALL4args.
type CBRecallArgs struct {
	Stateid  Stateid
	Truncate bool
	FH       FH
}

// Append encodes the arguments.
func (a *CBRecallArgs) Append(b []byte) []byte {
	b = a.Stateid.Append(b)
	b = xdr.AppendBool(b, a.Truncate)
	return a.FH.Append(b)
}

// Decode decodes the arguments.
func (a *CBRecallArgs) Decode(d *xdr.Decoder) {
	a.Stateid.Decode(d)
	a.Truncate = d.Bool()
	a.FH.Decode(d)
}

// Layout recall types (layoutrecall_type4).
const (
	LayoutRecallFile = 1
	LayoutRecallFsid = 2
	LayoutRecallAll  = 3
)

// CBLayoutRecallArgs is CB_LAYOUTRECALL4args (we hold no layouts: a client
// answers it NFS4ERR_NOMATCHING_LAYOUT).
type CBLayoutRecallArgs struct {
	LayoutType uint32
	IOMode     uint32
	Changed    bool
	RecallType uint32
	// LayoutRecallFile:
	FH      FH
	Offset  uint64
	Length  uint64
	Stateid Stateid
	// LayoutRecallFsid:
	Fsid Fsid
}

// Append encodes the arguments.
func (a *CBLayoutRecallArgs) Append(b []byte) []byte {
	b = xdr.AppendUint32(b, a.LayoutType)
	b = xdr.AppendUint32(b, a.IOMode)
	b = xdr.AppendBool(b, a.Changed)
	b = xdr.AppendUint32(b, a.RecallType)
	switch a.RecallType {
	case LayoutRecallFile:
		b = a.FH.Append(b)
		b = xdr.AppendUint64(b, a.Offset)
		b = xdr.AppendUint64(b, a.Length)
		b = a.Stateid.Append(b)
	case LayoutRecallFsid:
		b = a.Fsid.append(b)
	}
	return b
}

// Decode decodes the arguments; an unknown recall type is an error.
func (a *CBLayoutRecallArgs) Decode(d *xdr.Decoder) {
	*a = CBLayoutRecallArgs{LayoutType: d.Uint32(), IOMode: d.Uint32(), Changed: d.Bool(), RecallType: d.Uint32()}
	switch a.RecallType {
	case LayoutRecallFile:
		a.FH.Decode(d)
		a.Offset = d.Uint64()
		a.Length = d.Uint64()
		a.Stateid.Decode(d)
	case LayoutRecallFsid:
		a.Fsid.decode(d)
	case LayoutRecallAll:
	default:
		d.SetErr(errBadUnion("layoutrecall4", a.RecallType))
	}
}

// CBPushDelegArgs is CB_PUSH_DELEG4args.
type CBPushDelegArgs struct {
	FH         FH
	Delegation OpenDelegation
}

// Append encodes the arguments.
func (a *CBPushDelegArgs) Append(b []byte) []byte {
	b = a.FH.Append(b)
	return a.Delegation.append(b)
}

// Decode decodes the arguments.
func (a *CBPushDelegArgs) Decode(d *xdr.Decoder) {
	a.FH.Decode(d)
	a.Delegation.decode(d)
}

// Recallable object types of CB_RECALL_ANY's mask (RCA4_TYPE_MASK_*).
const (
	RCA4TypeMaskRdataDlg      = 0
	RCA4TypeMaskWdataDlg      = 1
	RCA4TypeMaskDirDlg        = 2
	RCA4TypeMaskFileLayout    = 3
	RCA4TypeMaskBlkLayout     = 4
	RCA4TypeMaskObjLayoutMin  = 8
	RCA4TypeMaskObjLayoutMax  = 9
	RCA4TypeMaskOtherLayoutMi = 12
	RCA4TypeMaskOtherLayoutMx = 15
)

// CBRecallAnyArgs is CB_RECALL_ANY4args and CB_RECALLABLE_OBJ_AVAIL4args.
type CBRecallAnyArgs struct {
	ObjectsToKeep uint32
	TypeMask      Bitmap
}

// Append encodes the arguments.
func (a *CBRecallAnyArgs) Append(b []byte) []byte {
	b = xdr.AppendUint32(b, a.ObjectsToKeep)
	return a.TypeMask.Append(b)
}

// Decode decodes the arguments.
func (a *CBRecallAnyArgs) Decode(d *xdr.Decoder) {
	a.ObjectsToKeep = d.Uint32()
	a.TypeMask.Decode(d)
}

// CBRecallSlotArgs is CB_RECALL_SLOT4args.
type CBRecallSlotArgs struct {
	TargetHighestSlotID uint32
}

// Append encodes the arguments.
func (a *CBRecallSlotArgs) Append(b []byte) []byte {
	return xdr.AppendUint32(b, a.TargetHighestSlotID)
}

// Decode decodes the arguments.
func (a *CBRecallSlotArgs) Decode(d *xdr.Decoder) { a.TargetHighestSlotID = d.Uint32() }

// ReferringCall is referring_call4.
type ReferringCall struct {
	SequenceID uint32
	SlotID     uint32
}

// ReferringCallList is referring_call_list4: the fore-channel calls of a
// session that a callback refers to.
type ReferringCallList struct {
	SessionID SessionID
	Calls     []ReferringCall
}

// CBSequenceArgs is CB_SEQUENCE4args.
type CBSequenceArgs struct {
	SessionID          SessionID
	SequenceID         uint32
	SlotID             uint32
	HighestSlotID      uint32
	CacheThis          bool
	ReferringCallLists []ReferringCallList
}

// Append encodes the arguments.
func (a *CBSequenceArgs) Append(b []byte) []byte {
	b = a.SessionID.Append(b)
	b = xdr.AppendUint32(b, a.SequenceID)
	b = xdr.AppendUint32(b, a.SlotID)
	b = xdr.AppendUint32(b, a.HighestSlotID)
	b = xdr.AppendBool(b, a.CacheThis)
	b = xdr.AppendUint32(b, uint32(len(a.ReferringCallLists)))
	for i := range a.ReferringCallLists {
		l := &a.ReferringCallLists[i]
		b = l.SessionID.Append(b)
		b = xdr.AppendUint32(b, uint32(len(l.Calls)))
		for _, c := range l.Calls {
			b = xdr.AppendUint32(b, c.SequenceID)
			b = xdr.AppendUint32(b, c.SlotID)
		}
	}
	return b
}

// Decode decodes the arguments, reusing the lists' storage.
func (a *CBSequenceArgs) Decode(d *xdr.Decoder) {
	a.SessionID.Decode(d)
	a.SequenceID = d.Uint32()
	a.SlotID = d.Uint32()
	a.HighestSlotID = d.Uint32()
	a.CacheThis = d.Bool()
	a.ReferringCallLists = decodeList(d, a.ReferringCallLists, maxList, SessionIDSize+4)
	for i := range a.ReferringCallLists {
		l := &a.ReferringCallLists[i]
		l.SessionID.Decode(d)
		l.Calls = decodeList(d, l.Calls, maxList, 8)
		for j := range l.Calls {
			l.Calls[j].SequenceID = d.Uint32()
			l.Calls[j].SlotID = d.Uint32()
		}
	}
}

// CBSequenceRes is CB_SEQUENCE4res.
type CBSequenceRes struct {
	Status Status
	// NFS4_OK only:
	SessionID           SessionID
	SequenceID          uint32
	SlotID              uint32
	HighestSlotID       uint32
	TargetHighestSlotID uint32
}

// Append encodes the result.
func (r *CBSequenceRes) Append(b []byte) []byte {
	b = appendStatus(b, r.Status)
	if r.Status == OK {
		b = r.SessionID.Append(b)
		b = xdr.AppendUint32(b, r.SequenceID)
		b = xdr.AppendUint32(b, r.SlotID)
		b = xdr.AppendUint32(b, r.HighestSlotID)
		b = xdr.AppendUint32(b, r.TargetHighestSlotID)
	}
	return b
}

// Decode decodes the result.
func (r *CBSequenceRes) Decode(d *xdr.Decoder) {
	*r = CBSequenceRes{Status: decodeStatus(d)}
	if r.Status == OK {
		r.SessionID.Decode(d)
		r.SequenceID = d.Uint32()
		r.SlotID = d.Uint32()
		r.HighestSlotID = d.Uint32()
		r.TargetHighestSlotID = d.Uint32()
	}
}

// OpStatus returns the status.
func (r *CBSequenceRes) OpStatus() Status { return r.Status }

// CBWantsCancelledArgs is CB_WANTS_CANCELLED4args.
type CBWantsCancelledArgs struct {
	ContendedWantsCancelled bool
	ResourcedWantsCancelled bool
}

// Append encodes the arguments.
func (a *CBWantsCancelledArgs) Append(b []byte) []byte {
	b = xdr.AppendBool(b, a.ContendedWantsCancelled)
	return xdr.AppendBool(b, a.ResourcedWantsCancelled)
}

// Decode decodes the arguments.
func (a *CBWantsCancelledArgs) Decode(d *xdr.Decoder) {
	a.ContendedWantsCancelled = d.Bool()
	a.ResourcedWantsCancelled = d.Bool()
}

// CBNotifyLockArgs is CB_NOTIFY_LOCK4args: a lock the owner waited for may
// be free.
type CBNotifyLockArgs struct {
	FH        FH
	LockOwner StateOwner
}

// Append encodes the arguments.
func (a *CBNotifyLockArgs) Append(b []byte) []byte {
	b = a.FH.Append(b)
	return a.LockOwner.append(b)
}

// Decode decodes the arguments.
func (a *CBNotifyLockArgs) Decode(d *xdr.Decoder) {
	a.FH.Decode(d)
	a.LockOwner.decode(d)
}
