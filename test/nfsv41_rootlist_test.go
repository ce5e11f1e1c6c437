package test

import (
	"context"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"hushfs/internal/proto"
	"hushfs/internal/proto/nfsv41"
	"hushfs/test/harness"
)

// noCallbacks takes callbacks and does nothing with them: the protocol
// asks for directory delegations only once a core answers callbacks.
type noCallbacks struct{}

func (noCallbacks) Recall(proto.FH, proto.StateID, bool)    {}
func (noCallbacks) GetAttr(proto.FH) (uint64, uint64, bool) { return 0, 0, false }
func (noCallbacks) Revoked()                                {}

// TestNFSv41RootListFromMount drives the v4.1 protocol package against
// ganesha 4.3, which answers GET_DIR_DELEGATION with OP_ILLEGAL in its
// place: the mount's one COMPOUND also reads the root's first page and
// asks for the root's delegation last, its failure stops nothing (the
// results before it are used) and no listing asks again; the root's first
// listing right after the mount is answered with no COMPOUND, once, and
// not after a change of ours nor to another credential; a subdirectory's
// first listing asking for a delegation is one COMPOUND without
// GET_DIR_DELEGATION. Before, the first listing asked, failed and went
// again (two COMPOUNDs), and the root's listing was one of its own.
func TestNFSv41RootListFromMount(t *testing.T) {
	g := harness.StartGanesha(t, harness.GaneshaOptions{NFSv4: true})
	for _, name := range []string{"a", "b", "c"} {
		must(t, "write on the server", os.WriteFile(filepath.Join(g.ExportDir, name), pattern(100, 1), 0o644))
	}
	must(t, "mkdir on the server", os.Mkdir(filepath.Join(g.ExportDir, "d"), 0o755))
	must(t, "write on the server", os.WriteFile(filepath.Join(g.ExportDir, "d", "e"), pattern(100, 2), 0o644))
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	var log compoundLog
	mount := func() (*nfsv41.Server, proto.Export) {
		srv, exp, err := nfsv41.Mount(ctx, nfsv41.Config{
			Server: g.Addr, Export: g.ExportPath, Port: g.NFSPort, Timeo: 10 * time.Second, Retrans: 2,
			Dial: func(ctx context.Context, addr string) (net.Conn, error) { return g.NS.Dial(ctx, addr) },
			Logf: t.Logf, Hooks: log.hooks(),
		}, &proto.Cred{})
		if err != nil {
			t.Fatalf("mount over NFSv4.1: %v", err)
		}
		srv.SetCallbacks(noCallbacks{})
		return srv, exp
	}
	c := &proto.Cred{}
	list := func(srv *nfsv41.Server, cred *proto.Cred, dir proto.FH) []string {
		t.Helper()
		r, err := srv.ReadDirPlus(ctx, cred, proto.ReadDirArgs{Dir: dir, Count: 64 << 10, MaxCount: 64 << 10, WantDirDeleg: true})
		okStatus(t, "list", err, r.Status)
		var names []string
		for _, e := range r.Entries {
			if !e.Attr.Present && string(e.Name) != "." && string(e.Name) != ".." {
				t.Errorf("%s listed without attributes", e.Name)
			}
			names = append(names, string(e.Name))
		}
		if !r.EOF {
			t.Errorf("a listing of %d names is not whole in one page", len(names))
		}
		slices.Sort(names)
		return names
	}
	expect := func(what string, got []string, want ...string) {
		t.Helper()
		if !slices.Equal(got, want) {
			t.Errorf("%s:\n got %q\nwant %q", what, got, want)
		}
	}

	srv, exp := mount()
	defer srv.Close()
	calls := log.take()
	if len(calls) != 1 || !strings.HasSuffix(calls[0], "GETFH GETATTR READDIR GETATTR GET_DIR_DELEGATION") {
		t.Fatalf("mount: %q, want one COMPOUND ending in the root's listing and GET_DIR_DELEGATION", calls)
	}
	if srv.DirDelegations() {
		t.Errorf("ganesha 4.3 taken for a server of directory delegations")
	}
	expect("the root right after the mount", list(srv, c, exp.Root), ".", "..", "a", "b", "c", "d")
	expect("COMPOUNDs of the root's first listing", log.take())
	expect("the root again", list(srv, c, exp.Root), ".", "..", "a", "b", "c", "d")
	expect("COMPOUNDs of the root's second listing", log.take(), "READDIRPLUS: PUTFH READDIR GETATTR")
	r, err := srv.Lookup(ctx, c, exp.Root, "d")
	okStatus(t, "lookup d", err, r.Status)
	log.take()
	expect("d", list(srv, c, r.FH), ".", "..", "e")
	expect("COMPOUNDs of d's listing", log.take(), "READDIRPLUS: PUTFH READDIR GETATTR LOOKUPP GETATTR")

	// Our own change after the mount: the root is listed from the server.
	srv2, exp2 := mount()
	defer srv2.Close()
	log.take()
	m, err := srv2.Mkdir(ctx, c, exp2.Root, "f", proto.SetAttrs{})
	okStatus(t, "mkdir f", err, m.Status)
	log.take()
	expect("the root after a mkdir", list(srv2, c, exp2.Root), ".", "..", "a", "b", "c", "d", "f")
	expect("COMPOUNDs of the root's listing after a mkdir", log.take(), "READDIRPLUS: PUTFH READDIR GETATTR")

	// Another credential lists from the server.
	srv3, exp3 := mount()
	defer srv3.Close()
	log.take()
	expect("the root by another identity", list(srv3, &proto.Cred{UID: 1000, GID: 1000}, exp3.Root), ".", "..", "a", "b", "c", "d", "f")
	expect("COMPOUNDs of another identity's listing", log.take(), "READDIRPLUS: PUTFH READDIR GETATTR")

	// Past its time, too.
	srv4, exp4 := mount()
	defer srv4.Close()
	log.take()
	time.Sleep(1100 * time.Millisecond)
	expect("the root a second after the mount", list(srv4, c, exp4.Root), ".", "..", "a", "b", "c", "d", "f")
	expect("COMPOUNDs a second after the mount", log.take(), "READDIRPLUS: PUTFH READDIR GETATTR")
}

