package proxy

import (
	"bytes"
	"context"
	"encoding/binary"
	"fmt"
	"hushfs/internal/nfs3"
	"io"
	"maps"
	"math/rand/v2"
	"net"
	"strings"
	"sync"
	"testing"
	"time"
)

// echo copies everything back, half-closing when its input ends.
func echo(c net.Conn) {
	io.Copy(c, c)
	c.(*net.TCPConn).CloseWrite()
}

// TestForwardByteExact sends random data in random chunk sizes through the
// proxy to an echo server, on several connections at once, and checks that
// every byte comes back unchanged and in order.
func TestForwardByteExact(t *testing.T) {
	for _, rtt := range []time.Duration{0, 4 * time.Millisecond} {
		t.Run(fmt.Sprint("rtt=", rtt), func(t *testing.T) {
			ln := listen(t)
			serveConns(t, ln, echo)
			p := startProxy(t, ln.Addr().String(), rtt)

			const conns, size = 4, 3 << 20
			var wg sync.WaitGroup
			for i := range conns {
				c := dial(t, p.Addr(), 30*time.Second)
				r := rand.New(rand.NewPCG(uint64(i), 7))
				data := make([]byte, size)
				for j := range data {
					data[j] = byte(r.Uint32())
				}
				wg.Add(2)
				go func() {
					defer wg.Done()
					for rest := data; len(rest) > 0; {
						n := min(len(rest), 1+r.IntN(100_000))
						if _, err := c.Write(rest[:n]); err != nil {
							t.Errorf("conn %d: write: %v", i, err)
							return
						}
						rest = rest[n:]
					}
					c.CloseWrite()
				}()
				go func() {
					defer wg.Done()
					got, err := io.ReadAll(c)
					if err != nil {
						t.Errorf("conn %d: read: %v", i, err)
					}
					if !bytes.Equal(got, data) {
						t.Errorf("conn %d: echoed data differs (got %d bytes, sent %d)", i, len(got), len(data))
					}
				}()
			}
			wg.Wait()
			c := p.Counts()
			if c.BytesIn != conns*size || c.BytesOut != conns*size || c.Conns != conns {
				t.Errorf("counts: in %d out %d conns %d; want %d, %d, %d", c.BytesIn, c.BytesOut, c.Conns, conns*size, conns*size, conns)
			}
		})
	}
}

// TestHalfClose checks that an end of stream is passed on in each direction
// on its own: the server sees the client's EOF, answers after it, and the
// answer still reaches the client.
func TestHalfClose(t *testing.T) {
	ln := listen(t)
	serveConns(t, ln, func(c net.Conn) {
		n, _ := io.Copy(io.Discard, c)
		fmt.Fprintf(c, "got %d", n)
		c.(*net.TCPConn).CloseWrite()
	})
	p := startProxy(t, ln.Addr().String(), 2*time.Millisecond)
	c := dial(t, p.Addr(), 10*time.Second)
	if _, err := c.Write(make([]byte, 12345)); err != nil {
		t.Fatal(err)
	}
	c.CloseWrite()
	got, err := io.ReadAll(c)
	if err != nil {
		t.Fatal(err)
	}
	if string(got) != "got 12345" {
		t.Fatalf("server answered %q", got)
	}
}

// TestThroughput sends 64 WRITE calls of 1 MiB through a 10 ms RTT. A
// proxy that waited out the delay per 64 KiB chunk would need at least
// 1024 × 5 ms ≈ 5 s for the calls alone, and 64 RTTs for the replies if it
// serialised records; a pipelined one needs little more than the copying.
func TestThroughput(t *testing.T) {
	if testing.Short() {
		t.Skip("moves 64 MiB")
	}
	const n, size = 64, 1 << 20
	payload := make([]byte, size)
	for i := range payload {
		payload[i] = byte(i * 7)
	}
	ln := listen(t)
	received := make(chan []byte, n)
	serveConns(t, ln, func(c net.Conn) {
		for {
			rec, err := readRecord(c, 2*size)
			if err != nil {
				return
			}
			if _, err := c.Write(frame(replyBody(binary.BigEndian.Uint32(rec), make([]byte, 8)))); err != nil {
				return
			}
			received <- rec[len(rec)-size:]
		}
	})
	p := startProxy(t, ln.Addr().String(), 10*time.Millisecond)
	c := dial(t, p.Addr(), 60*time.Second)

	start := time.Now()
	errc := make(chan error, 1)
	go func() {
		rec := frameSplit(callBody(0, NFS3(nfs3.ProcWrite), none, none, writeArgs(make([]byte, 32), 0, 0, payload)), size/2)
		for i := range n {
			// Patch xid and stable_how: the header is 4 (first mark) +
			// 40 (call header) + 36 (fh) + 8 + 4 bytes in.
			binary.BigEndian.PutUint32(rec[4:], uint32(i))
			binary.BigEndian.PutUint32(rec[4+40+36+12:], uint32(i%3))
			if _, err := c.Write(rec); err != nil {
				errc <- err
				return
			}
		}
		errc <- nil
	}()
	for i := range n {
		xid, err := replyXID(c)
		if err != nil {
			t.Fatalf("reply %d: %v", i, err)
		}
		if xid != uint32(i) {
			t.Fatalf("reply %d has xid %d", i, xid)
		}
	}
	if err := <-errc; err != nil {
		t.Fatal(err)
	}
	elapsed := time.Since(start)
	t.Logf("64 × 1 MiB WRITE calls through 10 ms RTT in %v (%.0f MB/s)", elapsed, float64(n*size)/elapsed.Seconds()/1e6)
	if elapsed > 10*time.Second {
		t.Errorf("took %v; the delay is being serialised", elapsed)
	}
	for i := range n {
		if data := <-received; !bytes.Equal(data, payload) {
			t.Fatalf("call %d: data altered", i)
		}
	}
	cs := p.Counts()
	if cs.Calls[NFS3(nfs3.ProcWrite)] != n || cs.Replies != n || !maps.Equal(cs.WriteStable, map[uint32]uint64{0: 22, 1: 21, 2: 21}) {
		t.Errorf("counts: %+v", cs)
	}
}

