package main

import (
	"crypto/sha256"
	"fmt"
	"io"
	"io/fs"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
)

// Entry kinds.
const (
	kindFile    = 'f'
	kindDir     = 'd'
	kindSymlink = 'l'
	kindOther   = '?'
)

// expect is what one name must be.
type expect struct {
	kind byte
	// sum is a regular file's SHA-256; nil when its content is not
	// modelled (a compiler's output), though the mount and the server's
	// disk must still agree.
	sum    *[sha256.Size]byte
	size   int64       // -1: not modelled
	perm   fs.FileMode // 0: not modelled
	target string      // a symbolic link's target
	nlink  int         // 0: not modelled
	// group names a hard-link group: every name of a group is one inode.
	group string
}

func fileExpect(data []byte, perm fs.FileMode) expect {
	sum := sha256.Sum256(data)
	return expect{kind: kindFile, sum: &sum, size: int64(len(data)), perm: perm}
}

// treeModel is a workload's model of its directory: relative path → what
// it must be. Its methods are safe for concurrent use.
type treeModel struct {
	mu sync.Mutex
	m  map[string]expect
}

func newTreeModel() *treeModel { return &treeModel{m: map[string]expect{}} }

func (t *treeModel) set(rel string, e expect) {
	t.mu.Lock()
	t.m[rel] = e
	t.mu.Unlock()
}

func (t *treeModel) del(rel string) {
	t.mu.Lock()
	delete(t.m, rel)
	t.mu.Unlock()
}

// delTree removes rel and everything under it.
func (t *treeModel) delTree(rel string) {
	t.mu.Lock()
	defer t.mu.Unlock()
	prefix := rel + "/"
	for k := range t.m {
		if k == rel || strings.HasPrefix(k, prefix) {
			delete(t.m, k)
		}
	}
}

// replace sets the whole model.
func (t *treeModel) replace(m map[string]expect) {
	t.mu.Lock()
	t.m = maps.Clone(m)
	t.mu.Unlock()
}

func (t *treeModel) reset() { t.replace(map[string]expect{}) }

func (t *treeModel) snapshot() map[string]expect {
	t.mu.Lock()
	defer t.mu.Unlock()
	return maps.Clone(t.m)
}

// entry is what a scan found at one name.
type entry struct {
	kind   byte
	perm   fs.FileMode
	size   int64
	nlink  uint64
	ino    uint64
	sum    [sha256.Size]byte // regular files
	target string            // symbolic links
}

// scanTree describes everything under root (root itself excluded), by
// path relative to root, hashing every regular file. progress, if set, is
// told each name before it is read.
func scanTree(root string, progress func(rel string)) (map[string]entry, error) {
	out := map[string]entry{}
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if path == root {
			return nil
		}
		rel, err := filepath.Rel(root, path)
		if err != nil {
			return err
		}
		if progress != nil {
			progress(rel)
		}
		e, err := describe(path)
		if err != nil {
			return err
		}
		out[rel] = e
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("scanning %s: %w", root, err)
	}
	return out, nil
}

// describe stats one name and, for a regular file, hashes its content.
func describe(path string) (entry, error) {
	var st syscall.Stat_t
	if err := syscall.Lstat(path, &st); err != nil {
		return entry{}, &fs.PathError{Op: "lstat", Path: path, Err: err}
	}
	e := entry{perm: fs.FileMode(st.Mode & 0o7777), size: st.Size, nlink: uint64(st.Nlink), ino: st.Ino}
	switch st.Mode & syscall.S_IFMT {
	case syscall.S_IFREG:
		e.kind = kindFile
		f, err := os.Open(path)
		if err != nil {
			return e, err
		}
		h := sha256.New()
		n, err := io.Copy(h, f)
		f.Close()
		if err != nil {
			return e, fmt.Errorf("read %s: %w", path, err)
		}
		if n != e.size {
			return e, &mismatchError{fmt.Sprintf("%s: read %d bytes, its size says %d", path, n, e.size)}
		}
		h.Sum(e.sum[:0])
	case syscall.S_IFDIR:
		e.kind = kindDir
	case syscall.S_IFLNK:
		e.kind = kindSymlink
		t, err := os.Readlink(path)
		if err != nil {
			return e, err
		}
		e.target = t
	default:
		e.kind = kindOther
	}
	return e, nil
}

