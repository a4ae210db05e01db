package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/pgconnector/pgconnector/internal/harness"
)

// TestMain makes the test binary a client process when the benchmark re-executes it (os.Executable
// is the test binary here), as main does for the command.
func TestMain(m *testing.M) {
	if os.Getenv(childEnv) != "" {
		os.Exit(childMain(os.Stdin, os.Stdout))
	}
	os.Exit(harness.Run(m))
}

// TestQuickRun runs every scenario with the -quick counts against real servers, a real KDC,
// pgbench and psql, and checks what does not depend on the machine's speed: who errs, how many
// backends and TCP connections each peer costs, how many probes reach the server, that bulk
// transfers moved the same bytes, and that the outputs are written.
func TestQuickRun(t *testing.T) {
	out := t.TempDir()
	// On two CPUs or more, clients and servers get their own, as in a real run.
	pin := fmt.Sprintf("-pin=%v", runtime.NumCPU() >= 2)
	// Scenario 10 has a test of its own (TestDistance): it wants the PostgreSQL version the
	// harness runs.
	cfg, err := parseFlags([]string{"-quick", pin, "-out", out, "-scenarios", "1,2,3,4,5,6,7,8,9"})
	if err != nil {
		t.Fatal(err)
	}
	rep, err := run(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	files, err := writeOutputs(out, rep)
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"benchmarks.json", "benchmarks.md", "bench-connect.png", "bench-clientbound.png", "bench-throughput.png", "bench-scram.png"} {
		if _, err := os.Stat(filepath.Join(out, name)); err != nil {
			t.Errorf("%s not written (wrote %v)", name, files)
		}
	}

	get := func(scenario int, peer string, ticket bool, clients int) ConnectResult {
		t.Helper()
		for _, c := range rep.Connect {
			if c.Scenario == scenario && c.Peer == peer && c.Ticket == ticket && (clients == 0 || c.Clients == clients) {
				return c
			}
		}
		t.Fatalf("no result for scenario %d, %s, ticket %v, %d clients", scenario, peer, ticket, clients)
		return ConnectResult{}
	}
	ok := func(c ConnectResult) {
		t.Helper()
		if c.Errors != 0 || c.Conns == 0 || c.ConnsPerSec <= 0 || c.P50 <= 0 || c.P99 < c.P50 || c.CPU <= 0 {
			t.Errorf("scenario %d, %s: %d of %d failed (%s), %.0f/s, p50 %v, p99 %v, CPU %v",
				c.Scenario, c.Peer, c.Errors, c.Conns, c.Error, c.ConnsPerSec, c.P50, c.P99, c.CPU)
		}
	}
	backends := func(c ConnectResult, want float64) {
		t.Helper()
		if c.Backends != want {
			t.Errorf("scenario %d, %s: %.3f backends per connection, want %.2f", c.Scenario, c.Peer, c.Backends, want)
		}
	}
	for s := 1; s <= 3; s++ {
		ticket := s > 1
		warm := get(s, peerWarm, ticket, 0)
		ok(warm)
		backends(warm, 1)
		libpq := get(s, peerLibpqDefault, ticket, 0)
		ok(libpq)
		ok(get(s, peerLibpqExplicit, ticket, 0))
		backends(get(s, peerLibpqExplicit, ticket, 0), 1)
		ok(get(s, "pgconnector cold", ticket, 0))
		pgx := get(s, peerPgxDefault, ticket, 0)
		ok(pgx)
		backends(pgx, 2) // SSLRequest, 'N', a new connection
		if s == 1 {
			backends(libpq, 1) // no ticket: plaintext on the same socket after 'N'
			if c := get(1, "lib/pq default (sslmode=require)", false, 0); c.Errors != c.Conns || !strings.Contains(c.Error, "SSL") {
				t.Errorf("lib/pq with sslmode=require against a server without TLS: %d of %d failed (%s)", c.Errors, c.Conns, c.Error)
			}
		} else {
			backends(libpq, 2) // GSSENCRequest, 'G', a failed context or a rejection, a new connection
		}
	}

	ok(get(4, peerWarm, true, 0))
	ok(get(4, peerLibpqDefault, true, 0))
	if c := get(4, peerPgxDefault, true, 0); c.Errors != c.Conns {
		t.Errorf("pgx against a hostgssenc-only server: %d of %d failed, want all", c.Errors, c.Conns)
	}

	for _, clients := range cfg.fakeClients {
		for _, c := range []struct {
			peer   string
			ticket bool
			tcp    float64
		}{
			{peerDefault, false, 1}, {peerDefault, true, 1}, {peerNoGSS, false, 1},
			{peerLibpqDefault, false, 1}, {peerLibpqDefault, true, 1}, {peerPgxDefault, false, 2},
		} {
			r := get(5, c.peer, c.ticket, clients)
			ok(r)
			if r.TCP != c.tcp {
				t.Errorf("scenario 5, %d clients, %s (ticket %v): %.3f TCP connections per connection, want %.0f", clients, c.peer, c.ticket, r.TCP, c.tcp)
			}
		}
	}

	checkWrap(t, rep.Wrap)
	checkScram(t, cfg, rep)

	herds := 0
	for _, h := range rep.Herd {
		if h.Errors != 0 {
			t.Errorf("herd, %s, %s: %d errors", h.Server, h.Peer, h.Errors)
		}
		switch h.Family {
		case "pgconnector":
			herds++
			wantGSS := map[bool]int{false: 0, true: 1}[h.Ticket]
			if h.SSLRequests != 1 || h.GSSENCRequests != wantGSS {
				t.Errorf("herd, %s: %d SSLRequests and %d GSSENCRequests reached the server, want 1 and %d", h.Server, h.SSLRequests, h.GSSENCRequests, wantGSS)
			}
		case "libpq":
			if h.SSLRequests != h.Clients {
				t.Errorf("herd, %s, libpq: %d SSLRequests for %d connections", h.Server, h.SSLRequests, h.Clients)
			}
		}
	}
	if herds != 2 {
		t.Errorf("%d pgconnector herd results, want 2 (scenarios 1 and 2)", herds)
	}

	if len(rep.Throughput) != 8 { // 2 workloads x 2 transports x (psql, pgconnector)
		t.Fatalf("%d throughput results, want 8", len(rep.Throughput))
	}
	for i := 0; i < len(rep.Throughput); i += 2 {
		psql, pc := rep.Throughput[i], rep.Throughput[i+1]
		if psql.Error != "" || pc.Error != "" || psql.MBPerSec <= 0 || pc.MBPerSec <= 0 {
			t.Errorf("%s over %s: psql %q %.0f MB/s, pgconnector %q %.0f MB/s", psql.Workload, psql.Transport, psql.Error, psql.MBPerSec, pc.Error, pc.MBPerSec)
		}
		if strings.HasPrefix(psql.Workload, "COPY") && psql.Bytes != int64(cfg.copyMiB)<<20 {
			t.Errorf("psql COPY over %s: %d bytes, want %d", psql.Transport, psql.Bytes, int64(cfg.copyMiB)<<20)
		}
		if psql.Bytes != pc.Bytes {
			t.Errorf("%s over %s: psql moved %d bytes, pgconnector %d", psql.Workload, psql.Transport, psql.Bytes, pc.Bytes)
		}
	}

	md, err := os.ReadFile(filepath.Join(out, "benchmarks.md"))
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"smoke", "## Scenario 4: throughput", "## Scenario 6: cold herd", "warm decision path", "**CPUs:**",
		"## Scenario 8: SCRAM through pgbouncer", "## Scenario 8: cold herd of SCRAM logins", "## Scenario 9: " + scenarioTitles[9]} {
		if !strings.Contains(string(md), want) {
			t.Errorf("benchmarks.md has no %q", want)
		}
	}
}

