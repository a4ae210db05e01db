package pgconnector_test

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"database/sql"
	"encoding/pem"
	"errors"
	"fmt"
	"math/big"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/pgconnector/pgconnector"
	"github.com/pgconnector/pgconnector/internal/harness"
	"github.com/pgconnector/pgconnector/negotiation"
)

// clientCA is a throwaway CA for client certificates.
type clientCA struct {
	cert *x509.Certificate
	key  *ecdsa.PrivateKey
	pem  []byte
}

// newClientCA is a throwaway client CA (CN "client CA").
func newClientCA(t *testing.T) *clientCA {
	t.Helper()
	return namedClientCA(t, "client CA")
}

// clientCert is a client certificate for user cn, with its serial number and PEM files' content.
type clientCert struct {
	tls     tls.Certificate
	serial  string
	certPEM []byte
	keyPEM  []byte
}

func (ca *clientCA) issue(t *testing.T, cn string) *clientCert {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	serial, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 62))
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: serial,
		Subject:      pkix.Name{CommonName: cn},
		NotBefore:    time.Now().Add(-time.Hour), NotAfter: time.Now().Add(24 * time.Hour),
		KeyUsage:    x509.KeyUsageDigitalSignature,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.cert, &key.PublicKey, ca.key)
	if err != nil {
		t.Fatal(err)
	}
	keyDER, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	return &clientCert{
		tls:     tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key},
		serial:  serial.String(),
		certPEM: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}),
		keyPEM:  pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: keyDER}),
	}
}

// clientCertServer starts a TLS server whose pg_hba wants a password and a client certificate
// of the user (clientcert=verify-full) signed by ca.
func clientCertServer(t *testing.T, ca *clientCA) *harness.Postgres {
	t.Helper()
	srv := harness.StartT(t, harness.Options{TLS: true, Auth: "scram-sha-256"})
	if err := srv.SetClientCA(ca.pem); err != nil {
		t.Fatal(err)
	}
	if err := srv.SetHBA("hostssl all all 127.0.0.1/32 scram-sha-256 clientcert=verify-full"); err != nil {
		t.Fatal(err)
	}
	return srv
}

const serialQuery = "SELECT client_serial::text FROM pg_stat_ssl WHERE pid = pg_backend_pid()"

// sqlSerial returns the serial number of the client certificate of a new database/sql connection.
func sqlSerial(db *sql.DB) (string, error) {
	var s sql.NullString
	err := db.QueryRow(serialQuery).Scan(&s)
	return s.String, err
}

