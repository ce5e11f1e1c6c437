package client

import (
	"math"
	"os"
	"path/filepath"
	"syscall"
	"testing"

	"golang.org/x/sys/unix"
)

// A time NFSv3 cannot carry (before 1970, or from 2^32 s on) is refused
// with EOVERFLOW and no RPC, never sent as another time; the largest time
// it can carry is stored as given.
func TestSetTimeBeyondNFSv3(t *testing.T) {
	ts := startServer(t)
	p := filepath.Join(ts.dir, "f")
	os.WriteFile(p, nil, 0o666)
	os.Chmod(p, 0o666)
	os.Chown(p, 1000, 1000) // the test server squashes root: the owner sets times
	owner := &Cred{UID: 1000, GID: 1000}
	if err := unix.UtimesNano(p, []unix.Timespec{{Sec: 1000}, {Sec: 2000}}); err != nil {
		t.Fatal(err)
	}
	fs := ts.mount(t, "")
	ctx := ctxT(t)
	f, err := fs.Lookup(ctx, root, RootID, "f")
	if err != nil {
		t.Fatal(err)
	}
	set := func(sec int64) SetTime { return SetTime{How: TimeSet, Time: Timespec{Sec: sec}} }
	before := fs.Stats().Snapshot().Total()
	for _, in := range []SetAttrIn{
		{Mtime: set(1 << 32)},
		{Atime: set(1 << 31), Mtime: set(1 << 32)},
		{Atime: set(-1)},
		{Mtime: set(math.MinInt64)},
		{SetMode: true, Mode: 0o600, Atime: set(1 << 40)},
	} {
		if _, _, err := fs.SetAttr(ctx, owner, f.Node, in); Errno(err) != syscall.EOVERFLOW {
			t.Errorf("SetAttr %+v: %v, want EOVERFLOW", in, err)
		}
	}
	if n := fs.Stats().Snapshot().Total() - before; n != 0 {
		t.Errorf("refused times cost %d RPCs", n)
	}
	var st unix.Stat_t
	unix.Stat(p, &st)
	if st.Atim.Sec != 1000 || st.Mtim.Sec != 2000 || st.Mode&0o777 != 0o666 {
		t.Fatalf("after refused changes: atime %d mtime %d mode %o, want 1000 2000 666", st.Atim.Sec, st.Mtim.Sec, st.Mode&0o777)
	}
	a, _, err := fs.SetAttr(ctx, owner, f.Node, SetAttrIn{Atime: set(0), Mtime: set(math.MaxUint32)})
	if err != nil {
		t.Fatal(err)
	}
	unix.Stat(p, &st)
	if st.Atim.Sec != 0 || st.Mtim.Sec != math.MaxUint32 || a.Mtime.Sec != math.MaxUint32 {
		t.Fatalf("stored atime %d mtime %d (reported %d), want 0 and %d", st.Atim.Sec, st.Mtim.Sec, a.Mtime.Sec, int64(math.MaxUint32))
	}
}
