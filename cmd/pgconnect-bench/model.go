package main

import "time"

// Report is everything one run of pgconnect-bench measured. It is written as
// docs/benchmarks.json, and docs/benchmarks.md and the charts are made from it.
type Report struct {
	Machine  Machine       `json:"machine"`
	Started  time.Time     `json:"started"`
	Duration time.Duration `json:"duration_ns"`
	// Quick is set when the run used the -quick counts (a smoke test, not
	// figures to publish).
	Quick bool `json:"quick,omitempty"`
	// Rounds is how many rounds each connection storm was split into, the
	// peers taking turns; BulkReps how many times each transfer ran.
	Rounds   int `json:"rounds"`
	BulkReps int `json:"bulk_reps"`

	Connect    []ConnectResult    `json:"connect"`    // scenarios 1, 2, 3, 4 (connect rate), 5, 8, 9, 10 and 13
	Throughput []ThroughputResult `json:"throughput"` // scenario 4
	Herd       []HerdResult       `json:"herd"`       // scenario 6
	Wrap       []WrapResult       `json:"wrap"`       // scenario 7
	ScramHerd  []ScramHerdResult  `json:"scram_herd"` // scenario 8's cold herd
	Targets    []Target           `json:"targets"`    // the targets, checked against this run (checkTargets)
	// DistanceServer and DistanceLibpq say what scenario 10 ran against: "PostgreSQL 18", and
	// the libpq pgbench loaded, for example "libpq 18 (/opt/pgconnector/postgresql-18/lib)".
	DistanceServer string `json:"distance_server,omitempty"`
	DistanceLibpq  string `json:"distance_libpq,omitempty"`
	// DistanceMeasured is when scenario 10 ran, set only when that was in another run than the
	// rest of the report (-merge-distance).
	DistanceMeasured time.Time `json:"distance_measured,omitzero"`
	// Statement is scenario 11, one row per peer; StatementSpans what each traced peer's spans
	// and measurements hold; StatementMeasured when scenario 11 ran, set only when that was in
	// another run than the rest of the report (-merge-statement).
	Statement         []StatementResult `json:"statement,omitempty"`
	StatementSpans    []StatementSpans  `json:"statement_spans,omitempty"`
	StatementMeasured time.Time         `json:"statement_measured,omitzero"`
	// Fleet is scenario 12, one row per part and peer; FleetMeasured when it ran, set only when
	// that was in another run than the rest of the report (-merge-fleet).
	Fleet         []FleetResult `json:"fleet,omitempty"`
	FleetMeasured time.Time     `json:"fleet_measured,omitzero"`
	// FleetRounds is the rounds scenario 12's compared Go peers took turns in.
	FleetRounds int `json:"fleet_rounds,omitempty"`
	// OAuthMeasured is when scenario 13 ran, set only when that was in another run than the rest
	// of the report (-merge-oauth).
	OAuthMeasured time.Time `json:"oauth_measured,omitzero"`
	// OAuthMachine is the machine of that run (-merge-oauth); nil when scenario 13 ran with the rest.
	OAuthMachine *Machine `json:"oauth_machine,omitempty"`
	// OAuthGoBench is the root package's BenchmarkOAuthConnect (-oauth-gobench), for its target.
	OAuthGoBench *OAuthGoBench `json:"oauth_gobench,omitempty"`
	// WarmDecision is the warm decision path measured in process (its
	// allocations and time), as target lines.
	WarmDecision []Target `json:"warm_decision"`
}

// Machine describes where the figures were measured.
type Machine struct {
	CPU        string `json:"cpu"`        // model name from /proc/cpuinfo
	Cores      int    `json:"cores"`      // runtime.NumCPU
	MemoryGiB  int    `json:"memory_gib"` // MemTotal
	Kernel     string `json:"kernel"`     // uname -r
	OS         string `json:"os"`         // PRETTY_NAME of /etc/os-release
	Go         string `json:"go"`         // runtime.Version
	PostgreSQL string `json:"postgresql"` // server version, for example "15.18"
	Pgbench    string `json:"pgbench"`    // pgbench --version
	Krb5       string `json:"krb5"`       // MIT Kerberos version
	Modules    string `json:"modules"`    // pgx, lib/pq, gokrb5, the OpenTelemetry SDK, otelsql and otelpgx versions
	Pinning    string `json:"pinning"`    // how the CPUs were split between clients and servers
}

