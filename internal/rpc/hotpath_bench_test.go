package rpc

import (
	"context"
	"testing"
	"time"
)

// The one-call-at-a-time path as `hushfs serve` runs it: inline on the
// reader, busy-polling for the next call (the other benchmarks run the
// server with busy polling off).
func BenchmarkNullRoundTripBusyPoll(b *testing.B) {
	_, ln := startServer(b, ServerOptions{BusyPoll: 50 * time.Microsecond}, &testHandler{})
	c := dialClient(b, ln.Addr().String(), ClientOptions{})
	ctx := context.Background()
	b.ReportAllocs()
	for b.Loop() {
		if err := c.Call(ctx, testProg, 3, procNull, NoAuth, nil, nil); err != nil {
			b.Fatal(err)
		}
	}
}
