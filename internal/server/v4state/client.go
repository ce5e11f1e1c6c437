package v4state

import (
	"bytes"
	"encoding/binary"
	"time"

	"hushfs/internal/nfs4"
)

// Client is a client record: one client owner (the client's name for
// itself, with a verifier that changes when it reboots), as EXCHANGE_ID
// made it and CREATE_SESSION confirmed it.
type Client struct {
	ID        uint64
	Owner     []byte
	Verifier  nfs4.Verifier
	Principal string // who called EXCHANGE_ID (flavor and uid)
	Confirmed bool

	// CREATE_SESSION's own sequence (RFC 8881 §18.36.4): the last
	// sequence id done and its result, replayed to a retransmission.
	csSeq uint32
	csRes nfs4.CreateSessionRes
	csOK  bool // csRes holds a result

	lastRenew  time.Time
	sessions   map[nfs4.SessionID]*Session
	openOwners map[string]*OpenOwner
	lockOwners map[string]*LockOwner
	nstate     int // stateids of this client
	revoked    int // revoked delegations not yet freed

	// reclaimComplete: RECLAIM_COMPLETE received.
	reclaimComplete bool
	// mayReclaim: the client was a client of the previous instance, so it
	// may reclaim in the grace period.
	mayReclaim bool
	gone       bool
}

// exchangeFlagsValid is every EXCHANGE_ID flag a client may send.
const exchangeFlagsValid = nfs4.ExchgIDFlagSuppMovedRefer | nfs4.ExchgIDFlagSuppMovedMigr |
	nfs4.ExchgIDFlagBindPrincStateid | nfs4.ExchgIDFlagMaskPNFS | nfs4.ExchgIDFlagUpdConfirmedRecA

// ExchangeResult is what EXCHANGE_ID answers.
type ExchangeResult struct {
	ClientID   uint64
	SequenceID uint32
	Flags      uint32
}

// ExchangeID serves EXCHANGE_ID for the caller principal (RFC 8881
// §18.35.5): it finds or makes the owner's client record.
func (st *State) ExchangeID(a *nfs4.ExchangeIDArgs, principal string) (ExchangeResult, nfs4.Status) {
	var r ExchangeResult
	if a.Flags&^exchangeFlagsValid != 0 {
		return r, nfs4.ErrInval
	}
	switch a.StateProtect.How {
	case nfs4.SP4None:
	case nfs4.SP4MachCred, nfs4.SP4SSV:
		// Only SP4_NONE: state is protected by nothing but AUTH_SYS,
		// which cannot protect anything anyway.
		return r, nfs4.ErrEncrAlgUnsupp
	default:
		return r, nfs4.ErrInval
	}
	if len(a.ClientOwner.OwnerID) == 0 {
		return r, nfs4.ErrInval
	}
	st.mu.Lock()
	defer st.mu.Unlock()
	now := st.now()
	key := string(a.ClientOwner.OwnerID)
	recs := st.owners[key]
	if recs == nil {
		recs = &ownerRecs{}
	}
	conf := recs.confirmed
	update := a.Flags&nfs4.ExchgIDFlagUpdConfirmedRecA != 0
	if update {
		switch {
		case conf == nil:
			return r, nfs4.ErrNoEnt
		case conf.Verifier != a.ClientOwner.Verifier:
			return r, nfs4.ErrNotSame
		case conf.Principal != principal:
			return r, nfs4.ErrPerm
		}
		conf.lastRenew = now
		return ExchangeResult{ClientID: conf.ID, SequenceID: conf.csSeq + 1,
			Flags: nfs4.ExchgIDFlagConfirmedR | nfs4.ExchgIDFlagUseNonPNFS}, nfs4.OK
	}
	if conf != nil && conf.Verifier == a.ClientOwner.Verifier {
		if conf.Principal == principal {
			// The same incarnation asking again: its record as it is.
			conf.lastRenew = now
			return ExchangeResult{ClientID: conf.ID, SequenceID: conf.csSeq + 1,
				Flags: nfs4.ExchgIDFlagConfirmedR | nfs4.ExchgIDFlagUseNonPNFS}, nfs4.OK
		}
		if conf.hasState() {
			return r, nfs4.ErrClidInUse
		}
	}
	if conf != nil && conf.Principal != principal && !conf.hasState() {
		// Another principal takes over an owner without state: the old
		// record goes now (RFC 8881 §18.35.5, case 3).
		st.destroyClientLocked(conf)
		recs = st.owners[key]
		if recs == nil {
			recs = &ownerRecs{}
		}
	}
	// A new incarnation (or a new client): a new unconfirmed record. A
	// confirmed one of an older incarnation stays until this one is
	// confirmed (CREATE_SESSION), which ends it and its state.
	if len(st.clients) >= MaxClients {
		st.expireLocked(now)
		if len(st.clients) >= MaxClients {
			return r, nfs4.ErrResource
		}
	}
	if old := recs.unconfirmed; old != nil {
		st.destroyClientLocked(old)
	}
	cl := &Client{
		ID:         uint64(st.boot)<<32 | uint64(st.newID()),
		Owner:      bytes.Clone(a.ClientOwner.OwnerID),
		Verifier:   a.ClientOwner.Verifier,
		Principal:  principal,
		lastRenew:  now,
		sessions:   make(map[nfs4.SessionID]*Session),
		openOwners: make(map[string]*OpenOwner),
		lockOwners: make(map[string]*LockOwner),
	}
	recs.unconfirmed = cl
	st.owners[key] = recs
	st.clients[cl.ID] = cl
	return ExchangeResult{ClientID: cl.ID, SequenceID: 1, Flags: nfs4.ExchgIDFlagUseNonPNFS}, nfs4.OK
}

