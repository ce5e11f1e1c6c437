// Package nfsv41 is proto.Server over NFSv4.1 (RFC 8881): each method one
// COMPOUND in the session of internal/nfs4/session (SEQUENCE, PUTFH, the
// operation, and GETATTRs of what the core needs), and mounting by walking
// the export's path from the root filehandle, with no MOUNT protocol.
//
// It is also a proto.Opener, proto.StateIO and proto.Locker (open.go,
// lock.go): the core opens files with OPEN and does their I/O under the
// open stateid. Read, Write and SetAttr use the anonymous stateid (RFC
// 8881 §8.2.3), for files not open here, which servers that allow I/O
// without an open (ganesha does) serve; Create (MKNOD of a regular file)
// opens with OPEN and closes in the same COMPOUND.
package nfsv41

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"math"
	"net"
	"slices"
	"strconv"
	"sync/atomic"
	"time"

	"hushfs/internal/nfs4"
	"hushfs/internal/nfs4/session"
	"hushfs/internal/proto"
	"hushfs/internal/rpc"
)

// DefaultPort is where NFSv4 servers listen (no portmapper in v4).
const DefaultPort = 2049

// Config says which export to mount and how to reach it.
type Config struct {
	Server string // host name or address
	Export string // the export's path from the server's (pseudo) root
	Port   int    // NFS port; 0: 2049
	// Timeo, Retrans and Hard are nfs(5)'s, as for NFSv3; a request is
	// resent only on a new connection (the session's exactly-once rule).
	Timeo   time.Duration
	Retrans int
	Hard    bool
	// Dial connects to addr (host:port); nil dials TCP.
	Dial func(ctx context.Context, addr string) (net.Conn, error)
	// Now is the clock the mount's attributes are timed with; nil: time.Now.
	Now func() time.Time
	// AfterFunc runs f after d and returns its timer's Stop (how long a
	// CLOSE waits for a COMPOUND to carry it); nil: time.AfterFunc.
	AfterFunc func(d time.Duration, f func()) func() bool
	Logf      func(format string, args ...any)
	Machine   string // AUTH_SYS machine name
	Hooks     proto.Hooks
}

// Server is a mounted NFSv4.1 export.
type Server struct {
	sess    *session.Session
	hooks   proto.Hooks
	machine string
	now     func() time.Time
	logf    func(string, ...any)
	// owner is the open owner of the OPENs that create files: one for the
	// mount, since each OPEN is closed in its own COMPOUND.
	owner []byte
	// root is the export's root handle (a listing's ".." there is itself).
	root proto.FH

	// locks are the lock owners' lock stateids (lock.go).
	locks lockTable
	// cq are the CLOSEs waiting for a COMPOUND to carry them (closeq.go).
	cq *closeQueue
	// rq are the read-ahead READDIRs waiting for one (riderq.go).
	rq *riderQueue
	// cb are the core's answers to callbacks (deleg.go).
	cb atomic.Pointer[cbHolder]
	// noDirDeleg: the server failed a GET_DIR_DELEGATION: not asked again
	// (dirdeleg.go).
	noDirDeleg atomic.Bool
	dirDelegOK atomic.Bool // one was answered
	// rc reclaims after a server restart (reclaim.go).
	rc atomic.Pointer[reclaimerHolder]
	// space is what the mount's COMPOUND said of the space (statfs.go).
	space spaceCache
	// rootList is the root's listing the mount's COMPOUND brought
	// (rootlist.go).
	rootList rootList

	creds rpc.SysCreds // encoded AUTH_SYS per identity
}

var _ proto.Server = (*Server)(nil)

// limits are what NFSv4 can carry: handles of up to 128 bytes and any
// nfstime4 (signed 64-bit seconds).
var limits = proto.Limits{MaxHandle: nfs4.FHSize, MinTime: math.MinInt64, MaxTime: math.MaxInt64}

