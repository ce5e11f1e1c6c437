package nfs4

import (
	"errors"
	"fmt"
	"syscall"
)

// Status is nfsstat4. It implements error for every value but OK.
type Status uint32

const (
	OK                       Status = 0
	ErrPerm                  Status = 1
	ErrNoEnt                 Status = 2
	ErrIO                    Status = 5
	ErrNXIO                  Status = 6
	ErrAccess                Status = 13
	ErrExist                 Status = 17
	ErrXDev                  Status = 18
	ErrNotDir                Status = 20
	ErrIsDir                 Status = 21
	ErrInval                 Status = 22
	ErrFBig                  Status = 27
	ErrNoSpc                 Status = 28
	ErrROFS                  Status = 30
	ErrMLink                 Status = 31
	ErrNameTooLong           Status = 63
	ErrNotEmpty              Status = 66
	ErrDQuot                 Status = 69
	ErrStale                 Status = 70
	ErrBadHandle             Status = 10001
	ErrBadCookie             Status = 10003
	ErrNotSupp               Status = 10004
	ErrTooSmall              Status = 10005
	ErrServerFault           Status = 10006
	ErrBadType               Status = 10007
	ErrDelay                 Status = 10008
	ErrSame                  Status = 10009
	ErrDenied                Status = 10010
	ErrExpired               Status = 10011
	ErrLocked                Status = 10012
	ErrGrace                 Status = 10013
	ErrFHExpired             Status = 10014
	ErrShareDenied           Status = 10015
	ErrWrongSec              Status = 10016
	ErrClidInUse             Status = 10017
	ErrResource              Status = 10018
	ErrMoved                 Status = 10019
	ErrNoFileHandle          Status = 10020
	ErrMinorVersMismatch     Status = 10021
	ErrStaleClientID         Status = 10022
	ErrStaleStateid          Status = 10023
	ErrOldStateid            Status = 10024
	ErrBadStateid            Status = 10025
	ErrBadSeqid              Status = 10026
	ErrNotSame               Status = 10027
	ErrLockRange             Status = 10028
	ErrSymlink               Status = 10029
	ErrRestoreFH             Status = 10030
	ErrLeaseMoved            Status = 10031
	ErrAttrNotSupp           Status = 10032
	ErrNoGrace               Status = 10033
	ErrReclaimBad            Status = 10034
	ErrReclaimConflict       Status = 10035
	ErrBadXDR                Status = 10036
	ErrLocksHeld             Status = 10037
	ErrOpenMode              Status = 10038
	ErrBadOwner              Status = 10039
	ErrBadChar               Status = 10040
	ErrBadName               Status = 10041
	ErrBadRange              Status = 10042
	ErrLockNotSupp           Status = 10043
	ErrOpIllegal             Status = 10044
	ErrDeadlock              Status = 10045
	ErrFileOpen              Status = 10046
	ErrAdminRevoked          Status = 10047
	ErrCBPathDown            Status = 10048
	ErrBadIOMode             Status = 10049
	ErrBadLayout             Status = 10050
	ErrBadSessionDigest      Status = 10051
	ErrBadSession            Status = 10052
	ErrBadSlot               Status = 10053
	ErrCompleteAlready       Status = 10054
	ErrConnNotBoundToSession Status = 10055
	ErrDelegAlreadyWanted    Status = 10056
	ErrBackChanBusy          Status = 10057
	ErrLayoutTryLater        Status = 10058
	ErrLayoutUnavailable     Status = 10059
	ErrNoMatchingLayout      Status = 10060
	ErrRecallConflict        Status = 10061
	ErrUnknownLayoutType     Status = 10062
	ErrSeqMisordered         Status = 10063
	ErrSequencePos           Status = 10064
	ErrReqTooBig             Status = 10065
	ErrRepTooBig             Status = 10066
	ErrRepTooBigToCache      Status = 10067
	ErrRetryUncachedRep      Status = 10068
	ErrUnsafeCompound        Status = 10069
	ErrTooManyOps            Status = 10070
	ErrOpNotInSession        Status = 10071
	ErrHashAlgUnsupp         Status = 10072
	ErrClientIDBusy          Status = 10074
	ErrPNFSIOHole            Status = 10075
	ErrSeqFalseRetry         Status = 10076
	ErrBadHighSlot           Status = 10077
	ErrDeadSession           Status = 10078
	ErrEncrAlgUnsupp         Status = 10079
	ErrPNFSNoLayout          Status = 10080
	ErrNotOnlyOp             Status = 10081
	ErrWrongCred             Status = 10082
	ErrWrongType             Status = 10083
	ErrDirDelegUnavail       Status = 10084
	ErrRejectDeleg           Status = 10085
	ErrReturnConflict        Status = 10086
	ErrDelegRevoked          Status = 10087
	ErrPartnerNotSupp        Status = 10088
	ErrPartnerNoAuth         Status = 10089
	ErrUnionNotSupp          Status = 10090
	ErrOffloadDenied         Status = 10091
	ErrWrongLFS              Status = 10092
	ErrBadLabel              Status = 10093
	ErrOffloadNoReqs         Status = 10094
)

