package main

import (
	"bytes"
	"fmt"
	"os"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/pgconnector/pgconnector/internal/harness"
)

// The harness removes what it made (clusters, the initdb template) once the tests ran.
func TestMain(m *testing.M) { os.Exit(harness.Run(m)) }

// TestCompact runs the quickstart's report on a throwaway server and checks what it shows: the
// table with both drivers measured, pgx's second socket and backend per connection against
// pgconnector's one, the cold connect's SSLRequest answered N beside the warm connect that skips
// it, and the request's connect and statements nested under the request.
func TestCompact(t *testing.T) {
	pg := harness.StartT(t, harness.Options{})
	var out bytes.Buffer
	const n = 10
	if err := show(t.Context(), &out, pg, pg.DSN(), options{conns: n}); err != nil {
		t.Fatal(err)
	}
	text := out.String()
	t.Logf("output:\n%s", text)

	lines := strings.Split(strings.TrimRight(text, "\n"), "\n")
	if len(lines) >= 40 {
		t.Errorf("%d lines, want fewer than 40", len(lines))
	}
	for _, l := range lines {
		if utf8.RuneCountInString(l) >= 100 {
			t.Errorf("line of %d characters, want fewer than 100: %q", utf8.RuneCountInString(l), l)
		}
	}

	// backends, TCP conns, SSLRequests, round trips per connection.
	row := func(name string) []float64 {
		t.Helper()
		m := regexp.MustCompile(`(?m)^` + name + `\s+([\d.]+)\s+([\d.]+)\s+([\d.]+)\s+([\d.]+)\s+[\d.]+ms$`).FindStringSubmatch(text)
		if m == nil {
			t.Fatalf("no table row for %s", name)
		}
		var v []float64
		for _, s := range m[1:] {
			f, err := strconv.ParseFloat(s, 64)
			if err != nil {
				t.Fatal(err)
			}
			v = append(v, f)
		}
		return v
	}
	pc, px := row("pgconnector"), row("pgx stdlib")
	// pgconnector: one socket and backend each; the first connection alone sends an SSLRequest.
	// pgx (sslmode=prefer): an SSLRequest, 'N', then a second socket and backend for plaintext.
	wantPC := []float64{1, 1, 1.0 / n, 2 + 1.0/n}
	wantPX := []float64{2, 2, 1, 4}
	for i, col := range []string{"backends", "TCP conns", "SSLRequests", "round trips"} {
		if fmt.Sprintf("%.2f", pc[i]) != fmt.Sprintf("%.2f", wantPC[i]) {
			t.Errorf("pgconnector %s = %.2f, want %.2f", col, pc[i], wantPC[i])
		}
		if fmt.Sprintf("%.2f", px[i]) != fmt.Sprintf("%.2f", wantPX[i]) {
			t.Errorf("pgx stdlib %s = %.2f, want %.2f", col, px[i], wantPX[i])
		}
	}

	for _, re := range []string{
		`(?m)^cold +[\d.]+ms  transport=plain cache\.hit=false\n  gss_credentials .*\n  tcp_connect .*\n  ssl_request .*\| answer N\n  fallback .*\| same socket\n  startup .*\| auth trust\n`,
		`(?m)^warm +[\d.]+ms  transport=plain cache\.hit=true\n  gss_credentials .*\n  tcp_connect .*\n  startup .*\| auth trust\n`,
		`(?m)^request GET /users/42 [\d.]+ms\n├─ postgresql\.connect [\d.]+ms  transport=plain cache\.hit=true, 3 steps\n` +
			`├─ SELECT [\d.]+ms  select name from .* where id = \$1\n└─ SELECT [\d.]+ms  select count\(\*\) from pg_stat_activity`,
	} {
		if !regexp.MustCompile(re).MatchString(text) {
			t.Errorf("output does not match %s", re)
		}
	}
}

// TestCompactOtherServer is the DATABASE_URL case: no comparison (no log or proxy to count with),
// the waterfall of two connects and the request.
func TestCompactOtherServer(t *testing.T) {
	pg := harness.StartT(t, harness.Options{})
	var out bytes.Buffer
	if err := show(t.Context(), &out, nil, pg.DSN(), options{conns: 2}); err != nil {
		t.Fatal(err)
	}
	text := out.String()
	t.Logf("output:\n%s", text)
	for _, want := range []string{"(cold) and\nthe second one (warm); offset", "  ssl_request ", "\nwarm ", "\nrequest GET /users/42 "} {
		if !strings.Contains(text, want) {
			t.Errorf("output lacks %q", want)
		}
	}
	if strings.Contains(text, "pgx stdlib") {
		t.Error("comparison printed without the throwaway server")
	}
}

// TestServerOf checks the line that says which server a DATABASE_URL names: its hosts and
// ports, never its password.
func TestServerOf(t *testing.T) {
	for dsn, want := range map[string]string{
		"postgres://app:s3cret@db1:5433,db2:5434/shop": "db1:5433,db2:5434",
		"host=db port=5432 user=app password=s3cret":   "db:5432",
	} {
		if got := serverOf(dsn); got != want {
			t.Errorf("serverOf(%q) = %q, want %q", dsn, got, want)
		}
	}
	if got := serverOf("host=db sslmode=bogus password=s3cret"); strings.Contains(got, "s3cret") {
		t.Errorf("serverOf of a bad DSN = %q: holds the password", got)
	}
}
