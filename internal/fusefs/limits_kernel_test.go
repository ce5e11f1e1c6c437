package fusefs

import (
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"golang.org/x/sys/unix"
)

// utimensat of a time NFSv3 cannot carry fails with EOVERFLOW and changes
// nothing; the largest time it carries is stored as given.
func TestKernelTimesBeyondNFSv3(t *testing.T) {
	e, mnt := mountKernel(t, envOpts{})
	p := filepath.Join(mnt, "f")
	if err := os.WriteFile(p, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := unix.UtimesNano(p, []unix.Timespec{{Sec: 1000}, {Sec: 2000}}); err != nil {
		t.Fatal(err)
	}
	for _, ts := range [][]unix.Timespec{
		{{Sec: 1 << 31}, {Sec: 1 << 32}}, // pjdfstest utimensat/09.t
		{{Sec: -1}, {Nsec: unix.UTIME_OMIT}},
		{{Nsec: unix.UTIME_OMIT}, {Sec: 1 << 40}},
	} {
		if err := unix.UtimesNano(p, ts); err != unix.EOVERFLOW {
			t.Errorf("utimensat(%d, %d): %v, want EOVERFLOW", ts[0].Sec, ts[1].Sec, err)
		}
	}
	var st unix.Stat_t
	if err := unix.Stat(filepath.Join(e.dir, "f"), &st); err != nil || st.Atim.Sec != 1000 || st.Mtim.Sec != 2000 {
		t.Fatalf("on disk after refused times: atime %d mtime %d (%v), want 1000 2000", st.Atim.Sec, st.Mtim.Sec, err)
	}
	if err := unix.UtimesNano(p, []unix.Timespec{{Sec: 1 << 31}, {Sec: math.MaxUint32}}); err != nil {
		t.Fatal(err)
	}
	unix.Stat(p, &st)
	if st.Atim.Sec != 1<<31 || st.Mtim.Sec != math.MaxUint32 {
		t.Errorf("through the mount: atime %d mtime %d, want %d %d", st.Atim.Sec, st.Mtim.Sec, int64(1<<31), int64(math.MaxUint32))
	}
}

// A name longer than NAME_MAX is ENAMETOOLONG for every call, also in a
// directory whose listing is cached (pjdfstest */02.t, rename/01.t).
func TestKernelNameTooLong(t *testing.T) {
	_, mnt := mountKernel(t, envOpts{})
	d := filepath.Join(mnt, "d")
	if err := os.Mkdir(d, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(d, "f"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := os.ReadDir(d); err != nil { // the listing is cached now
		t.Fatal(err)
	}
	max := filepath.Join(d, strings.Repeat("m", 255))
	if err := os.Mkdir(max, 0o755); err != nil {
		t.Fatalf("mkdir of a 255-byte name: %v", err)
	}
	long := filepath.Join(d, strings.Repeat("x", 256))
	var st unix.Stat_t
	want := func(what string, err error) {
		t.Helper()
		if err != unix.ENAMETOOLONG {
			t.Errorf("%s of a 256-byte name: %v, want ENAMETOOLONG", what, err)
		}
	}
	want("stat", unix.Stat(long, &st))
	want("lstat", unix.Lstat(long, &st))
	want("mkdir", unix.Mkdir(long, 0o755))
	want("rmdir", unix.Rmdir(long))
	want("unlink", unix.Unlink(long))
	_, err := unix.Open(long, unix.O_CREAT|unix.O_WRONLY, 0o644)
	want("create", err)
	want("mknod", unix.Mknod(long, unix.S_IFIFO|0o644, 0))
	want("symlink", unix.Symlink("f", long))
	want("link", unix.Link(filepath.Join(d, "f"), long))
	want("rename to", unix.Rename(filepath.Join(d, "f"), long))
	want("rename from", unix.Rename(long, filepath.Join(d, "g")))
	var sf unix.Statfs_t
	if err := unix.Statfs(mnt, &sf); err != nil || sf.Namelen != 255 {
		t.Errorf("statfs: namelen %d (%v), want 255", sf.Namelen, err)
	}
}
