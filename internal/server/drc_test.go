package server

import (
	"bytes"
	"errors"
	"net"
	"os"
	"path/filepath"
	"testing"
	"time"

	"hushfs/internal/nfs3"
	"hushfs/internal/rpc"
	"hushfs/internal/xdr"
)

// rawNFSCall frames an NFS call as it goes on the wire, so that a test can
// send the very same bytes again.
func rawNFSCall(xid, proc uint32, cred rpc.OpaqueAuth, args rpc.Marshaler) []byte {
	b, st := rpc.BeginRecord(nil)
	for _, v := range []uint32{xid, rpc.MsgCall, rpc.RPCVersion, nfs3.Program, nfs3.Version, proc} {
		b = xdr.AppendUint32(b, v)
	}
	b = cred.Append(b)
	b = rpc.NoAuth.Append(b)
	b = args.Append(b)
	rpc.FinishRecord(b, st)
	return b
}

// sendOnNewConn sends a record on a connection of its own and returns the
// reply record (mark stripped) and the procedure's results.
func sendOnNewConn(t *testing.T, addr string, rec []byte) (reply, results []byte) {
	t.Helper()
	nc, err := net.DialTimeout("tcp", addr, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	nc.SetDeadline(time.Now().Add(10 * time.Second))
	if _, err := nc.Write(rec); err != nil {
		t.Fatal(err)
	}
	reply, err = rpc.ReadRecord(nc, nil, 1<<20)
	if err != nil {
		t.Fatalf("reading the reply: %v", err)
	}
	d := xdr.NewDecoder(reply)
	xid, mtype, rstat := d.Uint32(), d.Uint32(), d.Uint32()
	var verf rpc.OpaqueAuth
	verf.Decode(d)
	astat := d.Uint32()
	if d.Err() != nil || xid != xdr.NewDecoder(rec[4:]).Uint32() || mtype != rpc.MsgReply || rstat != rpc.MsgAccepted || astat != 0 {
		t.Fatalf("reply %x: not an accepted SUCCESS to the call", reply)
	}
	return reply, d.Rest()
}

// A REMOVE whose reply was lost is retransmitted, from a new connection:
// it gets the original NFS3_OK, not the NOENT running it again would give.
func TestDRCRemoveRetransmitted(t *testing.T) {
	e := startEnv(t, false)
	c := e.root0()
	root := c.rootFH()
	c.mustCreate(root, "victim", 0o644)
	cred := rpc.SysCred(0, 0, nil, "drc-test")
	args := &nfs3.RemoveArgs{Obj: nfs3.DirOpArgs{Dir: root, Name: []byte("victim")}}
	rec := rawNFSCall(0x0dd1ce, nfs3.ProcRemove, cred, args)
	removeStatus := func(results []byte) nfs3.Status {
		t.Helper()
		var r nfs3.RemoveRes
		d := xdr.NewDecoder(results)
		r.Decode(d)
		if d.Err() != nil {
			t.Fatalf("REMOVE results %x: %v", results, d.Err())
		}
		return r.Status
	}
	before := e.srv.Stats()[nfs3.ProcRemove]

	first, res := sendOnNewConn(t, e.addr, rec)
	wantStatus(t, "REMOVE", removeStatus(res), nfs3.OK)
	again, res := sendOnNewConn(t, e.addr, rec)
	wantStatus(t, "retransmitted REMOVE", removeStatus(res), nfs3.OK)
	if !bytes.Equal(first, again) {
		t.Fatalf("retransmission answered\n%x\noriginal\n%x", again, first)
	}
	if _, st := c.lookup(root, "victim"); st != nfs3.ErrNoEnt {
		t.Fatalf("LOOKUP after REMOVE: %v", st)
	}
	if _, err := os.Lstat(filepath.Join(e.root, "victim")); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("the file is still there: %v", err)
	}
	// The same REMOVE under another XID is a new call: it runs, and fails.
	_, res = sendOnNewConn(t, e.addr, rawNFSCall(0x0dd1cf, nfs3.ProcRemove, cred, args))
	wantStatus(t, "REMOVE with a new XID", removeStatus(res), nfs3.ErrNoEnt)
	if got := e.srv.Stats()[nfs3.ProcRemove] - before; got != 2 {
		t.Fatalf("REMOVE ran %d times, want 2 (the retransmission must not run)", got)
	}
	if st := e.rs.Stats(); st.DRCHits != 1 {
		t.Fatalf("%d cache hits, want 1", st.DRCHits)
	}
}

// A WRITE retransmitted after a later WRITE to the same bytes must not put
// the old data back.
func TestDRCWriteRetransmitted(t *testing.T) {
	e := startEnv(t, false)
	c := e.root0()
	root := c.rootFH()
	f := c.mustCreate(root, "f", 0o644)
	cred := rpc.SysCred(0, 0, nil, "drc-test")
	old := rawNFSCall(0xbeef, nfs3.ProcWrite, cred, &nfs3.WriteArgs{File: f, Count: 3, Stable: nfs3.FileSync, Data: []byte("old")})
	first, _ := sendOnNewConn(t, e.addr, old)
	if r := c.write(f, 0, []byte("new"), nfs3.FileSync); r.Status != nfs3.OK {
		t.Fatalf("WRITE: %v", r.Status)
	}
	again, _ := sendOnNewConn(t, e.addr, old)
	if got, err := os.ReadFile(filepath.Join(e.root, "f")); err != nil || string(got) != "new" {
		t.Fatalf("file holds %q (%v), want \"new\"", got, err)
	}
	if !bytes.Equal(first, again) {
		t.Fatal("retransmitted WRITE not answered with the original reply")
	}
}
