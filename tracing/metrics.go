package tracing

import (
	"context"
	"database/sql"
	"strconv"
	"time"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
	semconv "go.opentelemetry.io/otel/semconv/v1.43.0"
	"go.opentelemetry.io/otel/semconv/v1.43.0/dbconv"

	"github.com/pgconnector/pgconnector/negotiation"
)

// Metric names of this project. The names of the semantic conventions
// (db.client.operation.duration, db.client.connection.*) come from the semconv package.
const (
	// MetricCacheHits counts decisions whose plan a remembered server answer changed (a method
	// left out) or confirmed (the server is remembered to accept the plan's first request): those
	// whose decision event says pgconnector.cache.hit=true. Attributes: server.address,
	// server.port.
	MetricCacheHits = "pgconnector.decision.cache.hits"
	// MetricCacheMisses counts decisions whose plan sends GSSENCRequest or SSLRequest first
	// without the server being remembered to accept it, and leaves nothing out: those whose
	// decision event says pgconnector.cache.hit=false. Attributes: server.address, server.port.
	MetricCacheMisses = "pgconnector.decision.cache.misses"
	// MetricAttemptsAvoided counts what libpq would have spent on a successful connect and this
	// one did not, by [AvoidedKindKey]. Attributes: server.address, server.port, the kind.
	MetricAttemptsAvoided = "pgconnector.connection.attempts_avoided"
	// MetricConnectionWaits counts the connections callers waited for because the pool had none
	// free (database/sql DBStats.WaitCount). Attribute: db.client.connection.pool.name.
	MetricConnectionWaits = "pgconnector.connection.waits"
	// MetricConnectionWaitTime is the total time callers waited for a connection, in seconds
	// (DBStats.WaitDuration). Attribute: db.client.connection.pool.name.
	MetricConnectionWaitTime = "pgconnector.connection.wait_time"
	// MetricSCRAMDerivations counts the PBKDF2 derivations of SCRAM keys (RFC 5802 section 3)
	// that completed: one per user, password, salt and iteration count while the connector keeps
	// them, however many connections authenticate with them (one stopped because no connect
	// waited for it any more is not counted). Attribute: db.client.connection.pool.name.
	MetricSCRAMDerivations = "pgconnector.scram.derivations"
	// MetricSCRAMDerivationTime is the CPU-bound time of those derivations, in seconds.
	// Attribute: db.client.connection.pool.name.
	MetricSCRAMDerivationTime = "pgconnector.scram.derivation_time"
	// MetricCredentialRetries counts the attempts made again on a new connection (a new server
	// backend) with a fresh credential: after OAuth discovery, or after the server refused a
	// credential (EventCredentialRetry). Attributes: server.address, server.port,
	// pgconnector.credential.kind, pgconnector.credential.retry.reason.
	MetricCredentialRetries = "pgconnector.credential.retries"
	// MetricConnectStepDuration is the duration of each step of a connect, in seconds: one
	// point per step span (see [StepKey]), whatever the step's outcome. Attributes:
	// pgconnector.step, pgconnector.outcome, server.address (the host as written in the
	// connection string; none for gss_credentials, which comes before a host is tried).
	MetricConnectStepDuration = "pgconnector.connect.step.duration"
)

// Attribute keys of the metrics of this project.
const (
	// AvoidedKindKey is what a connect avoided: "round_trip" or "backend" (a server backend, with
	// its TCP connection). Metric: pgconnector.connection.attempts_avoided.
	AvoidedKindKey = attribute.Key("pgconnector.avoided.kind")
	// OutcomeKey is "success" or "error". Metrics: db.client.connection.create_time,
	// pgconnector.connect.step.duration (a step whose request the server refused with 'N' is a
	// success: the server answered).
	OutcomeKey = attribute.Key("pgconnector.outcome")
	// StepKey is the step of a connect a point of pgconnector.connect.step.duration measures:
	// the name of the step's span without its "postgresql." prefix (probe_wait, gss_credentials,
	// dns_lookup, tcp_connect, gssenc_request, service_ticket, gss_context, ssl_request,
	// tls_handshake, startup, credential).
	StepKey = attribute.Key("pgconnector.step")
)

// Values of AvoidedKindKey and OutcomeKey.
const (
	AvoidedRoundTrip = "round_trip"
	AvoidedBackend   = "backend"
	OutcomeSuccess   = "success"
	OutcomeError     = "error"
)

// Pool identifies a connector's connection pool in metrics: the first host of its connection
// string, its port, and the database.
type Pool struct {
	Host     string
	Port     uint16
	Database string
}

// Name is db.client.connection.pool.name: server.address:server.port/db.namespace, as the
// semantic conventions suggest for a pool without a name of its own.
func (p Pool) Name() string {
	return p.Host + ":" + strconv.Itoa(int(p.Port)) + "/" + p.Database
}

// Metrics measures the connects of one connector and the pool of its sql.DB, through the
// OpenTelemetry metric API. Like the spans, it observes and does not decide: its [Metrics.Trace]
// hooks read what the negotiation code hands them, and [Metrics.ObserveDBStats] reads
// database/sql's DBStats when the meter provider collects.
//
//   - db.client.connection.create_time (histogram, s): each logical connect, from the
//     ConnectDone hook; attributes db.client.connection.pool.name, pgconnector.outcome (success,
//     error), pgconnector.transport (plain, tls, gss) on success, error.type on failure (as on
//     the postgresql.connect span).
//   - pgconnector.decision.cache.hits and .misses (counters): one per decision, as
//     [negotiation.Plan.CacheUse] says and the decision event's pgconnector.cache.hit: a hit when
//     a remembered answer changed the plan (a method left out) or confirmed it (the server is
//     remembered to accept the request the plan sends first), a miss when the plan sends
//     GSSENCRequest or SSLRequest first otherwise; neither when no remembered answer could matter
//     (a Unix socket, sslmode=disable with GSS impossible or disabled, sslnegotiation=direct
//     without GSS). A connect that waits for another one's probe decides after the wait: a hit.
//     With WithCacheTTL(0) every decision counted is a miss.
//   - pgconnector.connection.attempts_avoided (counter) on a successful connect, from the plan
//     of the host connected to and the method that succeeded: a skipped SSL method (the server
//     is remembered to answer 'N') avoided one round trip, when libpq would have tried SSL before
//     the plaintext that succeeded (not with sslmode=allow, where libpq tries plaintext first);
//     a skipped GSS method (GSS encryption remembered as failing for these credentials) avoided
//     one backend and one round trip, the least libpq spends on it (GSSENCRequest, 'G', a failed
//     context or authentication, a new connection; after 'N' it spends one round trip and no
//     backend: the cache does not tell the two apart). A wait for another connect's probe avoided
//     that probe: it is counted once, as the method the plan made after the wait skips.
//   - pgconnector.connect.step.duration (histogram, s, buckets 100 µs to 10 s): one point per step
//     span of a connect (the DNS lookup, the TCP connect, each request, the TLS handshake, the
//     GSS context, the startup...), from the step hooks; attributes pgconnector.step,
//     pgconnector.outcome, server.address. With no meter provider that records, the step hooks
//     leave the context alone.
//     The wait for a credential of the application's functions (postgresql.credential) is the
//     step "credential", whether the credential was cached, fetched or asked of a human.
//   - pgconnector.credential.retries (counter): one per attempt made again on a new connection
//     with a fresh credential (after OAuth discovery, or a refused credential), as the
//     credential_retry event; attributes server.address, server.port,
//     pgconnector.credential.kind, pgconnector.credential.retry.reason.
//   - the pool's connections, under the same names for a sql.DB ([Metrics.ObserveDBStats]) and
//     a pgxpool.Pool ([Metrics.ObservePgxPool], [PoolTracer]), each with what its pool can say
//     (below), labelled with db.client.connection.pool.name.
//
// The pool metrics, and where each pool's values come from:
//
//	metric                                  database/sql (DBStats)      pgxpool
//	db.client.connection.count{state}       Idle, InUse                 IdleConns, AcquiredConns
//	db.client.connection.max                MaxOpenConnections, if set  MaxConns
//	db.client.connection.idle.min           -                           MinIdleConns
//	db.client.connection.pending_requests   -                           Acquires under way
//	db.client.connection.wait_time (hist.)  -                           each Acquire's time, s
//	db.client.connection.use_time (hist.)   -                           Acquire to Release, s
//	db.client.connection.timeouts           -                           Acquires past a deadline
//	pgconnector.connection.waits            WaitCount                   EmptyAcquireCount
//	pgconnector.connection.wait_time (s)    WaitDuration                EmptyAcquireWaitTime
//
// database/sql does not report a wait that ended with the caller's context (a timeout), the
// callers waiting, nor a distribution of wait times, and neither pool has a maximum of idle
// connections that it reports: db.client.connection.idle.max is not emitted.
type Metrics struct {
	meter      metric.Meter
	poolName   string
	pool       attribute.KeyValue
	createTime dbconv.ClientConnectionCreateTime
	hits       metric.Int64Counter
	misses     metric.Int64Counter
	avoided    metric.Int64Counter
	count      dbconv.ClientConnectionCountObservable
	max        dbconv.ClientConnectionMaxObservable
	waits      metric.Int64ObservableCounter
	waitTotal  metric.Float64ObservableCounter
	// pgxpool's only (PoolTracer, ObservePgxPool).
	idleMin    dbconv.ClientConnectionIdleMinObservable
	pending    dbconv.ClientConnectionPendingRequestsObservable
	waitTime   dbconv.ClientConnectionWaitTime
	useTime    dbconv.ClientConnectionUseTime
	timeouts   dbconv.ClientConnectionTimeouts
	derived    metric.Int64Counter
	deriveTime metric.Float64Counter
	stepTime   metric.Float64Histogram
	retries    metric.Int64Counter
	// The attributes of the step histogram's points for the first host (stepHost), and for none.
	stepHost   string
	stepFirst  [numSteps][2]metric.RecordOption
	stepNoHost [numSteps][2]metric.RecordOption
}

// stepBuckets are the bucket bounds of pgconnector.connect.step.duration, in seconds: 100 µs
// (a request answered on loopback) to 10 s (a connect_timeout).
var stepBuckets = []float64{0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10}

// NewMetrics creates the instruments of a connector whose pool is pool. mp nil means
// otel.GetMeterProvider(). An instrument that cannot be created is reported to otel.Handle and
// replaced by a no-op one.
func NewMetrics(mp metric.MeterProvider, pool Pool) *Metrics {
	if mp == nil {
		mp = otel.GetMeterProvider()
	}
	m := &Metrics{meter: meter(mp), poolName: pool.Name()}
	m.pool = semconv.DBClientConnectionPoolName(m.poolName)
	var errs [17]error
	m.createTime, errs[0] = dbconv.NewClientConnectionCreateTime(m.meter, metric.WithExplicitBucketBoundaries(durationBuckets...))
	m.hits, errs[1] = m.meter.Int64Counter(MetricCacheHits, metric.WithUnit("{decision}"),
		metric.WithDescription("Decisions whose plan a remembered server answer changed or confirmed."))
	m.misses, errs[2] = m.meter.Int64Counter(MetricCacheMisses, metric.WithUnit("{decision}"),
		metric.WithDescription("Decisions whose first request had no remembered acceptance, and that left nothing out."))
	m.avoided, errs[3] = m.meter.Int64Counter(MetricAttemptsAvoided, metric.WithUnit("{attempt}"),
		metric.WithDescription("Round trips and server backends libpq would have spent and a successful connect did not."))
	m.count, errs[4] = dbconv.NewClientConnectionCountObservable(m.meter)
	m.max, errs[5] = dbconv.NewClientConnectionMaxObservable(m.meter)
	m.waits, errs[6] = m.meter.Int64ObservableCounter(MetricConnectionWaits, metric.WithUnit("{wait}"),
		metric.WithDescription("Connections callers waited for because the pool had none free."))
	m.waitTotal, errs[7] = m.meter.Float64ObservableCounter(MetricConnectionWaitTime, metric.WithUnit("s"),
		metric.WithDescription("Total time callers waited for a connection from the pool."))
	m.derived, errs[8] = m.meter.Int64Counter(MetricSCRAMDerivations, metric.WithUnit("{derivation}"),
		metric.WithDescription("PBKDF2 derivations of SCRAM keys; the keys are kept per user, password, salt and iteration count."))
	m.deriveTime, errs[9] = m.meter.Float64Counter(MetricSCRAMDerivationTime, metric.WithUnit("s"),
		metric.WithDescription("Time spent in PBKDF2 derivations of SCRAM keys."))
	m.idleMin, errs[10] = dbconv.NewClientConnectionIdleMinObservable(m.meter)
	m.pending, errs[11] = dbconv.NewClientConnectionPendingRequestsObservable(m.meter)
	m.waitTime, errs[12] = dbconv.NewClientConnectionWaitTime(m.meter, metric.WithExplicitBucketBoundaries(durationBuckets...))
	m.useTime, errs[13] = dbconv.NewClientConnectionUseTime(m.meter, metric.WithExplicitBucketBoundaries(durationBuckets...))
	m.timeouts, errs[14] = dbconv.NewClientConnectionTimeouts(m.meter)
	m.stepTime, errs[15] = m.meter.Float64Histogram(MetricConnectStepDuration, metric.WithUnit("s"),
		metric.WithDescription("Duration of each step of a connect (DNS lookup, TCP connect, SSLRequest, TLS handshake, GSSENCRequest, GSS context, startup...)."),
		metric.WithExplicitBucketBoundaries(stepBuckets...))
	m.retries, errs[16] = m.meter.Int64Counter(MetricCredentialRetries, metric.WithUnit("{attempt}"),
		metric.WithDescription("Attempts made again on a new connection with a fresh credential: after OAuth discovery, or a refused credential."))
	m.stepHost, m.stepFirst, m.stepNoHost = pool.Host, stepOptions(pool.Host), stepOptions("")
	for _, err := range errs {
		if err != nil {
			otel.Handle(err)
		}
	}
	return m
}

// Trace returns the hooks that record the connect metrics. Compose them with the span hooks of
// [NewTrace], spans last: Compose(m.Trace(), NewTrace(tp)).
func (m *Metrics) Trace() *negotiation.Trace {
	return &negotiation.Trace{
		ConnectStart:    m.connectStart,
		Decision:        m.decision,
		ConnectDone:     m.connectDone,
		SCRAMKeyDerived: m.scramKeyDerived,

		ProbeWaitStart: func(ctx context.Context, info negotiation.HostInfo) context.Context {
			return m.stepStart(ctx, stepAttrProbeWait, info.Host)
		},
		ProbeWaitDone: func(ctx context.Context, err error) { m.stepDone(ctx, stepAttrProbeWait, err) },
		GSSCredentialsStart: func(ctx context.Context) context.Context {
			return m.stepStart(ctx, stepAttrGSSCredentials, "")
		},
		GSSCredentialsDone: func(ctx context.Context, info negotiation.GSSCredentialsInfo) {
			m.stepDone(ctx, stepAttrGSSCredentials, info.Err)
		},
		DNSStart: func(ctx context.Context, info negotiation.HostInfo) context.Context {
			return m.stepStart(ctx, stepAttrDNSLookup, info.Host)
		},
		DNSDone: func(ctx context.Context, info negotiation.DNSDoneInfo) { m.stepDone(ctx, stepAttrDNSLookup, info.Err) },
		TCPConnectStart: func(ctx context.Context, info negotiation.DialInfo) context.Context {
			return m.stepStart(ctx, stepAttrTCPConnect, info.Host)
		},
		TCPConnectDone: func(ctx context.Context, err error) { m.stepDone(ctx, stepAttrTCPConnect, err) },
		SSLRequestStart: func(ctx context.Context, info negotiation.DialInfo) context.Context {
			return m.stepStart(ctx, stepAttrSSLRequest, info.Host)
		},
		SSLRequestDone: func(ctx context.Context, info negotiation.RequestDoneInfo) {
			m.stepDone(ctx, stepAttrSSLRequest, info.Err)
		},
		GSSEncRequestStart: func(ctx context.Context, info negotiation.DialInfo) context.Context {
			return m.stepStart(ctx, stepAttrGSSEncRequest, info.Host)
		},
		GSSEncRequestDone: func(ctx context.Context, info negotiation.RequestDoneInfo) {
			m.stepDone(ctx, stepAttrGSSEncRequest, info.Err)
		},
		ServiceTicketStart: func(ctx context.Context, info negotiation.HostInfo) context.Context {
			return m.stepStart(ctx, stepAttrServiceTicket, info.Host)
		},
		ServiceTicketDone: func(ctx context.Context, info negotiation.ServiceTicketDoneInfo) {
			m.stepDone(ctx, stepAttrServiceTicket, info.Err)
		},
		GSSContextStart: func(ctx context.Context, info negotiation.DialInfo) context.Context {
			return m.stepStart(ctx, stepAttrGSSContext, info.Host)
		},
		GSSContextDone: func(ctx context.Context, info negotiation.GSSContextDoneInfo) {
			m.stepDone(ctx, stepAttrGSSContext, info.Err)
		},
		TLSHandshakeStart: func(ctx context.Context, _ negotiation.TLSHandshakeStartInfo) context.Context {
			return m.stepStart(ctx, stepAttrTLSHandshake, dialedHost(ctx))
		},
		TLSHandshakeDone: func(ctx context.Context, info negotiation.TLSHandshakeDoneInfo) {
			m.stepDone(ctx, stepAttrTLSHandshake, info.Err)
		},
		StartupStart: func(ctx context.Context, info negotiation.DialInfo) context.Context {
			return m.stepStart(ctx, stepAttrStartup, info.Host)
		},
		StartupDone: func(ctx context.Context, info negotiation.StartupDoneInfo) {
			m.stepDone(ctx, stepAttrStartup, info.Err)
		},
		CredentialStart: func(ctx context.Context, info negotiation.CredentialStartInfo) context.Context {
			return m.stepStart(ctx, stepAttrCredential, info.Host)
		},
		CredentialDone: func(ctx context.Context, info negotiation.CredentialDoneInfo) {
			m.stepDone(ctx, stepAttrCredential, info.Err)
		},
		CredentialRetry: m.credentialRetry,
	}
}

// The steps of pgconnector.connect.step.duration; stepNames gives their StepKey values, the
// step spans' names without "postgresql.".
type stepID uint8

const (
	stepAttrProbeWait stepID = iota
	stepAttrGSSCredentials
	stepAttrDNSLookup
	stepAttrTCPConnect
	stepAttrSSLRequest
	stepAttrGSSEncRequest
	stepAttrServiceTicket
	stepAttrGSSContext
	stepAttrTLSHandshake
	stepAttrStartup
	stepAttrCredential
	numSteps
)

var stepNames = [numSteps]string{"probe_wait", "gss_credentials", "dns_lookup", "tcp_connect", "ssl_request",
	"gssenc_request", "service_ticket", "gss_context", "tls_handshake", "startup", "credential"}

// stepOptions returns the attributes of each step and outcome (success, error) for host (none
// when ""), made once: a point of the first host, the usual one, then allocates nothing.
func stepOptions(host string) (o [numSteps][2]metric.RecordOption) {
	for id, name := range stepNames {
		for i, outcome := range [2]string{OutcomeSuccess, OutcomeError} {
			kv := []attribute.KeyValue{StepKey.String(name), OutcomeKey.String(outcome)}
			if host != "" && stepID(id) != stepAttrGSSCredentials {
				kv = append(kv, semconv.ServerAddress(host))
			}
			o[id][i] = metric.WithAttributeSet(attribute.NewSet(kv...))
		}
	}
	return o
}

// stepCtx is the context of one step, with its clock: one allocation per step, and only when
// the histogram records.
type stepCtx struct {
	context.Context
	clock stepClock
}

// stepClockKey is the key under which a stepCtx gives its clock.
type stepClockKey struct{}

func (c *stepCtx) Value(key any) any {
	if key == (stepClockKey{}) {
		return &c.clock
	}
	return c.Context.Value(key)
}

// stepClock is one step's start, as its Start hook saw it.
type stepClock struct {
	step     stepID
	recorded bool
	host     string // server.address, "" for none
	start    time.Time
}

// stepStart returns ctx with the clock of step, or ctx itself when the histogram does not
// record (no meter provider set: a step then costs no allocation here). A step that dials
// remembers its host for the steps that are not told it (the TLS handshake).
func (m *Metrics) stepStart(ctx context.Context, step stepID, host string) context.Context {
	if !m.stepTime.Enabled(ctx) {
		return ctx
	}
	if st, _ := ctx.Value(metricsConnectKey{}).(*connectMetrics); st != nil && host != "" {
		st.dialed = host
	}
	return &stepCtx{Context: ctx, clock: stepClock{step: step, host: host, start: time.Now()}}
}

// stepDone records the step ctx's clock measures, if it is step and was not recorded yet.
func (m *Metrics) stepDone(ctx context.Context, step stepID, err error) {
	c, _ := ctx.Value(stepClockKey{}).(*stepClock)
	if c == nil || c.step != step || c.recorded {
		return
	}
	c.recorded = true
	outcome := 0
	if err != nil {
		outcome = 1
	}
	var opt metric.RecordOption
	switch {
	case c.host == m.stepHost || step == stepAttrGSSCredentials:
		opt = m.stepFirst[step][outcome]
	case c.host == "":
		opt = m.stepNoHost[step][outcome]
	default:
		var a [3]attribute.KeyValue
		kv := append(a[:0], StepKey.String(stepNames[step]), OutcomeKey.String(OutcomeSuccess), semconv.ServerAddress(c.host))
		if err != nil {
			kv[1] = OutcomeKey.String(OutcomeError)
		}
		opt = metric.WithAttributes(kv...)
	}
	m.stepTime.Record(ctx, time.Since(c.start).Seconds(), opt)
}

// dialedHost is the host the connect of ctx dialed last, "" when unknown.
func dialedHost(ctx context.Context) string {
	if st, _ := ctx.Value(metricsConnectKey{}).(*connectMetrics); st != nil {
		return st.dialed
	}
	return ""
}

// credentialRetry counts an attempt made again with a fresh credential. The attributes are built
// only when the counter records.
func (m *Metrics) credentialRetry(ctx context.Context, info negotiation.CredentialRetryInfo) {
	if !m.retries.Enabled(ctx) {
		return
	}
	var a [4]attribute.KeyValue
	m.retries.Add(ctx, 1, metric.WithAttributes(credentialRetryAttributes(a[:0], info)...))
}

func (m *Metrics) scramKeyDerived(ctx context.Context, info negotiation.SCRAMKeyDerivedInfo) {
	set := metric.WithAttributeSet(attribute.NewSet(m.pool))
	m.derived.Add(ctx, 1, set)
	m.deriveTime.Add(ctx, info.Duration.Seconds(), set)
}

// ObserveDBStats reports the pool metrics from stats (a sql.DB's Stats method) at each
// collection, until unregister is called.
func (m *Metrics) ObserveDBStats(stats func() sql.DBStats) (unregister func()) {
	idle := metric.WithAttributeSet(attribute.NewSet(m.pool, semconv.DBClientConnectionStateIdle))
	used := metric.WithAttributeSet(attribute.NewSet(m.pool, semconv.DBClientConnectionStateUsed))
	pool := metric.WithAttributeSet(attribute.NewSet(m.pool))
	return m.observe(func(_ context.Context, o metric.Observer) error {
		s := stats()
		o.ObserveInt64(m.count.Inst(), int64(s.Idle), idle)
		o.ObserveInt64(m.count.Inst(), int64(s.InUse), used)
		if s.MaxOpenConnections > 0 {
			o.ObserveInt64(m.max.Inst(), int64(s.MaxOpenConnections), pool)
		}
		o.ObserveInt64(m.waits, s.WaitCount, pool)
		o.ObserveFloat64(m.waitTotal, s.WaitDuration.Seconds(), pool)
		return nil
	}, m.count.Inst(), m.max.Inst(), m.waits, m.waitTotal)
}

// metricsConnectKey marks the state of one logical connect in its context.
type metricsConnectKey struct{}

// connectMetrics is what ConnectDone needs of the decisions of its connect: the last one.
type connectMetrics struct {
	decided bool
	host    string
	port    uint16
	sslMode negotiation.SSLMode
	skipped [2]negotiation.Method
	nskip   int
	dialed  string // the host of the last step that dialed (pgconnector.connect.step.duration)
}

func (m *Metrics) connectStart(ctx context.Context, _ negotiation.ConnectStartInfo) context.Context {
	if !m.avoided.Enabled(ctx) && !m.stepTime.Enabled(ctx) {
		return ctx
	}
	return context.WithValue(ctx, metricsConnectKey{}, &connectMetrics{})
}

func (m *Metrics) decision(ctx context.Context, info negotiation.DecisionInfo) {
	// The attributes are built only for a counter that records: with no meter provider set,
	// a decision costs no allocation here.
	if use := info.Plan.CacheUse(); use != negotiation.CacheUseNone {
		counter := m.misses
		if use == negotiation.CacheUseHit {
			counter = m.hits
		}
		if counter.Enabled(ctx) {
			var a [2]attribute.KeyValue
			counter.Add(ctx, 1, metric.WithAttributes(appendServer(a[:0], info.Host, info.Port)...))
		}
	}
	if st, _ := ctx.Value(metricsConnectKey{}).(*connectMetrics); st != nil {
		st.decided, st.host, st.port, st.sslMode = true, info.Host, info.Port, info.Input.SSLMode
		st.nskip = copy(st.skipped[:], info.Plan.Skipped())
	}
}

func (m *Metrics) connectDone(ctx context.Context, info negotiation.ConnectDoneInfo) {
	var a [3]attribute.KeyValue
	kv := a[:0]
	if info.Err == nil {
		kv = append(kv, OutcomeKey.String(OutcomeSuccess))
		if tr := info.Method.Transport(); tr != "" {
			kv = append(kv, TransportKey.String(tr))
		}
	} else {
		kv = append(kv, OutcomeKey.String(OutcomeError), semconv.ErrorTypeKey.String(errorType(info.Err, ErrorTypeConnectFailed)))
	}
	m.createTime.Record(ctx, info.Duration.Seconds(), m.poolName, kv...)

	st, _ := ctx.Value(metricsConnectKey{}).(*connectMetrics)
	if st == nil || !st.decided || info.Err != nil || st.host != info.Host || st.port != info.Port {
		return
	}
	var roundTrips, backends int64
	for _, skipped := range st.skipped[:st.nskip] {
		switch skipped {
		case negotiation.MethodGSS: // libpq tries GSS first
			roundTrips++
			backends++
		case negotiation.MethodSSL: // before plaintext, except with sslmode=allow
			if info.Method == negotiation.MethodPlain && st.sslMode != negotiation.SSLModeAllow {
				roundTrips++
			}
		}
	}
	if roundTrips == 0 && backends == 0 {
		return
	}
	var b [3]attribute.KeyValue
	server := appendServer(b[:0], info.Host, info.Port)
	if roundTrips > 0 {
		m.avoided.Add(ctx, roundTrips, metric.WithAttributes(append(server, AvoidedKindKey.String(AvoidedRoundTrip))...))
	}
	if backends > 0 {
		m.avoided.Add(ctx, backends, metric.WithAttributes(append(server, AvoidedKindKey.String(AvoidedBackend))...))
	}
}

// observe registers cb for insts with the meter until the returned function is called; an
// error of the meter goes to otel.Handle (and nothing is observed).
func (m *Metrics) observe(cb metric.Callback, insts ...metric.Observable) (unregister func()) {
	reg, err := m.meter.RegisterCallback(cb, insts...)
	if err != nil {
		otel.Handle(err)
		return func() {}
	}
	return func() {
		if err := reg.Unregister(); err != nil {
			otel.Handle(err)
		}
	}
}
