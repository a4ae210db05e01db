package pgconnector

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"reflect"
	"slices"
	"strings"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/pgconnector/pgconnector/negotiation"
)

// TLSConfigFunc is the function of [WithTLSConfigFunc]: it may change cfg, a clone of the TLS
// configuration the connector built for host (as written in the connection string) for one
// connection attempt.
type TLSConfigFunc func(ctx context.Context, host string, cfg *tls.Config) error

// attemptTLS gives the attempt's configuration (cfg, after Negotiator.Configure gave it its
// host's TLS configuration) a TLS configuration of its own when WithTLSConfigFunc is set or
// when pgx loads a client certificate for it (sslcert and sslkey: see tlsClone), and runs
// WithTLSConfigFunc on it.
func (c *Connector) attemptTLS(ctx context.Context, cfg *pgconn.Config) error {
	if cfg.TLSConfig == nil || (c.tlsConfigFunc == nil && !c.certLoaders) {
		return nil
	}
	host, port, _ := negotiation.AttemptHost(ctx)
	i := slices.IndexFunc(c.settings.Hosts, func(h negotiation.Host) bool { return h.Host == host && h.Port == port })
	if i < 0 || c.settings.Hosts[i].TLSConfig == nil || c.settings.TLSCheck(i) == nil { // a Settings not made by ParseSettings
		return &negotiation.AbortError{Err: errors.New("pgconnector: the host's TLS configuration was not built by the connector")}
	}
	c.tlsClone(cfg, c.settings.Hosts[i].TLSConfig)
	if c.tlsConfigFunc == nil {
		return nil
	}
	chk, mode := c.settings.TLSCheck(i), c.settings.Hosts[i].SSLMode
	tc := cfg.TLSConfig
	var pool *x509.CertPool // the function's RootCAs, set below before any handshake
	ours := func(cs tls.ConnectionState) error {
		if pool != nil {
			return chk.VerifyChain(cs, pool)
		}
		return chk.VerifyConnection(cs)
	}
	tc.VerifyConnection = ours
	before := tlsRules{serverName: tc.ServerName, minVersion: tc.MinVersion, maxVersion: tc.MaxVersion}
	if err := c.tlsConfigFunc(ctx, host, tc); err != nil {
		return hookError("WithTLSConfigFunc", err)
	}
	if what := before.weakenedBy(tc, host, chk.Host != ""); what != "" {
		return &negotiation.AbortError{Err: fmt.Errorf("WithTLSConfigFunc: refused for host %q (sslmode=%s): %s", host, mode, what)}
	}
	pool = tc.RootCAs
	if hook := tc.VerifyConnection; sameFunc(hook, ours) {
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
	if pool != nil {
		// The trust anchors are in memory: no root certificate file to look for first.
		return c.negotiator.SetBeforeTLS(ctx, nil)
	}
	return nil
}

// tlsRules are the fields of a TLS configuration whose change WithTLSConfigFunc may weaken.
type tlsRules struct {
	serverName             string
	minVersion, maxVersion uint16
}

// weakenedBy says how tc, the hook's result, weakens or undoes what the connector set (r, before
// the hook), "" when it does not. verifyName: the certificate is checked against host
// (verify-full, or sslrootcert=system).
func (r tlsRules) weakenedBy(tc *tls.Config, host string, verifyName bool) string {
	switch {
	case tc.VerifyConnection == nil:
		return "it removed VerifyConnection, the connector's check of the server certificate (libpq's rules for sslmode, " +
			"sslrootcert and sslcrl): wrap it, or set a function of your own, to add a check"
	case !tc.InsecureSkipVerify:
		return "it turned InsecureSkipVerify off: the connector verifies the server certificate itself, as libpq does " +
			"(crypto/tls's verification is not used); give trust anchors in RootCAs"
	case verifyName && tc.ServerName != r.serverName && !strings.EqualFold(tc.ServerName, host):
		return fmt.Sprintf("it changed ServerName to %q: under verify-full the server certificate is checked against the host %q; "+
			"write the name to check as the host (with hostaddr for the address to connect to)", tc.ServerName, host)
	case effectiveMinTLS(tc.MinVersion) < effectiveMinTLS(r.minVersion):
		return fmt.Sprintf("it lowered MinVersion to %s, below the connector's %s (ssl_min_protocol_version)",
			tlsVersionName(tc.MinVersion), tlsVersionName(effectiveMinTLS(r.minVersion)))
	case r.maxVersion != 0 && (tc.MaxVersion == 0 || tc.MaxVersion > r.maxVersion):
		return fmt.Sprintf("it raised MaxVersion to %s, above ssl_max_protocol_version %s",
			tlsVersionName(tc.MaxVersion), tlsVersionName(r.maxVersion))
	case !slices.Contains(tc.NextProtos, "postgresql"):
		return `it removed ALPN "postgresql" from NextProtos, which libpq 17 offers on every TLS connection and direct TLS needs`
	}
	return ""
}

// effectiveMinTLS is the least version a client configuration offers: crypto/tls's client
// minimum, TLS 1.2, when MinVersion is 0.
func effectiveMinTLS(v uint16) uint16 {
	if v == 0 {
		return tls.VersionTLS12
	}
	return v
}

func tlsVersionName(v uint16) string {
	if v == 0 {
		return "no bound"
	}
	return tls.VersionName(v)
}

// sameFunc reports whether a and b are the same function (code): nil or the same function
// literal. Two closures of one literal are the same here.
func sameFunc[F any](a, b F) bool {
	va, vb := reflect.ValueOf(a), reflect.ValueOf(b)
	if va.IsNil() || vb.IsNil() {
		return va.IsNil() == vb.IsNil()
	}
	return va.Pointer() == vb.Pointer()
}

// tlsClone replaces cfg.TLSConfig, the negotiator's configuration for a host (pgx's, parsed,
// offering ALPN "postgresql": negotiation's withALPN clones it), by a clone that pgx still gives
// the client certificate of sslcert and sslkey. pgx finds that certificate by the *tls.Config
// pointer it built (pgconn.Config.clientCertificateLoaders, which Copy carries over to its
// clones of TLSConfig and Fallbacks only), parsed: the host's configuration as ParseSettings
// left it. The clone is made by pgconn.Config.Copy of the parsed configuration with parsed as
// its TLSConfig, and cfg takes that copy's pgx-private fields (the loaders, keyed by the clone)
// and keeps its own exported ones.
func (c *Connector) tlsClone(cfg *pgconn.Config, parsed *tls.Config) {
	if !c.certLoaders {
		cfg.TLSConfig = cfg.TLSConfig.Clone()
		return
	}
	src := c.settings.Config.Config // a shallow copy: its loaders are the parsed configuration's
	src.TLSConfig = parsed
	src.Fallbacks = nil
	src.RuntimeParams = nil
	cp := src.Copy()
	cp.TLSConfig.NextProtos = slices.Clone(cfg.TLSConfig.NextProtos) // withALPN's
	keep := *cfg
	*cfg = *cp
	dst, from := reflect.ValueOf(cfg).Elem(), reflect.ValueOf(&keep).Elem()
	for i := range dst.NumField() {
		if f := dst.Type().Field(i); f.IsExported() && f.Name != "TLSConfig" {
			dst.Field(i).Set(from.Field(i))
		}
	}
}

// hasCertLoaders reports whether pgx installed a client certificate loader (sslcert and sslkey)
// in cfg: then a clone of a host's TLS configuration must be made by tlsClone.
func hasCertLoaders(cfg *pgconn.Config) bool {
	v := reflect.ValueOf(cfg).Elem().FieldByName("clientCertificateLoaders")
	// Not found (a pgx that keeps the certificate otherwise): clone with the loaders' way anyway.
	return !v.IsValid() || v.Len() > 0
}

// connectorFields are what the connector sets in an attempt's configuration and
// WithBeforeConnect must leave: the host and port, the dial and lookup functions, the TLS
// configuration (and the fields of it that carry libpq's rules).
type connectorFields struct {
	host     string
	port     uint16
	dial     pgconn.DialFunc
	lookup   pgconn.LookupFunc
	fallback bool
	tls      *tls.Config
	rules    tlsRules
	skip     bool
	verify   func(tls.ConnectionState) error
	roots    *x509.CertPool
	protos   int
}

func connectorFieldsOf(cfg *pgx.ConnConfig) connectorFields {
	f := connectorFields{host: cfg.Host, port: cfg.Port, dial: cfg.DialFunc, lookup: cfg.LookupFunc, fallback: len(cfg.Fallbacks) > 0, tls: cfg.TLSConfig}
	if t := cfg.TLSConfig; t != nil {
		f.rules = tlsRules{serverName: t.ServerName, minVersion: t.MinVersion, maxVersion: t.MaxVersion}
		f.skip, f.verify, f.roots, f.protos = t.InsecureSkipVerify, t.VerifyConnection, t.RootCAs, len(t.NextProtos)
	}
	return f
}

// changedBy names what WithBeforeConnect changed of the connector's fields (f, before it ran),
// "" when nothing.
func (f connectorFields) changedBy(cfg *pgx.ConnConfig) string {
	switch {
	case cfg.Host != f.host || cfg.Port != f.port || len(cfg.Fallbacks) > 0 != f.fallback:
		return "the host or port (the connector's choice for this attempt)"
	case !sameFunc(cfg.DialFunc, f.dial):
		return "DialFunc: use WithDialFunc"
	case !sameFunc(cfg.LookupFunc, f.lookup):
		return "LookupFunc (the connector resolves the host)"
	case cfg.TLSConfig != f.tls:
		return "TLSConfig: use WithTLSConfigFunc"
	}
	if t := cfg.TLSConfig; t != nil {
		now := tlsRules{serverName: t.ServerName, minVersion: t.MinVersion, maxVersion: t.MaxVersion}
		if now != f.rules || t.InsecureSkipVerify != f.skip || !sameFunc(t.VerifyConnection, f.verify) ||
			t.RootCAs != f.roots || len(t.NextProtos) != f.protos {
			return "fields of TLSConfig (shared with other connections): use WithTLSConfigFunc"
		}
	}
	return ""
}

// refused marks err as the client's refusal of the server's TLS, never taken for the server's
// lack of TLS.
func refused(err error) error { return &negotiation.TLSRefusedError{Err: err} }
