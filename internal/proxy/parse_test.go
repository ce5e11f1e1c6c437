package proxy

import (
	"encoding/json"
	"maps"
	"math/rand/v2"
	"strings"
	"testing"

	"hushfs/internal/nfs3"
)

// feedSplit runs a call-side and a reply-side parser over stream, cut into
// pieces of random sizes (max 0 means one byte at a time), and returns what
// each counted.
func feedSplit(stream []byte, r *rand.Rand, max int) (calls, replies Counts) {
	cc, rc := newCounters(), newCounters()
	cp, rp := newStreamParser(true, cc), newStreamParser(false, rc)
	for rest := stream; len(rest) > 0; {
		n := 1
		if max > 0 {
			n = min(len(rest), 1+r.IntN(max))
		}
		cp.feed(rest[:n])
		rp.feed(rest[:n])
		rest = rest[n:]
	}
	return cc.snapshot(false), rc.snapshot(false)
}

// TestParserSplitting checks the parser on the known mix fed whole, in
// random pieces and byte by byte: the counts must be exact each time.
func TestParserSplitting(t *testing.T) {
	r := rand.New(rand.NewPCG(3, 4))
	m := buildMix(r)
	var stream []byte
	for _, rec := range m.records {
		stream = append(stream, rec...)
	}
	for _, max := range []int{len(stream), 1 << 16, 100, 7, 0} {
		got, _ := feedSplit(stream, r, max)
		if !maps.Equal(got.Calls, m.calls) || !maps.Equal(got.WriteStable, m.stable) || got.UnparsedCalls != m.unparse {
			t.Errorf("pieces up to %d: calls %v stable %v unparsed %d; want %v %v %d",
				max, got.Calls, got.WriteStable, got.UnparsedCalls, m.calls, m.stable, m.unparse)
		}
	}
}

// TestParserHostile feeds headers with extreme lengths: nothing may be
// counted as a call, and nothing may be buffered or allocated for them.
func TestParserHostile(t *testing.T) {
	huge := callBody(1, NFS3(nfs3.ProcWrite), auth{1, nil}, none, nil)
	copy(huge[28:], []byte{0xff, 0xff, 0xff, 0xff}) // credential length 2^32-1
	cases := map[string][]byte{
		"credential length 2^32-1": frame(huge),
		"fragment of 2^31-1 bytes": {0xff, 0xff, 0xff, 0xff, 0, 0, 0, 1, 0, 0, 0, 0},
		"garbage":                  []byte("GET / HTTP/1.1\r\nHost: x\r\n\r\n"),
	}
	for name, stream := range cases {
		cc := newCounters()
		p := newStreamParser(true, cc)
		allocs := testing.AllocsPerRun(10, func() { p.feed(stream) })
		if allocs != 0 {
			t.Errorf("%s: %v allocations per feed", name, allocs)
		}
		if got := cc.snapshot(false); len(got.Calls) != 0 {
			t.Errorf("%s: counted calls %v", name, got.Calls)
		}
	}
	// A WRITE whose file handle claims more than 64 bytes is a call but
	// has no stable_how.
	body := callBody(1, NFS3(nfs3.ProcWrite), none, none, writeArgs(make([]byte, 65), 0, uint32(nfs3.Unstable), nil))
	got, _ := feedSplit(frame(body), nil, 0)
	if got.Calls[NFS3(nfs3.ProcWrite)] != 1 || len(got.WriteStable) != 0 || got.UnparsedCalls != 0 {
		t.Errorf("WRITE with a 65-byte handle: %+v", got)
	}
}

// TestParserNoAllocs checks that parsing a 1 MiB WRITE, in 64 KiB reads,
// allocates nothing: the data is skipped, not copied.
func TestParserNoAllocs(t *testing.T) {
	rec := frameSplit(callBody(1, NFS3(nfs3.ProcWrite), none, none,
		writeArgs(make([]byte, 32), 0, uint32(nfs3.DataSync), make([]byte, 1<<20))), 100, 300000)
	cc := newCounters()
	cc.calls[NFS3(nfs3.ProcWrite)] = 0 // so counting does not grow the map
	cc.writeStable[uint32(nfs3.DataSync)] = 0
	p := newStreamParser(true, cc)
	allocs := testing.AllocsPerRun(5, func() {
		for rest := rec; len(rest) > 0; {
			n := min(len(rest), 64<<10)
			p.feed(rest[:n])
			rest = rest[n:]
		}
	})
	if allocs != 0 {
		t.Errorf("%v allocations per 1 MiB record", allocs)
	}
	if got := cc.snapshot(false); got.WriteStable[uint32(nfs3.DataSync)] != 6 || got.Calls[NFS3(nfs3.ProcWrite)] != 6 {
		t.Errorf("counts after 6 records: %+v", got)
	}
}

