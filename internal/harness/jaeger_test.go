package harness

import (
	"context"
	"errors"
	"net"
	"os"
	"reflect"
	"testing"
	"time"

	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"
)

func TestParseProcNetAddr(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want string
	}{
		{"0100007F:1F90", "127.0.0.1:8080"},
		{"00000000:22B8", "0.0.0.0:8888"},
		{"0101A8C0:0016", "192.168.1.1:22"},
		{"00000000000000000000000001000000:0050", "[::1]:80"},
		{"00000000000000000000000000000000:0050", "[::]:80"},
		{"0000000000000000FFFF00000100007F:1F90", "127.0.0.1:8080"}, // IPv4-mapped
	} {
		got, err := parseProcNetAddr(tc.in)
		if err != nil {
			t.Errorf("%s: %v", tc.in, err)
			continue
		}
		if got.String() != tc.want {
			t.Errorf("%s: got %s, want %s", tc.in, got, tc.want)
		}
	}
	for _, bad := range []string{"", "0100007F", "0100007F:", "0100007:1F90", "0100007G:1F90", "0100007F:10000"} {
		if a, err := parseProcNetAddr(bad); err == nil {
			t.Errorf("%q: got %v, want an error", bad, a)
		}
	}
}

// TestParseOTLPTraces reads an answer of GET /api/v3/traces as Jaeger v2 writes it (OTLP JSON:
// hex IDs, enums and 64-bit integers as numbers or strings).
func TestParseOTLPTraces(t *testing.T) {
	body := `{"result":{"resourceSpans":[
	  {"resource":{"attributes":[{"key":"service.name","value":{"stringValue":"svc"}}]},
	   "scopeSpans":[{"scope":{"name":"lib"},"spans":[
	     {"traceId":"0AF7651916CD43DD8448EB211C80319C","spanId":"00f067aa0ba902b7","parentSpanId":"b7ad6b7169203331",
	      "name":"child","kind":3,"startTimeUnixNano":"1700000000000000200","endTimeUnixNano":"1700000000000000300",
	      "attributes":[
	        {"key":"s","value":{"stringValue":"x"}},
	        {"key":"b","value":{"boolValue":true}},
	        {"key":"i","value":{"intValue":"5432"}},
	        {"key":"n","value":{"intValue":7}},
	        {"key":"d","value":{"doubleValue":1.5}},
	        {"key":"inf","value":{"doubleValue":"Infinity"}},
	        {"key":"raw","value":{"bytesValue":"AQI="}},
	        {"key":"arr","value":{"arrayValue":{"values":[{"stringValue":"a"},{"intValue":"1"}]}}},
	        {"key":"kv","value":{"kvlistValue":{"values":[{"key":"k","value":{"boolValue":false}}]}}}],
	      "status":{"code":2,"message":"boom"}},
	     {"traceId":"0af7651916cd43dd8448eb211c80319c","spanId":"b7ad6b7169203331","parentSpanId":"",
	      "name":"root","kind":"SPAN_KIND_SERVER","startTimeUnixNano":"1700000000000000100","endTimeUnixNano":"1700000000000000400",
	      "status":{"code":"STATUS_CODE_OK"}}]}]},
	  {"resource":{},"scopeSpans":[{"scope":{},"spans":[
	     {"traceId":"00000000000000000000000000000001","spanId":"0000000000000002","parentSpanId":"0000000000000000",
	      "name":"other","startTimeUnixNano":"1600000000000000000","endTimeUnixNano":"1600000000000000001","status":{}}]}]}
	]}}`
	traces, err := parseOTLPTraces([]byte(body))
	if err != nil {
		t.Fatal(err)
	}
	if len(traces) != 2 || traces[0].TraceID != "00000000000000000000000000000001" || traces[1].TraceID != "0af7651916cd43dd8448eb211c80319c" {
		t.Fatalf("traces not grouped and ordered by start: %+v", traces)
	}
	other := traces[0].Spans[0]
	if other.ParentSpanID != "" || other.Kind != trace.SpanKindUnspecified || other.Status.Code != codes.Unset || other.Service != "" {
		t.Errorf("other: %+v", other)
	}
	spans := traces[1].Spans
	if len(spans) != 2 || spans[0].Name != "root" || spans[1].Name != "child" {
		t.Fatalf("spans not ordered by start: %+v", spans)
	}
	root, child := spans[0], spans[1]
	if root.ParentSpanID != "" || root.Kind != trace.SpanKindServer || root.Status.Code != codes.Ok {
		t.Errorf("root: %+v", root)
	}
	if child.ParentSpanID != root.SpanID || child.TraceID != root.TraceID || child.Kind != trace.SpanKindClient {
		t.Errorf("child: %+v", child)
	}
	if child.Status != (Status{Code: codes.Error, Message: "boom"}) {
		t.Errorf("child status: %+v", child.Status)
	}
	if child.Service != "svc" || child.Scope != "lib" {
		t.Errorf("child service %q scope %q", child.Service, child.Scope)
	}
	if want := time.Unix(0, 1700000000000000200).UTC(); !child.Start.Equal(want) || child.End.Sub(child.Start) != 100 {
		t.Errorf("child times %v .. %v", child.Start, child.End)
	}
	want := map[string]any{
		"s": "x", "b": true, "i": int64(5432), "n": int64(7), "d": 1.5, "inf": posInf(),
		"raw": []byte{1, 2}, "arr": []any{"a", int64(1)}, "kv": map[string]any{"k": false},
	}
	if !reflect.DeepEqual(child.Attributes, want) {
		t.Errorf("attributes:\n got %#v\nwant %#v", child.Attributes, want)
	}

	for _, bad := range []string{`{`, `{"result":{"resourceSpans":[{"scopeSpans":[{"spans":[{"kind":9}]}]}]}}`} {
		if _, err := parseOTLPTraces([]byte(bad)); err == nil {
			t.Errorf("%s: no error", bad)
		}
	}
}

