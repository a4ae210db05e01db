// Package tracing turns the steps of a logical PostgreSQL connect into OpenTelemetry spans, and the
// statements run on a connection into spans and measurements.
//
// Six parts, each fed plain data by the code it observes: [NewTrace] (connect steps, below),
// [NewStatements] (database/sql connections wrapped with the methods of pgx's driver types: one
// CLIENT span and one db.client.operation.duration measurement per statement-level call), [NewPgxTracer] (the same
// statement spans and measurements for pgx.Conn and pgxpool, through pgx's tracer interfaces),
// [NewMetrics] (connect durations, decision cache hits and misses, attempts avoided, pool
// statistics), [NewPoolTracer] (a pgxpool's acquire spans and measurements) and [NewLogTrace]
// (the connect's decisions as log/slog records); [Compose] runs two negotiation.Trace values as
// one.
//
// It observes, it does not decide: [NewTrace] returns a [negotiation.Trace] whose hooks start and
// end spans and set attributes from the plain data the negotiation code hands them. Nothing here
// changes what the connector does, and the negotiation code never imports OpenTelemetry.
//
// # Span tree
//
// One logical connect (one database/sql Connect) is one tree:
//
//	postgresql.connect            CLIENT   the whole connect, child of the span in the caller's ctx
//	├─ postgresql.gss_credentials INTERNAL checking the client's Kerberos credentials (GSS allowed)
//	├─ postgresql.probe_wait      INTERNAL waiting for another connect's probe of the same host
//	├─ postgresql.dns_lookup      INTERNAL resolving a host name
//	├─ postgresql.tcp_connect     INTERNAL opening a socket (TCP or Unix-domain)
//	├─ postgresql.gssenc_request  INTERNAL GSSENCRequest and its one-byte answer
//	├─ postgresql.service_ticket  INTERNAL obtaining the service ticket (after 'G')
//	├─ postgresql.gss_context     INTERNAL the GSSAPI context establishment (AP-REQ, AP-REP)
//	├─ postgresql.ssl_request     INTERNAL SSLRequest and its one-byte answer
//	├─ postgresql.tls_handshake   INTERNAL the TLS handshake (after 'S', or direct)
//	├─ postgresql.fallback        INTERNAL 1 µs long: the connect goes on with the next method
//	└─ postgresql.startup         INTERNAL StartupMessage, authentication, up to ReadyForQuery
//	   └─ postgresql.credential   INTERNAL waiting for a password or OAuth token of the application's functions
//
// A step span is a child of whatever span is in the ctx the negotiation code passes to its Start
// hook: the connect span, or an enclosing step when the negotiation code nests them.
//
// Only postgresql.connect is of kind CLIENT: it is the one outgoing database operation, and a
// backend that draws service graphs or counts client calls from CLIENT spans then counts one call
// per connect. postgresql.tcp_connect is INTERNAL for the same reason, although it is the step
// that talks to the network.
//
// A background refresh of a remembered negative answer (negotiation/refresh.go) is a tree of its
// own: a root span postgresql.refresh (INTERNAL: no caller waits for it), linked to the connect
// whose decision started it, with the same steps below it. It is not a connect: the metrics do not
// count it. So are the negotiator's other background work: postgresql.dns_refresh,
// postgresql.down_recheck and postgresql.credential_refresh (a credential fetched again ahead of its
// expiry).
//
// The server's OAuth discovery answer is an "oauth_discovery" event of the startup span that
// received it, and an attempt made again with a fresh credential (after discovery, or a refused
// credential) a "credential_retry" event of the connect span (credential.go).
//
// The per-host decision (which methods, in which order, what the cache saved, whether the client
// holds Kerberos credentials) is not a span: it is a "decision" event of the connect span, one per
// host decided, with that host's server.address and server.port. None of it is set on the connect
// span, whose attributes are about the connect as a whole: at the end, the host connected to, its
// transport, the pgconnector.cache.hit of that host's decision, and the sockets opened.
//
// # What is never recorded
//
// The hooks receive no password, OAuth token, ticket, key, cancel key or Kerberos principal (a
// credential's hooks are told its kind and source only), and this package
// adds no field of the connection string other than the host, the port and the database name. An
// error is recorded as the text of the Go error (span status and exception event); pgx already
// leaves passwords out of its error texts, but a Kerberos library may name the client or service
// principal in its own: that text is recorded as it is (on a span, and in the exception.message
// of a [NewLogTrace] record), and no attribute ever holds a principal.
//
// # Sampling and cost
//
// Steps follow the sampling of the connect they belong to: a step hook whose context holds no
// recording span and belongs to no recording connect (the connect was not sampled, or the
// TracerProvider is a no-op) starts no span and returns its context as it is. This is what the
// SDK's default ParentBased sampler would decide anyway; a sampler that samples children of unsampled parents gets no step spans.
// So when the connect span does not record, the step hooks allocate nothing, and ConnectStart
// costs the start of one span (BenchmarkHooksNoop: 4 small allocations per connect with a no-op
// provider). Attribute slices are built only for recording spans, except the connect span's
// start attributes, which go in at start so that a sampler sees them.
//
// A Done hook ends the span its Start hook put in the context, and only that span: given another
// context (the caller's, another step's, or one with no span) it does nothing.
package tracing
