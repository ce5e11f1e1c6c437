package test

import (
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"testing"
	"time"

	"hushfs/test/harness"
)

// serverCallbacks reads the server's count of an NFSv4.1 callback
// operation (CB_RECALL, CB_NOTIFY) from its metrics.
func serverCallbacks(t *testing.T, metricsAddr, op string) int {
	t.Helper()
	resp, err := http.Get("http://" + metricsAddr + "/metrics")
	must(t, "metrics", err)
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	must(t, "metrics", err)
	m := regexp.MustCompile(`(?m)^hushfs_rpc_calls_total\{prog="nfs4cb",proc="` + op + `"\} (\d+)$`).FindSubmatch(body)
	if m == nil {
		return 0
	}
	n, _ := strconv.Atoi(string(m[1]))
	return n
}

// TestNFSv41DirNotify: A holds a directory's delegation with notification
// of entries added and removed; B creates, removes and renames entries
// there: none recalls A's delegation (A sends nothing meanwhile, no
// DELEGRETURN; the server sends CB_NOTIFY, no CB_RECALL), and A's next
// ls -l equals the host's with no call at all (no READDIR: the held
// listing took the changes), past the attributes' lifetime. A's stat of
// a new file has its size. A create on the server's host reaches A's
// listing the same way. B's chmod of the directory still recalls, and A
// lists it again. Before CB_NOTIFY each of B's changes recalled the
// delegation and A's ls -l read the directory again.
func TestNFSv41DirNotify(t *testing.T) {
	requireMountTools(t)
	bin := harness.BuildHushfs(t)
	export := t.TempDir()
	hostDir := filepath.Join(export, "d")
	must(t, "mkdir", os.Mkdir(hostDir, 0o755))
	for i := range 50 {
		must(t, "create", os.WriteFile(filepath.Join(hostDir, fmt.Sprintf("f%04d", i)), []byte("x"), 0o644))
	}
	metrics := freeAddr(t)
	s := harness.StartServe(t, export, "--metrics", metrics)
	a, dirA := serveV41Opts(t, bin, s, "actimeo=1")
	b, dirB := serveV41Opts(t, bin, s, "actimeo=1")
	pa, pb := filepath.Join(dirA, "d"), filepath.Join(dirB, "d")

	_, err := os.ReadDir(dirA)
	must(t, "A: list the root", err)
	sameListing(t, "A: first ls -l", pa, hostDir)
	if n := serverOps(t, metrics, "GET_DIR_DELEGATION"); n < 1 {
		t.Fatalf("server: %d GET_DIR_DELEGATIONs after A's listing, want one", n)
	}
	recalls0, notifies0 := serverCallbacks(t, metrics, "CB_RECALL"), serverCallbacks(t, metrics, "CB_NOTIFY")

	const n = 12
	prev, prevB, start := a.Stats(t), b.Stats(t), time.Now()
	// In groups of at most 6 names a second: more are a burst, which
	// recalls (tested below).
	pause := func() { time.Sleep(1100 * time.Millisecond) }
	within(t, "B's creates, removes and renames", 60*time.Second, func() error {
		for i := range n {
			if i == n/2 {
				pause()
			}
			if err := os.WriteFile(filepath.Join(pb, fmt.Sprintf("new%02d", i)), []byte("new bytes"), 0o644); err != nil {
				return err
			}
		}
		pause()
		for i := range 5 {
			if err := os.Remove(filepath.Join(pb, fmt.Sprintf("f%04d", i))); err != nil {
				return err
			}
		}
		for i := 10; i < 15; i++ {
			if i == 10 || i == 13 {
				pause()
			}
			if err := os.Rename(filepath.Join(pb, fmt.Sprintf("f%04d", i)), filepath.Join(pb, fmt.Sprintf("g%04d", i))); err != nil {
				return err
			}
		}
		pause()
		// A rename over an existing name, and a directory made.
		if err := os.Rename(filepath.Join(pb, "f0020"), filepath.Join(pb, "f0021")); err != nil {
			return err
		}
		return os.Mkdir(filepath.Join(pb, "sub"), 0o755)
	})
	t.Logf("B's changes: %v, calls {%s}", time.Since(start).Round(time.Millisecond), opsLine(delta(prevB, b.Stats(t)).Ops))
	expectCounts(t, "A while B changes the directory (no recall: notified)", delta(prev, a.Stats(t)), nil)
	if r := serverCallbacks(t, metrics, "CB_RECALL") - recalls0; r != 0 {
		t.Errorf("server: %d CB_RECALLs during B's changes, want none", r)
	}
	notified := serverCallbacks(t, metrics, "CB_NOTIFY") - notifies0
	if notified < 1 {
		t.Errorf("server: %d CB_NOTIFYs during B's changes, want some", notified)
	}

	time.Sleep(1500 * time.Millisecond) // past actimeo=1: only the delegation keeps the listing
	prev = a.Stats(t)
	sameListing(t, "A after B's changes", pa, hostDir)
	// One call, for the new subdirectory's attributes: a directory's
	// attributes change with its own entries, which no notification of
	// its parent tells, so they are never kept past their lifetime. It is
	// a GETATTR, or the revalidation pass of the parent that brings them
	// with the rest when other entries are due too (the groups above
	// take seconds).
	if d := delta(prev, a.Stats(t)); d.Total() != 1 || d.Ops["GETATTR"].Ops+d.Ops["READDIRPLUS"].Ops != 1 {
		t.Errorf("A: ls -l after B's changes, the delegation held: calls {%s}, want one GETATTR or READDIRPLUS", opsLine(d.Ops))
	}
	t.Logf("B: %d creates, 5 removes, 6 renames, a mkdir: %d CB_NOTIFY; A: ls -l no listing", n, notified)

	prev = a.Stats(t)
	fi, err := os.Stat(filepath.Join(pa, "new07"))
	must(t, "A: stat a file B made", err)
	if fi.Size() != int64(len("new bytes")) {
		t.Errorf("A: stat of B's new file: size %d, want %d", fi.Size(), len("new bytes"))
	}
	t.Logf("A: stat of a file B made: calls {%s}", opsLine(delta(prev, a.Stats(t)).Ops))
	if _, err := os.Stat(filepath.Join(pa, "f0001")); !os.IsNotExist(err) {
		t.Errorf("A: stat of a file B removed: %v, want ENOENT", err)
	}

	// A create and a remove on the server's host: told after the fact.
	prev = a.Stats(t)
	must(t, "host create", os.WriteFile(filepath.Join(hostDir, "host1"), []byte("h"), 0o644))
	must(t, "host remove", os.Remove(filepath.Join(hostDir, "f0030")))
	deadline := time.Now().Add(10 * time.Second)
	for serverCallbacks(t, metrics, "CB_NOTIFY") < notifies0+notified+1 && time.Now().Before(deadline) {
		time.Sleep(20 * time.Millisecond)
	}
	time.Sleep(200 * time.Millisecond)
	sameListing(t, "A after the host's create", pa, hostDir)
	d := delta(prev, a.Stats(t))
	if d.Ops["DELEGRETURN"].Ops != 0 || d.Ops["READDIR"].Ops != 0 || d.Ops["READDIRPLUS"].Ops != 0 {
		t.Errorf("A after the host's create: calls {%s}, want no DELEGRETURN or listing", opsLine(d.Ops))
	}

	// A change notifications do not tell (the directory's own mode)
	// recalls: A lists the directory again, its notified listing being
	// vouched for by the delegation alone.
	prev = a.Stats(t)
	within(t, "B: chmod of the directory", 30*time.Second, func() error { return os.Chmod(pb, 0o750) })
	waitCalls(t, a, prev, "DELEGRETURN", 1)
	time.Sleep(1500 * time.Millisecond) // past actimeo=1
	mid := a.Stats(t)
	sameListing(t, "A after B's chmod of the directory", pa, hostDir)
	if d := delta(mid, a.Stats(t)); d.Ops["READDIRPLUS"].Ops != 1 {
		t.Errorf("A: ls -l after the recall: calls {%s}, want the listing read again", opsLine(d.Ops))
	}
	// A burst of creates (an untar, a build's outputs) past the notifier's
	// limit recalls the delegation once, instead of costing B a round
	// trip to A per file; A lists the directory again.
	time.Sleep(1100 * time.Millisecond)
	prev, prevB, start = a.Stats(t), b.Stats(t), time.Now()
	recalls1 := serverCallbacks(t, metrics, "CB_RECALL")
	within(t, "B: a burst of creates", 60*time.Second, func() error {
		for i := range 30 {
			if err := os.WriteFile(filepath.Join(pb, fmt.Sprintf("burst%02d", i)), []byte("b"), 0o644); err != nil {
				return err
			}
		}
		return nil
	})
	t.Logf("B's burst of 30 creates: %v, calls {%s}", time.Since(start).Round(time.Millisecond), opsLine(delta(prevB, b.Stats(t)).Ops))
	waitCalls(t, a, prev, "DELEGRETURN", 1)
	if r := serverCallbacks(t, metrics, "CB_RECALL") - recalls1; r != 1 {
		t.Errorf("server: %d CB_RECALLs for B's burst, want 1", r)
	}
	time.Sleep(1500 * time.Millisecond) // past actimeo=1
	sameListing(t, "A after B's burst", pa, hostDir)
	must(t, "unmount A", a.Unmount(false))
	must(t, "unmount B", b.Unmount(false))
	if t.Failed() {
		t.Logf("server:\n%s", s.Output())
	}
}