// A client certificate rotated between connects through WithTLSConfigFunc
// (GetClientCertificate), with the server's trust anchors given in memory (RootCAs) under
// verify-full, for database/sql, pgx and a pool; the server checks the certificate
// (clientcert=verify-full) and refuses one of another CA. Without the function the same
// connection string fails: its root certificate file does not exist.
func TestTLSConfigFuncRotatesClientCertificate(t *testing.T) {
	ca := newClientCA(t)
	srv := clientCertServer(t, ca)
	a, b := ca.issue(t, srv.User), ca.issue(t, srv.User)
	stranger := newClientCA(t).issue(t, srv.User)
	caPEM, err := os.ReadFile(srv.CAFile)
	if err != nil {
		t.Fatal(err)
	}
	roots := x509.NewCertPool()
	roots.AppendCertsFromPEM(caPEM)

	var current atomic.Pointer[tls.Certificate]
	var calls atomic.Int32
	var hosts atomic.Value
	hook := func(_ context.Context, host string, cfg *tls.Config) error {
		calls.Add(1)
		hosts.Store(host)
		cfg.RootCAs = roots
		cfg.GetClientCertificate = func(*tls.CertificateRequestInfo) (*tls.Certificate, error) { return current.Load(), nil }
		return nil
	}
	dsn := srv.DSN("host=localhost", "hostaddr=127.0.0.1", "sslmode=verify-full", "sslrootcert="+filepath.Join(t.TempDir(), "absent.crt"))
	if _, err := newConnector(t, dsn).Connect(context.Background()); err == nil || !strings.Contains(err.Error(), "does not exist") {
		t.Fatalf("without WithTLSConfigFunc: %v, want the missing root certificate file", err)
	}

	c := newConnector(t, dsn, pgconnector.WithTLSConfigFunc(hook))
	db := sql.OpenDB(c)
	defer db.Close()
	db.SetMaxIdleConns(0)
	ctx := context.Background()
	for i, cert := range []*clientCert{a, b, a} {
		current.Store(&cert.tls)
		if got, err := sqlSerial(db); err != nil || got != cert.serial {
			t.Fatalf("database/sql connect %d: serial %q (%v), want %s", i, got, err, cert.serial)
		}
		pc, err := c.ConnectPgx(ctx, nil)
		if err != nil {
			t.Fatalf("ConnectPgx %d: %v", i, err)
		}
		var got string
		err = pc.QueryRow(ctx, serialQuery).Scan(&got)
		pc.Close(ctx)
		if err != nil || got != cert.serial {
			t.Fatalf("ConnectPgx %d: serial %q (%v), want %s", i, got, err, cert.serial)
		}
	}
	current.Store(&b.tls)
	pool, err := c.OpenPool(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var got string
	err = pool.QueryRow(ctx, serialQuery).Scan(&got)
	pool.Close()
	if err != nil || got != b.serial {
		t.Fatalf("pool: serial %q (%v), want %s", got, err, b.serial)
	}
	if n := calls.Load(); n != 7 || hosts.Load() != "localhost" {
		t.Errorf("WithTLSConfigFunc called %d times (want 7) with host %v (want localhost)", n, hosts.Load())
	}
	current.Store(&stranger.tls)
	if _, err := sqlSerial(db); err == nil {
		t.Error("a certificate of another CA was accepted")
	}
}

// The client certificate of sslcert and sslkey stays with the connections of pgx, and with
// those whose TLS configuration WithTLSConfigFunc saw but left without a certificate: the
// clone the function gets is one pgx still loads the files for.
func TestClientCertificateFilesWithPgxAndTLSConfigFunc(t *testing.T) {
	ca := newClientCA(t)
	srv := clientCertServer(t, ca)
	a := ca.issue(t, srv.User)
	dir := t.TempDir()
	certFile, keyFile := filepath.Join(dir, "client.crt"), filepath.Join(dir, "client.key")
	if os.WriteFile(certFile, a.certPEM, 0o600) != nil || os.WriteFile(keyFile, a.keyPEM, 0o600) != nil {
		t.Fatal("writing the client certificate")
	}
	dsn := srv.DSN("sslmode=verify-full", "sslrootcert="+srv.CAFile, "sslcert="+certFile, "sslkey="+keyFile)
	ctx := context.Background()
	var calls atomic.Int32
	for _, opts := range [][]pgconnector.Option{
		nil,
		{pgconnector.WithTLSConfigFunc(func(context.Context, string, *tls.Config) error { calls.Add(1); return nil })},
	} {
		c := newConnector(t, dsn, opts...)
		db := sql.OpenDB(c)
		if got, err := sqlSerial(db); err != nil || got != a.serial {
			t.Errorf("database/sql (%d options): serial %q (%v), want %s", len(opts), got, err, a.serial)
		}
		db.Close()
		pc, err := c.ConnectPgx(ctx, nil)
		if err != nil {
			t.Fatalf("ConnectPgx (%d options): %v", len(opts), err)
		}
		var got string
		err = pc.QueryRow(ctx, serialQuery).Scan(&got)
		pc.Close(ctx)
		if err != nil || got != a.serial {
			t.Errorf("ConnectPgx (%d options): serial %q (%v), want %s", len(opts), got, err, a.serial)
		}
	}
	if calls.Load() != 2 {
		t.Errorf("WithTLSConfigFunc called %d times, want 2", calls.Load())
	}
}

// A change that undoes libpq's rules is refused before anything is sent, with an error naming
// WithTLSConfigFunc, the host and what was weakened; no plaintext attempt follows under
// sslmode=prefer. What the documentation allows connects.
func TestTLSConfigFuncRefusesWeakening(t *testing.T) {
	_, srv := servers(t)
	verifyFull := srv.DSN("host=localhost", "hostaddr=127.0.0.1", "sslmode=verify-full", "sslrootcert="+srv.CAFile)
	prefer := srv.DSN("host=localhost", "hostaddr=127.0.0.1", "sslmode=prefer", "sslrootcert="+srv.CAFile)
	for _, tc := range []struct {
		name, dsn, want string // want "": connects
		change          func(cfg *tls.Config)
	}{
		{"VerifyConnection nil", verifyFull, "it removed VerifyConnection", func(cfg *tls.Config) { cfg.VerifyConnection = nil }},
		{"VerifyConnection nil, prefer", prefer, "it removed VerifyConnection", func(cfg *tls.Config) { cfg.VerifyConnection = nil }},
		{"ServerName", verifyFull, `it changed ServerName to "db.example": under verify-full the server certificate is checked against the host "localhost"`,
			func(cfg *tls.Config) { cfg.ServerName = "db.example" }},
		{"MinVersion", verifyFull, "it lowered MinVersion to TLS 1.0, below the connector's TLS 1.2 (ssl_min_protocol_version)",
			func(cfg *tls.Config) { cfg.MinVersion = tls.VersionTLS10 }},
		{"InsecureSkipVerify", verifyFull, "it turned InsecureSkipVerify off", func(cfg *tls.Config) { cfg.InsecureSkipVerify = false }},
		{"NextProtos", verifyFull, `it removed ALPN "postgresql" from NextProtos`, func(cfg *tls.Config) { cfg.NextProtos = nil }},
		{"ServerName, prefer", prefer, "", func(cfg *tls.Config) { cfg.ServerName = "db.example" }},
		{"MinVersion up, ServerName the host", verifyFull, "", func(cfg *tls.Config) {
			cfg.MinVersion, cfg.ServerName = tls.VersionTLS13, "LOCALHOST"
		}},
	} {
		c := newConnector(t, tc.dsn, pgconnector.WithTLSConfigFunc(func(_ context.Context, _ string, cfg *tls.Config) error {
			tc.change(cfg)
			return nil
		}))
		mark := srv.LogMark()
		dc, err := c.Connect(context.Background())
		if tc.want == "" {
			if err != nil {
				t.Errorf("%s: %v, want a connection", tc.name, err)
			} else {
				dc.Close()
			}
			continue
		}
		var abort *negotiation.AbortError
		if err == nil || !errors.As(err, &abort) || !strings.Contains(err.Error(), `WithTLSConfigFunc: refused for host "localhost"`) ||
			!strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: %v, want an error naming WithTLSConfigFunc and %q", tc.name, err, tc.want)
		}
		if n, _ := srv.ConnectionsSince(mark); n != 0 {
			t.Errorf("%s: the server got %d connections", tc.name, n)
		}
	}
}

