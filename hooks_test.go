package pgconnector_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgtype"

	"github.com/pgconnector/pgconnector"
	"github.com/pgconnector/pgconnector/internal/harness"
	"github.com/pgconnector/pgconnector/tracing"
)

// A BeforeConnect hook gives each connection its own password (a token function, as for cloud
// IAM tokens) against a server that checks passwords; the connection string holds none.
func TestWithBeforeConnectSetsThePassword(t *testing.T) {
	srv := harness.StartT(t, harness.Options{Auth: "scram-sha-256"})
	var calls atomic.Int32
	token := func() string { calls.Add(1); return srv.Password }
	dsn := fmt.Sprintf("host=127.0.0.1 port=%d user=%s dbname=%s sslmode=disable", srv.Port, srv.User, srv.Database)

	without := sql.OpenDB(newConnector(t, dsn))
	defer without.Close()
	if err := without.Ping(); err == nil {
		t.Fatal("connected without a password: the server does not check them")
	}

	rec, tp := newRecorder()
	db := sql.OpenDB(newConnector(t, dsn, pgconnector.WithTracerProvider(tp), pgconnector.WithBeforeConnect(func(ctx context.Context, cfg *pgx.ConnConfig) error {
		if cfg.Host != "127.0.0.1" || cfg.Port != uint16(srv.Port) {
			return fmt.Errorf("hook called before the host was chosen: %s:%d", cfg.Host, cfg.Port)
		}
		cfg.Password = token()
		cfg.RuntimeParams["application_name"] = "hooked"
		return nil
	})))
	defer db.Close()
	db.SetMaxIdleConns(0)
	for range 3 {
		var app string
		if err := db.QueryRow("select current_setting('application_name')").Scan(&app); err != nil {
			t.Fatal(err)
		}
		if app != "hooked" {
			t.Errorf("application_name %q, want the hook's", app)
		}
	}
	if n := calls.Load(); n != 3 {
		t.Errorf("the token function was called %d times for 3 connections", n)
	}
	for _, s := range rec.Ended() {
		for _, kv := range s.Attributes() {
			if strings.Contains(kv.Value.Emit(), srv.Password) {
				t.Errorf("span %s holds the password in %s", s.Name(), kv.Key)
			}
		}
	}
}

// An AfterConnect hook registers a codec on each connection: timestamptz values scan in UTC
// whatever the session's TimeZone says.
func TestWithAfterConnectRegistersACodec(t *testing.T) {
	srv := harness.StartT(t, harness.Options{})
	utc := func(ctx context.Context, conn *pgx.Conn) error {
		conn.TypeMap().RegisterType(&pgtype.Type{Name: "timestamptz", OID: pgtype.TimestamptzOID, Codec: &pgtype.TimestamptzCodec{ScanLocation: time.UTC}})
		return nil
	}
	for _, tc := range []struct {
		opts []pgconnector.Option
		want string // the location's name
	}{
		{nil, "Local"},
		{[]pgconnector.Option{pgconnector.WithAfterConnect(utc)}, "UTC"},
	} {
		db := sql.OpenDB(newConnector(t, srv.DSN("sslmode=disable"), tc.opts...))
		conn, err := db.Conn(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		if _, err := conn.ExecContext(context.Background(), "set timezone = 'Asia/Tokyo'"); err != nil {
			t.Fatal(err)
		}
		var ts time.Time
		if err := conn.QueryRowContext(context.Background(), "select '2026-01-02 03:04:05+09'::timestamptz").Scan(&ts); err != nil {
			t.Fatal(err)
		}
		if ts.Location().String() != tc.want || !ts.Equal(time.Date(2026, 1, 1, 18, 4, 5, 0, time.UTC)) {
			t.Errorf("%d options: %v in %s, want the same instant in %s", len(tc.opts), ts, ts.Location(), tc.want)
		}
		conn.Close()
		db.Close()
	}
}

// A failing hook fails the connect with an error that names it, inside the connect span, and no
// other host is tried.
func TestFailingHooksStopTheConnect(t *testing.T) {
	a := harness.StartT(t, harness.Options{})
	b := harness.StartT(t, harness.Options{})
	dsn := fmt.Sprintf("host=127.0.0.1,127.0.0.1 port=%d,%d user=app dbname=app sslmode=disable", a.Port, b.Port)
	boom := errors.New("token service unavailable")
	var afterCalls atomic.Int32
	for _, tc := range []struct {
		hook string
		opt  pgconnector.Option
	}{
		{"WithBeforeConnect", pgconnector.WithBeforeConnect(func(context.Context, *pgx.ConnConfig) error { return boom })},
		{"WithAfterConnect", pgconnector.WithAfterConnect(func(context.Context, *pgx.Conn) error { afterCalls.Add(1); return boom })},
	} {
		rec, tp := newRecorder()
		c := newConnector(t, dsn, tc.opt, pgconnector.WithTracerProvider(tp))
		mb := b.LogMark()
		_, err := c.Connect(context.Background())
		if err == nil || !errors.Is(err, boom) || !strings.Contains(err.Error(), tc.hook) {
			t.Errorf("%s: error %v, want one that names the hook and wraps its error", tc.hook, err)
		}
		if n, _ := b.ConnectionsSince(mb); n != 0 {
			t.Errorf("%s: the second host got %d connections after the hook failed", tc.hook, n)
		}
		var connect bool
		for _, s := range rec.Ended() {
			if s.Name() == tracing.SpanConnect {
				connect = s.Status().Code.String() == "Error"
			}
		}
		if !connect {
			t.Errorf("%s: no failed connect span", tc.hook)
		}
	}
	if afterCalls.Load() != 1 {
		t.Errorf("WithAfterConnect called %d times, want once", afterCalls.Load())
	}
}

// A ResetSession hook runs when database/sql reuses a pooled connection.
func TestWithResetSession(t *testing.T) {
	srv := harness.StartT(t, harness.Options{})
	var resets atomic.Int32
	db := sql.OpenDB(newConnector(t, srv.DSN("sslmode=disable"), pgconnector.WithResetSession(func(ctx context.Context, conn *pgx.Conn) error {
		resets.Add(1)
		_, err := conn.Exec(ctx, "reset all")
		return err
	})))
	defer db.Close()
	db.SetMaxOpenConns(1)
	for range 4 {
		if err := db.Ping(); err != nil {
			t.Fatal(err)
		}
	}
	if n := resets.Load(); n != 3 {
		t.Errorf("ResetSession ran %d times for 3 reuses", n)
	}
}
