package pgconnector_test

import (
	"context"
	"errors"
	"math/big"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/pgconnector/pgconnector/internal/harness"
	"github.com/pgconnector/pgconnector/internal/testpki"
	"github.com/pgconnector/pgconnector/negotiation"
)

// A client certificate the server has revoked (ssl_crl_file, a version 1 CRL as PostgreSQL's
// SSL tests make with "openssl ca -gencrl"; src/test/ssl/t/001_ssltests.pl, "certificate
// authorization fails with revoked client cert"), against PostgreSQL 15 and 18, beside psql on
// libpq 18: both fail, naming the server's TLS alert as libpq does ("SSL error: sslv3 alert
// certificate revoked"), in TLS 1.3 (where the alert comes after the client's handshake, on the
// first read) and TLS 1.2 (during the handshake). The connector's error is the server's refusal
// of the client certificate, not a reset; the certificate not revoked connects.
func TestClientCertificateRevokedByServer(t *testing.T) {
	env, err := harness.Libpq18Env()
	if err != nil {
		t.Fatal(err)
	}
	for _, major := range []int{15, 18} {
		t.Run("PostgreSQL "+map[int]string{15: "15", 18: "18"}[major], func(t *testing.T) {
			srv := harness.StartT(t, harness.Options{Major: major, TLS: true})
			ca := newClientCA(t)
			good, revoked := ca.issue(t, srv.User), ca.issue(t, srv.User)
			serial, ok := new(big.Int).SetString(revoked.serial, 10)
			if !ok {
				t.Fatal(revoked.serial)
			}
			crl := testpki.MakeCRLv1(t, testpki.CRLSpec{By: &testpki.CA{Cert: ca.cert, Key: ca.key}, Revoke: []*big.Int{serial}})
			if err := srv.SetClientCA(ca.pem); err != nil {
				t.Fatal(err)
			}
			if err := srv.SetClientCRL(testpki.PEMCRL(crl)); err != nil {
				t.Fatal(err)
			}
			if err := srv.SetHBA("hostssl all all 127.0.0.1/32 trust clientcert=verify-ca"); err != nil {
				t.Fatal(err)
			}
			dir := t.TempDir()
			files := func(name string, c *clientCert) []string {
				cert, key := filepath.Join(dir, name+".crt"), filepath.Join(dir, name+".key")
				if os.WriteFile(cert, c.certPEM, 0o600) != nil || os.WriteFile(key, c.keyPEM, 0o600) != nil {
					t.Fatal("writing the client certificate")
				}
				return []string{"sslcert=" + cert, "sslkey=" + key}
			}
			goodKeys, revokedKeys := files("good", good), files("revoked", revoked)
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
			defer cancel()
			for _, tc := range []struct {
				name    string
				version []string
			}{
				{"TLS 1.3", nil},
				{"TLS 1.2", []string{"ssl_max_protocol_version=TLSv1.2"}},
			} {
				t.Run(tc.name, func(t *testing.T) {
					for _, mode := range []string{"require", "prefer"} {
						base := append([]string{"sslmode=" + mode, "sslrootcert=" + srv.CAFile}, tc.version...)
						dsn := srv.DSN(append(base, revokedKeys...)...)
						_, psqlErr := harness.Psql(ctx, env, dsn, "select 1")
						if psqlErr == nil || !strings.Contains(psqlErr.Error(), "alert certificate revoked") {
							t.Fatalf("sslmode=%s: psql (libpq 18): %v, want the server's alert certificate revoked", mode, psqlErr)
						}
						t.Logf("sslmode=%s: psql: %v", mode, psqlErr)
						_, err := newConnector(t, dsn).Connect(ctx)
						t.Logf("sslmode=%s: pgconnector: %v", mode, err)
						if err == nil {
							t.Fatalf("sslmode=%s: a revoked client certificate connected", mode)
						}
						want := "SSL error: sslv3 alert certificate revoked"
						if mode == "prefer" && tc.version != nil {
							// The alert ends the handshake: libpq, as the connector, goes on in
							// plaintext, which pg_hba refuses; the last attempt's error is that.
							want = "no pg_hba.conf entry"
						}
						if msg := err.Error(); !strings.Contains(msg, want) ||
							strings.Contains(msg, "reset") || strings.Contains(msg, "closed") {
							t.Errorf("sslmode=%s: %v, want libpq's %q", mode, err, want)
						}
						var ce *negotiation.ConnectError
						if !errors.As(err, &ce) || len(ce.Hosts) != 1 {
							t.Fatalf("sslmode=%s: %T, want a ConnectError of one host", mode, err)
						}
						if c, err := newConnector(t, srv.DSN(append(base, goodKeys...)...)).Connect(ctx); err != nil {
							t.Errorf("sslmode=%s: the certificate not revoked: %v", mode, err)
						} else {
							c.Close()
						}
					}
				})
			}
		})
	}
}
