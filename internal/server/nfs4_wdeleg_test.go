package server

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"hushfs/internal/nfs3"
	"hushfs/internal/nfs4"
	"hushfs/internal/server/v4state"
)

// Write delegations (nfs4_deleg.go, v4state/deleg.go, leases.go).

// openWrite opens name for reading and writing by v with a write
// delegation wanted (see openWanting).
func (v *v4client) openWrite(dir nfs4.FH, name string, create bool) (*nfs4.OpenRes, nfs4.FH) {
	v.t.Helper()
	return v.openWanting(dir, name, nfs4.ShareAccessBoth, nfs4.ShareAccessWantWriteDeleg, nfs4.DelegateWrite, create)
}

// writeDelegated gives a a write delegation of a new file name, open.
func writeDelegated(t *testing.T, e *env, a *v4client, name string) (*nfs4.OpenRes, nfs4.FH) {
	t.Helper()
	open, fh := a.openWrite(nfs4.FH(e.srv.RootHandle()), name, true)
	if open.Delegation.Type != nfs4.DelegateWrite {
		t.Fatalf("OPEN of %s for writing by a lone client with a back channel: %+v", name, open.Delegation)
	}
	return open, fh
}

func writeOp(sid nfs4.Stateid, off uint64, data string) nfs4.Argop {
	return nfs4.Argop{Op: nfs4.OpWrite, Args: &nfs4.WriteArgs{Stateid: sid, Offset: off, Stable: nfs4.FileSync, Data: []byte(data)}}
}