// checkScram checks scenarios 8 and 9 of a quick run: every peer connects without an error as
// either role through pgbouncer and over TLS with SCRAM, one backend per connection over TLS,
// and a cold herd without errors whose derivations, where the connector counts them, are at
// least one and at most one per connection.
func checkScram(t *testing.T, cfg config, rep *Report) {
	t.Helper()
	get := func(scenario int, peer, user string, clients int) ConnectResult {
		t.Helper()
		for _, c := range rep.Connect {
			if c.Scenario == scenario && c.Peer == peer && c.User == user && c.Clients == clients {
				return c
			}
		}
		t.Fatalf("no result for scenario %d, %s, role %q, %d clients", scenario, peer, user, clients)
		return ConnectResult{}
	}
	for _, user := range []string{userTrust, userScram} {
		for _, clients := range cfg.scramClients {
			for _, peer := range []string{peerLibpqDefault, peerLibpqExplicit, peerPgxDefault, peerPgxExplicit, peerDefault} {
				c := get(8, peer, user, clients)
				if c.Errors != 0 || c.ConnsPerSec <= 0 || c.P50 <= 0 || c.P99 < c.P50 || c.CPU <= 0 {
					t.Errorf("scenario 8, %s, %s, %d clients: %d of %d failed (%s), %.0f/s, p50 %v, p99 %v, CPU %v",
						user, peer, clients, c.Errors, c.Conns, c.Error, c.ConnsPerSec, c.P50, c.P99, c.CPU)
				}
			}
		}
	}
	for _, clients := range cfg.tlsClients {
		for _, peer := range []string{peerLibpqRequire, peerLibpqVerify, peerPgxRequire, peerPgxVerify, peerPcRequire, peerPcVerify} {
			c := get(9, peer, "", clients)
			if c.Errors != 0 || c.ConnsPerSec <= 0 || c.P50 <= 0 || c.CPU <= 0 || c.Backends != 1 {
				t.Errorf("scenario 9, %s, %d clients: %d of %d failed (%s), %.0f/s, p50 %v, CPU %v, %.3f backends per connection",
					peer, clients, c.Errors, c.Conns, c.Error, c.ConnsPerSec, c.P50, c.CPU, c.Backends)
			}
		}
	}
	if len(rep.ScramHerd) != 3 {
		t.Fatalf("%d results of the SCRAM cold herd, want 3 (libpq, pgx, pgconnector)", len(rep.ScramHerd))
	}
	for _, h := range rep.ScramHerd {
		if h.Errors != 0 || h.Clients < cfg.herd || h.CPU <= 0 || h.Seconds <= 0 {
			t.Errorf("SCRAM cold herd, %s: %d of %d failed (%s), CPU %v, %.3fs", h.Peer, h.Errors, h.Clients, h.Error, h.CPU, h.Seconds)
		}
		if d := h.Derivations; d != nil && (h.Family != "pgconnector" || *d < 1 || *d > int64(h.Clients)) {
			t.Errorf("SCRAM cold herd, %s: %d SCRAM derivations for %d connections", h.Peer, *d, h.Clients)
		}
	}
}

