package main

import (
	"bytes"
	"fmt"
	"image/png"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"
)

// sampleReport returns a report with every section filled: four connect
// scenarios (one with a row whose every connection failed), scenario 5 with
// and without a ticket at 1, 8 and 64 clients, throughput, herd, wrap rates and targets.
func sampleReport() *Report {
	ms := func(f float64) time.Duration { return time.Duration(f * float64(time.Millisecond)) }
	us := func(f float64) time.Duration { return time.Duration(f * float64(time.Microsecond)) }
	r := &Report{
		Machine: Machine{
			CPU: "AMD EPYC 7B13", Cores: 16, MemoryGiB: 62, Kernel: "6.1.0-18-amd64",
			OS: "Debian GNU/Linux 12 (bookworm)", Go: "go1.26.8", PostgreSQL: "15.18",
			Pgbench: "pgbench (PostgreSQL) 15.18", Krb5: "1.20.1",
			Modules: "pgx v5.7.2, lib/pq v1.10.9, gokrb5 v8.4.4",
		},
		Started:  time.Date(2026, 3, 1, 15, 4, 59, 0, time.FixedZone("CET", 3600)),
		Duration: 754*time.Second + 400*time.Millisecond,
		Targets: []Target{
			{Name: "scenario 1: pgconnector warm / libpq default", Want: ">= 1.80x", Got: "1.93x", Met: true},
			{Name: "scenario 4: COPY out MB/s pgconnector / psql", Want: ">= 0.90x", Got: "0.71x", Met: false},
		},
	}
	peers := []struct{ peer, family string }{
		{"libpq default (pgbench -C)", "libpq"},
		{"pgx", "pgx"},
		{"lib/pq", "lib/pq"},
		{"pgconnector cold", "pgconnector"},
		{"pgconnector warm", "pgconnector"},
	}
	for n := 1; n <= 4; n++ {
		for i, p := range peers {
			c := ConnectResult{
				Scenario: n, Peer: p.peer, Family: p.family, Clients: 8, Ticket: n > 1,
				Conns: 2000, Seconds: 1.5,
				ConnsPerSec: float64(900*(i+1)) / float64(n),
				P50:         ms(1.234 * float64(n)), P99: ms(4.5 * float64(n)),
				CPU: us(180 + 10*float64(i)),
			}
			if n >= 2 {
				c.Backends = 1 + float64(i%2)
				c.TCP = 1.5
			}
			r.Connect = append(r.Connect, c)
		}
	}
	r.Connect = append(r.Connect, ConnectResult{
		Scenario: 2, Peer: "lib/pq sslmode=require", Family: "lib/pq", Clients: 8, Ticket: true,
		Conns: 2000, Errors: 2000, Seconds: 0.2,
		Error: "pq: SSL is not enabled on the server | retry\nsecond line",
	})
	for _, p := range []struct {
		peer, family string
		cpu          float64
	}{{"pgx", "pgx", 95}, {"pgconnector", "pgconnector", 40}} {
		for _, ticket := range []bool{false, true} {
			for _, clients := range []int{64, 1, 8} {
				extra := 0.0
				if ticket {
					extra = 60
				}
				r.Connect = append(r.Connect, ConnectResult{
					Scenario: 5, Peer: p.peer, Family: p.family, Clients: clients, Ticket: ticket,
					Conns: 20000, Seconds: 1,
					ConnsPerSec: float64(clients) * 10000 / (p.cpu + extra),
					P50:         us(450), P99: ms(1.5),
					TCP: 1,
					CPU: us(p.cpu + extra),
				})
			}
		}
	}
	for _, w := range []string{"COPY out 256 MiB", "bytea 64 MiB round trip"} {
		for _, pr := range []struct{ peer, family string }{{"psql (libpq)", "libpq"}, {"pgconnector", "pgconnector"}} {
			for i, tr := range []string{"GSS", "TLS"} {
				r.Throughput = append(r.Throughput, ThroughputResult{
					Workload: w, Peer: pr.peer, Family: pr.family, Transport: tr,
					Bytes: 256 << 20, Seconds: 0.4 + 0.2*float64(i), MBPerSec: 671.1 - 200*float64(i),
					CPU: 350 * time.Millisecond,
				})
			}
		}
	}
	r.Throughput = append(r.Throughput, ThroughputResult{
		Workload: "COPY out 256 MiB", Peer: "pgx", Family: "pgx", Transport: "GSS",
		Error: "pgx does not support GSS encryption",
	})
	r.Herd = []HerdResult{
		{Peer: "libpq default", Family: "libpq", Server: "scenario 3", Ticket: true, Clients: 64,
			SSLRequests: 64, GSSENCRequests: 64, TCP: 128, Backends: 128},
		{Peer: "pgconnector", Family: "pgconnector", Server: "scenario 3", Ticket: true, Clients: 64,
			SSLRequests: 1, GSSENCRequests: 1, TCP: 66, Backends: 66, Errors: 2},
	}
	for _, user := range []string{userTrust, userScram} {
		for _, clients := range []int{1, 8} {
			for i, p := range []struct{ peer, family string }{{peerPgxExplicit, "pgx"}, {peerDefault, "pgconnector"}} {
				cpu := 300.0 + 100*float64(clients)
				if user == userScram && i == 0 {
					cpu += 1100
				}
				r.Connect = append(r.Connect, ConnectResult{
					Scenario: 8, Peer: p.peer, Family: p.family, Clients: clients, User: user,
					Conns: 600, Seconds: 1, ConnsPerSec: 1e6 / cpu * float64(min(clients, 2)),
					P50: us(cpu), P99: ms(2), CPU: us(cpu),
				})
			}
		}
	}
	r.Connect = append(r.Connect, ConnectResult{
		Scenario: 9, Peer: peerPcVerify, Family: "pgconnector", Clients: 1,
		Conns: 200, Seconds: 5, ConnsPerSec: 40, P50: ms(25), P99: ms(40), Backends: 1, CPU: us(2500),
	})
	one := int64(1)
	r.ScramHerd = []ScramHerdResult{
		{Peer: peerPgxDefault, Family: "pgx", Clients: 64, Seconds: 0.088, CPU: 88 * time.Millisecond},
		{Peer: peerPcHerd, Family: "pgconnector", Clients: 64, Seconds: 0.02, CPU: 9500 * time.Microsecond, Derivations: &one},
		{Peer: peerPcHerd + ", old", Family: "pgconnector", Clients: 64, Errors: 1, Error: "boom", Seconds: 0.09, CPU: 90 * time.Millisecond},
	}
	r.Wrap = []WrapResult{{Enctype: "aes256-cts-hmac-sha1-96", CBCEncrypt: 758, CBCDecrypt: 1477, HMAC: "SHA-1",
		HMACRate: 1893, FloorWrap: 541.3, FloorUnwrap: 830, Wrap: 650, Unwrap: 818}}
	return r
}

