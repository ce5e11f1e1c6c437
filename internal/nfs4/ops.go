package nfs4

import (
	"fmt"

	"hushfs/internal/xdr"
)

// Opnum is nfs_opnum4, an operation of a COMPOUND.
type Opnum uint32

// Operations. Those marked 4.0 are "mandatory not to implement" in 4.1
// (NFS4ERR_NOTSUPP); those from 59 on belong to 4.2 and are illegal in a
// 4.1 COMPOUND.
const (
	OpAccess             Opnum = 3
	OpClose              Opnum = 4
	OpCommit             Opnum = 5
	OpCreate             Opnum = 6
	OpDelegPurge         Opnum = 7
	OpDelegReturn        Opnum = 8
	OpGetattr            Opnum = 9
	OpGetFH              Opnum = 10
	OpLink               Opnum = 11
	OpLock               Opnum = 12
	OpLockT              Opnum = 13
	OpLockU              Opnum = 14
	OpLookup             Opnum = 15
	OpLookupP            Opnum = 16
	OpNverify            Opnum = 17
	OpOpen               Opnum = 18
	OpOpenattr           Opnum = 19
	OpOpenConfirm        Opnum = 20 // 4.0
	OpOpenDowngrade      Opnum = 21
	OpPutFH              Opnum = 22
	OpPutPubFH           Opnum = 23
	OpPutRootFH          Opnum = 24
	OpRead               Opnum = 25
	OpReaddir            Opnum = 26
	OpReadlink           Opnum = 27
	OpRemove             Opnum = 28
	OpRename             Opnum = 29
	OpRenew              Opnum = 30 // 4.0
	OpRestoreFH          Opnum = 31
	OpSaveFH             Opnum = 32
	OpSecinfo            Opnum = 33
	OpSetattr            Opnum = 34
	OpSetClientID        Opnum = 35 // 4.0
	OpSetClientIDConfirm Opnum = 36 // 4.0
	OpVerify             Opnum = 37
	OpWrite              Opnum = 38
	OpReleaseLockOwner   Opnum = 39 // 4.0
	OpBackchannelCtl     Opnum = 40
	OpBindConnToSession  Opnum = 41
	OpExchangeID         Opnum = 42
	OpCreateSession      Opnum = 43
	OpDestroySession     Opnum = 44
	OpFreeStateid        Opnum = 45
	OpGetDirDelegation   Opnum = 46
	OpGetDeviceInfo      Opnum = 47
	OpGetDeviceList      Opnum = 48
	OpLayoutCommit       Opnum = 49
	OpLayoutGet          Opnum = 50
	OpLayoutReturn       Opnum = 51
	OpSecinfoNoName      Opnum = 52
	OpSequence           Opnum = 53
	OpSetSSV             Opnum = 54
	OpTestStateid        Opnum = 55
	OpWantDelegation     Opnum = 56
	OpDestroyClientID    Opnum = 57
	OpReclaimComplete    Opnum = 58
	OpIllegal            Opnum = 10044

	// maxOp41 is the highest operation of NFSv4.1.
	maxOp41 = OpReclaimComplete
)

var opNames = [...]string{
	3: "ACCESS", 4: "CLOSE", 5: "COMMIT", 6: "CREATE", 7: "DELEGPURGE", 8: "DELEGRETURN",
	9: "GETATTR", 10: "GETFH", 11: "LINK", 12: "LOCK", 13: "LOCKT", 14: "LOCKU", 15: "LOOKUP",
	16: "LOOKUPP", 17: "NVERIFY", 18: "OPEN", 19: "OPENATTR", 20: "OPEN_CONFIRM",
	21: "OPEN_DOWNGRADE", 22: "PUTFH", 23: "PUTPUBFH", 24: "PUTROOTFH", 25: "READ",
	26: "READDIR", 27: "READLINK", 28: "REMOVE", 29: "RENAME", 30: "RENEW", 31: "RESTOREFH",
	32: "SAVEFH", 33: "SECINFO", 34: "SETATTR", 35: "SETCLIENTID", 36: "SETCLIENTID_CONFIRM",
	37: "VERIFY", 38: "WRITE", 39: "RELEASE_LOCKOWNER", 40: "BACKCHANNEL_CTL",
	41: "BIND_CONN_TO_SESSION", 42: "EXCHANGE_ID", 43: "CREATE_SESSION", 44: "DESTROY_SESSION",
	45: "FREE_STATEID", 46: "GET_DIR_DELEGATION", 47: "GETDEVICEINFO", 48: "GETDEVICELIST",
	49: "LAYOUTCOMMIT", 50: "LAYOUTGET", 51: "LAYOUTRETURN", 52: "SECINFO_NO_NAME",
	53: "SEQUENCE", 54: "SET_SSV", 55: "TEST_STATEID", 56: "WANT_DELEGATION",
	57: "DESTROY_CLIENTID", 58: "RECLAIM_COMPLETE",
	// NFSv4.2 (RFC 7862), named for logs and statistics.
	59: "ALLOCATE", 60: "COPY", 61: "COPY_NOTIFY", 62: "DEALLOCATE", 63: "IO_ADVISE",
	64: "LAYOUTERROR", 65: "LAYOUTSTATS", 66: "OFFLOAD_CANCEL", 67: "OFFLOAD_STATUS",
	68: "READ_PLUS", 69: "SEEK", 70: "WRITE_SAME", 71: "CLONE",
}

