// Package pgxconfig holds what the connector does with pgx's configuration beyond its exported
// fields: TLS clones that share nothing a hook could change in place with the configuration
// they were made from, and the fields an application's hook must leave to the connector.
package pgxconfig

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"net"
	"reflect"
	"slices"
	"unsafe"

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

// CloneTLS returns a clone of c (nil for nil) that shares no slice with it: tls.Config.Clone
// copies the slice headers (NextProtos, CipherSuites, CurvePreferences, Certificates...), so
// a change made in place to an element of a clone's slice would be the original's too.
func CloneTLS(c *tls.Config) *tls.Config {
	if c == nil {
		return nil
	}
	c = c.Clone()
	ownSlices(c)
	return c
}

// ownSlices gives c its own copies of the slices of a client configuration.
func ownSlices(c *tls.Config) {
	c.NextProtos = slices.Clone(c.NextProtos)
	c.CipherSuites = slices.Clone(c.CipherSuites)
	c.CurvePreferences = slices.Clone(c.CurvePreferences)
	c.Certificates = slices.Clone(c.Certificates)
	c.EncryptedClientHelloConfigList = slices.Clone(c.EncryptedClientHelloConfigList)
}

// Fields are what the connector sets in an attempt's configuration (Negotiator.Configure and
// the connector's TLS clone) and WithBeforeConnect must leave: the host and port, the dial and
// lookup functions, pgx's hooks the negotiation runs through (BuildFrontend: the authentication
// exchange; AfterNetConnect: the TLS handshake, its ALPN check, requirepeer; ValidateConnect:
// target_session_attrs), the TLS negotiation and Kerberos service names, and the TLS
// configuration (and the fields of it that carry libpq's rules).
type Fields struct {
	host            string
	port            uint16
	dial            pgconn.DialFunc
	lookup          pgconn.LookupFunc
	buildFrontend   pgconn.BuildFrontendFunc
	afterNetConnect func(context.Context, *pgconn.Config, net.Conn) (net.Conn, error)
	validateConnect pgconn.ValidateConnectFunc
	sslNegotiation  string
	krbSrvName      string
	krbSpn          string
	fallback        bool
	tls             *tls.Config
	rules           tlspolicy.Rules
	skip            bool
	verify          func(tls.ConnectionState) error
	roots           *x509.CertPool
	protos          []string
}

// FieldsOf returns cfg's Fields.
func FieldsOf(cfg *pgx.ConnConfig) Fields {
	f := Fields{host: cfg.Host, port: cfg.Port, dial: cfg.DialFunc, lookup: cfg.LookupFunc, buildFrontend: cfg.BuildFrontend,
		afterNetConnect: cfg.AfterNetConnect, validateConnect: cfg.ValidateConnect, sslNegotiation: cfg.SSLNegotiation,
		krbSrvName: cfg.KerberosSrvName, krbSpn: cfg.KerberosSpn, fallback: len(cfg.Fallbacks) > 0, tls: cfg.TLSConfig}
	if t := cfg.TLSConfig; t != nil {
		f.rules = tlspolicy.RulesOf(t)
		f.skip, f.verify, f.roots, f.protos = t.InsecureSkipVerify, t.VerifyConnection, t.RootCAs, slices.Clone(t.NextProtos)
	}
	return f
}

// ChangedBy names what an application's hook (the connector's WithBeforeConnect) changed of the
// connector's fields (f, before it ran) in cfg, with the option to use instead; "" when nothing.
// Functions are compared by their code (SameFunc): call Restore when it returns "".
func (f Fields) ChangedBy(cfg *pgx.ConnConfig) string {
	switch {
	case cfg.Host != f.host || cfg.Port != f.port || len(cfg.Fallbacks) > 0 != f.fallback:
		return "the host or port (the connector's choice for this attempt)"
	case !SameFunc(cfg.DialFunc, f.dial):
		return "DialFunc: use WithDialFunc"
	case !SameFunc(cfg.LookupFunc, f.lookup):
		return "LookupFunc (the connector resolves the host): write hostaddr in the connection string, or map addresses in WithDialFunc"
	case !SameFunc(cfg.BuildFrontend, f.buildFrontend):
		return "BuildFrontend (the connector's: it runs the authentication exchange, with require_auth and channel_binding): " +
			"set Password, RequireAuth or ChannelBinding instead, or see the bytes in a connection of WithDialFunc"
	case !SameFunc(cfg.AfterNetConnect, f.afterNetConnect):
		return "AfterNetConnect (the connector's: the TLS handshake, the direct-TLS ALPN check and requirepeer run in it): " +
			"wrap the connection in WithDialFunc, or use WithTLSConfigFunc for a check of the server's certificate"
	case !SameFunc(cfg.ValidateConnect, f.validateConnect):
		return "ValidateConnect (the connector's: target_session_attrs): write target_session_attrs in the connection string, " +
			"or check the connection in WithAfterConnect (pgx: pgxpool's AfterConnect, or PgxConfig's ValidateConnect)"
	case cfg.SSLNegotiation != f.sslNegotiation:
		return "SSLNegotiation (the connector's choice of direct TLS or SSLRequest for this attempt): write sslnegotiation in the connection string"
	case cfg.KerberosSrvName != f.krbSrvName || cfg.KerberosSpn != f.krbSpn:
		return "KerberosSrvName or KerberosSpn (the connector's GSSAPI client is made by New): write krbsrvname in the connection string"
	case cfg.TLSConfig != f.tls:
		return "TLSConfig: use WithTLSConfigFunc"
	}
	if t := cfg.TLSConfig; t != nil {
		if tlspolicy.RulesOf(t) != f.rules || t.InsecureSkipVerify != f.skip || !SameFunc(t.VerifyConnection, f.verify) ||
			t.RootCAs != f.roots || !slices.Equal(t.NextProtos, f.protos) {
			return "fields of TLSConfig that carry libpq's rules (InsecureSkipVerify, VerifyConnection, RootCAs, ServerName, " +
				"MinVersion, MaxVersion, NextProtos): use WithTLSConfigFunc"
		}
	}
	return ""
}

// Restore puts the connector's functions of f back in cfg, after ChangedBy found none changed:
// SameFunc does not tell two closures of one function literal apart, and a hook may have put
// another attempt's (kept from an earlier call) in place of this attempt's.
func (f Fields) Restore(cfg *pgx.ConnConfig) {
	cfg.DialFunc, cfg.LookupFunc = f.dial, f.lookup
	cfg.BuildFrontend, cfg.AfterNetConnect, cfg.ValidateConnect = f.buildFrontend, f.afterNetConnect, f.validateConnect
	if cfg.TLSConfig != nil {
		cfg.TLSConfig.VerifyConnection = f.verify
	}
}

// SetConnString makes s what cc.ConnString() returns. pgx keeps the string in an unexported
// field (ConnConfig.connString, set only by pgx.ParseConfig): the connector's configurations are
// parsed from a string it builds, and an application reads ConnString() for the string it gave.
// An error when pgx has no such field (a pgx release that renamed it).
func SetConnString(cc *pgx.ConnConfig, s string) error {
	f := reflect.ValueOf(cc).Elem().FieldByName("connString")
	if !f.IsValid() || f.Kind() != reflect.String {
		return errors.New("pgxconfig: pgx.ConnConfig has no connString field")
	}
	reflect.NewAt(f.Type(), unsafe.Pointer(f.UnsafeAddr())).Elem().SetString(s)
	return nil
}