// TestWriteMarkdownReport checks the sections, figures and escaping of the
// markdown written for a full report.
func TestWriteMarkdownReport(t *testing.T) {
	var b bytes.Buffer
	if err := writeMarkdown(&b, sampleReport()); err != nil {
		t.Fatal(err)
	}
	md := b.String()
	lines := strings.Split(md, "\n")
	want := []string{
		"# Benchmarks",
		"Measured 2026-03-01 14:04 UTC; the run took 12m34s.",
		"- **Hardware:** AMD EPYC 7B13, 16 cores, 62 GiB memory",
		"| Name | Want | Measured | Met |",
		"| scenario 1: pgconnector warm / libpq default | >= 1.80x | 1.93x | yes |",
		"| scenario 4: COPY out MB/s pgconnector / psql | >= 0.90x | 0.71x | **no** |",
		"![connections per second](bench-connect.png)",
		"## Scenario 1: " + scenarioTitles[1],
		// Scenario 1 measured neither backends nor TCP connections.
		"| Peer | Clients | Connections/s | p50 connect | p99 connect | Client CPU/conn | Errors |",
		"| libpq default (pgbench -C) | 8 | 900 | 1.23 ms | 4.50 ms | 180 µs | 0 of 2000 |",
		"## Scenario 2: " + scenarioTitles[2],
		"| Peer | Clients | Connections/s | p50 connect | p99 connect | Backends/conn | TCP/conn | Client CPU/conn | Errors |",
		"| pgx | 8 | 900 | 2.47 ms | 9.00 ms | 2.00 | 1.50 | 190 µs | 0 of 2000 |",
		"| lib/pq sslmode=require | 8 | – | – | – | – | – | – | 2000 of 2000: pq: SSL is not enabled on the server \\| retry second line |",
		"## Scenario 5: " + scenarioTitles[5],
		"| Peer | Clients | Ticket | Connections/s | p50 connect | p99 connect | TCP/conn | Client CPU/conn | Errors |",
		"| pgx | 64 | yes | 4129 | 450 µs | 1.50 ms | 1.00 | 155 µs | 0 of 20000 |",
		"| Peer | conn/s at 1 client | conn/s at 8 clients | conn/s at 64 clients | CPU µs/conn at 1 client | CPU µs/conn at 8 clients | CPU µs/conn at 64 clients |",
		"| pgconnector | 250 | 2000 | 16000 | 40 | 40 | 40 |",
		"| pgconnector, ticket | 100 | 800 | 6400 | 100 | 100 | 100 |",
		"![client-bound](bench-clientbound.png)",
		"## Scenario 4: throughput",
		"| Workload | Peer | Transport | MB/s | Seconds | Client CPU (s) | Error |",
		"| COPY out 256 MiB | psql (libpq) | TLS | 471 | 0.60 | 0.35 |  |",
		"| COPY out 256 MiB | pgx | GSS | – | – | – | pgx does not support GSS encryption |",
		"![throughput](bench-throughput.png)",
		"## Scenario 6: cold herd",
		"| Server | Ticket | Peer | Clients | SSLRequests | GSSENCRequests | TCP connections | Backends | Errors |",
		"| scenario 3 | yes | pgconnector | 64 | 1 | 1 | 66 | 66 | 2 |",
		"## Scenario 7: GSS wrap and unwrap per core",
		"| Enctype | AES-CBC encrypt / decrypt | HMAC | Floor wrap / unwrap | Wrap | Unwrap |",
		"| aes256-cts-hmac-sha1-96 | 758 / 1477 | 1893 (SHA-1) | 541 / 830 | **650** (1.20x floor) | **818** (0.99x floor) |",
		"## Scenario 8: " + scenarioTitles[8],
		"| Peer | Clients | Role's authentication | Connections/s | p50 connect | p99 connect | Client CPU/conn | Errors |",
		"| pgconnector default | 8 | scram-sha-256 | 1818 | 1.10 ms | 2.00 ms | 1100 µs | 0 of 600 |",
		"| Peer | conn/s at 1 client | conn/s at 8 clients | CPU µs/conn at 1 client | CPU µs/conn at 8 clients |",
		"| pgx sslmode=disable, scram-sha-256 | 667 | 909 | 1500 | 2200 |",
		"| pgconnector default, scram-sha-256 | 2500 | 1818 | 400 | 1100 |",
		"![SCRAM through pgbouncer](bench-scram.png)",
		"## Scenario 8: cold herd of SCRAM logins",
		"| Peer | Clients | Wall time | Client CPU | Client CPU/conn | SCRAM derivations | Errors |",
		"| pgx default | 64 | 88 ms | 88.0 ms | 1375 µs | – | 0 of 64 |",
		"| pgconnector (one Connector, cold) | 64 | 20 ms | 9.5 ms | 148 µs | 1 | 0 of 64 |",
		"| pgconnector (one Connector, cold), old | 64 | 90 ms | 90.0 ms | 1406 µs | n/a | 1 of 64: boom |",
		"## Scenario 9: " + scenarioTitles[9],
		"| Peer | Clients | Connections/s | p50 connect | p99 connect | Backends/conn | Client CPU/conn | Errors |",
		"| pgconnector sslmode=verify-full | 1 | 40 | 25.00 ms | 40.00 ms | 1.00 | 2500 µs | 0 of 200 |",
	}
	last := -1
	for _, w := range want {
		i := slices.Index(lines, w)
		if i < 0 {
			t.Errorf("markdown lacks line %q", w)
			continue
		}
		if i < last {
			t.Errorf("line %q is out of order", w)
		}
		last = i
	}
	if strings.Contains(md, "**Quick run") {
		t.Error("a full run is marked quick")
	}
	if strings.Contains(md, "## Scenario 3: "+scenarioTitles[3]+"\n\n| Peer | Clients | Ticket") {
		t.Error("scenario 3 has a Ticket column")
	}
	if t.Failed() {
		t.Logf("markdown:\n%s", md)
	}
}

