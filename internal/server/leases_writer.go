package server

import (
	"time"

	"hushfs/internal/server/v4state"
)

// A local open breaking a write lease waits for the holder's data, not
// only for its DELEGRETURN. A client may return a recalled write
// delegation while it still has the file open for writing and data to
// send: Linux 6.1 does (its close(2) under the delegation started the
// write-back without waiting, its DELEGRETURN does not wait either, and
// its CLOSE follows the last WRITE), and the local reader, started after
// the client's application had closed the file, read a prefix of it.
// So the broken lease stays while the delegation's holder, or a client
// holding the file open for writing, sends WRITEs (they go through the
// leased open file, which its own lease does not stop), and goes when
// no such open is left, when the writer has sent nothing for
// writerIdle, or when the local recall time is up (the kernel would let
// the opener through itself a little later).

// writerIdle is how long a writer that returned its write delegation
// may send nothing before a waiting local opener goes ahead: a client
// holding the file open for long must not hold local readers back.
const writerIdle = time.Second

// holdForWriterLocked reports whether the broken lease l of key, no
// delegation of which is left, stays for a writer (above).
func (w *leaseWatch) holdForWriterLocked(key string, l *leased, now time.Time) bool {
	if !l.write {
		return false
	}
	if l.freeAt.IsZero() {
		l.freeAt = now
	}
	last := l.freeAt
	if l.lastWrite.After(last) {
		last = l.lastWrite
	}
	if now.Sub(l.brokenAt) >= w.within || now.Sub(last) >= writerIdle {
		return false
	}
	return w.s.v4.state.WriteOpen(key)
}

// writerWrites is told of a WRITE by cl of the file key. It reports
// whether the file's write lease is broken and stays for cl's writes (the
// WRITE then counts as the writer's activity), rather than being let go
// before the server writes (changing).
func (w *leaseWatch) writerWrites(key string, cl *v4state.Client) bool {
	if !w.held() {
		return false
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	l := w.files[key]
	if l == nil || !l.write || !l.broken || !w.s.v4.state.Writes(key, cl) {
		return false
	}
	now := w.s.now()
	if l.brokenAt.IsZero() {
		l.brokenAt = now
	}
	if now.Sub(l.brokenAt) >= w.within {
		return false
	}
	l.lastWrite = now
	return true
}

// writerClosed is told that a client closed its open of the file key: a
// local opener may be waiting for it (holdForWriterLocked).
func (w *leaseWatch) writerClosed(key string) {
	if !w.held() {
		return
	}
	w.mu.Lock()
	l := w.files[key]
	waiting := l != nil && l.write && l.broken
	w.mu.Unlock()
	if waiting {
		w.poke()
	}
}
