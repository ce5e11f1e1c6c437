package client

import (
	"fmt"
	"syscall"
	"testing"
	"time"

	"hushfs/internal/proto"
)

// TestWalkReadsTwoLevelsAhead: a walk that lists five directories (two to
// show the walk, three to show it goes through directories never listed)
// reads ahead the subdirectories of those it reached and theirs, through
// nodes it holds itself (walkhold.go), never more than aheadHoldDepth
// levels below a directory the kernel holds (aheadHoldDepthCarried where
// read-ahead rides in other calls: one level more, and reached), never
// more than aheadHolds held at once, no more than aheadWindow beyond its
// visits; and once the walk is over, every node the kernel did not take
// leaves the table.
func TestWalkReadsTwoLevelsAhead(t *testing.T) {
	for _, carries := range []bool{false, true} {
		t.Run(fmt.Sprintf("carries=%v", carries), func(t *testing.T) {
			testWalkReadsLevelsAhead(t, carries)
		})
	}
}

func testWalkReadsLevelsAhead(t *testing.T, carries bool) {
	ts := startServer(t)
	var dirs []string
	for a := 0; a < 4; a++ {
		for b := 0; b < 4; b++ {
			for c := 0; c < 4; c++ {
				dirs = append(dirs, fmt.Sprintf("top/a%d/b%d/c%d/d0", a, b, c))
			}
		}
	}
	makeTree(t, ts.dir, dirs, 2)
	fs, clk := ts.mountClocked(t, "")
	depth := 2 // aheadHoldDepth
	if carries {
		fs.srv = carrier{fs.srv}
		depth = 3 // aheadHoldDepthCarried
	}
	k := newKernel(t, fs, clk)
	calls(fs)
	k.list("top")
	k.list("top/a0")
	k.list("top/a0/b0")
	k.list("top/a0/b0/c0")
	k.list("top/a0/b0/c1")
	settle(t, fs)
	got := calls(fs)

	held, deepest := 0, 0
	for _, n := range fs.nodes.all() {
		fs.nodes.mu.Lock()
		if n.aheadHeld && n.lookups == 0 {
			held++
			deepest = max(deepest, n.aheadDepth)
		}
		fs.nodes.mu.Unlock()
	}
	t.Logf("calls %v; %d nodes held, the deepest %d levels below the kernel's", got, held, deepest)
	if held == 0 {
		t.Errorf("no directory read ahead beyond those the kernel holds")
	}
	if deepest != depth || held > aheadHolds {
		t.Errorf("%d nodes held, %d levels deep; want at most %d, %d deep", held, deepest, aheadHolds, depth)
	}
	if n := got["READDIRPLUS"]; n > 5+aheadWindow+aheadCalls {
		t.Errorf("a walk of 5 directories read %d, want at most %d", n, 5+aheadWindow+aheadCalls)
	}

	// The walk is over: what the kernel never took is let go.
	clk.advance(walkIdle + time.Second)
	fs.pump()
	for _, n := range fs.nodes.all() {
		fs.nodes.mu.Lock()
		if n.aheadHeld {
			t.Errorf("node %d (%s) still held after the walk", n.id, n.name)
		}
		fs.nodes.mu.Unlock()
	}
	if fs.nodes.dropCount() != 1 {
		t.Errorf("letting go of held nodes counted %d drops, want none", fs.nodes.dropCount()-1)
	}
}

// TestWalkReadReadsAhead: a walk on a fresh mount that has listed two
// directories reads no never-listed one ahead (a build may list two and
// go no further) until it opens a file of one it listed to read it (grep
// -r): then the rest of the tree is read ahead at once.
func TestWalkReadReadsAhead(t *testing.T) {
	ts := startServer(t)
	var dirs []string
	for i := 0; i < 10; i++ {
		dirs = append(dirs, fmt.Sprintf("top/d%d", i))
	}
	makeTree(t, ts.dir, dirs, 3)
	fs, clk := ts.mountClocked(t, "")
	k := newKernel(t, fs, clk)
	calls(fs)
	k.list("top")
	k.list("top/d0")
	k.list("top/d1") // top's second subdirectory: the walk shows
	settle(t, fs)
	if got := calls(fs); got["READDIRPLUS"] != 3 {
		t.Errorf("before any file is read: %v, want the 3 listings alone", got)
	}
	fh, _, err := fs.Open(k.ctx, root, k.node["top/d1/f0000"], syscall.O_RDONLY)
	if err != nil {
		t.Fatal(err)
	}
	fs.Release(k.ctx, fh)
	settle(t, fs)
	if got := calls(fs); got["READDIRPLUS"] != 8 {
		t.Errorf("after a file of d1 was opened: %v, want d2–d9 read ahead (8)", got)
	}
}

