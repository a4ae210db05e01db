package negotiation

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/pgconnector/pgconnector/internal/harness"
)

// credServer is a loopback server (TCP, or a Unix-domain socket) that asks for SASL
// OAUTHBEARER as PostgreSQL 18's auth-oauth.c does, or for a cleartext password as a
// PAM-checked server does, and records what each connection sent.
type credServer struct {
	ln       net.Listener
	dir      string // the socket directory, for a Unix-domain socket
	port     uint16
	password bool // ask for a cleartext password, not OAUTHBEARER

	mu         sync.Mutex
	conns      int
	sent       []string // the auth value of each initial response ("" for discovery), or each password
	kvsep      int      // 0x01 answers to the server's JSON
	discovery  string   // the JSON's openid-configuration
	scope      string
	accept     func(secret string) bool
	finalData  bool   // AuthenticationSASLFinal with data before AuthenticationOk
	refuseCode string // the SQLSTATE of a refused password
	wg         sync.WaitGroup
}

func startCredServer(t *testing.T, unix bool) *credServer {
	t.Helper()
	s := &credServer{discovery: "https://issuer.example/.well-known/openid-configuration", scope: "openid db",
		accept: func(string) bool { return true }, refuseCode: "28P01"}
	var err error
	if unix {
		// A short directory: a socket path is at most 107 bytes.
		s.dir, err = os.MkdirTemp("", "oa")
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { os.RemoveAll(s.dir) })
		s.port = 5432
		s.ln, err = net.Listen("unix", filepath.Join(s.dir, ".s.PGSQL.5432"))
	} else {
		s.ln, err = harness.Listen()
		if err == nil {
			s.port = uint16(s.ln.Addr().(*net.TCPAddr).Port)
		}
	}
	if err != nil {
		t.Fatal(err)
	}
	s.wg.Go(func() {
		for {
			c, err := s.ln.Accept()
			if err != nil {
				return
			}
			s.mu.Lock()
			s.conns++
			s.mu.Unlock()
			s.wg.Go(func() { s.serve(c) })
		}
	})
	t.Cleanup(func() { s.ln.Close(); s.wg.Wait() })
	return s
}

func (s *credServer) host() string {
	if s.dir != "" {
		return s.dir
	}
	return "127.0.0.1"
}

func (s *credServer) set(f func(s *credServer)) {
	s.mu.Lock()
	defer s.mu.Unlock()
	f(s)
}

func (s *credServer) stats() (conns int, sent []string, kvsep int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.conns, append([]string(nil), s.sent...), s.kvsep
}

// readMsg reads a frontend message: its type and body.
func readMsg(c net.Conn) (byte, []byte, error) {
	var hdr [5]byte
	if _, err := io.ReadFull(c, hdr[:]); err != nil {
		return 0, nil, err
	}
	n := binary.BigEndian.Uint32(hdr[1:])
	if n < 4 || n > 10000 {
		return 0, nil, errors.New("bad length")
	}
	body := make([]byte, n-4)
	_, err := io.ReadFull(c, body)
	return hdr[0], body, err
}

