package nfsv3

import (
	"context"
	"fmt"
	"net"
	"strconv"
	"time"

	"hushfs/internal/nfs3"
	"hushfs/internal/proto"
	"hushfs/internal/rpc"
)

// Mount mounts the export as self: the portmapper for whichever ports
// were not given, MOUNT for the root handle, then on the NFS connection
// FSINFO for the transfer sizes (and the root's attributes: a GETATTR if
// FSINFO brought none) and PATHCONF for the longest name, as the Linux
// client does. Nothing is left running if it fails.
func Mount(ctx context.Context, cfg Config, self *proto.Cred) (*Server, proto.Export, error) {
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if cfg.Logf == nil {
		cfg.Logf = func(string, ...any) {}
	}
	if cfg.Dial == nil {
		var d net.Dialer
		cfg.Dial = func(ctx context.Context, addr string) (net.Conn, error) { return d.DialContext(ctx, "tcp", addr) }
	}
	s := &Server{hooks: cfg.Hooks, machine: cfg.Machine, creds: map[string]rpc.OpaqueAuth{}}
	mountPort, nfsPort := cfg.MountPort, cfg.Port
	if mountPort == 0 || nfsPort == 0 {
		var err error
		mountPort, nfsPort, err = portmap(ctx, &cfg, mountPort, nfsPort)
		if err != nil {
			return nil, proto.Export{}, err
		}
	}
	root, err := s.mnt(ctx, &cfg, mountPort, self)
	if err != nil {
		return nil, proto.Export{}, err
	}
	nfsAddr := net.JoinHostPort(cfg.Server, strconv.Itoa(nfsPort))
	s.nfs, err = rpc.NewClient(ctx, rpc.ClientOptions{
		Dial:     func(ctx context.Context) (net.Conn, error) { return cfg.Dial(ctx, nfsAddr) },
		Timeout:  cfg.Timeo,
		Retrans:  cfg.Retrans,
		Hard:     cfg.Hard,
		Observer: observer(cfg.Hooks),
		Logf:     cfg.Logf,
	})
	if err != nil {
		return nil, proto.Export{}, fmt.Errorf("connecting to NFS service at %s: %w", nfsAddr, err)
	}
	exp := proto.Export{Root: root, Limits: limits}
	if err := s.fsinfo(ctx, &cfg, self, &exp); err != nil {
		s.nfs.Close()
		return nil, proto.Export{}, err
	}
	s.pathconf(ctx, &cfg, self, &exp)
	return s, exp, nil
}

// sideClient connects to a MOUNT or portmapper service: soft, whatever
// the mount's calls are.
func sideClient(ctx context.Context, cfg *Config, addr string) (*rpc.Client, error) {
	return rpc.NewClient(ctx, rpc.ClientOptions{
		Dial:    func(ctx context.Context) (net.Conn, error) { return cfg.Dial(ctx, addr) },
		Timeout: cfg.Timeo, Retrans: cfg.Retrans, Observer: observer(cfg.Hooks),
	})
}

// portmap asks the server's portmapper for whichever ports were not given.
func portmap(ctx context.Context, cfg *Config, mountPort, nfsPort int) (int, int, error) {
	c, err := sideClient(ctx, cfg, net.JoinHostPort(cfg.Server, strconv.Itoa(rpc.PortmapPort)))
	if err != nil {
		return 0, 0, fmt.Errorf("server %s: no portmapper reachable (give port= and mountport=): %w", cfg.Server, err)
	}
	defer c.Close()
	if mountPort == 0 {
		if mountPort, err = rpc.GetPort(ctx, c, nfs3.MountProgram, nfs3.MountVersion, rpc.IPProtoTCP); err != nil {
			return 0, 0, fmt.Errorf("server %s: MOUNT v3 over TCP: %w", cfg.Server, err)
		}
	}
	if nfsPort == 0 {
		if nfsPort, err = rpc.GetPort(ctx, c, nfs3.Program, nfs3.Version, rpc.IPProtoTCP); err != nil {
			return 0, 0, fmt.Errorf("server %s: NFS v3 over TCP: %w", cfg.Server, err)
		}
	}
	return mountPort, nfsPort, nil
}

