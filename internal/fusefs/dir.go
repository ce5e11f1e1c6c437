package fusefs

import (
	"github.com/hanwen/go-fuse/v2/fuse"

	"hushfs/internal/client"
)

// OpenDir opens a directory stream. The kernel keeps the contents it
// lists in its page cache (FOPEN_CACHE_DIR) and lists an unchanged
// directory from there, with no READDIR request; it keeps them across
// opens (FOPEN_KEEP_CACHE) only while the core holds the directory's
// complete listing for its current version (client.FS.DirCache).
func (fs *FS) OpenDir(cancel <-chan struct{}, in *fuse.OpenIn, out *fuse.OpenOut) fuse.Status {
	rc := fs.request(cancel, &in.InHeader, "opendir")
	defer rc.finish()
	dh, err := fs.core.OpenDir(rc, fs.creds.cred(&in.InHeader), node(in.NodeId))
	if err != nil {
		return status(err)
	}
	fs.openHandles.Add(1)
	*out = fuse.OpenOut{Fh: dh}
	if cache, keep := fs.core.DirCache(fs.creds.cred(&in.InHeader), dh); cache {
		out.OpenFlags |= fuse.FOPEN_CACHE_DIR
		if keep {
			out.OpenFlags |= fuse.FOPEN_KEEP_CACHE
		}
	}
	return fuse.OK
}

// ReadDir lists entries from in.Offset, the cookie of the last entry the
// reader consumed, until the kernel's buffer is full.
func (fs *FS) ReadDir(cancel <-chan struct{}, in *fuse.ReadIn, out *fuse.DirEntryList) fuse.Status {
	added := 0
	rc := fs.request(cancel, &in.InHeader, "readdir")
	defer rc.finish()
	err := fs.core.ReadDir(rc, fs.creds.cred(&in.InHeader), in.Fh, in.Offset, false, func(e *client.DirEntry) bool {
		if !out.AddDirEntry(fuse.DirEntry{Name: e.Name, Ino: e.Ino, Mode: e.Mode, Off: e.Cookie}) {
			return false
		}
		added++
		return true
	})
	return dirStatus(added, err)
}

// dirStatus answers a listing call. Entries already added have advanced the
// core's stream (and, in a plus listing, carry references): they must reach
// the kernel, so an error fetching further entries waits for the next call,
// which continues from the last entry delivered.
func dirStatus(added int, err error) fuse.Status {
	if err != nil && added > 0 {
		return fuse.OK
	}
	return status(err)
}

// ReadDirPlus lists entries with their attributes, each taking a lookup
// reference the kernel later forgets. An entry the core has no node for
// goes out with node ID 0, which the kernel takes as "no lookup done".
func (fs *FS) ReadDirPlus(cancel <-chan struct{}, in *fuse.ReadIn, out *fuse.DirEntryList) fuse.Status {
	added := 0
	rc := fs.request(cancel, &in.InHeader, "readdirplus")
	defer rc.finish()
	err := fs.core.ReadDir(rc, fs.creds.cred(&in.InHeader), in.Fh, in.Offset, true, func(e *client.DirEntry) bool {
		eo := out.AddDirLookupEntry(fuse.DirEntry{Name: e.Name, Ino: e.Ino, Mode: e.Mode, Off: e.Cookie})
		if eo == nil {
			return false // full: the core drops the reference it took
		}
		added++
		if e.Entry.Node == 0 {
			return true
		}
		fs.fillEntry(eo, &e.Entry)
		return true
	})
	return dirStatus(added, err)
}

// ReleaseDir closes a directory stream.
func (fs *FS) ReleaseDir(in *fuse.ReleaseIn) {
	fs.requests.add("releasedir")
	fs.core.ReleaseDir(in.Fh)
	fs.openHandles.Add(-1)
}

// FsyncDir sends the directory's times if the core holds them for a moment;
// every other directory operation is synchronous on the server.
func (fs *FS) FsyncDir(cancel <-chan struct{}, in *fuse.FsyncIn) fuse.Status {
	rc := fs.request(cancel, &in.InHeader, "fsyncdir")
	defer rc.finish()
	return status(fs.core.FsyncDir(rc, node(in.NodeId)))
}
