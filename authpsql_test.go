package pgconnector_test

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/pgconnector/pgconnector/internal/harness"
	"github.com/pgconnector/pgconnector/negotiation"
)

// psqlReason is the reason in psql's error line: libpq's message after
// `connection to server at "...", port N failed: `.
func psqlReason(msg string) string {
	i := strings.LastIndex(msg, " failed: ")
	if i < 0 {
		return msg
	}
	return strings.TrimSpace(msg[i+len(" failed: "):])
}

// channel_binding side by side with psql (libpq 15), and require_auth (libpq 16) against
// libpq's messages (fe-auth.c, check_expected_areq and auth_method_description), on real
// servers with each pg_hba method, TLS on: both connect, or both fail and the connector's
// error holds libpq's words.
func TestAuthRequirementsMatchLibpq(t *testing.T) {
	srvs := map[string]*harness.Postgres{}
	names := map[int]string{}
	for _, auth := range []string{"trust", "password", "md5", "scram-sha-256"} {
		srv := harness.StartT(t, harness.Options{TLS: true, Auth: auth})
		srvs[auth], names[srv.Port] = srv, auth
	}
	const (
		notSupported = "channel binding required but not supported by server's authentication request"
		notBound     = "channel binding required, but server authenticated client without channel binding"
	)
	for _, tt := range []struct {
		server, extra string
		psql          bool   // psql 15 knows the keywords: compare with it
		want          string // the outcome: server and transport, or "error"
		libpq         string // for an error: libpq's message
	}{
		{"scram-sha-256", "sslmode=require channel_binding=require", true, "scram-sha-256 tls", ""},
		{"scram-sha-256", "sslmode=require channel_binding=disable", true, "scram-sha-256 tls", ""},
		{"scram-sha-256", "sslmode=disable channel_binding=prefer", true, "scram-sha-256 plain", ""},
		{"scram-sha-256", "sslmode=disable channel_binding=require", true, "error", "channel binding required, but SSL not in use"},
		{"md5", "sslmode=require channel_binding=require", true, "error", notSupported},
		{"password", "sslmode=require channel_binding=require", true, "error", notSupported},
		{"trust", "sslmode=require channel_binding=require", true, "error", notBound},
		{"trust", "sslmode=disable channel_binding=require", true, "error", notBound},

		{"md5", "require_auth=scram-sha-256", false, "error", `authentication method requirement "scram-sha-256" failed: server requested a hashed password`},
		{"trust", "require_auth=md5", false, "error", `authentication method requirement "md5" failed: server did not complete authentication`},
		{"password", "require_auth=!password", false, "error", `authentication method requirement "!password" failed: server requested a cleartext password`},
		{"scram-sha-256", "require_auth=password,md5", false, "error", `authentication method requirement "password,md5" failed: server requested SASL authentication`},
		{"trust", "require_auth=none", false, "trust tls", ""},
		{"password", "require_auth=password", false, "password tls", ""},
		{"md5", "require_auth=!password,!scram-sha-256", false, "md5 tls", ""},
		{"scram-sha-256", "require_auth=scram-sha-256 channel_binding=require", false, "scram-sha-256 tls", ""},
	} {
		t.Run(tt.server+" "+tt.extra, func(t *testing.T) {
			srv := srvs[tt.server]
			dsn := srv.DSN(tt.extra)
			got, msg := connectorOutcome(t, names, dsn)
			if got = strings.TrimSuffix(got, " app="); got != tt.want || !strings.Contains(msg, tt.libpq) {
				t.Fatalf("connector: %s %q, want %s %q", got, msg, tt.want, tt.libpq)
			}
			if tt.want == "error" {
				// The client's refusal: an AuthError, no password in it.
				c := newConnector(t, dsn)
				defer c.Close()
				_, err := c.Connect(context.Background())
				var ae *negotiation.AuthError
				if !errors.As(err, &ae) {
					t.Errorf("error %v: want a negotiation.AuthError", err)
				}
				checkNoSecret(t, err, srv.Password)
			}
			if !tt.psql {
				return
			}
			pgot, pmsg := psqlOutcome(t, names, nil, dsn)
			if pgot = strings.TrimSuffix(pgot, " app="); pgot != tt.want {
				t.Fatalf("psql: %s %q, want %s", pgot, pmsg, tt.want)
			}
			if tt.want == "error" && psqlReason(pmsg) != tt.libpq {
				t.Errorf("psql says %q, want %q", psqlReason(pmsg), tt.libpq)
			}
		})
	}
}
