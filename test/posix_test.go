package test

import (
	"fmt"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"hushfs/test/harness"
)

// TestPOSIX runs one POSIX behaviour suite through a hushfs mount three
// times: against nfs-ganesha over NFSv3 and over NFSv4.1 (in its
// namespace; the mount daemon's sockets are there too) and against
// `hushfs serve`. Every result is checked through the mount and, where it
// means something, on the server's disk.
func TestPOSIX(t *testing.T) {
	requireMountTools(t)
	bin := harness.BuildHushfs(t)
	base := sharedTempDir(t, "hushfs-posix-")

	t.Run("ganesha", func(t *testing.T) {
		export, mnt := filepath.Join(base, "ganesha-export"), filepath.Join(base, "ganesha-mnt")
		mkdirs(t, export, mnt)
		g := harness.StartGanesha(t, harness.GaneshaOptions{ExportDir: export})
		harness.MountGanesha(t, bin, g, mnt, "allow_other")
		runPOSIXSuite(t, mnt, export)
	})
	t.Run("ganesha-v4.1", func(t *testing.T) {
		export, mnt := filepath.Join(base, "ganesha-v41-export"), filepath.Join(base, "ganesha-v41-mnt")
		mkdirs(t, export, mnt)
		g := harness.StartGanesha(t, harness.GaneshaOptions{ExportDir: export, NFSv4: true})
		harness.MountGaneshaV41(t, bin, g, mnt, "allow_other")
		runPOSIXSuite(t, mnt, export)
	})
	t.Run("hushfs-serve", func(t *testing.T) {
		export, mnt := filepath.Join(base, "serve-export"), filepath.Join(base, "serve-mnt")
		mkdirs(t, export, mnt)
		s := harness.StartServe(t, export)
		harness.MountServe(t, bin, s, mnt, "allow_other")
		runPOSIXSuite(t, mnt, export)
	})
	// Over v4.1 `hushfs serve` grants delegations: what a close under a
	// write delegation leaves unsent shows on the server's disk.
	t.Run("hushfs-serve-v4.1", func(t *testing.T) {
		export, mnt := filepath.Join(base, "serve-v41-export"), filepath.Join(base, "serve-v41-mnt")
		mkdirs(t, export, mnt)
		s := harness.StartServe(t, export)
		_, port, _ := net.SplitHostPort(s.NFSAddr)
		harness.StartMount(t, harness.MountSpec{Bin: bin, Server: "127.0.0.1", Export: s.ExportPath,
			Dir: mnt, Options: "vers=4.1,allow_other,port=" + port})
		runPOSIXSuite(t, mnt, export)
	})
}

// posixCase is one part of the suite: m is its own directory through the
// mount, d the same directory on the server's disk.
type posixCase struct {
	t    *testing.T
	m, d string
	user *unprivileged
}

func (c *posixCase) mp(name ...string) string {
	return filepath.Join(append([]string{c.m}, name...)...)
}
func (c *posixCase) dp(name ...string) string {
	return filepath.Join(append([]string{c.d}, name...)...)
}

// write creates a file through the mount with the given content.
func (c *posixCase) write(name string, data []byte) {
	c.t.Helper()
	must(c.t, "write "+name, os.WriteFile(c.mp(name), data, 0o644))
}

// onDisk checks a file's content on the server's disk.
func (c *posixCase) onDisk(name string, want []byte) {
	c.t.Helper()
	got, err := os.ReadFile(c.dp(name))
	if err != nil {
		c.t.Errorf("on disk: %v", err)
		return
	}
	sameBytes(c.t, "on disk: "+name, got, want)
}

// absent checks that a name is gone both through the mount and on disk.
func (c *posixCase) absent(name string) {
	c.t.Helper()
	var st unix.Stat_t
	wantErrno(c.t, "lstat "+name+" through the mount", unix.Lstat(c.mp(name), &st), unix.ENOENT)
	wantErrno(c.t, "lstat "+name+" on disk", unix.Lstat(c.dp(name), &st), unix.ENOENT)
}

