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
		vw, rewrote := write("client A rewrite", time.Second+5*time.Millisecond, time.Second+20*time.Millisecond)
		if !f.afterLocalRename(vw) {
			t.Fatal("a rewrite begun 4 ms after a local rename not taken as one")
		}
		disk := renamed
		if landed {
			disk = rewrote
		}
		f.settleWrite(vw, rewrote, disk)
		if msg := f.checkRead(f.beginRead(t0.Add(2*time.Second)), rewrote); msg != "" {
			t.Errorf("landed %v: reading the rewrite: %s", landed, msg)
		}
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

// A truncate that reached the file a local rename had just replaced and
// an append that reached the new one: what the name holds is the
// version, and what the write meant is still readable where it went.
func TestRecallModelHalfLostWrite(t *testing.T) {
	m := newRecallModel(1)
	f := m.files[0]
	t0 := time.Unix(1e9, 0)
	v := f.beginWrite(t0)
	f.endWrite(v, lines(f, v, "init", 3), "init", true, t0)
	v = f.beginWrite(t0.Add(time.Second))
	renamed := lines(f, v, "local rename", 2)
	f.endWrite(v, renamed, "local rename", true, t0.Add(time.Second))
	w := f.beginWrite(t0.Add(time.Second + time.Millisecond))
	add := line(f, w, "client B", 0)
	meant := lines(f, v-1, "init", 1) + add // kept one line of the version it saw, then appended
	f.endWrite(w, meant, "client B truncate", true, t0.Add(time.Second+3*time.Millisecond))
	disk := renamed + add
	f.settleWrite(w, meant, disk)
	for _, got := range []string{disk, meant} {
		if msg := f.checkRead(f.beginRead(t0.Add(2*time.Second)), got); msg != "" {
			t.Errorf("reading %q: %s", got, msg)
		}
	}
	if _, cur := f.current(); cur != disk {
		t.Errorf("current content %q, want what the name holds", cur)
	}
}

// A local append right after a local rename over the file goes to the
// file that replaced it: a client that still reached the replaced file
// (within the window: the server hears of the rename only after it) read
// that file's last version, not a stale one of the new file. Past the
// window, or with a client's version between, the same read is stale.
func TestRecallModelAppendAfterLocalRename(t *testing.T) {
	for _, c := range []struct {
		name  string
		after time.Duration // the read, after the rename
		mid   bool          // a client's rewrite before the rename
		stale bool
	}{
		{"within the window", 600 * time.Microsecond, false, false},
		{"past the window", 2 * localRenameWindow, false, true},
		{"a client's version before the rename", 600 * time.Microsecond, true, true},
	} {
		m := newRecallModel(1)
		f := m.files[0]
		t0 := time.Unix(1e9, 0)
		write := func(by string, at time.Duration) string {
			v := f.beginWrite(t0.Add(at))
			content := lines(f, v, by, 2)
			f.endWrite(v, content, by, true, t0.Add(at))
			return content
		}
		old := write("client A rename", 0)
		if c.mid {
			write("client B rewrite", 500*time.Millisecond)
		}
		write("local rename", time.Second)
		write("local append", time.Second+50*time.Microsecond)
		msg := f.checkRead(f.beginRead(t0.Add(time.Second+c.after)), old)
		if got := strings.Contains(msg, "stale read"); got != c.stale {
			t.Errorf("%s: the replaced file's version read: %q, stale %v", c.name, msg, c.stale)
		}
	}
}
