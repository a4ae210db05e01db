package harness

import (
	"encoding/binary"
	"fmt"
	"io"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5/pgproto3"
)

// FaultKind is what a faulty server (FaultServer) or a faulty middlebox (FaultProxy) does at a
// step of the connection instead of, or on top of, the correct answer. What each kind puts on
// the wire:
//
//   - FaultNone: nothing unusual; the correct answer.
//   - FaultClose: no answer; the connection is closed with a FIN (shutdown of the sending
//     side). Whatever the client still sends is read and discarded until it closes its side,
//     so that unread data never turns the FIN into an RST.
//   - FaultReset: no answer; the connection is reset: SO_LINGER 0, then close, so the kernel
//     sends an RST and the client's next read or write fails with ECONNRESET (or EPIPE).
//   - FaultStall: no answer, ever: the socket stays open, and what the client sends is read
//     and discarded, until the client closes it or the server (proxy) is closed.
//   - FaultGarbage: the single byte 'X' (0x58, valid at no step) instead of the answer, then
//     a close as FaultClose.
//   - FaultErrorResponse: an ErrorResponse instead of the answer (severity FATAL, code
//     Fault.SQLState, message FaultMessage), then a close as FaultClose, as a PostgreSQL
//     backend that reports a FATAL error and exits. The message formats are in the
//     PostgreSQL documentation, "Message Formats" (protocol-message-formats.html) and
//     "Error and Notice Message Fields" (protocol-error-fields.html).
//   - FaultExtraBytes: the correct answer immediately followed by Fault.Extra in the same
//     write (one write system call: on loopback the client receives both in one read); then
//     the connection goes on as if only the answer had been sent.
//   - FaultTrickle: the correct answer, one byte per write, each byte written Fault.Delay after
//     the previous one (the first byte too is written Fault.Delay after the answer was due),
//     so an answer of n bytes takes at least n×Delay.
//   - FaultCorrupt: the correct GSS token with its last byte inverted (XOR 0xff). The last byte
//     of an AP-REP is in the checksum of its encrypted part (the EncAPRepPart), and the last
//     byte of an RFC 4121 wrap token is in its encrypted data or checksum, so the receiver's
//     integrity check fails (for an AP-REP: the client's check of the server, mutual
//     authentication).
//
// The kinds a step admits depend on the type: see FaultServer and FaultProxy.
type FaultKind int

// The fault kinds; see FaultKind.
const (
	FaultNone FaultKind = iota
	FaultClose
	FaultReset
	FaultStall
	FaultGarbage
	FaultErrorResponse
	FaultExtraBytes
	FaultTrickle
	FaultCorrupt
)

var faultKindNames = [...]string{
	FaultNone:          "none",
	FaultClose:         "close",
	FaultReset:         "reset",
	FaultStall:         "stall",
	FaultGarbage:       "garbage",
	FaultErrorResponse: "error response",
	FaultExtraBytes:    "extra bytes",
	FaultTrickle:       "trickle",
	FaultCorrupt:       "corrupt",
}

// String returns the kind's name as in the FaultKind documentation, for example "extra bytes".
func (k FaultKind) String() string {
	if k >= 0 && int(k) < len(faultKindNames) {
		return faultKindNames[k]
	}
	return fmt.Sprintf("FaultKind(%d)", int(k))
}

// FaultStep is the point of a connection a fault applies to. A fault applies at most once per
// connection, at the first time the connection reaches its step. The protocol is described in
// the PostgreSQL documentation, "Message Flow" (protocol-flow.html: "SSL Session Encryption",
// "GSSAPI Session Encryption", "Start-up"), and implemented in the server's
// src/backend/postmaster/postmaster.c (ProcessStartupPacket, PostgreSQL 15),
// src/backend/libpq/be-secure-gssapi.c and libpq's src/interfaces/libpq/fe-connect.c and
// fe-secure-gssapi.c.
type FaultStep int