// runPOSIXSuite runs the suite on a mounted export: mnt is the mount point,
// exportDir the exported directory on the server's disk. Some cases run
// operations as uid 1000: the mount must allow_other, and uid 1000 must be
// able to reach mnt.
func runPOSIXSuite(t *testing.T, mnt, exportDir string) {
	user := newUnprivileged(t, sharedTempDir(t, "hushfs-asuser-"))
	cases := []struct {
		name string
		f    func(*posixCase)
	}{
		{"errors", posixErrors},
		{"eacces-nonroot", posixEACCES},
		{"eacces-cached-path", posixEACCESCached},
		{"hard-links", posixHardLinks},
		{"symlinks", posixSymlinks},
		{"rename", posixRename},
		{"sparse-and-truncate", posixSparseTruncate},
		{"write-at-4GiB", posixWrite4G},
		{"readdir-10000", posixBigDir},
		{"unlink-while-open", posixUnlinkOpen},
		{"times", posixTimes},
		{"mkdir-rmdir", posixMkdirRmdir},
		{"mknod", posixMknod},
		{"chmod-chown", posixChmodChown},
		{"statfs", posixStatfs},
		{"o-excl", posixExcl},
		{"o-append", posixAppend},
		{"dir-nlink", posixDirNlink},
		{"data-and-close-to-open", posixData},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			c := &posixCase{t: t, m: filepath.Join(mnt, tc.name), d: filepath.Join(exportDir, tc.name), user: user}
			// Made on the server's disk, as another client would: what the
			// cases make there is then seen through the mount at once. In a
			// directory the mount made itself it would be seen once the
			// directory is revalidated (negtimeo): the mount knows every
			// name there as of its MKDIR and its own changes since.
			must(t, "mkdir on disk", os.Mkdir(c.d, 0o755))
			tc.f(c)
		})
	}
}

func posixErrors(c *posixCase) {
	t := c.t
	c.write("file", []byte("x"))
	must(t, "mkdir", os.Mkdir(c.mp("dir"), 0o755))
	must(t, "mkdir", os.Mkdir(c.mp("full"), 0o755))
	c.write("full/f", nil)
	var st unix.Stat_t

	// ENOENT
	wantErrno(t, "stat missing", unix.Stat(c.mp("missing"), &st), unix.ENOENT)
	wantErrno(t, "stat missing/x", unix.Stat(c.mp("missing", "x"), &st), unix.ENOENT)
	_, err := os.Open(c.mp("missing"))
	wantErrno(t, "open missing", err, unix.ENOENT)
	wantErrno(t, "unlink missing", unix.Unlink(c.mp("missing")), unix.ENOENT)
	wantErrno(t, "rmdir missing", unix.Rmdir(c.mp("missing")), unix.ENOENT)
	wantErrno(t, "rename missing", unix.Rename(c.mp("missing"), c.mp("other")), unix.ENOENT)
	wantErrno(t, "link missing", unix.Link(c.mp("missing"), c.mp("other")), unix.ENOENT)
	_, err = os.Readlink(c.mp("missing"))
	wantErrno(t, "readlink missing", err, unix.ENOENT)
	wantErrno(t, "create in missing dir", os.WriteFile(c.mp("missing", "f"), nil, 0o644), unix.ENOENT)
	wantErrno(t, "chmod missing", unix.Chmod(c.mp("missing"), 0o644), unix.ENOENT)

	// EEXIST
	wantErrno(t, "mkdir over a directory", unix.Mkdir(c.mp("dir"), 0o755), unix.EEXIST)
	wantErrno(t, "mkdir over a file", unix.Mkdir(c.mp("file"), 0o755), unix.EEXIST)
	wantErrno(t, "link over a file", unix.Link(c.mp("file"), c.mp("dir")), unix.EEXIST)
	wantErrno(t, "symlink over a file", unix.Symlink("target", c.mp("file")), unix.EEXIST)
	wantErrno(t, "mkfifo over a file", unix.Mkfifo(c.mp("file"), 0o644), unix.EEXIST)

	// ENOTEMPTY
	err = unix.Rmdir(c.mp("full"))
	wantErrno(t, "rmdir non-empty", err, unix.ENOTEMPTY, unix.EEXIST)
	t.Logf("rmdir of a non-empty directory: %s", errnoName(errnoOf(err)))
	if _, err := os.Stat(c.dp("full", "f")); err != nil {
		t.Errorf("on disk after the failed rmdir: %v", err)
	}

	// EISDIR
	_, err = os.OpenFile(c.mp("dir"), os.O_WRONLY, 0)
	wantErrno(t, "open a directory for writing", err, unix.EISDIR)
	wantErrno(t, "unlink a directory", unix.Unlink(c.mp("dir")), unix.EISDIR)
	wantErrno(t, "truncate a directory", unix.Truncate(c.mp("dir"), 0), unix.EISDIR)
	wantErrno(t, "rename a file over a directory", unix.Rename(c.mp("file"), c.mp("dir")), unix.EISDIR)

	// ENOTDIR
	wantErrno(t, "stat file/x", unix.Stat(c.mp("file", "x"), &st), unix.ENOTDIR)
	wantErrno(t, "mkdir file/x", unix.Mkdir(c.mp("file", "x"), 0o755), unix.ENOTDIR)
	wantErrno(t, "rmdir a file", unix.Rmdir(c.mp("file")), unix.ENOTDIR)
	wantErrno(t, "rename a directory over a file", unix.Rename(c.mp("dir"), c.mp("file")), unix.ENOTDIR)
	_, err = os.OpenFile(c.mp("file"), os.O_RDONLY|unix.O_DIRECTORY, 0)
	wantErrno(t, "open a file O_DIRECTORY", err, unix.ENOTDIR)
	_, err = os.ReadDir(c.mp("file"))
	wantErrno(t, "readdir a file", err, unix.ENOTDIR)

	// Nothing above changed anything.
	c.onDisk("file", []byte("x"))
	if fi, err := os.Stat(c.dp("dir")); err != nil || !fi.IsDir() {
		t.Errorf("dir on disk: %v %v", fi, err)
	}
	names, _ := os.ReadDir(c.d)
	var got []string
	for _, n := range names {
		got = append(got, n.Name())
	}
	if strings.Join(got, ",") != "dir,file,full" {
		t.Errorf("on disk after the failures: %v, want dir,file,full", got)
	}
}

