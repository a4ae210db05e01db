package negotiation

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"time"
)

// GSSClient is what the negotiator needs of a Kerberos implementation: package internal/gss
// provides one on gokrb5. Its methods are called on the connecting goroutine and must be safe
// for concurrent use.
type GSSClient interface {
	// Credentials reports the client's Kerberos credentials. It is called once per connect
	// and per host, so it must be cheap when nothing changed (a stat, no parse). ctx carries
	// the host's connect_timeout (the check counts against the host's budget, as the wait
	// for the first address does) and the caller's deadline: Credentials must return when it
	// ends. An error that wraps context.DeadlineExceeded, context.Canceled or
	// os.ErrDeadlineExceeded (or any error once ctx has ended) is a check that did not finish:
	// the host fails with it at the step "GSS credentials", whatever gssencmode; any other
	// error counts as no credentials (libpq: gss_acquire_cred failed), its reason the
	// returned Missing if set, else the error's text (it must name no secret).
	Credentials(ctx context.Context) (GSSCredentials, error)
	// ServiceTicket obtains a ticket for the server's service principal (krbsrvname@host, host
	// as written in the connection string, or krbspn) and returns a session ready to establish
	// a context; fromCache reports that no KDC exchange was needed.
	ServiceTicket(ctx context.Context, host string) (s GSSSession, fromCache bool, err error)
}

// GSSCredentials describes the client's credentials. It holds no secret.
type GSSCredentials struct {
	// Valid is true when a ticket-granting ticket (or a client keytab) is usable now.
	Valid bool
	// Principal is the client principal; part of the cache key, never traced by default.
	Principal string
	// Generation changes whenever the credentials do (kinit, kdestroy, renewal): answers
	// learned with older credentials are not trusted.
	Generation uint64
	// Reused is true when the check was answered from the previous one (the credential cache
	// did not change and the ticket has not expired).
	Reused bool
	// Missing says, when Valid is false, why: for example "no credential cache" or "the
	// ticket-granting ticket expired at 2026-11-30T04:00:00Z". It never names a principal.
	Missing string
	// Source is where the credentials are kept: the credential cache type ("FILE", "DIR",
	// "KEYRING", "KCM") or "keytab"; empty when there are none and no cache could be named.
	Source string
}

// ErrGSSNotForwardable is what a [GSSDelegationReporter]'s reason wraps when the credentials
// were not forwarded because the ticket-granting ticket is not forwardable.
var ErrGSSNotForwardable = errors.New("the ticket-granting ticket is not forwardable")

// GSSDelegationReporter is implemented by a [GSSSession] that can forward the client's
// credentials to the server (gssdelegation=1, RFC 4121 section 4.1.1). After Establish,
// Delegation reports whether the AP-REQ carried them, and, when they were asked for but not
// sent (a ticket that is not forwardable, a KDC that refused), why. Both are zero when
// delegation was not asked for.
type GSSDelegationReporter interface {
	Delegation() (sent bool, why error)
}

// GSSAuthenticator is implemented by a [GSSClient] that can answer the server's request for
// GSSAPI authentication on a connection without GSS encryption (pg_hba method gss:
// AuthenticationGSS, then AuthenticationGSSContinue and GSSResponse messages until the context is
// established; protocol-flow.html, "GSSAPI authentication"). Without it, such a request fails the
// attempt.
type GSSAuthenticator interface {
	// Authenticate returns a new context initiator for the service principal of host (as
	// written in the connection string: krbsrvname@host, or krbspn). ctx bounds the KDC
	// exchange for the service ticket.
	Authenticate(ctx context.Context, host string) (GSSAuthExchange, error)
}

// GSSAuthExchange is one GSSAPI context establishment carried in authentication messages.
type GSSAuthExchange interface {
	// Step takes the server's last token (nil for the first call) and returns the token to
	// send (none when empty) and whether the context is established: the server's AP-REP
	// verified (mutual authentication, RFC 4121 section 4.1).
	Step(in []byte) (out []byte, done bool, err error)
}

// GSSSession establishes one GSSAPI security context.
type GSSSession interface {
	// Establish runs the context establishment on conn, which has just received 'G' to
	// GSSENCRequest: tokens framed as Int32 length + token, client first, with mutual
	// authentication; then it returns conn wrapped so that every packet is an RFC 4121 sealed
	// wrap token (protocol-flow.html, "GSSAPI Session Encryption").
	Establish(ctx context.Context, conn net.Conn) (net.Conn, error)
	// Enctype names the session key's encryption type, e.g. "aes256-cts-hmac-sha1-96".
	Enctype() string
}

