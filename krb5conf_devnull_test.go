package pgconnector_test

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/pgconnector/pgconnector"
	"github.com/pgconnector/pgconnector/internal/harness"
)

// KRB5_CONFIG naming /dev/null (the usual "no krb5.conf") before or after the lab's krb5.conf,
// or a krb5.conf with "include /dev/null", with a valid ticket: the connector reads /dev/null as
// an empty file, as MIT does, and so uses GSS encryption where psql (libpq 15, MIT krb5) does,
// under gssencmode=prefer and require. With /dev/null alone nothing says where the realm's KDC
// is (both look it up in DNS, and find none here): the outcome is psql's, whatever it is. The
// server takes GSS encryption and, without it, trust, so prefer shows which one was used.
func TestKrb5ConfDevNull(t *testing.T) {
	lab := newKerberosLab(t)
	srv := lab.server(t, true, lab.gssHBA(), "hostnogssenc all all 127.0.0.1/32 trust")
	withInclude := filepath.Join(t.TempDir(), "krb5.conf")
	if err := os.WriteFile(withInclude, []byte("include "+os.DevNull+"\ninclude "+lab.kdc.Krb5Conf+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct{ name, krb5Config string }{
		{"null first", os.DevNull + ":" + lab.kdc.Krb5Conf},
		{"null last", lab.kdc.Krb5Conf + ":" + os.DevNull},
		{"include of null", withInclude},
		{"null alone", os.DevNull},
	} {
		for _, mode := range []string{"prefer", "require"} {
			t.Run(c.name+"/"+mode, func(t *testing.T) {
				// A fresh ticket-granting ticket each time: psql keeps the service tickets it
				// gets in the cache, and one from an earlier case would need no KDC.
				ccache := filepath.Join(t.TempDir(), "alice.ccache")
				if err := lab.kdc.Kinit(ccache, "alice", 0); err != nil {
					t.Fatal(err)
				}
				dsn := aliceDSN(srv, "localhost", "sslmode=disable", "gssencmode="+mode, "connect_timeout=10")
				connector := newConnector(t, dsn, pgconnector.WithKerberos(pgconnector.Kerberos{Krb5Conf: c.krb5Config, CCache: ccache}))
				defer connector.Close()
				got, msg := connectorMatrixOutcome(t, connector)

				ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
				defer cancel()
				env := append(lab.kdc.Env(ccache), "KRB5_CONFIG="+c.krb5Config)
				want, psqlErr := outcomeGSS, ""
				out, err := harness.Psql(ctx, env, dsn, matrixQuery)
				switch {
				case err != nil:
					want, psqlErr = outcomeError, err.Error()
				case strings.HasPrefix(out, "t|"):
				case strings.HasPrefix(out, "f|"):
					want = outcomePlain
				default:
					t.Fatalf("psql printed %q", out)
				}
				if c.name != "null alone" && want != outcomeGSS {
					t.Fatalf("psql: %s (%s), want gss: the lab's krb5.conf is in the list", want, psqlErr)
				}
				if got != want {
					t.Errorf("connector: %s (%s), psql: %s (%s)", got, msg, want, psqlErr)
				}
				t.Logf("connector: %s %s; psql: %s %s", got, msg, want, psqlErr)
			})
		}
	}
}