// The steps; "the answer" of each is what the fault replaces or alters.
const (
	// StepSSLAnswer: the server's one-byte answer to an SSLRequest ('S' or 'N').
	StepSSLAnswer FaultStep = iota + 1
	// StepGSSENCAnswer: the server's one-byte answer to a GSSENCRequest ('G' or 'N').
	StepGSSENCAnswer
	// StepTLSHandshake: after 'S', the server's side of the TLS handshake: its bytes from the
	// first one until the client's first application_data record (in TLS 1.3 the one that
	// carries the client's Finished). That includes a HelloRetryRequest and the flight after
	// it: PostgreSQL 15 offers only the curve of ssl_ecdh_curve (by default prime256v1, P-256)
	// for the key exchange, so libpq's and Go's first ClientHello, with X25519 key shares,
	// both get one (src/backend/libpq/be-secure-openssl.c, initialize_ecdh). A terminal fault
	// (close, reset, stall, garbage, error response) happens once the client's ClientHello
	// (for a FaultServer: its first bytes) has arrived.
	StepTLSHandshake
	// StepAPRep: after 'G', the server's first GSS context token (Int32 length, then the
	// token), in Kerberos the AP-REP that completes the context and proves the server's
	// identity to the client.
	StepAPRep
	// StepWrapToken: the server's first wrap token after the context (Int32 length, then an
	// RFC 4121 wrap token: 0x05 0x04 ...), normally carrying the answer to the StartupMessage.
	StepWrapToken
	// StepStartup: the server's answer to the StartupMessage in the clear or inside TLS:
	// authentication through ReadyForQuery. A terminal fault replaces the first message of
	// the answer; trickle covers every message up to ReadyForQuery; extra bytes follow that
	// ReadyForQuery.
	StepStartup
	// StepAfterReady: after the startup's ReadyForQuery, the answer to the client's first
	// message (typically a Query, or a Parse of the extended protocol). A terminal fault
	// happens when that message arrives, in place of executing it; trickle covers every byte
	// the server sends from then on; extra bytes follow the ReadyForQuery that ends the
	// answer.
	StepAfterReady
)

var faultStepNames = [...]string{
	StepSSLAnswer:    "SSLRequest answer",
	StepGSSENCAnswer: "GSSENCRequest answer",
	StepTLSHandshake: "TLS handshake",
	StepAPRep:        "AP-REP",
	StepWrapToken:    "first wrap token",
	StepStartup:      "startup",
	StepAfterReady:   "after ReadyForQuery",
}

// String returns the step's name, for example "AP-REP".
func (s FaultStep) String() string {
	if s > 0 && int(s) < len(faultStepNames) {
		return faultStepNames[s]
	}
	return fmt.Sprintf("FaultStep(%d)", int(s))
}

// FaultMessage is the message of every ErrorResponse a fault sends.
const FaultMessage = "fault injected by the pgconnector test harness"

// garbageByte is what FaultGarbage sends: no answer byte ('S', 'N', 'G', 'E'), no TLS record
// type, no backend message type, and as the first byte of a GSS packet length a length far
// over any limit.
const garbageByte = 'X'

// defaultTrickleDelay is the delay of FaultTrickle when Fault.Delay is 0.
const defaultTrickleDelay = time.Millisecond

// Fault is one fault at one step. The zero value is no fault.
type Fault struct {
	Kind FaultKind
	Step FaultStep
	// Count limits the fault to the first Count connections that reach Step (in the order
	// they reach it); later ones get the correct answer, so that a test sees "the first
	// connect fails, the next one succeeds". 0 means every connection.
	Count int
	// SQLState is the code of FaultErrorResponse's ErrorResponse: five digits or upper case
	// letters, for example "53300" (too_many_connections), "57P03" (cannot_connect_now),
	// "28000" (invalid_authorization_specification), "28P01" (invalid_password); see the
	// PostgreSQL documentation, "PostgreSQL Error Codes" (errcodes-appendix.html). Only for
	// that kind.
	SQLState string
	// Extra is what FaultExtraBytes sends after the answer; nil means ForgedStartup(). Only
	// for that kind.
	Extra []byte
	// Delay is FaultTrickle's delay before each byte; 0 means 1 ms. Only for that kind. (A
	// Close of the server or proxy waits for a trickle in progress for up to one Delay.)
	Delay time.Duration
}

