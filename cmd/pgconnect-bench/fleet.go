package main

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"errors"
	"fmt"
	"log"
	"math"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/stdlib"

	"github.com/pgconnector/pgconnector"
	"github.com/pgconnector/pgconnector/internal/harness"
)

// Parts of scenario 12 (FleetResult.Part).
const (
	fleetDead     = "dead first host"
	fleetStandby  = "standby first"
	fleetFailover = "failover"
	fleetResolver = "slow resolver"
)

// Go peer kinds of scenario 12's slow resolver: the host written as fleetHostName, resolved by
// fleetLookup with fleetSlowLookup per answer, or at once.
const (
	kindPgconnectorSlowDNS = "pgconnector-slowdns"
	kindPgconnectorDNS     = "pgconnector-dns"
	kindPgxSlowDNS         = "pgx-slowdns"
)

// workFailover is scenario 12's failover loop: new connections one after the other for
// clientSpec.For, each running `show transaction_read_only` (clientResult.Events).
const workFailover = "failover"

const (
	fleetHostName   = "db.bench.test"
	fleetSlowLookup = 50 * time.Millisecond
	// fleetDeadTimeout is the connect_timeout of the dead-first-host part, fleetFailoverTimeout
	// the failover's.
	fleetDeadTimeout     = 2
	fleetFailoverTimeout = 5
	// fleetFailoverCap bounds a failover loop that is never told to end.
	fleetFailoverCap = 2 * time.Minute
)

// fleetLookups counts the answers of fleetLookup in a client process.
var fleetLookups atomic.Int64

// fleetLookup resolves fleetHostName to 127.0.0.1 after delay, as a slow resolver would.
func fleetLookup(delay time.Duration) func(ctx context.Context, host string) ([]string, error) {
	return func(ctx context.Context, host string) ([]string, error) {
		fleetLookups.Add(1)
		if delay > 0 {
			select {
			case <-time.After(delay):
			case <-ctx.Done():
				return nil, ctx.Err()
			}
		}
		if host != fleetHostName {
			return nil, &net.DNSError{Err: "no such host", Name: host, IsNotFound: true}
		}
		return []string{"127.0.0.1"}, nil
	}
}

// fleetConnector is connectorFor for scenario 12's resolver kinds; ok is false for another kind.
func fleetConnector(kind, dsn string) (c driver.Connector, ok bool, err error) {
	switch kind {
	case kindPgconnectorSlowDNS, kindPgconnectorDNS:
		delay := fleetSlowLookup
		if kind == kindPgconnectorDNS {
			delay = 0
		}
		c, err := pgconnector.New(dsn, pgconnector.WithLookupFunc(fleetLookup(delay)))
		return c, true, err
	case kindPgxSlowDNS:
		cfg, err := pgx.ParseConfig(dsn)
		if err != nil {
			return nil, true, err
		}
		cfg.LookupFunc = fleetLookup(fleetSlowLookup)
		return stdlib.GetConnector(*cfg), true, nil
	}
	return nil, false, nil
}

// fleetEvent is one connection of the failover loop.
type fleetEvent struct {
	At       int64  `json:"at_unix_ns"` // when the connect and its query ended
	OK       bool   `json:"ok"`
	ReadOnly bool   `json:"read_only"` // transaction_read_only was on
	Error    string `json:"error,omitempty"`
}

// failoverLoop opens connections one after the other on db until the file stop exists or d has
// passed, each running `show transaction_read_only`, 10 ms apart.
func failoverLoop(db *sql.DB, stop string, d time.Duration) clientResult {
	var res clientResult
	start := time.Now()
	for time.Since(start) < d {
		if _, err := os.Stat(stop); err == nil {
			break
		}
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		ev := fleetEvent{}
		c, err := db.Conn(ctx)
		if err == nil {
			var ro string
			err = c.QueryRowContext(ctx, "show transaction_read_only").Scan(&ro)
			ev.ReadOnly = ro == "on"
			c.Close()
		}
		cancel()
		ev.At = time.Now().UnixNano()
		ev.OK = err == nil
		res.Conns++
		if err != nil {
			res.Errors++
			ev.Error = describeError(err)
			if res.Error == "" {
				res.Error = ev.Error
			}
		}
		res.Events = append(res.Events, ev)
		time.Sleep(10 * time.Millisecond)
	}
	res.Seconds = time.Since(start).Seconds()
	return res
}