var statusNames = map[Status]string{
	OK:                       "NFS4_OK",
	ErrPerm:                  "NFS4ERR_PERM",
	ErrNoEnt:                 "NFS4ERR_NOENT",
	ErrIO:                    "NFS4ERR_IO",
	ErrNXIO:                  "NFS4ERR_NXIO",
	ErrAccess:                "NFS4ERR_ACCESS",
	ErrExist:                 "NFS4ERR_EXIST",
	ErrXDev:                  "NFS4ERR_XDEV",
	ErrNotDir:                "NFS4ERR_NOTDIR",
	ErrIsDir:                 "NFS4ERR_ISDIR",
	ErrInval:                 "NFS4ERR_INVAL",
	ErrFBig:                  "NFS4ERR_FBIG",
	ErrNoSpc:                 "NFS4ERR_NOSPC",
	ErrROFS:                  "NFS4ERR_ROFS",
	ErrMLink:                 "NFS4ERR_MLINK",
	ErrNameTooLong:           "NFS4ERR_NAMETOOLONG",
	ErrNotEmpty:              "NFS4ERR_NOTEMPTY",
	ErrDQuot:                 "NFS4ERR_DQUOT",
	ErrStale:                 "NFS4ERR_STALE",
	ErrBadHandle:             "NFS4ERR_BADHANDLE",
	ErrBadCookie:             "NFS4ERR_BAD_COOKIE",
	ErrNotSupp:               "NFS4ERR_NOTSUPP",
	ErrTooSmall:              "NFS4ERR_TOOSMALL",
	ErrServerFault:           "NFS4ERR_SERVERFAULT",
	ErrBadType:               "NFS4ERR_BADTYPE",
	ErrDelay:                 "NFS4ERR_DELAY",
	ErrSame:                  "NFS4ERR_SAME",
	ErrDenied:                "NFS4ERR_DENIED",
	ErrExpired:               "NFS4ERR_EXPIRED",
	ErrLocked:                "NFS4ERR_LOCKED",
	ErrGrace:                 "NFS4ERR_GRACE",
	ErrFHExpired:             "NFS4ERR_FHEXPIRED",
	ErrShareDenied:           "NFS4ERR_SHARE_DENIED",
	ErrWrongSec:              "NFS4ERR_WRONGSEC",
	ErrClidInUse:             "NFS4ERR_CLID_INUSE",
	ErrResource:              "NFS4ERR_RESOURCE",
	ErrMoved:                 "NFS4ERR_MOVED",
	ErrNoFileHandle:          "NFS4ERR_NOFILEHANDLE",
	ErrMinorVersMismatch:     "NFS4ERR_MINOR_VERS_MISMATCH",
	ErrStaleClientID:         "NFS4ERR_STALE_CLIENTID",
	ErrStaleStateid:          "NFS4ERR_STALE_STATEID",
	ErrOldStateid:            "NFS4ERR_OLD_STATEID",
	ErrBadStateid:            "NFS4ERR_BAD_STATEID",
	ErrBadSeqid:              "NFS4ERR_BAD_SEQID",
	ErrNotSame:               "NFS4ERR_NOT_SAME",
	ErrLockRange:             "NFS4ERR_LOCK_RANGE",
	ErrSymlink:               "NFS4ERR_SYMLINK",
	ErrRestoreFH:             "NFS4ERR_RESTOREFH",
	ErrLeaseMoved:            "NFS4ERR_LEASE_MOVED",
	ErrAttrNotSupp:           "NFS4ERR_ATTRNOTSUPP",
	ErrNoGrace:               "NFS4ERR_NO_GRACE",
	ErrReclaimBad:            "NFS4ERR_RECLAIM_BAD",
	ErrReclaimConflict:       "NFS4ERR_RECLAIM_CONFLICT",
	ErrBadXDR:                "NFS4ERR_BADXDR",
	ErrLocksHeld:             "NFS4ERR_LOCKS_HELD",
	ErrOpenMode:              "NFS4ERR_OPENMODE",
	ErrBadOwner:              "NFS4ERR_BADOWNER",
	ErrBadChar:               "NFS4ERR_BADCHAR",
	ErrBadName:               "NFS4ERR_BADNAME",
	ErrBadRange:              "NFS4ERR_BAD_RANGE",
	ErrLockNotSupp:           "NFS4ERR_LOCK_NOTSUPP",
	ErrOpIllegal:             "NFS4ERR_OP_ILLEGAL",
	ErrDeadlock:              "NFS4ERR_DEADLOCK",
	ErrFileOpen:              "NFS4ERR_FILE_OPEN",
	ErrAdminRevoked:          "NFS4ERR_ADMIN_REVOKED",
	ErrCBPathDown:            "NFS4ERR_CB_PATH_DOWN",
	ErrBadIOMode:             "NFS4ERR_BADIOMODE",
	ErrBadLayout:             "NFS4ERR_BADLAYOUT",
	ErrBadSessionDigest:      "NFS4ERR_BAD_SESSION_DIGEST",
	ErrBadSession:            "NFS4ERR_BADSESSION",
	ErrBadSlot:               "NFS4ERR_BADSLOT",
	ErrCompleteAlready:       "NFS4ERR_COMPLETE_ALREADY",
	ErrConnNotBoundToSession: "NFS4ERR_CONN_NOT_BOUND_TO_SESSION",
	ErrDelegAlreadyWanted:    "NFS4ERR_DELEG_ALREADY_WANTED",
	ErrBackChanBusy:          "NFS4ERR_BACK_CHAN_BUSY",
	ErrLayoutTryLater:        "NFS4ERR_LAYOUTTRYLATER",
	ErrLayoutUnavailable:     "NFS4ERR_LAYOUTUNAVAILABLE",
	ErrNoMatchingLayout:      "NFS4ERR_NOMATCHING_LAYOUT",
	ErrRecallConflict:        "NFS4ERR_RECALLCONFLICT",
	ErrUnknownLayoutType:     "NFS4ERR_UNKNOWN_LAYOUTTYPE",
	ErrSeqMisordered:         "NFS4ERR_SEQ_MISORDERED",
	ErrSequencePos:           "NFS4ERR_SEQUENCE_POS",
	ErrReqTooBig:             "NFS4ERR_REQ_TOO_BIG",
	ErrRepTooBig:             "NFS4ERR_REP_TOO_BIG",
	ErrRepTooBigToCache:      "NFS4ERR_REP_TOO_BIG_TO_CACHE",
	ErrRetryUncachedRep:      "NFS4ERR_RETRY_UNCACHED_REP",
	ErrUnsafeCompound:        "NFS4ERR_UNSAFE_COMPOUND",
	ErrTooManyOps:            "NFS4ERR_TOO_MANY_OPS",
	ErrOpNotInSession:        "NFS4ERR_OP_NOT_IN_SESSION",
	ErrHashAlgUnsupp:         "NFS4ERR_HASH_ALG_UNSUPP",
	ErrClientIDBusy:          "NFS4ERR_CLIENTID_BUSY",
	ErrPNFSIOHole:            "NFS4ERR_PNFS_IO_HOLE",
	ErrSeqFalseRetry:         "NFS4ERR_SEQ_FALSE_RETRY",
	ErrBadHighSlot:           "NFS4ERR_BAD_HIGH_SLOT",
	ErrDeadSession:           "NFS4ERR_DEADSESSION",
	ErrEncrAlgUnsupp:         "NFS4ERR_ENCR_ALG_UNSUPP",
	ErrPNFSNoLayout:          "NFS4ERR_PNFS_NO_LAYOUT",
	ErrNotOnlyOp:             "NFS4ERR_NOT_ONLY_OP",
	ErrWrongCred:             "NFS4ERR_WRONG_CRED",
	ErrWrongType:             "NFS4ERR_WRONG_TYPE",
	ErrDirDelegUnavail:       "NFS4ERR_DIRDELEG_UNAVAIL",
	ErrRejectDeleg:           "NFS4ERR_REJECT_DELEG",
	ErrReturnConflict:        "NFS4ERR_RETURNCONFLICT",
	ErrDelegRevoked:          "NFS4ERR_DELEG_REVOKED",
	ErrPartnerNotSupp:        "NFS4ERR_PARTNER_NOTSUPP",
	ErrPartnerNoAuth:         "NFS4ERR_PARTNER_NO_AUTH",
	ErrUnionNotSupp:          "NFS4ERR_UNION_NOTSUPP",
	ErrOffloadDenied:         "NFS4ERR_OFFLOAD_DENIED",
	ErrWrongLFS:              "NFS4ERR_WRONG_LFS",
	ErrBadLabel:              "NFS4ERR_BADLABEL",
	ErrOffloadNoReqs:         "NFS4ERR_OFFLOAD_NO_REQS",
}

