// Package v4state is the NFSv4.1 server's state, apart from any file
// system: client records (EXCHANGE_ID), sessions and their slot tables with
// the replay cache (CREATE_SESSION, SEQUENCE), stateids, opens with share
// reservations, byte-range locks, lease expiry, and the grace period after
// a restart with the client records it needs (kept in the state directory).
//
// Files are known by a key (the server's file handle); the state of one
// file (File) holds its opens, locks and delegations: Conflicts is the one
// place an operation that changes a file asks who must be recalled first.
//
// One mutex guards everything: state operations are short (no I/O but the
// client records' file, written when a client is confirmed or goes away).
// Time comes from Config.Now, so tests drive leases and grace by hand.
package v4state

import (
	"crypto/rand"
	"encoding/binary"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"hushfs/internal/nfs4"
)

// Defaults and bounds.
const (
	// DefaultLease is the lease time (lease_time): a client that sends
	// nothing for this long loses its state.
	DefaultLease = 90 * time.Second
	// MaxClients bounds client records, confirmed or not: EXCHANGE_ID from
	// new owners beyond it gets NFS4ERR_RESOURCE until some expire.
	MaxClients = 4096
	// MaxSessionsPerClient bounds a client's sessions.
	MaxSessionsPerClient = 16
	// MaxStatePerClient bounds a client's stateids (opens and lock
	// stateids): a client opening without end gets NFS4ERR_RESOURCE.
	MaxStatePerClient = 65536
	// MaxLocksPerStateid bounds the byte ranges one lock stateid holds.
	MaxLocksPerStateid = 4096
)

// Config configures a State.
type Config struct {
	// Now is the clock; nil means time.Now.
	Now func() time.Time
	// Lease is the lease time; 0 means DefaultLease.
	Lease time.Duration
	// RecordPath is the file keeping the client records a restarted
	// server needs to offer a grace period; "" keeps none (no grace after
	// a restart).
	RecordPath string
	// Logf receives diagnostics; nil discards them.
	Logf func(format string, args ...any)
	// OnFileIdle, if set, is called when no state refers to the file
	// with key k any more. It runs with the state locked: it must not
	// call the State.
	OnFileIdle func(k string)
}

// State is the NFSv4.1 state of one server.
type State struct {
	mu    sync.Mutex
	now   func() time.Time
	lease time.Duration
	logf  func(string, ...any)
	idle  func(string)

	boot   uint32  // this instance's epoch: in client ids, session ids and stateids
	tag    [4]byte // random: the last bytes of every stateid's other, against guessing
	nextID uint32  // client ids, session ids, stateids

	clients  map[uint64]*Client
	owners   map[string]*ownerRecs // by client owner id
	sessions map[nfs4.SessionID]*Session
	files    map[string]*File
	stateids map[[nfs4.OtherSize]byte]stateRec
	// changing counts the calls changing each file whose conflicting
	// delegations are gone (BeginChange): none is granted meanwhile.
	changing map[string]int
	delegs   atomic.Int64 // delegations held (not revoked); read without the lock
	// childDelegs: those of them that are directory delegations covering
	// their entries' attributes (dirdeleg.go).
	childDelegs atomic.Int64

	grace grace
}

// ownerRecs is what EXCHANGE_ID finds for one client owner: its confirmed
// record and an unconfirmed one (RFC 8881 §18.35.5).
type ownerRecs struct {
	confirmed, unconfirmed *Client
}

// New returns an empty state. With a RecordPath it reads the records of
// the previous instance's clients and, if there are any, starts a grace
// period of one lease.
func New(cfg Config) (*State, error) {
	st := &State{
		now:      cfg.Now,
		lease:    cfg.Lease,
		logf:     cfg.Logf,
		idle:     cfg.OnFileIdle,
		clients:  make(map[uint64]*Client),
		owners:   make(map[string]*ownerRecs),
		sessions: make(map[nfs4.SessionID]*Session),
		files:    make(map[string]*File),
		stateids: make(map[[nfs4.OtherSize]byte]stateRec),
		changing: make(map[string]int),
	}
	if st.now == nil {
		st.now = time.Now
	}
	if st.lease <= 0 {
		st.lease = DefaultLease
	}
	if st.logf == nil {
		st.logf = func(string, ...any) {}
	}
	var r [16]byte
	if _, err := rand.Read(r[:]); err != nil {
		return nil, fmt.Errorf("v4state: random: %w", err)
	}
	copy(st.tag[:], r[0:4])
	// The epoch differs between instances (seconds, plus randomness for
	// two starts within a second), so ids of a previous instance are
	// recognised as stale, never taken for current ones.
	st.boot = uint32(st.now().Unix()) ^ binary.BigEndian.Uint32(r[12:16])&0xff
	if st.boot == 0 {
		st.boot = 1
	}
	if err := st.grace.load(cfg.RecordPath, st.now(), st.lease); err != nil {
		return nil, err
	}
	return st, nil
}

