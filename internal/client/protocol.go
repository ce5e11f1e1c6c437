package client

import (
	"context"
	"fmt"

	"hushfs/internal/proto"
	"hushfs/internal/proto/nfsv3"
)

// mountServer mounts the export with the protocol opts.Vers names and
// returns the server behind the seam (internal/proto) with what mounting
// told of the export. The core knows protocols only here: NFSv4.1 is
// another case, returning its own proto.Server.
func mountServer(ctx context.Context, cfg *Config, opts *Options, hooks proto.Hooks, self *Cred) (proto.Server, proto.Export, error) {
	switch opts.Vers {
	case 3:
		return nfsv3.Mount(ctx, nfsv3.Config{
			Server: cfg.Server, Export: cfg.Export, Port: opts.Port, MountPort: opts.MountPort,
			Timeo: opts.Timeo, Retrans: opts.Retrans, Hard: opts.Hard,
			Dial: cfg.Dial, Now: cfg.Now, Logf: cfg.Logf, Machine: cfg.Machine, Hooks: hooks,
		}, self)
	}
	return nil, proto.Export{}, fmt.Errorf("NFS version %d is not supported", opts.Vers)
}
