package fusefs

import (
	"os"
	"path/filepath"
	"runtime"
	"testing"

	"golang.org/x/sys/unix"
)

// asUser runs fn on an OS thread of its own whose file-system identity is
// uid:gid with no supplementary groups, as a process of that user would
// be: a non-zero fsuid also takes CAP_FSETID and the other file-system
// capabilities away. The thread is never handed back to the runtime (a
// goroutine that ends locked ends its thread). fn must not call t.Fatal.
func asUser(t *testing.T, uid, gid uint32, fn func()) {
	t.Helper()
	done := make(chan error, 1)
	go func() {
		runtime.LockOSThread()
		if _, _, e := unix.RawSyscall(unix.SYS_SETGROUPS, 0, 0, 0); e != 0 {
			done <- e
			return
		}
		unix.RawSyscall(unix.SYS_SETFSGID, uintptr(gid), 0, 0)
		unix.RawSyscall(unix.SYS_SETFSUID, uintptr(uid), 0, 0)
		if got, _, _ := unix.RawSyscall(unix.SYS_SETFSUID, ^uintptr(0), 0, 0); uint32(got) != uid {
			done <- unix.EPERM
			return
		}
		fn()
		done <- nil
	}()
	if err := <-done; err != nil {
		t.Fatalf("switching to %d:%d: %v", uid, gid, err)
	}
}

// A write, a truncation or an O_TRUNC open by a user who may write a
// set-user-ID or set-group-ID file but not change its mode succeeds and
// clears the bits (pjdfstest chmod/12.t), and the writer's fstat right
// after shows them gone: the server clears them, the kernel sends no
// SETATTR of its own.
func TestKernelSetIDClearedByWrite(t *testing.T) {
	e, mnt := mountKernel(t, envOpts{options: "allow_other"})
	for p := filepath.Dir(mnt); p != "/" && p != os.TempDir(); p = filepath.Dir(p) {
		os.Chmod(p, 0o755) // t.TempDir's parents are private to root
	}
	const nobody = 65534
	cases := []struct {
		name string
		mode uint32
		op   func(p string) (uint32, error) // as nobody; returns fstat's mode
	}{
		{"write", 0o4777, func(p string) (uint32, error) {
			fd, err := unix.Open(p, unix.O_WRONLY, 0)
			if err != nil {
				return 0, err
			}
			defer unix.Close(fd)
			if _, err := unix.Write(fd, []byte("x")); err != nil {
				return 0, err
			}
			var st unix.Stat_t
			err = unix.Fstat(fd, &st)
			return st.Mode, err
		}},
		{"write sgid", 0o2777, func(p string) (uint32, error) {
			fd, err := unix.Open(p, unix.O_RDWR, 0)
			if err != nil {
				return 0, err
			}
			defer unix.Close(fd)
			if _, err := unix.Pwrite(fd, []byte("x"), 100); err != nil {
				return 0, err
			}
			var st unix.Stat_t
			err = unix.Fstat(fd, &st)
			return st.Mode, err
		}},
		{"ftruncate to the same size", 0o6777, func(p string) (uint32, error) {
			fd, err := unix.Open(p, unix.O_WRONLY, 0)
			if err != nil {
				return 0, err
			}
			defer unix.Close(fd)
			if err := unix.Ftruncate(fd, 4); err != nil {
				return 0, err
			}
			var st unix.Stat_t
			err = unix.Fstat(fd, &st)
			return st.Mode, err
		}},
		{"O_TRUNC open", 0o4777, func(p string) (uint32, error) {
			fd, err := unix.Open(p, unix.O_WRONLY|unix.O_TRUNC, 0)
			if err != nil {
				return 0, err
			}
			defer unix.Close(fd)
			var st unix.Stat_t
			err = unix.Fstat(fd, &st)
			return st.Mode, err
		}},
	}
	for i, tc := range cases {
		name := "f" + string(rune('0'+i))
		p := filepath.Join(mnt, name)
		if err := os.WriteFile(p, []byte("data"), 0o644); err != nil {
			t.Fatal(err)
		}
		if err := unix.Chmod(p, tc.mode); err != nil {
			t.Fatal(err)
		}
		var st unix.Stat_t
		unix.Stat(p, &st) // the kernel and the core know the mode
		setattrs := e.count("SETATTR")
		var mode uint32
		var err error
		asUser(t, nobody, nobody, func() { mode, err = tc.op(p) })
		if err != nil {
			t.Errorf("%s of a %o file by a non-owner: %v", tc.name, tc.mode, err)
			continue
		}
		if mode&0o7777 != 0o777 {
			t.Errorf("%s of a %o file by a non-owner: fstat right after shows %o, want 777", tc.name, tc.mode, mode&0o7777)
		}
		if tc.name != "ftruncate to the same size" && tc.name != "O_TRUNC open" {
			if n := e.count("SETATTR") - setattrs; n != 0 {
				t.Errorf("%s: %d SETATTRs sent for the write", tc.name, n)
			}
		}
		if err := unix.Stat(p, &st); err != nil || st.Mode&0o7777 != 0o777 {
			t.Errorf("%s: stat through the mount: %o %v, want 777", tc.name, st.Mode&0o7777, err)
		}
		if err := unix.Stat(filepath.Join(e.dir, name), &st); err != nil || st.Mode&0o7777 != 0o777 {
			t.Errorf("%s: on the server's disk: %o %v, want 777", tc.name, st.Mode&0o7777, err)
		}
	}
	// chown clears them even to the same owner, as locally.
	p0 := filepath.Join(mnt, "chown")
	os.WriteFile(p0, nil, 0o644)
	unix.Chmod(p0, 0o4755)
	var st0 unix.Stat_t
	unix.Stat(p0, &st0)
	if err := unix.Chown(p0, 0, 0); err != nil {
		t.Fatal(err)
	}
	if unix.Stat(p0, &st0); st0.Mode&0o7777 != 0o755 {
		t.Errorf("chown to the same owner left %o, want 755", st0.Mode&0o7777)
	}
	// Root (CAP_FSETID) keeps the bits.
	p := filepath.Join(mnt, "rootwrite")
	os.WriteFile(p, nil, 0o644)
	unix.Chmod(p, 0o6777)
	if err := os.WriteFile(p, []byte("root"), 0); err != nil {
		t.Fatal(err)
	}
	var st unix.Stat_t
	if unix.Stat(filepath.Join(e.dir, "rootwrite"), &st); st.Mode&0o7777 != 0o6777 {
		t.Errorf("root's write left %o, want 6777", st.Mode&0o7777)
	}
}
