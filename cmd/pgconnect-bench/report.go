package main

import (
	"errors"
	"fmt"
	"io"
	"slices"
	"strconv"
	"strings"
	"time"
)

// maxErrorLen is how many characters of a first error a table cell shows.
const maxErrorLen = 80

// dash stands for a figure that was not measured, or that a row whose every
// connection failed does not have.
const dash = "–"

// writeMarkdown writes r as the markdown document docs/benchmarks.md: when
// and where it was measured, the targets, one table per connect scenario
// (with a client-count pivot for scenario 5), the throughput and cold herd
// tables, and links to the charts writeCharts makes from the same report.
func writeMarkdown(w io.Writer, r *Report) error {
	if r == nil {
		return errors.New("write benchmarks markdown: nil report")
	}
	var b strings.Builder
	writeHeader(&b, r)
	writeMachine(&b, r.Machine)
	writeMethod(&b, r)
	writeTargets(&b, r.Targets)
	if len(connectChartScenarios(r.Connect)) > 0 {
		fmt.Fprintf(&b, "![connections per second](%s)\n\n", connectChartFile)
	}
	for n := 1; n <= 5; n++ {
		writeConnectScenario(&b, n, scenarioRows(r.Connect, n))
	}
	writeThroughput(&b, r.Throughput)
	writeHerd(&b, r.Herd)
	writeWrap(&b, r.Wrap)
	writeConnectScenario(&b, 8, scenarioRows(r.Connect, 8))
	writeScramHerd(&b, r.ScramHerd)
	writeConnectScenario(&b, 9, scenarioRows(r.Connect, 9))
	writeDistance(&b, r)
	writeStatement(&b, r)
	writeFleet(&b, r)
	writeOAuth(&b, r)
	if _, err := io.WriteString(w, strings.TrimRight(b.String(), "\n")+"\n"); err != nil {
		return fmt.Errorf("write benchmarks markdown: %w", err)
	}
	return nil
}

// writeHeader writes the title, when the run started and how long it took,
// and the warning that a quick run's counts are not for publishing.
func writeHeader(b *strings.Builder, r *Report) {
	b.WriteString("# Benchmarks\n\n")
	when := "at an unrecorded time"
	if !r.Started.IsZero() {
		when = r.Started.UTC().Format("2006-01-02 15:04 UTC")
	}
	fmt.Fprintf(b, "Measured %s; the run took %s.\n\n", when, r.Duration.Round(time.Second))
	if r.Quick {
		b.WriteString("**Quick run: these are smoke-test counts, not figures to publish.**\n\n")
	}
}