// prepareFailover connects once (the connector learns the hosts' roles) and returns the loop.
func prepareFailover(spec clientSpec) (func() clientResult, error) {
	c, err := connectorFor(spec.Kind, spec.DSN)
	if err != nil {
		return nil, err
	}
	db := sql.OpenDB(c)
	db.SetMaxIdleConns(0)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := db.PingContext(ctx); err != nil {
		return nil, fmt.Errorf("warm-up connection: %w", err)
	}
	return func() clientResult {
		defer db.Close()
		return failoverLoop(db, spec.File, spec.For)
	}, nil
}

// fleetCounts are scenario 12's connections per peer: Go peers and pgbench where a connect is
// cheap, and the peers that pay connect_timeout on every connect.
// failover is how long the failover loop runs before the primary's stop, and after the
// promotion.
func fleetCounts(quick bool) (conns, slow int, failover time.Duration) {
	if quick {
		return 10, 3, 2 * time.Second
	}
	return 60, 5, 3 * time.Second
}

// fleet is scenario 12: a dead first host, a standby first, a failover and a slow resolver.
func (l *lab) fleet(ctx context.Context) error {
	conns, slow, loop := fleetCounts(l.cfg.quick)
	env := l.r.envWith(l.noTicket)

	// A dead first host: a SYN sink, then a real server.
	pg, err := startServer(ctx, "scenario 12 server", harness.Options{})
	if err != nil {
		return err
	}
	defer stopServer(pg)
	sink, err := harness.NewSYNSink("127.0.0.1")
	if err != nil {
		return err
	}
	defer sink.Close()
	_, sinkPort, err := net.SplitHostPort(sink.Addr())
	if err != nil {
		return err
	}
	host, port := hostPort(pg)
	creds := fmt.Sprintf("user=%s password=%s dbname=%s", pg.User, pg.Password, pg.Database)
	dead := fmt.Sprintf("host=127.0.0.1,%s port=%s,%d %s connect_timeout=%d", host, sinkPort, port, creds, fleetDeadTimeout)
	healthy := fmt.Sprintf("host=%s port=%d %s connect_timeout=%d", host, port, creds, fleetDeadTimeout)
	log.Printf("scenario 12: %s (%s first)", fleetDead, sink.Addr())
	rounds := fleetRounds(l.cfg.quick)
	l.rep.FleetRounds = rounds
	if err := l.fleetTurns(ctx, env, fleetDead, []peer{
		{Name: "pgconnector, first host dead", Family: "pgconnector", Kind: kindPgconnector, DSN: dead, Warm: true},
		{Name: "pgconnector, healthy host alone", Family: "pgconnector", Kind: kindPgconnector, DSN: healthy, Warm: true},
	}, conns, rounds); err != nil {
		return err
	}
	for _, p := range []peer{
		{Name: "pgx, first host dead", Family: "pgx", Kind: kindPgx, DSN: dead},
		{Name: "libpq (pgbench -C), first host dead", Family: "libpq", Kind: kindPgbench, DSN: dead},
	} {
		o, err := l.r.connectRun(ctx, p, l.noTicket, 1, slow, func() {})
		if err != nil {
			return fmt.Errorf("scenario 12, %s: %w", p.Name, err)
		}
		l.addFleet(FleetResult{Part: fleetDead, Peer: p.Name, Family: p.Family, Conns: o.conns, Errors: o.errors, Error: o.firstErr,
			P50: percentile(o.latencies, 0.5), Seconds: o.seconds, Processes: 1})
	}
	sink.Close()

	// The slow resolver, against the same server.
	log.Printf("scenario 12: %s (%d ms per answer)", fleetResolver, fleetSlowLookup.Milliseconds())
	named := fmt.Sprintf("host=%s port=%d %s connect_timeout=%d", fleetHostName, port, creds, fleetFailoverTimeout)
	if err := l.fleetTurns(ctx, env, fleetResolver, []peer{
		{Name: "pgconnector, resolver 50 ms", Family: "pgconnector", Kind: kindPgconnectorSlowDNS, DSN: named, Warm: true},
		{Name: "pgconnector, instant resolver", Family: "pgconnector", Kind: kindPgconnectorDNS, DSN: named, Warm: true},
		{Name: "pgx, resolver 50 ms", Family: "pgx", Kind: kindPgxSlowDNS, DSN: named, Warm: true},
	}, conns, rounds); err != nil {
		return err
	}
	stopServer(pg)

	// A standby first, then the failover of the same pair; a second pair for pgx's failover.
	primary, standby, err := startPair(ctx)
	if err != nil {
		return err
	}
	tsa := func(first, second *harness.Postgres, timeout int) string {
		h1, p1 := hostPort(first)
		h2, p2 := hostPort(second)
		return fmt.Sprintf("host=%s,%s port=%d,%d %s target_session_attrs=read-write connect_timeout=%d", h1, h2, p1, p2, creds, timeout)
	}
	log.Printf("scenario 12: %s", fleetStandby)
	for _, p := range []peer{
		{Name: "pgconnector", Family: "pgconnector", Kind: kindPgconnector, DSN: tsa(standby, primary, fleetFailoverTimeout), Warm: true},
		{Name: "pgx", Family: "pgx", Kind: kindPgx, DSN: tsa(standby, primary, fleetFailoverTimeout), Warm: true},
		{Name: "libpq (pgbench -C)", Family: "libpq", Kind: kindPgbench, DSN: tsa(standby, primary, fleetFailoverTimeout)},
	} {
		m1, m2 := primary.LogMark(), standby.LogMark()
		o, err := l.r.connectRun(ctx, p, l.noTicket, 1, conns, func() { m1, m2 = primary.LogMark(), standby.LogMark() })
		if err != nil {
			stopServer(standby)
			stopServer(primary)
			return fmt.Errorf("scenario 12, %s: %w", p.Name, err)
		}
		n1, err1 := primary.ConnectionsSince(m1)
		n2, err2 := standby.ConnectionsSince(m2)
		if err := errors.Join(err1, err2); err != nil {
			stopServer(standby)
			stopServer(primary)
			return err
		}
		r := FleetResult{Part: fleetStandby, Peer: p.Name, Family: p.Family, Conns: o.conns, Errors: o.errors, Error: o.firstErr,
			P50: percentile(o.latencies, 0.5)}
		if o.logical > 0 {
			r.Backends = float64(n1+n2) / float64(o.logical)
		}
		l.addFleet(r)
	}
	for i, p := range []peer{
		{Name: "pgconnector", Family: "pgconnector", Kind: kindPgconnector},
		{Name: "pgx", Family: "pgx", Kind: kindPgx},
	} {
		if i > 0 {
			if primary, standby, err = startPair(ctx); err != nil {
				return err
			}
		}
		r, err := l.failover(ctx, env, p, primary, standby, tsa(primary, standby, fleetFailoverTimeout), loop)
		stopServer(standby)
		stopServer(primary)
		if err != nil {
			return fmt.Errorf("scenario 12, failover, %s: %w", p.Name, err)
		}
		l.addFleet(r)
	}
	return nil
}

