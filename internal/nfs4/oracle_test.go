package nfs4

// An independent XDR implementation, generated from RFC 7863's XDR (NFSv4.2,
// a superset of 4.1) by github.com/buildbarn/go-xdr, serves as oracle:
// every sample, in a COMPOUND, must decode there consuming exactly our
// bytes and re-encode to them; the constants must agree by name; every
// attribute value must decode with the oracle's reader of that attribute
// to the field we encoded; and for the structures whose fields share a
// type (where a swap would keep the shape) the oracle's decoded values must
// be the ones we put in each named field.

import (
	"bytes"
	"io"
	"testing"

	"github.com/buildbarn/go-xdr/pkg/protocols/nfsv4"
	"github.com/buildbarn/go-xdr/pkg/protocols/rpcv2"
)

func TestOracleConstants(t *testing.T) {
	for v, name := range nfsv4.Nfsstat4_name {
		if got := Status(v).String(); got != name {
			t.Errorf("nfsstat4 %d: ours %s, RFC %s", v, got, name)
		}
	}
	for st := range statusNames {
		if _, ok := nfsv4.Nfsstat4_name[nfsv4.Nfsstat4(st)]; !ok {
			t.Errorf("status %v not in the RFC", st)
		}
	}
	for v, name := range nfsv4.NfsOpnum4_name {
		if got := "OP_" + Opnum(v).String(); got != name {
			t.Errorf("nfs_opnum4 %d: ours %s, RFC %s", v, got, name)
		}
	}
	for v, name := range nfsv4.NfsCbOpnum4_name {
		if got := "OP_" + CBOpnum(v).String(); got != name {
			t.Errorf("nfs_cb_opnum4 %d: ours %s, RFC %s", v, got, name)
		}
	}
	for _, c := range []struct{ ours, rfc int }{
		{AttrSupportedAttrs, nfsv4.FATTR4_SUPPORTED_ATTRS},
		{AttrType, nfsv4.FATTR4_TYPE},
		{AttrFHExpireType, nfsv4.FATTR4_FH_EXPIRE_TYPE},
		{AttrChange, nfsv4.FATTR4_CHANGE},
		{AttrSize, nfsv4.FATTR4_SIZE},
		{AttrLinkSupport, nfsv4.FATTR4_LINK_SUPPORT},
		{AttrSymlinkSupport, nfsv4.FATTR4_SYMLINK_SUPPORT},
		{AttrNamedAttr, nfsv4.FATTR4_NAMED_ATTR},
		{AttrFsid, nfsv4.FATTR4_FSID},
		{AttrUniqueHandles, nfsv4.FATTR4_UNIQUE_HANDLES},
		{AttrLeaseTime, nfsv4.FATTR4_LEASE_TIME},
		{AttrRdattrError, nfsv4.FATTR4_RDATTR_ERROR},
		{AttrACL, nfsv4.FATTR4_ACL},
		{AttrACLSupport, nfsv4.FATTR4_ACLSUPPORT},
		{AttrArchive, nfsv4.FATTR4_ARCHIVE},
		{AttrCanSetTime, nfsv4.FATTR4_CANSETTIME},
		{AttrCaseInsensitive, nfsv4.FATTR4_CASE_INSENSITIVE},
		{AttrCasePreserving, nfsv4.FATTR4_CASE_PRESERVING},
		{AttrChownRestricted, nfsv4.FATTR4_CHOWN_RESTRICTED},
		{AttrFilehandle, nfsv4.FATTR4_FILEHANDLE},
		{AttrFileid, nfsv4.FATTR4_FILEID},
		{AttrFilesAvail, nfsv4.FATTR4_FILES_AVAIL},
		{AttrFilesFree, nfsv4.FATTR4_FILES_FREE},
		{AttrFilesTotal, nfsv4.FATTR4_FILES_TOTAL},
		{AttrFsLocations, nfsv4.FATTR4_FS_LOCATIONS},
		{AttrHidden, nfsv4.FATTR4_HIDDEN},
		{AttrHomogeneous, nfsv4.FATTR4_HOMOGENEOUS},
		{AttrMaxFileSize, nfsv4.FATTR4_MAXFILESIZE},
		{AttrMaxLink, nfsv4.FATTR4_MAXLINK},
		{AttrMaxName, nfsv4.FATTR4_MAXNAME},
		{AttrMaxRead, nfsv4.FATTR4_MAXREAD},
		{AttrMaxWrite, nfsv4.FATTR4_MAXWRITE},
		{AttrMimetype, nfsv4.FATTR4_MIMETYPE},
		{AttrMode, nfsv4.FATTR4_MODE},
		{AttrNoTrunc, nfsv4.FATTR4_NO_TRUNC},
		{AttrNumLinks, nfsv4.FATTR4_NUMLINKS},
		{AttrOwner, nfsv4.FATTR4_OWNER},
		{AttrOwnerGroup, nfsv4.FATTR4_OWNER_GROUP},
		{AttrQuotaAvailHard, nfsv4.FATTR4_QUOTA_AVAIL_HARD},
		{AttrQuotaAvailSoft, nfsv4.FATTR4_QUOTA_AVAIL_SOFT},
		{AttrQuotaUsed, nfsv4.FATTR4_QUOTA_USED},
		{AttrRawdev, nfsv4.FATTR4_RAWDEV},
		{AttrSpaceAvail, nfsv4.FATTR4_SPACE_AVAIL},
		{AttrSpaceFree, nfsv4.FATTR4_SPACE_FREE},
		{AttrSpaceTotal, nfsv4.FATTR4_SPACE_TOTAL},
		{AttrSpaceUsed, nfsv4.FATTR4_SPACE_USED},
		{AttrSystem, nfsv4.FATTR4_SYSTEM},
		{AttrTimeAccess, nfsv4.FATTR4_TIME_ACCESS},
		{AttrTimeAccessSet, nfsv4.FATTR4_TIME_ACCESS_SET},
		{AttrTimeBackup, nfsv4.FATTR4_TIME_BACKUP},
		{AttrTimeCreate, nfsv4.FATTR4_TIME_CREATE},
		{AttrTimeDelta, nfsv4.FATTR4_TIME_DELTA},
		{AttrTimeMetadata, nfsv4.FATTR4_TIME_METADATA},
		{AttrTimeModify, nfsv4.FATTR4_TIME_MODIFY},
		{AttrTimeModifySet, nfsv4.FATTR4_TIME_MODIFY_SET},
		{AttrMountedOnFileid, nfsv4.FATTR4_MOUNTED_ON_FILEID},
		{AttrDirNotifDelay, nfsv4.FATTR4_DIR_NOTIF_DELAY},
		{AttrDirentNotifDelay, nfsv4.FATTR4_DIRENT_NOTIF_DELAY},
		{AttrDACL, nfsv4.FATTR4_DACL},
		{AttrSACL, nfsv4.FATTR4_SACL},
		{AttrChangePolicy, nfsv4.FATTR4_CHANGE_POLICY},
		{AttrFsStatus, nfsv4.FATTR4_FS_STATUS},
		{AttrFsLayoutTypes, nfsv4.FATTR4_FS_LAYOUT_TYPES},
		{AttrLayoutHint, nfsv4.FATTR4_LAYOUT_HINT},
		{AttrLayoutTypes, nfsv4.FATTR4_LAYOUT_TYPES},
		{AttrLayoutBlksize, nfsv4.FATTR4_LAYOUT_BLKSIZE},
		{AttrLayoutAlignment, nfsv4.FATTR4_LAYOUT_ALIGNMENT},
		{AttrFsLocationsInfo, nfsv4.FATTR4_FS_LOCATIONS_INFO},
		{AttrMdsThreshold, nfsv4.FATTR4_MDSTHRESHOLD},
		{AttrRetentionGet, nfsv4.FATTR4_RETENTION_GET},
		{AttrRetentionSet, nfsv4.FATTR4_RETENTION_SET},
		{AttrRetentevtGet, nfsv4.FATTR4_RETENTEVT_GET},
		{AttrRetentevtSet, nfsv4.FATTR4_RETENTEVT_SET},
		{AttrRetentionHold, nfsv4.FATTR4_RETENTION_HOLD},
		{AttrModeSetMasked, nfsv4.FATTR4_MODE_SET_MASKED},
		{AttrSuppattrExclcreat, nfsv4.FATTR4_SUPPATTR_EXCLCREAT},
		{AttrFsCharsetCap, nfsv4.FATTR4_FS_CHARSET_CAP},
		{AttrCloneBlksize, nfsv4.FATTR4_CLONE_BLKSIZE},
		{AttrSpaceFreed, nfsv4.FATTR4_SPACE_FREED},
		{AttrChangeAttrType, nfsv4.FATTR4_CHANGE_ATTR_TYPE},
		{AttrSecLabel, nfsv4.FATTR4_SEC_LABEL},
		// AttrModeUmask = 81: FATTR4_MODE_UMASK not in RFC 7863's XDR
		// AttrXattrSupport = 82: FATTR4_XATTR_SUPPORT not in RFC 7863's XDR
	} {
		if c.ours != c.rfc {
			t.Errorf("attribute %d is %d in the RFC", c.ours, c.rfc)
		}
	}
	for _, c := range []struct{ ours, rfc uint64 }{
		{Program, 100003}, {Version, 4}, {FHSize, nfsv4.NFS4_FHSIZE}, {VerifierSize, nfsv4.NFS4_VERIFIER_SIZE},
		{OtherSize, nfsv4.NFS4_OTHER_SIZE}, {OpaqueLimit, nfsv4.NFS4_OPAQUE_LIMIT}, {SessionIDSize, nfsv4.NFS4_SESSIONID_SIZE},
		{DeviceIDSize, nfsv4.NFS4_DEVICEID4_SIZE},
		{ExchgIDFlagSuppMovedRefer, nfsv4.EXCHGID4_FLAG_SUPP_MOVED_REFER}, {ExchgIDFlagSuppMovedMigr, nfsv4.EXCHGID4_FLAG_SUPP_MOVED_MIGR},
		{ExchgIDFlagSuppFenceOps, nfsv4.EXCHGID4_FLAG_SUPP_FENCE_OPS}, {ExchgIDFlagBindPrincStateid, nfsv4.EXCHGID4_FLAG_BIND_PRINC_STATEID},
		{ExchgIDFlagUseNonPNFS, nfsv4.EXCHGID4_FLAG_USE_NON_PNFS}, {ExchgIDFlagUsePNFSMDS, nfsv4.EXCHGID4_FLAG_USE_PNFS_MDS},
		{ExchgIDFlagUsePNFSDS, nfsv4.EXCHGID4_FLAG_USE_PNFS_DS}, {ExchgIDFlagMaskPNFS, nfsv4.EXCHGID4_FLAG_MASK_PNFS},
		{ExchgIDFlagUpdConfirmedRecA, nfsv4.EXCHGID4_FLAG_UPD_CONFIRMED_REC_A}, {ExchgIDFlagConfirmedR, nfsv4.EXCHGID4_FLAG_CONFIRMED_R},
		{CreateSessionFlagPersist, nfsv4.CREATE_SESSION4_FLAG_PERSIST}, {CreateSessionFlagConnBackChan, nfsv4.CREATE_SESSION4_FLAG_CONN_BACK_CHAN},
		{CreateSessionFlagConnRDMA, nfsv4.CREATE_SESSION4_FLAG_CONN_RDMA},
		{SeqStatusCBPathDown, nfsv4.SEQ4_STATUS_CB_PATH_DOWN}, {SeqStatusCBGSSContextsExpiring, nfsv4.SEQ4_STATUS_CB_GSS_CONTEXTS_EXPIRING},
		{SeqStatusCBGSSContextsExpired, nfsv4.SEQ4_STATUS_CB_GSS_CONTEXTS_EXPIRED}, {SeqStatusExpiredAllStateRevoked, nfsv4.SEQ4_STATUS_EXPIRED_ALL_STATE_REVOKED},
		{SeqStatusExpiredSomeStateRevoked, nfsv4.SEQ4_STATUS_EXPIRED_SOME_STATE_REVOKED}, {SeqStatusAdminStateRevoked, nfsv4.SEQ4_STATUS_ADMIN_STATE_REVOKED},
		{SeqStatusRecallableStateRevoked, nfsv4.SEQ4_STATUS_RECALLABLE_STATE_REVOKED}, {SeqStatusLeaseMoved, nfsv4.SEQ4_STATUS_LEASE_MOVED},
		{SeqStatusRestartReclaimNeeded, nfsv4.SEQ4_STATUS_RESTART_RECLAIM_NEEDED}, {SeqStatusCBPathDownSession, nfsv4.SEQ4_STATUS_CB_PATH_DOWN_SESSION},
		{SeqStatusBackchannelFault, nfsv4.SEQ4_STATUS_BACKCHANNEL_FAULT}, {SeqStatusDevidChanged, nfsv4.SEQ4_STATUS_DEVID_CHANGED},
		{SeqStatusDevidDeleted, nfsv4.SEQ4_STATUS_DEVID_DELETED},
		{AccessRead, nfsv4.ACCESS4_READ}, {AccessLookup, nfsv4.ACCESS4_LOOKUP}, {AccessModify, nfsv4.ACCESS4_MODIFY},
		{AccessExtend, nfsv4.ACCESS4_EXTEND}, {AccessDelete, nfsv4.ACCESS4_DELETE}, {AccessExecute, nfsv4.ACCESS4_EXECUTE},
		{ShareAccessRead, nfsv4.OPEN4_SHARE_ACCESS_READ}, {ShareAccessWrite, nfsv4.OPEN4_SHARE_ACCESS_WRITE}, {ShareAccessBoth, nfsv4.OPEN4_SHARE_ACCESS_BOTH},
		{ShareDenyNone, nfsv4.OPEN4_SHARE_DENY_NONE}, {ShareDenyRead, nfsv4.OPEN4_SHARE_DENY_READ}, {ShareDenyWrite, nfsv4.OPEN4_SHARE_DENY_WRITE},
		{ShareDenyBoth, nfsv4.OPEN4_SHARE_DENY_BOTH}, {ShareAccessWantDelegMask, nfsv4.OPEN4_SHARE_ACCESS_WANT_DELEG_MASK},
		{ShareAccessWantNoPreference, nfsv4.OPEN4_SHARE_ACCESS_WANT_NO_PREFERENCE}, {ShareAccessWantReadDeleg, nfsv4.OPEN4_SHARE_ACCESS_WANT_READ_DELEG},
		{ShareAccessWantWriteDeleg, nfsv4.OPEN4_SHARE_ACCESS_WANT_WRITE_DELEG}, {ShareAccessWantAnyDeleg, nfsv4.OPEN4_SHARE_ACCESS_WANT_ANY_DELEG},
		{ShareAccessWantNoDeleg, nfsv4.OPEN4_SHARE_ACCESS_WANT_NO_DELEG}, {ShareAccessWantCancel, nfsv4.OPEN4_SHARE_ACCESS_WANT_CANCEL},
		{ShareAccessWantSignalDelegWhenResrcAvail, nfsv4.OPEN4_SHARE_ACCESS_WANT_SIGNAL_DELEG_WHEN_RESRC_AVAIL},
		{ShareAccessWantPushDelegWhenUncontended, nfsv4.OPEN4_SHARE_ACCESS_WANT_PUSH_DELEG_WHEN_UNCONTENDED},
		{OpenResultConfirm, nfsv4.OPEN4_RESULT_CONFIRM}, {OpenResultLocktypePosix, nfsv4.OPEN4_RESULT_LOCKTYPE_POSIX},
		{OpenResultPreserveUnlinked, nfsv4.OPEN4_RESULT_PRESERVE_UNLINKED}, {OpenResultMayNotifyLock, nfsv4.OPEN4_RESULT_MAY_NOTIFY_LOCK},
		{FH4Persistent, nfsv4.FH4_PERSISTENT}, {FH4NoExpireWithOpen, nfsv4.FH4_NOEXPIRE_WITH_OPEN}, {FH4VolatileAny, nfsv4.FH4_VOLATILE_ANY},
		{FH4VolMigration, nfsv4.FH4_VOL_MIGRATION}, {FH4VolRename, nfsv4.FH4_VOL_RENAME},
		{ACL4SupportAllowACL, nfsv4.ACL4_SUPPORT_ALLOW_ACL}, {ACL4SupportDenyACL, nfsv4.ACL4_SUPPORT_DENY_ACL},
		{ACL4SupportAuditACL, nfsv4.ACL4_SUPPORT_AUDIT_ACL}, {ACL4SupportAlarmACL, nfsv4.ACL4_SUPPORT_ALARM_ACL},
		{RCA4TypeMaskRdataDlg, nfsv4.RCA4_TYPE_MASK_RDATA_DLG}, {RCA4TypeMaskWdataDlg, nfsv4.RCA4_TYPE_MASK_WDATA_DLG},
		{RCA4TypeMaskDirDlg, nfsv4.RCA4_TYPE_MASK_DIR_DLG}, {RCA4TypeMaskFileLayout, nfsv4.RCA4_TYPE_MASK_FILE_LAYOUT},
		{RCA4TypeMaskBlkLayout, nfsv4.RCA4_TYPE_MASK_BLK_LAYOUT}, {RCA4TypeMaskObjLayoutMin, nfsv4.RCA4_TYPE_MASK_OBJ_LAYOUT_MIN},
		{RCA4TypeMaskObjLayoutMax, nfsv4.RCA4_TYPE_MASK_OBJ_LAYOUT_MAX}, {RCA4TypeMaskOtherLayoutMi, nfsv4.RCA4_TYPE_MASK_OTHER_LAYOUT_MIN},
		{RCA4TypeMaskOtherLayoutMx, nfsv4.RCA4_TYPE_MASK_OTHER_LAYOUT_MAX},
		{uint64(TypeNamedAttr), uint64(nfsv4.NF4NAMEDATTR)}, {uint64(TypeSock), uint64(nfsv4.NF4SOCK)},
		{uint64(Exclusive41), uint64(nfsv4.EXCLUSIVE4_1)}, {uint64(ClaimDelegPrevFH), uint64(nfsv4.CLAIM_DELEG_PREV_FH)},
		{uint64(ClaimDelegCurFH), uint64(nfsv4.CLAIM_DELEG_CUR_FH)}, {uint64(DelegateNoneExt), uint64(nfsv4.OPEN_DELEGATE_NONE_EXT)},
		{WNDIsDir, uint64(nfsv4.WND4_IS_DIR)}, {WNDCancelled, uint64(nfsv4.WND4_CANCELLED)}, {WNDResource, uint64(nfsv4.WND4_RESOURCE)},
		{WNDContention, uint64(nfsv4.WND4_CONTENTION)},
		{uint64(WriteWLT), uint64(nfsv4.WRITEW_LT)}, {uint64(ReadWLT), uint64(nfsv4.READW_LT)},
		{CDFC4BackOrBoth, uint64(nfsv4.CDFC4_BACK_OR_BOTH)}, {CDFS4Both, uint64(nfsv4.CDFS4_BOTH)},
		{NotifyChangeCookieVerifier, uint64(nfsv4.NOTIFY4_CHANGE_COOKIE_VERIFIER)}, {NotifyRenameEntry, uint64(nfsv4.NOTIFY4_RENAME_ENTRY)},
		{NotifyAddEntry, uint64(nfsv4.NOTIFY4_ADD_ENTRY)}, {NotifyRemoveEntry, uint64(nfsv4.NOTIFY4_REMOVE_ENTRY)},
		{NotifyChangeDirAttrs, uint64(nfsv4.NOTIFY4_CHANGE_DIR_ATTRS)},
		{LayoutRecallFsid, uint64(nfsv4.LAYOUTRECALL4_FSID)}, {LayoutReturnAll, uint64(nfsv4.LAYOUTRETURN4_ALL)},
		{LayoutIOModeAny, uint64(nfsv4.LAYOUTIOMODE4_ANY)}, {LayoutBlockVolume, uint64(nfsv4.LAYOUT4_BLOCK_VOLUME)},
		{GDD4Unavail, uint64(nfsv4.GDD4_UNAVAIL)}, {SP4SSV, uint64(nfsv4.SP4_SSV)}, {LimitBlocks, uint64(nfsv4.NFS_LIMIT_BLOCKS)},
		{uint64(SecinfoStyleParent), uint64(nfsv4.SECINFO_STYLE4_PARENT)},
	} {
		if c.ours != c.rfc {
			t.Errorf("constant %#x is %#x in the RFC", c.ours, c.rfc)
		}
	}
}

