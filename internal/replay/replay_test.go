package replay

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net"
	"strings"
	"sync"
	"testing"
	"testing/iotest"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgproto3"
)

func encode(t *testing.T, msgs ...pgproto3.BackendMessage) []byte {
	t.Helper()
	var b []byte
	for _, m := range msgs {
		var err error
		if b, err = m.Encode(b); err != nil {
			t.Fatal(err)
		}
	}
	return b
}

func key(n int) []byte {
	k := make([]byte, n)
	for i := range k {
		k[i] = byte(i + 1)
	}
	return k
}

// The greeting decodes, in a server's order, to what it was made of: the NegotiateProtocolVersion
// as captured, then AuthenticationOk, the parameters by name, the key data (a 3.2 key of 32
// bytes here) and ReadyForQuery.
func TestGreetingDecodes(t *testing.T) {
	npv := encode(t, &pgproto3.NegotiateProtocolVersion{NewestMinorProtocol: 0, UnrecognizedOptions: []string{"_pq_.x"}})
	g := Greeting{
		NegotiateProtocolVersion: npv,
		ParameterStatuses:        map[string]string{"server_version": "15.18", "TimeZone": "UTC", "integer_datetimes": "on"},
		PID:                      4242,
		SecretKey:                key(32),
		TxStatus:                 'I',
	}
	fe := pgproto3.NewFrontend(bytes.NewReader(g.Encode()), io.Discard)
	var got []string
	for {
		msg, err := fe.Receive()
		if err != nil {
			if !errors.Is(err, io.ErrUnexpectedEOF) && !errors.Is(err, io.EOF) {
				t.Fatal(err)
			}
			break
		}
		switch m := msg.(type) {
		case *pgproto3.NegotiateProtocolVersion:
			got = append(got, "v "+strings.Join(m.UnrecognizedOptions, ","))
		case *pgproto3.AuthenticationOk:
			got = append(got, "R ok")
		case *pgproto3.ParameterStatus:
			got = append(got, "S "+m.Name+"="+m.Value)
		case *pgproto3.BackendKeyData:
			if m.ProcessID != 4242 || !bytes.Equal(m.SecretKey, key(32)) {
				t.Errorf("BackendKeyData %d %x", m.ProcessID, m.SecretKey)
			}
			got = append(got, "K")
		case *pgproto3.ReadyForQuery:
			got = append(got, "Z "+string(m.TxStatus))
		default:
			t.Fatalf("unexpected %T", msg)
		}
	}
	want := "v _pq_.x|R ok|S TimeZone=UTC|S integer_datetimes=on|S server_version=15.18|K|Z I"
	if s := strings.Join(got, "|"); s != want {
		t.Errorf("greeting: %s\nwant:     %s", s, want)
	}
}

// The recorder passes every byte through, one at a time or all at once, keeps the
// NegotiateProtocolVersion, and stops watching at ReadyForQuery.
func TestRecorder(t *testing.T) {
	npv := encode(t, &pgproto3.NegotiateProtocolVersion{NewestMinorProtocol: 0})
	startup := encode(t,
		&pgproto3.AuthenticationSASL{AuthMechanisms: []string{"SCRAM-SHA-256"}},
		&pgproto3.AuthenticationOk{},
		&pgproto3.ParameterStatus{Name: "a", Value: "b"},
		&pgproto3.BackendKeyData{ProcessID: 1, SecretKey: key(4)},
		&pgproto3.ReadyForQuery{TxStatus: 'I'},
	)
	// After ReadyForQuery, a 'v' is not the server's answer to the startup.
	after := encode(t, &pgproto3.NegotiateProtocolVersion{NewestMinorProtocol: 9})
	for _, tt := range []struct {
		name   string
		stream []byte
		want   []byte
	}{
		{"with NegotiateProtocolVersion", concat(npv, startup, after), npv},
		{"without", concat(startup, after), nil},
	} {
		for _, oneByte := range []bool{false, true} {
			var r io.Reader = bytes.NewReader(tt.stream)
			if oneByte {
				r = iotest.OneByteReader(r)
			}
			rec := NewRecorder(r)
			out, err := io.ReadAll(rec)
			if err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(out, tt.stream) {
				t.Errorf("%s, one byte %v: the bytes changed", tt.name, oneByte)
			}
			if got := rec.NegotiateProtocolVersion(); !bytes.Equal(got, tt.want) {
				t.Errorf("%s, one byte %v: kept %x, want %x", tt.name, oneByte, got, tt.want)
			}
		}
	}
}

func concat(bs ...[]byte) []byte { return bytes.Join(bs, nil) }