func posixEACCES(c *posixCase) {
	t := c.t
	c.write("ro", []byte("readable"))
	must(t, "chmod", os.Chmod(c.mp("ro"), 0o644))
	c.write("secret", []byte("root only"))
	must(t, "chmod", os.Chmod(c.mp("secret"), 0o600))
	must(t, "mkdir", os.Mkdir(c.mp("private"), 0o700))
	must(t, "write on disk", os.WriteFile(c.dp("private", "ondisk"), []byte("hidden"), 0o644))
	must(t, "mkdir", os.Mkdir(c.mp("open"), 0o777))
	must(t, "chmod", os.Chmod(c.mp("open"), 0o777))
	must(t, "mkdir", os.Mkdir(c.mp("empty"), 0o755))
	// One process of uid 1000 runs the operations in order: what it may
	// do, then what it may not, then creating in a directory it may
	// write to.
	type expect struct {
		op   asUserOp
		want syscall.Errno
	}
	expects := []expect{
		{asUserOp{Op: "read", Path: c.mp("ro")}, 0},
		{asUserOp{Op: "stat", Path: c.mp("secret")}, 0},
		{asUserOp{Op: "write", Path: c.mp("ro")}, unix.EACCES},
		{asUserOp{Op: "read", Path: c.mp("secret")}, unix.EACCES},
		{asUserOp{Op: "truncate", Path: c.mp("ro")}, unix.EACCES},
		{asUserOp{Op: "utimes-now", Path: c.mp("ro")}, unix.EACCES},
		{asUserOp{Op: "create", Path: c.mp("new")}, unix.EACCES},
		{asUserOp{Op: "mkdir", Path: c.mp("newdir")}, unix.EACCES},
		{asUserOp{Op: "symlink", Path: c.mp("newlink"), Path2: "ro"}, unix.EACCES},
		{asUserOp{Op: "unlink", Path: c.mp("ro")}, unix.EACCES},
		{asUserOp{Op: "rmdir", Path: c.mp("empty")}, unix.EACCES},
		{asUserOp{Op: "rename", Path: c.mp("ro"), Path2: c.mp("moved")}, unix.EACCES},
		// A name the mount has never looked up: the server refuses the
		// LOOKUP in a directory uid 1000 may not search.
		{asUserOp{Op: "stat", Path: c.mp("private", "ondisk")}, unix.EACCES},
		{asUserOp{Op: "readdir", Path: c.mp("private")}, unix.EACCES},
		// Changing the mode or owner of another's file is EPERM.
		{asUserOp{Op: "chmod", Path: c.mp("ro")}, unix.EPERM},
		{asUserOp{Op: "chown", Path: c.mp("ro")}, unix.EPERM},
		// Its own file, in a directory it may write to...
		{asUserOp{Op: "create", Path: c.mp("open", "mine")}, 0},
		{asUserOp{Op: "chmod", Path: c.mp("open", "mine")}, 0},
		// ...which it may not link into root's directory.
		{asUserOp{Op: "link", Path: c.mp("open", "mine"), Path2: c.mp("newhard")}, unix.EACCES},
	}
	ops := make([]asUserOp, len(expects))
	for i, e := range expects {
		ops[i] = e.op
	}
	for i, got := range c.user.run(t, ops...) {
		if e := expects[i]; got != e.want {
			t.Errorf("uid %d %s %s: %s, want %s", testUID, e.op.Op, strings.TrimPrefix(e.op.Path, c.m+"/"), errnoName(got), errnoName(e.want))
		}
	}
	// Nothing changed.
	c.onDisk("ro", []byte("readable"))
	c.onDisk("secret", []byte("root only"))
	for _, n := range []string{"new", "newdir", "newlink", "moved", "newhard"} {
		c.absent(n)
	}
	if st := pxStat(t, c.dp("ro"), false); st.Mode&0o7777 != 0o644 {
		t.Errorf("mode on disk after the refused chmod: %o", st.Mode&0o7777)
	}

	// What it created is its own, on the server too: the caller's
	// credentials reach the server.
	for _, st := range []unix.Stat_t{pxStat(t, c.mp("open", "mine"), false), pxStat(t, c.dp("open", "mine"), false)} {
		if st.Uid != testUID || st.Gid != testGID {
			t.Errorf("owner of a file uid %d created: %d:%d", testUID, st.Uid, st.Gid)
		}
	}
	c.onDisk("open/mine", []byte("mine"))
	if st := pxStat(t, c.dp("open", "mine"), false); st.Mode&0o777 != 0o777 {
		t.Errorf("mode on disk after the owner's chmod: %o", st.Mode&0o777)
	}
}

