package client

import (
	"context"
	"syscall"

	"hushfs/internal/nfs3"
)

// pathconf learns the longest name the server takes (PATHCONF name_max of
// the root), as the Linux client does at mount. A server that cannot answer
// gets NFSv3's usual 255, as does one claiming more: READDIR replies carry no
// longer names for us.
func (fs *FS) pathconf(ctx context.Context, self *Cred) {
	fs.nameMax = nfs3.MaxNameLen
	var res nfs3.PathconfRes
	at := fs.now()
	err := fs.call(ctx, self, nfs3.ProcPathconf, &nfs3.PathconfArgs{Obj: fs.rootFH}, &res)
	if err == nil && res.Status != nfs3.OK {
		err = res.Status
	}
	if err != nil {
		fs.logf("hushfs: PATHCONF of %s:%s: %v; taking names of up to %d bytes", fs.cfg.Server, fs.cfg.Export, err, fs.nameMax)
		return
	}
	fs.applyAttr(fs.nodes.get(RootID), &res.ObjAttr, at)
	if res.NameMax > 0 && res.NameMax < fs.nameMax {
		fs.nameMax = res.NameMax
	}
}

// checkName refuses a name longer than the server takes with ENAMETOOLONG
// before any cache or RPC: a cached listing or negative entry would
// otherwise answer ENOENT, and the server NAMETOOLONG only for some calls.
func (fs *FS) checkName(name string) error {
	if len(name) > int(fs.nameMax) {
		return syscall.ENAMETOOLONG
	}
	return nil
}
