package main

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/pgconnector/pgconnector"
	"github.com/pgconnector/pgconnector/internal/harness"
)

func TestMain(m *testing.M) { os.Exit(harness.Run(m)) }

// explainT runs the command with args and returns its exit code and what it printed.
func explainT(t *testing.T, args ...string) (int, string, string) {
	t.Helper()
	var out, errOut bytes.Buffer
	code := run(append([]string{"explain"}, args...), &out, &errOut)
	t.Logf("exit %d\n%s%s", code, out.String(), errOut.String())
	return code, out.String(), errOut.String()
}

// noKerberos points the Kerberos environment at nothing, so that GSS is not tried.
func noKerberos(t *testing.T) {
	dir := t.TempDir()
	t.Setenv("KRB5_CONFIG", filepath.Join(dir, "krb5.conf"))
	t.Setenv("KRB5CCNAME", "FILE:"+filepath.Join(dir, "none"))
	t.Setenv("KRB5_CLIENT_KTNAME", "")
}

func wantIn(t *testing.T, out string, subs ...string) {
	t.Helper()
	for _, s := range subs {
		if !strings.Contains(out, s) {
			t.Errorf("output lacks %q", s)
		}
	}
}

func decodeT(t *testing.T, out string) Report {
	t.Helper()
	var rep Report
	if err := json.Unmarshal([]byte(out), &rep); err != nil {
		t.Fatalf("not one JSON document: %v", err)
	}
	return rep
}

func stepNames(cn Connect) string {
	var names []string
	for _, s := range cn.Steps {
		names = append(names, s.Name)
	}
	return strings.Join(names, ",")
}

// A server without TLS: the cold connect asks (SSLRequest, 'N', plaintext on the same socket),
// the warm ones go straight to the startup; libpq pays the SSLRequest every time, pgx a second
// socket and backend.
func TestExplainPlain(t *testing.T) {
	noKerberos(t)
	p := harness.StartT(t, harness.Options{Auth: "scram-sha-256"})
	code, out, _ := explainT(t, "-n", "2", p.DSN())
	if code != 0 {
		t.Fatalf("exit %d", code)
	}
	if strings.Contains(out, p.Password) {
		t.Fatal("the output holds the password")
	}
	wantIn(t, out, "cold connect", "warm 1 connect", "warm 2 connect",
		"plan ssl,plain", "cache miss: asks the server", "plan plain (left out: ssl, remembered), cache hit",
		"ssl_request", "ssl.answer=N", "tcp_connect", "startup",
		"over plain", "auth scram-sha-256 (SCRAM-SHA-256, keys derived)", "auth scram-sha-256 (SCRAM-SHA-256, keys cached)",
		"estimated from the server's answers",
		"libpq  1 socket(s), 1 backend(s), 2 round trip(s) before startup, plain",
		"pgx    2 socket(s), 2 backend(s), 3 round trip(s) before startup, plain")

	code, out, _ = explainT(t, "-json", p.DSN())
	if code != 0 {
		t.Fatalf("exit %d", code)
	}
	rep := decodeT(t, out)
	if len(rep.Connects) != 2 || rep.SSLMode != "prefer" || rep.GSSEncMode != "prefer" {
		t.Fatalf("%d connects, sslmode %q, gssencmode %q", len(rep.Connects), rep.SSLMode, rep.GSSEncMode)
	}
	cold, warm := rep.Connects[0], rep.Connects[1]
	if got := stepNames(cold); !strings.HasSuffix(got, "tcp_connect,ssl_request,fallback,startup") {
		t.Errorf("cold steps %s", got)
	}
	if got := stepNames(warm); strings.Contains(got, "ssl_request") || !strings.Contains(got, "startup") {
		t.Errorf("warm steps %s", got)
	}
	if cold.Transport != "plain" || warm.Transport != "plain" || cold.Sockets != 1 || cold.RoundTrips != 2 || warm.RoundTrips != 1 {
		t.Errorf("cold %s %d sockets %d round trips, warm %s %d round trips", cold.Transport, cold.Sockets, cold.RoundTrips, warm.Transport, warm.RoundTrips)
	}
	if cold.CacheHit == nil || *cold.CacheHit || warm.CacheHit == nil || !*warm.CacheHit {
		t.Errorf("cache hit cold %v warm %v", cold.CacheHit, warm.CacheHit)
	}
	if cold.Server == "" || cold.Auth != "scram-sha-256" || cold.SASL != "SCRAM-SHA-256" || warm.SASL != "SCRAM-SHA-256" {
		t.Errorf("server %q auth %q %q %q", cold.Server, cold.Auth, cold.SASL, warm.SASL)
	}
	if cold.KeyCached == nil || *cold.KeyCached || warm.KeyCached == nil || !*warm.KeyCached {
		t.Errorf("SCRAM keys cached: cold %v, warm %v", cold.KeyCached, warm.KeyCached)
	}
	for _, s := range cold.Steps {
		if s.StartMS < 0 || s.DurationMS < 0 || s.StartMS+s.DurationMS > cold.DurationMS+0.001 {
			t.Errorf("step %s at %.3f ms for %.3f ms, outside the connect's %.3f ms", s.Name, s.StartMS, s.DurationMS, cold.DurationMS)
		}
	}
	if len(rep.Compare) != 1 || rep.Compare[0].Pgx.Sockets != 2 || rep.Compare[0].Libpq.Sockets != 1 || rep.Compare[0].Answers.SSL != "N" {
		t.Errorf("compare %+v", rep.Compare)
	}
}

