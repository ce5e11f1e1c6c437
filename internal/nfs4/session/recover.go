package session

import (
	"context"
	"errors"
	"fmt"
	"time"

	"hushfs/internal/nfs4"
	"hushfs/internal/rpc"
)

// recovery is one run of replacing a lost session (and client ID).
// COMPOUNDs wait for done; err is set before it is closed.
type recovery struct {
	done  chan struct{}
	err   error
	cause nfs4.Status // guarded by Session.mu until done
}

// Bounds of one recovery.
const (
	maxRecoveryAttempts = 8
	destroyTimeout      = 5 * time.Second
	bindInterval        = 5 * time.Second // at most one BIND_CONN_TO_SESSION for a lost back channel per interval
)

// newClientCause reports whether a status says the client ID is gone (not
// only the session).
func newClientCause(st nfs4.Status) bool {
	return st == nfs4.ErrStaleClientID || st == nfs4.ErrExpired
}

// lose reports that session st failed with cause and waits for the
// recovery that replaces it. A COMPOUND pinned to a session (setup,
// reclaim) fails instead: the recovery that pinned it starts over.
func (s *Session) lose(ctx context.Context, st *state, cause nfs4.Status, pinned *state) error {
	if pinned != nil {
		st.markLost(cause)
		return fmt.Errorf("%w: %v", ErrSessionLost, cause)
	}
	rec := s.startRecovery(st, cause)
	if rec == nil {
		return nil // replaced already
	}
	select {
	case <-rec.done:
		return rec.err
	case <-ctx.Done():
		return ctx.Err()
	}
}

// startRecovery starts replacing st, unless that is under way (the running
// recovery is returned) or done (nil).
func (s *Session) startRecovery(st *state, cause nfs4.Status) *recovery {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		rec := &recovery{done: make(chan struct{}), err: ErrClosed}
		close(rec.done)
		return rec
	}
	if s.cur != st {
		return nil
	}
	st.markLost(cause)
	if rec := s.recovering; rec != nil {
		// The session the recovery made is lost too: it notices
		// (reclaim fails with ErrSessionLost) and starts over.
		if newClientCause(cause) {
			rec.cause = cause
		}
		return rec
	}
	rec := &recovery{done: make(chan struct{}), cause: cause}
	s.recovering = rec
	s.wg.Add(1)
	go s.recover(st, rec)
	return rec
}

func (s *Session) recover(old *state, rec *recovery) {
	defer s.wg.Done()
	err := s.reestablish(old, rec)
	if err != nil {
		s.logf("nfs4 session: recovering from %v: %v", old.cause(), err)
	}
	s.mu.Lock()
	rec.err = err
	s.recovering = nil
	s.mu.Unlock()
	close(rec.done)
}

// reestablish makes a new session for the client ID, or, if the server no
// longer knows it, a new client ID and session, has the state layer
// reclaim, and sends RECLAIM_COMPLETE.
func (s *Session) reestablish(old *state, rec *recovery) error {
	ctx := s.life
	s.mu.Lock()
	cause := rec.cause
	reconnected := s.reconnects != s.seenConns
	s.seenConns = s.reconnects
	clientID := s.clientID
	s.mu.Unlock()
	newClient := newClientCause(cause)
	for attempt := 1; ; attempt++ {
		if attempt > maxRecoveryAttempts {
			return fmt.Errorf("session: no session after %d attempts (last: %v)", maxRecoveryAttempts, cause)
		}
		if ctx.Err() != nil {
			return ErrClosed
		}
		confirmed := true // the client ID's state survives
		if newClient {
			eid, err := s.exchangeID(ctx)
			if err != nil {
				return err
			}
			clientID = eid.ClientID
			confirmed = eid.Flags&nfs4.ExchgIDFlagConfirmedR != 0
		}
		st, err := s.createSession(ctx, clientID)
		var why nfs4.Status
		switch {
		case errors.As(err, &why) && (newClientCause(why) || why == nfs4.ErrSeqMisordered):
			// The client ID is gone, or our CREATE_SESSION sequence
			// is not the server's: EXCHANGE_ID tells both.
			newClient = true
			if newClientCause(why) {
				cause = why
			}
			continue
		case err != nil:
			return err
		}
		s.install(st)
		s.stats.sessions.Add(1)
		if !confirmed {
			s.stats.clients.Add(1)
		}
		if !newClient || confirmed {
			if old.clientID == clientID && (cause == nfs4.ErrDeadSession || cause == nfs4.ErrSeqMisordered ||
				cause == nfs4.ErrBadSlot || cause == nfs4.ErrBadHighSlot) {
				s.destroyOld(old) // the server may still hold it
			}
			s.logf("nfs4 session: new session after %v", cause)
			return nil
		}
		s.logf("nfs4 session: new client ID after %v (reconnected: %v)", cause, reconnected)
		if err := s.fetchLease(withState(ctx, st), st); err != nil {
			if errors.Is(err, ErrSessionLost) {
				cause = st.cause()
				continue
			}
			return err
		}
		if s.opts.OnRecover != nil {
			s.mu.Lock()
			lease := s.lease
			s.mu.Unlock()
			s.stats.recl.Add(1)
			r := Recovery{ClientID: clientID, Cause: cause, Reconnected: reconnected, Lease: lease}
			if err := s.opts.OnRecover(withState(ctx, st), r); err != nil {
				s.logf("nfs4 session: reclaiming state after %v: %v", cause, err)
			}
		}
		if err := s.reclaimComplete(ctx, st); err != nil {
			if errors.Is(err, ErrSessionLost) {
				cause = st.cause()
				newClient = newClient || newClientCause(cause)
				continue
			}
			return err
		}
		return nil
	}
}

