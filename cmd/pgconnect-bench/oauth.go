package main

import (
	"context"
	"database/sql/driver"
	"errors"
	"fmt"
	"log"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/stdlib"
	"golang.org/x/oauth2"

	"github.com/pgconnector/pgconnector"
	"github.com/pgconnector/pgconnector/internal/harness"
)

// Client kinds of scenario 13 (clientSpec.Kind; kindLibpqOAuth is not a Go client).
const (
	// kindPgconnectorOAuth is kindPgconnector with WithOAuthTokenFunc handing out the token of
	// oauthTokenEnv: the connector asks for it once and keeps it.
	kindPgconnectorOAuth = "pgconnector-oauth"
	// kindPgxOAuth is kindPgx with pgconn.Config.OAuthTokenProvider returning the token of
	// oauthTokenEnv (pgx calls it for every connection).
	kindPgxOAuth = "pgx-oauth"
	// kindLibpqOAuth connects with libpq 18 (harness.LibpqOAuthConnect: PQconnectdb in a loop
	// in a program of its own, whose PQAUTHDATA_OAUTH_BEARER_TOKEN hook hands libpq the token of
	// oauthTokenEnv), not pgbench: pgbench cannot install a token hook.
	kindLibpqOAuth = "libpq-oauth"
)

// oauthTokenEnv is the environment variable that hands a client process of scenario 13 its
// access token (not the command line, which other accounts can read in /proc).
const oauthTokenEnv = "PGCONNECT_BENCH_OAUTH_TOKEN"

// How the roles of scenario 13 log in (ConnectResult.User).
const (
	userOAuth    = "oauth"
	oauthTrusted = "bench_trust" // scenario 13's role that pg_hba.conf trusts
)

// oauthValidatorLibrary is the harness's OAuth validator module (harness.OAuthOptions), which
// scenario 13's server preloads: PostgreSQL 18 otherwise loads oauth_validator_libraries in
// each backend at authentication (a dlopen: about 2.4 ms on a loaded 2-core VM), a cost of the
// server that no client avoids. A wrong name fails the server's start.
const oauthValidatorLibrary = "pgconnector_oauth_validator"

// Peer names of scenario 13.
const (
	peerLibpqOAuthTrust    = "libpq"
	peerLibpqOAuthIssuer   = "libpq token hook, oauth_issuer = the issuer"
	peerLibpqOAuthWellKnow = "libpq token hook, oauth_issuer = its .well-known URI"
	peerPgxOAuthTrust      = "pgx"
	peerPgxOAuth           = "pgx OAuthTokenProvider"
	peerPcOAuthTrust       = "pgconnector"
	peerPcOAuth            = "pgconnector WithOAuthTokenFunc (cached token)"
)

// oauthTarget is the bound on a connect with a cached token: within 1.1x of a trust
// connect's time to the same server over the same TLS, so at least 1/1.1 of its rate.
const oauthTarget = 1.1

// oauthConnector returns the connector of a scenario 13 Go kind, with the token of
// oauthTokenEnv; ok is false for another kind.
func oauthConnector(kind, dsn string) (c driver.Connector, ok bool, err error) {
	token := os.Getenv(oauthTokenEnv)
	switch kind {
	case kindPgconnectorOAuth:
		if token == "" {
			return nil, true, errors.New(oauthTokenEnv + " is not set")
		}
		c, err := pgconnector.New(dsn, pgconnector.WithOAuthTokenFunc(
			func(context.Context, pgconnector.OAuthRequest) (*oauth2.Token, error) {
				return &oauth2.Token{AccessToken: token, Expiry: time.Now().Add(time.Hour)}, nil
			}))
		return c, true, err
	case kindPgxOAuth:
		if token == "" {
			return nil, true, errors.New(oauthTokenEnv + " is not set")
		}
		cfg, err := pgx.ParseConfig(dsn)
		if err != nil {
			return nil, true, err
		}
		cfg.OAuthTokenProvider = func(context.Context) (string, error) { return token, nil }
		return stdlib.GetConnector(*cfg), true, nil
	}
	return nil, false, nil
}