// server is the far end of an established session on a net.Pipe: it answers every simple Query
// with one row holding the query text, and records CancelRequests sent to it.
func server(t *testing.T, c net.Conn) {
	t.Helper()
	be := pgproto3.NewBackend(c, c)
	go func() {
		defer c.Close()
		for {
			msg, err := be.Receive()
			if err != nil {
				return
			}
			switch m := msg.(type) {
			case *pgproto3.Query:
				be.Send(&pgproto3.RowDescription{Fields: []pgproto3.FieldDescription{{Name: []byte("q"), DataTypeOID: 25, DataTypeSize: -1, TypeModifier: -1}}})
				be.Send(&pgproto3.DataRow{Values: [][]byte{[]byte(m.String)}})
				be.Send(&pgproto3.CommandComplete{CommandTag: []byte("SELECT 1")})
				be.Send(&pgproto3.ReadyForQuery{TxStatus: 'I'})
				if be.Flush() != nil {
					return
				}
			case *pgproto3.Terminate:
				return
			}
		}
	}()
}

type cancelRecord struct {
	mu   sync.Mutex
	pids []uint32
	keys [][]byte
}

func (r *cancelRecord) send(_ context.Context, pid uint32, key []byte) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.pids = append(r.pids, pid)
	r.keys = append(r.keys, bytes.Clone(key))
	return nil
}