// fleetRounds is how many rounds the peers of a part that pgconnector is compared with itself
// in take turns in, each round a client process of its own.
func fleetRounds(quick bool) int {
	if quick {
		return 1
	}
	return 3
}

// fleetTurns runs the Go peers of one part in rounds, taking turns as the other scenarios' storms
// do, one client and conns/rounds measured connects per peer and round, each after the
// process's unmeasured warm-up connect, and adds a row per peer.
func (l *lab) fleetTurns(ctx context.Context, env []string, part string, peers []peer, conns, rounds int) error {
	rows := make([]FleetResult, len(peers))
	lat := make([][]time.Duration, len(peers))
	for i, p := range peers {
		rows[i] = FleetResult{Part: part, Peer: p.Name, Family: p.Family}
	}
	for round := range rounds {
		for j := range peers {
			i := (j + round) % len(peers)
			p := peers[i]
			spec := clientSpec{Kind: p.Kind, Peer: p.Name, DSN: p.DSN, Workload: workConnect, Clients: 1, Conns: max(2, conns/rounds), Warm: p.Warm}
			res, err := l.r.child(ctx, env, spec, func() {})
			if err != nil {
				return fmt.Errorf("scenario 12, %s, %s: %w", part, p.Name, err)
			}
			r := &rows[i]
			r.Conns += res.Conns
			r.Errors += res.Errors
			if r.Error == "" {
				r.Error = res.Error
			}
			r.Seconds += res.Seconds
			r.Lookups += res.Lookups
			r.Processes++
			for _, d := range res.Latencies {
				lat[i] = append(lat[i], time.Duration(d))
			}
		}
	}
	for i := range rows {
		rows[i].P50 = percentile(lat[i], 0.5)
		l.addFleet(rows[i])
	}
	return nil
}