// writeMethod writes how the figures are measured, so that a reader can
// judge them without reading the code.
func writeMethod(b *strings.Builder, r *Report) {
	b.WriteString(`## How it is measured

Reproduce with ` + "`bash scripts/bench.sh`" + ` (installs what the tests need, then builds and
runs ` + "`cmd/pgconnect-bench`" + `). Every peer runs in the same run, against the same throwaway
servers on loopback, and in a process of its own:

- **libpq** is ` + "`pgbench -C`" + ` (a new connection per transaction, the script ` + "`select 1;`" + `, simple
  query protocol), and psql for the transfers.
- **Go peers** (pgx v5 stdlib, lib/pq, pgconnector) are this program re-executed: ` + "`database/sql`" + `
  with no idle connections, so that each connection is opened, runs ` + "`select 1`" + ` in the simple
  query protocol (as pgbench does; pgx would otherwise prepare it on every new connection, a second
  round trip that is not a cost of connecting), and is closed. *warm* is one Connector for the whole
  run, after one unmeasured connection; *cold* is a new Connector, so an empty decision cache, per
  connection.
- **Connections/s**: successful connections over the storm's duration (for pgbench, its tps, which
  leaves out its start).
- **Connect latency** (p50, p99): on each client, from the end of one ` + "`select 1`" + ` to the start of the
  next, that is closing the old connection and opening the new one (TCP, negotiation, startup,
  authentication); for pgbench it comes from its per-transaction log.
- **Backends per connection**: ` + "`connection received`" + ` lines in the server log (one per fork) over
  logical connections; pgbench's own first connection is counted as one.
- **Client CPU per connection**: user+system time of the client process. For Go peers, getrusage
  around the storm (warm-up and process start left out); for pgbench, the whole process (its start,
  its first connection and its log writes included: slightly against libpq).
- Each storm is split into ` + plural(max(r.Rounds, 1), "round") + ` (in scenarios 8 and 9 fewer where a round would
  give a client fewer than two connections, and in scenario 9 at most 4), the peers taking turns,
  so that a slow patch of a noisy machine is shared; each transfer runs ` + plural(max(r.BulkReps, 1), "time") + `, the fastest
  counts. Unless the run says otherwise under Machine (CPUs), the clients run on half of the CPUs
  and the servers on the other half (` + "`-pin`" + `), as on separate hosts: a client's CPU time does not slow the server.
- Scenarios 1-3 use ` + "`trust`" + `, so that authentication (the same for every peer) does not hide the
  negotiation; scenario 4 uses ` + "`gss`" + `, which the server skips under GSS encryption.
- Scenario 8 measures SCRAM-SHA-256 authentication on the client: the peers connect through
  pgbouncer (` + "`pool_mode=transaction`" + `, ` + "`default_pool_size=20`" + `), whose ` + "`auth_file`" + ` holds the role's
  SCRAM secret copied from ` + "`pg_authid`" + `, so that pgbouncer only checks proofs and the PBKDF2 of
  each login (4096 iterations) is the client's; a ` + "`trust`" + ` role beside it shows the same path
  without authentication. Scenario 9 is SCRAM-SHA-256 over TLS to PostgreSQL itself.
- Scenario 10 puts distance between client and server: a loopback proxy holds every byte back
  for a one-way delay in each direction (this kernel has no netem), so that each round trip of a
  connection's setup costs twice the delay; one client per peer, in at most 3 rounds.
- Scenario 11 measures the statement path, not connecting: each peer's client process opens one
  pooled connection to the fake server (in the benchmark process, on the server CPUs), warms
  up unmeasured (the connection, pgx's prepared statement, the SDK's instruments), then runs
  ` + "`select $1::int + 1`" + ` with one argument in a loop; the loops are split into ` + plural(max(r.Rounds, 1), "round") + `, a process
  each, the peers taking turns as above. It measures around the loop alone: wall time, getrusage
  (user+system) and ` + "`runtime.ReadMemStats`" + ` (Mallocs and TotalAlloc, after a ` + "`runtime.GC`" + `), the
  process doing nothing else meanwhile but the SDK's batch span processor, which is part of the
  traced peers' cost. Every traced peer gets the same
  OpenTelemetry SDK (every span sampled, batched to an exporter that discards it; a meter provider
  with a manual reader), and its loop runs inside a recording span; each traced peer's spans are
  recorded once more in a separate process with ` + "`tracetest.SpanRecorder`" + `, to show what they hold.
- Scenario 12 measures what the connector remembers about several hosts, where libpq and pgx
  remember nothing between connects: a first host whose SYNs are dropped, a standby written before
  the primary with ` + "`target_session_attrs=read-write`" + `, a failover (the primary stopped and
  its standby promoted while one client connects in a loop) and a resolver that takes 50 ms per
  answer. One client per peer; the peers that wait for ` + "`connect_timeout`" + ` on every connect
  make a few connects, the others more, pgconnector's compared rows taking turns in rounds as above.
- Scenario 13 measures OAuth (SASL OAUTHBEARER) over verify-full TLS to PostgreSQL 18: a connect
  with a token against a trust connect to the same server, and the backends each costs (libpq
  reconnects after the server's discovery answer unless ` + "`oauth_issuer`" + ` is the
  ` + "`.well-known`" + ` URI). The root package's ` + "`BenchmarkOAuthConnect`" + ` measures the connector's
  two connects in one process (ns/op, backends/op); its target line comes from runs of it
  (` + "`-oauth-gobench`" + `: one ` + "`go test -bench OAuthConnect -count 1`" + ` output per run, concatenated).
- **Telemetry**: in scenarios 1-10 and 13 pgconnector runs as an application that has set no OpenTelemetry
  provider: with the global default providers it starts no span and records no measurement, though
  its statement tracer still wraps each connection. What spans cost with an SDK is scenario 11, and
  the root package's ` + "`BenchmarkConnectTracing`" + ` and ` + "`BenchmarkStatementTracing`" + `.

`)
}

