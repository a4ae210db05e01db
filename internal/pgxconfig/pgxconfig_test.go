package pgxconfig

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"io"
	"net"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgproto3"
)

// A clone's slices are its own: changing an element in place leaves the original as it was.
func TestCloneTLSSharesNoSlice(t *testing.T) {
	if CloneTLS(nil) != nil {
		t.Error("CloneTLS(nil) is not nil")
	}
	orig := &tls.Config{
		NextProtos:                     []string{"postgresql"},
		CipherSuites:                   []uint16{tls.TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256},
		CurvePreferences:               []tls.CurveID{tls.X25519},
		Certificates:                   []tls.Certificate{{OCSPStaple: []byte("a")}},
		EncryptedClientHelloConfigList: []byte{1},
		MinVersion:                     tls.VersionTLS12,
	}
	c := CloneTLS(orig)
	c.NextProtos[0] = "h2"
	c.CipherSuites[0] = tls.TLS_RSA_WITH_RC4_128_SHA
	c.CurvePreferences[0] = tls.CurveP256
	c.Certificates[0] = tls.Certificate{}
	c.EncryptedClientHelloConfigList[0] = 2
	c.MinVersion = tls.VersionTLS10
	switch {
	case orig.NextProtos[0] != "postgresql", orig.CipherSuites[0] != tls.TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256,
		orig.CurvePreferences[0] != tls.X25519, orig.Certificates[0].OCSPStaple == nil, orig.EncryptedClientHelloConfigList[0] != 1,
		orig.MinVersion != tls.VersionTLS12:
		t.Errorf("a change to the clone reached the original: %+v", orig)
	}
}

func parse(t *testing.T) *pgx.ConnConfig {
	t.Helper()
	cfg, err := pgx.ParseConfig("host=db.invalid port=5433 sslmode=require")
	if err != nil {
		t.Fatal(err)
	}
	return cfg
}

var errFromAttempt = errors.New("the attempt's")

// An attempt's configuration as Negotiator.Configure leaves it: the connector's functions.
func attemptConfig(t *testing.T) *pgx.ConnConfig {
	t.Helper()
	cfg := parse(t)
	cfg.DialFunc = func(context.Context, string, string) (net.Conn, error) { return nil, errFromAttempt }
	cfg.LookupFunc = func(context.Context, string) ([]string, error) { return nil, errFromAttempt }
	cfg.BuildFrontend = func(r io.Reader, w io.Writer) *pgproto3.Frontend { return pgproto3.NewFrontend(r, w) }
	cfg.AfterNetConnect = func(context.Context, *pgconn.Config, net.Conn) (net.Conn, error) { return nil, errFromAttempt }
	cfg.ValidateConnect = func(context.Context, *pgconn.PgConn) error { return errFromAttempt }
	cfg.SSLNegotiation = "postgres"
	cfg.Fallbacks = nil
	cfg.TLSConfig = &tls.Config{InsecureSkipVerify: true, NextProtos: []string{"postgresql"}, ServerName: "db.invalid",
		VerifyConnection: func(tls.ConnectionState) error { return errFromAttempt }}
	return cfg
}