func (cl *Client) hasState() bool { return len(cl.sessions) > 0 || cl.nstate > 0 }

// clientLocked finds a client record by id: STALE_CLIENTID if there is
// none (expired, destroyed, or of a previous instance).
func (st *State) clientLocked(id uint64) (*Client, nfs4.Status) {
	cl := st.clients[id]
	if cl == nil || cl.gone {
		return nil, nfs4.ErrStaleClientID
	}
	return cl, nfs4.OK
}

// ConnRef identifies a connection for session binding: any comparable
// value (the server uses its RPC connection), and a channel closed when the
// connection is gone.
type ConnRef struct {
	ID   any
	Done <-chan struct{}
}

// Limits of what CREATE_SESSION grants.
type Limits struct {
	MaxSlots          uint32 // fore channel slots (ca_maxrequests)
	MaxOps            uint32 // operations per COMPOUND
	MaxRequest        uint32 // bytes of a request
	MaxResponse       uint32 // bytes of a reply
	MaxResponseCached uint32 // bytes of a reply kept for replay
}

// CreateSession serves CREATE_SESSION (RFC 8881 §18.36.4), on connection
// conn, which it binds to the new session (both channels with
// CONN_BACK_CHAN). confirmed reports that the call confirmed the client
// record: the caller must persist its records (Persist) before replying.
func (st *State) CreateSession(a *nfs4.CreateSessionArgs, principal string, lim Limits, conn ConnRef) (res nfs4.CreateSessionRes) {
	st.mu.Lock()
	defer st.mu.Unlock()
	cl, status := st.clientLocked(a.ClientID)
	if status != nfs4.OK {
		res.Status = status
		return res
	}
	switch {
	case a.Sequence == cl.csSeq && cl.csOK:
		return cl.csRes // a retransmission: the same answer
	case a.Sequence != cl.csSeq+1:
		res.Status = nfs4.ErrSeqMisordered
		return res
	}
	if cl.Principal != principal && !cl.Confirmed {
		res.Status = nfs4.ErrClidInUse
		return res
	}
	res = st.newSessionLocked(cl, a, lim, conn)
	if res.Status != nfs4.OK {
		// Errors are not cached, and do not advance the sequence
		// (a client retries with the same one).
		return res
	}
	cl.csSeq++
	cl.csRes, cl.csOK = res, true
	cl.lastRenew = st.now()
	if !cl.Confirmed {
		st.confirmLocked(cl)
	}
	return res
}

