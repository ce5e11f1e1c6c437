package nfs4

import (
	"bytes"
	"fmt"
	"io"
	"testing"

	"github.com/buildbarn/go-xdr/pkg/protocols/nfsv4"
)

// attrOracle decodes one attribute value with the oracle's reader of that
// attribute and compares it with our field.
var attrOracle = map[int]func(r io.Reader, f *Fattr) (bool, error){
	AttrSupportedAttrs: func(r io.Reader, f *Fattr) (bool, error) {
		m, _, err := nfsv4.ReadFattr4SupportedAttrs(r)
		return deepEqual(m, f.SupportedAttrs.Words()), err
	},
	AttrType: func(r io.Reader, f *Fattr) (bool, error) {
		m, _, err := nfsv4.ReadFattr4Type(r)
		return uint32(m) == uint32(f.Type), err
	},
	AttrFHExpireType:    u32Attr(nfsv4.ReadFattr4FhExpireType, func(f *Fattr) uint32 { return f.FHExpireType }),
	AttrChange:          u64Attr(nfsv4.ReadFattr4Change, func(f *Fattr) uint64 { return f.Change }),
	AttrSize:            u64Attr(nfsv4.ReadFattr4Size, func(f *Fattr) uint64 { return f.Size }),
	AttrLinkSupport:     boolAttr(nfsv4.ReadFattr4LinkSupport, func(f *Fattr) bool { return f.LinkSupport }),
	AttrSymlinkSupport:  boolAttr(nfsv4.ReadFattr4SymlinkSupport, func(f *Fattr) bool { return f.SymlinkSupport }),
	AttrNamedAttr:       boolAttr(nfsv4.ReadFattr4NamedAttr, func(f *Fattr) bool { return f.NamedAttr }),
	AttrUniqueHandles:   boolAttr(nfsv4.ReadFattr4UniqueHandles, func(f *Fattr) bool { return f.UniqueHandles }),
	AttrLeaseTime:       u32Attr(nfsv4.ReadFattr4LeaseTime, func(f *Fattr) uint32 { return f.LeaseTime }),
	AttrACLSupport:      u32Attr(nfsv4.ReadFattr4Aclsupport, func(f *Fattr) uint32 { return f.ACLSupport }),
	AttrArchive:         boolAttr(nfsv4.ReadFattr4Archive, func(f *Fattr) bool { return f.Archive }),
	AttrCanSetTime:      boolAttr(nfsv4.ReadFattr4Cansettime, func(f *Fattr) bool { return f.CanSetTime }),
	AttrCaseInsensitive: boolAttr(nfsv4.ReadFattr4CaseInsensitive, func(f *Fattr) bool { return f.CaseInsensitive }),
	AttrCasePreserving:  boolAttr(nfsv4.ReadFattr4CasePreserving, func(f *Fattr) bool { return f.CasePreserving }),
	AttrChownRestricted: boolAttr(nfsv4.ReadFattr4ChownRestricted, func(f *Fattr) bool { return f.ChownRestricted }),
	AttrFileid:          u64Attr(nfsv4.ReadFattr4Fileid, func(f *Fattr) uint64 { return f.Fileid }),
	AttrFilesAvail:      u64Attr(nfsv4.ReadFattr4FilesAvail, func(f *Fattr) uint64 { return f.FilesAvail }),
	AttrFilesFree:       u64Attr(nfsv4.ReadFattr4FilesFree, func(f *Fattr) uint64 { return f.FilesFree }),
	AttrFilesTotal:      u64Attr(nfsv4.ReadFattr4FilesTotal, func(f *Fattr) uint64 { return f.FilesTotal }),
	AttrHidden:          boolAttr(nfsv4.ReadFattr4Hidden, func(f *Fattr) bool { return f.Hidden }),
	AttrHomogeneous:     boolAttr(nfsv4.ReadFattr4Homogeneous, func(f *Fattr) bool { return f.Homogeneous }),
	AttrMaxFileSize:     u64Attr(nfsv4.ReadFattr4Maxfilesize, func(f *Fattr) uint64 { return f.MaxFileSize }),
	AttrMaxLink:         u32Attr(nfsv4.ReadFattr4Maxlink, func(f *Fattr) uint32 { return f.MaxLink }),
	AttrMaxName:         u32Attr(nfsv4.ReadFattr4Maxname, func(f *Fattr) uint32 { return f.MaxName }),
	AttrMaxRead:         u64Attr(nfsv4.ReadFattr4Maxread, func(f *Fattr) uint64 { return f.MaxRead }),
	AttrMaxWrite:        u64Attr(nfsv4.ReadFattr4Maxwrite, func(f *Fattr) uint64 { return f.MaxWrite }),
	AttrMode:            u32Attr(nfsv4.ReadFattr4Mode, func(f *Fattr) uint32 { return f.Mode }),
	AttrNoTrunc:         boolAttr(nfsv4.ReadFattr4NoTrunc, func(f *Fattr) bool { return f.NoTrunc }),
	AttrNumLinks:        u32Attr(nfsv4.ReadFattr4Numlinks, func(f *Fattr) uint32 { return f.NumLinks }),
	AttrQuotaAvailHard:  u64Attr(nfsv4.ReadFattr4QuotaAvailHard, func(f *Fattr) uint64 { return f.QuotaAvailHard }),
	AttrQuotaAvailSoft:  u64Attr(nfsv4.ReadFattr4QuotaAvailSoft, func(f *Fattr) uint64 { return f.QuotaAvailSoft }),
	AttrQuotaUsed:       u64Attr(nfsv4.ReadFattr4QuotaUsed, func(f *Fattr) uint64 { return f.QuotaUsed }),
	AttrSpaceAvail:      u64Attr(nfsv4.ReadFattr4SpaceAvail, func(f *Fattr) uint64 { return f.SpaceAvail }),
	AttrSpaceFree:       u64Attr(nfsv4.ReadFattr4SpaceFree, func(f *Fattr) uint64 { return f.SpaceFree }),
	AttrSpaceTotal:      u64Attr(nfsv4.ReadFattr4SpaceTotal, func(f *Fattr) uint64 { return f.SpaceTotal }),
	AttrSpaceUsed:       u64Attr(nfsv4.ReadFattr4SpaceUsed, func(f *Fattr) uint64 { return f.SpaceUsed }),
	AttrSystem:          boolAttr(nfsv4.ReadFattr4System, func(f *Fattr) bool { return f.System }),
	AttrMountedOnFileid: u64Attr(nfsv4.ReadFattr4MountedOnFileid, func(f *Fattr) uint64 { return f.MountedOnFileid }),
	AttrLayoutBlksize:   u32Attr(nfsv4.ReadFattr4LayoutBlksize, func(f *Fattr) uint32 { return f.LayoutBlksize }),
	AttrLayoutAlignment: u32Attr(nfsv4.ReadFattr4LayoutAlignment, func(f *Fattr) uint32 { return f.LayoutAlignment }),
	AttrFsCharsetCap:    u32Attr(nfsv4.ReadFattr4FsCharsetCap, func(f *Fattr) uint32 { return f.FsCharsetCap }),
	AttrCloneBlksize:    u32Attr(nfsv4.ReadFattr4CloneBlksize, func(f *Fattr) uint32 { return f.CloneBlksize }),
	AttrSpaceFreed:      u64Attr(nfsv4.ReadFattr4SpaceFreed, func(f *Fattr) uint64 { return f.SpaceFreed }),
	AttrRdattrError: func(r io.Reader, f *Fattr) (bool, error) {
		m, _, err := nfsv4.ReadFattr4RdattrError(r)
		return uint32(m) == uint32(f.RdattrError), err
	},
	AttrFsid: func(r io.Reader, f *Fattr) (bool, error) {
		var m nfsv4.Fsid4
		_, err := nfsv4.ReadFattr4Fsid(r, &m)
		return m.Major == f.Fsid.Major && m.Minor == f.Fsid.Minor, err
	},
	AttrFilehandle: func(r io.Reader, f *Fattr) (bool, error) {
		m, _, err := nfsv4.ReadFattr4Filehandle(r)
		return bytes.Equal(m, f.Filehandle), err
	},
	AttrMimetype: func(r io.Reader, f *Fattr) (bool, error) {
		m, _, err := nfsv4.ReadFattr4Mimetype(r)
		return m == string(f.Mimetype), err
	},
	AttrOwner: func(r io.Reader, f *Fattr) (bool, error) {
		m, _, err := nfsv4.ReadFattr4Owner(r)
		return m == string(f.Owner), err
	},
	AttrOwnerGroup: func(r io.Reader, f *Fattr) (bool, error) {
		m, _, err := nfsv4.ReadFattr4OwnerGroup(r)
		return m == string(f.OwnerGroup), err
	},
	AttrRawdev: func(r io.Reader, f *Fattr) (bool, error) {
		var m nfsv4.Specdata4
		_, err := nfsv4.ReadFattr4Rawdev(r, &m)
		return m.Specdata1 == f.Rawdev.Major && m.Specdata2 == f.Rawdev.Minor, err
	},
	AttrTimeAccess:       timeAttr(nfsv4.ReadFattr4TimeAccess, func(f *Fattr) Time { return f.TimeAccess }),
	AttrTimeBackup:       timeAttr(nfsv4.ReadFattr4TimeBackup, func(f *Fattr) Time { return f.TimeBackup }),
	AttrTimeCreate:       timeAttr(nfsv4.ReadFattr4TimeCreate, func(f *Fattr) Time { return f.TimeCreate }),
	AttrTimeDelta:        timeAttr(nfsv4.ReadFattr4TimeDelta, func(f *Fattr) Time { return f.TimeDelta }),
	AttrTimeMetadata:     timeAttr(nfsv4.ReadFattr4TimeMetadata, func(f *Fattr) Time { return f.TimeMetadata }),
	AttrTimeModify:       timeAttr(nfsv4.ReadFattr4TimeModify, func(f *Fattr) Time { return f.TimeModify }),
	AttrDirNotifDelay:    timeAttr(nfsv4.ReadFattr4DirNotifDelay, func(f *Fattr) Time { return f.DirNotifDelay }),
	AttrDirentNotifDelay: timeAttr(nfsv4.ReadFattr4DirentNotifDelay, func(f *Fattr) Time { return f.DirentNotifDelay }),
	AttrTimeAccessSet:    setTimeAttr(nfsv4.ReadFattr4TimeAccessSet, func(f *Fattr) SetTime { return f.TimeAccessSet }),
	AttrTimeModifySet:    setTimeAttr(nfsv4.ReadFattr4TimeModifySet, func(f *Fattr) SetTime { return f.TimeModifySet }),
	AttrChangePolicy: func(r io.Reader, f *Fattr) (bool, error) {
		var m nfsv4.ChangePolicy4
		_, err := nfsv4.ReadFattr4ChangePolicy(r, &m)
		return m.CpMajor == f.ChangePolicy.Major && m.CpMinor == f.ChangePolicy.Minor, err
	},
	AttrFsLayoutTypes: func(r io.Reader, f *Fattr) (bool, error) {
		m, _, err := nfsv4.ReadFattr4FsLayoutTypes(r)
		return fmt.Sprint(m) == fmt.Sprint(f.FsLayoutTypes), err
	},
	AttrLayoutTypes: func(r io.Reader, f *Fattr) (bool, error) {
		m, _, err := nfsv4.ReadFattr4LayoutTypes(r)
		return fmt.Sprint(m) == fmt.Sprint(f.LayoutTypes), err
	},
	AttrModeSetMasked: func(r io.Reader, f *Fattr) (bool, error) {
		var m nfsv4.ModeMasked4
		_, err := nfsv4.ReadFattr4ModeSetMasked(r, &m)
		return m.MmValueToSet == f.ModeSetMasked.Value && m.MmMaskBits == f.ModeSetMasked.Mask, err
	},
	AttrSuppattrExclcreat: func(r io.Reader, f *Fattr) (bool, error) {
		m, _, err := nfsv4.ReadFattr4SuppattrExclcreat(r)
		return deepEqual(m, f.SuppattrExclcreat.Words()), err
	},
	AttrChangeAttrType: func(r io.Reader, f *Fattr) (bool, error) {
		m, _, err := nfsv4.ReadFattr4ChangeAttrType(r)
		return uint32(m) == f.ChangeAttrType, err
	},
}