// String describes the fault, for example "error response 53300 at startup (first
// connection)".
func (f Fault) String() string {
	if f.Kind == FaultNone {
		return "no fault"
	}
	s := f.Kind.String()
	switch f.Kind {
	case FaultErrorResponse:
		s += " " + f.SQLState
	case FaultTrickle:
		s += " " + f.delay().String()
	case FaultExtraBytes:
		s += fmt.Sprintf(" (%d bytes)", len(f.extra()))
	}
	s += " at " + f.Step.String()
	switch {
	case f.Count == 1:
		s += " (first connection)"
	case f.Count > 1:
		s += fmt.Sprintf(" (first %d connections)", f.Count)
	}
	return s
}

func (f Fault) delay() time.Duration {
	if f.Delay == 0 {
		return defaultTrickleDelay
	}
	return f.Delay
}

func (f Fault) extra() []byte {
	if f.Extra == nil {
		return ForgedStartup()
	}
	return f.Extra
}

// terminal reports whether the fault ends the connection (close, reset, stall, garbage, error
// response).
func (f Fault) terminal() bool {
	switch f.Kind {
	case FaultClose, FaultReset, FaultStall, FaultGarbage, FaultErrorResponse:
		return true
	}
	return false
}

// faultMatrix is the (step, kinds) a type supports.
type faultMatrix map[FaultStep][]FaultKind

var terminalKinds = []FaultKind{FaultClose, FaultReset, FaultStall, FaultGarbage, FaultErrorResponse}

func kinds(extra ...FaultKind) []FaultKind {
	return append(append([]FaultKind(nil), terminalKinds...), extra...)
}

func (m faultMatrix) supports(step FaultStep, kind FaultKind) bool {
	for _, k := range m[step] {
		if k == kind {
			return true
		}
	}
	return false
}

// check validates f for a type ("fault server", "fault proxy") with matrix m.
func (f Fault) check(who string, m faultMatrix) error {
	if f.Kind < FaultNone || int(f.Kind) >= len(faultKindNames) {
		return fmt.Errorf("harness: %s: unknown fault kind %d", who, int(f.Kind))
	}
	if f.Count < 0 {
		return fmt.Errorf("harness: %s: negative fault Count %d", who, f.Count)
	}
	if f.Kind == FaultNone {
		// A step is harmless ("no fault at this step"); anything else is a mistake.
		if f.Count != 0 || f.SQLState != "" || f.Extra != nil || f.Delay != 0 {
			return fmt.Errorf("harness: %s: a fault of kind none has no count or parameters", who)
		}
		return nil
	}
	if f.Step <= 0 || int(f.Step) >= len(faultStepNames) {
		return fmt.Errorf("harness: %s: fault %s without a valid step (%d)", who, f.Kind, int(f.Step))
	}
	if !m.supports(f.Step, f.Kind) {
		return fmt.Errorf("harness: %s does not support the fault %s at %s", who, f.Kind, f.Step)
	}
	if (f.SQLState != "") != (f.Kind == FaultErrorResponse) {
		return fmt.Errorf("harness: %s: SQLState is for an error response fault (and required by it)", who)
	}
	if f.Kind == FaultErrorResponse && !validSQLState(f.SQLState) {
		return fmt.Errorf("harness: %s: invalid SQLSTATE %q (five digits or upper case letters)", who, f.SQLState)
	}
	if f.Extra != nil && f.Kind != FaultExtraBytes {
		return fmt.Errorf("harness: %s: Extra is for an extra bytes fault", who)
	}
	if f.Delay != 0 && f.Kind != FaultTrickle {
		return fmt.Errorf("harness: %s: Delay is for a trickle fault", who)
	}
	if f.Delay < 0 {
		return fmt.Errorf("harness: %s: negative trickle Delay %v", who, f.Delay)
	}
	return nil
}

