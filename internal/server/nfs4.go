package server

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"hushfs/internal/nfs3"
	"hushfs/internal/nfs4"
	"hushfs/internal/rpc"
	"hushfs/internal/server/v4state"
	"hushfs/internal/xdr"
)

// NFSv4.1 beside NFSv3: program 100003 version 4 on the same port, one
// export, the same file handles, credentials, security and durability.
// The protocol's state (clients, sessions, opens, locks, grace) lives in
// v4state; these files (nfs4*.go) are the COMPOUND procedure and its
// operations on the export, built on the same file layer as the v3
// procedures (handles and nodes, credential switching, durable syncs, the
// data path with its write-back error latch, READDIR cookies), which they
// call where the work is the same.

// nfs4Limits bound what a session may ask for: slots up to what the RPC
// layer keeps in flight per connection (a slot beyond it would wait
// unread), requests and replies sized for 1 MiB READs and WRITEs, and a
// reply cache of 64 KiB per slot (a READ's data is never worth caching:
// clients do not ask).
var nfs4Limits = v4state.Limits{
	MaxSlots:          32,
	MaxOps:            64,
	MaxRequest:        maxIO + 64<<10,
	MaxResponse:       maxIO + 64<<10,
	MaxResponseCached: 64 << 10,
}

// v4 is the server's NFSv4.1 part.
type v4 struct {
	state       *v4state.State
	observeOp   func(op uint32, d time.Duration)
	observeCB   func(op uint32, d time.Duration)
	granted     func(typ string)
	delegations bool          // grant read delegations
	recallWait  time.Duration // see Config.RecallWait (nfs4_deleg.go)
	leases      *leaseWatch   // with delegations: local changes to delegated files (leases.go)
	notifier    *dirNotifier  // CB_NOTIFY of directory delegations (nfs4_dirnotify.go)
	// Callbacks run on goroutines of their own, under cbCtx; Close
	// cancels it and waits for them.
	cbCtx    context.Context
	cbCancel context.CancelFunc
	cbWG     sync.WaitGroup
	domain   string // the id mapping domain of owner strings
	// serverOwner is EXCHANGE_ID's server owner and scope: the same for
	// every address of this server and export.
	serverOwner []byte
	pseudo      []string // the export's path, component by component
	started     nfs4.Time
	args        sync.Pool // *nfs4.CompoundArgs

	pinMu sync.Mutex
	pins  map[string]*node // files NFSv4.1 clients hold open or locked, by handle
}

// pinOpen keeps n (which the caller holds a reference to) referenced while
// NFSv4.1 state refers to it: a file removed while a client has it open
// stays readable and writable through its handle until the last CLOSE
// (OPEN4_RESULT_PRESERVE_UNLINKED: the client need not rename it away).
func (s *Server) pinOpen(n *node) {
	s.v4.pinMu.Lock()
	defer s.v4.pinMu.Unlock()
	if s.v4.pins[n.key] != nil {
		return
	}
	s.cache.ref(n)
	n.v4open.Store(true)
	s.v4.pins[n.key] = n
}

// unpin drops the pin of the file with key k: no NFSv4.1 state refers to
// it any more (v4state's OnFileIdle).
func (s *Server) unpin(k string) {
	s.v4.pinMu.Lock()
	n := s.v4.pins[k]
	delete(s.v4.pins, k)
	s.v4.pinMu.Unlock()
	if n != nil {
		n.v4open.Store(false)
		s.cache.release(n)
	}
}

// openPinned returns the pinned node of fh with a reference, or nil.
func (s *Server) openPinned(fh []byte) *node {
	s.v4.pinMu.Lock()
	defer s.v4.pinMu.Unlock()
	n := s.v4.pins[string(fh)]
	if n != nil {
		s.cache.ref(n)
	}
	return n
}

// nfs4Handler serves NFS version 4 (minor version 1).
type nfs4Handler struct{ s *Server }

