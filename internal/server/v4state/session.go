package v4state

import (
	"slices"
	"strings"

	"hushfs/internal/nfs4"
)

// Session is a session: a slot table (the fore channel's exactly-once
// replay cache), the connections bound to it, and what the back channel
// needs (the callback program and security, the connection to call on).
type Session struct {
	ID        nfs4.SessionID
	client    *Client
	Fore      nfs4.ChannelAttrs
	Back      nfs4.ChannelAttrs
	Flags     uint32
	CBProgram uint32
	CBSec     []nfs4.CallbackSecParms

	slots    []slot
	inFlight int
	conns    map[any]connBinding
	// back is the connection callbacks go out on: the last one bound to
	// the back channel (the next step's CB_RECALL uses it).
	back      *ConnRef
	destroyed bool
	cbOK      bool          // the back channel answered CB_NULL (delegations may be granted)
	cbSeq     uint32        // the back channel's slot 0: its last sequence id
	cbSlot    chan struct{} // one callback at a time on that slot
}

type connBinding struct {
	dir  uint32 // nfs4.CDFS4*
	done <-chan struct{}
}

// slot is one slot of the fore channel: its last sequence id, whether a
// request on it is being served, and that request's reply when the client
// asked it cached (sa_cachethis): a retransmission (same slot and
// sequence id) gets these bytes, nothing runs again.
type slot struct {
	seq      uint32
	inUse    bool
	cached   []byte
	hasReply bool // cached holds the reply; else a retransmission is RETRY_UNCACHED_REP
}

// Channel message sizes below which a channel cannot carry the smallest
// request or reply it must.
const (
	minChannelMsg = 256
	minBackReply  = 64
)

// Client returns the session's client record.
func (s *Session) Client() *Client { return s.client }

// newSessionLocked makes a session for cl with the channel attributes
// negotiated down to lim, bound to conn.
func (st *State) newSessionLocked(cl *Client, a *nfs4.CreateSessionArgs, lim Limits, conn ConnRef) (res nfs4.CreateSessionRes) {
	if len(cl.sessions) >= MaxSessionsPerClient {
		res.Status = nfs4.ErrNoSpc
		return res
	}
	f, b := a.Fore, a.Back
	if f.MaxRequests == 0 || f.MaxOperations == 0 ||
		a.Flags&^(nfs4.CreateSessionFlagPersist|nfs4.CreateSessionFlagConnBackChan|nfs4.CreateSessionFlagConnRDMA) != 0 {
		res.Status = nfs4.ErrInval
		return res
	}
	// A request must hold at least SEQUENCE and one more operation; a
	// reply at least their results; a callback CB_SEQUENCE and CB_RECALL.
	// Channels smaller cannot work.
	if f.MaxRequestSize < minChannelMsg || f.MaxResponseSize < minChannelMsg ||
		b.MaxRequestSize < minChannelMsg || b.MaxResponseSize < minBackReply {
		res.Status = nfs4.ErrTooSmall
		return res
	}
	fore := nfs4.ChannelAttrs{
		MaxRequestSize:        min(f.MaxRequestSize, lim.MaxRequest),
		MaxResponseSize:       min(f.MaxResponseSize, lim.MaxResponse),
		MaxResponseSizeCached: min(f.MaxResponseSizeCached, lim.MaxResponseCached, f.MaxResponseSize),
		MaxOperations:         min(f.MaxOperations, lim.MaxOps),
		MaxRequests:           min(f.MaxRequests, lim.MaxSlots),
	}
	// The back channel is the client's: we send at most what it takes.
	back := nfs4.ChannelAttrs{
		MaxRequestSize:        min(b.MaxRequestSize, 64<<10),
		MaxResponseSize:       min(b.MaxResponseSize, 64<<10),
		MaxResponseSizeCached: 0,
		MaxOperations:         min(b.MaxOperations, 16),
		MaxRequests:           min(max(b.MaxRequests, 1), 16),
	}
	s := &Session{
		ID:        st.sessionIDFor(cl),
		client:    cl,
		Fore:      fore,
		Back:      back,
		Flags:     a.Flags & nfs4.CreateSessionFlagConnBackChan, // not persistent, no RDMA
		CBProgram: a.CBProgram,
		slots:     make([]slot, fore.MaxRequests),
		conns:     make(map[any]connBinding),
		cbSlot:    make(chan struct{}, 1),
	}
	for _, p := range a.SecParms {
		p.Sys.Machine = strings.Clone(p.Sys.Machine)
		p.Sys.GIDs = slices.Clone(p.Sys.GIDs)
		p.GSSHandleFromServer, p.GSSHandleFromClient = nil, nil
		s.CBSec = append(s.CBSec, p)
	}
	dir := uint32(nfs4.CDFS4Fore)
	if s.Flags&nfs4.CreateSessionFlagConnBackChan != 0 {
		dir = nfs4.CDFS4Both
	}
	s.bind(conn, dir)
	cl.sessions[s.ID] = s
	st.sessions[s.ID] = s
	return nfs4.CreateSessionRes{Status: nfs4.OK, SessionID: s.ID, Sequence: a.Sequence,
		Flags: s.Flags, Fore: fore, Back: back}
}

