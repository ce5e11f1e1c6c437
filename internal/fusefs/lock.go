package fusefs

import (
	"github.com/hanwen/go-fuse/v2/fuse"

	"hushfs/internal/client"
)

// Locks (fcntl's and flock's), asked of the kernel only when the server
// grants them (client.FS.HasLocks: NFSv4.1); the core takes them from the
// server. flock arrives as a whole-file lock of the open file's own owner
// (FUSE_LK_FLOCK), and is the same call to the server.

func lockOf(l *fuse.FileLock) client.Lock {
	return client.Lock{Start: l.Start, End: l.End, Type: l.Typ, Pid: l.Pid}
}

// GetLk is F_GETLK: the lock in the way, or F_UNLCK.
func (fs *FS) GetLk(cancel <-chan struct{}, in *fuse.LkIn, out *fuse.LkOut) fuse.Status {
	rc := fs.request(cancel, &in.InHeader, "getlk")
	defer rc.finish()
	lk, err := fs.core.GetLk(rc, fs.creds.cred(&in.InHeader), in.Fh, in.Owner, lockOf(&in.Lk))
	if err != nil {
		return status(err)
	}
	out.Lk = fuse.FileLock{Start: lk.Start, End: lk.End, Typ: lk.Type, Pid: lk.Pid}
	return fuse.OK
}

// SetLk is F_SETLK (and flock with LOCK_NB): EAGAIN if another holds it.
func (fs *FS) SetLk(cancel <-chan struct{}, in *fuse.LkIn) fuse.Status {
	rc := fs.request(cancel, &in.InHeader, "setlk")
	defer rc.finish()
	return status(fs.core.SetLk(rc, fs.creds.cred(&in.InHeader), in.Fh, in.Owner, lockOf(&in.Lk), false))
}

// SetLkw is F_SETLKW (and a blocking flock): it waits until the lock is
// granted or the caller gets a signal (EINTR).
func (fs *FS) SetLkw(cancel <-chan struct{}, in *fuse.LkIn) fuse.Status {
	rc := fs.request(cancel, &in.InHeader, "setlkw")
	defer rc.finish()
	return status(fs.core.SetLk(rc, fs.creds.cred(&in.InHeader), in.Fh, in.Owner, lockOf(&in.Lk), true))
}
