package proxy

import (
	"encoding/binary"

	"hushfs/internal/nfs3"
	"hushfs/internal/nfs4"
)

// Constants of ONC RPC (RFC 5531) that the parser needs. They are repeated
// here rather than imported so that the proxy depends on nothing but the
// wire format it observes.
const (
	msgCall      = 0
	msgReply     = 1
	rpcVersion   = 2
	maxAuthBytes = 400 // opaque_auth body limit (RFC 5531 §8.2)
	maxNFS3FH    = 64  // NFS3_FHSIZE (RFC 1813 §2.4)

	lastFragment = 1 << 31 // record mark flag (RFC 5531 §11)
)

// sink receives what the parsers recognise. Each method is called at most
// once per record, so a sink may take a lock per call.
type sink interface {
	call(k ProcKey)
	stable(how uint32)
	reply()
	// back counts a record going the other way: a call from the target
	// (callSide false) or a client's reply to one (callSide true), as
	// NFSv4.1's callbacks go on the client's own connection.
	back(callSide bool)
	unparsed(callSide bool)
	// compound receives the operations of an NFSv4 COMPOUND call, as far
	// as they decoded; complete is false when the list could not be read
	// to its end (cut short by maxCompoundArgs, or malformed).
	compound(ops []nfs4.Argop, complete bool)
}

// streamParser follows one direction of a record-marked RPC byte stream. It
// is fed the bytes exactly as they are read, however they are split, and
// holds nothing between feeds but a partial 4-byte word: record bodies
// (WRITE data, say) are skipped by arithmetic, never copied.
type streamParser struct {
	callSide bool // parse calls (client→server) rather than replies
	out      sink

	// Record marking.
	inFragment bool   // false: reading a record mark
	fragLeft   uint32 // body bytes left in the current fragment
	last       bool   // the current fragment ends its record
	markAcc    uint32
	markN      int

	msg msgParser
}

func newStreamParser(callSide bool, out sink) *streamParser {
	s := &streamParser{callSide: callSide, out: out}
	s.msg.comp = &compoundDecoder{}
	s.msg.reset(callSide)
	return s
}

// feed consumes the next bytes of the stream.
func (s *streamParser) feed(b []byte) {
	for len(b) > 0 {
		if !s.inFragment {
			if s.markN == 0 && len(b) >= 4 {
				s.markAcc = binary.BigEndian.Uint32(b)
				s.markN = 4
				b = b[4:]
			}
			for s.markN < 4 && len(b) > 0 {
				s.markAcc = s.markAcc<<8 | uint32(b[0])
				s.markN++
				b = b[1:]
			}
			if s.markN < 4 {
				return
			}
			s.inFragment = true
			s.last = s.markAcc&lastFragment != 0
			s.fragLeft = s.markAcc &^ lastFragment
			s.markAcc, s.markN = 0, 0
			if s.fragLeft == 0 {
				s.endFragment()
			}
			continue
		}
		n := len(b)
		if uint64(n) > uint64(s.fragLeft) {
			n = int(s.fragLeft)
		}
		s.msg.feed(b[:n], s.out)
		s.fragLeft -= uint32(n)
		b = b[n:]
		if s.fragLeft == 0 {
			s.endFragment()
		}
	}
}

func (s *streamParser) endFragment() {
	s.inFragment = false
	if s.last {
		s.msg.endRecord(s.out)
		s.msg.reset(s.callSide)
	}
}

// Steps of the message parser: each names the next XDR word wanted. The
// steps marked "virtual" consume nothing; they run once the bytes skipped
// before them have gone by.
type step uint8

const (
	stXID step = iota
	stMsgType
	stRPCVers
	stProg
	stVers
	stProc
	stCredFlavor
	stCredLen
	stVerfFlavor
	stVerfLen
	stArgs // virtual: the call header is complete
	stFHLen
	stStable
	stCompound // gathering an NFSv4 COMPOUND's arguments (compound.go)
	stDone     // nothing more is wanted from this record
)

