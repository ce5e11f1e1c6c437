package version

import (
	"runtime/debug"
	"testing"
)

func TestFormat(t *testing.T) {
	bi := &debug.BuildInfo{GoVersion: "go1.26.8", Main: debug.Module{Path: "hushfs", Version: "v0.0.0-20261125214805-e6805d1a2b3c+dirty"},
		Settings: []debug.BuildSetting{{Key: "vcs.revision", Value: "e6805d1a2b3c4d5e6f708192a3b4c5d6e7f80912"},
			{Key: "vcs.time", Value: "2026-11-25T21:48:05Z"}, {Key: "vcs.modified", Value: "true"}}}
	want := "hushfs v0.0.0-20261125214805-e6805d1a2b3c+dirty (commit e6805d1a2b3c4d5e6f708192a3b4c5d6e7f80912, 2026-11-25T21:48:05Z, modified; go1.26.8)"
	if got := Format(bi); got != want {
		t.Errorf("Format = %q\nwant     %q", got, want)
	}
	bi = &debug.BuildInfo{GoVersion: "go1.26.8", Main: debug.Module{Path: "hushfs"}}
	if got, want := Format(bi), "hushfs (devel) (no VCS information; go1.26.8)"; got != want {
		t.Errorf("Format without VCS = %q, want %q", got, want)
	}
}
