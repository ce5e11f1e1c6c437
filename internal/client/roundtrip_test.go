package client

import (
	"maps"
	"testing"

	"hushfs/internal/nfs3"
)

// What everyday work costs per file when the client already knows the
// answers: the calls of untar, a git checkout and grep -r, as the kernel
// hands them to the core, counted per procedure on the wire (the proxy)
// and by the client.

// user is an unprivileged identity (the test server squashes root).
var user = &Cred{UID: 1000, GID: 1000}

// wireCalls returns the NFS calls the proxy saw, by procedure name, and
// checks that the client's statistics count the same.
func wireCalls(t *testing.T, ts *testServer, fs *FS) map[string]uint64 {
	t.Helper()
	got := map[string]uint64{}
	for k, n := range ts.proxy.Counts().Calls {
		if k.Prog == nfs3.Program && n > 0 {
			got[nfs3.ProcName(k.Proc)] = n
		}
	}
	stats := map[string]uint64{}
	for name, o := range fs.Stats().Snapshot().Ops {
		if isNFSKey(name) && o.Ops > 0 {
			stats[name] = o.Ops
		}
	}
	if !maps.Equal(got, stats) {
		t.Errorf("calls on the wire %v, client statistics %v", got, stats)
	}
	return got
}

func resetCounts(ts *testServer, fs *FS) {
	ts.proxy.Reset()
	fs.Stats().Reset()
}

func wantCalls(t *testing.T, what string, got, want map[string]uint64) {
	t.Helper()
	if !maps.Equal(got, want) {
		t.Errorf("%s: calls %v, want %v", what, got, want)
	}
}
