// Command pgconnect explains how pgconnector connects to a server.
//
//	pgconnect explain [-n N] [-json] [-timeout D] [DSN]
//
// connects to the DSN (or, without one, what the PG* environment says, as libpq) once cold and N
// times warm (default 1) with one connector, and prints per connect the decision and why (the
// modes, the plan, what the cache remembered, the Kerberos credentials), each step with its
// duration as a text waterfall, the result (host, transport, server version, authentication
// method), and what libpq and pgx would have spent on the same server: sockets, backends and
// round trips, estimated from the server's answers with their rules (see EstimateLibpq and
// EstimatePgx). The steps come from the connector's spans (docs/observability.md, Spans): the
// children of the connect span, a step nested in one (the wait for a credential under the
// startup) indented under it, and the events of the connect and of its steps but the decisions
// (the server's OAuth discovery answer, an attempt made again with a fresh credential). -json
// prints the same as one JSON document. The password is never printed.
//
// Exit status: 0 when every connect succeeded (and for -h or help, which print the usage on
// stdout); 1 when a connect failed, and the output names the step that failed by its span name
// ("failed at ssl_request: ..."); 2 for a usage error (an unknown command or flag, a misplaced
// argument) or a connection string that does not parse, with the error and, for a usage error,
// the usage on stderr.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/pgconnector/pgconnector"
	"github.com/pgconnector/pgconnector/negotiation"
	"github.com/pgconnector/pgconnector/tracing"
)