// destroyOld sends DESTROY_SESSION for a session we stopped using, bounded
// in time; the server may no longer have it.
func (s *Session) destroyOld(old *state) {
	ctx, cancel := context.WithTimeout(s.life, destroyTimeout)
	defer cancel()
	if _, err := s.single(ctx, nil, nfs4.OpDestroySession, &nfs4.DestroySessionArgs{SessionID: old.id}); err != nil {
		s.logf("nfs4 session: destroying the replaced session: %v", err)
	}
}

// onReconnect binds a new connection to the session, both channels, before
// anything else goes out on it (rpc.ClientOptions.OnReconnect). A session
// the server no longer has is recovered once the connection is in use: the
// recovery's CREATE_SESSION binds it.
func (s *Session) onReconnect(ctx context.Context, conn *rpc.Conn) error {
	s.mu.Lock()
	s.reconnects++
	st := s.cur
	s.mu.Unlock()
	if st == nil || st.lost.Load() {
		return nil
	}
	err := s.bindOn(ctx, conn, st)
	var why nfs4.Status
	switch {
	case err == nil:
		return nil
	case errors.As(err, &why) && (why == nfs4.ErrBadSession || why == nfs4.ErrDeadSession || newClientCause(why)):
		s.startRecovery(st, why)
		return nil
	case errors.As(err, &why):
		// Let the connection carry on: its COMPOUNDs say what is wrong.
		s.logf("nfs4 session: binding a new connection: %v", err)
		return nil
	}
	return err // the connection failed: rpc tries another
}

// bindOn sends BIND_CONN_TO_SESSION for st on conn (nil: the current
// connection), asking for the back channel too if the session has one.
func (s *Session) bindOn(ctx context.Context, conn *rpc.Conn, st *state) error {
	dir := uint32(nfs4.CDFC4Fore)
	if st.hasBack {
		dir = nfs4.CDFC4ForeOrBoth
	}
	s.stats.binds.Add(1)
	r, err := s.single(ctx, conn, nfs4.OpBindConnToSession, &nfs4.BindConnToSessionArgs{SessionID: st.id, Dir: dir})
	if err != nil {
		return err
	}
	b := r.(*nfs4.BindConnToSessionRes)
	if b.SessionID != st.id {
		return fmt.Errorf("session: BIND_CONN_TO_SESSION answered for session %x, sent %x", b.SessionID, st.id)
	}
	if st.hasBack && b.Dir != nfs4.CDFS4Both {
		s.logf("nfs4 session: the server bound the connection to the fore channel only: no callbacks on it")
	}
	return nil
}

// bind binds the current connection (CONN_NOT_BOUND_TO_SESSION).
func (s *Session) bind(ctx context.Context, st *state) error {
	err := s.bindOn(ctx, nil, st)
	var why nfs4.Status
	if errors.As(err, &why) && (why == nfs4.ErrBadSession || why == nfs4.ErrDeadSession || newClientCause(why)) {
		return s.lose(ctx, st, why, nil)
	}
	return err
}

// statusFlags acts on SEQUENCE status flags: a back channel the server
// cannot use is bound again on the current connection, and the flags go to
// Options.OnStatus.
func (s *Session) statusFlags(st *state, flags uint32) {
	const pathDown = nfs4.SeqStatusCBPathDown | nfs4.SeqStatusCBPathDownSession
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return
	}
	if flags&pathDown != 0 && st.hasBack && time.Since(s.lastBind) >= bindInterval {
		s.lastBind = time.Now()
		s.wg.Add(1)
		go func() {
			defer s.wg.Done()
			ctx, cancel := context.WithTimeout(s.life, 30*time.Second)
			defer cancel()
			if err := s.bindOn(ctx, nil, st); err != nil {
				s.logf("nfs4 session: binding the back channel again: %v", err)
			}
		}()
	}
	if s.opts.OnStatus == nil {
		return
	}
	s.flags |= flags
	if s.flagsBusy {
		return
	}
	s.flagsBusy = true
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		for {
			s.mu.Lock()
			f := s.flags
			s.flags = 0
			if f == 0 {
				s.flagsBusy = false
				s.mu.Unlock()
				return
			}
			s.mu.Unlock()
			s.opts.OnStatus(f)
			s.mu.Lock()
			s.unsettled = s.flags // acted on, but for those come since
			s.mu.Unlock()
		}
	}()
}
