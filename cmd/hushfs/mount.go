package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"hushfs/internal/client"
	"hushfs/internal/fusefs"
	"hushfs/internal/version"
)

const mountUsage = `usage: hushfs mount SERVER:/EXPORT MOUNTPOINT [-o OPTIONS] [-f] [--log FILE] [-d]
  -o OPTIONS  comma-separated mount options, as nfs(5) names them (port=,
              mountport=, ro, soft, actimeo=, lookupcache=, nordirplus, ...)
  -f          stay in the foreground (otherwise hushfs returns once the
              mount is live and keeps serving it in the background)
  --log FILE  append diagnostics to FILE
  -d          log every FUSE request (with --log or -f)
As mount(8) helper: mount -t fuse.hushfs SERVER:/EXPORT MOUNTPOINT -o OPTIONS`

// readyEnv names the descriptor on which a background mount reports to the
// command that started it: "ready" once the mount is live, or the error.
const readyEnv = "HUSHFS_MOUNT_READY_FD"

// mountTimeout bounds reaching the server at mount time (mount.nfs's
// default retry is 2 minutes for a foreground mount).
const mountTimeout = 2 * time.Minute

// orphanCheck is how often a mount looks whether it was unmounted and is
// held only by other mount namespaces' copies: the mount table, and the
// process table once it is gone from the mount table.
const orphanCheck = 500 * time.Millisecond

type mountArgs struct {
	remote     string
	mountpoint string
	options    []string
	foreground bool
	logFile    string
	debug      bool
}

// parseMountArgs reads the arguments in any order, as mount.fuse3 puts -o
// after the positional arguments.
func parseMountArgs(args []string) (mountArgs, error) {
	var a mountArgs
	var pos []string
	for i := 0; i < len(args); i++ {
		arg := args[i]
		value := func(name string) (string, error) {
			if i+1 >= len(args) {
				return "", fmt.Errorf("%s needs a value", name)
			}
			i++
			return args[i], nil
		}
		switch {
		case arg == "-o":
			v, err := value("-o")
			if err != nil {
				return a, err
			}
			a.options = append(a.options, v)
		case strings.HasPrefix(arg, "-o"):
			a.options = append(a.options, arg[2:])
		case arg == "-f":
			a.foreground = true
		case arg == "-d" || arg == "--debug":
			a.debug = true
		case arg == "--log" || arg == "-log":
			v, err := value("--log")
			if err != nil {
				return a, err
			}
			a.logFile = v
		case strings.HasPrefix(arg, "--log="):
			a.logFile = strings.TrimPrefix(arg, "--log=")
		case arg == "-h" || arg == "--help" || arg == "-help":
			fmt.Fprintln(os.Stderr, mountUsage)
			return a, flag.ErrHelp
		case arg == "--":
			pos = append(pos, args[i+1:]...)
			i = len(args)
		case strings.HasPrefix(arg, "-") && arg != "-":
			return a, fmt.Errorf("unknown flag %q\n%s", arg, mountUsage)
		default:
			pos = append(pos, arg)
		}
	}
	if len(pos) != 2 {
		return a, fmt.Errorf("want SERVER:/EXPORT and MOUNTPOINT, got %d arguments\n%s", len(pos), mountUsage)
	}
	a.remote, a.mountpoint = pos[0], pos[1]
	return a, nil
}

// parseRemote splits "SERVER:/EXPORT"; an IPv6 address is bracketed
// ("[::1]:/export"), as for mount.nfs.
func parseRemote(s string) (host, export string, err error) {
	rest := s
	if strings.HasPrefix(s, "[") {
		end := strings.Index(s, "]")
		if end < 0 {
			return "", "", fmt.Errorf("%q: unclosed [ in the server address", s)
		}
		host, rest = s[1:end], s[end+1:]
		if !strings.HasPrefix(rest, ":") {
			return "", "", fmt.Errorf("%q: want [ADDRESS]:/EXPORT", s)
		}
		rest = rest[1:]
	} else {
		var ok bool
		host, rest, ok = strings.Cut(s, ":")
		if !ok {
			return "", "", fmt.Errorf("%q: want SERVER:/EXPORT", s)
		}
	}
	if host == "" {
		return "", "", fmt.Errorf("%q: no server named", s)
	}
	if !strings.HasPrefix(rest, "/") {
		return "", "", fmt.Errorf("%q: the export must be an absolute path", s)
	}
	return host, rest, nil
}

