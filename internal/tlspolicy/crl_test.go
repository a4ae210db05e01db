package tlspolicy

import (
	"bytes"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/asn1"
	"encoding/binary"
	"encoding/pem"
	"math/big"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
	"unicode/utf16"
)

// testCA is a certificate and its key.
type testCA struct {
	cert *x509.Certificate
	key  *ecdsa.PrivateKey
}

func newTestKey(t *testing.T) *ecdsa.PrivateKey {
	t.Helper()
	k, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	return k
}

func issue(t *testing.T, tmpl *x509.Certificate, parent *testCA, key *ecdsa.PrivateKey) testCA {
	t.Helper()
	tmpl.SerialNumber = big.NewInt(time.Now().UnixNano())
	tmpl.NotBefore, tmpl.NotAfter = time.Now().Add(-time.Hour), time.Now().Add(24*time.Hour)
	pcert, pkey := tmpl, key
	if parent != nil {
		pcert, pkey = parent.cert, parent.key
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, pcert, &key.PublicKey, pkey)
	if err != nil {
		t.Fatal(err)
	}
	c, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatal(err)
	}
	return testCA{cert: c, key: key}
}

func pemCert(c *x509.Certificate) []byte {
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: c.Raw})
}

// dpURI is the URI of the test leaves' CRL distribution points.
const dpURI = "http://crl.example/inter.crl"

// dpDER is a DistributionPoint (RFC 5280, 4.2.1.13): name (dpFullName, dpRelative) when not
// nil, reasons (a BIT STRING's content: unused bits, then the bits) when not nil, cRLIssuer the
// general names crlIssuer when there are any.
func dpDER(name, reasons []byte, crlIssuer ...[]byte) []byte {
	var b []byte
	if name != nil {
		n, _ := asn1.Marshal(asn1.RawValue{Class: asn1.ClassContextSpecific, Tag: 0, IsCompound: true, Bytes: name})
		b = append(b, n...)
	}
	if reasons != nil {
		r, _ := asn1.Marshal(asn1.RawValue{Class: asn1.ClassContextSpecific, Tag: 1, Bytes: reasons})
		b = append(b, r...)
	}
	if len(crlIssuer) > 0 {
		c, _ := asn1.Marshal(asn1.RawValue{Class: asn1.ClassContextSpecific, Tag: 2, IsCompound: true, Bytes: bytes.Join(crlIssuer, nil)})
		b = append(b, c...)
	}
	dp, _ := asn1.Marshal(asn1.RawValue{Class: asn1.ClassUniversal, Tag: asn1.TagSequence, IsCompound: true, Bytes: b})
	return dp
}

// dpFullName is a DistributionPointName's fullName of the general names gns.
func dpFullName(gns ...[]byte) []byte {
	full, _ := asn1.Marshal(asn1.RawValue{Class: asn1.ClassContextSpecific, Tag: 0, IsCompound: true, Bytes: bytes.Join(gns, nil)})
	return full
}

// dpRelative is a DistributionPointName's nameRelativeToCRLIssuer of the attributes.
func dpRelative(attrs ...pkix.AttributeTypeAndValue) []byte {
	set, _ := asn1.Marshal(pkix.RelativeDistinguishedNameSET(attrs))
	var v asn1.RawValue
	_, _ = asn1.Unmarshal(set, &v)
	rel, _ := asn1.Marshal(asn1.RawValue{Class: asn1.ClassContextSpecific, Tag: 1, IsCompound: true, Bytes: v.Bytes})
	return rel
}

// idpOf is an issuingDistributionPoint of the DistributionPointName name (dpFullName, dpRelative).
func idpOf(name []byte) []byte {
	dp, _ := asn1.Marshal(asn1.RawValue{Class: asn1.ClassContextSpecific, Tag: 0, IsCompound: true, Bytes: name})
	seq, _ := asn1.Marshal(asn1.RawValue{Class: asn1.ClassUniversal, Tag: asn1.TagSequence, IsCompound: true, Bytes: dp})
	return seq
}

// dnsName is a GeneralName dNSName.
func dnsName(name string) []byte {
	gn, _ := asn1.Marshal(asn1.RawValue{Class: asn1.ClassContextSpecific, Tag: 2, Bytes: []byte(name)})
	return gn
}

// uriName is a GeneralName uniformResourceIdentifier.
func uriName(uri string) []byte {
	gn, _ := asn1.Marshal(asn1.RawValue{Class: asn1.ClassContextSpecific, Tag: 6, Bytes: []byte(uri)})
	return gn
}

// dirName is a GeneralName directoryName of the DER Name name.
func dirName(name []byte) []byte {
	gn, _ := asn1.Marshal(asn1.RawValue{Class: asn1.ClassContextSpecific, Tag: 4, IsCompound: true, Bytes: name})
	return gn
}

