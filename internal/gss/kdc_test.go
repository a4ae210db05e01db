package gss

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jcmturner/gokrb5/v8/iana/errorcode"
	"github.com/jcmturner/gokrb5/v8/keytab"

	"github.com/pgconnector/pgconnector/internal/harness"
)

// TestMain runs the tests with the harness, which removes its KDCs and files when they end.
func TestMain(m *testing.M) { os.Exit(harness.Run(m)) }

// realm is a harness KDC with the user alice (her ticket-granting ticket in ccache, her keys in
// keytab) and the service principal postgres/localhost.
type realm struct {
	kdc    *harness.KDC
	ccache string
	keytab string
}

func newRealm(t *testing.T, opts harness.KDCOptions) *realm {
	t.Helper()
	k := harness.StartKDCT(t, opts)
	if _, err := k.AddPrincipal("alice"); err != nil {
		t.Fatal(err)
	}
	if err := k.AddServicePrincipals("postgres", "localhost"); err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	r := &realm{kdc: k, ccache: filepath.Join(dir, "alice.ccache"), keytab: filepath.Join(dir, "alice.keytab")}
	if err := k.Kinit(r.ccache, "alice", 0); err != nil {
		t.Fatal(err)
	}
	if err := k.Keytab(r.keytab, "alice"); err != nil {
		t.Fatal(err)
	}
	return r
}

// conf writes a krb5.conf for the realm with o's changes and returns its path.
func (r *realm) conf(t *testing.T, o harness.Krb5ConfOptions) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "krb5.conf")
	if err := r.kdc.WriteKrb5Conf(path, o); err != nil {
		t.Fatal(err)
	}
	return path
}

// client returns a Client for cfg whose credentials have been checked and are valid.
func validClient(t *testing.T, cfg ClientConfig) *Client {
	t.Helper()
	c := NewClient(cfg)
	creds, err := c.Credentials(context.Background())
	if err != nil || !creds.Valid {
		t.Fatalf("Credentials: %+v, %v", creds, err)
	}
	return c
}

// closedPort returns a loopback address where nothing listens.
func closedPort(t *testing.T) string {
	t.Helper()
	ln, err := harness.Listen()
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	return addr
}

