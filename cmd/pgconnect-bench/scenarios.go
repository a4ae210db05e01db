package main

import (
	"context"
	"fmt"
	"log"
	"path/filepath"
	"strconv"
	"time"

	"github.com/pgconnector/pgconnector/internal/harness"
)

// lab is what every scenario shares: the KDC, alice's ticket, and the
// runner of client processes.
type lab struct {
	cfg      config
	r        *runner
	kdc      *harness.KDC
	ticket   []string // client environment with alice's ticket (KDC.Env)
	noTicket []string // client environment without credentials
	rep      *Report
}

func newLab(ctx context.Context, cfg config, r *runner, rep *Report) (*lab, error) {
	kdc, err := harness.StartKDC(ctx, harness.KDCOptions{})
	if err != nil {
		return nil, err
	}
	if _, err := kdc.AddPrincipal("alice"); err != nil {
		kdc.Stop()
		return nil, err
	}
	ccache := filepath.Join(r.tmp, "alice.ccache")
	if err := kdc.Kinit(ccache, "alice", 0); err != nil {
		kdc.Stop()
		return nil, err
	}
	return &lab{cfg: cfg, r: r, kdc: kdc, ticket: kdc.Env(ccache), noTicket: kdc.Env(""), rep: rep}, nil
}

func (l *lab) close() {
	if err := l.kdc.Stop(); err != nil {
		log.Printf("stopping the KDC: %v", err)
	}
}

// counter counts what a server saw during one run: backends (forks of a
// real server) or TCP connections (the fake server).
type counter interface {
	begin() (end func() (backends, tcp int, err error))
}

type pgCounter struct{ pg *harness.Postgres }

func (c pgCounter) begin() func() (int, int, error) {
	mark := c.pg.LogMark()
	return func() (int, int, error) {
		n, err := c.pg.ConnectionsSince(mark)
		return n, 0, err
	}
}

type fakeCounter struct{ fs *harness.FakeServer }

func (c fakeCounter) begin() func() (int, int, error) {
	before := c.fs.Stats()
	return func() (int, int, error) {
		return 0, int(c.fs.Stats().Connections - before.Connections), nil
	}
}

// stormPeers are the peers of the connection storms against a real server
// (scenarios 1-4), given the scenario's connection string.
func stormPeers(dsn string, libpqDefaultSSL bool) []peer {
	ps := []peer{
		{Name: "libpq default (pgbench -C)", Family: "libpq", Kind: kindPgbench, DSN: dsn},
		{Name: "libpq gssencmode=disable sslmode=disable", Family: "libpq", Kind: kindPgbench, DSN: dsn + " gssencmode=disable sslmode=disable"},
		{Name: "pgx default", Family: "pgx", Kind: kindPgx, DSN: dsn, Warm: true},
		{Name: "pgx sslmode=disable", Family: "pgx", Kind: kindPgx, DSN: dsn + " sslmode=disable", Warm: true},
		{Name: "lib/pq sslmode=prefer", Family: "lib/pq", Kind: kindPq, DSN: dsn + " sslmode=prefer", Warm: true},
	}
	if libpqDefaultSSL {
		// lib/pq's own default is sslmode=require, not libpq's prefer.
		ps = append(ps, peer{Name: "lib/pq default (sslmode=require)", Family: "lib/pq", Kind: kindPq, DSN: dsn})
	}
	return append(ps,
		peer{Name: peerPcExplicit, Family: "pgconnector", Kind: kindPgconnector, DSN: dsn + " gssencmode=disable sslmode=disable", Warm: true},
		peer{Name: "pgconnector cold", Family: "pgconnector", Kind: kindPgconnectorCold, DSN: dsn},
		peer{Name: "pgconnector warm", Family: "pgconnector", Kind: kindPgconnector, DSN: dsn, Warm: true},
	)
}

// Peer names the targets refer to.
const (
	peerLibpqDefault  = "libpq default (pgbench -C)"
	peerLibpqExplicit = "libpq gssencmode=disable sslmode=disable"
	peerPgxDefault    = "pgx default"
	peerPgxExplicit   = "pgx sslmode=disable"
	peerPcExplicit    = "pgconnector gssencmode=disable sslmode=disable"
	peerPcBare        = "pgconnector gssencmode=disable sslmode=disable, statement spans off"
	peerWarm          = "pgconnector warm"
	peerDefault       = "pgconnector default"
	peerNoGSS         = "pgconnector gssencmode=disable"
)

