package negotiate

import (
	"context"
	"database/sql/driver"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/pgconnector/pgconnector"
	"github.com/pgconnector/pgconnector/internal/harness"
)

// A lab005 is a server set up as 005_negotiate_encryption.pl sets up its node, and how a row
// is run against it.
type lab005 struct {
	pg *harness.Postgres
	// logEvents: the events are read from the server's log as the script reads them
	// (trace_connection_negotiation, PostgreSQL 17+). Otherwise (PostgreSQL 15) they are the
	// proxy's (the requests and the server's answers) and the log's "connection authorized"
	// and "no pg_hba.conf entry" lines.
	logEvents bool
	// host is the host= of every string (hostaddr=127.0.0.1): the script's
	// enc-test-localhost.postgresql.example.com, or localhost where Kerberos needs the name of
	// the server's service principal (the harness's keytab has postgres/localhost).
	host string
	// negotiation: the strings give sslnegotiation (libpq 17+; libpq 15 does not know it).
	negotiation bool
	psqlEnv     []string             // psql's environment: libpq 18, Kerberos credentials
	opts        []pgconnector.Option // the connector's options: its Kerberos credentials
}

// A phase005 is what one connect of a row gave.
type phase005 struct {
	outcome string // plain, ssl, gss or fail
	err     string // why it failed
	events  string // "connect, sslaccept, authok", or "-"
	conns   int    // TCP connections opened
}

// A result005 is what a row gave: psql (libpq) once, the connector on a new Connector (cold)
// and again on the same one (warm).
type result005 struct {
	conninfo         string
	psql, cold, warm phase005
	err              error // the row could not be run (the proxy, the log)
}

// conninfo is the row's connection string, as the script's connect_test builds it, to the
// server through port.
func (l *lab005) conninfo(r row005, port int) string {
	s := fmt.Sprintf("dbname=postgres host=%s hostaddr=127.0.0.1 port=%d user=%s gssencmode=%s sslmode=%s",
		l.host, port, r.user, r.gssencmode, r.sslmode)
	if l.negotiation && r.sslnegotiation != "" {
		s += " sslnegotiation=" + r.sslnegotiation
	}
	return s
}

// run runs a row: psql, then the connector cold and warm, each through the row's own proxy,
// and reads their events from what the proxy and the server's log saw.
func (l *lab005) run(r row005) result005 {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	px, err := harness.NewNegotiationProxy(l.pg.Addr())
	if err != nil {
		return result005{err: err}
	}
	defer px.Close()
	res := result005{conninfo: l.conninfo(r, px.Port())}
	mark := l.pg.LogMark()
	var bounds []int // the number of the proxy's connections at the end of each phase
	endPhase := func() error {
		if err := px.WaitDone(ctx); err != nil {
			return err
		}
		bounds = append(bounds, len(px.Conns()))
		return nil
	}

	out, err := harness.Psql(ctx, l.psqlEnv, res.conninfo, "SELECT current_enc()")
	res.psql = outcomeOf(out, err)
	if err := endPhase(); err != nil {
		return result005{err: err}
	}

	c, err := pgconnector.New(res.conninfo, l.opts...)
	if err != nil {
		res.cold = phase005{outcome: "fail", err: "New: " + err.Error()}
		res.warm = res.cold
	} else {
		res.cold = connectorOutcome(ctx, c)
		if err := endPhase(); err != nil {
			c.Close()
			return result005{err: err}
		}
		res.warm = connectorOutcome(ctx, c)
		c.Close()
	}
	if err := endPhase(); err != nil {
		return result005{err: err}
	}
	for len(bounds) < 3 {
		bounds = append(bounds, bounds[len(bounds)-1])
	}

	backends := backendLines(l.pg.LogSince(mark))
	conns := px.Conns()
	phases := []*phase005{&res.psql, &res.cold, &res.warm}
	from := 0
	for i, p := range phases {
		p.conns = bounds[i] - from
		p.events, err = l.events(conns[from:bounds[i]], backends)
		if err != nil {
			return result005{conninfo: res.conninfo, err: err}
		}
		from = bounds[i]
	}
	return res
}

// outcomeOf is psql's outcome: what current_enc() printed, or fail.
func outcomeOf(out string, err error) phase005 {
	if err != nil {
		return phase005{outcome: "fail", err: err.Error()}
	}
	return phase005{outcome: strings.TrimSpace(out)}
}

