package test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"hushfs/test/harness"
)

// Helpers of the POSIX suite: errno checks, stat, the two views of a file
// (through the mount and on the server's disk), and running one operation
// as an unprivileged user.

// asUserEnv, when set in the environment of the test binary, makes it
// perform the file operations it lists (JSON []asUserOp), in order, and
// print "errno N" for each instead of running tests. The suite runs a copy of the test
// binary this way under another uid, to see the errno the mount gives that
// user.
const asUserEnv = "HUSHFS_TEST_ASUSER_OP"

// asUserOp is one operation for the unprivileged helper.
type asUserOp struct {
	Op    string `json:"op"`
	Path  string `json:"path"`
	Path2 string `json:"path2,omitempty"`
}

func init() {
	if spec := os.Getenv(asUserEnv); spec != "" {
		var ops []asUserOp
		if err := json.Unmarshal([]byte(spec), &ops); err != nil {
			fmt.Fprintf(os.Stderr, "bad %s: %v\n", asUserEnv, err)
			os.Exit(2)
		}
		for _, op := range ops {
			if op.Op == "write-fstat" {
				errno, mode := asUserWriteFstat(op.Path)
				fmt.Printf("errno %d mode %o\n", int(errno), mode)
				continue
			}
			fmt.Printf("errno %d\n", int(asUserDo(op)))
		}
		os.Exit(0)
	}
}

// asUserDo performs op and returns its errno (0 on success).
func asUserDo(op asUserOp) syscall.Errno {
	var err error
	switch op.Op {
	case "read":
		var f *os.File
		if f, err = os.Open(op.Path); err == nil {
			_, err = f.Read(make([]byte, 16))
			if err == io.EOF {
				err = nil
			}
			f.Close()
		}
	case "write":
		var f *os.File
		if f, err = os.OpenFile(op.Path, os.O_WRONLY, 0); err == nil {
			_, err = f.Write([]byte("user"))
			if cerr := f.Close(); err == nil {
				err = cerr
			}
		}
	case "create":
		var f *os.File
		if f, err = os.OpenFile(op.Path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o644); err == nil {
			_, err = f.Write([]byte("mine"))
			if cerr := f.Close(); err == nil {
				err = cerr
			}
		}
	case "stat":
		_, err = os.Stat(op.Path)
	case "readdir":
		_, err = os.ReadDir(op.Path)
	case "mkdir":
		err = unix.Mkdir(op.Path, 0o755)
	case "rmdir":
		err = unix.Rmdir(op.Path)
	case "unlink":
		err = unix.Unlink(op.Path)
	case "rename":
		err = unix.Rename(op.Path, op.Path2)
	case "chmod":
		err = unix.Chmod(op.Path, 0o777)
	case "chown":
		err = unix.Chown(op.Path, os.Getuid(), -1)
	case "truncate":
		err = unix.Truncate(op.Path, 0)
	case "utimes-now":
		err = unix.UtimesNanoAt(unix.AT_FDCWD, op.Path, nil, 0)
	case "link":
		err = unix.Link(op.Path, op.Path2)
	case "symlink":
		err = unix.Symlink(op.Path2, op.Path)
	default:
		fmt.Fprintf(os.Stderr, "unknown operation %q\n", op.Op)
		os.Exit(2)
	}
	return errnoOf(err)
}

// asUserWriteFstat writes to an existing file and returns the errno and
// the mode fstat shows right after the write, before the close.
func asUserWriteFstat(path string) (syscall.Errno, uint32) {
	fd, err := unix.Open(path, unix.O_WRONLY, 0)
	if err != nil {
		return errnoOf(err), 0
	}
	defer unix.Close(fd)
	if _, err := unix.Write(fd, []byte("user")); err != nil {
		return errnoOf(err), 0
	}
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return errnoOf(err), 0
	}
	return 0, st.Mode & 0o7777
}