func main() {
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

const usage = `usage: pgconnect explain [-n N] [-json] [-timeout D] [DSN]

Connects once cold and N times warm, and explains each connect. Without a DSN,
the PG* environment (PGHOST, PGPORT, PGUSER, PGSSLMODE, PGGSSENCMODE...) applies.
Flags go before the DSN.

  -n N        warm connects after the cold one (default 1)
  -json       print one JSON document
  -timeout D  time limit of each connect (default 30s)

Exit status: 0 connected; 1 a connect failed (the output names the failed step);
2 usage error or a connection string that does not parse.
`

// Exit statuses (see usage).
const (
	exitOK            = 0
	exitConnectFailed = 1
	exitUsage         = 2
)

// Report is what explain prints, -json as it is.
type Report struct {
	Target     string    `json:"target"` // host, port, user, dbname and modes; never the password
	SSLMode    string    `json:"sslmode"`
	GSSEncMode string    `json:"gssencmode"`
	Connects   []Connect `json:"connects"`
	// Compare is what libpq and pgx would have spent per connect, per host connected to,
	// estimated from the server's answers.
	Compare []Comparison `json:"compare,omitempty"`
	// FailedStep and Error say why the last connect failed; empty on success. FailedStep is a
	// step's span name without "postgresql." (tcp_connect, ssl_request, startup, ...), or
	// "decision" when the modes allow no method on the host, "target_session_attrs" when the
	// server was not of the kind asked for, "connect" when no step is to blame (see failedStep).
	FailedStep string `json:"failed_step,omitempty"`
	Error      string `json:"error,omitempty"`
}

// Connect is one connect: its decisions, steps and result.
type Connect struct {
	Run        string     `json:"run"` // cold, warm 1, warm 2, ...
	DurationMS float64    `json:"duration_ms"`
	Decisions  []Decision `json:"decisions"`
	Steps      []Step     `json:"steps"`
	Host       string     `json:"host,omitempty"`
	Port       int64      `json:"port,omitempty"`
	Transport  string     `json:"transport,omitempty"`  // plain, tls, gss
	Auth       string     `json:"auth,omitempty"`       // pgconnector.auth.method of the startup
	SASL       string     `json:"sasl,omitempty"`       // pgconnector.auth.sasl_mechanism
	KeyCached  *bool      `json:"key_cached,omitempty"` // SCRAM: pgconnector.auth.key_cached
	Server     string     `json:"server_version,omitempty"`
	CacheHit   *bool      `json:"cache_hit,omitempty"`
	Sockets    int64      `json:"sockets"`
	RoundTrips int        `json:"round_trips"` // before the StartupMessage, counted as Cost counts
	FailedStep string     `json:"failed_step,omitempty"`
	Error      string     `json:"error,omitempty"`
	Answers    Answers    `json:"answers"`
	// Credential is the kind and source of the last credential given to the connect from the
	// application's functions ("oauth_token fetched", "password cached"); "" for none.
	Credential string `json:"credential,omitempty"`
	// Retries are the reasons of the attempts made again with a fresh credential, in order.
	Retries []string `json:"credential_retries,omitempty"`
}

// Decision is one host's plan, from the connect span's decision event.
type Decision struct {
	Host        string `json:"host"`
	Port        int64  `json:"port"`
	Plan        string `json:"plan"`
	Skipped     string `json:"skipped,omitempty"`
	CacheHit    *bool  `json:"cache_hit,omitempty"`
	ProbeWaited bool   `json:"probe_waited,omitempty"`
	Credentials string `json:"gss_credentials,omitempty"`
	// DirectLearned: the plan opens TLS with a ClientHello at once because the host is
	// remembered to take direct TLS (no SSLRequest round trip).
	DirectLearned bool `json:"direct_tls_learned,omitempty"`
	// RoleFirst: the host was tried before hosts written before it, because the role its
	// server showed last is the one target_session_attrs wants.
	RoleFirst bool `json:"role_first,omitempty"`
}

// Step is one step span of the connect (a child of the connect span, or of a step: the wait
// for a credential under the startup), or an event of one (the server's OAuth discovery answer,
// an attempt made again with a fresh credential): its start relative to the connect's and its
// duration (zero for an event).
type Step struct {
	Name       string            `json:"name"` // the span name without "postgresql.", or the event's name
	StartMS    float64           `json:"start_ms"`
	DurationMS float64           `json:"duration_ms"`
	Attrs      map[string]string `json:"attributes,omitempty"`
	Error      string            `json:"error,omitempty"`
	// Parent is the step this one is part of ("startup"); "" for a step of the connect itself.
	Parent string `json:"parent,omitempty"`
	// Event: a point in time, an event of the span of Parent (or of the connect).
	Event bool `json:"event,omitempty"`
}

// Comparison is what libpq and pgx would have spent on one host.
type Comparison struct {
	Host    string  `json:"host"`
	Port    int64   `json:"port"`
	Answers Answers `json:"answers"`
	Libpq   Cost    `json:"libpq"`
	Pgx     Cost    `json:"pgx"`
	Basis   string  `json:"basis"`
}

func run(args []string, stdout, stderr io.Writer) int {
	usageError := func(format string, a ...any) int {
		fmt.Fprintf(stderr, "pgconnect: "+format+"\n\n", a...)
		fmt.Fprint(stderr, usage)
		return exitUsage
	}
	switch {
	case len(args) == 0:
		return usageError("no command: the command is explain")
	case args[0] == "-h" || args[0] == "-help" || args[0] == "--help" || args[0] == "help":
		fmt.Fprint(stdout, usage)
		return exitOK
	case args[0] != "explain":
		return usageError("unknown command %q: the command is explain", args[0])
	}
	fs := flag.NewFlagSet("explain", flag.ContinueOnError)
	// The flag package's error ("flag provided but not defined: -x") is printed with the
	// command's prefix, and the usage once, here.
	var flagErr strings.Builder
	fs.SetOutput(&flagErr)
	fs.Usage = func() {}
	warm := fs.Int("n", 1, "warm connects after the cold one")
	asJSON := fs.Bool("json", false, "print one JSON document")
	timeout := fs.Duration("timeout", 30*time.Second, "time limit of each connect")
	if err := fs.Parse(args[1:]); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			fmt.Fprint(stdout, usage)
			return exitOK
		}
		return usageError("%s", strings.TrimSpace(flagErr.String()))
	}
	switch {
	case fs.NArg() > 1:
		return usageError("%q after the DSN: the DSN is one argument (quote it), and flags go before it", fs.Arg(1))
	case *warm < 0:
		return usageError("-n %d: want 0 or more warm connects", *warm)
	case *timeout <= 0:
		return usageError("-timeout %v: want a positive duration", *timeout)
	}
	rep, err := explain(fs.Arg(0), *warm, *timeout)
	if err != nil {
		// A *ParseError: names the key, never the password.
		fmt.Fprintln(stderr, "pgconnect: invalid connection string:", strings.TrimPrefix(err.Error(), "pgconnector: "))
		return exitUsage
	}
	if *asJSON {
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		if err := enc.Encode(rep); err != nil {
			fmt.Fprintln(stderr, "pgconnect:", err)
			return exitConnectFailed
		}
	} else {
		printText(stdout, rep)
	}
	if rep.FailedStep != "" || rep.Error != "" {
		if *asJSON {
			fmt.Fprintf(stderr, "pgconnect: failed at %s: %s\n", rep.FailedStep, rep.Error)
		}
		return exitConnectFailed
	}
	return exitOK
}