func validSQLState(s string) bool {
	if len(s) != 5 {
		return false
	}
	for _, c := range []byte(s) {
		if !(c >= '0' && c <= '9' || c >= 'A' && c <= 'Z') {
			return false
		}
	}
	return true
}

// injector decides, connection by connection, whether the fault applies.
type injector struct {
	f       Fault
	applied atomic.Int64
}

// claim reports whether the fault applies at step to a connection reaching it now, and if so
// counts it. Call it once per connection and step.
func (in *injector) claim(step FaultStep) bool {
	if in.f.Kind == FaultNone || in.f.Step != step {
		return false
	}
	for {
		n := in.applied.Load()
		if in.f.Count > 0 && n >= int64(in.f.Count) {
			return false
		}
		if in.applied.CompareAndSwap(n, n+1) {
			return true
		}
	}
}

// Packet names a client's untyped first packet, as FaultStats.FirstPackets lists them.
type Packet string

// The packets a client can open a connection with.
const (
	PacketSSLRequest     Packet = "SSLRequest"
	PacketGSSENCRequest  Packet = "GSSENCRequest"
	PacketStartupMessage Packet = "StartupMessage"
	PacketCancelRequest  Packet = "CancelRequest"
	// PacketOther is anything else: an impossible length or an unknown code, for example a
	// TLS ClientHello sent directly (libpq's sslnegotiation=direct).
	PacketOther Packet = "other"
)

// FaultStats counts what clients sent to a FaultServer or through a FaultProxy. Each packet is
// counted when it has been read, before it is answered or forwarded.
type FaultStats struct {
	Connections    int // TCP connections accepted
	SSLRequests    int // SSLRequest packets
	GSSENCRequests int // GSSENCRequest packets
	// StartupMessages counts StartupMessages: for a FaultServer every one, in the clear or
	// inside TLS; for a FaultProxy those in the clear only (it cannot see inside TLS or GSS
	// encryption).
	StartupMessages int
	CancelRequests  int // CancelRequest packets
	// Queries counts the statements a FaultServer was asked to run: Query messages (simple
	// protocol) and Execute messages (extended protocol). A FaultProxy leaves it 0.
	Queries int
	// Faults counts the connections the fault was applied to.
	Faults int
	// FirstPackets has one entry per accepted connection, in the order they were accepted:
	// the untyped packets the client opened it with, in order, for example [SSLRequest
	// StartupMessage] (libpq after 'N') or [GSSENCRequest] (then GSS encryption). As
	// StartupMessages, a FaultServer's list includes a StartupMessage inside TLS, a
	// FaultProxy's does not.
	FirstPackets [][]Packet
}

// faultCounters keeps a FaultStats for concurrent connections.
type faultCounters struct {
	mu sync.Mutex
	s  FaultStats
}

// connection counts a new connection and returns its index in FirstPackets.
func (c *faultCounters) connection() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.s.Connections++
	c.s.FirstPackets = append(c.s.FirstPackets, nil)
	return len(c.s.FirstPackets) - 1
}

// packet counts a first packet of connection id.
func (c *faultCounters) packet(id int, p Packet) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.s.FirstPackets[id] = append(c.s.FirstPackets[id], p)
	switch p {
	case PacketSSLRequest:
		c.s.SSLRequests++
	case PacketGSSENCRequest:
		c.s.GSSENCRequests++
	case PacketStartupMessage:
		c.s.StartupMessages++
	case PacketCancelRequest:
		c.s.CancelRequests++
	}
}

func (c *faultCounters) query() {
	c.mu.Lock()
	c.s.Queries++
	c.mu.Unlock()
}

