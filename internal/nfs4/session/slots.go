package session

import (
	"context"
	"errors"
	"sync"
)

// errTableGone tells a caller waiting for a slot that its session was
// replaced: it takes a slot of the new one.
var errTableGone = errors.New("session: slot table of a lost session")

// slot is one entry of the fore channel's slot table (RFC 8881 §2.10.6.1).
type slot struct {
	// seq is the sequence id of the last request the server answered on
	// this slot: the next new request carries seq+1.
	seq  uint32
	busy bool
	// sent, when above seq, is the highest sequence id sent whose request
	// got no answer we could read (the call failed or was given up): the
	// server may have run it, or never seen it. The next request goes with
	// sent+1, which is new to the server either way, and each
	// SEQ_MISORDERED steps it down by one until the server takes it: never
	// onto an id the server ran, whose cached reply it would return for a
	// different request.
	sent uint32
	// reset: this slot was tried with sequence id 1 after SEQ_MISORDERED
	// (a server that dropped and re-created it starts it afresh).
	reset bool
}

// slotTable hands out the slots of one session's fore channel. A request
// holds its slot from sending until its reply is processed, so that a slot
// never has two requests outstanding; a request retried after a lost
// connection keeps it, with the same sequence id.
type slotTable struct {
	mu    sync.Mutex
	slots []slot // by slot id; only grows, up to max
	max   int
	// highest is the server's sr_highest_slotid: it accepts no higher slot
	// id, and has forgotten any slot above. target is its
	// sr_target_highest_slotid: the highest it wants used.
	highest, target uint32
	wake            chan struct{} // closed when a slot frees or the table grows or dies
	dead            bool
}

// newSlotTable returns a table of n slots (at least 1, at most max).
func newSlotTable(n, limit int) *slotTable {
	n = min(max(n, 1), limit)
	return &slotTable{slots: make([]slot, n), max: limit, highest: uint32(n - 1), target: uint32(n - 1),
		wake: make(chan struct{})}
}

// ticket is a held slot and what its SEQUENCE carries.
type ticket struct {
	id, seqid, highest uint32
}

// usableLocked is the highest slot id requests may take now.
func (t *slotTable) usableLocked() uint32 {
	return min(t.highest, t.target, uint32(len(t.slots)-1))
}

func (t *slotTable) broadcastLocked() {
	close(t.wake)
	t.wake = make(chan struct{})
}

// acquire takes the lowest free usable slot, waiting for one.
func (t *slotTable) acquire(ctx context.Context) (ticket, error) {
	for {
		t.mu.Lock()
		if t.dead {
			t.mu.Unlock()
			return ticket{}, errTableGone
		}
		lim := t.usableLocked()
		for id := uint32(0); id <= lim; id++ {
			s := &t.slots[id]
			if s.busy {
				continue
			}
			s.busy = true
			tk := ticket{id: id, seqid: t.nextLocked(id), highest: t.highestBusyLocked()}
			t.mu.Unlock()
			return tk, nil
		}
		wake := t.wake
		t.mu.Unlock()
		select {
		case <-wake:
		case <-ctx.Done():
			return ticket{}, ctx.Err()
		}
	}
}

// nextLocked is the sequence id of slot id's next request.
func (t *slotTable) nextLocked(id uint32) uint32 {
	s := &t.slots[id]
	return max(s.seq, s.sent) + 1
}

// highestBusyLocked is sa_highest_slotid: the highest slot with a request
// outstanding.
func (t *slotTable) highestBusyLocked() uint32 {
	for id := len(t.slots) - 1; id > 0; id-- {
		if t.slots[id].busy {
			return uint32(id)
		}
	}
	return 0
}

// renew refreshes a held ticket's highest slot id, for a request sent again
// on the same slot.
func (t *slotTable) renew(tk *ticket) {
	t.mu.Lock()
	tk.highest = t.highestBusyLocked()
	t.mu.Unlock()
}