func (l *lab) addFleet(r FleetResult) {
	l.rep.Fleet = append(l.rep.Fleet, r)
	log.Printf("scenario 12, %s: %-40s %s", r.Part, r.Peer, fleetFigures(r))
}

// hostPort is pg's TCP address as host and port.
func hostPort(pg *harness.Postgres) (string, int) {
	h, p, _ := net.SplitHostPort(pg.Addr())
	n, _ := strconv.Atoi(p)
	return h, n
}

// startPair starts a primary (trust) and its hot standby.
func startPair(ctx context.Context) (primary, standby *harness.Postgres, err error) {
	if primary, err = startServer(ctx, "scenario 12 primary", harness.Options{}); err != nil {
		return nil, nil, err
	}
	if standby, err = primary.StartStandby(ctx); err != nil {
		stopServer(primary)
		return nil, nil, fmt.Errorf("scenario 12 standby: %w", err)
	}
	log.Printf("scenario 12 standby: on %s", standby.Addr())
	return primary, standby, nil
}

// failover runs peer p's failover loop against primary and standby: after d the primary is
// stopped and the standby promoted, and d after the promotion the loop is told to end (at the
// latest after fleetFailoverCap).
func (l *lab) failover(ctx context.Context, env []string, p peer, primary, standby *harness.Postgres, dsn string, d time.Duration) (FleetResult, error) {
	log.Printf("scenario 12: %s, %s", fleetFailover, p.Name)
	type times struct {
		stopping, stopped, promoted time.Time
		err                         error
	}
	done := make(chan times, 1)
	stop := filepath.Join(l.r.tmp, "failover-"+p.Kind+".stop")
	mark := func() {
		go func() {
			time.Sleep(d)
			var t times
			t.stopping = time.Now()
			if err := primary.Stop(); err != nil {
				t.err = err
			}
			t.stopped = time.Now()
			if err := standby.Promote(ctx); err != nil && t.err == nil {
				t.err = err
			}
			t.promoted = time.Now()
			time.Sleep(d)
			if err := os.WriteFile(stop, nil, 0o644); err != nil && t.err == nil {
				t.err = err
			}
			done <- t
		}()
	}
	spec := clientSpec{Kind: p.Kind, Peer: p.Name, DSN: dsn, Workload: workFailover, Clients: 1, File: stop, For: fleetFailoverCap}
	res, err := l.r.child(ctx, env, spec, mark)
	t := <-done
	if err == nil {
		err = t.err
	}
	if err != nil {
		return FleetResult{}, err
	}
	r := failoverResult(res.Events, t.stopping, t.stopped, t.promoted)
	r.Part, r.Peer, r.Family, r.Error = fleetFailover, p.Name, p.Family, res.Error
	return r, nil
}

// failoverResult reads a failover loop's connections: the first that succeeded after the
// primary's stop returned (the old primary gone, a success is the promoted standby's), its end
// after the promotion's (0 when before), the connections that failed from the stop's start to
// it, and those that reached a read-only session.
func failoverResult(events []fleetEvent, stopping, stopped, promoted time.Time) FleetResult {
	r := FleetResult{Conns: len(events), Outage: promoted.Sub(stopping)}
	for _, e := range events {
		at := time.Unix(0, e.At)
		if !e.OK {
			r.Errors++
		}
		if e.OK && e.ReadOnly {
			r.WrongRole++
		}
		switch {
		case r.Recovered || at.Before(stopping):
		case e.OK && !at.Before(stopped):
			r.Recovered = true
			r.FirstSuccess = max(0, at.Sub(promoted))
		case !e.OK:
			r.FailedMeanwhile++
		}
	}
	return r
}

// fleetFigures is a row's figures for the log.
func fleetFigures(r FleetResult) string {
	s := fmt.Sprintf("%d connects, %d failed", r.Conns, r.Errors)
	switch r.Part {
	case fleetDead:
		s += ", p50 " + latency(r.P50)
	case fleetStandby:
		s += fmt.Sprintf(", %.2f backends per connect, p50 %s", r.Backends, latency(r.P50))
	case fleetResolver:
		s += fmt.Sprintf(", %s, p50 %s", plural(int(r.Lookups), "lookup"), latency(r.P50))
	case fleetFailover:
		s += fmt.Sprintf(", first success %s after the promotion, %d failed meanwhile, %d read-only", firstSuccessText(r), r.FailedMeanwhile, r.WrongRole)
	}
	if r.Error != "" {
		s += ": " + r.Error
	}
	return s
}

