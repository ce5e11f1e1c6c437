package rpc

import (
	"encoding/binary"
	"hash/crc32"
	"hash/maphash"
	"net"
	"net/netip"
	"slices"
	"sync"
	"sync/atomic"
	"time"
)

// NonIdempotentHandler is implemented by a Handler whose program has
// procedures that must not run twice for one call: a retransmitted REMOVE
// executed again would fail with "no such file" although the first one
// succeeded, a replayed WRITE could overwrite newer data. The server keeps
// the replies of those procedures in its duplicate request cache and answers
// a retransmission with the original reply instead of running it again.
// Handlers not implementing the interface cost the cache nothing.
type NonIdempotentHandler interface {
	Handler
	// NonIdempotent reports whether calls to proc go through the cache.
	// It is called for every call of the program, so it must be cheap.
	NonIdempotent(proc uint32) bool
}

// DRCOptions configures the duplicate request cache. Zero values select the
// defaults.
type DRCOptions struct {
	Disable    bool             // no cache: every retransmission executes again
	MaxEntries int              // default 4096
	MaxBytes   int              // saved replies plus per-entry overhead; default 32 MiB
	TTL        time.Duration    // how long a reply is kept; default 2 minutes
	Now        func() time.Time // clock for expiry; nil means time.Now
}

// Defaults of the duplicate request cache. Two minutes outlast a client's
// retransmissions and a reconnection; the replies of the procedures worth
// caching are small (a WRITE reply is about 150 bytes), so the bounds hold
// thousands of them.
const (
	DefaultDRCEntries = 4096
	DefaultDRCBytes   = 32 << 20
	DefaultDRCTTL     = 2 * time.Minute
)

// drcEntryOverhead is what an entry is charged on top of its reply: the
// entry itself and its share of the map.
const drcEntryOverhead = 160

// drcKey identifies one call. The client's address without its port: a
// client retransmits on a new connection, from a new port, after a
// reconnection. The hash covers credential and arguments, so that an XID
// reused for a different call is not answered with another call's reply.
type drcKey struct {
	ip                    netip.Addr
	xid, prog, vers, proc uint32
	sum                   uint64
}

// drcEntry is a call in progress or the reply it got. Entries form a list in
// the order of their last change (creation, then completion), oldest first,
// which is also the order in which they expire.
type drcEntry struct {
	key        drcKey
	prev, next *drcEntry
	at         time.Time
	done       bool
	linked     bool   // in the map and the list
	reply      []byte // complete record, mark included; immutable once set

	// owner is the connection the call arrived on; waiters are other
	// connections on which it was retransmitted while it ran, each holding
	// one of its slots until it gets the reply too. A client that
	// reconnected resends its pending calls on the new connection while the
	// originals still run, and the original's reply goes to a connection
	// that is gone: without the copy, the call would wait for the client's
	// next retransmission, a whole timeout later.
	owner   *serverConn
	waiters []*serverConn
}

// maxDRCWaiters bounds the connections one call's reply is copied to.
const maxDRCWaiters = 4

// drcState is what the cache says about an incoming call.
type drcState int

const (
	drcMiss       drcState = iota // new: run it, then finish or abandon the entry
	drcInProgress                 // the original still runs: its reply will answer, or nothing will
	drcWaiting                    // the original still runs: its reply will be copied to this connection
	drcReplay                     // answered already: send the saved reply
)

// drc is the duplicate request cache: one lock, a map and a list. Entries
// are bounded in number and bytes, and expire after the TTL.
type drc struct {
	maxEntries, maxBytes, maxReply int
	ttl                            time.Duration
	now                            func() time.Time
	seed                           maphash.Seed

	hits, drops atomic.Uint64

	mu    sync.Mutex
	m     map[drcKey]*drcEntry
	head  drcEntry // sentinel: head.next is the oldest entry
	bytes int
}

func newDRC(o DRCOptions) *drc {
	if o.Disable {
		return nil
	}
	d := &drc{
		maxEntries: o.MaxEntries,
		maxBytes:   o.MaxBytes,
		ttl:        o.TTL,
		now:        o.Now,
		seed:       maphash.MakeSeed(),
		m:          make(map[drcKey]*drcEntry),
	}
	if d.maxEntries <= 0 {
		d.maxEntries = DefaultDRCEntries
	}
	if d.maxBytes <= 0 {
		d.maxBytes = DefaultDRCBytes
	}
	if d.ttl <= 0 {
		d.ttl = DefaultDRCTTL
	}
	if d.now == nil {
		d.now = time.Now
	}
	// A reply that would take a large share of the cache is not kept: the
	// procedures worth caching have small replies, and one huge reply
	// must not flush all the others.
	d.maxReply = max(d.maxBytes/16, 1)
	d.head.prev, d.head.next = &d.head, &d.head
	return d
}

// clientIP is the part of a connection's remote address that identifies the
// client across reconnections.
func clientIP(a net.Addr) netip.Addr {
	if ta, ok := a.(*net.TCPAddr); ok {
		return ta.AddrPort().Addr().Unmap()
	}
	return netip.Addr{}
}