func (s *credServer) serve(c net.Conn) {
	defer c.Close()
	c.SetDeadline(time.Now().Add(10 * time.Second))
	for { // SSLRequest and GSSENCRequest get 'N', then the StartupMessage
		var hdr [8]byte
		if _, err := io.ReadFull(c, hdr[:]); err != nil {
			return
		}
		rest := make([]byte, binary.BigEndian.Uint32(hdr[:4])-8)
		if _, err := io.ReadFull(c, rest); err != nil {
			return
		}
		if code := binary.BigEndian.Uint32(hdr[4:]); code == 80877103 || code == 80877104 {
			c.Write([]byte("N"))
			continue
		}
		break
	}
	fail := func(code string) {
		c.Write(backendMsg('E', []byte("SFATAL\x00C"+code+"\x00Mauthentication failed\x00\x00")))
	}
	s.mu.Lock()
	accept, password, final := s.accept, s.password, s.finalData
	answer := fmt.Sprintf(`{"status":"invalid_token","openid-configuration":%q,"scope":%q}`, s.discovery, s.scope)
	refuseCode := s.refuseCode
	s.mu.Unlock()
	if password {
		c.Write(backendMsg('R', authBody(3)))
		typ, body, err := readMsg(c)
		if err != nil || typ != 'p' {
			return
		}
		pw := strings.TrimSuffix(string(body), "\x00")
		s.mu.Lock()
		s.sent = append(s.sent, pw)
		s.mu.Unlock()
		if !accept(pw) {
			fail(refuseCode)
			return
		}
		c.Write(startupReply())
		io.Copy(io.Discard, c)
		return
	}
	c.Write(backendMsg('R', authBody(10, []byte("OAUTHBEARER\x00\x00")...)))
	typ, body, err := readMsg(c)
	if err != nil || typ != 'p' || bytes.IndexByte(body, 0) < 0 || len(body) < bytes.IndexByte(body, 0)+5 {
		return // the client gave up (Terminate)
	}
	// SASLInitialResponse: the mechanism, the data's length, the data.
	i := bytes.IndexByte(body, 0)
	data := string(body[i+5:])
	auth, _, _ := strings.Cut(strings.TrimPrefix(data, "n,,\x01auth="), "\x01")
	token := strings.TrimPrefix(auth, "Bearer ")
	s.mu.Lock()
	s.sent = append(s.sent, token)
	s.mu.Unlock()
	if token == "" || !accept(token) {
		c.Write(backendMsg('R', authBody(11, []byte(answer)...)))
		_, body, err := readMsg(c)
		if err != nil || !bytes.Equal(body, []byte{1}) {
			return
		}
		s.mu.Lock()
		s.kvsep++
		s.mu.Unlock()
		fail("28000")
		return
	}
	if final {
		c.Write(backendMsg('R', authBody(12, 'x')))
	}
	c.Write(startupReply())
	io.Copy(io.Discard, c)
}

// fakeCreds is a Credentials that hands out secrets named "<prefix>N" (the Nth fetch), keeps
// the last one (cached) until it is refused, and counts the calls.
type fakeCreds struct {
	mu      sync.Mutex
	kind    CredentialKind
	prefix  string
	cached  *Credential
	fetches int
	gets    int
	refused int
	reqs    []CredentialRequest
	err     error
}

func (f *fakeCreds) Has(k CredentialKind) bool { return k == f.kind }

func (f *fakeCreds) Get(_ context.Context, r *CredentialRequest) (Credential, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.gets++
	req := *r
	req.Background = nil
	f.reqs = append(f.reqs, req)
	if r.Background == nil {
		return Credential{}, errors.New("no Background in the request")
	}
	if f.err != nil {
		return Credential{}, f.err
	}
	if f.cached != nil {
		c := *f.cached
		c.Source = CredentialCached
		return c, nil
	}
	f.fetches++
	f.cached = &Credential{Secret: fmt.Sprintf("%s%d", f.prefix, f.fetches), Source: CredentialFetched}
	return *f.cached, nil
}

func (f *fakeCreds) Refused(_ *CredentialRequest, c Credential) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.refused++
	if f.cached != nil && f.cached.Secret == c.Secret {
		f.cached = nil
	}
}

func (f *fakeCreds) counts() (gets, fetches, refused int) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.gets, f.fetches, f.refused
}

// credEvents records the credential hooks.
type credEvents struct {
	mu        sync.Mutex
	starts    int
	dones     []CredentialDoneInfo
	discovery []OAuthDiscoveryInfo
	retries   []CredentialRetryInfo
	mechs     []string
	attempts  []int
	bg        chan BackgroundStartInfo
}