// isRemoteSpec reports whether s looks like SERVER:/EXPORT, which is how
// mount.fuse3 calls the program (fuse(8): "hushfs SOURCE MOUNTPOINT -o ...").
func isRemoteSpec(s string) bool {
	_, _, err := parseRemote(s)
	return err == nil
}

func runMount(args []string) error {
	a, err := parseMountArgs(args)
	if err != nil {
		return err
	}
	host, export, err := parseRemote(a.remote)
	if err != nil {
		return err
	}
	opts, err := client.ParseOptions(strings.Join(a.options, ","))
	if err != nil {
		return err
	}
	mnt, err := filepath.Abs(a.mountpoint)
	if err != nil {
		return fmt.Errorf("mount point: %w", err)
	}
	if st, err := os.Stat(mnt); err != nil {
		return fmt.Errorf("mount point: %w", err)
	} else if !st.IsDir() {
		return fmt.Errorf("mount point %s is not a directory", mnt)
	}
	if a.logFile != "" {
		if a.logFile, err = filepath.Abs(a.logFile); err != nil {
			return fmt.Errorf("--log: %w", err)
		}
	}
	if !a.foreground {
		return startDaemon(a, opts, mnt)
	}
	return serveMount(a, host, export, opts, mnt)
}

// startDaemon runs the mount in a new session in the background (Go cannot
// fork: the program runs itself again with -f) and waits for it to report
// that the mount is live, or why it failed.
func startDaemon(a mountArgs, opts client.Options, mnt string) error {
	r, w, err := os.Pipe()
	if err != nil {
		return err
	}
	defer r.Close()
	devnull, err := os.OpenFile(os.DevNull, os.O_RDWR, 0)
	if err != nil {
		w.Close()
		return err
	}
	defer devnull.Close()
	args := []string{"mount", a.remote, mnt, "-f"}
	if len(a.options) > 0 {
		args = append(args, "-o", strings.Join(a.options, ","))
	}
	if a.logFile != "" {
		args = append(args, "--log", a.logFile)
	}
	if a.debug {
		args = append(args, "-d")
	}
	cmd := exec.Command("/proc/self/exe", args...)
	cmd.Args[0] = os.Args[0]
	cmd.Stdin, cmd.Stdout, cmd.Stderr = devnull, devnull, devnull
	cmd.ExtraFiles = []*os.File{w} // descriptor 3
	cmd.Env = append(os.Environ(), readyEnv+"=3")
	cmd.Dir = "/" // keep no directory busy
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	err = cmd.Start()
	w.Close()
	if err != nil {
		return fmt.Errorf("starting the mount daemon: %w", err)
	}
	msg, _ := io.ReadAll(io.LimitReader(r, 64<<10))
	line := strings.TrimSpace(string(msg))
	switch {
	case line == "ready":
		return cmd.Process.Release()
	case strings.HasPrefix(line, "error: "):
		cmd.Wait()
		return errors.New(strings.TrimPrefix(line, "error: "))
	}
	werr := cmd.Wait()
	hint := ""
	if a.logFile != "" {
		hint = " (see " + a.logFile + ")"
	}
	return fmt.Errorf("the mount daemon exited before the mount was live: %v%s", werr, hint)
}

// readyPipe returns the descriptor a background mount reports on, if this
// process is one.
func readyPipe() *os.File {
	v := os.Getenv(readyEnv)
	if v == "" {
		return nil
	}
	os.Unsetenv(readyEnv)
	fd, err := strconv.Atoi(v)
	if err != nil || fd < 3 {
		return nil
	}
	unix.CloseOnExec(fd) // not for fusermount3 or anything else started later
	return os.NewFile(uintptr(fd), "ready")
}

