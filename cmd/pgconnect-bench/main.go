// Command pgconnect-bench measures how PostgreSQL connections open with
// libpq (pgbench -C, psql), pgx's stdlib, lib/pq and pgconnector, side by side
// in one run, on throwaway servers and a Kerberos KDC that it starts itself
// on loopback, and writes the figures into a directory (docs/ by default):
//
//	benchmarks.json  every figure, machine-readable
//	benchmarks.md    the tables and the targets
//	bench-*.png      the charts
//
// Scenarios (see docs/benchmarks.md for what each measures):
//
//  1. TLS off, default DSN (sslmode=prefer), no Kerberos ticket.
//  2. Ticket held; server built with GSS but without a keytab.
//  3. Ticket held; server with a keytab, pg_hba without hostgssenc.
//  4. Full GSS (hostgssenc only): connect rate, then COPY out and a bytea
//     round trip over GSS encryption and over TLS, against psql.
//  5. Client-bound: a fake server (no fork), 1, 8 and 64 clients, with and
//     without a ticket.
//  7. GSS wrap and unwrap per core: the RFC 4121 sealing of one 16 KiB
//     packet per enctype, in this process, beside the standard library's
//     AES-CBC and HMAC rates that bound it.
//  6. Cold herd: concurrent first connections on a cold cache, and the
//     probes that reach the server.
//  8. SCRAM through pgbouncer (pool_mode=transaction, the SCRAM secret in
//     its auth_file): a trust role and a scram-sha-256 role, 1, 8 and 64
//     clients; and a cold herd of SCRAM logins through one new Connector,
//     with the PBKDF2 derivations it ran.
//  9. SCRAM-SHA-256 over TLS to PostgreSQL, sslmode=require and
//     verify-full, 1 and 4 clients.
//  10. Connect over distance: connect latency (p50, p99) to a TLS server
//     through a proxy that delays every byte by 0, 5 and 25 ms each way
//     (-distance-delays), with trust and with scram-sha-256; libpq and pgx
//     with their default sslmode=prefer and with sslnegotiation=direct
//     sslmode=require, pgconnector with its default DSN. PostgreSQL 18 and
//     libpq 18 by default (-pg-major).
//  11. Statement path: a traced `select $1::int + 1` on one pooled connection to the fake
//     server, through database/sql (pgx's stdlib untraced, with otelsql, the connector's
//     OpenDB) and pgxpool (untraced, with otelpgx, the connector's OpenPool), all traced peers
//     with the same OpenTelemetry SDK: ns/op, client CPU/op, allocs/op and B/op, and what each
//     traced peer's spans hold.
//  12. A fleet: a dead first host (a SYN sink before the server), a standby first with
//     target_session_attrs=read-write, a failover (the primary stopped, the standby promoted,
//     a client connecting in a loop) and a slow resolver (WithLookupFunc, 50 ms per answer);
//     libpq and pgx beside pgconnector.
//  13. OAuth over TLS: PostgreSQL 18 over verify-full TLS, a trust role and an oauth role (the
//     harness's validator module and issuer): libpq 18's token hook (oauth_issuer the issuer,
//     and its .well-known URI), pgx's OAuthTokenProvider and the connector's WithOAuthTokenFunc
//     (a cached token), each beside its trust connect, 1 and 4 clients (-tls-clients).
//
// -scenarios scram runs 8 and 9 alone (about 2 minutes on 2 cores);
// -scenarios distance runs 10 alone (a few minutes); -scenarios stmt runs 11 alone (about 2
// minutes); -scenarios fleet runs 12 alone (about 2 minutes); -scenarios oauth runs 13 alone
// (about a minute). A run of one scenario goes into an earlier report with -render and
// -merge-distance, -merge-statement, -merge-fleet or -merge-oauth.
//
// Each peer runs in a process of its own (pgbench, psql, or this program
// re-executed as a Go client), so that the client CPU time reported is that
// process's own; by default the clients run on half of the CPUs and the
// servers on the other half (-pin). It needs what the tests need:
// scripts/install-deps.sh.
//
// It is a module of its own (this directory's go.mod: gonum/plot and lib/pq stay out of the
// library's), built against the library beside it. From the repository root:
//
//	bash scripts/bench.sh                   # builds and runs it: about 8 minutes on 2 cores, writes docs/
//	bash scripts/bench.sh -quick -out DIR   # a smoke run with small counts
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"log"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/pgconnector/pgconnector/internal/harness"
)