func TestParseFlags(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string // part of the error; "" for none
	}{
		{nil, ""},
		{[]string{"-scenarios", "1,14"}, `-scenarios: "14" is not a number from 1 to 13`},
		{[]string{"-merge-fleet", "x.json"}, "-merge-fleet: only with -render"},
		{[]string{"-merge-oauth", "x.json"}, "-merge-oauth: only with -render"},
		{[]string{"-render", "x.json", "-merge-oauth", "y.json", "-oauth-gobench", "z.txt"}, ""},
		{[]string{"-render", "x.json", "-merge-fleet", "y.json"}, ""},
		{[]string{"-stmt-ops", "0"}, "-stmt-ops must be at least 1"},
		{[]string{"-merge-statement", "x.json"}, "-merge-statement: only with -render"},
		{[]string{"-scenarios", "distance,1"}, ""},
		{[]string{"-distance-delays", "0,-5"}, `-distance-delays: "-5" is not a number from 0 to 1000`},
		{[]string{"-distance-conns", "0"}, "-distance-conns must be at least 1"},
		{[]string{"-pg-major", "9"}, "-pg-major: 9 is before PostgreSQL 15"},
		{[]string{"-scenarios", "scram,5"}, ""},
		{[]string{"-scram-clients", "1,0"}, `-scram-clients: "0"`},
		{[]string{"-tls-clients", "200"}, `-tls-clients: "200" is not a number from 1 to 150`},
		{[]string{"-tls-conns", "0"}, "-tls-conns must be at least 1"},
		{[]string{"-scenarios", "one"}, `-scenarios: "one"`},
		{[]string{"-fake-clients", "0"}, `-fake-clients: "0"`},
		{[]string{"-conns", "0"}, "-conns must be at least 1"},
		{[]string{"-bytea-mib", "512"}, "-bytea-mib between 0 and 256"},
		{[]string{"extra"}, `unexpected argument "extra"`},
	} {
		_, err := parseFlags(tc.args)
		switch {
		case tc.want == "" && err != nil:
			t.Errorf("parseFlags(%q): %v", tc.args, err)
		case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)):
			t.Errorf("parseFlags(%q) = %v, want an error with %q", tc.args, err, tc.want)
		}
	}
	// "scram" stands for the SCRAM scenarios, so that they can run alone.
	c, err := parseFlags([]string{"-scenarios", "scram"})
	if err != nil || !slices.Equal(c.scenarios, []int{8, 9}) {
		t.Errorf("-scenarios scram: %v, %v; want scenarios 8 and 9", c.scenarios, err)
	}
	c, err = parseFlags([]string{"-scenarios", "distance"})
	if err != nil || !slices.Equal(c.scenarios, []int{10}) {
		t.Errorf("-scenarios distance: %v, %v; want scenario 10", c.scenarios, err)
	}
	c, err = parseFlags([]string{"-scenarios", "stmt"})
	if err != nil || !slices.Equal(c.scenarios, []int{11}) {
		t.Errorf("-scenarios stmt: %v, %v; want scenario 11", c.scenarios, err)
	}
	c, err = parseFlags([]string{"-scenarios", "fleet"})
	if err != nil || !slices.Equal(c.scenarios, []int{12}) {
		t.Errorf("-scenarios fleet: %v, %v; want scenario 12", c.scenarios, err)
	}
	c, err = parseFlags([]string{"-scenarios", "oauth"})
	if err != nil || !slices.Equal(c.scenarios, []int{13}) {
		t.Errorf("-scenarios oauth: %v, %v; want scenario 13", c.scenarios, err)
	}
	c, err = parseFlags(nil)
	if err != nil || !slices.Equal(c.scenarios, []int{1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13}) || !slices.Equal(c.scramClients, []int{1, 8, 64}) ||
		!slices.Equal(c.distanceDelays, []int{0, 5, 25}) || c.pgMajor != 18 {
		t.Errorf("defaults: scenarios %v, SCRAM clients %v, delays %v, PostgreSQL %d, %v", c.scenarios, c.scramClients, c.distanceDelays, c.pgMajor, err)
	}
}