// posixEACCESCached: search permission on a directory holds for names the
// kernel already has in its dentry cache (looked up by root), as it does on
// a kernel NFS mount, which checks it with ACCESS on every path walk.
func posixEACCESCached(c *posixCase) {
	t := c.t
	must(t, "mkdir", os.Mkdir(c.mp("private"), 0o700))
	c.write("private/f", []byte("hidden"))
	must(t, "chmod", os.Chmod(c.mp("private", "f"), 0o644))
	pxStat(t, c.mp("private", "f"), false) // cached now
	res := c.user.run(t, asUserOp{Op: "stat", Path: c.mp("private", "f")}, asUserOp{Op: "read", Path: c.mp("private", "f")})
	if res[0] != unix.EACCES {
		t.Errorf("uid %d stat of a cached name in a 0700 directory: %s, want EACCES", testUID, errnoName(res[0]))
	}
	if res[1] != unix.EACCES {
		t.Errorf("uid %d read of a 0644 file (cached name) in a 0700 directory: %s, want EACCES", testUID, errnoName(res[1]))
	}
}

func posixHardLinks(c *posixCase) {
	t := c.t
	c.write("a", []byte("hello"))
	must(t, "link", os.Link(c.mp("a"), c.mp("b")))
	sa, sb := pxStat(t, c.mp("a"), true), pxStat(t, c.mp("b"), true)
	if sa.Ino != sb.Ino || sa.Nlink != 2 || sb.Nlink != 2 {
		t.Errorf("after link: ino %d/%d nlink %d/%d, want one inode with 2 links", sa.Ino, sb.Ino, sa.Nlink, sb.Nlink)
	}
	da, db := pxStat(t, c.dp("a"), true), pxStat(t, c.dp("b"), true)
	if da.Ino != db.Ino || da.Nlink != 2 {
		t.Errorf("on disk: ino %d/%d nlink %d", da.Ino, db.Ino, da.Nlink)
	}
	// One file under two names: a write through one is read through the other.
	must(t, "write b", os.WriteFile(c.mp("b"), []byte("world!"), 0o644))
	sameBytes(t, "a after writing b", readFile(t, c.mp("a")), []byte("world!"))
	c.onDisk("a", []byte("world!"))

	must(t, "link c", os.Link(c.mp("b"), c.mp("c")))
	if st := pxStat(t, c.mp("a"), false); st.Nlink != 3 {
		t.Errorf("nlink after a third link: %d", st.Nlink)
	}
	must(t, "unlink a", os.Remove(c.mp("a")))
	must(t, "unlink c", os.Remove(c.mp("c")))
	c.absent("a")
	c.absent("c")
	if st := pxStat(t, c.mp("b"), false); st.Nlink != 1 {
		t.Errorf("nlink through the mount after removing two names: %d, want 1", st.Nlink)
	}
	if st := pxStat(t, c.dp("b"), false); st.Nlink != 1 {
		t.Errorf("nlink on disk: %d, want 1", st.Nlink)
	}
	sameBytes(t, "b", readFile(t, c.mp("b")), []byte("world!"))

	// A hard link to a directory is refused.
	must(t, "mkdir", os.Mkdir(c.mp("dir"), 0o755))
	wantErrno(t, "link a directory", unix.Link(c.mp("dir"), c.mp("dirlink")), unix.EPERM)
	c.absent("dirlink")
}