// writeMachine writes the "Machine" section: a short bullet list of the
// hardware and software the figures were measured with.
func writeMachine(b *strings.Builder, m Machine) {
	b.WriteString("## Machine\n\n")
	var hw []string
	if m.CPU != "" {
		hw = append(hw, m.CPU)
	}
	if m.Cores > 0 {
		hw = append(hw, fmt.Sprintf("%d cores", m.Cores))
	}
	if m.MemoryGiB > 0 {
		hw = append(hw, fmt.Sprintf("%d GiB memory", m.MemoryGiB))
	}
	items := []struct{ name, value string }{
		{"Hardware", strings.Join(hw, ", ")},
		{"OS", joinNonEmpty(", ", m.OS, prefixed("kernel ", m.Kernel))},
		{"Software", joinNonEmpty(", ", prefixed("Go ", m.Go), prefixed("PostgreSQL ", m.PostgreSQL),
			m.Pgbench, prefixed("MIT Kerberos ", m.Krb5))},
		{"Modules", m.Modules},
		{"CPUs", m.Pinning},
	}
	n := 0
	for _, it := range items {
		if it.value != "" {
			fmt.Fprintf(b, "- **%s:** %s\n", it.name, it.value)
			n++
		}
	}
	if n == 0 {
		b.WriteString("- not recorded\n")
	}
	b.WriteString("\n")
}

// writeTargets writes the "Targets" section: each target, what it wants,
// what this run measured and whether that meets it.
func writeTargets(b *strings.Builder, targets []Target) {
	if len(targets) == 0 {
		return
	}
	b.WriteString("## Targets\n\n")
	t := table{head: []string{"Name", "Want", "Measured", "Met"}}
	for _, tg := range targets {
		met := "**no**"
		switch {
		case tg.Want == "-":
			met = dash // recorded, not a target
		case tg.Met:
			met = "yes"
		}
		t.add(cell(tg.Name), cell(tg.Want), cell(tg.Got), met)
	}
	t.write(b)
}

// writeConnectScenario writes the section of connect scenario n: one row per
// peer and client count, in the order of rows, and for scenario 5 the pivot
// by client count and the client-bound chart. It writes nothing when rows is
// empty.
func writeConnectScenario(b *strings.Builder, n int, rows []ConnectResult) {
	writeConnectScenarioIntro(b, n, rows, scenarioIntro[n])
}

// writeConnectScenarioIntro is writeConnectScenario with intro before the table.
func writeConnectScenarioIntro(b *strings.Builder, n int, rows []ConnectResult, intro string) {
	if len(rows) == 0 {
		return
	}
	fmt.Fprintf(b, "## Scenario %d: %s\n\n", n, scenarioTitles[n])
	b.WriteString(intro)
	ticket := n == 5
	user := slices.ContainsFunc(rows, func(c ConnectResult) bool { return c.User != "" })
	backends := slices.ContainsFunc(rows, func(c ConnectResult) bool { return c.Backends > 0 })
	tcp := slices.ContainsFunc(rows, func(c ConnectResult) bool { return c.TCP > 0 })

	t := table{head: []string{"Peer", "Clients"}, right: []bool{false, true}}
	t.col(ticket, "Ticket", false)
	t.col(user, "Role's authentication", false)
	t.col(true, "Connections/s", true)
	t.col(true, "p50 connect", true)
	t.col(true, "p99 connect", true)
	t.col(backends, "Backends/conn", true)
	t.col(tcp, "TCP/conn", true)
	t.col(true, "Client CPU/conn", true)
	t.col(true, "Errors", false)
	for _, c := range rows {
		t.add(connectRow(c, ticket, user, backends, tcp)...)
	}
	t.write(b)

	if n == 5 || n == 8 || n == 9 || n == 13 {
		writeClientPivot(b, rows)
	}
	if n == 5 && hasClientBoundData(rows) {
		fmt.Fprintf(b, "![client-bound](%s)\n\n", clientBoundChartFile)
	}
	if n == 8 && len(okRows(rows)) > 0 {
		fmt.Fprintf(b, "![SCRAM through pgbouncer](%s)\n\n", scramChartFile)
	}
}

