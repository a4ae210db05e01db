package harness

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"sort"
	"strconv"
	"strings"
	"time"

	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"
)

// Trace is one trace as Jaeger's query API returns it.
type Trace struct {
	TraceID string // 32 lowercase hex digits
	Spans   []Span // ordered by start time
}

// Span is one span as Jaeger's query API returns it (OTLP JSON, simplified).
type Span struct {
	TraceID      string // 32 lowercase hex digits
	SpanID       string // 16 lowercase hex digits
	ParentSpanID string // "" for a root span
	Name         string
	Kind         trace.SpanKind // trace.SpanKindServer, trace.SpanKindClient, ...
	// Attributes holds the span's attributes: string, bool, int64, float64, []byte, []any or
	// map[string]any values.
	Attributes map[string]any
	Status     Status
	Service    string // the resource's service.name
	Scope      string // the instrumentation scope's name
	Start, End time.Time
}

// Status is a span's status.
type Status struct {
	Code    codes.Code // codes.Unset, codes.Ok or codes.Error
	Message string
}

// tracesLimit is query.num_traces of Traces: more than any test sends.
const tracesLimit = 1000

// Traces returns the traces of service that started at or after since, as the query API
// (GET /api/v3/traces) returns them; none found is not an error.
func (j *Jaeger) Traces(ctx context.Context, service string, since time.Time) ([]Trace, error) {
	q := url.Values{
		"query.service_name":   {service},
		"query.start_time_min": {since.UTC().Format(time.RFC3339Nano)},
		// Spans are stamped by the client's clock: leave room ahead of ours.
		"query.start_time_max": {time.Now().Add(time.Hour).UTC().Format(time.RFC3339Nano)},
		"query.num_traces":     {strconv.Itoa(tracesLimit)},
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, j.QueryURL()+"/api/v3/traces?"+q.Encode(), nil)
	if err != nil {
		return nil, fmt.Errorf("harness: %w", err)
	}
	resp, err := j.client.Do(req)
	if err != nil {
		return nil, fmt.Errorf("harness: Jaeger query: %w", err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, 256<<20))
	if err != nil {
		return nil, fmt.Errorf("harness: Jaeger query: %w", err)
	}
	switch {
	case resp.StatusCode == http.StatusNotFound && strings.Contains(string(body), "No traces found"):
		return nil, nil
	case resp.StatusCode != http.StatusOK:
		return nil, fmt.Errorf("harness: Jaeger query: %s: %s", resp.Status, strings.TrimSpace(string(body)))
	}
	return parseOTLPTraces(body)
}

// WaitForSpans polls Traces every 200 ms until pred holds for the spans of service that started
// at or after since (all traces together, ordered by start time), and returns those spans. When
// ctx ends first it returns the last spans seen and an error.
func (j *Jaeger) WaitForSpans(ctx context.Context, service string, since time.Time, pred func([]Span) bool) ([]Span, error) {
	tick := time.NewTicker(200 * time.Millisecond)
	defer tick.Stop()
	var last []Span
	var lastErr error
	for {
		traces, err := j.Traces(ctx, service, since)
		if err == nil {
			last = last[:0]
			for _, t := range traces {
				last = append(last, t.Spans...)
			}
			sortSpans(last)
			if pred(last) {
				return last, nil
			}
		}
		lastErr = err
		select {
		case <-ctx.Done():
			if lastErr != nil {
				return last, fmt.Errorf("harness: waiting for spans of %q: %w (last query: %v)", service, ctx.Err(), lastErr)
			}
			return last, fmt.Errorf("harness: waiting for spans of %q: %w (%d spans seen, condition not met)", service, ctx.Err(), len(last))
		case <-tick.C:
		}
	}
}