// untilOK repeats ops by v while the server answers DELAY, for 10 s.
func untilOK(t *testing.T, v *v4client, ops ...nfs4.Argop) *nfs4.CompoundRes {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		r := v.do(ops...)
		if r.Status == nfs4.OK {
			return r
		}
		if r.Status != nfs4.ErrDelay || time.Now().After(deadline) {
			t.Fatalf("%s: %v", opNames(ops), resultsOf(r))
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// A lone writer with a back channel gets a write delegation with a space
// limit, and writes through its stateid; a client without a back channel,
// or one opening a file another client has open, gets none.
func TestV4WriteDelegationGrant(t *testing.T) {
	e := startEnvTuned(t, false, func(c *Config) { c.Delegations = true })
	root := nfs4.FH(e.srv.RootHandle())
	a, _ := e.v4cb(false, false)
	b := e.v4(0, 0)

	open, fh := writeDelegated(t, e, a, "f")
	if sl := open.Delegation.SpaceLimit; sl.LimitBy != nfs4.LimitSize || sl.FileSize == 0 {
		t.Fatalf("space limit %+v", sl)
	}
	a.must(putFH(fh), writeOp(open.Delegation.Stateid, 0, "under the delegation"))
	// Read back over NFS: a local open would recall the delegation.
	r := a.must(putFH(fh), nfs4.Argop{Op: nfs4.OpRead, Args: &nfs4.ReadArgs{Stateid: open.Delegation.Stateid, Count: 100}})
	if got := string(r.Results[1].Res.(*nfs4.ReadRes).Data); got != "under the delegation" {
		t.Fatalf("READ through the delegation: %q", got)
	}

	// No back channel: no delegation.
	if o, _ := b.openWrite(root, "g", true); o.Delegation.Type == nfs4.DelegateWrite {
		t.Fatal("a client without a back channel got a write delegation")
	}

	// Another client has the file open: no delegation (and b's open is
	// not disturbed).
	if err := os.WriteFile(filepath.Join(e.root, "h"), []byte("shared"), 0o644); err != nil {
		t.Fatal(err)
	}
	b.must(putFH(root), b.openOp("h", nfs4.ShareAccessRead, false))
	if o, _ := a.openWrite(root, "h", false); o.Delegation.Type == nfs4.DelegateWrite {
		t.Fatal("a write delegation of a file another client has open")
	}
}

// Another client's OPEN for reading and an NFSv3 READ recall a write
// delegation (CB_RECALL), and wait until it is returned; they then see
// what the holder wrote.
func TestV4WriteDelegationRecall(t *testing.T) {
	e := startEnvTuned(t, false, func(c *Config) { c.Delegations = true })
	root := nfs4.FH(e.srv.RootHandle())
	a, h := e.v4cb(true, false)
	b := e.v4(0, 0)

	open, fh := writeDelegated(t, e, a, "f")
	a.must(putFH(fh), writeOp(open.Delegation.Stateid, 0, "holder's data"))
	b.fails(nfs4.ErrDelay, 1, putFH(root), b.openOp("f", nfs4.ShareAccessRead, false))
	if sid := recallOf(t, h); sid != open.Delegation.Stateid {
		t.Fatalf("CB_RECALL of %v, the delegation is %v", sid, open.Delegation.Stateid)
	}
	r := untilOK(t, b, putFH(root), b.openOp("f", nfs4.ShareAccessRead, false))
	sid := r.Results[1].Res.(*nfs4.OpenRes).Stateid
	r = b.must(putFH(fh), nfs4.Argop{Op: nfs4.OpRead, Args: &nfs4.ReadArgs{Stateid: sid, Count: 100}})
	if got := string(r.Results[1].Res.(*nfs4.ReadRes).Data); got != "holder's data" {
		t.Fatalf("the other client reads %q", got)
	}

	// An NFSv3 READ.
	open, gfh := writeDelegated(t, e, a, "g")
	a.must(putFH(gfh), writeOp(open.Delegation.Stateid, 0, "for v3"))
	c3 := e.root0()
	rr := c3.read(nfs3.FH(gfh), 0, 100)
	if rr.Status != nfs3.OK || string(rr.Data) != "for v3" {
		t.Fatalf("v3 READ of a write-delegated file: %v %q", rr.Status, rr.Data)
	}
	if sid := recallOf(t, h); sid != open.Delegation.Stateid {
		t.Fatalf("v3 READ recalled %v", sid)
	}
	h.settled()
}

// settled waits for a DELEGRETURN the handler is sending: the server has
// seen it once what waited for it went ahead, but its reply may be on the
// way still.
func (h *cbClient) settled() {
	h.mu.Lock()
	defer h.mu.Unlock()
}

// Another client's GETATTR of the size of a write-delegated file is
// answered with the holder's size, asked with CB_GETATTR, and recalls
// nothing; a holder that cannot answer CB_GETATTR is recalled instead.
func TestV4WriteDelegationCBGetattr(t *testing.T) {
	e := startEnvTuned(t, false, func(c *Config) { c.Delegations = true })
	a, h := e.v4cb(true, false)
	b := e.v4(0, 0)
	_, fh := writeDelegated(t, e, a, "f")
	h.setGetattr(func() nfs4.Fattr { return nfs4.Fattr{Size: 12345, Change: 7} })

	r := b.must(putFH(fh), getattrOp(nfs4.AttrSize, nfs4.AttrChange))
	got := attrsOf(r.Results[1].Res)
	if got.Size != 12345 {
		t.Fatalf("the other client sees size %d, the holder has 12345", got.Size)
	}
	select {
	case <-h.getattrs:
	default:
		t.Fatal("no CB_GETATTR")
	}
	select {
	case sid := <-h.recalls:
		t.Fatalf("GETATTR recalled %v", sid)
	default:
	}
	// The holder's own GETATTR asks nobody.
	a.must(putFH(fh), getattrOp(nfs4.AttrSize))
	select {
	case <-h.getattrs:
		t.Fatal("the holder's GETATTR sent CB_GETATTR")
	default:
	}

	h.setGetattr(nil) // CB_GETATTR answered NOTSUPP: recall
	b.fails(nfs4.ErrDelay, 1, putFH(fh), getattrOp(nfs4.AttrSize))
	recallOf(t, h)
	untilOK(t, b, putFH(fh), getattrOp(nfs4.AttrSize))
	h.settled()
}

// A write delegation not returned is revoked a lease after its recall:
// the other client's open goes ahead, the holder's stateid is
// DELEG_REVOKED, and what it wrote before stays.
func TestV4WriteDelegationRevoked(t *testing.T) {
	var mu sync.Mutex
	now := time.Now()
	clock := func() time.Time { mu.Lock(); defer mu.Unlock(); return now }
	e := startEnvTuned(t, false, func(c *Config) { c.Delegations = true; c.Now = clock; c.Lease = 10 * time.Second })
	root := nfs4.FH(e.srv.RootHandle())
	a, h := e.v4cb(false, false)
	b := e.v4(0, 0)
	open, fh := writeDelegated(t, e, a, "f")
	deleg := open.Delegation.Stateid
	a.must(putFH(fh), writeOp(deleg, 0, "kept"))
	b.fails(nfs4.ErrDelay, 1, putFH(root), b.openOp("f", nfs4.ShareAccessWrite, false))
	recallOf(t, h)

	mu.Lock()
	now = now.Add(11 * time.Second)
	mu.Unlock()
	a.must()
	b.must()
	e.srv.v4.state.Expire()
	b.must(putFH(root), b.openOp("f", nfs4.ShareAccessWrite, false))
	a.fails(nfs4.ErrDelegRevoked, 1, putFH(fh), writeOp(deleg, 0, "late"))
	if got, _ := os.ReadFile(filepath.Join(e.root, "f")); string(got) != "kept" {
		t.Fatalf("after the revocation the export holds %q", got)
	}
}

// A local open of a write-delegated file (even for reading) breaks the
// server's write lease: the delegation is recalled and the local open
// waits until it is returned, then reads what the holder wrote.
func TestV4LocalOpenRecallsWriteDelegation(t *testing.T) {
	e := startEnvTuned(t, false, func(c *Config) { c.Delegations = true })
	a, h := e.v4cb(true, false)
	open, fh := writeDelegated(t, e, a, "f")
	a.must(putFH(fh), writeOp(open.Delegation.Stateid, 0, "written over NFS"))

	done := make(chan string, 1)
	go func() {
		b, err := os.ReadFile(filepath.Join(e.root, "f"))
		if err != nil {
			done <- "error: " + err.Error()
			return
		}
		done <- string(b)
	}()
	if sid := recallOf(t, h); sid != open.Delegation.Stateid {
		t.Fatalf("the local open recalled %v", sid)
	}
	select {
	case got := <-done:
		if got != "written over NFS" {
			t.Fatalf("the local reader read %q", got)
		}
		h.settled()
	case <-time.After(15 * time.Second):
		t.Fatal("the local open still blocked after the delegation was returned")
	}
}

// A file that was write-delegated can be read-delegated again once the
// write delegation is back: the write lease made the node's read
// descriptors share its writable open file, which must become read-only
// again (a writable open file anywhere stops the read lease).
func TestV4ReadDelegationAfterWriteDelegation(t *testing.T) {
	e := startEnvTuned(t, false, func(c *Config) { c.Delegations = true })
	root := nfs4.FH(e.srv.RootHandle())
	if err := os.WriteFile(filepath.Join(e.root, "f"), []byte("before"), 0o644); err != nil {
		t.Fatal(err)
	}
	a, _ := e.v4cb(false, false)
	closeAndReturn := func(fh nfs4.FH, open *nfs4.OpenRes) {
		a.must(putFH(fh), nfs4.Argop{Op: nfs4.OpClose, Args: &nfs4.CloseArgs{Stateid: open.Stateid}})
		a.must(putFH(fh), nfs4.Argop{Op: nfs4.OpDelegReturn, Args: &nfs4.DelegReturnArgs{Stateid: open.Delegation.Stateid}})
	}
	// Read under a read delegation (the node gets its read descriptor).
	open, fh := a.openDeleg(root, "f")
	if open.Delegation.Type != nfs4.DelegateRead {
		t.Fatalf("first OPEN for reading: %+v", open.Delegation)
	}
	a.must(putFH(fh), nfs4.Argop{Op: nfs4.OpRead, Args: &nfs4.ReadArgs{Stateid: open.Stateid, Count: 100}})
	closeAndReturn(fh, open)
	// Write under a write delegation, close, return.
	open, fh = a.openWrite(root, "f", false)
	if open.Delegation.Type != nfs4.DelegateWrite {
		t.Fatalf("OPEN for writing: %+v", open.Delegation)
	}
	a.must(putFH(fh), writeOp(open.Stateid, 0, "after"))
	closeAndReturn(fh, open)
	// Read-delegated again (openDeleg retries for a second while the
	// write lease is let go).
	if open, _ = a.openDeleg(root, "f"); open.Delegation.Type != nfs4.DelegateRead {
		t.Fatalf("OPEN for reading after the write delegation's return: %+v, want a read delegation", open.Delegation)
	}
}

// A LINK adds a name to the file, changing its link count and ctime:
// another client's LINK recalls a write delegation of it (NFS4ERR_DELAY
// until it is returned).
func TestV4LinkRecallsWriteDelegation(t *testing.T) {
	e := startEnvTuned(t, false, func(c *Config) { c.Delegations = true })
	root := nfs4.FH(e.srv.RootHandle())
	a, h := e.v4cb(true, false)
	b := e.v4(0, 0)
	link := func(name string) nfs4.Argop {
		return nfs4.Argop{Op: nfs4.OpLink, Args: &nfs4.LinkArgs{NewName: []byte(name)}}
	}

	open, fh := writeDelegated(t, e, a, "f")
	b.fails(nfs4.ErrDelay, 3, putFH(fh), saveFH(), putFH(root), link("f2"))
	if sid := recallOf(t, h); sid != open.Delegation.Stateid {
		t.Fatalf("LINK recalled %v, the delegation is %v", sid, open.Delegation.Stateid)
	}
	untilOK(t, b, putFH(fh), saveFH(), putFH(root), link("f2"))
	h.settled()

	if _, err := os.Stat(filepath.Join(e.root, "f2")); err != nil {
		t.Fatal(err)
	}
}

// An NFSv3 LINK recalls a write delegation and waits; from a holder that
// keeps it the LINK gets JUKEBOX, and the name is not made.
func TestV3LinkRecallsWriteDelegation(t *testing.T) {
	e := startEnvTuned(t, false, func(c *Config) { c.Delegations = true })
	k, hk := e.v4cb(false, false)
	open, gfh := writeDelegated(t, e, k, "g")
	c3 := e.root0()
	var lr nfs3.LinkRes
	c3.call(nfs3.ProcLink, &nfs3.LinkArgs{File: nfs3.FH(gfh), Link: nfs3.DirOpArgs{Dir: c3.rootFH(), Name: []byte("g2")}}, &lr)
	if lr.Status != nfs3.ErrJukebox {
		t.Fatalf("v3 LINK of a file delegated to a holder that does not return it: %v", lr.Status)
	}
	if sid := recallOf(t, hk); sid != open.Delegation.Stateid {
		t.Fatalf("v3 LINK recalled %v", sid)
	}
	if _, err := os.Lstat(filepath.Join(e.root, "g2")); !os.IsNotExist(err) {
		t.Fatalf("g2 after a LINK answered JUKEBOX: %v", err)
	}
}

// An NFSv3 GETATTR of a write-delegated file asks the holder
// (CB_GETATTR) and reports its size, recalling nothing; a holder that
// cannot answer is recalled, and the GETATTR answered once it returned
// the delegation.
func TestV3GetattrAsksWriteDelegationHolder(t *testing.T) {
	e := startEnvTuned(t, false, func(c *Config) { c.Delegations = true })
	a, h := e.v4cb(true, false)
	_, fh := writeDelegated(t, e, a, "f")
	c3 := e.root0()
	h.setGetattr(func() nfs4.Fattr { return nfs4.Fattr{Size: 0, Change: 1} })
	before := c3.mustGetattr(nfs3.FH(fh))
	select {
	case <-h.getattrs:
	default:
		t.Fatal("v3 GETATTR sent no CB_GETATTR")
	}
	h.setGetattr(func() nfs4.Fattr { return nfs4.Fattr{Size: 12345, Change: 7} })
	got := c3.mustGetattr(nfs3.FH(fh))
	if got.Size != 12345 {
		t.Fatalf("the v3 client sees size %d, the holder has 12345", got.Size)
	}
	if got.Mtime == before.Mtime || got.Ctime == before.Ctime {
		t.Fatalf("the holder's change shows no new mtime or ctime: %+v then %+v", before, got)
	}
	select {
	case sid := <-h.recalls:
		t.Fatalf("v3 GETATTR recalled %v", sid)
	default:
	}

	h.setGetattr(nil) // CB_GETATTR answered NOTSUPP: recall
	c3.mustGetattr(nfs3.FH(fh))
	recallOf(t, h)
	h.settled()
}

// The holder's own LINK of its write-delegated file keeps the delegation
// (the file's watch sees the server's change as expected), while a local
// chmod afterwards, or right behind the LINK, still recalls it.
func TestV4HolderLinkKeepsWriteDelegation(t *testing.T) {
	e := startEnvTuned(t, false, func(c *Config) { c.Delegations = true })
	root := nfs4.FH(e.srv.RootHandle())
	a, h := e.v4cb(true, false)
	open, fh := writeDelegated(t, e, a, "f")
	if !e.srv.v4.state.Delegated(string(fh)) {
		t.Fatal("the server's delegation is not under the file's handle")
	}
	a.must(putFH(fh), saveFH(), putFH(root), nfs4.Argop{Op: nfs4.OpLink, Args: &nfs4.LinkArgs{NewName: []byte("own")}})
	select {
	case sid := <-h.recalls:
		t.Fatalf("the holder's own LINK recalled %v", sid)
	case <-time.After(1500 * time.Millisecond): // the watch's events and its 1 s scan
	}
	if err := os.Chmod(filepath.Join(e.root, "own"), 0o600); err != nil {
		t.Fatal(err)
	}
	if sid := recallOf(t, h); sid != open.Delegation.Stateid {
		t.Fatalf("the local chmod recalled %v", sid)
	}
	returned(t, e, h, fh)

	// A local chmod right behind the holder's LINK, whose event inotify
	// may merge with the LINK's, recalls too.
	open, gfh := writeDelegated(t, e, a, "g")
	a.must(putFH(gfh), saveFH(), putFH(root), nfs4.Argop{Op: nfs4.OpLink, Args: &nfs4.LinkArgs{NewName: []byte("own2")}})
	if err := os.Chmod(filepath.Join(e.root, "g"), 0o600); err != nil {
		t.Fatal(err)
	}
	if sid := recallOf(t, h); sid != open.Delegation.Stateid {
		t.Fatalf("the local chmod after the LINK recalled %v", sid)
	}
	returned(t, e, h, gfh)
}

// returned waits until the server has seen the holder return its
// delegation of fh (nothing else waited for it), and the holder the reply.
func returned(t *testing.T, e *env, h *cbClient, fh nfs4.FH) {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); e.srv.v4.state.Delegated(string(fh)); time.Sleep(5 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("the recalled delegation was not returned")
		}
	}
	h.settled()
}

