package pgconnector_test

import (
	"context"
	"database/sql"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/pgconnector/pgconnector"
	"github.com/pgconnector/pgconnector/internal/harness"
	"github.com/pgconnector/pgconnector/internal/testpki"
)

// A connection URL is read once, as libpq reads it, and a server the reading must not trust gets
// nothing: no StartupMessage in the clear (the proxy's count) and no authentication (the server,
// which asks for a cleartext password, logs none). Each case was read otherwise before (the query
// cut at a "?" of the password, "+" taken for a space, a percent-encoded key not decoded), and the
// password reached the server.
func TestURLReadingSendsNothingToAnUntrustedServer(t *testing.T) {
	srv := harness.StartT(t, harness.Options{TLS: true, Auth: "password"})
	proxy := harness.ProxyT(t, srv.Addr())
	_, proxyPort := proxy.Addr()
	port := strconv.Itoa(proxyPort)
	t.Setenv("KRB5CCNAME", "FILE:"+filepath.Join(t.TempDir(), "no-ccache")) // no Kerberos ticket
	// A root certificate file at a path with "+", holding another CA than the server's.
	other := filepath.Join(t.TempDir(), "my+ca.pem")
	if err := os.WriteFile(other, testpki.PEMCert(testpki.NewCA(t).Cert), 0o600); err != nil {
		t.Fatal(err)
	}
	const password = "pa?ss" // libpq reads "pa?ss" as the password
	for _, tt := range []struct{ name, url string }{
		// The server's certificate is of the right CA, for another name than the one asked.
		{"verify-full after a ? in the password", "postgres://app:" + password + "@wrong.example:" + port +
			"/app?sslmode=verify-full&sslrootcert=" + srv.CAFile + "&hostaddr=127.0.0.1"},
		{"gssencmode=require after a ? in the password", "postgres://app:" + password + "@127.0.0.1:" + port +
			"/app?gssencmode=require&sslmode=disable"},
		{"percent-encoded sslmode", "postgres://app:secret@wrong.example:" + port +
			"/app?ssl%6Dode=verify-full&sslrootcert=" + srv.CAFile + "&hostaddr=127.0.0.1"},
		// require with a root file that exists verifies the chain (libpq), here against another CA.
		{"+ in the sslrootcert path", "postgres://app:secret@127.0.0.1:" + port + "/app?sslmode=require&sslrootcert=" + other},
	} {
		t.Run(tt.name, func(t *testing.T) {
			before, mark := proxy.Stats(), srv.LogMark()
			c, err := pgconnector.New(tt.url)
			if err != nil {
				t.Fatalf("New: %v", err)
			}
			db := sql.OpenDB(c)
			defer db.Close()
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			if err := db.PingContext(ctx); err == nil {
				t.Fatal("connected")
			} else {
				t.Log(err)
			}
			after := proxy.Stats()
			if n := after.StartupMessages - before.StartupMessages; n != 0 {
				t.Errorf("%d StartupMessages in the clear", n)
			}
			if log := srv.Log()[mark:]; strings.Contains(log, "authentication") || strings.Contains(log, "connection authorized") {
				t.Errorf("the server authenticated a client:\n%s", log)
			}
		})
	}
}

// A key that libpq does not know fails New, so that no connection is opened: before, it went to
// the server as a run-time parameter, after the cleartext password had been sent and accepted.
// Server parameters as pgx carries them keep working.
func TestMisspeltKeysSendNothing(t *testing.T) {
	srv := harness.StartT(t, harness.Options{Auth: "password"})
	base := "host=127.0.0.1 port=" + strconv.Itoa(srv.Port) + " user=" + srv.User + " dbname=" + srv.Database + " password=" + srv.Password + " "
	url := "postgres://" + srv.User + ":" + srv.Password + "@127.0.0.1:" + strconv.Itoa(srv.Port) + "/" + srv.Database + "?"
	for _, dsn := range []string{base + "sslmdoe=verify-full", base + "requireauth=scram-sha-256", url + "uzer=x", url + "u%7aer=x"} {
		mark := srv.LogMark()
		db, err := sql.Open("pgconnector", dsn)
		if err == nil {
			err = db.Ping()
			db.Close()
		}
		if err == nil || !strings.Contains(err.Error(), "did you mean") {
			t.Errorf("%s: %v, want a refusal naming the keyword meant", strings.TrimPrefix(dsn, base), err)
		}
		if strings.Contains(err.Error(), srv.Password) {
			t.Errorf("the error shows the password: %v", err)
		}
		if n, _ := srv.ConnectionsSince(mark); n != 0 {
			t.Errorf("%s: %d connections reached the server", strings.TrimPrefix(dsn, base), n)
		}
	}

	db, err := sql.Open("pgconnector", base+"search_path=app_schema,public myapp.tenant=t1")
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	var path, tenant string
	if err := db.QueryRow("select current_setting('search_path'), current_setting('myapp.tenant')").Scan(&path, &tenant); err != nil {
		t.Fatal(err)
	}
	if path != "app_schema,public" || tenant != "t1" {
		t.Errorf("search_path %q, myapp.tenant %q", path, tenant)
	}
}
