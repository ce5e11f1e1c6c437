package server

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"hushfs/internal/nfs3"
)

// readdirAll lists dir with READDIR calls of count bytes, calling between
// (if set) after each call with the names so far. It fails on duplicate
// cookies or names.
func readdirAll(t *testing.T, c *client, dir nfs3.FH, count uint32, between func(calls int)) (names []string, calls int) {
	t.Helper()
	seen := map[string]bool{}
	var cookie uint64
	var verf nfs3.Verf
	for {
		var r nfs3.ReaddirRes
		c.call(nfs3.ProcReaddir, &nfs3.ReaddirArgs{Dir: dir, Cookie: cookie, CookieVerf: verf, Count: count}, &r)
		calls++
		if r.Status != nfs3.OK {
			t.Fatalf("READDIR call %d (cookie %#x): %v", calls, cookie, r.Status)
		}
		if calls > 1 && r.CookieVerf != verf {
			t.Fatalf("cookie verifier changed during the listing")
		}
		verf = r.CookieVerf
		if size := len(r.Append(nil)) - 4; size > int(count) {
			t.Fatalf("reply of %d bytes exceeds count %d", size, count)
		}
		for _, e := range r.Entries {
			if e.Cookie == 0 {
				t.Fatalf("entry %q with cookie 0", e.Name)
			}
			if seen[string(e.Name)] {
				t.Fatalf("entry %q listed twice", e.Name)
			}
			seen[string(e.Name)] = true
			names = append(names, string(e.Name))
			cookie = e.Cookie
		}
		if r.EOF {
			return names, calls
		}
		if len(r.Entries) == 0 {
			t.Fatal("READDIR returned no entries and no EOF")
		}
		if between != nil {
			between(calls)
		}
	}
}