func (e *credEvents) trace() *Trace {
	e.bg = make(chan BackgroundStartInfo, 4)
	return &Trace{
		BackgroundStart: func(ctx context.Context, i BackgroundStartInfo) context.Context { e.bg <- i; return ctx },
		CredentialStart: func(ctx context.Context, _ CredentialStartInfo) context.Context {
			e.mu.Lock()
			e.starts++
			e.mu.Unlock()
			return ctx
		},
		CredentialDone: func(_ context.Context, i CredentialDoneInfo) {
			e.mu.Lock()
			e.dones = append(e.dones, i)
			e.mu.Unlock()
		},
		OAuthDiscovery: func(_ context.Context, i OAuthDiscoveryInfo) {
			e.mu.Lock()
			e.discovery = append(e.discovery, i)
			e.mu.Unlock()
		},
		CredentialRetry: func(_ context.Context, i CredentialRetryInfo) {
			e.mu.Lock()
			e.retries = append(e.retries, i)
			e.mu.Unlock()
		},
		StartupStart: func(ctx context.Context, _ DialInfo) context.Context { return ctx },
		StartupDone: func(_ context.Context, i StartupDoneInfo) {
			e.mu.Lock()
			e.mechs = append(e.mechs, i.SASLMechanism)
			e.mu.Unlock()
		},
		ConnectDone: func(_ context.Context, i ConnectDoneInfo) {
			e.mu.Lock()
			e.attempts = append(e.attempts, i.Attempts)
			e.mu.Unlock()
		},
	}
}