// ServeRPC implements rpc.Handler.
func (h nfs4Handler) ServeRPC(ctx context.Context, call *rpc.Call, reply []byte) ([]byte, error) {
	s := h.s
	if !s.admitted(call) {
		return nil, errNotAdmitted
	}
	switch call.Proc {
	case nfs4.ProcNull:
		return reply, nil
	case nfs4.ProcCompound:
		return s.compound(call, reply)
	}
	return nil, rpc.ErrProcUnavail
}

// compound is one COMPOUND being served: the caller, the filehandles and
// stateids the operations pass along (RFC 8881 §16.2.3.1.2), the session
// and slot it runs in, and the reply being appended to.
type compound struct {
	s         *Server
	call      *rpc.Call
	id        identity
	principal string
	conn      v4state.ConnRef

	cur, saved       fhState
	curSid, savedSid nfs4.Stateid
	curSidOK         bool // curSid holds a stateid (else CURRENT_STATEID is BAD_STATEID)
	savedSidOK       bool

	replay    []byte // SEQUENCE found a retransmission: its cached reply
	sess      *v4state.Session
	client    *v4state.Client
	slot      uint32
	cacheThis bool

	reply []byte
	start int // where the COMPOUND4res begins in reply
	// after runs once the current operation is done, before the next
	// (a change's notifications: nfs4_dirnotify.go).
	after []func()
}

// release drops the references the compound holds.
func (c *compound) release() {
	c.cur.clear(c.s)
	c.saved.clear(c.s)
}

// soleOps may come without SEQUENCE, as the only operation of a COMPOUND.
func soleOp(op nfs4.Opnum) bool {
	switch op {
	case nfs4.OpExchangeID, nfs4.OpCreateSession, nfs4.OpBindConnToSession,
		nfs4.OpDestroySession, nfs4.OpDestroyClientID:
		return true
	}
	return false
}

func (s *Server) compound(call *rpc.Call, reply []byte) ([]byte, error) {
	args, _ := s.v4.args.Get().(*nfs4.CompoundArgs)
	if args == nil {
		args = new(nfs4.CompoundArgs)
	}
	defer s.v4.args.Put(args)
	var d xdr.Decoder
	d.Reset(call.Args)
	args.Decode(&d)
	var failed *nfs4.OpDecodeError
	if err := d.Err(); err != nil && !errors.As(err, &failed) {
		return nil, rpc.ErrGarbageArgs // not even the head decodes
	}
	c := &compound{s: s, call: call, id: s.identityOf(call), principal: principalOf(call), start: len(reply)}
	c.conn = v4state.ConnRef{ID: call.Conn}
	if call.Conn != nil {
		if bc := call.Conn.BackChannel(); bc != nil {
			c.conn.Done = bc.Done()
		}
	}
	defer c.release()
	reply, head := nfs4.AppendCompoundResHead(reply, args.Tag)
	c.reply = reply
	if args.MinorVersion != nfs4.MinorVersion {
		head.Finish(c.reply, nfs4.ErrMinorVersMismatch, 0)
		return c.reply, nil
	}
	nops := len(args.Ops)
	if failed != nil {
		nops++
	}
	status, n := c.run(args.Ops, failed, nops, len(call.Args))
	if c.replay != nil {
		// A retransmission: the cached reply, exactly as sent before.
		return append(c.reply[:c.start], c.replay...), nil
	}
	head.Finish(c.reply, status, n)
	if c.sess != nil {
		c.s.v4.state.Finish(c.sess, c.slot, c.reply[c.start:], c.cacheThis)
	}
	return c.reply, nil
}

