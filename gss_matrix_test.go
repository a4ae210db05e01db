package pgconnector_test

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/pgconnector/pgconnector"
	"github.com/pgconnector/pgconnector/internal/harness"
)

// matrixQuery tells how the connection it runs on is protected: GSSAPI encryption, TLS, or
// neither.
const matrixQuery = "select coalesce((select encrypted from pg_stat_gssapi where pid = pg_backend_pid()), false), " +
	"coalesce((select ssl from pg_stat_ssl where pid = pg_backend_pid()), false)"

// The outcomes of a connect.
const (
	outcomeGSS   = "gss"
	outcomeTLS   = "tls"
	outcomePlain = "plain"
	outcomeError = "error"
)

func matrixOutcome(encrypted, ssl bool) string {
	switch {
	case encrypted && ssl:
		return "gss+tls" // impossible: shows as a mismatch if it ever happens
	case encrypted:
		return outcomeGSS
	case ssl:
		return outcomeTLS
	}
	return outcomePlain
}

// matrixServer is one server of the matrix: how its Kerberos and pg_hba are set up, TLS on or off.
type matrixServer struct {
	tls string // tls-off, tls-on
	srv *harness.Postgres
}

// matrixServerKind is the servers of one Kerberos and pg_hba setup, with TLS off and on.
type matrixServerKind struct {
	name    string // gss-ok, no-keytab, only-hostnogssenc
	servers []matrixServer
}

// matrixCreds is the client's Kerberos credential cache for a column of the matrix.
type matrixCreds struct {
	name   string // valid, none, expired
	ccache string
}

// startMatrixServers starts the six servers of the matrix on kdc, each with the role alice.
func startMatrixServers(t *testing.T, kdc *harness.KDC) []matrixServerKind {
	t.Helper()
	gssenc := "hostgssenc all all 127.0.0.1/32 gss include_realm=0 krb_realm=" + kdc.Realm
	nogssenc := "hostnogssenc all all 127.0.0.1/32 trust"
	kinds := []struct {
		name   string
		keytab bool
		hba    []string
	}{
		{"gss-ok", true, []string{gssenc, nogssenc}},
		{"no-keytab", false, []string{gssenc, nogssenc}},
		{"only-hostnogssenc", true, []string{nogssenc}},
	}
	var out []matrixServerKind
	for _, k := range kinds {
		kind := matrixServerKind{name: k.name}
		for _, tlsOn := range []bool{false, true} {
			srv := harness.StartT(t, harness.Options{
				TLS: tlsOn,
				GSS: &harness.GSSOptions{KDC: kdc, Keytab: k.keytab},
				HBA: k.hba,
			})
			if err := srv.CreateRole("alice"); err != nil {
				t.Fatal(err)
			}
			tlsName := "tls-off"
			if tlsOn {
				tlsName = "tls-on"
			}
			kind.servers = append(kind.servers, matrixServer{tls: tlsName, srv: srv})
		}
		out = append(out, kind)
	}
	return out
}

// psqlMatrixOutcome runs psql with the lab's environment for ccache and returns the outcome and,
// for an error, psql's message.
func psqlMatrixOutcome(t *testing.T, kdc *harness.KDC, ccache, conninfo string) (outcome, errText string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	out, err := harness.Psql(ctx, kdc.Env(ccache), conninfo, matrixQuery)
	if err != nil {
		return outcomeError, err.Error()
	}
	encrypted, ssl, ok := strings.Cut(out, "|")
	if !ok || (encrypted != "t" && encrypted != "f") || (ssl != "t" && ssl != "f") {
		t.Fatalf("psql printed %q, want t|f, f|t or f|f", out)
	}
	return matrixOutcome(encrypted == "t", ssl == "t"), ""
}

// connectorMatrixOutcome opens one connection with c, runs the query on it and closes it.
func connectorMatrixOutcome(t *testing.T, c *pgconnector.Connector) (outcome, errText string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	dc, err := c.Connect(ctx)
	if err != nil {
		return outcomeError, err.Error()
	}
	defer dc.Close()
	var encrypted, ssl bool
	if err := pgconnector.PgxConnOf(dc).QueryRow(ctx, matrixQuery).Scan(&encrypted, &ssl); err != nil {
		return outcomeError, "query: " + err.Error()
	}
	return matrixOutcome(encrypted, ssl), ""
}

// checkMatrixErrorText checks that the error text of a failed connect says why (it is not empty
// and no line of it ends before its reason) and does not show the password.
func checkMatrixErrorText(t *testing.T, who, errText, password string) {
	t.Helper()
	if strings.TrimSpace(errText) == "" {
		t.Errorf("%s: the connect failed with an empty error text", who)
	}
	for line := range strings.Lines(errText) {
		if strings.HasSuffix(strings.TrimSpace(line), ":") {
			t.Errorf("%s: a line of the error text gives no reason: %q", who, line)
		}
	}
	if strings.Contains(errText, password) {
		t.Errorf("%s: the error text shows the password: %s", who, errText)
	}
}

// matrixLab is what every combination of TestOutcomeMatchesPsql shares.
type matrixLab struct {
	kdc      *harness.KDC
	password string // in every connection string; neither trust nor gss uses it

	combinations int
	mismatches   []string
}

