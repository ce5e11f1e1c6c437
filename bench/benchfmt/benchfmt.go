// Package benchfmt formats the figures the benchmark reports print, so that
// every report writes durations and counts the same way.
package benchfmt

import (
	"fmt"
	"strconv"
	"strings"
	"time"
)

// Secs formats a duration in seconds with three significant figures at
// most: "0.27 s", "12.3 s", "121 s".
func Secs(d time.Duration) string {
	switch {
	case d >= 100*time.Second:
		return fmt.Sprintf("%.0f s", d.Seconds())
	case d >= 10*time.Second:
		return fmt.Sprintf("%.1f s", d.Seconds())
	default:
		return fmt.Sprintf("%.2f s", d.Seconds())
	}
}

// Commas formats n with thousands separators.
func Commas(n uint64) string {
	s := strconv.FormatUint(n, 10)
	var b strings.Builder
	for i, c := range s {
		if i > 0 && (len(s)-i)%3 == 0 {
			b.WriteByte(',')
		}
		b.WriteRune(c)
	}
	return b.String()
}
