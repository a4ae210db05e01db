package harness

import (
	"bufio"
	"bytes"
	"crypto/tls"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgproto3"
)

// The matrices as the documentation of FaultServer and FaultProxy state them: a step, then
// the kinds (c close, r reset, s stall, g garbage, e error response, x extra bytes, t
// trickle, k corrupt).
var (
	docServerMatrix = map[FaultStep]string{
		StepSSLAnswer:    "crsgext",
		StepGSSENCAnswer: "crsgext",
		StepTLSHandshake: "crsget",
		StepAPRep:        "crsge",
		StepWrapToken:    "",
		StepStartup:      "crsgext",
		StepAfterReady:   "crsgext",
	}
	docProxyMatrix = map[FaultStep]string{
		StepSSLAnswer:    "crsgext",
		StepGSSENCAnswer: "crsgext",
		StepTLSHandshake: "crsget",
		StepAPRep:        "crsgextk",
		StepWrapToken:    "crsgextk",
		StepStartup:      "crsgext",
		StepAfterReady:   "crsgext",
	}
	kindLetters = map[FaultKind]byte{
		FaultClose: 'c', FaultReset: 'r', FaultStall: 's', FaultGarbage: 'g',
		FaultErrorResponse: 'e', FaultExtraBytes: 'x', FaultTrickle: 't', FaultCorrupt: 'k',
	}
	allSteps = []FaultStep{StepSSLAnswer, StepGSSENCAnswer, StepTLSHandshake, StepAPRep, StepWrapToken, StepStartup, StepAfterReady}
	allKinds = []FaultKind{FaultClose, FaultReset, FaultStall, FaultGarbage, FaultErrorResponse, FaultExtraBytes, FaultTrickle, FaultCorrupt}
)

// testFault is a fault of kind at step with the parameters the kind needs: SQLSTATE 53300, a
// trickle delay of 2 ms, the default extra bytes.
func testFault(kind FaultKind, step FaultStep) Fault {
	f := Fault{Kind: kind, Step: step}
	switch kind {
	case FaultErrorResponse:
		f.SQLState = "53300"
	case FaultTrickle:
		f.Delay = 2 * time.Millisecond
	}
	return f
}

// supported lists the (step, kind) pairs of a documented matrix.
func supported(doc map[FaultStep]string) [][2]int {
	var out [][2]int
	for _, step := range allSteps {
		for _, k := range allKinds {
			if strings.IndexByte(doc[step], kindLetters[k]) >= 0 {
				out = append(out, [2]int{int(step), int(k)})
			}
		}
	}
	return out
}

func TestFaultMatricesAsDocumented(t *testing.T) {
	for _, step := range allSteps {
		for _, k := range allKinds {
			f := testFault(k, step)
			wantServer := strings.IndexByte(docServerMatrix[step], kindLetters[k]) >= 0
			opts := FaultServerOptions{Fault: f, TLS: step == StepTLSHandshake, GSS: step == StepAPRep}
			s, err := StartFaultServer(opts)
			if err == nil {
				_ = s.Close()
			}
			if (err == nil) != wantServer {
				t.Errorf("fault server, %v: err %v, want supported=%v", f, err, wantServer)
			}
			wantProxy := strings.IndexByte(docProxyMatrix[step], kindLetters[k]) >= 0
			p, err := NewFaultProxy("127.0.0.1:1", f)
			if err == nil {
				_ = p.Close()
			}
			if (err == nil) != wantProxy {
				t.Errorf("fault proxy, %v: err %v, want supported=%v", f, err, wantProxy)
			}
		}
	}
}

