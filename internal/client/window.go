package client

import (
	"sync"
	"sync/atomic"
)

// rpcWindow bounds the READs or WRITEs one request has in flight at once: a
// read's pieces, a flush's chunks, a file's streamed chunks. The number of
// pieces grows as the transfer size shrinks, and a goroutine per piece is
// what made a server with an 8-byte rtmax cost 1.5 GiB: a window keeps
// goroutines and buffers in flight fixed whatever the transfer size. 16
// RPCs of 1 MiB keep a 10 ms round trip at 1.6 GB/s.
const rpcWindow = 16

// inWindow calls fn(i) for every i in [0, n), at most rpcWindow at a time,
// and returns once all have returned. One piece runs on the caller.
func inWindow(n int, fn func(i int)) {
	if n == 1 {
		fn(0)
		return
	}
	var next atomic.Int64
	var wg sync.WaitGroup
	for range min(n, rpcWindow) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := int(next.Add(1) - 1); i < n; i = int(next.Add(1) - 1) {
				fn(i)
			}
		}()
	}
	wg.Wait()
}