// writeOAuth writes the section of scenario 13, saying when it ran where that was in another
// run than the rest of the report.
func writeOAuth(b *strings.Builder, r *Report) {
	rows := scenarioRows(r.Connect, 13)
	if len(rows) == 0 {
		return
	}
	intro := scenarioIntro[13]
	if !r.OAuthMeasured.IsZero() {
		intro = strings.TrimSuffix(intro, "\n\n") + fmt.Sprintf(" Measured %s UTC in a run of this scenario alone, on the "+
			"same machine; the other scenarios come from the run this report starts with.\n\n", r.OAuthMeasured.UTC().Format("2006-01-02 15:04"))
	}
	if m := r.OAuthMachine; m != nil {
		intro = strings.TrimSuffix(intro, "\n\n") + fmt.Sprintf(" Machine of that run: %s.\n\n", joinNonEmpty(", ",
			m.CPU, suffixed(itoaNonZero(m.Cores), " cores"), suffixed(itoaNonZero(m.MemoryGiB), " GiB memory"), m.OS,
			prefixed("kernel ", m.Kernel), prefixed("Go ", m.Go), prefixed("CPUs: ", m.Pinning)))
	}
	writeConnectScenarioIntro(b, 13, rows, intro)
}

// suffixed is s followed by suffix, or "" when s is.
func suffixed(s, suffix string) string {
	if s == "" {
		return ""
	}
	return s + suffix
}

// itoaNonZero is n in decimal, or "" for 0.
func itoaNonZero(n int) string {
	if n == 0 {
		return ""
	}
	return strconv.Itoa(n)
}

// scenarioIntro is what a connect scenario's section says before its table, where the title
// is not enough.
var scenarioIntro = map[int]string{
	8: "pgbouncer 1.18 (`pool_mode=transaction`, `max_client_conn=1000`, `default_pool_size=20`, TCP " +
		"only) in front of a PostgreSQL server that it reaches with `trust`. Two roles: one that pgbouncer " +
		"lets in with `trust`, one with `scram-sha-256` whose SCRAM secret (StoredKey, ServerKey) pgbouncer " +
		"has in its `auth_file`: pgbouncer checks the proof and runs no PBKDF2, so the SaltedPassword " +
		"derivation (PBKDF2-HMAC-SHA-256, 4096 iterations) is all of SCRAM's cost and all the client's. " +
		"libpq and pgx derive it on every connection; RFC 7677 section 4 lets a client cache the ClientKey " +
		"for a salt and iteration count. pgconnector runs with its default settings, one Connector for " +
		"the whole storm. No TLS: pgbouncer has none, and the default modes find that out (libpq on the " +
		"same socket after `N`, pgx with a second connection).\n\n",
	9: "A PostgreSQL server with TLS (an ECDSA P-256 certificate from a throwaway CA) whose pg_hba.conf " +
		"says `scram-sha-256` for TCP: every connection is a TLS handshake, a backend and a SCRAM " +
		"exchange, and verify-full checks the certificate chain and the host name (the CA as " +
		"`sslrootcert`). The role's secret has PostgreSQL's default 4096 iterations. Each storm runs in " +
		"at most 4 rounds: every connection forks a backend.\n\n",
	13: "PostgreSQL 18 with TLS (the certificate of scenario 9) and two `hostssl` lines: `trust` for one role, " +
		"`oauth` (SASL OAUTHBEARER; the harness's validator module, which reads the tokens a local https " +
		"issuer wrote, so the server contacts no issuer) for the other. The module is preloaded " +
		"(`shared_preload_libraries`): PostgreSQL 18 otherwise loads it in each backend at " +
		"authentication, a dlopen that no client avoids. Every peer connects with " +
		"`sslmode=verify-full` (the CA as `sslrootcert`), as each role; the OAuth peers hand over one access " +
		"token minted before the run. pgconnector runs with `oauth_issuer` = the issuer and WithOAuthTokenFunc: " +
		"one Connector, warmed, so the discovery exchange of its first connect is remembered and every " +
		"measured connect sends the cached token at once. pgx calls its OAuthTokenProvider for every " +
		"connection and sends the token at once (no discovery, no issuer check). libpq 18 has no token " +
		"cache, and pgbench cannot install its token hook: its peers are a C program that calls " +
		"PQconnectdb and PQfinish in a loop (no query) with a `PQAUTHDATA_OAUTH_BEARER_TOKEN` hook handing " +
		"libpq the token (`harness.LibpqOAuthConnect`); with `oauth_issuer` = the issuer, libpq asks the " +
		"server for its discovery URI first and reconnects with the token (two backends per connect), " +
		"with the `.well-known` URI as `oauth_issuer` it sends the token at once. The libpq rows have no " +
		"connect latency; their CPU is the program's, its start included (getrusage of the ended children). " +
		"Each storm runs in at most 4 rounds, as in scenario 9.\n\n",
}

