package server

import (
	"math/rand/v2"
	"testing"

	"golang.org/x/sys/unix"
)

const mib = 1 << 20

// shuffledChunks returns the offsets of n chunks of size bytes, in order
// but shuffled within consecutive windows of w chunks.
func shuffledChunks(rng *rand.Rand, n, w int, size uint64) []uint64 {
	offs := make([]uint64, n)
	for i := range offs {
		offs[i] = uint64(i) * size
	}
	for i := 0; i < n; i += w {
		win := offs[i:min(i+w, n)]
		rng.Shuffle(len(win), func(a, b int) { win[a], win[b] = win[b], win[a] })
	}
	return offs
}

func TestSeqInOrder(t *testing.T) {
	var tr seqTracker
	for i := range 64 {
		v := tr.observe(uint64(i)*mib, mib)
		if v.class != seqInOrder {
			t.Fatalf("request %d: %v, want in-order", i, v.class)
		}
		if want := min(uint64(i+1)*mib, seqMaxScore); v.score != want {
			t.Fatalf("request %d: score %d, want %d", i, v.score, want)
		}
		if v.run.front != uint64(i+1)*mib {
			t.Fatalf("request %d: front %d", i, v.run.front)
		}
		if got, want := v.sequential(), v.score >= seqThreshold; got != want || (i >= 1 && !got) {
			t.Fatalf("request %d: sequential %v with score %d", i, got, v.score)
		}
	}
}

// Requests shuffled within windows of up to 4 (and, separately, 8) are one
// sequential stream: nothing is random, the front advances to the end.
func TestSeqReordered(t *testing.T) {
	for _, w := range []int{2, 4, 8} {
		rng := rand.New(rand.NewPCG(uint64(w), 7))
		var tr seqTracker
		offs := shuffledChunks(rng, 256, w, mib)
		var v seqView
		for _, off := range offs {
			v = tr.observe(off, mib)
			if v.class != seqInOrder && v.class != seqReordered {
				t.Fatalf("window %d: request at %d MiB: %v", w, off/mib, v.class)
			}
		}
		if tr.count(seqReordered) == 0 {
			t.Fatalf("window %d: nothing counted as reordered in %v", w, offs[:16])
		}
		if v.score != seqMaxScore || v.run.front != 256*mib || v.run.start != 0 {
			t.Fatalf("window %d: score %d front %d start %d", w, v.score, v.run.front, v.run.start)
		}
	}
}

// Random 1 MiB requests over 1 GiB never look sequential; with 4 KiB
// requests over the same range neither.
func TestSeqRandom(t *testing.T) {
	for _, size := range []uint64{4096, mib} {
		rng := rand.New(rand.NewPCG(1, uint64(size)))
		slots := rng.Perm(1 << 30 / int(size))
		var tr seqTracker
		for i := range 200 {
			v := tr.observe(uint64(slots[i])*size, size)
			if v.sequential() {
				t.Fatalf("size %d: request %d at %d: sequential (score %d)", size, i, uint64(slots[i])*size, v.score)
			}
		}
		if r := tr.count(seqRandom); r < 190 {
			t.Fatalf("size %d: only %d of 200 random requests classified random", size, r)
		}
	}
}

func TestSeqRandomHalvesScore(t *testing.T) {
	var tr seqTracker
	for i := range 16 {
		tr.observe(uint64(i)*mib, mib)
	}
	v := tr.observe(1<<40, mib)
	if v.class != seqRandom || v.score != 8*mib {
		t.Fatalf("random after 16 MiB in order: %v score %d, want random 8 MiB", v.class, v.score)
	}
	if !v.sequential() {
		t.Fatal("one stray request ended the stream")
	}
	// The stream resumes where it was: the stray one started a run of its
	// own that the next request leaves.
	v = tr.observe(16*mib, mib)
	if v.class != seqReordered || v.score != 9*mib || v.run.front != 17*mib {
		t.Fatalf("after the stray request: %v score %d front %d", v.class, v.score, v.run.front)
	}
	// Random requests far apart halve it until it is not sequential.
	for i := range 3 {
		v = tr.observe(uint64(2+i)<<40, mib)
	}
	if v.class != seqRandom || v.sequential() || v.score != 9*mib/8 {
		t.Fatalf("after 3 random: %v score %d", v.class, v.score)
	}
}

// Repeating a request (a retransmission, a client polling the head of a
// file) neither grows the score nor counts as random.
func TestSeqRepeat(t *testing.T) {
	var tr seqTracker
	tr.observe(0, 4096)
	for range 1000 {
		v := tr.observe(0, 4096)
		if v.class != seqRepeat || v.score != 4096 {
			t.Fatalf("repeat: %v score %d", v.class, v.score)
		}
	}
	if v := tr.observe(4096, 4096); v.class != seqInOrder {
		t.Fatalf("after repeats: %v", v.class)
	}
}

// A request further than the window from the front is random, even if
// close in absolute terms for a big request.
func TestSeqWindow(t *testing.T) {
	var tr seqTracker
	tr.observe(0, 64<<10)
	if v := tr.observe(64<<10+seqReorderK*64<<10, 64<<10); v.class != seqReordered {
		t.Fatalf("at the edge of the window: %v", v.class)
	}
	var tr2 seqTracker
	tr2.observe(0, 64<<10)
	if v := tr2.observe(64<<10+seqReorderK*64<<10+4096, 64<<10); v.class != seqRandom {
		t.Fatalf("past the window: %v", v.class)
	}
}

