package main

import (
	"encoding/xml"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestTrend: a flat series is a plateau, noise within tolerance too, a
// steady climb is growth; both bounds must be passed, and a short series
// is not judged.
func TestTrend(t *testing.T) {
	flat := make([]float64, 30)
	noisy := make([]float64, 30)
	climb := make([]float64, 30)
	small := make([]float64, 30)
	for i := range flat {
		flat[i] = 100
		noisy[i] = 100 + float64(i%5)*3 // ±15 MiB: under the absolute bound
		climb[i] = 100 + float64(i)*4   // +40 MiB from the middle to the last third
		small[i] = 1000 + float64(i)    // +10: under both bounds
	}
	for _, c := range []struct {
		name     string
		v        []float64
		abs, rel float64
		grows    bool
	}{
		{"flat", flat, 16, 0.25, false},
		{"noisy", noisy, 16, 0.25, false},
		{"climb", climb, 16, 0.25, true},
		{"climb under the relative bound", climb, 16, 0.5, false},
		{"small climb of a large count", small, 16, 0.1, false},
	} {
		tr := trend("p", "m", c.v, c.abs, c.rel)
		if tr.Grows != c.grows {
			t.Errorf("%s: grows %v (%s, mid %.1f plateau %.1f), want %v", c.name, tr.Grows, tr.Verdict, tr.Mid, tr.Plateau, c.grows)
		}
	}
	if tr := trend("p", "m", climb[:5], 16, 0.25); tr.Grows || !strings.Contains(tr.Verdict, "too few") {
		t.Errorf("5 samples: %+v, want no verdict", tr)
	}
	if tr := trend("p", "m", climb, 16, 0.25); tr.Start != 100 || tr.End != 216 || tr.Max != 216 {
		t.Errorf("start/end/max: %+v", tr)
	}
}

// TestCompareTrees scans real directories: equal trees agree with their
// model; a changed byte, a missing name, an extra name, a mode and a link
// target are each reported.
func TestCompareTrees(t *testing.T) {
	dir := t.TempDir()
	a, b := filepath.Join(dir, "a"), filepath.Join(dir, "b")
	model := map[string]expect{}
	for _, root := range []string{a, b} {
		must(t, os.MkdirAll(filepath.Join(root, "d"), 0o755))
		must(t, os.WriteFile(filepath.Join(root, "d", "f"), []byte("hello"), 0o644))
		must(t, os.Chmod(filepath.Join(root, "d", "f"), 0o644))
		must(t, os.Symlink("f", filepath.Join(root, "d", "l")))
	}
	model["d"] = expect{kind: kindDir, size: -1}
	model["d/f"] = fileExpect([]byte("hello"), 0o644)
	model["d/l"] = expect{kind: kindSymlink, size: -1, target: "f"}
	scan := func(root string) map[string]entry {
		m, err := scanTree(root, nil)
		if err != nil {
			t.Fatal(err)
		}
		return m
	}
	if d := compareTrees(model, scan(a), scan(a)); d.n != 0 {
		t.Fatalf("a tree against itself and its model: %v", d.items)
	}
	// Two copies differ in their inode numbers only.
	d := compareTrees(model, scan(a), scan(b))
	for _, it := range d.items {
		if !strings.Contains(it, "inode") {
			t.Errorf("equal copies: %s", it)
		}
	}
	// Hard links to the same inode are seen as a group.
	must(t, os.Link(filepath.Join(b, "d", "f"), filepath.Join(b, "d", "h")))
	must(t, os.WriteFile(filepath.Join(b, "d", "f"), []byte("hellO"), 0o644))
	must(t, os.Chmod(filepath.Join(b, "d", "f"), 0o600))
	must(t, os.Remove(filepath.Join(b, "d", "l")))
	must(t, os.Symlink("g", filepath.Join(b, "d", "l")))
	d = compareTrees(model, scan(a), scan(b))
	got := strings.Join(d.items, "\n")
	for _, want := range []string{
		"d/f: content through the mount differs from the disk's",
		"d/f: mode 0644 through the mount, 0600 on disk",
		`d/l: target "f" through the mount, "g" on disk`,
		"d/h: on the server's disk, not through the mount",
	} {
		if !strings.Contains(got, want) {
			t.Errorf("missing %q in:\n%s", want, got)
		}
	}
	d = compareTrees(model, scan(b), scan(b))
	got = strings.Join(d.items, "\n")
	for _, want := range []string{
		"d/f: content differs from the model",
		"d/f: mode 0600, model 0644",
		"d/h: present (a f), not in the model",
		`d/l: target "g", model "f"`,
	} {
		if !strings.Contains(got, want) {
			t.Errorf("missing %q in:\n%s", want, got)
		}
	}
	delete(model, "d/l")
	model["d/gone"] = fileExpect(nil, 0o644)
	d = compareTrees(model, scan(a), scan(a))
	got = strings.Join(d.items, "\n")
	for _, want := range []string{"d/gone: missing", "d/l: present (a l), not in the model"} {
		if !strings.Contains(got, want) {
			t.Errorf("missing %q in:\n%s", want, got)
		}
	}
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

// TestCheckNames: a listing taken while the churn ran may show what
// existed at some point during it, must show what existed throughout it,
// and nothing else.
func TestCheckNames(t *testing.T) {
	j := &lsJob{names: []string{"base-0000", "base-0001"}, sizes: map[string]int64{"base-0000": 1, "base-0001": 2}}
	// c-3..c-7 may be listed; c-5 and c-6 must be.
	sp := span{lo: 2, hi: 7, mustLo: 4, mustHi: 6}
	ok := []string{"base-0000", "base-0001", "c-000005", "c-000006", "c-000003", "c-000007"}
	if err := j.checkNames("l", ok, sp); err != nil {
		t.Errorf("a right listing: %v", err)
	}
	for _, c := range []struct {
		names []string
		want  string
	}{
		{[]string{"base-0000", "c-000005", "c-000006"}, "base-0001 missing"},
		{[]string{"base-0000", "base-0001", "c-000005"}, "c-000006 missing"},
		{[]string{"base-0000", "base-0001", "c-000005", "c-000006", "c-000002"}, "removed before the listing began"},
		{[]string{"base-0000", "base-0001", "c-000005", "c-000006", "c-000008"}, "had not begun"},
		{[]string{"base-0000", "base-0001", "base-0001", "c-000005", "c-000006"}, "listed 2 times"},
		{[]string{"base-0000", "base-0001", "c-000005", "c-000006", "stray"}, `unexpected name "stray"`},
	} {
		err := j.checkNames("l", c.names, sp)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%v: %v, want %q", c.names, err, c.want)
		}
	}
	for line, want := range map[string]string{
		"ls: cannot access 'c-000012': No such file or directory":   "c-000012",
		"ls: cannot access './c-000012': No such file or directory": "c-000012",
		"ls: c-000012: No such file or directory":                   "c-000012",
		"ls: cannot open directory '.': Permission denied":          "cannot open directory '.'",
	} {
		if got := cannotAccessName(line); got != want {
			t.Errorf("%q: %q, want %q", line, got, want)
		}
	}
	if isCannotAccess("ls: cannot open directory '.': Permission denied") {
		t.Error("an error about the directory itself taken for a churn name")
	}
}

// TestPlot renders a report with samples and blackholes: well-formed SVG
// with a line per process and metric and a band per blackhole.
func TestPlot(t *testing.T) {
	r := &Report{Mode: "quick", Started: time.Unix(1_700_000_000, 0), WorkSeconds: 20,
		Blackholes: []Window{{StartS: 5, LenS: 1.5}, {StartS: 12, LenS: 1}}}
	for i := range 25 {
		r.Samples = append(r.Samples, Sample{T: float64(i), RSSKiB: [3]uint64{uint64(100+i) << 10, 50 << 10, 10 << 10}, FDs: [3]int{11, 30 + i, 14}})
	}
	r.Trends = []Trend{{Process: procNames[0], Metric: "RSS MiB", Mid: 110, Plateau: 120}}
	svg := plot(r)
	dec := xml.NewDecoder(strings.NewReader(svg))
	lines, bands := 0, 0
	for {
		tok, err := dec.Token()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatalf("not well-formed: %v\n%s", err, svg)
		}
		if se, ok := tok.(xml.StartElement); ok {
			switch se.Name.Local {
			case "polyline":
				lines++
			case "rect":
				for _, a := range se.Attr {
					if a.Name.Local == "fill-opacity" && a.Value == "0.12" {
						bands++
					}
				}
			}
		}
	}
	if lines != 6 {
		t.Errorf("%d polylines, want 6 (3 processes × RSS and fds)", lines)
	}
	if bands != 2*2+1 { // each blackhole in both panels, and the legend's
		t.Errorf("%d blackhole bands, want 5", bands)
	}
	for _, top := range []float64{1, 7, 95, 130, 1400} {
		step := niceStep(top, 6)
		if top/step > 6 || top/step < 1.2 {
			t.Errorf("niceStep(%v) = %v: %v intervals", top, step, top/step)
		}
	}
}

