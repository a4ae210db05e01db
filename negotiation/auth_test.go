package negotiation

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"io"
	"strings"
	"testing"
	"testing/iotest"

	"github.com/jackc/pgx/v5/pgproto3"

	"github.com/pgconnector/pgconnector/internal/scram"
)

// testExchange returns an authentication exchange reading stream, as pgx would, for an attempt of
// method m with settings s, and what the client writes.
func testExchange(t *testing.T, stream []byte, m Method, s authSettings, oneByte bool) (*authExchange, *bytes.Buffer) {
	t.Helper()
	keys := scram.NewKeys(scram.Config{})
	t.Cleanup(keys.Close)
	n := &Negotiator{scram: keys}
	if s.channelBinding == "" {
		s.channelBinding = "prefer"
	}
	var r io.Reader = bytes.NewReader(stream)
	if oneByte {
		r = iotest.OneByteReader(r)
	}
	w := &bytes.Buffer{}
	return &authExchange{r: r, w: w, at: &attempt{n: n, method: m}, s: s, ctx: context.Background()}, w
}

// After the exchange, pgx sees what it must (NegotiateProtocolVersion, AuthenticationOk and what
// follows, or the ErrorResponse), whatever the read sizes; the requests the exchange answered are
// not shown to it, and the exchange says which authentication the server asked for.
func TestAuthExchange(t *testing.T) {
	negotiate := backendMsg('v', append(binary.BigEndian.AppendUint32(nil, 196608), 0, 0, 0, 0))
	ok := backendMsg('R', authBody(0))
	errorMsg := backendMsg('E', []byte("SFATAL\x00C28P01\x00\x00"))
	pw := func(p string) []byte { b, _ := (&pgproto3.PasswordMessage{Password: p}).Encode(nil); return b }
	for _, tt := range []struct {
		name    string
		method  Method // of the attempt; 0: plaintext
		stream  []byte // the server's messages up to AuthenticationOk (or the error)
		pgx     []byte // what pgx must see of them
		written []byte // what the client must send
		want    string // the authentication method
	}{
		{"trust", 0, ok, ok, nil, "trust"},
		{"cleartext", 0, cat(backendMsg('R', authBody(3)), ok), ok, pw("secret"), "password"},
		{"md5", 0, cat(backendMsg('R', authBody(5, 1, 2, 3, 4)), ok), ok, pw(md5Password("u", "secret", []byte{1, 2, 3, 4})), "md5"},
		{"after NegotiateProtocolVersion", 0, cat(negotiate, backendMsg('R', authBody(3)), ok), cat(negotiate, ok), pw("secret"), "password"},
		{"error first", 0, errorMsg, errorMsg, nil, ""},
		{"wrong password", 0, cat(backendMsg('R', authBody(3)), errorMsg), errorMsg, pw("secret"), "password"},
		{"trust over TLS", MethodSSL, ok, ok, nil, "trust"},
		// Over GSS encryption, AuthenticationOk at once is pg_hba gss (the encrypted channel
		// authenticated the client) or trust: nothing on the wire tells them apart.
		{"AuthenticationOk at once over GSS encryption", MethodGSS, ok, ok, nil, "gss-or-trust"},
		{"password over GSS encryption", MethodGSS, cat(backendMsg('R', authBody(3)), ok), ok, pw("secret"), "password"},
	} {
		for _, oneByte := range []bool{false, true} {
			name := tt.name
			if oneByte {
				name += ", one byte at a time"
			}
			t.Run(name, func(t *testing.T) {
				// After ReadyForQuery anything may follow, however large.
				rest := cat(backendMsg('K', make([]byte, 8)), backendMsg('S', make([]byte, 5000)), backendMsg('S', []byte{0, 0}),
					backendMsg('Z', []byte{'I'}), backendMsg('S', make([]byte, 50000)))
				x, w := testExchange(t, cat(tt.stream, rest), tt.method, authSettings{user: "u", password: "secret"}, oneByte)
				got, err := io.ReadAll(x)
				if err != nil {
					t.Fatal(err)
				}
				if !bytes.Equal(got, cat(tt.pgx, rest)) {
					t.Errorf("pgx saw %q, want %q", got, cat(tt.pgx, rest))
				}
				if !bytes.Equal(w.Bytes(), tt.written) {
					t.Errorf("the client wrote %q, want %q", w.Bytes(), tt.written)
				}
				if x.at.authMethod != tt.want {
					t.Errorf("auth method = %q, want %q", x.at.authMethod, tt.want)
				}
			})
		}
	}
}