// The targets of scenario 8: a SCRAM role's rate and CPU against pgx's sslmode=disable and
// libpq's default at 1 and 8 clients, a trust role's against pgx's, and one derivation in the
// cold herd (a herd whose derivations were not measured says n/a and misses).
func TestScramTargets(t *testing.T) {
	r := sampleReport()
	r.Connect = append(r.Connect, ConnectResult{Scenario: 8, Peer: peerLibpqDefault, Family: "libpq", Clients: 1, User: userScram,
		Conns: 600, ConnsPerSec: 300, CPU: 4 * time.Millisecond})
	got := map[string]Target{}
	for _, tg := range checkTargets(r) {
		if strings.HasPrefix(tg.Name, "scenario 8") {
			got[tg.Name] = tg
		}
	}
	for _, w := range []Target{
		{Name: "scenario 8, scram-sha-256, 1 client: pgconnector default / pgx sslmode=disable, connections/s", Want: ">= 2.50x", Got: "3.75x", Met: true},
		{Name: "scenario 8, scram-sha-256, 1 client: pgconnector default / libpq default, connections/s", Want: ">= 6.00x", Got: "8.33x", Met: true},
		{Name: "scenario 8, scram-sha-256, 1 client: pgconnector default / pgx sslmode=disable, client CPU per connection", Want: "<= 0.35x", Got: "0.27x (400 µs / 1500 µs)", Met: true},
		{Name: "scenario 8, scram-sha-256, 8 clients: pgconnector default / pgx sslmode=disable, client CPU per connection", Want: "<= 0.35x", Got: "0.50x (1100 µs / 2200 µs)", Met: false},
		{Name: "scenario 8, trust, 8 clients: pgconnector default / pgx sslmode=disable, connections/s", Want: ">= 1.00x", Got: "1.00x", Met: true},
		{Name: "scenario 8, trust, 1 client: pgconnector default / pgx sslmode=disable, client CPU per connection", Want: "<= 1.05x", Got: "1.00x (400 µs / 400 µs)", Met: true},
		{Name: "scenario 8, cold herd, pgconnector (one Connector, cold): SCRAM derivations (PBKDF2) for 64 concurrent first connections", Want: "1", Got: "1", Met: true},
		{Name: "scenario 8, cold herd, pgconnector (one Connector, cold), old: SCRAM derivations (PBKDF2) for 64 concurrent first connections", Want: "1",
			Got: "n/a (the connector exports no pgconnector.scram.derivations), 1 of 64 connections failed", Met: false},
	} {
		if g, ok := got[w.Name]; !ok || g != w {
			t.Errorf("target %q:\n got %+v\nwant %+v", w.Name, g, w)
		}
	}
	if _, ok := got["scenario 8, scram-sha-256, 8 clients: pgconnector default / libpq default, connections/s"]; ok {
		t.Error("a target against libpq at 8 clients, which the report does not have")
	}
}

// TestWriteMarkdownQuickAndErrors checks the quick-run warning, latencies
// under a millisecond, and that a long first error is cut to 80 characters.
func TestWriteMarkdownQuickAndErrors(t *testing.T) {
	long := strings.Repeat("x", 100)
	r := &Report{Quick: true, Connect: []ConnectResult{
		{Scenario: 3, Peer: "p", Family: "pgx", Clients: 1, Conns: 10, Errors: 3, Error: long,
			ConnsPerSec: 1234.56, P50: 987 * time.Microsecond, P99: time.Millisecond, CPU: 1500 * time.Nanosecond},
	}}
	var b bytes.Buffer
	if err := writeMarkdown(&b, r); err != nil {
		t.Fatal(err)
	}
	md := b.String()
	for _, w := range []string{
		"**Quick run: these are smoke-test counts, not figures to publish.**",
		"| p | 1 | 1235 | 987 µs | 1.00 ms | 2 µs | 3 of 10: " + strings.Repeat("x", 79) + "… |",
	} {
		if !strings.Contains(md, w) {
			t.Errorf("markdown lacks %q:\n%s", w, md)
		}
	}
}

// TestWriteMarkdownEmptyReport checks that an empty report makes a short
// document without tables or chart links.
func TestWriteMarkdownEmptyReport(t *testing.T) {
	var b bytes.Buffer
	if err := writeMarkdown(&b, &Report{}); err != nil {
		t.Fatal(err)
	}
	md := b.String()
	if !strings.HasPrefix(md, "# Benchmarks\n") || !strings.Contains(md, "## Machine\n\n- not recorded\n") {
		t.Errorf("unexpected markdown:\n%s", md)
	}
	for _, bad := range []string{"## Targets", "## Scenario", "![", "|"} {
		if strings.Contains(md, bad) {
			t.Errorf("empty report's markdown has %q:\n%s", bad, md)
		}
	}
	if err := writeMarkdown(&b, nil); err == nil {
		t.Error("nil report: no error")
	}
}