func u32Attr(read func(io.Reader) (uint32, int64, error), field func(*Fattr) uint32) func(io.Reader, *Fattr) (bool, error) {
	return func(r io.Reader, f *Fattr) (bool, error) {
		m, _, err := read(r)
		return m == field(f), err
	}
}

func u64Attr(read func(io.Reader) (uint64, int64, error), field func(*Fattr) uint64) func(io.Reader, *Fattr) (bool, error) {
	return func(r io.Reader, f *Fattr) (bool, error) {
		m, _, err := read(r)
		return m == field(f), err
	}
}

func boolAttr(read func(io.Reader) (bool, int64, error), field func(*Fattr) bool) func(io.Reader, *Fattr) (bool, error) {
	return func(r io.Reader, f *Fattr) (bool, error) {
		m, _, err := read(r)
		return m == field(f), err
	}
}

func timeAttr(read func(io.Reader, *nfsv4.Nfstime4) (int64, error), field func(*Fattr) Time) func(io.Reader, *Fattr) (bool, error) {
	return func(r io.Reader, f *Fattr) (bool, error) {
		var m nfsv4.Nfstime4
		_, err := read(r, &m)
		return m == oTime(field(f)), err
	}
}

func setTimeAttr(read func(io.Reader) (nfsv4.Settime4, int64, error), field func(*Fattr) SetTime) func(io.Reader, *Fattr) (bool, error) {
	return func(r io.Reader, f *Fattr) (bool, error) {
		m, _, err := read(r)
		st := field(f)
		switch m := m.(type) {
		case *nfsv4.Settime4_SET_TO_CLIENT_TIME4:
			return st.How == SetToClientTime && m.Time == oTime(st.Time), err
		case *nfsv4.Settime4_default:
			return st.How == TimeHow(m.SetIt), err
		}
		return false, err
	}
}