// The OTLP JSON of the API v3 answer: {"result": {"resourceSpans": [...]}}. IDs are hex (as
// Jaeger writes them, unlike the base64 of protobuf's JSON mapping), 64-bit integers are JSON
// strings or numbers, enums numbers or names.
type (
	otlpResult struct {
		Result struct {
			ResourceSpans []struct {
				Resource struct {
					Attributes []otlpKeyValue `json:"attributes"`
				} `json:"resource"`
				ScopeSpans []struct {
					Scope struct {
						Name string `json:"name"`
					} `json:"scope"`
					Spans []otlpSpan `json:"spans"`
				} `json:"scopeSpans"`
			} `json:"resourceSpans"`
		} `json:"result"`
	}
	otlpSpan struct {
		TraceID           string          `json:"traceId"`
		SpanID            string          `json:"spanId"`
		ParentSpanID      string          `json:"parentSpanId"`
		Name              string          `json:"name"`
		Kind              json.RawMessage `json:"kind"`
		StartTimeUnixNano json.RawMessage `json:"startTimeUnixNano"`
		EndTimeUnixNano   json.RawMessage `json:"endTimeUnixNano"`
		Attributes        []otlpKeyValue  `json:"attributes"`
		Status            struct {
			Code    json.RawMessage `json:"code"`
			Message string          `json:"message"`
		} `json:"status"`
	}
	otlpKeyValue struct {
		Key   string       `json:"key"`
		Value otlpAnyValue `json:"value"`
	}
	otlpAnyValue struct {
		StringValue *string         `json:"stringValue"`
		BoolValue   *bool           `json:"boolValue"`
		IntValue    json.RawMessage `json:"intValue"`
		DoubleValue json.RawMessage `json:"doubleValue"`
		BytesValue  *string         `json:"bytesValue"`
		ArrayValue  *struct {
			Values []otlpAnyValue `json:"values"`
		} `json:"arrayValue"`
		KvlistValue *struct {
			Values []otlpKeyValue `json:"values"`
		} `json:"kvlistValue"`
	}
)

// parseOTLPTraces parses an API v3 answer into traces, each with its spans ordered by start
// time, the traces ordered by their first span.
func parseOTLPTraces(body []byte) ([]Trace, error) {
	var r otlpResult
	if err := json.Unmarshal(body, &r); err != nil {
		return nil, fmt.Errorf("harness: Jaeger query answer: %w", err)
	}
	byID := map[string]*Trace{}
	var order []string
	for _, rs := range r.Result.ResourceSpans {
		service := ""
		if v, ok := attributeMap(rs.Resource.Attributes)["service.name"].(string); ok {
			service = v
		}
		for _, ss := range rs.ScopeSpans {
			for _, s := range ss.Spans {
				span, err := s.convert()
				if err != nil {
					return nil, fmt.Errorf("harness: Jaeger query answer: span %q: %w", s.Name, err)
				}
				span.Service, span.Scope = service, ss.Scope.Name
				t := byID[span.TraceID]
				if t == nil {
					t = &Trace{TraceID: span.TraceID}
					byID[span.TraceID] = t
					order = append(order, span.TraceID)
				}
				t.Spans = append(t.Spans, span)
			}
		}
	}
	traces := make([]Trace, 0, len(order))
	for _, id := range order {
		t := byID[id]
		sortSpans(t.Spans)
		traces = append(traces, *t)
	}
	sort.SliceStable(traces, func(a, b int) bool { return traces[a].Spans[0].Start.Before(traces[b].Spans[0].Start) })
	return traces, nil
}

func sortSpans(spans []Span) {
	sort.SliceStable(spans, func(a, b int) bool { return spans[a].Start.Before(spans[b].Start) })
}