func TestFaultValidation(t *testing.T) {
	bad := []struct {
		name string
		opts FaultServerOptions
	}{
		{"TLS handshake without TLS", FaultServerOptions{Fault: Fault{Kind: FaultClose, Step: StepTLSHandshake}}},
		{"AP-REP without GSS", FaultServerOptions{Fault: Fault{Kind: FaultClose, Step: StepAPRep}}},
		{"no step", FaultServerOptions{Fault: Fault{Kind: FaultClose}}},
		{"unknown step", FaultServerOptions{Fault: Fault{Kind: FaultClose, Step: 99}}},
		{"unknown kind", FaultServerOptions{Fault: Fault{Kind: 99, Step: StepStartup}}},
		{"negative count", FaultServerOptions{Fault: Fault{Kind: FaultClose, Step: StepStartup, Count: -1}}},
		{"error response without SQLSTATE", FaultServerOptions{Fault: Fault{Kind: FaultErrorResponse, Step: StepStartup}}},
		{"lower case SQLSTATE", FaultServerOptions{Fault: Fault{Kind: FaultErrorResponse, Step: StepStartup, SQLState: "57p03"}}},
		{"short SQLSTATE", FaultServerOptions{Fault: Fault{Kind: FaultErrorResponse, Step: StepStartup, SQLState: "5330"}}},
		{"SQLSTATE on close", FaultServerOptions{Fault: Fault{Kind: FaultClose, Step: StepStartup, SQLState: "53300"}}},
		{"Extra on garbage", FaultServerOptions{Fault: Fault{Kind: FaultGarbage, Step: StepStartup, Extra: []byte{1}}}},
		{"Delay on stall", FaultServerOptions{Fault: Fault{Kind: FaultStall, Step: StepStartup, Delay: time.Second}}},
		{"negative Delay", FaultServerOptions{Fault: Fault{Kind: FaultTrickle, Step: StepStartup, Delay: -time.Second}}},
		{"none with a count", FaultServerOptions{Fault: Fault{Count: 1}}},
	}
	for _, tc := range bad {
		if s, err := StartFaultServer(tc.opts); err == nil {
			_ = s.Close()
			t.Errorf("%s: accepted", tc.name)
		} else {
			t.Logf("%s: %v", tc.name, err)
		}
	}
	for _, f := range []Fault{{}, {Step: StepStartup}, {Kind: FaultExtraBytes, Step: StepStartup, Extra: []byte{}}, {Kind: FaultErrorResponse, Step: StepStartup, SQLState: "57P03", Count: 3}} {
		s, err := StartFaultServer(FaultServerOptions{Fault: f})
		if err != nil {
			t.Errorf("%v: %v", f, err)
			continue
		}
		_ = s.Close()
	}
}

func TestFaultString(t *testing.T) {
	for f, want := range map[*Fault]string{
		{}: "no fault",
		{Kind: FaultErrorResponse, Step: StepStartup, SQLState: "53300", Count: 1}: "error response 53300 at startup (first connection)",
		{Kind: FaultTrickle, Step: StepTLSHandshake}:                               "trickle 1ms at TLS handshake",
		{Kind: FaultExtraBytes, Step: StepSSLAnswer, Count: 2}:                     "extra bytes (165 bytes) at SSLRequest answer (first 2 connections)",
		{Kind: FaultCorrupt, Step: StepAPRep}:                                      "corrupt at AP-REP",
		{Kind: FaultReset, Step: StepWrapToken}:                                    "reset at first wrap token",
		{Kind: FaultStall, Step: StepAfterReady}:                                   "stall at after ReadyForQuery",
	} {
		if got := f.String(); got != want {
			t.Errorf("%#v: %q, want %q", *f, got, want)
		}
	}
}

// ForgedStartup is a well-formed session start with the documented values.
func TestForgedStartup(t *testing.T) {
	b := ForgedStartup()
	if len(b) != 165 {
		t.Errorf("%d bytes, want 165", len(b))
	}
	fe := pgproto3.NewFrontend(bytes.NewReader(b), io.Discard)
	var types []byte
	for {
		msg, err := fe.Receive()
		if err != nil {
			t.Fatal(err)
		}
		switch msg := msg.(type) {
		case *pgproto3.AuthenticationOk:
			types = append(types, 'R')
		case *pgproto3.ParameterStatus:
			types = append(types, 'S')
		case *pgproto3.BackendKeyData:
			types = append(types, 'K')
			if msg.ProcessID != 0x0BADF00D || !bytes.Equal(msg.SecretKey, []byte{0xDE, 0xAD, 0xBE, 0xEF}) {
				t.Errorf("BackendKeyData %d %x", msg.ProcessID, msg.SecretKey)
			}
		case *pgproto3.ReadyForQuery:
			types = append(types, 'Z')
		}
		if types[len(types)-1] == 'Z' {
			break
		}
	}
	if string(types) != "RSSSSSKZ" {
		t.Errorf("messages %s", types)
	}
}

// readLog is a reader that remembers the size of every read that returned bytes.
type readLog struct {
	r     io.Reader
	reads []int
}

func (l *readLog) Read(p []byte) (int, error) {
	n, err := l.r.Read(p)
	if n > 0 {
		l.reads = append(l.reads, n)
	}
	return n, err
}

// wire is a test's end of a PostgreSQL connection spoken by hand: raw is the TCP connection,
// conn the protocol's stream (raw, or TLS over it), read through a buffer over a readLog.
type wire struct {
	t    *testing.T
	raw  net.Conn
	conn net.Conn
	log  *readLog
	br   *bufio.Reader
}

