package negotiation

import (
	"context"
	"time"
)

// Work the negotiator does for later connects, with no connect waiting for it: the refresh of a
// remembered negative answer (refresh.go), a host name looked up again in the last fifth of its
// remembered answer's life (dns.go), an address remembered down dialed again (down.go). Such
// work may outlive the connect that started it and runs beside the connects after it, so it
// takes nothing of that connect: not its context (its deadline, its cancellation, the values
// the hooks keep in it for that connect alone, which the connect goes on changing), only what
// Trace.Detach returns to link the work to the connect's trace. It runs under the negotiator's
// life ([Negotiator.Close] ends it), on a goroutine of its own, bounded by connect_timeout
// (else 10 s; a refresh: RefreshTimeout).

// BackgroundWork is what a background task of the negotiator does (BackgroundStartInfo).
type BackgroundWork uint8

const (
	// BackgroundDNSLookup: a host name looked up again, in the last fifth of the life of its
	// remembered answer (Config.DNSTTL), for the next connects.
	BackgroundDNSLookup BackgroundWork = iota + 1
	// BackgroundDownRecheck: an address remembered down (Config.DownTTL) dialed again, a TCP
	// connect closed at once: a socket forgets it, a failure keeps it down.
	BackgroundDownRecheck
	// BackgroundCredentialRefresh: a credential (a password of the application's function, an
	// OAuth token) fetched again ahead of its expiry, for the next connects
	// (CredentialRequest.Background).
	BackgroundCredentialRefresh
)

var backgroundWorkNames = [...]string{"", "dns_lookup", "down_recheck", "credential_refresh"}

func (w BackgroundWork) String() string {
	if int(w) < len(backgroundWorkNames) && w != 0 {
		return backgroundWorkNames[w]
	}
	return "unknown"
}

// BackgroundStartInfo describes a background lookup or recheck.
type BackgroundStartInfo struct {
	Work BackgroundWork
	Host string // as written in the connection string; "" when not known (a recheck of an address dialed by pgx)
	Port uint16
	// Address is the address dialed again, "ip:port" (BackgroundDownRecheck); "" for a lookup.
	Address string
	// Credential is the kind of credential fetched again (BackgroundCredentialRefresh); 0 for
	// other work.
	Credential CredentialKind
	// Trigger is what Trace.Detach returned on the goroutine of the connect that started the
	// work, for an observer to link the work to that connect; context.Background() without a
	// Detach hook. It holds nothing else of the connect.
	Trigger context.Context
}

// BackgroundDoneInfo is the outcome of a background lookup or recheck.
type BackgroundDoneInfo struct {
	Work BackgroundWork
	// Err is why the lookup failed (the remembered answer is left to expire), or why the dial
	// failed (the address stays remembered down); nil when the lookup gave addresses or the dial
	// a socket.
	Err      error
	Duration time.Duration
}

// detach returns the Trigger of background work that the connect of ctx starts (Trace.Detach),
// called on the connect's goroutine.
func (n *Negotiator) detach(ctx context.Context) context.Context {
	d := context.Background()
	if n.trace.Detach != nil {
		if c := n.trace.Detach(d, ctx); c != nil {
			d = c
		}
	}
	return d
}

// runBackground runs do on a goroutine of its own under the negotiator's life, bounded by
// backgroundTimeout, between the BackgroundStart and BackgroundDone hooks; do's error is the
// outcome. It reports false, having run nothing, once the negotiator is closed.
func (n *Negotiator) runBackground(info BackgroundStartInfo, do func(ctx context.Context) error) bool {
	return n.bg.start(func(life context.Context) {
		start := time.Now()
		ctx, cancel := context.WithTimeout(life, n.backgroundTimeout())
		defer cancel()
		if n.trace.BackgroundStart != nil {
			ctx = n.trace.BackgroundStart(ctx, info)
		}
		err := do(ctx)
		if n.trace.BackgroundDone != nil {
			n.trace.BackgroundDone(ctx, BackgroundDoneInfo{Work: info.Work, Err: err, Duration: time.Since(start)})
		}
	})
}
