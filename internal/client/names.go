package client

import "syscall"

// defaultNameMax is the longest name taken when the server does not say
// a shorter one: NFSv3's usual 255, the kernel's NAME_MAX (a server
// claiming more gets it too: listings carry no longer names for us).
const defaultNameMax = 255

// checkName refuses a name longer than the server takes with ENAMETOOLONG
// before any cache or RPC: a cached listing or negative entry would
// otherwise answer ENOENT, and the server NAMETOOLONG only for some calls.
func (fs *FS) checkName(name string) error {
	if len(name) > int(fs.nameMax) {
		return syscall.ENAMETOOLONG
	}
	return nil
}
