package tracing

import (
	"context"

	"github.com/pgconnector/pgconnector/negotiation"
)

// Compose returns a Trace that calls the hooks of both a and b at each step, as
// net/http/httptrace composes a ClientTrace with the one already in a context. Either may be nil.
//
// Start hooks and event hooks (Decision, Fallback, OAuthDiscovery, CredentialRetry) run a's first, then b's; a Start hook of b
// receives the context a's Start hook returned (Detach too: b's extends what a's returned). Done hooks run b's first, then a's, as deferred
// calls would, and both receive the context b's Start hook returned. The
// Done hooks of [NewTrace] end a span only when it is the current span of their context, so a
// trace of spans goes last (as b): a trace composed after it must not start spans of its own.
//
// Compose belongs with negotiation.Trace; it lives here because negotiation does not change
// for observers.
func Compose(a, b *negotiation.Trace) *negotiation.Trace {
	switch {
	case a == nil && b == nil:
		return &negotiation.Trace{}
	case a == nil:
		t := *b
		return &t
	case b == nil:
		t := *a
		return &t
	}
	return &negotiation.Trace{
		ConnectStart:        startHook(a.ConnectStart, b.ConnectStart),
		ConnectDone:         doneHook(a.ConnectDone, b.ConnectDone),
		Decision:            eventHook(a.Decision, b.Decision),
		ProbeWaitStart:      startHook(a.ProbeWaitStart, b.ProbeWaitStart),
		ProbeWaitDone:       doneHook(a.ProbeWaitDone, b.ProbeWaitDone),
		GSSCredentialsStart: startHook0(a.GSSCredentialsStart, b.GSSCredentialsStart),
		GSSCredentialsDone:  doneHook(a.GSSCredentialsDone, b.GSSCredentialsDone),
		DNSStart:            startHook(a.DNSStart, b.DNSStart),
		DNSDone:             doneHook(a.DNSDone, b.DNSDone),
		TCPConnectStart:     startHook(a.TCPConnectStart, b.TCPConnectStart),
		TCPConnectDone:      doneHook(a.TCPConnectDone, b.TCPConnectDone),
		SSLRequestStart:     startHook(a.SSLRequestStart, b.SSLRequestStart),
		SSLRequestDone:      doneHook(a.SSLRequestDone, b.SSLRequestDone),
		GSSEncRequestStart:  startHook(a.GSSEncRequestStart, b.GSSEncRequestStart),
		GSSEncRequestDone:   doneHook(a.GSSEncRequestDone, b.GSSEncRequestDone),
		ServiceTicketStart:  startHook(a.ServiceTicketStart, b.ServiceTicketStart),
		ServiceTicketDone:   doneHook(a.ServiceTicketDone, b.ServiceTicketDone),
		GSSContextStart:     startHook(a.GSSContextStart, b.GSSContextStart),
		GSSContextDone:      doneHook(a.GSSContextDone, b.GSSContextDone),
		TLSHandshakeStart:   startHook(a.TLSHandshakeStart, b.TLSHandshakeStart),
		TLSHandshakeDone:    doneHook(a.TLSHandshakeDone, b.TLSHandshakeDone),
		StartupStart:        startHook(a.StartupStart, b.StartupStart),
		StartupDone:         doneHook(a.StartupDone, b.StartupDone),
		SCRAMKeyDerived:     eventHook(a.SCRAMKeyDerived, b.SCRAMKeyDerived),
		Fallback:            eventHook(a.Fallback, b.Fallback),
		RefreshStart:        startHook(a.RefreshStart, b.RefreshStart),
		RefreshDone:         doneHook(a.RefreshDone, b.RefreshDone),
		BackgroundStart:     startHook(a.BackgroundStart, b.BackgroundStart),
		BackgroundDone:      doneHook(a.BackgroundDone, b.BackgroundDone),
		CredentialStart:     startHook(a.CredentialStart, b.CredentialStart),
		CredentialDone:      doneHook(a.CredentialDone, b.CredentialDone),
		OAuthDiscovery:      eventHook(a.OAuthDiscovery, b.OAuthDiscovery),
		CredentialRetry:     eventHook(a.CredentialRetry, b.CredentialRetry),
		Detach:              startHook(a.Detach, b.Detach),
	}
}

// startHook chains two Start hooks: b starts under the context a returned.
func startHook[I any](a, b func(context.Context, I) context.Context) func(context.Context, I) context.Context {
	switch {
	case a == nil:
		return b
	case b == nil:
		return a
	}
	return func(ctx context.Context, info I) context.Context { return b(a(ctx, info), info) }
}

// startHook0 is startHook for a Start hook without info.
func startHook0(a, b func(context.Context) context.Context) func(context.Context) context.Context {
	switch {
	case a == nil:
		return b
	case b == nil:
		return a
	}
	return func(ctx context.Context) context.Context { return b(a(ctx)) }
}

// doneHook calls b then a: the Done hook of the inner trace first.
func doneHook[I any](a, b func(context.Context, I)) func(context.Context, I) {
	switch {
	case a == nil:
		return b
	case b == nil:
		return a
	}
	return func(ctx context.Context, info I) { b(ctx, info); a(ctx, info) }
}

// eventHook calls a then b.
func eventHook[I any](a, b func(context.Context, I)) func(context.Context, I) {
	switch {
	case a == nil:
		return b
	case b == nil:
		return a
	}
	return func(ctx context.Context, info I) { a(ctx, info); b(ctx, info) }
}