// oauthTLS is scenario 13: one PostgreSQL 18 with TLS and two hostssl lines, trust for
// oauthTrusted and oauth (the harness's validator module, a local https issuer) for every other
// role; each peer connects over verify-full, as the trust role and with a token, one storm per
// client count (-tls-clients) in at most tlsRounds rounds, as scenario 9.
func (l *lab) oauthTLS(ctx context.Context) error {
	iss, err := harness.StartOAuthIssuer(harness.OAuthIssuerOptions{})
	if err != nil {
		return fmt.Errorf("scenario 13: %w", err)
	}
	defer func() {
		if err := iss.Close(); err != nil {
			log.Printf("stopping the OAuth issuer: %v", err)
		}
	}()
	o := iss.OAuth()
	o.DelegateIdentMapping = true
	pg, err := startServer(ctx, "scenario 13 server (TLS, oauth and trust)", harness.Options{Major: 18, TLS: true, OAuth: o,
		Settings: map[string]string{"shared_preload_libraries": oauthValidatorLibrary},
		HBA:      []string{"hostssl all " + oauthTrusted + " 127.0.0.1/32 trust", o.HBALine("hostssl")}})
	if err != nil {
		return err
	}
	defer stopServer(pg)
	if err := pg.ExecAdmin(ctx, "CREATE ROLE "+oauthTrusted+" LOGIN"); err != nil {
		return fmt.Errorf("scenario 13: %w", err)
	}
	token, err := iss.Mint(harness.AppUser, 24*time.Hour)
	if err != nil {
		return fmt.Errorf("scenario 13: %w", err)
	}
	peers, users := oauthPeers(pg, iss.URL, iss.DiscoveryURL, []string{oauthTokenEnv + "=" + token})
	for _, clients := range l.cfg.tlsClients {
		from := len(l.rep.Connect)
		rounds, conns := stormShape(l.cfg.tlsConns, clients, min(l.cfg.rounds, tlsRounds))
		if err := l.storm(ctx, 13, pgCounter{pg}, peers, noTickets(len(peers)), clients, conns, rounds); err != nil {
			return err
		}
		for i := from; i < len(l.rep.Connect); i++ {
			l.rep.Connect[i].User = users[i-from]
		}
	}
	return nil
}

// oauthPeers returns scenario 13's peers against pg, whose issuer is issuer (its discovery
// document at discovery), each with env (the token), and how each logs in.
func oauthPeers(pg *harness.Postgres, issuer, discovery string, env []string) ([]peer, []string) {
	base := fmt.Sprintf("host=%s port=%d dbname=%s connect_timeout=20 sslmode=verify-full sslrootcert=%s",
		pg.Host, pg.Port, pg.Database, pg.CAFile)
	trust := base + " user=" + oauthTrusted
	// pgx knows no oauth_issuer (it would send it to the server as a setting).
	app := base + " user=" + harness.AppUser
	oauth := app + " oauth_issuer=" + issuer
	// libpq 18 wants oauth_client_id even when its hook supplies the token.
	libpq := oauth + " oauth_client_id=pgconnect-bench"
	wellKnown := base + " user=" + harness.AppUser + " oauth_issuer=" + discovery + " oauth_client_id=pgconnect-bench"
	peers := []peer{
		{Name: peerLibpqOAuthTrust, Family: "libpq", Kind: kindLibpqOAuth, DSN: trust, Env: env},
		{Name: peerLibpqOAuthIssuer, Family: "libpq", Kind: kindLibpqOAuth, DSN: libpq, Env: env},
		{Name: peerLibpqOAuthWellKnow, Family: "libpq", Kind: kindLibpqOAuth, DSN: wellKnown, Env: env},
		{Name: peerPgxOAuthTrust, Family: "pgx", Kind: kindPgx, DSN: trust, Warm: true, WarmConns: tlsWarmConns},
		{Name: peerPgxOAuth, Family: "pgx", Kind: kindPgxOAuth, DSN: app, Warm: true, WarmConns: tlsWarmConns, Env: env},
		{Name: peerPcOAuthTrust, Family: "pgconnector", Kind: kindPgconnector, DSN: trust, Warm: true, WarmConns: tlsWarmConns},
		{Name: peerPcOAuth, Family: "pgconnector", Kind: kindPgconnectorOAuth, DSN: oauth, Warm: true, WarmConns: tlsWarmConns, Env: env},
	}
	users := []string{userTrust, userOAuth, userOAuth, userTrust, userOAuth, userTrust, userOAuth}
	return peers, users
}

