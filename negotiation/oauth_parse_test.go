package negotiation

import (
	"strings"
	"testing"
	"unicode/utf8"
)

// The server's JSON error (RFC 7628 section 3.2.2) read with libpq 18's rules and messages
// (fe-auth-oauth.c, handle_oauth_sasl_error and the oauth_json_* callbacks).
func TestParseOAuthAnswer(t *testing.T) {
	deep := strings.Repeat(`{"a":`, 8) + "1" + strings.Repeat("}", 8)
	tooDeep := strings.Repeat(`{"a":`, 9) + "1" + strings.Repeat("}", 9)
	for _, tt := range []struct {
		in   string
		want oauthAnswer
		err  string
	}{
		{`{"status":"invalid_token","openid-configuration":"https://i/.well-known/openid-configuration","scope":"openid db"}`,
			oauthAnswer{Status: "invalid_token", DiscoveryURI: "https://i/.well-known/openid-configuration", Scope: "openid db", hasStatus: true}, ""},
		{`{"status":"invalid_token","other":{"x":[1,2,{"y":null}]},"n":3}`, oauthAnswer{Status: "invalid_token", hasStatus: true}, ""},
		{`{"nested":{"status":1}}`, oauthAnswer{}, ""}, // only top-level keys count
		{`{}`, oauthAnswer{}, ""},
		{deep, oauthAnswer{}, ""},
		{tooDeep, oauthAnswer{}, "JSON is too deeply nested"},
		{`{"status":1}`, oauthAnswer{}, `field "status" must be a string`},
		{`{"scope":["a"]}`, oauthAnswer{}, `field "scope" must be a string`},
		{`{"openid-configuration":{}}`, oauthAnswer{}, `field "openid-configuration" must be a string`},
		{`{"status":"a","status":"b"}`, oauthAnswer{}, `field "status" is duplicated`},
		{`["status"]`, oauthAnswer{}, "top-level element must be an object"},
		{`"status"`, oauthAnswer{}, "top-level element must be an object"},
		{``, oauthAnswer{}, "failed to parse server's error response"},
		{`{"status":"a"`, oauthAnswer{}, "failed to parse server's error response"},
		{`{"status":"a"} {}`, oauthAnswer{}, "failed to parse server's error response"},
		{`{"status":"a"}x`, oauthAnswer{}, "failed to parse server's error response"},
		{"{\"status\":\"a\x00\"}", oauthAnswer{}, "embedded NULL"},
		{"{\"status\":\"\xff\"}", oauthAnswer{}, "not valid UTF-8"},
	} {
		got, err := parseOAuthAnswer([]byte(tt.in))
		switch {
		case tt.err != "" && (err == nil || !strings.Contains(err.Error(), tt.err)):
			t.Errorf("%.40q: error %v, want %q", tt.in, err, tt.err)
		case tt.err == "" && (err != nil || got != tt.want):
			t.Errorf("%.40q: %+v, %v; want %+v", tt.in, got, err, tt.want)
		}
	}
}

// Issuers derived from .well-known URIs by RFC 8414 section 3, with libpq 18's checks
// (fe-auth-oauth.c, issuer_from_well_known_uri).
func TestIssuerFromWellKnown(t *testing.T) {
	for _, tt := range []struct{ uri, issuer, err string }{
		{"https://i.example/.well-known/openid-configuration", "https://i.example", ""},
		{"https://i.example/.well-known/oauth-authorization-server", "https://i.example", ""},
		{"HTTPS://i.example/.well-known/openid-configuration", "HTTPS://i.example", ""},
		{"https://i.example/.well-known/oauth-authorization-server/tenant", "https://i.example/tenant", ""},
		{"https://i.example/tenant/.well-known/openid-configuration", "https://i.example/tenant", ""},
		{"https://i.example:8443/a/b/.well-known/openid-configuration", "https://i.example:8443/a/b", ""},
		{"http://i.example/.well-known/openid-configuration", "", "must use HTTPS"},
		{"https://i.example/.well-known/openid-configuration?x=1", "", "must not contain query or fragment components"},
		{"https://i.example/.well-known/openid-configuration#f", "", "must not contain query or fragment components"},
		{"https://i.example/config", "", "is not a .well-known URI"},
		{"https://i.example/.well-known/openid-configuration-bad", "", "uses an unsupported .well-known suffix"},
		{"https://i.example/.well-known/webfinger", "", "uses an unsupported .well-known suffix"},
		{"https://i.example/a/.well-known/openid-configuration/b", "", "uses an invalid format"},
	} {
		got, err := issuerFromWellKnown(tt.uri)
		switch {
		case tt.err != "" && (err == nil || !strings.Contains(err.Error(), tt.err)):
			t.Errorf("%s: error %v, want %q", tt.uri, err, tt.err)
		case tt.err == "" && (err != nil || got != tt.issuer):
			t.Errorf("%s: %q, %v; want %q", tt.uri, got, err, tt.issuer)
		}
	}
}

// FuzzOAuthAnswer: whatever the server sends as its JSON error (at most a message's 2000 bytes),
// the parser ends without a panic, and what it returns came from valid UTF-8.
func FuzzOAuthAnswer(f *testing.F) {
	for _, s := range []string{
		`{"status":"invalid_token","openid-configuration":"https://i/.well-known/openid-configuration","scope":"openid db"}`,
		`{"status":"a","status":"b"}`, `[1,{"a":[[[[[[[[1]]]]]]]]}]`, `{"a":{"b":{"c":{"d":{"e":{"f":{"g":{"h":{}}}}}}}}}`,
		`{"status":1}`, "", "{", "{\"status\":\"\\u0000\"}", `{"scope":"\ud800"}`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		if len(data) > 2000 {
			return
		}
		a, err := parseOAuthAnswer(data)
		if err != nil {
			if a != (oauthAnswer{}) {
				t.Errorf("an error with an answer: %+v", a)
			}
			return
		}
		if !utf8.Valid(data) {
			t.Errorf("invalid UTF-8 accepted")
		}
		if a.DiscoveryURI != "" {
			issuerFromWellKnown(a.DiscoveryURI) // must not panic
		}
	})
}
