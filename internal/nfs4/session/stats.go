package session

import (
	"sync/atomic"

	"hushfs/internal/nfs4"
)

// Stats counts what a session sent and received. A COMPOUND is one call
// whatever it holds; each of its operations is counted by name, SEQUENCE
// included, so that per-operation statistics show what the calls carried.
type Stats struct {
	Calls uint64 // COMPOUNDs sent (a resend of the same bytes after a reconnect is not a new one)
	// Retransmissions counts COMPOUNDs sent again on a new connection with
	// the same slot and sequence id (exactly-once: the server answers a
	// request it ran from its reply cache).
	Retransmissions uint64
	Ops             map[nfs4.Opnum]uint64
	// CallbackCalls counts CB_NULL and CB_COMPOUND calls from the server,
	// Callbacks the operations in them.
	CallbackCalls uint64
	Callbacks     map[nfs4.CBOpnum]uint64
	Renewals      uint64 // lone SEQUENCEs sent to renew an idle lease
	Binds         uint64 // BIND_CONN_TO_SESSION sent (after reconnects, for a lost back channel)
	NewSessions   uint64 // sessions created to replace a lost one
	NewClientIDs  uint64 // client IDs established again (server restart, lease expiry)
	Reclaims      uint64 // calls of Options.OnRecover
}

// opBuckets covers every operation number a 4.1 or 4.2 client may send;
// anything else is counted under OpIllegal.
const opBuckets = 72

// counters are a session's statistics, updated without locks.
type counters struct {
	calls, retrans, cbCalls                  atomic.Uint64
	renewals, binds, sessions, clients, recl atomic.Uint64
	ops                                      [opBuckets]atomic.Uint64
	illegal                                  atomic.Uint64
	cbOps                                    [16]atomic.Uint64
	cbIllegal                                atomic.Uint64
}

func (c *counters) op(op nfs4.Opnum) {
	if int(op) < opBuckets {
		c.ops[op].Add(1)
	} else {
		c.illegal.Add(1)
	}
}

func (c *counters) cbOp(op nfs4.CBOpnum) {
	if int(op) < len(c.cbOps) {
		c.cbOps[op].Add(1)
	} else {
		c.cbIllegal.Add(1)
	}
}

func (c *counters) snapshot() Stats {
	s := Stats{
		Calls: c.calls.Load(), Retransmissions: c.retrans.Load(), CallbackCalls: c.cbCalls.Load(),
		Renewals: c.renewals.Load(), Binds: c.binds.Load(), NewSessions: c.sessions.Load(),
		NewClientIDs: c.clients.Load(), Reclaims: c.recl.Load(),
		Ops: make(map[nfs4.Opnum]uint64), Callbacks: make(map[nfs4.CBOpnum]uint64),
	}
	for i := range c.ops {
		if n := c.ops[i].Load(); n > 0 {
			s.Ops[nfs4.Opnum(i)] = n
		}
	}
	if n := c.illegal.Load(); n > 0 {
		s.Ops[nfs4.OpIllegal] = n
	}
	for i := range c.cbOps {
		if n := c.cbOps[i].Load(); n > 0 {
			s.Callbacks[nfs4.CBOpnum(i)] = n
		}
	}
	if n := c.cbIllegal.Load(); n > 0 {
		s.Callbacks[nfs4.CBOpIllegal] = n
	}
	return s
}
