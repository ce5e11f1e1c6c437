package test

import (
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"golang.org/x/sys/unix"

	"hushfs/test/harness"
)

// TestNFSv3Limits checks, through a hushfs mount of nfs-ganesha and of
// `hushfs serve`, what NFSv3 bounds or leaves to the client: names longer
// than NAME_MAX, set-id bits cleared by an unprivileged write, and times
// NFSv3 cannot carry (pjdfstest */02.t and rename/01.t, chmod/12.t,
// utimensat/09.t).
func TestNFSv3Limits(t *testing.T) {
	requireMountTools(t)
	bin := harness.BuildHushfs(t)
	base := sharedTempDir(t, "hushfs-limits-")
	user := newUnprivileged(t, sharedTempDir(t, "hushfs-asuser-"))
	run := func(t *testing.T, mnt, export string, truncClears bool) {
		for _, tc := range []struct {
			name string
			f    func(*posixCase)
		}{
			{"names", limitNames},
			{"setid", func(c *posixCase) { limitSetID(c, truncClears) }},
			{"times", limitTimes},
		} {
			t.Run(tc.name, func(t *testing.T) {
				c := &posixCase{t: t, m: filepath.Join(mnt, tc.name), d: filepath.Join(export, tc.name), user: user}
				must(t, "mkdir", os.Mkdir(c.m, 0o755))
				tc.f(c)
			})
		}
	}
	t.Run("ganesha", func(t *testing.T) {
		export, mnt := filepath.Join(base, "ganesha-export"), filepath.Join(base, "ganesha-mnt")
		mkdirs(t, export, mnt)
		g := harness.StartGanesha(t, harness.GaneshaOptions{ExportDir: export})
		harness.MountGanesha(t, bin, g, mnt, "allow_other")
		// nfs-ganesha 4.3 clears set-id bits when a non-owner writes,
		// but not when one truncates (SETATTR of the size): that is the
		// server's to do; the client, not the owner, cannot.
		run(t, mnt, export, false)
	})
	t.Run("hushfs-serve", func(t *testing.T) {
		export, mnt := filepath.Join(base, "serve-export"), filepath.Join(base, "serve-mnt")
		mkdirs(t, export, mnt)
		s := harness.StartServe(t, export)
		harness.MountServe(t, bin, s, mnt, "allow_other")
		run(t, mnt, export, true)
	})
}

// limitNames: a name one byte over NAME_MAX is ENAMETOOLONG for every call,
// also where the client's caches could answer (a cached listing).
func limitNames(c *posixCase) {
	t := c.t
	c.write("f", nil)
	if _, err := os.ReadDir(c.m); err != nil {
		t.Fatal(err)
	}
	must(t, "mkdir of a 255-byte name", os.Mkdir(c.mp(strings.Repeat("m", 255)), 0o755))
	long := c.mp(strings.Repeat("x", 256))
	var st unix.Stat_t
	wantErrno(t, "stat", unix.Stat(long, &st), unix.ENAMETOOLONG)
	wantErrno(t, "mkdir", unix.Mkdir(long, 0o755), unix.ENAMETOOLONG)
	wantErrno(t, "create", os.WriteFile(long, nil, 0o644), unix.ENAMETOOLONG)
	wantErrno(t, "unlink", unix.Unlink(long), unix.ENAMETOOLONG)
	wantErrno(t, "rename to", unix.Rename(c.mp("f"), long), unix.ENAMETOOLONG)
	wantErrno(t, "link", unix.Link(c.mp("f"), long), unix.ENAMETOOLONG)
	var sf unix.Statfs_t
	if err := unix.Statfs(c.m, &sf); err != nil || sf.Namelen != 255 {
		t.Errorf("statfs: namelen %d (%v), want 255", sf.Namelen, err)
	}
}

