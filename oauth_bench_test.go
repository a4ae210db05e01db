package pgconnector_test

import (
	"context"
	"database/sql/driver"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/oauth2"

	"github.com/pgconnector/pgconnector"
	"github.com/pgconnector/pgconnector/internal/harness"
)

// oauthPreload loads the harness's OAuth validator module (harness.OAuthOptions) in the
// postmaster, so that a backend does not dlopen it at each authentication: PostgreSQL 18 loads
// oauth_validator_libraries in the backend, which costs an oauth connect about 2.4 ms more than
// a trust one on a loaded 2-core VM (log_connections=setup_durations, "authentication"), a cost of
// the server that no client can avoid. A wrong name fails the server's start.
var oauthPreload = map[string]string{"shared_preload_libraries": "pgconnector_oauth_validator"}

// benchTrustRole is the role of BenchmarkOAuthConnect that pg_hba.conf trusts.
const benchTrustRole = "bench_trust"

// BenchmarkOAuthConnect opens and closes one connection per iteration to one PostgreSQL 18 over
// verify-full TLS (the harness's CA as sslrootcert), side by side: as a role that the server
// trusts, and as AppUser, whose hostssl line says oauth (the harness's issuer and validator,
// preloaded: see oauthPreload), with a token of WithOAuthTokenFunc that the connector holds
// (warm: the discovery exchange of the first connect is remembered, so each measured connect
// sends the token at once). It reports the server backends, the token function's calls and the
// client's CPU time per connection. The target is the oauth connect within 1.1x of the
// trust connect's time; on a loaded machine two sub-benchmarks run seconds apart see different
// loads, so a third, "alternating", makes each iteration one trust connect and one oauth
// connect, timed apart, and reports their mean times (trust-ns/conn, oauth-ns/conn) and ratio
// (oauth/trust), the figure of the target (docs/benchmarks.md, -oauth-gobench):
//
//	go test -run '^$' -bench OAuthConnect -benchtime 100x -count 1 .
func BenchmarkOAuthConnect(b *testing.B) {
	iss := harness.StartOAuthIssuerT(b, harness.OAuthIssuerOptions{})
	o := iss.OAuth()
	o.DelegateIdentMapping = true
	srv := harness.StartT(b, harness.Options{Major: 18, TLS: true, OAuth: o, Settings: oauthPreload, HBA: []string{
		"hostssl all " + benchTrustRole + " 127.0.0.1/32 trust",
		o.HBALine("hostssl"),
	}})
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := srv.ExecAdmin(ctx, "CREATE ROLE "+benchTrustRole+" LOGIN"); err != nil {
		b.Fatal(err)
	}
	tls := "host=" + srv.Host + " port=" + strconv.Itoa(srv.Port) + " dbname=" + srv.Database +
		" sslmode=verify-full sslrootcert=" + srv.CAFile
	var calls atomic.Int64
	tokenFunc := pgconnector.WithOAuthTokenFunc(func(ctx context.Context, r pgconnector.OAuthRequest) (*oauth2.Token, error) {
		calls.Add(1)
		tok, err := iss.Mint(harness.AppUser, time.Hour)
		return &oauth2.Token{AccessToken: tok, Expiry: time.Now().Add(time.Hour)}, err
	})
	var cs []driver.Connector
	for _, bc := range []struct {
		name string
		dsn  string
		opts []pgconnector.Option
	}{
		{"trust", tls + " user=" + benchTrustRole, nil},
		{"oauth-cached-token", tls + " user=" + harness.AppUser + " oauth_issuer=" + iss.URL, []pgconnector.Option{tokenFunc}},
	} {
		c, err := pgconnector.New(bc.dsn, bc.opts...)
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() { c.Close() })
		cs = append(cs, c)
		b.Run(bc.name, func(b *testing.B) {
			benchConnectBackends(b, srv, c, &calls)
		})
	}
	b.Run("alternating", func(b *testing.B) {
		var spent [2]time.Duration // trust, oauth
		// Warm, for when this sub-benchmark runs alone.
		for _, c := range cs {
			connectClose(b, c)
		}
		for b.Loop() {
			for i, c := range cs {
				start := time.Now()
				connectClose(b, c)
				spent[i] += time.Since(start)
			}
		}
		b.ReportMetric(float64(spent[0].Nanoseconds())/float64(b.N), "trust-ns/conn")
		b.ReportMetric(float64(spent[1].Nanoseconds())/float64(b.N), "oauth-ns/conn")
		b.ReportMetric(float64(spent[1])/float64(spent[0]), "oauth/trust")
	})
}

// benchConnectBackends opens and closes a connection of c per iteration, after one unmeasured
// connect (the decision cache, a token), and reports the backends of srv and the calls counted
// by calls per connection.
func benchConnectBackends(b *testing.B, srv *harness.Postgres, c driver.Connector, calls *atomic.Int64) {
	connectClose(b, c)
	mark, before := srv.LogMark(), calls.Load()
	b.ReportAllocs()
	b.ResetTimer()
	cpu0 := cpuTime()
	for b.Loop() {
		connectClose(b, c)
	}
	cpu := cpuTime() - cpu0
	b.StopTimer()
	backends, err := srv.ConnectionsSince(mark)
	if err != nil {
		b.Fatal(err)
	}
	b.ReportMetric(float64(backends)/float64(b.N), "backends/op")
	b.ReportMetric(float64(calls.Load()-before)/float64(b.N), "tokencalls/op")
	b.ReportMetric(float64(cpu.Nanoseconds())/float64(b.N), "cpu-ns/op")
}

// connectClose opens a connection of c and closes it.
func connectClose(b *testing.B, c driver.Connector) {
	conn, err := c.Connect(context.Background())
	if err != nil {
		b.Fatal(err)
	}
	conn.Close()
}
