package pgconnector

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"slices"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/pgconnector/pgconnector/internal/connstring"
	"github.com/pgconnector/pgconnector/internal/pgxconfig"
	"github.com/pgconnector/pgconnector/internal/tlspolicy"
	"github.com/pgconnector/pgconnector/negotiation"
)

// TLSConfigFunc is the function of [WithTLSConfigFunc]: it may change cfg, a clone of the TLS
// configuration the connector built for host (as written in the connection string) for one
// connection attempt.
type TLSConfigFunc func(ctx context.Context, host string, cfg *tls.Config) error

// attemptTLS gives the attempt's configuration (cfg, after Negotiator.Configure gave it its
// host's TLS configuration, which every attempt to the host shares) a TLS configuration of its
// own, sharing no slice with the host's (pgxconfig.CloneTLS), and runs WithTLSConfigFunc on it.
// Whatever WithTLSConfigFunc and WithBeforeConnect change in it, refused or not, is this
// attempt's alone.
func (c *Connector) attemptTLS(ctx context.Context, cfg *pgconn.Config) error {
	if cfg.TLSConfig == nil {
		return nil
	}
	cfg.TLSConfig = pgxconfig.CloneTLS(cfg.TLSConfig)
	if c.tlsConfigFunc == nil {
		return nil
	}
	host, port, _ := negotiation.AttemptHost(ctx)
	i := slices.IndexFunc(c.settings.Hosts, func(h negotiation.Host) bool { return h.Host == host && h.Port == port })
	if i < 0 || c.settings.Hosts[i].TLSConfig == nil || connstring.TLSCheck(c.settings, i) == nil { // a Settings not made by ParseSettings
		return &negotiation.AbortError{Err: errors.New("pgconnector: the host's TLS configuration was not built by the connector")}
	}
	chk, mode := connstring.TLSCheck(c.settings, i), c.settings.Hosts[i].SSLMode
	tc := cfg.TLSConfig
	var pool *x509.CertPool // the function's RootCAs, set below before any handshake
	ours := func(cs tls.ConnectionState) error {
		if pool != nil {
			return chk.VerifyChain(cs, pool)
		}
		return chk.VerifyConnection(cs)
	}
	tc.VerifyConnection = ours
	before := tlspolicy.RulesOf(tc)
	if err := c.tlsConfigFunc(ctx, host, tc); err != nil {
		return hookError("WithTLSConfigFunc", err)
	}
	if what := before.WeakenedBy(tc, host, chk.Host != ""); what != "" {
		return &negotiation.AbortError{Err: fmt.Errorf("WithTLSConfigFunc: refused for host %q (sslmode=%s): %s", host, mode, what)}
	}
	pool = tc.RootCAs
	if hook := tc.VerifyConnection; pgxconfig.SameFunc(hook, ours) {
		tc.VerifyConnection = ours // this attempt's (the function may have put another attempt's)
	} else {
		tc.VerifyConnection = func(cs tls.ConnectionState) error {
			if err := ours(cs); err != nil {
				return err
			}
			if err := hook(cs); err != nil {
				return refused(fmt.Errorf("WithTLSConfigFunc's VerifyConnection: %w", err))
			}
			return nil
		}
	}
	// The function's client certificate: Certificates alone would not be used while the
	// connector's GetClientCertificate (sslcert and sslkey) is there, which crypto/tls prefers.
	if tc.Certificates != nil && tlspolicy.IsClientCertLoader(tc.GetClientCertificate) {
		tc.GetClientCertificate = nil
	}
	ownCert := !tlspolicy.IsClientCertLoader(tc.GetClientCertificate) && (tc.GetClientCertificate != nil || tc.Certificates != nil)
	switch {
	case pool != nil && ownCert:
		// The trust anchors and the certificate are in memory: no file to look for first.
		return c.negotiator.SetBeforeTLS(ctx, nil)
	case pool != nil:
		// No root certificate file to look for; the client certificate's files still are.
		return c.negotiator.SetBeforeTLS(ctx, connstring.ClientCertCheck(c.settings))
	case ownCert:
		// sslcert and sslkey are not used: only the root certificate file is checked first.
		return c.negotiator.SetBeforeTLS(ctx, chk.BeforeTLS)
	}
	return nil
}

// refused marks err as the client's refusal of the server's TLS, never taken for the server's
// lack of TLS.
func refused(err error) error { return &negotiation.TLSRefusedError{Err: err} }