func (c *faultCounters) snapshot(faults int64) FaultStats {
	c.mu.Lock()
	defer c.mu.Unlock()
	s := c.s
	s.Faults = int(faults)
	s.FirstPackets = make([][]Packet, len(c.s.FirstPackets))
	for i, ps := range c.s.FirstPackets {
		s.FirstPackets[i] = append([]Packet(nil), ps...)
	}
	return s
}

// readFirstPacket reads one untyped packet (Int32 length including itself, then the body)
// without reading past it. A length out of the server's bounds (8 to 10000 bytes, as
// ProcessStartupPacket) gives PacketOther with the four bytes read as pkt.
func readFirstPacket(r io.Reader) (kind Packet, pkt []byte, err error) {
	var hdr [4]byte
	if _, err := io.ReadFull(r, hdr[:]); err != nil {
		return "", nil, err
	}
	length := int(int32(binary.BigEndian.Uint32(hdr[:])))
	if length < 8 || length > maxStartupPacket {
		return PacketOther, hdr[:], nil
	}
	pkt = make([]byte, length)
	copy(pkt, hdr[:])
	if _, err := io.ReadFull(r, pkt[4:]); err != nil {
		return "", nil, err
	}
	code := binary.BigEndian.Uint32(pkt[4:8])
	switch {
	case length == 8 && code == codeSSLRequest:
		return PacketSSLRequest, pkt, nil
	case length == 8 && code == codeGSSENCRequest:
		return PacketGSSENCRequest, pkt, nil
	case code == codeCancelRequest && length >= 16 && length <= maxCancelRequest:
		return PacketCancelRequest, pkt, nil
	case code>>16 == 3:
		// Protocol 3.x: 3.0, or 3.2 of PostgreSQL 18 clients.
		return PacketStartupMessage, pkt, nil
	}
	return PacketOther, pkt, nil
}

// maxMessage bounds a backend message read whole: PostgreSQL's own limit on a message it
// receives, PQ_LARGE_MESSAGE_LIMIT (src/include/libpq/libpq.h), 1 GiB - 1.
const maxMessage = 1<<30 - 1

// readMessage reads one backend message (type, Int32 length including itself, body) whole.
// With an impossible length it returns the five bytes read and an error.
func readMessage(r io.Reader) ([]byte, error) {
	var hdr [5]byte
	if _, err := io.ReadFull(r, hdr[:]); err != nil {
		return nil, err
	}
	n := binary.BigEndian.Uint32(hdr[1:])
	if n < 4 || n > maxMessage {
		return hdr[:], fmt.Errorf("harness: backend message %q of length %d", hdr[0], n)
	}
	msg := make([]byte, 1+n)
	copy(msg, hdr[:])
	if _, err := io.ReadFull(r, msg[5:]); err != nil {
		return nil, err
	}
	return msg, nil
}

// startupParameters are the ParameterStatus messages of a FaultServer's startup answer and of
// ForgedStartup: what libpq and pgx expect to hear.
var startupParameters = [][2]string{
	{"server_version", "15.0"},
	{"client_encoding", "UTF8"},
	{"standard_conforming_strings", "on"},
	{"DateStyle", "ISO, MDY"},
	{"integer_datetimes", "on"},
}

// startupAnswer encodes AuthenticationOk, the startup parameters, BackendKeyData (pid, key)
// and ReadyForQuery (idle).
func startupAnswer(pid uint32, key []byte) []byte {
	msgs := []pgproto3.BackendMessage{&pgproto3.AuthenticationOk{}}
	for _, p := range startupParameters {
		msgs = append(msgs, &pgproto3.ParameterStatus{Name: p[0], Value: p[1]})
	}
	msgs = append(msgs,
		&pgproto3.BackendKeyData{ProcessID: pid, SecretKey: key},
		&pgproto3.ReadyForQuery{TxStatus: 'I'})
	return encodeBackend(msgs...)
}

