package tlspolicy

import (
	"bytes"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/asn1"
	"encoding/binary"
	"math/big"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
	"unicode/utf16"

	"github.com/pgconnector/pgconnector/internal/testpki"
)

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
			key := testpki.NewKey(t)
			c := testpki.Issue(t, &x509.Certificate{RawSubject: raw, BasicConstraintsValid: true, IsCA: true,
				KeyUsage: x509.KeyUsageCertSign}, nil, key)
			path := filepath.Join(t.TempDir(), "c.pem")
			if err := os.WriteFile(path, testpki.PEMCert(c.Cert), 0o644); err != nil {
				t.Fatal(err)
			}
			out, err := exec.Command("openssl", "x509", "-noout", "-hash", "-in", path).CombinedOutput()
			if err != nil {
				t.Fatalf("openssl: %v: %s", err, out)
			}
			got, err := NameHash(c.Cert.RawSubject)
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
	uri := testpki.DPFullName(testpki.URIName(testpki.DPURI))
	rel := testpki.DPRelative(pkix.AttributeTypeAndValue{Type: asn1.ObjectIdentifier{2, 5, 4, 3}, Value: "CRL 1"})
	f.Add(testpki.CRLDPs(testpki.DP(uri, nil)), testpki.IDP(uri))
	f.Add(testpki.CRLDPs(testpki.DP(uri, []byte{6, 0x40}, testpki.DirName(issuer))), testpki.IDP(rel))
	f.Add(testpki.CRLDPs(testpki.DP(testpki.DPFullName(testpki.DirName(issuer)), nil), testpki.DP(nil, nil, testpki.DirName(issuer))), []byte{0x30, 3, 0x81, 1, 0xff})
	f.Add(testpki.CRLDPs(testpki.DP(rel, []byte{7, 0x7f, 0x80})), testpki.IDP(testpki.DPFullName(testpki.DNSName("x"))))
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

// A version 1 CRL (no version field) reads as the same CRL in version 2 would: issuer, times,
// entries, and its own encoding, which its signature covers; its signature is checked against
// the issuer's key.
func TestParseRevocationListV1(t *testing.T) {
	p := testpki.New(t)
	sn := p.Leaf.Cert.SerialNumber
	for _, version := range []int{testpki.NoVersion, 0, 1} {
		der := testpki.MakeCRLVersion(t, testpki.CRLSpec{By: &p.Inter, Revoke: []*big.Int{sn}}, version)
		rl, err := parseRevocationList(der)
		if err != nil {
			t.Fatalf("version %d: %v", version, err)
		}
		if !bytes.Equal(rl.Raw, der) || !bytes.Equal(rl.RawIssuer, p.Inter.Cert.RawSubject) ||
			len(rl.RevokedCertificateEntries) != 1 || rl.RevokedCertificateEntries[0].SerialNumber.Cmp(sn) != 0 ||
			rl.ThisUpdate.IsZero() || rl.NextUpdate.IsZero() {
			t.Errorf("version %d: read %+v", version, rl)
		}
		if err := p.Inter.Cert.CheckSignature(rl.SignatureAlgorithm, rl.RawTBSRevocationList, rl.Signature); err != nil {
			t.Errorf("version %d: signature: %v", version, err)
		}
		if err := p.Root.Cert.CheckSignature(rl.SignatureAlgorithm, rl.RawTBSRevocationList, rl.Signature); err == nil {
			t.Errorf("version %d: the root's key verifies the intermediate's CRL", version)
		}
		if version == testpki.NoVersion {
			if _, err := x509.ParseRevocationList(der); err == nil {
				t.Error("crypto/x509 reads a version 1 CRL now: parseRevocationList may go")
			}
		}
	}
}