// TestShape: content is described by runs of its lines' versions and
// actors, a line without its newline as partial.
func TestShape(t *testing.T) {
	f := &fileModel{name: "f001"}
	s := lines(f, 3, "client B", 3) + line(f, 4, "local", 0) + "f001 v5 cl"
	if got, want := shape(s), `v3 client B ×3, v4 local, partial "f001 v5 cl"`; got != want {
		t.Errorf("shape %q, want %q", got, want)
	}
	// A line of no padding (version 0, line 0) still names its actor.
	if got, want := shape(line(f, 0, "local", 0)), "v0 local"; got != want {
		t.Errorf("shape %q, want %q", got, want)
	}
}

// TestRecallModelTruncatePrefix: a truncate that keeps the lines of a
// version before the last append leaves that version on the file until
// its own append lands. A read overlapping it may see it; a read that
// began after the truncate-then-append closed may not.
func TestRecallModelTruncatePrefix(t *testing.T) {
	m := newRecallModel(1)
	f := m.files[0]
	write := func(content string) int {
		v := f.beginWrite(time.Now())
		f.endWrite(v, content, "test", true, time.Now())
		return v
	}
	v1 := lines(f, 1, "local", 3)
	write(v1)
	v2 := v1 + line(f, 2, "local", 0)
	write(v2)
	// Version 3 truncates to version 1's lines, then appends.
	during := f.beginRead(time.Now())
	v := f.beginWrite(time.Now())
	f.passesThrough(v, v1)
	if msg := f.checkRead(during, v1); msg != "" {
		t.Errorf("a read overlapping the truncate, seeing its prefix: %s", msg)
	}
	f.endWrite(v, v1+line(f, 3, "client B", 0), "client B truncate", true, time.Now())
	after := f.beginRead(time.Now())
	if msg := f.checkRead(after, v1); !strings.Contains(msg, "stale read") {
		t.Errorf("a read after the truncate-then-append closed, seeing the prefix: %q, want a stale read", msg)
	}
	if msg := f.checkRead(during, v1); msg != "" {
		t.Errorf("the overlapping read, checked after the write ended: %s", msg)
	}
}