func (s Status) String() string {
	if n, ok := statusNames[s]; ok {
		return n
	}
	return fmt.Sprintf("nfsstat4(%d)", uint32(s))
}

func (s Status) Error() string { return s.String() }

// Errno maps a status to the errno a local system call would have returned.
// This is the one place the client turns NFSv4 errors into errno values.
// The errors of sessions and state (BADSESSION, BAD_STATEID, EXPIRED,
// GRACE, ...) are the client's to recover from; what reaches here of them
// is EIO, as is any status without a local meaning.
func (s Status) Errno() syscall.Errno {
	switch s {
	case OK:
		return 0
	case ErrPerm, ErrWrongSec:
		return syscall.EPERM
	case ErrNoEnt:
		return syscall.ENOENT
	case ErrNXIO:
		return syscall.ENXIO
	case ErrAccess, ErrShareDenied:
		return syscall.EACCES
	case ErrExist:
		return syscall.EEXIST
	case ErrXDev:
		return syscall.EXDEV
	case ErrNotDir:
		return syscall.ENOTDIR
	case ErrIsDir:
		return syscall.EISDIR
	case ErrInval, ErrBadOwner, ErrBadChar, ErrBadName, ErrBadRange, ErrWrongType:
		return syscall.EINVAL
	case ErrFBig:
		return syscall.EFBIG
	case ErrNoSpc:
		return syscall.ENOSPC
	case ErrROFS:
		return syscall.EROFS
	case ErrMLink:
		return syscall.EMLINK
	case ErrNameTooLong:
		return syscall.ENAMETOOLONG
	case ErrNotEmpty:
		return syscall.ENOTEMPTY
	case ErrDQuot:
		return syscall.EDQUOT
	case ErrStale, ErrBadHandle, ErrFHExpired:
		return syscall.ESTALE
	case ErrNotSupp, ErrAttrNotSupp, ErrBadType:
		return syscall.EOPNOTSUPP
	case ErrTooSmall:
		return syscall.ERANGE
	case ErrDelay, ErrDenied, ErrGrace:
		// DENIED: a lock held by another owner (F_SETLK's EAGAIN).
		return syscall.EAGAIN
	case ErrSymlink:
		return syscall.ELOOP
	case ErrDeadlock:
		return syscall.EDEADLK
	case ErrFileOpen:
		return syscall.EBUSY
	case ErrLockNotSupp, ErrLockRange:
		return syscall.ENOLCK
	case ErrOpenMode:
		return syscall.EBADF
	case ErrMoved:
		return syscall.EREMOTE
	case ErrMinorVersMismatch:
		return syscall.EPROTONOSUPPORT
	}
	return syscall.EIO
}

