package fusefs

import (
	"encoding/binary"
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"golang.org/x/sys/unix"
)

// dirent is one getdents64 record: a name and its d_off, where reading
// resumes after it (what telldir returns once it has been read).
type dirent struct {
	name string
	off  int64
}

// getdents reads one getdents64 call's worth of entries into a buffer of
// size bytes, as a reader with a small buffer does.
func getdents(t *testing.T, fd, size int) []dirent {
	t.Helper()
	buf := make([]byte, size)
	n, err := unix.Getdents(fd, buf)
	if err != nil {
		t.Fatalf("getdents: %v", err)
	}
	var out []dirent
	for b := buf[:n]; len(b) > 0; {
		// struct linux_dirent64: ino u64, off s64, reclen u16, type u8, name.
		off := int64(binary.NativeEndian.Uint64(b[8:16]))
		reclen := int(binary.NativeEndian.Uint16(b[16:18]))
		name := b[19:reclen]
		for i, c := range name {
			if c == 0 {
				name = name[:i]
				break
			}
		}
		out = append(out, dirent{name: string(name), off: off})
		b = b[reclen:]
	}
	return out
}

// TestKernelTelldirSeekdir is cthon04's special/telldir through the
// kernel: the offset before each entry (telldir) of one open directory,
// given to lseek (seekdir) in a later pass, reads that entry next, whether
// the pass comes from the server or from the cached listing, and a
// rewound pass lists an unchanged directory in the same order.
func TestKernelTelldirSeekdir(t *testing.T) {
	e, mnt := mountKernel(t, envOpts{})
	const n = 300
	dir := filepath.Join(e.dir, "telldir")
	os.Mkdir(dir, 0o755)
	for i := 0; i < n; i++ {
		os.WriteFile(filepath.Join(dir, fmt.Sprint(i)), nil, 0o644)
	}
	fd, err := unix.Open(filepath.Join(mnt, "telldir"), unix.O_RDONLY|unix.O_DIRECTORY, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(fd)
	seek := func(off int64) {
		t.Helper()
		if _, err := unix.Seek(fd, off, 0); err != nil {
			t.Fatalf("seekdir to %d: %v", off, err)
		}
	}
	// pass reads from offset 0 to the end with 512-byte buffers: the
	// kernel's reads are cut short, and it asks again from the last
	// entry the buffer took.
	type told struct {
		before int64 // telldir before the entry
		name   string
	}
	pass := func() []told {
		t.Helper()
		seek(0)
		var out []told
		before := int64(0)
		for {
			ents := getdents(t, fd, 512)
			if len(ents) == 0 {
				return out
			}
			for _, d := range ents {
				out = append(out, told{before, d.name})
				before = d.off
			}
		}
	}
	check := func(what string, want []told) {
		t.Helper()
		for i := len(want) - 1; i >= 0; i-- {
			seek(want[i].before)
			ents := getdents(t, fd, 512)
			if len(ents) == 0 || ents[0].name != want[i].name {
				got := "end of directory"
				if len(ents) > 0 {
					got = ents[0].name
				}
				t.Fatalf("%s: seekdir to %d read %s, want %s", what, want[i].before, got, want[i].name)
			}
		}
	}
	p1 := pass() // from the server
	if len(p1) != n+2 {
		t.Fatalf("listed %d entries, want %d", len(p1), n+2)
	}
	check("in the first pass", p1)
	p2 := pass() // from the cached listing
	if len(p2) != len(p1) {
		t.Fatalf("the second pass listed %d entries, the first %d", len(p2), len(p1))
	}
	for i := range p1 {
		if p1[i].name != p2[i].name {
			t.Fatalf("the second pass lists %s at position %d where the first listed %s", p2[i].name, i, p1[i].name)
		}
	}
	check("in the second pass with the first pass's offsets", p1)
}
