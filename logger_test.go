package pgconnector_test

import (
	"bytes"
	"context"
	"database/sql"
	"encoding/json"
	"log/slog"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/pgconnector/pgconnector"
	"github.com/pgconnector/pgconnector/internal/harness"
	"github.com/pgconnector/pgconnector/negotiation"
	"github.com/pgconnector/pgconnector/tracing"
)

// logBuffer is a buffer for a JSON handler, written by connects and refreshes at once.
type logBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *logBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *logBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// records returns the records logged so far.
func (b *logBuffer) records(t *testing.T) []map[string]any {
	t.Helper()
	var out []map[string]any
	for _, line := range strings.Split(strings.TrimSpace(b.String()), "\n") {
		if line == "" {
			continue
		}
		var r map[string]any
		if err := json.Unmarshal([]byte(line), &r); err != nil {
			t.Fatalf("a log line that is not JSON: %q: %v", line, err)
		}
		out = append(out, r)
	}
	return out
}

// find returns the records of message msg whose attributes include want (compared as text).
func (b *logBuffer) find(t *testing.T, msg string, want map[string]string) []map[string]any {
	t.Helper()
	var out []map[string]any
next:
	for _, r := range b.records(t) {
		if r["msg"] != msg {
			continue
		}
		for k, v := range want {
			if got, ok := r[k]; !ok || jsonText(got) != v {
				continue next
			}
		}
		out = append(out, r)
	}
	return out
}

func jsonText(v any) string {
	switch v := v.(type) {
	case string:
		return v
	case float64:
		return strconv.FormatFloat(v, 'f', -1, 64)
	case bool:
		return strconv.FormatBool(v)
	}
	b, _ := json.Marshal(v)
	return string(b)
}

// newLogger logs at level and above to a new buffer.
func newLogger(level slog.Level) (*slog.Logger, *logBuffer) {
	b := &logBuffer{}
	return slog.New(slog.NewJSONHandler(b, &slog.HandlerOptions{Level: level})), b
}

// sslmode=prefer against a server without TLS: the first connect falls back from SSL to
// plaintext (Info) and the 'N' is remembered, the next connect's plan skips SSL (Debug). The
// server turns TLS on; once the 'N' is RefreshAge old, a connect starts a refresh that learns
// 'S': "remembered answer changed" (Info).
func TestLoggerFallbackAndRefresh(t *testing.T) {
	srv := harness.StartT(t, harness.Options{})
	l, logs := newLogger(slog.LevelDebug)
	c := newConnector(t, srv.DSN("sslmode=prefer"), pgconnector.WithCacheTTL(10*time.Second), pgconnector.WithLogger(l))
	db := sql.OpenDB(c)
	defer db.Close()
	db.SetMaxIdleConns(0)
	server := map[string]string{"server.address": srv.Host, "server.port": strconv.Itoa(srv.Port)}
	with := func(more ...string) map[string]string {
		m := map[string]string{}
		for k, v := range server {
			m[k] = v
		}
		for i := 0; i < len(more); i += 2 {
			m[more[i]] = more[i+1]
		}
		return m
	}

	if got := transport(t, db); got != "plain" {
		t.Fatalf("first connect: %s, want plain", got)
	}
	fb := logs.find(t, tracing.LogFallback, map[string]string{
		"level": "INFO", "server.address": srv.Host, "pgconnector.fallback.from": "ssl", "pgconnector.fallback.to": "plain",
		"pgconnector.fallback.reason": "server refused SSLRequest",
	})
	if len(fb) != 1 {
		t.Errorf("%d fallback records from ssl to plain, want 1; logs:\n%s", len(fb), logs)
	}
	if n := len(logs.find(t, tracing.LogConnected, with("level", "DEBUG", "pgconnector.transport", "plain"))); n != 1 {
		t.Errorf("%d connected records, want 1", n)
	}

	if got := transport(t, db); got != "plain" {
		t.Fatalf("second connect: %s, want plain", got)
	}
	if n := len(logs.find(t, tracing.LogDecision, with("level", "DEBUG", "pgconnector.plan", "plain", "pgconnector.plan.skipped", "ssl", "pgconnector.cache.hit", "true"))); n != 1 {
		t.Errorf("%d decisions skipping ssl from the remembered answer, want 1; logs:\n%s", n, logs)
	}
	if n := len(logs.find(t, tracing.LogFallback, nil)); n != 1 {
		t.Errorf("%d fallback records after a connect that skipped ssl, want still 1", n)
	}

	if err := srv.SetSSL(true); err != nil {
		t.Fatal(err)
	}
	_, learned := remembered(t, c, negotiation.Key{Host: srv.Host, Port: uint16(srv.Port)}, negotiation.MethodSSL)
	waitUntil(learned.Add(pgconnector.CacheOf(c).RefreshAge()))
	if got := transport(t, db); got != "plain" {
		t.Fatalf("the connect that starts the refresh: %s, want plain", got)
	}
	deadline := time.Now().Add(20 * time.Second)
	want := with("level", "INFO", "pgconnector.refresh.method", "ssl", "pgconnector.refresh.outcome", "enabled")
	for len(logs.find(t, tracing.LogAnswerChanged, want)) != 1 {
		if time.Now().After(deadline) {
			t.Fatalf("no %q record after 20 s; logs:\n%s", tracing.LogAnswerChanged, logs)
		}
		time.Sleep(10 * time.Millisecond)
	}
	if n := len(logs.find(t, tracing.LogRefreshStart, with("level", "DEBUG", "pgconnector.refresh.method", "ssl"))); n != 1 {
		t.Errorf("%d refresh start records, want 1", n)
	}
	if got := transport(t, db); got != "tls" {
		t.Errorf("connect after the refresh: %s, want tls", got)
	}
}

