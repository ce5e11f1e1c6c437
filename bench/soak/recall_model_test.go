package main

import (
	"strings"
	"testing"
	"time"
)

// A client's rewrite right after a local rename over the file, found on
// the server's disk to have gone to the file the rename replaced: readers
// that then see the rename's version are not stale, and the file's
// content is the rename's. Found to have landed, the same read is stale.
func TestRecallModelRewriteAfterLocalRename(t *testing.T) {
	for _, landed := range []bool{false, true} {
		m := newRecallModel(1)
		f := m.files[0]
		t0 := time.Unix(1e9, 0)
		write := func(by string, began, done time.Duration) (int, string) {
			v := f.beginWrite(t0.Add(began))
			content := lines(f, v, by, 2)
			f.endWrite(v, content, by, true, t0.Add(done))
			return v, content
		}
		write("init", 0, 0)
		vr, renamed := write("local rename", time.Second, time.Second+time.Millisecond)
		vw, _ := write("client A rewrite", time.Second+5*time.Millisecond, time.Second+20*time.Millisecond)
		if !f.afterLocalRename(vw) {
			t.Fatal("a rewrite begun 4 ms after a local rename not taken as one")
		}
		f.settleRewrite(vw, landed)
		msg := f.checkRead(f.beginRead(t0.Add(2*time.Second)), renamed)
		switch {
		case !landed && msg != "":
			t.Errorf("rewrite lost to the renamed-over file: reading the rename's version: %s", msg)
		case landed && !strings.Contains(msg, "stale read"):
			t.Errorf("rewrite that landed: reading the rename's version judged %q, want stale", msg)
		}
		if v, _ := f.current(); !landed && v != vr || landed && v != vw {
			t.Errorf("landed %v: current version %d", landed, v)
		}
	}
	m := newRecallModel(1)
	f := m.files[0]
	v := f.beginWrite(time.Unix(1e9, 0))
	f.endWrite(v, "x", "local rename", true, time.Unix(1e9, 0))
	w := f.beginWrite(time.Unix(1e9, 0).Add(2 * localRenameWindow))
	if f.afterLocalRename(w) {
		t.Error("a rewrite begun 2 windows after a local rename taken as right after it")
	}
}
