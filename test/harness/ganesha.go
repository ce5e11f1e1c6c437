package harness

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"syscall"
	"time"
)

// Ports ganesha listens on inside its namespace. Each namespace has its own
// port space, so fixed numbers cannot collide with anything.
const (
	GaneshaNFSPort     = 2049
	GaneshaMountPort   = 20048
	GaneshaRPCBindPort = 111
)

// GaneshaOptions configures StartGanesha. The zero value is usable.
type GaneshaOptions struct {
	// ExportDir is the local directory exported; a fresh temporary
	// directory when empty.
	ExportDir string
	// Pseudo is the path clients MOUNT; "/export" when empty.
	Pseudo string
	// StartTimeout bounds startup; 20 s when zero.
	StartTimeout time.Duration
	// LogLevel is ganesha's default log level; "NIV_EVENT" when empty
	// ("NIV_FULL_DEBUG" helps when a test disagrees with ganesha).
	LogLevel string
	// NFSv4 serves NFSv4 (without a grace period) besides NFSv3, on the
	// same port; the export is then also at Pseudo under the v4 pseudo root.
	NFSv4 bool
	// LeaseLifetime is the NFSv4 lease in seconds (1 to 120); ganesha's
	// default (60) when zero.
	LeaseLifetime int
	// SlotTableSize is the number of NFSv4.1 fore channel slots ganesha
	// grants at most (1 to 1024); its default (64) when zero.
	SlotTableSize int
	// Grace is the NFSv4 grace period in seconds after each (re)start,
	// when clients of the previous instance reclaim their opens and locks
	// (its recovery directory remembers them); 0: none (Graceless).
	Grace int
}

// Ganesha is a running nfs-ganesha (FSAL VFS, NFSv3 over TCP, and NFSv4
// with GaneshaOptions.NFSv4) with
// its own rpcbind, both inside a private network namespace with a private
// tmpfs on /run, so neither touches the host's rpcbind registrations, pid
// files or sockets.
type Ganesha struct {
	NS          *NetNS
	ExportDir   string // local directory behind the export; tests may change it directly
	ExportPath  string // the path to MOUNT (ganesha's pseudo path)
	Addr        string // "127.0.0.1", inside NS
	NFSPort     int
	MountPort   int
	RPCBindPort int

	nfsv4   bool
	opts    GaneshaOptions
	workDir string
	logPath string
	cmd     *exec.Cmd
	exited  chan struct{} // closed once cmd.Wait returned
	waitErr error         // valid after exited is closed
	out     *syncBuffer   // the script's output
}

// StartGanesha starts ganesha in a new namespace and returns once its NFS
// and MOUNT services answer a NULL call and the export can be mounted. It
// skips the test when not root and fails it when ganesha, rpcbind or
// nsenter is missing (CI installs them with scripts/install-deps.sh).
// Everything is torn down at cleanup.
func StartGanesha(t T, opts GaneshaOptions) *Ganesha {
	t.Helper()
	RequireRoot(t)
	for _, bin := range []string{"ganesha.nfsd", "rpcbind", "nsenter", "unshare", "ip"} {
		if _, err := exec.LookPath(bin); err != nil {
			t.Fatalf("%s not found (run scripts/install-deps.sh): %v", bin, err)
		}
	}
	plugins, err := ganeshaPluginsDir()
	if err != nil {
		t.Fatal(err)
	}
	if opts.Pseudo == "" {
		opts.Pseudo = "/export"
	}
	if opts.StartTimeout == 0 {
		opts.StartTimeout = 20 * time.Second
	}
	if opts.LogLevel == "" {
		opts.LogLevel = "NIV_EVENT"
	}
	work := t.TempDir()
	if opts.ExportDir == "" {
		opts.ExportDir = t.TempDir()
	}
	if opts.ExportDir, err = filepath.Abs(opts.ExportDir); err != nil {
		t.Fatalf("export dir: %v", err)
	}
	ns := NewNetNS(t)

	g := &Ganesha{
		NS: ns, ExportDir: opts.ExportDir, ExportPath: opts.Pseudo, nfsv4: opts.NFSv4, opts: opts,
		Addr: "127.0.0.1", NFSPort: GaneshaNFSPort, MountPort: GaneshaMountPort,
		RPCBindPort: GaneshaRPCBindPort,
		workDir:     work, logPath: filepath.Join(work, "ganesha.log"),
	}
	conf := filepath.Join(work, "ganesha.conf")
	if err := os.WriteFile(conf, []byte(g.config(plugins)), 0o644); err != nil {
		t.Fatalf("write ganesha config: %v", err)
	}
	if err := os.MkdirAll(filepath.Join(work, "recovery"), 0o755); err != nil {
		t.Fatalf("ganesha recovery dir: %v", err)
	}
	g.launch(t)
	t.Cleanup(func() { g.stop(t) })
	if err := g.waitReady(opts.StartTimeout); err != nil {
		t.Fatalf("ganesha did not start: %v\nscript output:\n%s\nganesha log tail:\n%s",
			err, g.out.String(), g.LogTail())
	}
	return g
}