// oracleMessage is a one-operation message of the sample and the oracle's
// reader of such messages.
func oracleMessage(s sample) ([]byte, interface {
	io.ReaderFrom
	io.WriterTo
}) {
	switch {
	case s.cb && s.res:
		return (&CBCompoundRes{Tag: []byte("t"), Results: []CBResop{{Op: CBOpnum(s.op), Res: s.v.(OpRes)}}}).Append(nil), new(nfsv4.CbCompound4res)
	case s.cb:
		return (&CBCompoundArgs{Tag: []byte("t"), MinorVersion: 1, Ops: []CBArgop{{Op: CBOpnum(s.op), Args: s.v.(OpArgs)}}}).Append(nil), new(nfsv4.CbCompound4args)
	case s.res:
		return (&CompoundRes{Tag: []byte("t"), Results: []Resop{{Op: Opnum(s.op), Res: s.v.(OpRes)}}}).Append(nil), new(nfsv4.Compound4res)
	}
	return (&CompoundArgs{Tag: []byte("t"), MinorVersion: 1, Ops: []Argop{{Op: Opnum(s.op), Args: s.v.(OpArgs)}}}).Append(nil), new(nfsv4.Compound4args)
}

// The oracle decodes every sample, as a one-operation message, consuming
// exactly our bytes, and encodes what it decoded to the same bytes.
func TestOracle(t *testing.T) {
	semantic := 0
	for _, s := range samples() {
		if s.hostile {
			continue
		}
		t.Run(s.name, func(t *testing.T) {
			ours, msg := oracleMessage(s)
			r := bytes.NewReader(ours)
			if _, err := msg.ReadFrom(r); err != nil {
				t.Fatalf("oracle cannot decode our encoding: %v\n% x", err, ours)
			}
			if r.Len() != 0 {
				t.Fatalf("oracle left %d of %d bytes", r.Len(), len(ours))
			}
			var theirs bytes.Buffer
			if _, err := msg.WriteTo(&theirs); err != nil {
				t.Fatalf("oracle encode: %v", err)
			}
			if !bytes.Equal(ours, theirs.Bytes()) {
				t.Fatalf("encodings differ:\nours   % x\ntheirs % x", ours, theirs.Bytes())
			}
			if want := oracleValue(s); want != nil {
				semantic++
				got := oracleOp(msg)
				if !deepEqual(got, want) {
					t.Fatalf("oracle decoded\n%#v\nwant\n%#v", got, want)
				}
			}
		})
	}
	if semantic < 40 {
		t.Fatalf("only %d samples checked field by field", semantic)
	}
}

