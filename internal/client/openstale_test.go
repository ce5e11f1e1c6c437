package client

import (
	"context"
	"os"
	"path/filepath"
	"sync"
	"syscall"
	"testing"
	"time"

	"hushfs/internal/proto"
	"hushfs/internal/server"
)

// countCloses counts the CLOSEs the core asks for, by open.
type countCloses struct {
	proto.Opener
	mu sync.Mutex
	n  map[[12]byte]int
}

func (c *countCloses) CloseOpen(ctx context.Context, cr *proto.Cred, fh proto.FH, st proto.StateID) error {
	c.mu.Lock()
	c.n[st.Other]++
	c.mu.Unlock()
	return c.Opener.CloseOpen(ctx, cr, fh, st)
}

// holdRecall holds the CB_RECALLs of one file until released.
type holdRecall struct {
	proto.Callbacks
	fh       proto.FH
	mu       sync.Mutex
	held     []func()
	recalled chan struct{} // closed at the first held
}

func (h *holdRecall) Recall(fh proto.FH, st proto.StateID, trunc bool) {
	if string(fh) != string(h.fh) {
		h.Callbacks.Recall(fh, st, trunc)
		return
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	if len(h.held) == 0 {
		close(h.recalled)
	}
	h.held = append(h.held, func() { h.Callbacks.Recall(fh, st, trunc) })
}

func (h *holdRecall) release() {
	h.mu.Lock()
	held := h.held
	h.held = nil
	h.mu.Unlock()
	for _, f := range held {
		f()
	}
}

// TestStaleOpenForgetsKeptOpen: an OPEN that finds its file without a
// name (removed on the server's disk; the server kept it for our open)
// answers ESTALE and closes the identity's open at the server. An open of
// the same identity kept past its last close under a write delegation is
// that very open (one per open owner): it is forgotten with it, so the
// delegation's return does not close it a second time. Before, it did,
// with an older seqid; two CLOSEs of one open on their way at once hung
// the creates waiting for them (closeq.go; the recall soak).
func TestStaleOpenForgetsKeptOpen(t *testing.T) {
	ts := startServerWith(t, func(c *server.Config) { c.Delegations = true })
	p := filepath.Join(ts.dir, "f")
	noErr(t, os.WriteFile(p, []byte("0123456789"), 0o666))
	noErr(t, os.Chmod(p, 0o666)) // root is squashed
	fs := ts.mount(t, "vers=4.1")
	closes := &countCloses{Opener: fs.opener, n: map[[12]byte]int{}}
	fs.opener = closes
	ctx := ctxT(t)
	e, err := fs.Lookup(ctx, root, RootID, "f")
	noErr(t, err)
	n, _ := fs.node(e.Node)
	// A write delegation (once the back channel answered CB_NULL), and the
	// open kept past its last close under it.
	for i := 0; ; i++ {
		fh, _, err := fs.Open(ctx, root, e.Node, syscall.O_RDWR)
		noErr(t, err)
		fs.Release(ctx, fh)
		if _, ok := fs.writeDeleg(n); ok {
			break
		}
		if i == 50 {
			t.Fatal("no write delegation after 50 opens for writing")
		}
		time.Sleep(100 * time.Millisecond)
	}
	no := fs.opensOf(n)
	no.vmu.Lock()
	kept := no.owners[root.UID]
	no.vmu.Unlock()
	if kept == nil {
		t.Fatal("no open kept past the last close under the write delegation")
	}
	// Only CLOSEs from here on count: an open before the delegation came
	// was closed at its release, and that CLOSE, queued, was taken back by
	// the next OPEN, which the server answered with the same open.
	closes.mu.Lock()
	clear(closes.n)
	closes.mu.Unlock()
	hold := &holdRecall{Callbacks: delegCallbacks{fs}, fh: n.fh, recalled: make(chan struct{})}
	fs.delegator.SetCallbacks(hold)
	defer hold.release()

	// Removed on the server's disk: the server recalls the delegation
	// (held here a while) and keeps the file for our open.
	noErr(t, os.Remove(p))
	select {
	case <-hold.recalled:
	case <-time.After(10 * time.Second):
		t.Fatal("no CB_RECALL after the file was removed on the server")
	}
	// Another group of the same uid: its rights are not cached, so the
	// delegation does not answer for it; the OPEN is the same owner's.
	other := &Cred{UID: root.UID, GID: 4242}
	if fh, _, err := fs.Open(ctx, other, e.Node, syscall.O_RDONLY); err != syscall.ESTALE {
		if err == nil {
			fs.Release(ctx, fh)
		}
		t.Fatalf("open of the removed file: %v, want ESTALE", err)
	}
	hold.release()
	deadline := time.Now().Add(10 * time.Second)
	for {
		fs.dl.mu.Lock()
		h := fs.dl.held[string(n.fh)]
		fs.dl.mu.Unlock()
		if h == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the delegation was not returned within 10 s of the recall")
		}
		time.Sleep(20 * time.Millisecond)
	}
	closes.mu.Lock()
	defer closes.mu.Unlock()
	if got := closes.n[kept.st.Other]; got != 1 {
		t.Errorf("%d CLOSEs of the open, want 1", got)
	}
}