// connect runs pgconn.ConnectConfig over a replayed session whose greeting is g.
func connect(t *testing.T, dsn string, g *Greeting, cr *cancelRecord) (*pgconn.PgConn, error) {
	t.Helper()
	cfg, err := pgconn.ParseConfig(dsn)
	if err != nil {
		t.Fatal(err)
	}
	client, far := net.Pipe()
	server(t, far)
	t.Cleanup(func() { client.Close() })
	conn := NewConn(client, g.Encode())
	var dials int
	cfg.LookupFunc = func(_ context.Context, host string) ([]string, error) { return []string{host}, nil }
	cfg.DialFunc = func(ctx context.Context, _, _ string) (net.Conn, error) {
		dials++
		if dials == 1 {
			return conn, nil
		}
		return NewCancelConn(ctx, conn.LocalAddr(), conn.RemoteAddr(), cr.send), nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	return pgconn.ConnectConfig(ctx, cfg)
}

// pgx opens a replayed session as a new one: the key data, the parameters and the transaction
// status are the greeting's, and queries go to the established session; its CancelRequest
// reaches the CancelFunc with the session's key.
func TestPgconnOverConn(t *testing.T) {
	for _, tt := range []struct {
		name    string
		dsn     string
		npv     *pgproto3.NegotiateProtocolVersion
		keyLen  int
		wantErr string
	}{
		{name: "3.0", dsn: "host=h user=u sslmode=disable", keyLen: 4},
		{name: "3.2 granted", dsn: "host=h user=u sslmode=disable max_protocol_version=3.2", keyLen: 32},
		{name: "3.2 asked, 3.0 negotiated", dsn: "host=h user=u sslmode=disable max_protocol_version=latest",
			npv: &pgproto3.NegotiateProtocolVersion{NewestMinorProtocol: 0}, keyLen: 4},
		// pgx reads the replayed NegotiateProtocolVersion as it would the server's.
		{name: "3.2 required, 3.0 negotiated", dsn: "host=h user=u sslmode=disable min_protocol_version=3.2",
			npv: &pgproto3.NegotiateProtocolVersion{NewestMinorProtocol: 0}, keyLen: 4, wantErr: "server protocol version too low"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			g := &Greeting{ParameterStatuses: map[string]string{"server_version": "15.18", "client_encoding": "UTF8"}, PID: 77, SecretKey: key(tt.keyLen), TxStatus: 'I'}
			if tt.npv != nil {
				g.NegotiateProtocolVersion = encode(t, tt.npv)
			}
			cr := &cancelRecord{}
			pg, err := connect(t, tt.dsn, g, cr)
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("connect: %v, want %q", err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			defer pg.Close(context.Background())
			if pg.PID() != 77 || !bytes.Equal(pg.SecretKey(), key(tt.keyLen)) || pg.TxStatus() != 'I' || pg.ParameterStatus("server_version") != "15.18" {
				t.Errorf("pid %d key %x tx %c server_version %q", pg.PID(), pg.SecretKey(), pg.TxStatus(), pg.ParameterStatus("server_version"))
			}
			res, err := pg.Exec(context.Background(), "select 'through'").ReadAll()
			if err != nil {
				t.Fatal(err)
			}
			if got := string(res[0].Rows[0][0]); got != "select 'through'" {
				t.Errorf("row %q", got)
			}
			if err := pg.CancelRequest(context.Background()); err != nil {
				t.Fatal(err)
			}
			if len(cr.pids) != 1 || cr.pids[0] != 77 || !bytes.Equal(cr.keys[0], key(tt.keyLen)) {
				t.Errorf("cancels: %v %x", cr.pids, cr.keys)
			}
		})
	}
}

// The StartupMessage may come in pieces, with the first bytes of the session after it; a read
// that comes first waits for it. Anything else than a StartupMessage is refused.
func TestConnSwallowsTheStartupMessage(t *testing.T) {
	startup, err := (&pgproto3.StartupMessage{ProtocolVersion: pgproto3.ProtocolVersion30, Parameters: map[string]string{"user": "u", "database": "d"}}).Encode(nil)
	if err != nil {
		t.Fatal(err)
	}
	query, _ := (&pgproto3.Query{String: "select 1"}).Encode(nil)
	client, far := net.Pipe()
	defer client.Close()
	c := NewConn(client, []byte("GREETING"))

	got := make(chan string, 1)
	go func() {
		var b []byte
		buf := make([]byte, 3)
		for len(b) < len("GREETING") {
			n, err := c.Read(buf)
			if err != nil {
				got <- err.Error()
				return
			}
			b = append(b, buf[:n]...)
		}
		got <- string(b)
	}()
	farGot := make(chan []byte, 1)
	go func() {
		b := make([]byte, len(query))
		_, err := io.ReadFull(far, b)
		if err != nil {
			b = []byte(err.Error())
		}
		farGot <- b
	}()
	stream := append(bytes.Clone(startup), query...)
	// One byte at a time up to the middle of the parameters, then the rest with the query.
	for i := range 10 {
		if n, err := c.Write(stream[i : i+1]); n != 1 || err != nil {
			t.Fatalf("write %d: %d %v", i, n, err)
		}
	}
	select {
	case s := <-got:
		t.Fatalf("read %q before the StartupMessage was whole", s)
	case <-time.After(50 * time.Millisecond):
	}
	if n, err := c.Write(stream[10:]); n != len(stream)-10 || err != nil {
		t.Fatalf("write: %d %v", n, err)
	}
	if s := <-got; s != "GREETING" {
		t.Errorf("read %q", s)
	}
	if b := <-farGot; !bytes.Equal(b, query) {
		t.Errorf("the server got %q, want the query", b)
	}

	for _, bad := range [][]byte{
		{0, 0, 0, 8, 0x04, 0xd2, 0x16, 0x2f}, // SSLRequest
		{0, 0, 0, 8, 0x04, 0xd2, 0x16, 0x30}, // GSSENCRequest
		{0, 0, 0x40, 0, 0, 3, 0, 0},          // a StartupMessage longer than PostgreSQL takes
	} {
		c := NewConn(nopConn{}, nil)
		if _, err := c.Write(bad); err == nil {
			t.Errorf("write of %x: no error", bad)
		}
		if _, err := c.Write([]byte{1}); err == nil {
			t.Errorf("write after %x: no error", bad)
		}
	}
}

// A read waiting for the StartupMessage ends with Close.
func TestConnCloseEndsAWaitingRead(t *testing.T) {
	c := NewConn(nopConn{}, []byte("x"))
	done := make(chan error)
	go func() {
		_, err := c.Read(make([]byte, 1))
		done <- err
	}()
	c.Close()
	if err := <-done; !errors.Is(err, net.ErrClosed) {
		t.Errorf("read: %v", err)
	}
	if !c.Closed() {
		t.Error("not Closed")
	}
}

func TestCancelConn(t *testing.T) {
	pkt := []byte{0, 0, 0, 16, 0x04, 0xd2, 0x16, 0x2e, 0, 0, 0, 9, 1, 2, 3, 4}
	cr := &cancelRecord{}
	c := NewCancelConn(context.Background(), nil, nil, cr.send)
	if _, err := c.Read(make([]byte, 1)); err == nil {
		t.Error("read before the CancelRequest: no error")
	}
	for i := range pkt { // in pieces
		if _, err := c.Write(pkt[i : i+1]); err != nil {
			t.Fatal(err)
		}
	}
	if len(cr.pids) != 1 || cr.pids[0] != 9 || !bytes.Equal(cr.keys[0], []byte{1, 2, 3, 4}) {
		t.Errorf("sent %v %x", cr.pids, cr.keys)
	}
	if _, err := c.Read(make([]byte, 1)); err != io.EOF {
		t.Errorf("read after: %v", err)
	}
	if _, err := c.Write([]byte{0}); err == nil {
		t.Error("a write after the CancelRequest: no error")
	}

	failing := NewCancelConn(context.Background(), nil, nil, func(context.Context, uint32, []byte) error { return errors.New("refused") })
	if _, err := failing.Write(pkt); err == nil || err.Error() != "refused" {
		t.Errorf("the CancelFunc's error: %v", err)
	}
	startup := []byte{0, 0, 0, 8, 0, 3, 0, 0}
	if _, err := NewCancelConn(context.Background(), nil, nil, cr.send).Write(startup); err == nil {
		t.Error("a StartupMessage taken as a CancelRequest")
	}
}

type nopConn struct{ net.Conn }

func (nopConn) Write(b []byte) (int, error) { return len(b), nil }
func (nopConn) Read([]byte) (int, error)    { return 0, io.EOF }
func (nopConn) Close() error                { return nil }
