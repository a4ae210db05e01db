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
// `connection to server at "...", port N failed: ` (the first " failed: ": libpq's reason may
// hold one, as in `authentication method requirement "md5" failed: ...`).
func psqlReason(msg string) string {
	_, after, ok := strings.Cut(msg, " failed: ")
	if !ok {
		return msg
	}
	return strings.TrimSpace(after)
}

// channel_binding and require_auth side by side with psql, on real servers with each pg_hba
// method, TLS on: both connect, or both fail and the connector's error holds libpq's words
// (fe-auth.c, check_expected_areq and auth_method_description). On PostgreSQL 15, psql with
// libpq 15 for channel_binding and with libpq 18 for require_auth (libpq 16); on 18, libpq 18
// for every row.
func TestAuthRequirementsMatchLibpq(t *testing.T) {
	libpq18, err := harness.Libpq18Env()
	if err != nil {
		t.Fatal(err)
	}
	for _, major := range []int{0, 18} {
		t.Run(map[int]string{0: "15", 18: "18"}[major], func(t *testing.T) {
			authMatrix(t, major, libpq18)
		})
	}
}

func authMatrix(t *testing.T, major int, libpq18 []string) {
	srvs := map[string]*harness.Postgres{}
	names := map[int]string{}
	for _, auth := range []string{"trust", "password", "md5", "scram-sha-256"} {
		srv := harness.StartT(t, harness.Options{Major: major, TLS: true, Auth: auth})
		srvs[auth], names[srv.Port] = srv, auth
	}
	const (
		notSupported = "channel binding required but not supported by server's authentication request"
		notBound     = "channel binding required, but server authenticated client without channel binding"
	)
	for _, tt := range []struct {
		server, extra string
		psql          bool   // libpq 15 knows the keywords: compare with it on PostgreSQL 15
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
			var env []string // libpq 15
			if !tt.psql || major == 18 {
				env = libpq18
			}
			pgot, pmsg := psqlOutcome(t, names, env, dsn)
			if pgot = strings.TrimSuffix(pgot, " app="); pgot != tt.want {
				t.Fatalf("psql (libpq %s): %s %q, want %s", map[bool]string{true: "18", false: "15"}[env != nil], pgot, pmsg, tt.want)
			}
			if tt.want == "error" && psqlReason(pmsg) != tt.libpq {
				t.Errorf("psql says %q, want %q", psqlReason(pmsg), tt.libpq)
			}
		})
	}
}
