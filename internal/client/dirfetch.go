package client

import (
	"context"
	"fmt"

	"hushfs/internal/nfs3"
)

// fetchDir reads the entries after d.cookie into d.batch. A cookie the
// server no longer honours restarts the run from the beginning, skipping
// the names it has returned.
//
// LOCKS_REQUIRED(d.mu)
func (fs *FS) fetchDir(ctx context.Context, c *Cred, d *openDir, plus bool) error {
	for restarted := false; ; restarted = true {
		err := fs.readdirRPC(ctx, c, d, plus)
		if err != nfs3.ErrBadCookie || restarted {
			return err
		}
		d.cookie, d.verf = 0, nfs3.Verf{}
		d.batch, d.plusB, d.pos, d.pending = nil, nil, 0, nil
		d.restarted = true
	}
}

// readdirRPC sends one READDIR or READDIRPLUS from d.cookie and makes its
// entries the batch at hand.
//
// LOCKS_REQUIRED(d.mu)
func (fs *FS) readdirRPC(ctx context.Context, c *Cred, d *openDir, plus bool) error {
	dir := d.node
	at := fs.now()
	from := d.cookie
	var batch []DirEntry
	// take appends an entry to the batch unless a restarted run returned it
	// already; either way the run reads on after it.
	take := func(name []byte, fileid, cookie uint64) *DirEntry {
		d.cookie = cookie
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
		args := nfs3.ReaddirplusArgs{Dir: dir.fh, Cookie: d.cookie, CookieVerf: d.verf, DirCount: fs.dtpref, MaxCount: fs.rsize}
		var res nfs3.ReaddirplusRes
		if err := fs.call(ctx, c, nfs3.ProcReaddirplus, &args, &res); err != nil {
			return err
		}
		fs.applyAttr(dir, &res.DirAttr, at)
		if res.Status != nfs3.OK {
			fs.noteStale(dir, res.Status)
			return res.Status
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
			if e.FH.Present && e.Attr.Present {
				de.Mode = typeBits[e.Attr.Attr.Type]
				p = plusData{fh: append(nfs3.FH(nil), e.FH.FH...), attr: e.Attr.Attr, at: at, dirVer: ver}
				pp = &p
			}
			plusB = append(plusB, p)
			collect(de, pp)
		}
		d.verf, d.eof, d.plusB, n = res.CookieVerf, res.EOF, plusB, len(res.Entries)
	} else {
		args := nfs3.ReaddirArgs{Dir: dir.fh, Cookie: d.cookie, CookieVerf: d.verf, Count: fs.dtpref}
		var res nfs3.ReaddirRes
		if err := fs.call(ctx, c, nfs3.ProcReaddir, &args, &res); err != nil {
			return err
		}
		fs.applyAttr(dir, &res.DirAttr, at)
		if res.Status != nfs3.OK {
			fs.noteStale(dir, res.Status)
			return res.Status
		}
		for i := range res.Entries {
			e := &res.Entries[i]
			if de := take(e.Name, e.Fileid, e.Cookie); de != nil {
				collect(de, nil)
			}
		}
		d.verf, d.eof, d.plusB, n = res.CookieVerf, res.EOF, nil, len(res.Entries)
	}
	d.batch, d.pos = batch, 0
	if n == 0 && !d.eof {
		// No entries and no end: asking again would loop.
		return fmt.Errorf("READDIR at cookie %d: server returned nothing and no EOF: %w", from, nfs3.ErrIO)
	}
	if d.eof && d.pending != nil {
		fs.finishPending(dir, d.pending, d.verf, d.cookie)
		d.pending = nil
	}
	return nil
}
