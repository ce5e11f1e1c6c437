package client

import (
	"context"
	"strconv"
	"strings"
	"syscall"
	"time"

	"hushfs/internal/proto"
)

// The ACCESS cache remembers, per node and identity, which ACCESS bits the
// server granted. It survives close and open: an entry stays good while the
// node's attributes are within their lifetime (close-to-open refreshes them
// at every open) and its mode, owner, group and ctime are those the entry
// was made with — a change of rights changes one of them.
//
// A file's creator also gets an entry made from the new file's owner bits,
// marked as seeded: it only ever grants (what the owner bits allow, the
// server allows its owner), and anything it does not grant is asked of the
// server, so it never denies what the server would allow (root, ACLs).

// accessAll asks for every right at once, so one reply answers any later
// access(2) mask.
const accessAll = proto.AccessRead | proto.AccessLookup | proto.AccessModify |
	proto.AccessExtend | proto.AccessDelete | proto.AccessExecute

type accessEntry struct {
	granted  uint32
	seeded   bool // made from the owner bits, not by the server
	mode     uint32
	uid, gid uint32
	ctime    proto.Time
	at       time.Time
}

func (e *accessEntry) matches(a *proto.Attr) bool {
	return e.mode == a.Mode && e.uid == a.UID && e.gid == a.GID && e.ctime == a.Ctime
}

// credKey names an identity: uid, gid and groups.
func credKey(c *Cred) string {
	var b strings.Builder
	b.WriteString(strconv.FormatUint(uint64(c.UID), 10))
	b.WriteByte(':')
	b.WriteString(strconv.FormatUint(uint64(c.GID), 10))
	for _, g := range c.Groups {
		b.WriteByte(',')
		b.WriteString(strconv.FormatUint(uint64(g), 10))
	}
	return b.String()
}

// Access mask bits as access(2) takes them.
const (
	AccessRead  = 4
	AccessWrite = 2
	AccessExec  = 1
)

// Access checks access(2)-style permission: the server decides, through
// ACCESS, answered from the cache while it is valid.
func (fs *FS) Access(ctx context.Context, c *Cred, id NodeID, mask uint32) error {
	n, err := fs.node(id)
	if err != nil {
		return err
	}
	if mask == 0 {
		_, _, err := fs.getAttr(ctx, c, n)
		return err
	}
	want := accessWant(n, mask)
	granted, err := fs.accessBits(ctx, c, n, want)
	if err != nil {
		return err
	}
	if granted&want != want {
		return syscall.EACCES
	}
	return nil
}

// accessWant returns the ACCESS bits that answer access(2)'s mask for n.
func accessWant(n *inode, mask uint32) uint32 {
	n.mu.Lock()
	isDir := n.attrValid && n.attr.Type == proto.TypeDir
	n.mu.Unlock()
	var want uint32
	if mask&AccessRead != 0 {
		want |= proto.AccessRead
	}
	if mask&AccessWrite != 0 {
		want |= proto.AccessModify | proto.AccessExtend
		if isDir {
			want |= proto.AccessDelete
		}
	}
	if mask&AccessExec != 0 {
		if isDir {
			want |= proto.AccessLookup
		} else {
			want |= proto.AccessExecute
		}
	}
	return want
}

// accessBits returns the rights granted to c on n, from the cache when it
// can answer for want.
func (fs *FS) accessBits(ctx context.Context, c *Cred, n *inode, want uint32) (uint32, error) {
	if g, ok := fs.cachedAccess(c, n, want, true); ok {
		return g, nil
	}
	g, _, err := fs.accessRPC(ctx, c, n, false)
	return g, err
}

// cachedAccess returns the rights granted to c on n if the cache can
// answer for want: with fresh, only while n's attributes are within their
// lifetime; without, from the last attributes known, which the caller is
// about to refresh (the entry must still match them then).
func (fs *FS) cachedAccess(c *Cred, n *inode, want uint32, fresh bool) (uint32, bool) {
	n.mu.Lock()
	defer n.mu.Unlock()
	if !n.attrValid {
		return 0, false
	}
	if _, _, ok := n.cachedAttrLocked(fs.now()); !ok && fresh {
		return 0, false
	}
	if e, ok := n.access[credKey(c)]; ok && e.matches(&n.attr) && (!e.seeded || e.granted&want == want) {
		return e.granted, true
	}
	return 0, false
}

// accessRPC asks the server what c may do with n (everything at once, so
// the answer serves any later mask) and caches the answer and the
// attributes that come with it, reporting whether they did. A fresh caller
// (close-to-open) joins no ACCESS sent before it came: its attributes
// must be from after the open began.
func (fs *FS) accessRPC(ctx context.Context, c *Cred, n *inode, fresh bool) (granted uint32, gotAttr bool, err error) {
	key := credKey(c)
	flightKey := "a" + strconv.FormatUint(uint64(n.id), 10) + "/" + key
	if fs.opts.NoAC {
		flightKey = ""
	}
	type answer struct {
		granted uint32
		attr    bool
	}
	v, err := fs.flightOrCall(ctx, flightKey, fresh, func() (any, error) {
		at := fs.now()
		res, err := fs.srv.Access(ctx, c, n.fh, accessAll)
		if err != nil {
			return nil, err
		}
		fs.applyAttr(n, &res.Attr, at)
		if res.Status != nil {
			fs.noteStale(n, res.Status)
			return nil, res.Status
		}
		n.mu.Lock()
		if n.attrValid {
			if n.access == nil {
				n.access = map[string]accessEntry{}
			}
			if len(n.access) > 64 {
				clear(n.access) // a node is rarely used by many identities
			}
			n.access[key] = accessEntry{granted: res.Access, mode: n.attr.Mode, uid: n.attr.UID,
				gid: n.attr.GID, ctime: n.attr.Ctime, at: at}
		}
		n.mu.Unlock()
		return answer{res.Access, res.Attr.Present}, nil
	})
	if err != nil {
		return 0, false, err
	}
	a := v.(answer)
	return a.granted, a.attr, nil
}

// seedAccess records what a file's creator may do with it, from the owner
// bits of its attributes (see the seeded entries above).
func (fs *FS) seedAccess(c *Cred, n *inode, at time.Time) {
	n.mu.Lock()
	defer n.mu.Unlock()
	a := &n.attr
	if !n.attrValid || a.UID != c.UID || a.Type != proto.TypeReg || fs.opts.NoAC {
		return
	}
	var g uint32
	if a.Mode&0o400 != 0 {
		g |= proto.AccessRead
	}
	if a.Mode&0o200 != 0 {
		g |= proto.AccessModify | proto.AccessExtend
	}
	if a.Mode&0o100 != 0 {
		g |= proto.AccessExecute
	}
	if n.access == nil {
		n.access = map[string]accessEntry{}
	}
	n.access[credKey(c)] = accessEntry{granted: g, seeded: true, mode: a.Mode, uid: a.UID, gid: a.GID, ctime: a.Ctime, at: at}
}