// errnoOf returns err's errno: 0 for nil, 0xffff (no real errno) for an
// error that carries none.
func errnoOf(err error) syscall.Errno {
	if err == nil {
		return 0
	}
	var en syscall.Errno
	if errors.As(err, &en) {
		return en
	}
	return 0xffff
}

// unprivileged runs single operations as uid/gid 1000 through a copy of the
// test binary that uid 1000 can execute (the original lives in a directory
// only root may enter).
type unprivileged struct {
	bin string
}

const (
	testUID = 1000
	testGID = 1000
)

func newUnprivileged(t *testing.T, dir string) *unprivileged {
	t.Helper()
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	src, err := os.Open(self)
	if err != nil {
		t.Fatal(err)
	}
	defer src.Close()
	bin := filepath.Join(dir, "asuser.test")
	dst, err := os.OpenFile(bin, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o755)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := io.Copy(dst, src); err != nil {
		dst.Close()
		t.Fatal(err)
	}
	if err := dst.Close(); err != nil {
		t.Fatal(err)
	}
	return &unprivileged{bin: bin}
}

// run performs ops in order as uid 1000, in one process, and returns the
// errno each got.
func (u *unprivileged) run(t *testing.T, ops ...asUserOp) []syscall.Errno {
	t.Helper()
	lines := u.runLines(t, ops...)
	res := make([]syscall.Errno, len(ops))
	for i, l := range lines {
		var n int
		if _, err := fmt.Sscanf(l, "errno %d", &n); err != nil {
			t.Fatalf("operations as uid %d: unexpected output %q", testUID, l)
		}
		res[i] = syscall.Errno(n)
	}
	return res
}

// writeFstat writes to path as uid 1000 and returns the errno and the mode
// the writer's fstat shows right after the write.
func (u *unprivileged) writeFstat(t *testing.T, path string) (syscall.Errno, uint32) {
	t.Helper()
	l := u.runLines(t, asUserOp{Op: "write-fstat", Path: path})[0]
	var n int
	var mode uint32
	if _, err := fmt.Sscanf(l, "errno %d mode %o", &n, &mode); err != nil {
		t.Fatalf("write-fstat as uid %d: unexpected output %q", testUID, l)
	}
	return syscall.Errno(n), mode
}

// runLines performs ops as uid 1000 and returns the line printed for each.
func (u *unprivileged) runLines(t *testing.T, ops ...asUserOp) []string {
	t.Helper()
	spec, _ := json.Marshal(ops)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, u.bin)
	cmd.Env = []string{asUserEnv + "=" + string(spec), "PATH=/usr/bin:/bin"}
	cmd.Dir = "/"
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: testUID, Gid: testGID, Groups: []uint32{}}}
	cmd.WaitDelay = 2 * time.Second
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("operations as uid %d: %v\n%s%s", testUID, err, out, stderr.String())
	}
	lines := strings.Split(strings.TrimSpace(string(out)), "\n")
	if len(lines) != len(ops) {
		t.Fatalf("operations as uid %d: %d results for %d operations: %q (%s)", testUID, len(lines), len(ops), out, stderr.String())
	}
	return lines
}

// wantErrno fails unless err carries one of the errnos (0: success).
func wantErrno(t *testing.T, what string, err error, want ...syscall.Errno) {
	t.Helper()
	got := errnoOf(err)
	for _, w := range want {
		if got == w {
			return
		}
	}
	names := make([]string, len(want))
	for i, w := range want {
		names[i] = errnoName(w)
	}
	t.Errorf("%s: got %s (%v), want %s", what, errnoName(got), err, strings.Join(names, " or "))
}

func errnoName(e syscall.Errno) string {
	switch e {
	case 0:
		return "success"
	case 0xffff:
		return "an error without errno"
	}
	if n := unix.ErrnoName(e); n != "" {
		return n
	}
	return strconv.Itoa(int(e))
}

// must fails the test on err.
func must(t *testing.T, what string, err error) {
	t.Helper()
	if err != nil {
		t.Fatalf("%s: %v", what, err)
	}
}