// complete records the server's answer to a request on tk's slot with
// sequence id seqid, and the slot limits the reply carried, and frees the
// slot.
func (t *slotTable) complete(tk ticket, seqid, highest, target uint32) {
	t.mu.Lock()
	defer t.mu.Unlock()
	s := &t.slots[tk.id]
	s.seq, s.sent, s.busy, s.reset = seqid, 0, false, false
	t.limitsLocked(highest, target)
	t.broadcastLocked()
}

// limitsLocked applies a reply's sr_highest_slotid and
// sr_target_highest_slotid: the table grows to the server's highest (up to
// max); slots above it are forgotten by the server, so they start again at
// sequence id 1 (those busy now are reset when their reply is processed,
// which carries the same limit).
func (t *slotTable) limitsLocked(highest, target uint32) {
	highest = min(highest, uint32(t.max-1))
	target = min(target, highest)
	for int(highest) >= len(t.slots) {
		t.slots = append(t.slots, slot{})
	}
	for id := int(highest) + 1; id < len(t.slots); id++ {
		if !t.slots[id].busy {
			t.slots[id] = slot{}
		}
	}
	t.highest, t.target = highest, target
}

// setTarget lowers or raises the highest slot id to use (CB_RECALL_SLOT).
func (t *slotTable) setTarget(target uint32) {
	t.mu.Lock()
	t.target = min(target, t.highest)
	t.broadcastLocked()
	t.mu.Unlock()
}

// release frees tk's slot; the server did not run the request (SEQUENCE
// failed), so its sequence id stays.
func (t *slotTable) release(tk ticket) {
	t.mu.Lock()
	t.slots[tk.id].busy = false
	t.broadcastLocked()
	t.mu.Unlock()
}

// unknown frees tk's slot after a request whose fate is unknown (see
// slot.sent).
func (t *slotTable) unknown(tk ticket) {
	t.mu.Lock()
	s := &t.slots[tk.id]
	s.busy = false
	s.sent = max(s.sent, tk.seqid)
	t.broadcastLocked()
	t.mu.Unlock()
}

// retried records that the server holds seqid as tk's slot's last request
// (a false retry, or an uncached reply: it ran a request with that id) and
// returns the ticket for the next request on the same slot.
func (t *slotTable) retried(tk ticket, seqid uint32) ticket {
	t.mu.Lock()
	s := &t.slots[tk.id]
	s.seq, s.sent, s.reset = seqid, 0, false
	tk.seqid = seqid + 1
	tk.highest = t.highestBusyLocked()
	t.mu.Unlock()
	return tk
}

// misordered handles SEQ_MISORDERED for a request sent on tk's slot with
// tk.seqid and returns the ticket to send again with, keeping the slot; ok
// false means the slot cannot be recovered within the session (the caller
// frees it and replaces the session).
func (t *slotTable) misordered(tk ticket) (ticket, bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	s := &t.slots[tk.id]
	switch {
	case tk.seqid > s.seq+1:
		// A request of unknown fate: the server is below tk.seqid-1.
		tk.seqid--
		s.sent = tk.seqid - 1
	case !s.reset && tk.seqid != 1:
		// The server may have dropped the slot and made it again.
		s.seq, s.sent, s.reset = 0, 0, true
		tk.seqid = 1
	default:
		return tk, false
	}
	tk.highest = t.highestBusyLocked()
	return tk, true
}

// badSlot handles BADSLOT for tk's slot: the server's table is smaller than
// we thought. The slot is freed and no slot from it on is used.
func (t *slotTable) badSlot(tk ticket) {
	t.mu.Lock()
	t.slots[tk.id].busy = false
	if tk.id > 0 && tk.id-1 < t.highest {
		t.limitsLocked(tk.id-1, min(t.target, tk.id-1))
	}
	t.broadcastLocked()
	t.mu.Unlock()
}

// kill fails every waiter and every later acquire with errTableGone.
func (t *slotTable) kill() {
	t.mu.Lock()
	if !t.dead {
		t.dead = true
		t.broadcastLocked()
	}
	t.mu.Unlock()
}

// usable reports the number of slots requests may use now.
func (t *slotTable) usable() int {
	t.mu.Lock()
	defer t.mu.Unlock()
	return int(t.usableLocked()) + 1
}
