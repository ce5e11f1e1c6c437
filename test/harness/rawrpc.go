package harness

import (
	"context"
	"encoding/binary"
	"fmt"
	"io"
	"net"
	"time"

	"hushfs/internal/xdr"
)

// PingNull sends one NULL call (procedure 0, AUTH_NONE) for prog/vers over
// conn and checks that the reply is an accepted SUCCESS.
func PingNull(ctx context.Context, conn net.Conn, prog, vers uint32) error {
	_, err := rawCall(ctx, conn, prog, vers, 0, nil)
	return err
}

// rawCall sends one call with AUTH_SYS (uid 0, gid 0) credentials and
// returns the procedure's results from an accepted SUCCESS reply. It
// encodes and decodes the few header words itself so that readiness checks
// depend on no RPC client code under test.
func rawCall(ctx context.Context, conn net.Conn, prog, vers, proc uint32, args []byte) ([]byte, error) {
	if dl, ok := ctx.Deadline(); ok {
		conn.SetDeadline(dl)
		defer conn.SetDeadline(time.Time{})
	}
	const xid = 0x6875_7368         // arbitrary; checked in the reply
	msg := xdr.AppendUint32(nil, 0) // record mark, filled below
	msg = xdr.AppendUint32(msg, xid)
	msg = xdr.AppendUint32(msg, 0) // CALL
	msg = xdr.AppendUint32(msg, 2) // RPC version
	msg = xdr.AppendUint32(msg, prog)
	msg = xdr.AppendUint32(msg, vers)
	msg = xdr.AppendUint32(msg, proc)
	msg = xdr.AppendUint32(msg, 1)   // AUTH_SYS
	cred := xdr.AppendUint32(nil, 0) // stamp
	cred = xdr.AppendString(cred, "harness")
	cred = xdr.AppendUint32(cred, 0) // uid
	cred = xdr.AppendUint32(cred, 0) // gid
	cred = xdr.AppendUint32(cred, 0) // no auxiliary gids
	msg = xdr.AppendOpaque(msg, cred)
	msg = xdr.AppendUint32(msg, 0)   // verf flavor AUTH_NONE
	msg = xdr.AppendOpaque(msg, nil) // verf body
	msg = append(msg, args...)
	xdr.PutUint32(msg, 0, 1<<31|uint32(len(msg)-4))
	what := fmt.Sprintf("call %d/%d proc %d", prog, vers, proc)
	if _, err := conn.Write(msg); err != nil {
		return nil, fmt.Errorf("%s: write: %w", what, err)
	}
	rec, err := ReadRecord(conn, 1<<20)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", what, err)
	}
	d := xdr.NewDecoder(rec)
	gotXID, mtype, rstat := d.Uint32(), d.Uint32(), d.Uint32()
	d.Uint32()          // verifier flavor
	d.Opaque(400)       // verifier body
	astat := d.Uint32() // accept_stat
	if err := d.Err(); err != nil {
		return nil, fmt.Errorf("%s: decode reply: %w", what, err)
	}
	if gotXID != xid || mtype != 1 || rstat != 0 || astat != 0 {
		return nil, fmt.Errorf("%s: unexpected reply xid=%#x type=%d reply_stat=%d accept_stat=%d",
			what, gotXID, mtype, rstat, astat)
	}
	return d.Rest(), nil
}

// mountStatus sends MOUNT v3 MNT for path and returns its mountstat3.
func mountStatus(ctx context.Context, conn net.Conn, path string) (uint32, error) {
	res, err := rawCall(ctx, conn, 100005, 3, 1, xdr.AppendString(nil, path))
	if err != nil {
		return 0, err
	}
	d := xdr.NewDecoder(res)
	st := d.Uint32()
	return st, d.Err()
}

// ReadRecord reads one complete record-marked RPC message (RFC 5531 §11),
// joining fragments, and refuses records longer than max.
func ReadRecord(r io.Reader, max int) ([]byte, error) {
	var rec []byte
	for {
		var hdr [4]byte
		if _, err := io.ReadFull(r, hdr[:]); err != nil {
			return nil, fmt.Errorf("read record mark: %w", err)
		}
		h := binary.BigEndian.Uint32(hdr[:])
		n := int(h &^ (1 << 31))
		if len(rec)+n > max {
			return nil, fmt.Errorf("record longer than %d bytes", max)
		}
		start := len(rec)
		rec = append(rec, make([]byte, n)...)
		if _, err := io.ReadFull(r, rec[start:]); err != nil {
			return nil, fmt.Errorf("read fragment of %d bytes: %w", n, err)
		}
		if h&(1<<31) != 0 {
			return rec, nil
		}
	}
}