// TestWriteChartsReport writes the three charts of a full report and checks
// that they are PNG images of a sensible size. Set PGCONNECT_BENCH_CHARTS to
// a directory to keep them there for a look.
func TestWriteChartsReport(t *testing.T) {
	dir := os.Getenv("PGCONNECT_BENCH_CHARTS")
	if dir == "" {
		dir = t.TempDir()
	}
	names, err := writeCharts(dir, sampleReport())
	if err != nil {
		t.Fatal(err)
	}
	want := []string{connectChartFile, clientBoundChartFile, throughputChartFile, scramChartFile}
	if !slices.Equal(names, want) {
		t.Errorf("charts written: %q, want %q", names, want)
	}
	for _, name := range want {
		checkPNG(t, filepath.Join(dir, name))
	}
}

// TestWriteChartsSparse checks that charts are skipped, not broken, when
// their data is missing, all zero, or every connection failed.
func TestWriteChartsSparse(t *testing.T) {
	dir := t.TempDir()
	names, err := writeCharts(dir, &Report{})
	if err != nil || len(names) != 0 {
		t.Errorf("empty report: charts %q, error %v", names, err)
	}
	if names, err := writeCharts(dir, nil); err != nil || len(names) != 0 {
		t.Errorf("nil report: charts %q, error %v", names, err)
	}
	entries, _ := os.ReadDir(dir)
	if len(entries) != 0 {
		t.Errorf("empty report left files: %v", entries)
	}

	r := &Report{
		Connect: []ConnectResult{
			{Scenario: 1, Peer: "failed", Conns: 5, Errors: 5},
			{Scenario: 2, Peer: "zero", Family: "pgconnector", Clients: 1, Conns: 5},
			{Scenario: 5, Peer: "zero", Clients: 1, Conns: 5},
		},
		Throughput: []ThroughputResult{{Workload: "w", Peer: "p", Error: "boom"}},
	}
	names, err = writeCharts(dir, r)
	if err != nil {
		t.Fatal(err)
	}
	if want := []string{connectChartFile, clientBoundChartFile}; !slices.Equal(names, want) {
		t.Errorf("charts written: %q, want %q", names, want)
	}
	for _, name := range names {
		checkPNG(t, filepath.Join(dir, name))
	}
	var b bytes.Buffer
	if err := writeMarkdown(&b, r); err != nil {
		t.Fatal(err)
	}
	if md := b.String(); strings.Contains(md, throughputChartFile) ||
		!strings.Contains(md, connectChartFile) || !strings.Contains(md, clientBoundChartFile) {
		t.Errorf("chart links do not match the charts written:\n%s", md)
	}
}

// checkPNG fails t unless path is a PNG image more than 400 pixels wide.
func checkPNG(t *testing.T, path string) {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Error(err)
		return
	}
	defer f.Close()
	img, err := png.Decode(f)
	if err != nil {
		t.Errorf("%s: %v", path, err)
		return
	}
	if b := img.Bounds(); b.Dx() <= 400 || b.Dy() <= 200 {
		t.Errorf("%s is %dx%d pixels", path, b.Dx(), b.Dy())
	}
}

// Scenario 10's section: a row per role, delay and peer, and the round trips pgconnector is
// ahead of each other peer at the same role and delay, none without a delay or a pgconnector
// row that connected.
func TestWriteDistance(t *testing.T) {
	r := &Report{DistanceServer: "PostgreSQL 18", DistanceLibpq: "libpq 18 (/opt/pgconnector/postgresql-18/lib)", Connect: []ConnectResult{
		distanceRow(userTrust, 0, peerDefault, "pgconnector", 2, 0),
		distanceRow(userTrust, 0, peerLibpqDefault, "libpq", 3, 0),
		distanceRow(userTrust, 25, peerDefault, "pgconnector", 152, 0),
		distanceRow(userTrust, 25, peerLibpqDefault, "libpq", 203, 0),
		distanceRow(userTrust, 25, peerPgxDirect, "pgx", 140, 0),
		distanceRow(userScram, 25, peerDefault, "pgconnector", 0, 40),
		distanceRow(userScram, 25, peerLibpqDefault, "libpq", 303, 0),
	}}
	var b strings.Builder
	if err := writeMarkdown(&b, r); err != nil {
		t.Fatal(err)
	}
	md := b.String()
	for _, want := range []string{
		"## Scenario 10: connect over distance",
		"Server: PostgreSQL 18, pgbench with libpq 18 (/opt/pgconnector/postgresql-18/lib).",
		"| trust | 0 ms | libpq default (pgbench -C) | 3.00 ms | 6.00 ms | – | 1.00 | 0 of 40 |",
		"| trust | 25 ms | pgconnector default | 152.00 ms | 155.00 ms | – | 1.00 | 0 of 40 |",
		"| trust | 25 ms | libpq default (pgbench -C) | 203.00 ms | 206.00 ms | 1.02 | 1.00 | 0 of 40 |",
		"| trust | 25 ms | pgx sslnegotiation=direct sslmode=require | 140.00 ms | 143.00 ms | -0.24 | 1.00 | 0 of 40 |",
		"| scram-sha-256 | 25 ms | libpq default (pgbench -C) | 303.00 ms | 306.00 ms | – | 1.00 | 0 of 40 |",
	} {
		if !strings.Contains(md, want) {
			t.Errorf("benchmarks.md has no %q:\n%s", want, md[strings.Index(md, "## Scenario 10"):])
		}
	}
}

// Scenario 10's targets: a round trip (0.75 at the least) ahead of libpq's and pgx's defaults
// at 5 ms and more, no slower than libpq with sslnegotiation=direct; none at 0 ms or for a
// failed pgconnector row.
func TestDistanceTargets(t *testing.T) {
	r := &Report{Connect: []ConnectResult{
		distanceRow(userTrust, 0, peerDefault, "pgconnector", 2, 0),
		distanceRow(userTrust, 0, peerLibpqDefault, "libpq", 3, 0),
		distanceRow(userTrust, 25, peerDefault, "pgconnector", 152, 0),
		distanceRow(userTrust, 25, peerLibpqDefault, "libpq", 203, 0),
		distanceRow(userTrust, 25, peerPgxDefault, "pgx", 180, 0),
		distanceRow(userTrust, 25, peerLibpqDirect, "libpq", 150, 0),
		distanceRow(userScram, 25, peerDefault, "pgconnector", 0, 40),
		distanceRow(userScram, 25, peerLibpqDefault, "libpq", 303, 0),
	}}
	got := map[string]bool{}
	for _, tg := range checkTargets(r) {
		if strings.HasPrefix(tg.Name, "scenario 10") {
			got[tg.Name] = tg.Met
		}
	}
	want := map[string]bool{
		"scenario 10, trust, 25ms one way: p50 connect vs " + peerLibpqDefault: true,  // 1.02
		"scenario 10, trust, 25ms one way: p50 connect vs " + peerPgxDefault:   false, // 0.56
		"scenario 10, trust, 25ms one way: p50 connect vs " + peerLibpqDirect:  true,  // -0.04
	}
	if len(got) != len(want) {
		t.Errorf("targets %v, want %v", got, want)
	}
	for name, met := range want {
		if m, ok := got[name]; !ok || m != met {
			t.Errorf("%s: met=%v (present %v), want %v", name, m, ok, met)
		}
	}
}

