package nfsv41

import (
	"context"
	"slices"

	"hushfs/internal/nfs4"
	"hushfs/internal/proto"
)

// Directory delegations (RFC 8881 §10.9, §18.39): a listing that asks for
// one (ReadDirArgs.WantDirDeleg) carries GET_DIR_DELEGATION in its own
// COMPOUND, before the READDIR, so that what is listed is already covered
// (a change after the grant recalls it) and the delegation costs no round
// trip. It asks to be told of its entries' attribute changes
// (NOTIFY4_CHANGE_CHILD_ATTRS, with the attributes the core keeps): a
// server that grants that promises them, by CB_NOTIFY or by recalling,
// and the core may then keep the entries' attributes too. It asks to be
// told of entries added and removed (with their attributes and handle)
// and of the directory's attributes that go with them: a server that
// grants those sends them instead of recalling, and the core applies
// them to what it holds.
//
// A server without the operation fails the whole COMPOUND at it (an
// error status, or ganesha's OP_ILLEGAL result in its place): the listing
// is sent again without it, and this mount does not ask again. The
// mount's own COMPOUND asks first (rootlist.go), last, where a failure
// stops nothing: a server without them costs no listing twice.

var _ proto.DirDelegator = (*Server)(nil)

// DirDelegations reports whether the server answered a GET_DIR_DELEGATION
// (proto.DirDelegator).
func (s *Server) DirDelegations() bool { return s.dirDelegOK.Load() && !s.noDirDeleg.Load() }

// dirNotifyWanted are the notifications asked for.
var dirNotifyWanted = nfs4.NewBitmap(nfs4.NotifyChangeChildAttrs, nfs4.NotifyAddEntry, nfs4.NotifyRemoveEntry,
	nfs4.NotifyChangeDirAttrs)

// notifyChildAttrs are the attributes asked of entries notified: what
// the core keeps, and the handle of one added.
var notifyChildAttrs = fileAttrs.Or(nfs4.NewBitmap(nfs4.AttrFilehandle))

// withDirDeleg puts GET_DIR_DELEGATION after ops' PUTFH when a is to ask
// for one and we can be called back; want says it did.
func (s *Server) withDirDeleg(a proto.ReadDirArgs, ops []nfs4.Argop) (_ []nfs4.Argop, want bool) {
	if !a.WantDirDeleg || s.callbacks() == nil || s.noDirDeleg.Load() {
		return ops, false
	}
	gdd := nfs4.Argop{Op: nfs4.OpGetDirDelegation, Args: &nfs4.GetDirDelegationArgs{
		NotificationTypes: dirNotifyWanted, ChildAttributes: notifyChildAttrs, DirAttributes: fileAttrs}}
	return slices.Insert(slices.Clone(ops), 1, gdd), true
}

// takeDirDeleg takes GET_DIR_DELEGATION's result out of r (so the other
// operations keep the indices they have without it) and reports what was
// granted; again says the COMPOUND stopped at it (the server does not
// have it) and must be sent without.
func (s *Server) takeDirDeleg(r *reply) (d proto.DirDelegation, again bool) {
	g, ok := r.at(1).(*nfs4.GetDirDelegationRes)
	if !ok || g.Status != nfs4.OK {
		if r.at(0) != nil && r.at(0).OpStatus() == nfs4.OK {
			// PUTFH went, the delegation did not: never ask again.
			s.noDirDeleg.Store(true)
			return d, true
		}
		// Stopped before it (the handle): the listing's error is PUTFH's.
		return d, false
	}
	s.dirDelegOK.Store(true)
	r.ops = slices.Delete(r.ops, 1, 2)
	r.res.Ops = slices.Delete(r.res.Ops, 1, 2)
	if g.NonFatal != nfs4.GDD4OK {
		return d, false
	}
	entries := g.Notification.Has(nfs4.NotifyAddEntry) && g.Notification.Has(nfs4.NotifyRemoveEntry)
	return proto.DirDelegation{Granted: true, State: stateOf(g.Stateid),
		ChildAttrs: g.Notification.Has(nfs4.NotifyChangeChildAttrs), Entries: entries,
		DirAttrs: entries && g.Notification.Has(nfs4.NotifyChangeDirAttrs)}, false
}

// compoundDirDeleg sends a listing's ops, with GET_DIR_DELEGATION if a
// asks for one (withDirDeleg), and returns the reply as without it.
func (s *Server) compoundDirDeleg(ctx context.Context, c *proto.Cred, proc string, a proto.ReadDirArgs, ops []nfs4.Argop) (*reply, proto.DirDelegation, error) {
	all, want := s.withDirDeleg(a, ops)
	r, err := s.compound(ctx, c, proc, all)
	if err != nil || !want {
		return r, proto.DirDelegation{}, err
	}
	d, again := s.takeDirDeleg(r)
	if again {
		r, err = s.compound(ctx, c, proc, ops)
	}
	return r, d, err
}