// What ServiceTicket returns against a real MIT KDC (and KDCs that do not work): which
// failures are ErrGSSRejected, and that the KDC's e-text is never in the message. This also
// holds kdcExchangeError to the text of gokrb5's errors.
func TestKDCErrorsFromARealKDC(t *testing.T) {
	r := newRealm(t, harness.KDCOptions{})
	if err := r.kdc.AddServicePrincipalsEnctypes("postgres", []string{harness.EnctypeAES128SHA256}, "sha256-only"); err != nil {
		t.Fatal(err)
	}
	noCCache := filepath.Join(t.TempDir(), "none")
	foreignKeytab := func(user string) string {
		kt := keytab.New()
		if err := kt.AddEntry(user, r.kdc.Realm, "not the password", time.Now(), 1, 18); err != nil {
			t.Fatal(err)
		}
		b, err := kt.Marshal()
		if err != nil {
			t.Fatal(err)
		}
		path := filepath.Join(t.TempDir(), user+".keytab")
		if err := os.WriteFile(path, b, 0o600); err != nil {
			t.Fatal(err)
		}
		return path
	}
	cases := []struct {
		name    string
		cfg     func(t *testing.T) ClientConfig
		host    string
		timeout time.Duration // 0: none
		want    string        // sentinel()
		code    int32         // of the *KDCError, 0: not one
		text    string        // in the message
	}{
		{"unknown service principal", func(t *testing.T) ClientConfig {
			return ClientConfig{Krb5Conf: r.kdc.Krb5Conf, CCache: r.ccache}
		}, "nowhere.invalid", 0, "ErrGSSRejected", errorcode.KDC_ERR_S_PRINCIPAL_UNKNOWN, "a ticket for postgres/nowhere.invalid"},
		{"no encryption type in common with the service", func(t *testing.T) ClientConfig {
			return ClientConfig{Krb5Conf: r.conf(t, harness.Krb5ConfOptions{Enctypes: []string{harness.EnctypeAES256SHA1}}), CCache: r.ccache}
		}, "sha256-only", 0, "ErrGSSRejected", errorcode.KDC_ERR_ETYPE_NOSUPP, "a ticket for postgres/sha256-only"},
		{"unknown service principal, keytab credentials", func(t *testing.T) ClientConfig {
			return ClientConfig{Krb5Conf: r.kdc.Krb5Conf, CCache: noCCache, ClientKeytab: r.keytab}
		}, "nowhere.invalid", 0, "ErrGSSRejected", errorcode.KDC_ERR_S_PRINCIPAL_UNKNOWN, "a ticket for postgres/nowhere.invalid"},
		{"unknown client principal", func(t *testing.T) ClientConfig {
			return ClientConfig{Krb5Conf: r.kdc.Krb5Conf, CCache: noCCache, ClientKeytab: foreignKeytab("bob")}
		}, "localhost", 0, "neither sentinel", errorcode.KDC_ERR_C_PRINCIPAL_UNKNOWN, "the ticket-granting ticket"},
		{"wrong client key", func(t *testing.T) ClientConfig {
			return ClientConfig{Krb5Conf: r.kdc.Krb5Conf, CCache: noCCache, ClientKeytab: foreignKeytab("alice")}
		}, "localhost", 0, "neither sentinel", 0, "client password/keytab incorrect"},
		{"KDC refuses connections", func(t *testing.T) ClientConfig {
			return ClientConfig{Krb5Conf: r.conf(t, harness.Krb5ConfOptions{KDCs: []string{closedPort(t)}}), CCache: r.ccache}
		}, "localhost", 0, "neither sentinel", 0, "connection refused"},
		{"KDC resets the connection", func(t *testing.T) ClientConfig {
			s := harness.KDCStandInT(t, harness.KDCReset)
			return ClientConfig{Krb5Conf: r.conf(t, harness.Krb5ConfOptions{KDCs: []string{s.Addr()}}), CCache: r.ccache}
		}, "localhost", 0, "neither sentinel", 0, "connection reset by peer"},
		{"KDC does not answer", func(t *testing.T) ClientConfig {
			s := harness.KDCStandInT(t, harness.KDCSilent)
			return ClientConfig{Krb5Conf: r.conf(t, harness.Krb5ConfOptions{KDCs: []string{s.Addr()}}), CCache: r.ccache}
		}, "localhost", 200 * time.Millisecond, "neither sentinel", 0, "stopped waiting for the KDC: context deadline exceeded"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			cl := validClient(t, c.cfg(t))
			ctx := context.Background()
			if c.timeout > 0 {
				var cancel context.CancelFunc
				ctx, cancel = context.WithTimeout(ctx, c.timeout)
				defer cancel()
			}
			_, _, err := cl.ServiceTicket(ctx, c.host)
			if err == nil {
				t.Fatal("ServiceTicket succeeded")
			}
			if got := sentinel(err); got != c.want {
				t.Errorf("%v is %s, want %s", err, got, c.want)
			}
			var ke *KDCError
			if errors.As(err, &ke) != (c.code != 0) || (ke != nil && ke.Code != c.code) {
				t.Errorf("%v: *KDCError %+v, want code %d", err, ke, c.code)
			}
			if !strings.Contains(err.Error(), c.text) {
				t.Errorf("message %q does not say %q", err, c.text)
			}
			// MIT's e-texts for these errors.
			for _, etext := range []string{"LOOKING_UP_SERVER", "BAD_ENCRYPTION_TYPE", "CLIENT_NOT_FOUND"} {
				if strings.Contains(err.Error(), etext) {
					t.Errorf("message %q has the KDC's e-text %q", err, etext)
				}
			}
			t.Logf("%v", err)
		})
	}

	// A ticket-granting ticket that expired after the credentials were checked.
	t.Run("expired ticket-granting ticket", func(t *testing.T) {
		cc := filepath.Join(t.TempDir(), "short.ccache")
		if err := r.kdc.Kinit(cc, "alice", 2*time.Second); err != nil {
			t.Fatal(err)
		}
		cl := validClient(t, ClientConfig{Krb5Conf: r.kdc.Krb5Conf, CCache: cc})
		time.Sleep(2500 * time.Millisecond)
		_, _, err := cl.ServiceTicket(context.Background(), "localhost")
		if err == nil || sentinel(err) != "neither sentinel" {
			t.Fatalf("%v is %s, want an error that is neither sentinel", err, sentinel(err))
		}
		t.Logf("%v", err)
	})
}

