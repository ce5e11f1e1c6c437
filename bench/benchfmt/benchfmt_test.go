package benchfmt

import (
	"testing"
	"time"
)

func TestFormats(t *testing.T) {
	for d, want := range map[time.Duration]string{
		270 * time.Millisecond: "0.27 s", 12345 * time.Millisecond: "12.3 s", 121 * time.Second: "121 s",
	} {
		if got := Secs(d); got != want {
			t.Errorf("Secs(%v) = %q, want %q", d, got, want)
		}
	}
	for n, want := range map[uint64]string{0: "0", 999: "999", 1000: "1,000", 1751218: "1,751,218"} {
		if got := Commas(n); got != want {
			t.Errorf("Commas(%d) = %q, want %q", n, got, want)
		}
	}
}
