package client

import (
	"os"
	"path/filepath"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"hushfs/internal/nfs3"
	"hushfs/internal/proto"
)

// shiftCtimes moves every ctime in the results of the procedures a file's
// life here goes through by the given seconds, as a server's clock would.
func shiftCtimes(t *testing.T, proc uint32, res []byte, by uint32) []byte {
	post := func(p *nfs3.PostOpAttr) {
		if p.Present {
			p.Attr.Ctime.Seconds += by
		}
	}
	wcc := func(w *nfs3.WccData) {
		if w.Before.Present {
			w.Before.Attr.Ctime.Seconds += by
		}
		post(&w.After)
	}
	switch proc {
	case nfs3.ProcGetattr:
		return recode(t, res, func(r *nfs3.GetattrRes) {
			if r.Status == nfs3.OK {
				r.Attr.Ctime.Seconds += by
			}
		})
	case nfs3.ProcSetattr:
		return recode(t, res, func(r *nfs3.SetattrRes) { wcc(&r.Wcc) })
	case nfs3.ProcLookup:
		return recode(t, res, func(r *nfs3.LookupRes) { post(&r.ObjAttr); post(&r.DirAttr) })
	case nfs3.ProcAccess:
		return recode(t, res, func(r *nfs3.AccessRes) { post(&r.ObjAttr) })
	case nfs3.ProcRead:
		return recode(t, res, func(r *nfs3.ReadRes) { post(&r.FileAttr) })
	case nfs3.ProcWrite:
		return recode(t, res, func(r *nfs3.WriteRes) { wcc(&r.Wcc) })
	case nfs3.ProcCreate:
		return recode(t, res, func(r *nfs3.CreateRes) { post(&r.ObjAttr); wcc(&r.DirWcc) })
	case nfs3.ProcCommit:
		return recode(t, res, func(r *nfs3.CommitRes) { wcc(&r.Wcc) })
	}
	return res
}

// TestServerClockGoesBack: the server's clock was an hour ahead and steps
// back, so the ctimes of the files changed from then on go backwards. An
// application appending to a file it holds open sees its append at once,
// and an open (close-to-open) sees another client's change at once. Both
// used to be dropped as older than the cached attributes until those
// expired.
func TestServerClockGoesBack(t *testing.T) {
	ts := startServer(t)
	var ahead atomic.Bool
	ahead.Store(true)
	port := hostileFront(t, ts.nfsL.Addr().String(), func(proc uint32, args, res []byte) []byte {
		if !ahead.Load() {
			return res
		}
		return shiftCtimes(t, proc, res, 3600)
	})
	fs := ts.mountVia(t, port, "")
	ctx := ctxT(t)
	write := func(fh uint64, off uint64, s string) {
		t.Helper()
		if _, err := fs.Write(ctx, root, fh, off, []byte(s)); err != nil {
			t.Fatal(err)
		}
		if err := fs.Flush(ctx, root, fh); err != nil {
			t.Fatal(err)
		}
	}
	read := func(fh uint64) string {
		t.Helper()
		buf := make([]byte, 100)
		n, err := fs.Read(ctx, root, fh, 0, buf)
		if err != nil {
			t.Fatal(err)
		}
		return string(buf[:n])
	}
	size := func(id NodeID) uint64 {
		t.Helper()
		a, _, err := fs.GetAttr(ctx, root, id)
		if err != nil {
			t.Fatal(err)
		}
		return a.Size
	}

	// Before the step: a file we keep open, and one another client will
	// change, read once through the client.
	own, fh, err := fs.Create(ctx, root, RootID, "own", syscall.O_RDWR, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	defer fs.Release(ctx, fh)
	write(fh, 0, "hello")
	other, ofh, err := fs.Create(ctx, root, RootID, "other", syscall.O_WRONLY, 0o666)
	if err != nil {
		t.Fatal(err)
	}
	write(ofh, 0, "abc")
	fs.Release(ctx, ofh)
	if ofh, _, err = fs.Open(ctx, root, other.Node, syscall.O_RDONLY); err != nil {
		t.Fatal(err)
	}
	if got := read(ofh); got != "abc" {
		t.Fatalf("other before the step: %q", got)
	}
	fs.Release(ctx, ofh)
	if a, _, _ := fs.GetAttr(ctx, root, own.Node); time.Unix(a.Ctime.Sec, 0).Before(time.Now().Add(50 * time.Minute)) {
		t.Fatalf("cached ctime %v is not an hour ahead: the front does not shift it", time.Unix(a.Ctime.Sec, 0))
	}

	ahead.Store(false) // the server's clock steps back an hour

	write(fh, 5, " world")
	if got := size(own.Node); got != 11 {
		t.Errorf("size after our own append: %d, want 11", got)
	}
	if got := read(fh); got != "hello world" {
		t.Errorf("read after our own append: %q", got)
	}

	if err := os.WriteFile(filepath.Join(ts.dir, "other"), []byte("abcdef"), 0o666); err != nil {
		t.Fatal(err)
	}
	ofh, keep, err := fs.Open(ctx, root, other.Node, syscall.O_RDONLY)
	if err != nil {
		t.Fatal(err)
	}
	defer fs.Release(ctx, ofh)
	if keep {
		t.Error("open after another client's change keeps the kernel's pages")
	}
	if got := size(other.Node); got != 6 {
		t.Errorf("size after another client's change, at open: %d, want 6", got)
	}
	if got := read(ofh); got != "abcdef" {
		t.Errorf("read after another client's change: %q", got)
	}
}

// TestWccFollowsAcrossClockStep: among calls in flight together, a reply
// whose pre-operation attributes are the cached ones ran right after them,
// even when its ctime is older (the clock stepped back between). Our
// WRITE, sent just before a GETATTR that ran first and came back first
// with the state from before the step, must not be taken for the older
// state.
func TestWccFollowsAcrossClockStep(t *testing.T) {
	ts := startServer(t)
	fs := ts.mount(t, "")
	ctx := ctxT(t)
	e, fh, err := fs.Create(ctx, root, RootID, "f", syscall.O_RDWR, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	defer fs.Release(ctx, fh)
	n := fs.nodes.get(e.Node)
	n.mu.Lock()
	before := n.attr
	n.mu.Unlock()
	before.Ctime.Sec += 3600 // the last change, made an hour ahead
	writeSent := fs.now().Add(-2 * time.Millisecond)
	getattrSent := writeSent.Add(time.Millisecond)

	n.mu.Lock()
	fs.applyAttrLocked(n, &before, getattrSent) // the GETATTR ran first
	n.mu.Unlock()
	after := before
	after.Size = 20
	after.Ctime.Sec -= 3600 // now, after the step
	after.Mtime = after.Ctime
	fs.applyWcc(n, &proto.Wcc{
		Before: proto.PreAttr{Present: true, Attr: proto.WccAttr{Size: before.Size, Mtime: before.Mtime, Ctime: before.Ctime}},
		After:  proto.PostAttr{Present: true, Attr: after},
	}, writeSent, true)
	if a, _, _ := fs.GetAttr(ctx, root, e.Node); a.Size != 20 {
		t.Errorf("after our WRITE that followed the cached state: size %d, want 20", a.Size)
	}
}
