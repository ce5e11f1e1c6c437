package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log"
	"net"
	"net/netip"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"syscall"
	"time"

	"hushfs/internal/metrics"
	"hushfs/internal/rpc"
	"hushfs/internal/server"
)

// serveOptions are the flags of "hushfs serve".
type serveOptions struct {
	dir        string
	nfsPort    int
	mountPort  int
	listen     string
	readOnly   bool
	async      bool
	stateDir   string
	noRootSq   bool // root squashing off (the last of --root-squash / --no-root-squash wins)
	allSquash  bool
	anonUID    uint32
	anonGID    uint32
	allow      []netip.Prefix // never empty once parsed: loopbackOnly without --allow
	allowGiven bool
	securePort bool
	metrics    string        // address of the Prometheus /metrics endpoint, "" = none
	busyPoll   time.Duration // ServerOptions.BusyPoll
	lease      time.Duration // NFSv4.1 lease time
	delegs     bool          // grant NFSv4.1 read delegations
}

// squash is the server's squash mode: --all-squash maps everyone, root
// included, whatever the root setting (as all_squash does in exports(5)).
func (o *serveOptions) squash() server.Squash {
	switch {
	case o.allSquash:
		return server.AllSquash
	case o.noRootSq:
		return server.NoRootSquash
	}
	return server.RootSquash
}

// parseAnonID parses --anonuid / --anongid: a numeric id other than root
// (squashing to root would be no squashing) and -1 (no valid id).
func parseAnonID(flagName string, dst *uint32) func(string) error {
	return func(v string) error {
		n, err := strconv.ParseUint(v, 10, 32)
		switch {
		case err != nil:
			return fmt.Errorf("--%s %q: not a numeric id", flagName, v)
		case n == 0:
			return fmt.Errorf("--%s 0 would map squashed callers to root; use --no-root-squash to keep root", flagName)
		case n == 1<<32-1:
			return fmt.Errorf("--%s %d is not a valid id", flagName, n)
		}
		*dst = uint32(n)
		return nil
	}
}

// loopbackOnly is whom a server started without --allow serves: this
// machine only, so that a client list reaching further is explicit, as
// exports(5) makes it.
var loopbackOnly = []netip.Prefix{netip.MustParsePrefix("127.0.0.0/8"), netip.MustParsePrefix("::1/128")}

// describeClients says whom the allow list admits, for the start-up line.
func describeClients(allow []netip.Prefix, explicit bool) string {
	if !explicit {
		return "loopback clients only (127.0.0.0/8, ::1; --allow NETWORKS to serve others, --allow 0.0.0.0/0,::/0 for all)"
	}
	var v4, v6 bool
	for _, p := range allow {
		if p.Bits() == 0 {
			v4, v6 = v4 || p.Addr().Is4(), v6 || p.Addr().Is6()
		}
	}
	if v4 && v6 {
		return "every client"
	}
	return fmt.Sprint(allow)
}

// parseAllow parses one --allow value: comma-separated networks in CIDR
// notation, or single addresses.
func parseAllow(dst *[]netip.Prefix) func(string) error {
	return func(v string) error {
		for _, item := range strings.Split(v, ",") {
			item = strings.TrimSpace(item)
			if item == "" {
				return fmt.Errorf("--allow %q: empty network", v)
			}
			var p netip.Prefix
			var err error
			if strings.Contains(item, "/") {
				p, err = netip.ParsePrefix(item)
			} else {
				var a netip.Addr
				if a, err = netip.ParseAddr(item); err == nil {
					if a.Zone() != "" {
						return fmt.Errorf("--allow %q: zones are not supported", item)
					}
					p = netip.PrefixFrom(a, a.BitLen())
				}
			}
			if err != nil {
				return fmt.Errorf("--allow %q: want an address or a network such as 192.168.1.0/24 or fd00::/8: %w", item, err)
			}
			*dst = append(*dst, p)
		}
		return nil
	}
}