// ConnectResult is one peer's connection storm in one scenario: Conns logical
// connections, each opened, used for "select 1" and closed, by Clients
// concurrent clients.
type ConnectResult struct {
	Scenario int    `json:"scenario"` // 1-5, 8, 9, 10, 13
	Peer     string `json:"peer"`     // for example "libpq default (pgbench -C)"
	Family   string `json:"family"`   // "libpq", "pgx", "lib/pq" or "pgconnector"
	Clients  int    `json:"clients"`
	Ticket   bool   `json:"ticket"` // a Kerberos ticket is in the client's credential cache
	// User is how the role logs in where a scenario has several roles: "trust" or
	// "scram-sha-256" (scenarios 8 and 10), "trust" or "oauth" (scenario 13); "" elsewhere.
	User string `json:"user,omitempty"`
	// Delay is the one-way delay a harness.DelayProxy added in each direction between client
	// and server (scenario 10; the round trip is twice it); 0 elsewhere.
	Delay time.Duration `json:"delay_ns,omitempty"`

	Conns   int     `json:"conns"`   // logical connections attempted
	Errors  int     `json:"errors"`  // of which failed
	Error   string  `json:"error"`   // the first error, if any
	Seconds float64 `json:"seconds"` // wall time of the storm

	ConnsPerSec float64       `json:"conns_per_sec"` // successful connections per second
	RoundRates  []float64     `json:"round_rates"`   // the same, per round
	P50         time.Duration `json:"p50_ns"`        // connect latency percentiles
	P99         time.Duration `json:"p99_ns"`
	// Backends is server backends (forks) per logical connection; 0 when
	// not measured (the fake server of scenario 5 forks nothing: see TCP).
	Backends float64 `json:"backends"`
	// TCP is TCP connections per logical connection, where counted.
	TCP float64 `json:"tcp"`
	// CPU is the client process's user+system CPU time per logical
	// connection.
	CPU time.Duration `json:"cpu_ns"`
}

// ThroughputResult is one bulk transfer of scenario 4 over one transport.
type ThroughputResult struct {
	Workload  string        `json:"workload"`   // "COPY out 256 MiB" or "bytea 64 MiB round trip"
	Peer      string        `json:"peer"`       // "psql (libpq)" or "pgconnector"
	Family    string        `json:"family"`     // "libpq" or "pgconnector"
	Transport string        `json:"transport"`  // "GSS" or "TLS"
	Bytes     int64         `json:"bytes"`      // bytes moved (both directions for a round trip)
	Seconds   float64       `json:"seconds"`    // best of the repetitions, wall time
	MBPerSec  float64       `json:"mb_per_sec"` // Bytes / Seconds / 1e6
	CPU       time.Duration `json:"cpu_ns"`     // client CPU (user+system) of that repetition
	Error     string        `json:"error"`
}

// HerdResult is scenario 6: Clients concurrent first connections to one host
// on a cold cache, and what reached the server.
type HerdResult struct {
	Peer           string `json:"peer"`
	Family         string `json:"family"`
	Server         string `json:"server"` // which scenario's server
	Ticket         bool   `json:"ticket"`
	Clients        int    `json:"clients"`
	Errors         int    `json:"errors"`
	SSLRequests    int    `json:"ssl_requests"`
	GSSENCRequests int    `json:"gssenc_requests"`
	TCP            int    `json:"tcp"`
	Backends       int    `json:"backends"`
}

// ScramHerdResult is scenario 8's cold herd for one peer: Clients first connections of the
// SCRAM role released at once through pgbouncer (for the Go peers, on one new pool: for
// pgconnector one new Connector), and what they cost the client.
type ScramHerdResult struct {
	Peer    string        `json:"peer"`
	Family  string        `json:"family"`
	Clients int           `json:"clients"` // logical connections (pgbench's own first one included)
	Errors  int           `json:"errors"`
	Error   string        `json:"error"`   // the first error, if any
	Seconds float64       `json:"seconds"` // wall time from the release to the last connection's end
	CPU     time.Duration `json:"cpu_ns"`  // client CPU (user+system) of the whole herd
	// Derivations is the sum of the connector's pgconnector.scram.derivations counter after the
	// herd: the SaltedPassword derivations (PBKDF2, RFC 5802 section 3) it ran. Nil when not
	// measured: another family, or a library that does not export the metric.
	Derivations *int64 `json:"scram_derivations,omitempty"`
}

// WrapResult is scenario 7 for one enctype: MB/s (1e6 bytes) of plaintext
// through internal/gss's Wrap and Unwrap, one 16 KiB PostgreSQL GSS packet per
// operation on one goroutine, beside the standard library's primitives over
// the same length. Each figure is a median of rounds taken in turns.
type WrapResult struct {
	Enctype    string  `json:"enctype"`     // for example "aes256-cts-hmac-sha1-96"
	CBCEncrypt float64 `json:"cbc_encrypt"` // AES-CBC encryption (crypto/cipher), MB/s
	CBCDecrypt float64 `json:"cbc_decrypt"` // AES-CBC decryption, MB/s
	HMAC       string  `json:"hmac"`        // the HMAC's hash, for example "SHA-1"
	HMACRate   float64 `json:"hmac_rate"`   // keyed HMAC (crypto/hmac), MB/s
	// FloorWrap and FloorUnwrap are one pass of CBC and one of HMAC, one
	// after the other: 1/(1/CBC + 1/HMAC), MB/s.
	FloorWrap   float64 `json:"floor_wrap"`
	FloorUnwrap float64 `json:"floor_unwrap"`
	Wrap        float64 `json:"wrap"`   // gss.Wrapper.Wrap, MB/s
	Unwrap      float64 `json:"unwrap"` // gss.Wrapper.Unwrap, MB/s
}

