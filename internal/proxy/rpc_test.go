package proxy

import (
	"bytes"
	"encoding/binary"
	"io"
	"maps"
	"math/rand/v2"
	"net"
	"testing"
	"time"

	"hushfs/internal/nfs3"
)

var none = auth{}

// TestNullCallRTT checks that an RPC NULL call through a 10 ms proxy takes
// at least 10 ms, and that without the proxy's delay it does not.
func TestNullCallRTT(t *testing.T) {
	ln := listen(t)
	serveConns(t, ln, rpcHandler)
	const rtt = 10 * time.Millisecond
	p := startProxy(t, ln.Addr().String(), rtt)

	call := func(c net.Conn, xid uint32) time.Duration {
		t.Helper()
		start := time.Now()
		if _, err := c.Write(frame(callBody(xid, NFS3(nfs3.ProcNull), none, none, nil))); err != nil {
			t.Fatal(err)
		}
		got, err := replyXID(c)
		if err != nil {
			t.Fatal(err)
		}
		if got != xid {
			t.Fatalf("reply xid %d, want %d", got, xid)
		}
		return time.Since(start)
	}

	direct := dial(t, ln.Addr(), 10*time.Second)
	call(direct, 1) // warm up
	if d := call(direct, 2); d >= rtt {
		t.Logf("direct NULL call took %v; the machine is too slow for the comparison", d)
	}
	c := dial(t, p.Addr(), 10*time.Second)
	for i := range 5 {
		d := call(c, uint32(10+i))
		if d < rtt {
			t.Errorf("call %d through the proxy took %v, less than the %v RTT", i, d, rtt)
		}
		if d > rtt+time.Second {
			t.Errorf("call %d through the proxy took %v", i, d)
		}
		t.Logf("NULL call through %v proxy: %v", rtt, d)
	}
	if got := p.Counts().Calls[NFS3(nfs3.ProcNull)]; got != 5 {
		t.Errorf("counted %d NULL calls, want 5", got)
	}
}

// TestPipelinedOrder sends 64 calls without waiting and has the server
// answer them in an order of its own, each reply a separate write. The
// replies must arrive in exactly that order, and all within about one
// round trip rather than one per call.
func TestPipelinedOrder(t *testing.T) {
	const n = 64
	const rtt = 10 * time.Millisecond
	sent := make(chan []uint32, 1)
	ln := listen(t)
	serveConns(t, ln, func(c net.Conn) {
		var xids []uint32
		for range n {
			rec, err := readRecord(c, 1<<20)
			if err != nil {
				return
			}
			xids = append(xids, binary.BigEndian.Uint32(rec))
		}
		rand.Shuffle(len(xids), func(i, j int) { xids[i], xids[j] = xids[j], xids[i] })
		for _, x := range xids {
			if _, err := c.Write(frame(replyBody(x, nil))); err != nil {
				return
			}
		}
		sent <- xids
	})
	p := startProxy(t, ln.Addr().String(), rtt)
	c := dial(t, p.Addr(), 10*time.Second)

	start := time.Now()
	var calls []byte
	for i := range n {
		calls = append(calls, frame(callBody(uint32(1000+i), NFS3(nfs3.ProcGetattr), none, none, nil))...)
	}
	// One write per call, so the calls cross the proxy as separate reads.
	for i := 0; i < len(calls); {
		l := 4 + int(binary.BigEndian.Uint32(calls[i:])&^lastFragment)
		if _, err := c.Write(calls[i : i+l]); err != nil {
			t.Fatal(err)
		}
		i += l
	}
	var got []uint32
	for range n {
		x, err := replyXID(c)
		if err != nil {
			t.Fatal(err)
		}
		got = append(got, x)
	}
	elapsed := time.Since(start)
	want := <-sent
	for i := range want {
		if got[i] != want[i] {
			t.Fatalf("reply %d has xid %d, server sent %d there (got %v, want %v)", i, got[i], want[i], got, want)
		}
	}
	if elapsed < rtt || elapsed > n*rtt/2 {
		t.Errorf("64 pipelined calls took %v; want about one %v round trip", elapsed, rtt)
	}
	t.Logf("64 pipelined calls through %v: %v", rtt, elapsed)
	cs := p.Counts()
	if cs.Calls[NFS3(nfs3.ProcGetattr)] != n || cs.Replies != n {
		t.Errorf("counted %d calls, %d replies; want %d each", cs.Calls[NFS3(nfs3.ProcGetattr)], cs.Replies, n)
	}
}

// mix is a known workload of calls: what was sent, and the counts it must
// produce.
type mix struct {
	records [][]byte // record-marked, in order
	calls   map[ProcKey]uint64
	stable  map[uint32]uint64
	replies uint64 // records the test server answers (msg_type CALL)
	unparse uint64 // records on the call side that are not calls
}

func (m *mix) add(rec []byte, k *ProcKey, answered bool) {
	m.records = append(m.records, rec)
	if k != nil {
		m.calls[*k]++
	} else {
		m.unparse++
	}
	if answered {
		m.replies++
	}
}