// check runs psql, then a new connector twice (cold cache, warm cache), with one combination,
// and fails the test when the connector's outcome differs from psql's.
func (l *matrixLab) check(t *testing.T, srv *harness.Postgres, cr matrixCreds, gssencmode, sslmode string) {
	t.Helper()
	l.combinations++
	dsn := strings.Join([]string{
		"host=localhost", "port=" + strconv.Itoa(srv.Port), "user=alice", "dbname=" + srv.Database,
		"password=" + l.password, "gssencmode=" + gssencmode, "sslmode=" + sslmode,
	}, " ")
	want, psqlErr := psqlMatrixOutcome(t, l.kdc, cr.ccache, dsn)
	if want == outcomeError {
		if strings.Contains(psqlErr, l.password) {
			t.Errorf("psql's error text shows the password: %s", psqlErr)
		}
		t.Logf("psql: %s", psqlErr)
	}

	c, err := pgconnector.New(dsn, pgconnector.WithKerberos(pgconnector.Kerberos{Krb5Conf: l.kdc.Krb5Conf, CCache: cr.ccache}))
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	defer c.Close()
	outcomes := []string{"psql=" + want}
	for _, phase := range []string{"cold", "warm"} {
		got, connErr := connectorMatrixOutcome(t, c)
		outcomes = append(outcomes, phase+"="+got)
		if got == outcomeError {
			checkMatrixErrorText(t, "connector ("+phase+" cache)", connErr, l.password)
			t.Logf("connector (%s cache): %s", phase, connErr)
		}
		if got != want {
			t.Errorf("connector (%s cache): %s, psql: %s\n  connector error: %s\n  psql error: %s",
				phase, got, want, connErr, psqlErr)
			l.mismatches = append(l.mismatches, fmt.Sprintf("%s (%s cache): connector %s, psql %s", t.Name(), phase, got, want))
		}
	}
	t.Logf("outcomes: %s", strings.Join(outcomes, " "))
}

// For every combination of gssencmode, sslmode, server (GSS working, GSS without a keytab, no
// hostgssenc line; TLS off and on) and client credentials (valid, none, expired), the connector
// ends as psql does: GSS-encrypted, TLS, plaintext, or an error; on a cold cache and on a warm
// one.
func TestOutcomeMatchesPsql(t *testing.T) {
	start := time.Now()
	// A clock skew of a second: the KDC and the servers refuse an expired ticket a second after
	// it has expired instead of five minutes later (MIT's default), so that "expired" is expired
	// for them too, not only for the client libraries.
	const skew = time.Second
	kdc := harness.StartKDCT(t, harness.KDCOptions{ClockSkew: skew})
	if _, err := kdc.AddPrincipal("alice"); err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()

	// The short ticket first, so that it expires while the servers start.
	const shortLife = 2 * time.Second
	expiredCC := filepath.Join(dir, "expired.ccache")
	kinitAt := time.Now()
	if err := kdc.Kinit(expiredCC, "alice", shortLife); err != nil {
		t.Fatal(err)
	}
	validCC := filepath.Join(dir, "valid.ccache")
	if err := kdc.Kinit(validCC, "alice", 0); err != nil {
		t.Fatal(err)
	}
	creds := []matrixCreds{
		{"valid", validCC},
		{"none", filepath.Join(dir, "absent", "none.ccache")}, // never created
		{"expired", expiredCC},
	}

	kinds := startMatrixServers(t, kdc)
	setup := time.Since(start)

	// Past the ticket's end time and the clock skew, with a margin.
	time.Sleep(time.Until(kinitAt.Add(shortLife + skew + time.Second)))
	// The expired cache still holds its ticket-granting ticket: "expired" is not "none".
	if out, err := kdc.Klist(expiredCC); err != nil || !strings.Contains(out, "krbtgt/") {
		t.Fatalf("klist of the expired ccache: %v\n%s", err, out)
	}

	var pw [12]byte
	rand.Read(pw[:])
	lab := &matrixLab{kdc: kdc, password: "pw" + hex.EncodeToString(pw[:])}

	gssencmodes := []string{"disable", "prefer", "require"}
	sslmodes := []string{"disable", "allow", "prefer", "require"}
	for _, kind := range kinds {
		t.Run(kind.name, func(t *testing.T) {
			for _, s := range kind.servers {
				t.Run(s.tls, func(t *testing.T) {
					for _, cr := range creds {
						t.Run(cr.name, func(t *testing.T) {
							for _, gm := range gssencmodes {
								t.Run("gssencmode="+gm, func(t *testing.T) {
									for _, sm := range sslmodes {
										t.Run("sslmode="+sm, func(t *testing.T) { lab.check(t, s.srv, cr, gm, sm) })
									}
								})
							}
						})
					}
				})
			}
		})
	}
	t.Logf("%d combinations (KDC, tickets and servers took %v), %d mismatches, total %v",
		lab.combinations, setup.Round(time.Millisecond), len(lab.mismatches), time.Since(start).Round(time.Millisecond))
	for _, m := range lab.mismatches {
		t.Logf("mismatch: %s", m)
	}
}
