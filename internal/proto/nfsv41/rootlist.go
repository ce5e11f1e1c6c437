package nfsv41

import (
	"bytes"
	"context"
	"sync"
	"time"

	"hushfs/internal/nfs4"
	"hushfs/internal/proto"
)

// The mount's own COMPOUND (walkExport) also reads the export root's
// first page of entries, and asks GET_DIR_DELEGATION of the root last:
//
//	PUTROOTFH, LOOKUP…, GETFH, GETATTR, READDIR, GETATTR, GET_DIR_DELEGATION
//
// What a tool does first on a fresh mount is list its root (grep -r,
// find, ls, a shell's completion): that listing is then answered from
// the mount's reply (rootList), with no COMPOUND, as a statfs is from its
// space attributes (statfs.go), under the same rules: at most spaceKeep
// after the mount's COMPOUND was sent, only until the mount sends
// anything that may change the file system (our own create in the root
// is then seen by the next listing), once, and only to the mount's own
// credential (what it may list). A bigger listing goes on from the
// page's last cookie with ordinary READDIRs. Another client's change
// shows within spaceKeep, less than a listing is kept for (acdirmin).
//
// GET_DIR_DELEGATION is there to learn, at no round trip, whether the
// server does directory delegations at all: one that does not answers it
// with an error (ganesha 4.3: OP_ILLEGAL in its place), which stops
// nothing after it, and no listing of this mount asks again; before, the
// first listing asked, failed at it and went again without (the root
// listed twice). It is last, after the READDIR, so what it grants would
// not cover the listing (a change between the two is no recall), and the
// core cannot hold it yet (no callbacks before the mount is done): a
// delegation granted there is given back at once (one COMPOUND more, only
// against a server that grants them), and the mount is otherwise as if
// it had not asked: its listings and directory GETATTRs ask as before
// (holding the root's from the mount on, asked for or not, cost an idle
// return and a watermark's place on every such mount), and the listing
// is answered from the mount only to a listing that does not ask for one.

// rootListKeep bounds how long the root's listing from the mount is good.
const rootListKeep = spaceKeep

// rootListPage is what the mount's READDIR asks for: a root of a few
// hundred names in one page, and never more than a read-ahead listing.
const rootListPage = riderPage

// rootList is the root's first page of entries the mount's COMPOUND
// brought.
type rootList struct {
	mu   sync.Mutex
	r    *reply    // GUARDED_BY(mu): results PUTFH's place, READDIR, GETATTR; nil: none or no longer good
	at   time.Time // GUARDED_BY(mu): when the COMPOUND was sent
	ckey string    // GUARDED_BY(mu): the mount's credential
	page uint32    // GUARDED_BY(mu): the READDIR's maxcount
}

// rootListOps are the operations walkExport adds after the root's GETATTR
// (the current file handle is the root), if the session allows as many
// operations; want says GET_DIR_DELEGATION is among them.
func (s *Server) rootListOps(walk int) (ops []nfs4.Argop, want bool) {
	maxOps := int(s.sess.Info().Fore.MaxOperations)
	if maxOps > 0 && 1+walk+2 > maxOps {
		return nil, false
	}
	ops = []nfs4.Argop{{Op: nfs4.OpReaddir, Args: &nfs4.ReaddirArgs{DirCount: rootListPage, MaxCount: rootListPage,
		AttrRequest: plusAttrs}}, getattr(fileAttrs)}
	if maxOps > 0 && 1+walk+len(ops)+1 > maxOps {
		return ops, false
	}
	return append(ops, nfs4.Argop{Op: nfs4.OpGetDirDelegation, Args: &nfs4.GetDirDelegationArgs{
		NotificationTypes: dirNotifyWanted, ChildAttributes: notifyChildAttrs, DirAttributes: fileAttrs}}), true
}

// keepRootList takes the results of rootListOps, from result at of r (the
// mount's COMPOUND, sent at sent by c's credential): the listing is kept
// if it succeeded; what GET_DIR_DELEGATION answered settles whether later
// listings ask, and a delegation it granted is given back.
func (s *Server) keepRootList(ctx context.Context, c *proto.Cred, root proto.FH, r *reply, at int, want bool, sent time.Time) {
	if want {
		switch g, ok := r.at(at + 2).(*nfs4.GetDirDelegationRes); {
		case ok && g.Status == nfs4.OK:
			if g.NonFatal == nfs4.GDD4OK {
				// Not wanted here (above): given back, a failure logged
				// (the server drops it at the lease's end).
				if err := s.ReturnDelegation(ctx, c, root, stateOf(g.Stateid)); err != nil {
					s.logf("hushfs: NFSv4.1 DELEGRETURN of the root's directory delegation from the mount: %v", err)
				}
			}
		case r.at(at+2) != nil:
			// It failed: the server does not do them.
			s.noDirDeleg.Store(true)
		}
	}
	rd, ok := r.at(at).(*nfs4.ReaddirRes)
	if !ok || rd.Status != nfs4.OK || r.status(at+1) != nfs4.OK {
		return
	}
	// The results as readDir finds them (READDIR 1, GETATTR 2); the one
	// before stands in for PUTFH's.
	kept := &reply{res: r.res}
	kept.res.Ops = r.res.Ops[at-1 : at+2]
	kept.res.Status = nfs4.OK
	s.rootList.mu.Lock()
	defer s.rootList.mu.Unlock()
	s.rootList.r, s.rootList.at, s.rootList.ckey, s.rootList.page = kept, sent, credKey(c), rootListPage
}

// takeRootList returns, once, the mount's listing of the root for a
// listing a of it by c asking for at most maxCount bytes, if it is
// still good.
func (s *Server) takeRootList(c *proto.Cred, a proto.ReadDirArgs, maxCount uint32) *reply {
	if a.Cookie != 0 || (a.WantDirDeleg && !s.noDirDeleg.Load()) || !bytes.Equal(a.Dir, s.root) {
		return nil
	}
	now := s.now()
	l := &s.rootList
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.r == nil || now.Sub(l.at) >= rootListKeep || now.Before(l.at) {
		l.r = nil
		return nil
	}
	if l.ckey != credKey(c) || max(maxCount, a.Count) < l.page {
		return nil
	}
	r := l.r
	l.r = nil
	return r
}

// forget drops it: something that may change the file system is sent.
func (l *rootList) forget() {
	l.mu.Lock()
	l.r = nil
	l.mu.Unlock()
}
