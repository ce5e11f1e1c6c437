package rpc

import (
	"runtime"
	"syscall"

	"golang.org/x/sys/unix"
)

// Busy polling for the next call.
//
// A client that sends one call at a time (a FUSE mount stat-ing, creating
// and removing files) sends its next call a few tens of microseconds after
// our reply. If the reader parks in the runtime's network poller meanwhile,
// its thread sleeps and the CPU may go idle; the call's arrival then has
// to wake a thread (on a virtual machine, an interrupt into a halted
// virtual CPU), which costs about as much again as the round trip itself:
// measured on a 2-core VM, a TCP ping-pong between two Go processes takes
// 47–64 µs per round trip when both park and 30 µs when the server polls.
//
// So a reader that has just answered a call inline polls its socket for up
// to ServerOptions.BusyPoll before parking, when that pays:
//   - only when nothing else is in flight on the connection (the client is
//     waiting for nothing and is about to send its next call, or done);
//   - only when the client's previous call followed its reply within twice
//     the window (measured when the poll was not made, a wake-up included):
//     a client that thinks between calls is never polled for, after one
//     miss at most;
//   - at most ServerOptions.BusyPollers connections at once (one by default), and
//     the poller yields its processor between polls, so polling takes at
//     most that many CPUs, and only time no runnable goroutine wanted;
//   - never with a single processor (GOMAXPROCS 1), where the poller would
//     keep the runtime from noticing other connections' calls.

// initBusyPoll prepares the connection for polling, if its socket allows.
func (c *serverConn) initBusyPoll() {
	if c.s.opts.BusyPoll <= 0 || runtime.GOMAXPROCS(0) < 2 {
		return
	}
	sc, ok := c.nc.(syscall.Conn)
	if !ok {
		return
	}
	rc, err := sc.SyscallConn()
	if err != nil {
		return
	}
	c.rc = rc
	// Made once: a closure per poll would allocate.
	c.pollFn = func(fd uintptr) {
		c.pfd[0] = unix.PollFd{Fd: int32(fd), Events: unix.POLLIN}
		n, err := unix.Poll(c.pfd[:], 0)
		c.pollReady = err == nil && n > 0
	}
}

// busyPoll polls the connection for the client's next call after an
// inline reply (see above). It returns when data (or the end of the
// connection) is there, or when the window has passed.
//
// LOCKS_REQUIRED: the reading role (it uses the reader's fields).
func (c *serverConn) busyPoll() {
	s := c.s
	window := int64(s.opts.BusyPoll)
	if c.rc == nil || c.repliedAt == 0 || c.lastGap > 2*window ||
		len(c.slots) != 1 || c.br.Buffered() != 0 || s.callsRead.Load() != c.readAtReply {
		return
	}
	if s.polling.Add(1) > int32(s.opts.BusyPollers) {
		s.polling.Add(-1)
		return
	}
	defer s.polling.Add(-1)
	deadline := c.repliedAt + window
	for {
		c.pollReady = false
		if err := c.rc.Control(c.pollFn); err != nil {
			return
		}
		if c.pollReady {
			s.pollHits.Add(1)
			return
		}
		if s.sinceEpoch() >= deadline || s.callsRead.Load() != c.readAtReply {
			s.pollMisses.Add(1)
			return
		}
		runtime.Gosched()
	}
}

// noteArrival records how long after our last inline reply the client's
// next call arrived, for busyPoll's decision.
//
// LOCKS_REQUIRED: the reading role.
func (c *serverConn) noteArrival() {
	if c.repliedAt != 0 {
		c.lastGap = c.s.sinceEpoch() - c.repliedAt
		c.repliedAt = 0
	}
}

// noteReply records an inline reply just sent by the reading goroutine.
func (c *serverConn) noteReply() {
	if c.rc != nil {
		c.repliedAt = c.s.sinceEpoch()
		c.readAtReply = c.s.callsRead.Load()
	}
}
