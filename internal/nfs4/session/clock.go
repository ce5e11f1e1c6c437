package session

import "time"

// Clock is the time source of the lease timers: when the lease was last
// renewed and when to renew it next. Tests drive it by hand.
type Clock interface {
	Now() time.Time
	// After returns a channel that receives once d has passed on this
	// clock.
	After(d time.Duration) <-chan time.Time
}

type realClock struct{}

func (realClock) Now() time.Time                         { return time.Now() }
func (realClock) After(d time.Duration) <-chan time.Time { return time.After(d) }
