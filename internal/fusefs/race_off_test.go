//go:build !race

package fusefs

const raceEnabled = false