func (o Opnum) String() string {
	if int(o) < len(opNames) && opNames[o] != "" {
		return opNames[o]
	}
	if o == OpIllegal {
		return "ILLEGAL"
	}
	return fmt.Sprintf("nfs_opnum4(%d)", uint32(o))
}

// OpArgs is the arguments of one operation.
type OpArgs interface {
	Append(b []byte) []byte
	Decode(d *xdr.Decoder)
}

// OpRes is the result of one operation.
type OpRes interface {
	Append(b []byte) []byte
	Decode(d *xdr.Decoder)
	// OpStatus is the operation's nfsstat4.
	OpStatus() Status
}

// opClass says how a 4.1 decoder treats an operation number.
type opClass uint8

const (
	opIllegal opClass = iota // not an operation of 4.1: NFS4ERR_OP_ILLEGAL
	opVoid                   // no arguments
	opArgs                   // arguments to decode
	opNotSupp                // 4.0 only: NFS4ERR_NOTSUPP, arguments not decoded
)

func classOf(op Opnum) opClass {
	switch op {
	case OpGetFH, OpLookupP, OpPutPubFH, OpPutRootFH, OpReadlink, OpRestoreFH, OpSaveFH, OpIllegal:
		return opVoid
	case OpOpenConfirm, OpRenew, OpSetClientID, OpSetClientIDConfirm, OpReleaseLockOwner:
		return opNotSupp
	}
	if op >= OpAccess && op <= maxOp41 {
		return opArgs
	}
	return opIllegal
}

// NewArgs returns a zero argument value of op, or nil for an operation
// without arguments or one this package does not decode.
func NewArgs(op Opnum) OpArgs {
	switch op {
	case OpAccess:
		return new(AccessArgs)
	case OpClose:
		return new(CloseArgs)
	case OpCommit:
		return new(CommitArgs)
	case OpCreate:
		return new(CreateArgs)
	case OpDelegPurge:
		return new(DelegPurgeArgs)
	case OpDelegReturn:
		return new(DelegReturnArgs)
	case OpGetattr:
		return new(GetattrArgs)
	case OpLink:
		return new(LinkArgs)
	case OpLock:
		return new(LockArgs)
	case OpLockT:
		return new(LockTArgs)
	case OpLockU:
		return new(LockUArgs)
	case OpLookup:
		return new(LookupArgs)
	case OpNverify, OpVerify:
		return new(VerifyArgs)
	case OpOpen:
		return new(OpenArgs)
	case OpOpenattr:
		return new(OpenattrArgs)
	case OpOpenDowngrade:
		return new(OpenDowngradeArgs)
	case OpPutFH:
		return new(PutFHArgs)
	case OpRead:
		return new(ReadArgs)
	case OpReaddir:
		return new(ReaddirArgs)
	case OpRemove:
		return new(RemoveArgs)
	case OpRename:
		return new(RenameArgs)
	case OpSecinfo:
		return new(SecinfoArgs)
	case OpSetattr:
		return new(SetattrArgs)
	case OpWrite:
		return new(WriteArgs)
	case OpBackchannelCtl:
		return new(BackchannelCtlArgs)
	case OpBindConnToSession:
		return new(BindConnToSessionArgs)
	case OpExchangeID:
		return new(ExchangeIDArgs)
	case OpCreateSession:
		return new(CreateSessionArgs)
	case OpDestroySession:
		return new(DestroySessionArgs)
	case OpFreeStateid:
		return new(FreeStateidArgs)
	case OpGetDirDelegation:
		return new(GetDirDelegationArgs)
	case OpGetDeviceInfo:
		return new(GetDeviceInfoArgs)
	case OpGetDeviceList:
		return new(GetDeviceListArgs)
	case OpLayoutCommit:
		return new(LayoutCommitArgs)
	case OpLayoutGet:
		return new(LayoutGetArgs)
	case OpLayoutReturn:
		return new(LayoutReturnArgs)
	case OpSecinfoNoName:
		return new(SecinfoNoNameArgs)
	case OpSequence:
		return new(SequenceArgs)
	case OpSetSSV:
		return new(SetSSVArgs)
	case OpTestStateid:
		return new(TestStateidArgs)
	case OpWantDelegation:
		return new(WantDelegationArgs)
	case OpDestroyClientID:
		return new(DestroyClientIDArgs)
	case OpReclaimComplete:
		return new(ReclaimCompleteArgs)
	}
	return nil
}