// explain connects once cold and warm times warm with one connector and reports each connect.
// The error is for a connection string that does not parse; a failed connect is in the report.
func explain(dsn string, warm int, timeout time.Duration) (*Report, error) {
	rec := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))
	defer tp.Shutdown(context.Background())
	c, err := pgconnector.New(dsn, pgconnector.WithTracerProvider(tp))
	if err != nil {
		return nil, err // a *ParseError: names the key, never the password
	}
	defer c.Close()
	s := c.Settings()
	rep := &Report{GSSEncMode: s.GSSEncMode.String(), Target: target(s)}
	if len(s.Hosts) > 0 {
		rep.SSLMode = s.Hosts[0].SSLMode.String()
	}
	seen := 0
	hosts := map[string]*Comparison{}
	var order []string
	for i := 0; i <= warm; i++ {
		name := "cold"
		if i > 0 {
			name = fmt.Sprintf("warm %d", i)
		}
		ctx, cancel := context.WithTimeout(context.Background(), timeout)
		conn, err := c.ConnectPgx(ctx, nil)
		version := ""
		if err == nil {
			version = conn.PgConn().ParameterStatus("server_version")
			conn.Close(ctx)
		}
		cancel()
		spans := rec.Ended()
		cn := fromSpans(spans[seen:])
		seen = len(spans)
		cn.Run, cn.Server = name, version
		if err != nil {
			if step := failedStep(err, cn.Steps); step != "" {
				cn.FailedStep = step
			} else if cn.FailedStep == "" {
				cn.FailedStep = "connect" // no step of the connector's: the context, say
			}
			cn.Error = errorText(err)
			rep.Connects = append(rep.Connects, cn)
			rep.FailedStep, rep.Error = cn.FailedStep, cn.Error
			break
		}
		key := fmt.Sprintf("%s:%d", cn.Host, cn.Port)
		cmp := hosts[key]
		if cmp == nil {
			cmp = &Comparison{Host: cn.Host, Port: cn.Port}
			hosts[key] = cmp
			order = append(order, key)
		}
		merge(&cmp.Answers, cn.Answers)
		rep.Connects = append(rep.Connects, cn)
	}
	creds := false
	for _, cn := range rep.Connects {
		for _, d := range cn.Decisions {
			creds = creds || d.Credentials == "valid"
		}
	}
	m := Modes{SSLMode: rep.SSLMode, GSSEncMode: rep.GSSEncMode, Credentials: creds}
	for _, k := range order {
		cmp := hosts[k]
		cmp.Libpq = EstimateLibpq(m, cmp.Answers)
		cmp.Pgx = EstimatePgx(m, cmp.Answers)
		cmp.Basis = "estimated from the server's answers"
		rep.Compare = append(rep.Compare, *cmp)
	}
	return rep, nil
}

