package pgconnector_test

import (
	"context"
	"fmt"
	"sort"
	"strings"
	"testing"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"

	"github.com/pgconnector/pgconnector"
	"github.com/pgconnector/pgconnector/internal/harness"
)

// spanTree renders the spans under the caller's span as "name[attr=value ...]" lines, children
// indented under their parent, in start order, with only the attributes named in keys; a span's
// decision events are among its children, in time order, as "event decision[attr=value ...]".
func spanTree(t *testing.T, spans []sdktrace.ReadOnlySpan, root trace.SpanID, keys ...attribute.Key) string {
	t.Helper()
	children := map[trace.SpanID][]sdktrace.ReadOnlySpan{}
	byID := map[trace.SpanID]sdktrace.ReadOnlySpan{}
	for _, s := range spans {
		children[s.Parent().SpanID()] = append(children[s.Parent().SpanID()], s)
		byID[s.SpanContext().SpanID()] = s
	}
	var b strings.Builder
	line := func(depth int, name string, kvs []attribute.KeyValue) {
		fmt.Fprintf(&b, "%s%s", strings.Repeat("  ", depth), name)
		var attrs []string
		for _, kv := range kvs {
			for _, k := range keys {
				if kv.Key == k {
					attrs = append(attrs, fmt.Sprintf("%s=%s", k, kv.Value.Emit()))
				}
			}
		}
		if len(attrs) > 0 {
			fmt.Fprintf(&b, "[%s]", strings.Join(attrs, " "))
		}
	}
	var walk func(id trace.SpanID, depth int)
	walk = func(id trace.SpanID, depth int) {
		kids := children[id]
		sort.SliceStable(kids, func(i, j int) bool { return kids[i].StartTime().Before(kids[j].StartTime()) })
		var events []sdktrace.Event
		if parent, ok := byID[id]; ok {
			for _, ev := range parent.Events() {
				if ev.Name == "decision" {
					events = append(events, ev)
				}
			}
		}
		for _, s := range kids {
			for len(events) > 0 && events[0].Time.Before(s.StartTime()) {
				line(depth, "event decision", events[0].Attributes)
				b.WriteString("\n")
				events = events[1:]
			}
			line(depth, s.Name(), s.Attributes())
			if s.Status().Code == codes.Error {
				b.WriteString(" ERROR")
			}
			b.WriteString("\n")
			walk(s.SpanContext().SpanID(), depth+1)
		}
		for _, ev := range events {
			line(depth, "event decision", ev.Attributes)
			b.WriteString("\n")
		}
	}
	walk(root, 0)
	return b.String()
}

var treeKeys = []attribute.Key{
	"db.system.name", "db.namespace", "pgconnector.sslmode", "pgconnector.transport", "pgconnector.cache.hit",
	"pgconnector.plan", "pgconnector.plan.skipped", "pgconnector.ssl.answer", "pgconnector.auth.method", "pgconnector.fallback.reason",
	"pgconnector.fallback.new_connection", "tls.protocol.version", "error.type",
	"pgconnector.gss.credentials.valid", "pgconnector.gss.credentials.reused",
}