func cat(parts ...[]byte) []byte { return bytes.Join(parts, nil) }

// Before AuthenticationOk only small authentication requests, NegotiateProtocolVersion and
// ErrorResponse may come (fe-connect.c, CONNECTION_AWAITING_RESPONSE): a forged length must not
// make the client allocate a gigabyte for a server that has not authenticated.
func TestAuthExchangeRules(t *testing.T) {
	huge := []byte{'R', 0x39, 0x30, 0x39, 0x31} // a length of 959 MB
	for _, tt := range []struct {
		name   string
		stream []byte
		want   string
	}{
		{"huge authentication request", huge, "during authentication (libpq allows 8 to 2000)"},
		{"short authentication request", backendMsg('R', []byte{0, 0}), "of 6 bytes"},
		{"query result before authentication", backendMsg('D', []byte{0, 0}), "message type 0x44"},
		{"ReadyForQuery before authentication", backendMsg('Z', []byte{'I'}), "message type 0x5a"},
		{"huge error", []byte{'E', 0, 0x01, 0, 0}, "ErrorResponse of 65536 bytes"},
		{"huge message after a password request", cat(backendMsg('R', authBody(3)), huge), "959"},
		{"huge BackendKeyData after AuthenticationOk", cat(backendMsg('R', authBody(0)), []byte{'K', 0x37, 0x32, 0x30, 0x30}), "a message 'K' of 926036016 bytes"},
		{"negative length", []byte{'R', 0xff, 0xff, 0xff, 0xff}, "4294967295 bytes"},
		{"MD5 salt of 3 bytes", backendMsg('R', authBody(5, 1, 2, 3)), "salt of 3 bytes"},
		{"SASL list not terminated", backendMsg('R', authBody(10, []byte("SCRAM-SHA-256")...)), "not terminated"},
		{"SASLContinue first", backendMsg('R', authBody(11, []byte("r=x")...)), "AuthenticationSASLContinue out of order"},
		{"SASLFinal first", backendMsg('R', authBody(12, []byte("v=x")...)), "AuthenticationSASLFinal out of order"},
		{"GSSContinue first", backendMsg('R', authBody(8, 1)), "AuthenticationGSSContinue out of order"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			x, _ := testExchange(t, tt.stream, 0, authSettings{user: "u", password: "pw"}, false)
			_, err := io.ReadAll(x)
			var pe *ProtocolError
			if !errors.As(err, &pe) || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("error %v, want a ProtocolError with %q", err, tt.want)
			}
		})
	}
}

// An attempt without a password refuses the server's password request (cleartext, MD5, SASL)
// before anything is sent, as libpq does (fe-auth.c, pg_fe_sendauth: "no password supplied"), and
// the connect stops there; requests that need no password pass.
func TestAuthExchangeNoPassword(t *testing.T) {
	ok := backendMsg('R', authBody(0))
	for _, tt := range []struct {
		name   string
		stream []byte
		refuse bool
	}{
		{"cleartext", cat(backendMsg('R', authBody(3)), ok), true},
		{"md5", cat(backendMsg('R', authBody(5, 1, 2, 3, 4)), ok), true},
		{"scram", cat(backendMsg('R', authBody(10, []byte("SCRAM-SHA-256\x00\x00")...)), ok), true},
		{"trust", ok, false},
	} {
		t.Run(tt.name, func(t *testing.T) {
			x, w := testExchange(t, tt.stream, 0, authSettings{user: "u"}, true)
			got, err := io.ReadAll(x)
			if !tt.refuse {
				if err != nil || !bytes.Equal(got, tt.stream) {
					t.Fatalf("read %d of %d bytes, error %v", len(got), len(tt.stream), err)
				}
				return
			}
			if !errors.Is(err, ErrNoPassword) {
				t.Fatalf("error %v, want ErrNoPassword", err)
			}
			if len(got) > 0 || w.Len() > 0 {
				t.Errorf("%d bytes reached pgx, %d were sent", len(got), w.Len())
			}
			if c := classify(context.Background(), err); c != classClientRefused {
				t.Errorf("class %d, want classClientRefused (the connect stops)", c)
			}
		})
	}
}