// An error of the function fails the connect, naming it, and no other host is tried. A
// VerifyConnection of its own adds a check: the connector's runs first (a wrong root file still
// fails), and its error refuses the server.
func TestTLSConfigFuncErrorAndCheck(t *testing.T) {
	plain, srv := servers(t)
	boom := errors.New("certificate store unavailable")
	dsn := fmt.Sprintf("host=127.0.0.1,127.0.0.1 port=%d,%d user=app password=%s dbname=app sslmode=require", srv.Port, plain.Port, srv.Password)
	c := newConnector(t, dsn, pgconnector.WithTLSConfigFunc(func(context.Context, string, *tls.Config) error { return boom }))
	mark := plain.LogMark()
	_, err := c.Connect(context.Background())
	if err == nil || !errors.Is(err, boom) || !strings.Contains(err.Error(), "WithTLSConfigFunc: certificate store unavailable") {
		t.Errorf("failing function: %v, want an error naming WithTLSConfigFunc that wraps its error", err)
	}
	if n, _ := plain.ConnectionsSince(mark); n != 0 {
		t.Errorf("the second host got %d connections", n)
	}

	var checked atomic.Int32
	pinned := errors.New("not the pinned key")
	check := func(pass bool) pgconnector.TLSConfigFunc {
		return func(_ context.Context, _ string, cfg *tls.Config) error {
			cfg.VerifyConnection = func(tls.ConnectionState) error {
				checked.Add(1)
				if !pass {
					return pinned
				}
				return nil
			}
			return nil
		}
	}
	good := srv.DSN("sslmode=verify-full", "sslrootcert="+srv.CAFile)
	wrongRoots := filepath.Join(t.TempDir(), "other.crt")
	if err := os.WriteFile(wrongRoots, newClientCA(t).pem, 0o600); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name, dsn string
		pass      bool
		want      string // "": connects
		checks    int32
	}{
		{"passes", good, true, "", 1},
		{"refuses", good, false, "WithTLSConfigFunc's VerifyConnection: not the pinned key", 1},
		{"wrong roots", srv.DSN("sslmode=verify-full", "sslrootcert="+wrongRoots), true, "certificate verify failed", 0},
	} {
		checked.Store(0)
		dc, err := newConnector(t, tc.dsn, pgconnector.WithTLSConfigFunc(check(tc.pass))).Connect(context.Background())
		switch {
		case tc.want == "" && err != nil:
			t.Errorf("%s: %v", tc.name, err)
		case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)):
			t.Errorf("%s: %v, want %q", tc.name, err, tc.want)
		}
		if err == nil {
			dc.Close()
		}
		if n := checked.Load(); n != tc.checks {
			t.Errorf("%s: the function's check ran %d times, want %d", tc.name, n, tc.checks)
		}
		if tc.name == "refuses" && !errors.Is(err, pinned) {
			t.Errorf("%s: %v does not wrap the check's error", tc.name, err)
		}
	}
}

