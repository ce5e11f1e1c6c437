package client

import (
	"context"
	"fmt"
	"slices"
	"strings"
)

// The mount's lifetime: write-back that a caller started goes on when the
// caller gives up, until the data is on the server or the mount ends, and
// what is still unwritten when it ends is reported, never silently lost.

// detached carries a caller's values (the operation RPCs are counted
// under) with the mount's lifetime for cancellation.
type detached struct {
	context.Context // the mount's lifetime
	vals            context.Context
}

func (d detached) Value(key any) any { return d.vals.Value(key) }

// detach returns ctx's values under the mount's lifetime.
func (fs *FS) detach(ctx context.Context) context.Context {
	return detached{Context: fs.life, vals: ctx}
}

// await runs f, which writes data back, detached from the caller's
// cancellation, and waits for it or for ctx. Write-back is never abandoned
// half-way because its caller gave up (an abandoned WRITE would drop the
// data): a caller let go (killed, in close or fsync or a synchronous write)
// gets ctx's error while f goes on; its data is written when the server
// answers, or reported at unmount (Close).
func (fs *FS) await(ctx context.Context, f func(context.Context) error) error {
	done := make(chan error, 1)
	go func() { done <- f(fs.detach(ctx)) }()
	select {
	case err := <-done:
		return err
	case <-ctx.Done():
		select {
		case err := <-done: // finished meanwhile: its result, not the caller's
			return err
		default:
			return ctx.Err()
		}
	}
}

// UnwrittenFile is a file whose data a mount could not write back.
type UnwrittenFile struct {
	Path  string // from the export's root ("/dir/file"), or "node N" if no name is known
	Bytes uint64 // written here and not known to be on the server (sent or not)
}

// UnwrittenError is Close's error when data is left unwritten.
type UnwrittenError struct {
	Files []UnwrittenFile
	Err   error // why the write-back ended
}

func (e *UnwrittenError) Error() string {
	var total uint64
	var b strings.Builder
	for i, f := range e.Files {
		total += f.Bytes
		if i > 0 {
			b.WriteString(", ")
		}
		fmt.Fprintf(&b, "%s (%d bytes)", f.Path, f.Bytes)
	}
	return fmt.Sprintf("%d bytes in %d files not written back: %s: %v", total, len(e.Files), b.String(), e.Err)
}

func (e *UnwrittenError) Unwrap() error { return e.Err }

// Close unmounts: it writes back and commits what is dirty and closes the
// connection. The write-back ends when ctx does or, on a hard mount, at
// the server's next major timeout (where a soft mount's calls would have
// failed), so that unmounting from a dead server ends; data left unwritten
// is then returned as an *UnwrittenError naming each file and its bytes.
func (fs *FS) Close(ctx context.Context) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	major := fs.srv.MajorTimeout()
	go func() {
		select {
		case <-major:
			cancel()
		case <-ctx.Done():
		}
	}()
	// Write-back still going on for callers that gave up ends too: the
	// flushes below wait for it.
	stop := context.AfterFunc(ctx, fs.endLife)
	err := fs.wb.flushAll(ctx)
	if derr := fs.sendAllDirTimes(ctx); err == nil {
		err = derr
	}
	stop()
	fs.endLife()
	fs.bgMu.Lock()
	fs.closing = true
	fs.bgMu.Unlock()
	fs.bg.Wait() // directory passes end with the mount's lifetime
	fs.closeDelegs(ctx)
	if err != nil {
		select {
		case <-major:
			err = fmt.Errorf("server %s not responding: %w", fs.cfg.Server, err)
		default:
		}
		if lost := fs.unwritten(); len(lost) > 0 {
			err = &UnwrittenError{Files: lost, Err: err}
		}
	}
	fs.wb.close()
	fs.srv.Close()
	return err
}

// unwritten lists the files with data not known to be on the server.
func (fs *FS) unwritten() []UnwrittenFile {
	w := fs.wb
	w.mu.Lock()
	files := make([]*inode, 0, len(w.files))
	for n := range w.files {
		files = append(files, n)
	}
	w.mu.Unlock()
	var out []UnwrittenFile
	for _, n := range files {
		st := peek(n)
		if st == nil {
			continue
		}
		st.mu.Lock()
		b := st.dirty.bytes() + uncommittedBytes(st.unstable)
		for i := range st.inflight {
			b += uint64(len(st.inflight[i].data))
		}
		st.mu.Unlock()
		if b > 0 {
			out = append(out, UnwrittenFile{Path: fs.pathOf(n), Bytes: b})
		}
	}
	slices.SortFunc(out, func(a, b UnwrittenFile) int { return strings.Compare(a.Path, b.Path) })
	return out
}

// pathOf names n from the export's root by the names the name caches hold
// (for diagnostics: a file linked twice gets one of its names), or "node N"
// from where none is known.
func (fs *FS) pathOf(n *inode) string {
	var nodes []*inode // directories, searched for a regular file's name
	var parts []string
	for depth := 0; n.id != RootID && depth < 256; depth++ {
		n.mu.Lock()
		dirID := n.parent // the directory it was last reached from: a file may have others
		n.mu.Unlock()
		var dir *inode
		var name string
		if d := fs.nodes.get(dirID); d != nil {
			dir, name = nameIn([]*inode{d}, n.id)
		}
		if dir == nil {
			if nodes == nil {
				nodes = fs.nodes.all()
			}
			dir, name = nameIn(nodes, n.id)
		}
		if dir == nil {
			parts = append(parts, fmt.Sprintf("node %d", n.id))
			break
		}
		parts = append(parts, name)
		n = dir
	}
	slices.Reverse(parts)
	return "/" + strings.Join(parts, "/")
}

// nameIn finds a name for node id in the name caches of dirs.
func nameIn(dirs []*inode, id NodeID) (*inode, string) {
	for _, d := range dirs {
		d.mu.Lock()
		for name, e := range d.names {
			if e.node == id {
				d.mu.Unlock()
				return d, name
			}
		}
		d.mu.Unlock()
	}
	return nil, ""
}
