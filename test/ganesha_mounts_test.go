package test

import (
	"testing"
	"time"

	"hushfs/test/harness"
)

// TestGaneshaLeavesOtherMountsAlone: ganesha's private mount namespace
// starts as a copy of the host's, and a copy of a FUSE mount made before
// it would keep that mount alive after the host unmounts it, its daemon
// never exiting. So a hushfs mount made before ganesha starts must still
// unmount, daemon gone, within the usual bound (Unmount waits 20 s).
func TestGaneshaLeavesOtherMountsAlone(t *testing.T) {
	requireMountTools(t)
	bin := harness.BuildHushfs(t)
	export, mnt := t.TempDir(), t.TempDir()
	s := harness.StartServe(t, export)
	m := harness.MountServe(t, bin, s, mnt, "")
	harness.StartGanesha(t, harness.GaneshaOptions{})
	start := time.Now()
	if err := m.Unmount(false); err != nil {
		t.Fatalf("unmount of a mount made before ganesha started: %v\n%s", err, m.Output())
	}
	t.Logf("unmounted, daemon gone, in %v", time.Since(start).Round(time.Millisecond))
}