// Mount establishes a session with the server and finds the export: the
// path walked from PUTROOTFH in one COMPOUND that also brings the export
// root's handle, its attributes and the server's limits (maxread,
// maxwrite, maxname, maxfilesize). Nothing is left running if it fails.
func Mount(ctx context.Context, cfg Config, self *proto.Cred) (*Server, proto.Export, error) {
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if cfg.Logf == nil {
		cfg.Logf = func(string, ...any) {}
	}
	if cfg.Dial == nil {
		var d net.Dialer
		cfg.Dial = func(ctx context.Context, addr string) (net.Conn, error) { return d.DialContext(ctx, "tcp", addr) }
	}
	if cfg.Port == 0 {
		cfg.Port = DefaultPort
	}
	addr := net.JoinHostPort(cfg.Server, strconv.Itoa(cfg.Port))
	// Each mount is a client of its own: two mounts of one export sharing
	// an owner would each take the other's EXCHANGE_ID (new verifier) for
	// a reboot and lose their state. The owner lasts as long as the
	// mount, which is what a server restart needs to know us again.
	var nonce [8]byte
	rand.Read(nonce[:])
	key := fmt.Sprintf("%s:%s %s", cfg.Server, cfg.Export, hex.EncodeToString(nonce[:]))
	s := &Server{hooks: cfg.Hooks, machine: cfg.Machine, now: cfg.Now, logf: cfg.Logf,
		owner: []byte("hushfs create " + hex.EncodeToString(nonce[:])), creds: rpc.SysCreds{Machine: cfg.Machine}}
	s.cq = newCloseQueue(cfg.AfterFunc, func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		s.flushCloses(ctx)
	})
	s.rq = newRiderQueue(cfg.AfterFunc)
	sess, err := session.New(ctx, session.Options{
		RPC: rpc.ClientOptions{
			Dial:    func(ctx context.Context) (net.Conn, error) { return cfg.Dial(ctx, addr) },
			Timeout: cfg.Timeo, Retrans: cfg.Retrans, Hard: cfg.Hard, Logf: cfg.Logf,
		},
		Cred: s.auth(self),
		// An OPEN's reply is kept for a retry, its first READ's data too.
		MaxCached: readFirstMax + readFirstRoom,
		Owner:     session.DefaultOwner(key),
		Logf:      cfg.Logf,
		Callback:  s.callback,
		OnStatus:  s.onStatus,
		// A new client ID: the server forgot or expired our state; the
		// core reclaims it (reclaim.go).
		OnRecover: s.onRecover,
	})
	if err != nil {
		return nil, proto.Export{}, fmt.Errorf("NFSv4.1 session with %s: %w", addr, err)
	}
	s.sess = sess
	exp, err := s.walkExport(ctx, self, cfg.Export)
	if err != nil {
		s.Close()
		return nil, proto.Export{}, fmt.Errorf("mounting %s:%s: %w", cfg.Server, cfg.Export, err)
	}
	s.root = exp.Root
	return s, exp, nil
}

// Close sends the CLOSEs still queued, destroys the session and client ID
// (bounded: a dead server does not hang unmount) and ends the connection.
func (s *Server) Close() error {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	s.cq.shut()
	s.rq.shut()
	s.flushCloses(ctx)
	return s.sess.Close(ctx)
}

// MajorTimeout is closed at the next major timeout of a hard call.
func (s *Server) MajorTimeout() <-chan struct{} { return s.sess.RPC().MajorTimeout() }

// Null checks the server answers (NULL, outside the session).
func (s *Server) Null(ctx context.Context) error {
	if s.hooks.Calling != nil {
		s.hooks.Calling(ctx, "NULL")
	}
	start := s.now()
	err := s.sess.RPC().Call(ctx, nfs4.Program, nfs4.Version, nfs4.ProcNull, rpc.NoAuth, nil, nil)
	if s.hooks.Finished != nil {
		s.hooks.Finished(&proto.CallStats{Name: "NULL", Transmissions: 1, Execute: s.now().Sub(start), Err: err})
	}
	return err
}

// auth returns the AUTH_SYS credential for c, encoded once per identity.
func (s *Server) auth(c *proto.Cred) rpc.OpaqueAuth {
	return s.creds.Get(c.UID, c.GID, c.Groups)
}

// errShort is a reply that ran every operation but holds fewer results
// than were sent, or results of other operations: no usable answer.
var errShort = errors.New("nfsv41: COMPOUND reply does not match the request")

