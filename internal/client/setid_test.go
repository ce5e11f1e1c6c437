package client

import (
	"os"
	"path/filepath"
	"syscall"
	"testing"

	"golang.org/x/sys/unix"
)

// A write by a caller without CAP_FSETID to a file whose mode has set-id
// bits it clears goes to the server at once, as that caller: the server
// clears the bits and the cached mode is the new one, with no GETATTR. Other
// writes stay buffered; a truncation to the current size that would clear
// bits is still sent.
func TestSetIDClearedByWrite(t *testing.T) {
	ts := startServer(t)
	mk := func(name string, mode uint32, gid int) {
		p := filepath.Join(ts.dir, name)
		os.WriteFile(p, []byte("data"), 0o600)
		os.Chown(p, 0, gid)
		if err := unix.Chmod(p, mode); err != nil {
			t.Fatal(err)
		}
	}
	mk("suid", 0o4777, 0)
	mk("plain", 0o777, 0)
	mk("sgid-member", 0o2666, 4242) // no group execute, writer in the group: kept
	mk("trunc", 0o6777, 0)
	fs := ts.mount(t, "")
	ctx := ctxT(t)
	user := &Cred{UID: 1000, GID: 1000, Groups: []uint32{4242}}
	open := func(name string) (NodeID, uint64) {
		t.Helper()
		e, err := fs.Lookup(ctx, user, RootID, name)
		if err != nil {
			t.Fatal(err)
		}
		fh, _, err := fs.Open(ctx, user, e.Node, syscall.O_WRONLY)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { fs.Release(ctx, fh) })
		return e.Node, fh
	}
	write := func(name string) (mode uint32, writes, getattrs uint64) {
		t.Helper()
		id, fh := open(name)
		before := fs.Stats().Snapshot()
		if _, err := fs.Write(ctx, user, fh, 0, []byte("x")); err != nil {
			t.Fatal(err)
		}
		if err := fs.ClearSetIDAfterWrite(ctx, user, fh); err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		a, _, err := fs.GetAttr(ctx, user, id)
		if err != nil {
			t.Fatal(err)
		}
		after := fs.Stats().Snapshot()
		return a.Mode & 0o7777, after.Count("WRITE") - before.Count("WRITE"), after.Count("GETATTR") - before.Count("GETATTR")
	}
	if mode, writes, getattrs := write("suid"); mode != 0o777 || writes != 1 || getattrs != 0 {
		t.Errorf("suid file: cached mode %o after %d WRITEs and %d GETATTRs, want 777, 1, 0", mode, writes, getattrs)
	}
	var st unix.Stat_t
	if unix.Stat(filepath.Join(ts.dir, "suid"), &st); st.Mode&0o7777 != 0o777 {
		t.Errorf("suid file on disk: %o", st.Mode&0o7777)
	}
	if mode, writes, _ := write("plain"); mode != 0o777 || writes != 0 {
		t.Errorf("plain file: mode %o, %d WRITEs before close, want 777 and none", mode, writes)
	}
	if mode, writes, _ := write("sgid-member"); mode != 0o2666 || writes != 0 {
		t.Errorf("set-group-ID file written by a group member: mode %o, %d WRITEs, want 2666 and none", mode, writes)
	}

	id, _ := open("trunc")
	a, _, err := fs.SetAttr(ctx, user, id, SetAttrIn{SetSize: true, Size: 4, KillSetID: true})
	if err != nil || a.Mode&0o7777 != 0o777 {
		t.Errorf("truncation to the same size: mode %o (%v), want 777", a.Mode&0o7777, err)
	}
}