// planWrite asks for early write-back of sequential UNSTABLE writes only,
// in whole chunks, lagging the front by the reordering window.
func TestPlanWrite(t *testing.T) {
	fs := newFileState()
	starts := 0
	for i := range 64 {
		if fs.planWrite(uint64(i)*mib, mib, true) {
			starts++
		}
	}
	if starts != 1 || !fs.working {
		t.Fatalf("%d goroutine starts, working %v: want exactly 1 (it stays running)", starts, fs.working)
	}
	lag := uint64(seqReorderK) * mib
	want := (64*mib - lag) / clusterChunk * clusterChunk
	// Queued as one range, the later ones merged into the first.
	if len(fs.flushQ) != 1 || fs.flushQ[0] != (byteRange{0, want}) {
		t.Fatalf("flush queue %v, want [0, %d)", fs.flushQ, want)
	}
	// The goroutine drains it in one call, then stops.
	r, flush, ok := fs.nextJob()
	if !ok || !flush || r != (byteRange{0, want}) {
		t.Fatalf("nextJob: %v %v %v", r, flush, ok)
	}
	if _, _, ok := fs.nextJob(); ok || fs.working {
		t.Fatal("goroutine did not stop when caught up")
	}
	// A stray write does not make the stream start over: write-back
	// resumes where it was.
	fs.planWrite(1<<40, mib, true)
	for i := 64; i < 72; i++ {
		fs.planWrite(uint64(i)*mib, mib, true)
	}
	if len(fs.flushQ) != 1 || fs.flushQ[0] != (byteRange{want, (72*mib - lag) / clusterChunk * clusterChunk}) {
		t.Fatalf("after a stray write: flush queue %v", fs.flushQ)
	}

	// Stable writes and random writes never ask.
	fs = newFileState()
	for i := range 64 {
		if fs.planWrite(uint64(i)*mib, mib, false) {
			t.Fatal("stable writes started write-back")
		}
	}
	fs = newFileState()
	rng := rand.New(rand.NewPCG(3, 4))
	for _, slot := range rng.Perm(1024)[:200] {
		if fs.planWrite(uint64(slot)*mib, mib, true) {
			t.Fatalf("random writes started write-back (score %d)", fs.wr.score)
		}
	}
}

// planRead reads ahead of a sequential stream, contiguously, as far as its
// score and maxReadahead allow and not past the end of the file; a random
// stream gets FADV_RANDOM once and no readahead.
func TestPlanRead(t *testing.T) {
	const size = 100 * mib
	fs := newFileState()
	next := uint64(0)
	starts := 0
	for i := range 100 {
		ra, start, adv := fs.planRead(3, uint64(i)*mib, mib, size, 64<<10)
		if adv != -1 {
			t.Fatalf("read %d: advice %d on a sequential stream", i, adv)
		}
		if start {
			starts++
		}
		off, n := ra.off, ra.end-ra.off
		if n == 0 {
			continue
		}
		if i < 1 {
			t.Fatalf("read %d: readahead before the stream is sequential", i)
		}
		if off < next || off+n > size || n > maxReadahead || off+n > uint64(i+1)*mib+maxReadahead {
			t.Fatalf("read %d: readahead [%d, %d) after %d", i, off, off+n, next)
		}
		if next != 0 && off != next {
			t.Fatalf("read %d: readahead [%d, %d) leaves a gap after %d", i, off, off+n, next)
		}
		next = off + n
	}
	if next != size {
		t.Fatalf("readahead reached %d, want the end %d", next, uint64(size))
	}
	// Nothing ran the queue: one start, and the queue, merged, is the
	// whole readahead.
	if starts != 1 || len(fs.raQ) != 1 || fs.raQ[0].end != size {
		t.Fatalf("%d starts, queue %v", starts, fs.raQ)
	}

	fs = newFileState()
	rng := rand.New(rand.NewPCG(5, 6))
	advised := 0
	for _, slot := range rng.Perm(1 << 18)[:100] {
		ra, _, adv := fs.planRead(3, uint64(slot)*4096, 4096, 1<<30, 64<<10)
		if ra.end != 0 {
			t.Fatalf("readahead %v of a random stream", ra)
		}
		if adv != -1 {
			if adv != unix.FADV_RANDOM {
				t.Fatalf("advice %d", adv)
			}
			advised++
		}
	}
	if advised != 1 {
		t.Fatalf("FADV_RANDOM given %d times, want once", advised)
	}
	// A new descriptor has normal advice again.
	fs.descriptorsClosed()
	if _, _, adv := fs.planRead(4, 1<<29, 4096, 1<<30, 64<<10); adv != unix.FADV_RANDOM {
		t.Fatalf("advice on a new descriptor: %d", adv)
	}

	// Sequential again: back to normal advice.
	var advs []int
	for i := range 4 {
		if _, _, adv := fs.planRead(4, uint64(i)*mib, mib, 1<<30, 64<<10); adv != -1 {
			advs = append(advs, adv)
		}
	}
	if len(advs) != 1 || advs[0] != unix.FADV_NORMAL {
		t.Fatalf("sequential reads after random ones: advice %v, want FADV_NORMAL once", advs)
	}

	// When the kernel's own readahead covers the window, nothing is read
	// ahead.
	fs = newFileState()
	for i := range 100 {
		if ra, start, _ := fs.planRead(3, uint64(i)*mib, mib, size, maxReadahead); ra.end != 0 || start {
			t.Fatalf("read %d: readahead %v though the kernel's window is %d", i, ra, maxReadahead)
		}
	}
}