// require_auth and channel_binding refuse a server before anything is sent, with libpq's words
// (fe-auth.c, check_expected_areq; fe-auth-scram.c, pg_SASL_init), and stop the connect.
func TestAuthExchangeRequirements(t *testing.T) {
	ok := backendMsg('R', authBody(0))
	clear := cat(backendMsg('R', authBody(3)), ok)
	md5 := cat(backendMsg('R', authBody(5, 1, 2, 3, 4)), ok)
	sasl := cat(backendMsg('R', authBody(10, []byte("SCRAM-SHA-256\x00\x00")...)), ok)
	gss := cat(backendMsg('R', authBody(7)), ok)
	for _, tt := range []struct {
		name        string
		requireAuth string
		binding     string
		method      Method
		stream      []byte
		want        string // "" for a success
	}{
		{"md5 allowed, server asks cleartext", "md5", "", 0, clear, `authentication method requirement "md5" failed: server requested a cleartext password`},
		{"password allowed, server asks md5", "password", "", 0, md5, `authentication method requirement "password" failed: server requested a hashed password`},
		{"password allowed, cleartext", "password", "", 0, clear, ""},
		{"several allowed", "md5,password", "", 0, clear, ""},
		{"cleartext refused", "!password", "", 0, clear, `authentication method requirement "!password" failed: server requested a cleartext password`},
		{"cleartext refused, md5 asked", "!password", "", 0, md5, ""},
		{"trust not allowed", "password", "", 0, ok, "server did not complete authentication"},
		{"trust allowed with none", "password,none", "", 0, ok, ""},
		{"!none refuses trust", "!none", "", 0, ok, "server did not complete authentication"},
		{"scram not allowed", "password", "", 0, sasl, `authentication method requirement "password" failed: server requested SASL authentication`},
		{"SASL allowed for oauth, SCRAM refused", "oauth", "", 0, sasl, `authentication method requirement "oauth" failed: server requested SCRAM-SHA-256 authentication`},
		{"SCRAM refused by name", "!scram-sha-256", "", 0, sasl, `authentication method requirement "!scram-sha-256" failed: server requested SCRAM-SHA-256 authentication`},
		{"every SASL mechanism refused", "!scram-sha-256,!oauth", "", 0, sasl, `authentication method requirement "!scram-sha-256,!oauth" failed: server requested SASL authentication`},
		{"-PLUS without TLS", "", "", 0, cat(backendMsg('R', authBody(10, []byte("SCRAM-SHA-256-PLUS\x00SCRAM-SHA-256\x00\x00")...)), ok), "server offered SCRAM-SHA-256-PLUS authentication over a non-SSL connection"},
		{"-PLUS without TLS, channel_binding=disable", "", "disable", 0, cat(backendMsg('R', authBody(10, []byte("SCRAM-SHA-256-PLUS\x00SCRAM-SHA-256\x00\x00")...)), ok), "server offered SCRAM-SHA-256-PLUS authentication over a non-SSL connection"},
		{"-PLUS without TLS, channel_binding=require", "", "require", 0, cat(backendMsg('R', authBody(10, []byte("SCRAM-SHA-256-PLUS\x00SCRAM-SHA-256\x00\x00")...)), ok), "channel binding required, but SSL not in use"},
		{"gss refused", "!gss", "", 0, gss, "server requested GSSAPI authentication"},
		{"gss over GSS encryption", "gss", "", MethodGSS, ok, ""},
		{"gss, AuthenticationOk at once over TLS", "gss", "", MethodSSL, ok, "server did not complete authentication"},
		{"channel binding, cleartext", "", "require", 0, clear, "channel binding required but not supported by server's authentication request"},
		{"channel binding, trust", "", "require", 0, ok, "channel binding required, but server authenticated client without channel binding"},
		{"channel binding, SCRAM without TLS", "", "require", 0, sasl, "channel binding required, but SSL not in use"},
		{"channel binding, SCRAM over TLS without -PLUS", "", "require", MethodSSL, sasl, "did not offer an authentication method that supports channel binding"},
		{"no SCRAM", "", "", 0, cat(backendMsg('R', authBody(10, []byte("SCRAM-SHA-1\x00\x00")...)), ok), "none of the server's SASL authentication mechanisms are supported"},
		{"Kerberos V5", "", "", 0, cat(backendMsg('R', authBody(2)), ok), "authentication method 2 not supported"},
		{"GSS without Kerberos support", "", "", 0, gss, "has no Kerberos support"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			ra, err := parseRequireAuth(tt.requireAuth)
			if err != nil {
				t.Fatal(err)
			}
			x, w := testExchange(t, tt.stream, tt.method, authSettings{user: "u", password: "pw", requireAuth: ra, channelBinding: tt.binding}, false)
			_, err = io.ReadAll(x)
			if tt.want == "" {
				if err != nil {
					t.Fatal(err)
				}
				return
			}
			var ae *AuthError
			if !errors.As(err, &ae) || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("error %v, want an AuthError with %q", err, tt.want)
			}
			if c := classify(context.Background(), err); c != classClientRefused {
				t.Errorf("class %d, want classClientRefused (the connect stops)", c)
			}
			if w.Len() > 0 && !strings.Contains(tt.want, "did not complete") && !strings.Contains(tt.want, "without channel binding") {
				t.Errorf("%d bytes were sent before the refusal", w.Len())
			}
		})
	}
}