// oracleOp returns the oracle's decoded operation of a one-operation message.
func oracleOp(msg any) any {
	switch m := msg.(type) {
	case *nfsv4.Compound4args:
		return m.Argarray[0]
	case *nfsv4.Compound4res:
		return m.Resarray[0]
	case *nfsv4.CbCompound4args:
		return m.Argarray[0]
	case *nfsv4.CbCompound4res:
		return m.Resarray[0]
	}
	return nil
}

func oStateid(s Stateid) nfsv4.Stateid4 { return nfsv4.Stateid4{Seqid: s.Seqid, Other: s.Other} }

func oOwner(o StateOwner) nfsv4.StateOwner4 {
	return nfsv4.StateOwner4{Clientid: o.ClientID, Owner: o.Owner}
}

func oTime(t Time) nfsv4.Nfstime4 { return nfsv4.Nfstime4{Seconds: t.Seconds, Nseconds: t.Nseconds} }

func oCinfo(c ChangeInfo) nfsv4.ChangeInfo4 {
	return nfsv4.ChangeInfo4{Atomic: c.Atomic, Before: c.Before, After: c.After}
}

func oChan(c ChannelAttrs) nfsv4.ChannelAttrs4 {
	o := nfsv4.ChannelAttrs4{CaHeaderpadsize: c.HeaderPadSize, CaMaxrequestsize: c.MaxRequestSize,
		CaMaxresponsesize: c.MaxResponseSize, CaMaxresponsesizeCached: c.MaxResponseSizeCached,
		CaMaxoperations: c.MaxOperations, CaMaxrequests: c.MaxRequests}
	if c.HasRDMAIRD {
		o.CaRdmaIrd = []uint32{c.RDMAIRD}
	}
	return o
}

