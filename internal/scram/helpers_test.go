package scram

import (
	"context"
	"errors"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	xscram "github.com/xdg-go/scram"
)

const (
	testUser     = "alice"
	testPassword = "correct horse battery staple"
)

var testSalt = []byte("0123456789abcdef") // 16 bytes, as PostgreSQL makes them

// peer is xdg-go/scram's SCRAM-SHA-256 server holding the stored credentials (StoredKey, ServerKey)
// of one password, as PostgreSQL's pg_authid does.
type peer struct {
	srv   *xscram.Server
	creds xscram.StoredCredentials
	cb    []byte // channel binding data the server expects ('p'); nil: it offers no -PLUS
}

// storedCredentials derives what a server stores for password, SASLprepped as PostgreSQL does when
// the password is set (the password as it is when SASLprep refuses it).
func storedCredentials(t testing.TB, password string, salt []byte, iters int) xscram.StoredCredentials {
	t.Helper()
	prepared, _ := SASLprep(password)
	c, _ := xscram.SHA256.NewClientUnprepped("", prepared, "")
	creds, err := c.WithMinIterations(1).GetStoredCredentialsWithError(xscram.KeyFactors{Salt: string(salt), Iters: iters})
	if err != nil {
		t.Fatal(err)
	}
	return creds
}

func newPeer(t testing.TB, creds xscram.StoredCredentials) *peer {
	t.Helper()
	srv, err := xscram.SHA256.NewServer(func(string) (xscram.StoredCredentials, error) { return creds, nil })
	if err != nil {
		t.Fatal(err)
	}
	return &peer{srv: srv, creds: creds}
}

func passwordPeer(t testing.TB, password string, salt []byte, iters int) *peer {
	t.Helper()
	return newPeer(t, storedCredentials(t, password, salt, iters))
}

// conv starts the server side of one exchange.
func (p *peer) conv() *xscram.ServerConversation {
	if p.cb != nil {
		return p.srv.NewConversationWithChannelBinding(xscram.ChannelBinding{Type: xscram.ChannelBindingTLSServerEndpoint, Data: p.cb})
	}
	return p.srv.NewConversation()
}

// attempt describes the client side of one exchange; the zero value is SCRAM-SHA-256 with
// testUser and testPassword.
type attempt struct {
	server                    string // Start's server; "" is one server as any other
	mechanism, user, password string
	cb                        []byte
	advertise                 bool
	ctx                       context.Context
}

func (a attempt) withDefaults() attempt {
	if a.mechanism == "" {
		a.mechanism = MechanismSHA256
	}
	if a.user == "" {
		a.user = testUser
	}
	if a.password == "" {
		a.password = testPassword
	}
	if a.ctx == nil {
		a.ctx = context.Background()
	}
	return a
}

// exchange runs a whole exchange of k with p and returns it with the first error. A server's
// refusal of client-final-message (e=...) is passed to ServerFinal, as a SCRAM server would send it.
func exchange(t testing.TB, k *Keys, p *peer, a attempt) (*Exchange, error) {
	t.Helper()
	a = a.withDefaults()
	e, err := k.Start(a.server, a.mechanism, a.user, a.password, a.cb, a.advertise)
	if err != nil {
		return nil, err
	}
	sc := p.conv()
	s1, err := sc.Step(string(e.ClientFirst()))
	if err != nil {
		t.Fatalf("server refused client-first-message %q: %v", e.ClientFirst(), err)
	}
	c2, err := e.ServerFirst(a.ctx, []byte(s1))
	if err != nil {
		return e, err
	}
	s2, serr := sc.Step(string(c2))
	if serr != nil && s2 == "" {
		t.Fatalf("server refused client-final-message: %v", serr)
	}
	if err := e.ServerFinal([]byte(s2)); err != nil {
		return e, err
	}
	if serr != nil || !sc.Valid() {
		t.Fatalf("client accepted server-final-message %q of a server that refused it: %v", s2, serr)
	}
	return e, nil
}

// mustExchange runs an exchange that must succeed and returns whether it was Cached.
func mustExchange(t testing.TB, k *Keys, p *peer, a attempt) bool {
	t.Helper()
	e, err := exchange(t, k, p, a)
	if err != nil {
		t.Fatalf("exchange: %v", err)
	}
	return e.Cached()
}

// derivations counts OnDerive calls and signals each.
type derivations struct {
	n    atomic.Int64
	done chan time.Duration
}

func newDerivations() *derivations { return &derivations{done: make(chan time.Duration, 1024)} }

func (d *derivations) config(c Config) Config {
	c.OnDerive = func(took time.Duration) {
		d.n.Add(1)
		d.done <- took
	}
	return c
}

func (d *derivations) expect(t testing.TB, want int64) {
	t.Helper()
	if got := d.n.Load(); got != want {
		t.Fatalf("PBKDF2 derivations: %d, want %d", got, want)
	}
}

// checkSecretFree fails if err's text holds any of the secrets.
func checkSecretFree(t testing.TB, err error, secrets ...string) {
	t.Helper()
	if err == nil {
		return
	}
	for _, s := range secrets {
		if s != "" && strings.Contains(err.Error(), s) {
			t.Fatalf("error %q holds a secret (%d bytes)", err, len(s))
		}
	}
}

func isKind(err, kind error) bool { return errors.Is(err, kind) }

// factorCount returns how many (salt, iteration count) the entry for (user, password) knows.
func factorCount(t testing.TB, k *Keys, user, password string) int {
	t.Helper()
	k.mu.Lock()
	defer k.mu.Unlock()
	el, ok := k.entries[k.entryKey(user, password)]
	if !ok {
		t.Fatal("no entry")
	}
	return len(el.Value.(*entry).gen.factors)
}