// -merge-distance takes scenario 10 from a run of it alone, says when it ran, and checks its
// targets.
func TestMergeDistance(t *testing.T) {
	dir := t.TempDir()
	full := &Report{Started: time.Date(2026, 12, 1, 23, 4, 0, 0, time.UTC), Connect: []ConnectResult{
		{Scenario: 1, Peer: peerDefault, Family: "pgconnector", Conns: 10, ConnsPerSec: 40},
		{Scenario: 10, Peer: peerDefault, Family: "pgconnector", User: userTrust, Delay: 25 * time.Millisecond, Conns: 10, P50: time.Second},
	}}
	alone := &Report{Started: time.Date(2026, 12, 2, 1, 21, 0, 0, time.UTC), DistanceServer: "PostgreSQL 18", Connect: []ConnectResult{
		{Scenario: 10, Peer: peerDefault, Family: "pgconnector", User: userTrust, Delay: 25 * time.Millisecond, Conns: 10, P50: 150 * time.Millisecond},
		{Scenario: 10, Peer: peerLibpqDefault, Family: "libpq", User: userTrust, Delay: 25 * time.Millisecond, Conns: 10, P50: 200 * time.Millisecond},
	}}
	rep, paths := writeTwoReports(t, dir, full, alone)
	if err := mergeDistance(rep, paths[1]); err != nil {
		t.Fatal(err)
	}
	if n := len(scenarioRows(rep.Connect, 10)); n != 2 || len(scenarioRows(rep.Connect, 1)) != 1 {
		t.Errorf("after the merge: %d rows of scenario 10, want 2, and scenario 1 kept", n)
	}
	var b strings.Builder
	if err := writeMarkdown(&b, rep); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(b.String(), "Measured 2026-12-02 01:21 UTC in a run of this scenario alone") {
		t.Error("the report does not say when scenario 10 ran")
	}
	met := false
	for _, tg := range rep.Targets {
		met = met || strings.HasPrefix(tg.Name, "scenario 10") && tg.Met
	}
	if !met {
		t.Errorf("scenario 10's targets not checked after the merge: %v", rep.Targets)
	}
	empty := filepath.Join(dir, "empty.json")
	if err := os.WriteFile(empty, []byte(`{"connect":[]}`), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := mergeDistance(rep, empty); err == nil {
		t.Error("a report without scenario 10 was merged")
	}
}

// distanceRow is a scenario 10 result: delay and p50 in milliseconds.
func distanceRow(user string, delay float64, peer, family string, p50 float64, errs int) ConnectResult {
	ms := func(f float64) time.Duration { return time.Duration(f * float64(time.Millisecond)) }
	return ConnectResult{Scenario: 10, User: user, Delay: ms(delay), Peer: peer, Family: family, Clients: 1,
		Conns: 40, Errors: errs, P50: ms(p50), P99: ms(p50 + 3), Backends: 1}
}

// stmtResult is a scenario 11 result of 1000 statements over two rounds.
func stmtResult(peer, family string, traced bool, allocs uint64, cpu1, cpu2 float64) StatementResult {
	return StatementResult{Peer: peer, Family: family, Traced: traced, Ops: 1000, Seconds: 0.03,
		CPU: time.Duration((cpu1 + cpu2) * 500), Allocs: allocs * 1000, AllocBytes: allocs * 100000,
		RoundNs: []float64{30000, 30000}, RoundCPU: []float64{cpu1, cpu2}}
}

// Scenario 11's targets hold allocs/op and the median per-round CPU ratio of the connector to the
// library of the same API, both at most the library's; the section shows each peer and which of
// the library's attribute keys the connector's spans lack; -merge-statement takes the scenario
// from a run of it alone.
func TestStatementTargetsAndMerge(t *testing.T) {
	alone := &Report{
		Started: time.Date(2026, 12, 2, 3, 4, 0, 0, time.UTC),
		Statement: []StatementResult{
			stmtResult(peerStmtStdlib, "database/sql", false, 14, 20000, 21000),
			stmtResult(peerStmtOtelsql, "database/sql", true, 44, 30000, 31000),
			stmtResult(peerStmtPcSQL, "database/sql", true, 25, 27000, 28000),
			stmtResult(peerStmtOtelpgx, "pgx", true, 48, 30000, 30000),
			stmtResult(peerStmtPcPool, "pgx", true, 32, 29000, 31000), // CPU ratios 0.967, 1.033: median 1.00
		},
		StatementSpans: []StatementSpans{
			{Peer: peerStmtOtelsql, Spans: []SpanShape{{Name: "sql.conn.query", Kind: "client", Attributes: []string{"db.query.text", "db.system.name"}}}},
			{Peer: peerStmtPcSQL, Spans: []SpanShape{{Name: "SELECT", Kind: "client", Attributes: []string{"db.query.text", "db.system.name", "server.port"}}}},
			{Peer: peerStmtOtelpgx, Spans: []SpanShape{{Name: "SELECT", Kind: "client", Attributes: []string{"db.query.text", "pgx.rows_affected", "user.name"}}}},
			{Peer: peerStmtPcPool, Spans: []SpanShape{{Name: "SELECT", Kind: "client", Attributes: []string{"db.query.text"}}}},
		},
	}
	ts := stmtTargets(alone)
	if len(ts) != 2 || !ts[0].Met || !strings.Contains(ts[0].Got, "allocs/op 25.0 vs 44.0") || !strings.Contains(ts[0].Got, "0.90x (rounds 0.90-0.90)") {
		t.Errorf("database/sql target: %+v", ts)
	}
	if len(ts) == 2 && (!ts[1].Met || !strings.Contains(ts[1].Got, "1.00x (rounds 0.97-1.03)")) {
		t.Errorf("pgx target: %+v", ts[1])
	}
	alone.Statement[4].Allocs = 49000 // one alloc/op more than otelpgx's
	if ts := stmtTargets(alone); len(ts) != 2 || ts[1].Met {
		t.Errorf("more allocations than otelpgx's met the target: %+v", ts)
	}

	dir := t.TempDir()
	full := &Report{Started: time.Date(2026, 12, 1, 23, 4, 0, 0, time.UTC), Connect: []ConnectResult{
		{Scenario: 1, Peer: peerDefault, Family: "pgconnector", Conns: 10, ConnsPerSec: 40},
	}}
	rep, paths := writeTwoReports(t, dir, full, alone)
	if err := mergeStatement(rep, paths[1]); err != nil {
		t.Fatal(err)
	}
	if len(rep.Statement) != 5 || len(rep.StatementSpans) != 4 || len(scenarioRows(rep.Connect, 1)) != 1 {
		t.Errorf("after the merge: %d rows of scenario 11, %d spans, scenario 1 %v", len(rep.Statement), len(rep.StatementSpans), rep.Connect)
	}
	var b strings.Builder
	if err := writeMarkdown(&b, rep); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{
		"Measured 2026-12-02 03:04 UTC in a run of this scenario alone",
		"| " + peerStmtPcSQL + " | database/sql | 30000 | 27500 | 27000–28000 | 25.0 | 2500 | 1 | 0 of 2 |",
		"| " + peerStmtStdlib + " | database/sql | 30000 | 20500 | 20000–21000 | 14.0 | 1400 | 0 | 0 of 2 |",
		"database/sql: attribute keys of otelsql's spans that none of " + peerStmtPcSQL + "'s spans carries: none.",
		"pgx: attribute keys of otelpgx's spans that none of " + peerStmtPcPool + "'s spans carries: `pgx.rows_affected`, `user.name`.",
		"Statement path, pgx: allocs/op and client CPU/op of the connector's OpenPool ≤ otelpgx's",
	} {
		if !strings.Contains(b.String(), want) {
			t.Errorf("the report has no %q", want)
		}
	}
	empty := filepath.Join(dir, "empty.json")
	if err := os.WriteFile(empty, []byte(`{"connect":[]}`), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := mergeStatement(rep, empty); err == nil {
		t.Error("a report without scenario 11 was merged")
	}
}

// A key of otelpgx's whose information the connector carries under its own keys is not missing.
func TestMissingKeysSameInformation(t *testing.T) {
	otelpgx := &StatementSpans{Spans: []SpanShape{{Attributes: []string{"db.query.text", "pgx.rows_affected", "user.name"}}}}
	without := &StatementSpans{Spans: []SpanShape{{Attributes: []string{"db.query.text"}}}}
	with := &StatementSpans{Spans: []SpanShape{{Attributes: []string{"db.query.text", "db.response.returned_rows", "user.name"}}}}
	if got := missingKeys(without, otelpgx); !slices.Equal(got, []string{"pgx.rows_affected", "user.name"}) {
		t.Errorf("missing %q, want pgx.rows_affected and user.name", got)
	}
	if got := missingKeys(with, otelpgx); len(got) != 0 {
		t.Errorf("missing %q, want none (db.response.returned_rows carries pgx.rows_affected)", got)
	}
}

// fleetReport is a scenario 12 whose pgconnector rows meet every target.
func fleetReport() []FleetResult {
	ms := func(f float64) time.Duration { return time.Duration(f * float64(time.Millisecond)) }
	return []FleetResult{
		{Part: fleetDead, Peer: "pgconnector, first host dead", Family: "pgconnector", Conns: 60, P50: ms(2.2)},
		{Part: fleetDead, Peer: "pgconnector, healthy host alone", Family: "pgconnector", Conns: 60, P50: ms(2)},
		{Part: fleetDead, Peer: "pgx, first host dead", Family: "pgx", Conns: 5, P50: ms(2003)},
		{Part: fleetStandby, Peer: "pgconnector", Family: "pgconnector", Conns: 60, P50: ms(2), Backends: 1},
		{Part: fleetStandby, Peer: "libpq (pgbench -C)", Family: "libpq", Conns: 60, P50: ms(3), Backends: 2},
		{Part: fleetFailover, Peer: "pgconnector", Family: "pgconnector", Conns: 300, Errors: 20, Recovered: true, FirstSuccess: ms(12), FailedMeanwhile: 20},
		{Part: fleetResolver, Peer: "pgconnector, resolver 50 ms", Family: "pgconnector", Conns: 60, P50: ms(2.1), Lookups: 1, Seconds: 0.3},
		{Part: fleetResolver, Peer: "pgconnector, instant resolver", Family: "pgconnector", Conns: 60, P50: ms(2), Lookups: 1, Seconds: 0.3},
		{Part: fleetResolver, Peer: "pgx, resolver 50 ms", Family: "pgx", Conns: 60, P50: ms(53), Lookups: 61, Seconds: 3.3},
	}
}

// fleetMet is whether each of scenario 12's targets was met, by the start of its name.
func fleetMet(r *Report) map[string]bool {
	got := map[string]bool{}
	for _, tg := range fleetTargets(r) {
		got[strings.SplitN(tg.Name, ":", 2)[0]] = tg.Met
	}
	return got
}

// Scenario 12's targets: each is computed from its rows, missed past its bound, and left out
// when its rows are missing or failed.
func TestFleetTargets(t *testing.T) {
	r := &Report{Fleet: fleetReport()}
	want := map[string]bool{"Fleet, dead first host": true, "Fleet, standby first (target_session_attrs=read-write)": true,
		"Fleet, failover": true, "Fleet, slow resolver (50 ms)": true}
	if got := fleetMet(r); !maps.Equal(got, want) {
		t.Errorf("targets met: %v, want %v", got, want)
	}
	for _, tc := range []struct {
		change func(rows []FleetResult)
		target string
		met    bool // false; absent when the target is left out
		absent bool
	}{
		{func(rows []FleetResult) { rows[0].P50 = rows[1].P50 * 13 / 10 }, "Fleet, dead first host", false, false},
		{func(rows []FleetResult) { rows[1].Errors = 1 }, "Fleet, dead first host", false, true},
		{func(rows []FleetResult) { rows[3].Backends = 1.1 }, "Fleet, standby first (target_session_attrs=read-write)", false, false},
		{func(rows []FleetResult) { rows[5].WrongRole = 1 }, "Fleet, failover", false, false},
		{func(rows []FleetResult) { rows[5].FirstSuccess = 2 * time.Second }, "Fleet, failover", false, false},
		{func(rows []FleetResult) { rows[5].Recovered = false }, "Fleet, failover", false, false},
		{func(rows []FleetResult) { rows[6].Lookups = 2 }, "Fleet, slow resolver (50 ms)", false, false},
		{func(rows []FleetResult) { rows[6].Lookups, rows[6].Seconds = 2, 16 }, "Fleet, slow resolver (50 ms)", true, false},
		{func(rows []FleetResult) { rows[6].Lookups, rows[6].Processes = 3, 3 }, "Fleet, slow resolver (50 ms)", true, false},
		{func(rows []FleetResult) { rows[6].Lookups, rows[6].Processes = 4, 3 }, "Fleet, slow resolver (50 ms)", false, false},
		{func(rows []FleetResult) { rows[6].P50 = rows[7].P50 * 12 / 10 }, "Fleet, slow resolver (50 ms)", false, false},
		{func(rows []FleetResult) { rows[7].P50 = 0 }, "Fleet, slow resolver (50 ms)", false, true},
	} {
		rows := fleetReport()
		tc.change(rows)
		got, ok := fleetMet(&Report{Fleet: rows})[tc.target]
		if ok == tc.absent || got != tc.met {
			t.Errorf("%s after a change: met=%v present=%v, want met=%v present=%v", tc.target, got, ok, tc.met, !tc.absent)
		}
	}
}

// The failover's figures come from the loop's connections: the first success after the stop,
// timed from the promotion, the failures between, and the read-only sessions.
func TestFailoverResult(t *testing.T) {
	t0 := time.Date(2026, 12, 6, 1, 0, 0, 0, time.UTC)
	at := func(ms int) int64 { return t0.Add(time.Duration(ms) * time.Millisecond).UnixNano() }
	stopping, stopped, promoted := t0.Add(100*time.Millisecond), t0.Add(120*time.Millisecond), t0.Add(300*time.Millisecond)
	r := failoverResult([]fleetEvent{
		{At: at(50), OK: true},
		{At: at(110), OK: true}, // the old primary, during its stop
		{At: at(150)}, {At: at(250)},
		{At: at(320), OK: true},
		{At: at(330)},
		{At: at(340), OK: true, ReadOnly: true},
	}, stopping, stopped, promoted)
	if !r.Recovered || r.FirstSuccess != 20*time.Millisecond || r.FailedMeanwhile != 2 || r.Errors != 3 || r.WrongRole != 1 ||
		r.Conns != 7 || r.Outage != 200*time.Millisecond {
		t.Errorf("failoverResult = %+v", r)
	}
	// A success before Promote returned counts as 0; none after the stop is no recovery.
	if r := failoverResult([]fleetEvent{{At: at(150)}, {At: at(290), OK: true}}, stopping, stopped, promoted); !r.Recovered || r.FirstSuccess != 0 || r.FailedMeanwhile != 1 {
		t.Errorf("success before the promotion's end: %+v", r)
	}
	if r := failoverResult([]fleetEvent{{At: at(50), OK: true}, {At: at(110), OK: true}, {At: at(150)}}, stopping, stopped, promoted); r.Recovered {
		t.Errorf("no success after the stop: %+v", r)
	}
}

// -merge-fleet takes scenario 12 from a run of it alone, says when it ran, and checks its
// targets; the report's section shows each part.
func TestMergeFleet(t *testing.T) {
	dir := t.TempDir()
	full := &Report{Started: time.Date(2026, 12, 1, 23, 4, 0, 0, time.UTC), Connect: []ConnectResult{
		{Scenario: 1, Peer: peerDefault, Family: "pgconnector", Conns: 10, ConnsPerSec: 40},
	}}
	alone := &Report{Started: time.Date(2026, 12, 6, 1, 21, 0, 0, time.UTC), Fleet: fleetReport()}
	rep, paths := writeTwoReports(t, dir, full, alone)
	if err := mergeFleet(rep, paths[1]); err != nil {
		t.Fatal(err)
	}
	if len(rep.Fleet) != len(fleetReport()) || len(scenarioRows(rep.Connect, 1)) != 1 {
		t.Errorf("after the merge: %d rows of scenario 12, scenario 1 %v", len(rep.Fleet), rep.Connect)
	}
	var b strings.Builder
	if err := writeMarkdown(&b, rep); err != nil {
		t.Fatal(err)
	}
	md := b.String()
	for _, s := range []string{"## Scenario 12: " + scenarioTitles[12], "Measured 2026-12-06 01:21 UTC in a run of this scenario alone",
		"| failover | pgconnector |", "| slow resolver | pgx, resolver 50 ms |"} {
		if !strings.Contains(md, s) {
			t.Errorf("the report lacks %q", s)
		}
	}
	n := 0
	for _, tg := range rep.Targets {
		if strings.HasPrefix(tg.Name, "Fleet, ") && tg.Met {
			n++
		}
	}
	if n != 4 {
		t.Errorf("%d of scenario 12's 4 targets met after the merge: %v", n, rep.Targets)
	}
	empty := filepath.Join(dir, "empty.json")
	if err := os.WriteFile(empty, []byte(`{"connect":[]}`), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := mergeFleet(rep, empty); err == nil {
		t.Error("a report without scenario 12 was merged")
	}
}

// -merge-oauth takes scenario 13 from a run of it alone (replacing the report's), says when it
// ran, and checks its target again; -oauth-gobench reads BenchmarkOAuthConnect's runs, whose
// target is the median of the alternating sub-benchmark's oauth/trust, at most 1.1x; output
// without as many results of each sub-benchmark is refused.
func TestMergeOAuthAndGoBench(t *testing.T) {
	dir := t.TempDir()
	row := func(peer, user string, rate float64) ConnectResult {
		return ConnectResult{Scenario: 13, Peer: peer, User: user, Family: "pgconnector", Clients: 1, Conns: 40, ConnsPerSec: rate,
			RoundRates: []float64{rate, rate}, P50: 20 * time.Millisecond, P99: 30 * time.Millisecond, Backends: 1, CPU: time.Millisecond}
	}
	full := &Report{Started: time.Date(2026, 12, 1, 23, 4, 0, 0, time.UTC), Connect: []ConnectResult{
		{Scenario: 1, Peer: peerDefault, Family: "pgconnector", Conns: 10, ConnsPerSec: 40},
		row(peerPcOAuth, userOAuth, 1), // an older scenario 13, replaced
	}}
	alone := &Report{Started: time.Date(2026, 12, 7, 16, 40, 0, 0, time.UTC), Machine: Machine{CPU: "AMD EPYC", Cores: 2, Go: "go1.26.8"}, Connect: []ConnectResult{
		row(peerPcOAuthTrust, userTrust, 50), row(peerPcOAuth, userOAuth, 47),
		{Scenario: 13, Peer: peerLibpqOAuthIssuer, User: userOAuth, Family: "libpq", Clients: 1, Conns: 40, ConnsPerSec: 20, Backends: 2, CPU: time.Millisecond},
	}}
	rep, paths := writeTwoReports(t, dir, full, alone)
	if err := mergeOAuth(rep, paths[1]); err != nil {
		t.Fatal(err)
	}
	if len(scenarioRows(rep.Connect, 13)) != 3 || len(scenarioRows(rep.Connect, 1)) != 1 {
		t.Errorf("after the merge: %v", rep.Connect)
	}
	bench := `goos: linux
BenchmarkOAuthConnect/trust-2         	     100	  20000000 ns/op	         1.000 backends/op
BenchmarkOAuthConnect/oauth-cached-token-2         	     100	  25000000 ns/op	         1.000 backends/op
BenchmarkOAuthConnect/alternating-2                	     100	  41000000 ns/op	  21000000 oauth-ns/conn	         1.050 oauth/trust	  20000000 trust-ns/conn
PASS
BenchmarkOAuthConnect/trust-2         	     100	  20000000 ns/op	         1.000 backends/op
BenchmarkOAuthConnect/oauth-cached-token-2         	     100	  21000000 ns/op	         1.000 backends/op
BenchmarkOAuthConnect/alternating-2                	     100	  41000000 ns/op	  21000000 oauth-ns/conn	         1.070 oauth/trust	  20000000 trust-ns/conn
`
	gb := filepath.Join(dir, "gobench.txt")
	if err := os.WriteFile(gb, []byte(bench), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := readOAuthGoBench(rep, gb); err != nil {
		t.Fatal(err)
	}
	var b strings.Builder
	if err := writeMarkdown(&b, rep); err != nil {
		t.Fatal(err)
	}
	md := b.String()
	for _, s := range []string{"## Scenario 13: " + scenarioTitles[13], "Measured 2026-12-07 16:40 UTC in a run of this scenario alone",
		"Machine of that run: AMD EPYC, 2 cores, Go go1.26.8.",
		"| libpq token hook, oauth_issuer = the issuer | 1 | oauth | 20 | – | – | 2.00 |",
		"| scenario 13, 1 client: pgconnector cached OAuth token / pgconnector trust, connections/s (within 1.1x of the trust connect's time) | >= 0.91x | 0.94x | yes |",
		"alternating (median of 2 runs) | <= 1.10x | 1.06x (runs 1.05-1.07); side by side sub-benchmarks 1.15x (runs 1.05-1.25) | yes |"} {
		if !strings.Contains(md, s) {
			t.Errorf("the report lacks %q", s)
		}
	}
	for _, bad := range []string{"", strings.Replace(bench, "BenchmarkOAuthConnect/trust-2 ", "BenchmarkOther/trust-2 ", 1),
		strings.Replace(bench, "1.070 oauth/trust", "x oauth/trust", 1)} {
		if _, err := parseOAuthGoBench(bad); err == nil {
			t.Errorf("parseOAuthGoBench accepted %q", bad)
		}
	}
	if err := mergeOAuth(rep, paths[0]); err != nil {
		t.Errorf("merging a report with scenario 13: %v", err)
	}
	empty := filepath.Join(dir, "empty.json")
	if err := os.WriteFile(empty, []byte(`{"connect":[]}`), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := mergeOAuth(rep, empty); err == nil {
		t.Error("a report without scenario 13 was merged")
	}
}

// writeTwoReports writes full and alone (a run of one scenario) into dir as a run does, and
// returns full read back and the paths of the two benchmarks.json.
func writeTwoReports(t *testing.T, dir string, full, alone *Report) (*Report, []string) {
	t.Helper()
	var paths []string
	for i, r := range []*Report{full, alone} {
		d := filepath.Join(dir, fmt.Sprint(i))
		if _, err := writeOutputs(d, r); err != nil {
			t.Fatal(err)
		}
		paths = append(paths, filepath.Join(d, "benchmarks.json"))
	}
	rep, err := readReport(paths[0])
	if err != nil {
		t.Fatal(err)
	}
	return rep, paths
}