// A server answering SSLRequest with a byte that is neither 'S' nor 'N' breaks the protocol:
// the ssl_request step is a Warn record with error.type protocol_error and the error's text, at
// Debug and at Info alike; the failed connect is Info, with the host.
func TestLoggerProtocolFault(t *testing.T) {
	fs := harness.FaultServerT(t, harness.FaultServerOptions{Fault: harness.Fault{Step: harness.StepSSLAnswer, Kind: harness.FaultGarbage}})
	_, port := fs.Addr()
	dsn := "host=127.0.0.1 port=" + strconv.Itoa(port) + " user=alice dbname=app"
	for _, level := range []slog.Level{slog.LevelDebug, slog.LevelInfo} {
		l, logs := newLogger(level)
		c := newConnector(t, dsn, pgconnector.WithLogger(l))
		if _, err := c.Connect(context.Background()); err == nil {
			t.Fatal("connected to a server that broke the protocol")
		}
		c.Close()
		got := logs.find(t, tracing.LogProtocolFault, map[string]string{"level": "WARN", "error.type": tracing.ErrorTypeProtocol})
		if len(got) != 1 || !strings.Contains(jsonText(got[0]["exception.message"]), "SSLRequest: unexpected answer byte 0x58") {
			t.Errorf("level %v: protocol fault records %v; logs:\n%s", level, got, logs)
		}
		failed := logs.find(t, tracing.LogConnectFailed, map[string]string{
			"level": "INFO", "server.address": "127.0.0.1", "server.port": strconv.Itoa(port), "error.type": tracing.ErrorTypeProtocol,
		})
		if len(failed) != 1 {
			t.Errorf("level %v: %d connect failed records, want 1; logs:\n%s", level, len(failed), logs)
		}
		if n := len(logs.find(t, tracing.SpanSSLRequest, nil)); n != 0 {
			t.Errorf("level %v: the faulty ssl_request logged twice", level)
		}
	}
}

// A connect with a password that fails authentication, and one that succeeds, log everything
// at Debug and never the password (nor the other's); the failure is Info with its SQLSTATE.
func TestLoggerNoSecrets(t *testing.T) {
	_, tlsSrv := servers(t)
	const wrong = "Wr0ng-pw-7fq2-z9"
	l, logs := newLogger(slog.LevelDebug)
	c := newConnector(t, tlsSrv.DSN("password="+wrong, "sslmode=require"), pgconnector.WithLogger(l))
	if _, err := c.Connect(context.Background()); err == nil {
		t.Fatal("connected with a wrong password")
	}
	c.Close()
	ok := newConnector(t, tlsSrv.DSN("sslmode=require"), pgconnector.WithLogger(l))
	conn, err := ok.Connect(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	conn.Close()
	ok.Close()

	if n := len(logs.find(t, tracing.LogConnectFailed, map[string]string{"level": "INFO", "error.type": "28P01"})); n != 1 {
		t.Errorf("%d connect failed records with 28P01, want 1; logs:\n%s", n, logs)
	}
	if n := len(logs.find(t, tracing.SpanStartup, map[string]string{"pgconnector.auth.method": "scram-sha-256", "error.type": "28P01"})); n != 1 {
		t.Errorf("%d failed startup records, want 1", n)
	}
	if n := len(logs.find(t, tracing.LogConnected, map[string]string{"pgconnector.transport": "tls"})); n != 1 {
		t.Errorf("%d connected records, want 1", n)
	}
	text := logs.String()
	for _, secret := range []string{wrong, tlsSrv.Password} {
		if secret != "" && strings.Contains(text, secret) {
			t.Errorf("the logs hold a password:\n%s", text)
		}
	}
	if strings.Contains(strings.ToLower(text), "password=") {
		t.Errorf("the logs hold a password key:\n%s", text)
	}
}