// With the recall wait (Config.RecallWait, on by default), another
// client's OPEN of a write-delegated file whose holder returns it at once
// is answered OK, with the holder's data, instead of NFS4ERR_DELAY and a
// retry after the client's pause; a holder that does not return it still
// gets the caller NFS4ERR_DELAY once the wait is over.
func TestV4RecallWaited(t *testing.T) {
	e := startEnvTuned(t, false, func(c *Config) { c.Delegations = true; c.RecallWait = 0 })
	root := nfs4.FH(e.srv.RootHandle())
	a, h := e.v4cb(true, false)
	b := e.v4(0, 0)

	open, fh := writeDelegated(t, e, a, "f")
	a.must(putFH(fh), writeOp(open.Delegation.Stateid, 0, "holder's data"))
	start := time.Now()
	r := b.must(putFH(root), b.openOp("f", nfs4.ShareAccessRead, false))
	if el := time.Since(start); el > 2*v4RecallWait {
		t.Errorf("the OPEN took %v", el)
	}
	if sid := recallOf(t, h); sid != open.Delegation.Stateid {
		t.Fatalf("CB_RECALL of %v, the delegation is %v", sid, open.Delegation.Stateid)
	}
	sid := r.Results[1].Res.(*nfs4.OpenRes).Stateid
	r = b.must(putFH(fh), nfs4.Argop{Op: nfs4.OpRead, Args: &nfs4.ReadArgs{Stateid: sid, Count: 100}})
	if got := string(r.Results[1].Res.(*nfs4.ReadRes).Data); got != "holder's data" {
		t.Fatalf("the other client reads %q", got)
	}
	h.settled()
}