var _ proto.DirAttrDelegator = (*Server)(nil)

// GetAttrDirDeleg is GetAttr of a directory with GET_DIR_DELEGATION
// before the GETATTR, in one COMPOUND (proto.DirAttrDelegator).
func (s *Server) GetAttrDirDeleg(ctx context.Context, c *proto.Cred, fh proto.FH) (proto.AttrRes, proto.DirDelegation, error) {
	r, d, err := s.compoundDirDeleg(ctx, c, "GETATTR", proto.ReadDirArgs{WantDirDeleg: true},
		[]nfs4.Argop{putfh(fh), getattr(fileAttrs)})
	if err != nil {
		return proto.AttrRes{}, proto.DirDelegation{}, err
	}
	a, ok := r.attrs(1)
	if !ok {
		return proto.AttrRes{Status: statusErr(r.status(1))}, d, nil
	}
	return proto.AttrRes{Attr: a.Attr}, d, nil
}

// cbNotify hands CB_NOTIFY's changes to the core (proto.DirNotifier).
// One we cannot take (no such delegation here, a change we did not ask
// for) is refused: the server then recalls the delegation instead.
func cbNotify(cb proto.Callbacks, args any) nfs4.OpRes {
	a, ok := args.(*nfs4.CBNotifyArgs)
	dn, can := cb.(proto.DirNotifier)
	if !ok || !can {
		return &nfs4.StatusRes{Status: nfs4.ErrBadHandle}
	}
	var changes []proto.DirChange
	for i := range a.Changes {
		n := &a.Changes[i]
		for t := n.Mask.Next(0); t >= 0; t = n.Mask.Next(t + 1) {
			switch t {
			case nfs4.NotifyChangeChildAttrs:
				changes = append(changes, proto.DirChange{Kind: proto.ChildAttrsChanged,
					Name: string(n.ChildAttrs.Name), Attr: notifyAttr(&n.ChildAttrs.Attrs), FH: notifyFH(&n.ChildAttrs.Attrs)})
			case nfs4.NotifyAddEntry:
				if n.Add.HasOldEntry {
					changes = append(changes, proto.DirChange{Kind: proto.EntryRemoved, Name: string(n.Add.OldEntry.Entry.Name)})
				}
				changes = append(changes, proto.DirChange{Kind: proto.EntryAdded,
					Name: string(n.Add.NewEntry.Name), Attr: notifyAttr(&n.Add.NewEntry.Attrs),
					FH: notifyFH(&n.Add.NewEntry.Attrs)})
			case nfs4.NotifyChangeDirAttrs:
				// Only all the attributes the core keeps make its
				// directory's next version.
				ch := proto.DirChange{Kind: proto.DirAttrsChanged}
				if missing := fileAttrs.AndNot(n.DirAttrs.Attrs.Mask); missing.IsZero() {
					ch.Attr = notifyAttr(&n.DirAttrs.Attrs)
				}
				changes = append(changes, ch)
			case nfs4.NotifyRemoveEntry:
				changes = append(changes, proto.DirChange{Kind: proto.EntryRemoved, Name: string(n.Remove.Entry.Name)})
			case nfs4.NotifyRenameEntry:
				changes = append(changes, proto.DirChange{Kind: proto.EntryRenamed,
					Name: string(n.Rename.OldEntry.Entry.Name), NewName: string(n.Rename.NewEntry.NewEntry.Name),
					Attr: notifyAttr(&n.Rename.NewEntry.NewEntry.Attrs), FH: notifyFH(&n.Rename.NewEntry.NewEntry.Attrs)})
			default:
				return &nfs4.StatusRes{Status: nfs4.ErrInval}
			}
		}
	}
	if !dn.Notify(proto.FH(append([]byte(nil), a.FH...)), stateOf(a.Stateid), changes) {
		return &nfs4.StatusRes{Status: nfs4.ErrBadStateid}
	}
	return &nfs4.StatusRes{Status: nfs4.OK}
}

// notifyAttr is a notification's attributes, when they describe a file
// as the core keeps it (type and fileid at least).
func notifyAttr(f *nfs4.Fattr) proto.PostAttr {
	if !f.Mask.Has(nfs4.AttrType) || !f.Mask.Has(nfs4.AttrFileid) {
		return proto.PostAttr{}
	}
	return proto.PostAttr{Present: true, Attr: attrOf(f)}
}

// notifyFH is a notification's entry's handle, if sent (copied: the
// arguments alias the call).
func notifyFH(f *nfs4.Fattr) proto.FH {
	if !f.Mask.Has(nfs4.AttrFilehandle) || len(f.Filehandle) == 0 {
		return nil
	}
	return proto.FH(append([]byte(nil), f.Filehandle...))
}