// A server with TLS: SSLRequest, 'S', TLS handshake, every time, for all three.
func TestExplainTLS(t *testing.T) {
	noKerberos(t)
	p := harness.StartT(t, harness.Options{TLS: true})
	code, out, _ := explainT(t, "-json", p.DSN("sslmode=verify-full", "sslrootcert="+p.CAFile))
	if code != 0 {
		t.Fatalf("exit %d", code)
	}
	rep := decodeT(t, out)
	for _, cn := range rep.Connects {
		if cn.Transport != "tls" || !strings.Contains(stepNames(cn), "ssl_request,tls_handshake,startup") {
			t.Errorf("%s: %s, steps %s", cn.Run, cn.Transport, stepNames(cn))
		}
	}
	c := rep.Compare[0]
	if c.Answers.SSL != "S" || c.Libpq.Transport != "tls" || c.Pgx.Transport != "tls" || c.Libpq.Sockets != 1 || c.Pgx.Sockets != 1 || c.Pgx.RoundTrips != 3 {
		t.Errorf("compare %+v", c)
	}
	code, out, _ = explainT(t, p.DSN())
	if code != 0 {
		t.Fatal(code)
	}
	wantIn(t, out, "tls_handshake", "over tls", "ssl.answer=S", "tls.protocol.version=1.3")
}

// A closed port: exit 1, naming the step.
func TestExplainClosedPort(t *testing.T) {
	noKerberos(t)
	port := harness.FreePort(t)
	dsn := "host=127.0.0.1 port=" + strconv.Itoa(port) + " user=app password=s3cret-pw dbname=app connect_timeout=5"
	code, out, errOut := explainT(t, dsn)
	if code != 1 {
		t.Errorf("exit %d, want 1", code)
	}
	wantIn(t, out, "failed at tcp_connect: ", "refused")
	code, out, errOut2 := explainT(t, "-json", dsn)
	if code != 1 {
		t.Errorf("exit %d, want 1", code)
	}
	rep := decodeT(t, out)
	if rep.FailedStep != "tcp_connect" || !strings.Contains(rep.Error, "refused") || len(rep.Connects) != 1 {
		t.Errorf("failed_step %q, error %q, %d connects", rep.FailedStep, rep.Error, len(rep.Connects))
	}
	for _, s := range []string{out, errOut, errOut2} {
		if strings.Contains(s, "s3cret-pw") {
			t.Error("the output holds the password")
		}
	}
}