// Target is one of the targets the benchmark is held to, as measured.
type Target struct {
	Name string `json:"name"` // what is compared, for example "scenario 1: pgconnector warm / libpq default"
	Want string `json:"want"` // for example ">= 1.80x"
	Got  string `json:"got"`  // for example "1.93x"
	Met  bool   `json:"met"`
}

// FleetResult is one peer in one part of scenario 12 (fleetDead, fleetStandby, fleetFailover,
// fleetResolver); the figures a part does not measure are zero.
type FleetResult struct {
	Part   string `json:"part"`
	Peer   string `json:"peer"`
	Family string `json:"family"`
	Conns  int    `json:"conns"`  // logical connections attempted, measured
	Errors int    `json:"errors"` // of which failed
	Error  string `json:"error"`  // the first error, if any
	// Seconds is the measured parts' wall time, over Processes client processes.
	Seconds   float64       `json:"seconds,omitempty"`
	Processes int           `json:"processes,omitempty"`
	P50       time.Duration `json:"p50_ns,omitempty"` // connect latency, after the first connect
	// Backends is server backends (of both servers) per logical connection (fleetStandby).
	Backends float64 `json:"backends,omitempty"`
	// Lookups is the answers of the lookup function in the client process, its warm-up
	// connect included (fleetResolver).
	Lookups int64 `json:"lookups,omitempty"`
	// The failover (fleetFailover): Recovered when a connect succeeded after the primary's stop
	// began; FirstSuccess the first such connect's end after the promotion's (0 when before);
	// FailedMeanwhile the connects that failed from the stop to it; WrongRole the connects that
	// reached a read-only session; Outage the time from the stop to the promotion's end.
	Recovered       bool          `json:"recovered,omitempty"`
	FirstSuccess    time.Duration `json:"first_success_ns,omitempty"`
	FailedMeanwhile int           `json:"failed_meanwhile,omitempty"`
	WrongRole       int           `json:"wrong_role,omitempty"`
	Outage          time.Duration `json:"outage_ns,omitempty"`
}

// StatementResult is one peer of scenario 11: Ops iterations of QueryRow(stmtQuery, 1).Scan on
// one pooled connection to the fake server, over the rounds, and what their loops cost the client
// process.
type StatementResult struct {
	Peer   string `json:"peer"`
	Family string `json:"family"` // "database/sql" or "pgx"
	Traced bool   `json:"traced"` // given the SDK's tracer and meter providers
	Ops    int    `json:"ops"`
	Errors int    `json:"errors"` // rounds that failed
	Error  string `json:"error"`  // the first error, if any
	// Seconds, CPU (user+system, getrusage), Allocs and AllocBytes (runtime.MemStats Mallocs and
	// TotalAlloc) are the sums over the rounds' loops.
	Seconds    float64       `json:"seconds"`
	CPU        time.Duration `json:"cpu_ns"`
	Allocs     uint64        `json:"allocs"`
	AllocBytes uint64        `json:"alloc_bytes"`
	// RoundNs and RoundCPU are each round's wall and CPU ns per iteration, in round order.
	RoundNs  []float64 `json:"round_ns_per_op"`
	RoundCPU []float64 `json:"round_cpu_ns_per_op"`
}

// per is x per iteration of s.
func (s StatementResult) per(x float64) float64 {
	if s.Ops == 0 {
		return 0
	}
	return x / float64(s.Ops)
}

// StatementSpans is what one iteration of a traced peer of scenario 11 recorded.
type StatementSpans struct {
	Peer    string      `json:"peer"`
	Family  string      `json:"family"`
	Spans   []SpanShape `json:"spans"`   // in the order they ended
	Metrics []string    `json:"metrics"` // "name {attribute keys}" of each metric with data
	Error   string      `json:"error,omitempty"`
}

// SpanShape is one span without its values: its name, kind, instrumentation scope and the keys
// of its attributes (sorted).
type SpanShape struct {
	Name       string   `json:"name"`
	Kind       string   `json:"kind"`
	Scope      string   `json:"scope"`
	Attributes []string `json:"attributes"`
}

// scenarioTitles names the scenarios in tables and charts.
var scenarioTitles = map[int]string{
	1:  "TLS off, default DSN, no Kerberos ticket",
	2:  "ticket held; server built with GSS, no keytab",
	3:  "ticket held; server with keytab, pg_hba without hostgssenc",
	4:  "full GSS: pg_hba hostgssenc only",
	5:  "client-bound: fake server, no fork",
	6:  "cold herd: concurrent first connections",
	7:  "GSS wrap and unwrap per core",
	8:  "SCRAM through pgbouncer",
	9:  "SCRAM-SHA-256 over TLS to PostgreSQL",
	10: "connect over distance",
	11: "statement path: a traced query on one pooled connection",
	12: "a fleet: a dead first host, a standby first, a failover, a slow resolver",
	13: "OAuth over TLS",
}