// pxStat is stat(2) (lstat when nofollow), failing the test on error.
func pxStat(t *testing.T, path string, nofollow bool) unix.Stat_t {
	t.Helper()
	var st unix.Stat_t
	var err error
	if nofollow {
		err = unix.Lstat(path, &st)
	} else {
		err = unix.Stat(path, &st)
	}
	if err != nil {
		t.Fatalf("stat %s: %v", path, err)
	}
	return st
}

// readFile reads a whole file, failing the test on error.
func readFile(t *testing.T, path string) []byte {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("read %s: %v", path, err)
	}
	return b
}

// sameBytes compares contents and says where they differ.
func sameBytes(t *testing.T, what string, got, want []byte) {
	t.Helper()
	if bytes.Equal(got, want) {
		return
	}
	if len(got) != len(want) {
		t.Errorf("%s: %d bytes, want %d", what, len(got), len(want))
	}
	for i := 0; i < min(len(got), len(want)); i++ {
		if got[i] != want[i] {
			t.Errorf("%s: first difference at offset %d: % x, want % x", what, i,
				got[i:min(i+16, len(got))], want[i:min(i+16, len(want))])
			return
		}
	}
}

// tsOf converts a stat time.
func tsOf(ts unix.Timespec) time.Time { return time.Unix(ts.Sec, ts.Nsec) }

// hiddenNames lists the .nfs* names in a directory on disk.
func hiddenNames(t *testing.T, dir string) []string {
	t.Helper()
	ents, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, e := range ents {
		if strings.HasPrefix(e.Name(), ".nfs") {
			out = append(out, e.Name())
		}
	}
	return out
}

// pattern returns n bytes that differ from every shifted copy of themselves.
func pattern(n int, seed byte) []byte {
	b := make([]byte, n)
	x := uint32(seed) + 1
	for i := range b {
		x = x*1664525 + 1013904223
		b[i] = byte(x >> 24)
	}
	return b
}

// mountDaemonsFor lists processes whose command line runs "hushfs mount"
// with dir as the mount point (used to check that a failed mount leaves no
// daemon behind).
func mountDaemonsFor(dir string) []int {
	ents, err := os.ReadDir("/proc")
	if err != nil {
		return nil
	}
	var pids []int
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		b, err := os.ReadFile("/proc/" + e.Name() + "/cmdline")
		if err != nil {
			continue
		}
		args := strings.Split(strings.TrimRight(string(b), "\x00"), "\x00")
		if len(args) >= 4 && args[1] == "mount" && args[3] == dir {
			if st, err := os.ReadFile("/proc/" + e.Name() + "/stat"); err == nil {
				s := string(st)
				if i := strings.LastIndexByte(s, ')'); i >= 0 && i+2 < len(s) && (s[i+2] == 'Z' || s[i+2] == 'X') {
					continue // exited, waiting to be reaped
				}
			}
			pids = append(pids, pid)
		}
	}
	return pids
}

// requireMountTools skips unless the test can mount FUSE file systems.
func requireMountTools(t *testing.T) {
	t.Helper()
	harness.RequireRoot(t)
	if _, err := os.Stat("/dev/fuse"); err != nil {
		t.Skipf("no FUSE: %v", err)
	}
}

// sharedTempDir makes a temporary directory every user can traverse (a
// test's TempDir is private to root), removed at cleanup.
func sharedTempDir(t *testing.T, prefix string) string {
	t.Helper()
	d, err := os.MkdirTemp("", prefix)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := os.RemoveAll(d); err != nil {
			t.Logf("removing %s: %v", d, err)
		}
	})
	if err := os.Chmod(d, 0o755); err != nil {
		t.Fatal(err)
	}
	return d
}

// mkdirs creates directories with mode 0755.
func mkdirs(t *testing.T, dirs ...string) {
	t.Helper()
	for _, d := range dirs {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.Chmod(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
}
