package pgconnector_test

import (
	"context"
	"database/sql"
	"os"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"go.opentelemetry.io/otel/attribute"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/pgconnector/pgconnector"
	"github.com/pgconnector/pgconnector/internal/harness"
	"github.com/pgconnector/pgconnector/negotiation"
	"github.com/pgconnector/pgconnector/tracing"
)

// The background refresh of a remembered negative answer, against real servers. TTLs are short
// (10 s, a refresh age of 5 s, with room for a loaded machine) so that the refresh age
// (min(TTL/2, 1 min)) passes quickly; each test checks that what it shows happened before the
// remembered answer would have expired anyway.

// refreshSpans returns the ended refresh spans.
func refreshSpans(rec *tracetest.SpanRecorder) []sdktrace.ReadOnlySpan {
	var out []sdktrace.ReadOnlySpan
	for _, s := range rec.Ended() {
		if s.Name() == tracing.SpanRefresh {
			out = append(out, s)
		}
	}
	return out
}

// waitRefresh waits (at most 20 s) until n refresh spans have ended and returns the last one's
// outcome.
func waitRefresh(t *testing.T, rec *tracetest.SpanRecorder, n int) string {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for {
		spans := refreshSpans(rec)
		if len(spans) >= n {
			return attr(spans[n-1].Attributes(), tracing.RefreshOutcomeKey)
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d refresh spans ended after 20 s, want %d", len(spans), n)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func attr(kvs []attribute.KeyValue, k attribute.Key) string {
	for _, kv := range kvs {
		if kv.Key == k {
			return kv.Value.Emit()
		}
	}
	return ""
}

// lastConnectSpan returns the last ended connect span.
func lastConnectSpan(t *testing.T, rec *tracetest.SpanRecorder) sdktrace.ReadOnlySpan {
	t.Helper()
	ended := rec.Ended()
	for i := len(ended) - 1; i >= 0; i-- {
		if ended[i].Name() == tracing.SpanConnect {
			return ended[i]
		}
	}
	t.Fatal("no connect span")
	return nil
}

// planOf returns the attributes of the connect span's last decision event (the plan of the host
// it connected to, when it connected).
func planOf(sp sdktrace.ReadOnlySpan) []attribute.KeyValue {
	ev := sp.Events()
	for i := len(ev) - 1; i >= 0; i-- {
		if ev[i].Name == "decision" {
			return ev[i].Attributes
		}
	}
	return nil
}

// remembered returns the one cache key c has for host:port (whatever its principal) and what it
// remembers about m there.
func remembered(t *testing.T, c *pgconnector.Connector, key negotiation.Key, m negotiation.Method) (negotiation.Answer, time.Time) {
	t.Helper()
	return pgconnector.CacheOf(c).Remembered(key, m)
}

// waitUntil sleeps until at.
func waitUntil(at time.Time) { time.Sleep(time.Until(at)) }

// refreshGoroutines counts the goroutines running a refresh.
func refreshGoroutines() int {
	buf := make([]byte, 4<<20)
	buf = buf[:runtime.Stack(buf, true)]
	n := 0
	for _, g := range strings.Split(string(buf), "\n\n") {
		if strings.Contains(g, "negotiation.(*Negotiator).refresh") {
			n++
		}
	}
	return n
}

func openFDs() int {
	entries, _ := os.ReadDir("/proc/self/fd")
	return len(entries)
}

// (a) sslmode=prefer against a server without TLS: connects are plaintext, SSL skipped. The
// server turns TLS on. Once the 'N' is RefreshAge old, a connect goes on in plaintext at once
// while a refresh asks again in the background (through a proxy that delays the answer to
// SSLRequest by 300 ms: the connect returned while the refresh was still waiting for it); the
// next connect is TLS, before the 'N' would have expired.
func TestRefreshTurnsTLSOnWithSSLModePrefer(t *testing.T) {
	srv := harness.StartT(t, harness.Options{})
	px := harness.FaultProxyT(t, srv.Addr(), harness.Fault{Kind: harness.FaultTrickle, Step: harness.StepSSLAnswer, Delay: 300 * time.Millisecond})
	host, port := px.Addr()
	const ttl = 10 * time.Second
	rec, tp := newRecorder()
	c := newConnector(t, srv.DSN("host="+host, "port="+strconv.Itoa(port), "sslmode=prefer"), pgconnector.WithCacheTTL(ttl), pgconnector.WithTracerProvider(tp), recordingMeter())
	db := sql.OpenDB(c)
	defer db.Close()
	db.SetMaxIdleConns(0)
	key := negotiation.Key{Host: host, Port: uint16(port)}

	if got := transport(t, db); got != "plain" {
		t.Fatalf("first connect: %s, want plain", got)
	}
	a, learned := remembered(t, c, key, negotiation.MethodSSL)
	if a != negotiation.AnswerNo {
		t.Fatalf("after the first connect the cache says %v, want no", a)
	}
	if err := srv.SetSSL(true); err != nil {
		t.Fatal(err)
	}
	if got := transport(t, db); got != "plain" {
		t.Fatalf("connect before the refresh age: %s, want plain", got)
	}
	if n := len(refreshSpans(rec)); n != 0 || px.Stats().SSLRequests != 1 {
		t.Fatalf("a refresh before the refresh age: %d spans, %d SSLRequests", n, px.Stats().SSLRequests)
	}

	waitUntil(learned.Add(pgconnector.CacheOf(c).RefreshAge()))
	conn, err := c.Connect(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	// The connect that triggered the refresh is done; the refresh, waiting 300 ms for the
	// server's 'S', is not.
	if n := len(refreshSpans(rec)); n != 0 {
		t.Fatalf("the refresh ended before the connect that started it returned")
	}
	conn.Close()
	if sp := lastConnectSpan(t, rec); attr(sp.Attributes(), tracing.TransportKey) != "plain" ||
		attr(planOf(sp), tracing.PlanSkippedKey) != "ssl" {
		t.Errorf("the triggering connect: %v, decision %v, want plain with ssl skipped", sp.Attributes(), planOf(sp))
	}
	if got := waitRefresh(t, rec, 1); got != "enabled" {
		t.Fatalf("refresh outcome %q, want enabled", got)
	}
	if got := transport(t, db); got != "tls" {
		t.Errorf("connect after the refresh: %s, want tls", got)
	}
	if time.Now().After(learned.Add(ttl)) {
		t.Fatalf("too slow to tell: the 'N' learned at %v would have expired by now", learned)
	}
	r := refreshSpans(rec)[0]
	if r.Parent().IsValid() || attr(r.Attributes(), tracing.RefreshMethodKey) != "ssl" {
		t.Errorf("refresh span: parent %v, attributes %v", r.Parent(), r.Attributes())
	}
	if d := r.EndTime().Sub(r.StartTime()); d < 300*time.Millisecond {
		t.Errorf("the refresh took %v: the proxy's delay did not apply to it", d)
	}
}

// (b) sslmode=allow: libpq tries plaintext first and TLS only when plaintext is refused, so the
// 'N' behind the plan matters when pg_hba refuses plaintext. The 'N' is learned (plaintext
// refused, 'N'), then pg_hba allows plaintext. The server turns TLS on; a connect after the
// refresh age is plaintext (as libpq's) and starts the refresh, which learns 'S': the next
// plan is "plain,ssl" again. When pg_hba refuses plaintext once more, a connect goes on to TLS on
// the spot: two backends, without the retry of a stale answer (three).
func TestRefreshTurnsTLSOnWithSSLModeAllow(t *testing.T) {
	refuse := "hostnossl all all 127.0.0.1/32 reject"
	trust := "host all all 127.0.0.1/32 trust"
	srv := harness.StartT(t, harness.Options{HBA: []string{refuse, trust}})
	const ttl = 10 * time.Second
	rec, tp := newRecorder()
	c := newConnector(t, srv.DSN("sslmode=allow"), pgconnector.WithCacheTTL(ttl), pgconnector.WithTracerProvider(tp), recordingMeter())
	db := sql.OpenDB(c)
	defer db.Close()
	db.SetMaxIdleConns(0)
	key := negotiation.Key{Host: srv.Host, Port: uint16(srv.Port)}

	if _, err := c.Connect(context.Background()); err == nil {
		t.Fatal("connected while pg_hba refuses plaintext and the server has no TLS")
	}
	a, learned := remembered(t, c, key, negotiation.MethodSSL)
	if a != negotiation.AnswerNo {
		t.Fatalf("the cache says %v, want no", a)
	}
	if err := srv.SetHBA(trust); err != nil {
		t.Fatal(err)
	}
	if got := transport(t, db); got != "plain" {
		t.Fatalf("%s, want plain", got)
	}
	if err := srv.SetSSL(true); err != nil {
		t.Fatal(err)
	}
	waitUntil(learned.Add(pgconnector.CacheOf(c).RefreshAge()))
	if got := transport(t, db); got != "plain" {
		t.Fatalf("the triggering connect: %s, want plain", got)
	}
	if got := waitRefresh(t, rec, 1); got != "enabled" {
		t.Fatalf("refresh outcome %q, want enabled", got)
	}
	if got := transport(t, db); got != "plain" {
		t.Errorf("sslmode=allow with plaintext allowed: %s, want plain (libpq's order)", got)
	}
	if sp := lastConnectSpan(t, rec); attr(planOf(sp), tracing.PlanKey) != "plain,ssl" || attr(planOf(sp), tracing.PlanSkippedKey) != "" {
		t.Errorf("plan after the refresh: %v, want plain,ssl with nothing skipped", planOf(sp))
	}
	if err := srv.SetHBA(refuse, trust); err != nil {
		t.Fatal(err)
	}
	mark := srv.LogMark()
	before := len(rec.Ended())
	if got := transport(t, db); got != "tls" {
		t.Errorf("with plaintext refused: %s, want tls", got)
	}
	if n, err := srv.ConnectionsSince(mark); err != nil || n != 2 {
		t.Errorf("%d backends (%v), want 2: plaintext refused, then TLS", n, err)
	}
	for _, s := range rec.Ended()[before:] {
		if s.Name() == tracing.SpanFallback && strings.Contains(attr(s.Attributes(), tracing.FallbackReasonKey), "stale") {
			t.Error("the connect retried a stale answer: the refresh did not take")
		}
	}
	if time.Now().After(learned.Add(ttl)) {
		t.Fatalf("too slow to tell: the 'N' learned at %v would have expired by now", learned)
	}
}

// (c) gssencmode=prefer against a server whose pg_hba has no hostgssenc line: GSS encryption
// fails (28000 over GSS) and "no GSS" is remembered. A hostgssenc line is added; after the
// refresh age a connect starts the refresh (GSS through startup, then Terminate), and the next
// connect is GSS-encrypted, before "no GSS" would have expired.
func TestRefreshTurnsGSSOn(t *testing.T) {
	lab := newKerberosLab(t)
	trust := "hostnogssenc all all 127.0.0.1/32 trust"
	srv := lab.server(t, true, trust)
	const ttl = 10 * time.Second
	rec, tp := newRecorder()
	c := lab.connector(t, aliceDSN(srv, "localhost", "sslmode=disable"), pgconnector.WithCacheTTL(ttl), pgconnector.WithTracerProvider(tp), recordingMeter())
	db := sql.OpenDB(c)
	defer db.Close()
	db.SetMaxIdleConns(0)
	key := negotiation.Key{Host: "localhost", Port: uint16(srv.Port), Principal: "alice@" + lab.kdc.Realm}

	if got := transport(t, db); got != "plain" {
		t.Fatalf("first connect: %s, want plain", got)
	}
	a, learned := remembered(t, c, key, negotiation.MethodGSS)
	if a != negotiation.AnswerNo {
		t.Fatalf("the cache says %v about GSS, want no", a)
	}
	if err := srv.SetHBA(lab.gssHBA(), trust); err != nil {
		t.Fatal(err)
	}
	if got := transport(t, db); got != "plain" {
		t.Fatalf("connect before the refresh age: %s, want plain", got)
	}
	waitUntil(learned.Add(pgconnector.CacheOf(c).RefreshAge()))
	if got := transport(t, db); got != "plain" {
		t.Fatalf("the triggering connect: %s, want plain", got)
	}
	if got := waitRefresh(t, rec, 1); got != "enabled" {
		t.Fatalf("refresh outcome %q, want enabled", got)
	}
	if got := transport(t, db); got != "gss" {
		t.Errorf("connect after the refresh: %s, want gss", got)
	}
	if time.Now().After(learned.Add(ttl)) {
		t.Fatalf("too slow to tell: the answer learned at %v would have expired by now", learned)
	}
	r := refreshSpans(rec)[0]
	if attr(r.Attributes(), tracing.RefreshMethodKey) != "gss" {
		t.Errorf("refresh span attributes %v", r.Attributes())
	}
	var steps []string
	for _, s := range rec.Ended() {
		if s.SpanContext().TraceID() == r.SpanContext().TraceID() && s.Name() != tracing.SpanRefresh {
			steps = append(steps, s.Name())
		}
	}
	for _, want := range []string{tracing.SpanGSSEncRequest, tracing.SpanGSSContext, tracing.SpanStartup} {
		if !strings.Contains(strings.Join(steps, " "), want) {
			t.Errorf("the refresh's trace has %v, no %s", steps, want)
		}
	}
}

// (d) 50 concurrent connects deciding from an old 'N' start one refresh: 51 backends.
func TestRefreshOncePerHost(t *testing.T) {
	srv := harness.StartT(t, harness.Options{})
	rec, tp := newRecorder()
	c := newConnector(t, srv.DSN("sslmode=prefer"), pgconnector.WithCacheTTL(10*time.Second), pgconnector.WithTracerProvider(tp), recordingMeter())
	defer c.Close()
	key := negotiation.Key{Host: srv.Host, Port: uint16(srv.Port)}
	conn, err := c.Connect(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	conn.Close()
	_, learned := remembered(t, c, key, negotiation.MethodSSL)
	waitUntil(learned.Add(pgconnector.CacheOf(c).RefreshAge()))

	const n = 50
	mark := srv.LogMark()
	var wg sync.WaitGroup
	start := make(chan struct{})
	for range n {
		wg.Go(func() {
			<-start
			conn, err := c.Connect(context.Background())
			if err != nil {
				t.Error(err)
				return
			}
			conn.Close()
		})
	}
	close(start)
	wg.Wait()
	if got := waitRefresh(t, rec, 1); got != "confirmed" {
		t.Errorf("refresh outcome %q, want confirmed (the server has no TLS)", got)
	}
	time.Sleep(200 * time.Millisecond) // a second refresh, if any, would show by now
	if got := len(refreshSpans(rec)); got != 1 {
		t.Errorf("%d refreshes, want 1", got)
	}
	if got, err := srv.ConnectionsSince(mark); err != nil || got != n+1 {
		t.Errorf("%d backends (%v) for %d connects, want %d: one refresh", got, err, n, n+1)
	}
}

// (e) Connector.Close stops a refresh stalled on a server that never answers SSLRequest: it
// returns at once (not after the 30 s bound), and leaves no refresh goroutine and no socket.
func TestCloseStopsARunningRefresh(t *testing.T) {
	srv := harness.StartT(t, harness.Options{TLS: true})
	px := harness.FaultProxyT(t, srv.Addr(), harness.Fault{Kind: harness.FaultStall, Step: harness.StepSSLAnswer})
	host, port := px.Addr()
	rec, tp := newRecorder()
	c := newConnector(t, srv.DSN("host="+host, "port="+strconv.Itoa(port), "sslmode=prefer"), pgconnector.WithCacheTTL(10*time.Second), pgconnector.WithTracerProvider(tp), recordingMeter())
	key := negotiation.Key{Host: host, Port: uint16(port)}
	fds, goroutines := openFDs(), runtime.NumGoroutine()
	// The proxy stalls every SSLRequest, so 'N' cannot be learned through it: remember it.
	pgconnector.CacheOf(c).SetSSL(key, negotiation.AnswerNo)
	_, learned := remembered(t, c, key, negotiation.MethodSSL)
	waitUntil(learned.Add(pgconnector.CacheOf(c).RefreshAge()))

	conn, err := c.Connect(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	conn.Close()
	deadline := time.Now().Add(10 * time.Second)
	for px.Stats().SSLRequests == 0 {
		if time.Now().After(deadline) {
			t.Fatal("no refresh reached the proxy")
		}
		time.Sleep(10 * time.Millisecond)
	}
	if g := refreshGoroutines(); g != 1 {
		t.Errorf("%d refresh goroutines while it stalls, want 1", g)
	}
	start := time.Now()
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
	if d := time.Since(start); d > 5*time.Second {
		t.Errorf("Close took %v", d)
	}
	if g := refreshGoroutines(); g != 0 {
		t.Errorf("%d refresh goroutines after Close", g)
	}
	if got := waitRefresh(t, rec, 1); got != "canceled" {
		t.Errorf("refresh outcome %q, want canceled", got)
	}
	if a, l := remembered(t, c, key, negotiation.MethodSSL); a != negotiation.AnswerNo || !l.Equal(learned) {
		t.Errorf("after the canceled refresh: %v learned at %v, want no at %v", a, l, learned)
	}
	// The refresh's socket is closed (the in-process proxy then closes its side too, and its
	// goroutines for that connection end).
	deadline = time.Now().Add(5 * time.Second)
	for openFDs() > fds || runtime.NumGoroutine() > goroutines {
		if time.Now().After(deadline) {
			buf := make([]byte, 1<<20)
			t.Errorf("after Close: %d file descriptors (%d before), %d goroutines (%d before):\n%s",
				openFDs(), fds, runtime.NumGoroutine(), goroutines, buf[:runtime.Stack(buf, true)])
			break
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// (f) A refresh that times out (connect_timeout) or is reset learns nothing, though the server
// has TLS: the remembered 'N' keeps its age, and connects stay plaintext until it expires.
func TestInconclusiveRefreshKeepsTheAnswer(t *testing.T) {
	srv := harness.StartT(t, harness.Options{TLS: true})
	for _, kind := range []harness.FaultKind{harness.FaultStall, harness.FaultReset} {
		t.Run(kind.String(), func(t *testing.T) {
			px := harness.FaultProxyT(t, srv.Addr(), harness.Fault{Kind: kind, Step: harness.StepSSLAnswer})
			host, port := px.Addr()
			rec, tp := newRecorder()
			c := newConnector(t, srv.DSN("host="+host, "port="+strconv.Itoa(port), "sslmode=prefer", "connect_timeout=1"),
				pgconnector.WithCacheTTL(10*time.Second), pgconnector.WithTracerProvider(tp), recordingMeter())
			defer c.Close()
			key := negotiation.Key{Host: host, Port: uint16(port)}
			pgconnector.CacheOf(c).SetSSL(key, negotiation.AnswerNo)
			_, learned := remembered(t, c, key, negotiation.MethodSSL)
			waitUntil(learned.Add(pgconnector.CacheOf(c).RefreshAge()))

			conn, err := c.Connect(context.Background())
			if err != nil {
				t.Fatal(err)
			}
			conn.Close()
			if got := waitRefresh(t, rec, 1); got != "inconclusive" {
				t.Errorf("refresh outcome %q, want inconclusive", got)
			}
			r := refreshSpans(rec)[0]
			if want := map[harness.FaultKind]string{harness.FaultStall: "timeout"}[kind]; want != "" && attr(r.Attributes(), "error.type") != want {
				t.Errorf("error.type %q, want %q", attr(r.Attributes(), "error.type"), want)
			}
			if a, l := remembered(t, c, key, negotiation.MethodSSL); a != negotiation.AnswerNo || !l.Equal(learned) {
				t.Errorf("after the %s: %v learned at %v, want no at %v", kind, a, l, learned)
			}
			// The next connect is plaintext and starts no other refresh (one per refresh age).
			conn, err = c.Connect(context.Background())
			if err != nil {
				t.Fatal(err)
			}
			conn.Close()
			if st := px.Stats(); st.SSLRequests != 1 {
				t.Errorf("%d SSLRequests, want the refresh's one", st.SSLRequests)
			}
		})
	}
}
