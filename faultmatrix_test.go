package pgconnector_test

import (
	"context"
	"fmt"

	"strings"
	"sync"
	"testing"
	"time"

	"go.opentelemetry.io/otel/attribute"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/pgconnector/pgconnector"
	"github.com/pgconnector/pgconnector/internal/harness"
)

// faultCase is one row of the fault matrix: a server misbehaving at one step, the modes, and
// what the connector must do, beside what psql (libpq) does against the same server.
type faultCase struct {
	name   string
	server harness.FaultServerOptions
	extra  string // connection string keys beyond host, port, user, dbname
	ticket bool   // the client holds a Kerberos ticket (GSSENCRequest is sent)

	want  string        // the connector: "plain", "tls", or "fail"
	err   string        // a substring of the connector's error
	conns int           // sockets the connector's connect opens
	bound time.Duration // the longest the connector's connect may take

	psql      string // "ok" or "fail": psql's outcome against the same server
	psqlConns int
	differs   string // why the connector does not do what psql does; "" when it does
}

// The connector against servers misbehaving at each step of the negotiation, beside psql: the
// outcome (transport or failure), how many sockets (backends) it costs, and how long it takes.
// Where the two differ the row says why; everywhere else psql's outcome is the expected one.
func TestFaultMatrix(t *testing.T) {
	lab := newKerberosLab(t)
	if err := lab.kdc.AddServicePrincipals("postgres", "localhost"); err != nil {
		t.Fatal(err)
	}
	f := func(step harness.FaultStep, kind harness.FaultKind) harness.Fault {
		return harness.Fault{Step: step, Kind: kind}
	}
	once := func(fl harness.Fault) harness.Fault { fl.Count = 1; return fl }
	errResp := func(step harness.FaultStep, code string) harness.Fault {
		return harness.Fault{Step: step, Kind: harness.FaultErrorResponse, SQLState: code}
	}
	const short = 2 * time.Second // connect_timeout of the stall rows
	quick := time.Second          // bound of the rows that need no timeout
	cases := []faultCase{
		// The answer to SSLRequest (sslmode=prefer, no ticket).
		{name: "SSLRequest answered N", want: "plain", conns: 1, bound: quick, psql: "ok", psqlConns: 1},
		{name: "SSLRequest: close", server: opts(f(harness.StepSSLAnswer, harness.FaultClose)), want: "fail", err: "SSLRequest", conns: 1, bound: quick, psql: "fail", psqlConns: 1},
		{name: "SSLRequest: reset", server: opts(f(harness.StepSSLAnswer, harness.FaultReset)), want: "fail", err: "SSLRequest", conns: 1, bound: quick, psql: "fail", psqlConns: 1},
		{name: "SSLRequest: garbage byte", server: opts(f(harness.StepSSLAnswer, harness.FaultGarbage)), want: "fail", err: "unexpected answer byte 0x58", conns: 1, bound: quick, psql: "fail", psqlConns: 1},
		{name: "SSLRequest: ErrorResponse", server: opts(errResp(harness.StepSSLAnswer, "53300")), want: "fail", err: "error response during SSL exchange", conns: 1, bound: quick, psql: "fail", psqlConns: 1},
		{name: "SSLRequest: N and a forged startup reply", server: opts(f(harness.StepSSLAnswer, harness.FaultExtraBytes)), want: "fail", err: "arrived with the answer 'N'", conns: 1, bound: quick, psql: "ok", psqlConns: 1,
			differs: "libpq takes bytes sent with 'N' as the reply to its StartupMessage: a forged AuthenticationOk ... ReadyForQuery connects it to whoever sent them"},
		{name: "SSLRequest: S and bytes before the handshake", server: tlsOpts(f(harness.StepSSLAnswer, harness.FaultExtraBytes)), want: "fail", err: "arrived with the answer 'S'", conns: 1, bound: quick, psql: "fail", psqlConns: 1},
		{name: "SSLRequest: trickled answer", server: opts(f(harness.StepSSLAnswer, harness.FaultTrickle)), want: "plain", conns: 1, bound: quick, psql: "ok", psqlConns: 1},
		{name: "SSLRequest: stall", server: opts(f(harness.StepSSLAnswer, harness.FaultStall)), extra: "connect_timeout=2", want: "fail", err: "timeout", conns: 1, bound: short + time.Second, psql: "fail", psqlConns: 1},
		{name: "SSLRequest: stall, two hosts", server: opts(f(harness.StepSSLAnswer, harness.FaultStall)), extra: "connect_timeout=2", want: "fail", err: "no host could be connected", conns: 2, bound: 2*short + time.Second, psql: "fail", psqlConns: 2},

		// The TLS handshake (server with TLS, sslmode=prefer): a failed handshake goes on in
		// plaintext on a new connection, a stall ends the address.
		{name: "TLS", server: tlsOpts(harness.Fault{}), want: "tls", conns: 1, bound: quick, psql: "ok", psqlConns: 1},
		{name: "TLS handshake: close", server: tlsOpts(once(f(harness.StepTLSHandshake, harness.FaultClose))), want: "plain", conns: 2, bound: quick, psql: "ok", psqlConns: 2},
		{name: "TLS handshake: reset", server: tlsOpts(once(f(harness.StepTLSHandshake, harness.FaultReset))), want: "plain", conns: 2, bound: quick, psql: "ok", psqlConns: 2},
		{name: "TLS handshake: garbage", server: tlsOpts(once(f(harness.StepTLSHandshake, harness.FaultGarbage))), want: "plain", conns: 2, bound: quick, psql: "ok", psqlConns: 2},
		{name: "TLS handshake: close, sslmode=require", server: tlsOpts(once(f(harness.StepTLSHandshake, harness.FaultClose))), extra: "sslmode=require", want: "fail", err: "TLS handshake", conns: 1, bound: quick, psql: "fail", psqlConns: 1},
		{name: "TLS handshake: stall", server: tlsOpts(f(harness.StepTLSHandshake, harness.FaultStall)), extra: "connect_timeout=2", want: "fail", err: "timeout", conns: 1, bound: short + time.Second, psql: "fail", psqlConns: 1},

		// Startup and authentication.
		{name: "startup: 28000 in plaintext", server: opts(errResp(harness.StepStartup, "28000")), want: "fail", err: "28000", conns: 1, bound: quick, psql: "fail", psqlConns: 1},
		{name: "startup: 28000 over TLS", server: tlsOpts(once(errResp(harness.StepStartup, "28000"))), want: "plain", conns: 2, bound: quick, psql: "ok", psqlConns: 2},
		{name: "startup: 53300 over TLS", server: tlsOpts(once(errResp(harness.StepStartup, "53300"))), want: "fail", err: "53300", conns: 1, bound: quick, psql: "ok", psqlConns: 2,
			differs: "libpq retries an overloaded server in plaintext on a new connection (a second backend, and plaintext where TLS worked); the connector reports the server's error"},
		{name: "startup: 28P01 over TLS", server: tlsOpts(errResp(harness.StepStartup, "28P01")), want: "fail", err: "28P01", conns: 1, bound: quick, psql: "fail", psqlConns: 2,
			differs: "libpq retries a rejected password in plaintext (the same password, a second backend); the connector, as pgx, tries nothing else"},
		{name: "startup: close over TLS", server: tlsOpts(f(harness.StepStartup, harness.FaultClose)), want: "fail", err: "startup", conns: 1, bound: quick, psql: "fail", psqlConns: 1},
		{name: "startup: reset", server: opts(f(harness.StepStartup, harness.FaultReset)), want: "fail", err: "startup", conns: 1, bound: quick, psql: "fail", psqlConns: 1},
		{name: "startup: garbage", server: opts(f(harness.StepStartup, harness.FaultGarbage)), want: "fail", err: "startup", conns: 1, bound: quick, psql: "fail", psqlConns: 1},
		{name: "startup: trickled reply", server: opts(f(harness.StepStartup, harness.FaultTrickle)), want: "plain", conns: 1, bound: quick, psql: "ok", psqlConns: 1},
		{name: "startup: stall", server: opts(f(harness.StepStartup, harness.FaultStall)), extra: "connect_timeout=2", want: "fail", err: "timeout", conns: 1, bound: short + time.Second, psql: "fail", psqlConns: 1},
		{name: "startup: stall over TLS", server: tlsOpts(f(harness.StepStartup, harness.FaultStall)), extra: "connect_timeout=2", want: "fail", err: "timeout", conns: 1, bound: short + time.Second, psql: "fail", psqlConns: 1},

		// The answer to GSSENCRequest (a ticket, gssencmode=prefer, sslmode=prefer).
		{name: "GSSENCRequest answered N", ticket: true, want: "plain", conns: 1, bound: quick, psql: "ok", psqlConns: 1},
		{name: "GSSENCRequest: close", ticket: true, server: opts(f(harness.StepGSSENCAnswer, harness.FaultClose)), want: "fail", err: "GSSENCRequest", conns: 1, bound: quick, psql: "fail", psqlConns: 1},
		{name: "GSSENCRequest: garbage byte", ticket: true, server: opts(f(harness.StepGSSENCAnswer, harness.FaultGarbage)), want: "fail", err: "GSSENCRequest", conns: 1, bound: quick, psql: "fail", psqlConns: 1},
		{name: "GSSENCRequest: ErrorResponse", ticket: true, server: opts(once(errResp(harness.StepGSSENCAnswer, "08P01"))), want: "plain", conns: 2, bound: quick, psql: "ok", psqlConns: 2},
		{name: "GSSENCRequest: N and forged bytes", ticket: true, server: opts(f(harness.StepGSSENCAnswer, harness.FaultExtraBytes)), want: "fail", err: "GSSENCRequest", conns: 1, bound: quick, psql: "fail", psqlConns: 1},
		{name: "GSSENCRequest: stall", ticket: true, server: opts(f(harness.StepGSSENCAnswer, harness.FaultStall)), extra: "connect_timeout=2", want: "fail", err: "timeout", conns: 1, bound: short + time.Second, psql: "fail", psqlConns: 1},
		{name: "GSS context: the server closes after the AP-REQ", ticket: true, server: harness.FaultServerOptions{GSS: true}, want: "plain", conns: 2, bound: quick, psql: "ok", psqlConns: 2},
		{name: "GSSENCRequest N, then the TLS handshake fails on the same socket", ticket: true, server: tlsOpts(once(f(harness.StepTLSHandshake, harness.FaultClose))), want: "plain", conns: 2, bound: quick, psql: "ok", psqlConns: 2},
		{name: "gssencmode=require: N", ticket: true, extra: "gssencmode=require", want: "fail", err: "GSSAPI encryption is required (gssencmode=require) but the server does not support it", conns: 1, bound: quick, psql: "fail", psqlConns: 1},
		{name: "gssencmode=require: close", ticket: true, server: opts(f(harness.StepGSSENCAnswer, harness.FaultClose)), extra: "gssencmode=require", want: "fail", err: "GSSAPI encryption is required (gssencmode=require) but the server closed the connection on GSSENCRequest", conns: 1, bound: quick, psql: "fail", psqlConns: 1},
		{name: "gssencmode=require: the server closes after the AP-REQ", ticket: true, server: harness.FaultServerOptions{GSS: true}, extra: "gssencmode=require", want: "fail", err: "during the GSSAPI context establishment", conns: 1, bound: quick, psql: "fail", psqlConns: 1},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			got, gotConns, took, err := tc.runConnector(t, lab)
			if got != tc.want || gotConns != tc.conns {
				t.Errorf("connector: %s with %d sockets (%v), want %s with %d", got, gotConns, err, tc.want, tc.conns)
			}
			if tc.err != "" && (err == nil || !strings.Contains(err.Error(), tc.err)) {
				t.Errorf("connector error %v, want one with %q", err, tc.err)
			}
			// An ErrorResponse before the StartupMessage is unauthenticated: its text is never
			// shown (CVE-2024-10977). One to the StartupMessage is the server's error, as libpq's.
			step := tc.server.Fault.Step
			if (step == harness.StepSSLAnswer || step == harness.StepGSSENCAnswer) && err != nil && strings.Contains(err.Error(), harness.FaultMessage) {
				t.Errorf("the error shows the server's text: %v", err)
			}
			if took > tc.bound {
				t.Errorf("connector: the connect took %v, want at most %v", took, tc.bound)
			}
			psql, psqlConns, psqlErr := tc.runPsql(t, lab)
			if psql != tc.psql || psqlConns != tc.psqlConns {
				t.Errorf("psql: %s with %d connections (%v), want %s with %d: the oracle changed, check the row", psql, psqlConns, psqlErr, tc.psql, tc.psqlConns)
			}
			t.Logf("connector: %s, %d sockets, %v, %v; psql: %s, %d connections, %v", got, gotConns, took.Round(time.Millisecond), err, psql, psqlConns, psqlErr)
		})
	}
}