// TestNFSv41RootListServe: against `hushfs serve`, which grants
// directory delegations, the mount's probe is granted the root's, which
// is given back at once (the core takes callbacks only after the mount,
// and it would not cover the listing before it); otherwise the mount is
// as before: the root's first listing asks for its delegation (not
// answered from the mount's page), holds it (a listing past the
// attributes' lifetime costs nothing), a file created on the server's
// host shows, and statfs right after the mount is still answered from it
// (the DELEGRETURN changes nothing).
func TestNFSv41RootListServe(t *testing.T) {
	requireMountTools(t)
	bin := harness.BuildHushfs(t)
	export := t.TempDir()
	for _, name := range []string{"a", "b"} {
		must(t, "create", os.WriteFile(filepath.Join(export, name), []byte("x"), 0o644))
	}
	metrics := freeAddr(t)
	s := harness.StartServe(t, export, "--metrics", metrics)
	m, dir := serveV41Opts(t, bin, s, "actimeo=1")
	mounted := time.Now()
	s0 := m.Stats(t)
	var st syscall.Statfs_t
	must(t, "statfs", syscall.Statfs(dir, &st))
	if n := delta(s0, m.Stats(t)).Ops["FSSTAT"].Ops; n != 0 && time.Since(mounted) < 500*time.Millisecond {
		t.Errorf("statfs right after the mount: %d FSSTAT, want none", n)
	}
	if n := s0.Ops["DELEGRETURN"].Ops; n != 1 {
		t.Errorf("mount: %d DELEGRETURN, want 1 (the probe's delegation given back)", n)
	}
	if n := serverOps(t, metrics, "GET_DIR_DELEGATION"); n != 1 {
		t.Errorf("server: %d GET_DIR_DELEGATION after the mount, want 1 (the probe)", n)
	}
	// Nothing reads the exported directory on the host (its atime).
	names := func(what string) []string {
		t.Helper()
		ents, err := os.ReadDir(dir)
		must(t, what, err)
		var out []string
		for _, e := range ents {
			out = append(out, e.Name())
		}
		return out
	}
	s1 := m.Stats(t)
	if got := names("the root's first listing"); !slices.Equal(got, []string{"a", "b"}) {
		t.Errorf("the root's first listing: %q, want a, b", got)
	}
	expectCounts(t, "the root's first listing", delta(s1, m.Stats(t)), map[string]uint64{"READDIRPLUS": 1})
	if n := serverOps(t, metrics, "GET_DIR_DELEGATION"); n != 2 {
		t.Errorf("server: %d GET_DIR_DELEGATION after the first listing, want 2 (the listing asks)", n)
	}
	time.Sleep(1500 * time.Millisecond) // past actimeo=1
	s2 := m.Stats(t)
	if got := names("the root past its attributes' lifetime"); !slices.Equal(got, []string{"a", "b"}) {
		t.Errorf("the root past its attributes' lifetime: %q, want a, b", got)
	}
	expectCounts(t, "the root past its attributes' lifetime, delegated", delta(s2, m.Stats(t)), nil)

	must(t, "create on the host", os.WriteFile(filepath.Join(export, "host1"), []byte("h"), 0o644))
	deadline := time.Now().Add(10 * time.Second)
	for !slices.Contains(names("list the root"), "host1") {
		if time.Now().After(deadline) {
			t.Fatalf("the host's new file not listed 10 s later")
		}
		time.Sleep(100 * time.Millisecond)
	}
	must(t, "unmount", m.Unmount(false))
}
