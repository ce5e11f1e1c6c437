package v4state

import (
	"bufio"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"hushfs/internal/nfs4"
)

// The grace period (RFC 8881 §8.4.2). A restarted server has lost every
// client's opens and locks; the clients reclaim them (OPEN with
// CLAIM_PREVIOUS, LOCK with reclaim) during a grace period of one lease,
// in which no other state may be taken (NFS4ERR_GRACE), so that nothing
// takes what a client is about to reclaim. Only clients of the previous
// instance may reclaim: their owners are kept in a file in the state
// directory, written (and synced) before the CREATE_SESSION reply that
// confirms a new client, and when a client goes away. The grace period
// ends early once every previous client has sent RECLAIM_COMPLETE. It
// is extended while previous clients are still reclaiming (a reclaim, or
// a previous client's CREATE_SESSION, within the last graceExtension),
// up to a second lease, as Linux's nfsd does: many clients, or one with
// many files, may need longer than a lease to reclaim everything, and a
// reclaim refused with NO_GRACE is state lost.

// graceExtension is how recently a previous client must have reclaimed
// for the grace period to go on past its end.
const graceExtension = time.Second

const recordsMagic = "hushfs nfs4 clients v1"

// grace is the grace period and the client records.
type grace struct {
	path string
	// prev are the previous instance's clients (hex owner → sent
	// RECLAIM_COMPLETE since this start); cur the records to keep now.
	prev   map[string]bool
	cur    map[string]bool
	active bool
	end    time.Time // one lease after the start
	limit  time.Time // two leases after the start: no extension beyond
	// lastReclaim is when a previous client last reclaimed.
	lastReclaim time.Time
	dirty       bool
	// batch defers writing the records to the end of a batch of changes
	// (clients expiring together: one write, not one per client).
	batch bool
	write func(path string, cur map[string]bool) error // writeRecords; tests count the writes
}

func (g *grace) load(path string, now time.Time, lease time.Duration) error {
	g.path = path
	g.write = writeRecords
	g.prev = make(map[string]bool)
	g.cur = make(map[string]bool)
	if path == "" {
		return nil
	}
	f, err := os.Open(path)
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("v4state: client records: %w", err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	first := true
	for sc.Scan() {
		line := sc.Text()
		if first {
			if line != recordsMagic {
				return fmt.Errorf("v4state: client records %s: not a hushfs client record file", path)
			}
			first = false
			continue
		}
		fields := strings.Fields(line)
		if len(fields) < 2 || fields[0] != "client" {
			continue
		}
		if _, err := hex.DecodeString(fields[1]); err != nil {
			continue
		}
		g.prev[fields[1]] = false
		g.cur[fields[1]] = true
	}
	if err := sc.Err(); err != nil {
		return fmt.Errorf("v4state: client records %s: %w", path, err)
	}
	if len(g.prev) > 0 {
		g.active, g.end, g.limit = true, now.Add(lease), now.Add(2*lease)
	}
	return nil
}

func (g *grace) knows(owner []byte) bool {
	_, ok := g.prev[hex.EncodeToString(owner)]
	return ok
}

func (g *grace) add(owner []byte) {
	k := hex.EncodeToString(owner)
	if !g.cur[k] {
		g.cur[k] = true
		g.dirty = true
	}
}

func (g *grace) remove(owner []byte) {
	k := hex.EncodeToString(owner)
	if _, prev := g.prev[k]; prev && g.active {
		return // may still reclaim after another restart
	}
	if g.cur[k] {
		delete(g.cur, k)
		g.dirty = true
	}
}

// on reports whether the grace period is on at now: before its end, or
// after it while previous clients are reclaiming, up to its limit. Once a
// check finds it off it stays off: only a reclaim accepted in grace moves
// lastReclaim.
func (g *grace) on(now time.Time) bool {
	switch {
	case !g.active:
		return false
	case now.Before(g.end):
		return true
	}
	return now.Sub(g.lastReclaim) < graceExtension && now.Before(g.limit)
}

// reclaimed records reclaim activity of a previous client.
func (g *grace) reclaimed(now time.Time) {
	if g.on(now) {
		g.lastReclaim = now
	}
}

// inGraceLocked reports whether the grace period is on.
func (st *State) inGraceLocked() bool {
	return st.grace.on(st.now())
}

// InGrace reports whether the grace period is on.
func (st *State) InGrace() bool {
	st.mu.Lock()
	defer st.mu.Unlock()
	return st.inGraceLocked()
}

// graceTickLocked ends the grace period once its time is up or every
// previous client has finished reclaiming; the records of previous
// clients that did not come back are then dropped.
func (st *State) graceTickLocked() {
	g := &st.grace
	if !g.active {
		return
	}
	done := true
	for _, ok := range g.prev {
		done = done && ok
	}
	if !done && g.on(st.now()) {
		return
	}
	g.active = false
	cur := make(map[string]bool)
	for _, recs := range st.owners {
		if recs.confirmed != nil {
			cur[hex.EncodeToString(recs.confirmed.Owner)] = true
		}
	}
	g.cur, g.dirty = cur, true
	st.persistLocked()
	st.logf("hushfs server: NFSv4.1 grace period over")
}

// ReclaimComplete serves RECLAIM_COMPLETE (rca_one_fs false): the client
// has reclaimed all it will; a second one is COMPLETE_ALREADY.
func (st *State) ReclaimComplete(cl *Client) nfs4.Status {
	st.mu.Lock()
	defer st.mu.Unlock()
	if cl.gone {
		return nfs4.ErrStaleClientID
	}
	if cl.reclaimComplete {
		return nfs4.ErrCompleteAlready
	}
	cl.reclaimComplete = true
	k := hex.EncodeToString(cl.Owner)
	if _, ok := st.grace.prev[k]; ok {
		st.grace.prev[k] = true
	}
	st.graceTickLocked()
	return nfs4.OK
}

// persistLocked writes the client records if they changed: to a new file,
// synced, renamed over the old one, the directory synced, so a crash
// leaves the old records or the new ones. A failure is logged: the cost
// is a grace period that misses a client after a crash, not lost data.
func (st *State) persistLocked() {
	g := &st.grace
	if g.path == "" || !g.dirty || g.batch {
		return
	}
	if err := g.write(g.path, g.cur); err != nil {
		st.logf("hushfs server: saving NFSv4.1 client records: %v", err)
		return
	}
	g.dirty = false
}

func writeRecords(path string, cur map[string]bool) error {
	var b strings.Builder
	b.WriteString(recordsMagic + "\n")
	for _, k := range slices.Sorted(maps.Keys(cur)) {
		fmt.Fprintf(&b, "client %s\n", k)
	}
	dir := filepath.Dir(path)
	tmp, err := os.CreateTemp(dir, ".clients-*.tmp")
	if err != nil {
		return err
	}
	defer os.Remove(tmp.Name())
	if _, err := tmp.WriteString(b.String()); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Sync(); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Close(); err != nil {
		return err
	}
	if err := os.Rename(tmp.Name(), path); err != nil {
		return err
	}
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	defer d.Close()
	return d.Sync()
}
