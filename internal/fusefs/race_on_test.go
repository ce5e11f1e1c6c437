//go:build race

package fusefs

// raceEnabled: the race detector slows everything about tenfold.
const raceEnabled = true
