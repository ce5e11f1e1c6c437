package nfsv3

import (
	"bytes"
	"context"
	"errors"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"hushfs/internal/proto"
	"hushfs/internal/rpc"
	"hushfs/internal/server"
)

// calls records what the hooks were told.
type calls struct {
	mu       sync.Mutex
	calling  []string
	finished []string
}

func (c *calls) hooks() proto.Hooks {
	return proto.Hooks{
		Calling: func(_ context.Context, name string) {
			c.mu.Lock()
			c.calling = append(c.calling, name)
			c.mu.Unlock()
		},
		Finished: func(s *proto.CallStats) {
			c.mu.Lock()
			c.finished = append(c.finished, s.Name)
			c.mu.Unlock()
		},
	}
}

func (c *calls) take() (calling, finished []string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	calling, finished = c.calling, c.finished
	c.calling, c.finished = nil, nil
	return calling, finished
}

// env is an in-process hushfs server on 127.0.0.1 and an NFSv3 mount of
// its export.
type env struct {
	dir  string
	srv  *Server
	exp  proto.Export
	seen *calls
	nfsL net.Listener
}

var root = &proto.Cred{}

func ctxT(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	return ctx
}

func start(t *testing.T) (dir string, nfsL, mountL net.Listener, export string) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("the server needs root (kernel file handles, per-call credentials)")
	}
	dir = t.TempDir()
	os.Chmod(dir, 0o777) // calls as root are squashed
	s, err := server.New(server.Config{Root: dir, StateDir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	rs := rpc.NewServer(rpc.ServerOptions{})
	s.Register(rs)
	if nfsL, err = net.Listen("tcp", "127.0.0.1:0"); err != nil {
		t.Fatal(err)
	}
	if mountL, err = net.Listen("tcp", "127.0.0.1:0"); err != nil {
		t.Fatal(err)
	}
	go rs.Serve(nfsL)
	go rs.Serve(mountL)
	t.Cleanup(func() {
		rs.Close()
		s.Close()
	})
	return dir, nfsL, mountL, s.Root()
}

func port(l net.Listener) int { return l.Addr().(*net.TCPAddr).Port }

func mount(t *testing.T) *env {
	t.Helper()
	dir, nfsL, mountL, export := start(t)
	e := &env{dir: dir, seen: &calls{}, nfsL: nfsL}
	cfg := Config{Server: "127.0.0.1", Export: export, Port: port(nfsL), MountPort: port(mountL),
		Timeo: 5 * time.Second, Retrans: 2, Hooks: e.seen.hooks()}
	var err error
	if e.srv, e.exp, err = Mount(ctxT(t), cfg, root); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { e.srv.Close() })
	return e
}

// TestMountCalls: mounting asks MOUNT for the root, FSINFO and PATHCONF,
// each counted under its name, and says what NFSv3 can carry.
func TestMountCalls(t *testing.T) {
	e := mount(t)
	calling, finished := e.seen.take()
	if strings.Join(calling, " ") != "FSINFO PATHCONF" {
		t.Errorf("NFS calls at mount: %v, want FSINFO PATHCONF", calling)
	}
	if strings.Join(finished, " ") != "MOUNT:MNT FSINFO PATHCONF" {
		t.Errorf("calls at mount: %v", finished)
	}
	x := e.exp
	if len(x.Root) == 0 || len(x.Root) > MaxHandle {
		t.Errorf("root handle %x", x.Root)
	}
	// hushfs serve answers FSINFO and PATHCONF with the root's attributes.
	if len(x.RootAttrs) != 2 || x.RootAttrs[0].Attr.Type != proto.TypeDir || x.RootAttrs[1].At.Before(x.RootAttrs[0].At) {
		t.Errorf("root attributes %+v", x.RootAttrs)
	}
	if x.Rtmax == 0 || x.Wtmax == 0 || x.Dtpref == 0 || x.NameMax != 255 {
		t.Errorf("sizes %+v", x)
	}
	if x.Limits.MaxHandle != 64 || !x.Limits.TimeFits(0) || !x.Limits.TimeFits(1<<32-1) ||
		x.Limits.TimeFits(-1) || x.Limits.TimeFits(1<<32) {
		t.Errorf("limits %+v", x.Limits)
	}
}