// storm runs every peer against one server, rounds times each (at least once), in turns
// (peer 1, peer 2, ..., then peer 2, peer 3, ..., peer 1) so that a slow
// patch of a noisy machine is shared, and records one ConnectResult per
// peer.
func (l *lab) storm(ctx context.Context, scenario int, c counter, peers []peer, tickets []bool, clients, conns, rounds int) error {
	type acc struct {
		outcome
		backends, tcp int
		rounds        []float64 // connections/s of each round
	}
	accs := make([]acc, len(peers))
	rounds = max(1, rounds)
	// Every client makes the same number of connections (pgbench -t).
	perRound := max(1, conns/rounds/clients) * clients
	for round := range rounds {
		// Each round starts one peer further on, so that no peer always follows the same one
		// (a peer leaves thousands of sockets in TIME_WAIT, a pgbench its log files).
		for j := range peers {
			i := (j + round) % len(peers)
			p := peers[i]
			env := l.noTicket
			if tickets[i] {
				env = l.ticket
			}
			var end func() (int, int, error)
			o, err := l.r.connectRun(ctx, p, env, clients, perRound, func() { end = c.begin() })
			if err != nil {
				return fmt.Errorf("scenario %d, %s: %w", scenario, p.Name, err)
			}
			backends, tcp, err := end()
			if err != nil {
				return err
			}
			accs[i].add(o)
			if o.seconds > 0 {
				accs[i].rounds = append(accs[i].rounds, float64(o.conns-o.errors)/o.seconds)
			} else {
				accs[i].rounds = append(accs[i].rounds, 0)
			}
			accs[i].backends += backends
			accs[i].tcp += tcp
			name := p.Name
			if tickets[i] && scenario == 5 {
				name += ", ticket"
			}
			log.Printf("scenario %d round %d/%d, %s: %-50s %4d conns, %d errors, %.2fs",
				scenario, round+1, rounds, plural(clients, "client"), name, o.conns, o.errors, o.seconds)
		}
	}
	for i, p := range peers {
		a := accs[i]
		res := ConnectResult{
			Scenario: scenario, Peer: p.Name, Family: p.Family, Clients: clients, Ticket: tickets[i],
			Conns: a.conns, Errors: a.errors, Error: a.firstErr, Seconds: a.seconds, RoundRates: a.rounds,
			P50: percentile(a.latencies, 0.50), P99: percentile(a.latencies, 0.99),
		}
		if a.seconds > 0 {
			res.ConnsPerSec = float64(a.conns-a.errors) / a.seconds
		}
		if a.logical > 0 {
			res.Backends = float64(a.backends) / float64(a.logical)
			res.TCP = float64(a.tcp) / float64(a.logical)
			res.CPU = a.cpu / time.Duration(a.logical)
		}
		l.rep.Connect = append(l.rep.Connect, res)
	}
	return nil
}

func noTickets(n int) []bool { return make([]bool, n) }

func allTickets(n int) []bool {
	t := make([]bool, n)
	for i := range t {
		t[i] = true
	}
	return t
}

// startServer starts a throwaway cluster and logs what it is.
func startServer(ctx context.Context, name string, opts harness.Options) (*harness.Postgres, error) {
	pg, err := harness.Start(ctx, opts)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", name, err)
	}
	log.Printf("%s: PostgreSQL %d on %s", name, pg.Version, pg.Addr())
	return pg, nil
}

func stopServer(pg *harness.Postgres) {
	if err := pg.Stop(); err != nil {
		log.Printf("stopping a server: %v", err)
	}
}

func appDSN(pg *harness.Postgres, host string, port int) string {
	return fmt.Sprintf("host=%s port=%d user=%s password=%s dbname=%s connect_timeout=20",
		host, port, pg.User, pg.Password, pg.Database)
}

// realServerScenario runs scenario 1, 2 or 3 (a real server where the best
// transport is plaintext) when storm is set, and when herd is set the cold
// herd (scenario 6) against the servers of scenarios 1 and 2.
func (l *lab) realServerScenario(ctx context.Context, scenario int, storm, herd bool) error {
	var (
		opts    harness.Options
		tickets bool
		name    string
	)
	switch scenario {
	case 1:
		name = "scenario 1 server (TLS off, trust)"
	case 2:
		name, tickets = "scenario 2 server (GSS, no keytab, trust)", true
		opts.GSS = &harness.GSSOptions{KDC: l.kdc}
	case 3:
		name, tickets = "scenario 3 server (GSS keytab, hostnogssenc trust only)", true
		opts.GSS = &harness.GSSOptions{KDC: l.kdc, Keytab: true}
		opts.HBA = []string{"hostnogssenc all all 127.0.0.1/32 trust"}
	}
	pg, err := startServer(ctx, name, opts)
	if err != nil {
		return err
	}
	defer stopServer(pg)
	dsn := appDSN(pg, pg.Host, pg.Port)
	peers := stormPeers(dsn, scenario == 1)
	ts := noTickets(len(peers))
	if tickets {
		ts = allTickets(len(peers))
	}
	if storm {
		if err := l.storm(ctx, scenario, pgCounter{pg}, peers, ts, l.cfg.clients, l.cfg.conns, l.cfg.rounds); err != nil {
			return err
		}
	}
	if herd && (scenario == 1 || scenario == 2) {
		return l.herd(ctx, pg, name, tickets)
	}
	return nil
}

