package metrics

import (
	"bytes"
	"strings"
	"testing"
	"time"

	"hushfs/internal/nfs4"
)

// Callbacks render as prog "nfs4cb" by operation (CB_NULL as 0), and
// delegations granted as a counter by type, zero for types none was of.
func TestCallbacksAndGrants(t *testing.T) {
	m := NewRPC()
	m.ObserveCallback(uint32(nfs4.CBOpRecall), 3*time.Millisecond)
	m.ObserveCallback(uint32(nfs4.CBOpRecall), time.Millisecond)
	m.ObserveCallback(0, time.Millisecond)
	m.ObserveCallback(99, time.Millisecond) // not counted
	m.Granted("read")
	m.Granted("read")
	m.Granted("write")
	m.Granted("bogus")
	var b bytes.Buffer
	if err := WriteText(&b, m, nil); err != nil {
		t.Fatal(err)
	}
	out := b.String()
	for _, want := range []string{
		`hushfs_rpc_calls_total{prog="nfs4cb",proc="CB_RECALL"} 2`,
		`hushfs_rpc_calls_total{prog="nfs4cb",proc="CB_NULL"} 1`,
		`hushfs_nfs4_delegations_granted_total{type="read"} 2`,
		`hushfs_nfs4_delegations_granted_total{type="write"} 1`,
		`hushfs_nfs4_delegations_granted_total{type="directory"} 0`,
	} {
		if !strings.Contains(out, want+"\n") {
			t.Errorf("no %q in\n%s", want, out)
		}
	}
	if strings.Contains(out, "CB_GETATTR") {
		t.Errorf("a callback never sent is rendered:\n%s", out)
	}
}