// ErrGSSRequired is returned when gssencmode=require and the server refuses GSSENCRequest
// (libpq: "server doesn't support GSSAPI encryption, but it was required").
var ErrGSSRequired = errors.New("server doesn't support GSSAPI encryption, but it was required")

// What a failure of the GSS client ([GSSClient.ServiceTicket], [GSSSession.Establish]) says about
// the server: a GSSClient wraps one of these (errors.Is) when it knows. The negotiator remembers
// the first for the cache TTL and never the second; any other error (a KDC that does not answer,
// a reset, a timeout) is not remembered either.
var (
	// ErrGSSRejected: Kerberos itself refused, so GSS encryption cannot succeed with these
	// credentials on this host until something changes: the acceptor answered the AP-REQ with a
	// KRB-ERROR, or the KDC answered the TGS-REQ with one about the service principal (unknown
	// principal, no common encryption type).
	ErrGSSRejected = errors.New("Kerberos rejected the GSSAPI authentication")
	// ErrGSSUnverified: the server failed a check that only the real server passes (an AP-REP
	// that does not decrypt or does not echo the authenticator, a wrap token failing its
	// integrity check or out of sequence). That is evidence of tampering on the path, not a
	// property of the server: never remembered, never a reason to stop trying GSS.
	ErrGSSUnverified = errors.New("the server failed a Kerberos check (possible tampering)")
)

var (
	errGSSRefused = errors.New("server refused GSSENCRequest")
)

// stepGSSCredentials is the HostError.Step of a credentials check that did not finish.
const stepGSSCredentials = "GSS credentials"

// credentials asks the GSS client for the credentials to use with h, reporting the check. The
// check counts against h's connect_timeout (b, from the host's start, as what comes before the
// first address does) and the caller's ctx.
//
// A check that did not finish (see GSSClient.Credentials: the budget or ctx ended, a KCM daemon
// that does not answer) fails the host with herr, step "GSS credentials": it is no proof that
// there are no credentials, so even under gssencmode=prefer the connect does not go on without
// GSS encryption (policy.go: nothing learned from timeouts may turn encryption off), and nothing
// is remembered from it. libpq with MIT krb5 would still be blocked in gss_acquire_cred there
// (fe-gssapi-common.c, pg_GSS_have_cred_cache; cc_kcm.c sets no timeout); like libpq at
// connect_timeout's end, the connect goes on with the next host unless the caller's ctx ended.
// Any other error of the check counts as no credentials, as libpq takes a failed
// gss_acquire_cred; the returned GSSCredentials keeps the reason in Missing (the client's, else
// the error's text), which gssencmode=require's error ends with.
func (n *Negotiator) credentials(ctx context.Context, b *budget, h *Host) (GSSCredentials, *HostError) {
	if n.cfg.GSS == nil || n.cfg.GSSEncMode == GSSEncModeDisable || h.UnixSocket() {
		return GSSCredentials{}, nil
	}
	bctx, cancel := b.context(ctx, "")
	defer cancel()
	cctx := bctx
	if n.trace.GSSCredentialsStart != nil {
		cctx = n.trace.GSSCredentialsStart(bctx)
	}
	creds, err := n.cfg.GSS.Credentials(bctx)
	if err != nil {
		// No credentials, but the reason stays: gssencmode=require's error gives it (a
		// krb5.conf that could not be read, naming the file and line).
		missing := creds.Missing
		if missing == "" {
			missing = err.Error()
		}
		creds = GSSCredentials{Missing: missing}
	}
	if n.trace.GSSCredentialsDone != nil {
		n.trace.GSSCredentialsDone(cctx, GSSCredentialsInfo{Valid: creds.Valid, Reused: creds.Reused, Source: creds.Source, Err: err})
	}
	if err == nil || bctx.Err() == nil && !errors.Is(err, context.DeadlineExceeded) &&
		!errors.Is(err, context.Canceled) && !errors.Is(err, os.ErrDeadlineExceeded) {
		return creds, nil
	}
	caller, _ := ctx.Deadline()
	if lb, ok := n.timeoutError(bctx, caller, err).(*labeled); ok {
		// Not "msg: err", which cause would peel as one of pgx's labels.
		err = &labeled{err: err, msg: lb.msg + " in the credentials check: " + err.Error()}
	}
	return creds, &HostError{Host: h.Host, Port: h.Port, Step: stepGSSCredentials, Err: err}
}