// connectRow formats one row of a connect scenario's table, with the
// optional columns that table has.
func connectRow(c ConnectResult, ticket, user, backends, tcp bool) []string {
	ok := connectOK(c)
	row := []string{cell(c.Peer), strconv.Itoa(c.Clients)}
	if ticket {
		row = append(row, yesNo(c.Ticket))
	}
	if user {
		row = append(row, cell(c.User))
	}
	row = append(row,
		figure(ok, "%.0f", c.ConnsPerSec),
		ifOK(ok && c.P50 > 0, latency(c.P50)), // no latencies: libpq's OAuth program of scenario 13
		ifOK(ok && c.P99 > 0, latency(c.P99)))
	if backends {
		row = append(row, figure(ok, "%.2f", c.Backends))
	}
	if tcp {
		row = append(row, figure(ok, "%.2f", c.TCP))
	}
	return append(row, ifOK(ok, micros(c.CPU)), errorsCell(c.Errors, c.Conns, c.Error))
}

// writeDistance writes the section of scenario 10: for each role and one-way delay, each
// peer's connect latency and how many round trips pgconnector is ahead of it.
func writeDistance(b *strings.Builder, r *Report) {
	rows := scenarioRows(r.Connect, 10)
	if len(rows) == 0 {
		return
	}
	fmt.Fprintf(b, "## Scenario 10: %s\n\n", scenarioTitles[10])
	server := joinNonEmpty(", pgbench with ", r.DistanceServer, r.DistanceLibpq)
	if server == "" {
		server = "not recorded"
	}
	b.WriteString("A PostgreSQL server with TLS (the certificate of scenario 9), reached through a loopback proxy " +
		"(`harness.DelayProxy`) that holds every byte back for the one-way delay in each direction, and the TCP " +
		"handshake's round trip with it: a client as far from the server as a link whose round-trip time is " +
		"twice the delay. One client per peer, each connection opened, used for `select 1` and closed; the latency is " +
		"measured as in the other scenarios. pg_hba says `trust` for one server and `scram-sha-256` for the " +
		"other. libpq and pgx with their default `sslmode=prefer` send an SSLRequest and wait for the answer " +
		"before the TLS handshake; with `sslnegotiation=direct` (libpq refuses it under `sslmode=prefer`, pgx " +
		"makes that `require`) they start the handshake at once. pgconnector runs with its default DSN, one Connector " +
		"warmed by two connections. *Round trips ahead* is (the peer's p50 - pgconnector's p50) / (2 × delay): " +
		"positive where pgconnector connects in fewer round trips; at a short delay the client's own CPU time " +
		"weighs in it too. Server: " + server + ".")
	if !r.DistanceMeasured.IsZero() {
		fmt.Fprintf(b, " Measured %s UTC in a run of this scenario alone, on the same machine; the other "+
			"scenarios come from the run this report starts with.", r.DistanceMeasured.UTC().Format("2006-01-02 15:04"))
	}
	b.WriteString("\n\n")
	t := table{
		head:  []string{"Role's authentication", "One-way delay", "Peer", "p50 connect", "p99 connect", "Round trips ahead", "Backends/conn", "Errors"},
		right: []bool{false, true, false, true, true, true, true, false},
	}
	for _, c := range rows {
		ok := connectOK(c)
		t.add(cell(c.User), fmt.Sprintf("%g ms", float64(c.Delay)/float64(time.Millisecond)), cell(c.Peer), ifOK(ok, latency(c.P50)), ifOK(ok, latency(c.P99)),
			roundTripsAhead(c, rows), figure(ok, "%.2f", c.Backends), errorsCell(c.Errors, c.Conns, c.Error))
	}
	t.write(b)
}