// Lease returns the lease time.
func (st *State) Lease() time.Duration { return st.lease }

func (st *State) newID() uint32 {
	st.nextID++
	if st.nextID == 0 {
		st.nextID = 1
	}
	return st.nextID
}

// stateKind tells what a stateid stands for.
type stateKind uint8

const (
	kindOpen stateKind = iota + 1
	kindLock
	kindDeleg
)

// stateRec is what a stateid's other field maps to.
type stateRec struct {
	kind  stateKind
	open  *Open
	lock  *LockState
	deleg *Deleg
}

// newOther makes the other field of a new stateid: the epoch, a counter,
// and the instance's random tag, so a forged or old stateid is found in no
// table.
func (st *State) newOther() [nfs4.OtherSize]byte {
	var o [nfs4.OtherSize]byte
	binary.BigEndian.PutUint32(o[0:4], st.boot)
	binary.BigEndian.PutUint32(o[4:8], st.newID())
	copy(o[8:12], st.tag[:])
	return o
}

// Special stateids (RFC 8881 §8.2.3).
func isAnonymous(s *nfs4.Stateid) bool { return *s == nfs4.AnonymousStateid }
func isBypass(s *nfs4.Stateid) bool    { return *s == nfs4.BypassStateid }

// IsSpecial reports whether s is one of the special stateids that stand
// for no state: anonymous (all zeros) or READ bypass (all ones).
func IsSpecial(s *nfs4.Stateid) bool { return isAnonymous(s) || isBypass(s) }

// lookupLocked finds the state of a stateid sent by client cl (nil: any),
// checking its seqid: 0 stands for the current one (4.1), a higher one
// than the current is BAD_STATEID, a lower OLD_STATEID. A stateid of a
// previous instance is STALE_STATEID; an unknown one BAD_STATEID.
func (st *State) lookupLocked(s *nfs4.Stateid) (stateRec, nfs4.Status) {
	rec, ok := st.stateids[s.Other]
	if !ok {
		if binary.BigEndian.Uint32(s.Other[0:4]) != st.boot && s.Other != [nfs4.OtherSize]byte{} &&
			s.Other != nfs4.BypassStateid.Other {
			return rec, nfs4.ErrStaleStateid
		}
		return rec, nfs4.ErrBadStateid
	}
	var cur uint32
	switch rec.kind {
	case kindOpen:
		cur = rec.open.sid.Seqid
	case kindLock:
		cur = rec.lock.sid.Seqid
	case kindDeleg:
		cur = rec.deleg.sid.Seqid
	}
	switch {
	case s.Seqid == 0 || s.Seqid == cur:
		return rec, nfs4.OK
	case seqNewer(s.Seqid, cur):
		return rec, nfs4.ErrBadStateid
	}
	return rec, nfs4.ErrOldStateid
}

// seqNewer reports whether stateid seqid a is later than b (seqids wrap
// from 0xffffffff to 1, 0 being special).
func seqNewer(a, b uint32) bool { return int32(a-b) > 0 }

// bumpSeqid advances a stateid's seqid, skipping 0.
func bumpSeqid(s *nfs4.Stateid) {
	s.Seqid++
	if s.Seqid == 0 {
		s.Seqid = 1
	}
}

// fileLocked returns the state of the file with key k, made if needed.
func (st *State) fileLocked(k string) *File {
	f := st.files[k]
	if f == nil {
		f = &File{key: k}
		st.files[k] = f
	}
	return f
}

// dropFileIfIdle forgets a file's state once nothing refers to it.
func (st *State) dropFileIfIdle(f *File) {
	if len(f.opens) == 0 && len(f.locks) == 0 && len(f.delegs) == 0 && st.files[f.key] == f {
		delete(st.files, f.key)
		if st.idle != nil {
			st.idle(f.key)
		}
	}
}

// Stats is a snapshot of the state's size, for tests and metrics.
type Stats struct {
	Clients, Sessions, Files, Stateids, Locks int
	InGrace                                   bool
}

// Stats returns the state's size now.
func (st *State) Stats() Stats {
	st.mu.Lock()
	defer st.mu.Unlock()
	s := Stats{Clients: len(st.clients), Sessions: len(st.sessions), Files: len(st.files),
		Stateids: len(st.stateids), InGrace: st.inGraceLocked()}
	for _, f := range st.files {
		s.Locks += len(f.locks)
	}
	return s
}