// pairedRatio takes the median of the per-round ratios, and the pooled ratio when the rounds do
// not pair up.
func TestPairedRatio(t *testing.T) {
	a := &ConnectResult{ConnsPerSec: 300, RoundRates: []float64{300, 200, 330, 100}}
	b := &ConnectResult{ConnsPerSec: 150, RoundRates: []float64{100, 200, 110, 100}}
	if m, lo, hi := pairedRatio(a, b); m != 2 || lo != 1 || hi != 3 { // ratios 3, 1, 3, 1
		t.Errorf("pairedRatio = %v, %v, %v; want 2, 1, 3", m, lo, hi)
	}
	b.RoundRates = b.RoundRates[:3]
	if m, lo, hi := pairedRatio(a, b); m != 2 || lo != 2 || hi != 2 {
		t.Errorf("unpaired: pairedRatio = %v, %v, %v; want the pooled 2", m, lo, hi)
	}
}

// -render reads a benchmarks.json and checks its figures against the targets again, so that a
// report can be re-rendered without measuring.
func TestRender(t *testing.T) {
	rep := Report{
		Connect: []ConnectResult{
			{Scenario: 1, Peer: peerWarm, Family: "pgconnector", Clients: 4, Conns: 10, ConnsPerSec: 200, Backends: 1, RoundRates: []float64{190, 210}},
			{Scenario: 1, Peer: peerPgxDefault, Family: "pgx", Clients: 4, Conns: 10, ConnsPerSec: 100, Backends: 2, RoundRates: []float64{100, 100}},
		},
		WarmDecision: []Target{{Name: "warm decision path: time", Want: "< 1 µs", Got: "120 ns", Met: true}},
		Targets:      []Target{{Name: "stale"}},
	}
	dir := t.TempDir()
	if _, err := writeOutputs(dir, &rep); err != nil {
		t.Fatal(err)
	}
	got, err := readReport(filepath.Join(dir, "benchmarks.json"))
	if err != nil {
		t.Fatal(err)
	}
	want := []Target{
		{Name: "scenario 1: pgconnector warm / pgx default, connections/s", Want: ">= 1.80x", Got: "2.00x (rounds 1.90-2.10)", Met: true},
		{Name: "scenario 1: pgconnector warm, backends per connection", Want: "1.00", Got: "1.000", Met: true},
		rep.WarmDecision[0],
	}
	if fmt.Sprint(got.Targets) != fmt.Sprint(want) {
		t.Errorf("targets after -render:\n got %v\nwant %v", got.Targets, want)
	}
	if _, err := readReport(filepath.Join(dir, "benchmarks.md")); err == nil || !strings.Contains(err.Error(), "benchmarks.md") {
		t.Errorf("reading markdown as a report: %v, want an error naming the file", err)
	}
}