// TestMountRefused: an export the server does not have fails with the
// MOUNT status, and leaves nothing running.
func TestMountRefused(t *testing.T) {
	_, nfsL, mountL, _ := start(t)
	cfg := Config{Server: "127.0.0.1", Export: "/no/such/export", Port: port(nfsL), MountPort: port(mountL), Timeo: 5 * time.Second}
	_, _, err := Mount(ctxT(t), cfg, root)
	if err == nil || !strings.Contains(err.Error(), "MOUNT 127.0.0.1:/no/such/export") {
		t.Fatalf("mount of a missing export: %v", err)
	}
}

// TestOneCallEach: every method is one call of its procedure, counted
// under the procedure's name, and does what it says on the server.
func TestOneCallEach(t *testing.T) {
	e := mount(t)
	ctx := ctxT(t)
	e.seen.take()
	step := func(want string, f func() error) {
		t.Helper()
		if err := f(); err != nil {
			t.Fatalf("%s: %v", want, err)
		}
		calling, finished := e.seen.take()
		if len(calling) != 1 || calling[0] != want || len(finished) != 1 || finished[0] != want {
			t.Fatalf("%s: calls %v, finished %v", want, calling, finished)
		}
	}
	ok := func(what string, st error, err error) error {
		if err == nil && st != nil {
			return st
		}
		return err
	}
	r := e.exp.Root
	step("NULL", func() error { return e.srv.Null(ctx) })
	step("GETATTR", func() error {
		res, err := e.srv.GetAttr(ctx, root, r)
		if err == nil && res.Attr.Type != proto.TypeDir {
			t.Errorf("root type %d", res.Attr.Type)
		}
		return ok("GETATTR", res.Status, err)
	})
	var fh proto.FH
	step("CREATE", func() error {
		res, err := e.srv.Create(ctx, root, r, "f", proto.CreateHow{Mode: proto.Guarded,
			Attrs: proto.SetAttrs{SetMode: true, Mode: 0o640, Atime: proto.SetTime{How: proto.SetToClientTime, Time: proto.Time{Sec: 1_000_000, Nsec: 7}}}})
		if err == nil && res.Status == nil {
			fh = append(proto.FH(nil), res.FH.FH...)
			if !res.FH.Present || !res.Attr.Present || res.Attr.Attr.Mode&0o777 != 0o640 || res.Attr.Attr.Atime != (proto.Time{Sec: 1_000_000, Nsec: 7}) {
				t.Errorf("CREATE result %+v", res)
			}
			if !res.DirWcc.After.Present {
				t.Errorf("CREATE: no directory attributes after")
			}
		}
		return ok("CREATE", res.Status, err)
	})
	var verf proto.Verf
	step("WRITE", func() error {
		res, err := e.srv.Write(ctx, root, fh, 0, []byte("hello, world"), proto.Unstable)
		if err == nil && res.Status == nil {
			verf = res.Verf
			if res.Count != 12 || !res.Wcc.After.Present || res.Wcc.After.Attr.Size != 12 {
				t.Errorf("WRITE result %+v", res)
			}
		}
		return ok("WRITE", res.Status, err)
	})
	step("COMMIT", func() error {
		res, err := e.srv.Commit(ctx, root, fh, 0, 0)
		if err == nil && res.Status == nil && res.Verf != verf {
			t.Errorf("COMMIT verifier %x, WRITE's %x", res.Verf, verf)
		}
		return ok("COMMIT", res.Status, err)
	})
	step("READ", func() error {
		buf := make([]byte, 100)
		res, err := e.srv.Read(ctx, root, fh, 7, buf)
		if err == nil && res.Status == nil && (string(buf[:res.N]) != "world" || !res.EOF) {
			t.Errorf("READ: %q eof %v", buf[:res.N], res.EOF)
		}
		return ok("READ", res.Status, err)
	})
	step("SETATTR", func() error {
		res, err := e.srv.SetAttr(ctx, root, fh, proto.SetAttrs{SetSize: true, Size: 5, Mtime: proto.SetTime{How: proto.SetToServerTime}})
		if err == nil && res.Status == nil && res.Wcc.After.Attr.Size != 5 {
			t.Errorf("SETATTR result %+v", res)
		}
		return ok("SETATTR", res.Status, err)
	})
	step("LOOKUP", func() error {
		res, err := e.srv.Lookup(ctx, root, r, "f")
		if err == nil && res.Status == nil && (!bytes.Equal(res.FH, fh) || !res.Attr.Present || !res.DirAttr.Present) {
			t.Errorf("LOOKUP result %+v", res)
		}
		return ok("LOOKUP", res.Status, err)
	})
	step("ACCESS", func() error {
		res, err := e.srv.Access(ctx, root, fh, proto.AccessRead|proto.AccessModify)
		if err == nil && res.Status == nil && res.Access&proto.AccessRead == 0 {
			t.Errorf("ACCESS result %+v", res)
		}
		return ok("ACCESS", res.Status, err)
	})
	step("MKDIR", func() error {
		res, err := e.srv.Mkdir(ctx, root, r, "d", proto.SetAttrs{SetMode: true, Mode: 0o755})
		if err == nil && res.Status == nil && res.Attr.Attr.Type != proto.TypeDir {
			t.Errorf("MKDIR result %+v", res)
		}
		return ok("MKDIR", res.Status, err)
	})
	step("SYMLINK", func() error {
		res, err := e.srv.Symlink(ctx, root, r, "l", "f\x01 any bytes", proto.SetAttrs{SetMode: true, Mode: 0o777})
		return ok("SYMLINK", res.Status, err)
	})
	step("READLINK", func() error {
		l, err := e.srv.Lookup(ctx, root, r, "l")
		if err != nil || l.Status != nil {
			t.Fatalf("LOOKUP l: %v %v", err, l.Status)
		}
		e.seen.take()
		res, err := e.srv.Readlink(ctx, root, l.FH)
		if err == nil && res.Status == nil && string(res.Target) != "f\x01 any bytes" {
			t.Errorf("READLINK %q", res.Target)
		}
		return ok("READLINK", res.Status, err)
	})
	step("MKNOD", func() error {
		res, err := e.srv.Mknod(ctx, root, r, "p", proto.TypeFifo, proto.SetAttrs{SetMode: true, Mode: 0o600}, proto.Device{})
		if err == nil && res.Status == nil && res.Attr.Attr.Type != proto.TypeFifo {
			t.Errorf("MKNOD result %+v", res)
		}
		return ok("MKNOD", res.Status, err)
	})
	step("LINK", func() error {
		res, err := e.srv.Link(ctx, root, fh, r, "f2")
		if err == nil && res.Status == nil && res.Attr.Attr.Nlink != 2 {
			t.Errorf("LINK result %+v", res)
		}
		return ok("LINK", res.Status, err)
	})
	step("RENAME", func() error {
		res, err := e.srv.Rename(ctx, root, r, "f2", r, "g")
		return ok("RENAME", res.Status, err)
	})
	step("REMOVE", func() error {
		res, err := e.srv.Remove(ctx, root, r, "g")
		return ok("REMOVE", res.Status, err)
	})
	step("RMDIR", func() error {
		res, err := e.srv.Rmdir(ctx, root, r, "d")
		return ok("RMDIR", res.Status, err)
	})
	step("READDIR", func() error {
		res, err := e.srv.ReadDir(ctx, root, proto.ReadDirArgs{Dir: r, Count: 4096})
		if err == nil && res.Status == nil {
			if got := names(res.Entries); got != ". .. f l p" || !res.EOF || res.Entries[0].Attr.Present || res.Entries[0].FH.Present {
				t.Errorf("READDIR: %q eof %v", got, res.EOF)
			}
		}
		return ok("READDIR", res.Status, err)
	})
	step("READDIRPLUS", func() error {
		res, err := e.srv.ReadDirPlus(ctx, root, proto.ReadDirArgs{Dir: r, Count: 4096, MaxCount: 32768})
		if err == nil && res.Status == nil {
			for _, x := range res.Entries {
				if string(x.Name) == "f" && (!x.FH.Present || !bytes.Equal(x.FH.FH, fh) || x.Attr.Attr.Size != 5) {
					t.Errorf("READDIRPLUS entry %+v", x)
				}
			}
		}
		return ok("READDIRPLUS", res.Status, err)
	})
	step("FSSTAT", func() error {
		res, err := e.srv.FsStat(ctx, root, r)
		if err == nil && res.Status == nil && res.Tbytes == 0 {
			t.Errorf("FSSTAT result %+v", res)
		}
		return ok("FSSTAT", res.Status, err)
	})
	step("FSINFO", func() error {
		res, err := e.srv.FsInfo(ctx, root, r)
		return ok("FSINFO", res.Status, err)
	})
	step("PATHCONF", func() error {
		res, err := e.srv.PathConf(ctx, root, r)
		if err == nil && res.Status == nil && res.NameMax != 255 {
			t.Errorf("PATHCONF result %+v", res)
		}
		return ok("PATHCONF", res.Status, err)
	})
	if fi, err := os.Stat(filepath.Join(e.dir, "f")); err != nil || fi.Size() != 5 || fi.Mode().Perm() != 0o640 {
		t.Errorf("on the server: %v %v", fi, err)
	}
}