// serveMount mounts and serves in this process until the mount goes away
// (umount) or a signal asks to stop.
func serveMount(a mountArgs, host, export string, opts client.Options, mnt string) (err error) {
	ready := readyPipe()
	report := func(err error) {
		if ready == nil {
			return
		}
		if err != nil {
			fmt.Fprintf(ready, "error: %s\n", strings.ReplaceAll(err.Error(), "\n", "; "))
		} else {
			fmt.Fprintln(ready, "ready")
		}
		ready.Close()
		ready = nil
	}
	defer func() { report(err) }()

	if a.logFile != "" {
		f, err := os.OpenFile(a.logFile, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o644)
		if err != nil {
			return fmt.Errorf("--log: %w", err)
		}
		// Diagnostics and anything the runtime prints (a panic) go there.
		for _, fd := range []int{1, 2} {
			if err := unix.Dup3(int(f.Fd()), fd, 0); err != nil {
				return fmt.Errorf("--log: %w", err)
			}
		}
		f.Close()
	}
	logger := log.New(os.Stderr, "", log.LstdFlags|log.Lmicroseconds)
	logf := func(format string, args ...any) { logger.Printf(format, args...) }

	// A signal during the mount itself stops it; afterwards signals are
	// handled below.
	sigc := make(chan os.Signal, 2)
	signal.Notify(sigc, syscall.SIGINT, syscall.SIGTERM, syscall.SIGHUP)
	defer signal.Stop(sigc)
	mctx, cancel := context.WithTimeout(context.Background(), mountTimeout)
	go func() {
		select {
		case <-sigc:
			cancel()
		case <-mctx.Done():
		}
	}()
	core, err := client.Mount(mctx, client.Config{Server: host, Export: export, Options: opts, Logf: logf})
	cancel()
	if err != nil {
		return err // it names the server, the export and the step that failed
	}
	fsys := fusefs.New(core, fusefs.Options{Logf: logf, Version: version.String()})
	m, err := fusefs.Mount(fsys, mnt, fusefs.MountConfig{Source: a.remote, Options: opts, Debug: a.debug, Logf: logf})
	if err != nil {
		closeCtx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		core.Close(closeCtx)
		cancel()
		return err
	}
	defer m.CloseStats()
	report(nil)
	logf("hushfs: mounted %s on %s", a.remote, mnt)

	// A detached mount that only other mount namespaces' copies hold
	// (see fusefs.Mounted.Orphaned) ends here: this process's exit ends
	// the connection (the kernel aborts it when /dev/fuse closes), after
	// the write-back below. With the kernel's write-back cache it may hold
	// dirty pages of closed files, which the abort would drop: never then.
	var orphaned <-chan struct{}
	if !opts.KernelWriteback {
		orphaned = m.Orphaned(orphanCheck)
	}
	select {
	case <-m.Done():
		logf("hushfs: %s was unmounted", mnt)
	case <-orphaned:
		logf("hushfs: %s was unmounted and nothing uses it but copies in other mount namespaces: ending its connection", mnt)
	case sig := <-sigc:
		logf("hushfs: %v: unmounting %s", sig, mnt)
		switch err := m.Unmount(false); {
		case errors.Is(err, fusefs.ErrNotOurs):
			// Unmounted here already (another mount namespace may hold
			// a copy, which keeps the connection alive): nothing at the
			// path is ours to touch. The connection ends as this process
			// does.
			logf("hushfs: %v; leaving it alone", err)
		case err != nil:
			// Busy: detach it now; processes still using it get
			// ENOTCONN once this process exits.
			logf("hushfs: unmount %s: %v; detaching it", mnt, err)
			if err := m.Unmount(true); err != nil {
				logf("hushfs: detach %s: %v", mnt, err)
			}
		}
	}

	// Write back what is still dirty: until the server's next major
	// timeout if it stops answering (client.FS.Close), or a further signal.
	fctx, fcancel := context.WithCancel(context.Background())
	defer fcancel()
	go func() {
		select {
		case sig := <-sigc:
			logf("hushfs: %v: abandoning write-back", sig)
			fcancel()
		case <-fctx.Done():
		}
	}()
	if err := core.Close(fctx); err != nil {
		var lost *client.UnwrittenError
		if errors.As(err, &lost) {
			for _, f := range lost.Files {
				logf("hushfs: not written back: %s (%d bytes)", filepath.Join(mnt, f.Path), f.Bytes)
			}
		}
		return fmt.Errorf("writing back at unmount of %s: %w", mnt, err)
	}
	logf("hushfs: %s: done", mnt)
	return nil
}