func (s otlpSpan) convert() (Span, error) {
	kind, err := enumValue(s.Kind, "SPAN_KIND_", []string{"UNSPECIFIED", "INTERNAL", "SERVER", "CLIENT", "PRODUCER", "CONSUMER"})
	if err != nil {
		return Span{}, fmt.Errorf("kind: %w", err)
	}
	code, err := enumValue(s.Status.Code, "STATUS_CODE_", []string{"UNSET", "OK", "ERROR"})
	if err != nil {
		return Span{}, fmt.Errorf("status code: %w", err)
	}
	start, err := int64Value(s.StartTimeUnixNano)
	if err != nil {
		return Span{}, fmt.Errorf("start time: %w", err)
	}
	end, err := int64Value(s.EndTimeUnixNano)
	if err != nil {
		return Span{}, fmt.Errorf("end time: %w", err)
	}
	// OTLP's status codes (0 unset, 1 ok, 2 error) are not those of the Go API.
	statusCode := [...]codes.Code{codes.Unset, codes.Ok, codes.Error}[code]
	parent := strings.ToLower(s.ParentSpanID)
	if strings.Trim(parent, "0") == "" {
		parent = ""
	}
	return Span{
		TraceID:      strings.ToLower(s.TraceID),
		SpanID:       strings.ToLower(s.SpanID),
		ParentSpanID: parent,
		Name:         s.Name,
		Kind:         trace.SpanKind(kind), // the OTLP and Go API numberings agree
		Attributes:   attributeMap(s.Attributes),
		Status:       Status{Code: statusCode, Message: s.Status.Message},
		Start:        time.Unix(0, start).UTC(),
		End:          time.Unix(0, end).UTC(),
	}, nil
}

// enumValue decodes a protobuf enum written as a number or as its name (PREFIX + names[i]);
// absent means 0.
func enumValue(raw json.RawMessage, prefix string, names []string) (int, error) {
	if len(raw) == 0 || string(raw) == "null" {
		return 0, nil
	}
	var name string
	if json.Unmarshal(raw, &name) == nil {
		for i, n := range names {
			if name == prefix+n {
				return i, nil
			}
		}
		return 0, fmt.Errorf("unknown value %s", raw)
	}
	var n int
	if err := json.Unmarshal(raw, &n); err != nil || n < 0 || n >= len(names) {
		return 0, fmt.Errorf("unknown value %s", raw)
	}
	return n, nil
}

// int64Value decodes a 64-bit integer written as a JSON string or number; absent means 0.
func int64Value(raw json.RawMessage) (int64, error) {
	if len(raw) == 0 || string(raw) == "null" {
		return 0, nil
	}
	var s string
	if json.Unmarshal(raw, &s) == nil {
		return strconv.ParseInt(s, 10, 64)
	}
	return strconv.ParseInt(string(raw), 10, 64)
}

func attributeMap(kvs []otlpKeyValue) map[string]any {
	m := make(map[string]any, len(kvs))
	for _, kv := range kvs {
		m[kv.Key] = kv.Value.value()
	}
	return m
}

func (v otlpAnyValue) value() any {
	switch {
	case v.StringValue != nil:
		return *v.StringValue
	case v.BoolValue != nil:
		return *v.BoolValue
	case len(v.IntValue) > 0:
		n, err := int64Value(v.IntValue)
		if err != nil {
			return string(v.IntValue)
		}
		return n
	case len(v.DoubleValue) > 0:
		var f float64
		if err := json.Unmarshal(v.DoubleValue, &f); err != nil {
			var s string // "NaN", "Infinity", "-Infinity"
			_ = json.Unmarshal(v.DoubleValue, &s)
			f, _ = strconv.ParseFloat(strings.Replace(s, "Infinity", "Inf", 1), 64)
		}
		return f
	case v.BytesValue != nil:
		b, err := base64.StdEncoding.DecodeString(*v.BytesValue)
		if err != nil {
			return *v.BytesValue
		}
		return b
	case v.ArrayValue != nil:
		a := make([]any, len(v.ArrayValue.Values))
		for i, e := range v.ArrayValue.Values {
			a[i] = e.value()
		}
		return a
	case v.KvlistValue != nil:
		return attributeMap(v.KvlistValue.Values)
	default:
		return nil
	}
}
