package server

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"hushfs/internal/nfs4"
)

// Notifications of a directory delegation's entries (nfs4_dirnotify.go).

// notifyDeleg asks for a delegation of dir with entry and directory
// attribute notifications, retrying for a second while the server records
// the back channel's answer to CB_NULL.
func (v *v4client) notifyDeleg(dir nfs4.FH) *nfs4.GetDirDelegationRes {
	v.t.Helper()
	op := nfs4.Argop{Op: nfs4.OpGetDirDelegation, Args: &nfs4.GetDirDelegationArgs{
		NotificationTypes: nfs4.NewBitmap(nfs4.NotifyAddEntry, nfs4.NotifyRemoveEntry, nfs4.NotifyRenameEntry,
			nfs4.NotifyChangeDirAttrs, nfs4.NotifyChangeChildAttrs),
		ChildAttributes: nfs4.NewBitmap(nfs4.AttrType, nfs4.AttrFileid, nfs4.AttrSize, nfs4.AttrFilehandle),
		DirAttributes:   nfs4.NewBitmap(nfs4.AttrType, nfs4.AttrChange)}}
	for deadline := time.Now().Add(time.Second); ; time.Sleep(10 * time.Millisecond) {
		g := v.must(putFH(dir), op).Results[1].Res.(*nfs4.GetDirDelegationRes)
		if g.NonFatal == nfs4.GDD4OK || time.Now().After(deadline) {
			if g.NonFatal != nfs4.GDD4OK {
				v.t.Fatalf("GET_DIR_DELEGATION: not granted: %+v", g)
			}
			return g
		}
	}
}

// notified is what one CB_NOTIFY said: "+name" added, "-name" removed,
// "~name" an entry's attributes, "dir" the directory's attributes.
func notified(t *testing.T, ch []nfs4.Notify) []string {
	t.Helper()
	var out []string
	for _, n := range ch {
		switch {
		case n.Mask.Has(nfs4.NotifyAddEntry):
			a := n.Add.NewEntry.Attrs
			if !a.Mask.Has(nfs4.AttrFileid) || !a.Mask.Has(nfs4.AttrFilehandle) || len(a.Filehandle) == 0 {
				t.Errorf("added %q without its fileid and handle: %v", n.Add.NewEntry.Name, a.Mask)
			}
			out = append(out, "+"+string(n.Add.NewEntry.Name))
		case n.Mask.Has(nfs4.NotifyRemoveEntry):
			out = append(out, "-"+string(n.Remove.Entry.Name))
		case n.Mask.Has(nfs4.NotifyChangeChildAttrs):
			out = append(out, "~"+string(n.ChildAttrs.Name))
		case n.Mask.Has(nfs4.NotifyChangeDirAttrs):
			if !n.DirAttrs.Attrs.Mask.Has(nfs4.AttrChange) {
				t.Errorf("the directory's attributes without its change attribute: %v", n.DirAttrs.Attrs.Mask)
			}
			out = append(out, "dir")
		default:
			t.Errorf("notification of %v", n.Mask)
		}
	}
	return out
}

// takeNotified returns what the CB_NOTIFYs h has already received said,
// waiting up to d for the first.
func takeNotified(t *testing.T, h *cbClient, d time.Duration) []string {
	t.Helper()
	var out []string
	if d > 0 {
		select {
		case ch := <-h.notifies:
			out = notified(t, ch)
		case <-time.After(d):
			return nil
		}
	}
	for {
		select {
		case ch := <-h.notifies:
			out = append(out, notified(t, ch)...)
		default:
			return out
		}
	}
}

// hasAll reports whether got has every name of want, in want's order
// (the watch of local changes may tell more: an unlink's IN_ATTRIB of
// the file).
func hasAll(got, want []string) bool {
	i := 0
	for _, g := range got {
		if i < len(want) && g == want[i] {
			i++
		}
	}
	return i == len(want)
}

