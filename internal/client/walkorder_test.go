package client

import (
	"fmt"
	"slices"
	"testing"
	"time"
)

// TestWalkQueuePreorder: directories to read ahead are queued in the
// order a depth-first walk reaches them (walkorder.go): the subdirectories
// of one listed after its siblings were queued go right after it, before
// its later siblings, however late they were found. Queued oldest first,
// they went behind every sibling, and grep -r, which enters a first
// subdirectory right after its parent, reached them before their listing
// was asked (one alone listing a grep -r of busybox, every run).
func TestWalkQueuePreorder(t *testing.T) {
	ts := startServer(t)
	var dirs []string
	for _, a := range []string{"a", "b", "c", "d", "e"} {
		for _, x := range []string{"x", "y", "z"} {
			dirs = append(dirs, fmt.Sprintf("top/%s/%s/w", a, x))
		}
	}
	makeTree(t, ts.dir, dirs, 1)
	fs, clk := ts.mountClocked(t, "")
	k := newKernel(t, fs, clk)
	k.list("top")
	top := fs.nodes.get(k.node["top"])
	subs := fs.subdirs(top)
	if len(subs) != 5 {
		t.Fatalf("top's subdirectories: %d, want 5", len(subs))
	}
	fs.enqueueSubdirs(top, 0)
	// The middle one's listing comes in (as a read-ahead's would), and
	// then that of its own middle subdirectory.
	// Listings further apart than walkStart show no walk: nothing is
	// taken off the queue.
	mid := fs.nodes.get(subs[2])
	clk.advance(walkStart + time.Second)
	k.list("top/" + mid.name)
	midSubs := fs.subdirs(mid)
	fs.enqueueSubdirs(mid, 0)
	deep := fs.nodes.get(midSubs[1])
	clk.advance(walkStart + time.Second)
	k.list("top/" + mid.name + "/" + deep.name)
	fs.enqueueSubdirs(deep, 0)

	var want []NodeID
	for _, id := range subs {
		want = append(want, id)
		if id == mid.id {
			for _, id2 := range midSubs {
				want = append(want, id2)
				if id2 == deep.id {
					want = append(want, fs.subdirs(deep)...)
				}
			}
		}
	}
	fs.walk.mu.Lock()
	var got []NodeID
	for _, d := range fs.walk.queue {
		got = append(got, d.id)
	}
	fs.walk.mu.Unlock()
	if !slices.Equal(got, want) {
		t.Errorf("queue %v, want the walk's preorder %v", got, want)
	}
}
