package fusefs

import (
	"github.com/hanwen/go-fuse/v2/fuse"
)

// Create creates and opens a regular file. A new file has no cached pages
// to keep.
func (fs *FS) Create(cancel <-chan struct{}, in *fuse.CreateIn, name string, out *fuse.CreateOut) fuse.Status {
	rc := fs.request(cancel, &in.InHeader, "create")
	defer rc.finish()
	e, fh, err := fs.core.Create(rc, fs.creds.cred(&in.InHeader), node(in.NodeId), name, in.Flags, in.Mode)
	if err != nil {
		return status(err)
	}
	fs.openHandles.Add(1)
	fs.fillEntry(&out.EntryOut, &e)
	out.OpenOut = fuse.OpenOut{Fh: fh}
	return fuse.OK
}

// Open opens a file. The core decides whether the kernel's cached pages
// are still the file's (close-to-open).
func (fs *FS) Open(cancel <-chan struct{}, in *fuse.OpenIn, out *fuse.OpenOut) fuse.Status {
	rc := fs.request(cancel, &in.InHeader, "open")
	defer rc.finish()
	fh, keep, err := fs.core.Open(rc, fs.creds.cred(&in.InHeader), node(in.NodeId), in.Flags)
	if err != nil {
		return status(err)
	}
	fs.openHandles.Add(1)
	*out = fuse.OpenOut{Fh: fh}
	if keep {
		out.OpenFlags |= fuse.FOPEN_KEEP_CACHE
	} else {
		// The file changed since its pages were cached (another client).
		// Without FOPEN_KEEP_CACHE the kernel drops the pages, but it keeps
		// its cached size until its attribute timeout, and reads stop at
		// that size: make it ask for the attributes (fresh in the core, so
		// no RPC). Attributes only (offset < 0) touch no page locks, so this
		// is safe while the kernel waits for this OPEN.
		fs.invalidateAttr(in.NodeId)
	}
	return fuse.OK
}

// Read reads into go-fuse's buffer when it is large enough.
func (fs *FS) Read(cancel <-chan struct{}, in *fuse.ReadIn, buf []byte) (fuse.ReadResult, fuse.Status) {
	dst := buf
	if len(dst) < int(in.Size) {
		dst = make([]byte, in.Size)
	}
	dst = dst[:in.Size]
	rc := fs.request(cancel, &in.InHeader, "read")
	defer rc.finish()
	n, err := fs.core.Read(rc, fs.creds.cred(&in.InHeader), in.Fh, in.Offset, dst)
	if err != nil {
		return nil, status(err)
	}
	return fuse.ReadResultData(dst[:n]), fuse.OK
}

// Write hands data to the core, which copies it (go-fuse reuses the
// buffer once the call returns).
func (fs *FS) Write(cancel <-chan struct{}, in *fuse.WriteIn, data []byte) (uint32, fuse.Status) {
	rc := fs.killable(cancel, &in.InHeader, "write")
	defer rc.finish()
	c := fs.creds.cred(&in.InHeader)
	n, err := fs.core.Write(rc, c, in.Fh, in.Offset, data)
	if err != nil {
		return 0, status(err)
	}
	if in.WriteFlags&fuse.WRITE_KILL_SUIDGID != 0 {
		// A writer without CAP_FSETID: set-id bits go (see MountOptions).
		if err := fs.core.ClearSetIDAfterWrite(rc, c, in.Fh); err != nil {
			return 0, status(err)
		}
	}
	return uint32(n), fuse.OK
}

// Flush is a close(2) of one descriptor: the core writes back and commits
// (close-to-open) and reports any write-back error. A killed caller is let
// go (see killable).
func (fs *FS) Flush(cancel <-chan struct{}, in *fuse.FlushIn) fuse.Status {
	rc := fs.killable(cancel, &in.InHeader, "flush")
	defer rc.finish()
	err := fs.core.Flush(rc, fs.creds.cred(&in.InHeader), in.Fh)
	// A close releases the process's locks on the file (POSIX), after its
	// data is written; the kernel, which keeps no copy of locks the server
	// holds, says whose in LockOwner.
	if lerr := fs.core.ReleaseLocks(rc, in.Fh, in.LockOwner); err == nil {
		err = lerr
	}
	return status(err)
}

// Fsync makes the file's data durable on the server.
func (fs *FS) Fsync(cancel <-chan struct{}, in *fuse.FsyncIn) fuse.Status {
	rc := fs.killable(cancel, &in.InHeader, "fsync")
	defer rc.finish()
	return status(fs.core.Fsync(rc, fs.creds.cred(&in.InHeader), in.Fh))
}

// Release is the last close of an open file. The kernel expects no answer
// and nobody can be told of a failure, so it runs to completion (it may
// have data to write back or an unlinked-while-open file to remove) unless
// the connection ends first: the core then finishes it in the background
// and reports at unmount what it could not write.
func (fs *FS) Release(cancel <-chan struct{}, in *fuse.ReleaseIn) {
	rc := fs.lifetime(cancel, "release")
	defer rc.finish()
	defer fs.openHandles.Add(-1) // once written back and closed
	if in.ReleaseFlags&fuse.FUSE_RELEASE_FLOCK_UNLOCK != 0 {
		fs.core.ReleaseLocks(rc, in.Fh, in.LockOwner) // the file's flock locks
	}
	fs.core.Release(rc, in.Fh)
}
