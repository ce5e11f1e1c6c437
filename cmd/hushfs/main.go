// Command hushfs is an NFS client (FUSE) and server. This file only
// dispatches subcommands; each lives in its own file.
package main

import (
	"errors"
	"flag"
	"fmt"
	"os"
)

type command struct {
	run     func(args []string) error
	summary string
}

func commands() map[string]command {
	return map[string]command{
		"serve":   {runServe, "serve DIR: export a local directory over NFSv3 + MOUNT"},
		"proxy":   {runProxy, "proxy --listen A --target B [--rtt D] [fault flags]: latency, fault-injecting and RPC-counting proxy (proxy faults|blackhole --control P: change a running one)"},
		"mount":   {runMount, "mount SERVER:/EXPORT MOUNTPOINT [-o OPTS] [-f]: mount an NFSv3 export (FUSE)"},
		"umount":  {runUmount, "umount MOUNTPOINT [-l]: unmount a hushfs mount"},
		"stats":   {runStats, "stats MOUNTPOINT [--json] [--origins] [--fuse] [--reset]: per-procedure RPC statistics of a mount"},
		"version": {runVersion, "version (or --version): the build: module version and commit"},
	}
}

func usage() {
	fmt.Fprintln(os.Stderr, "usage: hushfs COMMAND [ARGS]")
	for name, c := range commands() {
		fmt.Fprintf(os.Stderr, "  %-8s %s\n", name, c.summary)
	}
}

func main() {
	if len(os.Args) < 2 {
		usage()
		os.Exit(2)
	}
	name, args := os.Args[1], os.Args[2:]
	if name == "--version" || name == "-version" {
		name = "version"
	}
	c, ok := commands()[name]
	if !ok && isRemoteSpec(name) {
		// mount.fuse3 runs "hushfs SERVER:/EXPORT MOUNTPOINT -o OPTS" for
		// mount -t fuse.hushfs (fuse(8)).
		name, args = "mount", os.Args[1:]
		c, ok = commands()[name]
	}
	if !ok {
		fmt.Fprintf(os.Stderr, "hushfs: unknown command %q\n", os.Args[1])
		usage()
		os.Exit(2)
	}
	if err := c.run(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			os.Exit(0)
		}
		fmt.Fprintf(os.Stderr, "hushfs %s: %v\n", name, err)
		os.Exit(1)
	}
}