// herd is scenario 6 against pg: l.cfg.herd first connections released at
// once, through a proxy that counts SSLRequest and GSSENCRequest packets.
func (l *lab) herd(ctx context.Context, pg *harness.Postgres, server string, ticket bool) error {
	px, err := harness.NewProxy(pg.Addr())
	if err != nil {
		return err
	}
	defer px.Close()
	host, port := px.Addr()
	dsn := appDSN(pg, host, port)
	env := l.noTicket
	if ticket {
		env = l.ticket
	}
	peers := []peer{
		{Name: peerLibpqDefault, Family: "libpq", Kind: kindPgbench, DSN: dsn},
		{Name: peerPgxDefault, Family: "pgx", Kind: kindPgx, DSN: dsn},
		{Name: "pgconnector (one Connector, cold)", Family: "pgconnector", Kind: kindPgconnector, DSN: dsn},
	}
	for _, p := range peers {
		var (
			before harness.ProxyStats
			mark   int64
		)
		begin := func() { before, mark = px.Stats(), pg.LogMark() }
		var o outcome
		if p.Kind == kindPgbench {
			o, err = l.r.pgbenchRun(ctx, p, l.r.envWith(env), l.cfg.herd, l.cfg.herd, begin)
		} else {
			var res clientResult
			res, err = l.r.child(ctx, l.r.envWith(env),
				clientSpec{Kind: p.Kind, DSN: p.DSN, Workload: workHerd, Clients: l.cfg.herd}, begin)
			o = fromChild(res)
		}
		if err != nil {
			return fmt.Errorf("scenario 6, %s: %w", p.Name, err)
		}
		after := px.Stats()
		backends, err := pg.ConnectionsSince(mark)
		if err != nil {
			return err
		}
		h := HerdResult{
			Peer: p.Name, Family: p.Family, Server: server, Ticket: ticket, Clients: o.logical, Errors: o.errors,
			SSLRequests:    after.SSLRequests - before.SSLRequests,
			GSSENCRequests: after.GSSENCRequests - before.GSSENCRequests,
			TCP:            after.Connections - before.Connections,
			Backends:       backends,
		}
		log.Printf("scenario 6 (%s): %-36s %d connections: %d SSLRequests, %d GSSENCRequests, %d backends, %d errors",
			server, p.Name, h.Clients, h.SSLRequests, h.GSSENCRequests, h.Backends, h.Errors)
		l.rep.Herd = append(l.rep.Herd, h)
	}
	return nil
}

// clientBound is scenario 5: the fake server, 1, 8 and 64 clients (-fake-clients), with and
// without a ticket.
func (l *lab) clientBound(ctx context.Context) error {
	fs, err := harness.StartFakeServer()
	if err != nil {
		return err
	}
	defer fs.Close()
	host, port := fs.Addr()
	dsn := "host=" + host + " port=" + strconv.Itoa(port) + " user=bench dbname=bench connect_timeout=20"
	peers := []peer{
		{Name: peerLibpqDefault, Family: "libpq", Kind: kindPgbench, DSN: dsn},
		{Name: peerLibpqDefault, Family: "libpq", Kind: kindPgbench, DSN: dsn},
		{Name: peerLibpqExplicit, Family: "libpq", Kind: kindPgbench, DSN: dsn + " gssencmode=disable sslmode=disable"},
		{Name: peerPgxDefault, Family: "pgx", Kind: kindPgx, DSN: dsn, Warm: true},
		{Name: peerPgxExplicit, Family: "pgx", Kind: kindPgx, DSN: dsn + " sslmode=disable", Warm: true},
		{Name: "lib/pq sslmode=prefer", Family: "lib/pq", Kind: kindPq, DSN: dsn + " sslmode=prefer", Warm: true},
		// What the connector adds to pgx, layer by layer: the negotiation alone (statement
		// spans off, modes that leave nothing to decide), the statement tracing, the default
		// modes' credentials check.
		{Name: peerPcBare, Family: "pgconnector", Kind: kindPgconnectorNoStmt, DSN: dsn + " gssencmode=disable sslmode=disable", Warm: true},
		{Name: peerPcExplicit, Family: "pgconnector", Kind: kindPgconnector, DSN: dsn + " gssencmode=disable sslmode=disable", Warm: true},
		{Name: peerNoGSS, Family: "pgconnector", Kind: kindPgconnector, DSN: dsn + " gssencmode=disable", Warm: true},
		{Name: peerDefault, Family: "pgconnector", Kind: kindPgconnector, DSN: dsn, Warm: true},
		{Name: peerDefault, Family: "pgconnector", Kind: kindPgconnector, DSN: dsn, Warm: true},
	}
	tickets := []bool{false, true, false, false, false, false, false, false, false, false, true}
	for _, clients := range l.cfg.fakeClients {
		if err := l.storm(ctx, 5, fakeCounter{fs}, peers, tickets, clients, l.cfg.fakeConns, l.cfg.rounds); err != nil {
			return err
		}
	}
	return nil
}
