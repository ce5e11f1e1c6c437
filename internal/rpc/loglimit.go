package rpc

import (
	"sync"
	"time"
)

// Connection-level messages (a client's garbage, hang-ups, refusals) are
// rate limited: a client opening connection after connection to send junk
// must not flood the log. Up to logBurst messages pass at once, then
// logRate a second.
const (
	logBurst = 20
	logRate  = 5
)

// logLimiter is a token bucket for log messages; it counts what it holds
// back, for the next message let through to report.
type logLimiter struct {
	mu         sync.Mutex
	tokens     float64
	last       time.Time
	suppressed int
}

// allow reports whether a message may be logged at now, and how many were
// suppressed since the last one that was.
func (l *logLimiter) allow(now time.Time) (bool, int) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.last.IsZero() {
		l.tokens = logBurst
	} else {
		l.tokens = min(logBurst, l.tokens+now.Sub(l.last).Seconds()*logRate)
	}
	l.last = now
	if l.tokens < 1 {
		l.suppressed++
		return false, 0
	}
	l.tokens--
	n := l.suppressed
	l.suppressed = 0
	return true, n
}

// logf logs through logf unless over the rate, noting how many messages
// were held back since the last one.
func (l *logLimiter) logf(logf func(string, ...any), format string, args ...any) {
	ok, n := l.allow(time.Now())
	if !ok {
		return
	}
	if n > 0 {
		format += " (%d similar messages suppressed)"
		args = append(args, n)
	}
	logf(format, args...)
}