func parseServeArgs(args []string) (*serveOptions, error) {
	o := &serveOptions{anonUID: server.DefaultAnonID, anonGID: server.DefaultAnonID}
	fs := flag.NewFlagSet("serve", flag.ContinueOnError)
	fs.IntVar(&o.nfsPort, "nfs-port", 2049, "TCP port for NFS (0 = any free port)")
	fs.IntVar(&o.mountPort, "mount-port", 20048, "TCP port for MOUNT (0 = any free port)")
	fs.StringVar(&o.listen, "listen", "", "address to listen on (default: all addresses)")
	fs.BoolVar(&o.readOnly, "ro", false, "export read-only")
	fs.BoolVar(&o.async, "async", false, "reply to metadata changes before they reach stable storage (faster; a crash may lose acknowledged changes)")
	fs.StringVar(&o.stateDir, "state-dir", "/var/lib/hushfs", "directory keeping the file handle secret")
	fs.BoolFunc("root-squash", "map client root (uid 0, gid 0, group 0) to the anonymous uid/gid (the default)", func(v string) error {
		b, err := strconv.ParseBool(v)
		o.noRootSq = !b
		return err
	})
	fs.BoolFunc("no-root-squash", "give client root the server's root powers in the export", func(v string) error {
		b, err := strconv.ParseBool(v)
		o.noRootSq = b
		return err
	})
	fs.BoolVar(&o.allSquash, "all-squash", false, "map every client user and group to the anonymous uid/gid")
	fs.Func("anonuid", "uid of squashed and AUTH_NONE callers (default 65534)", parseAnonID("anonuid", &o.anonUID))
	fs.Func("anongid", "gid of squashed and AUTH_NONE callers (default 65534)", parseAnonID("anongid", &o.anonGID))
	fs.Func("allow", "serve only clients in these networks: CIDR[,CIDR...], repeatable; 0.0.0.0/0,::/0 for every client (default: loopback only)", parseAllow(&o.allow))
	fs.BoolVar(&o.securePort, "secure-port", false, "serve only calls from privileged source ports (below 1024)")
	fs.StringVar(&o.metrics, "metrics", "", "serve per-procedure counts and latency histograms in Prometheus text format at http://ADDR/metrics")
	fs.DurationVar(&o.busyPoll, "busy-poll", 50*time.Microsecond, "after answering a client that sends one call at a time, poll for its next call this long before sleeping (one connection at a time; 0 = never)")
	fs.DurationVar(&o.lease, "lease", 90*time.Second, "NFSv4.1 lease time: a client silent this long loses its opens and locks; also the grace period after a restart")
	fs.BoolVar(&o.delegs, "delegations", true, "grant NFSv4.1 read delegations, recalled before any NFS client or local process changes the file (local changes are seen through Linux file leases and inotify); --delegations=false grants none")
	fs.Usage = func() {
		fmt.Fprintln(fs.Output(), "usage: hushfs serve DIR [--nfs-port N] [--mount-port N] [--listen ADDR] [--ro] [--async] [--state-dir D]\n"+
			"                    [--no-root-squash | --all-squash] [--anonuid N] [--anongid N] [--allow CIDR[,CIDR...]] [--secure-port]\n"+
			"                    [--metrics ADDR] [--busy-poll D] [--lease D] [--delegations=false]")
		fs.PrintDefaults()
	}
	// Flags may come before or after DIR.
	var pos []string
	for {
		if err := fs.Parse(args); err != nil {
			return nil, err
		}
		args = fs.Args()
		if len(args) == 0 {
			break
		}
		pos = append(pos, args[0])
		args = args[1:]
	}
	if len(pos) != 1 {
		fs.Usage()
		return nil, errors.New("exactly one directory to export is required")
	}
	o.dir = pos[0]
	if o.allowGiven = len(o.allow) > 0; !o.allowGiven {
		o.allow = loopbackOnly
	}
	if o.busyPoll < 0 || o.busyPoll > time.Millisecond {
		return nil, fmt.Errorf("--busy-poll %v: want 0 (off) up to 1ms", o.busyPoll)
	}
	if o.lease < time.Second || o.lease > time.Hour || o.lease%time.Second != 0 {
		return nil, fmt.Errorf("--lease %v: want whole seconds from 1s up to 1h", o.lease)
	}
	for _, p := range []int{o.nfsPort, o.mountPort} {
		if p < 0 || p > 65535 {
			return nil, fmt.Errorf("port %d out of range", p)
		}
	}
	return o, nil
}