// run runs the operations, appending each result, until one fails; failed
// (if not nil) is the operation after ops that did not decode. It returns
// the COMPOUND's status and the number of results.
func (c *compound) run(ops []nfs4.Argop, failed *nfs4.OpDecodeError, nops, reqSize int) (nfs4.Status, int) {
	for i := range ops {
		op := ops[i].Op
		var status nfs4.Status
		switch {
		case i == 0 && op == nfs4.OpSequence:
			status = c.sequence(ops[i].Args.(*nfs4.SequenceArgs), nops, reqSize)
			if c.replay != nil {
				return nfs4.OK, 0
			}
		case i == 0 && op == nfs4.OpIllegal:
			status = c.fail(op, nfs4.ErrOpIllegal)
		case i == 0 && soleOp(op) && nops > 1:
			status = c.fail(op, nfs4.ErrNotOnlyOp)
		case i == 0 && !soleOp(op):
			status = c.fail(op, nfs4.ErrOpNotInSession)
		case op == nfs4.OpSequence:
			status = c.fail(op, nfs4.ErrSequencePos)
		case i > 0 && op == nfs4.OpBindConnToSession:
			status = c.fail(op, nfs4.ErrNotOnlyOp)
		default:
			status = c.op(op, ops[i].Args)
		}
		if status != nfs4.OK {
			return status, i + 1
		}
	}
	if failed != nil {
		i := len(ops)
		st := failed.Status()
		c.reply = xdr.AppendUint32(c.reply, failed.ResOp())
		c.reply = xdr.AppendUint32(c.reply, uint32(st))
		c.s.observe(failed.ResOp(), 0)
		return st, i + 1
	}
	return nfs4.OK, len(ops)
}

// fail appends a result of op with status st alone.
func (c *compound) fail(op nfs4.Opnum, st nfs4.Status) nfs4.Status {
	c.reply = xdr.AppendUint32(c.reply, uint32(op))
	c.reply = xdr.AppendUint32(c.reply, uint32(st))
	return st
}

// op runs one operation (not SEQUENCE) and appends its result; a result
// that takes the reply past the session's limits is replaced by
// REP_TOO_BIG (or REP_TOO_BIG_TO_CACHE).
func (c *compound) op(op nfs4.Opnum, args nfs4.OpArgs) nfs4.Status {
	t0 := time.Now()
	mark := len(c.reply)
	c.reply = xdr.AppendUint32(c.reply, uint32(op))
	status := c.dispatch(op, args)
	for _, f := range c.after {
		f()
	}
	c.after = c.after[:0]
	c.s.observe(uint32(op), time.Since(t0))
	if st := c.checkSize(op, mark); st != nfs4.OK {
		return st
	}
	return status
}

// checkSize replaces the result of op (appended from mark on) by
// REP_TOO_BIG when the reply has grown past the session's limit, or by
// REP_TOO_BIG_TO_CACHE past what the session caches when it is to be
// cached.
func (c *compound) checkSize(op nfs4.Opnum, mark int) nfs4.Status {
	if c.sess == nil {
		return nfs4.OK
	}
	size := uint32(len(c.reply) - c.start)
	st := nfs4.OK
	switch {
	case size > c.sess.Fore.MaxResponseSize:
		st = nfs4.ErrRepTooBig
	case c.cacheThis && size > c.sess.Fore.MaxResponseSizeCached:
		st = nfs4.ErrRepTooBigToCache
	default:
		return nfs4.OK
	}
	c.reply = c.reply[:mark]
	return c.fail(op, st)
}

// observe records an operation's time for the metrics.
func (s *Server) observe(op uint32, d time.Duration) {
	if s.v4.observeOp != nil {
		s.v4.observeOp(op, d)
	}
}

// observeCallback records a callback sent at start for the metrics.
func (s *Server) observeCallback(op nfs4.CBOpnum, start time.Time) {
	if s.v4.observeCB != nil {
		s.v4.observeCB(uint32(op), s.now().Sub(start))
	}
}

// grantedDeleg counts a delegation granted for the metrics.
func (s *Server) grantedDeleg(typ string) {
	if s.v4.granted != nil {
		s.v4.granted(typ)
	}
}

// status appends a bare status result and returns it.
func (c *compound) status(st nfs4.Status) nfs4.Status {
	c.reply = xdr.AppendUint32(c.reply, uint32(st))
	return st
}

