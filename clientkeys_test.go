package pgconnector_test

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"database/sql"
	"encoding/pem"
	"errors"
	"math/big"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/youmark/pkcs8"

	"github.com/pgconnector/pgconnector/internal/harness"
)

// The client key files of PostgreSQL's SSL suite (src/test/ssl/t/001_ssltests.pl: PEM, DER,
// encrypted with the right and a wrong sslpassword, readable by others) against a server that
// wants the certificate (clientcert=verify-full), with the connector and with psql on libpq 18
// beside it: the same outcome each time, the refusals with libpq's reason and before anything
// is sent (the server sees no certificate). Under root, a key owned by another user with mode
// 0640 is refused too, while root's own 0640 is taken, as libpq's rule has it.
func TestClientKeysBesidePsql(t *testing.T) {
	env18, err := harness.Libpq18Env()
	if err != nil {
		t.Fatal(err)
	}
	ca := newClientCA(t)
	srv := clientCertServer(t, ca)
	a := ca.issue(t, srv.User)
	const password = "dUmmyP^#+"
	dir := t.TempDir()
	write := func(name string, data []byte, mode os.FileMode) string {
		t.Helper()
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, data, 0o600); err != nil {
			t.Fatal(err)
		}
		if err := os.Chmod(p, mode); err != nil {
			t.Fatal(err)
		}
		return p
	}
	certFile := write("client.crt", a.certPEM, 0o644)
	block, _ := pem.Decode(a.keyPEM)
	enc, err := pkcs8.MarshalPrivateKey(a.tls.PrivateKey, []byte(password), nil)
	if err != nil {
		t.Fatal(err)
	}
	type keyCase struct {
		name, key, password string
		want                string // "" connects with the certificate; else both fail, the connector's error holding it
		libpq               string // what libpq's error holds
	}
	cases := []keyCase{
		{name: "PEM", key: write("client.key", a.keyPEM, 0o600)},
		{name: "DER", key: write("client-der.key", block.Bytes, 0o600)},
		{name: "encrypted PKCS#8 PEM", key: write("client-enc.key", pem.EncodeToMemory(&pem.Block{Type: "ENCRYPTED PRIVATE KEY", Bytes: enc}), 0o600), password: password},
		{name: "encrypted PKCS#8 DER", key: write("client-enc-der.key", enc, 0o600), password: password,
			want: "encrypted DER key", libpq: `could not load private key file "` + filepath.Join(dir, "client-enc-der.key") + `": no start line`},
		{name: "encrypted PKCS#8 PEM, wrong password", key: filepath.Join(dir, "client-enc.key"), password: "wrong",
			want: `could not load private key file "` + filepath.Join(dir, "client-enc.key") + `": bad decrypt`, libpq: "could not load private key file"},
		{name: "world-readable", key: write("client-wrongperms.key", a.keyPEM, 0o644),
			want:  `private key file "` + filepath.Join(dir, "client-wrongperms.key") + `" has group or world access`,
			libpq: `private key file "` + filepath.Join(dir, "client-wrongperms.key") + `" has group or world access`},
	}
	if os.Getuid() == 0 {
		own := write("client-root0640.key", a.keyPEM, 0o640)
		other := write("client-other0640.key", a.keyPEM, 0o640)
		if err := os.Chown(other, 65534, 65534); err != nil {
			t.Fatal(err)
		}
		cases = append(cases, keyCase{name: "root's, 0640", key: own},
			keyCase{name: "another user's, 0640", key: other, want: "has group or world access", libpq: "has group or world access"})
	}
	ctx := context.Background()
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			dsn := srv.DSN("sslmode=require", "sslcert="+certFile, "sslkey="+tc.key, "sslpassword='"+tc.password+"'")
			db := sql.OpenDB(newConnector(t, dsn))
			defer db.Close()
			got, err := sqlSerial(db)
			psql, psqlErr := harness.Psql(ctx, env18, dsn, serialQuery)
			if tc.want == "" {
				if err != nil || got != a.serial {
					t.Errorf("connector: serial %q (%v), want %s", got, err, a.serial)
				}
				if psqlErr != nil || psql != a.serial {
					t.Errorf("psql on libpq 18: serial %q (%v), want %s", psql, psqlErr, a.serial)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("connector: %v, want %q", err, tc.want)
			}
			if psqlErr == nil || !strings.Contains(psqlErr.Error(), tc.libpq) {
				t.Errorf("psql on libpq 18: %q, %v, want %q", psql, psqlErr, tc.libpq)
			}
			if err != nil && tc.password != "" && strings.Contains(err.Error(), tc.password) {
				t.Errorf("%q holds sslpassword", err)
			}
			t.Logf("connector: %v\npsql: %v", err, psqlErr)
		})
	}
}

