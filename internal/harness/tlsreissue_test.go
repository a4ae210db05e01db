package harness

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/asn1"
	"errors"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
)

// ReissueServerCert: the server presents the new certificate, with the extension, signed by the
// same CA, and CRL revokes it.
func TestReissueServerCert(t *testing.T) {
	t.Parallel()
	ext := pkix.Extension{Id: asn1.ObjectIdentifier{1, 3, 6, 1, 4, 1, 99999, 1}, Value: []byte{5, 0}}
	p := StartT(t, Options{})
	if err := p.ReissueServerCert(ext); !errors.Is(err, errNoCA) {
		t.Fatalf("ReissueServerCert without TLS: %v, want errNoCA", err)
	}
	if err := p.SetSSL(true); err != nil {
		t.Fatal(err)
	}
	// peer connects with TLS, verifying the chain against the CA, and returns the server's
	// certificate.
	peer := func() *x509.Certificate {
		t.Helper()
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		cfg, err := pgx.ParseConfig(p.DSN("sslmode=verify-full", "sslrootcert="+p.CAFile))
		if err != nil {
			t.Fatal(err)
		}
		var got *x509.Certificate
		cfg.TLSConfig.VerifyConnection = func(cs tls.ConnectionState) error {
			got = cs.PeerCertificates[0]
			return nil
		}
		c, err := pgx.ConnectConfig(ctx, cfg)
		if err != nil {
			t.Fatal(err)
		}
		c.Close(ctx)
		return got
	}
	before := peer()
	if err := p.ReissueServerCert(ext); err != nil {
		t.Fatal(err)
	}
	after := peer()
	if after.SerialNumber.Cmp(before.SerialNumber) == 0 {
		t.Fatal("the server still presents its old certificate")
	}
	found := false
	for _, e := range after.Extensions {
		found = found || e.Id.Equal(ext.Id)
	}
	if !found || after.Subject.String() != before.Subject.String() || len(after.DNSNames) == 0 {
		t.Errorf("new certificate: subject %v, names %v, extension %v", after.Subject, after.DNSNames, found)
	}
	der, err := p.CRL(true, time.Now().Add(-time.Hour), time.Now().Add(time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	crl, err := x509.ParseRevocationList(der)
	if err != nil {
		t.Fatal(err)
	}
	if len(crl.RevokedCertificateEntries) != 1 || crl.RevokedCertificateEntries[0].SerialNumber.Cmp(after.SerialNumber) != 0 {
		t.Errorf("CRL entries %+v, want the new serial %v", crl.RevokedCertificateEntries, after.SerialNumber)
	}
}