// runServe exports a directory until SIGINT or SIGTERM. Once listening it
// prints one line with the actual addresses, for scripts and tests:
//
//	hushfs serve: nfs HOST:PORT mount HOST:PORT
//
// NFS and MOUNT are served on both ports (clients may send either program
// to either port).
func runServe(args []string) error {
	o, err := parseServeArgs(args)
	if err != nil {
		return err
	}
	logger := log.New(os.Stderr, "", log.LstdFlags)
	rpcStats := metrics.NewRPC()
	srv, err := server.New(server.Config{
		ObserveOp:   rpcStats.ObserveOp,
		Root:        o.dir,
		StateDir:    o.stateDir,
		ReadOnly:    o.readOnly,
		Async:       o.async,
		Squash:      o.squash(),
		AnonUID:     o.anonUID,
		AnonGID:     o.anonGID,
		Allow:       o.allow,
		SecurePort:  o.securePort,
		Lease:       o.lease,
		Delegations: o.delegs,
		Logf:        logger.Printf,

		// Callbacks sent and delegations granted, for --metrics.
		ObserveCallback: rpcStats.ObserveCallback,
		Granted:         rpcStats.Granted,
	})
	if err != nil {
		return err
	}
	defer srv.Close()

	nfsL, err := net.Listen("tcp", net.JoinHostPort(o.listen, strconv.Itoa(o.nfsPort)))
	if err != nil {
		return fmt.Errorf("nfs listener: %w", err)
	}
	mountL := nfsL
	if o.mountPort != o.nfsPort || o.nfsPort == 0 {
		if mountL, err = net.Listen("tcp", net.JoinHostPort(o.listen, strconv.Itoa(o.mountPort))); err != nil {
			nfsL.Close()
			return fmt.Errorf("mount listener: %w", err)
		}
	}
	var metricsL net.Listener
	if o.metrics != "" {
		if metricsL, err = net.Listen("tcp", o.metrics); err != nil {
			nfsL.Close()
			if mountL != nfsL {
				mountL.Close()
			}
			return fmt.Errorf("metrics listener: %w", err)
		}
	}
	rs := rpc.NewServer(rpc.ServerOptions{Logf: logger.Printf, Observe: rpcStats.Observe, BusyPoll: o.busyPoll})
	srv.Register(rs)

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if metricsL != nil {
		go func() {
			if err := metrics.Serve(ctx, metricsL, metrics.Handler(rpcStats, rs)); err != nil {
				logger.Printf("metrics: %v", err)
			}
		}()
	}
	errc := make(chan error, 2)
	listeners := []net.Listener{nfsL}
	if mountL != nfsL {
		listeners = append(listeners, mountL)
	}
	for _, l := range listeners {
		go func() { errc <- rs.Serve(l) }()
	}
	fmt.Printf("hushfs serve: nfs %s mount %s\n", nfsL.Addr(), mountL.Addr())
	if metricsL != nil {
		fmt.Printf("hushfs serve: metrics http://%s/metrics\n", metricsL.Addr())
	}
	mode := "read-write"
	if o.readOnly {
		mode = "read-only"
	}
	clients := describeClients(o.allow, o.allowGiven)
	if o.securePort {
		clients += ", privileged ports only"
	}
	logger.Printf("exporting %s (%s, %v, anonymous %d:%d) to %s", srv.Root(), mode, o.squash(), o.anonUID, o.anonGID, clients)

	select {
	case <-ctx.Done():
		logger.Printf("shutting down")
	case err = <-errc:
		if err != nil {
			err = fmt.Errorf("serving: %w", err)
		}
	}
	rs.Close()
	if cerr := srv.Close(); err == nil {
		err = cerr
	}
	return err
}
