package session

import "time"

// renewFraction: an idle lease is renewed once this fraction of it has
// passed since the last SEQUENCE the server took, leaving the rest for a
// renewal delayed by a lost connection or a slow server.
const renewFraction = 2

// renewLoop keeps the lease alive while no COMPOUND does: a lone SEQUENCE
// when the session has been idle for half the lease. Its failures are the
// session's (a lost session or client ID is recovered like any COMPOUND's:
// an expired lease is found here when idle).
func (s *Session) renewLoop() {
	defer s.wg.Done()
	for {
		s.mu.Lock()
		lease := s.lease
		due := s.lastRenew.Add(lease / renewFraction)
		s.mu.Unlock()
		if wait := due.Sub(s.clock.Now()); wait > 0 {
			select {
			case <-s.clock.After(wait):
			case <-s.stop:
				return
			}
			continue // a COMPOUND may have renewed it meanwhile
		}
		s.stats.renewals.Add(1)
		var res Result
		if err := s.compound(s.life, s.cred, nil, &res); err != nil {
			select {
			case <-s.stop:
				return
			default:
			}
			s.logf("nfs4 session: renewing the lease: %v", err)
			select {
			case <-s.clock.After(max(lease/10, time.Second)):
			case <-s.stop:
				return
			}
		}
	}
}