// credNegotiator is a negotiator for s with creds and oauth, and a connect function with the
// settings of conninfo (user u, database d, plaintext).
func credNegotiator(t *testing.T, s *credServer, creds Credentials, oauth OAuthConfig, conninfo string) (*Negotiator, *credEvents, func() error) {
	t.Helper()
	ev := &credEvents{}
	n, err := NewNegotiator(Config{
		Hosts:       []Host{{Host: s.host(), Port: s.port, SSLMode: SSLModeDisable}},
		GSSEncMode:  GSSEncModeDisable,
		Database:    "d",
		Credentials: creds,
		OAuth:       oauth,
		Trace:       ev.trace(),
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { n.Close() })
	base, err := pgconn.ParseConfig(fmt.Sprintf("host=%s port=%d user=u dbname=d sslmode=disable %s", s.host(), s.port, conninfo))
	if err != nil {
		t.Fatal(err)
	}
	connect := func() error {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		return n.Connect(ctx, func(ctx context.Context) error {
			cfg := base.Copy()
			if err := n.Configure(ctx, cfg); err != nil {
				return err
			}
			if err := n.ConfigureAuth(ctx, cfg); err != nil {
				return err
			}
			c, err := pgconn.ConnectConfig(ctx, cfg)
			if err != nil {
				return err
			}
			return c.Close(ctx)
		})
	}
	return n, ev, connect
}

const testIssuer = "https://issuer.example"

// The OAUTHBEARER exchange with the application's tokens, against a fake PostgreSQL 18 server:
// sockets per connect, tokens sent, the hooks, libpq's refusals (fe-auth-oauth.c).
func TestOAuthExchange(t *testing.T) {
	t.Run("a token that is not a b64token: refused before it is sent, and not kept", func(t *testing.T) {
		s := startCredServer(t, true)
		creds := &fakeCreds{kind: CredentialOAuthToken, prefix: "tok\n"}
		_, _, connect := credNegotiator(t, s, creds, OAuthConfig{Issuer: testIssuer}, "")
		for i := range 2 {
			if err := connect(); err == nil || !strings.Contains(err.Error(), "not a bearer token") {
				t.Fatalf("connect %d: %v, want the token refused", i, err)
			}
		}
		_, sent, _ := s.stats()
		gets, fetches, refused := creds.counts()
		if len(sent) != 1 || sent[0] != "" || fetches != 2 || refused != 2 || gets != 2 {
			t.Errorf("sent %q, Get %d, fetches %d, Refused %d; want [\"\"] (the discovery alone), 2, 2, 2", sent, gets, fetches, refused)
		}
	})
	t.Run("discovery then token: two sockets on the first connect, one on the next", func(t *testing.T) {
		s := startCredServer(t, true)
		creds := &fakeCreds{kind: CredentialOAuthToken, prefix: "tok"}
		_, ev, connect := credNegotiator(t, s, creds, OAuthConfig{Issuer: testIssuer}, "")
		if err := connect(); err != nil {
			t.Fatal(err)
		}
		if err := connect(); err != nil {
			t.Fatal(err)
		}
		conns, sent, kvsep := s.stats()
		if conns != 3 || strings.Join(sent, ",") != ",tok1,tok1" || kvsep != 1 {
			t.Errorf("server: %d connections, sent %q, %d 0x01; want 3, [\"\" tok1 tok1], 1", conns, sent, kvsep)
		}
		if fmt.Sprint(ev.attempts) != "[2 1]" {
			t.Errorf("ConnectDone attempts %v, want [2 1]", ev.attempts)
		}
		gets, fetches, refused := creds.counts()
		if gets != 2 || fetches != 1 || refused != 0 {
			t.Errorf("Get %d, fetches %d, Refused %d; want 2, 1, 0", gets, fetches, refused)
		}
		r := creds.reqs[0]
		if r.Issuer != testIssuer || r.DiscoveryURI != s.discovery || r.Scope != "openid db" || r.Host != s.dir || r.Port != 5432 || r.User != "u" || r.Database != "d" {
			t.Errorf("request %+v", r)
		}
		if len(ev.discovery) != 1 || ev.discovery[0].DiscoveryURI != s.discovery || ev.discovery[0].TokenRefused || ev.discovery[0].Status != "invalid_token" {
			t.Errorf("OAuthDiscovery %+v", ev.discovery)
		}
		if len(ev.retries) != 1 || ev.retries[0].Reason != "oauth discovery" || ev.retries[0].Kind != CredentialOAuthToken {
			t.Errorf("CredentialRetry %+v", ev.retries)
		}
		if ev.starts != 2 || len(ev.dones) != 2 || ev.dones[0].Source != CredentialFetched || ev.dones[1].Source != CredentialCached {
			t.Errorf("CredentialStart %d, CredentialDone %+v", ev.starts, ev.dones)
		}
		if fmt.Sprint(ev.mechs) != "[OAUTHBEARER OAUTHBEARER OAUTHBEARER]" {
			t.Errorf("SASL mechanisms %v", ev.mechs)
		}
		if shown := fmt.Sprintf("%+v %+v %+v", ev.dones, ev.discovery, ev.retries); strings.Contains(shown, "tok1") {
			t.Errorf("a hook was given the token: %s", shown)
		}
	})

	t.Run("oauth_scope replaces the server's scope", func(t *testing.T) {
		s := startCredServer(t, true)
		creds := &fakeCreds{kind: CredentialOAuthToken, prefix: "tok"}
		_, _, connect := credNegotiator(t, s, creds, OAuthConfig{Issuer: testIssuer, Scope: "mine"}, "")
		for range 2 {
			if err := connect(); err != nil {
				t.Fatal(err)
			}
		}
		for _, r := range creds.reqs {
			if r.Scope != "mine" {
				t.Errorf("scope %q, want oauth_scope's", r.Scope)
			}
		}
	})

	t.Run(".well-known oauth_issuer: no discovery, one socket", func(t *testing.T) {
		s := startCredServer(t, true)
		creds := &fakeCreds{kind: CredentialOAuthToken, prefix: "tok"}
		wk := "https://issuer.example/tenant/.well-known/openid-configuration"
		_, ev, connect := credNegotiator(t, s, creds, OAuthConfig{Issuer: wk, Scope: "s1"}, "")
		if err := connect(); err != nil {
			t.Fatal(err)
		}
		conns, sent, _ := s.stats()
		if conns != 1 || strings.Join(sent, ",") != "tok1" || fmt.Sprint(ev.attempts) != "[1]" {
			t.Errorf("%d connections, sent %q, attempts %v; want 1, [tok1], [1]", conns, sent, ev.attempts)
		}
		if r := creds.reqs[0]; r.Issuer != "https://issuer.example/tenant" || r.DiscoveryURI != wk || r.Scope != "s1" {
			t.Errorf("request %+v", r)
		}
	})

	// The server's discovery URI names another issuer (or not over https): libpq's error, and
	// no token asked for or sent.
	for _, tt := range []struct{ name, discovery, want string }{
		{"issuer mismatch", "https://evil.example/.well-known/openid-configuration",
			`server's discovery document at https://evil.example/.well-known/openid-configuration (issuer "https://evil.example") is incompatible with oauth_issuer (https://issuer.example)`},
		{"issuer with another path", "https://issuer.example/.well-known/openid-configuration/other",
			`(issuer "https://issuer.example/other") is incompatible with oauth_issuer`},
		{"http issuer", "http://issuer.example/.well-known/openid-configuration", `OAuth discovery URI "http://issuer.example/.well-known/openid-configuration" must use HTTPS`},
		{"not a .well-known URI", "https://issuer.example/config", "is not a .well-known URI"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			s := startCredServer(t, true)
			s.set(func(s *credServer) { s.discovery = tt.discovery })
			creds := &fakeCreds{kind: CredentialOAuthToken, prefix: "tok"}
			_, ev, connect := credNegotiator(t, s, creds, OAuthConfig{Issuer: testIssuer}, "")
			err := connect()
			var ae *AuthError
			if !errors.As(err, &ae) || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("error %v, want an AuthError with %q", err, tt.want)
			}
			conns, sent, _ := s.stats()
			gets, _, _ := creds.counts()
			if conns != 1 || strings.Join(sent, ",") != "" || gets != 0 || len(ev.retries) != 0 {
				t.Errorf("%d connections, sent %q, %d Get, retries %v; want 1 discovery only", conns, sent, gets, ev.retries)
			}
		})
	}

	t.Run("a refused cached token: one retry with a fresh one; refused again: the server's error", func(t *testing.T) {
		s := startCredServer(t, true)
		creds := &fakeCreds{kind: CredentialOAuthToken, prefix: "tok"}
		_, ev, connect := credNegotiator(t, s, creds, OAuthConfig{Issuer: testIssuer}, "")
		if err := connect(); err != nil {
			t.Fatal(err)
		}
		s.set(func(s *credServer) { s.accept = func(tok string) bool { return tok == "tok2" } })
		if err := connect(); err != nil {
			t.Fatalf("after a refused cached token: %v", err)
		}
		s.set(func(s *credServer) { s.accept = func(string) bool { return false } })
		err := connect()
		if err == nil || !strings.Contains(err.Error(), "server rejected OAuth bearer token (invalid_token)") || sqlState(err) != "28000" {
			t.Fatalf("error %v, want the server's refusal", err)
		}
		_, sent, _ := s.stats()
		if strings.Join(sent, ",") != ",tok1,tok1,tok2,tok2,tok3" {
			t.Errorf("sent %q", sent)
		}
		if fmt.Sprint(ev.attempts) != "[2 2 2]" {
			t.Errorf("attempts %v, want [2 2 2]", ev.attempts)
		}
		_, _, refused := creds.counts()
		if refused != 3 {
			t.Errorf("Refused %d times, want 3", refused)
		}
		if len(ev.retries) != 3 || ev.retries[1].Reason != "token refused" || ev.retries[2].Reason != "token refused" {
			t.Errorf("retries %+v", ev.retries)
		}
		for _, d := range ev.discovery[1:] {
			if !d.TokenRefused {
				t.Errorf("OAuthDiscovery after a token: %+v", d)
			}
		}
		if strings.Contains(err.Error(), "tok") && strings.Contains(err.Error(), "tok3") {
			t.Errorf("the error shows the token: %v", err)
		}
	})

	t.Run("a changed answer replaces the memory", func(t *testing.T) {
		s := startCredServer(t, true)
		creds := &fakeCreds{kind: CredentialOAuthToken, prefix: "tok"}
		_, ev, connect := credNegotiator(t, s, creds, OAuthConfig{Issuer: testIssuer}, "")
		if err := connect(); err != nil {
			t.Fatal(err)
		}
		// The server now asks another scope and refuses the token of the old one.
		s.set(func(s *credServer) {
			s.scope = "db2"
			s.accept = func(tok string) bool { return tok == "tok2" }
		})
		creds.mu.Lock()
		creds.cached.Source = CredentialFetched // a retry for the changed answer, not for the cache
		creds.mu.Unlock()
		if err := connect(); err != nil {
			t.Fatal(err)
		}
		last := creds.reqs[len(creds.reqs)-1]
		if last.Scope != "db2" || !ev.discovery[1].Changed {
			t.Errorf("scope %q after the change, discovery %+v", last.Scope, ev.discovery[1])
		}
	})

	t.Run(".well-known oauth_issuer: the server's document elsewhere is refused", func(t *testing.T) {
		s := startCredServer(t, true)
		s.set(func(s *credServer) {
			s.discovery = "https://issuer.example/.well-known/oauth-authorization-server"
			s.accept = func(string) bool { return false }
		})
		creds := &fakeCreds{kind: CredentialOAuthToken, prefix: "tok"}
		_, _, connect := credNegotiator(t, s, creds, OAuthConfig{Issuer: testIssuer + "/.well-known/openid-configuration"}, "")
		err := connect()
		if err == nil || !strings.Contains(err.Error(), "server's discovery document has moved to https://issuer.example/.well-known/oauth-authorization-server (previous location was https://issuer.example/.well-known/openid-configuration)") {
			t.Fatalf("error %v", err)
		}
	})

	t.Run("AuthenticationSASLFinal with data refused", func(t *testing.T) {
		s := startCredServer(t, true)
		s.set(func(s *credServer) { s.finalData = true })
		creds := &fakeCreds{kind: CredentialOAuthToken, prefix: "tok"}
		_, _, connect := credNegotiator(t, s, creds, OAuthConfig{Issuer: testIssuer + "/.well-known/openid-configuration"}, "")
		if err := connect(); err == nil || !strings.Contains(err.Error(), "server sent unexpected additional OAuth data") {
			t.Fatalf("error %v", err)
		}
	})

	for _, tt := range []struct{ name, conninfo, want string }{
		{"channel_binding=require", "channel_binding=require", "channel binding required, but SSL not in use"},
		{"require_auth=scram-sha-256", "require_auth=scram-sha-256", `authentication method requirement "scram-sha-256" failed: server requested OAUTHBEARER authentication`},
		{"require_auth=!oauth", "require_auth=!oauth", `authentication method requirement "!oauth" failed: server requested OAUTHBEARER authentication`},
		{"require_auth=oauth", "require_auth=oauth", ""},
	} {
		t.Run(tt.name, func(t *testing.T) {
			s := startCredServer(t, true)
			creds := &fakeCreds{kind: CredentialOAuthToken, prefix: "tok"}
			_, _, connect := credNegotiator(t, s, creds, OAuthConfig{Issuer: testIssuer}, tt.conninfo)
			err := connect()
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
			if _, sent, _ := s.stats(); len(sent) != 0 {
				t.Errorf("sent %q", sent)
			}
		})
	}

	t.Run("oauth_issuer not set", func(t *testing.T) {
		s := startCredServer(t, true)
		for _, tt := range []struct {
			creds Credentials
			want  string
		}{
			{nil, "server requires OAuth authentication, but oauth_issuer and oauth_client_id are not both set"},
			{&fakeCreds{kind: CredentialPassword}, "oauth_issuer and oauth_client_id are not both set"},
			{&fakeCreds{kind: CredentialOAuthToken}, "server requires OAuth authentication, but oauth_issuer is not set"},
		} {
			_, _, connect := credNegotiator(t, s, tt.creds, OAuthConfig{}, "")
			if err := connect(); err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("error %v, want %q", err, tt.want)
			}
		}
		if _, sent, _ := s.stats(); len(sent) != 0 {
			t.Errorf("sent %q", sent)
		}
	})

	t.Run("a Get error is wrapped and ends the connect", func(t *testing.T) {
		s := startCredServer(t, true)
		boom := errors.New("issuer unreachable")
		creds := &fakeCreds{kind: CredentialOAuthToken, err: boom}
		_, _, connect := credNegotiator(t, s, creds, OAuthConfig{Issuer: testIssuer + "/.well-known/openid-configuration"}, "")
		if err := connect(); !errors.Is(err, boom) || !strings.Contains(err.Error(), "OAuth bearer token could not be obtained") {
			t.Fatalf("error %v", err)
		}
	})
}

