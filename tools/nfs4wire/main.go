// Command nfs4wire turns a packet capture of NFSv4.1 traffic into the test
// vectors of internal/nfs4 (testdata/wire): the COMPOUND (and CB_COMPOUND)
// calls and replies, as the bytes after their RPC headers, each with the
// values tshark's independent dissector finds in it, which the tests
// compare with what our decoder finds.
//
//	go run ./tools/nfs4wire -port 21590 capture.pcapng > internal/nfs4/testdata/wire/NAME.txt
//
// It keeps the first call of every distinct sequence of operations, and
// the first of every distinct reply to it, with their partners. tshark
// must be installed; see internal/nfs4/testdata/wire/README.md for how the
// checked-in capture was made.
package main

import (
	"bufio"
	"encoding/binary"
	"encoding/hex"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"sort"
	"strconv"
	"strings"
)

// Fields are the dissector's fields recorded per message.
var Fields = []string{
	"nfs.opcode", "nfs.nfsstat4", "nfs.minorversion", "nfs.clientid", "nfs.seqid", "nfs.slotid",
	"nfs.high_slotid", "nfs.target_high_slotid", "nfs.session_id4", "nfs.stateid.seqid",
	"nfs.stateid.other", "nfs.offset4", "nfs.count4", "nfs.length4", "nfs.fattr4.size",
	"nfs.fattr4.fileid", "nfs.fattr4_owner", "nfs.fattr4_owner_group", "nfs.fattr4.numlinks",
	"nfs.fattr4.space_used", "nfs.fattr4.mounted_on_fileid", "nfs.fattr4.lease_time",
	"nfs.fattr4.maxread", "nfs.fattr4.maxwrite", "nfs.changeid4", "nfs.changeid4.before",
	"nfs.changeid4.after", "nfs.mode", "nfs.maxreqsize4", "nfs.maxrespsize4", "nfs.maxops4",
	"nfs.maxreqs4", "nfs.open4.share_access", "nfs.open4.share_deny", "nfs.open.claim_type",
	"nfs.entry_name", "nfs.cookie4", "nfs.stable_how4", "nfs.exchange_id.call_flags",
	"nfs.exchange_id.reply_flags", "nfs.majorid4", "nfs.locktype4", "nfs.nfstime4.seconds",
	"nfs.fhandle",
}

type message struct {
	frame  int
	server bool // sent by the server
	reply  bool
	cb     bool // the callback program
	xid    uint32
	body   []byte
	fields map[string]string
}

func main() {
	port := flag.Int("port", 2049, "the NFS server's TCP port")
	flag.Parse()
	if flag.NArg() != 1 {
		fmt.Fprintln(os.Stderr, "usage: nfs4wire -port N capture.pcapng")
		os.Exit(2)
	}
	msgs, err := records(flag.Arg(0), *port)
	if err == nil {
		err = dissect(flag.Arg(0), *port, msgs)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "nfs4wire:", err)
		os.Exit(1)
	}
	write(os.Stdout, pick(msgs))
}

// tshark runs tshark and returns its output lines.
func tshark(args ...string) ([]string, error) {
	out, err := exec.Command("tshark", args...).Output()
	if err != nil {
		return nil, fmt.Errorf("tshark %s: %w", strings.Join(args, " "), err)
	}
	return strings.Split(strings.TrimRight(string(out), "\n"), "\n"), nil
}

// records reassembles each TCP direction and splits it into RPC records,
// each attributed to the frame that completes it.
func records(pcap string, port int) ([]*message, error) {
	lines, err := tshark("-r", pcap, "-Y", fmt.Sprintf("tcp.port==%d && tcp.len>0", port), "-T", "fields",
		"-e", "frame.number", "-e", "tcp.stream", "-e", "tcp.srcport", "-e", "tcp.seq", "-e", "tcp.payload")
	if err != nil {
		return nil, err
	}
	type flow struct {
		buf    []byte
		next   int
		frames []int // frame of each buffered byte's segment end
	}
	flows := map[string]*flow{}
	var msgs []*message
	for _, l := range lines {
		f := strings.Split(l, "\t")
		if len(f) != 5 {
			continue
		}
		frame, _ := strconv.Atoi(f[0])
		seq, _ := strconv.Atoi(f[3])
		payload, err := hex.DecodeString(f[4])
		if err != nil {
			return nil, fmt.Errorf("frame %d: %w", frame, err)
		}
		fromServer := f[2] == strconv.Itoa(port)
		key := f[1] + "/" + strconv.FormatBool(fromServer)
		fl := flows[key]
		if fl == nil {
			fl = &flow{next: seq}
			flows[key] = fl
		}
		if seq != fl.next { // a retransmission or a gap: skip it
			continue
		}
		fl.next += len(payload)
		fl.buf = append(fl.buf, payload...)
		for {
			rec, n, ok := record(fl.buf)
			if !ok {
				break
			}
			fl.buf = fl.buf[n:]
			if m := parseRPC(rec, fromServer); m != nil {
				m.frame, m.server = frame, fromServer
				msgs = append(msgs, m)
			}
		}
	}
	return msgs, nil
}