func posInf() float64 {
	var zero float64
	return 1 / zero
}

// TestJaeger starts a real Jaeger, checks that it listens on loopback only and answers the query
// API, and stops it. The first run on a machine builds Jaeger (see JaegerBinary). That spans sent
// to either OTLP receiver come back through the query API is TestHarnessJaegerOTLP in
// examples/e2e, where the OTLP exporters are: this module does not require them.
func TestJaeger(t *testing.T) {
	j := StartJaegerT(t)

	// Every listening socket of the process is on loopback, and ours are among them.
	addrs, err := listeningAddrs(j.pid)
	if err != nil {
		t.Fatal(err)
	}
	ports := map[int]bool{}
	for _, a := range addrs {
		if !a.IP.IsLoopback() {
			t.Errorf("Jaeger listens on %s", a)
		}
		ports[a.Port] = true
	}
	for _, ep := range []string{j.OTLPGRPCEndpoint(), j.OTLPHTTPEndpoint(), j.QueryGRPCEndpoint(), j.QueryURL()[len("http://"):]} {
		host, port, err := net.SplitHostPort(ep)
		if err != nil || host != "127.0.0.1" {
			t.Errorf("endpoint %q is not on 127.0.0.1", ep)
			continue
		}
		if p, _ := net.LookupPort("tcp", port); !ports[p] {
			t.Errorf("Jaeger does not listen on %s (listening: %v)", ep, addrs)
		}
	}

	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	since := time.Now().Add(-time.Second)
	if traces, err := j.Traces(ctx, "nobody", since); err != nil || len(traces) != 0 {
		t.Errorf("Traces of an unknown service: %v, %v; want none and no error", traces, err)
	}

	dir := j.Dir
	if err := j.Stop(); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(dir); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("Stop left %s: %v", dir, err)
	}
	if c, err := net.DialTimeout("tcp", j.OTLPHTTPEndpoint(), time.Second); err == nil {
		c.Close()
		t.Errorf("something still listens on %s after Stop", j.OTLPHTTPEndpoint())
	}
}
