package proto

import "context"

// Read-ahead. The core reads some things before anyone asks for them (the
// listings of the directories a tree walk will reach next). Such a call
// need not be a round trip of its own: a protocol that can put several
// operations in one request (NFSv4.1's COMPOUND) may hold it until a call
// the mount sends anyway can carry it. WithAhead marks a call so, with a
// channel the core closes when someone starts waiting for its answer: the
// protocol must then send it at once. A protocol that cannot carry calls
// (NFSv3) ignores the mark and sends it as usual.

type aheadKey struct{}

// WithAhead marks calls made with ctx as read ahead, wanted closing once
// someone waits for them.
func WithAhead(ctx context.Context, wanted <-chan struct{}) context.Context {
	return context.WithValue(ctx, aheadKey{}, wanted)
}

// AheadOf reports whether calls made with ctx are read ahead, and the
// channel closed when one is waited for.
func AheadOf(ctx context.Context) (wanted <-chan struct{}, ok bool) {
	wanted, ok = ctx.Value(aheadKey{}).(<-chan struct{})
	return wanted, ok && wanted != nil
}

// AheadCarrier is a protocol that carries calls marked WithAhead in calls
// it sends anyway (CarriesAhead true). Read-ahead then costs a round trip
// only when nothing carries it in time, so the core may read ahead on
// less evidence that it will be used.
type AheadCarrier interface {
	CarriesAhead() bool
}
