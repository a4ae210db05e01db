package scram

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"slices"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgproto3"

	"github.com/pgconnector/pgconnector/internal/harness"
)

// TestMain runs the tests with the harness, which removes its servers when they end.
func TestMain(m *testing.M) { os.Exit(harness.Run(m)) }

// pgLogin is one SASL authentication with a real PostgreSQL server (protocol-flow "SASL
// Authentication"): StartupMessage, AuthenticationSASL, SASLInitialResponse,
// AuthenticationSASLContinue, SASLResponse, AuthenticationSASLFinal, AuthenticationOk.
type pgLogin struct {
	user, password string
	tls            bool   // SSLRequest first
	plus           bool   // SCRAM-SHA-256-PLUS when the server offers it
	cb             []byte // channel binding data instead of the real one (a man in the middle's)
}

// login authenticates through k and returns the exchange and, if authentication failed, the
// error. An ErrorResponse instead of AuthenticationSASLFinal abandons the exchange, as a
// connection does.
func login(t *testing.T, k *Keys, pg *harness.Postgres, l pgLogin) (*Exchange, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var d net.Dialer
	raw, err := d.DialContext(ctx, "tcp", pg.Addr())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { raw.Close() })
	_ = raw.SetDeadline(time.Now().Add(30 * time.Second))
	conn := raw
	var cb []byte
	if l.tls {
		conn, cb = startTLS(t, pg, raw)
	}
	if l.cb != nil {
		cb = l.cb
	}
	fe := pgproto3.NewFrontend(conn, conn)
	fe.Send(&pgproto3.StartupMessage{ProtocolVersion: pgproto3.ProtocolVersionNumber,
		Parameters: map[string]string{"user": l.user, "database": pg.Database}})
	if err := fe.Flush(); err != nil {
		t.Fatal(err)
	}
	sasl, ok := receive(t, fe).(*pgproto3.AuthenticationSASL)
	if !ok {
		t.Fatal("no AuthenticationSASL")
	}
	offered := slices.Contains(sasl.AuthMechanisms, MechanismSHA256Plus)
	mech, advertise := MechanismSHA256, l.tls && !offered
	if l.plus && offered {
		mech = MechanismSHA256Plus
	} else {
		cb = nil
	}
	e, err := k.Start("", mech, l.user, l.password, cb, advertise)
	if err != nil {
		t.Fatal(err)
	}
	fe.Send(&pgproto3.SASLInitialResponse{AuthMechanism: mech, Data: e.ClientFirst()})
	if err := fe.Flush(); err != nil {
		t.Fatal(err)
	}
	cont, ok := receive(t, fe).(*pgproto3.AuthenticationSASLContinue)
	if !ok {
		t.Fatal("no AuthenticationSASLContinue")
	}
	c2, err := e.ServerFirst(ctx, cont.Data)
	if err != nil {
		return e, err
	}
	fe.Send(&pgproto3.SASLResponse{Data: c2})
	if err := fe.Flush(); err != nil {
		t.Fatal(err)
	}
	switch m := receive(t, fe).(type) {
	case *pgproto3.AuthenticationSASLFinal:
		if err := e.ServerFinal(m.Data); err != nil {
			return e, err
		}
	case *pgproto3.ErrorResponse:
		e.Abandon()
		return e, fmt.Errorf("server: %s (SQLSTATE %s)", m.Message, m.Code)
	default:
		t.Fatalf("%T instead of AuthenticationSASLFinal", m)
	}
	if _, ok := receive(t, fe).(*pgproto3.AuthenticationOk); !ok {
		t.Fatal("no AuthenticationOk after a verified server signature")
	}
	return e, nil
}

func receive(t *testing.T, fe *pgproto3.Frontend) pgproto3.BackendMessage {
	t.Helper()
	m, err := fe.Receive()
	if err != nil {
		t.Fatal(err)
	}
	return m
}