// compound sends ops in the session with c's credential, counted as one
// call named name (the NFSv3 procedure the method stands for, so that
// statistics and --origins read alike for both protocols) with its
// operations. An error means no usable answer; the operations' statuses
// are in the result. CLOSEs queued under c's credential ride after ops
// (closeq.go); the result holds ops' alone.
//
// NFS4ERR_DELAY (an operation the server cannot do yet: a delegation of
// the file is being recalled, RFC 8881 §10.4.5) sends the COMPOUND again
// after a pause, 50 ms doubling to 1 s, until ctx ends; the operation that
// said it did nothing, and those before it only find and look.
//
// NFS4ERR_GRACE (a restarted server takes only reclaims for now, RFC 8881
// §8.4.2.1) is waited out the same way, from 250 ms doubling to 2 s, for
// at most graceBound: the grace period lasts about a lease.
func (s *Server) compound(ctx context.Context, c *proto.Cred, name string, ops []nfs4.Argop) (*reply, error) {
	return s.compoundLead(ctx, c, name, nil, ops)
}

// compoundLead is compound with the CLOSEs lead sent before ops, in the
// same COMPOUND. A CLOSE there that fails stops ops: the CLOSEs are done
// with then (the server no longer knows the open, or we cannot close it:
// logged, its lease ends it), and ops go again alone.
func (s *Server) compoundLead(ctx context.Context, c *proto.Cred, name string, lead []*pendingClose, ops []nfs4.Argop) (*reply, error) {
	return s.compoundWait(ctx, c, name, lead, ops, true)
}

// compoundWait is compoundLead; waitDelay false returns an NFS4ERR_DELAY
// answer to the caller at once (NFS4ERR_GRACE is still waited out).
func (s *Server) compoundWait(ctx context.Context, c *proto.Cred, name string, lead []*pendingClose, ops []nfs4.Argop, waitDelay bool) (*reply, error) {
	pause := 50 * time.Millisecond
	var graceUntil time.Time
	for {
		r, err := s.compoundOnce(ctx, c, name, lead, ops)
		lead = nil
		if errors.Is(err, errLeadFailed) {
			continue
		}
		if err != nil || (r.res.Status != nfs4.ErrDelay && r.res.Status != nfs4.ErrGrace) ||
			r.res.Status == nfs4.ErrDelay && !waitDelay {
			return r, err
		}
		if r.res.Status == nfs4.ErrGrace {
			now := s.now()
			if graceUntil.IsZero() {
				graceUntil = now.Add(graceBound(s.sess.Info().Lease))
				pause = max(pause, 250*time.Millisecond)
			} else if now.After(graceUntil) {
				return r, nil
			}
		}
		t := time.NewTimer(pause)
		select {
		case <-ctx.Done():
			t.Stop()
			return r, nil
		case <-t.C:
		}
		limit := time.Second
		if !graceUntil.IsZero() {
			limit = 2 * time.Second
		}
		pause = min(2*pause, limit)
	}
}

// graceBound is how long NFS4ERR_GRACE is waited out: servers extend their
// grace period while clients still reclaim (hushfs serve up to two
// leases; ganesha's Grace_Period is 90 s by default), so three leases and
// never less than 90 s.
func graceBound(lease time.Duration) time.Duration { return max(3*lease, 90*time.Second) }

// errLeadFailed: a CLOSE sent before a COMPOUND's operations failed, and
// they did not run.
var errLeadFailed = errors.New("nfsv41: a CLOSE before the operations failed")