func posixSymlinks(c *posixCase) {
	t := c.t
	content := []byte("through a link")
	must(t, "mkdir", os.Mkdir(c.mp("sub"), 0o755))
	c.write("target", content)
	links := map[string]string{
		"rel":      "target",
		"abs":      c.mp("target"),
		"dangling": "nowhere/at/all",
		"dirlink":  "sub",
		"sub/up":   "../target",
	}
	for name, target := range links {
		must(t, "symlink "+name, os.Symlink(target, c.mp(name)))
	}
	tst := pxStat(t, c.mp("target"), false)
	for name, target := range links {
		got, err := os.Readlink(c.mp(name))
		if err != nil || got != target {
			t.Errorf("readlink %s: %q, %v; want %q", name, got, err, target)
		}
		if got, err := os.Readlink(c.dp(name)); err != nil || got != target {
			t.Errorf("readlink %s on disk: %q, %v; want %q", name, got, err, target)
		}
		lst := pxStat(t, c.mp(name), true)
		if lst.Mode&unix.S_IFMT != unix.S_IFLNK || lst.Size != int64(len(target)) {
			t.Errorf("lstat %s: mode %o size %d, want a link of %d bytes", name, lst.Mode, lst.Size, len(target))
		}
		if lst.Ino == tst.Ino {
			t.Errorf("lstat %s gives the target's inode", name)
		}
	}
	for _, name := range []string{"rel", "abs", "sub/up"} {
		st := pxStat(t, c.mp(name), false)
		if st.Ino != tst.Ino || st.Mode&unix.S_IFMT != unix.S_IFREG {
			t.Errorf("stat %s: ino %d mode %o, want the target's (%d, regular)", name, st.Ino, st.Mode, tst.Ino)
		}
		sameBytes(t, "read through "+name, readFile(t, c.mp(name)), content)
	}
	if st := pxStat(t, c.mp("dirlink"), false); st.Mode&unix.S_IFMT != unix.S_IFDIR {
		t.Errorf("stat dirlink: mode %o, want a directory", st.Mode)
	}
	c.write("dirlink/inside", []byte("via dirlink"))
	c.onDisk("sub/inside", []byte("via dirlink"))
	var st unix.Stat_t
	wantErrno(t, "stat dangling", unix.Stat(c.mp("dangling"), &st), unix.ENOENT)
	_, err := os.OpenFile(c.mp("rel"), os.O_RDONLY|unix.O_NOFOLLOW, 0)
	wantErrno(t, "open O_NOFOLLOW of a link", err, unix.ELOOP)
	// Writing through a link writes the target.
	must(t, "write via rel", os.WriteFile(c.mp("rel"), []byte("rewritten"), 0o644))
	c.onDisk("target", []byte("rewritten"))
	if l, err := os.Readlink(c.dp("rel")); err != nil || l != "target" {
		t.Errorf("link on disk after writing through it: %q %v", l, err)
	}
	// Removing a link leaves its target.
	must(t, "unlink rel", os.Remove(c.mp("rel")))
	c.absent("rel")
	c.onDisk("target", []byte("rewritten"))
	// A long target survives verbatim.
	long := strings.Repeat("x/", 500) + "end"
	must(t, "symlink long", os.Symlink(long, c.mp("long")))
	if got, err := os.Readlink(c.mp("long")); err != nil || got != long {
		t.Errorf("readlink of a %d-byte target: %d bytes, %v", len(long), len(got), err)
	}
}

