//go:build pgconnector_nogss

package pgconnector_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/pgconnector/pgconnector"
	"github.com/pgconnector/pgconnector/internal/harness"
	"github.com/pgconnector/pgconnector/tracing"
)

// Built with the pgconnector_nogss tag, gssencmode=require is refused by New and ParseSettings,
// whatever the host (a Unix socket too) and wherever it comes from, as libpq built without
// GSSAPI refuses it before connecting: a *ParseError naming gssencmode, the variable it came
// from, what is allowed and the build tag, unwrapping to ErrNoGSS. prefer and disable parse.
func TestNoGSSRequireIsRefused(t *testing.T) {
	for _, tt := range []struct {
		name, dsn, env, wantEnv string
	}{
		{"keyword", "host=db.example gssencmode=require", "", ""},
		{"URL", "postgres://db.example/app?gssencmode=require", "", ""},
		{"Unix socket", "host=/tmp gssencmode=require", "", ""},
		{"PGGSSENCMODE", "host=db.example", "require", "PGGSSENCMODE"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Setenv("PGGSSENCMODE", tt.env)
			_, errNew := pgconnector.New(tt.dsn)
			_, errParse := pgconnector.ParseSettings(tt.dsn)
			for _, err := range []error{errNew, errParse} {
				var pe *pgconnector.ParseError
				if !errors.As(err, &pe) || pe.Key != "gssencmode" || pe.Env != tt.wantEnv {
					t.Fatalf("error %v (%#v), want a *ParseError for gssencmode from %q", err, pe, tt.wantEnv)
				}
				if !errors.Is(err, pgconnector.ErrNoGSS) {
					t.Errorf("error %v does not wrap ErrNoGSS", err)
				}
				for _, want := range []string{`gssencmode "require"`, "disable or prefer", "pgconnector_nogss", "not compiled in"} {
					if !strings.Contains(err.Error(), want) {
						t.Errorf("error %q does not say %q", err, want)
					}
				}
			}
		})
	}
	for _, mode := range []string{"prefer", "disable"} {
		c, err := pgconnector.New("host=db.example gssencmode=" + mode)
		if err != nil {
			t.Fatalf("gssencmode=%s: %v", mode, err)
		}
		c.Close()
	}
}

// A Kerberos setting is an error of New naming WithKerberos and the build tag, not ignored; an
// empty one (the default) is no setting.
func TestNoGSSWithKerberosIsAnError(t *testing.T) {
	for _, k := range []pgconnector.Kerberos{{CCache: "FILE:/tmp/krb5cc_app"}, {Krb5Conf: "/etc/krb5.conf"}, {ClientKeytab: "/etc/app.keytab"}, {Principal: "app@EXAMPLE.COM"}} {
		_, err := pgconnector.New("host=db.example", pgconnector.WithKerberos(k))
		if !errors.Is(err, pgconnector.ErrNoGSS) || !strings.Contains(err.Error(), "WithKerberos") || !strings.Contains(err.Error(), "pgconnector_nogss") {
			t.Errorf("WithKerberos(%+v): error %v, want one naming WithKerberos and wrapping ErrNoGSS", k, err)
		}
	}
	c, err := pgconnector.New("host=db.example", pgconnector.WithKerberos(pgconnector.Kerberos{}))
	if err != nil {
		t.Fatalf("WithKerberos(Kerberos{}): %v", err)
	}
	c.Close()
}

// With a valid ticket in KRB5CCNAME and a server that takes GSSAPI encryption (a build with
// Kerberos connects GSS-encrypted here), gssencmode=prefer and disable send no GSSENCRequest and
// connect in the clear, with no GSS step in the spans. A server whose pg_hba asks for GSSAPI
// authentication fails the connect with an error that wraps ErrNoGSS, as libpq built without
// GSSAPI ("GSSAPI authentication not supported").
func TestNoGSSAgainstAKerberosServer(t *testing.T) {
	lab := newKerberosLab(t)
	t.Setenv("KRB5_CONFIG", lab.kdc.Krb5Conf)
	t.Setenv("KRB5CCNAME", "FILE:"+lab.ccache)
	srv := lab.server(t, true, "host all all 127.0.0.1/32 trust")
	px := harness.ProxyT(t, fmt.Sprintf("%s:%d", srv.Host, srv.Port))
	host, port := px.Addr()
	dsn := func(extra string) string {
		return fmt.Sprintf("host=%s port=%d dbname=%s user=alice sslmode=disable %s", host, port, srv.Database, extra)
	}

	for _, mode := range []string{"", "gssencmode=prefer", "gssencmode=disable"} {
		t.Run("trust "+mode, func(t *testing.T) {
			before := px.Stats()
			rec, tp := newRecorder()
			db := sql.OpenDB(newConnector(t, dsn(mode), pgconnector.WithTracerProvider(tp)))
			defer db.Close()
			if got := transport(t, db); got != "plain" {
				t.Fatalf("transport %q, want plain", got)
			}
			st := px.Stats()
			if n := st.GSSENCRequests - before.GSSENCRequests; n != 0 {
				t.Errorf("%d GSSENCRequests, want none", n)
			}
			if n := st.StartupMessages - before.StartupMessages; n != 1 {
				t.Errorf("%d startup messages, want 1", n)
			}
			connects := 0
			for _, s := range rec.Ended() {
				switch s.Name() {
				case tracing.SpanConnect:
					connects++
				case tracing.SpanGSSCredentials, tracing.SpanGSSEncRequest, tracing.SpanServiceTicket, tracing.SpanGSSContext:
					t.Errorf("span %s", s.Name())
				}
			}
			if connects == 0 {
				t.Error("no connect span recorded")
			}
		})
	}

	if err := srv.SetHBA("host all all 127.0.0.1/32 gss include_realm=0 krb_realm=" + lab.kdc.Realm); err != nil {
		t.Fatal(err)
	}
	for _, mode := range []string{"gssencmode=prefer", "gssencmode=disable"} {
		t.Run("gss authentication "+mode, func(t *testing.T) {
			before := px.Stats()
			c := newConnector(t, dsn(mode))
			defer c.Close()
			conn, err := c.Connect(context.Background())
			if err == nil {
				conn.Close()
				t.Fatal("connected, want the server's request for GSSAPI authentication to fail the connect")
			}
			if !errors.Is(err, pgconnector.ErrNoGSS) {
				t.Errorf("error %v does not wrap ErrNoGSS", err)
			}
			for _, want := range []string{"requested GSSAPI authentication", "pgconnector_nogss"} {
				if !strings.Contains(err.Error(), want) {
					t.Errorf("error %q does not say %q", err, want)
				}
			}
			if n := px.Stats().GSSENCRequests - before.GSSENCRequests; n != 0 {
				t.Errorf("%d GSSENCRequests, want none", n)
			}
		})
	}
}