// A holder that keeps its delegation: the caller is answered
// NFS4ERR_DELAY once the recall wait is over.
func TestV4RecallWaitBounded(t *testing.T) {
	e := startEnvTuned(t, false, func(c *Config) { c.Delegations = true; c.RecallWait = 0 })
	root := nfs4.FH(e.srv.RootHandle())
	c, hc := e.v4cb(false, false)
	b := e.v4(0, 0)
	open, _ := writeDelegated(t, e, c, "g")
	start := time.Now()
	b.fails(nfs4.ErrDelay, 1, putFH(root), b.openOp("g", nfs4.ShareAccessRead, false))
	if el := time.Since(start); el < v4RecallWait {
		t.Errorf("DELAY after %v, want the wait of %v first", el, v4RecallWait)
	}
	if sid := recallOf(t, hc); sid != open.Delegation.Stateid {
		t.Fatalf("CB_RECALL of %v, the delegation is %v", sid, open.Delegation.Stateid)
	}
}

// A delegation granted while a change waits for the return of another
// (the first was returned, a client opened the file again) is recalled
// too: the wait's later looks mark it recalled, and its CB_RECALL was
// never sent (the change then waited a lease, until the server revoked
// it). The looks are scripted here: the grant falls between two of them.
func TestV4RecallWaitRecallsNewGrant(t *testing.T) {
	var mu sync.Mutex
	var logged []string
	e := startEnvTuned(t, false, func(c *Config) {
		c.Delegations = true
		c.Logf = func(format string, args ...any) {
			mu.Lock()
			defer mu.Unlock()
			logged = append(logged, fmt.Sprintf(format, args...))
		}
	})
	looks := 0
	conflicts := func(key string, by *v4state.Client) ([]v4state.Recall, bool) {
		looks++
		switch looks {
		case 1: // the first holder's delegation, recalled
			return []v4state.Recall{{FileKey: key}}, true
		case 2: // a new holder's, marked recalled by this look
			return []v4state.Recall{{FileKey: key}}, true
		}
		return nil, false
	}
	if !e.srv.recallWait("f", nil, conflicts, time.Second) {
		t.Fatal("still held after the looks said none is")
	}
	mu.Lock()
	defer mu.Unlock()
	sent := 0
	for _, l := range logged {
		// A Recall without a session is logged instead of sent.
		if strings.Contains(l, "delegation to recall has no back channel") {
			sent++
		}
	}
	if sent != 2 {
		t.Fatalf("%d of the 2 recalls the looks found were sent; log: %q", sent, logged)
	}
}