// FuzzParser checks on arbitrary streams that the parser never panics and
// that its counts do not depend on how the stream is cut.
func FuzzParser(f *testing.F) {
	r := rand.New(rand.NewPCG(5, 6))
	for _, rec := range buildMix(r).records[:20] {
		if len(rec) < 4096 {
			f.Add(rec, uint64(1))
		}
	}
	f.Add(frame(replyBody(3, []byte{1, 2, 3, 4})), uint64(2))
	f.Add([]byte{0x80, 0, 0, 0}, uint64(3))
	f.Fuzz(func(t *testing.T, stream []byte, seed uint64) {
		r := rand.New(rand.NewPCG(seed, 0))
		wholeC, wholeR := feedSplit(stream, r, len(stream)+1)
		for _, max := range []int{0, 3, 50} {
			c, rp := feedSplit(stream, r, max)
			if !equalCounts(c, wholeC) || !equalCounts(rp, wholeR) {
				t.Fatalf("pieces up to %d: %+v %+v; whole: %+v %+v", max, c, rp, wholeC, wholeR)
			}
		}
	})
}

func equalCounts(a, b Counts) bool {
	return maps.Equal(a.Calls, b.Calls) && maps.Equal(a.WriteStable, b.WriteStable) && maps.Equal(a.NFS4Ops, b.NFS4Ops) && a.NFS4Incomplete == b.NFS4Incomplete &&
		a.BackCalls == b.BackCalls && a.BackReplies == b.BackReplies &&
		a.Replies == b.Replies && a.UnparsedCalls == b.UnparsedCalls && a.UnparsedReplies == b.UnparsedReplies
}

// TestCountsJSON checks the JSON form scripts read.
func TestCountsJSON(t *testing.T) {
	var k ProcKey
	if err := k.UnmarshalText([]byte("100003/3/7")); err != nil || k != NFS3(nfs3.ProcWrite) {
		t.Errorf("UnmarshalText = %v, %v", k, err)
	}
	for _, bad := range []string{"", "1/2", "1/2/3/4", "a/b/c", "1/2/99999999999"} {
		if err := k.UnmarshalText([]byte(bad)); err == nil {
			t.Errorf("UnmarshalText(%q) succeeded", bad)
		}
	}
	c := Counts{
		Calls:       map[ProcKey]uint64{NFS3(nfs3.ProcWrite): 2, {100005, 3, 1}: 1},
		WriteStable: map[uint32]uint64{uint32(nfs3.FileSync): 2},
		Replies:     3,
	}
	b, err := json.Marshal(c)
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{`"100003/3/7":2`, `"100005/3/1":1`, `"write_stable":{"2":2}`, `"replies":3`} {
		if !strings.Contains(string(b), want) {
			t.Errorf("JSON %s lacks %s", b, want)
		}
	}
	var back Counts
	if err := json.Unmarshal(b, &back); err != nil || !equalCounts(back, c) {
		t.Errorf("round trip: %+v, %v", back, err)
	}
}

func TestProcKeyName(t *testing.T) {
	for k, want := range map[ProcKey]string{
		NFS3(nfs3.ProcGetattr): "NFS3 GETATTR",
		NFS3(nfs3.ProcCommit):  "NFS3 COMMIT",
		NFS3(99):               "NFS3 proc 99",
		{100005, 3, 1}:         "MOUNT3 MNT",
		{100005, 3, 9}:         "MOUNT3 proc 9",
		{100000, 2, 3}:         "PORTMAP2 GETPORT",
		{100000, 2, 9}:         "100000/2/9",
		{100003, 4, 1}:         "NFS4 COMPOUND",
		{100003, 4, 0}:         "NFS4 NULL",
		{100003, 4, 2}:         "100003/4/2",
		{0x20000001, 1, 0}:     "536870913/1/0",
	} {
		if got := k.Name(); got != want {
			t.Errorf("%v.Name() = %q, want %q", k, got, want)
		}
	}
}
