package server

import (
	"math"
	"slices"

	"golang.org/x/sys/unix"

	"hushfs/internal/nfs3"
	"hushfs/internal/nfs4"
	"hushfs/internal/xdr"
)

// READ, WRITE and COMMIT: the stateid is checked against the open state
// (special stateids per RFC 8881 §8.2.3), then the v3 data path does the
// I/O (the same descriptors, readahead and early write-back, stable
// writes and the write-back error latch shared with v3's COMMIT).

// read streams READ4res into the reply: status, eof, and the data read
// straight into the reply buffer.
func (c *compound) read(a *nfs4.ReadArgs) nfs4.Status {
	n, st := c.regularFile()
	if st != nfs4.OK {
		return c.status(st)
	}
	sid, st := c.stateid(&a.Stateid)
	if st == nfs4.OK {
		st = c.s.v4.state.CheckIO(c.client, &sid, n.key, false)
	}
	if st == nfs4.OK {
		st = c.mayRead(n.key)
	}
	if st != nfs4.OK {
		return c.status(st)
	}
	var fst unix.Stat_t
	if !c.id.isRoot() {
		if err := c.s.stat(n, &fst); err != nil {
			return c.status(c.s.statusOf4(err))
		}
		if err := c.s.mayIO(&c.id, n, &fst, false); err != nil {
			return c.status(c.s.statusOf4(err))
		}
	}
	fd, err := c.s.ioFd(n, false)
	if err != nil {
		return c.status(c.s.statusOf4(err))
	}
	count := int(min(a.Count, maxIO))
	if c.sess != nil {
		// What fits the session's replies: a READ asking for more is
		// answered short, as a server may.
		room := int(c.sess.Fore.MaxResponseSize) - (len(c.reply) - c.start) - 16
		count = max(0, min(count, room))
	}
	if a.Offset > math.MaxInt64 {
		count = 0
	} else if rest := math.MaxInt64 - a.Offset; uint64(count) > rest {
		count = int(rest)
	}
	const head = 4 + 4 + 4 // status, eof, length
	start := len(c.reply)
	b := slices.Grow(c.reply, head+count+3)[:start+head+count]
	data := b[start+head:]
	got := 0
	for got < count {
		k, err := c.s.io.files.Pread(fd, data[got:], int64(a.Offset)+int64(got))
		if err == unix.EINTR {
			continue
		}
		if err != nil {
			c.reply = b[:start]
			return c.status(c.s.statusOf4(err))
		}
		if k == 0 {
			break
		}
		got += k
	}
	if err := c.s.stat(n, &fst); err != nil {
		c.reply = b[:start]
		return c.status(c.s.statusOf4(err))
	}
	eof := a.Offset+uint64(got) >= uint64(fst.Size)
	c.s.readAhead(n, fd, a.Offset, uint64(count), fst.Size)
	h := xdr.AppendUint32(b[start:start], uint32(nfs4.OK))
	h = xdr.AppendBool(h, eof)
	xdr.AppendUint32(h, uint32(got))
	b = b[:start+head+got]
	c.reply = append(b, make([]byte, (4-got%4)%4)...)
	return nfs4.OK
}

func (c *compound) write(a *nfs4.WriteArgs) nfs4.Status {
	n, st := c.regularFile()
	if st != nfs4.OK {
		return c.status(st)
	}
	sid, st := c.stateid(&a.Stateid)
	if st == nfs4.OK {
		st = c.s.v4.state.CheckIO(c.client, &sid, n.key, true)
	}
	if st == nfs4.OK {
		st = c.mayChangeData(n.key, true)
	}
	if st != nfs4.OK {
		return c.status(st)
	}
	r := c.s.write(&c.id, &nfs3.WriteArgs{File: n.fh, Offset: a.Offset, Count: uint32(len(a.Data)),
		Stable: nfs3.StableHow(a.Stable), Data: a.Data})
	if r.Status != nfs3.OK {
		return c.status(status4(r.Status))
	}
	res := nfs4.WriteRes{Status: nfs4.OK, Count: r.Count, Committed: nfs4.StableHow(r.Committed), Verf: nfs4.Verifier(r.Verf)}
	c.reply = res.Append(c.reply)
	return nfs4.OK
}

func (c *compound) commit(a *nfs4.CommitArgs) nfs4.Status {
	n, st := c.regularFile()
	if st != nfs4.OK {
		return c.status(st)
	}
	if a.Count != 0 && a.Offset+uint64(a.Count) < a.Offset {
		return c.status(nfs4.ErrInval)
	}
	r := c.s.commit(&nfs3.CommitArgs{File: n.fh, Offset: a.Offset, Count: a.Count})
	if r.Status != nfs3.OK {
		return c.status(status4(r.Status))
	}
	res := nfs4.CommitRes{Status: nfs4.OK, Verf: nfs4.Verifier(r.Verf)}
	c.reply = res.Append(c.reply)
	return nfs4.OK
}