// merge keeps what any connect learned of the server (a warm connect may not ask).
func merge(dst *Answers, a Answers) {
	if a.SSL != "" {
		dst.SSL = a.SSL
	}
	if a.GSS != "" {
		dst.GSS = a.GSS
	}
	dst.GSSEstablished = dst.GSSEstablished || a.GSSEstablished
	dst.OAuth = dst.OAuth || a.OAuth
}

// stepOf maps negotiation.HostError's Step to the name of the step's span, without
// "postgresql." (tracing: SpanTCPConnect, ...).
var stepOf = map[string]string{
	"GSS credentials":      "gss_credentials",
	"DNS lookup":           "dns_lookup",
	"TCP connect":          "tcp_connect",
	"SSLRequest":           "ssl_request",
	"TLS handshake":        "tls_handshake",
	"GSSENCRequest":        "gssenc_request",
	"service ticket":       "service_ticket",
	"GSS context":          "gss_context",
	"startup":              "startup",
	"target_session_attrs": "target_session_attrs", // the check after the startup: no span of its own
}

// failedStep names the step at which a connect failed, as its span is named: the step of the
// last host's negotiation.HostError (a step may fail without an error status on its span:
// ssl_request answered 'N' under sslmode=require), gss_credentials when gssencmode=require finds
// no Kerberos credentials (no plan, so no socket), "decision" when the modes allow no method on
// the host (gssencmode=require over a Unix socket), else the last step whose span recorded an
// error, else "".
func failedStep(err error, steps []Step) string {
	var ce *negotiation.ConnectError
	if errors.As(err, &ce) && len(ce.Hosts) > 0 {
		h := ce.Hosts[len(ce.Hosts)-1]
		if name, ok := stepOf[h.Step]; ok {
			return name
		}
		if h.Step == "" && h.Addr == "" && h.Method == 0 {
			if errors.Is(h.Err, negotiation.ErrGSSNoCredentials) {
				return "gss_credentials"
			}
			return "decision"
		}
		if h.Step != "" {
			return h.Step
		}
	}
	last := ""
	for _, st := range steps {
		if st.Error != "" {
			last = st.Name
		}
	}
	return last
}

// errorText is the connect error (which never holds a secret) without the "pgconnector: host
// H:P (addr): step: " prefix that the report already says, for a one-host connect.
func errorText(err error) string {
	var ce *negotiation.ConnectError
	if errors.As(err, &ce) && len(ce.Hosts) == 1 {
		h := ce.Hosts[0]
		// The prefix as negotiation.HostError.Error writes it.
		prefix := "host " + h.Host
		if !strings.HasPrefix(h.Host, "/") || h.Port != 0 {
			prefix += ":" + strconv.Itoa(int(h.Port))
		}
		if h.Addr != "" && h.Addr != h.Host {
			prefix += " (" + h.Addr + ")"
		}
		if h.Step != "" {
			prefix += ": " + h.Step
		}
		msg := h.Error()
		if rest, ok := strings.CutPrefix(msg, prefix+": "); ok {
			return rest
		}
		return msg
	}
	return err.Error()
}

// target describes the connection string without its password.
func target(s *pgconnector.Settings) string {
	var hosts []string
	for _, h := range s.Hosts {
		hosts = append(hosts, fmt.Sprintf("%s:%d", h.Host, h.Port))
	}
	db := s.Config.Database
	if db == "" {
		db = s.Config.User // the server's default: a database named as the user
	}
	return fmt.Sprintf("%s user=%s dbname=%s", strings.Join(hosts, ","), s.Config.User, db)
}

