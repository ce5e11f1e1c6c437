package server

import (
	"math"
	"os"
	"path/filepath"
	"testing"

	"golang.org/x/sys/unix"

	"hushfs/internal/nfs3"
)

// nfstime3 seconds are unsigned 32 bits. Times on the server's disk outside
// them are sent as the nearest time they hold, never wrapped (2^32+5 as 5,
// 1969 as 2106); the largest time a client can send is stored as sent.
func TestTimesBeyondNFSv3(t *testing.T) {
	e := startEnv(t, false)
	c := e.root0()
	root := c.rootFH()
	p := filepath.Join(e.root, "f")
	if err := os.WriteFile(p, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	ts := []unix.Timespec{{Sec: -5, Nsec: 7}, {Sec: 1<<32 + 5, Nsec: 7}}
	if err := unix.UtimesNano(p, ts); err != nil {
		t.Fatal(err)
	}
	fh := c.mustLookup(root, "f")
	a := c.mustGetattr(fh)
	if a.Atime != (nfs3.Time{}) {
		t.Errorf("atime -5 s sent as %+v, want 0", a.Atime)
	}
	if a.Mtime != (nfs3.Time{Seconds: math.MaxUint32, Nseconds: 999_999_999}) {
		t.Errorf("mtime 2^32+5 s sent as %+v, want the largest nfstime3", a.Mtime)
	}
	var r nfs3.SetattrRes
	c.call(nfs3.ProcSetattr, &nfs3.SetattrArgs{Obj: fh, Attr: nfs3.Sattr{
		Atime: nfs3.SetTime{How: nfs3.SetToClientTime, Time: nfs3.Time{Seconds: 1 << 31}},
		Mtime: nfs3.SetTime{How: nfs3.SetToClientTime, Time: nfs3.Time{Seconds: math.MaxUint32}},
	}}, &r)
	wantStatus(t, "SETATTR times", r.Status, nfs3.OK)
	st := lstat(t, p)
	if st.Atim.Sec != 1<<31 || st.Mtim.Sec != math.MaxUint32 {
		t.Errorf("stored atime %d mtime %d, want %d and %d", st.Atim.Sec, st.Mtim.Sec, int64(1<<31), int64(math.MaxUint32))
	}
}
