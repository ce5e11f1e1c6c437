package v4state

import (
	"fmt"
	"path/filepath"
	"testing"
	"time"

	"hushfs/internal/nfs4"
)

// clock is a hand-driven clock.
type clock struct{ t time.Time }

func (c *clock) now() time.Time          { return c.t }
func (c *clock) advance(d time.Duration) { c.t = c.t.Add(d) }

var testLimits = Limits{MaxSlots: 4, MaxOps: 16, MaxRequest: 1 << 20, MaxResponse: 1 << 20, MaxResponseCached: 4096}

// confirmed makes a confirmed client of owner with a session and
// RECLAIM_COMPLETE sent.
func confirmed(t *testing.T, st *State, owner string) (*Client, *Session) {
	t.Helper()
	r, s := st.ExchangeID(&nfs4.ExchangeIDArgs{ClientOwner: nfs4.ClientOwner{OwnerID: []byte(owner)}}, "sys:0")
	if s != nfs4.OK {
		t.Fatalf("EXCHANGE_ID: %v", s)
	}
	attrs := nfs4.ChannelAttrs{MaxRequestSize: 1 << 20, MaxResponseSize: 1 << 20, MaxResponseSizeCached: 4096, MaxOperations: 8, MaxRequests: 2}
	cs := st.CreateSession(&nfs4.CreateSessionArgs{ClientID: r.ClientID, Sequence: r.SequenceID, Fore: attrs, Back: attrs}, "sys:0", testLimits, ConnRef{})
	if cs.Status != nfs4.OK {
		t.Fatalf("CREATE_SESSION: %v", cs.Status)
	}
	sess := st.sessions[cs.SessionID]
	if !st.InGrace() {
		if s := st.ReclaimComplete(sess.Client()); s != nfs4.OK {
			t.Fatalf("RECLAIM_COMPLETE: %v", s)
		}
	}
	return sess.Client(), sess
}