// compoundOnce is compoundLead without the retries.
func (s *Server) compoundOnce(ctx context.Context, c *proto.Cred, name string, lead []*pendingClose, ops []nfs4.Argop) (*reply, error) {
	if s.hooks.Calling != nil {
		s.hooks.Calling(ctx, name)
	}
	var trail []*pendingClose
	if s.cq != nil && foldable(ops) {
		room := int(s.sess.Info().Fore.MaxOperations) - 1 - len(ops) - 2*len(lead)
		trail = s.cq.takeTrail(c, min(room/2, maxClosesPerCompound))
	}
	all := ops
	if len(lead)+len(trail) > 0 {
		all = make([]nfs4.Argop, 0, len(ops)+2*(len(lead)+len(trail)))
		for _, p := range lead {
			all = append(all, closeOps(p)...)
		}
		all = append(all, ops...)
		for _, p := range trail {
			all = append(all, closeOps(p)...)
		}
	}
	// Read-ahead listings ride last (riderq.go).
	cached := len(lead)+len(trail) > 0 || !session.Idempotent(ops)
	riders := s.takeRiders(c, all, cached)
	riderAt := len(all)
	if len(riders) > 0 {
		all = slices.Clip(all)
		for _, rd := range riders {
			all = append(all, rd.ops...)
		}
	}
	if len(lead)+len(trail) > 0 || !session.Idempotent(ops) && !returnOnly(ops) {
		s.space.forget() // it may change what statfs reports
		s.rootList.forget()
	}
	r := &reply{ops: all}
	start := s.now()
	if s.rq != nil && len(riders) < maxRidersPerCompound && s.carrierRoom(all, cached) {
		// A rider queued meanwhile waits for our caller's next one.
		ck := credKey(c)
		s.rq.carrierSent(ck)
		defer s.rq.carrierDone(ck)
	}
	err := s.sess.Compound(ctx, s.auth(c), all, &r.res)
	if err == nil {
		illegalInPlace(all, &r.res)
	}
	if err == nil && r.res.Status == nfs4.OK && len(r.res.Ops) != len(all) {
		err = errShort
	}
	if err == nil {
		for i := range r.res.Ops {
			if i >= len(all) || r.res.Ops[i].Op != all[i].Op || r.res.Ops[i].Res == nil {
				err = errShort
				break
			}
		}
	}
	if s.hooks.Finished != nil {
		names := make([]string, 0, len(all)+1)
		names = append(names, nfs4.OpSequence.String())
		for _, o := range all {
			names = append(names, o.Op.String())
		}
		s.hooks.Finished(&proto.CallStats{Name: name, Ops: names, Transmissions: 1,
			BytesSent: r.res.Sent, BytesReceived: r.res.Received, RTT: r.res.RTT,
			Execute: s.now().Sub(start), Err: err})
	}
	if err != nil {
		// No answer: what the CLOSEs did is unknown. Not sent again (a
		// CLOSE of a new open of the file would close that); the server
		// drops an open left at the lease's end.
		s.closesDone(append(lead, trail...), nil, 0)
		s.ridersDone(riders, nil, 0)
		return nil, fmt.Errorf("%s: %w", name, err)
	}
	// The riders' answers are theirs; they alias the reply, which the
	// trimming below does not touch.
	s.ridersDone(riders, r, riderAt)
	if len(riders) > 0 {
		if len(r.res.Ops) > riderAt {
			// The riders ran (well or not): all before them succeeded.
			r.res.Status = nfs4.OK
		}
		r.res.Ops = r.res.Ops[:min(riderAt, len(r.res.Ops))]
		r.ops = r.ops[:riderAt]
	}
	if len(lead) > 0 {
		k := 2 * len(lead)
		s.closesDone(lead, r, 0)
		if len(r.res.Ops) <= k {
			// A CLOSE failed: ops did not run, nor any after them.
			s.cq.requeue(trail)
			return nil, errLeadFailed
		}
		r.res.Ops = r.res.Ops[k:]
		r.ops = r.ops[k:]
	}
	if len(trail) > 0 {
		k := len(ops)
		s.closesDone(trail, r, k)
		if len(r.res.Ops) > k {
			// The CLOSEs ran (well or not): ops all succeeded.
			r.res.Ops = r.res.Ops[:k]
			r.res.Status = nfs4.OK
		}
		r.ops = r.ops[:k]
	}
	return r, nil
}

// returnOnly reports whether ops give a delegation back and change
// nothing (a write delegation's data went before, in WRITEs).
func returnOnly(ops []nfs4.Argop) bool {
	for i := range ops {
		if op := ops[i].Op; op != nfs4.OpPutFH && op != nfs4.OpDelegReturn {
			return false
		}
	}
	return true
}