// record returns the first complete record of b and the bytes it took.
func record(b []byte) ([]byte, int, bool) {
	var rec []byte
	off := 0
	for {
		if len(b)-off < 4 {
			return nil, 0, false
		}
		mark := binary.BigEndian.Uint32(b[off:])
		n := int(mark & 0x7fffffff)
		if len(b)-off-4 < n {
			return nil, 0, false
		}
		rec = append(rec, b[off+4:off+4+n]...)
		off += 4 + n
		if mark&0x80000000 != 0 {
			return rec, off, true
		}
	}
}

// parseRPC strips the RPC header of a COMPOUND call or an accepted reply;
// other messages (NULL, other programs) are nil. A reply's program is not
// in it: replies are matched with calls by xid in pick.
func parseRPC(rec []byte, fromServer bool) *message {
	u32 := func() uint32 {
		if len(rec) < 4 {
			rec = nil
			return 0
		}
		v := binary.BigEndian.Uint32(rec)
		rec = rec[4:]
		return v
	}
	opaque := func() {
		n := int(u32())
		n = (n + 3) &^ 3
		if n > len(rec) {
			rec = nil
			return
		}
		rec = rec[n:]
	}
	xid, mtype := u32(), u32()
	switch mtype {
	case 0: // call
		rpcvers, prog, vers, proc := u32(), u32(), u32(), u32()
		u32()
		opaque() // credential
		u32()
		opaque() // verifier
		if rec == nil || rpcvers != 2 || proc != 1 {
			return nil
		}
		switch {
		case prog == 100003 && vers == 4:
			return &message{xid: xid, body: rec}
		case vers == 1 && fromServer: // the callback program, on the back channel
			return &message{xid: xid, cb: true, body: rec}
		}
	case 1: // reply
		if u32() != 0 { // MSG_ACCEPTED
			return nil
		}
		u32()
		opaque()                      // verifier
		if u32() != 0 || rec == nil { // SUCCESS
			return nil
		}
		return &message{xid: xid, reply: true, body: rec}
	}
	return nil
}

// dissect adds tshark's fields to each message, by frame; a frame that
// holds more than one RPC message gets none (its fields would be mixed).
func dissect(pcap string, port int, msgs []*message) error {
	args := []string{"-r", pcap, "-d", fmt.Sprintf("tcp.port==%d,rpc", port), "-Y", "rpc", "-T", "fields",
		"-E", "occurrence=a", "-E", "aggregator=,", "-E", "separator=\t", "-e", "frame.number", "-e", "rpc.xid"}
	for _, f := range Fields {
		args = append(args, "-e", f)
	}
	lines, err := tshark(args...)
	if err != nil {
		return err
	}
	byFrame := map[int]map[string]string{}
	for _, l := range lines {
		f := strings.Split(l, "\t")
		if len(f) != 2+len(Fields) || strings.Contains(f[1], ",") {
			continue
		}
		frame, _ := strconv.Atoi(f[0])
		m := map[string]string{}
		for i, name := range Fields {
			if f[2+i] != "" {
				m[name] = f[2+i]
			}
		}
		byFrame[frame] = m
	}
	for _, m := range msgs {
		m.fields = byFrame[m.frame]
	}
	return nil
}

// pick keeps the first call of each distinct operation sequence and the
// first reply of each distinct status sequence to it, with their partners.
func pick(msgs []*message) []*message {
	type key struct {
		server bool
		xid    uint32
	}
	calls := map[key]*message{}
	keep := map[*message]bool{}
	seen := map[string]bool{}
	for _, m := range msgs {
		if !m.reply {
			calls[key{m.server, m.xid}] = m
			continue
		}
		c := calls[key{!m.server, m.xid}] // the call came the other way
		if c == nil || c.fields == nil || m.fields == nil {
			continue
		}
		ck := fmt.Sprintf("cb=%v ops=%s", c.cb, c.fields["nfs.opcode"])
		rk := ck + " status=" + m.fields["nfs.nfsstat4"]
		if !seen[ck] || !seen[rk] {
			seen[ck], seen[rk] = true, true
			keep[c], keep[m] = true, true
		}
	}
	var out []*message
	for _, m := range msgs {
		if keep[m] {
			m.cb = m.cb || m.reply && calls[key{!m.server, m.xid}].cb
			out = append(out, m)
		}
	}
	return out
}

func write(f *os.File, msgs []*message) {
	w := bufio.NewWriter(f)
	defer w.Flush()
	fmt.Fprintln(w, "# NFSv4.1 messages after their RPC headers, written by tools/nfs4wire; see README.md.")
	for _, m := range msgs {
		kind := "call"
		if m.reply {
			kind = "reply"
		}
		if m.cb {
			kind = "cb-" + kind
		}
		fmt.Fprintf(w, "\nmsg %s frame=%d xid=%#08x\n", kind, m.frame, m.xid)
		names := make([]string, 0, len(m.fields))
		for n := range m.fields {
			names = append(names, n)
		}
		sort.Strings(names)
		for _, n := range names {
			fmt.Fprintf(w, "field %s %s\n", n, m.fields[n])
		}
		for b := m.body; len(b) > 0; {
			n := min(len(b), 32)
			fmt.Fprintf(w, "body %s\n", hex.EncodeToString(b[:n]))
			b = b[n:]
		}
		fmt.Fprintln(w, "end")
	}
}