func posixRename(c *posixCase) {
	t := c.t
	// Over an existing file: the file moves, the old name goes, the
	// replaced file is gone.
	c.write("a", []byte("AAAA"))
	c.write("b", []byte("BB"))
	ino := pxStat(t, c.mp("a"), false).Ino
	must(t, "rename a b", os.Rename(c.mp("a"), c.mp("b")))
	c.absent("a")
	sameBytes(t, "b after rename", readFile(t, c.mp("b")), []byte("AAAA"))
	c.onDisk("b", []byte("AAAA"))
	if got := pxStat(t, c.mp("b"), false).Ino; got != ino {
		t.Errorf("renamed file's inode %d, want %d", got, ino)
	}

	// A directory over an empty directory.
	must(t, "mkdir", os.MkdirAll(c.mp("d1", "inner"), 0o755))
	c.write("d1/f", []byte("in d1"))
	must(t, "mkdir", os.Mkdir(c.mp("d2"), 0o755))
	must(t, "rename d1 d2", unix.Rename(c.mp("d1"), c.mp("d2")))
	c.absent("d1")
	sameBytes(t, "d2/f", readFile(t, c.mp("d2", "f")), []byte("in d1"))
	c.onDisk("d2/f", []byte("in d1"))
	if _, err := os.Stat(c.dp("d2", "inner")); err != nil {
		t.Errorf("d2/inner on disk: %v", err)
	}

	// A directory over a non-empty one is refused and changes nothing.
	must(t, "mkdir", os.Mkdir(c.mp("d3"), 0o755))
	c.write("d3/x", []byte("3"))
	err := unix.Rename(c.mp("d3"), c.mp("d2"))
	wantErrno(t, "rename d3 over non-empty d2", err, unix.ENOTEMPTY, unix.EEXIST)
	t.Logf("rename over a non-empty directory: %s", errnoName(errnoOf(err)))
	c.onDisk("d3/x", []byte("3"))
	c.onDisk("d2/f", []byte("in d1"))

	// File over directory, directory over file.
	must(t, "mkdir", os.Mkdir(c.mp("emptydir"), 0o755))
	wantErrno(t, "rename a file over a directory", unix.Rename(c.mp("b"), c.mp("emptydir")), unix.EISDIR)
	wantErrno(t, "rename a directory over a file", unix.Rename(c.mp("emptydir"), c.mp("b")), unix.ENOTDIR)
	// A directory into itself.
	wantErrno(t, "rename a directory into itself", unix.Rename(c.mp("d3"), c.mp("d3", "sub")), unix.EINVAL)

	// Across directories, and the new name is usable at once.
	must(t, "rename across", os.Rename(c.mp("b"), c.mp("d3", "b2")))
	c.absent("b")
	c.onDisk("d3/b2", []byte("AAAA"))
	sameBytes(t, "d3/b2", readFile(t, c.mp("d3", "b2")), []byte("AAAA"))
	// Renaming a name onto itself is a no-op.
	must(t, "rename onto itself", os.Rename(c.mp("d3", "b2"), c.mp("d3", "b2")))
	c.onDisk("d3/b2", []byte("AAAA"))
	// A hard link onto another name of the same file: both stay.
	must(t, "link", os.Link(c.mp("d3", "b2"), c.mp("d3", "b3")))
	must(t, "rename onto a link of itself", os.Rename(c.mp("d3", "b2"), c.mp("d3", "b3")))
	c.onDisk("d3/b2", []byte("AAAA"))
	c.onDisk("d3/b3", []byte("AAAA"))
}