// fromSpans builds a Connect from the spans one connect ended: its postgresql.connect span
// (the last one, should there be several) and that span's children.
func fromSpans(spans []sdktrace.ReadOnlySpan) Connect {
	var root sdktrace.ReadOnlySpan
	for _, s := range spans {
		if s.Name() == "postgresql.connect" {
			root = s
		}
	}
	var cn Connect
	if root == nil {
		return cn
	}
	t0 := root.StartTime()
	cn.DurationMS = ms(root.EndTime().Sub(t0))
	ra := attrs(root.Attributes())
	cn.Host, cn.Port = ra["server.address"].AsString(), ra["server.port"].AsInt64()
	cn.Transport = ra["pgconnector.transport"].AsString()
	cn.Sockets = ra["pgconnector.attempts"].AsInt64()
	if v, ok := ra["pgconnector.cache.hit"]; ok {
		b := v.AsBool()
		cn.CacheHit = &b
	}
	for _, e := range root.Events() {
		if e.Name != "decision" {
			continue
		}
		ea := attrs(e.Attributes)
		d := Decision{
			Host: ea["server.address"].AsString(), Port: ea["server.port"].AsInt64(),
			Plan: ea["pgconnector.plan"].AsString(), Skipped: ea["pgconnector.plan.skipped"].AsString(),
			ProbeWaited:   ea["pgconnector.probe.waited"].AsBool(),
			DirectLearned: ea["pgconnector.plan.direct_learned"].AsBool(),
			RoleFirst:     ea["pgconnector.host.role_first"].AsBool(),
		}
		if v, ok := ea["pgconnector.gss.credentials"]; ok {
			d.Credentials = "none"
			if v.AsBool() {
				d.Credentials = "valid"
			}
		}
		if v, ok := ea["pgconnector.cache.hit"]; ok {
			b := v.AsBool()
			d.CacheHit = &b
		}
		cn.Decisions = append(cn.Decisions, d)
	}
	kids := descendants(root, spans)
	for _, e := range root.Events() {
		if e.Name == tracing.EventCredentialRetry { // the other events shown are those of step spans
			cn.Retries = append(cn.Retries, attrs(e.Attributes)[string(tracing.CredentialRetryReasonKey)].AsString())
		}
	}
	for _, it := range kids {
		s := it.span
		if it.event != nil {
			cn.Steps = append(cn.Steps, Step{Name: it.event.Name, StartMS: ms(it.event.Time.Sub(t0)), Attrs: stepAttrs(it.event.Attributes),
				Parent: it.parent, Event: true})
			continue
		}
		name := strings.TrimPrefix(s.Name(), "postgresql.")
		st := Step{Name: name, StartMS: ms(s.StartTime().Sub(t0)), DurationMS: ms(s.EndTime().Sub(s.StartTime())),
			Attrs: stepAttrs(s.Attributes()), Parent: it.parent}
		sa := attrs(s.Attributes())
		if s.Status().Code == codes.Error {
			st.Error = s.Status().Description
			if st.Error == "" {
				st.Error = "failed"
			}
			cn.FailedStep = name
		}
		switch name {
		case "tcp_connect", "ssl_request", "gssenc_request", "tls_handshake", "gss_context":
			if st.Error == "" || name != "tcp_connect" {
				cn.RoundTrips++
			}
		}
		switch name {
		case "ssl_request":
			if v := sa["pgconnector.ssl.answer"].AsString(); v != "" {
				cn.Answers.SSL = v
			}
		case "gssenc_request":
			if v := sa["pgconnector.gss.answer"].AsString(); v != "" {
				cn.Answers.GSS = v
			}
		case "credential":
			if st.Error == "" {
				cn.Credential = strings.TrimSpace(sa[string(tracing.CredentialKindKey)].AsString() + " " + sa[string(tracing.CredentialSourceKey)].AsString())
			}
		case "startup":
			if sa["pgconnector.auth.sasl_mechanism"].AsString() == "OAUTHBEARER" {
				cn.Answers.OAuth = true
			}
			if st.Error == "" {
				cn.Auth = sa["pgconnector.auth.method"].AsString()
				cn.SASL = sa["pgconnector.auth.sasl_mechanism"].AsString()
				if v, ok := sa["pgconnector.auth.key_cached"]; ok {
					b := v.AsBool()
					cn.KeyCached = &b
				}
			}
		}
		cn.Steps = append(cn.Steps, st)
	}
	cn.Steps = withoutLastFallback(cn.Steps)
	if cn.Transport == "gss" {
		cn.Answers.GSSEstablished = true
		cn.Answers.GSS = "G"
	}
	return cn
}