func firstSuccessText(r FleetResult) string {
	if !r.Recovered {
		return "never"
	}
	return latency(r.FirstSuccess)
}

// processes is "1 process", "3 processes".
func processes(n int) string {
	if n <= 1 {
		return "1 process"
	}
	return fmt.Sprintf("%d processes", n)
}

// fleetRow finds a row of scenario 12.
func fleetRow(rows []FleetResult, part, peer string) *FleetResult {
	for i, r := range rows {
		if r.Part == part && r.Peer == peer {
			return &rows[i]
		}
	}
	return nil
}

// lookupsAllowed is one lookup per host name for each 15 s (pgconnector.DefaultDNSCacheTTL) of
// r's measured seconds, and one more per client process (its warm-up's).
func lookupsAllowed(r FleetResult) int64 {
	return int64(max(r.Processes, 1)) + int64(math.Floor(r.Seconds/pgconnector.DefaultDNSCacheTTL.Seconds()))
}

// fleetTargets are scenario 12's targets (issue 31).
func fleetTargets(r *Report) []Target {
	var ts []Target
	rows := r.Fleet
	if d, h := fleetRow(rows, fleetDead, "pgconnector, first host dead"), fleetRow(rows, fleetDead, "pgconnector, healthy host alone"); d != nil && h != nil && d.Errors == 0 && h.Errors == 0 && h.P50 > 0 {
		x := float64(d.P50) / float64(h.P50)
		ts = append(ts, Target{Name: "Fleet, dead first host: pgconnector's connect p50 after the first / a healthy host's", Want: "≤ 1.20x",
			Got: fmt.Sprintf("%s / %s = %s", latency(d.P50), latency(h.P50), ratioText(x, 1.2)), Met: x <= 1.2})
	}
	if s := fleetRow(rows, fleetStandby, "pgconnector"); s != nil && s.Errors == 0 {
		ts = append(ts, Target{Name: "Fleet, standby first (target_session_attrs=read-write): pgconnector's backends per connect", Want: "≤ 1.05",
			Got: fmt.Sprintf("%.2f", s.Backends), Met: s.Backends <= 1.05})
	}
	if f := fleetRow(rows, fleetFailover, "pgconnector"); f != nil {
		ts = append(ts, Target{Name: "Fleet, failover: pgconnector's first connect after the promotion, and read-only sessions",
			Want: fmt.Sprintf("≤ 1 s (connect_timeout %d s), 0 read-only", fleetFailoverTimeout),
			Got:  fmt.Sprintf("%s, %d read-only", firstSuccessText(*f), f.WrongRole),
			Met:  f.Recovered && f.FirstSuccess <= time.Second && f.WrongRole == 0})
	}
	if s, i := fleetRow(rows, fleetResolver, "pgconnector, resolver 50 ms"), fleetRow(rows, fleetResolver, "pgconnector, instant resolver"); s != nil && i != nil && s.Errors == 0 && i.Errors == 0 && i.P50 > 0 {
		x := float64(s.P50) / float64(i.P50)
		allowed := lookupsAllowed(*s)
		ts = append(ts, Target{Name: "Fleet, slow resolver (50 ms): pgconnector's lookups, and connect p50 / an instant resolver's",
			Want: fmt.Sprintf("≤ 1 lookup per name per 15 s and process (%d here), ≤ 1.10x", allowed),
			Got: fmt.Sprintf("%s for %d connects in %s, %s", plural(int(s.Lookups), "lookup"), s.Conns+max(s.Processes, 1),
				processes(s.Processes), ratioText(x, 1.1)),
			Met: s.Lookups <= allowed && x <= 1.1})
	}
	return ts
}

// mergeFleet replaces rep's scenario 12 with the one of the report at path, a run of that
// scenario alone, and records when it ran (Report.FleetMeasured); the targets are checked again.
func mergeFleet(rep *Report, path string) error {
	other, err := readReport(path)
	if err != nil {
		return err
	}
	if len(other.Fleet) == 0 {
		return errors.New("-merge-fleet: " + path + " has no scenario 12")
	}
	rep.Fleet, rep.FleetRounds = other.Fleet, other.FleetRounds
	rep.FleetMeasured = other.Started
	rep.Targets = checkTargets(rep)
	return nil
}

