package negotiation

import (
	"context"
	"fmt"
	"time"
)

// The credentials of Config.Credentials during a connect: fetched when the server asks
// (getCredential), and the attempt made again on a new connection, to the same address with
// the same method, after an OAuth discovery or after the server refused a credential
// (credRetry, tryAddr's runRetrying).

// The reasons an attempt is made again (CredentialRetryInfo.Reason).
const (
	retryDiscovery       = "oauth discovery"
	retryTokenRefused    = "token refused"
	retryPasswordRefused = "password refused"
	retryReasons         = 3
)

// credRetry is what the attempts on one address with one method share: whether the last one
// asks to be made again, and which reasons were used (at most one retry each).
type credRetry struct {
	reason string            // set by the exchange: the attempt is to be made again
	req    CredentialRequest // the request for the next attempt's credential
	used   [retryReasons]bool
	next   *Credential // fetched between the attempts, for the next one's exchange
}

func reasonIndex(reason string) int {
	switch reason {
	case retryDiscovery:
		return 0
	case retryTokenRefused:
		return 1
	}
	return 2
}

// retryState returns what the attempts on at's address with its method share, made when first
// needed (no allocation on a connect that needs no retry).
func (at *attempt) retryState() *credRetry {
	if at.creds == nil {
		at.creds = &credRetry{}
	}
	return at.creds
}

// want asks for the attempt to be made again for reason, with a credential of req (a refused
// one was dropped already: Credentials.Refused); a reason used already asks nothing.
func (c *credRetry) want(reason string, req CredentialRequest) {
	if c.used[reasonIndex(reason)] {
		return
	}
	c.reason = reason
	c.req = req
}

// credentialRequest is a request of kind for the attempt's host and user.
func (x *authExchange) credentialRequest(kind CredentialKind) CredentialRequest {
	r := CredentialRequest{Kind: kind, User: x.s.user}
	if h := x.at.host; h != nil {
		r.Host, r.Port = h.Host, h.Port
	}
	if x.at.n != nil {
		r.Database = x.at.n.cfg.Database
	}
	return r
}

// getCredential asks Config.Credentials for r between Trace.CredentialStart and CredentialDone,
// r.Background set to run work under the negotiator (BackgroundCredentialRefresh). Its error is
// an *AbortError (the application's function failed: no other host or method) wrapping Get's,
// which holds no secret.
func (at *attempt) getCredential(ctx context.Context, r *CredentialRequest) (Credential, error) {
	n := at.n
	start := time.Now()
	hctx := ctx
	if n.trace.CredentialStart != nil {
		hctx = n.trace.CredentialStart(ctx, CredentialStartInfo{Kind: r.Kind, Host: r.Host, Port: r.Port})
	}
	r.Background = func(do func(ctx context.Context) error) bool {
		return n.runBackground(BackgroundStartInfo{Work: BackgroundCredentialRefresh, Host: r.Host, Port: r.Port, Credential: r.Kind, Trigger: n.detach(ctx)}, do)
	}
	c, err := n.cfg.Credentials.Get(ctx, r)
	r.Background = nil
	if err == nil && c.Secret == "" {
		err = fmt.Errorf("the %s function gave an empty %s", r.Kind, r.Kind)
	}
	if n.trace.CredentialDone != nil {
		info := CredentialDoneInfo{Kind: r.Kind, Err: err, Duration: time.Since(start)}
		if err == nil {
			info.Source = c.Source
		}
		n.trace.CredentialDone(hctx, info)
	}
	if err != nil {
		what := "a password"
		if r.Kind == CredentialOAuthToken {
			what = "an OAuth bearer token"
		}
		return Credential{}, &AbortError{Err: fmt.Errorf("%s could not be obtained: %w", what, err)}
	}
	return c, nil
}

// runRetrying runs at, and again on a new connection while its exchange asks for it (credRetry)
// and the context allows, at most once per reason; the sockets of every run are counted in res.
// It returns the last attempt and its error, which tryAddr judges: the runs before it teach
// nothing about the transport.
func (n *Negotiator) runRetrying(ctx context.Context, at *attempt, open func(context.Context) error, res *connectResult, reached *bool) (*attempt, error) {
	for {
		err := n.run(ctx, at, open)
		st := at.creds
		if err == nil || st == nil || st.reason == "" || ctx.Err() != nil {
			return at, err
		}
		reason := st.reason
		st.reason = ""
		st.used[reasonIndex(reason)] = true
		*reached = *reached || at.reached.Load()
		res.sockets += int(at.sockets.Load())
		if g := at.given.Swap(nil); g != nil {
			g.c.Close()
		}
		closeConn(at.takeReuse())
		if n.trace.CredentialRetry != nil {
			n.trace.CredentialRetry(ctx, CredentialRetryInfo{Kind: st.req.Kind, Host: at.host.Host, Port: at.host.Port, Reason: reason})
		}
		// The credential is fetched now, between the connections: a flow that takes long (a
		// human prompted) holds no server's authentication timeout.
		req := st.req
		c, gerr := at.getCredential(ctx, &req)
		if gerr != nil {
			return at, gerr
		}
		st.next = &c
		at = at.again()
	}
}

// again is a new attempt like at, to be made on a new connection.
func (at *attempt) again() *attempt {
	return &attempt{n: at.n, host: at.host, key: at.key, addr: at.addr, addrs: at.addrs, method: at.method, known: at.known,
		gssGeneration: at.gssGeneration, anyServer: at.anyServer, cache: at.cache, caller: at.caller, addrAge: at.addrAge,
		learnedDirect: at.learnedDirect, creds: at.creds}
}