// msgParser extracts the fields of interest from the body of one record.
type msgParser struct {
	callSide bool
	step     step
	acc      uint32 // partial word
	accN     int
	skip     uint64 // bytes to pass over before the next step
	key      ProcKey
	ok       bool // the record was recognised (call header or reply)
	bad      bool // the record is not what this direction should carry

	// comp gathers and decodes COMPOUND arguments; kept across records
	// (its buffer is reused).
	comp *compoundDecoder
}

func (m *msgParser) reset(callSide bool) {
	comp := m.comp
	*m = msgParser{callSide: callSide, comp: comp}
	if comp != nil {
		comp.reset()
	}
}

func (m *msgParser) feed(b []byte, out sink) {
	for len(b) > 0 && m.step != stDone {
		if m.step == stCompound {
			m.comp.gather(b)
			return
		}
		if m.skip > 0 {
			n := uint64(len(b))
			if n > m.skip {
				n = m.skip
			}
			m.skip -= n
			b = b[n:]
			m.virtual(out)
			continue
		}
		if m.accN == 0 && len(b) >= 4 {
			m.acc = binary.BigEndian.Uint32(b)
			m.accN = 4
			b = b[4:]
		}
		for m.accN < 4 && len(b) > 0 {
			m.acc = m.acc<<8 | uint32(b[0])
			m.accN++
			b = b[1:]
		}
		if m.accN < 4 {
			return
		}
		w := m.acc
		m.acc, m.accN = 0, 0
		m.word(w, out)
		m.virtual(out)
	}
}

// padded is n rounded up to the XDR unit of 4 bytes.
func padded(n uint32) uint64 { return (uint64(n) + 3) &^ 3 }

// word handles the word wanted by the current step.
func (m *msgParser) word(w uint32, out sink) {
	switch m.step {
	case stXID:
		m.step = stMsgType
	case stMsgType:
		if !m.callSide {
			switch w {
			case msgReply:
				m.ok = true
				out.reply()
			case msgCall:
				m.ok = true
				out.back(false)
			default:
				m.bad = true
			}
			m.step = stDone
			return
		}
		if w != msgCall {
			if w == msgReply {
				m.ok = true
				out.back(true)
			} else {
				m.bad = true
			}
			m.step = stDone
			return
		}
		m.step = stRPCVers
	case stRPCVers:
		if w != rpcVersion {
			m.bad = true
			m.step = stDone
			return
		}
		m.step = stProg
	case stProg:
		m.key.Prog = w
		m.step = stVers
	case stVers:
		m.key.Vers = w
		m.step = stProc
	case stProc:
		m.key.Proc = w
		m.step = stCredFlavor
	case stCredFlavor:
		m.step = stCredLen
	case stCredLen, stVerfLen:
		if w > maxAuthBytes {
			m.bad = true
			m.step = stDone
			return
		}
		m.skip = padded(w)
		if m.step == stCredLen {
			m.step = stVerfFlavor
		} else {
			m.step = stArgs
		}
	case stVerfFlavor:
		m.step = stVerfLen
	case stFHLen:
		if w > maxNFS3FH {
			// Not a valid WRITE; the call itself was already counted.
			m.step = stDone
			return
		}
		m.skip = padded(w) + 8 + 4 // fh body, offset, count
		m.step = stStable
	case stStable:
		out.stable(w)
		m.step = stDone
	}
}

// virtual runs a step that consumes no bytes, once nothing is left to skip.
func (m *msgParser) virtual(out sink) {
	if m.skip > 0 || m.step != stArgs {
		return
	}
	m.ok = true
	out.call(m.key)
	switch {
	case m.key == (ProcKey{nfs3.Program, nfs3.Version, nfs3.ProcWrite}):
		m.step = stFHLen
	case m.key == nfs4Compound && m.comp != nil:
		m.step = stCompound
	default:
		m.step = stDone
	}
}

// endRecord reports a record that was not recognised. A call whose header
// parsed but whose WRITE arguments were cut short counts as a call only.
func (m *msgParser) endRecord(out sink) {
	if m.bad || !m.ok {
		out.unparsed(m.callSide)
	}
	if m.step == stCompound {
		m.comp.decode(out)
	}
}