// Without a GSS client, a server's request for GSSAPI authentication (or SSPI, answered the same
// way) fails with an AuthError that wraps Config.NoGSS, the reason there is none, and nothing is
// sent.
func TestGSSAuthWithoutKerberosWrapsNoGSS(t *testing.T) {
	ok := backendMsg('R', authBody(0))
	noGSS := errors.New("built without GSSAPI")
	for _, code := range []uint32{authGSS, authSSPI} {
		x, w := testExchange(t, cat(backendMsg('R', authBody(code)), ok), 0, authSettings{user: "u", channelBinding: "prefer"}, false)
		x.at.n.cfg.NoGSS = noGSS
		_, err := io.ReadAll(x)
		var ae *AuthError
		if !errors.As(err, &ae) || !errors.Is(err, noGSS) || !strings.Contains(err.Error(), "has no Kerberos support: built without GSSAPI") {
			t.Fatalf("request %d: error %v, want an AuthError wrapping %v", code, err, noGSS)
		}
		if w.Len() > 0 {
			t.Errorf("request %d: %d bytes were sent", code, w.Len())
		}
	}
}

// require_auth is parsed as libpq parses it (fe-connect.c, pqConnectOptions2).
func TestParseRequireAuth(t *testing.T) {
	for _, tt := range []struct {
		in           string
		authRequired bool
		err          string
	}{
		{"", false, ""},
		{"password", true, ""},
		{"password,none", false, ""},
		{"!password", false, ""},
		{"!password,!none", true, ""},
		{"password,!md5", false, "cannot be mixed"},
		{"password,password", false, `require_auth method "password" is specified more than once`},
		{"kerberos", false, `invalid require_auth value: "kerberos"`},
		{"password, md5", false, `invalid require_auth value: (value not shown)`}, // " md5": no white space trimmed, none shown
		{"password,", false, `invalid require_auth value: ""`},
		{"scram-sha-256,!md5", false, `negative require_auth method "!md5" cannot be mixed with non-negative methods`},
		{"!password,!none,scram-sha-256", false, `require_auth method "scram-sha-256" cannot be mixed with negative methods`},
		{"!password,!md5,!password", false, `require_auth method "!password" is specified more than once`},
		{"none,md5,none", false, `require_auth method "none" is specified more than once`},
		{"!none,!md5,!none", false, `require_auth method "!none" is specified more than once`},
		{"scram-sha-256,scram-sha-256", false, `require_auth method "scram-sha-256" is specified more than once`},
		{"!scram-sha-256,!scram-sha-256", false, `require_auth method "!scram-sha-256" is specified more than once`},
		{"gss,sspi", true, ""}, // they share GSSContinue, and are not duplicates
		{"!gss,!sspi", false, ""},
		{"password=secret", false, `invalid require_auth value: (value not shown)`},
	} {
		ra, err := parseRequireAuth(tt.in)
		if tt.err != "" {
			if err == nil || !strings.Contains(err.Error(), tt.err) {
				t.Errorf("%q: error %v, want %q", tt.in, err, tt.err)
			}
			continue
		}
		if err != nil || ra.authRequired != tt.authRequired {
			t.Errorf("%q: authRequired %v, error %v; want %v", tt.in, ra.authRequired, err, tt.authRequired)
		}
	}
}