func (s *Session) bind(conn ConnRef, dir uint32) {
	if conn.ID == nil {
		return
	}
	s.conns[conn.ID] = connBinding{dir: dir, done: conn.Done}
	if dir&nfs4.CDFS4Back != 0 {
		c := conn
		s.back = &c
	}
	// Forget connections that are gone, so the map stays small.
	for id, b := range s.conns {
		if closed(b.done) {
			delete(s.conns, id)
		}
	}
}

func closed(c <-chan struct{}) bool {
	if c == nil {
		return false
	}
	select {
	case <-c:
		return true
	default:
		return false
	}
}

// SeqResult is what SEQUENCE decided.
type SeqResult struct {
	Status nfs4.Status
	Res    nfs4.SequenceRes
	// Replay, when not nil, is the cached reply of the request this one
	// retransmits: the whole COMPOUND4res, to send as it is.
	Replay  []byte
	Session *Session
	Slot    uint32
	// CacheThis: the reply is to be kept for a retransmission.
	CacheThis bool
}

// Sequence serves SEQUENCE (RFC 8881 §18.46) for a request of reqSize
// bytes and nops operations, arriving on conn. On NFS4_OK the slot is
// taken: the caller runs the rest of the COMPOUND and then calls Finish
// with the reply.
func (st *State) Sequence(a *nfs4.SequenceArgs, reqSize, nops int, conn ConnRef) (r SeqResult) {
	st.mu.Lock()
	defer st.mu.Unlock()
	s := st.sessions[a.SessionID]
	if s == nil || s.destroyed {
		r.Status = nfs4.ErrBadSession
		return r
	}
	if a.SlotID >= uint32(len(s.slots)) || a.HighestSlotID >= uint32(len(s.slots)) {
		r.Status = nfs4.ErrBadSlot
		return r
	}
	sl := &s.slots[a.SlotID]
	switch {
	case a.SequenceID == sl.seq && sl.seq != 0:
		// A retransmission of the slot's last request.
		switch {
		case sl.inUse:
			r.Status = nfs4.ErrDelay // still running: its reply will come
		case sl.hasReply:
			r.Replay = sl.cached
			r.Session = s
		default:
			r.Status = nfs4.ErrRetryUncachedRep
		}
		return r
	case a.SequenceID != sl.seq+1 || sl.inUse:
		r.Status = nfs4.ErrSeqMisordered
		return r
	}
	if uint32(reqSize) > s.Fore.MaxRequestSize {
		r.Status = nfs4.ErrReqTooBig
		return r
	}
	if uint32(nops) > s.Fore.MaxOperations {
		r.Status = nfs4.ErrTooManyOps
		return r
	}
	// SP4_NONE: a connection a client uses is bound to the fore channel
	// by that use (RFC 8881 §2.10.3.1).
	if _, ok := s.conns[conn.ID]; !ok && conn.ID != nil {
		s.bind(conn, nfs4.CDFS4Fore)
	}
	sl.seq = a.SequenceID
	sl.inUse = true
	sl.cached, sl.hasReply = nil, false
	s.inFlight++
	s.client.lastRenew = st.now()
	top := uint32(len(s.slots) - 1)
	r.Res = nfs4.SequenceRes{Status: nfs4.OK, SessionID: s.ID, SequenceID: a.SequenceID, SlotID: a.SlotID,
		HighestSlotID: top, TargetHighestSlotID: top, StatusFlags: st.statusFlagsLocked(s)}
	r.Session, r.Slot, r.CacheThis = s, a.SlotID, a.CacheThis
	return r
}

// statusFlagsLocked is SEQUENCE's sr_status_flags: whether the client
// asked for a back channel and none of its connections is there any more
// (the client then binds one: BIND_CONN_TO_SESSION).
func (st *State) statusFlagsLocked(s *Session) uint32 {
	var f uint32
	if s.Flags&nfs4.CreateSessionFlagConnBackChan != 0 && (s.back == nil || closed(s.back.Done)) {
		f |= nfs4.SeqStatusCBPathDownSession
	}
	if st.inGraceLocked() && s.client.mayReclaim && !s.client.reclaimComplete {
		f |= nfs4.SeqStatusRestartReclaimNeeded
	}
	if s.client.revoked > 0 {
		f |= nfs4.SeqStatusRecallableStateRevoked
	}
	return f
}