// illegalInPlace takes a server's OP_ILLEGAL result (an operation it does
// not know: ganesha's answer to GET_DIR_DELEGATION) as the failure of the
// operation sent in its place: it ends the results, and those before it
// are the answer of the operations before it (RFC 8881 §15.2: results up
// to and including the one that failed). Its status stays OP_ILLEGAL.
func illegalInPlace(all []nfs4.Argop, res *session.Result) {
	n := len(res.Ops)
	if res.Status == nfs4.OK || n == 0 || n > len(all) || res.Ops[n-1].Op != nfs4.OpIllegal || res.Ops[n-1].Res == nil {
		return
	}
	res.Ops[n-1] = nfs4.Resop{Op: all[n-1].Op, Res: &nfs4.StatusRes{Status: res.Ops[n-1].Res.OpStatus()}}
}

// foldable reports whether queued CLOSEs may ride after ops: their reply
// stays small enough for the server to keep for a retry (a CLOSE makes
// it keep it), and ops are not CLOSEs already.
func foldable(ops []nfs4.Argop) bool {
	for i := range ops {
		switch ops[i].Op {
		case nfs4.OpRead:
			// Under the current stateid it is an OPEN's first READ,
			// sized to leave the reply room for CLOSEs (readFirstRoom).
			if ops[i].Args.(*nfs4.ReadArgs).Stateid != nfs4.CurrentStateid {
				return false
			}
		case nfs4.OpReaddir, nfs4.OpClose:
			return false
		}
	}
	return true
}

// closesDone settles the CLOSEs ps whose first operation is result at of
// r (nil: no answer): those that ran are done, those that did not are
// queued again (a COMPOUND whose own operation failed).
func (s *Server) closesDone(ps []*pendingClose, r *reply, at int) {
	if len(ps) == 0 {
		return
	}
	if r == nil {
		s.cq.sent(ps)
		return
	}
	var ran, left []*pendingClose
	for i, p := range ps {
		res := r.at(at + 2*i + 1)
		if res == nil {
			if r.at(at+2*i) != nil {
				// PUTFH failed: the file is gone (STALE); so is its open.
				ran = append(ran, p)
				continue
			}
			left = append(left, p)
			continue
		}
		ran = append(ran, p)
		if st := res.OpStatus(); !closedStatus(st) {
			s.logf("hushfs: NFSv4.1 CLOSE: %v (the server drops the open when our lease ends)", statusErr(st))
		}
	}
	s.cq.sent(ran)
	s.cq.requeue(left)
}

// reply is a COMPOUND's answer, checked by compound to hold results of the
// operations sent, in order, up to the first failure.
type reply struct {
	ops []nfs4.Argop
	res session.Result
}

// at returns the result of operation i, or nil if the server did not run
// it (an earlier operation failed).
func (r *reply) at(i int) nfs4.OpRes {
	if i < 0 || i >= len(r.res.Ops) {
		return nil
	}
	return r.res.Ops[i].Res
}

// status is operation i's status; one not run counts as the COMPOUND's
// (the failure that stopped it).
func (r *reply) status(i int) nfs4.Status {
	if res := r.at(i); res != nil {
		return res.OpStatus()
	}
	if r.res.Status == nfs4.OK {
		return nfs4.ErrServerFault // checked in compound: never
	}
	return r.res.Status
}

// attrs returns the attributes GETATTR i brought, if it ran and succeeded.
func (r *reply) attrs(i int) (proto.PostAttr, bool) {
	g, ok := r.at(i).(*nfs4.GetattrRes)
	if !ok || g.Status != nfs4.OK {
		return proto.PostAttr{}, false
	}
	return proto.PostAttr{Present: true, Attr: attrOf(&g.Attrs)}, true
}

// statusErr is a failed status as the core sees it.
func statusErr(st nfs4.Status) error {
	if st == nfs4.OK {
		return nil
	}
	e := proto.Error{Errno: st.Errno(), Name: st.String()}
	if st == nfs4.ErrNotSupp {
		e.Cond = proto.CondNotSupp
	}
	return e
}
