package gss_test

import (
	"bytes"
	"context"
	"database/sql"
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/pgconnector/pgconnector"
	"github.com/pgconnector/pgconnector/internal/gss"
	"github.com/pgconnector/pgconnector/internal/harness"
)

// gssdelegation=1 against PostgreSQL 15 with MIT krb5 1.20 (Debian 12), over GSS encryption
// and with GSS authentication on a connection without it. PostgreSQL 15 does not ask for
// delegated credentials (gss_accept_sec_context's delegated_cred_handle is NULL), but MIT
// 1.20's acceptor decrypts and stores the KRB-CRED all the same (accept_sec_context.c,
// rd_and_store_for_creds: the early return for a NULL handle came in a later release) and
// fails the context when it cannot: a corrupted KRB-CRED is refused, which shows the real
// acceptor reads ours. pg_stat_gssapi.credentials_delegated needs PostgreSQL 16.
func TestDelegationWithPostgres(t *testing.T) {
	k := harness.StartKDCT(t, harness.KDCOptions{})
	if _, err := k.AddPrincipal("alice"); err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	fwd, plain := filepath.Join(dir, "fwd.ccache"), filepath.Join(dir, "plain.ccache")
	if err := k.KinitForwardable(fwd, "alice", 0); err != nil {
		t.Fatal(err)
	}
	if err := k.Kinit(plain, "alice", 0); err != nil {
		t.Fatal(err)
	}
	gssLine := "all all 127.0.0.1/32 gss include_realm=0 krb_realm=" + k.Realm
	srv := harness.StartT(t, harness.Options{
		GSS: &harness.GSSOptions{KDC: k, Keytab: true},
		HBA: []string{"hostgssenc " + gssLine, "hostnogssenc " + gssLine},
	})
	if err := srv.CreateRole("alice"); err != nil {
		t.Fatal(err)
	}
	// connect opens one connection and reads pg_stat_gssapi of it.
	connect := func(t *testing.T, ccache, extra string) (encrypted bool, err error) {
		t.Helper()
		dsn := fmt.Sprintf("host=localhost port=%d dbname=%s user=alice connect_timeout=20 %s", srv.Port, srv.Database, extra)
		c, err := pgconnector.New(dsn, pgconnector.WithKerberos(pgconnector.Kerberos{Krb5Conf: k.Krb5Conf, CCache: ccache}))
		if err != nil {
			t.Fatal(err)
		}
		db := sql.OpenDB(c)
		defer db.Close()
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		var authenticated bool
		var principal string
		err = db.QueryRowContext(ctx, "select encrypted, gss_authenticated, principal from pg_stat_gssapi where pid = pg_backend_pid()").Scan(&encrypted, &authenticated, &principal)
		if err == nil && (!authenticated || principal != "alice@"+k.Realm) {
			t.Errorf("gss_authenticated=%v principal=%q", authenticated, principal)
		}
		return encrypted, err
	}
	paths := []struct {
		name      string
		gssenc    string
		encrypted bool
	}{
		{"GSS encryption", "gssencmode=require", true},
		{"GSS authentication", "gssencmode=disable", false},
	}
	for _, p := range paths {
		t.Run(p.name, func(t *testing.T) {
			for _, tc := range []struct {
				name, ccache, deleg string
			}{
				{"forwardable, gssdelegation=1", fwd, "gssdelegation=1"},
				{"forwardable, gssdelegation=0", fwd, "gssdelegation=0"},
				{"not forwardable, gssdelegation=1", plain, "gssdelegation=1"},
			} {
				t.Run(tc.name, func(t *testing.T) {
					encrypted, err := connect(t, tc.ccache, p.gssenc+" "+tc.deleg)
					if err != nil {
						t.Fatal(err)
					}
					if encrypted != p.encrypted {
						t.Errorf("encrypted = %v", encrypted)
					}
				})
			}
			t.Run("corrupted KRB-CRED is refused", func(t *testing.T) {
				calls := 0
				gss.SetKrbCredHook(t, func(b []byte) []byte {
					calls++
					b = bytes.Clone(b)
					b[len(b)-1] ^= 1 // the last byte of the enc-part's cipher (its HMAC)
					return b
				})
				mark := len(srv.Log())
				_, err := connect(t, fwd, p.gssenc+" gssdelegation=1")
				if err == nil {
					t.Fatal("the server accepted a context whose KRB-CRED does not decrypt")
				}
				// The encryption path's server closes the connection and logs why (MIT: the
				// plaintext fallback of krb5_rd_cred fails last, "ASN.1 value too large"); the
				// authentication path's sends the acceptor's KRB-ERROR.
				if p.encrypted {
					if log := srv.Log()[mark:]; !strings.Contains(log, "could not accept GSSAPI security context") {
						t.Errorf("refused (%v), but the server log says:\n%s", err, log)
					}
				} else if !strings.Contains(err.Error(), "the server rejected the Kerberos authentication") {
					t.Errorf("refused with %v", err)
				}
				if calls == 0 {
					t.Fatal("no KRB-CRED was built")
				}
				// The same hook without delegation: nothing to corrupt, the connection works.
				if _, err := connect(t, fwd, p.gssenc+" gssdelegation=0"); err != nil {
					t.Errorf("gssdelegation=0: %v", err)
				}
			})
		})
	}
}