func opts(fl harness.Fault) harness.FaultServerOptions { return harness.FaultServerOptions{Fault: fl} }
func tlsOpts(fl harness.Fault) harness.FaultServerOptions {
	return harness.FaultServerOptions{TLS: true, Fault: fl}
}

// servers starts the row's server (two for a two-host row) and returns the connection string.
func (tc faultCase) servers(t *testing.T) (dsn string, stats func() harness.FaultStats) {
	t.Helper()
	n := 1
	if strings.Contains(tc.name, "two hosts") {
		n = 2
	}
	var srvs []*harness.FaultServer
	var hosts, ports []string
	for range n {
		s := harness.FaultServerT(t, tc.server)
		_, port := s.Addr()
		srvs = append(srvs, s)
		hosts = append(hosts, "localhost")
		ports = append(ports, fmt.Sprint(port))
	}
	dsn = "host=" + strings.Join(hosts, ",") + " port=" + strings.Join(ports, ",") + " user=alice dbname=app " + tc.extra
	return dsn, func() harness.FaultStats {
		var sum harness.FaultStats
		for _, s := range srvs {
			st := s.Stats()
			sum.Connections += st.Connections
		}
		return sum
	}
}

func (tc faultCase) runConnector(t *testing.T, lab *kerberosLab) (outcome string, conns int, took time.Duration, err error) {
	t.Helper()
	dsn, stats := tc.servers(t)
	rec := tracetest.NewSpanRecorder()
	opts := []pgconnector.Option{pgconnector.WithTracerProvider(sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec)))}
	if tc.ticket {
		opts = append(opts, pgconnector.WithKerberos(pgconnector.Kerberos{Krb5Conf: lab.kdc.Krb5Conf, CCache: lab.ccache}))
	}
	c := newConnector(t, dsn, opts...)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	start := time.Now()
	conn, err := c.Connect(ctx)
	took = time.Since(start)
	conns = stats().Connections
	if err != nil {
		return "fail", conns, took, err
	}
	conn.Close()
	for _, s := range rec.Ended() {
		for _, kv := range s.Attributes() {
			if kv.Key == attribute.Key("pgconnector.transport") {
				return kv.Value.AsString(), conns, took, nil
			}
		}
	}
	return "unknown", conns, took, nil
}

// psqlMu keeps psql runs apart: each one counts the connections of its own server, but they
// compete for the CPU with the connector's runs.
var psqlMu sync.Mutex

func (tc faultCase) runPsql(t *testing.T, lab *kerberosLab) (outcome string, conns int, err error) {
	t.Helper()
	dsn, stats := tc.servers(t)
	var env []string
	if tc.ticket {
		env = lab.kdc.Env(lab.ccache)
	}
	psqlMu.Lock()
	defer psqlMu.Unlock()
	_, err = harness.Psql(context.Background(), env, dsn, "select 1")
	if err != nil {
		return "fail", stats().Connections, err
	}
	return "ok", stats().Connections, nil
}
