package test

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"

	"hushfs/internal/nfs3"
	"hushfs/test/harness"
)

// TestServeHandlesSurviveRestart kills `hushfs serve` with SIGKILL and
// starts it again on the same ports and state directory: handles issued by
// the first incarnation must still work in the second, for a fresh client
// and for the old one (which reconnects on its own).
func TestServeHandlesSurviveRestart(t *testing.T) {
	dir := t.TempDir()
	content := bytes.Repeat([]byte("restart-proof "), 1000)
	if err := os.MkdirAll(filepath.Join(dir, "d"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "d", "f"), content, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "gone"), []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	s := harness.StartServe(t, dir)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()

	mc := newClient(t, ctx, tcpDialer(s.MountAddr))
	root := mountRoot(t, ctx, mc, s.ExportPath)
	old := &nfsc{t: t, ctx: ctx, c: newClient(t, ctx, tcpDialer(s.NFSAddr))}
	dFH, _ := old.lookup(root, "d")
	fFH, fAttr := old.lookup(dFH, "f")
	goneFH, _ := old.lookup(root, "gone")
	if got := old.readAll(fFH, 4096); !bytes.Equal(got, content) {
		t.Fatalf("READ before restart: %d bytes, not the content", len(got))
	}
	// Keep copies: results alias reply buffers.
	root, dFH, fFH, goneFH = bytes.Clone(root), bytes.Clone(dFH), bytes.Clone(fFH), bytes.Clone(goneFH)

	oldPid := s.Cmd.Process.Pid
	s.Restart(t)
	if s.Cmd.Process.Pid == oldPid {
		t.Fatal("Restart did not start a new process")
	}
	// Changed while the server was down: its handle must now be stale.
	if err := os.Remove(filepath.Join(dir, "gone")); err != nil {
		t.Fatal(err)
	}

	check := func(n *nfsc, who string) {
		t.Helper()
		res := n.getattr(fFH)
		if res.Status != nfs3.OK {
			t.Fatalf("%s: GETATTR of a pre-restart handle: %v", who, res.Status)
		}
		if res.Attr.Fileid != fAttr.Fileid || res.Attr.Size != uint64(len(content)) {
			t.Errorf("%s: GETATTR after restart: fileid %d size %d, want %d %d", who,
				res.Attr.Fileid, res.Attr.Size, fAttr.Fileid, len(content))
		}
		if got := n.readAll(fFH, 4096); !bytes.Equal(got, content) {
			t.Errorf("%s: READ after restart: %d bytes, not the content", who, len(got))
		}
		if fh, _ := n.lookup(dFH, "f"); fh == nil {
			t.Errorf("%s: LOOKUP in a pre-restart directory handle failed", who)
		}
		if res := n.getattr(root); res.Status != nfs3.OK || res.Attr.Type != nfs3.TypeDir {
			t.Errorf("%s: GETATTR of the pre-restart root: %v type %d", who, res.Status, res.Attr.Type)
		}
		if res := n.getattr(goneFH); res.Status != nfs3.ErrStale {
			t.Errorf("%s: GETATTR of a file removed during the restart: %v, want NFS3ERR_STALE", who, res.Status)
		}
	}
	check(&nfsc{t: t, ctx: ctx, c: newClient(t, ctx, tcpDialer(s.NFSAddr))}, "new client")
	check(old, "reconnected client")
}