// A bearer token (and a discovery message) goes only over a channel that authenticates the
// server, unless the configuration allows another: here plaintext TCP.
func TestOAuthUnverifiedChannel(t *testing.T) {
	s := startCredServer(t, false)
	creds := &fakeCreds{kind: CredentialOAuthToken, prefix: "tok"}
	_, ev, connect := credNegotiator(t, s, creds, OAuthConfig{Issuer: testIssuer}, "")
	err := connect()
	var ae *AuthError
	if !errors.As(err, &ae) || !strings.Contains(err.Error(), "plaintext TCP") || !strings.Contains(err.Error(), "WithOAuthUnverifiedChannel") {
		t.Fatalf("error %v, want an AuthError naming the rule and the option", err)
	}
	if _, sent, _ := s.stats(); len(sent) != 0 || creds.gets != 0 || fmt.Sprint(ev.attempts) != "[1]" {
		t.Errorf("sent %q, %d Get, attempts %v", sent, creds.gets, ev.attempts)
	}

	_, ev, connect = credNegotiator(t, s, creds, OAuthConfig{Issuer: testIssuer, AllowUnverifiedChannel: true}, "")
	if err := connect(); err != nil {
		t.Fatal(err)
	}
	if fmt.Sprint(ev.attempts) != "[2]" {
		t.Errorf("attempts %v", ev.attempts)
	}
}