// NameHash is what "openssl x509 -hash" prints, the name under which
// "openssl rehash" files a CRL.
func TestOpenSSLNameHash(t *testing.T) {
	if _, err := exec.LookPath("openssl"); err != nil {
		t.Fatal("openssl is not in $PATH: scripts/install-deps.sh installs it")
	}
	oidCN, oidO, oidEmail, oidSerial := asn1.ObjectIdentifier{2, 5, 4, 3}, asn1.ObjectIdentifier{2, 5, 4, 10},
		asn1.ObjectIdentifier{1, 2, 840, 113549, 1, 9, 1}, asn1.ObjectIdentifier{2, 5, 4, 5}
	str := func(tag int, b []byte) asn1.RawValue {
		return asn1.RawValue{Class: asn1.ClassUniversal, Tag: tag, Bytes: b}
	}
	bmp := func(s string) []byte {
		var b []byte
		for _, u := range utf16.Encode([]rune(s)) {
			b = binary.BigEndian.AppendUint16(b, u)
		}
		return b
	}
	atv := func(oid asn1.ObjectIdentifier, v asn1.RawValue) pkix.AttributeTypeAndValue {
		return pkix.AttributeTypeAndValue{Type: oid, Value: v}
	}
	for _, tt := range []struct {
		name string
		rdns pkix.RDNSequence
	}{
		{"empty", pkix.RDNSequence{}},
		{"printable", pkix.RDNSequence{{atv(oidCN, str(asn1.TagPrintableString, []byte("pgconnector test CA")))}}},
		{"case and spaces", pkix.RDNSequence{{atv(oidO, str(asn1.TagUTF8String, []byte("  Pg  CONNECTOR\t\tHarness ")))}, {atv(oidCN, str(asn1.TagPrintableString, []byte("Test CA")))}}},
		{"non-ASCII kept", pkix.RDNSequence{{atv(oidCN, str(asn1.TagUTF8String, []byte("ÉCOLE Été")))}}},
		{"BMPString", pkix.RDNSequence{{atv(oidCN, str(asn1.TagBMPString, bmp("Zürich CA")))}}},
		{"T61String", pkix.RDNSequence{{atv(oidCN, str(asn1.TagT61String, []byte("Caf\xe9 CA")))}}},
		{"IA5String email", pkix.RDNSequence{{atv(oidEmail, str(asn1.TagIA5String, []byte("CA@Example.ORG")))}}},
		{"NumericString kept", pkix.RDNSequence{{atv(oidSerial, str(18, []byte("0042 17")))}}},
		{"multi-valued RDN", pkix.RDNSequence{{atv(oidO, str(asn1.TagUTF8String, []byte("Zeta"))),
			atv(oidCN, str(asn1.TagPrintableString, []byte("Alpha")))}}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			raw, err := asn1.Marshal(tt.rdns)
			if err != nil {
				t.Fatal(err)
			}
			key := newTestKey(t)
			c := issue(t, &x509.Certificate{RawSubject: raw, BasicConstraintsValid: true, IsCA: true,
				KeyUsage: x509.KeyUsageCertSign}, nil, key)
			path := filepath.Join(t.TempDir(), "c.pem")
			if err := os.WriteFile(path, pemCert(c.cert), 0o644); err != nil {
				t.Fatal(err)
			}
			out, err := exec.Command("openssl", "x509", "-noout", "-hash", "-in", path).CombinedOutput()
			if err != nil {
				t.Fatalf("openssl: %v: %s", err, out)
			}
			got, err := NameHash(c.cert.RawSubject)
			if err != nil {
				t.Fatal(err)
			}
			if want := strings.TrimSpace(string(out)); got != want {
				t.Errorf("hash %s, openssl %s", got, want)
			}
		})
	}
}

// The distribution points of a server certificate (cRLDistributionPoints) and of a CRL
// (issuingDistributionPoint), and a CRL's authorityKeyIdentifier, are untrusted input: reading
// and comparing them never panics, and a CRL without an IDP is in scope for any distribution
// points (crl_crldp_check).
func FuzzCRLDistributionPoints(f *testing.F) {
	issuer, _ := asn1.Marshal(pkix.Name{CommonName: "Test Intermediate", Organization: []string{"pgconnector"}}.ToRDNSequence())
	uri := dpFullName(uriName(dpURI))
	rel := dpRelative(pkix.AttributeTypeAndValue{Type: asn1.ObjectIdentifier{2, 5, 4, 3}, Value: "CRL 1"})
	seqOf := func(dps ...[]byte) []byte {
		v, _ := asn1.Marshal(asn1.RawValue{Class: asn1.ClassUniversal, Tag: asn1.TagSequence, IsCompound: true, Bytes: bytes.Join(dps, nil)})
		return v
	}
	f.Add(seqOf(dpDER(uri, nil)), idpOf(uri))
	f.Add(seqOf(dpDER(uri, []byte{6, 0x40}, dirName(issuer))), idpOf(rel))
	f.Add(seqOf(dpDER(dpFullName(dirName(issuer)), nil), dpDER(nil, nil, dirName(issuer))), []byte{0x30, 3, 0x81, 1, 0xff})
	f.Add(seqOf(dpDER(rel, []byte{7, 0x7f, 0x80})), idpOf(dpFullName(dnsName("x"))))
	f.Add([]byte{0x30, 0}, []byte{0x30, 0})
	canon, err := canonicalName(issuer)
	if err != nil {
		f.Fatal(err)
	}
	f.Fuzz(func(t *testing.T, dpExt, idpExt []byte) {
		if len(dpExt) > 1<<12 || len(idpExt) > 1<<12 {
			return
		}
		cert := &x509.Certificate{RawIssuer: issuer, Extensions: []pkix.Extension{{Id: oidCRLDP, Value: dpExt}}}
		dps, err := certDistPoints(cert)
		if err != nil {
			return
		}
		idp, _ := parseIDP(idpExt, issuer)
		if akid, ok := parseAKID(idpExt); ok { // the same bytes as an authorityKeyIdentifier
			akid.matches(&x509.Certificate{RawIssuer: issuer, SerialNumber: big.NewInt(1), SubjectKeyId: []byte{1}})
		}
		inScope(&crl{issuer: canon, idp: idp}, cert, dps)
		if r, ok := inScope(&crl{issuer: canon}, cert, dps); !ok || r&^allReasons != 0 {
			t.Fatalf("no IDP: in scope %v for reasons %#x, want in scope for reasons among %#x", ok, r, allReasons)
		}
	})
}
