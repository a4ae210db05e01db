package negotiation

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
)

// failingGSS is a GSS client whose credentials check fails (not a timeout) with err, Missing
// set to missing.
type failingGSS struct {
	missing string
	err     error
}

func (f failingGSS) Credentials(context.Context) (GSSCredentials, error) {
	return GSSCredentials{Missing: f.missing}, f.err
}

func (failingGSS) ServiceTicket(context.Context, string) (GSSSession, bool, error) {
	return nil, false, errors.New("no credentials")
}

// A credentials check that fails counts as no credentials (libpq: gss_acquire_cred failed), and
// gssencmode=require's error gives its reason: Missing, else the error's text. No server is
// needed: require without credentials fails before anything is sent.
func TestRequireSaysWhyCredentialsFailed(t *testing.T) {
	for _, tt := range []struct {
		name    string
		gss     failingGSS
		wantMsg string
	}{
		{"Missing set", failingGSS{"krb5.conf: /etc/krb5.conf:3: it is a FIFO", errors.New("gss: reading")}, "krb5.conf: /etc/krb5.conf:3: it is a FIFO"},
		{"Missing empty", failingGSS{"", errors.New("gss: reading /etc/krb5.conf: boom")}, "gss: reading /etc/krb5.conf: boom"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			n, err := NewNegotiator(Config{
				Hosts:      []Host{{Host: "127.0.0.1", Port: 1, SSLMode: SSLModeDisable}},
				GSSEncMode: GSSEncModeRequire,
				GSS:        tt.gss,
				Cache:      NewCache(0),
			})
			if err != nil {
				t.Fatal(err)
			}
			base, err := pgconn.ParseConfig("host=127.0.0.1 port=1 user=u dbname=d sslmode=disable")
			if err != nil {
				t.Fatal(err)
			}
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			err = n.Connect(ctx, pgxOpen(n, base))
			if !errors.Is(err, ErrGSSNoCredentials) || !strings.Contains(err.Error(), ": "+tt.wantMsg) {
				t.Fatalf("connect: %v, want %v ending with %q", err, ErrGSSNoCredentials, tt.wantMsg)
			}
		})
	}
}