// GSSRequiredError is the failure of a host under gssencmode=require: GSSAPI encryption could
// not be established, and nothing else is allowed. errors.Is(err, ErrGSSRequired) holds, and it
// unwraps to the cause.
type GSSRequiredError struct {
	Reason string // why, e.g. "the server closed the connection on GSSENCRequest"
	Err    error

	detail bool // the message goes on with Err's, which Reason does not say
}

func (e *GSSRequiredError) Error() string {
	msg := "GSSAPI encryption is required (gssencmode=require) but " + e.Reason
	if e.detail && e.Err != nil {
		msg += ": " + cause(e.Err).Error()
	}
	return msg
}

func (e *GSSRequiredError) Unwrap() []error { return []error{ErrGSSRequired, e.Err} }

// gssKnown reports whether the answer to GSSENCRequest was remembered when the attempt was
// planned, learned with the attempt's credentials (Decide ignores one learned with others).
func (at *attempt) gssKnown() bool {
	return at.known.GSS != AnswerUnknown && at.known.GSSGeneration == at.gssGeneration
}

// startGSS sends GSSENCRequest on conn and, on 'G', establishes the encrypted channel. After 'N'
// the socket is kept for the next method. Every failure is recorded with its step (fail).
func (at *attempt) startGSS(ctx context.Context, conn net.Conn, info DialInfo) (net.Conn, error) {
	// pgx watches ctx only after the dial: honour cancellation and the deadline here.
	if d, ok := ctx.Deadline(); ok {
		conn.SetDeadline(d)
	}
	stop := context.AfterFunc(ctx, func() { conn.SetDeadline(time.Unix(1, 0)) })
	defer func() {
		if stop() {
			conn.SetDeadline(time.Time{})
		}
	}()

	tr := &at.n.trace
	rctx := ctx
	if tr.GSSEncRequestStart != nil {
		rctx = tr.GSSEncRequestStart(ctx, info)
	}
	answer := AnswerUnknown
	_, err := conn.Write(gssencRequestPacket[:])
	if err == nil {
		answer, err = readAnswer(conn, gssencRequest)
	}
	if tr.GSSEncRequestDone != nil {
		tr.GSSEncRequestDone(rctx, RequestDoneInfo{Answer: answer, CacheHit: at.gssKnown(), Err: err})
	}
	switch {
	case err != nil:
		at.fail(stepGSSENCRequest, err)
		conn.Close()
		return nil, err
	case answer == AnswerNo:
		// Kept for the next method only where bytes arriving later can be seen (quiet), and
		// never for a CancelRequest's dial.
		if !at.done.Load() {
			at.refused.Store(true)
			if canPeek(conn) {
				at.reuse.Store(&connHolder{conn})
				return nil, errGSSRefused
			}
		}
		conn.Close()
		return nil, errGSSRefused
	}

	tctx := ctx
	if tr.ServiceTicketStart != nil {
		tctx = tr.ServiceTicketStart(ctx, HostInfo{Host: at.host.Host, Port: at.host.Port})
	}
	sess, fromCache, err := at.n.cfg.GSS.ServiceTicket(ctx, at.host.Host)
	if tr.ServiceTicketDone != nil {
		var enctype string
		if err == nil {
			enctype = sess.Enctype()
		}
		tr.ServiceTicketDone(tctx, ServiceTicketDoneInfo{FromCache: fromCache, Enctype: enctype, Err: err})
	}
	if err != nil {
		at.fail(stepServiceTicket, err)
		conn.Close()
		return nil, fmt.Errorf("GSSAPI: %w", err)
	}
	// 'G' was the whole answer: nothing may have arrived since, before our first token.
	if err := quiet(conn, gssencRequest); err != nil {
		at.fail(stepGSSENCRequest, err)
		conn.Close()
		return nil, err
	}

	ectx := ctx
	if tr.GSSContextStart != nil {
		ectx = tr.GSSContextStart(ctx, info)
	}
	gconn, err := sess.Establish(ctx, conn)
	if tr.GSSContextDone != nil {
		done := GSSContextDoneInfo{Enctype: sess.Enctype(), Err: err}
		if d, ok := sess.(GSSDelegationReporter); ok && err == nil {
			done.Delegated, done.DelegationErr = d.Delegation()
		}
		tr.GSSContextDone(ectx, done)
	}
	if err != nil {
		at.fail(stepGSSContext, err)
		conn.Close()
		return nil, fmt.Errorf("GSSAPI context establishment failed: %w", err)
	}
	return gconn, nil
}
