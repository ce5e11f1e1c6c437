package proxy

// Tests with the project's own RPC client and server on either side.

import (
	"context"
	"fmt"
	"maps"
	"net"
	"sync"
	"testing"
	"time"

	"hushfs/internal/rpc"
	"hushfs/internal/xdr"
)

const testProg, testVers = 0x20000999, 1

// echoProg answers every procedure but 0 with its arguments; procedure 0
// (NULL) has no results.
type echoProg struct{}

func (echoProg) ServeRPC(_ context.Context, c *rpc.Call, reply []byte) ([]byte, error) {
	if c.Proc == 0 {
		return reply, nil
	}
	return append(reply, c.Args...), nil
}

type rawArgs []byte

// echoRes decodes the 4-byte results of the echo calls.
type echoRes []byte

func (r *echoRes) Decode(d *xdr.Decoder) { *r = append((*r)[:0], d.FixedOpaque(4)...) }

func (a rawArgs) Append(b []byte) []byte { return append(b, a...) }

// startRPCServer serves echoProg on 127.0.0.1 until the test ends.
func startRPCServer(t *testing.T) net.Addr {
	t.Helper()
	rs := rpc.NewServer(rpc.ServerOptions{Logf: t.Logf})
	rs.Register(testProg, testVers, echoProg{})
	ln := listen(t)
	errc := make(chan error, 1)
	go func() { errc <- rs.Serve(ln) }()
	t.Cleanup(func() {
		rs.Close()
		if err := <-errc; err != nil {
			t.Errorf("rpc server: %v", err)
		}
	})
	return ln.Addr()
}

func rpcDial(t *testing.T, addr net.Addr) *rpc.Client {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	c, err := rpc.Dial(ctx, addr.String(), rpc.ClientOptions{Timeout: 20 * time.Second, Retrans: -1, Logf: t.Logf})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// TestRPCPackageThroughProxy makes NULL calls with the project's RPC client
// through a 10 ms proxy (each must take at least 10 ms), then many
// concurrent calls on two connections, and checks the counts against the
// calls made.
func TestRPCPackageThroughProxy(t *testing.T) {
	const rtt = 10 * time.Millisecond
	p := startProxy(t, startRPCServer(t).String(), rtt)
	c1 := rpcDial(t, p.Addr())
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()

	for i := range 3 {
		start := time.Now()
		if err := c1.Call(ctx, testProg, testVers, 0, rpc.NoAuth, nil, nil); err != nil {
			t.Fatal(err)
		}
		d := time.Since(start)
		t.Logf("rpc NULL %d through %v proxy: %v", i, rtt, d)
		if d < rtt {
			t.Errorf("NULL call took %v, less than the %v RTT", d, rtt)
		}
	}

	c2 := rpcDial(t, p.Addr())
	want := map[ProcKey]uint64{{testProg, testVers, 0}: 3}
	var wg sync.WaitGroup
	var mu sync.Mutex
	start := time.Now()
	const perProc = 40
	for proc := uint32(1); proc <= 5; proc++ {
		want[ProcKey{testProg, testVers, proc}] = perProc
		for i := range perProc {
			c := []*rpc.Client{c1, c2}[i%2]
			wg.Add(1)
			go func() {
				defer wg.Done()
				arg := rawArgs(fmt.Appendf(nil, "%04d", i*int(proc)))
				var res echoRes
				if err := c.Call(ctx, testProg, testVers, proc, rpc.NoAuth, arg, &res); err != nil {
					t.Error(err)
					return
				}
				if string(res) != string(arg) {
					mu.Lock()
					t.Errorf("proc %d: echoed %q, sent %q", proc, res, arg)
					mu.Unlock()
				}
			}()
		}
	}
	wg.Wait()
	elapsed := time.Since(start)
	t.Logf("%d concurrent calls through %v: %v", 5*perProc, rtt, elapsed)
	got := p.Counts()
	if !maps.Equal(got.Calls, want) {
		t.Errorf("calls:\n got %v\nwant %v", got.Calls, want)
	}
	if got.Replies != 3+5*perProc || got.Conns != 2 || got.UnparsedCalls+got.UnparsedReplies != 0 {
		t.Errorf("replies %d conns %d unparsed %d/%d", got.Replies, got.Conns, got.UnparsedCalls, got.UnparsedReplies)
	}
}