// dispatch runs op, which appends its result after the operation number.
func (c *compound) dispatch(op nfs4.Opnum, args nfs4.OpArgs) nfs4.Status {
	switch op {
	case nfs4.OpExchangeID:
		return c.exchangeID(args.(*nfs4.ExchangeIDArgs))
	case nfs4.OpCreateSession:
		return c.createSession(args.(*nfs4.CreateSessionArgs))
	case nfs4.OpDestroySession:
		return c.destroySession(args.(*nfs4.DestroySessionArgs))
	case nfs4.OpDestroyClientID:
		return c.status(c.s.v4.state.DestroyClientID(args.(*nfs4.DestroyClientIDArgs).ClientID))
	case nfs4.OpBindConnToSession:
		return c.bindConn(args.(*nfs4.BindConnToSessionArgs))
	case nfs4.OpBackchannelCtl:
		st := c.s.v4.state.BackchannelCtl(c.sess, args.(*nfs4.BackchannelCtlArgs))
		if st == nfs4.OK {
			c.s.probeBackChannel(c.sess) // a new program or security
		}
		return c.status(st)
	case nfs4.OpReclaimComplete:
		return c.reclaimComplete(args.(*nfs4.ReclaimCompleteArgs))
	case nfs4.OpPutFH:
		return c.putFH(args.(*nfs4.PutFHArgs))
	case nfs4.OpPutRootFH, nfs4.OpPutPubFH:
		return c.putRootFH()
	case nfs4.OpGetFH:
		return c.getFH()
	case nfs4.OpSaveFH:
		return c.saveFH()
	case nfs4.OpRestoreFH:
		return c.restoreFH()
	case nfs4.OpLookup:
		return c.lookup(args.(*nfs4.LookupArgs))
	case nfs4.OpLookupP:
		return c.lookupp()
	case nfs4.OpSecinfo:
		return c.secinfo(args.(*nfs4.SecinfoArgs))
	case nfs4.OpSecinfoNoName:
		return c.secinfoNoName(args.(*nfs4.SecinfoNoNameArgs))
	case nfs4.OpGetattr:
		return c.getattr(args.(*nfs4.GetattrArgs))
	case nfs4.OpSetattr:
		return c.setattr(args.(*nfs4.SetattrArgs))
	case nfs4.OpVerify, nfs4.OpNverify:
		return c.verify(args.(*nfs4.VerifyArgs), op == nfs4.OpNverify)
	case nfs4.OpAccess:
		return c.access(args.(*nfs4.AccessArgs))
	case nfs4.OpReadlink:
		return c.readlink()
	case nfs4.OpCreate:
		return c.create(args.(*nfs4.CreateArgs))
	case nfs4.OpRemove:
		return c.remove(args.(*nfs4.RemoveArgs))
	case nfs4.OpRename:
		return c.rename(args.(*nfs4.RenameArgs))
	case nfs4.OpLink:
		return c.link(args.(*nfs4.LinkArgs))
	case nfs4.OpReaddir:
		return c.readdir(args.(*nfs4.ReaddirArgs))
	case nfs4.OpOpen:
		return c.open(args.(*nfs4.OpenArgs))
	case nfs4.OpClose:
		return c.close(args.(*nfs4.CloseArgs))
	case nfs4.OpOpenDowngrade:
		return c.openDowngrade(args.(*nfs4.OpenDowngradeArgs))
	case nfs4.OpRead:
		return c.read(args.(*nfs4.ReadArgs))
	case nfs4.OpWrite:
		return c.write(args.(*nfs4.WriteArgs))
	case nfs4.OpCommit:
		return c.commit(args.(*nfs4.CommitArgs))
	case nfs4.OpLock:
		return c.lock(args.(*nfs4.LockArgs))
	case nfs4.OpLockT:
		return c.lockT(args.(*nfs4.LockTArgs))
	case nfs4.OpLockU:
		return c.lockU(args.(*nfs4.LockUArgs))
	case nfs4.OpFreeStateid:
		return c.freeStateid(args.(*nfs4.FreeStateidArgs))
	case nfs4.OpTestStateid:
		return c.testStateid(args.(*nfs4.TestStateidArgs))
	case nfs4.OpDelegReturn:
		return c.delegReturn(args.(*nfs4.DelegReturnArgs))
	case nfs4.OpGetDirDelegation:
		return c.getDirDelegation(args.(*nfs4.GetDirDelegationArgs))
	case nfs4.OpDelegPurge:
		// CLAIM_DELEGATE_PREV is not supported (delegations do not
		// survive a restart), so there is nothing to purge.
		return c.status(nfs4.ErrNotSupp)
	case nfs4.OpIllegal:
		return c.status(nfs4.ErrOpIllegal)
	}
	// OPENATTR (named attributes), pNFS (layouts, devices),
	// WANT_DELEGATION (delegations come with OPEN), SET_SSV:
	// not served.
	return c.status(nfs4.ErrNotSupp)
}

