package proxy

// Helpers shared by the tests: record-marked RPC messages built by hand,
// and small servers on 127.0.0.1.

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"sync"
	"testing"
	"time"

	"hushfs/internal/xdr"
)

// auth is an opaque_auth.
type auth struct {
	flavor uint32
	body   []byte
}

func authSys(machine string, uid, gid uint32, gids ...uint32) auth {
	var b []byte
	b = xdr.AppendUint32(b, 12345) // stamp
	b = xdr.AppendString(b, machine)
	b = xdr.AppendUint32(b, uid)
	b = xdr.AppendUint32(b, gid)
	b = xdr.AppendUint32(b, uint32(len(gids)))
	for _, g := range gids {
		b = xdr.AppendUint32(b, g)
	}
	return auth{1, b}
}

// callBody encodes an RPC call message (without record marking).
func callBody(xid uint32, k ProcKey, cred, verf auth, args []byte) []byte {
	var b []byte
	b = xdr.AppendUint32(b, xid)
	b = xdr.AppendUint32(b, msgCall)
	b = xdr.AppendUint32(b, rpcVersion)
	b = xdr.AppendUint32(b, k.Prog)
	b = xdr.AppendUint32(b, k.Vers)
	b = xdr.AppendUint32(b, k.Proc)
	b = xdr.AppendUint32(b, cred.flavor)
	b = xdr.AppendOpaque(b, cred.body)
	b = xdr.AppendUint32(b, verf.flavor)
	b = xdr.AppendOpaque(b, verf.body)
	return append(b, args...)
}

// writeArgs encodes NFSv3 WRITE3args.
func writeArgs(fh []byte, offset uint64, stable uint32, data []byte) []byte {
	var b []byte
	b = xdr.AppendOpaque(b, fh)
	b = xdr.AppendUint64(b, offset)
	b = xdr.AppendUint32(b, uint32(len(data)))
	b = xdr.AppendUint32(b, stable)
	return xdr.AppendOpaque(b, data)
}

// replyBody encodes an accepted, successful reply carrying results.
func replyBody(xid uint32, results []byte) []byte {
	var b []byte
	b = xdr.AppendUint32(b, xid)
	b = xdr.AppendUint32(b, msgReply)
	b = xdr.AppendUint32(b, 0) // MSG_ACCEPTED
	b = xdr.AppendUint32(b, 0) // verifier AUTH_NONE
	b = xdr.AppendUint32(b, 0)
	b = xdr.AppendUint32(b, 0) // SUCCESS
	return append(b, results...)
}

// frame record-marks body as one fragment.
func frame(body []byte) []byte {
	b := binary.BigEndian.AppendUint32(nil, lastFragment|uint32(len(body)))
	return append(b, body...)
}

// frameSplit record-marks body as fragments of the given sizes, the last
// one taking whatever remains; a size of 0 makes an empty fragment.
func frameSplit(body []byte, sizes ...int) []byte {
	var b []byte
	for _, n := range sizes {
		n = min(n, len(body))
		b = binary.BigEndian.AppendUint32(b, uint32(n))
		b = append(b, body[:n]...)
		body = body[n:]
	}
	b = binary.BigEndian.AppendUint32(b, lastFragment|uint32(len(body)))
	return append(b, body...)
}

// frameRandom record-marks body as a random number of fragments.
func frameRandom(r *rand.Rand, body []byte) []byte {
	var sizes []int
	for left := len(body); left > 0 && r.IntN(3) > 0; {
		n := r.IntN(min(left, 64) + 1)
		sizes = append(sizes, n)
		left -= n
	}
	return frameSplit(body, sizes...)
}

// readRecord reads one record, reassembling its fragments; it refuses
// records over max bytes.
func readRecord(r io.Reader, max int) ([]byte, error) {
	var rec []byte
	var hdr [4]byte
	for {
		if _, err := io.ReadFull(r, hdr[:]); err != nil {
			return nil, err
		}
		m := binary.BigEndian.Uint32(hdr[:])
		n := int(m &^ lastFragment)
		if len(rec)+n > max {
			return nil, fmt.Errorf("record over %d bytes", max)
		}
		start := len(rec)
		rec = append(rec, make([]byte, n)...)
		if _, err := io.ReadFull(r, rec[start:]); err != nil {
			return nil, err
		}
		if m&lastFragment != 0 {
			return rec, nil
		}
	}
}

// listen returns a listener on 127.0.0.1 closed at the end of the test.
func listen(t *testing.T) net.Listener {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	return ln
}

// serveConns runs handle for each connection accepted on ln until the test
// ends, and waits for the handlers at cleanup.
func serveConns(t *testing.T, ln net.Listener, handle func(net.Conn)) {
	var wg sync.WaitGroup
	var mu sync.Mutex
	conns := map[net.Conn]bool{}
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			conns[c] = true
			mu.Unlock()
			wg.Add(1)
			go func() {
				defer wg.Done()
				defer c.Close()
				handle(c)
			}()
		}
	}()
	t.Cleanup(func() {
		ln.Close()
		mu.Lock()
		for c := range conns {
			c.Close()
		}
		mu.Unlock()
		wg.Wait()
	})
}

// startProxy starts a proxy in front of target, closed at the end of the
// test; logs go to the test log.
func startProxy(t *testing.T, target string, rtt time.Duration) *Proxy {
	t.Helper()
	p, err := Start(Config{Target: target, RTT: rtt, Logf: t.Logf})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := p.Close(); err != nil {
			t.Errorf("Close: %v", err)
		}
	})
	return p
}

// dial connects to addr with a deadline that bounds the whole test's use
// of the connection.
func dial(t *testing.T, addr net.Addr, limit time.Duration) *net.TCPConn {
	t.Helper()
	c, err := net.DialTimeout("tcp", addr.String(), 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	c.SetDeadline(time.Now().Add(limit))
	return c.(*net.TCPConn)
}

// rpcHandler answers every record whose msg_type is CALL with a reply
// carrying the same xid and no results, in order. It ignores other records.
func rpcHandler(c net.Conn) {
	for {
		rec, err := readRecord(c, 4<<20)
		if err != nil {
			return
		}
		if len(rec) < 8 || binary.BigEndian.Uint32(rec[4:]) != msgCall {
			continue
		}
		if _, err := c.Write(frame(replyBody(binary.BigEndian.Uint32(rec), nil))); err != nil {
			return
		}
	}
}

// replyXID reads one record and returns its xid, checking it is a reply.
func replyXID(r io.Reader) (uint32, error) {
	rec, err := readRecord(r, 1<<20)
	if err != nil {
		return 0, err
	}
	if len(rec) < 8 || binary.BigEndian.Uint32(rec[4:]) != msgReply {
		return 0, errors.New("not a reply")
	}
	return binary.BigEndian.Uint32(rec), nil
}