// dialWire connects to addr; the connection has a deadline of a minute and is closed when the
// test ends.
func dialWire(t *testing.T, addr string) *wire {
	t.Helper()
	c, err := net.DialTimeout("tcp", addr, 10*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	_ = c.SetDeadline(time.Now().Add(time.Minute))
	w := &wire{t: t, raw: c}
	w.use(c)
	return w
}

func (w *wire) use(conn net.Conn) {
	w.conn = conn
	w.log = &readLog{r: conn}
	w.br = bufio.NewReaderSize(w.log, 64<<10)
}

func (w *wire) write(b []byte) {
	w.t.Helper()
	if _, err := w.conn.Write(b); err != nil {
		w.t.Fatalf("write: %v", err)
	}
}

func (w *wire) readN(n int) []byte {
	w.t.Helper()
	b := make([]byte, n)
	if _, err := io.ReadFull(w.br, b); err != nil {
		w.t.Fatalf("reading %d bytes: %v", n, err)
	}
	return b
}

// readUntilReady reads backend messages up to and including ReadyForQuery and returns their
// bytes and type letters. An ErrorResponse, or the end of the connection, fails the test.
func (w *wire) readUntilReady() (msgs []byte, types string) {
	w.t.Helper()
	for {
		msg, err := readMessage(w.br)
		if err != nil {
			w.t.Fatalf("after messages %q: %v", types, err)
		}
		msgs = append(msgs, msg...)
		types += string(msg[0])
		switch msg[0] {
		case 'E':
			w.t.Fatalf("ErrorResponse after %q: %s", types, msg)
		case 'Z':
			return msgs, types
		}
	}
}

// rest reads until the connection ends and returns what came and how it ended.
func (w *wire) rest() ([]byte, error) {
	var b bytes.Buffer
	_, err := io.Copy(&b, w.br)
	if err == nil {
		err = io.EOF
	}
	return b.Bytes(), err
}

// startTLS does a TLS handshake over the connection after 'S', and reads through TLS from
// then on.
func (w *wire) startTLS() {
	w.t.Helper()
	if w.br.Buffered() > 0 {
		w.t.Fatalf("%d bytes after 'S'", w.br.Buffered())
	}
	tc := tls.Client(w.raw, &tls.Config{InsecureSkipVerify: true})
	if err := tc.Handshake(); err != nil {
		w.t.Fatalf("TLS handshake: %v", err)
	}
	w.use(tc)
}

// login sends a StartupMessage and reads the answer up to ReadyForQuery.
func (w *wire) login() {
	w.t.Helper()
	w.write(startupMessage())
	if _, types := w.readUntilReady(); !strings.HasPrefix(types, "R") || !strings.HasSuffix(types, "KZ") {
		w.t.Fatalf("startup answer %q", types)
	}
}

func encodeFrontend(msgs ...pgproto3.FrontendMessage) []byte {
	var b []byte
	for _, m := range msgs {
		var err error
		if b, err = m.Encode(b); err != nil {
			panic(err)
		}
	}
	return b
}

func sslRequest() []byte    { return encodeFrontend(&pgproto3.SSLRequest{}) }
func gssencRequest() []byte { return encodeFrontend(&pgproto3.GSSEncRequest{}) }
func startupMessage() []byte {
	return encodeFrontend(&pgproto3.StartupMessage{
		ProtocolVersion: pgproto3.ProtocolVersion30,
		Parameters:      map[string]string{"user": AppUser, "database": AppDatabase},
	})
}
func queryMessage(sql string) []byte { return encodeFrontend(&pgproto3.Query{String: sql}) }

// gssPacket frames a GSS token as PostgreSQL does: Int32 length, then the token.
func gssPacket(token []byte) []byte {
	return append(binary.BigEndian.AppendUint32(nil, uint32(len(token))), token...)
}

// clientHello returns the first TLS record a Go client sends: its ClientHello.
func clientHello(t *testing.T) []byte {
	t.Helper()
	a, b := net.Pipe()
	defer a.Close()
	defer b.Close()
	go func() { _ = tls.Client(a, &tls.Config{InsecureSkipVerify: true}).Handshake() }()
	_ = b.SetDeadline(time.Now().Add(time.Minute))
	hdr := make([]byte, 5)
	if _, err := io.ReadFull(b, hdr); err != nil {
		t.Fatal(err)
	}
	rec := make([]byte, 5+int(binary.BigEndian.Uint16(hdr[3:])))
	copy(rec, hdr)
	if _, err := io.ReadFull(b, rec[5:]); err != nil {
		t.Fatal(err)
	}
	return rec
}

// checkTerminal checks that a terminal fault f arrives on w as documented: for close, an end
// of stream (a FIN) and nothing else; for reset, ECONNRESET; for garbage, 'X' then the end;
// for an error response, one FATAL ErrorResponse with f's code and FaultMessage, then the
// end; for stall, nothing within 200 ms (nothing ever comes from a stall, so the wait cannot
// make the test flaky), then, once stop (closing the server or proxy) has returned, the end.
func checkTerminal(t *testing.T, w *wire, f Fault, stop func() error) {
	t.Helper()
	// Inside TLS the end without close_notify reads as io.ErrUnexpectedEOF.
	isEnd := func(err error) bool { return err == io.EOF || errors.Is(err, io.ErrUnexpectedEOF) }
	switch f.Kind {
	case FaultClose:
		if b, err := w.rest(); len(b) > 0 || !isEnd(err) {
			t.Errorf("close: got %q and %v, want nothing and the end of the stream", b, err)
		}
	case FaultReset:
		if b, err := w.rest(); len(b) > 0 || !errors.Is(err, syscall.ECONNRESET) {
			t.Errorf("reset: got %q and %v, want nothing and ECONNRESET", b, err)
		}
	case FaultGarbage:
		if b, err := w.rest(); string(b) != "X" || !isEnd(err) {
			t.Errorf("garbage: got %q and %v, want \"X\" and the end of the stream", b, err)
		}
	case FaultErrorResponse:
		b, err := w.rest()
		if !isEnd(err) {
			t.Errorf("error response: the connection ended with %v, want the end of the stream", err)
		}
		checkErrorResponse(t, b, f.SQLState)
	case FaultStall:
		_ = w.raw.SetReadDeadline(time.Now().Add(200 * time.Millisecond))
		if n, err := w.br.Read(make([]byte, 1)); n > 0 || !errors.Is(err, os.ErrDeadlineExceeded) {
			t.Errorf("stall: read %d bytes, %v; want nothing", n, err)
		}
		_ = w.raw.SetReadDeadline(time.Now().Add(time.Minute))
		done := make(chan error, 1)
		go func() { done <- stop() }()
		select {
		case err := <-done:
			if err != nil {
				t.Errorf("Close: %v", err)
			}
		case <-time.After(time.Minute):
			t.Fatal("Close did not return with a stalled connection")
		}
		if n, err := w.raw.Read(make([]byte, 1)); n > 0 || !isEnd(err) {
			t.Errorf("stall: after Close, read %d bytes, %v; want the end of the stream", n, err)
		}
	default:
		t.Fatalf("%v is not terminal", f)
	}
}

// checkErrorResponse checks that b is exactly one FATAL ErrorResponse with code and
// FaultMessage.
func checkErrorResponse(t *testing.T, b []byte, code string) {
	t.Helper()
	fe := pgproto3.NewFrontend(bytes.NewReader(b), io.Discard)
	msg, err := fe.Receive()
	if err != nil {
		t.Errorf("error response: %q: %v", b, err)
		return
	}
	er, ok := msg.(*pgproto3.ErrorResponse)
	if !ok || er.Severity != "FATAL" || er.SeverityUnlocalized != "FATAL" || er.Code != code || er.Message != FaultMessage {
		t.Errorf("error response: got %#v, want FATAL %s %q", msg, code, FaultMessage)
	}
	if _, err := fe.Receive(); !errors.Is(err, io.ErrUnexpectedEOF) {
		t.Errorf("error response: more after the ErrorResponse (%v)", err)
	}
}

// checkExtra checks, right after the correct answer has been read from w, that f's extra bytes
// followed it in the same write, and reads them.
func checkExtra(t *testing.T, w *wire, f Fault) {
	t.Helper()
	// One write on loopback arrives in one read: the bytes are already buffered (and
	// perhaps what the server wrote next, too).
	if n := w.br.Buffered(); n < len(f.extra()) {
		t.Errorf("extra bytes: %d bytes buffered after the answer, want at least %d", n, len(f.extra()))
	}
	if got := w.readN(len(f.extra())); !bytes.Equal(got, f.extra()) {
		t.Errorf("extra bytes: got %q, want %q", got, f.extra())
	}
}

// checkTrickle checks what trickle fault f promises for an answer to a request sent at sent,
// read from w after reads0 reads: it took at least n×Delay for its n bytes, and more than one
// read when n is over 1.
func checkTrickle(t *testing.T, w *wire, f Fault, sent time.Time, reads0 int, answer []byte) {
	t.Helper()
	elapsed := time.Since(sent)
	if min := time.Duration(len(answer)) * f.delay(); elapsed < min {
		t.Errorf("trickle: %d bytes in %v, want at least %v", len(answer), elapsed, min)
	}
	if reads := len(w.log.reads) - reads0; len(answer) > 1 && reads < 2 {
		t.Errorf("trickle: %d bytes in %d read", len(answer), reads)
	}
}

func TestFaultWriter(t *testing.T) {
	var b bytes.Buffer
	fw := &faultWriter{w: &b}
	if _, err := fmt.Fprint(fw, "ab"); err != nil {
		t.Fatal(err)
	}
	fw.extra = []byte("+x")
	if n, err := fw.Write([]byte("cd")); n != 2 || err != nil {
		t.Fatalf("Write = %d, %v", n, err)
	}
	_, _ = fw.Write([]byte("ef"))
	if b.String() != "abcd+xef" {
		t.Errorf("%q", b.String())
	}
}