// connectorOutcome opens a connection with c, runs current_enc() on it and closes it.
func connectorOutcome(ctx context.Context, c *pgconnector.Connector) phase005 {
	dc, err := c.Connect(ctx)
	if err != nil {
		return phase005{outcome: "fail", err: err.Error()}
	}
	defer dc.Close()
	q, ok := dc.(driver.QueryerContext)
	if !ok {
		return phase005{outcome: "query failed", err: fmt.Sprintf("%T is not a driver.QueryerContext", dc)}
	}
	rows, err := q.QueryContext(ctx, "SELECT current_enc()", nil)
	if err != nil {
		return phase005{outcome: "query failed", err: err.Error()}
	}
	defer rows.Close()
	dest := make([]driver.Value, 1)
	if err := rows.Next(dest); err != nil {
		return phase005{outcome: "query failed", err: err.Error()}
	}
	s, _ := dest[0].(string)
	return phase005{outcome: s}
}

// events condenses what happened on conns into the script's EVENTS.
func (l *lab005) events(conns []harness.ProxiedConn, backends map[int][]string) (string, error) {
	var ev []string
	for i, c := range conns {
		if i == 0 {
			ev = append(ev, "connect")
		} else {
			ev = append(ev, "reconnect")
		}
		lines, ok := backends[c.ServerPort]
		if !ok {
			return "", fmt.Errorf("no backend in the server's log for the connection from port %d (steps %v)", c.ServerPort, c.Steps)
		}
		if l.logEvents {
			ev = append(ev, logEvents(lines)...)
			continue
		}
		for _, s := range c.Steps {
			if s != harness.NegStartup {
				ev = append(ev, s)
			}
		}
		for _, line := range lines {
			switch {
			case strings.Contains(line, "no pg_hba.conf entry"):
				ev = append(ev, "authfail")
			case strings.Contains(line, "connection authorized"):
				ev = append(ev, "authok")
			}
		}
	}
	if len(ev) == 0 {
		return "-", nil
	}
	return strings.Join(ev, ", "), nil
}

// logEvents are the events of one backend's log lines, as the script's parse_log_events reads
// them (the "connection received" line is the connect or reconnect, counted by the caller).
func logEvents(lines []string) []string {
	patterns := []struct{ text, event string }{
		{"SSLRequest accepted", "sslaccept"},
		{"SSLRequest rejected", "sslreject"},
		{"direct SSL connection accepted", "directsslaccept"},
		{"direct SSL connection rejected", "directsslreject"},
		{"GSSENCRequest accepted", "gssaccept"},
		{"GSSENCRequest rejected", "gssreject"},
		{"no pg_hba.conf entry", "authfail"},
		{"connection authenticated", "authok"},
	}
	var ev []string
	for _, line := range lines {
		for _, p := range patterns {
			if strings.Contains(line, p.text) {
				ev = append(ev, p.event)
			}
		}
	}
	return ev
}

// backendLines sorts the lines of a server log (the harness's log_line_prefix, "%m [%p] ") by
// backend: for each TCP connection received, by its client port, its "connection received"
// line and the lines its process wrote after it.
func backendLines(log string) map[int][]string {
	const received = "connection received: host=127.0.0.1 port="
	current := map[int]int{} // pid -> client port
	out := map[int][]string{}
	for line := range strings.Lines(log) {
		pid, ok := logPID(line)
		if !ok {
			continue
		}
		if i := strings.Index(line, received); i >= 0 {
			port, err := strconv.Atoi(strings.TrimSpace(line[i+len(received):]))
			if err != nil {
				continue
			}
			current[pid] = port
			out[port] = []string{line}
			continue
		}
		if strings.Contains(line, "connection received: ") {
			delete(current, pid) // a Unix-domain socket's
			continue
		}
		if port, ok := current[pid]; ok {
			out[port] = append(out[port], line)
		}
	}
	return out
}

// logPID is the process id of a log line "2026-01-02 03:04:05.678 UTC [1234] LOG:  ...".
func logPID(line string) (int, bool) {
	i := strings.Index(line, " [")
	if i < 0 {
		return 0, false
	}
	j := strings.Index(line[i:], "] ")
	if j < 0 {
		return 0, false
	}
	pid, err := strconv.Atoi(line[i+2 : i+j])
	return pid, err == nil
}

// runRows runs rows on l, at most workers at a time (each row through its own proxy, with its
// own Connector: their counts are their own), and returns their results in order.
func runRows(l *lab005, rows []row005, workers int) []result005 {
	results := make([]result005, len(rows))
	sem := make(chan struct{}, workers)
	var wg sync.WaitGroup
	for i, r := range rows {
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer wg.Done()
			defer func() { <-sem }()
			results[i] = l.run(r)
		}()
	}
	wg.Wait()
	return results
}