// config is the command line.
type config struct {
	out          string
	quick        bool
	scenarios    []int
	clients      int   // concurrent clients, scenarios 1-4
	conns        int   // connections per peer, scenarios 1-3
	gssConns     int   // connections per peer, scenario 4
	fakeConns    int   // connections per peer and client count, scenario 5
	fakeClients  []int // client counts, scenario 5
	herd         int   // concurrent first connections, scenarios 6 and 8
	scramConns   int   // connections per peer, role and client count, scenario 8
	tlsConns     int   // connections per peer and client count, scenario 9
	scramClients []int // client counts, scenario 8
	tlsClients   []int // client counts, scenario 9
	// distanceDelays are scenario 10's one-way delays in ms, distanceConns its connections per
	// peer, role and delay, pgMajor the PostgreSQL major version of its server and libpq.
	distanceDelays []int
	distanceConns  int
	pgMajor        int
	// stmtOps are scenario 11's measured iterations per peer (split over the rounds), stmtWarm
	// the unmeasured ones each client process runs first.
	stmtOps        int
	stmtWarm       int
	rounds         int // each storm is split into this many rounds, peers taking turns
	copyMiB        int // scenario 4 COPY table size
	byteaMiB       int // scenario 4 bytea size
	bulkReps       int // scenario 4 repetitions (the best counts)
	cpuProfile     string
	render         string // a benchmarks.json to render again instead of measuring
	mergeDistance  string // with render: a benchmarks.json whose scenario 10 replaces the report's
	mergeStatement string // with render: a benchmarks.json whose scenario 11 replaces the report's
	mergeFleet     string // with render: a benchmarks.json whose scenario 12 replaces the report's
	mergeOAuth     string // with render: a benchmarks.json whose scenario 13 replaces the report's
	oauthGoBench   string // `go test -bench OAuthConnect` output of the root package, for its target
	pin            bool   // clients and servers on separate CPUs
}