// A CRL is untrusted input: parseCRL never panics, and what it reads keeps the CRL's own bytes.
func FuzzParseCRL(f *testing.F) {
	p := testpki.New(f)
	f.Add(testpki.MakeCRLv1(f, testpki.CRLSpec{By: &p.Inter, Revoke: []*big.Int{big.NewInt(7)}}))
	f.Add(testpki.MakeCRLVersion(f, testpki.CRLSpec{By: &p.Inter}, 0))
	f.Add(testpki.MakeCRL(f, testpki.CRLSpec{By: &p.Inter}))
	f.Add([]byte{0x30, 3, 0x30, 1, 0x02})
	f.Fuzz(func(t *testing.T, der []byte) {
		if len(der) > 1<<14 {
			return
		}
		c, err := parseCRL(der)
		if err != nil {
			return
		}
		if !bytes.HasPrefix(der, c.rl.Raw) || !bytes.Contains(c.rl.Raw, c.rl.RawTBSRevocationList) {
			t.Fatal("the CRL read does not keep its own encoding")
		}
	})
}

// Every certificate of the chain needs its issuer's CRL, the self-signed root's its own: with
// the root and the intermediate trusted (a root file holding both), the full chain passes and a
// chain that stops at the intermediate names the missing CRL issuer.
func TestCRLStoreChainEnds(t *testing.T) {
	p := testpki.New(t)
	var file []byte
	for _, by := range []*testpki.CA{&p.Inter, &p.Root} {
		file = append(file, testpki.PEMCRL(testpki.MakeCRLv1(t, testpki.CRLSpec{By: by}))...)
	}
	s, n, err := NewCRLStore(file, nil, nil)
	if err != nil || n != 2 {
		t.Fatalf("NewCRLStore: %d objects, %v", n, err)
	}
	now := time.Now()
	full := []*x509.Certificate{p.Leaf.Cert, p.Inter.Cert, p.Root.Cert}
	if err := s.Check([][]*x509.Certificate{full}, now); err != nil {
		t.Errorf("full chain: %v", err)
	}
	partial := [][]*x509.Certificate{full[:2]}
	if err := s.Check(partial, now); err == nil || !strings.Contains(err.Error(), "unable to get CRL issuer certificate (certificate at depth 1,") {
		t.Errorf("chain ending at the intermediate: %v", err)
	}
	if err := s.Check([][]*x509.Certificate{full[:2], full}, now); err != nil {
		t.Errorf("a partial chain and the full one: %v", err)
	}
	interOnly, _, err := NewCRLStore(testpki.PEMCRL(testpki.MakeCRLv1(t, testpki.CRLSpec{By: &p.Inter})), nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := interOnly.Check(partial, now); err == nil || !strings.Contains(err.Error(), "unable to get certificate CRL (certificate at depth 1,") {
		t.Errorf("chain ending at the intermediate, no CRL of the root's: %v", err)
	}
	revoked, _, err := NewCRLStore(append(testpki.PEMCRL(testpki.MakeCRLv1(t, testpki.CRLSpec{By: &p.Inter,
		Revoke: []*big.Int{p.Leaf.Cert.SerialNumber}})), testpki.PEMCRL(testpki.MakeCRLv1(t, testpki.CRLSpec{By: &p.Root}))...), nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, chain := range [][]*x509.Certificate{full, full[:2]} {
		if err := revoked.Check([][]*x509.Certificate{chain}, now); err == nil || !strings.Contains(err.Error(), "certificate revoked (certificate at depth 0,") {
			t.Errorf("revoked leaf, chain of %d: %v", len(chain), err)
		}
	}
}

// The CRL directories are read once per issuer in a check, however many chains name it: chains
// that fail for want of a CRL do not read the directory again for each chain.
func TestCRLStoreReadsDirectoryOncePerIssuer(t *testing.T) {
	p := testpki.New(t)
	reads := 0
	read := func(path string, limit int64) ([]byte, error) {
		reads++
		return ReadLocalFile(path, limit)
	}
	s, _, err := NewCRLStore(nil, []string{t.TempDir()}, read)
	if err != nil {
		t.Fatal(err)
	}
	full := []*x509.Certificate{p.Leaf.Cert, p.Inter.Cert, p.Root.Cert}
	err = s.Check([][]*x509.Certificate{full, full, full}, time.Now())
	if err == nil || !strings.Contains(err.Error(), "unable to get certificate CRL") {
		t.Errorf("no CRL: %v", err)
	}
	if reads != 1 {
		t.Errorf("three chains of one leaf issuer: %d reads of the directory, want 1", reads)
	}
}
