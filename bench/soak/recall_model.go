package main

import (
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"
)

// The recall soak's model (recall.go): every file's content is lines
// "f<i> v<N> <actor> <padding>", the last line naming the version that
// made the content. Writers of one file take turns (close-to-open says
// nothing of two writers at once), each making a new version; the model
// keeps each version's exact content and when its writer's close
// returned. A reader notes, before its open(), the newest version whose
// close had returned (the floor): it must read exactly some version at
// least that new, or, when a write of the file overlapped its open and
// read, a state that write passes through. Such a state may equal an
// older version byte for byte (a truncate keeping the lines of a version
// before the last append is that version until its own append lands): a
// write notes those states (passesThrough), and a reader it overlapped
// may see them.

// fileModel is one file's history.
type fileModel struct {
	mu       sync.Mutex // writers take turns holding it
	stateMu  sync.Mutex // guards what follows; readers take only this
	versions map[int]string
	// States a write passes through on its way to its version (the
	// truncated prefix of a truncate-then-append), by version.
	passes map[int][]string
	by     map[int]string    // who made each version, how
	at     map[int]time.Time // when its close (or rename) returned
	began  map[int]time.Time // when its write began
	// Reads that saw the version before a local rename, within
	// localRenameWindow after it (see checkRead), and the longest lag.
	lateReads int
	maxLag    time.Duration
	// Opens and chmods failed with ESTALE or ENOENT while the file was being renamed
	// over, or right after (see renamedLocked).
	renameErrs int
	// Reads that saw a version older than a client's rewrite made right
	// after a local rename (see lostToRenameLocked), and such rewrites.
	lostWrites int
	lostCount  int
	lost       map[int]bool   // versions that went to a file renamed over
	alt        map[int]string // what such a write wrote, there
	latest     int            // the newest version whose close returned
	doneAt     time.Time      // when it returned
	writing    int            // writes started and not finished
	started    int            // writes started, ever
	name       string
}

// recallModel is the 100 files'.
type recallModel struct {
	files []*fileModel
}

func newRecallModel(n int) *recallModel {
	m := &recallModel{}
	for i := range n {
		m.files = append(m.files, &fileModel{name: fmt.Sprintf("f%03d", i), versions: map[int]string{}, passes: map[int][]string{},
			by: map[int]string{}, at: map[int]time.Time{}, began: map[int]time.Time{}, lost: map[int]bool{}, alt: map[int]string{}})
	}
	return m
}

// line is one line of version v of file f by actor.
func line(f *fileModel, v int, actor string, k int) string {
	pad := strings.Repeat(string(rune('a'+(v+k)%26)), (v*7+k*13)%90)
	return fmt.Sprintf("%s v%d %s %s\n", f.name, v, actor, pad)
}

// beginWrite starts a write of f (f.mu held) at now: it returns the
// version it makes.
func (f *fileModel) beginWrite(now time.Time) int {
	f.stateMu.Lock()
	defer f.stateMu.Unlock()
	f.writing++
	f.started++
	v := f.latest + 1
	delete(f.passes, v) // a failed write's (the run fails anyway)
	f.began[v] = now
	return v
}

// passesThrough notes that the write making version v (f.mu held) passes
// through state on its way: a reader it overlaps may read it.
func (f *fileModel) passesThrough(v int, state string) {
	f.stateMu.Lock()
	defer f.stateMu.Unlock()
	f.passes[v] = append(f.passes[v], state)
}

// endWrite records the version v the write made (content), once its
// close returned; ok false means the write failed and its content is
// unknown (the run fails).
func (f *fileModel) endWrite(v int, content, by string, ok bool, now time.Time) {
	f.stateMu.Lock()
	defer f.stateMu.Unlock()
	f.writing--
	if ok {
		f.versions[v] = content
		f.by[v] = by
		f.at[v] = now
		f.latest, f.doneAt = v, now
		delete(f.versions, v-64) // readers' floors are never that old
		delete(f.passes, v-64)
		delete(f.by, v-64)
		delete(f.at, v-64)
		delete(f.began, v-64)
		delete(f.lost, v-64)
		delete(f.alt, v-64)
	}
}

// current returns the latest version's content: of the latest that did
// not go to a file renamed over (settleWrite).
func (f *fileModel) current() (int, string) {
	f.stateMu.Lock()
	defer f.stateMu.Unlock()
	v := f.latest
	for v > 0 && f.lost[v] {
		v--
	}
	return v, f.versions[v]
}