func TestSpanTree(t *testing.T) {
	plain, tlsSrv := servers(t)
	dead := harness.FreePort(t)
	for _, tt := range []struct {
		name    string
		dsn     string
		connect int // connects before the one whose tree is checked
		want    string
		fails   bool
	}{
		{
			name: "plain",
			dsn:  plain.DSN("sslmode=disable"),
			want: `postgresql.connect[db.system.name=postgresql db.namespace=app pgconnector.sslmode=disable pgconnector.transport=plain]
  postgresql.gss_credentials[pgconnector.gss.credentials.valid=false pgconnector.gss.credentials.reused=false]
  event decision[pgconnector.plan=plain]
  postgresql.tcp_connect
  postgresql.startup[db.namespace=app pgconnector.auth.method=trust]
`,
		},
		{
			name: "TLS",
			dsn:  tlsSrv.DSN(),
			want: `postgresql.connect[db.system.name=postgresql db.namespace=app pgconnector.sslmode=prefer pgconnector.transport=tls pgconnector.cache.hit=false]
  postgresql.gss_credentials[pgconnector.gss.credentials.valid=false pgconnector.gss.credentials.reused=false]
  event decision[pgconnector.plan=ssl,plain pgconnector.cache.hit=false]
  postgresql.tcp_connect
  postgresql.ssl_request[pgconnector.ssl.answer=S pgconnector.cache.hit=false]
  postgresql.tls_handshake[tls.protocol.version=1.3]
  postgresql.startup[db.namespace=app pgconnector.auth.method=scram-sha-256]
`,
		},
		{
			name: "TLS, warm",
			dsn:  tlsSrv.DSN(), connect: 1,
			want: `postgresql.connect[db.system.name=postgresql db.namespace=app pgconnector.sslmode=prefer pgconnector.transport=tls pgconnector.cache.hit=true]
  postgresql.gss_credentials[pgconnector.gss.credentials.valid=false pgconnector.gss.credentials.reused=true]
  event decision[pgconnector.plan=ssl,plain pgconnector.cache.hit=true]
  postgresql.tcp_connect
  postgresql.ssl_request[pgconnector.ssl.answer=S pgconnector.cache.hit=true]
  postgresql.tls_handshake[tls.protocol.version=1.3]
  postgresql.startup[db.namespace=app pgconnector.auth.method=scram-sha-256]
`,
		},
		{
			name: "fallback after a refused TLS",
			dsn:  plain.DSN(),
			want: `postgresql.connect[db.system.name=postgresql db.namespace=app pgconnector.sslmode=prefer pgconnector.transport=plain pgconnector.cache.hit=false]
  postgresql.gss_credentials[pgconnector.gss.credentials.valid=false pgconnector.gss.credentials.reused=false]
  event decision[pgconnector.plan=ssl,plain pgconnector.cache.hit=false]
  postgresql.tcp_connect
  postgresql.ssl_request[pgconnector.ssl.answer=N pgconnector.cache.hit=false]
  postgresql.fallback[pgconnector.fallback.reason=server refused SSLRequest pgconnector.fallback.new_connection=false]
  postgresql.startup[db.namespace=app pgconnector.auth.method=trust]
`,
		},
		{
			name: "refused TLS remembered",
			dsn:  plain.DSN(), connect: 1,
			want: `postgresql.connect[db.system.name=postgresql db.namespace=app pgconnector.sslmode=prefer pgconnector.transport=plain pgconnector.cache.hit=true]
  postgresql.gss_credentials[pgconnector.gss.credentials.valid=false pgconnector.gss.credentials.reused=true]
  event decision[pgconnector.plan=plain pgconnector.plan.skipped=ssl pgconnector.cache.hit=true]
  postgresql.tcp_connect
  postgresql.startup[db.namespace=app pgconnector.auth.method=trust]
`,
		},
		{
			name:  "failed connect",
			dsn:   fmt.Sprintf("host=127.0.0.1 port=%d user=app dbname=app sslmode=prefer connect_timeout=5", dead),
			fails: true,
			want: `postgresql.connect[db.system.name=postgresql db.namespace=app pgconnector.sslmode=prefer error.type=dial_error] ERROR
  postgresql.gss_credentials[pgconnector.gss.credentials.valid=false pgconnector.gss.credentials.reused=false]
  event decision[pgconnector.plan=ssl,plain pgconnector.cache.hit=false]
  postgresql.tcp_connect[error.type=dial_error] ERROR
  postgresql.fallback[pgconnector.fallback.reason=could not connect pgconnector.fallback.new_connection=false]
`,
		},
		{
			name:  "wrong password",
			dsn:   tlsSrv.DSN("password=wrong", "sslmode=require"),
			fails: true,
			want: `postgresql.connect[db.system.name=postgresql db.namespace=app pgconnector.sslmode=require error.type=28P01] ERROR
  postgresql.gss_credentials[pgconnector.gss.credentials.valid=false pgconnector.gss.credentials.reused=false]
  event decision[pgconnector.plan=ssl pgconnector.cache.hit=false]
  postgresql.tcp_connect
  postgresql.ssl_request[pgconnector.ssl.answer=S pgconnector.cache.hit=false]
  postgresql.tls_handshake[tls.protocol.version=1.3]
  postgresql.startup[db.namespace=app pgconnector.auth.method=scram-sha-256 error.type=28P01] ERROR
`,
		},
	} {
		t.Run(tt.name, func(t *testing.T) {
			rec, tp := newRecorder()
			c := newConnector(t, tt.dsn, pgconnector.WithTracerProvider(tp))
			for range tt.connect {
				conn, err := c.Connect(context.Background())
				if err != nil {
					t.Fatal(err)
				}
				conn.Close()
			}
			ctx, parent := tp.Tracer("test").Start(context.Background(), "request")
			conn, err := c.Connect(ctx)
			parent.End()
			if (err != nil) != tt.fails {
				t.Fatalf("connect error = %v, want failure: %v", err, tt.fails)
			}
			if conn != nil {
				conn.Close()
			}
			got := spanTree(t, rec.Ended(), parent.SpanContext().SpanID(), treeKeys...)
			if got != tt.want {
				t.Errorf("span tree:\n%s\nwant:\n%s", got, tt.want)
			}
			for _, s := range rec.Ended() {
				// A step's error says its cause, not pgx's "failed to connect to `user=...`:
				// addr (host): server error: " around it.
				if d := s.Status().Description; strings.Contains(d, "failed to connect to") || strings.Contains(d, "server error:") {
					t.Errorf("span %s status %q: pgx's wrapper, want the cause", s.Name(), d)
				}
				for _, kv := range s.Attributes() {
					if v := kv.Value.Emit(); strings.Contains(v, tlsSrv.Password) || strings.Contains(v, "wrong") && kv.Key != "pgconnector.fallback.reason" {
						t.Errorf("span %s attribute %s = %q holds a password", s.Name(), kv.Key, v)
					}
				}
			}
		})
	}
}