// oFattr is the oracle's fattr4: mask and opaque values (the values are
// checked attribute by attribute in TestOracleAttrs).
func oFattr(f Fattr) nfsv4.Fattr4 {
	var of nfsv4.Fattr4
	if _, err := of.ReadFrom(bytes.NewReader(f.Append(nil))); err != nil {
		panic(err)
	}
	return of
}

func oACE(a ACE) nfsv4.Nfsace4 {
	return nfsv4.Nfsace4{Type: a.Type, Flag: a.Flag, AccessMask: a.AccessMask, Who: string(a.Who)}
}

func oSecParms(ps []CallbackSecParms) []nfsv4.CallbackSecParms4 {
	var o []nfsv4.CallbackSecParms4
	for _, p := range ps {
		switch p.Flavor {
		case AuthNone:
			o = append(o, &nfsv4.CallbackSecParms4_AUTH_NONE{})
		case AuthSys:
			o = append(o, &nfsv4.CallbackSecParms4_AUTH_SYS{CbspSysCred: rpcv2.AuthsysParms{Stamp: p.Sys.Stamp,
				Machinename: p.Sys.Machine, Uid: p.Sys.UID, Gid: p.Sys.GID, Gids: p.Sys.GIDs}})
		case AuthRPCSECGSS:
			o = append(o, &nfsv4.CallbackSecParms4_RPCSEC_GSS{CbspGssHandles: nfsv4.GssCbHandles4{
				GcbpService: nfsv4.RpcGssSvcT(p.GSSService), GcbpHandleFromServer: p.GSSHandleFromServer,
				GcbpHandleFromClient: p.GSSHandleFromClient}})
		}
	}
	return o
}

