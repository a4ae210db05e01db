package main

import (
	"context"
	"fmt"
	"log"

	"github.com/pgconnector/pgconnector/internal/harness"
)

// Peer names of scenarios 8 and 9.
const (
	peerPcHerd       = "pgconnector (one Connector, cold)"
	peerLibpqRequire = "libpq sslmode=require"
	peerLibpqVerify  = "libpq sslmode=verify-full"
	peerPgxRequire   = "pgx sslmode=require"
	peerPgxVerify    = "pgx sslmode=verify-full"
	peerPcRequire    = "pgconnector sslmode=require"
	peerPcVerify     = "pgconnector sslmode=verify-full"
)

// scramWarmConns is the unmeasured connections a Go peer of scenario 8 makes before its
// storm. The storms are short (60 connections a round at -scram-conns 600 and 1 client): after
// one warm-up connection only, the first page faults of the process's heap and its first garbage
// collections would cost a few hundred µs per measured connection on a VM with slow page faults.
const scramWarmConns = 50

// tlsWarmConns is scramWarmConns for scenario 9, where a connection costs a backend (about 30 ms
// on a 2-core VM) and a TLS handshake's CPU hides more of those first costs.
const tlsWarmConns = 5

// How the roles of scenario 8 log in (ConnectResult.User).
const (
	userTrust = "trust"
	userScram = "scram-sha-256"
)

// noCounter counts nothing: behind pgbouncer, backends are pooled and say nothing of one
// client connection.
type noCounter struct{}

func (noCounter) begin() func() (int, int, error) {
	return func() (int, int, error) { return 0, 0, nil }
}

// stormShape returns the rounds and the connections per peer of one storm of scenarios 8 and 9,
// given conns (-scram-conns, -tls-conns), the clients and the rounds wanted: every client of
// every round needs two connections at least, to have a connect latency (measured from its
// previous connection on), so with many clients the storm has fewer rounds (one at the least),
// and more connections only when one round is still too many.
func stormShape(conns, clients, rounds int) (int, int) {
	rounds = max(1, min(rounds, conns/(2*clients)))
	return rounds, max(conns, 2*clients*rounds)
}

// tlsRounds caps the rounds of scenario 9, whose connections cost a backend each (about 30 ms on
// a 2-core VM): fewer, longer rounds keep its run short and each client process's fixed costs
// small beside the connections it measures.
const tlsRounds = 4

// pgbouncerScenario is scenario 8: pgbouncer (pool_mode=transaction) in front of a server, a
// trust role and a scram-sha-256 role whose SCRAM secret is in pgbouncer's auth_file, so that
// pgbouncer only checks proofs and the PBKDF2 of each login is the client's alone. Each role
// gets a storm per client count (-scram-clients), then the SCRAM role a cold herd.
func (l *lab) pgbouncerScenario(ctx context.Context) error {
	pg, err := startServer(ctx, "scenario 8 server (behind pgbouncer)", harness.Options{})
	if err != nil {
		return err
	}
	defer stopServer(pg)
	b, err := harness.StartPgbouncer(ctx, pg, harness.PgbouncerOptions{})
	if err != nil {
		return fmt.Errorf("scenario 8: %w", err)
	}
	defer func() {
		if err := b.Stop(); err != nil {
			log.Printf("stopping pgbouncer: %v", err)
		}
	}()
	log.Printf("scenario 8: pgbouncer on %s (pool_mode=transaction, default_pool_size=20)", b.Addr())
	for _, u := range []struct{ auth, dsn string }{
		{userTrust, b.TrustDSN("connect_timeout=20")},
		{userScram, b.ScramDSN("connect_timeout=20")},
	} {
		peers := []peer{
			{Name: peerLibpqDefault, Family: "libpq", Kind: kindPgbench, DSN: u.dsn},
			{Name: peerLibpqExplicit, Family: "libpq", Kind: kindPgbench, DSN: u.dsn + " gssencmode=disable sslmode=disable"},
			{Name: peerPgxDefault, Family: "pgx", Kind: kindPgx, DSN: u.dsn, Warm: true, WarmConns: scramWarmConns},
			{Name: peerPgxExplicit, Family: "pgx", Kind: kindPgx, DSN: u.dsn + " sslmode=disable", Warm: true, WarmConns: scramWarmConns},
			{Name: peerDefault, Family: "pgconnector", Kind: kindPgconnector, DSN: u.dsn, Warm: true, WarmConns: scramWarmConns},
		}
		for _, clients := range l.cfg.scramClients {
			log.Printf("scenario 8: role %s, %s", u.auth, plural(clients, "client"))
			from := len(l.rep.Connect)
			rounds, conns := stormShape(l.cfg.scramConns, clients, l.cfg.rounds)
			if err := l.storm(ctx, 8, noCounter{}, peers, noTickets(len(peers)), clients, conns, rounds); err != nil {
				return err
			}
			for i := from; i < len(l.rep.Connect); i++ {
				l.rep.Connect[i].User = u.auth
			}
		}
	}
	return l.scramHerd(ctx, b.ScramDSN("connect_timeout=20"))
}

