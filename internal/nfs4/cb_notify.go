package nfs4

import (
	"fmt"

	"hushfs/internal/xdr"
)

// NotifyEntry is notify_entry4: a directory entry's name and attributes.
type NotifyEntry struct {
	Name  []byte
	Attrs Fattr
}

func (e *NotifyEntry) append(b []byte) []byte {
	b = xdr.AppendOpaque(b, e.Name)
	return e.Attrs.Append(b)
}

func (e *NotifyEntry) decode(d *xdr.Decoder) {
	e.Name = d.Opaque(restOfReply)
	e.Attrs.Decode(d)
}

// NotifyRemove is notify_remove4: an entry gone, with its cookie.
type NotifyRemove struct {
	Entry  NotifyEntry
	Cookie uint64
}

func (r *NotifyRemove) append(b []byte) []byte {
	b = r.Entry.append(b)
	return xdr.AppendUint64(b, r.Cookie)
}

func (r *NotifyRemove) decode(d *xdr.Decoder) {
	r.Entry.decode(d)
	r.Cookie = d.Uint64()
}

// NotifyAdd is notify_add4: an entry added, with what it replaced, its
// cookie and the entry before it where the server says so.
type NotifyAdd struct {
	HasOldEntry  bool // nad_old_entry<1>
	OldEntry     NotifyRemove
	NewEntry     NotifyEntry
	HasNewCookie bool // nad_new_entry_cookie<1>
	NewCookie    uint64
	HasPrevEntry bool // nad_prev_entry<1> (prev_entry4)
	PrevEntry    NotifyEntry
	PrevCookie   uint64
	LastEntry    bool
}

func (a *NotifyAdd) append(b []byte) []byte {
	b = xdr.AppendBool(b, a.HasOldEntry) // an array of 0 or 1: the same words
	if a.HasOldEntry {
		b = a.OldEntry.append(b)
	}
	b = a.NewEntry.append(b)
	b = xdr.AppendBool(b, a.HasNewCookie)
	if a.HasNewCookie {
		b = xdr.AppendUint64(b, a.NewCookie)
	}
	b = xdr.AppendBool(b, a.HasPrevEntry)
	if a.HasPrevEntry {
		b = a.PrevEntry.append(b)
		b = xdr.AppendUint64(b, a.PrevCookie)
	}
	return xdr.AppendBool(b, a.LastEntry)
}

func (a *NotifyAdd) decode(d *xdr.Decoder) {
	if a.HasOldEntry = d.ArrayLen(1, 4) == 1; a.HasOldEntry {
		a.OldEntry.decode(d)
	} else {
		a.OldEntry = NotifyRemove{}
	}
	a.NewEntry.decode(d)
	a.NewCookie = 0
	if a.HasNewCookie = d.ArrayLen(1, 8) == 1; a.HasNewCookie {
		a.NewCookie = d.Uint64()
	}
	a.PrevCookie = 0
	if a.HasPrevEntry = d.ArrayLen(1, 4) == 1; a.HasPrevEntry {
		a.PrevEntry.decode(d)
		a.PrevCookie = d.Uint64()
	} else {
		a.PrevEntry = NotifyEntry{}
	}
	a.LastEntry = d.Bool()
}

// NotifyRename is notify_rename4: an entry removed and one added.
type NotifyRename struct {
	OldEntry NotifyRemove
	NewEntry NotifyAdd
}

// NotifyVerifier is notify_verifier4: the directory's cookie verifier
// changed.
type NotifyVerifier struct {
	OldCookieVerf Verifier
	NewCookieVerf Verifier
}

// notifyTypes is the set of notify_type4 values Notify carries.
var notifyTypes = NewBitmap(NotifyChangeChildAttrs, NotifyChangeDirAttrs, NotifyRemoveEntry,
	NotifyAddEntry, NotifyRenameEntry, NotifyChangeCookieVerifier)

// Notify is notify4 decoded: one value per bit of Mask (the notify_type4
// values), in bit order inside the opaque notifylist4, each in its field.
// A type outside notify_type4 fails the decoding, as an unknown attribute
// does; Append encodes only the known types of Mask.
type Notify struct {
	Mask       Bitmap
	ChildAttrs NotifyEntry    // NotifyChangeChildAttrs (notify_attr4)
	DirAttrs   NotifyEntry    // NotifyChangeDirAttrs (notify_attr4)
	Remove     NotifyRemove   // NotifyRemoveEntry
	Add        NotifyAdd      // NotifyAddEntry
	Rename     NotifyRename   // NotifyRenameEntry
	Verifier   NotifyVerifier // NotifyChangeCookieVerifier
}

