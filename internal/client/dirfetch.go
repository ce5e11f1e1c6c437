package client

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"

	"hushfs/internal/proto"
)

// nameMax is NAME_MAX: the longest name the kernel takes in a listing.
const nameMax = 255

// maxFruitlessRestarts bounds the restarts (BAD_COOKIE) of a run in a row
// that return no new entry: a server may invalidate its cookies once or
// twice while a listing is read again, but one that refuses every cookie
// it hands out makes the listing start over forever.
const maxFruitlessRestarts = 2

// Kinds of a server's listing faults, each logged once per directory.
const (
	warnBadNames = 1 << iota
	warnBadHandles
)

// listableName reports whether the kernel can take name as a directory
// entry: not empty, no '/' or NUL, at most NAME_MAX bytes. "." and ".."
// are the server's own entries.
func listableName(name []byte) bool {
	return len(name) > 0 && len(name) <= nameMax && bytes.IndexByte(name, '/') < 0 && bytes.IndexByte(name, 0) < 0
}

// usableFH reports whether fh can be a file handle: 1 to the protocol's
// largest (NFS3_FHSIZE) bytes.
func (fs *FS) usableFH(fh proto.FH) bool { return len(fh) > 0 && len(fh) <= fs.limits.MaxHandle }

// fetchDir reads the entries after d.cookie into d.batch. A cookie the
// server no longer honours restarts the run from the beginning, skipping
// the names it has returned. A run that makes no progress — a cookie read
// from again, restarts that bring nothing new, a reply with no entries and
// no end — fails with EIO, as does every later call continuing it.
//
// LOCKS_REQUIRED(d.mu)
func (fs *FS) fetchDir(ctx context.Context, c *Cred, d *openDir, plus bool) error {
	for {
		if _, again := d.asked[d.cookie]; again {
			return fs.listingLoop(d, fmt.Sprintf("the server led back to cookie %d", d.cookie))
		}
		err := fs.readdirRPC(ctx, c, d, plus)
		if !errors.Is(err, proto.ErrBadCookie) || d.cookie == 0 {
			return err
		}
		if d.gained > 0 {
			d.fruitless = 0
		} else if d.fruitless++; d.fruitless > maxFruitlessRestarts {
			return fs.listingLoop(d, fmt.Sprintf("cookie %d refused (BAD_COOKIE) %d times in a row with no entry listed in between", d.cookie, d.fruitless))
		}
		d.cookie, d.verf = 0, proto.Verf{}
		d.batch, d.plusB, d.pos, d.pending = nil, nil, 0, nil
		clear(d.asked)
		d.restarted, d.gained = true, 0
	}
}

// listingLoop fails the current run of d: the server's listing of the
// directory makes no progress.
//
// LOCKS_REQUIRED(d.mu)
func (fs *FS) listingLoop(d *openDir, why string) error {
	name := fs.describeDir(d.node)
	fs.logf("hushfs: directory %s: readdir loop: %s; the listing fails with EIO", name, why)
	d.failed = fmt.Errorf("listing directory %s: readdir loop: %s: %w", name, why, proto.ErrIO)
	return d.failed
}