func oImplID(has bool, id ImplID) []nfsv4.NfsImplId4 {
	if !has {
		return nil
	}
	return []nfsv4.NfsImplId4{{NiiDomain: string(id.Domain), NiiName: string(id.Name), NiiDate: oTime(id.Date)}}
}

func oClaim(c OpenClaim) nfsv4.OpenClaim4 {
	switch c.Type {
	case ClaimNull:
		return &nfsv4.OpenClaim4_CLAIM_NULL{File: string(c.File)}
	case ClaimPrevious:
		return &nfsv4.OpenClaim4_CLAIM_PREVIOUS{DelegateType: nfsv4.OpenDelegationType4(c.DelegateType)}
	case ClaimDelegateCur:
		return &nfsv4.OpenClaim4_CLAIM_DELEGATE_CUR{DelegateCurInfo: nfsv4.OpenClaimDelegateCur4{
			DelegateStateid: oStateid(c.DelegateStateid), File: string(c.File)}}
	case ClaimDelegatePrev:
		return &nfsv4.OpenClaim4_CLAIM_DELEGATE_PREV{FileDelegatePrev: string(c.File)}
	case ClaimFH:
		return &nfsv4.OpenClaim4_CLAIM_FH{}
	case ClaimDelegCurFH:
		return &nfsv4.OpenClaim4_CLAIM_DELEG_CUR_FH{OcDelegateStateid: oStateid(c.DelegateStateid)}
	case ClaimDelegPrevFH:
		return &nfsv4.OpenClaim4_CLAIM_DELEG_PREV_FH{}
	}
	return nil
}

func oDelegation(d OpenDelegation) nfsv4.OpenDelegation4 {
	switch d.Type {
	case DelegateRead:
		return &nfsv4.OpenDelegation4_OPEN_DELEGATE_READ{Read: nfsv4.OpenReadDelegation4{
			Stateid: oStateid(d.Stateid), Recall: d.Recall, Permissions: oACE(d.Permissions)}}
	case DelegateWrite:
		var sl nfsv4.NfsSpaceLimit4 = &nfsv4.NfsSpaceLimit4_NFS_LIMIT_SIZE{Filesize: d.SpaceLimit.FileSize}
		if d.SpaceLimit.LimitBy == LimitBlocks {
			sl = &nfsv4.NfsSpaceLimit4_NFS_LIMIT_BLOCKS{ModBlocks: nfsv4.NfsModifiedLimit4{
				NumBlocks: d.SpaceLimit.NumBlocks, BytesPerBlock: d.SpaceLimit.BytesPerBlock}}
		}
		return &nfsv4.OpenDelegation4_OPEN_DELEGATE_WRITE{Write: nfsv4.OpenWriteDelegation4{
			Stateid: oStateid(d.Stateid), Recall: d.Recall, SpaceLimit: sl, Permissions: oACE(d.Permissions)}}
	case DelegateNoneExt:
		var why nfsv4.OpenNoneDelegation4 = &nfsv4.OpenNoneDelegation4_default{OndWhy: nfsv4.WhyNoDelegation4(d.WhyNone)}
		switch d.WhyNone {
		case WNDContention:
			why = &nfsv4.OpenNoneDelegation4_WND4_CONTENTION{OndServerWillPushDeleg: d.WillPushOrSignal}
		case WNDResource:
			why = &nfsv4.OpenNoneDelegation4_WND4_RESOURCE{OndServerWillSignalAvail: d.WillPushOrSignal}
		}
		return &nfsv4.OpenDelegation4_OPEN_DELEGATE_NONE_EXT{OdWhynone: why}
	}
	return &nfsv4.OpenDelegation4_OPEN_DELEGATE_NONE{}
}