// A certificate whose issuer the server's CertificateRequest does not list is sent all the same,
// as libpq sends it (001_ssltests.pl: "intermediate client certificate is missing" and the
// cases after it), and the server, which cannot verify it, refuses the handshake with "unknown
// ca". With a pg_hba line that does not ask for the certificate (trust, scram) the outcome tells
// the two apart: a client that keeps the certificate back connects.
func TestClientCertificateSentWhateverTheServerLists(t *testing.T) {
	env18, err := harness.Libpq18Env()
	if err != nil {
		t.Fatal(err)
	}
	ca, stranger := newClientCA(t), namedClientCA(t, "another client CA")
	srv := harness.StartT(t, harness.Options{TLS: true, Auth: "scram-sha-256"})
	if err := srv.SetClientCA(ca.pem); err != nil {
		t.Fatal(err)
	}
	if err := srv.SetHBA("hostssl all all 127.0.0.1/32 scram-sha-256"); err != nil {
		t.Fatal(err)
	}
	b := stranger.issue(t, srv.User)
	dir := t.TempDir()
	certFile, keyFile := filepath.Join(dir, "client.crt"), filepath.Join(dir, "client.key")
	if os.WriteFile(certFile, b.certPEM, 0o644) != nil || os.WriteFile(keyFile, b.keyPEM, 0o600) != nil {
		t.Fatal("writing the client certificate")
	}
	dsn := srv.DSN("sslmode=require", "sslcert="+certFile, "sslkey="+keyFile)
	db := sql.OpenDB(newConnector(t, dsn))
	defer db.Close()
	_, err = sqlSerial(db)
	_, psqlErr := harness.Psql(context.Background(), env18, dsn, serialQuery)
	if psqlErr == nil || !strings.Contains(psqlErr.Error(), "unknown ca") {
		t.Errorf("psql on libpq 18: %v, want the server's unknown ca", psqlErr)
	}
	if err == nil || !strings.Contains(err.Error(), "SSL error: tlsv1 alert unknown ca") {
		t.Errorf("connector: %v, want the server's unknown ca", err)
	}
	if errors.Is(err, context.DeadlineExceeded) {
		t.Error("timed out")
	}
	t.Logf("connector: %v\npsql: %v", err, psqlErr)
}

// namedClientCA is a throwaway client CA with the subject name cn: a server that lists another
// name's does not list it.
func namedClientCA(t *testing.T, cn string) *clientCA {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(time.Now().UnixNano()),
		Subject:      pkix.Name{CommonName: cn},
		NotBefore:    time.Now().Add(-time.Hour), NotAfter: time.Now().Add(24 * time.Hour),
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageCRLSign,
		BasicConstraintsValid: true, IsCA: true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatal(err)
	}
	return &clientCA{cert: cert, key: key, pem: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})}
}

// The files are read at each connection: a certificate and key replaced on disk are what the
// next connection sends, without a new connector, as libpq reads them for each connection.
func TestClientCertificateFilesRotated(t *testing.T) {
	ca := newClientCA(t)
	srv := clientCertServer(t, ca)
	a, b := ca.issue(t, srv.User), ca.issue(t, srv.User)
	dir := t.TempDir()
	certFile, keyFile := filepath.Join(dir, "client.crt"), filepath.Join(dir, "client.key")
	db := sql.OpenDB(newConnector(t, srv.DSN("sslmode=require", "sslcert="+certFile, "sslkey="+keyFile)))
	defer db.Close()
	db.SetMaxIdleConns(0)
	for i, c := range []*clientCert{a, b, a} {
		if os.WriteFile(certFile, c.certPEM, 0o644) != nil || os.WriteFile(keyFile, c.keyPEM, 0o600) != nil {
			t.Fatal("writing the client certificate")
		}
		if got, err := sqlSerial(db); err != nil || got != c.serial {
			t.Fatalf("connect %d: serial %q (%v), want %s", i, got, err, c.serial)
		}
	}
}