// roundTripsAhead is (c's p50 - pgconnector's p50) / (2 × delay) for a peer c of scenario 10
// that is not pgconnector, against the pgconnector row of the same role and delay in rows: how
// many round trips of that delay pgconnector saves. A dash without a delay, for pgconnector
// itself, or where either failed.
func roundTripsAhead(c ConnectResult, rows []ConnectResult) string {
	if c.Delay <= 0 || c.Family == "pgconnector" || !connectOK(c) {
		return dash
	}
	for _, pc := range rows {
		if pc.Family == "pgconnector" && pc.User == c.User && pc.Delay == c.Delay && connectOK(pc) {
			return fmt.Sprintf("%.2f", float64(c.P50-pc.P50)/float64(2*c.Delay))
		}
	}
	return dash
}

// writeClientPivot writes scenario 5's compact table: one row per peer (and
// ticket), connections per second and client CPU per connection at each
// client count measured.
func writeClientPivot(b *strings.Builder, rows []ConnectResult) {
	keys, counts, cells := pivotClients(rows)
	if len(keys) == 0 {
		return
	}
	t := table{head: []string{"Peer"}, right: []bool{false}}
	for _, n := range counts {
		t.col(true, "conn/s at "+clientsLabel(n), true)
	}
	for _, n := range counts {
		t.col(true, "CPU µs/conn at "+clientsLabel(n), true)
	}
	for _, k := range keys {
		row := []string{cell(k)}
		for _, n := range counts {
			c, ok := cells[pivotKey{k, n}]
			row = append(row, figure(ok, "%.0f", c.ConnsPerSec))
		}
		for _, n := range counts {
			c, ok := cells[pivotKey{k, n}]
			row = append(row, figure(ok, "%.0f", float64(c.CPU)/float64(time.Microsecond)))
		}
		t.add(row...)
	}
	t.write(b)
}

// writeThroughput writes the "Scenario 4: throughput" section: one row per
// workload, peer and transport, and the throughput chart.
func writeThroughput(b *strings.Builder, rows []ThroughputResult) {
	if len(rows) == 0 {
		return
	}
	b.WriteString("## Scenario 4: throughput\n\n")
	t := table{
		head:  []string{"Workload", "Peer", "Transport", "MB/s", "Seconds", "Client CPU (s)", "Error"},
		right: []bool{false, false, false, true, true, true, false},
	}
	for _, x := range rows {
		ok := x.Error == "" || x.Seconds > 0
		t.add(cell(x.Workload), cell(x.Peer), cell(x.Transport),
			figure(ok, "%.0f", x.MBPerSec),
			figure(ok, "%.2f", x.Seconds),
			figure(ok, "%.2f", x.CPU.Seconds()),
			errorText(x.Error))
	}
	t.write(b)
	if hasThroughputData(rows) {
		fmt.Fprintf(b, "![throughput](%s)\n\n", throughputChartFile)
	}
}