// libpqOAuthRun runs peer p (kindLibpqOAuth) as clients concurrent libpq programs of conns/clients
// connects each (harness.LibpqOAuthConnect: PQconnectdb and PQfinish, no query), after one
// unmeasured connect that also builds the program. The storm's duration is the longest loop
// (the programs' start left out); the client CPU is what the programs used (getrusage
// RUSAGE_CHILDREN around them: their start and exit included, as pgbench's). There is no
// latency per connect.
func (r *runner) libpqOAuthRun(ctx context.Context, p peer, clients, conns int, mark func()) (outcome, error) {
	token := envValue(p.Env, oauthTokenEnv)
	if _, err := harness.LibpqOAuthConnect(ctx, p.DSN, token, 1); err != nil {
		return outcome{}, fmt.Errorf("libpq OAuth program: %w", err)
	}
	perClient := max(1, conns/clients)
	results := make([]harness.LibpqOAuthResult, clients)
	errs := make([]error, clients)
	mark()
	cpu0 := childrenCPU()
	var wg sync.WaitGroup
	for i := range clients {
		wg.Go(func() { results[i], errs[i] = harness.LibpqOAuthConnect(ctx, p.DSN, token, perClient) })
	}
	wg.Wait()
	o := outcome{conns: perClient * clients, logical: perClient * clients, cpu: childrenCPU() - cpu0}
	if err := errors.Join(errs...); err != nil {
		return outcome{}, fmt.Errorf("libpq OAuth program: %w", err)
	}
	for _, res := range results {
		o.seconds = max(o.seconds, res.Elapsed.Seconds())
		for _, c := range res.Connects {
			if c.Err != "" {
				o.errors++
				if o.firstErr == "" {
					o.firstErr = shortError(c.Err)
				}
			}
		}
	}
	return o, nil
}

// envValue is the value of key in env ("KEY=value" items), or "".
func envValue(env []string, key string) string {
	for _, kv := range slices.Backward(env) {
		if v, ok := strings.CutPrefix(kv, key+"="); ok {
			return v
		}
	}
	return ""
}

// childrenCPU is the user+system CPU time of this process's ended children (getrusage
// RUSAGE_CHILDREN).
func childrenCPU() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_CHILDREN, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// oauthTargets are scenario 13's target: for each client count, the connector's connect with a
// cached token against its trust connect to the same server, connections/s, at least
// 1/oauthTarget.
func oauthTargets(r *Report, ratio func(name string, a, b *ConnectResult, want float64, strict bool)) {
	find := func(clients int, peer string) *ConnectResult {
		for i, c := range r.Connect {
			if c.Scenario == 13 && c.Clients == clients && c.Peer == peer && c.Errors < c.Conns {
				return &r.Connect[i]
			}
		}
		return nil
	}
	for _, c := range scenarioRows(r.Connect, 13) {
		if c.Peer != peerPcOAuth {
			continue
		}
		ratio(fmt.Sprintf("scenario 13, %s: pgconnector cached OAuth token / pgconnector trust, connections/s (within %.1fx of the trust connect's time)",
			plural(c.Clients, "client"), oauthTarget), find(c.Clients, peerPcOAuth), find(c.Clients, peerPcOAuthTrust), 1/oauthTarget, false)
	}
}

// OAuthGoBench is the root package's BenchmarkOAuthConnect, read from `go test -bench` output
// (-oauth-gobench), one entry per run in the order they ran: the ns/op of its trust and
// oauth-cached-token sub-benchmarks, and the oauth/trust metric of its alternating one (each
// iteration a trust connect and an oauth connect, so both see the same load).
type OAuthGoBench struct {
	Trust       []float64 `json:"trust_ns_per_op"`
	OAuth       []float64 `json:"oauth_ns_per_op"`
	Alternating []float64 `json:"alternating_oauth_over_trust,omitempty"`
}

// parseOAuthGoBench reads the BenchmarkOAuthConnect lines of `go test -bench` output.
func parseOAuthGoBench(text string) (*OAuthGoBench, error) {
	var g OAuthGoBench
	for line := range strings.Lines(text) {
		f := strings.Fields(line)
		name, ok := strings.CutPrefix(f0(f), "BenchmarkOAuthConnect/")
		if !ok || len(f) < 4 || f[3] != "ns/op" {
			continue
		}
		ns, err := strconv.ParseFloat(f[2], 64)
		if err != nil || ns <= 0 {
			return nil, fmt.Errorf("-oauth-gobench: %q: not a time per op", strings.TrimSpace(line))
		}
		switch {
		case strings.HasPrefix(name, "trust"):
			g.Trust = append(g.Trust, ns)
		case strings.HasPrefix(name, "oauth-cached-token"):
			g.OAuth = append(g.OAuth, ns)
		case strings.HasPrefix(name, "alternating"):
			for i := 4; i+1 < len(f); i += 2 {
				if f[i+1] == "oauth/trust" {
					x, err := strconv.ParseFloat(f[i], 64)
					if err != nil || x <= 0 {
						return nil, fmt.Errorf("-oauth-gobench: %q: not a ratio", strings.TrimSpace(line))
					}
					g.Alternating = append(g.Alternating, x)
				}
			}
		}
	}
	if len(g.Trust) == 0 || len(g.Trust) != len(g.OAuth) || (len(g.Alternating) > 0 && len(g.Alternating) != len(g.Trust)) {
		return nil, fmt.Errorf("-oauth-gobench: %d trust, %d oauth-cached-token and %d alternating results, want as many of each, at least one",
			len(g.Trust), len(g.OAuth), len(g.Alternating))
	}
	return &g, nil
}