func names(es []proto.DirEntry) string {
	var out []string
	for _, e := range es {
		out = append(out, string(e.Name))
	}
	slices.Sort(out)
	return strings.Join(out, " ")
}

// TestFailures: a failure is the result's Status, an error carrying the
// errno and the status's name, with what the reply held besides (wcc data
// of the directory); the method's own error stays nil.
func TestFailures(t *testing.T) {
	e := mount(t)
	ctx := ctxT(t)
	r := e.exp.Root
	res, err := e.srv.Remove(ctx, root, r, "missing")
	if err != nil {
		t.Fatal(err)
	}
	if !errors.Is(res.Status, syscall.ENOENT) || res.Status.Error() != "NFS3ERR_NOENT" || proto.ErrnoOf(res.Status) != syscall.ENOENT {
		t.Errorf("REMOVE of a missing name: %v", res.Status)
	}
	if !res.DirWcc.After.Present {
		t.Errorf("REMOVE's failure lost the directory's attributes")
	}
	if err := os.Mkdir(filepath.Join(e.dir, "d"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(e.dir, "d", "x"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	rm, err := e.srv.Rmdir(ctx, root, r, "d")
	if err != nil || !errors.Is(rm.Status, syscall.ENOTEMPTY) {
		t.Errorf("RMDIR of a non-empty directory: %v %v", err, rm.Status)
	}
	c, err := e.srv.Create(ctx, root, r, "d", proto.CreateHow{Mode: proto.Guarded})
	if err != nil || !errors.Is(c.Status, syscall.EEXIST) || !proto.IsAnswer(c.Status) {
		t.Errorf("GUARDED CREATE of an existing name: %v %v", err, c.Status)
	}
	// A cookie the server never gave.
	l, err := e.srv.ReadDir(ctx, root, proto.ReadDirArgs{Dir: r, Cookie: 1 << 40, Verf: proto.Verf{1}, Count: 4096})
	if err != nil || !errors.Is(l.Status, proto.ErrBadCookie) || errors.Is(l.Status, proto.ErrNotSupp) {
		t.Errorf("READDIR from a made-up cookie: %v %v", err, l.Status)
	}
	// A handle the server never made.
	g, err := e.srv.GetAttr(ctx, root, proto.FH(bytes.Repeat([]byte{1}, 40)))
	if err != nil || !errors.Is(g.Status, syscall.ESTALE) {
		t.Errorf("GETATTR of a made-up handle: %v %v", err, g.Status)
	}
}

// TestNoAnswer: a server that stops answering fails a soft mount's call
// with the method's error, no Status; Close ends the connection.
func TestNoAnswer(t *testing.T) {
	_, nfsL, mountL, export := start(t)
	// A listener that accepts and never answers stands in for the NFS port.
	dead, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer dead.Close()
	var conns []net.Conn
	var mu sync.Mutex
	go func() {
		for {
			c, err := dead.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			conns = append(conns, c)
			mu.Unlock()
		}
	}()
	defer func() {
		mu.Lock()
		for _, c := range conns {
			c.Close()
		}
		mu.Unlock()
	}()
	cfg := Config{Server: "127.0.0.1", Export: export, Port: port(nfsL), MountPort: port(mountL), Timeo: 200 * time.Millisecond, Retrans: 1}
	s, exp, err := Mount(ctxT(t), cfg, root)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	cfg.Port = port(dead)
	s2, _, err := Mount(ctxT(t), cfg, root)
	if err == nil {
		s2.Close()
		t.Fatal("mount through a server that never answers FSINFO succeeded")
	}
	if !errors.Is(err, rpc.ErrTimeout) || proto.IsAnswer(err) || !strings.Contains(err.Error(), "FSINFO") {
		t.Errorf("mount through a silent server: %v", err)
	}
	s.Close()
	if _, err := s.GetAttr(ctxT(t), root, exp.Root); err == nil || proto.IsAnswer(err) {
		t.Errorf("GETATTR after Close: %v", err)
	}
}