// scramHerd is scenario 8's cold herd: l.cfg.herd first connections of the SCRAM role released
// at once through pgbouncer, by pgbench -C, by one new pgx pool and by one new pgconnector
// Connector, whose pgconnector.scram.derivations counter says how many PBKDF2 derivations it ran.
func (l *lab) scramHerd(ctx context.Context, dsn string) error {
	peers := []peer{
		{Name: peerLibpqDefault, Family: "libpq", Kind: kindPgbench, DSN: dsn},
		{Name: peerPgxDefault, Family: "pgx", Kind: kindPgx, DSN: dsn},
		{Name: peerPcHerd, Family: "pgconnector", Kind: kindPgconnector, DSN: dsn},
	}
	env := l.r.envWith(l.noTicket)
	for _, p := range peers {
		var (
			o           outcome
			derivations *int64
			err         error
		)
		if p.Kind == kindPgbench {
			o, err = l.r.pgbenchRun(ctx, p, env, l.cfg.herd, l.cfg.herd, func() {})
		} else {
			var res clientResult
			res, err = l.r.child(ctx, env, clientSpec{Kind: p.Kind, Peer: p.Name, DSN: p.DSN, Workload: workHerd,
				Clients: l.cfg.herd, Metrics: p.Family == "pgconnector"}, func() {})
			o, derivations = fromChild(res), res.Derivations
		}
		if err != nil {
			return fmt.Errorf("scenario 8 cold herd, %s: %w", p.Name, err)
		}
		h := ScramHerdResult{
			Peer: p.Name, Family: p.Family, Clients: o.logical, Errors: o.errors, Error: o.firstErr,
			Seconds: o.seconds, CPU: o.cpu, Derivations: derivations,
		}
		log.Printf("scenario 8 cold herd: %-36s %d connections, %d errors, %.2fs, client CPU %s, SCRAM derivations %s",
			p.Name, h.Clients, h.Errors, h.Seconds, h.CPU.Round(100_000), derivationsText(h.Derivations))
		l.rep.ScramHerd = append(l.rep.ScramHerd, h)
	}
	return nil
}

// derivationsText is a count of SCRAM derivations, or "n/a" when it was not measured.
func derivationsText(d *int64) string {
	if d == nil {
		return "n/a"
	}
	return fmt.Sprint(*d)
}

// scramTLS is scenario 9: a server that wants scram-sha-256 over TCP and has TLS, reached with
// sslmode=require and with sslmode=verify-full (the harness's CA as sslrootcert), one storm per
// client count (-tls-clients) in at most tlsRounds rounds.
func (l *lab) scramTLS(ctx context.Context) error {
	pg, err := startServer(ctx, "scenario 9 server (TLS, scram-sha-256)", harness.Options{TLS: true, Auth: "scram-sha-256"})
	if err != nil {
		return err
	}
	defer stopServer(pg)
	dsn := appDSN(pg, pg.Host, pg.Port)
	require := dsn + " sslmode=require"
	verify := dsn + " sslmode=verify-full sslrootcert=" + pg.CAFile
	peers := []peer{
		{Name: peerLibpqRequire, Family: "libpq", Kind: kindPgbench, DSN: require},
		{Name: peerLibpqVerify, Family: "libpq", Kind: kindPgbench, DSN: verify},
		{Name: peerPgxRequire, Family: "pgx", Kind: kindPgx, DSN: require, Warm: true, WarmConns: tlsWarmConns},
		{Name: peerPgxVerify, Family: "pgx", Kind: kindPgx, DSN: verify, Warm: true, WarmConns: tlsWarmConns},
		{Name: peerPcRequire, Family: "pgconnector", Kind: kindPgconnector, DSN: require, Warm: true, WarmConns: tlsWarmConns},
		{Name: peerPcVerify, Family: "pgconnector", Kind: kindPgconnector, DSN: verify, Warm: true, WarmConns: tlsWarmConns},
	}
	for _, clients := range l.cfg.tlsClients {
		rounds, conns := stormShape(l.cfg.tlsConns, clients, min(l.cfg.rounds, tlsRounds))
		if err := l.storm(ctx, 9, pgCounter{pg}, peers, noTickets(len(peers)), clients, conns, rounds); err != nil {
			return err
		}
	}
	return nil
}