// ForgedStartup returns what a forged session start looks like on the wire, the default
// Extra of FaultExtraBytes: AuthenticationOk, ParameterStatus server_version=15.0,
// client_encoding=UTF8, standard_conforming_strings=on, DateStyle="ISO, MDY" and
// integer_datetimes=on, BackendKeyData with process ID 0x0BADF00D and secret key 0xDEADBEEF,
// and ReadyForQuery (idle): 165 bytes. A client that takes them for the server's answer
// believes it is logged in without having authenticated (libpq 15 does, when they come with
// the 'N' to its SSLRequest: it reads them as the answer to the StartupMessage it sends next)
// or mixes them into the session.
func ForgedStartup() []byte {
	return startupAnswer(forgedPID, []byte{0xDE, 0xAD, 0xBE, 0xEF})
}

const forgedPID = 0x0BADF00D

// errorResponse encodes a FATAL ErrorResponse with code and FaultMessage.
func errorResponse(code string) []byte {
	return encodeBackend(&pgproto3.ErrorResponse{
		Severity:            "FATAL",
		SeverityUnlocalized: "FATAL",
		Code:                code,
		Message:             FaultMessage,
	})
}

func encodeBackend(msgs ...pgproto3.BackendMessage) []byte {
	var b []byte
	for _, m := range msgs {
		var err error
		b, err = m.Encode(b)
		if err != nil {
			// Only malformed messages fail to encode; these are built here.
			panic(fmt.Sprintf("harness: encoding %T: %v", m, err))
		}
	}
	return b
}

// trickle writes b to w one byte per write, each after delay. It stops at the first error.
func trickle(w io.Writer, b []byte, delay time.Duration) error {
	for i := range b {
		time.Sleep(delay)
		if _, err := w.Write(b[i : i+1]); err != nil {
			return err
		}
	}
	return nil
}

// inflict carries out a terminal fault on the TCP connection raw: what the fault sends goes
// through w (raw, or a TLS connection over it), then the sending side is shut down (FIN), or
// the connection is reset, or (stall) left alone. The caller then drains raw, except after a
// reset.
func inflict(f Fault, raw net.Conn, w io.Writer) {
	switch f.Kind {
	case FaultReset:
		reset(raw)
		return
	case FaultStall:
		return
	case FaultGarbage:
		_, _ = w.Write([]byte{garbageByte})
	case FaultErrorResponse:
		_, _ = w.Write(errorResponse(f.SQLState))
	}
	closeWrite(raw)
}

// closeWrite shuts down the sending side of c (a FIN), or closes c if it cannot.
func closeWrite(c net.Conn) {
	if tc, ok := c.(*net.TCPConn); ok {
		if err := tc.CloseWrite(); err == nil {
			return
		}
	}
	_ = c.Close()
}

// reset closes c so that the kernel sends an RST: SO_LINGER 0, then close.
func reset(c net.Conn) {
	if tc, ok := c.(*net.TCPConn); ok {
		_ = tc.SetLinger(0)
	}
	_ = c.Close()
}

// drain reads and discards what c's peer sends until it closes c, c fails, or c is closed
// (by the server's Close).
func drain(c net.Conn) {
	_, _ = io.Copy(io.Discard, c)
}

// faultWriter is a writer whose writes a fault can alter: extra is appended to the next write
// (then cleared), and with delay > 0 every write is trickled.
type faultWriter struct {
	w     io.Writer
	extra []byte
	delay time.Duration
}

func (fw *faultWriter) Write(p []byte) (int, error) {
	n := len(p)
	if fw.extra != nil {
		p = append(append([]byte(nil), p...), fw.extra...)
		fw.extra = nil
	}
	if fw.delay > 0 {
		if err := trickle(fw.w, p, fw.delay); err != nil {
			return 0, err
		}
		return n, nil
	}
	if _, err := fw.w.Write(p); err != nil {
		return 0, err
	}
	return n, nil
}
