package test

import (
	"bytes"
	"context"
	"math/rand/v2"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"hushfs/internal/nfs3"
	"hushfs/internal/rpc"
	"hushfs/internal/xdr"
	"hushfs/test/harness"
)

// The `hushfs serve` process under three attacks at once: a client sending
// 10,000 READs of 64 KiB without reading any reply, one sending garbage on
// connection after connection, and one holding 1024 idle connections (the
// server's limit). A well-behaved client still gets every call answered,
// promptly, and the server's memory stays bounded.
func TestServeFlood(t *testing.T) {
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "big"), make([]byte, 1<<20), 0o644); err != nil {
		t.Fatal(err)
	}
	s := harness.StartServe(t, dir)
	root := rawMount(t, s.MountAddr, s.ExportPath)
	pid := s.Cmd.Process.Pid
	baseline := procStatus(t, pid, "VmRSS:")

	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	lookup := func(c *rpc.Client, name string) nfs3.FH {
		t.Helper()
		var r nfs3.LookupRes
		if err := c.Call(ctx, nfs3.Program, nfs3.Version, nfs3.ProcLookup, rootCred,
			&nfs3.LookupArgs{What: nfs3.DirOpArgs{Dir: root, Name: []byte(name)}}, &r); err != nil || r.Status != nfs3.OK {
			t.Fatalf("LOOKUP %s: %v %v", name, err, r.Status)
		}
		return r.Obj
	}
	setup, err := rpc.NewClient(ctx, clientOpts(tcpDialer(s.NFSAddr)))
	if err != nil {
		t.Fatal(err)
	}
	big := lookup(setup, "big")
	setup.Close()

	stop := make(chan struct{})
	var wg sync.WaitGroup
	defer func() {
		close(stop)
		wg.Wait()
	}()

	// The flooder.
	const calls, readSize = 10000, 64 << 10
	flood := dialRaw(t, s.NFSAddr)
	var sent, total atomic.Int64
	wg.Add(1)
	go func() {
		defer wg.Done()
		var batch []byte
		for i := 0; i < calls; i += 100 {
			batch = batch[:0]
			for k := range 100 {
				args := xdr.AppendOpaque(nil, big)
				args = xdr.AppendUint64(args, uint64((i+k)%16*readSize))
				args = xdr.AppendUint32(args, readSize)
				batch = append(batch, callSpec{xid: uint32(i + k), prog: nfs3.Program, vers: 3,
					proc: nfs3.ProcRead, credFlavor: flavorSys, args: args}.record()...)
			}
			total.Add(int64(len(batch)))
			flood.c.SetWriteDeadline(time.Now().Add(60 * time.Second))
			n, err := flood.c.Write(batch)
			sent.Add(int64(n))
			if err != nil {
				return
			}
		}
	}()

	// The hoarder: as many idle connections as the server accepts.
	const maxConns = 1024 // rpc.ServerOptions' default
	hoard := make([]net.Conn, 0, maxConns)
	defer func() {
		for _, nc := range hoard {
			nc.Close()
		}
	}()
	for range maxConns {
		nc, err := net.DialTimeout("tcp", s.NFSAddr, 5*time.Second)
		if err != nil {
			t.Fatalf("hoarder: %v", err)
		}
		hoard = append(hoard, nc)
	}

	// The garbage sender.
	var garbageConns atomic.Int64
	wg.Add(1)
	go func() {
		defer wg.Done()
		rng := rand.New(rand.NewPCG(9, 10))
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
			nc, err := net.DialTimeout("tcp", s.NFSAddr, time.Second)
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

	// The well-behaved client.
	c, err := rpc.NewClient(ctx, clientOpts(tcpDialer(s.NFSAddr)))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	start := time.Now()
	var lat []time.Duration
	for i := range 200 {
		t0 := time.Now()
		var r nfs3.GetattrRes
		if err := c.Call(ctx, nfs3.Program, nfs3.Version, nfs3.ProcGetattr, rootCred, &nfs3.GetattrArgs{Obj: big}, &r); err != nil || r.Status != nfs3.OK {
			t.Fatalf("GETATTR %d under flood: %v %v", i, err, r.Status)
		}
		lat = append(lat, time.Since(t0))
	}
	elapsed := time.Since(start)

	// A REMOVE retransmitted on a new connection gets its original reply.
	if err := os.WriteFile(filepath.Join(dir, "victim"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	remove := callSpec{xid: 0x5eed, prog: nfs3.Program, vers: 3, proc: nfs3.ProcRemove, credFlavor: flavorSys,
		args: xdr.AppendString(xdr.AppendOpaque(nil, root), "victim")}.record()
	var replies [2][]byte
	for i := range replies {
		r := dialRaw(t, s.NFSAddr)
		r.mustSend(remove)
		rep := r.mustReply(0x5eed)
		if rep.replyStat != msgAccepted || rep.acceptStat != acceptSuccess {
			t.Fatalf("REMOVE: %v", rep)
		}
		if st := nfs3.Status(xdr.NewDecoder(rep.results).Uint32()); st != nfs3.OK {
			t.Fatalf("REMOVE, transmission %d: %v, want NFS3_OK", i+1, st)
		}
		replies[i] = rep.results
		r.c.Close()
	}
	if !bytes.Equal(replies[0], replies[1]) {
		t.Fatal("retransmitted REMOVE answered differently")
	}
	if _, err := os.Lstat(filepath.Join(dir, "victim")); !os.IsNotExist(err) {
		t.Fatalf("victim still there: %v", err)
	}

	slices.Sort(lat)
	hwm := procStatus(t, pid, "VmHWM:")
	t.Logf("200 GETATTRs in %v under flood (median %v, max %v); flooder wrote %d of %d bytes so far (READs asking for %d MiB); %d garbage connections; server RSS %d MiB before, peak %d MiB",
		elapsed, lat[len(lat)/2], lat[len(lat)-1], sent.Load(), total.Load(), calls*readSize>>20, garbageConns.Load(), baseline>>20, hwm>>20)
	if lat[len(lat)-1] > 5*time.Second {
		t.Errorf("slowest GETATTR under flood took %v", lat[len(lat)-1])
	}
	if garbageConns.Load() < 10 {
		t.Errorf("only %d garbage connections: the attack did not run", garbageConns.Load())
	}
	// Per connection: the flooder's 32 replies of 64 KiB; the hoard's
	// 1024 connections a 32 KiB read buffer and two goroutines each.
	if limit := baseline + 160<<20; hwm > limit {
		t.Errorf("server peak RSS %d MiB, want < %d MiB", hwm>>20, limit>>20)
	}
	if !s.Alive() {
		t.Fatalf("server died:\n%s", s.Output())
	}
}

// procStatus returns a size field (in bytes) of /proc/PID/status.
func procStatus(t *testing.T, pid int, field string) int64 {
	t.Helper()
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/status")
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(string(b), "\n") {
		if f := strings.Fields(line); len(f) >= 2 && f[0] == field {
			kb, err := strconv.ParseInt(f[1], 10, 64)
			if err != nil {
				t.Fatalf("%s: %v", line, err)
			}
			return kb << 10
		}
	}
	t.Fatalf("no %s in /proc/%d/status", field, pid)
	return 0
}