// checkWrap checks scenario 7's figures: every enctype internal/gss seals
// with, each rate measured, each floor below both of its primitives.
func checkWrap(t *testing.T, rows []WrapResult) {
	t.Helper()
	if len(rows) != len(wrapEnctypes) {
		t.Fatalf("%d wrap results, want %d", len(rows), len(wrapEnctypes))
	}
	for i, w := range rows {
		if want := wrapEnctypes[i].hmac; w.HMAC != want || !strings.HasPrefix(w.Enctype, "aes") {
			t.Errorf("wrap result %d: enctype %q with HMAC %q, want an aes enctype with %s", i, w.Enctype, w.HMAC, want)
		}
		if w.CBCEncrypt <= 0 || w.CBCDecrypt <= 0 || w.HMACRate <= 0 || w.Wrap <= 0 || w.Unwrap <= 0 {
			t.Errorf("%s: a rate was not measured: %+v", w.Enctype, w)
		}
		if w.FloorWrap >= min(w.CBCEncrypt, w.HMACRate) || w.FloorUnwrap >= min(w.CBCDecrypt, w.HMACRate) || w.FloorWrap <= 0 {
			t.Errorf("%s: floor %.0f / %.0f not below its primitives: %+v", w.Enctype, w.FloorWrap, w.FloorUnwrap, w)
		}
	}
}

// TestWrapRates measures scenario 7 with the -quick benchmark time.
func TestWrapRates(t *testing.T) {
	checkWrap(t, wrapRates(true))
}

// A storm of scenarios 8 and 9 gives each client two connections a round at least: with many
// clients it has fewer rounds, and more connections only when one round is too many.
func TestStormShape(t *testing.T) {
	for _, tc := range []struct{ conns, clients, rounds, wantRounds, wantConns int }{
		{600, 1, 10, 10, 600},
		{600, 8, 10, 10, 600},
		{600, 64, 10, 4, 600},
		{30, 64, 1, 1, 128},
		{100, 4, 4, 4, 100},
		{600, 500, 10, 1, 1000},
	} {
		r, n := stormShape(tc.conns, tc.clients, tc.rounds)
		if r != tc.wantRounds || n != tc.wantConns {
			t.Errorf("stormShape(%d, %d, %d) = %d rounds, %d connections; want %d, %d", tc.conns, tc.clients, tc.rounds, r, n, tc.wantRounds, tc.wantConns)
		}
		if per := n / r / tc.clients; per < 2 {
			t.Errorf("stormShape(%d, %d, %d): %d connections per client and round", tc.conns, tc.clients, tc.rounds, per)
		}
	}
}