// TestWalkGoesOnWhileReading: a walk that reads the files of a directory
// it listed for longer than walkIdle (grep -r in a directory of many
// files) is still going on: what it read ahead and holds is kept for
// where it goes next, not let go as after a walk that stopped.
func TestWalkGoesOnWhileReading(t *testing.T) {
	ts := startServer(t)
	var dirs []string
	for i := 0; i < 6; i++ {
		dirs = append(dirs, fmt.Sprintf("top/d%d", i), fmt.Sprintf("top/d%d/sub", i))
	}
	makeTree(t, ts.dir, dirs, 3)
	fs, clk := ts.mountClocked(t, "")
	k := newKernel(t, fs, clk)
	k.list("top")
	k.list("top/d0")
	k.list("top/d1") // top's second subdirectory: the walk shows
	for i := 0; i < 4; i++ {
		// The walk reads d1's files, a little under walkIdle apart.
		fh, _, err := fs.Open(k.ctx, root, k.node["top/d1/f0000"], syscall.O_RDONLY)
		if err != nil {
			t.Fatal(err)
		}
		fs.Release(k.ctx, fh)
		settle(t, fs)
		clk.advance(walkIdle * 3 / 4)
	}
	fs.pump()
	held := 0
	for _, n := range fs.nodes.all() {
		fs.nodes.mu.Lock()
		if n.aheadHeld && n.lookups == 0 {
			held++
		}
		fs.nodes.mu.Unlock()
	}
	if held == 0 {
		t.Errorf("after %v of reading d1's files, no node held for the walk: it was taken for over", 3*walkIdle)
	}
	calls(fs)
	k.list("top/d2")
	k.list("top/d2/sub")
	settle(t, fs)
	if got := calls(fs); got["READDIRPLUS"] != 0 {
		t.Errorf("listing d2 and d2/sub after reading d1's files: %v, want both read ahead", got)
	}
}

// carrier is a server whose read-ahead rides in other calls
// (proto.AheadCarrier), as NFSv4.1's does.
type carrier struct{ proto.Server }

func (carrier) CarriesAhead() bool { return true }

// TestWalkBeginsAtFirstRead: a directory listed just after its parent,
// and a file of it opened to be read, is how grep -r begins. Where
// read-ahead rides in other calls that begins a walk: the parent's other
// subdirectories are read ahead at once. Where each read-ahead is a call
// of its own (NFSv3), it does not: a build may do as much and go no
// further.
func TestWalkBeginsAtFirstRead(t *testing.T) {
	for _, carries := range []bool{false, true} {
		t.Run(fmt.Sprintf("carries=%v", carries), func(t *testing.T) {
			ts := startServer(t)
			var dirs []string
			for i := 0; i < 10; i++ {
				dirs = append(dirs, fmt.Sprintf("top/d%d", i))
			}
			makeTree(t, ts.dir, dirs, 3)
			fs, clk := ts.mountClocked(t, "")
			if carries {
				fs.srv = carrier{fs.srv}
			}
			k := newKernel(t, fs, clk)
			k.list("top")
			k.list("top/d0")
			settle(t, fs)
			calls(fs)
			fh, _, err := fs.Open(k.ctx, root, k.node["top/d0/f0000"], syscall.O_RDONLY)
			if err != nil {
				t.Fatal(err)
			}
			fs.Release(k.ctx, fh)
			settle(t, fs)
			want := uint64(0)
			if carries {
				want = 9
			}
			if got := calls(fs); got["READDIRPLUS"] != want {
				t.Errorf("after a file of d0 was opened: %v, want %d listings read ahead", got, want)
			}
		})
	}
}