// NewRes returns a zero result value of op, or nil for an operation this
// package does not decode. Operations whose result is a bare status share
// StatusRes.
func NewRes(op Opnum) OpRes {
	switch op {
	case OpAccess:
		return new(AccessRes)
	case OpClose:
		return new(CloseRes)
	case OpCommit:
		return new(CommitRes)
	case OpCreate:
		return new(CreateRes)
	case OpGetattr:
		return new(GetattrRes)
	case OpGetFH:
		return new(GetFHRes)
	case OpLink:
		return new(LinkRes)
	case OpLock:
		return new(LockRes)
	case OpLockT:
		return new(LockTRes)
	case OpLockU:
		return new(LockURes)
	case OpOpen:
		return new(OpenRes)
	case OpOpenDowngrade:
		return new(OpenDowngradeRes)
	case OpRead:
		return new(ReadRes)
	case OpReaddir:
		return new(ReaddirRes)
	case OpReadlink:
		return new(ReadlinkRes)
	case OpRemove:
		return new(RemoveRes)
	case OpRename:
		return new(RenameRes)
	case OpSecinfo, OpSecinfoNoName:
		return new(SecinfoRes)
	case OpSetattr:
		return new(SetattrRes)
	case OpWrite:
		return new(WriteRes)
	case OpBindConnToSession:
		return new(BindConnToSessionRes)
	case OpExchangeID:
		return new(ExchangeIDRes)
	case OpCreateSession:
		return new(CreateSessionRes)
	case OpGetDirDelegation:
		return new(GetDirDelegationRes)
	case OpGetDeviceInfo:
		return new(GetDeviceInfoRes)
	case OpGetDeviceList:
		return new(GetDeviceListRes)
	case OpLayoutCommit:
		return new(LayoutCommitRes)
	case OpLayoutGet:
		return new(LayoutGetRes)
	case OpLayoutReturn:
		return new(LayoutReturnRes)
	case OpSequence:
		return new(SequenceRes)
	case OpSetSSV:
		return new(SetSSVRes)
	case OpTestStateid:
		return new(TestStateidRes)
	case OpWantDelegation:
		return new(WantDelegationRes)
	case OpDelegPurge, OpDelegReturn, OpLookup, OpLookupP, OpNverify, OpOpenattr, OpPutFH,
		OpPutPubFH, OpPutRootFH, OpRestoreFH, OpSaveFH, OpVerify, OpBackchannelCtl,
		OpDestroySession, OpFreeStateid, OpDestroyClientID, OpReclaimComplete, OpIllegal:
		return new(StatusRes)
	}
	return nil
}

// StatusRes is the result of the operations that return a status alone
// (PUTFH, LOOKUP, SAVEFH, VERIFY, DELEGRETURN, RECLAIM_COMPLETE, ILLEGAL, ...,
// and CB_RECALL and the other callbacks of that shape).
type StatusRes struct {
	Status Status
}

// Append encodes the result.
func (r *StatusRes) Append(b []byte) []byte { return appendStatus(b, r.Status) }

// Decode decodes the result.
func (r *StatusRes) Decode(d *xdr.Decoder) { r.Status = decodeStatus(d) }

// OpStatus returns the status.
func (r *StatusRes) OpStatus() Status { return r.Status }