// Finish ends the request on a slot that Sequence took, keeping reply (a
// COMPOUND4res, copied) for a retransmission when cache is true.
func (st *State) Finish(s *Session, slotID uint32, reply []byte, cache bool) {
	st.mu.Lock()
	defer st.mu.Unlock()
	if int(slotID) >= len(s.slots) {
		return
	}
	sl := &s.slots[slotID]
	if !sl.inUse {
		return
	}
	sl.inUse = false
	s.inFlight--
	if cache {
		sl.cached = append(sl.cached[:0], reply...)
		sl.hasReply = true
	}
	s.client.lastRenew = st.now()
}

// DestroySession serves DESTROY_SESSION. inThis is true when the
// COMPOUND runs in the session it destroys (its own request is in flight).
func (st *State) DestroySession(id nfs4.SessionID, inThis bool) nfs4.Status {
	st.mu.Lock()
	defer st.mu.Unlock()
	s := st.sessions[id]
	if s == nil || s.destroyed {
		return nfs4.ErrBadSession
	}
	busy := s.inFlight
	if inThis {
		busy--
	}
	if busy > 0 {
		return nfs4.ErrDelay
	}
	s.destroyed = true
	delete(st.sessions, id)
	delete(s.client.sessions, id)
	s.client.lastRenew = st.now()
	return nfs4.OK
}

// BindConn serves BIND_CONN_TO_SESSION: conn is bound to the session's
// fore channel, back channel or both, as asked (both when the client
// leaves the choice to us). It returns the direction bound.
func (st *State) BindConn(a *nfs4.BindConnToSessionArgs, conn ConnRef) (uint32, nfs4.Status) {
	st.mu.Lock()
	defer st.mu.Unlock()
	s := st.sessions[a.SessionID]
	if s == nil || s.destroyed {
		return 0, nfs4.ErrBadSession
	}
	if a.UseRDMA {
		return 0, nfs4.ErrInval
	}
	var dir uint32
	switch a.Dir {
	case nfs4.CDFC4Fore:
		dir = nfs4.CDFS4Fore
	case nfs4.CDFC4Back:
		dir = nfs4.CDFS4Back
	default:
		dir = nfs4.CDFS4Both
	}
	s.bind(conn, dir)
	s.client.lastRenew = st.now()
	return dir, nfs4.OK
}

// BackchannelCtl serves BACKCHANNEL_CTL: a new callback program and
// security for the session's back channel.
func (st *State) BackchannelCtl(s *Session, a *nfs4.BackchannelCtlArgs) nfs4.Status {
	st.mu.Lock()
	defer st.mu.Unlock()
	s.CBProgram = a.CBProgram
	s.CBSec = s.CBSec[:0]
	for _, p := range a.SecParms {
		p.Sys.Machine = strings.Clone(p.Sys.Machine)
		p.Sys.GIDs = slices.Clone(p.Sys.GIDs)
		p.GSSHandleFromServer, p.GSSHandleFromClient = nil, nil
		s.CBSec = append(s.CBSec, p)
	}
	return nfs4.OK
}

// Session returns the live session id, or nil.
func (st *State) Session(id nfs4.SessionID) *Session {
	st.mu.Lock()
	defer st.mu.Unlock()
	if s := st.sessions[id]; s != nil && !s.destroyed {
		return s
	}
	return nil
}

// Callback is what a call on a session's back channel needs.
type Callback struct {
	Conn     ConnRef // the connection bound to the back channel
	Program  uint32
	Sec      []nfs4.CallbackSecParms
	Sequence nfs4.CBSequenceArgs // CB_SEQUENCE on slot 0
}

// BeginCallback takes the session's one back-channel slot (waiting while
// another callback holds it) and returns what the call needs; ok is false
// when the session has no back channel any more. EndCallback releases the
// slot, advancing its sequence id when the client answered CB_SEQUENCE.
func (st *State) BeginCallback(s *Session) (cb Callback, ok bool) {
	s.cbSlot <- struct{}{}
	st.mu.Lock()
	defer st.mu.Unlock()
	if s.back == nil || closed(s.back.Done) || s.destroyed {
		<-s.cbSlot
		return cb, false
	}
	cb = Callback{Conn: *s.back, Program: s.CBProgram, Sec: slices.Clone(s.CBSec),
		Sequence: nfs4.CBSequenceArgs{SessionID: s.ID, SequenceID: s.cbSeq + 1}}
	return cb, true
}

// EndCallback releases the slot BeginCallback took.
func (st *State) EndCallback(s *Session, sequenced bool) {
	st.mu.Lock()
	if sequenced {
		s.cbSeq++
	}
	st.mu.Unlock()
	<-s.cbSlot
}