// Restart kills ganesha (SIGKILL: no state is saved beyond what it keeps
// on disk as it goes) and starts it again in the same namespace with the
// same configuration, export and recovery directory, as a server that
// crashed and came back. It returns once ganesha serves again.
func (g *Ganesha) Restart(t T) {
	t.Helper()
	g.stop(t)
	g.launch(t)
	if err := g.waitReady(g.opts.StartTimeout); err != nil {
		t.Fatalf("ganesha did not start again: %v\nscript output:\n%s\nganesha log tail:\n%s",
			err, g.out.String(), g.LogTail())
	}
}

// launch starts the namespace's rpcbind and ganesha.
func (g *Ganesha) launch(t T) {
	t.Helper()
	work, conf := g.workDir, filepath.Join(g.workDir, "ganesha.conf")

	// The script runs with the namespace's network, a private mount
	// namespace and a private PID namespace. The tmpfs on /run hides the
	// host's rpcbind socket and pid files, and our rpcbind puts its own
	// there (ganesha's libtirpc registers through /run/rpcbind.sock). sh
	// then becomes ganesha, PID 1 of the PID namespace, so that when
	// ganesha dies the kernel kills rpcbind too. unshare --kill-child and
	// Pdeathsig chain the same way upwards: if the test binary itself dies
	// (a -timeout panic skips every cleanup), ganesha and rpcbind die with
	// it instead of outliving the test.
	//
	// The new mount namespace starts as a copy of the host's, FUSE mounts
	// of other tests included: a copy would keep such a mount alive after
	// the host unmounts it, and its daemon from ever exiting. They are
	// detached here at once; ganesha needs none of them.
	const script = `set -e
mount -n -t tmpfs -o mode=0755 hushfs-run /run
grep -E ' - fuse(\.[^ ]*)? ' /proc/self/mountinfo | cut -d' ' -f5 | while read -r m; do umount -l "$m" 2>/dev/null || true; done
rpcbind -f >"$1/rpcbind.log" 2>&1 &
i=0
while [ ! -S /run/rpcbind.sock ]; do
  i=$((i+1))
  if [ $i -gt 200 ]; then echo "rpcbind socket did not appear" >&2; exit 1; fi
  sleep 0.05
done
exec ganesha.nfsd -F -f "$2" -L "$3" -p "$1/ganesha.pid" -N "$4"
`
	g.cmd = exec.Command("nsenter", "--net="+g.NS.Path, "--",
		"unshare", "--mount", "--propagation", "private", "--pid", "--fork", "--kill-child", "--mount-proc",
		"sh", "-c", script, "sh", work, conf, g.logPath, g.opts.LogLevel)
	g.out = &syncBuffer{}
	g.cmd.Stdout = g.out
	g.cmd.Stderr = g.out
	// Its own process group, so cleanup reaches unshare, ganesha and
	// rpcbind with one signal whatever state startup reached.
	g.cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	g.cmd.WaitDelay = 2 * time.Second // never hang on an inherited pipe
	if err := g.cmd.Start(); err != nil {
		t.Fatalf("start ganesha: %v", err)
	}
	exited := make(chan struct{})
	g.exited = exited
	cmd := g.cmd
	go func() {
		g.waitErr = cmd.Wait()
		close(exited)
	}()
}

// config renders ganesha.conf: NFSv3 over TCP (and NFSv4.1/4.2 if asked
// for), no NLM/RQUOTA/UDP, no Kerberos, v3 MOUNT of the pseudo path, every
// state path in the work dir, and attributes never cached so direct changes
// to ExportDir are seen.
func (g *Ganesha) config(plugins string) string {
	protocols := "3"
	if g.nfsv4 {
		protocols = "3, 4"
	}
	v4 := "\n\tGraceless = true;"
	if g.opts.Grace > 0 {
		v4 = fmt.Sprintf("\n\tGraceless = false;\n\tGrace_Period = %d;", g.opts.Grace)
	}
	if g.opts.LeaseLifetime > 0 {
		v4 += fmt.Sprintf("\n\tLease_Lifetime = %d;", g.opts.LeaseLifetime)
	}
	if g.opts.SlotTableSize > 0 {
		v4 += fmt.Sprintf("\n\tSlot_Table_Size = %d;", g.opts.SlotTableSize)
	}
	return fmt.Sprintf(`NFS_CORE_PARAM {
	Protocols = %s;
	NFS_Port = %d;
	MNT_Port = %d;
	Enable_NLM = false;
	Enable_RQUOTA = false;
	Enable_UDP = false;
	Mount_Path_Pseudo = true;
	Plugins_Dir = %q;
}
NFS_KRB5 {
	Active_krb5 = false;
}
NFSV4 {
	Only_Numeric_Owners = true;
	RecoveryRoot = %q;%s
}
EXPORT {
	Export_Id = 1;
	Path = %q;
	Pseudo = %q;
	Protocols = %s;
	Transports = TCP;
	Access_Type = RW;
	Squash = No_Root_Squash;
	SecType = sys;
	Attr_Expiration_Time = 0;
	FSAL {
		Name = VFS;
	}
}
`, protocols, g.NFSPort, g.MountPort, plugins, filepath.Join(g.workDir, "recovery"), v4, g.ExportDir, g.ExportPath, protocols)
}