// startTLS sends SSLRequest and makes the TLS handshake, verifying the harness's CA, and returns
// the connection and its tls-server-end-point binding.
func startTLS(t *testing.T, pg *harness.Postgres, raw net.Conn) (net.Conn, []byte) {
	t.Helper()
	req, _ := (&pgproto3.SSLRequest{}).Encode(nil)
	if _, err := raw.Write(req); err != nil {
		t.Fatal(err)
	}
	var b [1]byte
	if _, err := io.ReadFull(raw, b[:]); err != nil || b[0] != 'S' {
		t.Fatalf("SSLRequest answered %q, %v", b[0], err)
	}
	pem, err := os.ReadFile(pg.CAFile)
	if err != nil {
		t.Fatal(err)
	}
	roots := x509.NewCertPool()
	roots.AppendCertsFromPEM(pem)
	tc := tls.Client(raw, &tls.Config{RootCAs: roots, ServerName: pg.Host})
	if err := tc.Handshake(); err != nil {
		t.Fatal(err)
	}
	cs := tc.ConnectionState()
	cb, err := EndPointBinding(&cs)
	if err != nil {
		t.Fatal(err)
	}
	return tc, cb
}

// TestPostgres authenticates with a real PostgreSQL server: its salts, iteration count, empty
// SCRAM user, channel binding, SASLprep and its answer to a wrong password.
func TestPostgres(t *testing.T) {
	pg := harness.StartT(t, harness.Options{TLS: true, Auth: "scram-sha-256"})
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	// A password SASLprep maps ("a bc" is what PostgreSQL stores), and one it refuses (a control
	// character), which PostgreSQL and the client use as it is.
	if err := pg.ExecAdmin(ctx, `CREATE ROLE prepped LOGIN PASSWORD E'a\u00a0b\u00adc';
		CREATE ROLE unprepped LOGIN PASSWORD E'bell\007ring'`); err != nil {
		t.Fatal(err)
	}

	d := newDerivations()
	k := NewKeys(d.config(Config{}))
	app := pgLogin{user: pg.User, password: pg.Password}
	with := func(l pgLogin, f func(*pgLogin)) pgLogin { f(&l); return l }

	for i, l := range []pgLogin{
		with(app, func(l *pgLogin) { l.tls, l.plus = true, true }),
		with(app, func(l *pgLogin) { l.tls = true }),
		app,
	} {
		e, err := login(t, k, pg, l)
		if err != nil {
			t.Fatalf("login %d (tls %v, plus %v): %v", i, l.tls, l.plus, err)
		}
		if e.Cached() != (i > 0) {
			t.Errorf("login %d: Cached() = %v", i, e.Cached())
		}
	}
	d.expect(t, 1)

	// A wrong password: ErrorResponse instead of AuthenticationSASLFinal.
	if _, err := login(t, k, pg, with(app, func(l *pgLogin) { l.password = "wrong" })); err == nil {
		t.Fatal("wrong password accepted")
	}
	d.expect(t, 2)
	if _, err := login(t, k, pg, with(app, func(l *pgLogin) { l.password = "wrong" })); err == nil {
		t.Fatal("wrong password accepted the second time")
	}
	d.expect(t, 3) // nothing of the failed one was kept

	// Channel binding data that is not the server's certificate's: refused, and nothing kept.
	bad := make([]byte, 32)
	if _, err := login(t, k, pg, with(app, func(l *pgLogin) { l.tls, l.plus, l.cb = true, true, bad })); err == nil {
		t.Fatal("wrong channel binding accepted")
	}
	if e, err := login(t, k, pg, app); err != nil || e.Cached() {
		t.Fatalf("login after a refused channel binding: %v, Cached %v", err, e.Cached())
	}
	d.expect(t, 4)

	for _, l := range []pgLogin{
		{user: "prepped", password: "a\u00a0b\u00adc"},
		{user: "unprepped", password: "bell\aring"},
	} {
		if _, err := login(t, k, pg, l); err != nil {
			t.Errorf("%s: %v", l.user, err)
		}
	}

	// A wrong password never reaches ServerFinal's check: the server refuses the proof.
	e, err := login(t, k, pg, pgLogin{user: "prepped", password: "a bc!"})
	if err == nil || errors.Is(err, ErrServerSignature) || e.Cached() {
		t.Fatalf("wrong password: %v", err)
	}
}