func TestReaddirLargeStableCookies(t *testing.T) {
	e := startEnv(t, false)
	c := e.root0()
	root := c.rootFH()
	dir := filepath.Join(e.root, "big")
	os.Mkdir(dir, 0o755)
	const n = 2000
	for i := range n {
		if err := os.WriteFile(filepath.Join(dir, fmt.Sprintf("file-%04d", i)), nil, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	big := c.mustLookup(root, "big")

	names, calls := readdirAll(t, c, big, 1024, nil)
	if len(names) != n+2 || calls < 50 {
		t.Fatalf("listed %d names in %d calls", len(names), calls)
	}
	got := map[string]bool{}
	for _, nm := range names {
		got[nm] = true
	}
	for i := range n {
		if !got[fmt.Sprintf("file-%04d", i)] {
			t.Fatalf("file-%04d missing", i)
		}
	}
	if !got["."] || !got[".."] {
		t.Fatal(`"." or ".." missing`)
	}

	// List again while creating and removing other entries: every entry
	// that exists throughout is listed exactly once (readdirAll checks
	// duplicates), whatever happens to the others.
	removed := map[string]bool{}
	created := 0
	names, _ = readdirAll(t, c, big, 2048, func(calls int) {
		for k := range 5 {
			nm := fmt.Sprintf("new-%d-%d", calls, k)
			c.mustCreate(big, nm, 0o644)
			created++
		}
		for k := range 3 {
			i := (calls*37 + k*611) % n
			nm := fmt.Sprintf("file-%04d", i)
			if !removed[nm] {
				wantStatus(t, "REMOVE "+nm, c.remove(big, nm), nfs3.OK)
				removed[nm] = true
			}
		}
	})
	got = map[string]bool{}
	for _, nm := range names {
		got[nm] = true
	}
	for i := range n {
		nm := fmt.Sprintf("file-%04d", i)
		if !removed[nm] && !got[nm] {
			t.Fatalf("%s (never removed) missing from the listing", nm)
		}
	}
	if created < 100 || len(removed) < 60 {
		t.Fatalf("only %d created, %d removed during the listing", created, len(removed))
	}
	// Listing with many small READDIRPLUS calls too.
	names = nil
	var cookie uint64
	var verf nfs3.Verf
	seen := map[string]bool{}
	for {
		var r nfs3.ReaddirplusRes
		c.call(nfs3.ProcReaddirplus, &nfs3.ReaddirplusArgs{Dir: big, Cookie: cookie, CookieVerf: verf, DirCount: 512, MaxCount: 4096}, &r)
		if r.Status != nfs3.OK {
			t.Fatalf("READDIRPLUS: %v", r.Status)
		}
		if size := len(r.Append(nil)) - 4; size > 4096 {
			t.Fatalf("READDIRPLUS reply of %d bytes exceeds maxcount", size)
		}
		dirBytes := 0
		for _, en := range r.Entries {
			if seen[string(en.Name)] {
				t.Fatalf("READDIRPLUS listed %q twice", en.Name)
			}
			seen[string(en.Name)] = true
			cookie = en.Cookie
			dirBytes += en.DirCountSize()
		}
		if len(r.Entries) > 1 && dirBytes > 512 {
			t.Fatalf("READDIRPLUS directory info of %d bytes exceeds dircount", dirBytes)
		}
		verf = r.CookieVerf
		if r.EOF {
			break
		}
	}
	ents, _ := os.ReadDir(dir)
	if len(seen) != len(ents)+2 {
		t.Fatalf("READDIRPLUS listed %d, directory has %d+2", len(seen), len(ents))
	}
}

func TestReaddirplusAttrsAndHandles(t *testing.T) {
	e := startEnv(t, false)
	c := e.root0()
	root := c.rootFH()
	c.mustMkdir(root, "sub", 0o750)
	f := c.mustCreate(root, "file", 0o640)
	c.write(f, 0, []byte("twelve bytes"), nfs3.Unstable)
	os.Symlink("nowhere", filepath.Join(e.root, "link"))

	var r nfs3.ReaddirplusRes
	c.call(nfs3.ProcReaddirplus, &nfs3.ReaddirplusArgs{Dir: root, DirCount: 8192, MaxCount: 32768}, &r)
	if r.Status != nfs3.OK || !r.EOF || len(r.Entries) != 5 || !r.DirAttr.Present {
		t.Fatalf("READDIRPLUS: %v eof %v %d entries", r.Status, r.EOF, len(r.Entries))
	}
	for _, en := range r.Entries {
		name := string(en.Name)
		if !en.Attr.Present || !en.FH.Present {
			t.Fatalf("%q without attributes or handle", name)
		}
		// The handle works and its attributes match.
		a := c.mustGetattr(en.FH.FH)
		if a.Fileid != en.Fileid || a.Fileid != en.Attr.Attr.Fileid || a.Type != en.Attr.Attr.Type || a.Size != en.Attr.Attr.Size {
			t.Fatalf("%q: getattr %+v, entry %d %+v", name, a, en.Fileid, en.Attr.Attr)
		}
		switch name {
		case ".", "..":
			// ".." of the export root is the root itself.
			if !bytes.Equal(en.FH.FH, root) {
				t.Fatalf("%q of the root has another handle", name)
			}
		case "file":
			if !bytes.Equal(en.FH.FH, f) || en.Attr.Attr.Size != 12 || en.Attr.Attr.Mode != 0o640 {
				t.Fatalf("file entry %+v", en.Attr.Attr)
			}
		case "sub":
			if en.Attr.Attr.Type != nfs3.TypeDir {
				t.Fatal("sub not a directory")
			}
			// "..” of sub is the root.
			var rs nfs3.ReaddirplusRes
			c.call(nfs3.ProcReaddirplus, &nfs3.ReaddirplusArgs{Dir: en.FH.FH, DirCount: 8192, MaxCount: 8192}, &rs)
			for _, se := range rs.Entries {
				if string(se.Name) == ".." && !bytes.Equal(se.FH.FH, root) {
					t.Fatal(`".." of sub is not the root`)
				}
			}
		case "link":
			if en.Attr.Attr.Type != nfs3.TypeLnk {
				t.Fatal("link followed")
			}
		}
	}
	// READDIR's ".." of the root has the root's file id.
	var rd nfs3.ReaddirRes
	c.call(nfs3.ProcReaddir, &nfs3.ReaddirArgs{Dir: root, Count: 8192}, &rd)
	rootID := c.mustGetattr(root).Fileid
	for _, en := range rd.Entries {
		if string(en.Name) == ".." && en.Fileid != rootID {
			t.Fatalf(`".." of root has file id %d, root is %d`, en.Fileid, rootID)
		}
	}
}

func TestReaddirErrors(t *testing.T) {
	e := startEnv(t, false)
	c := e.root0()
	root := c.rootFH()
	f := c.mustCreate(root, "a-rather-long-file-name-to-need-space", 0o644)
	var r nfs3.ReaddirRes
	c.call(nfs3.ProcReaddir, &nfs3.ReaddirArgs{Dir: f, Count: 4096}, &r)
	wantStatus(t, "READDIR of a file", r.Status, nfs3.ErrNotDir)
	c.call(nfs3.ProcReaddir, &nfs3.ReaddirArgs{Dir: root, Count: 0}, &r)
	wantStatus(t, "READDIR count 0", r.Status, nfs3.ErrTooSmall)
	// Room for the header but not one entry.
	c.call(nfs3.ProcReaddir, &nfs3.ReaddirArgs{Dir: root, Count: 100}, &r)
	wantStatus(t, "READDIR count 100", r.Status, nfs3.ErrTooSmall)
	var rp nfs3.ReaddirplusRes
	c.call(nfs3.ProcReaddirplus, &nfs3.ReaddirplusArgs{Dir: root, DirCount: 4096, MaxCount: 150}, &rp)
	wantStatus(t, "READDIRPLUS maxcount 150", rp.Status, nfs3.ErrTooSmall)
	// A cookie with a verifier of another directory.
	c.call(nfs3.ProcReaddir, &nfs3.ReaddirArgs{Dir: root, Count: 4096}, &r)
	if r.Status != nfs3.OK || len(r.Entries) < 2 {
		t.Fatalf("READDIR: %v", r.Status)
	}
	cookie, verf := r.Entries[0].Cookie, r.CookieVerf
	bad := verf
	bad[0] ^= 1
	c.call(nfs3.ProcReaddir, &nfs3.ReaddirArgs{Dir: root, Cookie: cookie, CookieVerf: bad, Count: 4096}, &r)
	wantStatus(t, "READDIR with a wrong verifier", r.Status, nfs3.ErrBadCookie)
	c.call(nfs3.ProcReaddir, &nfs3.ReaddirArgs{Dir: root, Cookie: cookie, CookieVerf: verf, Count: 4096}, &r)
	wantStatus(t, "READDIR resumed", r.Status, nfs3.OK)
	c.call(nfs3.ProcReaddir, &nfs3.ReaddirArgs{Dir: root, Cookie: 1 << 63, CookieVerf: verf, Count: 4096}, &r)
	wantStatus(t, "READDIR with an impossible cookie", r.Status, nfs3.ErrBadCookie)
	// The verifier is per directory and survives changes and restarts.
	sub := c.mustMkdir(root, "sub", 0o755)
	c.call(nfs3.ProcReaddir, &nfs3.ReaddirArgs{Dir: sub, Count: 4096}, &r)
	if r.CookieVerf == verf {
		t.Fatal("two directories share a cookie verifier")
	}
	c.mustCreate(root, "another", 0o644)
	e.restart(false)
	c = e.root0()
	c.call(nfs3.ProcReaddir, &nfs3.ReaddirArgs{Dir: root, Cookie: cookie, CookieVerf: verf, Count: 4096}, &r)
	wantStatus(t, "READDIR resumed after changes and a restart", r.Status, nfs3.OK)
}