// ganeshaPluginsDir finds the directory holding FSAL VFS; it differs
// between distributions and the compiled-in default is often wrong.
func ganeshaPluginsDir() (string, error) {
	cands := []string{"/usr/lib/x86_64-linux-gnu/ganesha", "/usr/lib/aarch64-linux-gnu/ganesha",
		"/usr/lib64/ganesha", "/usr/lib/ganesha"}
	if m, _ := filepath.Glob("/usr/lib/*/ganesha"); len(m) > 0 {
		cands = append(cands, m...)
	}
	for _, d := range cands {
		if _, err := os.Stat(filepath.Join(d, "libfsalvfs.so")); err == nil {
			return d, nil
		}
	}
	return "", errors.New("ganesha FSAL VFS (libfsalvfs.so) not found: install nfs-ganesha-vfs")
}

// waitReady polls until NFS and MOUNT answer NULL, ganesha exits, or the
// deadline passes.
func (g *Ganesha) waitReady(timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	var last error
	for time.Now().Before(deadline) {
		select {
		case <-g.exited:
			return fmt.Errorf("ganesha exited during startup: %v", g.waitErr)
		default:
		}
		last = g.ping(deadline)
		if last == nil {
			return nil
		}
		time.Sleep(50 * time.Millisecond)
	}
	return fmt.Errorf("not ready after %v: %w", timeout, last)
}

func (g *Ganesha) ping(deadline time.Time) error {
	ctx, cancel := context.WithDeadline(context.Background(), deadline)
	defer cancel()
	for _, s := range []struct{ port, prog, vers int }{
		{g.NFSPort, 100003, 3}, {g.MountPort, 100005, 3},
	} {
		c, err := g.DialPort(ctx, s.port)
		if err != nil {
			return err
		}
		err = PingNull(ctx, c, uint32(s.prog), uint32(s.vers))
		c.Close()
		if err != nil {
			return err
		}
	}
	// ganesha serves even when an export failed to load; only a successful
	// MNT proves the export is there.
	c, err := g.DialMount(ctx)
	if err != nil {
		return err
	}
	defer c.Close()
	st, err := mountStatus(ctx, c, g.ExportPath)
	if err != nil {
		return err
	}
	if st != 0 {
		return fmt.Errorf("MNT %s: mountstat3 %d", g.ExportPath, st)
	}
	return nil
}

// stop kills the process group (unshare, ganesha, rpcbind) and waits for
// unshare, which returns once ganesha, PID 1 of its namespace, is gone; the
// kernel takes everything else in that namespace with it. It reports,
// without stopping the cleanup, if anything refuses to die.
func (g *Ganesha) stop(t T) {
	pid := g.cmd.Process.Pid
	// The group id is our child's pid; the group holds only what it started.
	if err := syscall.Kill(-pid, syscall.SIGKILL); err != nil && !errors.Is(err, syscall.ESRCH) {
		t.Errorf("kill ganesha process group %d: %v", pid, err)
	}
	select {
	case <-g.exited:
	case <-time.After(10 * time.Second):
		t.Errorf("ganesha (unshare pid %d) did not exit within 10 s of SIGKILL", pid)
	}
}

// Running reports whether the ganesha process is still alive.
func (g *Ganesha) Running() bool {
	select {
	case <-g.exited:
		return false
	default:
		return true
	}
}

// DialPort connects to 127.0.0.1:port inside the namespace.
func (g *Ganesha) DialPort(ctx context.Context, port int) (net.Conn, error) {
	return g.NS.Dial(ctx, net.JoinHostPort(g.Addr, strconv.Itoa(port)))
}

// Dial connects to ganesha's NFS service.
func (g *Ganesha) Dial(ctx context.Context) (net.Conn, error) { return g.DialPort(ctx, g.NFSPort) }

// DialMount connects to ganesha's MOUNT service.
func (g *Ganesha) DialMount(ctx context.Context) (net.Conn, error) {
	return g.DialPort(ctx, g.MountPort)
}

// DialRPCBind connects to the namespace's rpcbind (port 111).
func (g *Ganesha) DialRPCBind(ctx context.Context) (net.Conn, error) {
	return g.DialPort(ctx, g.RPCBindPort)
}

// LogTail returns the last 40 lines of ganesha's log, for failure messages.
func (g *Ganesha) LogTail() string {
	b, err := os.ReadFile(g.logPath)
	if err != nil {
		return fmt.Sprintf("(no ganesha log: %v)", err)
	}
	return tail(string(b), 40)
}