// f0 is the first of fields, or "".
func f0(fields []string) string {
	if len(fields) == 0 {
		return ""
	}
	return fields[0]
}

// oauthGoBenchTarget is the target on BenchmarkOAuthConnect: the median over the runs of
// the alternating sub-benchmark's oauth/trust (where there is none, of each run's
// oauth-cached-token ns/op over its trust ns/op), at most oauthTarget; the side by side
// sub-benchmarks' median ratio is recorded too.
func oauthGoBenchTarget(g *OAuthGoBench) []Target {
	if g == nil || len(g.Trust) == 0 || len(g.Trust) != len(g.OAuth) {
		return nil
	}
	apart := make([]float64, len(g.Trust))
	for i := range apart {
		apart[i] = g.OAuth[i] / g.Trust[i]
	}
	name := "BenchmarkOAuthConnect (root package), PostgreSQL 18 over verify-full TLS: cached-token connect / trust connect"
	m, lo, hi := medianRange(apart)
	got := fmt.Sprintf("%.2fx (runs %.2f-%.2f)", m, lo, hi)
	if len(g.Alternating) == len(g.Trust) {
		am, alo, ahi := medianRange(slices.Clone(g.Alternating))
		return []Target{{
			Name: fmt.Sprintf("%s, time per connect, alternating (median of %d runs)", name, len(apart)),
			Want: fmt.Sprintf("<= %.2fx", oauthTarget),
			Got:  fmt.Sprintf("%.2fx (runs %.2f-%.2f); side by side sub-benchmarks %s", am, alo, ahi, got),
			Met:  am <= oauthTarget,
		}}
	}
	return []Target{{
		Name: fmt.Sprintf("%s, ns/op (median of %d runs)", name, len(apart)),
		Want: fmt.Sprintf("<= %.2fx", oauthTarget),
		Got:  got,
		Met:  m <= oauthTarget,
	}}
}

// medianRange returns the median, the smallest and the largest of xs (not empty); xs is
// sorted in place.
func medianRange(xs []float64) (median, lo, hi float64) {
	slices.Sort(xs)
	median = xs[len(xs)/2]
	if len(xs)%2 == 0 {
		median = (xs[len(xs)/2-1] + xs[len(xs)/2]) / 2
	}
	return median, xs[0], xs[len(xs)-1]
}

// readOAuthGoBench reads the file of -oauth-gobench into rep and checks the targets again.
func readOAuthGoBench(rep *Report, path string) error {
	b, err := os.ReadFile(path)
	if err != nil {
		return fmt.Errorf("-oauth-gobench: %w", err)
	}
	if rep.OAuthGoBench, err = parseOAuthGoBench(string(b)); err != nil {
		return err
	}
	rep.Targets = checkTargets(rep)
	return nil
}

// mergeOAuth replaces rep's scenario 13 with the one of the report at path, a run of that
// scenario alone, and records when it ran (Report.OAuthMeasured); the targets are checked again.
func mergeOAuth(rep *Report, path string) error {
	other, err := readReport(path)
	if err != nil {
		return err
	}
	rows := scenarioRows(other.Connect, 13)
	if len(rows) == 0 {
		return errors.New("-merge-oauth: " + path + " has no scenario 13")
	}
	rep.Connect = append(slices.DeleteFunc(rep.Connect, func(c ConnectResult) bool { return c.Scenario == 13 }), rows...)
	if other.OAuthGoBench != nil {
		rep.OAuthGoBench = other.OAuthGoBench
	}
	rep.OAuthMeasured, rep.OAuthMachine = other.Started, &other.Machine
	rep.Targets = checkTargets(rep)
	return nil
}
