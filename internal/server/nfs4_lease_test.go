package server

import (
	"errors"
	"os"
	"path/filepath"
	"testing"
	"time"

	"hushfs/internal/nfs4"
)

// Local processes changing delegated files on the server's disk (leases.go).
// The changes are made with the os package in this process: each open is
// an open file description of its own, which breaks the server's lease as
// another process's would.

// delegated gives client a a read delegation of a new file name holding
// data, with the open closed: the delegation alone remains.
func delegated(t *testing.T, e *env, a *v4client, name, data string) (nfs4.Stateid, nfs4.FH) {
	t.Helper()
	if err := os.WriteFile(filepath.Join(e.root, name), []byte(data), 0o644); err != nil {
		t.Fatal(err)
	}
	open, fh := a.openDeleg(nfs4.FH(e.srv.RootHandle()), name)
	if open.Delegation.Type != nfs4.DelegateRead {
		t.Fatalf("OPEN of %s for reading: no delegation: %+v", name, open.Delegation)
	}
	a.must(putFH(fh), nfs4.Argop{Op: nfs4.OpClose, Args: &nfs4.CloseArgs{Stateid: open.Stateid}})
	return open.Delegation.Stateid, fh
}

// readFile opens the file fh for reading without a delegation and reads it.
func readFile(a *v4client, fh nfs4.FH) string {
	a.t.Helper()
	op := nfs4.Argop{Op: nfs4.OpOpen, Args: &nfs4.OpenArgs{Seqid: 0,
		ShareAccess: nfs4.ShareAccessRead | nfs4.ShareAccessWantNoDeleg, ShareDeny: nfs4.ShareDenyNone,
		Owner: nfs4.StateOwner{ClientID: a.clientID, Owner: []byte("reader")}, OpenType: nfs4.OpenNoCreate,
		Claim: nfs4.OpenClaim{Type: nfs4.ClaimFH}}}
	res := a.must(putFH(fh), op)
	sid := res.Results[1].Res.(*nfs4.OpenRes).Stateid
	res = a.must(putFH(fh), nfs4.Argop{Op: nfs4.OpRead, Args: &nfs4.ReadArgs{Stateid: sid, Count: 1000}})
	data := string(res.Results[1].Res.(*nfs4.ReadRes).Data)
	a.must(putFH(fh), nfs4.Argop{Op: nfs4.OpClose, Args: &nfs4.CloseArgs{Stateid: sid}})
	return data
}

func waitDone(t *testing.T, done <-chan error, what string, d time.Duration) {
	t.Helper()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("local %s: %v", what, err)
		}
	case <-time.After(d):
		t.Fatalf("local %s still blocked after %v", what, d)
	}
}

// A local open for writing or truncate(2) of a delegated file waits while
// the server recalls the delegation, and goes ahead once it is returned;
// the client then reads what the local writer wrote. A local rename or
// unlink (which Linux leases do not hold back) recalls the delegation
// right after.
func TestV4LocalChangeRecallsDelegation(t *testing.T) {
	e := startEnvTuned(t, false, func(c *Config) { c.Delegations = true })
	a, h := e.v4cb(false, false)
	root := nfs4.FH(e.srv.RootHandle())
	for _, tc := range []struct {
		name   string
		change func(path string) error
		blocks bool   // the change waits for the delegation
		after  string // the file's data afterwards, through NFS ("": gone)
	}{
		{"write", func(p string) error {
			f, err := os.OpenFile(p, os.O_WRONLY|os.O_TRUNC, 0)
			if err != nil {
				return err
			}
			_, err = f.WriteString("written locally")
			return errors.Join(err, f.Close())
		}, true, "written locally"},
		{"truncate", func(p string) error { return os.Truncate(p, 3) }, true, "ori"},
		{"rename", func(p string) error { return os.Rename(p, p+".moved") }, false, "original"},
		{"unlink", func(p string) error { return os.Remove(p) }, false, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			a.t = t
			deleg, fh := delegated(t, e, a, tc.name, "original")
			done := make(chan error, 1)
			go func() { done <- tc.change(filepath.Join(e.root, tc.name)) }()
			if sid := recallOf(t, h); sid != deleg {
				t.Fatalf("CB_RECALL of %v, the delegation is %v", sid, deleg)
			}
			if tc.blocks {
				select {
				case err := <-done:
					t.Fatalf("the local %s went ahead before the delegation was returned (%v)", tc.name, err)
				case <-time.After(300 * time.Millisecond):
				}
			}
			a.must(putFH(fh), nfs4.Argop{Op: nfs4.OpDelegReturn, Args: &nfs4.DelegReturnArgs{Stateid: deleg}})
			waitDone(t, done, tc.name, 10*time.Second)
			if tc.after == "" {
				// Its last name gone, nobody holding it open: stale.
				a.fails(nfs4.ErrStale, 1, putFH(fh), getattrOp(nfs4.AttrSize))
			} else if got := readFile(a, fh); got != tc.after {
				t.Fatalf("after the local %s the client reads %q, want %q", tc.name, got, tc.after)
			}
			switch tc.name {
			case "rename", "unlink":
				a.fails(nfs4.ErrNoEnt, 1, putFH(root), lookupOp(tc.name))
			}
		})
	}
}