// TestInvocations runs the command as a user would, with arguments and connection strings
// that go wrong in each way the command knows, and checks the exit status (0 connected, 1 a
// connect failed, 2 a usage error or a connection string that does not parse), what each stream
// says, and that the usage is printed once when it is printed at all.
func TestInvocations(t *testing.T) {
	noKerberos(t)
	const secret = "s3cret-pw"
	p := harness.StartT(t, harness.Options{})
	closed := strconv.Itoa(harness.FreePort(t))
	missing := filepath.Join(t.TempDir(), "missing.conf")
	for _, tt := range []struct {
		name           string
		args           []string
		code           int
		stdout, stderr []string // substrings
		notOut         []string // substrings of neither stream
		usageOn        string   // "stdout", "stderr" or "" (not printed)
	}{
		{name: "no command", args: nil, code: 2, stderr: []string{"pgconnect: no command: the command is explain"}, usageOn: "stderr"},
		{name: "unknown command", args: []string{"explian", p.DSN()}, code: 2, stderr: []string{`pgconnect: unknown command "explian"`}, usageOn: "stderr"},
		{name: "-h", args: []string{"-h"}, code: 0, stdout: []string{"Exit status: 0 connected; 1 a connect failed"}, usageOn: "stdout"},
		{name: "help", args: []string{"help"}, code: 0, usageOn: "stdout"},
		{name: "explain -h", args: []string{"explain", "-h"}, code: 0, stdout: []string{"-timeout D"}, usageOn: "stdout"},
		{name: "unknown flag", args: []string{"explain", "-x", p.DSN()}, code: 2, stderr: []string{"pgconnect: flag provided but not defined: -x"}, usageOn: "stderr"},
		{name: "flag after the DSN", args: []string{"explain", "host=x", "-n", "2"}, code: 2,
			stderr: []string{`pgconnect: "-n" after the DSN: the DSN is one argument (quote it), and flags go before it`}, usageOn: "stderr"},
		{name: "negative -n", args: []string{"explain", "-n", "-1", "host=x"}, code: 2, stderr: []string{"pgconnect: -n -1: want 0 or more"}, usageOn: "stderr"},
		{name: "zero -timeout", args: []string{"explain", "-timeout", "0s", "host=x"}, code: 2, stderr: []string{"pgconnect: -timeout 0s: want a positive duration"}, usageOn: "stderr"},
		{name: "bad sslmode", args: []string{"explain", "host=x sslmode=bogus password=" + secret}, code: 2,
			stderr: []string{`pgconnect: invalid connection string: invalid sslmode "bogus"`}},
		{name: "bad port in a URL", args: []string{"explain", "postgres://u:" + secret + "@h:x/db"}, code: 2,
			stderr: []string{`pgconnect: invalid connection string: invalid port "x": must be a number from 1 to 65535`}},
		{name: "bad second port in a URL", args: []string{"explain", "postgres://u:" + secret + "@h1:5432,h2:/db?port=,70000"}, code: 2,
			stderr: []string{`invalid port ",70000"`}},
		{name: "service file missing", args: []string{"explain", "service=shop servicefile=" + missing + " password=" + secret}, code: 2,
			stderr: []string{`pgconnect: invalid connection string: service file "` + missing + `" not found (for service "shop": no such file or directory)`}},
		{name: "connected", args: []string{"explain", p.DSN()}, code: 0,
			stdout: []string{"ssl_request", "fallback", "startup", "result: 127.0.0.1:" + strconv.Itoa(p.Port) + " over plain"}},
		{name: "sslmode=require, answered N", args: []string{"explain", p.DSN("sslmode=require")}, code: 1,
			stdout: []string{"ssl.answer=N", "failed at ssl_request: server does not support SSL, but SSL was required (sslmode=require)"},
			notOut: []string{"failed at connect", "fallback"}},
		{name: "sslmode=require, answered N, -json", args: []string{"explain", "-json", p.DSN("sslmode=require")}, code: 1,
			stdout: []string{`"failed_step": "ssl_request"`}, stderr: []string{"pgconnect: failed at ssl_request: server does not support SSL"}},
		{name: "gssencmode=require without a ticket", args: []string{"explain", p.DSN("gssencmode=require")}, code: 1,
			stdout: []string{"  gss_credentials ", "gss.credentials.valid=false",
				"failed at gss_credentials: gssencmode=require: GSSAPI encryption is required but no credentials are available: no credential cache"},
			notOut: []string{"failed at connect", "pgconnector: host"}},
		{name: "gssencmode=require over a Unix socket", args: []string{"explain", p.DSN("host="+p.SocketDir, "gssencmode=require")}, code: 1,
			stdout: []string{"failed at decision: gssencmode=require: GSSAPI encryption is required but it is not supported over a local socket"}},
		{name: "closed port", args: []string{"explain", "host=127.0.0.1 port=" + closed + " user=app password=" + secret + " connect_timeout=5"}, code: 1,
			stdout: []string{"  tcp_connect ", "failed at tcp_connect: connection refused"}, notOut: []string{"fallback"}},
		{name: "closed port, then the server", args: []string{"explain", "-n", "0", "host=127.0.0.1,127.0.0.1 port=" + closed + "," + strconv.Itoa(p.Port) + " user=app dbname=app"},
			code: 0, stdout: []string{"fallback.reason=could not connect", "over plain"}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			var out, errOut bytes.Buffer
			code := run(tt.args, &out, &errOut)
			t.Logf("exit %d\nstdout:\n%sstderr:\n%s", code, out.String(), errOut.String())
			if code != tt.code {
				t.Errorf("exit %d, want %d", code, tt.code)
			}
			wantIn(t, out.String(), tt.stdout...)
			wantIn(t, errOut.String(), tt.stderr...)
			for _, s := range append(tt.notOut, secret, "pgconnector: pgconnector:") {
				if strings.Contains(out.String()+errOut.String(), s) {
					t.Errorf("the output holds %q", s)
				}
			}
			for stream, text := range map[string]string{"stdout": out.String(), "stderr": errOut.String()} {
				want := 0
				if stream == tt.usageOn {
					want = 1
				}
				if n := strings.Count(text, "usage: pgconnect explain"); n != want {
					t.Errorf("the usage on %s %d times, want %d", stream, n, want)
				}
			}
		})
	}
}