func parseFlags(args []string) (config, error) {
	fs := flag.NewFlagSet("pgconnect-bench", flag.ContinueOnError)
	var c config
	var scenarios, fakeClients, scramClients, tlsClients, distanceDelays string
	fs.StringVar(&c.out, "out", "docs", "directory for benchmarks.md, benchmarks.json and the charts")
	fs.BoolVar(&c.quick, "quick", false, "small counts: a smoke run whose figures are not for publishing")
	fs.StringVar(&scenarios, "scenarios", "1,2,3,4,5,6,7,8,9,10,11,12,13", `comma-separated scenarios to run (1-13); "scram" stands for 8,9, "distance" for 10, "stmt" for 11, "fleet" for 12, "oauth" for 13`)
	fs.IntVar(&c.clients, "clients", 4, "concurrent clients in scenarios 1-4")
	fs.IntVar(&c.conns, "conns", 2000, "connections per peer in scenarios 1-3")
	fs.IntVar(&c.gssConns, "gss-conns", 1000, "connections per peer in scenario 4")
	fs.IntVar(&c.fakeConns, "fake-conns", 3000, "connections per peer and client count in scenario 5")
	fs.StringVar(&fakeClients, "fake-clients", "1,8,64", "client counts in scenario 5")
	fs.IntVar(&c.herd, "herd", 64, "concurrent first connections in scenarios 6 and 8")
	fs.IntVar(&c.scramConns, "scram-conns", 600, "connections per peer, role and client count in scenario 8 (fewer rounds where that makes fewer than 2 per client and round)")
	fs.IntVar(&c.tlsConns, "tls-conns", 100, "connections per peer and client count in scenario 9 (at most 4 rounds, fewer where that makes fewer than 2 per client and round)")
	fs.StringVar(&scramClients, "scram-clients", "1,8,64", "client counts in scenario 8")
	fs.StringVar(&tlsClients, "tls-clients", "1,4", "client counts in scenario 9")
	fs.StringVar(&distanceDelays, "distance-delays", "0,5,25", "one-way delays in scenario 10, ms (the round trip is twice each)")
	fs.IntVar(&c.distanceConns, "distance-conns", 40, "connections per peer, role and delay in scenario 10 (one client, at most 3 rounds)")
	fs.IntVar(&c.pgMajor, "pg-major", 18, "PostgreSQL major version of scenario 10's server and libpq (direct TLS from 17 on)")
	fs.IntVar(&c.stmtOps, "stmt-ops", 100000, "measured statements per peer in scenario 11, split over the rounds")
	fs.IntVar(&c.stmtWarm, "stmt-warm", 2000, "unmeasured statements before each measured loop of scenario 11")
	fs.IntVar(&c.rounds, "rounds", 10, "rounds per storm; peers take turns, so that noise is shared")
	fs.IntVar(&c.copyMiB, "copy-mib", 256, "size of the COPY table in scenario 4, MiB (0: skip)")
	fs.IntVar(&c.byteaMiB, "bytea-mib", 64, "size of the bytea round trip in scenario 4, MiB (0: skip)")
	fs.IntVar(&c.bulkReps, "bulk-reps", 5, "repetitions of each transfer in scenario 4; the fastest counts")
	fs.BoolVar(&c.pin, "pin", true, "run the clients on half of the CPUs and the servers on the other half (taskset), as on separate hosts")
	fs.StringVar(&c.render, "render", "", "render benchmarks.md and the charts again from this benchmarks.json, measuring nothing")
	fs.StringVar(&c.mergeDistance, "merge-distance", "", "with -render: take scenario 10 from this benchmarks.json (a run of -scenarios distance), saying when it ran")
	fs.StringVar(&c.mergeStatement, "merge-statement", "", "with -render: take scenario 11 from this benchmarks.json (a run of -scenarios stmt), saying when it ran")
	fs.StringVar(&c.mergeFleet, "merge-fleet", "", "with -render: take scenario 12 from this benchmarks.json (a run of -scenarios fleet), saying when it ran")
	fs.StringVar(&c.mergeOAuth, "merge-oauth", "", "with -render: take scenario 13 from this benchmarks.json (a run of -scenarios oauth), saying when it ran")
	fs.StringVar(&c.oauthGoBench, "oauth-gobench", "", "a file of `go test -bench OAuthConnect` output (the root package's BenchmarkOAuthConnect, runs of -count 1 concatenated), for its target")
	fs.StringVar(&c.cpuProfile, "cpuprofile", "", "directory where each Go client process writes a CPU profile of its measured part")
	if err := fs.Parse(args); err != nil {
		return c, err
	}
	if fs.NArg() > 0 {
		return c, fmt.Errorf("unexpected argument %q", fs.Arg(0))
	}
	if c.quick {
		c.conns, c.gssConns, c.fakeConns, c.scramConns, c.tlsConns, c.rounds = 30, 20, 60, 30, 20, 1
		c.distanceConns = 10
		c.stmtOps, c.stmtWarm = 2000, 200
		c.copyMiB, c.byteaMiB, c.bulkReps = 4, 2, 1
	}
	var err error
	scenarios = strings.NewReplacer("scram", "8,9", "distance", "10", "stmt", "11", "fleet", "12", "oauth", "13").Replace(scenarios)
	if c.scenarios, err = intList("-scenarios", scenarios, 1, 13); err != nil {
		return c, err
	}
	if c.distanceDelays, err = intList("-distance-delays", distanceDelays, 0, 1000); err != nil {
		return c, err
	}
	if c.fakeClients, err = intList("-fake-clients", fakeClients, 1, 1024); err != nil {
		return c, err
	}
	if c.scramClients, err = intList("-scram-clients", scramClients, 1, 500); err != nil {
		return c, err
	}
	if c.tlsClients, err = intList("-tls-clients", tlsClients, 1, 150); err != nil {
		return c, err
	}
	if c.quick {
		// Two connections per client at the most clients: a client's connect latency is measured
		// from its previous connection on, so a client with one has none.
		c.fakeConns = max(c.fakeConns, 2*slices.Max(c.fakeClients))
	}
	for _, v := range []struct {
		name string
		n    int
	}{{"-clients", c.clients}, {"-conns", c.conns}, {"-gss-conns", c.gssConns}, {"-fake-conns", c.fakeConns}, {"-herd", c.herd}, {"-scram-conns", c.scramConns}, {"-tls-conns", c.tlsConns}, {"-distance-conns", c.distanceConns}, {"-stmt-ops", c.stmtOps}, {"-rounds", c.rounds}, {"-bulk-reps", c.bulkReps}} {
		if v.n < 1 {
			return c, fmt.Errorf("%s must be at least 1, got %d", v.name, v.n)
		}
	}
	if c.pgMajor < 15 {
		return c, fmt.Errorf("-pg-major: %d is before PostgreSQL 15, the oldest the harness runs", c.pgMajor)
	}
	if c.copyMiB < 0 || c.byteaMiB < 0 || c.byteaMiB > 256 {
		return c, fmt.Errorf("-copy-mib must be >= 0 and -bytea-mib between 0 and 256 (the server's 1 GB limit on a statement), got %d and %d", c.copyMiB, c.byteaMiB)
	}
	if c.stmtWarm < 0 {
		return c, fmt.Errorf("-stmt-warm must be at least 0, got %d", c.stmtWarm)
	}
	if c.mergeDistance != "" && c.render == "" {
		return c, errors.New("-merge-distance: only with -render")
	}
	if c.mergeStatement != "" && c.render == "" {
		return c, errors.New("-merge-statement: only with -render")
	}
	if c.mergeFleet != "" && c.render == "" {
		return c, errors.New("-merge-fleet: only with -render")
	}
	if c.mergeOAuth != "" && c.render == "" {
		return c, errors.New("-merge-oauth: only with -render")
	}
	return c, nil
}