// Each field of the connector's is one ChangedBy names, with the option to use instead; what
// the hook may change is not.
func TestChangedBy(t *testing.T) {
	for _, tc := range []struct {
		name, want string
		change     func(cfg *pgx.ConnConfig)
	}{
		{"nothing", "", func(*pgx.ConnConfig) {}},
		{"password, parameters, notices", "", func(cfg *pgx.ConnConfig) {
			cfg.Password, cfg.User, cfg.Database = "p", "u", "d"
			cfg.RuntimeParams["application_name"] = "x"
			cfg.OnNotice = func(*pgconn.PgConn, *pgconn.Notice) {}
			cfg.OnPgError = func(*pgconn.PgConn, *pgconn.PgError) bool { return false }
			cfg.AfterConnect = func(context.Context, *pgconn.PgConn) error { return nil }
			cfg.RequireAuth, cfg.ChannelBinding = "scram-sha-256", "require"
			cfg.TLSConfig.GetClientCertificate = func(*tls.CertificateRequestInfo) (*tls.Certificate, error) { return nil, nil }
		}},
		{"host", "the host or port", func(cfg *pgx.ConnConfig) { cfg.Host = "other" }},
		{"port", "the host or port", func(cfg *pgx.ConnConfig) { cfg.Port++ }},
		{"fallbacks", "the host or port", func(cfg *pgx.ConnConfig) { cfg.Fallbacks = []*pgconn.FallbackConfig{{Host: "other"}} }},
		{"dial", "DialFunc: use WithDialFunc", func(cfg *pgx.ConnConfig) { cfg.DialFunc = (&net.Dialer{}).DialContext }},
		{"lookup", "LookupFunc", func(cfg *pgx.ConnConfig) { cfg.LookupFunc = net.DefaultResolver.LookupHost }},
		{"frontend", "BuildFrontend (the connector's", func(cfg *pgx.ConnConfig) { cfg.BuildFrontend = nil }},
		{"after net connect", "AfterNetConnect (the connector's", func(cfg *pgx.ConnConfig) { cfg.AfterNetConnect = nil }},
		{"validate", "target_session_attrs in the connection string", func(cfg *pgx.ConnConfig) { cfg.ValidateConnect = nil }},
		{"sslnegotiation", "sslnegotiation in the connection string", func(cfg *pgx.ConnConfig) { cfg.SSLNegotiation = "direct" }},
		{"krbsrvname", "krbsrvname in the connection string", func(cfg *pgx.ConnConfig) { cfg.KerberosSrvName = "x" }},
		{"krbspn", "krbsrvname in the connection string", func(cfg *pgx.ConnConfig) { cfg.KerberosSpn = "x" }},
		{"tls replaced", "TLSConfig: use WithTLSConfigFunc", func(cfg *pgx.ConnConfig) { cfg.TLSConfig = cfg.TLSConfig.Clone() }},
		{"tls off", "TLSConfig: use WithTLSConfigFunc", func(cfg *pgx.ConnConfig) { cfg.TLSConfig = nil }},
		{"verify", "fields of TLSConfig", func(cfg *pgx.ConnConfig) { cfg.TLSConfig.VerifyConnection = nil }},
		{"skip", "fields of TLSConfig", func(cfg *pgx.ConnConfig) { cfg.TLSConfig.InsecureSkipVerify = false }},
		{"roots", "fields of TLSConfig", func(cfg *pgx.ConnConfig) { cfg.TLSConfig.RootCAs = x509.NewCertPool() }},
		{"server name", "fields of TLSConfig", func(cfg *pgx.ConnConfig) { cfg.TLSConfig.ServerName = "x" }},
		{"min", "fields of TLSConfig", func(cfg *pgx.ConnConfig) { cfg.TLSConfig.MinVersion = tls.VersionTLS10 }},
		{"max", "fields of TLSConfig", func(cfg *pgx.ConnConfig) { cfg.TLSConfig.MaxVersion = tls.VersionTLS12 }},
		{"alpn in place", "fields of TLSConfig", func(cfg *pgx.ConnConfig) { cfg.TLSConfig.NextProtos[0] = "h2" }},
		{"alpn added", "fields of TLSConfig", func(cfg *pgx.ConnConfig) { cfg.TLSConfig.NextProtos = append(cfg.TLSConfig.NextProtos, "h2") }},
	} {
		cfg := attemptConfig(t)
		f := FieldsOf(cfg)
		tc.change(cfg)
		got := f.ChangedBy(cfg)
		if tc.want == "" && got != "" || tc.want != "" && !strings.Contains(got, tc.want) {
			t.Errorf("%s: ChangedBy %q, want %q", tc.name, got, tc.want)
		}
	}
}

// closures returns closures of the same literals over e (not inlined: an inlined copy would be
// other literals).
//
//go:noinline
func closures(e error) (pgconn.DialFunc, pgconn.LookupFunc, func(context.Context, *pgconn.Config, net.Conn) (net.Conn, error),
	pgconn.ValidateConnectFunc, func(tls.ConnectionState) error) {
	return func(context.Context, string, string) (net.Conn, error) { return nil, e },
		func(context.Context, string) ([]string, error) { return nil, e },
		func(context.Context, *pgconn.Config, net.Conn) (net.Conn, error) { return nil, e },
		func(context.Context, *pgconn.PgConn) error { return e },
		func(tls.ConnectionState) error { return e }
}

// Restore puts the attempt's own functions back where a hook put another attempt's closures of
// the same literals, which ChangedBy cannot tell apart.
func TestRestore(t *testing.T) {
	errOther := errors.New("another attempt's")
	cfg := attemptConfig(t)
	cfg.DialFunc, cfg.LookupFunc, cfg.AfterNetConnect, cfg.ValidateConnect, cfg.TLSConfig.VerifyConnection = closures(errFromAttempt)
	f := FieldsOf(cfg)
	cfg.DialFunc, cfg.LookupFunc, cfg.AfterNetConnect, cfg.ValidateConnect, cfg.TLSConfig.VerifyConnection = closures(errOther)
	if what := f.ChangedBy(cfg); what != "" {
		t.Fatalf("ChangedBy %q for closures of the connector's literals", what)
	}
	f.Restore(cfg)
	_, dialErr := cfg.DialFunc(context.Background(), "tcp", "x")
	_, lookupErr := cfg.LookupFunc(context.Background(), "x")
	_, ancErr := cfg.AfterNetConnect(context.Background(), nil, nil)
	for name, err := range map[string]error{
		"DialFunc": dialErr, "LookupFunc": lookupErr, "AfterNetConnect": ancErr,
		"ValidateConnect": cfg.ValidateConnect(context.Background(), nil), "VerifyConnection": cfg.TLSConfig.VerifyConnection(tls.ConnectionState{}),
	} {
		if err != errFromAttempt {
			t.Errorf("%s after Restore: %v, want the attempt's own", name, err)
		}
	}
}

// TestSetConnString: ConnString() returns the string given, and the copies of the configuration
// keep it (pgx.ConnConfig.Copy copies the struct).
func TestSetConnString(t *testing.T) {
	cc, err := pgx.ParseConfig("host=a user=u")
	if err != nil {
		t.Fatal(err)
	}
	if err := SetConnString(cc, "postgres://u@a/?sslmode=verify-full"); err != nil {
		t.Fatal(err)
	}
	if got := cc.Copy().ConnString(); got != "postgres://u@a/?sslmode=verify-full" {
		t.Errorf("ConnString() = %q, want the string set", got)
	}
}
