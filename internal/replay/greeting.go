package replay

import (
	"encoding/binary"
	"io"
	"slices"

	"github.com/jackc/pgx/v5/pgproto3"
)

// Greeting is what a server said to a client between its StartupMessage and its first
// ReadyForQuery that a second client of the same session must hear: everything but the
// authentication exchange (done) and notices (delivered to the first client).
type Greeting struct {
	// NegotiateProtocolVersion is the server's whole message ('v', length, body) when it
	// answered the StartupMessage with one (a minor version lower than requested, or unknown
	// protocol options), as Recorder captured it; nil when it sent none.
	NegotiateProtocolVersion []byte
	ParameterStatuses        map[string]string
	PID                      uint32
	// SecretKey is BackendKeyData's key: 4 bytes with protocol 3.0, up to 256 with 3.2.
	SecretKey []byte
	TxStatus  byte // ReadyForQuery's transaction status: 'I' after a startup
}

// Encode returns the messages in the order a server sends them: NegotiateProtocolVersion (if
// any), AuthenticationOk, the ParameterStatus messages (sorted by name), BackendKeyData,
// ReadyForQuery.
func (g *Greeting) Encode() []byte {
	var b []byte
	b = append(b, g.NegotiateProtocolVersion...)
	b = must((&pgproto3.AuthenticationOk{}).Encode(b))
	names := make([]string, 0, len(g.ParameterStatuses))
	for k := range g.ParameterStatuses {
		names = append(names, k)
	}
	slices.Sort(names)
	for _, k := range names {
		b = must((&pgproto3.ParameterStatus{Name: k, Value: g.ParameterStatuses[k]}).Encode(b))
	}
	b = must((&pgproto3.BackendKeyData{ProcessID: g.PID, SecretKey: g.SecretKey}).Encode(b))
	tx := g.TxStatus
	if tx == 0 {
		tx = 'I'
	}
	return must((&pgproto3.ReadyForQuery{TxStatus: tx}).Encode(b))
}

// must panics on an encoding error: these messages are far below the 1 GB a message may have,
// the only error pgproto3 reports for them.
func must(b []byte, err error) []byte {
	if err != nil {
		panic("replay: " + err.Error())
	}
	return b
}

// maxNegotiate bounds the NegotiateProtocolVersion kept: libpq allows 2000 bytes for a message
// before authentication (pqPacketSend's limits, and the negotiator's authObserver enforces them).
const maxNegotiate = 2000

// Recorder passes a server's message stream through, from the first byte after the
// negotiation of the transport up to the first ReadyForQuery, and keeps the
// NegotiateProtocolVersion message it holds, if any. Give it to a pgconn.Config.BuildFrontend as
// the reader: it buffers nothing, so the frontend sees the same bytes.
type Recorder struct {
	r    io.Reader
	hdr  [5]byte
	have int    // header bytes of the current message
	left int    // body bytes of the current message still to pass
	keep bool   // the current message is a NegotiateProtocolVersion being kept
	cur  []byte // that message so far
	npv  []byte
	done bool // ReadyForQuery passed: nothing more is watched
	last bool // the current message is the ReadyForQuery
}

// NewRecorder returns a Recorder reading from r.
func NewRecorder(r io.Reader) *Recorder { return &Recorder{r: r} }

// NegotiateProtocolVersion returns the message seen ('v', length, body), or nil.
func (rc *Recorder) NegotiateProtocolVersion() []byte { return rc.npv }

func (rc *Recorder) Read(p []byte) (int, error) {
	n, err := rc.r.Read(p)
	if !rc.done {
		rc.observe(p[:n])
	}
	return n, err
}

func (rc *Recorder) observe(p []byte) {
	for len(p) > 0 && !rc.done {
		if rc.left > 0 {
			k := min(rc.left, len(p))
			if rc.keep {
				rc.cur = append(rc.cur, p[:k]...)
			}
			rc.left -= k
			p = p[k:]
			if rc.left == 0 {
				rc.endMessage()
			}
			continue
		}
		k := min(5-rc.have, len(p))
		copy(rc.hdr[rc.have:], p[:k])
		rc.have += k
		p = p[k:]
		if rc.have < 5 {
			continue
		}
		rc.have = 0
		length := int(binary.BigEndian.Uint32(rc.hdr[1:]))
		if length < 4 {
			rc.done = true // not a message stream: the frontend reports it
			return
		}
		rc.left = length - 4
		rc.keep = rc.hdr[0] == 'v' && rc.npv == nil && length+1 <= maxNegotiate
		rc.last = rc.hdr[0] == 'Z'
		if rc.keep {
			rc.cur = append(make([]byte, 0, length+1), rc.hdr[:]...)
		}
		if rc.left == 0 {
			rc.endMessage()
		}
	}
}

func (rc *Recorder) endMessage() {
	if rc.keep {
		rc.npv, rc.cur, rc.keep = rc.cur, nil, false
	}
	if rc.last {
		rc.done = true
	}
}