// confirmLocked makes cl the owner's confirmed record, ending an older
// incarnation's record and its state, and records it for a restart.
func (st *State) confirmLocked(cl *Client) {
	recs := st.owners[string(cl.Owner)]
	if recs == nil {
		recs = &ownerRecs{}
		st.owners[string(cl.Owner)] = recs
	}
	if old := recs.confirmed; old != nil && old != cl {
		st.destroyClientLocked(old)
	}
	if recs.unconfirmed == cl {
		recs.unconfirmed = nil
	}
	recs.confirmed = cl
	cl.Confirmed = true
	cl.mayReclaim = st.inGraceLocked() && st.grace.knows(cl.Owner)
	if cl.mayReclaim {
		st.grace.reclaimed(st.now()) // it is about to reclaim
	}
	st.grace.add(cl.Owner)
	st.persistLocked()
}

// DestroyClientID serves DESTROY_CLIENTID: a record with sessions is
// CLIENTID_BUSY.
func (st *State) DestroyClientID(id uint64) nfs4.Status {
	st.mu.Lock()
	defer st.mu.Unlock()
	cl, status := st.clientLocked(id)
	if status != nfs4.OK {
		return status
	}
	if len(cl.sessions) > 0 {
		return nfs4.ErrClientIDBusy
	}
	st.destroyClientLocked(cl)
	return nfs4.OK
}

// destroyClientLocked ends a client record with all its state.
func (st *State) destroyClientLocked(cl *Client) {
	if cl.gone {
		return
	}
	cl.gone = true
	for id, s := range cl.sessions {
		s.destroyed = true
		delete(st.sessions, id)
	}
	for _, oo := range cl.openOwners {
		for _, o := range oo.opens {
			st.releaseOpenLocked(o)
		}
	}
	for _, lo := range cl.lockOwners {
		for _, ls := range lo.states {
			st.releaseLockStateLocked(ls)
		}
	}
	for _, rec := range st.stateids {
		if rec.kind == kindDeleg && rec.deleg.client == cl {
			st.releaseDelegLocked(rec.deleg)
		}
	}
	delete(st.clients, cl.ID)
	if recs := st.owners[string(cl.Owner)]; recs != nil {
		if recs.confirmed == cl {
			recs.confirmed = nil
			st.grace.remove(cl.Owner)
			st.persistLocked()
		}
		if recs.unconfirmed == cl {
			recs.unconfirmed = nil
		}
		if recs.confirmed == nil && recs.unconfirmed == nil {
			delete(st.owners, string(cl.Owner))
		}
	}
}

// Expire ends the clients whose lease ran out: their opens and locks are
// released, their sessions destroyed. A client with a COMPOUND in
// progress is renewed instead (it is talking to us). The server calls it
// about once a second.
func (st *State) Expire() {
	st.mu.Lock()
	defer st.mu.Unlock()
	st.expireLocked(st.now())
	st.revokeLocked(st.now())
	st.graceTickLocked()
}

func (st *State) expireLocked(now time.Time) {
	st.grace.batch = true
	defer func() {
		st.grace.batch = false
		st.persistLocked()
	}()
	for _, cl := range st.clients {
		if now.Sub(cl.lastRenew) < st.lease {
			continue
		}
		if cl.busy() {
			cl.lastRenew = now
			continue
		}
		st.logf("hushfs server: NFSv4.1 client %#x (%q) let its lease expire: its state is released", cl.ID, cl.Owner)
		st.destroyClientLocked(cl)
	}
}

// busy reports whether a COMPOUND of the client is being served.
func (cl *Client) busy() bool {
	for _, s := range cl.sessions {
		if s.inFlight > 0 {
			return true
		}
	}
	return false
}

// ownerKey is the key of an open or lock owner within its client.
func ownerKey(o []byte) string { return string(o) }

// ClientOfID reports whether id names a live client record, for the
// operations that take a client id (LOCKT's owner).
func (st *State) ClientOfID(id uint64) nfs4.Status {
	st.mu.Lock()
	defer st.mu.Unlock()
	_, s := st.clientLocked(id)
	return s
}

// sessionIDFor makes a session id: the client id, the epoch and a counter.
func (st *State) sessionIDFor(cl *Client) nfs4.SessionID {
	var id nfs4.SessionID
	binary.BigEndian.PutUint64(id[0:8], cl.ID)
	binary.BigEndian.PutUint32(id[8:12], st.newID())
	copy(id[12:16], st.tag[:])
	return id
}