// Append encodes the notification.
func (n *Notify) Append(b []byte) []byte {
	mask := n.Mask.And(notifyTypes)
	b = mask.Append(b)
	b, off := xdr.Reserve(b)
	start := len(b)
	for t := mask.Next(0); t >= 0; t = mask.Next(t + 1) {
		switch t {
		case NotifyChangeChildAttrs:
			b = n.ChildAttrs.append(b)
		case NotifyChangeDirAttrs:
			b = n.DirAttrs.append(b)
		case NotifyRemoveEntry:
			b = n.Remove.append(b)
		case NotifyAddEntry:
			b = n.Add.append(b)
		case NotifyRenameEntry:
			b = n.Rename.OldEntry.append(b)
			b = n.Rename.NewEntry.append(b)
		case NotifyChangeCookieVerifier:
			b = n.Verifier.OldCookieVerf.Append(b)
			b = n.Verifier.NewCookieVerf.Append(b)
		}
	}
	xdr.PutUint32(b, off, uint32(len(b)-start))
	return b
}

// Decode decodes the notification.
func (n *Notify) Decode(d *xdr.Decoder) {
	*n = Notify{}
	n.Mask.Decode(d)
	vals := d.Opaque(restOfReply)
	if d.Err() != nil {
		return
	}
	var sub xdr.Decoder
	sub.Reset(vals)
	for t := n.Mask.Next(0); t >= 0 && sub.Err() == nil; t = n.Mask.Next(t + 1) {
		switch t {
		case NotifyChangeChildAttrs:
			n.ChildAttrs.decode(&sub)
		case NotifyChangeDirAttrs:
			n.DirAttrs.decode(&sub)
		case NotifyRemoveEntry:
			n.Remove.decode(&sub)
		case NotifyAddEntry:
			n.Add.decode(&sub)
		case NotifyRenameEntry:
			n.Rename.OldEntry.decode(&sub)
			n.Rename.NewEntry.decode(&sub)
		case NotifyChangeCookieVerifier:
			n.Verifier.OldCookieVerf.Decode(&sub)
			n.Verifier.NewCookieVerf.Decode(&sub)
		default:
			sub.SetErr(errBadEnum("notify_type4", uint32(t)))
		}
	}
	if err := sub.Err(); err != nil {
		d.SetErr(fmt.Errorf("nfs4: notify4: %w", err))
	} else if sub.Remaining() != 0 {
		d.SetErr(fmt.Errorf("nfs4: notify4: %d bytes after the last value", sub.Remaining()))
	}
}

// CBNotifyArgs is CB_NOTIFY4args: changes to a delegated directory.
type CBNotifyArgs struct {
	Stateid Stateid
	FH      FH
	Changes []Notify
}

// Append encodes the arguments.
func (a *CBNotifyArgs) Append(b []byte) []byte {
	b = a.Stateid.Append(b)
	b = a.FH.Append(b)
	b = xdr.AppendUint32(b, uint32(len(a.Changes)))
	for i := range a.Changes {
		b = a.Changes[i].Append(b)
	}
	return b
}

// Decode decodes the arguments, reusing Changes' storage.
func (a *CBNotifyArgs) Decode(d *xdr.Decoder) {
	a.Stateid.Decode(d)
	a.FH.Decode(d)
	a.Changes = decodeList(d, a.Changes, maxList, 8)
	for i := range a.Changes {
		a.Changes[i].Decode(d)
	}
}

// RawNotify is notify4 with its values left undecoded.
type RawNotify struct {
	Mask Bitmap
	Vals []byte
}

// CBNotifyDeviceIDArgs is CB_NOTIFY_DEVICEID4args. We hold no layouts and
// answer it NFS4ERR_NOTSUPP, so the device notifications stay raw.
type CBNotifyDeviceIDArgs struct {
	Changes []RawNotify
}

// Append encodes the arguments.
func (a *CBNotifyDeviceIDArgs) Append(b []byte) []byte {
	b = xdr.AppendUint32(b, uint32(len(a.Changes)))
	for i := range a.Changes {
		b = a.Changes[i].Mask.Append(b)
		b = xdr.AppendOpaque(b, a.Changes[i].Vals)
	}
	return b
}

// Decode decodes the arguments.
func (a *CBNotifyDeviceIDArgs) Decode(d *xdr.Decoder) {
	a.Changes = decodeList(d, a.Changes, maxList, 8)
	for i := range a.Changes {
		a.Changes[i].Mask.Decode(d)
		a.Changes[i].Vals = d.Opaque(restOfReply)
	}
}