// readStart is what a reader notes before its open().
type readStart struct {
	at      time.Time
	floor   int
	started int
	writing bool
}

func (f *fileModel) beginRead(now time.Time) readStart {
	f.stateMu.Lock()
	defer f.stateMu.Unlock()
	return readStart{at: now, floor: f.latest, started: f.started, writing: f.writing > 0}
}

// checkRead judges what a reader that began at rs read: "" if fine, else
// what is wrong.
func (f *fileModel) checkRead(rs readStart, got string) string {
	f.stateMu.Lock()
	defer f.stateMu.Unlock()
	overlapped := rs.writing || f.started != rs.started
	v, ok := versionOf(got)
	if ok {
		if alt, known := f.alt[v]; known && alt == got {
			return "" // a write that went to a file renamed over, read there
		}
		if want, known := f.versions[v]; known && want == got {
			if v < rs.floor && f.localRenamesLocked(v, rs) {
				return ""
			}
			if v < rs.floor && overlapped && f.passedLocked(rs, got) {
				return "" // an overlapping truncate's prefix, equal to an older version
			}
			if v < rs.floor {
				return fmt.Sprintf("stale read: version %d (%s, %d bytes), but version %d's (%s, %d bytes) close had returned before the open (%s)",
					v, f.by[v], len(got), rs.floor, f.by[rs.floor], len(f.versions[rs.floor]), f.timesLocked(v, rs))
			}
			return ""
		}
	}
	if overlapped {
		return "" // a write under way: its intermediate states are fair
	}
	want := f.versions[rs.floor]
	return fmt.Sprintf("read %d bytes [%s] matching no version; version %d (%s, %d bytes: [%s]) expected, no write under way",
		len(got), shape(got), rs.floor, f.by[rs.floor], len(want), shape(want))
}

// shape describes content line by line, runs of lines of one version
// and actor together ("v12 local ×3, v18 client B"): what a mismatch was
// made of tells which writes reached the file and where.
func shape(s string) string {
	var parts []string
	last, n := "", 0
	flush := func() {
		switch {
		case n == 1:
			parts = append(parts, last)
		case n > 1:
			parts = append(parts, fmt.Sprintf("%s ×%d", last, n))
		}
	}
	for _, l := range strings.SplitAfter(s, "\n") {
		if l == "" {
			continue
		}
		// "f<i> v<N> <actor> <padding>\n": the actor is what lies
		// between the version and the last space.
		id := fmt.Sprintf("%q", lastLine(l))
		body := strings.TrimSuffix(l, "\n")
		fs := strings.SplitN(body, " ", 3)
		switch {
		case !strings.HasSuffix(l, "\n"):
			id = fmt.Sprintf("partial %q", lastLine(l))
		case len(fs) == 3 && strings.HasPrefix(fs[1], "v") && strings.Contains(fs[2], " "):
			id = fs[1] + " " + fs[2][:strings.LastIndexByte(fs[2], ' ')]
		}
		if id != last {
			flush()
			last, n = id, 0
		}
		n++
	}
	flush()
	return strings.Join(parts, ", ")
}

// passedLocked reports whether got is a state one of the writes a read
// that began at rs overlapped passes through: the writes after its floor
// (writers take turns, so the one under way when it began is the floor's
// next).
//
// LOCKS_REQUIRED(f.stateMu)
func (f *fileModel) passedLocked(rs readStart, got string) bool {
	for w := rs.floor + 1; w <= f.latest+1; w++ {
		if slices.Contains(f.passes[w], got) {
			return true
		}
	}
	return false
}

// versionOf parses the version the last line names.
func versionOf(s string) (int, bool) {
	l := lastLine(s)
	fs := strings.Fields(l)
	if len(fs) < 3 || !strings.HasPrefix(fs[1], "v") {
		return 0, false
	}
	v, err := strconv.Atoi(fs[1][1:])
	return v, err == nil
}

func lastLine(s string) string {
	s = strings.TrimSuffix(s, "\n")
	if i := strings.LastIndexByte(s, '\n'); i >= 0 {
		s = s[i+1:]
	}
	if len(s) > 60 {
		s = s[:60]
	}
	return s
}

// localRenameWindow bounds how long after a local rename over a file (on
// the server's disk) a client may still open the file it replaced: the
// server cannot hold a local rename back (a Linux lease is not broken by
// it), it sees it through inotify right after and recalls then, so a
// client's open in between is served by its delegation or cached name.
const localRenameWindow = time.Second

