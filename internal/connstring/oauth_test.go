package connstring

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestOAuthKeys: the OAuth keys of libpq 18 are read from a string, a URL and a service file,
// an empty value is not given, none is sent to the server, and the client secret is shown by
// neither the settings' String nor %v and %#v.
func TestOAuthKeys(t *testing.T) {
	const secret = "cl13nt-s3cret-not-to-show"
	dir := t.TempDir()
	sf := filepath.Join(dir, "pg_service.conf")
	if err := os.WriteFile(sf, []byte("[s]\nhost=a\noauth_issuer=https://issuer.example/t\noauth_client_id=svc\noauth_client_secret="+secret+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, tt := range []struct {
		dsn  string
		want OAuth
	}{
		{"host=a oauth_issuer=https://i.example oauth_client_id=c oauth_client_secret=" + secret + " oauth_scope='openid db'",
			OAuth{Issuer: "https://i.example", ClientID: "c", ClientSecret: secret, Scope: "openid db"}},
		{"postgres://a/db?oauth_issuer=https%3A%2F%2Fi.example&oauth_client_id=c&oauth_scope=x", OAuth{Issuer: "https://i.example", ClientID: "c", Scope: "x"}},
		{"service=s servicefile=" + sf, OAuth{Issuer: "https://issuer.example/t", ClientID: "svc", ClientSecret: secret}},
		// A value in the string wins over the service file's, and empty it is not given.
		{"service=s oauth_client_id='' oauth_issuer=https://other.example servicefile=" + sf, OAuth{Issuer: "https://other.example", ClientSecret: secret}},
		{"host=a oauth_issuer='' oauth_client_id='' oauth_client_secret='' oauth_scope=''", OAuth{}},
	} {
		s, err := Parse(tt.dsn)
		if err != nil {
			t.Errorf("%s: %v", tt.dsn, err)
			continue
		}
		if s.OAuth != tt.want {
			t.Errorf("%s: %v, want %v", tt.dsn, s.OAuth, tt.want)
		}
		for k := range s.Config.RuntimeParams {
			if strings.HasPrefix(k, "oauth") {
				t.Errorf("%s: %s is sent to the server", tt.dsn, k)
			}
		}
		for _, shown := range []string{s.OAuth.String(), fmt.Sprintf("%v", s.OAuth), fmt.Sprintf("%#v", s.OAuth), fmt.Sprintf("%+v", s)} {
			if strings.Contains(shown, secret) {
				t.Errorf("%s: the client secret is shown: %s", tt.dsn, shown)
			}
		}
	}
}
