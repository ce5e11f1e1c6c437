package main

import (
	"context"
	"fmt"
	"io/fs"
	"os"
	"slices"
	"strconv"
	"strings"
	"syscall"
)

// ---- meta: create, write, rename, link, unlink, chmod, symlink, mkdir,
// rmdir at random, against a model checked after every round.

type metaJob struct {
	ops      int
	maxNames int
	names    map[string]*mnode
	nextID   int
	nextName int
	round    int
}

// mnode is one object of the metadata model.
type mnode struct {
	id     int
	kind   byte
	data   []byte
	perm   fs.FileMode
	target string
}

func (j *metaJob) about() string {
	return fmt.Sprintf("rounds of %d random create/write/rename (also over an existing file)/link/unlink/chmod/symlink/mkdir/rmdir in one directory (at most %d names); after each round every name, kind, mode, link count, hard-link inode, content and target checked through the mount and on the server's disk", j.ops, j.maxNames)
}

func (j *metaJob) setup(w *workload) error {
	j.names, j.nextID, j.nextName, j.round = map[string]*mnode{}, 0, 0, 0
	return nil
}

func (j *metaJob) newName(prefix string) string {
	j.nextName++
	return fmt.Sprintf("%s%05d", prefix, j.nextName)
}

// pick returns a random name whose node is of one of the kinds, or "".
func (j *metaJob) pick(w *workload, kinds string) string {
	var c []string
	for name, nd := range j.names {
		if strings.IndexByte(kinds, nd.kind) >= 0 {
			c = append(c, name)
		}
	}
	if len(c) == 0 {
		return ""
	}
	slices.Sort(c)
	return c[w.rng.IntN(len(c))]
}

var metaPerms = []fs.FileMode{0o600, 0o640, 0o644, 0o700, 0o755, 0o444}

// export turns the model into expectations for the final check.
func (j *metaJob) export() map[string]expect {
	links := map[int]int{}
	for _, nd := range j.names {
		links[nd.id]++
	}
	m := map[string]expect{}
	for name, nd := range j.names {
		switch nd.kind {
		case kindFile:
			e := fileExpect(nd.data, nd.perm)
			e.nlink = links[nd.id]
			e.group = strconv.Itoa(nd.id)
			m[name] = e
		case kindDir:
			m[name] = expect{kind: kindDir, size: -1, perm: nd.perm, nlink: 2}
		case kindSymlink:
			m[name] = expect{kind: kindSymlink, size: int64(len(nd.target)), target: nd.target}
		}
	}
	return m
}

func (j *metaJob) iterate(ctx context.Context, w *workload, n int) error {
	j.round = n
	defer func() { w.model.replace(j.export()) }()
	for i := 0; i < j.ops; i++ {
		if ctx.Err() != nil {
			return errStopped
		}
		if err := j.op(w); err != nil {
			return err
		}
	}
	return j.check(w)
}

// op does one random operation through the mount and applies it to the
// model once it returned.
func (j *metaJob) op(w *workload) error {
	full := len(j.names) >= j.maxNames
	switch k := w.rng.IntN(36); {
	case k < 8 && !full: // create
		name := j.newName("m")
		data := make([]byte, w.rng.IntN(300))
		fillRandom(w.rng, data)
		w.step("create %s (%d bytes)", name, len(data))
		f, err := os.OpenFile(w.path(name), os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o644)
		if err != nil {
			return err
		}
		j.nextID++
		nd := &mnode{id: j.nextID, kind: kindFile, perm: 0o644}
		j.names[name] = nd
		if _, err := f.Write(data); err != nil {
			f.Close()
			return err
		}
		if err := f.Close(); err != nil {
			return err
		}
		nd.data = data
	case k < 12: // write
		name := j.pick(w, "f")
		if name == "" {
			return nil
		}
		nd := j.names[name]
		if nd.perm&0o200 == 0 {
			return nil // root could, but keep modes meaningful
		}
		data := make([]byte, w.rng.IntN(2000))
		fillRandom(w.rng, data)
		w.step("rewrite %s (%d bytes)", name, len(data))
		if err := os.WriteFile(w.path(name), data, 0); err != nil {
			return err
		}
		nd.data = data
	case k < 18: // rename
		from := j.pick(w, "fdl")
		if from == "" {
			return nil
		}
		nd := j.names[from]
		to := j.newName("r")
		if nd.kind != kindDir && w.rng.IntN(2) == 0 {
			if t := j.pick(w, "f"); t != "" && t != from {
				to = t // replace an existing file
			}
		}
		w.step("rename %s to %s", from, to)
		if err := os.Rename(w.path(from), w.path(to)); err != nil {
			return err
		}
		if j.names[to] == nd {
			// Both names are links to one file: POSIX says rename does
			// nothing then.
			return nil
		}
		delete(j.names, from)
		j.names[to] = nd
	case k < 21 && !full: // link
		from := j.pick(w, "f")
		if from == "" {
			return nil
		}
		to := j.newName("h")
		w.step("link %s to %s", to, from)
		if err := os.Link(w.path(from), w.path(to)); err != nil {
			return err
		}
		j.names[to] = j.names[from]
	case k < 26 || full && k < 30: // unlink
		name := j.pick(w, "fl")
		if name == "" {
			return nil
		}
		w.step("unlink %s", name)
		if err := os.Remove(w.path(name)); err != nil {
			return err
		}
		delete(j.names, name)
	case k < 30: // chmod
		name := j.pick(w, "fd")
		if name == "" {
			return nil
		}
		perm := metaPerms[w.rng.IntN(len(metaPerms))]
		if j.names[name].kind == kindDir {
			perm |= 0o700 // stays usable
		}
		w.step("chmod %#o %s", perm, name)
		if err := os.Chmod(w.path(name), perm); err != nil {
			return err
		}
		j.names[name].perm = perm
	case k < 33 && !full: // symlink
		name := j.newName("s")
		target := fmt.Sprintf("target/%d/%s", w.rng.IntN(1000), strings.Repeat("x", w.rng.IntN(40)))
		w.step("symlink %s -> %s", name, target)
		if err := os.Symlink(target, w.path(name)); err != nil {
			return err
		}
		j.nextID++
		j.names[name] = &mnode{id: j.nextID, kind: kindSymlink, target: target}
	case k < 34 && !full: // mkdir
		name := j.newName("d")
		w.step("mkdir %s", name)
		if err := os.Mkdir(w.path(name), 0o755); err != nil {
			return err
		}
		j.nextID++
		j.names[name] = &mnode{id: j.nextID, kind: kindDir, perm: 0o755}
	default: // rmdir
		name := j.pick(w, "d")
		if name == "" {
			return nil
		}
		w.step("rmdir %s", name)
		if err := syscall.Rmdir(w.path(name)); err != nil {
			return &fs.PathError{Op: "rmdir", Path: w.path(name), Err: err}
		}
		delete(j.names, name)
	}
	return nil
}

// check compares the directory, through the mount and on disk, with the
// model.
func (j *metaJob) check(w *workload) error {
	w.step("round %d: scan through the mount", j.round)
	mnt, err := scanTree(w.mnt, nil)
	if err != nil {
		return err
	}
	w.step("round %d: scan the server's disk", j.round)
	disk, err := scanTree(w.disk, nil)
	if err != nil {
		return err
	}
	return compareTrees(j.export(), mnt, disk).err(fmt.Sprintf("round %d", j.round))
}

// ---- helpers shared by the jobs' construction.