func posixSparseTruncate(c *posixCase) {
	t := c.t
	// A hole: one byte written past 1 MiB.
	f, err := os.Create(c.mp("sparse"))
	must(t, "create", err)
	_, err = f.WriteAt([]byte("X"), 1<<20)
	must(t, "pwrite", err)
	st, err := f.Stat()
	must(t, "fstat", err)
	if st.Size() != 1<<20+1 {
		t.Errorf("size after a write at 1 MiB: %d", st.Size())
	}
	buf := make([]byte, 1<<20+100)
	n, err := f.ReadAt(buf, 0)
	if n != 1<<20+1 {
		t.Errorf("read of the sparse file: %d bytes, %v", n, err)
	}
	want := make([]byte, 1<<20+1)
	want[1<<20] = 'X'
	sameBytes(t, "sparse file through its open descriptor", buf[:n], want)
	must(t, "close", f.Close())
	sameBytes(t, "sparse file", readFile(t, c.mp("sparse")), want)
	c.onDisk("sparse", want)
	if ds := pxStat(t, c.dp("sparse"), false); ds.Blocks*512 >= 1<<20 {
		t.Errorf("on disk the sparse file has %d blocks: the hole was written", ds.Blocks)
	}

	// ftruncate down and up through an open descriptor.
	data := pattern(10000, 1)
	f, err = os.OpenFile(c.mp("trunc"), os.O_RDWR|os.O_CREATE, 0o644)
	must(t, "create", err)
	defer f.Close()
	_, err = f.Write(data)
	must(t, "write", err)
	must(t, "ftruncate down", f.Truncate(4000))
	if st, _ := f.Stat(); st.Size() != 4000 {
		t.Errorf("size after ftruncate(4000): %d", st.Size())
	}
	must(t, "ftruncate up", f.Truncate(20000))
	want = append(append([]byte(nil), data[:4000]...), make([]byte, 16000)...)
	buf = make([]byte, 30000)
	n, _ = f.ReadAt(buf, 0)
	sameBytes(t, "after ftruncate down then up", buf[:n], want)
	must(t, "close", f.Close())
	c.onDisk("trunc", want)

	// truncate by name, down and up.
	must(t, "truncate down", os.Truncate(c.mp("trunc"), 100))
	if st := pxStat(t, c.mp("trunc"), false); st.Size != 100 {
		t.Errorf("size after truncate(100): %d", st.Size)
	}
	c.onDisk("trunc", data[:100])
	must(t, "truncate up", os.Truncate(c.mp("trunc"), 8192))
	want = append(append([]byte(nil), data[:100]...), make([]byte, 8092)...)
	sameBytes(t, "after truncate up", readFile(t, c.mp("trunc")), want)
	c.onDisk("trunc", want)

	// Truncating data that was written but not yet sent.
	f, err = os.OpenFile(c.mp("dirty"), os.O_RDWR|os.O_CREATE, 0o644)
	must(t, "create", err)
	defer f.Close()
	_, err = f.Write([]byte("0123456789"))
	must(t, "write", err)
	must(t, "ftruncate dirty", f.Truncate(5))
	_, err = f.WriteAt([]byte("ab"), 8)
	must(t, "pwrite past the new end", err)
	buf = make([]byte, 20)
	n, _ = f.ReadAt(buf, 0)
	want = []byte("01234\x00\x00\x00ab")
	sameBytes(t, "after truncating dirty data", buf[:n], want)
	must(t, "close", f.Close())
	c.onDisk("dirty", want)
	// O_TRUNC empties the file.
	g, err := os.OpenFile(c.mp("dirty"), os.O_WRONLY|os.O_TRUNC, 0)
	must(t, "open O_TRUNC", err)
	must(t, "close", g.Close())
	c.onDisk("dirty", []byte{})
	if st := pxStat(t, c.mp("dirty"), false); st.Size != 0 {
		t.Errorf("size after O_TRUNC: %d", st.Size)
	}
}