// writeFleet writes the section of scenario 12.
func writeFleet(b *strings.Builder, r *Report) {
	if len(r.Fleet) == 0 {
		return
	}
	fmt.Fprintf(b, "## Scenario 12: %s\n\n", scenarioTitles[12])
	fmt.Fprintf(b, "What the connector remembers about a fleet of hosts, against libpq and pgx, which remember "+
		"nothing between connects. One client per peer, a new connection per connect (database/sql with no idle "+
		"connections; pgbench -C for libpq), PostgreSQL with `trust`. *Dead first host*: `host=A,B "+
		"connect_timeout=%d`, A a loopback listener whose SYNs are dropped (a host down behind a firewall), B "+
		"the server; the latency is that of the connects after the first (the Go peers' first is unmeasured, "+
		"pgbench's own first pays the timeout too), beside pgconnector with B alone. In this part and the slow "+
		"resolver's, the Go peers that do not wait for a timeout take turns in %s, a client process each, "+
		"whose latencies are pooled. *Standby first*: "+
		"`host=STANDBY,PRIMARY target_session_attrs=read-write`; backends per connect are the `connection "+
		"received` lines of both servers over logical connections (pgbench's own first counted). *Failover*: "+
		"`host=PRIMARY,STANDBY target_session_attrs=read-write connect_timeout=%d`, one client connecting in a "+
		"loop (10 ms apart, each connection running `show transaction_read_only`) after one unmeasured "+
		"connect; after a few seconds the primary is stopped (`pg_ctl stop -m immediate`, its files removed) "+
		"and the standby promoted, and the loop goes on for as long after the promotion; the figures are the first successful connect after the old primary stopped (so on the "+
		"promoted standby), timed from the end of the harness's `Promote` (`pg_ctl promote`, then "+
		"`pg_is_in_recovery()` polled until false; 0 when the connect came before that end), the connects that "+
		"failed from the stop's start to it (the stop to the promotion's end is in its column: the harness's stop "+
		"removes the server's files too), and the sessions that were read-only; libpq is left out of this "+
		"part. *Slow resolver*: the host written as `%s`, resolved to 127.0.0.1 by a lookup function that "+
		"answers after %d ms (`WithLookupFunc`; pgx's `LookupFunc` in its configuration), beside the same with "+
		"an instant answer; lookups are counted in each client process, its unmeasured first connect included. "+
		"No peer sets sslmode, and these servers have no TLS: pgx's default prefer makes two attempts per "+
		"host, one refused TLS and one in plaintext, each a backend of its own and each with its own lookup, "+
		"which its figures include (libpq asks for TLS and goes on in plaintext on the same connection).",
		fleetDeadTimeout, plural(max(r.FleetRounds, 1), "round"), fleetFailoverTimeout, fleetHostName, fleetSlowLookup.Milliseconds())
	if !r.FleetMeasured.IsZero() {
		fmt.Fprintf(b, " Measured %s UTC in a run of this scenario alone, on the same machine; the other "+
			"scenarios come from the run this report starts with.", r.FleetMeasured.UTC().Format("2006-01-02 15:04"))
	}
	b.WriteString("\n\n")
	t := table{
		head:  []string{"Part", "Peer", "Connects", "p50", "Backends/connect", "Lookups", "Stop to promotion", "First success after promotion", "Failed meanwhile", "Read-only sessions", "Failed"},
		right: []bool{false, false, true, true, true, true, true, true, true, true, false},
	}
	for _, f := range r.Fleet {
		p50, backends, lookups, outage, first, meanwhile, ro := dash, dash, dash, dash, dash, dash, dash
		if f.P50 > 0 {
			p50 = latency(f.P50)
		}
		switch f.Part {
		case fleetStandby:
			backends = fmt.Sprintf("%.2f", f.Backends)
		case fleetResolver:
			lookups = strconv.FormatInt(f.Lookups, 10)
		case fleetFailover:
			outage = latency(f.Outage)
			first, meanwhile, ro = firstSuccessText(f), strconv.Itoa(f.FailedMeanwhile), strconv.Itoa(f.WrongRole)
		}
		failed := errorsCell(f.Errors, f.Conns, f.Error)
		if f.Part == fleetFailover && f.Errors > 0 {
			failed = strconv.Itoa(f.Errors) // the standby's refusals while it is in recovery are expected
		}
		t.add(f.Part, cell(f.Peer), strconv.Itoa(f.Conns), p50, backends, lookups, outage, first, meanwhile, ro, failed)
	}
	t.write(b)
}