// intList parses "1,8,64" into numbers between lo and hi.
func intList(flagName, s string, lo, hi int) ([]int, error) {
	var out []int
	for f := range strings.SplitSeq(s, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil || n < lo || n > hi {
			return nil, fmt.Errorf("%s: %q is not a number from %d to %d", flagName, f, lo, hi)
		}
		out = append(out, n)
	}
	return out, nil
}

func main() {
	if os.Getenv(childEnv) != "" {
		os.Exit(childMain(os.Stdin, os.Stdout))
	}
	log.SetFlags(log.Ltime)
	cfg, err := parseFlags(os.Args[1:])
	if errors.Is(err, flag.ErrHelp) {
		return
	}
	if err != nil {
		log.Fatalf("pgconnect-bench: %v", err)
	}
	var rep *Report
	if cfg.render != "" {
		rep, err = readReport(cfg.render)
		if err == nil && cfg.mergeDistance != "" {
			err = mergeDistance(rep, cfg.mergeDistance)
		}
		if err == nil && cfg.mergeStatement != "" {
			err = mergeStatement(rep, cfg.mergeStatement)
		}
		if err == nil && cfg.mergeFleet != "" {
			err = mergeFleet(rep, cfg.mergeFleet)
		}
		if err == nil && cfg.mergeOAuth != "" {
			err = mergeOAuth(rep, cfg.mergeOAuth)
		}
		if err == nil && cfg.oauthGoBench != "" {
			err = readOAuthGoBench(rep, cfg.oauthGoBench)
		}
	} else {
		ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
		rep, err = run(ctx, cfg)
		stop()
		if cerr := harness.Cleanup(); cerr != nil {
			log.Printf("harness cleanup: %v", cerr)
		}
	}
	if err != nil {
		log.Fatalf("pgconnect-bench: %v", err)
	}
	files, err := writeOutputs(cfg.out, rep)
	if err != nil {
		log.Fatalf("pgconnect-bench: %v", err)
	}
	log.Printf("wrote %s", strings.Join(files, ", "))
	missed := 0
	for _, t := range rep.Targets {
		if !t.Met {
			missed++
			if !rep.Quick {
				log.Printf("target missed: %s: want %s, measured %s", t.Name, t.Want, t.Got)
			}
		}
	}
	if rep.Quick {
		log.Printf("quick run: %d of %d targets missed, which says nothing: the counts are too small to judge them", missed, len(rep.Targets))
	}
}