// maxDiffs bounds the differences one comparison lists (all are counted).
const maxDiffs = 25

// diffList collects differences, keeping the first maxDiffs.
type diffList struct {
	n     int
	items []string
}

func (d *diffList) add(format string, args ...any) {
	d.n++
	if len(d.items) < maxDiffs {
		d.items = append(d.items, fmt.Sprintf(format, args...))
	}
}

func (d *diffList) err(what string) error {
	if d.n == 0 {
		return nil
	}
	more := ""
	if d.n > len(d.items) {
		more = fmt.Sprintf("\n  … and %d more", d.n-len(d.items))
	}
	return &mismatchError{fmt.Sprintf("%s: %d differences:\n  %s%s", what, d.n, strings.Join(d.items, "\n  "), more)}
}

// compareTrees checks a scan through the mount and a scan of the server's
// disk against each other (the same names, kinds, sizes, modes, link
// counts, inode numbers, contents and targets) and against the model
// (exactly its names, and whatever it says of each).
func compareTrees(model map[string]expect, mount, disk map[string]entry) *diffList {
	d := &diffList{}
	for _, rel := range sortedKeys(mount) {
		m := mount[rel]
		k, ok := disk[rel]
		if !ok {
			d.add("%s: through the mount, not on the server's disk", rel)
			continue
		}
		if m.kind != k.kind {
			d.add("%s: %c through the mount, %c on disk", rel, m.kind, k.kind)
			continue
		}
		if m.size != k.size && m.kind != kindDir {
			d.add("%s: size %d through the mount, %d on disk", rel, m.size, k.size)
		}
		if m.perm != k.perm {
			d.add("%s: mode %#o through the mount, %#o on disk", rel, m.perm, k.perm)
		}
		if m.nlink != k.nlink {
			d.add("%s: %d links through the mount, %d on disk", rel, m.nlink, k.nlink)
		}
		if m.ino != k.ino {
			d.add("%s: inode %d through the mount, %d on disk", rel, m.ino, k.ino)
		}
		if m.kind == kindFile && m.sum != k.sum {
			d.add("%s: content through the mount differs from the disk's (%d bytes)", rel, m.size)
		}
		if m.target != k.target {
			d.add("%s: target %q through the mount, %q on disk", rel, m.target, k.target)
		}
	}
	for _, rel := range sortedKeys(disk) {
		if _, ok := mount[rel]; !ok {
			d.add("%s: on the server's disk, not through the mount", rel)
		}
	}
	groups := map[string]uint64{}
	for _, rel := range sortedKeys(model) {
		want := model[rel]
		got, ok := mount[rel]
		if !ok {
			d.add("%s: missing (the model has a %c)", rel, want.kind)
			continue
		}
		if got.kind != want.kind {
			d.add("%s: a %c, the model has a %c", rel, got.kind, want.kind)
			continue
		}
		if want.sum != nil && got.sum != *want.sum {
			d.add("%s: content differs from the model (%d bytes, model %d)", rel, got.size, want.size)
		}
		if want.size >= 0 && got.size != want.size && want.kind != kindDir {
			d.add("%s: size %d, model %d", rel, got.size, want.size)
		}
		if want.perm != 0 && got.perm != want.perm {
			d.add("%s: mode %#o, model %#o", rel, got.perm, want.perm)
		}
		if want.kind == kindSymlink && got.target != want.target {
			d.add("%s: target %q, model %q", rel, got.target, want.target)
		}
		if want.nlink > 0 && got.nlink != uint64(want.nlink) {
			d.add("%s: %d links, model %d", rel, got.nlink, want.nlink)
		}
		if want.group != "" {
			if ino, ok := groups[want.group]; ok && ino != got.ino {
				d.add("%s: inode %d, but another name of its hard-link group has %d", rel, got.ino, ino)
			}
			groups[want.group] = got.ino
		}
	}
	for _, rel := range sortedKeys(mount) {
		if _, ok := model[rel]; !ok {
			d.add("%s: present (a %c), not in the model", rel, mount[rel].kind)
		}
	}
	return d
}

func sortedKeys[V any](m map[string]V) []string {
	return slices.Sorted(maps.Keys(m))
}