// StatusOf maps an error from a local file system call to the status a
// server returns. This is the one place the server turns errno into NFSv4
// errors; an error that carries no errno becomes NFS4ERR_IO, one that
// carries a Status is that status.
func StatusOf(err error) Status {
	if err == nil {
		return OK
	}
	var st Status
	if errors.As(err, &st) {
		return st
	}
	var en syscall.Errno
	if !errors.As(err, &en) {
		return ErrIO
	}
	switch en {
	case syscall.EPERM:
		return ErrPerm
	case syscall.ENOENT:
		return ErrNoEnt
	case syscall.EIO:
		return ErrIO
	case syscall.ENXIO, syscall.ENODEV:
		// NFSv4 has no NODEV: a device without a driver cannot be opened.
		return ErrNXIO
	case syscall.EACCES:
		return ErrAccess
	case syscall.EEXIST:
		return ErrExist
	case syscall.EXDEV:
		return ErrXDev
	case syscall.ENOTDIR:
		return ErrNotDir
	case syscall.ELOOP:
		// A symlink where the operation takes none (O_NOFOLLOW walks).
		return ErrSymlink
	case syscall.EISDIR:
		return ErrIsDir
	case syscall.EINVAL, syscall.EOVERFLOW:
		return ErrInval
	case syscall.EFBIG:
		return ErrFBig
	case syscall.ENOSPC:
		return ErrNoSpc
	case syscall.EROFS:
		return ErrROFS
	case syscall.EMLINK:
		return ErrMLink
	case syscall.ENAMETOOLONG:
		return ErrNameTooLong
	case syscall.ENOTEMPTY:
		return ErrNotEmpty
	case syscall.EDQUOT:
		return ErrDQuot
	case syscall.ESTALE:
		return ErrStale
	case syscall.EOPNOTSUPP:
		return ErrNotSupp
	case syscall.EAGAIN, syscall.ENOMEM, syscall.ENFILE, syscall.EMFILE:
		// Transient: the client retries after a while.
		return ErrDelay
	case syscall.EBADF:
		return ErrBadHandle
	case syscall.EDEADLK:
		return ErrDeadlock
	case syscall.EBUSY:
		return ErrFileOpen
	case syscall.EILSEQ:
		return ErrBadChar
	}
	return ErrIO
}
