package test

import (
	"bytes"
	"fmt"
	"os"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

func posixUnlinkOpen(c *posixCase) {
	t := c.t
	c.write("f", []byte("still here"))
	f, err := os.OpenFile(c.mp("f"), os.O_RDWR, 0)
	must(t, "open", err)
	defer f.Close()
	must(t, "unlink while open", os.Remove(c.mp("f")))
	c.absent("f")
	if h := hiddenNames(t, c.d); len(h) != 1 {
		t.Errorf("hidden names on disk while open: %v, want one", h)
	}
	buf := make([]byte, 64)
	n, err := f.ReadAt(buf, 0)
	if string(buf[:n]) != "still here" {
		t.Errorf("read through the open descriptor after unlink: %q, %v", buf[:n], err)
	}
	_, err = f.WriteAt([]byte(" and more"), 10)
	must(t, "write after unlink", err)
	n, _ = f.ReadAt(buf, 0)
	if string(buf[:n]) != "still here and more" {
		t.Errorf("read back after writing to the unlinked file: %q", buf[:n])
	}
	if st, err := f.Stat(); err != nil || st.Size() != 19 {
		t.Errorf("fstat of the unlinked file: %v, %v", st, err)
	}
	must(t, "close", f.Close())
	if h := waitNoHidden(t, c.d); len(h) != 0 {
		t.Errorf("hidden names on disk 5 s after the last close: %v", h)
	}
	ents, err := os.ReadDir(c.m)
	must(t, "readdir", err)
	if len(ents) != 0 {
		t.Errorf("directory through the mount after the last close: %v", ents)
	}

	// A file replaced by rename while open stays readable too.
	c.write("victim", []byte("old content"))
	c.write("new", []byte("new content"))
	v, err := os.Open(c.mp("victim"))
	must(t, "open victim", err)
	defer v.Close()
	must(t, "rename over the open file", os.Rename(c.mp("new"), c.mp("victim")))
	n, _ = v.ReadAt(buf, 0)
	if string(buf[:n]) != "old content" {
		t.Errorf("read through the replaced file's descriptor: %q", buf[:n])
	}
	sameBytes(t, "victim by name", readFile(t, c.mp("victim")), []byte("new content"))
	c.onDisk("victim", []byte("new content"))
	must(t, "close", v.Close())
	if h := waitNoHidden(t, c.d); len(h) != 0 {
		t.Errorf("hidden names on disk after closing the replaced file: %v", h)
	}
}

// waitNoHidden waits up to 5 s for the .nfs* names in dir (on disk) to go
// and returns those left: the kernel releases a closed file after close(2)
// has returned, so the hidden name is removed a moment later.
func waitNoHidden(t *testing.T, dir string) []string {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for {
		h := hiddenNames(t, dir)
		if len(h) == 0 || time.Now().After(deadline) {
			return h
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// tick waits long enough for the server's file system clock to move on.
func tick() { time.Sleep(30 * time.Millisecond) }

func posixTimes(c *posixCase) {
	t := c.t
	c.write("f", []byte("v1"))
	st0 := pxStat(t, c.mp("f"), false)
	dir0 := pxStat(t, c.m, false)
	tick()

	// A write moves mtime and ctime.
	f, err := os.OpenFile(c.mp("f"), os.O_WRONLY, 0)
	must(t, "open", err)
	_, err = f.WriteAt([]byte("v2"), 0)
	must(t, "write", err)
	must(t, "close", f.Close())
	st1 := pxStat(t, c.mp("f"), false)
	if !tsOf(st1.Mtim).After(tsOf(st0.Mtim)) || !tsOf(st1.Ctim).After(tsOf(st0.Ctim)) {
		t.Errorf("write: mtime %v -> %v, ctime %v -> %v; both should move", tsOf(st0.Mtim), tsOf(st1.Mtim), tsOf(st0.Ctim), tsOf(st1.Ctim))
	}
	if d := pxStat(t, c.dp("f"), false); d.Mtim != st1.Mtim || d.Ctim != st1.Ctim {
		t.Errorf("times through the mount %v/%v differ from disk %v/%v", tsOf(st1.Mtim), tsOf(st1.Ctim), tsOf(d.Mtim), tsOf(d.Ctim))
	}
	tick()

	// chmod moves ctime only.
	must(t, "chmod", os.Chmod(c.mp("f"), 0o600))
	st2 := pxStat(t, c.mp("f"), false)
	if !tsOf(st2.Ctim).After(tsOf(st1.Ctim)) || st2.Mtim != st1.Mtim || st2.Mode&0o777 != 0o600 {
		t.Errorf("chmod: ctime %v -> %v, mtime %v -> %v, mode %o", tsOf(st1.Ctim), tsOf(st2.Ctim), tsOf(st1.Mtim), tsOf(st2.Mtim), st2.Mode&0o777)
	}

	// utimensat: set atime, leave mtime (UTIME_OMIT).
	at := time.Date(2001, 2, 3, 4, 5, 6, 123456789, time.UTC)
	ts := []unix.Timespec{unix.NsecToTimespec(at.UnixNano()), {Nsec: unix.UTIME_OMIT}}
	must(t, "utimensat atime, UTIME_OMIT", unix.UtimesNanoAt(unix.AT_FDCWD, c.mp("f"), ts, 0))
	for where, st := range map[string]unix.Stat_t{"mount": pxStat(t, c.mp("f"), false), "disk": pxStat(t, c.dp("f"), false)} {
		if !tsOf(st.Atim).Equal(at) || st.Mtim != st2.Mtim {
			t.Errorf("%s after setting atime with UTIME_OMIT mtime: atime %v mtime %v, want %v and %v", where, tsOf(st.Atim), tsOf(st.Mtim), at, tsOf(st2.Mtim))
		}
	}
	tick()
	// UTIME_NOW for mtime, atime left.
	before := time.Now()
	ts = []unix.Timespec{{Nsec: unix.UTIME_OMIT}, {Nsec: unix.UTIME_NOW}}
	must(t, "utimensat UTIME_OMIT, UTIME_NOW", unix.UtimesNanoAt(unix.AT_FDCWD, c.mp("f"), ts, 0))
	for where, st := range map[string]unix.Stat_t{"mount": pxStat(t, c.mp("f"), false), "disk": pxStat(t, c.dp("f"), false)} {
		m := tsOf(st.Mtim)
		if !tsOf(st.Atim).Equal(at) || m.Before(before.Add(-time.Second)) || m.After(time.Now().Add(time.Second)) {
			t.Errorf("%s after UTIME_NOW mtime: atime %v (want %v), mtime %v (want about %v)", where, tsOf(st.Atim), at, m, before)
		}
	}
	// Both explicit, to the nanosecond, and a time before 1970 is not
	// asked for: NFSv3 times are unsigned.
	mt := time.Date(2030, 12, 31, 23, 59, 58, 999999999, time.UTC)
	ts = []unix.Timespec{unix.NsecToTimespec(at.UnixNano()), unix.NsecToTimespec(mt.UnixNano())}
	must(t, "utimensat both", unix.UtimesNanoAt(unix.AT_FDCWD, c.mp("f"), ts, 0))
	for where, st := range map[string]unix.Stat_t{"mount": pxStat(t, c.mp("f"), false), "disk": pxStat(t, c.dp("f"), false)} {
		if !tsOf(st.Atim).Equal(at) || !tsOf(st.Mtim).Equal(mt) {
			t.Errorf("%s after setting both: atime %v mtime %v", where, tsOf(st.Atim), tsOf(st.Mtim))
		}
	}
	// utimes(NULL): both now.
	tick()
	before = time.Now()
	must(t, "utimensat NULL", unix.UtimesNanoAt(unix.AT_FDCWD, c.mp("f"), nil, 0))
	st := pxStat(t, c.mp("f"), false)
	if tsOf(st.Mtim).Before(before.Add(-time.Second)) || tsOf(st.Atim).Before(before.Add(-time.Second)) {
		t.Errorf("after utimes(NULL): atime %v mtime %v, want about %v", tsOf(st.Atim), tsOf(st.Mtim), before)
	}

	// Creating an entry moves the directory's mtime.
	c.write("g", nil)
	dir1 := pxStat(t, c.m, false)
	if !tsOf(dir1.Mtim).After(tsOf(dir0.Mtim)) {
		t.Errorf("directory mtime after creating entries: %v -> %v", tsOf(dir0.Mtim), tsOf(dir1.Mtim))
	}
	if d := pxStat(t, c.d, false); d.Mtim != dir1.Mtim {
		t.Errorf("directory mtime through the mount %v, on disk %v", tsOf(dir1.Mtim), tsOf(d.Mtim))
	}
}

func posixMkdirRmdir(c *posixCase) {
	t := c.t
	must(t, "mkdir", unix.Mkdir(c.mp("d"), 0o750))
	st := pxStat(t, c.mp("d"), false)
	if st.Mode&unix.S_IFMT != unix.S_IFDIR || st.Mode&0o777 != 0o750&^uint32(currentUmask()) || st.Nlink != 2 {
		t.Errorf("new directory: mode %o nlink %d", st.Mode, st.Nlink)
	}
	if d := pxStat(t, c.dp("d"), false); d.Mode != st.Mode || d.Ino != st.Ino {
		t.Errorf("on disk: mode %o ino %d; through the mount mode %o ino %d", d.Mode, d.Ino, st.Mode, st.Ino)
	}
	must(t, "mkdir -p", os.MkdirAll(c.mp("d", "e", "f", "g"), 0o755))
	if fi, err := os.Stat(c.dp("d", "e", "f", "g")); err != nil || !fi.IsDir() {
		t.Errorf("nested directory on disk: %v", err)
	}
	for _, p := range []string{"d/e/f/g", "d/e/f", "d/e", "d"} {
		must(t, "rmdir "+p, unix.Rmdir(c.mp(p)))
	}
	c.absent("d")
	// The name is free again, at once.
	must(t, "mkdir again", unix.Mkdir(c.mp("d"), 0o755))
	must(t, "rmdir again", unix.Rmdir(c.mp("d")))
	c.absent("d")
}

// currentUmask reads the process's umask without changing it for long.
func currentUmask() int {
	m := unix.Umask(0)
	unix.Umask(m)
	return m
}

func posixMknod(c *posixCase) {
	t := c.t
	must(t, "mkfifo", unix.Mkfifo(c.mp("fifo"), 0o640))
	for where, st := range map[string]unix.Stat_t{"mount": pxStat(t, c.mp("fifo"), true), "disk": pxStat(t, c.dp("fifo"), true)} {
		if st.Mode&unix.S_IFMT != unix.S_IFIFO || st.Mode&0o777 != 0o640&^uint32(currentUmask()) {
			t.Errorf("fifo on %s: mode %o", where, st.Mode)
		}
	}
	must(t, "mknod socket", unix.Mknod(c.mp("sock"), unix.S_IFSOCK|0o600, 0))
	if st := pxStat(t, c.dp("sock"), true); st.Mode&unix.S_IFMT != unix.S_IFSOCK {
		t.Errorf("socket node on disk: mode %o", st.Mode)
	}
	dev := unix.Mkdev(1, 3)
	must(t, "mknod char device", unix.Mknod(c.mp("null"), unix.S_IFCHR|0o600, int(dev)))
	for where, st := range map[string]unix.Stat_t{"mount": pxStat(t, c.mp("null"), true), "disk": pxStat(t, c.dp("null"), true)} {
		if st.Mode&unix.S_IFMT != unix.S_IFCHR || st.Rdev != dev {
			t.Errorf("device node on %s: mode %o rdev %d:%d, want 1:3", where, st.Mode, unix.Major(st.Rdev), unix.Minor(st.Rdev))
		}
	}
	for _, n := range []string{"fifo", "sock", "null"} {
		must(t, "unlink "+n, unix.Unlink(c.mp(n)))
		c.absent(n)
	}
}

func posixChmodChown(c *posixCase) {
	t := c.t
	c.write("f", []byte("owned"))
	for _, mode := range []uint32{0o751, 0o600, 0o4755, 0o2770, 0o1777, 0} {
		must(t, fmt.Sprintf("chmod %o", mode), unix.Chmod(c.mp("f"), mode))
		for where, st := range map[string]unix.Stat_t{"mount": pxStat(t, c.mp("f"), false), "disk": pxStat(t, c.dp("f"), false)} {
			if st.Mode&0o7777 != mode {
				t.Errorf("chmod %o: mode on %s %o", mode, where, st.Mode&0o7777)
			}
		}
	}
	must(t, "chown", os.Chown(c.mp("f"), 1000, 1001))
	must(t, "chown gid only", os.Chown(c.mp("f"), -1, 2000))
	for where, st := range map[string]unix.Stat_t{"mount": pxStat(t, c.mp("f"), false), "disk": pxStat(t, c.dp("f"), false)} {
		if st.Uid != 1000 || st.Gid != 2000 {
			t.Errorf("owner on %s: %d:%d, want 1000:2000", where, st.Uid, st.Gid)
		}
	}
	// The owner of a symbolic link itself (lchown).
	must(t, "symlink", os.Symlink("f", c.mp("l")))
	must(t, "lchown", os.Lchown(c.mp("l"), 3000, 3000))
	if st := pxStat(t, c.dp("l"), true); st.Uid != 3000 || st.Gid != 3000 {
		t.Errorf("link owner on disk: %d:%d", st.Uid, st.Gid)
	}
	if st := pxStat(t, c.dp("f"), true); st.Uid != 1000 {
		t.Errorf("lchown changed the target: owner %d", st.Uid)
	}
	// Root may still read a file whose mode allows nobody.
	sameBytes(t, "root reading a mode 0 file", readFile(t, c.mp("f")), []byte("owned"))
}

func posixStatfs(c *posixCase) {
	t := c.t
	var m, d unix.Statfs_t
	must(t, "statfs mount", unix.Statfs(c.m, &m))
	must(t, "statfs disk", unix.Statfs(c.d, &d))
	const fuseMagic = 0x65735546
	if m.Type != fuseMagic {
		t.Errorf("f_type %#x, want FUSE's %#x", m.Type, fuseMagic)
	}
	if m.Bsize <= 0 || m.Blocks == 0 || m.Bfree > m.Blocks || m.Bavail > m.Bfree || m.Files == 0 || m.Ffree > m.Files || m.Namelen != 255 {
		t.Errorf("statfs through the mount: %+v", m)
	}
	total := func(s *unix.Statfs_t, blocks uint64) float64 { return float64(blocks) * float64(s.Frsize) }
	near := func(what string, got, want, tolerance float64) {
		if want == 0 || got < want*(1-tolerance) || got > want*(1+tolerance) {
			t.Errorf("%s through the mount %.0f, on disk %.0f", what, got, want)
		}
	}
	near("total bytes", total(&m, m.Blocks), total(&d, d.Blocks), 0.001)
	near("free bytes", total(&m, m.Bfree), total(&d, d.Bfree), 0.02)
	near("total inodes", float64(m.Files), float64(d.Files), 0.001)
}

func posixExcl(c *posixCase) {
	t := c.t
	c.write("exists", []byte("keep"))
	_, err := os.OpenFile(c.mp("exists"), os.O_RDWR|os.O_CREATE|os.O_EXCL, 0o644)
	wantErrno(t, "O_EXCL create of an existing file", err, unix.EEXIST)
	c.onDisk("exists", []byte("keep"))
	must(t, "symlink", os.Symlink("nowhere", c.mp("dangling")))
	_, err = os.OpenFile(c.mp("dangling"), os.O_RDWR|os.O_CREATE|os.O_EXCL, 0o644)
	wantErrno(t, "O_EXCL create through a dangling link", err, unix.EEXIST)
	c.absent("nowhere")

	before := time.Now()
	f, err := os.OpenFile(c.mp("new"), os.O_RDWR|os.O_CREATE|os.O_EXCL, 0o640)
	must(t, "O_EXCL create", err)
	_, err = f.Write([]byte("exclusive"))
	must(t, "write", err)
	must(t, "close", f.Close())
	c.onDisk("new", []byte("exclusive"))
	// The exclusive create's verifier must not show in the times, and the
	// mode is what was asked for.
	for where, st := range map[string]unix.Stat_t{"mount": pxStat(t, c.mp("new"), false), "disk": pxStat(t, c.dp("new"), false)} {
		if st.Mode&0o777 != 0o640&^uint32(currentUmask()) {
			t.Errorf("mode on %s: %o", where, st.Mode&0o777)
		}
		for _, ts := range []unix.Timespec{st.Atim, st.Mtim} {
			if d := tsOf(ts).Sub(before); d < -2*time.Second || d > time.Minute {
				t.Errorf("time on %s %v of a file created at %v", where, tsOf(ts), before)
			}
		}
	}
	_, err = os.OpenFile(c.mp("new"), os.O_RDWR|os.O_CREATE|os.O_EXCL, 0o640)
	wantErrno(t, "second O_EXCL create", err, unix.EEXIST)
}

func posixAppend(c *posixCase) {
	t := c.t
	c.write("log", []byte("0123"))
	f, err := os.OpenFile(c.mp("log"), os.O_WRONLY|os.O_APPEND, 0)
	must(t, "open O_APPEND", err)
	defer f.Close()
	for _, s := range []string{"ab", "cd"} {
		_, err := f.Write([]byte(s))
		must(t, "append", err)
	}
	// Two appending descriptors interleave without overwriting each other.
	g, err := os.OpenFile(c.mp("log"), os.O_WRONLY|os.O_APPEND, 0)
	must(t, "open O_APPEND", err)
	defer g.Close()
	for i, s := range []string{"x", "y", "z"} {
		w := f
		if i%2 == 1 {
			w = g
		}
		_, err := w.Write([]byte(s))
		must(t, "append", err)
	}
	// A seek does not move where an append goes.
	_, err = f.Seek(0, 0)
	must(t, "seek", err)
	_, err = f.Write([]byte("!"))
	must(t, "append after seek", err)
	must(t, "close", f.Close())
	must(t, "close", g.Close())
	want := []byte("0123abcdxyz!")
	sameBytes(t, "appended file", readFile(t, c.mp("log")), want)
	c.onDisk("log", want)
}

func posixDirNlink(c *posixCase) {
	t := c.t
	nlink := func(rel string) (uint64, uint64) {
		return pxStat(t, c.mp(rel), false).Nlink, pxStat(t, c.dp(rel), false).Nlink
	}
	check := func(step string, want uint64) {
		t.Helper()
		m, d := nlink("p")
		if m != want || d != want {
			t.Errorf("%s: nlink through the mount %d, on disk %d, want %d", step, m, d, want)
		}
	}
	must(t, "mkdir p", os.Mkdir(c.mp("p"), 0o755))
	check("new directory", 2)
	must(t, "mkdir p/a", os.Mkdir(c.mp("p", "a"), 0o755))
	must(t, "mkdir p/b", os.Mkdir(c.mp("p", "b"), 0o755))
	check("two subdirectories", 4)
	c.write("p/f", nil)
	check("and a file", 4)
	must(t, "rmdir p/a", unix.Rmdir(c.mp("p", "a")))
	check("one subdirectory removed", 3)
	must(t, "rename p/b out", os.Rename(c.mp("p", "b"), c.mp("q")))
	check("the other renamed away", 2)
	if m, d := nlink("."); m != d || m != 4 {
		t.Errorf("the case directory (p and q inside): nlink through the mount %d, on disk %d, want 4", m, d)
	}
}

func posixData(c *posixCase) {
	t := c.t
	// Many write sizes, unaligned, across the 1 MiB transfer size.
	data := pattern(3<<20+17, 9)
	f, err := os.Create(c.mp("data"))
	must(t, "create", err)
	defer f.Close()
	for off, i := 0, 0; off < len(data); i++ {
		n := min([]int{1, 7, 4096, 65537, 1 << 20, 333333}[i%6], len(data)-off)
		_, err := f.Write(data[off : off+n])
		must(t, "write", err)
		off += n
	}
	must(t, "close", f.Close())
	c.onDisk("data", data)
	sameBytes(t, "read back", readFile(t, c.mp("data")), data)

	// Overwrites in the middle, then read back before and after close.
	g, err := os.OpenFile(c.mp("data"), os.O_RDWR, 0)
	must(t, "open", err)
	defer g.Close()
	patch := pattern(100000, 10)
	for _, off := range []int{0, 1<<20 - 50000, 2<<20 + 3, len(data) - len(patch)} {
		_, err := g.WriteAt(patch, int64(off))
		must(t, "pwrite", err)
		copy(data[off:], patch)
	}
	got := make([]byte, len(data)+10)
	n, _ := g.ReadAt(got, 0)
	sameBytes(t, "read through the descriptor that wrote", got[:n], data)
	must(t, "close", g.Close())
	c.onDisk("data", data)

	// Close-to-open: a change made on the server is seen at the next open,
	// even with the same size and the old data in the page cache.
	c.write("cto", []byte("aaaa"))
	sameBytes(t, "cto", readFile(t, c.mp("cto")), []byte("aaaa"))
	tick()
	must(t, "write on disk", os.WriteFile(c.dp("cto"), []byte("bbbb"), 0o644))
	sameBytes(t, "cto after a change on the server", readFile(t, c.mp("cto")), []byte("bbbb"))
	// And a file made on the server appears.
	must(t, "write on disk", os.WriteFile(c.dp("fromserver"), []byte("hello from the server"), 0o644))
	sameBytes(t, "file made on the server", readFile(t, c.mp("fromserver")), []byte("hello from the server"))

	// fsync with data pending reaches the disk before close.
	h, err := os.Create(c.mp("synced"))
	must(t, "create", err)
	defer h.Close()
	payload := bytes.Repeat([]byte("durable "), 50000)
	_, err = h.Write(payload)
	must(t, "write", err)
	must(t, "fsync", h.Sync())
	c.onDisk("synced", payload)
	must(t, "close", h.Close())
}