// TestDistance runs scenario 10 with small counts against PostgreSQL 18 and libpq 18 (as the
// benchmark command does by default), the sslnegotiation=direct peers included: every peer
// connects over TLS with both roles, in one backend per connection, and pays at least the
// round trips of a TLS connection through the delay proxy.
func TestDistance(t *testing.T) {
	ctx := context.Background()
	const major = 18
	const delayMs = 5
	out := t.TempDir()
	cfg, err := parseFlags([]string{"-scenarios", "distance", "-distance-delays", fmt.Sprint(delayMs), "-distance-conns", "4",
		"-rounds", "1", "-pg-major", fmt.Sprint(major), fmt.Sprintf("-pin=%v", runtime.NumCPU() >= 2), "-out", out})
	if err != nil {
		t.Fatal(err)
	}
	rep, err := run(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := writeOutputs(out, rep); err != nil {
		t.Fatal(err)
	}
	peers := []string{peerDefault, peerLibpqDefault, peerPgxDefault}
	if !strings.HasPrefix(rep.DistanceLibpq, "libpq 18 ") {
		t.Errorf("libpq: %q, want libpq 18", rep.DistanceLibpq)
	}
	peers = append(peers, peerLibpqDirect, peerPgxDirect)
	rows := scenarioRows(rep.Connect, 10)
	if len(rows) != 2*len(peers) {
		t.Errorf("%d rows in scenario 10, want %d (2 roles, peers %q)", len(rows), 2*len(peers), peers)
	}
	// TCP, then the TLS handshake and the startup (SSLRequest before them, or SCRAM after):
	// three round trips at the least.
	const floor = 3 * 2 * delayMs * time.Millisecond
	for _, user := range []string{userTrust, userScram} {
		for _, peer := range peers {
			i := slices.IndexFunc(rows, func(c ConnectResult) bool { return c.User == user && c.Peer == peer })
			if i < 0 {
				t.Errorf("scenario 10: no row for %s, %s", user, peer)
				continue
			}
			c := rows[i]
			if c.Errors != 0 || c.Delay != delayMs*time.Millisecond || c.P50 < floor || c.P99 < c.P50 || c.Backends != 1 {
				t.Errorf("scenario 10, %s, %s: %d of %d failed (%s), delay %v, p50 %v (at least %v), p99 %v, %.3f backends per connection",
					user, peer, c.Errors, c.Conns, c.Error, c.Delay, c.P50, floor, c.P99, c.Backends)
			}
		}
	}
	md, err := os.ReadFile(filepath.Join(out, "benchmarks.md"))
	if err != nil {
		t.Fatal(err)
	}
	if want := fmt.Sprintf("Server: PostgreSQL %d", major); !strings.Contains(string(md), want) {
		t.Errorf("benchmarks.md has no %q", want)
	}
}

// TestStatementPath runs scenario 11 alone with the -quick counts (neither the KDC nor pgbench is
// needed): every peer runs its statements without an error and allocates, the untraced ones make
// no span, and each traced peer's spans and db.client.operation.duration are recorded; the
// report has the scenario's section and its two targets.
func TestStatementPath(t *testing.T) {
	cfg, rep, out := quickRun(t, "stmt")
	peers := stmtPeers("")
	if len(rep.Statement) != len(peers) {
		t.Fatalf("%d results of scenario 11, want %d", len(rep.Statement), len(peers))
	}
	for i, s := range rep.Statement {
		if s.Peer != peers[i].Name || s.Errors != 0 || s.Ops != cfg.stmtOps/cfg.rounds*cfg.rounds || s.Allocs == 0 || s.AllocBytes == 0 ||
			s.CPU <= 0 || s.Seconds <= 0 || len(s.RoundCPU) != cfg.rounds || len(s.RoundNs) != cfg.rounds {
			t.Errorf("scenario 11, %s: %+v", peers[i].Name, s)
		}
	}
	if len(rep.StatementSpans) != 6 {
		t.Fatalf("%d traced peers' spans, want 6", len(rep.StatementSpans))
	}
	for _, s := range rep.StatementSpans {
		if s.Error != "" || len(s.Spans) == 0 {
			t.Errorf("spans of %s: %+v", s.Peer, s)
		}
		query := slices.ContainsFunc(s.Spans, func(sp SpanShape) bool {
			return sp.Kind == "client" && slices.Contains(sp.Attributes, "db.query.text")
		})
		duration := slices.ContainsFunc(s.Metrics, func(m string) bool { return strings.HasPrefix(m, "db.client.operation.duration ") })
		if !query || !duration {
			t.Errorf("%s: a client span with db.query.text %v, db.client.operation.duration %v: %+v", s.Peer, query, duration, s)
		}
	}
	n := 0
	for _, tg := range rep.Targets {
		if strings.HasPrefix(tg.Name, "Statement path, ") {
			n++
		}
	}
	if n != 2 {
		t.Errorf("%d statement path targets, want 2: %v", n, rep.Targets)
	}
	md, err := os.ReadFile(filepath.Join(out, "benchmarks.md"))
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"## Scenario 11: " + scenarioTitles[11], peerStmtOtelpgx, "sql.conn.query", "attribute keys of otelsql's spans"} {
		if !strings.Contains(string(md), want) {
			t.Errorf("benchmarks.md has no %q", want)
		}
	}
}