// A client certificate that WithTLSConfigFunc puts in Certificates is the one sent, in place of
// the files of sslcert and sslkey (whose GetClientCertificate crypto/tls would otherwise prefer),
// and those files are then not read: a key file that libpq would refuse (group-readable) does not
// fail the connect.
func TestTLSConfigFuncCertificatesWinOverFiles(t *testing.T) {
	ca := newClientCA(t)
	srv := clientCertServer(t, ca)
	fromFiles, fromFunc := ca.issue(t, srv.User), ca.issue(t, srv.User)
	dir := t.TempDir()
	certFile, keyFile := filepath.Join(dir, "client.crt"), filepath.Join(dir, "client.key")
	if err := os.WriteFile(certFile, fromFiles.certPEM, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(keyFile, fromFiles.keyPEM, 0o644); err != nil { // refused by libpq's rule
		t.Fatal(err)
	}
	dsn := srv.DSN("sslmode=require", "sslcert="+certFile, "sslkey="+keyFile)
	c := newConnector(t, dsn, pgconnector.WithTLSConfigFunc(func(_ context.Context, _ string, cfg *tls.Config) error {
		cfg.Certificates = []tls.Certificate{fromFunc.tls}
		return nil
	}))
	db := sql.OpenDB(c)
	defer db.Close()
	if got, err := sqlSerial(db); err != nil || got != fromFunc.serial {
		t.Fatalf("serial %q (%v), want the function's %s (the files': %s)", got, err, fromFunc.serial, fromFiles.serial)
	}
}
