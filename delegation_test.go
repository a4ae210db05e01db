package pgconnector_test

import (
	"context"
	"database/sql"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/pgconnector/pgconnector"
	"github.com/pgconnector/pgconnector/internal/harness"
	"github.com/pgconnector/pgconnector/tracing"
)

// gssdelegation=1 and 0 over GSS encryption and over GSS authentication, to a server whose
// pg_hba takes Kerberos both ways, checked on the server's side by what the server version
// can show:
//   - PostgreSQL 16 and later, with gss_accept_delegation = on (be-secure-gssapi.c,
//     secure_open_gssapi; auth.c, pg_GSS_recvauth: the acceptor asks for delegated
//     credentials only then): pg_stat_gssapi.credentials_delegated is true with a forwardable
//     ticket and gssdelegation=1, false with gssdelegation=0 or a ticket that is not
//     forwardable, and false with gssdelegation=1 when gss_accept_delegation is off.
//   - PostgreSQL 15: neither the column nor the setting exists (so this test notices a newer
//     server in the lab and checks it), and every connection succeeds.
//
// Over GSS encryption the gss_context span also says what the client sent
// (pgconnector.gss.delegated, pgconnector.gss.delegation.skipped).
func TestGSSDelegationByServerVersion(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	version, err := harness.ServerVersion(ctx)
	if err != nil {
		t.Fatal(err)
	}
	lab := newKerberosLab(t)
	fwd := filepath.Join(t.TempDir(), "alice-forwardable.ccache")
	if err := lab.kdc.KinitForwardable(fwd, "alice", 0); err != nil {
		t.Fatal(err)
	}
	gssLine := "all all 127.0.0.1/32 gss include_realm=0 krb_realm=" + lab.kdc.Realm
	hba := []string{"hostgssenc " + gssLine, "hostnogssenc " + gssLine}
	startServer := func(t *testing.T, accept bool) *harness.Postgres {
		t.Helper()
		var settings map[string]string
		if accept && version >= 16 {
			settings = map[string]string{"gss_accept_delegation": "on"}
		}
		srv := harness.StartT(t, harness.Options{GSS: &harness.GSSOptions{KDC: lab.kdc, Keytab: true}, HBA: hba, Settings: settings})
		if err := srv.CreateRole("alice"); err != nil {
			t.Fatal(err)
		}
		return srv
	}
	srv := startServer(t, true)

	// The server's catalog agrees with the version the harness found: the column and the
	// setting exist exactly from 16 on.
	admin := sql.OpenDB(newConnector(t, "host="+srv.SocketDir+" port="+strconv.Itoa(srv.Port)+" user=postgres dbname="+srv.Database))
	defer admin.Close()
	var versionNum, columns, settings int
	err = admin.QueryRowContext(ctx, `select current_setting('server_version_num')::int,
		(select count(*) from pg_attribute where attrelid = 'pg_stat_gssapi'::regclass and attname = 'credentials_delegated'),
		(select count(*) from pg_settings where name = 'gss_accept_delegation')`).Scan(&versionNum, &columns, &settings)
	if err != nil {
		t.Fatal(err)
	}
	if versionNum/10000 != version {
		t.Fatalf("server_version_num = %d, the harness found PostgreSQL %d", versionNum, version)
	}
	has := version >= 16
	if (columns == 1) != has || (settings == 1) != has {
		t.Fatalf("PostgreSQL %d: pg_stat_gssapi.credentials_delegated present = %v, gss_accept_delegation present = %v; want %v for both",
			version, columns == 1, settings == 1, has)
	}
	if has {
		var accept string
		if err := admin.QueryRowContext(ctx, "select current_setting('gss_accept_delegation')").Scan(&accept); err != nil || accept != "on" {
			t.Fatalf("gss_accept_delegation = %q, %v; want on", accept, err)
		}
	}

	// connect opens one connection to p and reports pg_stat_gssapi of it (delegated is false
	// before PostgreSQL 16) and the delegation attributes of the gss_context span.
	type result struct {
		encrypted, delegated bool
		spanDelegated        string // pgconnector.gss.delegated: "true", "false" or "" (absent)
		spanSkipped          string // pgconnector.gss.delegation.skipped
	}
	connect := func(t *testing.T, p *harness.Postgres, ccache string, extra ...string) result {
		t.Helper()
		rec, tp := newRecorder()
		c := newConnector(t, aliceDSN(p, "localhost", append([]string{"connect_timeout=20"}, extra...)...),
			pgconnector.WithKerberos(pgconnector.Kerberos{Krb5Conf: lab.kdc.Krb5Conf, CCache: ccache}),
			pgconnector.WithTracerProvider(tp))
		db := sql.OpenDB(c)
		defer db.Close()
		query := "select encrypted, gss_authenticated, principal, false from pg_stat_gssapi where pid = pg_backend_pid()"
		if version >= 16 {
			query = "select encrypted, gss_authenticated, principal, credentials_delegated from pg_stat_gssapi where pid = pg_backend_pid()"
		}
		var r result
		var authenticated bool
		var principal string
		if err := db.QueryRowContext(ctx, query).Scan(&r.encrypted, &authenticated, &principal, &r.delegated); err != nil {
			t.Fatal(err)
		}
		if !authenticated || principal != "alice@"+lab.kdc.Realm {
			t.Errorf("gss_authenticated = %v, principal = %q", authenticated, principal)
		}
		r.spanDelegated, r.spanSkipped = spanAttr(rec, tracing.GSSDelegatedKey), spanAttr(rec, tracing.GSSDelegationSkippedKey)
		return r
	}

	for _, path := range []struct {
		name, gssencmode string
		encrypted        bool
	}{
		{"GSS encryption", "gssencmode=require", true},
		{"GSS authentication", "gssencmode=disable", false},
	} {
		t.Run(path.name, func(t *testing.T) {
			for _, tc := range []struct {
				name, ccache, deleg string
				delegated           bool   // credentials_delegated on 16+
				spanDelegated       string // over GSS encryption
				spanSkipped         string
			}{
				{"forwardable, gssdelegation=1", fwd, "gssdelegation=1", true, "true", ""},
				{"forwardable, gssdelegation=0", fwd, "gssdelegation=0", false, "", ""},
				{"not forwardable, gssdelegation=1", lab.ccache, "gssdelegation=1", false, "false", "not-forwardable"},
			} {
				t.Run(tc.name, func(t *testing.T) {
					r := connect(t, srv, tc.ccache, path.gssencmode, tc.deleg)
					if r.encrypted != path.encrypted {
						t.Errorf("encrypted = %v, want %v", r.encrypted, path.encrypted)
					}
					if want := tc.delegated && has; r.delegated != want {
						t.Errorf("PostgreSQL %d: credentials_delegated = %v, want %v", version, r.delegated, want)
					}
					if path.encrypted && (r.spanDelegated != tc.spanDelegated || r.spanSkipped != tc.spanSkipped) {
						t.Errorf("gss_context span: delegated = %q, skipped = %q; want %q, %q", r.spanDelegated, r.spanSkipped, tc.spanDelegated, tc.spanSkipped)
					}
				})
			}
		})
	}

	// With gss_accept_delegation off (16's default) the server does not take the credentials
	// that the client sends.
	t.Run("gss_accept_delegation off", func(t *testing.T) {
		off := startServer(t, false)
		for _, gssencmode := range []string{"gssencmode=require", "gssencmode=disable"} {
			r := connect(t, off, fwd, gssencmode, "gssdelegation=1")
			if r.delegated {
				t.Errorf("%s: credentials_delegated = true with gss_accept_delegation off", gssencmode)
			}
			if gssencmode == "gssencmode=require" && r.spanDelegated != "true" {
				t.Errorf("%s: gss_context span delegated = %q, want true (the client sent them)", gssencmode, r.spanDelegated)
			}
		}
	})
}

// spanAttr returns the value of key on the ended spans of rec (the last one that has it), or "".
func spanAttr(rec *tracetest.SpanRecorder, key attribute.Key) string {
	v := ""
	for _, s := range rec.Ended() {
		for _, kv := range s.Attributes() {
			if kv.Key == key {
				v = kv.Value.Emit()
			}
		}
	}
	return v
}