// A holder that never returns a delegation recalled for a local writer
// loses it when its time is up (here the 2 s lease; the kernel would let
// the writer through after fs.lease-break-time anyway): it is revoked, and
// the writer goes ahead.
func TestV4LocalWriterRevokesUnreturnedDelegation(t *testing.T) {
	const lease = 2 * time.Second
	e := startEnvTuned(t, false, func(c *Config) { c.Delegations = true; c.Lease = lease })
	a, h := e.v4cb(false, false)
	deleg, fh := delegated(t, e, a, "f", "original")
	done := make(chan error, 1)
	go func() {
		f, err := os.OpenFile(filepath.Join(e.root, "f"), os.O_WRONLY|os.O_TRUNC, 0)
		if err == nil {
			_, err = f.WriteString("new")
			err = errors.Join(err, f.Close())
		}
		done <- err
	}()
	recallOf(t, h)
	recalled := time.Now()
	// The holder keeps its lease (SEQUENCE) but never returns the delegation.
	deadline := recalled.Add(15 * time.Second)
	for {
		a.must()
		select {
		case err := <-done:
			if err != nil {
				t.Fatalf("local write: %v", err)
			}
			if d := time.Since(recalled); d < lease-500*time.Millisecond {
				t.Fatalf("the local writer went ahead %v after the recall, before the lease of %v", d, lease)
			}
			a.fails(nfs4.ErrDelegRevoked, 1, putFH(fh), nfs4.Argop{Op: nfs4.OpRead, Args: &nfs4.ReadArgs{Stateid: deleg, Count: 1}})
			if got := readFile(a, fh); got != "new" {
				t.Fatalf("after the revocation the client reads %q", got)
			}
			return
		case <-time.After(200 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			t.Fatal("the local writer is still blocked 15 s after the recall")
		}
	}
}

// A file open for writing by a local process cannot be leased: no
// delegation is granted while it is, and one is once it is closed.
func TestV4NoDelegationOfLocallyWrittenFile(t *testing.T) {
	e := startEnvTuned(t, false, func(c *Config) { c.Delegations = true })
	a, _ := e.v4cb(false, false)
	path := filepath.Join(e.root, "f")
	if err := os.WriteFile(path, []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	w, err := os.OpenFile(path, os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	root := nfs4.FH(e.srv.RootHandle())
	open, fh := a.openDeleg(root, "f")
	if open.Delegation.Type == nfs4.DelegateRead {
		t.Fatal("a delegation of a file open for writing locally")
	}
	a.must(putFH(fh), nfs4.Argop{Op: nfs4.OpClose, Args: &nfs4.CloseArgs{Stateid: open.Stateid}})
	w.Close()
	if open, _ := a.openDeleg(root, "f"); open.Delegation.Type != nfs4.DelegateRead {
		t.Fatalf("no delegation once the local writer closed the file: %+v", open.Delegation)
	}
}

// The holder writing the file itself goes ahead at once (its own lease is
// let go first: the server's open for writing would break it); its
// delegation, no longer backed by a lease, is recalled, and a local writer
// is not held back any more.
func TestV4HolderWriteReleasesLease(t *testing.T) {
	e := startEnvTuned(t, false, func(c *Config) { c.Delegations = true })
	a, h := e.v4cb(false, false)
	deleg, fh := delegated(t, e, a, "f", "original")
	res := a.must(putFH(nfs4.FH(e.srv.RootHandle())), a.openOp("f", nfs4.ShareAccessBoth, false))
	sid := res.Results[1].Res.(*nfs4.OpenRes).Stateid
	a.must(putFH(fh), nfs4.Argop{Op: nfs4.OpWrite, Args: &nfs4.WriteArgs{Stateid: sid, Stable: nfs4.FileSync, Data: []byte("OWN")}})
	if got := recallOf(t, h); got != deleg {
		t.Fatalf("CB_RECALL of %v, the delegation is %v", got, deleg)
	}
	done := make(chan error, 1)
	go func() {
		f, err := os.OpenFile(filepath.Join(e.root, "f"), os.O_WRONLY, 0)
		if err == nil {
			err = f.Close()
		}
		done <- err
	}()
	waitDone(t, done, "open for writing", 2*time.Second)
	if b, _ := os.ReadFile(filepath.Join(e.root, "f")); string(b) != "OWNginal" {
		t.Fatalf("the file holds %q", b)
	}
}