// buildMix makes NFSv3, MOUNT and other calls with AUTH_NONE and AUTH_SYS
// credentials, WRITEs of each stable_how with file handles of awkward
// lengths (one carrying 1 MiB), records cut into many fragments, and a few
// records that are not calls.
func buildMix(r *rand.Rand) *mix {
	m := &mix{calls: map[ProcKey]uint64{}, stable: map[uint32]uint64{}}
	sys := authSys("client.example", 1000, 100, 4, 24, 27) // odd length: padded
	verf := auth{6, []byte{1, 2, 3, 4, 5}}                 // odd verifier body
	creds := []auth{none, sys}
	xid := uint32(1)
	call := func(k ProcKey, args []byte) {
		body := callBody(xid, k, creds[int(xid)%2], []auth{none, verf}[int(xid/2)%2], args)
		xid++
		m.add(frameRandom(r, body), &k, true)
	}
	for range 3 {
		call(NFS3(nfs3.ProcNull), nil)
	}
	fhs := [][]byte{bytes.Repeat([]byte{7}, 32), {1, 2, 3, 4, 5, 6, 7}, bytes.Repeat([]byte{9}, 64), nil}
	for i := range 9 {
		call(NFS3(nfs3.ProcGetattr), xdrOpaque(fhs[i%len(fhs)]))
		stable := uint32(i % 3)
		call(NFS3(nfs3.ProcWrite), writeArgs(fhs[i%len(fhs)], uint64(i)<<20, stable, bytes.Repeat([]byte{byte(i)}, 1+i*37)))
		m.stable[stable]++
	}
	big := writeArgs(fhs[0], 0, uint32(nfs3.FileSync), make([]byte, 1<<20))
	call(NFS3(nfs3.ProcWrite), big)
	m.stable[uint32(nfs3.FileSync)]++
	for range 2 {
		call(NFS3(nfs3.ProcCommit), append(xdrOpaque(fhs[1]), make([]byte, 12)...))
	}
	call(ProcKey{nfs3.MountProgram, nfs3.MountVersion, 1}, xdrOpaque([]byte("/export")))
	call(ProcKey{100000, 2, 3}, make([]byte, 16)) // portmapper GETPORT

	// A WRITE whose arguments stop before stable_how: a call, but not
	// counted by stable_how.
	short := callBody(xid, NFS3(nfs3.ProcWrite), none, none, xdrOpaque(fhs[0])[:20])
	xid++
	m.add(frameSplit(short, 3, 0, 5), ptr(NFS3(nfs3.ProcWrite)), true)

	// A reply on the call side: a client's answer to a callback, counted
	// apart (BackReplies). Not calls: a wrong RPC version (answered:
	// it is a CALL), a record too short for a header, an empty record,
	// and a credential over 400 bytes.
	m.records = append(m.records, frame(replyBody(xid, nil)))
	bad := callBody(xid+1, NFS3(nfs3.ProcNull), none, none, nil)
	binary.BigEndian.PutUint32(bad[8:], 3)
	m.add(frameSplit(bad, 1, 1, 1), nil, true)
	m.add(frame([]byte{0, 0, 0, 9}), nil, false)
	m.add(frame(nil), nil, false)
	m.add(frameRandom(r, callBody(xid+2, NFS3(nfs3.ProcNull), auth{1, make([]byte, 404)}, none, nil)), nil, true)
	xid += 3

	// More calls after the bad records, so the stream has re-synchronised.
	for range 2 {
		call(NFS3(nfs3.ProcLookup), append(xdrOpaque(fhs[1]), xdrOpaque([]byte("name"))...))
	}
	r.Shuffle(len(m.records)-1, func(i, j int) {
		// Keep the last record last: its reply marks the end.
		m.records[i], m.records[j] = m.records[j], m.records[i]
	})
	return m
}

func ptr[T any](v T) *T { return &v }

func xdrOpaque(b []byte) []byte {
	out := binary.BigEndian.AppendUint32(nil, uint32(len(b)))
	out = append(out, b...)
	return append(out, make([]byte, (4-len(b)%4)%4)...)
}