// run starts the lab, runs the scenarios of cfg and returns the report.
func run(ctx context.Context, cfg config) (*Report, error) {
	rep := &Report{Started: time.Now().UTC(), Quick: cfg.quick, Rounds: cfg.rounds, BulkReps: cfg.bulkReps}
	self, err := os.Executable()
	if err != nil {
		return nil, err
	}
	has := func(s int) bool { return slices.Contains(cfg.scenarios, s) }
	// Scenarios 7 (in this process) and 11 (the fake server) need neither pgbench nor the KDC.
	needLab := slices.ContainsFunc(cfg.scenarios, func(s int) bool { return s != 7 && s != 11 })
	var pgbench string
	if needLab {
		if pgbench, err = harness.Program(ctx, "pgbench"); err != nil {
			return nil, err
		}
	}
	tmp, err := harness.TempDir("pgconnect-bench-") // removed with the harness's files, however the run ends
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(tmp)
	r := &runner{self: self, pgbench: pgbench, env: harness.CleanEnv(), tmp: tmp}
	if cfg.cpuProfile != "" {
		dir, err := filepath.Abs(cfg.cpuProfile)
		if err != nil {
			return nil, err
		}
		if err := os.MkdirAll(dir, 0o755); err != nil {
			return nil, err
		}
		r.env = append(r.env, profileEnv+"="+dir)
	}
	if cfg.pin {
		if r.pin, err = newPinning(ctx); err != nil {
			return nil, err
		}
	}
	rep.Machine = machineInfo(ctx, serverVersion(ctx))
	rep.Machine.Pinning = r.pin.describe()

	// Scenario 10's server and libpq are checked before any scenario runs: a missing PostgreSQL
	// 18 fails the run at once, not after the others.
	var pg pgSetup
	if has(10) {
		if pg, err = choosePG(ctx, cfg.pgMajor); err != nil {
			return nil, err
		}
	}
	var l *lab
	if needLab {
		if l, err = newLab(ctx, cfg, r, rep); err != nil {
			return nil, err
		}
		defer l.close()
	}
	for _, s := range []int{1, 2, 3} {
		if has(s) || (s < 3 && has(6)) {
			if err := l.realServerScenario(ctx, s, has(s), has(6)); err != nil {
				return nil, err
			}
		}
	}
	if has(4) {
		if err := l.fullGSS(ctx); err != nil {
			return nil, err
		}
	}
	if has(5) {
		if err := l.clientBound(ctx); err != nil {
			return nil, err
		}
	}
	if has(8) {
		if err := l.pgbouncerScenario(ctx); err != nil {
			return nil, err
		}
	}
	if has(9) {
		if err := l.scramTLS(ctx); err != nil {
			return nil, err
		}
	}
	if has(10) {
		if err := l.distance(ctx, pg); err != nil {
			return nil, err
		}
	}
	if has(11) {
		log.Printf("scenario 11: %s", scenarioTitles[11])
		if err := statementPath(ctx, cfg, r, rep); err != nil {
			return nil, err
		}
	}
	if has(12) {
		log.Printf("scenario 12: %s", scenarioTitles[12])
		if err := l.fleet(ctx); err != nil {
			return nil, err
		}
	}
	if has(13) {
		log.Printf("scenario 13: %s", scenarioTitles[13])
		if err := l.oauthTLS(ctx); err != nil {
			return nil, err
		}
	}
	if cfg.oauthGoBench != "" {
		if err := readOAuthGoBench(rep, cfg.oauthGoBench); err != nil {
			return nil, err
		}
	}
	if has(7) {
		log.Printf("scenario 7: GSS wrap and unwrap per core")
		rep.Wrap = wrapRates(cfg.quick)
	}
	rep.WarmDecision = warmDecision()
	rep.Targets = checkTargets(rep)
	rep.Duration = time.Since(rep.Started)
	return rep, nil
}

