// Package pgxconfig holds what the connector does with pgx's configuration beyond its exported
// fields: a TLS clone that keeps pgx's client certificate (pgx keys it by its own *tls.Config),
// and the fields an application's hook must leave to the connector.
package pgxconfig

import (
	"crypto/tls"
	"crypto/x509"
	"reflect"
	"slices"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/pgconnector/pgconnector/internal/tlspolicy"
)

// SameFunc reports whether a and b are the same function (code): nil or the same function
// literal. Two closures of one literal are the same here.
func SameFunc[F any](a, b F) bool {
	va, vb := reflect.ValueOf(a), reflect.ValueOf(b)
	if va.IsNil() || vb.IsNil() {
		return va.IsNil() == vb.IsNil()
	}
	return va.Pointer() == vb.Pointer()
}

// CloneTLSWithCert replaces cfg.TLSConfig, the negotiator's configuration for a host (pgx's,
// parsed, offering ALPN "postgresql": negotiation's withALPN clones it), by a clone that pgx
// still gives the client certificate of sslcert and sslkey. pgx finds that certificate by the *tls.Config
// pointer it built (pgconn.Config.clientCertificateLoaders, which Copy carries over to its
// clones of TLSConfig and Fallbacks only), parsed: the host's configuration as pgx parsed it, in
// base, the configuration pgx parsed. The clone is made by pgconn.Config.Copy of base with parsed
// as its TLSConfig, and cfg takes that copy's pgx-private fields (the loaders, keyed by the
// clone) and keeps its own exported ones.
func CloneTLSWithCert(cfg, base *pgconn.Config, parsed *tls.Config) {
	src := *base // a shallow copy: its loaders are the parsed configuration's
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

// HasCertLoaders reports whether pgx installed a client certificate loader (sslcert and sslkey)
// in cfg: then a clone of a host's TLS configuration must be made by CloneTLSWithCert.
func HasCertLoaders(cfg *pgconn.Config) bool {
	v := reflect.ValueOf(cfg).Elem().FieldByName("clientCertificateLoaders")
	// Not found (a pgx that keeps the certificate otherwise): clone with the loaders' way anyway.
	return !v.IsValid() || v.Len() > 0
}

// Fields are what the connector sets in an attempt's configuration and
// WithBeforeConnect must leave: the host and port, the dial and lookup functions, the TLS
// configuration (and the fields of it that carry libpq's rules).
type Fields struct {
	host     string
	port     uint16
	dial     pgconn.DialFunc
	lookup   pgconn.LookupFunc
	fallback bool
	tls      *tls.Config
	rules    tlspolicy.Rules
	skip     bool
	verify   func(tls.ConnectionState) error
	roots    *x509.CertPool
	protos   int
}

// FieldsOf returns cfg's Fields.
func FieldsOf(cfg *pgx.ConnConfig) Fields {
	f := Fields{host: cfg.Host, port: cfg.Port, dial: cfg.DialFunc, lookup: cfg.LookupFunc, fallback: len(cfg.Fallbacks) > 0, tls: cfg.TLSConfig}
	if t := cfg.TLSConfig; t != nil {
		f.rules = tlspolicy.RulesOf(t)
		f.skip, f.verify, f.roots, f.protos = t.InsecureSkipVerify, t.VerifyConnection, t.RootCAs, len(t.NextProtos)
	}
	return f
}

// ChangedBy names what an application's hook (the connector's WithBeforeConnect) changed of the
// connector's fields (f, before it ran) in cfg, with the option to use instead; "" when nothing.
func (f Fields) ChangedBy(cfg *pgx.ConnConfig) string {
	switch {
	case cfg.Host != f.host || cfg.Port != f.port || len(cfg.Fallbacks) > 0 != f.fallback:
		return "the host or port (the connector's choice for this attempt)"
	case !SameFunc(cfg.DialFunc, f.dial):
		return "DialFunc: use WithDialFunc"
	case !SameFunc(cfg.LookupFunc, f.lookup):
		return "LookupFunc (the connector resolves the host)"
	case cfg.TLSConfig != f.tls:
		return "TLSConfig: use WithTLSConfigFunc"
	}
	if t := cfg.TLSConfig; t != nil {
		if tlspolicy.RulesOf(t) != f.rules || t.InsecureSkipVerify != f.skip || !SameFunc(t.VerifyConnection, f.verify) ||
			t.RootCAs != f.roots || len(t.NextProtos) != f.protos {
			return "fields of TLSConfig (shared with other connections): use WithTLSConfigFunc"
		}
	}
	return ""
}
