package server

import (
	"errors"
	"math"
	"slices"

	"golang.org/x/sys/unix"

	"hushfs/internal/nfs3"
	"hushfs/internal/xdr"
)

// mayIO checks whether id may read (write false) or write the file: its
// owner and root always may (clients check permission at open time, and the
// creator of a read-only file must still be able to write what it creates),
// anyone else needs the permission, or, to read, execute permission (a
// client reads a program to run it).
func (s *Server) mayIO(id *identity, n *node, st *unix.Stat_t, write bool) error {
	if id.isRoot() || id.uid == st.Uid {
		return nil
	}
	return s.as(id, func() error {
		if write {
			return accessOK(n.fd, unix.W_OK)
		}
		err := accessOK(n.fd, unix.R_OK)
		if err != nil && accessOK(n.fd, unix.X_OK) == nil {
			return nil
		}
		return err
	})
}

// readHeadSize is the size of a successful READ3res before the data:
// status, post_op_attr with attributes, count, eof and the data length.
const readHeadSize = 4 + 4 + nfs3.FattrSize + 4 + 4 + 4

// read serves READ, reading the file straight into the reply buffer.
func (s *Server) read(id *identity, a *nfs3.ReadArgs, reply []byte) []byte {
	fail := func(status nfs3.Status, attr nfs3.PostOpAttr) []byte {
		r := nfs3.ReadRes{Status: status, FileAttr: attr}
		return r.Append(reply)
	}
	n, err := s.resolve(a.File)
	if err != nil {
		return fail(s.statusOf(err), nfs3.PostOpAttr{})
	}
	defer s.cache.release(n)
	switch {
	case n.isDir():
		return fail(nfs3.ErrIsDir, s.postOpOf(n))
	case !n.isReg():
		return fail(nfs3.ErrInval, s.postOpOf(n))
	}
	var st unix.Stat_t
	// Only the permission check needs the attributes before the read (the
	// owner); root reads anything, and the stat after the read catches a
	// file deleted meanwhile.
	if !id.isRoot() {
		if err := s.stat(n, &st); err != nil {
			return fail(s.statusOf(err), nfs3.PostOpAttr{})
		}
		if err := s.mayIO(id, n, &st, false); err != nil {
			return fail(s.statusOf(err), s.postOp(&st))
		}
	}
	fd, err := s.ioFd(n, false)
	if err != nil {
		return fail(s.statusOf(err), s.postOpOf(n))
	}
	count := int(min(a.Count, maxIO))
	if a.Offset > math.MaxInt64 {
		count = 0
	} else if rest := math.MaxInt64 - a.Offset; uint64(count) > rest {
		count = int(rest)
	}
	start := len(reply)
	b := slices.Grow(reply, readHeadSize+count+3)
	b = b[:start+readHeadSize+count]
	data := b[start+readHeadSize:]
	got := 0
	for got < count {
		k, err := s.io.files.Pread(fd, data[got:], int64(a.Offset)+int64(got))
		if err == unix.EINTR {
			continue
		}
		if err != nil {
			return fail(s.statusOf(err), s.postOpOf(n))
		}
		if k == 0 {
			break
		}
		got += k
	}
	if err := s.stat(n, &st); err != nil {
		return fail(s.statusOf(err), nfs3.PostOpAttr{})
	}
	eof := a.Offset+uint64(got) >= uint64(st.Size)
	s.readAhead(n, fd, a.Offset, uint64(count), st.Size)
	// Fill in the head now that the attributes after the read are known.
	attr := s.fattr(&st)
	var head [readHeadSize]byte
	h := xdr.AppendUint32(head[:0], uint32(nfs3.OK))
	h = xdr.AppendBool(h, true)
	h = attr.Append(h)
	h = xdr.AppendUint32(h, uint32(got))
	h = xdr.AppendBool(h, eof)
	h = xdr.AppendUint32(h, uint32(got))
	copy(b[start:], h)
	b = b[:start+readHeadSize+got]
	return append(b, make([]byte, (4-got%4)%4)...)
}