// TestTargetRefuses checks that a client whose target cannot be reached is
// disconnected, with a log line and a count.
func TestTargetRefuses(t *testing.T) {
	ln := listen(t)
	target := ln.Addr().String()
	ln.Close() // nothing listens there any more

	var mu sync.Mutex
	var logs []string
	p, err := Start(Config{Target: target, Logf: func(f string, a ...any) {
		mu.Lock()
		logs = append(logs, fmt.Sprintf(f, a...))
		mu.Unlock()
	}})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	c := dial(t, p.Addr(), 10*time.Second)
	if _, err := c.Read(make([]byte, 1)); err == nil {
		t.Fatal("read from a proxied connection without target succeeded")
	}
	if got := p.Counts(); got.DialErrors != 1 || got.Conns != 1 {
		t.Errorf("dial errors %d, conns %d; want 1, 1", got.DialErrors, got.Conns)
	}
	p.Close()
	mu.Lock()
	defer mu.Unlock()
	if len(logs) != 1 || !strings.Contains(logs[0], "cannot reach target "+target) {
		t.Errorf("logs = %q", logs)
	}
}

// TestTargetSilent checks that a dial that never completes is abandoned
// after DialTimeout and the client disconnected.
func TestTargetSilent(t *testing.T) {
	p, err := Start(Config{
		Target:      "silent",
		DialTimeout: 100 * time.Millisecond,
		Dial: func(ctx context.Context) (net.Conn, error) {
			<-ctx.Done()
			return nil, ctx.Err()
		},
		Logf: t.Logf,
	})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	c := dial(t, p.Addr(), 10*time.Second)
	start := time.Now()
	if _, err := c.Read(make([]byte, 1)); err == nil {
		t.Fatal("read succeeded")
	}
	if d := time.Since(start); d < 80*time.Millisecond || d > 5*time.Second {
		t.Errorf("client closed after %v; want about the 100 ms dial timeout", d)
	}
	if got := p.Counts().DialErrors; got != 1 {
		t.Errorf("dial errors = %d", got)
	}
}

// TestCloseWithTraffic closes the proxy while connections carry data: Close
// must return promptly and the clients see their connections end.
func TestCloseWithTraffic(t *testing.T) {
	ln := listen(t)
	serveConns(t, ln, echo)
	p, err := Start(Config{Target: ln.Addr().String(), RTT: 20 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	for range 3 {
		c := dial(t, p.Addr(), 10*time.Second)
		wg.Add(2)
		go func() {
			defer wg.Done()
			buf := make([]byte, 32<<10)
			for {
				if _, err := c.Write(buf); err != nil {
					return
				}
			}
		}()
		go func() {
			defer wg.Done()
			io.Copy(io.Discard, c)
		}()
	}
	time.Sleep(100 * time.Millisecond)
	start := time.Now()
	if err := p.Close(); err != nil {
		t.Fatal(err)
	}
	if d := time.Since(start); d > 2*time.Second {
		t.Errorf("Close took %v", d)
	}
	wg.Wait() // would hit the connections' 10 s deadline if they stayed open
	if time.Since(start) > 5*time.Second {
		t.Error("clients did not see their connections close")
	}
	if _, err := net.DialTimeout("tcp", p.Addr().String(), time.Second); err == nil {
		t.Error("proxy still accepts after Close")
	}
	if err := p.Close(); err != nil {
		t.Errorf("second Close: %v", err)
	}
}

func TestStartErrors(t *testing.T) {
	if _, err := Start(Config{}); err == nil {
		t.Error("Start without target succeeded")
	}
	if _, err := Start(Config{Target: "127.0.0.1:1", RTT: -time.Millisecond}); err == nil {
		t.Error("Start with negative RTT succeeded")
	}
	ln := listen(t)
	if _, err := Start(Config{Target: "127.0.0.1:1", Listen: ln.Addr().String()}); err == nil || !strings.Contains(err.Error(), "listen") {
		t.Errorf("Start on a busy address: %v", err)
	}
}