// OAUTHBEARER (RFC 7628) is chosen when pgx's OAuthTokenProvider is set and the server offers it:
// the token goes in the initial response (over a verified channel, or where the configuration
// allows another); the server's JSON error is answered with 0x01 (RFC 7628 section 3.2.3) and its
// ErrorResponse ends the attempt, with the JSON's status only when that is a plain word.
func TestAuthExchangeOAuth(t *testing.T) {
	ok := backendMsg('R', authBody(0))
	offer := backendMsg('R', authBody(10, []byte("OAUTHBEARER\x00SCRAM-SHA-256\x00\x00")...))
	provider := func(context.Context) (string, error) { return "tok123", nil }
	initial, _ := (&pgproto3.SASLInitialResponse{AuthMechanism: "OAUTHBEARER", Data: []byte("n,,\x01auth=Bearer tok123\x01\x01")}).Encode(nil)
	kvsep, _ := (&pgproto3.SASLResponse{Data: []byte{1}}).Encode(nil)

	x, w := testExchange(t, cat(offer, ok), 0, authSettings{user: "u", oauth: provider}, false)
	x.at.n.cfg.OAuth.AllowUnverifiedChannel = true
	got, err := io.ReadAll(x)
	if err != nil || !bytes.Equal(got, ok) || !bytes.Equal(w.Bytes(), initial) || x.at.saslMechanism != "OAUTHBEARER" {
		t.Fatalf("pgx saw %q, client wrote %q, mechanism %q, error %v", got, w.Bytes(), x.at.saslMechanism, err)
	}

	// Over plaintext TCP without the configuration's leave, nothing is sent and the provider
	// is not asked.
	asked := false
	x, w = testExchange(t, cat(offer, ok), 0, authSettings{user: "u", oauth: func(context.Context) (string, error) { asked = true; return "t", nil }}, false)
	if _, err := io.ReadAll(x); err == nil || !strings.Contains(err.Error(), "WithOAuthUnverifiedChannel") || asked || w.Len() > 0 {
		t.Errorf("OAUTHBEARER over plaintext: %v (token asked: %v, %d bytes sent)", err, asked, w.Len())
	}

	for _, tt := range []struct{ status, want string }{
		{"invalid_token", "server rejected OAuth bearer token (invalid_token): FATAL: no (SQLSTATE 28000)"},
		{"<script>secret</script>", "server rejected OAuth bearer token ((a status that is not a word)): FATAL: no (SQLSTATE 28000)"},
	} {
		fail := backendMsg('R', authBody(11, []byte(`{"status":"`+tt.status+`"}`)...))
		x, w := testExchange(t, cat(offer, fail, backendMsg('E', []byte("SFATAL\x00C28000\x00Mno\x00\x00"))), 0, authSettings{user: "u", oauth: provider}, false)
		x.at.n.cfg.OAuth.AllowUnverifiedChannel = true
		_, err := io.ReadAll(x)
		if err == nil || err.Error() != tt.want || sqlState(err) != "28000" {
			t.Errorf("status %q: error %v, want %q", tt.status, err, tt.want)
		}
		if !bytes.Equal(w.Bytes(), cat(initial, kvsep)) {
			t.Errorf("status %q: the client wrote %q, want the token then 0x01", tt.status, w.Bytes())
		}
	}

	// require_auth without oauth refuses it before the token is asked for.
	ra, _ := parseRequireAuth("scram-sha-256")
	asked = false
	x, w = testExchange(t, cat(offer, ok), 0, authSettings{user: "u", requireAuth: ra,
		oauth: func(context.Context) (string, error) { asked = true; return "t", nil }}, false)
	if _, err := io.ReadAll(x); err == nil || !strings.Contains(err.Error(), `authentication method requirement "scram-sha-256" failed: server requested OAUTHBEARER authentication`) || asked || w.Len() > 0 {
		t.Errorf("require_auth=scram-sha-256 against OAUTHBEARER: %v (token asked: %v, %d bytes sent)", err, asked, w.Len())
	}
}