// ServiceTicket returns when its context ends even though gokrb5 goes on waiting for a KDC
// that accepts and never answers; concurrent callers share one exchange, which ends by
// gokrb5's own timeout (5 s for the answer) and leaves no goroutine behind. With keytab
// credentials, the AS exchange gokrb5 does first is bounded alike.
func TestServiceTicketStopsWaitingForASilentKDC(t *testing.T) {
	r := newRealm(t, harness.KDCOptions{})
	for _, tc := range []struct {
		name string
		cfg  func(conf string) ClientConfig
	}{
		{"credential cache", func(conf string) ClientConfig { return ClientConfig{Krb5Conf: conf, CCache: r.ccache} }},
		{"client keytab", func(conf string) ClientConfig {
			return ClientConfig{Krb5Conf: conf, CCache: filepath.Join(t.TempDir(), "none"), ClientKeytab: r.keytab, Principal: r.kdc.Principal("alice")}
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := harness.KDCStandInT(t, harness.KDCSilent)
			c := validClient(t, tc.cfg(r.conf(t, harness.Krb5ConfOptions{KDCs: []string{s.Addr()}})))
			base := settledGoroutines() // goroutines of earlier subtests may still be ending

			const callers = 8
			ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
			defer cancel()
			began := time.Now()
			var wg sync.WaitGroup
			errs := make([]error, callers)
			for i := range callers {
				wg.Go(func() { _, _, errs[i] = c.ServiceTicket(ctx, "localhost") })
			}
			wg.Wait()
			elapsed := time.Since(began)
			if elapsed > time.Second {
				t.Errorf("the callers returned after %v, want about 300 ms", elapsed)
			}
			for _, err := range errs {
				if !errors.Is(err, context.DeadlineExceeded) || sentinel(err) != "neither sentinel" || !strings.Contains(err.Error(), "postgres/localhost") {
					t.Fatalf("%v (%s): want the deadline, neither sentinel, naming postgres/localhost", err, sentinel(err))
				}
			}
			if got := s.Accepted(); got != 1 {
				t.Errorf("the stand-in accepted %d connections, want 1: one exchange for %d callers", got, callers)
			}
			if n := runtime.NumGoroutine(); n <= base {
				t.Errorf("%d goroutines after the callers returned, %d before: the exchange did not go on", n, base)
			}

			// A caller that comes while the exchange goes on waits for it, not for another one;
			// a canceled one returns at once.
			ctx2, cancel2 := context.WithTimeout(context.Background(), 100*time.Millisecond)
			defer cancel2()
			if _, _, err := c.ServiceTicket(ctx2, "localhost"); !errors.Is(err, context.DeadlineExceeded) {
				t.Errorf("second caller: %v", err)
			}
			canceled, cancel3 := context.WithCancel(context.Background())
			cancel3()
			if _, _, err := c.ServiceTicket(canceled, "localhost"); !errors.Is(err, context.Canceled) {
				t.Errorf("canceled caller: %v", err)
			}
			if got := s.Accepted(); got != 1 {
				t.Errorf("the stand-in accepted %d connections, want still 1", got)
			}

			// gokrb5's timeout ends the exchange: back to the goroutines of before.
			deadline := began.Add(20 * time.Second)
			for runtime.NumGoroutine() > base {
				if time.Now().After(deadline) {
					buf := make([]byte, 1<<20)
					t.Fatalf("%d goroutines 20 s later, %d before:\n%s", runtime.NumGoroutine(), base, buf[:runtime.Stack(buf, true)])
				}
				time.Sleep(50 * time.Millisecond)
			}
			t.Logf("callers returned after %v; the exchange ended after %v", elapsed, time.Since(began))

			// The exchange is over: the next caller starts another one.
			ctx4, cancel4 := context.WithTimeout(context.Background(), 100*time.Millisecond)
			defer cancel4()
			if _, _, err := c.ServiceTicket(ctx4, "localhost"); !errors.Is(err, context.DeadlineExceeded) {
				t.Errorf("caller after the exchange: %v", err)
			}
			// The new exchange goes on after its caller gave up: on a loaded machine it may dial
			// after the 100 ms.
			for deadline := time.Now().Add(5 * time.Second); s.Accepted() < 2 && time.Now().Before(deadline); {
				time.Sleep(10 * time.Millisecond)
			}
			if got := s.Accepted(); got != 2 {
				t.Errorf("the stand-in accepted %d connections, want 2", got)
			}
		})
	}
}

// Against a KDC that answers, concurrent callers get the ticket, from one exchange, and later
// callers from gokrb5's cache; the session establishes a context without asking again.
func TestServiceTicketShared(t *testing.T) {
	r := newRealm(t, harness.KDCOptions{})
	c := validClient(t, ClientConfig{Krb5Conf: r.kdc.Krb5Conf, CCache: r.ccache})
	const callers = 8
	var wg sync.WaitGroup
	fromCache := make([]bool, callers)
	errs := make([]error, callers)
	for i := range callers {
		wg.Go(func() {
			s, fc, err := c.ServiceTicket(context.Background(), "localhost")
			if err == nil && s.Enctype() == "" {
				err = errors.New("no enctype")
			}
			fromCache[i], errs[i] = fc, err
		})
	}
	wg.Wait()
	for i := range callers {
		if errs[i] != nil {
			t.Fatal(errs[i])
		}
	}
	s, fc, err := c.ServiceTicket(context.Background(), "localhost")
	if err != nil || !fc {
		t.Fatalf("later caller: fromCache %t, %v", fc, err)
	}
	if str := s.(interface{ String() string }).String(); str != "gss.session{postgres/localhost, "+s.Enctype()+"}" {
		t.Errorf("String() = %q", str)
	}
}

// settledGoroutines returns the number of goroutines once it has stopped going down for 100 ms
// (at most 5 s): goroutines that are ending (a closed server's handlers) are not counted.
func settledGoroutines() int {
	n := runtime.NumGoroutine()
	for deadline, still := time.Now().Add(5*time.Second), 0; still < 5 && time.Now().Before(deadline); {
		time.Sleep(20 * time.Millisecond)
		if m := runtime.NumGoroutine(); m < n {
			n, still = m, 0
		} else {
			still++
		}
	}
	return n
}