// readdirRPC sends one READDIR or READDIRPLUS from d.cookie and makes its
// entries the batch at hand, less those the kernel cannot take (names that
// cannot be names; handles that cannot be handles lose the handle only).
//
// LOCKS_REQUIRED(d.mu)
func (fs *FS) readdirRPC(ctx context.Context, c *Cred, d *openDir, plus bool) error {
	dir := d.node
	drops := fs.nodes.dropCount()
	at := fs.now()
	from := d.cookie
	first := from == 0 && !d.restarted // the pass's first call
	if first {
		d.passAt, d.calls = at, 0
	}
	d.calls++
	var batch []DirEntry
	var badNames, badFHs int
	var badName []byte
	// take appends an entry to the batch unless the kernel cannot take its
	// name, or a restarted run returned it already; either way the run
	// reads on after it.
	take := func(name []byte, fileid, cookie uint64) *DirEntry {
		d.cookie = cookie
		if !listableName(name) {
			badNames++
			badName = name
			return nil
		}
		s := string(name)
		off := fs.dirOffset(s)
		if _, dup := d.seen[off]; dup && d.restarted {
			return nil
		}
		batch = append(batch, DirEntry{Name: s, Ino: fileid, Cookie: off, cookie: cookie})
		return &batch[len(batch)-1]
	}
	// collect records an entry of a pass that may become the complete
	// listing.
	collect := func(e *DirEntry, p *plusData) {
		switch {
		case d.pending == nil:
		case len(d.pending.entries) >= maxListEntries:
			d.pending = nil // too large to keep: listed from the server each time
		default:
			d.pending.entries = append(d.pending.entries, pendingEntry{name: e.Name, fileid: e.Ino, mode: e.Mode, plus: p, cookie: e.cookie})
		}
	}
	var n int
	if plus {
		args := proto.ReadDirArgs{Dir: dir.fh, Cookie: d.cookie, Verf: d.verf, Count: fs.dtpref, MaxCount: fs.rsize,
			WantDirDeleg: first && fs.wantDirDeleg(dir)}
		res, err := fs.srv.ReadDirPlus(ctx, c, args)
		if err != nil {
			return err
		}
		if res.DirDeleg.Granted {
			fs.keepDirDeleg(dir, c, res.DirDeleg, at)
		}
		fs.applyAttr(dir, &res.DirAttr, at)
		if res.Status != nil {
			fs.noteStale(dir, res.Status)
			return res.Status
		}
		if first {
			fs.repend(d, &res.DirAttr)
		}
		var ver *dirVersion
		if res.DirAttr.Present {
			v := versionOf(&res.DirAttr.Attr)
			ver = &v
		}
		var plusB []plusData
		for i := range res.Entries {
			e := &res.Entries[i]
			de := take(e.Name, e.Fileid, e.Cookie)
			if de == nil {
				continue
			}
			var p plusData
			var pp *plusData
			if e.Attr.Present {
				de.Mode = typeBits[e.Attr.Attr.Type]
			}
			switch {
			case !e.FH.Present || !e.Attr.Present:
			case !fs.usableFH(e.FH.FH):
				badFHs++ // the kernel looks the name up: LOOKUP gets its handle
			default:
				p = plusData{fh: append(proto.FH(nil), e.FH.FH...), attr: e.Attr.Attr, at: at, dirVer: ver, drops: drops}
				pp = &p
			}
			plusB = append(plusB, p)
			collect(de, pp)
		}
		d.verf, d.eof, d.plusB, n = res.Verf, res.EOF, plusB, len(res.Entries)
	} else {
		args := proto.ReadDirArgs{Dir: dir.fh, Cookie: d.cookie, Verf: d.verf, Count: fs.dtpref,
			WantDirDeleg: first && fs.wantDirDeleg(dir)}
		res, err := fs.srv.ReadDir(ctx, c, args)
		if err != nil {
			return err
		}
		if res.DirDeleg.Granted {
			fs.keepDirDeleg(dir, c, res.DirDeleg, at)
		}
		fs.applyAttr(dir, &res.DirAttr, at)
		if res.Status != nil {
			fs.noteStale(dir, res.Status)
			return res.Status
		}
		if first {
			fs.repend(d, &res.DirAttr)
		}
		for i := range res.Entries {
			e := &res.Entries[i]
			if de := take(e.Name, e.Fileid, e.Cookie); de != nil {
				collect(de, nil)
			}
		}
		d.verf, d.eof, d.plusB, n = res.Verf, res.EOF, nil, len(res.Entries)
	}
	d.batch, d.pos = batch, 0
	d.asked[from] = struct{}{}
	if badNames > 0 {
		fs.warnListing(dir, warnBadNames, "skipping %d entries whose names cannot be names (such as %.64q)", badNames, badName)
	}
	if badFHs > 0 {
		fs.warnListing(dir, warnBadHandles, "dropping the file handles of %d entries (empty or over %d bytes); the names are looked up instead", badFHs, fs.limits.MaxHandle)
	}
	switch _, back := d.asked[d.cookie]; {
	case d.eof:
	case n == 0:
		d.batch = nil
		return fs.listingLoop(d, fmt.Sprintf("no entries and no end of directory after cookie %d", from))
	case back:
		// The reply leads where the run has read from: its entries, if
		// not returned already, would be next time.
		d.batch, d.plusB = nil, nil
		return fs.listingLoop(d, fmt.Sprintf("the reply after cookie %d leads back to cookie %d", from, d.cookie))
	}
	if d.eof && d.pending != nil {
		fs.finishPending(dir, d.pending, d.verf, d.cookie)
		d.pending = nil
	}
	if d.eof && plus && !d.passAt.IsZero() && !d.restarted {
		// A whole pass: what it cost, and since when its entries'
		// attributes are fresh (bulk.go).
		dir.mu.Lock()
		b := dir.bulkLocked()
		b.calls, b.freshAt = d.calls, d.passAt
		dir.mu.Unlock()
	}
	return nil
}

// repend starts the pass's listing over at its first reply, for the
// version of the directory the reply shows: the version may have changed
// since the pass began (its GETATTR is older), and a reply older than
// what the name cache describes (not applied) lists no version it knows.
//
// LOCKS_REQUIRED(d.mu)
func (fs *FS) repend(d *openDir, p *proto.PostAttr) {
	if !d.listing || !p.Present {
		return
	}
	dir := d.node
	dir.mu.Lock()
	defer dir.mu.Unlock()
	if !dir.namesValidLocked() || dir.nameVer != versionOf(&p.Attr) {
		d.pending = nil
		return
	}
	d.pending = fs.beginPendingLocked(dir)
}

// warnListing logs a fault of the server's listing of dir, once per
// directory and kind.
func (fs *FS) warnListing(dir *inode, kind uint32, format string, args ...any) {
	for {
		old := dir.listWarned.Load()
		if old&kind != 0 {
			return
		}
		if dir.listWarned.CompareAndSwap(old, old|kind) {
			break
		}
	}
	fs.logf("hushfs: directory %s: %s", fs.describeDir(dir), fmt.Sprintf(format, args...))
}

// describeDir names a directory for a log line: its path in the export,
// as the names it was last reached by make it, and its fileid.
func (fs *FS) describeDir(n *inode) string {
	var path []string
	cur := n
	for depth := 0; cur.id != RootID && depth < 256; depth++ {
		cur.mu.Lock()
		pid, name := cur.parent, cur.name
		cur.mu.Unlock()
		p := fs.nodes.get(pid)
		if p == nil || name == "" {
			break
		}
		path = append(path, name)
		cur = p
	}
	slices.Reverse(path)
	where := strings.TrimSuffix(fs.cfg.Export, "/") + "/" + strings.Join(path, "/")
	if cur.id != RootID {
		where = "…/" + strings.Join(path, "/")
	}
	n.mu.Lock()
	fileid := n.attr.Fileid
	n.mu.Unlock()
	return fmt.Sprintf("%s (fileid %d)", where, fileid)
}