// The memory of the servers' answers is bounded; the least recently used goes first.
func TestOAuthMemoryBound(t *testing.T) {
	var m oauthMemory
	first := oauthKey{host: "h0", port: 5432, user: "u"}
	m.put(first, "https://i/.well-known/openid-configuration", "s")
	for i := 1; i < MaxOAuthAnswers+100; i++ {
		m.put(oauthKey{host: fmt.Sprint("h", i), port: 5432, user: "u"}, "https://i/.well-known/openid-configuration", "s")
		if i%100 == 0 {
			m.get(first) // kept in use
		}
		if m.len() > MaxOAuthAnswers {
			t.Fatalf("%d answers held, more than %d", m.len(), MaxOAuthAnswers)
		}
	}
	if _, _, ok := m.get(first); !ok {
		t.Error("an answer in use was forgotten")
	}
	if _, _, ok := m.get(oauthKey{host: "h1", port: 5432, user: "u"}); ok {
		t.Error("the least recently used answer is still held")
	}
	if !m.put(first, "https://i/.well-known/oauth-authorization-server", "s") {
		t.Error("a different answer was not reported as changed")
	}
}

// Passwords of Config.Credentials: asked for when the server asks and the configuration has
// none; a refused one (28P01, or 28000 as a PAM-checked server answers) dropped and asked for
// once more on a new connection; a second refusal is the server's error; a password of the
// configuration is never retried.
func TestPasswordCredentials(t *testing.T) {
	for _, code := range []string{"28P01", "28000"} {
		t.Run("refused "+code, func(t *testing.T) {
			s := startCredServer(t, false)
			s.set(func(s *credServer) {
				s.password, s.refuseCode = true, code
				s.accept = func(pw string) bool { return pw == "pw2" }
			})
			creds := &fakeCreds{kind: CredentialPassword, prefix: "pw"}
			creds.cached = &Credential{Secret: "pw1"}
			creds.fetches = 1
			_, ev, connect := credNegotiator(t, s, creds, OAuthConfig{}, "")
			if err := connect(); err != nil {
				t.Fatal(err)
			}
			_, sent, _ := s.stats()
			gets, _, refused := creds.counts()
			if strings.Join(sent, ",") != "pw1,pw2" || gets != 2 || refused != 1 || fmt.Sprint(ev.attempts) != "[2]" {
				t.Errorf("sent %q, %d Get, %d Refused, attempts %v", sent, gets, refused, ev.attempts)
			}
			if len(ev.retries) != 1 || ev.retries[0].Reason != "password refused" || ev.retries[0].Kind != CredentialPassword {
				t.Errorf("retries %+v", ev.retries)
			}
			if r := creds.reqs[0]; r.Kind != CredentialPassword || r.User != "u" || r.Host != "127.0.0.1" || r.Port != s.port || r.Database != "d" {
				t.Errorf("request %+v", r)
			}

			s.set(func(s *credServer) { s.accept = func(string) bool { return false } })
			err := connect()
			if sqlState(err) != code || strings.Contains(err.Error(), "pw3") {
				t.Fatalf("second refusal: %v, want the server's %s", err, code)
			}
			if fmt.Sprint(ev.attempts) != "[2 2]" {
				t.Errorf("attempts %v", ev.attempts)
			}
		})
	}

	t.Run("the configuration's password is not retried", func(t *testing.T) {
		s := startCredServer(t, false)
		s.set(func(s *credServer) {
			s.password = true
			s.accept = func(string) bool { return false }
		})
		creds := &fakeCreds{kind: CredentialPassword, prefix: "pw"}
		_, ev, connect := credNegotiator(t, s, creds, OAuthConfig{}, "password=wrong")
		if err := connect(); sqlState(err) != "28P01" {
			t.Fatalf("error %v", err)
		}
		if _, sent, _ := s.stats(); strings.Join(sent, ",") != "wrong" || creds.gets != 0 || fmt.Sprint(ev.attempts) != "[1]" {
			t.Errorf("sent %q, %d Get, attempts %v", sent, creds.gets, ev.attempts)
		}
	})
}