// A client that lets its lease run out loses its opens and locks, which
// then no longer stand in another client's way; one that renews keeps
// them.
func TestLeaseExpiry(t *testing.T) {
	c := &clock{t: time.Unix(1e9, 0)}
	st, err := New(Config{Now: c.now, Lease: 10 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	a, _ := confirmed(t, st, "a")
	b, bs := confirmed(t, st, "b")
	sid, s := st.Open(a, &OpenArgs{Owner: []byte("o"), FileKey: "f", Access: nfs4.ShareAccessBoth, Deny: nfs4.ShareDenyWrite})
	if s != nfs4.OK {
		t.Fatal(s)
	}
	if _, _, s := st.Lock(a, &LockArgs{Write: true, Length: 10, NewOwner: true, OpenStateid: sid, Owner: []byte("l"), FileKey: "f"}); s != nfs4.OK {
		t.Fatal(s)
	}
	if _, s := st.Open(b, &OpenArgs{Owner: []byte("o"), FileKey: "f", Access: nfs4.ShareAccessWrite}); s != nfs4.ErrShareDenied {
		t.Fatalf("OPEN for write against a deny-write open: %v", s)
	}
	bsid, s := st.Open(b, &OpenArgs{Owner: []byte("o"), FileKey: "f", Access: nfs4.ShareAccessRead})
	if s != nfs4.OK {
		t.Fatal(s)
	}
	if _, _, s := st.Lock(b, &LockArgs{Offset: 5, Length: 1, NewOwner: true, OpenStateid: bsid, Owner: []byte("l"), FileKey: "f"}); s != nfs4.ErrDenied {
		t.Fatalf("read lock over another client's write lock: %v", s)
	}

	// b renews (SEQUENCE) within every lease, a does not.
	for range 3 {
		c.advance(6 * time.Second)
		r := st.Sequence(&nfs4.SequenceArgs{SessionID: bs.ID, SequenceID: bs.slots[0].seq + 1}, 100, 1, ConnRef{})
		if r.Status != nfs4.OK {
			t.Fatalf("SEQUENCE: %v", r.Status)
		}
		st.Finish(r.Session, r.Slot, nil, false)
		st.Expire()
	}
	if _, s := st.clientLocked(a.ID); s != nfs4.ErrStaleClientID {
		t.Fatalf("client a after its lease: %v", s)
	}
	if s := st.CheckIO(b, &bsid, "f", false); s != nfs4.OK {
		t.Fatalf("client b's open after a's expiry: %v", s)
	}
	if _, _, s := st.Lock(b, &LockArgs{Offset: 5, Length: 1, NewOwner: true, OpenStateid: bsid, Owner: []byte("l"), FileKey: "f"}); s != nfs4.OK {
		t.Fatalf("lock after the holder's lease expired: %v", s)
	}
	if s := st.CheckIO(a, &sid, "f", false); s != nfs4.ErrBadStateid {
		t.Fatalf("expired client's stateid: %v", s)
	}
}

// A restarted server with the client records of the previous instance is
// in grace for a lease: its clients reclaim, nobody opens anew; a client
// it never knew cannot reclaim; grace ends once every previous client has
// sent RECLAIM_COMPLETE.
func TestGraceAfterRestart(t *testing.T) {
	c := &clock{t: time.Unix(1e9, 0)}
	path := filepath.Join(t.TempDir(), "clients")
	st, err := New(Config{Now: c.now, Lease: 10 * time.Second, RecordPath: path})
	if err != nil {
		t.Fatal(err)
	}
	confirmed(t, st, "old")
	if st.InGrace() {
		t.Fatal("first start in grace")
	}

	c.advance(time.Minute)
	st, err = New(Config{Now: c.now, Lease: 10 * time.Second, RecordPath: path})
	if err != nil {
		t.Fatal(err)
	}
	if !st.InGrace() {
		t.Fatal("restart with a previous client: no grace")
	}
	old, _ := confirmed(t, st, "old")
	stranger, _ := confirmed(t, st, "new")
	if _, s := st.Open(old, &OpenArgs{Owner: []byte("o"), FileKey: "f", Access: nfs4.ShareAccessRead}); s != nfs4.ErrGrace {
		t.Fatalf("OPEN in grace: %v", s)
	}
	if _, s := st.Open(old, &OpenArgs{Owner: []byte("o"), FileKey: "f", Access: nfs4.ShareAccessRead, Reclaim: true}); s != nfs4.OK {
		t.Fatalf("reclaim in grace: %v", s)
	}
	if _, s := st.Open(stranger, &OpenArgs{Owner: []byte("o"), FileKey: "g", Access: nfs4.ShareAccessRead, Reclaim: true}); s != nfs4.ErrNoGrace {
		t.Fatalf("reclaim by a client of no previous instance: %v", s)
	}
	if s := st.ReclaimComplete(old); s != nfs4.OK || st.InGrace() {
		t.Fatalf("RECLAIM_COMPLETE of the only previous client: %v, in grace %v", s, st.InGrace())
	}
	if s := st.ReclaimComplete(stranger); s != nfs4.OK {
		t.Fatal(s)
	}
	if _, s := st.Open(stranger, &OpenArgs{Owner: []byte("o"), FileKey: "g", Access: nfs4.ShareAccessRead}); s != nfs4.OK {
		t.Fatalf("OPEN after grace: %v", s)
	}
}

// The grace period goes on past its lease while previous clients are
// reclaiming (one with many files, many clients one after another), and
// ends a second after the last reclaim, or at two leases whatever happens.
func TestGraceExtendedWhileReclaiming(t *testing.T) {
	c := &clock{t: time.Unix(1e9, 0)}
	path := filepath.Join(t.TempDir(), "clients")
	lease := 10 * time.Second
	st, err := New(Config{Now: c.now, Lease: lease, RecordPath: path})
	if err != nil {
		t.Fatal(err)
	}
	confirmed(t, st, "a")
	confirmed(t, st, "b") // never comes back: grace cannot end early
	restart := func() *State {
		st, err := New(Config{Now: c.now, Lease: lease, RecordPath: path})
		if err != nil {
			t.Fatal(err)
		}
		return st
	}
	reclaim := func(st *State, cl *Client, i int) nfs4.Status {
		_, s := st.Open(cl, &OpenArgs{Owner: []byte("o"), FileKey: string(rune('A' + i)), Access: nfs4.ShareAccessRead, Reclaim: true})
		return s
	}

	// a starts reclaiming near the end of the lease, a file every 250 ms.
	st = restart()
	c.advance(lease - 2*time.Second)
	a, _ := confirmed(t, st, "a")
	for i := range 20 {
		if s := reclaim(st, a, i); s != nfs4.OK {
			t.Fatalf("reclaim %d, %v after the restart: %v", i, time.Duration(i)*250*time.Millisecond+lease-2*time.Second, s)
		}
		c.advance(250 * time.Millisecond)
		st.Expire()
	}
	if !st.InGrace() {
		t.Fatal("grace ended while a client was reclaiming")
	}
	c.advance(graceExtension)
	st.Expire()
	if st.InGrace() {
		t.Fatal("grace goes on a second after the last reclaim")
	}
	if s := reclaim(st, a, 30); s != nfs4.ErrNoGrace {
		t.Fatalf("reclaim after grace: %v", s)
	}

	// Reclaims without end: grace stops at two leases.
	c.advance(time.Minute)
	st = restart()
	a, _ = confirmed(t, st, "a")
	var i int
	for ; reclaim(st, a, i%26) == nfs4.OK; i++ {
		c.advance(500 * time.Millisecond)
		st.Expire()
		if i > 100 {
			break
		}
	}
	if got := time.Duration(i) * 500 * time.Millisecond; got != 2*lease {
		t.Fatalf("reclaims accepted for %v after the restart, want %v", got, 2*lease)
	}
}

// Clients expiring together cost one write of the client records, not one
// (with its syncs, under the state's lock) per client.
func TestExpiryWritesRecordsOnce(t *testing.T) {
	c := &clock{t: time.Unix(1e9, 0)}
	st, err := New(Config{Now: c.now, Lease: 10 * time.Second, RecordPath: filepath.Join(t.TempDir(), "clients")})
	if err != nil {
		t.Fatal(err)
	}
	for i := range 50 {
		confirmed(t, st, fmt.Sprint("client ", i))
	}
	writes := 0
	st.grace.write = func(path string, cur map[string]bool) error {
		writes++
		return writeRecords(path, cur)
	}
	c.advance(11 * time.Second)
	st.Expire()
	if s := st.Stats(); s.Clients != 0 || writes != 1 {
		t.Fatalf("after the lease: %d clients left, the records written %d times", s.Clients, writes)
	}
	// What was written is the records' state: a restart offers no grace.
	st, err = New(Config{Now: c.now, Lease: 10 * time.Second, RecordPath: st.grace.path})
	if err != nil || st.InGrace() {
		t.Fatalf("restart after every client expired: %v, in grace %v", err, st.InGrace())
	}
}

// A file being changed (its conflicting delegations gone, the change not
// yet made) gets no new delegation: one granted in between would outlive
// the change unrecalled.
func TestNoDelegationWhileChanging(t *testing.T) {
	c := &clock{t: time.Unix(1e9, 0)}
	st, err := New(Config{Now: c.now, Lease: 10 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	a, as := confirmed(t, st, "a")
	as.back = &ConnRef{ID: 1, Done: make(chan struct{})} // a back channel that answered
	st.SetBackChannelOK(as, true)
	if _, s := st.Open(a, &OpenArgs{Owner: []byte("o"), FileKey: "f", Access: nfs4.ShareAccessRead}); s != nfs4.OK {
		t.Fatal(s)
	}
	st.BeginChange("f")
	st.BeginChange("f") // two changes at once: both must end
	if _, ok := st.GrantRead(a, "f"); ok {
		t.Fatal("read delegation granted while the file is being changed")
	}
	if _, ok := st.GrantWrite(a, "f"); ok {
		t.Fatal("write delegation granted while the file is being changed")
	}
	st.EndChange("f")
	if _, ok := st.GrantRead(a, "f"); ok {
		t.Fatal("read delegation granted while one change is still under way")
	}
	st.EndChange("f")
	if _, ok := st.GrantRead(a, "f"); !ok {
		t.Fatal("no read delegation once the changes were made")
	}
}