// kerberos starts a KDC with the user alice, puts her ticket in a credential cache and points
// the environment at them, as a client with a ticket would run the command.
func kerberos(t *testing.T) *harness.KDC {
	t.Helper()
	k := harness.StartKDCT(t, harness.KDCOptions{})
	if _, err := k.AddPrincipal("alice"); err != nil {
		t.Fatal(err)
	}
	ccache := filepath.Join(t.TempDir(), "alice.ccache")
	if err := k.Kinit(ccache, "alice", 0); err != nil {
		t.Fatal(err)
	}
	for _, kv := range k.Env(ccache) {
		name, value, _ := strings.Cut(kv, "=")
		t.Setenv(name, value)
	}
	return k
}

func gssServer(t *testing.T, k *harness.KDC, hba string) *harness.Postgres {
	t.Helper()
	p := harness.StartT(t, harness.Options{GSS: &harness.GSSOptions{KDC: k, Keytab: true}, HBA: []string{hba}})
	if err := p.CreateRole("alice"); err != nil {
		t.Fatal(err)
	}
	return p
}

// With a ticket: a hostgssenc server is reached over GSS encryption; a server whose pg_hba has
// only hostnogssenc lines answers 'G' and then refuses, which costs libpq a second socket on every
// connect and pgconnector only until it remembers.
func TestExplainGSS(t *testing.T) {
	k := kerberos(t)
	enc := gssServer(t, k, "hostgssenc all all 127.0.0.1/32 gss include_realm=0 krb_realm="+k.Realm)
	nogss := gssServer(t, k, "hostnogssenc all all 127.0.0.1/32 trust")

	t.Run("hostgssenc", func(t *testing.T) {
		code, out, _ := explainT(t, "-json", "host=localhost port="+strconv.Itoa(enc.Port)+" user=alice dbname="+enc.Database)
		if code != 0 {
			t.Fatalf("exit %d", code)
		}
		rep := decodeT(t, out)
		for _, cn := range rep.Connects {
			if cn.Transport != "gss" || cn.Auth != "gss-or-trust" || !strings.Contains(stepNames(cn), "gssenc_request") || !strings.Contains(stepNames(cn), "gss_context") {
				t.Errorf("%s: %s, auth %s, steps %s", cn.Run, cn.Transport, cn.Auth, stepNames(cn))
			}
			if len(cn.Decisions) != 1 || cn.Decisions[0].Credentials != "valid" || !strings.HasPrefix(cn.Decisions[0].Plan, "gss") {
				t.Errorf("%s: decisions %+v", cn.Run, cn.Decisions)
			}
		}
		c := rep.Compare[0]
		if c.Libpq.Transport != "gss" || c.Libpq.Sockets != 1 || !c.Answers.GSSEstablished || c.Pgx.Note == "" {
			t.Errorf("compare %+v", c)
		}
	})
	t.Run("hostnogssenc", func(t *testing.T) {
		code, out, _ := explainT(t, "-n", "3", "-json", "host=localhost port="+strconv.Itoa(nogss.Port)+" user=alice dbname="+nogss.Database)
		if code != 0 {
			t.Fatalf("exit %d", code)
		}
		rep := decodeT(t, out)
		last := rep.Connects[len(rep.Connects)-1]
		cold := rep.Connects[0]
		if cold.Transport != "plain" || cold.Sockets != 2 || !strings.Contains(stepNames(cold), "gssenc_request") || !strings.Contains(stepNames(cold), "fallback") {
			t.Errorf("cold: %s, %d sockets, steps %s", cold.Transport, cold.Sockets, stepNames(cold))
		}
		if last.Transport != "plain" || last.Sockets != 1 || strings.Contains(stepNames(last), "gssenc_request") {
			t.Errorf("%s: %s, %d sockets, steps %s", last.Run, last.Transport, last.Sockets, stepNames(last))
		}
		c := rep.Compare[0]
		if c.Answers.GSS != "G" || c.Answers.GSSEstablished || c.Libpq.Sockets != 2 || c.Libpq.Backends != 2 || c.Pgx.Sockets != 2 {
			t.Errorf("compare %+v", c)
		}
		code, out, _ = explainT(t, "host=localhost port="+strconv.Itoa(nogss.Port)+" user=alice dbname="+nogss.Database)
		if code != 0 {
			t.Fatalf("exit %d", code)
		}
		wantIn(t, out, "gss.answer=G", "Kerberos credentials: valid", "libpq  2 socket(s), 2 backend(s)", "GSS refused after 'G'")
	})
}

// TestTarget checks the connection line: the hosts, the user, and the database, which without
// dbname is the user's name, as the server takes it; never the password.
func TestTarget(t *testing.T) {
	for dsn, want := range map[string]string{
		"host=db1,db2 port=5433,5434 user=app password=s3cret-pw dbname=shop": "db1:5433,db2:5434 user=app dbname=shop",
		"host=db1 port=5432 user=app password=s3cret-pw":                      "db1:5432 user=app dbname=app",
	} {
		s, err := pgconnector.ParseSettings(dsn)
		if err != nil {
			t.Fatal(err)
		}
		if got := target(s); got != want {
			t.Errorf("target(%q) = %q, want %q", dsn, got, want)
		}
	}
}