// A holder that asks for notifications of entries is granted ADD, REMOVE
// and the directory's attributes (not RENAME). Another client's OPEN
// create, REMOVE, RENAME and CREATE go ahead at once, and each is
// answered only after the holder has taken a CB_NOTIFY with the names'
// new state (the handle and fileid of an added one) and the directory's
// attributes last; a WRITE to an entry is told as its attributes. Nothing
// is recalled. A local create is told after the fact. A holder that
// refuses a notification is recalled instead. Before CB_NOTIFY each
// change was DELAY and recalled.
func TestV4DirNotify(t *testing.T) {
	e, root := dirEnv(t, nil)
	a, h := e.v4cb(true, false)
	b := e.v4(0, 0)
	d := lookupFH(a, root, "d")
	os.WriteFile(filepath.Join(e.root, "d", "r1"), []byte("r"), 0o644)
	g := a.notifyDeleg(d)
	for _, typ := range []int{nfs4.NotifyAddEntry, nfs4.NotifyRemoveEntry, nfs4.NotifyChangeDirAttrs} {
		if !g.Notification.Has(typ) {
			t.Errorf("notification %d not granted: %v", typ, g.Notification)
		}
	}
	if g.Notification.Has(nfs4.NotifyRenameEntry) {
		t.Errorf("RENAME_ENTRY granted (renames are told as remove and add): %v", g.Notification)
	}

	for _, tc := range []struct {
		name string
		ops  []nfs4.Argop
		want []string
	}{
		{"OPEN create", []nfs4.Argop{putFH(d), b.openOp("new", nfs4.ShareAccessWrite, true), getFH()}, []string{"+new", "dir"}},
		{"REMOVE", []nfs4.Argop{putFH(d), removeOp("old")}, []string{"-old", "dir"}},
		{"RENAME within", []nfs4.Argop{putFH(d), saveFH(), renameOp("r1", "r1b")}, []string{"-r1", "dir", "+r1b", "dir"}},
		{"CREATE", []nfs4.Argop{putFH(d), mkdirOp("sub")}, []string{"+sub", "dir"}},
	} {
		time.Sleep(50 * time.Millisecond)
		takeNotified(t, h, 0) // the previous change's events
		res := b.must(tc.ops...)
		// Taken before the reply: no waiting.
		if got := takeNotified(t, h, 0); !hasAll(got, tc.want) {
			t.Errorf("%s: the holder was told %q by the reply, want %q", tc.name, got, tc.want)
		}
		if tc.name == "OPEN create" {
			open := res.Results[1].Res.(*nfs4.OpenRes)
			fh := fhOf(res.Results[2].Res)
			b.must(putFH(fh), nfs4.Argop{Op: nfs4.OpWrite, Args: &nfs4.WriteArgs{Stateid: open.Stateid, Stable: nfs4.FileSync, Data: []byte("data")}})
			if got := takeNotified(t, h, 0); !hasAll(got, []string{"~new", "dir"}) {
				t.Errorf("WRITE: the holder was told %q by the reply, want [~new dir]", got)
			}
		}
	}
	noRecall(t, h, 100*time.Millisecond, "another client's changes told by CB_NOTIFY")

	time.Sleep(50 * time.Millisecond)
	takeNotified(t, h, 0)
	if err := os.WriteFile(filepath.Join(e.root, "d", "local"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if got := takeNotified(t, h, 5*time.Second); !slices.Contains(got, "+local") {
		t.Errorf("a local create: the holder was told %q, want +local", got)
	}
	noRecall(t, h, 100*time.Millisecond, "a local create told by CB_NOTIFY")

	// A refused notification recalls; the change went ahead.
	h.notifyStatus.Store(int32(nfs4.ErrBadStateid))
	b.must(putFH(d), mkdirOp("sub2"))
	if sid := recallOf(t, h); sid != g.Stateid {
		t.Fatalf("CB_RECALL of %v, the delegation is %v", sid, g.Stateid)
	}
	waitReturned(t, e, h, d)
}

// A holder whose notification failed is recalled, and until it returns
// the delegation the next change waits for it (DELAY), as for any
// delegation being recalled: it may not know of the changes since.
func TestV4DirNotifyFailedWaits(t *testing.T) {
	e, root := dirEnv(t, nil)
	a, h := e.v4cb(false, false)
	b := e.v4(0, 0)
	d := lookupFH(a, root, "d")
	g := a.notifyDeleg(d)
	h.notifyStatus.Store(int32(nfs4.ErrServerFault))
	b.must(putFH(d), mkdirOp("x"))
	if sid := recallOf(t, h); sid != g.Stateid {
		t.Fatalf("CB_RECALL of %v, the delegation is %v", sid, g.Stateid)
	}
	b.fails(nfs4.ErrDelay, 1, putFH(d), mkdirOp("y"))
	a.must(putFH(d), dirReturnOp(g.Stateid))
	b.must(putFH(d), mkdirOp("y"))
}

// A holder that does not answer CB_NOTIFY holds another client's change
// back for notifyWait at most: then the change is answered, and the
// delegation recalled (sent once the back channel is free), so the next
// change waits for it.
func TestV4DirNotifyUnanswered(t *testing.T) {
	e, root := dirEnv(t, nil)
	a, h := e.v4cb(false, false)
	b := e.v4(0, 0)
	d := lookupFH(a, root, "d")
	g := a.notifyDeleg(d)
	hold := make(chan struct{})
	h.gmu.Lock()
	h.notifyHold = hold
	h.gmu.Unlock()
	start := time.Now()
	b.must(putFH(d), mkdirOp("x"))
	if took := time.Since(start); took < notifyWait || took > notifyWait+time.Second {
		t.Errorf("the change was answered after %v, want about %v", took, notifyWait)
	}
	b.fails(nfs4.ErrDelay, 1, putFH(d), mkdirOp("y"))
	close(hold)
	if sid := recallOf(t, h); sid != g.Stateid {
		t.Fatalf("CB_RECALL of %v, the delegation is %v", sid, g.Stateid)
	}
	a.must(putFH(d), dirReturnOp(g.Stateid))
	b.must(putFH(d), mkdirOp("y"))
}

// More than maxNotifyBurst names changed within notifyBurstWindow recall
// the delegation instead of telling each (every notification costs the
// changer a round trip to the holder): the changes up to the limit are
// told, the one past it is answered once the holder has returned the
// delegation, and the changes after it cost nothing more.
func TestV4DirNotifyBurstRecalls(t *testing.T) {
	e, root := dirEnv(t, nil)
	a, h := e.v4cb(true, false)
	b := e.v4(0, 0)
	d := lookupFH(a, root, "d")
	g := a.notifyDeleg(d)
	for i := range maxNotifyBurst {
		b.must(putFH(d), mkdirOp(fmt.Sprint("n", i)))
	}
	if got := takeNotified(t, h, 0); !hasAll(got, []string{"+n0", "+n1", "+n" + fmt.Sprint(maxNotifyBurst-1)}) {
		t.Fatalf("the first %d changes: the holder was told %q", maxNotifyBurst, got)
	}
	noRecall(t, h, 0, "changes within the burst limit")
	b.must(putFH(d), mkdirOp("past"))
	if sid := recallOf(t, h); sid != g.Stateid {
		t.Fatalf("CB_RECALL of %v, the delegation is %v", sid, g.Stateid)
	}
	if e.srv.v4.state.DelegHeld(g.Stateid) {
		t.Fatal("the change past the burst was answered before the holder returned the delegation")
	}
	if got := takeNotified(t, h, 0); slices.Contains(got, "+past") {
		t.Errorf("the change past the burst was told too: %q", got)
	}
	for i := range 4 {
		b.must(putFH(d), mkdirOp(fmt.Sprint("after", i)))
	}
	if got := takeNotified(t, h, 0); len(got) != 0 {
		t.Errorf("changes after the return: the holder was told %q", got)
	}
}