// principalOf names who made a call, for client records: the flavor and
// the AUTH_SYS uid as sent (before squashing).
func principalOf(call *rpc.Call) string {
	if p, ok := call.AuthSys(); ok {
		return fmt.Sprintf("sys:%d", p.UID)
	}
	return fmt.Sprintf("flavor:%d", call.Cred.Flavor)
}

// statusOf4 is the NFSv4 status of a failed file operation; server
// faults are logged (statusOf).
func (s *Server) statusOf4(err error) nfs4.Status { return status4(s.statusOf(err)) }

// status4 maps an nfsstat3 from the shared v3 helpers to nfsstat4: the
// numbers are the same but for the few v3 has alone.
func status4(st nfs3.Status) nfs4.Status {
	switch st {
	case nfs3.ErrNoDev:
		return nfs4.ErrNXIO
	case nfs3.ErrRemote, nfs3.ErrNotSync:
		return nfs4.ErrIO
	case nfs3.ErrJukebox:
		return nfs4.ErrDelay
	}
	return nfs4.Status(st)
}

// newV4 sets up NFSv4.1: its state (client records in the state
// directory, next to the handle secret), the pseudo file system's path.
func (s *Server) newV4(cfg *Config) (*v4, error) {
	records := ""
	if cfg.StateDir != "" {
		records = filepath.Join(cfg.StateDir, strings.TrimSuffix(stateFileName(s.root), ".key")+".nfs4-clients")
	}
	st, err := v4state.New(v4state.Config{Now: s.now, Lease: cfg.Lease, RecordPath: records, Logf: s.logf,
		OnFileIdle: s.unpin})
	if err != nil {
		return nil, err
	}
	if st.InGrace() {
		s.logf("hushfs server: NFSv4.1 grace period of %v: clients of the previous run may reclaim their state", st.Lease())
	}
	domain := cfg.IDDomain
	if domain == "" {
		domain = "localdomain"
	}
	host, _ := os.Hostname()
	now := s.now()
	cbCtx, cbCancel := context.WithCancel(context.Background())
	v := &v4{
		cbCtx:       cbCtx,
		cbCancel:    cbCancel,
		state:       st,
		observeOp:   cfg.ObserveOp,
		observeCB:   cfg.ObserveCallback,
		granted:     cfg.Granted,
		delegations: cfg.Delegations,
		recallWait:  cfg.RecallWait,
		domain:      domain,
		pseudo:      pseudoPath(s.rootArg),
		started:     nfs4.Time{Seconds: now.Unix(), Nseconds: uint32(now.Nanosecond())},
		serverOwner: fmt.Appendf(nil, "hushfs %s %08x", host, s.codec.exportID),
		pins:        make(map[string]*node),
	}
	v.notifier = newDirNotifier(s)
	if v.delegations {
		// No delegation the server could not keep: without the watch of
		// local changes, none is granted.
		if v.leases, err = newLeaseWatch(s); err != nil {
			s.logf("hushfs server: watching the export for local changes: %v: no delegations", err)
			v.delegations = false
		}
	}
	return v, nil
}