// TestCounting sends a known mix through the proxy, the start of every
// record in 1-byte writes, and checks every count exactly, including
// replies and a record on the reply side that is not a reply.
func TestCounting(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	m := buildMix(r)
	ln := listen(t)
	serveConns(t, ln, func(c net.Conn) {
		// Before answering anything, send a call (as a callback would go)
		// and one record that is neither call nor reply.
		c.Write(frame(callBody(0, NFS3(0), none, none, nil)))
		c.Write(frame([]byte{0, 0, 0, 1, 0, 0, 0, 7}))
		rpcHandler(c)
	})
	p := startProxy(t, ln.Addr().String(), time.Millisecond)
	c := dial(t, p.Addr(), 60*time.Second)

	done := make(chan error, 1)
	var in int
	go func() {
		for _, rec := range m.records {
			// The first 300 bytes, covering every header, a byte at a
			// time; the bulk of a big WRITE in one piece.
			head := min(len(rec), 300)
			for i := range head {
				if _, err := c.Write(rec[i : i+1]); err != nil {
					done <- err
					return
				}
			}
			if _, err := c.Write(rec[head:]); err != nil {
				done <- err
				return
			}
			in += len(rec)
		}
		done <- nil
	}()
	out := 0
	for range 2 {
		rec, err := readRecord(c, 1<<20)
		if err != nil {
			t.Fatal(err)
		}
		out += 4 + len(rec)
	}
	for i := range m.replies {
		rec, err := readRecord(c, 1<<20)
		if err != nil {
			t.Fatalf("reply %d of %d: %v", i, m.replies, err)
		}
		out += 4 + len(rec)
	}
	if err := <-done; err != nil {
		t.Fatal(err)
	}

	got := p.Counts()
	if !maps.Equal(got.Calls, m.calls) {
		t.Errorf("calls:\n got %v\nwant %v", got.Calls, m.calls)
	}
	if !maps.Equal(got.WriteStable, m.stable) {
		t.Errorf("write stable_how: got %v, want %v", got.WriteStable, m.stable)
	}
	if got.Commits != 2 || got.NFS3(nfs3.ProcCommit) != 2 {
		t.Errorf("commits = %d / %d, want 2", got.Commits, got.NFS3(nfs3.ProcCommit))
	}
	if got.Replies != m.replies || got.UnparsedReplies != 1 || got.BackCalls != 1 || got.BackReplies != 1 {
		t.Errorf("replies %d, unparsed replies %d, calls from the target %d, replies from the client %d; want %d, 1, 1, 1",
			got.Replies, got.UnparsedReplies, got.BackCalls, got.BackReplies, m.replies)
	}
	if got.UnparsedCalls != m.unparse {
		t.Errorf("unparsed calls = %d, want %d", got.UnparsedCalls, m.unparse)
	}
	if got.BytesIn != uint64(in) || got.BytesOut != uint64(out) || got.Conns != 1 {
		t.Errorf("bytes in %d out %d conns %d; want %d, %d, 1", got.BytesIn, got.BytesOut, got.Conns, in, out)
	}

	// TakeCounts hands over what Counts showed and leaves zero behind.
	taken := p.TakeCounts()
	if !maps.Equal(taken.Calls, got.Calls) || taken.Replies != got.Replies || taken.BytesIn != got.BytesIn {
		t.Errorf("TakeCounts = %+v, want %+v", taken, got)
	}
	if z := p.Counts(); len(z.Calls) != 0 || len(z.WriteStable) != 0 || z.Replies != 0 ||
		z.UnparsedCalls != 0 || z.UnparsedReplies != 0 || z.BytesIn != 0 || z.BytesOut != 0 || z.Conns != 0 {
		t.Errorf("after TakeCounts: %+v", z)
	}
	// And counting resumes on the same connection after a Reset.
	if _, err := c.Write(frame(callBody(7, NFS3(nfs3.ProcFsinfo), none, none, nil))); err != nil {
		t.Fatal(err)
	}
	if _, err := replyXID(c); err != nil {
		t.Fatal(err)
	}
	p.Reset()
	if _, err := c.Write(frame(callBody(8, NFS3(nfs3.ProcFsstat), none, none, nil))); err != nil {
		t.Fatal(err)
	}
	if _, err := replyXID(c); err != nil {
		t.Fatal(err)
	}
	if z := p.Counts(); !maps.Equal(z.Calls, map[ProcKey]uint64{NFS3(nfs3.ProcFsstat): 1}) || z.Replies != 1 {
		t.Errorf("after Reset and one FSSTAT: %+v", z)
	}
}

// TestMalformedForwarded sends records that are wrong for their direction
// through an echo server: they must come back byte for byte, and be counted
// as replies from the client (answers to the target's calls on the
// client's connection, as NFSv4.1 callbacks) and then as calls to it on
// the way back, none as unparsed.
func TestMalformedForwarded(t *testing.T) {
	ln := listen(t)
	serveConns(t, ln, echo)
	p := startProxy(t, ln.Addr().String(), time.Millisecond)
	c := dial(t, p.Addr(), 10*time.Second)
	var stream []byte
	for i := range 5 {
		stream = append(stream, frameSplit(replyBody(uint32(i), bytes.Repeat([]byte{0xff}, i*5)), 2, 7)...)
	}
	// Garbage whose record mark claims nearly 2 GiB: it never completes.
	stream = append(stream, 0x7f, 0xff, 0xff, 0xff, 1, 2, 3)
	if _, err := c.Write(stream); err != nil {
		t.Fatal(err)
	}
	c.CloseWrite()
	got, err := io.ReadAll(c)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, stream) {
		t.Fatalf("stream altered: sent %x, got %x", stream, got)
	}
	cs := p.Counts()
	if len(cs.Calls) != 0 || cs.UnparsedCalls != 0 || cs.BackReplies != 5 || cs.Replies != 5 || cs.UnparsedReplies != 0 {
		t.Errorf("counts %+v; want 5 replies from the client and 5 replies", cs)
	}
}