// Once a write delegation is back, a read delegation of the file is
// backed by a read lease, which a local reader does not break: the write
// lease went with the return (it was let go by a later scan, and a read
// delegation granted before that kept it, so that a local O_NONBLOCK
// open for reading — GNU grep's, tar's — failed with EWOULDBLOCK).
func TestV4ReadDelegationAfterReturnLocalReader(t *testing.T) {
	e := startEnvTuned(t, false, func(c *Config) { c.Delegations = true })
	root := nfs4.FH(e.srv.RootHandle())
	a, _ := e.v4cb(false, false)
	b, _ := e.v4cb(false, false)
	for i := range 20 {
		name := fmt.Sprint("f", i)
		open, fh := writeDelegated(t, e, a, name)
		a.must(putFH(fh), writeOp(open.Stateid, 0, "written"))
		a.must(putFH(fh), nfs4.Argop{Op: nfs4.OpClose, Args: &nfs4.CloseArgs{Stateid: open.Stateid}})
		a.must(putFH(fh), nfs4.Argop{Op: nfs4.OpDelegReturn, Args: &nfs4.DelegReturnArgs{Stateid: open.Delegation.Stateid}})
		rd, _ := b.openDeleg(root, name)
		if rd.Delegation.Type != nfs4.DelegateRead {
			continue
		}
		fd, err := unix.Open(filepath.Join(e.root, name), unix.O_RDONLY|unix.O_NONBLOCK, 0)
		if err != nil {
			t.Fatalf("%s: a local O_NONBLOCK open for reading while another client holds a read delegation: %v", name, err)
		}
		unix.Close(fd)
	}
}

// A retry of a change whose conflicting delegation was recalled already
// is answered NFS4ERR_DELAY at once: the holder had the recall's round
// trip, and waiting again at every retry held the caller back long enough
// to let its other session's lease lapse (pynfs DELEG8).
func TestV4RecallWaitOncePerRecall(t *testing.T) {
	e := startEnvTuned(t, false, func(c *Config) { c.Delegations = true; c.RecallWait = 0 })
	root := nfs4.FH(e.srv.RootHandle())
	c, hc := e.v4cb(false, false)
	b := e.v4(0, 0)
	writeDelegated(t, e, c, "g")
	b.fails(nfs4.ErrDelay, 1, putFH(root), b.openOp("g", nfs4.ShareAccessRead, false))
	recallOf(t, hc)
	start := time.Now()
	b.fails(nfs4.ErrDelay, 1, putFH(root), b.openOp("g", nfs4.ShareAccessRead, false))
	if el := time.Since(start); el >= v4RecallWait {
		t.Errorf("the retry was answered DELAY after %v, want at once", el)
	}
}
