package harness

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"path/filepath"
	"time"
)

// ReissueServerCert replaces the server certificate by a new one from the same
// CA, for the same names and with a new key and serial number, that carries
// the extensions ext too (a cRLDistributionPoints, say), and reloads the
// server, returning once new connections get it. CRL and WriteCRL then revoke
// the new certificate. The server must have TLS (Options.TLS or SetSSL(true)).
func (p *Postgres) ReissueServerCert(ext ...pkix.Extension) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	cs := p.ca
	if cs == nil {
		return errNoCA
	}
	blk, _ := pem.Decode(cs.certPEM)
	if blk == nil {
		return fmt.Errorf("harness: server certificate: not PEM")
	}
	tmpl, err := x509.ParseCertificate(blk.Bytes)
	if err != nil {
		return fmt.Errorf("harness: server certificate: %w", err)
	}
	tmpl.SerialNumber = randomSerial()
	tmpl.ExtraExtensions = ext
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return fmt.Errorf("harness: server key: %w", err)
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, cs.caCert, &key.PublicKey, cs.caKey)
	if err != nil {
		return fmt.Errorf("harness: server certificate: %w", err)
	}
	keyDER, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		return fmt.Errorf("harness: server key: %w", err)
	}
	next := *cs
	next.certPEM = pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})
	next.keyPEM = pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: keyDER})
	next.srvSerial = tmpl.SerialNumber
	acct := p.env.acct
	if err := acct.writeFile(filepath.Join(p.DataDir, "server.key"), next.keyPEM, 0o600); err != nil {
		return fmt.Errorf("harness: %w", err)
	}
	if err := acct.writeFile(filepath.Join(p.DataDir, "server.crt"), next.certPEM, 0o644); err != nil {
		return fmt.Errorf("harness: %w", err)
	}
	p.ca = &next
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	return p.reload(ctx)
}
