package main

import (
	"errors"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"

	"hushfs/internal/fusefs"
)

const umountUsage = `usage: hushfs umount MOUNTPOINT [-l]
  -l  detach now even if busy or the server is gone; the mount goes away
      at its last use`

func runUmount(args []string) error {
	lazy := false
	var pos []string
	for _, arg := range args {
		switch arg {
		case "-l", "--lazy":
			lazy = true
		case "-h", "--help", "-help":
			fmt.Fprintln(os.Stderr, umountUsage)
			return flag.ErrHelp
		default:
			if strings.HasPrefix(arg, "-") {
				return fmt.Errorf("unknown flag %q\n%s", arg, umountUsage)
			}
			pos = append(pos, arg)
		}
	}
	if len(pos) != 1 {
		return fmt.Errorf("want one MOUNTPOINT\n%s", umountUsage)
	}
	mnt, err := mountPath(pos[0])
	if err != nil {
		return err
	}
	mi, err := fusefs.FindMount("/proc/self/mountinfo", mnt)
	if err != nil {
		if errors.Is(err, fusefs.ErrNotMounted) {
			return fmt.Errorf("%s is not a hushfs mount (nothing is mounted there)", mnt)
		}
		return err
	}
	if mi.FSType != fusefs.FSType {
		return fmt.Errorf("%s is not a hushfs mount (it is %s from %s)", mnt, mi.FSType, mi.Source)
	}
	if err := fusefs.Unmount(mnt, lazy); err != nil {
		if errors.Is(err, syscall.EBUSY) {
			return fmt.Errorf("%w (files are open there; -l detaches it anyway)", err)
		}
		return err
	}
	return nil
}

// mountPath makes a mount point absolute and resolves symbolic links in
// its parent only: looking at the mount point itself would ask the mounted
// file system, which may not answer (the server is gone).
func mountPath(p string) (string, error) {
	abs, err := filepath.Abs(p)
	if err != nil {
		return "", err
	}
	if abs == "/" {
		return abs, nil
	}
	dir, err := filepath.EvalSymlinks(filepath.Dir(abs))
	if err != nil {
		return "", err
	}
	return filepath.Join(dir, filepath.Base(abs)), nil
}