// TestFleet runs scenario 12 alone with the -quick counts and checks what does not depend on the
// machine's speed: every peer connects; pgconnector opens one backend per connect with the
// standby first and looks the name up once, libpq two backends, pgx a lookup per connect at the
// least; after the failover pgconnector connects again and never reaches a read-only session.
func TestFleet(t *testing.T) {
	_, rep, _ := quickRun(t, "fleet")
	if len(rep.Fleet) != 12 {
		t.Errorf("%d rows of scenario 12, want 12", len(rep.Fleet))
	}
	for _, r := range rep.Fleet {
		if r.Part != fleetFailover && (r.Errors != 0 || r.P50 <= 0) {
			t.Errorf("scenario 12, %s, %s: %d of %d failed (%s), p50 %v", r.Part, r.Peer, r.Errors, r.Conns, r.Error, r.P50)
		}
	}
	if r := fleetRow(rep.Fleet, fleetStandby, "pgconnector"); r == nil || r.Backends != 1 {
		t.Errorf("standby first, pgconnector: %+v, want 1 backend per connect", r)
	}
	if r := fleetRow(rep.Fleet, fleetStandby, "libpq (pgbench -C)"); r == nil || r.Backends != 2 {
		t.Errorf("standby first, libpq: %+v, want 2 backends per connect", r)
	}
	if r := fleetRow(rep.Fleet, fleetResolver, "pgconnector, resolver 50 ms"); r == nil || r.Processes < 1 || r.Lookups != int64(r.Processes) {
		t.Errorf("slow resolver, pgconnector: %+v, want 1 lookup per process", r)
	}
	if r := fleetRow(rep.Fleet, fleetResolver, "pgx, resolver 50 ms"); r == nil || r.Lookups < int64(r.Conns) {
		t.Errorf("slow resolver, pgx: %+v, want a lookup per connect at the least", r)
	}
	if r := fleetRow(rep.Fleet, fleetFailover, "pgconnector"); r == nil || !r.Recovered || r.WrongRole != 0 {
		t.Errorf("failover, pgconnector: %+v, want a connect after the promotion and no read-only session", r)
	}
}

// TestOAuth runs scenario 13 with the -quick counts against PostgreSQL 18 with the harness's
// validator and issuer, and checks what does not depend on the machine's speed: every peer
// connects without an error over verify-full TLS, the backends per connect (two for libpq with
// oauth_issuer = the issuer, which reconnects after the discovery answer; one for every other
// peer, the connector's cached token included), a row per peer and client count, the target
// line, and the section in benchmarks.md.
func TestOAuth(t *testing.T) {
	cfg, rep, out := quickRun(t, "oauth")
	rows := scenarioRows(rep.Connect, 13)
	if len(rows) != 7*len(cfg.tlsClients) {
		t.Fatalf("%d rows of scenario 13, want %d", len(rows), 7*len(cfg.tlsClients))
	}
	for _, c := range rows {
		want := 1.0
		if c.Peer == peerLibpqOAuthIssuer {
			want = 2
		}
		if c.Errors != 0 || c.ConnsPerSec <= 0 || c.CPU <= 0 || c.Backends != want || (c.Family != "libpq") != (c.P50 > 0) {
			t.Errorf("scenario 13, %s (%s), %d clients: %d of %d failed (%s), %.0f/s, p50 %v, CPU %v, %.3f backends per connection, want %v",
				c.Peer, c.User, c.Clients, c.Errors, c.Conns, c.Error, c.ConnsPerSec, c.P50, c.CPU, c.Backends, want)
		}
		if (c.User == userOAuth) == slices.Contains([]string{peerLibpqOAuthTrust, peerPgxOAuthTrust, peerPcOAuthTrust}, c.Peer) {
			t.Errorf("scenario 13, %s: role's authentication %q", c.Peer, c.User)
		}
	}
	if !slices.ContainsFunc(rep.Targets, func(tg Target) bool {
		return strings.HasPrefix(tg.Name, "scenario 13, 1 client: pgconnector cached OAuth token")
	}) {
		t.Errorf("no scenario 13 target in %v", rep.Targets)
	}
	md, err := os.ReadFile(filepath.Join(out, "benchmarks.md"))
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(md), "## Scenario 13: OAuth over TLS") {
		t.Error("benchmarks.md has no scenario 13")
	}
}

// quickRun runs the scenarios of -scenarios with the -quick counts (clients and servers on their
// own CPUs where there are two or more) and writes the outputs into out.
func quickRun(t *testing.T, scenarios string) (config, *Report, string) {
	t.Helper()
	out := t.TempDir()
	cfg, err := parseFlags([]string{"-quick", "-scenarios", scenarios, fmt.Sprintf("-pin=%v", runtime.NumCPU() >= 2), "-out", out})
	if err != nil {
		t.Fatal(err)
	}
	rep, err := run(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := writeOutputs(out, rep); err != nil {
		t.Fatal(err)
	}
	return cfg, rep, out
}