// rowName is a row's subtest name: "ssluser/disable/allow/postgres".
func rowName(r row005) string {
	n := r.sslnegotiation
	if n == "" {
		n = "default"
	}
	return r.user + "/" + r.gssencmode + "/" + r.sslmode + "/" + n
}

// check005 asserts a row's result: psql's outcome is the table's; the connector's, cold, is
// the table's and psql's, with the table's events; warm, the same outcome on no more TCP
// connections than cold. psqlEvents: libpq's own events must be the table's too (the
// table's libpq, 18; libpq 15 is asked for its outcome only).
func check005(t *testing.T, r row005, res result005, psqlEvents bool) {
	t.Helper()
	if res.err != nil {
		t.Fatalf("%s: %v", res.conninfo, res.err)
	}
	t.Logf("%s\n  table:     %s -> %s\n  psql:      %s -> %s (%s)\n  cold:      %s -> %s (%s)\n  warm:      %s -> %s (%s)",
		res.conninfo, r.events, r.outcome,
		res.psql.events, res.psql.outcome, res.psql.err,
		res.cold.events, res.cold.outcome, res.cold.err,
		res.warm.events, res.warm.outcome, res.warm.err)
	if res.psql.outcome != r.outcome {
		t.Errorf("psql: %s, the table: %s", res.psql.outcome, r.outcome)
	}
	switch {
	case psqlEvents && res.psql.events != r.events:
		t.Errorf("psql's events: %s, the table's: %s", res.psql.events, r.events)
	case res.psql.events != r.events:
		t.Logf("libpq's events differ from the table's (libpq 18's): %s", res.psql.events)
	}
	if res.cold.outcome != r.outcome || res.cold.outcome != res.psql.outcome {
		t.Errorf("connector (cold): %s, the table: %s, psql: %s", res.cold.outcome, r.outcome, res.psql.outcome)
	}
	if res.cold.events != r.events {
		t.Errorf("connector's events (cold): %s, the table's: %s", res.cold.events, r.events)
	}
	if res.warm.outcome != r.outcome {
		t.Errorf("connector (warm): %s, the table: %s", res.warm.outcome, r.outcome)
	}
	if res.warm.conns > res.cold.conns {
		t.Errorf("connector (warm): %d TCP connections (%s), cold: %d (%s)", res.warm.conns, res.warm.events, res.cold.conns, res.cold.events)
	}
	for _, p := range []phase005{res.cold, res.warm} {
		if p.outcome == "fail" && strings.TrimSpace(p.err) == "" {
			t.Errorf("connector: a failed connect with an empty error")
		}
	}
}

// runTable runs the rows of a table on l and checks each in a subtest of its own.
func runTable(t *testing.T, l *lab005, rows []row005, psqlEvents bool) {
	t.Helper()
	start := time.Now()
	results := runRows(l, rows, 6)
	t.Logf("%d rows in %v", len(rows), time.Since(start).Round(time.Millisecond))
	for i, r := range rows {
		t.Run(rowName(r), func(t *testing.T) { check005(t, r, results[i], psqlEvents) })
	}
}

// start005 starts a server set up as the script's node: its roles and current_enc() in
// database postgres, its pg_hba.conf lines, and on PostgreSQL 17+ the logging of the
// negotiation its events are read from.
func start005(t *testing.T, opts harness.Options) *harness.Postgres {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	if opts.Major >= 17 {
		opts.Settings = map[string]string{"trace_connection_negotiation": "on"}
	}
	opts.HBA = hba005(opts.TLS, opts.GSS != nil)
	pg := harness.StartT(t, opts)
	if err := pg.ExecAdminIn(ctx, "postgres", setupSQL005); err != nil {
		t.Fatal(err)
	}
	return pg
}

// libpq18 is psql's environment for libpq 18, or the test fails.
func libpq18(t *testing.T) []string {
	t.Helper()
	env, err := harness.Libpq18Env()
	if err != nil {
		t.Fatal(err)
	}
	return env
}

// unixEvents are the events of the Unix-socket connections in a log: the script's
// parse_log_events over what the server logged.
func unixEvents(log string) string {
	var ev []string
	for line := range strings.Lines(log) {
		if strings.Contains(line, "connection received: host=[local]") {
			if len(ev) == 0 {
				ev = append(ev, "connect")
			} else {
				ev = append(ev, "reconnect")
			}
			continue
		}
		ev = append(ev, logEvents([]string{line})...)
	}
	if len(ev) == 0 {
		return "-"
	}
	return strings.Join(ev, ", ")
}