// mnt gets the export's root handle from the MOUNT service.
func (s *Server) mnt(ctx context.Context, cfg *Config, port int, self *proto.Cred) (proto.FH, error) {
	addr := net.JoinHostPort(cfg.Server, strconv.Itoa(port))
	c, err := sideClient(ctx, cfg, addr)
	if err != nil {
		return nil, fmt.Errorf("connecting to MOUNT service at %s: %w", addr, err)
	}
	defer c.Close()
	var res nfs3.MntRes
	args := nfs3.MntArgs{Path: []byte(cfg.Export)}
	if err := c.Call(ctx, nfs3.MountProgram, nfs3.MountVersion, nfs3.MountProcMnt, s.auth(self), &args, &res); err != nil {
		return nil, fmt.Errorf("MOUNT %s:%s: %w", cfg.Server, cfg.Export, err)
	}
	if res.Status != nfs3.MntOK {
		return nil, fmt.Errorf("MOUNT %s:%s: %w", cfg.Server, cfg.Export, res.Status)
	}
	usable := len(res.AuthFlavors) == 0
	for _, f := range res.AuthFlavors {
		if f == rpc.AuthSys || f == rpc.AuthNone {
			usable = true
		}
	}
	if !usable {
		return nil, fmt.Errorf("MOUNT %s:%s: the export requires security flavors %v; only AUTH_SYS is supported",
			cfg.Server, cfg.Export, res.AuthFlavors)
	}
	return append(proto.FH(nil), res.FH...), nil
}

// fsinfo learns the transfer sizes and the root's attributes.
func (s *Server) fsinfo(ctx context.Context, cfg *Config, self *proto.Cred, exp *proto.Export) error {
	at := cfg.Now()
	res, err := s.FsInfo(ctx, self, exp.Root)
	if err == nil {
		err = res.Status
	}
	if err != nil {
		return fmt.Errorf("FSINFO of %s:%s: %w", cfg.Server, cfg.Export, err)
	}
	exp.Rtmax, exp.Wtmax, exp.Dtpref, exp.MaxFileSize = res.Rtmax, res.Wtmax, res.Dtpref, res.MaxFileSize
	if res.Attr.Present {
		exp.RootAttrs = append(exp.RootAttrs, proto.TimedAttr{Attr: res.Attr.Attr, At: at})
		return nil
	}
	at = cfg.Now()
	a, err := s.GetAttr(ctx, self, exp.Root)
	if err == nil {
		err = a.Status
	}
	if err != nil {
		return fmt.Errorf("GETATTR of the root of %s:%s: %w", cfg.Server, cfg.Export, err)
	}
	exp.RootAttrs = append(exp.RootAttrs, proto.TimedAttr{Attr: a.Attr, At: at})
	return nil
}

// pathconf learns the longest name the server takes (PATHCONF name_max of
// the root), as the Linux client does at mount; a server that cannot say
// leaves it unknown.
func (s *Server) pathconf(ctx context.Context, cfg *Config, self *proto.Cred, exp *proto.Export) {
	at := cfg.Now()
	res, err := s.PathConf(ctx, self, exp.Root)
	if err == nil {
		err = res.Status
	}
	if err != nil {
		cfg.Logf("hushfs: PATHCONF of %s:%s: %v; taking names of up to %d bytes", cfg.Server, cfg.Export, err, nfs3.MaxNameLen)
		return
	}
	if res.Attr.Present {
		exp.RootAttrs = append(exp.RootAttrs, proto.TimedAttr{Attr: res.Attr.Attr, At: at})
	}
	exp.NameMax = res.NameMax
}
