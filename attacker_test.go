package pgconnector_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"

	"github.com/pgconnector/pgconnector"
	"github.com/pgconnector/pgconnector/internal/harness"
	"github.com/pgconnector/pgconnector/negotiation"
)

// What the DNS memory and the memory of a server's 'N' mean when an attacker answers once
// (docs/cache-and-faults.md, "An attacker who answers once"). The honest server is a fault
// server with TLS on 127.0.0.1; the attacker's is a PasswordTrap on 127.0.0.2 at the same port
// ('N' to SSLRequest, then a cleartext password asked and recorded) or a peer on the path that
// answers one SSLRequest 'N' itself (SSLStripProxy).

// caFile writes pem to a file of the test's and returns its path.
func caFile(t *testing.T, pem []byte) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "root.crt")
	if err := os.WriteFile(p, pem, 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

// clearStartups counts the connections to srv that began with a StartupMessage in the clear.
func clearStartups(srv *harness.FaultServer) (n int) {
	for _, ps := range srv.Stats().FirstPackets {
		if len(ps) > 0 && ps[0] == harness.PacketStartupMessage {
			n++
		}
	}
	return n
}

// One forged DNS answer (the resolver answers the attacker's address once, the honest one
// after): under sslmode=prefer every connect within the DNS memory's life goes to the forged
// address and hands it the password in cleartext (10 of 10 here, in well under the 12 s after
// which the answer is looked up again); with WithDNSCacheTTL(0) only the connect that got the
// forged answer does, as with libpq, which resolves at each connect; under sslmode=verify-full
// none does (the forged server cannot do TLS with the honest server's certificate: those
// connects fail, as libpq's would, for the memory's life by default, for one connect without it).
// The forged 'N' is also remembered for the host under prefer: with WithDNSCacheTTL(0), the
// next connects reach the honest server, in the clear, until the refresh of the 'N'.
func TestForgedDNSAnswer(t *testing.T) {
	honest := harness.FaultServerT(t, harness.FaultServerOptions{TLS: true})
	ip, port := honest.Addr()
	trap := harness.PasswordTrapT(t, fmt.Sprintf("127.0.0.2:%d", port))
	root := caFile(t, honest.CAPEM())
	const n = 10
	for _, tt := range []struct {
		name        string
		sslmode     string
		opts        []pgconnector.Option
		passwords   int // reaching the forged server
		failed      int // connects that failed
		clearHonest int // connects that reached the honest server in the clear
	}{
		{"prefer", "prefer", nil, n, 0, 0},
		{"prefer, WithDNSCacheTTL(0)", "prefer", []pgconnector.Option{pgconnector.WithDNSCacheTTL(0)}, 1, 0, n - 1},
		{"prefer, WithDNSCacheTTL(0) and WithCacheTTL(0)", "prefer", []pgconnector.Option{pgconnector.WithDNSCacheTTL(0), pgconnector.WithCacheTTL(0)}, 1, 0, 0},
		{"verify-full", "verify-full", nil, 0, n, 0},
		{"verify-full, WithDNSCacheTTL(0)", "verify-full", []pgconnector.Option{pgconnector.WithDNSCacheTTL(0)}, 0, 1, 0},
	} {
		t.Run(tt.name, func(t *testing.T) {
			passwordsBefore, clearBefore := len(trap.Passwords()), clearStartups(honest)
			var lookups atomic.Int32
			lookup := func(_ context.Context, host string) ([]string, error) {
				if lookups.Add(1) == 1 {
					return []string{"127.0.0.2"}, nil // the forged answer, once
				}
				return []string{ip}, nil
			}
			dsn := fmt.Sprintf("host=localhost port=%d user=u password=secret dbname=d sslmode=%s sslrootcert=%s connect_timeout=5",
				port, tt.sslmode, root)
			c := newConnector(t, dsn, append([]pgconnector.Option{pgconnector.WithLookupFunc(lookup)}, tt.opts...)...)
			defer c.Close()
			start := time.Now()
			failed := 0
			for range n {
				conn, err := c.Connect(context.Background())
				if err != nil {
					failed++
					continue
				}
				conn.Close()
			}
			if took := time.Since(start); took > 10*time.Second {
				t.Fatalf("%d connects took %v: past the DNS memory's last fifth (12 s), the count says nothing", n, took)
			}
			if got := len(trap.Passwords()) - passwordsBefore; got != tt.passwords {
				t.Errorf("%d passwords reached the forged server, want %d", got, tt.passwords)
			}
			if failed != tt.failed {
				t.Errorf("%d of %d connects failed, want %d", failed, n, tt.failed)
			}
			if got := clearStartups(honest) - clearBefore; got != tt.clearHonest {
				t.Errorf("%d connects reached the honest server in the clear, want %d", got, tt.clearHonest)
			}
		})
	}
}

// One 'N' injected by a peer on the path, in place of the honest server's 'S': under
// sslmode=prefer the connect goes on in the clear, as libpq's would, and the 'N' is remembered:
// the next connects skip SSLRequest and go in the clear until the background refresh asks again
// (at the refresh age, min(TTL/2, 1 min)), then use TLS. Under sslmode=require and verify-full
// the connect fails as libpq's does, and the 'N' takes no connect to plaintext: the next one
// sends SSLRequest and is TLS.
func TestInjectedNOnce(t *testing.T) {
	honest := harness.FaultServerT(t, harness.FaultServerOptions{TLS: true})
	ip, port := honest.Addr()
	root := caFile(t, honest.CAPEM())
	target := fmt.Sprintf("%s:%d", ip, port)

	t.Run("prefer", func(t *testing.T) {
		px := harness.SSLStripProxyT(t, target, 1)
		host, pport := px.Addr()
		const ttl = 4 * time.Second // refresh age 2 s
		c := newConnector(t, fmt.Sprintf("host=%s port=%d user=u dbname=d sslmode=prefer", host, pport), pgconnector.WithCacheTTL(ttl))
		defer c.Close()
		// A connect every 100 ms until one is TLS.
		start := time.Now()
		clear, firstTLS := 0, time.Duration(0)
		for firstTLS == 0 {
			before := px.Stats()
			at := time.Since(start)
			if at > ttl {
				t.Fatalf("no TLS connect within the TTL (%v) after the injected 'N'", ttl)
			}
			connectOnce(t, context.Background(), c)
			switch s := px.Stats(); {
			case s.ClearStartups == before.ClearStartups+1:
				clear++
			case at < ttl/2:
				t.Fatalf("a connect %v after the injected 'N' (refresh age %v) was TLS: %+v", at, ttl/2, s)
			default:
				firstTLS = at
			}
			time.Sleep(100 * time.Millisecond)
		}
		if s := px.Stats(); s.Stripped != 1 {
			t.Errorf("%d 'N' injected, want 1", s.Stripped)
		}
		t.Logf("one injected 'N' (TTL %v, refresh age %v): %d connects in the clear, the first TLS one %v later",
			ttl, ttl/2, clear, firstTLS.Round(time.Millisecond))
	})

	for _, mode := range []string{"require", "verify-full"} {
		t.Run(mode, func(t *testing.T) {
			px := harness.SSLStripProxyT(t, target, 1)
			_, pport := px.Addr()
			// localhost: the name the honest certificate holds.
			c := newConnector(t, fmt.Sprintf("host=localhost hostaddr=127.0.0.1 port=%d user=u dbname=d sslmode=%s sslrootcert=%s", pport, mode, root))
			defer c.Close()
			_, err := c.Connect(context.Background())
			if !errors.Is(err, negotiation.ErrSSLRequired) {
				t.Fatalf("connect after an injected 'N': %v, want %q", err, negotiation.ErrSSLRequired)
			}
			connectOnce(t, context.Background(), c)
			if s := px.Stats(); s.SSLRequests != 1 || s.ClearStartups != 0 {
				t.Errorf("the connect after: %+v, want one SSLRequest forwarded, nothing in the clear", s)
			}
			key := negotiation.Key{Host: "localhost", HostAddr: "127.0.0.1", Port: uint16(pport)}
			if a, _ := remembered(t, c, key, negotiation.MethodSSL); a != negotiation.AnswerYes {
				t.Errorf("after the TLS connect: SSL remembered %v, want yes", a)
			}
		})
	}
}