// item is a step span or an event of the connect, in the order of the waterfall.
type item struct {
	span   sdktrace.ReadOnlySpan
	event  *sdktrace.Event // nil for a span
	parent string          // the step it is part of, "" for the connect
	depth  int
	at     time.Time
}

// descendants returns the step spans below root (its children, and theirs: the credential wait
// under the startup) and the events of root and of those spans but its decisions, ordered by
// their start, a parent before what it holds when they start together.
func descendants(root sdktrace.ReadOnlySpan, spans []sdktrace.ReadOnlySpan) []item {
	var out []item
	for _, e := range root.Events() {
		if e.Name != "decision" {
			out = append(out, item{event: &e, at: e.Time, depth: 1})
		}
	}
	parents := []sdktrace.ReadOnlySpan{root}
	for depth := 1; len(parents) > 0; depth++ {
		var next []sdktrace.ReadOnlySpan
		for _, p := range parents {
			pc := p.SpanContext()
			parent := ""
			if p != root {
				parent = strings.TrimPrefix(p.Name(), "postgresql.")
			}
			for _, s := range spans {
				if s.Parent().SpanID() != pc.SpanID() || s.Parent().TraceID() != pc.TraceID() || !strings.HasPrefix(s.Name(), "postgresql.") {
					continue
				}
				out = append(out, item{span: s, parent: parent, depth: depth, at: s.StartTime()})
				for _, e := range s.Events() {
					if e.Name != "exception" {
						out = append(out, item{event: &e, parent: strings.TrimPrefix(s.Name(), "postgresql."), depth: depth + 1, at: e.Time})
					}
				}
				next = append(next, s)
			}
		}
		parents = next
	}
	sort.SliceStable(out, func(i, j int) bool {
		if !out[i].at.Equal(out[j].at) {
			return out[i].at.Before(out[j].at)
		}
		return out[i].depth < out[j].depth
	})
	return out
}

// stepAttrs is what a step shows of its attributes: this project's, without their
// "pgconnector." prefix, and a few of the semantic conventions; nil for none.
func stepAttrs(kvs []attribute.KeyValue) map[string]string {
	var m map[string]string
	for _, kv := range kvs {
		k := string(kv.Key)
		if strings.HasPrefix(k, "pgconnector.") || k == "tls.protocol.version" || k == "network.peer.port" || k == "error.type" {
			if m == nil {
				m = map[string]string{}
			}
			m[strings.TrimPrefix(k, "pgconnector.")] = kv.Value.Emit()
		}
	}
	return m
}

// attemptSteps are the steps of an attempt to connect: a fallback step before one of them
// leads to another attempt (another method, address or host).
var attemptSteps = map[string]bool{
	"dns_lookup": true, "tcp_connect": true, "ssl_request": true, "gssenc_request": true,
	"tls_handshake": true, "service_ticket": true, "gss_context": true, "startup": true,
}

// withoutLastFallback drops the fallback steps that no attempt follows: the connector records
// one when an attempt fails and another may come (pgconnector.fallback.to is absent when the next
// one is on another address or host), also when there is none left to try.
func withoutLastFallback(steps []Step) []Step {
	out := steps[:0:0]
	for i, st := range steps {
		if st.Name == "fallback" && !slices.ContainsFunc(steps[i+1:], func(s Step) bool { return attemptSteps[s.Name] }) {
			continue
		}
		out = append(out, st)
	}
	return out
}

func attrs(kvs []attribute.KeyValue) map[string]attribute.Value {
	m := make(map[string]attribute.Value, len(kvs))
	for _, kv := range kvs {
		m[string(kv.Key)] = kv.Value
	}
	return m
}

func ms(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }
