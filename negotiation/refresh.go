package negotiation

import (
	"context"
	"sync"
	"time"
)

// The background refresh of a remembered negative answer.
//
// A negative answer ('N' to SSLRequest; GSS encryption that could not be had with these
// credentials) makes Decide leave its method out until the answer expires. A server that gains
// ssl=on or a hostgssenc line in the meantime is then used in plaintext where libpq, which
// remembers nothing, would already encrypt. So when a connect's plan leaves a method out because
// of an answer at least Cache.RefreshAge old, one background refresh per key asks that question
// again, while the connect goes on at once with its plan. The refresh runs the attempt a connect
// would (tryAddr, with a plan of that one method), so what it learns goes into the cache under a
// connect's rules (policy.go): an answer ('S', 'N', GSS established) is remembered, and so is
// a 28000 over GSS while connects keep getting in without it (Cache.GotInSince: what taught
// "no GSS encryption" still holds); a timeout, a reset, load or a failed check of the server is
// not.

// RefreshTimeout bounds a background refresh when connect_timeout is not set: a refresh has no
// caller whose context would end it, and a stalled server must not hold a socket open for good.
const RefreshTimeout = 30 * time.Second

// RefreshOutcome is what a background refresh found.
type RefreshOutcome uint8

const (
	// RefreshInconclusive: nothing was learned (a timeout, a reset, a dial failure, load, a
	// failed check of the server, a single sign that could be one event on the path): the
	// remembered answer stays as it was, and expires when it would have.
	RefreshInconclusive RefreshOutcome = iota
	// RefreshEnabled: the server now accepts the method ('S'; GSS encryption established): it
	// is remembered, and the next connects use it.
	RefreshEnabled
	// RefreshConfirmed: the server gave the negative answer again: it is remembered anew, its
	// TTL restarts.
	RefreshConfirmed
	// RefreshCanceled: the negotiator was closed during the refresh.
	RefreshCanceled
	// RefreshSuperseded: before anything was asked, the answer was no longer the one to
	// refresh (it expired or was forgotten, another connect learned another one, or the client's
	// credentials changed): nothing was asked.
	RefreshSuperseded
)

var refreshOutcomeNames = [...]string{"inconclusive", "enabled", "confirmed", "canceled", "superseded"}

func (o RefreshOutcome) String() string {
	if int(o) < len(refreshOutcomeNames) {
		return refreshOutcomeNames[o]
	}
	return "unknown"
}

// RefreshStartInfo describes a background refresh of one remembered negative answer.
type RefreshStartInfo struct {
	Host     string // as written in the connection string
	Port     uint16
	Database string
	Method   Method // the method whose answer is asked again: MethodSSL or MethodGSS
	// Age is how old the remembered answer was when the refresh began.
	Age time.Duration
	// Trigger is what Trace.Detach returned on the goroutine of the connect whose decision
	// started the refresh, for an observer to link the refresh to that connect;
	// context.Background() without a Detach hook. It holds nothing else of the connect: the
	// refresh runs under a context of its own.
	Trigger context.Context
}

// RefreshDoneInfo is the outcome of a background refresh.
type RefreshDoneInfo struct {
	Host     string
	Port     uint16
	Method   Method
	Outcome  RefreshOutcome
	Attempts int   // sockets opened
	Err      error // why an inconclusive or canceled refresh learned nothing; nil otherwise
	Duration time.Duration
}

// background runs a negotiator's refreshes and ends them with [Negotiator.Close].
type background struct {
	mu     sync.Mutex
	ctx    context.Context // made by the first refresh
	cancel context.CancelFunc
	closed bool
	wg     sync.WaitGroup
}

// start runs f on a goroutine of its own under the negotiator's lifetime, unless it was closed.
func (b *background) start(f func(life context.Context)) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.closed {
		return false
	}
	if b.ctx == nil {
		b.ctx, b.cancel = context.WithCancel(context.Background())
	}
	life := b.ctx
	b.wg.Add(1)
	go func() {
		defer b.wg.Done()
		f(life)
	}()
	return true
}

// Close cancels the background refreshes and waits until they have ended, their sockets closed;
// none begins after it. Connects still work, without refreshes. It may be called more than once
// and always returns nil.
func (n *Negotiator) Close() error {
	b := &n.bg
	b.mu.Lock()
	b.closed = true
	cancel := b.cancel
	b.mu.Unlock()
	if cancel != nil {
		cancel()
	}
	b.wg.Wait()
	n.scram.Close()
	return nil
}

// refreshSkipped starts the background refresh of the negative answers behind plan's skipped
// methods when they are old enough and none runs for key (Cache.BeginRefresh). It never waits:
// the connect goes on with its plan. It does not allocate unless it starts a refresh.
func (n *Negotiator) refreshSkipped(ctx context.Context, h *Host, key Key, plan *Plan, in *Input) {
	if plan.nskip == 0 || n.cfg.Open == nil {
		return
	}
	r := n.cfg.Cache.BeginRefresh(key, plan.Skipped(), in.GSSGeneration)
	if r == nil {
		return
	}
	trigger := n.detach(ctx) // nothing else of the connect goes to the refresh (background.go)
	if !n.bg.start(func(life context.Context) {
		defer r.End()
		for _, m := range r.Methods() {
			if life.Err() != nil {
				return
			}
			n.refresh(life, trigger, h, key, m)
		}
	}) {
		r.End()
	}
}