// refreshingCreds runs a refresh through CredentialRequest.Background at each Get.
type refreshingCreds struct {
	*fakeCreds
	ran chan struct{}
}

func (r *refreshingCreds) Get(ctx context.Context, req *CredentialRequest) (Credential, error) {
	if req.Background != nil {
		req.Background(func(ctx context.Context) error {
			if _, ok := ctx.Deadline(); !ok {
				return errors.New("no deadline")
			}
			r.ran <- struct{}{}
			return nil
		})
	}
	return r.fakeCreds.Get(ctx, req)
}

// CredentialRequest.Background runs work on the negotiator's goroutine, reported as
// BackgroundCredentialRefresh with the attempt's host.
func TestCredentialBackground(t *testing.T) {
	s := startCredServer(t, true)
	creds := &refreshingCreds{fakeCreds: &fakeCreds{kind: CredentialOAuthToken, prefix: "tok"}, ran: make(chan struct{}, 4)}
	_, ev, connect := credNegotiator(t, s, creds, OAuthConfig{Issuer: testIssuer + "/.well-known/openid-configuration"}, "")
	if err := connect(); err != nil {
		t.Fatal(err)
	}
	select {
	case <-creds.ran:
	case <-time.After(5 * time.Second):
		t.Fatal("the background work did not run")
	}
	info := <-ev.bg
	if info.Work != BackgroundCredentialRefresh || info.Credential != CredentialOAuthToken || info.Host != s.dir || info.Port != 5432 || info.Trigger == nil {
		t.Errorf("BackgroundStart %+v", info)
	}
}
