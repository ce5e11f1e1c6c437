package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log"
	"net"
	"os"
	"os/signal"
	"strconv"
	"syscall"

	"hushfs/internal/rpc"
	"hushfs/internal/server"
)

// serveOptions are the flags of "hushfs serve".
type serveOptions struct {
	dir       string
	nfsPort   int
	mountPort int
	listen    string
	readOnly  bool
	async     bool
	stateDir  string
}

func parseServeArgs(args []string) (*serveOptions, error) {
	o := &serveOptions{}
	fs := flag.NewFlagSet("serve", flag.ContinueOnError)
	fs.IntVar(&o.nfsPort, "nfs-port", 2049, "TCP port for NFS (0 = any free port)")
	fs.IntVar(&o.mountPort, "mount-port", 20048, "TCP port for MOUNT (0 = any free port)")
	fs.StringVar(&o.listen, "listen", "", "address to listen on (default: all addresses)")
	fs.BoolVar(&o.readOnly, "ro", false, "export read-only")
	fs.BoolVar(&o.async, "async", false, "reply to metadata changes before they reach stable storage (faster; a crash may lose acknowledged changes)")
	fs.StringVar(&o.stateDir, "state-dir", "/var/lib/hushfs", "directory keeping the file handle secret")
	fs.Usage = func() {
		fmt.Fprintln(fs.Output(), "usage: hushfs serve DIR [--nfs-port N] [--mount-port N] [--listen ADDR] [--ro] [--async] [--state-dir D]")
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
	srv, err := server.New(server.Config{
		Root:     o.dir,
		StateDir: o.stateDir,
		ReadOnly: o.readOnly,
		Async:    o.async,
		Logf:     logger.Printf,
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
	rs := rpc.NewServer(rpc.ServerOptions{Logf: logger.Printf})
	srv.Register(rs)

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	errc := make(chan error, 2)
	listeners := []net.Listener{nfsL}
	if mountL != nfsL {
		listeners = append(listeners, mountL)
	}
	for _, l := range listeners {
		go func() { errc <- rs.Serve(l) }()
	}
	fmt.Printf("hushfs serve: nfs %s mount %s\n", nfsL.Addr(), mountL.Addr())
	mode := "read-write"
	if o.readOnly {
		mode = "read-only"
	}
	logger.Printf("exporting %s (%s)", srv.Root(), mode)

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