// limitSetID: a user who may write a set-id file but not change its mode
// writes it, and the bits are gone for the writer's fstat right after, on
// the server's disk and through the mount; so for a truncation, where the
// server clears them (truncClears; else only logged).
func limitSetID(c *posixCase, truncClears bool) {
	t := c.t
	must(t, "chmod", os.Chmod(c.m, 0o777))
	for _, mode := range []uint32{0o4777, 0o2777, 0o6777} {
		c.write("f", []byte("data"))
		must(t, "chmod", unix.Chmod(c.mp("f"), mode))
		errno, got := c.user.writeFstat(t, c.mp("f"))
		if errno != 0 || got != 0o777 {
			t.Errorf("write to a %o file by uid %d: %s, fstat right after shows %o; want success and 777", mode, testUID, errnoName(errno), got)
		}
		var st unix.Stat_t
		if err := unix.Stat(c.dp("f"), &st); err != nil || st.Mode&0o7777 != 0o777 {
			t.Errorf("%o file after the write, on disk: %o (%v)", mode, st.Mode&0o7777, err)
		}
		if err := unix.Stat(c.mp("f"), &st); err != nil || st.Mode&0o7777 != 0o777 {
			t.Errorf("%o file after the write, through the mount: %o (%v)", mode, st.Mode&0o7777, err)
		}
		must(t, "unlink", os.Remove(c.mp("f")))
	}
	c.write("t", []byte("data"))
	must(t, "chmod", unix.Chmod(c.mp("t"), 0o4777))
	if got := c.user.run(t, asUserOp{Op: "truncate", Path: c.mp("t")}); got[0] != 0 {
		t.Errorf("truncate of a 4777 file by uid %d: %s", testUID, errnoName(got[0]))
	}
	var st, disk unix.Stat_t
	must(t, "stat", unix.Stat(c.mp("t"), &st))
	must(t, "stat on disk", unix.Stat(c.dp("t"), &disk))
	if st.Size != 0 || st.Mode != disk.Mode {
		t.Errorf("4777 file after truncate by uid %d: size %d, mode %o through the mount, %o on disk", testUID, st.Size, st.Mode&0o7777, disk.Mode&0o7777)
	}
	if !truncClears {
		t.Logf("4777 file after truncate by uid %d: mode %o (the server leaves the bits)", testUID, disk.Mode&0o7777)
	} else if disk.Mode&0o7777 != 0o777 {
		t.Errorf("4777 file after truncate by uid %d: mode %o, want 777", testUID, disk.Mode&0o7777)
	}
}

// limitTimes: a time NFSv3 cannot carry is refused with EOVERFLOW and
// changes nothing; the largest one it carries is stored.
func limitTimes(c *posixCase) {
	t := c.t
	c.write("f", nil)
	must(t, "utimes", unix.UtimesNano(c.mp("f"), []unix.Timespec{{Sec: 1000}, {Sec: 2000}}))
	wantErrno(t, "utimensat to 2^32", unix.UtimesNano(c.mp("f"), []unix.Timespec{{Sec: 1 << 31}, {Sec: 1 << 32}}), unix.EOVERFLOW)
	wantErrno(t, "utimensat to -1", unix.UtimesNano(c.mp("f"), []unix.Timespec{{Sec: -1}, {Sec: 0}}), unix.EOVERFLOW)
	var st unix.Stat_t
	if err := unix.Stat(c.dp("f"), &st); err != nil || st.Atim.Sec != 1000 || st.Mtim.Sec != 2000 {
		t.Errorf("on disk after refused times: atime %d mtime %d (%v), want 1000 2000", st.Atim.Sec, st.Mtim.Sec, err)
	}
	must(t, "utimes", unix.UtimesNano(c.mp("f"), []unix.Timespec{{Sec: 0}, {Sec: math.MaxUint32}}))
	if err := unix.Stat(c.dp("f"), &st); err != nil || st.Atim.Sec != 0 || st.Mtim.Sec != math.MaxUint32 {
		t.Errorf("on disk: atime %d mtime %d (%v), want 0 %d", st.Atim.Sec, st.Mtim.Sec, err, int64(math.MaxUint32))
	}
}