func (s *Server) write(id *identity, a *nfs3.WriteArgs) (r nfs3.WriteRes) {
	n, st, status := s.resolveStat(a.File)
	if status != nfs3.OK {
		r.Status = status
		return r
	}
	defer s.cache.release(n)
	r.Wcc.Before = preOp(&st)
	switch {
	case s.readOnly:
		r.Status = nfs3.ErrROFS
	case n.isDir():
		r.Status = nfs3.ErrIsDir
	case !n.isReg():
		r.Status = nfs3.ErrInval
	case int64(a.Count) > int64(len(a.Data)):
		r.Status = nfs3.ErrInval
	case a.Offset > math.MaxInt64 || a.Offset+uint64(a.Count) > math.MaxInt64:
		r.Status = nfs3.ErrFBig
	}
	if r.Status == nfs3.OK {
		if err := s.mayIO(id, n, &st, true); err != nil {
			r.Status = s.statusOf(err)
		}
	}
	if r.Status != nfs3.OK {
		r.Wcc.After = s.postOp(&st)
		return r
	}
	fd, writing, err := s.writeFd(n)
	if err != nil {
		r.Status = s.statusOf(err)
		r.Wcc.After = s.postOpOf(n)
		return r
	}
	defer writing()
	data := a.Data[:a.Count]
	pwrite := s.io.files.Pwrite
	if !id.isRoot() && st.Mode&(unix.S_ISUID|unix.S_ISGID) != 0 {
		// Written with the server's privileges, the kernel would keep the
		// set-id bits. Written as the caller (without CAP_FSETID), it
		// clears them by its own rule, as for a local write: set-user-ID
		// always, set-group-ID with group execute or when the caller is
		// not in the file's group. Only such files pay for the switch.
		pwrite = func(fd int, p []byte, off int64) (k int, err error) {
			err = s.as(id, func() error {
				k, err = s.io.files.Pwrite(fd, p, off)
				return err
			})
			return k, err
		}
	}
	done := 0
	for done < len(data) {
		k, err := pwrite(fd, data[done:], int64(a.Offset)+int64(done))
		if err == unix.EINTR {
			continue
		}
		if err != nil {
			if done > 0 {
				n.io.dirtyGen.Add(1)
			}
			if errors.Is(err, unix.EIO) {
				// The device failed under the file: unstable data
				// written before may be lost too. (ENOSPC, EFBIG...
				// concern this write only, and it fails.)
				n.io.syncMu.RLock()
				err = s.latch(n, "write", err)
				n.io.syncMu.RUnlock()
			}
			r.Status = s.statusOf(err)
			r.Wcc.After = s.postOpOf(n)
			return r
		}
		done += k
	}
	if done > 0 {
		s.wrote(n, a.Offset, uint64(done), a.Stable == nfs3.Unstable)
	}
	// A stable write's sync failing is latched (syncFile) as well as
	// reported here: other clients' unstable data in the file may be what
	// was lost, and their COMMIT must fail too.
	r.Committed = nfs3.Unstable
	switch a.Stable {
	case nfs3.DataSync:
		err = s.syncFile(n, fd, false)
		r.Committed = nfs3.DataSync
	case nfs3.FileSync:
		err = s.syncFile(n, fd, true)
		r.Committed = nfs3.FileSync
	}
	if err != nil {
		r.Status = s.statusOf(err)
		r.Wcc.After = s.postOpOf(n)
		return r
	}
	r.Count = a.Count
	r.Verf = s.WriteVerifier()
	r.Wcc.After = s.postOpOf(n)
	return r
}

func (s *Server) commit(a *nfs3.CommitArgs) (r nfs3.CommitRes) {
	n, st, status := s.resolveStat(a.File)
	if status != nfs3.OK {
		r.Status = status
		return r
	}
	defer s.cache.release(n)
	r.Wcc.Before = preOp(&st)
	switch {
	case n.isDir():
		r.Status = nfs3.ErrIsDir
	case !n.isReg():
		r.Status = nfs3.ErrInval
	}
	if r.Status != nfs3.OK {
		r.Wcc.After = s.postOp(&st)
		return r
	}
	if err := s.commitFile(n); err != nil {
		r.Status = s.statusOf(err)
		r.Wcc.After = s.postOpOf(n)
		return r
	}
	// The verifier is read after the sync and its barrier: a write-back
	// error that a concurrent sync saw, which may have hit this client's
	// data, has changed it by then, so the client resends.
	r.Verf = s.WriteVerifier()
	r.Wcc.After = s.postOpOf(n)
	return r
}
