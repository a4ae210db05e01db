package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/pgconnector/pgconnector/internal/harness"
)

// The harness removes what it made (clusters, the initdb template) once the tests ran.
func TestMain(m *testing.M) { os.Exit(harness.Run(m)) }

// TestQuickstartCompact runs the quickstart's report on a throwaway server and checks what it shows: the
// table with both drivers measured, pgx's second socket and backend per connection against
// pgconnector's one, the cold connect's SSLRequest answered N beside the warm connect that skips
// it, and the request's connect and statements nested under the request.
func TestQuickstartCompact(t *testing.T) {
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
			`├─ SELECT VALUES [\d.]+ms  select name from .*\n└─ SELECT pg_stat_activity [\d.]+ms  select count\(\*\) from pg_stat_activity`,
	} {
		if !regexp.MustCompile(re).MatchString(text) {
			t.Errorf("output does not match %s", re)
		}
	}
}

// TestQuickstartOtherServer is the DATABASE_URL case: no comparison (no log or proxy to count with),
// the waterfall of two connects and the request.
func TestQuickstartOtherServer(t *testing.T) {
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

// TestQuickstartServerOf checks the line that says which server a DATABASE_URL names: its hosts and
// ports, never its password.
func TestQuickstartServerOf(t *testing.T) {
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

// TestQuickstartJSON: with -json, stdout is one JSON document, the report, and the spans go to
// their own stream (-spans), one JSON object a line, as the OpenTelemetry stdout exporter writes
// them.
func TestQuickstartJSON(t *testing.T) {
	pg := harness.StartT(t, harness.Options{})
	var out, spans bytes.Buffer
	const n = 4
	if err := show(t.Context(), &out, pg, pg.DSN(), options{conns: n, json: true, spans: &spans}); err != nil {
		t.Fatal(err)
	}
	t.Logf("stdout:\n%s", out.String())
	dec := json.NewDecoder(&out)
	var rep report
	if err := dec.Decode(&rep); err != nil {
		t.Fatalf("stdout is not a JSON document: %v", err)
	}
	if dec.More() {
		t.Fatal("stdout holds more than one JSON document")
	}
	if rep.Compare == nil || len(rep.Compare.Drivers) != 2 || rep.Compare.Connections != n {
		t.Fatalf("compare %+v", rep.Compare)
	}
	pc, px := rep.Compare.Drivers[0], rep.Compare.Drivers[1]
	if pc.Name != "pgconnector" || pc.Backends != 1 || pc.TCPConns != 1 || pc.SSLRequests != 1.0/n ||
		px.Name != "pgx stdlib" || px.Backends != 2 || px.TCPConns != 2 || px.SSLRequests != 1 || pc.MedianConnectMS <= 0 {
		t.Errorf("drivers %+v", rep.Compare.Drivers)
	}
	var cold, warm []string
	for _, st := range rep.Cold.Steps {
		cold = append(cold, st.Name)
	}
	for _, st := range rep.Warm.Steps {
		warm = append(warm, st.Name)
	}
	if got := strings.Join(cold, ","); !strings.HasSuffix(got, "tcp_connect,ssl_request,fallback,startup") || rep.Cold.CacheHit {
		t.Errorf("cold: %s, cache hit %t", got, rep.Cold.CacheHit)
	}
	if got := strings.Join(warm, ","); !strings.HasSuffix(got, "tcp_connect,startup") || !rep.Warm.CacheHit || rep.WarmConnects != n-1 {
		t.Errorf("warm: %s, cache hit %t, of %d", got, rep.Warm.CacheHit, rep.WarmConnects)
	}
	if rep.TooNoisy != (len(rep.Noise) > 0) {
		t.Errorf("too_noisy %v, noise %q", rep.TooNoisy, rep.Noise)
	}
	if len(rep.Request) != 4 || rep.Request[0].Name != "request GET /users/42" || rep.Request[1].Name != "postgresql.connect" || rep.Request[1].Depth != 1 {
		t.Errorf("request %+v", rep.Request)
	}

	// The spans: a JSON object a line, each connect among them.
	names := map[string]int{}
	for i, line := range strings.Split(strings.TrimSpace(spans.String()), "\n") {
		var s struct{ Name string }
		if err := json.Unmarshal([]byte(line), &s); err != nil || s.Name == "" {
			t.Fatalf("span line %d is not a span: %v: %.200s", i+1, err, line)
		}
		names[s.Name]++
	}
	if names["postgresql.connect"] < n+1 || names["request GET /users/42"] != 1 {
		t.Errorf("spans by name: %v", names)
	}
}

// TestQuickstartProgress: with -json and a DATABASE_URL, what the program is doing goes to its own
// stream and stdout is the report alone, without the comparison (no log or proxy to count with).
func TestQuickstartProgress(t *testing.T) {
	pg := harness.StartT(t, harness.Options{})
	t.Setenv("DATABASE_URL", pg.DSN())
	var out, progress bytes.Buffer
	if err := run(t.Context(), &out, &progress, options{conns: 2, json: true}); err != nil {
		t.Fatal(err)
	}
	if want := fmt.Sprintf("DATABASE_URL is set: connecting to %s:%d\n", pg.Host, pg.Port); progress.String() != want {
		t.Errorf("progress %q, want %q", progress.String(), want)
	}
	var rep map[string]any
	if err := json.Unmarshal(out.Bytes(), &rep); err != nil {
		t.Fatalf("stdout is not one JSON document: %v\n%s", err, out.String())
	}
	if _, ok := rep["compare"]; ok || rep["server"] != fmt.Sprintf("%s:%d", pg.Host, pg.Port) {
		t.Errorf("server %v, compare %v", rep["server"], rep["compare"])
	}
}

// TestQuickstartNoisy checks the verdict on a run's times with made-up ones: a quiet run passes,
// and each sign of a busy machine is named.
func TestQuickstartNoisy(t *testing.T) {
	ms := func(v ...float64) []time.Duration {
		var d []time.Duration
		for _, x := range v {
			d = append(d, time.Duration(x*float64(time.Millisecond)))
		}
		return d
	}
	for _, tt := range []struct {
		name string
		t    timings
		want []string // substrings of the verdict; none: not noisy
	}{
		{"quiet", timings{Cold: 6 * time.Millisecond, Warm: ms(3, 3.2, 3.1, 3.4, 2.9, 3.3), Pgx: ms(7, 6.5, 6.8, 7.2, 6.9, 7, 7.1)}, nil},
		{"quiet, one warm connect", timings{Cold: 6 * time.Millisecond, Warm: ms(3)}, nil},
		{"quiet, one slow warm outlier", timings{Cold: 6 * time.Millisecond, Warm: ms(3, 3.1, 3.2, 3.3, 3.0, 40)}, nil},
		{"warm slower than cold", timings{Cold: 3 * time.Millisecond, Warm: ms(5, 5.2, 5.1, 4.9)},
			[]string{"the warm median 5.10ms is slower than the cold connect 3.00ms"}},
		{"warm slower than cold, one warm connect", timings{Cold: 3 * time.Millisecond, Warm: ms(4)},
			[]string{"the warm median 4.00ms is slower than the cold connect 3.00ms"}},
		{"warm spread too wide", timings{Cold: 20 * time.Millisecond, Warm: ms(2, 2, 3, 5, 6, 9, 12, 15)},
			[]string{"the middle half of the warm connects spans 2.00ms to 9.00ms"}},
		{"pgconnector slower than pgx", timings{Cold: 9 * time.Millisecond, Warm: ms(8, 8.5, 8.2), Pgx: ms(6, 6.2, 6.1)},
			[]string{"pgconnector's median 8.50ms is slower than pgx's 6.10ms"}},
		{"all at once", timings{Cold: 2 * time.Millisecond, Warm: ms(3, 3, 4, 8, 9, 10, 20, 30), Pgx: ms(1, 1)},
			[]string{"warm median", "middle half", "slower than pgx's"}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			got := noisy(tt.t)
			if len(got) != len(tt.want) {
				t.Errorf("noisy = %q, want %d reasons", got, len(tt.want))
			}
			for _, w := range tt.want {
				if !strings.Contains(strings.Join(got, "\n"), w) {
					t.Errorf("noisy = %q, want it to say %q", got, w)
				}
			}
		})
	}
}

// TestQuickstartNoisyText: the text report says when a run was too noisy, and not otherwise.
func TestQuickstartNoisyText(t *testing.T) {
	rep := &report{WarmConnects: 1, Request: []spanLine{{Name: "request GET /users/42"}}}
	var quiet, busy bytes.Buffer
	printText(&quiet, rep)
	rep.Noise = noisy(timings{Cold: 3 * time.Millisecond, Warm: []time.Duration{5 * time.Millisecond}})
	rep.TooNoisy = len(rep.Noise) > 0
	printText(&busy, rep)
	if strings.Contains(quiet.String(), "too noisy") {
		t.Errorf("a quiet run is said to be noisy:\n%s", quiet.String())
	}
	for _, w := range []string{"too noisy to compare times", "re-run it", "  the warm median 5.00ms is slower than the cold connect 3.00ms\n"} {
		if !strings.Contains(busy.String(), w) {
			t.Errorf("the report of a noisy run lacks %q:\n%s", w, busy.String())
		}
	}
}