// oracleValue returns, for the samples whose fields could be swapped
// without changing the encoding's shape, the operation the oracle must
// decode, built from our field names; nil for the others.
func oracleValue(s sample) any {
	switch v := s.v.(type) {
	case *SequenceArgs:
		return &nfsv4.NfsArgop4_OP_SEQUENCE{Opsequence: nfsv4.Sequence4args{SaSessionid: v.SessionID,
			SaSequenceid: v.SequenceID, SaSlotid: v.SlotID, SaHighestSlotid: v.HighestSlotID, SaCachethis: v.CacheThis}}
	case *SequenceRes:
		if v.Status != OK {
			return nil
		}
		return &nfsv4.NfsResop4_OP_SEQUENCE{Opsequence: &nfsv4.Sequence4res_NFS4_OK{SrResok4: nfsv4.Sequence4resok{
			SrSessionid: v.SessionID, SrSequenceid: v.SequenceID, SrSlotid: v.SlotID, SrHighestSlotid: v.HighestSlotID,
			SrTargetHighestSlotid: v.TargetHighestSlotID, SrStatusFlags: v.StatusFlags}}}
	case *CBSequenceArgs:
		var lists []nfsv4.ReferringCallList4
		for _, l := range v.ReferringCallLists {
			ol := nfsv4.ReferringCallList4{RclSessionid: l.SessionID}
			for _, c := range l.Calls {
				ol.RclReferringCalls = append(ol.RclReferringCalls, nfsv4.ReferringCall4{RcSequenceid: c.SequenceID, RcSlotid: c.SlotID})
			}
			lists = append(lists, ol)
		}
		return &nfsv4.NfsCbArgop4_OP_CB_SEQUENCE{Opcbsequence: nfsv4.CbSequence4args{CsaSessionid: v.SessionID,
			CsaSequenceid: v.SequenceID, CsaSlotid: v.SlotID, CsaHighestSlotid: v.HighestSlotID, CsaCachethis: v.CacheThis,
			CsaReferringCallLists: lists}}
	case *CBSequenceRes:
		if v.Status != OK {
			return nil
		}
		return &nfsv4.NfsCbResop4_OP_CB_SEQUENCE{Opcbsequence: &nfsv4.CbSequence4res_NFS4_OK{CsrResok4: nfsv4.CbSequence4resok{
			CsrSessionid: v.SessionID, CsrSequenceid: v.SequenceID, CsrSlotid: v.SlotID, CsrHighestSlotid: v.HighestSlotID,
			CsrTargetHighestSlotid: v.TargetHighestSlotID}}}
	case *CreateSessionArgs:
		return &nfsv4.NfsArgop4_OP_CREATE_SESSION{OpcreateSession: nfsv4.CreateSession4args{CsaClientid: v.ClientID,
			CsaSequence: v.Sequence, CsaFlags: v.Flags, CsaForeChanAttrs: oChan(v.Fore), CsaBackChanAttrs: oChan(v.Back),
			CsaCbProgram: v.CBProgram, CsaSecParms: oSecParms(v.SecParms)}}
	case *CreateSessionRes:
		if v.Status != OK {
			return nil
		}
		return &nfsv4.NfsResop4_OP_CREATE_SESSION{OpcreateSession: &nfsv4.CreateSession4res_NFS4_OK{CsrResok4: nfsv4.CreateSession4resok{
			CsrSessionid: v.SessionID, CsrSequence: v.Sequence, CsrFlags: v.Flags,
			CsrForeChanAttrs: oChan(v.Fore), CsrBackChanAttrs: oChan(v.Back)}}}
	case *BackchannelCtlArgs:
		return &nfsv4.NfsArgop4_OP_BACKCHANNEL_CTL{OpbackchannelCtl: nfsv4.BackchannelCtl4args{BcaCbProgram: v.CBProgram,
			BcaSecParms: oSecParms(v.SecParms)}}
	case *ExchangeIDArgs:
		if v.StateProtect.How != SP4None {
			return nil
		}
		return &nfsv4.NfsArgop4_OP_EXCHANGE_ID{OpexchangeId: nfsv4.ExchangeId4args{
			EiaClientowner: nfsv4.ClientOwner4{CoVerifier: v.ClientOwner.Verifier, CoOwnerid: v.ClientOwner.OwnerID},
			EiaFlags:       v.Flags, EiaStateProtect: &nfsv4.StateProtect4A_SP4_NONE{},
			EiaClientImplId: oImplID(v.HasImplID, v.ImplID)}}
	case *ExchangeIDRes:
		if v.Status != OK || v.StateProtect.How != SP4None {
			return nil
		}
		return &nfsv4.NfsResop4_OP_EXCHANGE_ID{OpexchangeId: &nfsv4.ExchangeId4res_NFS4_OK{EirResok4: nfsv4.ExchangeId4resok{
			EirClientid: v.ClientID, EirSequenceid: v.SequenceID, EirFlags: v.Flags,
			EirStateProtect: &nfsv4.StateProtect4R_SP4_NONE{},
			EirServerOwner:  nfsv4.ServerOwner4{SoMinorId: v.ServerOwner.MinorID, SoMajorId: v.ServerOwner.MajorID},
			EirServerScope:  v.ServerScope, EirServerImplId: oImplID(v.HasImplID, v.ImplID)}}}
	case *BindConnToSessionArgs:
		return &nfsv4.NfsArgop4_OP_BIND_CONN_TO_SESSION{OpbindConnToSession: nfsv4.BindConnToSession4args{
			BctsaSessid: v.SessionID, BctsaDir: nfsv4.ChannelDirFromClient4(v.Dir), BctsaUseConnInRdmaMode: v.UseRDMA}}
	case *LockArgs:
		var l nfsv4.Locker4 = &nfsv4.Locker4_FALSE{LockOwner: nfsv4.ExistLockOwner4{LockStateid: oStateid(v.LockStateid), LockSeqid: v.LockSeqid}}
		if v.NewLockOwner {
			l = &nfsv4.Locker4_TRUE{OpenOwner: nfsv4.OpenToLockOwner4{OpenSeqid: v.OpenSeqid, OpenStateid: oStateid(v.OpenStateid),
				LockSeqid: v.LockSeqid, LockOwner: oOwner(v.LockOwner)}}
		}
		return &nfsv4.NfsArgop4_OP_LOCK{Oplock: nfsv4.Lock4args{Locktype: nfsv4.NfsLockType4(v.LockType), Reclaim: v.Reclaim,
			Offset: v.Offset, Length: v.Length, Locker: l}}
	case *LockRes:
		if v.Status != ErrDenied {
			return nil
		}
		return &nfsv4.NfsResop4_OP_LOCK{Oplock: &nfsv4.Lock4res_NFS4ERR_DENIED{Denied: nfsv4.Lock4denied{
			Offset: v.Denied.Offset, Length: v.Denied.Length, Locktype: nfsv4.NfsLockType4(v.Denied.LockType), Owner: oOwner(v.Denied.Owner)}}}
	case *LockTArgs:
		return &nfsv4.NfsArgop4_OP_LOCKT{Oplockt: nfsv4.Lockt4args{Locktype: nfsv4.NfsLockType4(v.LockType),
			Offset: v.Offset, Length: v.Length, Owner: oOwner(v.Owner)}}
	case *LockUArgs:
		return &nfsv4.NfsArgop4_OP_LOCKU{Oplocku: nfsv4.Locku4args{Locktype: nfsv4.NfsLockType4(v.LockType), Seqid: v.Seqid,
			LockStateid: oStateid(v.Stateid), Offset: v.Offset, Length: v.Length}}
	case *OpenArgs:
		var how nfsv4.Openflag4 = &nfsv4.Openflag4_default{Opentype: nfsv4.Opentype4(v.OpenType)}
		if v.OpenType == OpenCreate {
			var ch nfsv4.Createhow4
			switch v.CreateMode {
			case Unchecked:
				ch = &nfsv4.Createhow4_UNCHECKED4{Createattrs: oFattr(v.CreateAttrs)}
			case Guarded:
				ch = &nfsv4.Createhow4_GUARDED4{Createattrs: oFattr(v.CreateAttrs)}
			case Exclusive:
				ch = &nfsv4.Createhow4_EXCLUSIVE4{Createverf: v.CreateVerf}
			case Exclusive41:
				ch = &nfsv4.Createhow4_EXCLUSIVE4_1{ChCreateboth: nfsv4.Creatverfattr{CvaVerf: v.CreateVerf, CvaAttrs: oFattr(v.CreateAttrs)}}
			}
			how = &nfsv4.Openflag4_OPEN4_CREATE{How: ch}
		}
		return &nfsv4.NfsArgop4_OP_OPEN{Opopen: nfsv4.Open4args{Seqid: v.Seqid, ShareAccess: v.ShareAccess, ShareDeny: v.ShareDeny,
			Owner: oOwner(v.Owner), Openhow: how, Claim: oClaim(v.Claim)}}
	case *OpenRes:
		if v.Status != OK {
			return nil
		}
		return &nfsv4.NfsResop4_OP_OPEN{Opopen: &nfsv4.Open4res_NFS4_OK{Resok4: nfsv4.Open4resok{Stateid: oStateid(v.Stateid),
			Cinfo: oCinfo(v.CInfo), Rflags: v.Rflags, Attrset: v.AttrSet.Words(), Delegation: oDelegation(v.Delegation)}}}
	case *WantDelegationRes:
		if v.Status != OK {
			return nil
		}
		return &nfsv4.NfsResop4_OP_WANT_DELEGATION{OpwantDelegation: &nfsv4.WantDelegation4res_NFS4_OK{WdrResok4: oDelegation(v.Delegation)}}
	case *CBPushDelegArgs:
		return &nfsv4.NfsCbArgop4_OP_CB_PUSH_DELEG{OpcbpushDeleg: nfsv4.CbPushDeleg4args{CpdaFh: v.FH, CpdaDelegation: oDelegation(v.Delegation)}}
	case *OpenDowngradeArgs:
		return &nfsv4.NfsArgop4_OP_OPEN_DOWNGRADE{OpopenDowngrade: nfsv4.OpenDowngrade4args{OpenStateid: oStateid(v.Stateid),
			Seqid: v.Seqid, ShareAccess: v.ShareAccess, ShareDeny: v.ShareDeny}}
	case *ReadArgs:
		return &nfsv4.NfsArgop4_OP_READ{Opread: nfsv4.Read4args{Stateid: oStateid(v.Stateid), Offset: v.Offset, Count: v.Count}}
	case *WriteArgs:
		return &nfsv4.NfsArgop4_OP_WRITE{Opwrite: nfsv4.Write4args{Stateid: oStateid(v.Stateid), Offset: v.Offset,
			Stable: nfsv4.StableHow4(v.Stable), Data: v.Data}}
	case *WriteRes:
		if v.Status != OK {
			return nil
		}
		return &nfsv4.NfsResop4_OP_WRITE{Opwrite: &nfsv4.Write4res_NFS4_OK{Resok4: nfsv4.Write4resok{Count: v.Count,
			Committed: nfsv4.StableHow4(v.Committed), Writeverf: v.Verf}}}
	case *CommitArgs:
		return &nfsv4.NfsArgop4_OP_COMMIT{Opcommit: nfsv4.Commit4args{Offset: v.Offset, Count: v.Count}}
	case *AccessRes:
		if v.Status != OK {
			return nil
		}
		return &nfsv4.NfsResop4_OP_ACCESS{Opaccess: &nfsv4.Access4res_NFS4_OK{Resok4: nfsv4.Access4resok{Supported: v.Supported, Access: v.Access}}}
	case *ReaddirArgs:
		return &nfsv4.NfsArgop4_OP_READDIR{Opreaddir: nfsv4.Readdir4args{Cookie: v.Cookie, Cookieverf: v.CookieVerf,
			Dircount: v.DirCount, Maxcount: v.MaxCount, AttrRequest: v.AttrRequest.Words()}}
	case *RenameArgs:
		return &nfsv4.NfsArgop4_OP_RENAME{Oprename: nfsv4.Rename4args{Oldname: string(v.OldName), Newname: string(v.NewName)}}
	case *RenameRes:
		if v.Status != OK {
			return nil
		}
		return &nfsv4.NfsResop4_OP_RENAME{Oprename: &nfsv4.Rename4res_NFS4_OK{Resok4: nfsv4.Rename4resok{
			SourceCinfo: oCinfo(v.SourceCInfo), TargetCinfo: oCinfo(v.TargetCInfo)}}}
	case *CreateArgs:
		var ty nfsv4.Createtype4
		switch v.Type {
		case TypeLnk:
			ty = &nfsv4.Createtype4_NF4LNK{Linkdata: v.LinkData}
		case TypeChr:
			ty = &nfsv4.Createtype4_NF4CHR{Devdata: nfsv4.Specdata4{Specdata1: v.Dev.Major, Specdata2: v.Dev.Minor}}
		case TypeBlk:
			ty = &nfsv4.Createtype4_NF4BLK{Devdata: nfsv4.Specdata4{Specdata1: v.Dev.Major, Specdata2: v.Dev.Minor}}
		default:
			return nil
		}
		return &nfsv4.NfsArgop4_OP_CREATE{Opcreate: nfsv4.Create4args{Objtype: ty, Objname: string(v.Name), Createattrs: oFattr(v.Attrs)}}
	case *CBRecallArgs:
		return &nfsv4.NfsCbArgop4_OP_CB_RECALL{Opcbrecall: nfsv4.CbRecall4args{Stateid: oStateid(v.Stateid), Truncate: v.Truncate, Fh: v.FH}}
	case *CBNotifyLockArgs:
		return &nfsv4.NfsCbArgop4_OP_CB_NOTIFY_LOCK{OpcbnotifyLock: nfsv4.CbNotifyLock4args{CnlaFh: v.FH, CnlaLockOwner: oOwner(v.LockOwner)}}
	case *GetDirDelegationArgs:
		return &nfsv4.NfsArgop4_OP_GET_DIR_DELEGATION{OpgetDirDelegation: nfsv4.GetDirDelegation4args{
			GddaSignalDelegAvail: v.SignalDelegAvail, GddaNotificationTypes: v.NotificationTypes.Words(),
			GddaChildAttrDelay: oTime(v.ChildAttrDelay), GddaDirAttrDelay: oTime(v.DirAttrDelay),
			GddaChildAttributes: v.ChildAttributes.Words(), GddaDirAttributes: v.DirAttributes.Words()}}
	case *GetDirDelegationRes:
		if v.Status != OK || v.NonFatal != GDD4OK {
			return nil
		}
		return &nfsv4.NfsResop4_OP_GET_DIR_DELEGATION{OpgetDirDelegation: &nfsv4.GetDirDelegation4res_NFS4_OK{
			GddrResNonFatal4: &nfsv4.GetDirDelegation4resNonFatal_GDD4_OK{GddrnfResok4: nfsv4.GetDirDelegation4resok{
				GddrCookieverf: v.CookieVerf, GddrStateid: oStateid(v.Stateid), GddrNotification: v.Notification.Words(),
				GddrChildAttributes: v.ChildAttributes.Words(), GddrDirAttributes: v.DirAttributes.Words()}}}}
	case *LayoutGetArgs:
		return &nfsv4.NfsArgop4_OP_LAYOUTGET{Oplayoutget: nfsv4.Layoutget4args{LogaSignalLayoutAvail: v.SignalLayoutAvail,
			LogaLayoutType: nfsv4.Layouttype4(v.LayoutType), LogaIomode: nfsv4.Layoutiomode4(v.IOMode), LogaOffset: v.Offset,
			LogaLength: v.Length, LogaMinlength: v.MinLength, LogaStateid: oStateid(v.Stateid), LogaMaxcount: v.MaxCount}}
	case *LayoutCommitArgs:
		var no nfsv4.Newoffset4 = &nfsv4.Newoffset4_FALSE{}
		if v.NewOffset {
			no = &nfsv4.Newoffset4_TRUE{NoOffset: v.LastWriteOffset}
		}
		var nt nfsv4.Newtime4 = &nfsv4.Newtime4_FALSE{}
		if v.TimeChanged {
			nt = &nfsv4.Newtime4_TRUE{NtTime: oTime(v.TimeModify)}
		}
		return &nfsv4.NfsArgop4_OP_LAYOUTCOMMIT{Oplayoutcommit: nfsv4.Layoutcommit4args{LocaOffset: v.Offset, LocaLength: v.Length,
			LocaReclaim: v.Reclaim, LocaStateid: oStateid(v.Stateid), LocaLastWriteOffset: no, LocaTimeModify: nt,
			LocaLayoutupdate: nfsv4.Layoutupdate4{LouType: nfsv4.Layouttype4(v.LayoutUpdate.Type), LouBody: v.LayoutUpdate.Body}}}
	case *CBLayoutRecallArgs:
		if v.RecallType != LayoutRecallFile {
			return nil
		}
		return &nfsv4.NfsCbArgop4_OP_CB_LAYOUTRECALL{Opcblayoutrecall: nfsv4.CbLayoutrecall4args{
			CloraType: nfsv4.Layouttype4(v.LayoutType), CloraIomode: nfsv4.Layoutiomode4(v.IOMode), CloraChanged: v.Changed,
			CloraRecall: &nfsv4.Layoutrecall4_LAYOUTRECALL4_FILE{LorLayout: nfsv4.LayoutrecallFile4{LorFh: v.FH,
				LorOffset: v.Offset, LorLength: v.Length, LorStateid: oStateid(v.Stateid)}}}}
	}
	return nil
}