// writeHerd writes the "Scenario 6: cold herd" section: for each server and
// peer, what its concurrent first connections sent to the server.
func writeHerd(b *strings.Builder, rows []HerdResult) {
	if len(rows) == 0 {
		return
	}
	b.WriteString("## Scenario 6: cold herd\n\n")
	t := table{
		head: []string{"Server", "Ticket", "Peer", "Clients", "SSLRequests", "GSSENCRequests",
			"TCP connections", "Backends", "Errors"},
		right: []bool{false, false, false, true, true, true, true, true, true},
	}
	for _, h := range rows {
		t.add(cell(h.Server), yesNo(h.Ticket), cell(h.Peer), strconv.Itoa(h.Clients),
			strconv.Itoa(h.SSLRequests), strconv.Itoa(h.GSSENCRequests),
			strconv.Itoa(h.TCP), strconv.Itoa(h.Backends), strconv.Itoa(h.Errors))
	}
	t.write(b)
}

// writeScramHerd writes scenario 8's cold herd: for each peer, what its concurrent first
// connections of the SCRAM role cost, and how many PBKDF2 derivations pgconnector ran.
func writeScramHerd(b *strings.Builder, rows []ScramHerdResult) {
	if len(rows) == 0 {
		return
	}
	b.WriteString("## Scenario 8: cold herd of SCRAM logins\n\n")
	b.WriteString("The SCRAM role's first connections through pgbouncer, released at once: " +
		"pgbench -C with one connection per client (and its own first one), one new pgx pool, one new " +
		"pgconnector Connector (so nothing cached yet). The derivations are the Connector's " +
		"`" + scramDerivationsMetric + "` counter, read from an OpenTelemetry SDK meter provider after " +
		"the herd; n/a where the library exports no such counter.\n\n")
	t := table{
		head:  []string{"Peer", "Clients", "Wall time", "Client CPU", "Client CPU/conn", "SCRAM derivations", "Errors"},
		right: []bool{false, true, true, true, true, true, false},
	}
	for _, h := range rows {
		derivations := dash
		if h.Family == "pgconnector" {
			derivations = derivationsText(h.Derivations)
		}
		perConn := dash
		if h.Clients > 0 && h.CPU > 0 {
			perConn = micros(h.CPU / time.Duration(h.Clients))
		}
		t.add(cell(h.Peer), strconv.Itoa(h.Clients), fmt.Sprintf("%.0f ms", h.Seconds*1000),
			fmt.Sprintf("%.1f ms", float64(h.CPU)/float64(time.Millisecond)), perConn, derivations,
			errorsCell(h.Errors, h.Clients, h.Error))
	}
	t.write(b)
}

// writeWrap writes the "Scenario 7: GSS wrap and unwrap per core" section:
// per enctype, the wrap and unwrap rates beside the AES-CBC and HMAC rates
// and the floor they make.
func writeWrap(b *strings.Builder, rows []WrapResult) {
	if len(rows) == 0 {
		return
	}
	b.WriteString("## Scenario 7: " + scenarioTitles[7] + "\n\n")
	b.WriteString("Measured in the benchmark process with `testing.Benchmark`, one goroutine, after the other " +
		"scenarios. One 16 KiB PostgreSQL GSS packet per operation (16,308 to 16,320 bytes of plaintext), " +
		"MB/s (10^6 bytes) of plaintext, the median of " + strconv.Itoa(wrapRounds) + " rounds taken in turns. " +
		"The limit is the standard library on this CPU: AES-CBC with `cipher.BlockMode` (AES-NI where the CPU " +
		"has it; CBC encryption is a chain, decryption is not) and keyed HMAC over the same length. The floor " +
		"is one pass of each, one after the other: 1/(1/CBC + 1/HMAC). A wrap can beat it where the HMAC " +
		"runs on spare units while the AES chain waits (internal/gss feeds the HMAC between CBC chunks).\n\n")
	t := table{
		head:  []string{"Enctype", "AES-CBC encrypt / decrypt", "HMAC", "Floor wrap / unwrap", "Wrap", "Unwrap"},
		right: []bool{false, true, true, true, true, true},
	}
	vs := func(v, floor float64) string {
		if floor <= 0 {
			return fmt.Sprintf("%.0f", v)
		}
		return fmt.Sprintf("**%.0f** (%.2fx floor)", v, v/floor)
	}
	for _, w := range rows {
		t.add(cell(w.Enctype), fmt.Sprintf("%.0f / %.0f", w.CBCEncrypt, w.CBCDecrypt),
			fmt.Sprintf("%.0f (%s)", w.HMACRate, w.HMAC), fmt.Sprintf("%.0f / %.0f", w.FloorWrap, w.FloorUnwrap),
			vs(w.Wrap, w.FloorWrap), vs(w.Unwrap, w.FloorUnwrap))
	}
	t.write(b)
}