func posixWrite4G(c *posixCase) {
	t := c.t
	const off = 4<<30 + 1
	payload := []byte("beyond four gibibytes")
	f, err := os.Create(c.mp("big"))
	must(t, "create", err)
	defer f.Close()
	_, err = f.WriteAt(payload, off)
	must(t, "pwrite at 4 GiB + 1", err)
	must(t, "close", f.Close())
	size := int64(off + len(payload))
	if st := pxStat(t, c.mp("big"), false); st.Size != size {
		t.Errorf("size through the mount: %d, want %d", st.Size, size)
	}
	if st := pxStat(t, c.dp("big"), false); st.Size != size {
		t.Errorf("size on disk: %d, want %d", st.Size, size)
	}
	check := func(where string, f *os.File) {
		buf := make([]byte, 64)
		n, _ := f.ReadAt(buf, off-10)
		want := append(make([]byte, 10), payload...)
		sameBytes(t, where+": read across 4 GiB", buf[:n], want)
		n, _ = f.ReadAt(buf[:16], 0)
		sameBytes(t, where+": read at 0", buf[:n], make([]byte, 16))
		n, _ = f.ReadAt(buf[:16], 2<<30)
		sameBytes(t, where+": read at 2 GiB", buf[:n], make([]byte, 16))
	}
	g, err := os.Open(c.mp("big"))
	must(t, "open through the mount", err)
	defer g.Close()
	check("through the mount", g)
	d, err := os.Open(c.dp("big"))
	must(t, "open on disk", err)
	defer d.Close()
	check("on disk", d)
}

func posixBigDir(c *posixCase) {
	t := c.t
	const n = 10000
	// Made on the server's disk directly: quick, and the mount has never
	// seen the directory.
	dir := c.dp("big")
	must(t, "mkdir on disk", os.Mkdir(dir, 0o755))
	want := make(map[string]bool, n)
	made := time.Now()
	for i := range n {
		name := fmt.Sprintf("entry-%05d-%s", i, strings.Repeat("n", i%40))
		f, err := os.OpenFile(filepath.Join(dir, name), os.O_CREATE|os.O_WRONLY, 0o644)
		must(t, "create on disk", err)
		f.Close()
		want[name] = true
	}
	t.Logf("made %d files on disk in %v", n, time.Since(made).Round(time.Millisecond))
	list := func(what string, bufSize int) {
		start := time.Now()
		defer func() { t.Logf("%s: %v", what, time.Since(start).Round(time.Millisecond)) }()
		f, err := os.Open(c.mp("big"))
		must(t, "opendir", err)
		defer f.Close()
		seen := make(map[string]int, n)
		buf := make([]byte, bufSize)
		for {
			k, err := unix.Getdents(int(f.Fd()), buf)
			if err == unix.EINTR {
				// A signal (the Go runtime's preemption) interrupted
				// the request; nothing was consumed.
				continue
			}
			must(t, "getdents", err)
			if k == 0 {
				break
			}
			for off := 0; off < k; {
				reclen := int(buf[off+16]) | int(buf[off+17])<<8
				name := unix.ByteSliceToString(buf[off+19 : off+reclen])
				if name != "." && name != ".." {
					seen[name]++
				}
				off += reclen
			}
		}
		var dups, unknown []string
		for name, k := range seen {
			if k > 1 {
				dups = append(dups, name)
			}
			if !want[name] {
				unknown = append(unknown, name)
			}
		}
		missing := 0
		for name := range want {
			if seen[name] == 0 {
				missing++
			}
		}
		if len(seen) != n || len(dups) > 0 || len(unknown) > 0 || missing > 0 {
			slices.Sort(dups)
			t.Errorf("%s: %d distinct names, want %d; %d missing, duplicates %.10v, unknown %.10v",
				what, len(seen), n, missing, dups, unknown)
		}
	}
	list("listing with 32 KiB getdents", 32<<10)
	// A small buffer makes the kernel come back for more many times, each
	// time from the last offset it handed out.
	list("listing with 1 KiB getdents", 1<<10)
	// The entries are real files through the mount.
	if st := pxStat(t, c.mp("big", "entry-09999-"+strings.Repeat("n", 9999%40)), false); st.Mode&unix.S_IFMT != unix.S_IFREG {
		t.Errorf("an entry's mode: %o", st.Mode)
	}
}