// fakeGSSAuth is a GSSAuthenticator whose exchange takes two server tokens.
type fakeGSSAuth struct {
	GSSClient
	host string
	seen [][]byte
}

func (f *fakeGSSAuth) Authenticate(_ context.Context, host string) (GSSAuthExchange, error) {
	f.host = host
	return f, nil
}

func (f *fakeGSSAuth) Step(in []byte) ([]byte, bool, error) {
	f.seen = append(f.seen, in)
	switch len(f.seen) {
	case 1:
		return []byte("ap-req"), false, nil
	case 2:
		if string(in) != "ap-rep" {
			return nil, false, errors.New("bad AP-REP")
		}
		return nil, true, nil
	}
	return nil, false, errors.New("too many tokens")
}

// GSSAPI authentication (AuthenticationGSS, then AuthenticationGSSContinue and GSSResponse)
// goes through the negotiator's GSSAuthenticator, for the attempt's host; AuthenticationOk
// before the context is established (the server's AP-REP verified) is refused.
func TestAuthExchangeGSS(t *testing.T) {
	ok := backendMsg('R', authBody(0))
	gssReq := backendMsg('R', authBody(7))
	cont := backendMsg('R', authBody(8, []byte("ap-rep")...))
	resp, _ := (&pgproto3.GSSResponse{Data: []byte("ap-req")}).Encode(nil)
	for _, tt := range []struct {
		name   string
		stream []byte
		want   string
	}{
		{"complete", cat(gssReq, cont, ok), ""},
		{"AuthenticationOk before the AP-REP", cat(gssReq, ok), "before completing the GSSAPI exchange"},
		{"a wrong AP-REP", cat(gssReq, backendMsg('R', authBody(8, []byte("forged")...)), ok), "bad AP-REP"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			x, w := testExchange(t, tt.stream, 0, authSettings{user: "u"}, true)
			g := &fakeGSSAuth{}
			x.at.n.cfg.GSS = g
			x.at.host = &Host{Host: "db.example.com"}
			got, err := io.ReadAll(x)
			if tt.want != "" {
				if err == nil || !strings.Contains(err.Error(), tt.want) {
					t.Fatalf("error %v, want %q", err, tt.want)
				}
				return
			}
			if err != nil || !bytes.Equal(got, ok) || !bytes.Equal(w.Bytes(), resp) || g.host != "db.example.com" || x.at.authMethod != "gss" {
				t.Fatalf("pgx saw %q, client wrote %q, host %q, method %q, error %v", got, w.Bytes(), g.host, x.at.authMethod, err)
			}
		})
	}
}

// A NegotiateProtocolVersion below min_protocol_version is the client's refusal, with libpq 18's
// words, classified as one (no other host); at or above it, pgx sees the message.
func TestAuthExchangeMinProtocolVersion(t *testing.T) {
	npv := func(version uint32) []byte {
		return backendMsg('v', append(binary.BigEndian.AppendUint32(nil, version), 0, 0, 0, 0))
	}
	ok := backendMsg('R', authBody(0))
	for _, tc := range []struct {
		version, minMinor uint32
		refused           bool
	}{
		{3 << 16, 2, true},
		{3<<16 | 2, 2, false},
		{3 << 16, 0, false},
		{0, 2, true}, // the minor alone, as pgx's own encoding of the message
	} {
		stream := append(npv(tc.version), ok...)
		x, _ := testExchange(t, stream, MethodPlain, authSettings{minMinor: tc.minMinor}, false)
		got, err := io.ReadAll(x)
		var pv *ProtocolVersionError
		if tc.refused {
			want := `server only supports protocol version 3.0, but "min_protocol_version" was set to 3.2`
			if !errors.As(err, &pv) || err.Error() != want || classify(context.Background(), err) != classClientRefused {
				t.Errorf("%#x, min 3.%d: %v, want %q (client refused)", tc.version, tc.minMinor, err, want)
			}
			continue
		}
		if err != nil || !bytes.Equal(got, stream) {
			t.Errorf("%#x, min 3.%d: %q, %v: want the messages for pgx", tc.version, tc.minMinor, got, err)
		}
	}
}
