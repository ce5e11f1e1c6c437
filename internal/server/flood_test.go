package server

import (
	"math/rand/v2"
	"net"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"hushfs/internal/nfs3"
	"hushfs/internal/rpc"
	"hushfs/internal/xdr"
)

// The NFS server with the RPC layer's defaults: a client sending 10,000
// READs without reading a reply, and another sending garbage on connection
// after connection, do not keep a third from being served promptly; what
// the server buffers for the flooder stays within MaxInFlightPerConn
// replies.
func TestFloodDoesNotStarveOthers(t *testing.T) {
	e := startEnv(t, false)
	if err := os.WriteFile(filepath.Join(e.root, "big"), make([]byte, 1<<20), 0o644); err != nil {
		t.Fatal(err)
	}
	c := e.root0()
	root := c.rootFH()
	big := c.mustLookup(root, "big")
	const (
		calls    = 10000
		readSize = 64 << 10
		inFlight = 32 // the RPC server's default MaxInFlightPerConn
	)
	stop := make(chan struct{})
	var wg sync.WaitGroup
	defer func() {
		close(stop)
		wg.Wait()
	}()

	flood, err := net.Dial("tcp", e.addr)
	if err != nil {
		t.Fatal(err)
	}
	defer flood.Close()
	cred := rpc.SysCred(0, 0, nil, "flood")
	var sent atomic.Int64
	wg.Add(1)
	go func() {
		defer wg.Done()
		var batch []byte
		for i := 0; i < calls; i += 100 {
			batch = batch[:0]
			for k := range 100 {
				args := &nfs3.ReadArgs{File: big, Offset: uint64((i + k) % 16 * readSize), Count: readSize}
				batch = append(batch, rawNFSCall(uint32(i+k), nfs3.ProcRead, cred, args)...)
			}
			flood.SetWriteDeadline(time.Now().Add(30 * time.Second))
			n, err := flood.Write(batch)
			sent.Add(int64(n))
			if err != nil {
				return
			}
		}
	}()
	waitUntil(t, "the flooder to stall", func() bool {
		return e.rs.Stats().BufferedPeak >= (inFlight-1)*readSize
	})

	var garbageConns atomic.Int64
	wg.Add(1)
	go func() {
		defer wg.Done()
		rng := rand.New(rand.NewPCG(7, 8))
		junk := make([]byte, 2000)
		for n := 0; ; n++ {
			select {
			case <-stop:
				return
			default:
			}
			for i := range junk {
				junk[i] = byte(rng.Uint32())
			}
			if n%2 == 0 {
				xdr.PutUint32(junk, 0, 1<<31|uint32(len(junk)-4))
			}
			nc, err := net.Dial("tcp", e.addr)
			if err != nil {
				continue
			}
			garbageConns.Add(1)
			nc.SetDeadline(time.Now().Add(time.Second))
			nc.Write(junk)
			nc.Read(junk[:1])
			nc.Close()
		}
	}()

	// The well-behaved client, on a connection of its own.
	v := e.root0()
	start := time.Now()
	var lat []time.Duration
	for i := range 100 {
		t0 := time.Now()
		v.mustGetattr(big)
		if i%10 == 0 {
			name := "file" + string(rune('a'+i/10))
			f := v.mustCreate(root, name, 0o644)
			if r := v.write(f, 0, []byte("data"), nfs3.FileSync); r.Status != nfs3.OK {
				t.Fatalf("WRITE under flood: %v", r.Status)
			}
		}
		lat = append(lat, time.Since(t0))
	}
	elapsed := time.Since(start)
	slices.Sort(lat)
	st := e.rs.Stats()
	t.Logf("100 GETATTRs (and 10 CREATE+WRITE) in %v under flood: median %v, max %v; flooder wrote %d bytes of calls; peak buffered per connection %d bytes; %d garbage connections",
		elapsed, lat[len(lat)/2], lat[len(lat)-1], sent.Load(), st.BufferedPeak, garbageConns.Load())
	if lat[len(lat)-1] > 5*time.Second {
		t.Errorf("slowest call under flood took %v", lat[len(lat)-1])
	}
	// Each slot holds at most one READ reply: data plus a few hundred
	// bytes of header and attributes.
	if bound := int64(inFlight * (readSize + 512)); st.BufferedPeak > bound {
		t.Errorf("a connection buffered %d bytes, bound %d", st.BufferedPeak, bound)
	}
	if garbageConns.Load() < 10 {
		t.Errorf("only %d garbage connections: the attack did not run", garbageConns.Load())
	}
}

func waitUntil(t testing.TB, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}