// table is a markdown table being built: its header, which columns are
// right-aligned, and its rows of already formatted cells.
type table struct {
	head  []string
	right []bool
	rows  [][]string
}

// col adds a column to t when show is set.
func (t *table) col(show bool, name string, right bool) {
	if show {
		t.head = append(t.head, name)
		t.right = append(t.right, right)
	}
}

// add appends a row of formatted cells to t.
func (t *table) add(cells ...string) {
	t.rows = append(t.rows, cells)
}

// write writes t to b, followed by a blank line.
func (t *table) write(b *strings.Builder) {
	writeTableRow(b, t.head)
	sep := make([]string, len(t.head))
	for i := range sep {
		sep[i] = "---"
		if i < len(t.right) && t.right[i] {
			sep[i] = "---:"
		}
	}
	writeTableRow(b, sep)
	for _, r := range t.rows {
		writeTableRow(b, r)
	}
	b.WriteString("\n")
}

// writeTableRow writes one line of a markdown table.
func writeTableRow(b *strings.Builder, cells []string) {
	b.WriteString("| ")
	b.WriteString(strings.Join(cells, " | "))
	b.WriteString(" |\n")
}

// cell makes s safe for a table cell: newlines become spaces and "|" is
// escaped.
func cell(s string) string {
	s = strings.NewReplacer("\r\n", " ", "\n", " ", "\r", " ").Replace(s)
	return strings.ReplaceAll(s, "|", `\|`)
}

// errorText returns a first error for a table cell: on one line, at most
// maxErrorLen characters (an ellipsis marks a cut) and escaped.
func errorText(s string) string {
	s = strings.TrimSpace(strings.NewReplacer("\r\n", " ", "\n", " ", "\r", " ").Replace(s))
	if r := []rune(s); len(r) > maxErrorLen {
		s = string(r[:maxErrorLen-1]) + "…"
	}
	return cell(s)
}

// errorsCell returns "k of n" failed connections, followed by the first
// error when there is one.
func errorsCell(errs, conns int, first string) string {
	s := fmt.Sprintf("%d of %d", errs, conns)
	if e := errorText(first); e != "" {
		s += ": " + e
	}
	return s
}

// figure formats v with format, or returns a dash when !ok.
func figure(ok bool, format string, v float64) string {
	if !ok {
		return dash
	}
	return fmt.Sprintf(format, v)
}

// ifOK returns s, or a dash when !ok.
func ifOK(ok bool, s string) string {
	if !ok {
		return dash
	}
	return s
}

// latency formats a connect latency: milliseconds with 2 decimals from 1ms,
// whole microseconds below.
func latency(d time.Duration) string {
	if d >= time.Millisecond {
		return fmt.Sprintf("%.2f ms", float64(d)/float64(time.Millisecond))
	}
	return micros(d)
}

// micros formats d as whole microseconds.
func micros(d time.Duration) string {
	return fmt.Sprintf("%.0f µs", float64(d)/float64(time.Microsecond))
}

// yesNo formats a flag for a table.
func yesNo(v bool) string {
	if v {
		return "yes"
	}
	return "no"
}

// clientsLabel returns "1 client" or "n clients".
func clientsLabel(n int) string {
	if n == 1 {
		return "1 client"
	}
	return fmt.Sprintf("%d clients", n)
}

// prefixed returns prefix+s, or "" when s is empty.
func prefixed(prefix, s string) string {
	if s == "" {
		return ""
	}
	return prefix + s
}

// joinNonEmpty joins the non-empty parts with sep.
func joinNonEmpty(sep string, parts ...string) string {
	var kept []string
	for _, p := range parts {
		if p != "" {
			kept = append(kept, p)
		}
	}
	return strings.Join(kept, sep)
}