// serverVersion is the version of the PostgreSQL server programs the
// harness runs, for example "15.18".
func serverVersion(ctx context.Context) string {
	p, err := harness.Program(ctx, "postgres")
	if err != nil {
		return ""
	}
	out, err := exec.CommandContext(ctx, p, "--version").Output()
	if err != nil {
		return ""
	}
	f := strings.Fields(string(out))
	if len(f) >= 3 {
		return f[2]
	}
	return strings.TrimSpace(string(out))
}

// readReport reads a benchmarks.json that an earlier run wrote, and checks
// its figures against the targets again.
func readReport(path string) (*Report, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var rep Report
	if err := json.Unmarshal(b, &rep); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	rep.Targets = checkTargets(&rep)
	return &rep, nil
}

// mergeDistance replaces rep's scenario 10 with the one of the report at path, a run of that
// scenario alone, and records when it ran (Report.DistanceMeasured); the targets are checked
// again.
func mergeDistance(rep *Report, path string) error {
	other, err := readReport(path)
	if err != nil {
		return err
	}
	if len(scenarioRows(other.Connect, 10)) == 0 {
		return fmt.Errorf("-merge-distance: %s has no scenario 10", path)
	}
	rep.Connect = slices.DeleteFunc(rep.Connect, func(c ConnectResult) bool { return c.Scenario == 10 })
	for _, c := range other.Connect {
		if c.Scenario == 10 {
			rep.Connect = append(rep.Connect, c)
		}
	}
	rep.DistanceServer, rep.DistanceLibpq = other.DistanceServer, other.DistanceLibpq
	rep.DistanceMeasured = other.Started
	rep.Targets = checkTargets(rep)
	return nil
}

// writeOutputs writes the report, its tables and its charts into dir and
// returns the files written.
func writeOutputs(dir string, rep *Report) ([]string, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	js, err := json.MarshalIndent(rep, "", "  ")
	if err != nil {
		return nil, err
	}
	files := []string{filepath.Join(dir, "benchmarks.json")}
	if err := os.WriteFile(files[0], append(js, '\n'), 0o644); err != nil {
		return nil, err
	}
	md, err := os.Create(filepath.Join(dir, "benchmarks.md"))
	if err != nil {
		return nil, err
	}
	if err := writeMarkdown(md, rep); err != nil {
		md.Close()
		return nil, err
	}
	if err := md.Close(); err != nil {
		return nil, err
	}
	files = append(files, md.Name())
	charts, err := writeCharts(dir, rep)
	if err != nil {
		return nil, err
	}
	for _, c := range charts {
		files = append(files, filepath.Join(dir, c))
	}
	return files, nil
}
