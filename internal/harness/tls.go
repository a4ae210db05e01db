package harness

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"fmt"
	"math/big"
	"net"
	"os"
	"time"
)

// certSet is a throwaway CA and a server certificate it signed, all PEM, and
// what signing a CRL takes: the CA's certificate and key, the server
// certificate's serial number.
type certSet struct {
	caPEM, certPEM, keyPEM []byte

	caCert    *x509.Certificate
	caKey     *ecdsa.PrivateKey
	srvSerial *big.Int
}

// newCertSet generates a fresh ECDSA P-256 CA and a server certificate for
// the names clients use to reach a harness server: 127.0.0.1 and localhost.
func newCertSet() (*certSet, error) {
	now := time.Now()
	caKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, fmt.Errorf("harness: CA key: %w", err)
	}
	caTmpl := &x509.Certificate{
		SerialNumber: randomSerial(),
		Subject:      pkix.Name{CommonName: "pgconnector test CA", Organization: []string{"pgconnector harness"}},
		NotBefore:    now.Add(-time.Hour),
		NotAfter:     now.Add(7 * 24 * time.Hour),
		// CRLSign: OpenSSL refuses a CRL whose issuer has a key usage without it
		// (X509_V_ERR_KEYUSAGE_NO_CRL_SIGN). crypto/x509 gives a CA a subject
		// key identifier, which Go needs to sign a CRL and which OpenSSL
		// matches against the CRL's authority key identifier.
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageCRLSign,
		BasicConstraintsValid: true,
		IsCA:                  true,
		MaxPathLenZero:        true,
	}
	caDER, err := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, &caKey.PublicKey, caKey)
	if err != nil {
		return nil, fmt.Errorf("harness: CA certificate: %w", err)
	}
	caCert, err := x509.ParseCertificate(caDER)
	if err != nil {
		return nil, fmt.Errorf("harness: CA certificate: %w", err)
	}

	srvKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, fmt.Errorf("harness: server key: %w", err)
	}
	srvTmpl := &x509.Certificate{
		SerialNumber: randomSerial(),
		Subject:      pkix.Name{CommonName: "localhost", Organization: []string{"pgconnector harness"}},
		NotBefore:    now.Add(-time.Hour),
		NotAfter:     now.Add(7 * 24 * time.Hour),
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		DNSNames:     []string{"localhost"},
		IPAddresses:  []net.IP{net.IPv4(127, 0, 0, 1)},
	}
	srvDER, err := x509.CreateCertificate(rand.Reader, srvTmpl, caCert, &srvKey.PublicKey, caKey)
	if err != nil {
		return nil, fmt.Errorf("harness: server certificate: %w", err)
	}
	keyDER, err := x509.MarshalPKCS8PrivateKey(srvKey)
	if err != nil {
		return nil, fmt.Errorf("harness: server key: %w", err)
	}
	return &certSet{
		caPEM:     pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: caDER}),
		certPEM:   pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: srvDER}),
		keyPEM:    pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: keyDER}),
		caCert:    caCert,
		caKey:     caKey,
		srvSerial: srvTmpl.SerialNumber,
	}, nil
}

// crl returns a CRL (DER) signed by the CA, valid from thisUpdate to
// nextUpdate, listing the server certificate when revokeServer is true, with
// the extensions ext.
func (cs *certSet) crl(revokeServer bool, thisUpdate, nextUpdate time.Time, ext []pkix.Extension) ([]byte, error) {
	tmpl := &x509.RevocationList{
		Number:          randomSerial(),
		ThisUpdate:      thisUpdate,
		NextUpdate:      nextUpdate,
		ExtraExtensions: ext,
	}
	if revokeServer {
		tmpl.RevokedCertificateEntries = []x509.RevocationListEntry{{
			SerialNumber:   cs.srvSerial,
			RevocationTime: thisUpdate,
		}}
	}
	der, err := x509.CreateRevocationList(rand.Reader, tmpl, cs.caCert, cs.caKey)
	if err != nil {
		return nil, fmt.Errorf("harness: CRL: %w", err)
	}
	return der, nil
}

// errNoCA is the error of the CRL methods on a server without TLS.
var errNoCA = errors.New("harness: the server has no CA (start it with Options.TLS or call SetSSL(true))")

// CRL returns a certificate revocation list (DER) signed by the server's CA,
// valid from thisUpdate to nextUpdate, that revokes the server certificate
// when revokeServer is true and is empty otherwise. ext are added to the
// list's extensions (a deltaCRLIndicator, an issuingDistributionPoint, ...).
func (p *Postgres) CRL(revokeServer bool, thisUpdate, nextUpdate time.Time, ext ...pkix.Extension) ([]byte, error) {
	p.mu.Lock()
	cs := p.ca
	p.mu.Unlock()
	if cs == nil {
		return nil, errNoCA
	}
	return cs.crl(revokeServer, thisUpdate, nextUpdate, ext)
}

// WriteCRL writes a PEM certificate revocation list signed by the server's CA
// (valid from an hour ago for a day) to a new file in dir and returns its
// path. The list revokes the server certificate when revokeServer is true and
// is empty otherwise.
func (p *Postgres) WriteCRL(dir string, revokeServer bool) (path string, err error) {
	now := time.Now()
	der, err := p.CRL(revokeServer, now.Add(-time.Hour), now.Add(24*time.Hour))
	if err != nil {
		return "", err
	}
	f, err := os.CreateTemp(dir, "crl-*.pem")
	if err != nil {
		return "", fmt.Errorf("harness: %w", err)
	}
	_, err = f.Write(pem.EncodeToMemory(&pem.Block{Type: "X509 CRL", Bytes: der}))
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		os.Remove(f.Name())
		return "", fmt.Errorf("harness: %w", err)
	}
	return f.Name(), nil
}

func randomSerial() *big.Int {
	n, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 127))
	if err != nil {
		// crypto/rand does not fail on supported platforms.
		panic(err)
	}
	return n.Add(n, big.NewInt(1))
}