// Every attribute the codec knows, alone in an attribute list, is the value
// the oracle's reader of that attribute number finds there, and takes all
// of the list.
func TestOracleAttrs(t *testing.T) {
	g := &gen{}
	all := g.fattrAll()
	for a := codecAttrs.Next(0); a >= 0; a = codecAttrs.Next(a + 1) {
		check, ok := attrOracle[a]
		if !ok {
			if a == AttrModeUmask || a == AttrXattrSupport {
				continue // newer than RFC 7863's XDR
			}
			t.Errorf("attribute %d: no oracle", a)
			continue
		}
		one := all
		one.Mask = NewBitmap(a)
		var of nfsv4.Fattr4
		if _, err := of.ReadFrom(bytes.NewReader(one.Append(nil))); err != nil {
			t.Fatalf("attribute %d: oracle fattr4: %v", a, err)
		}
		r := bytes.NewReader(of.AttrVals)
		same, err := check(r, &all)
		if err != nil || !same || r.Len() != 0 {
			t.Errorf("attribute %d: oracle reads err %v, same %v, %d bytes left", a, err, same, r.Len())
		}
	}
}

// Every notification type, alone in a notify4, is what the oracle's reader
// of that type takes, to the byte.
func TestOracleNotify(t *testing.T) {
	var changes []Notify
	for _, s := range samples() {
		if a, ok := s.v.(*CBNotifyArgs); ok {
			changes = append(changes, a.Changes...)
		}
	}
	readers := map[int]func() interface {
		io.ReaderFrom
		io.WriterTo
	}{
		NotifyChangeChildAttrs: func() interface {
			io.ReaderFrom
			io.WriterTo
		} {
			return new(nfsv4.NotifyAttr4)
		},
		NotifyChangeDirAttrs: func() interface {
			io.ReaderFrom
			io.WriterTo
		} {
			return new(nfsv4.NotifyAttr4)
		},
		NotifyRemoveEntry: func() interface {
			io.ReaderFrom
			io.WriterTo
		} {
			return new(nfsv4.NotifyRemove4)
		},
		NotifyAddEntry: func() interface {
			io.ReaderFrom
			io.WriterTo
		} {
			return new(nfsv4.NotifyAdd4)
		},
		NotifyRenameEntry: func() interface {
			io.ReaderFrom
			io.WriterTo
		} {
			return new(nfsv4.NotifyRename4)
		},
		NotifyChangeCookieVerifier: func() interface {
			io.ReaderFrom
			io.WriterTo
		} {
			return new(nfsv4.NotifyVerifier4)
		},
	}
	seen := map[int]bool{}
	for _, n := range changes {
		for ty := n.Mask.Next(0); ty >= 0; ty = n.Mask.Next(ty + 1) {
			one := n
			one.Mask = NewBitmap(ty)
			var on nfsv4.Notify4
			if _, err := on.ReadFrom(bytes.NewReader(one.Append(nil))); err != nil {
				t.Fatalf("notify4: %v", err)
			}
			v := readers[ty]()
			r := bytes.NewReader(on.NotifyVals)
			if _, err := v.ReadFrom(r); err != nil || r.Len() != 0 {
				t.Fatalf("type %d: oracle err %v, %d bytes left", ty, err, r.Len())
			}
			var back bytes.Buffer
			v.WriteTo(&back)
			if !bytes.Equal(back.Bytes(), on.NotifyVals) {
				t.Fatalf("type %d: oracle re-encodes differently", ty)
			}
			if ty == NotifyAddEntry {
				add := v.(*nfsv4.NotifyAdd4)
				if add.NadNewEntry.NeFile != string(n.Add.NewEntry.Name) || add.NadLastEntry != n.Add.LastEntry ||
					len(add.NadOldEntry) != 1 && n.Add.HasOldEntry || len(add.NadNewEntryCookie) == 1 && add.NadNewEntryCookie[0] != n.Add.NewCookie ||
					len(add.NadPrevEntry) == 1 && add.NadPrevEntry[0].PePrevEntryCookie != n.Add.PrevCookie {
					t.Fatalf("notify_add4 fields differ: %+v", add)
				}
			}
			seen[ty] = true
		}
	}
	if len(seen) != len(readers) {
		t.Fatalf("notification types seen: %v", seen)
	}
}