// localRenamesLocked reports whether the read of version v, older than
// the reader's floor, read the file a local rename had just replaced: the
// first version after v that is not a client's rewrite gone to that file
// (lostToRenameLocked) is a local rename within localRenameWindow before
// the read began. What came after that rename (a local append, another
// rename, a client's write) went to the file that replaced it, which the
// reader did not reach; the read is counted as late. A floor made of such
// lost rewrites alone is fine too (counted as such).
//
// LOCKS_REQUIRED(f.stateMu)
func (f *fileModel) localRenamesLocked(v int, rs readStart) bool {
	w := v + 1
	for w <= rs.floor && f.lostToRenameLocked(w) {
		w++
	}
	if w > rs.floor {
		f.lostWrites++
		return true
	}
	at, ok := f.at[w]
	if !ok || f.by[w] != "local rename" || rs.at.Sub(at) > localRenameWindow {
		return false
	}
	f.lateReads++
	f.maxLag = max(f.maxLag, rs.at.Sub(at))
	return true
}

// lostToRenameLocked reports whether version w is a client's write found
// gone to the file a local rename had just replaced (settleWrite).
//
// LOCKS_REQUIRED(f.stateMu)
func (f *fileModel) lostToRenameLocked(w int) bool { return f.lost[w] }

// afterLocalRename reports whether the write of version w began within
// localRenameWindow after a local rename over the file returned: the
// writer's open may have reached the file the rename replaced (its cached
// name, or its delegation of that file, still led there; the server hears
// of a local rename only after it).
func (f *fileModel) afterLocalRename(w int) bool {
	f.stateMu.Lock()
	defer f.stateMu.Unlock()
	began, ok := f.began[w]
	for u := w - 1; ok && u > 0; u-- {
		at, known := f.at[u]
		if !known || began.Sub(at) > localRenameWindow {
			return false
		}
		if f.by[u] == "local rename" {
			return true
		}
	}
	return false
}

// settleWrite records what a client's write of version w, made right
// after a local rename (afterLocalRename), left under the file's name on
// the server's disk (disk), content being what it wrote. Unless that is
// content, (part of) the write went to the file the rename replaced, a
// file without a name, where readers holding it may still read content
// (kept as alt). If the name still holds the version before, the write
// is lost there: that version stays the file's (current), and readers
// seeing it are not stale. Otherwise (a truncate that reached the old
// file and an append the new one) what the name holds is version w.
func (f *fileModel) settleWrite(w int, content, disk string) {
	f.stateMu.Lock()
	defer f.stateMu.Unlock()
	if disk == content {
		return
	}
	f.alt[w] = content
	f.lostCount++
	prev := w - 1
	for prev > 0 && f.lost[prev] {
		prev--
	}
	if disk == f.versions[prev] {
		f.lost[w] = true
	} else {
		f.versions[w] = disk
	}
}

// renameRace reports whether an open (or chmod) that began at rs and
// failed (ESTALE, ENOENT) raced a rename over the file: one under way, or
// one that returned at most localRenameWindow before the open. A client
// renaming over a file it has open hides that file under another name
// first (silly rename), so the name is briefly absent; and a name cached
// before a rename leads to a file without a name, STALE, after which the
// kernel looks the name up once more and may meet the next rename. It
// counts the read if so.
func (f *fileModel) renameRace(rs readStart) bool {
	f.stateMu.Lock()
	defer f.stateMu.Unlock()
	race := rs.writing || f.started != rs.started
	for w := f.latest; !race && w > 0; w-- {
		at, ok := f.at[w]
		if !ok || rs.at.Sub(at) > localRenameWindow {
			break
		}
		race = strings.HasSuffix(f.by[w], " rename")
	}
	if race {
		f.renameErrs++
	}
	return race
}

// timesLocked tells when the versions from v on were begun and closed,
// and when the read rs began: what tracing a stale read starts from.
func (f *fileModel) timesLocked(v int, rs readStart) string {
	var parts []string
	for u := v; u <= f.latest && len(parts) < 4; u++ {
		if at, ok := f.at[u]; ok {
			parts = append(parts, fmt.Sprintf("v%d %s began %s closed %s", u, f.by[u],
				f.began[u].Format("15:04:05.000000"), at.Format("15:04:05.000000")))
		}
	}
	parts = append(parts, "read began "+rs.at.Format("15:04:05.000000"))
	return strings.Join(parts, "; ")
}
