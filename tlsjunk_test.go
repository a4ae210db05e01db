package pgconnector

import (
	"context"
	"crypto/tls"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/pgconnector/pgconnector/internal/testpki"
)

// A server that sends, after its certificate, 400 junk certificates (each matching half of the
// list by issuer name and key identifier, no signature verifying, P-521 keys: the dearest to
// check) is refused under sslmode=verify-full connect_timeout=2 with "certificate verify failed"
// within connect_timeout, although the chain is checked inside the TLS handshake, where no
// deadline reaches: naming OpenSSL's reason checks no signature. Before, each step of the chain
// built to name it checked the signature of every candidate: 45 s of CPU, past any timeout.
// psql (libpq 18) beside refuses the same server.
func TestJunkChainRefusedWithinConnectTimeout(t *testing.T) {
	clearPGSSLEnv(t)
	t.Setenv("HOME", t.TempDir())
	junk := testpki.JunkChain(t, 400)
	cert := tls.Certificate{Certificate: [][]byte{junk.Leaf.Cert.Raw}, PrivateKey: junk.Leaf.Key, Leaf: junk.Leaf.Cert}
	size := 0
	for _, c := range junk.List {
		cert.Certificate = append(cert.Certificate, c.Raw)
		size += len(c.Raw)
	}
	rootFile := filepath.Join(t.TempDir(), "root.crt")
	if err := os.WriteFile(rootFile, testpki.PEMCert(testpki.NewCA(t).Cert), 0o600); err != nil {
		t.Fatal(err)
	}
	srv := startTLSProbe(t, cert, "")
	dsn := "host=localhost hostaddr=127.0.0.1 port=" + strconv.Itoa(srv.port()) +
		" user=app dbname=app gssencmode=disable sslmode=verify-full connect_timeout=2 sslrootcert=" + rootFile
	const connectTimeout = 2 * time.Second

	c, err := New(dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	start := time.Now()
	outcome, msg := connectOutcome(ctx, c)
	elapsed := time.Since(start)
	t.Logf("pgconnector: %d junk certificates (%d bytes): %s after %v: %s", len(junk.List), size, outcome, elapsed, msg)
	if outcome != "error" || !strings.Contains(msg, "certificate verify failed") {
		t.Errorf("pgconnector: %s %q, want an error saying certificate verify failed", outcome, msg)
	}
	if elapsed >= connectTimeout {
		t.Errorf("pgconnector: refused after %v, want within connect_timeout (%v)", elapsed, connectTimeout)
	}

	pctx, pcancel := context.WithTimeout(context.Background(), time.Minute)
	defer pcancel()
	start = time.Now()
	outcome, msg = psqlTLSOutcome(pctx, nil, dsn)
	t.Logf("psql: %s after %v: %s", outcome, time.Since(start), msg)
	if outcome != "error" {
		t.Errorf("psql: %s, want an error", outcome)
	}
}
