// Package version says which build of hushfs is running: the main module's
// version and the VCS commit the go command stamps into a binary built in a
// checkout (runtime/debug.ReadBuildInfo).
package version

import (
	"fmt"
	"runtime/debug"
	"strings"
)

// String describes the running binary's build in one line, such as
//
//	hushfs v0.0.0-20261125214805-e6805d1a2b3c+dirty (commit e6805d1a2b3c…, 2026-11-25T21:48:05Z, modified; go1.26.8)
func String() string {
	bi, ok := debug.ReadBuildInfo()
	if !ok {
		return "hushfs (no build information)"
	}
	return Format(bi)
}

// Format describes the build bi.
func Format(bi *debug.BuildInfo) string {
	v := bi.Main.Version
	if v == "" {
		v = "(devel)"
	}
	settings := map[string]string{}
	for _, s := range bi.Settings {
		settings[s.Key] = s.Value
	}
	var about []string
	if rev := settings["vcs.revision"]; rev != "" {
		about = append(about, "commit "+rev)
		if t := settings["vcs.time"]; t != "" {
			about = append(about, t)
		}
		if settings["vcs.modified"] == "true" {
			about = append(about, "modified")
		}
	} else {
		about = append(about, "no VCS information")
	}
	return fmt.Sprintf("hushfs %s (%s; %s)", v, strings.Join(about, ", "), bi.GoVersion)
}