// argsPrefix is how much of the arguments goes through the keyed 64-bit
// hash; all of them go through CRC-32C, which the CPU computes several
// times faster (a 1 MiB WRITE costs about 40 µs instead of 110). The
// prefix holds what tells calls apart beyond their data (handles, offsets,
// names), and a reused XID with the same prefix and length but other data
// would also need a CRC collision.
const argsPrefix = 512

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// key computes the call's key. For AUTH_SYS the stamp is left out of the
// hash: it is an arbitrary number some clients change when they re-encode a
// retransmission, and it says nothing about who is calling.
func (d *drc) key(ip netip.Addr, call *Call) drcKey {
	var h maphash.Hash
	h.SetSeed(d.seed)
	body := call.Cred.Body
	if call.Cred.Flavor == AuthSys && len(body) >= 4 {
		body = body[4:]
	}
	var hdr [16]byte
	binary.BigEndian.PutUint32(hdr[0:], call.Cred.Flavor)
	binary.BigEndian.PutUint32(hdr[4:], uint32(len(body)))
	binary.BigEndian.PutUint32(hdr[8:], uint32(len(call.Args)))
	binary.BigEndian.PutUint32(hdr[12:], crc32.Checksum(call.Args, castagnoli))
	h.Write(hdr[:])
	h.Write(body)
	h.Write(call.Args[:min(len(call.Args), argsPrefix)])
	return drcKey{ip: ip, xid: call.XID, prog: call.Prog, vers: call.Vers, proc: call.Proc, sum: h.Sum64()}
}

// begin looks a call that arrived on c up. On a miss it records the call as
// in progress and returns its entry; on drcReplay it returns the saved
// reply, which the caller must copy and not modify. drcWaiting means c was
// added to the running call's waiters and keeps the call's slot.
func (d *drc) begin(k drcKey, c *serverConn) (*drcEntry, []byte, drcState) {
	now := d.now()
	d.mu.Lock()
	defer d.mu.Unlock()
	d.expire(now)
	if e := d.m[k]; e != nil {
		if e.done {
			d.hits.Add(1)
			return nil, e.reply, drcReplay
		}
		d.drops.Add(1)
		if c == nil || c == e.owner || len(e.waiters) >= maxDRCWaiters || slices.Contains(e.waiters, c) {
			return nil, nil, drcInProgress
		}
		e.waiters = append(e.waiters, c)
		return nil, nil, drcWaiting
	}
	for d.head.next != &d.head && (len(d.m) >= d.maxEntries || d.bytes+drcEntryOverhead > d.maxBytes) {
		d.unlink(d.head.next)
	}
	e := &drcEntry{key: k, at: now, owner: c}
	d.m[k] = e
	d.bytes += drcEntryOverhead
	d.pushBack(e)
	return e, nil, drcMiss
}

// finish saves the reply record of a call begun with drcMiss and returns
// the connections waiting for a copy of it. An entry evicted or expired in
// the meantime stays gone, but its waiters still get the reply.
func (d *drc) finish(e *drcEntry, reply []byte) []*serverConn {
	if len(reply) > d.maxReply {
		return d.abandon(e)
	}
	saved := append([]byte(nil), reply...)
	now := d.now()
	d.mu.Lock()
	defer d.mu.Unlock()
	w := e.waiters
	e.waiters, e.owner = nil, nil
	if !e.linked {
		return w
	}
	e.reply, e.done, e.at = saved, true, now
	d.bytes += len(saved)
	d.remove(e)
	d.pushBack(e)
	for d.head.next != &d.head && d.bytes > d.maxBytes {
		d.unlink(d.head.next)
	}
	return w
}

// abandon forgets a call whose reply is not kept (dropped by its handler,
// or too large): its next retransmission runs again. It returns the
// connections that were waiting for the reply.
func (d *drc) abandon(e *drcEntry) []*serverConn {
	d.mu.Lock()
	defer d.mu.Unlock()
	w := e.waiters
	e.waiters, e.owner = nil, nil
	if e.linked {
		d.unlink(e)
	}
	return w
}

// expire drops the entries older than the TTL, from the oldest on.
func (d *drc) expire(now time.Time) {
	for e := d.head.next; e != &d.head && now.Sub(e.at) >= d.ttl; e = d.head.next {
		d.unlink(e)
	}
}

func (d *drc) pushBack(e *drcEntry) {
	e.prev, e.next = d.head.prev, &d.head
	d.head.prev.next = e
	d.head.prev = e
	e.linked = true
}

func (d *drc) remove(e *drcEntry) {
	e.prev.next, e.next.prev = e.next, e.prev
	e.prev, e.next = nil, nil
}

// unlink takes e out of the list and the map and gives back its bytes.
func (d *drc) unlink(e *drcEntry) {
	d.remove(e)
	e.linked = false
	delete(d.m, e.key)
	d.bytes -= drcEntryOverhead + len(e.reply)
}

// size returns the number of entries and the bytes charged.
func (d *drc) size() (entries, bytes int) {
	d.mu.Lock()
	defer d.mu.Unlock()
	return len(d.m), d.bytes
}