// refresh asks the question of m's remembered negative answer about key again, on its own
// connection: one attempt with the plan [m] on the host's addresses, until one gives an answer.
// trigger links it to the connect that started it (Trace.Detach).
func (n *Negotiator) refresh(life, trigger context.Context, h *Host, key Key, m Method) {
	start := time.Now()
	ctx := life
	if n.cfg.ConnectTimeout <= 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(life, RefreshTimeout)
		defer cancel()
	}
	_, learned := n.cfg.Cache.Remembered(key, m)
	rctx := ctx
	if n.trace.RefreshStart != nil {
		var age time.Duration
		if !learned.IsZero() {
			age = start.Sub(learned)
		}
		rctx = n.trace.RefreshStart(ctx, RefreshStartInfo{
			Host: h.Host, Port: h.Port, Database: n.cfg.Database, Method: m, Age: age, Trigger: trigger,
		})
	}
	outcome, sockets, err := n.reask(rctx, h, key, m)
	if outcome == RefreshInconclusive && life.Err() != nil {
		outcome = RefreshCanceled
	}
	if outcome != RefreshInconclusive && outcome != RefreshCanceled {
		err = nil
	}
	if n.trace.RefreshDone != nil {
		n.trace.RefreshDone(rctx, RefreshDoneInfo{
			Host: h.Host, Port: h.Port, Method: m, Outcome: outcome, Attempts: sockets, Err: err, Duration: time.Since(start),
		})
	}
}

// reask runs the refresh's attempts. The input is a connect's, with m's answer unknown: the
// attempt asks as a prober would, and tryAddr records what it learns, as for a connect.
func (n *Negotiator) reask(ctx context.Context, h *Host, key Key, m Method) (outcome RefreshOutcome, sockets int, err error) {
	in := Input{
		SSLMode:    h.SSLMode,
		GSSEncMode: n.cfg.GSSEncMode,
		DirectSSL:  n.cfg.DirectSSL,
		UnixSocket: h.UnixSocket(),
		Known:      n.cfg.Cache.Known(key),
	}
	bv := n.newBudget()
	b := &bv
	defer b.release()
	switch m {
	case MethodGSS:
		creds, herr := n.credentials(ctx, b, h)
		if herr != nil {
			return RefreshInconclusive, 0, herr
		}
		if !creds.Valid || creds.Principal != key.Principal ||
			in.Known.GSS != AnswerNo || in.Known.GSSGeneration != creds.Generation {
			return RefreshSuperseded, 0, nil
		}
		in.GSSCredentials, in.GSSGeneration = true, creds.Generation
		in.Known.GSS = AnswerUnknown
	case MethodSSL:
		if in.Known.SSL != AnswerNo {
			return RefreshSuperseded, 0, nil
		}
		in.Known.SSL = AnswerUnknown
	default:
		return RefreshSuperseded, 0, nil
	}
	_, before := n.cfg.Cache.Remembered(key, m)
	var plan Plan
	plan.add(m)

	ans, err := n.resolve(ctx, b, h)
	if err != nil {
		return RefreshInconclusive, 0, err
	}
	addrs := ans.addrs
	open := n.refreshOpen()
	caller, _ := ctx.Deadline()
	res := connectResult{host: h}
	// Any server answers the question, whatever target_session_attrs wants of a session: the
	// refresh asks about the transport, and checking the server's state would cost a query.
	ps := pass{anyServer: true}
	for i, addr := range addrs {
		actx, cancel := b.context(ctx, addr)
		r := n.tryAddr(actx, caller, h, key, addrs[i:i+1:i+1], plan, in, nil, open, &res, &ps, &triedMethods{})
		cancel()
		if r.herr != nil {
			err = r.herr
		}
		if r.gssRefused && n.cfg.Cache.GotInSince(key) {
			// GSS encryption refused with 28000 while connects keep getting in without it:
			// what taught "no GSS encryption" holds (gssNoIfFallbackGetsIn).
			n.cfg.Cache.SetGSS(key, AnswerNo, in.GSSGeneration)
		}
		switch a, learned := n.cfg.Cache.Remembered(key, m); {
		case a == AnswerYes:
			return RefreshEnabled, res.sockets, nil
		case a == AnswerNo && learned.After(before):
			return RefreshConfirmed, res.sockets, nil
		}
		if r.done || r.final || r.leave || ctx.Err() != nil {
			break
		}
	}
	return RefreshInconclusive, res.sockets, err
}

// refreshOpen adapts Config.Open to an attempt's open function: the connection an attempt
// makes is closed at once (pgx sends Terminate): the refresh wanted the answer, not a session.
func (n *Negotiator) refreshOpen() func(context.Context) error {
	return func(ctx context.Context) error {
		c, err := n.cfg.Open(ctx)
		if c != nil {
			c.Close()
		}
		return err
	}
}
