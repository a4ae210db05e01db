package pgconnector_test

import (
	"context"
	"crypto/tls"
	"errors"
	"net"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/pgconnector/pgconnector"
	"github.com/pgconnector/pgconnector/tracing"
)

// PgxPoolConfig's configuration keeps pgx's meaning for what a pgx user changes (pgx's own
// pgxpool tests run on it in internal/pgxpoolsuite): a BeforeConnect that replaces the
// connector's (a token as the password) still connects through the negotiation (sslmode=require
// is kept: the session is TLS); a ConnConfig.DialFunc dials the connects' sockets; ConnString()
// is the string given to New. What the connector cannot use fails the connect, naming the field
// and the option, within the context.
func TestPgxPoolConfigAsPgx(t *testing.T) {
	_, tlsSrv := servers(t)
	dsn := tlsSrv.DSN("password=wrong", "sslmode=require")
	rec := tracetest.NewSpanRecorder()
	c := newConnector(t, dsn, pgconnector.WithTracerProvider(sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))))

	var dials atomic.Int32
	p := openPool(t, c, func(cfg *pgxpool.Config) {
		if got := cfg.ConnString(); got != dsn {
			t.Errorf("ConnString() is not the string given to New")
		}
		cfg.BeforeConnect = func(_ context.Context, cc *pgx.ConnConfig) error {
			cc.Password = tlsSrv.Password // as an IAM token would be
			return nil
		}
		cfg.ConnConfig.DialFunc = func(ctx context.Context, network, address string) (net.Conn, error) {
			dials.Add(1)
			var d net.Dialer
			return d.DialContext(ctx, network, address)
		}
	})
	if tr := transportOf(t, p); tr != "tls" {
		t.Fatalf("replaced BeforeConnect: transport %s, want tls (sslmode=require)", tr)
	}
	if dials.Load() == 0 {
		t.Errorf("the ConnConfig.DialFunc was not called")
	}
	connects := 0
	for _, s := range rec.Ended() {
		if s.Name() == tracing.SpanConnect {
			connects++
		}
	}
	if connects != 1 { // the negotiation's, not a second one of pgx's connect through the pool's tracer
		t.Errorf("%d %s spans for one pool connect, want 1", connects, tracing.SpanConnect)
	}

	for _, tt := range []struct {
		name   string
		change func(*pgxpool.Config)
		want   []string
	}{
		{"BeforeConnect and AfterNetConnect replaced", func(cfg *pgxpool.Config) {
			cfg.BeforeConnect = func(context.Context, *pgx.ConnConfig) error { return nil }
			cfg.ConnConfig.AfterNetConnect = func(_ context.Context, _ *pgconn.Config, conn net.Conn) (net.Conn, error) { return conn, nil }
		}, []string{"both were replaced", "BeforeConnect"}},
		{"TLSConfig", func(cfg *pgxpool.Config) { cfg.ConnConfig.TLSConfig = &tls.Config{} }, []string{"ConnConfig.TLSConfig", "WithTLSConfigFunc"}},
		{"LookupFunc", func(cfg *pgxpool.Config) {
			cfg.ConnConfig.LookupFunc = func(context.Context, string) ([]string, error) { return []string{"127.0.0.1"}, nil }
		}, []string{"ConnConfig.LookupFunc", "WithLookupFunc"}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			for _, replaced := range []bool{false, true} { // the connector's BeforeConnect, or one that replaced it
				p := openPool(t, c, func(cfg *pgxpool.Config) {
					tt.change(cfg)
					if replaced {
						cfg.BeforeConnect = func(context.Context, *pgx.ConnConfig) error { return nil }
					}
				})
				ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
				_, err := p.Acquire(ctx)
				cancel()
				if err == nil || errors.Is(err, context.DeadlineExceeded) {
					t.Fatalf("BeforeConnect replaced %v: Acquire: %v, want an error naming the field", replaced, err)
				}
				for _, w := range tt.want {
					if !strings.Contains(err.Error(), w) {
						t.Errorf("BeforeConnect replaced %v: %v, want %q in it", replaced, err, w)
					}
				}
				if strings.Contains(err.Error(), tlsSrv.Password) {
					t.Errorf("the error holds the password")
				}
			}
		})
	}
}
