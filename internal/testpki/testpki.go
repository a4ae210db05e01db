// Package testpki builds what TLS tests need: P-256 keys, a test CA (root -> intermediate ->
// leaf for localhost), certificates, certificate revocation lists, and the DER pieces of the
// X.509 extensions that scope CRLs: CRL distribution points, issuing distribution points and
// authority key identifiers (RFC 5280, 4.2.1.1, 4.2.1.13, 5.2.1, 5.2.4, 5.2.5).
//
// Only tests import it: it is a normal package so that the tests of several packages share one
// copy. Its functions fail the test (t.Fatal) when crypto/x509 refuses to build something; the
// DER builders, which only wrap bytes, never fail.
package testpki

import (
	"bytes"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/sha256"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/asn1"
	"encoding/pem"
	"math/big"
	"testing"
	"time"
)

// Object identifiers of certificate and CRL extensions (RFC 5280, 4.2.1.1, 4.2.1.13, 5.2.4,
// 5.2.5).
var (
	OIDAKID     = asn1.ObjectIdentifier{2, 5, 29, 35} // authorityKeyIdentifier
	OIDIDP      = asn1.ObjectIdentifier{2, 5, 29, 28} // issuingDistributionPoint
	OIDDeltaCRL = asn1.ObjectIdentifier{2, 5, 29, 27} // deltaCRLIndicator
	OIDCRLDP    = asn1.ObjectIdentifier{2, 5, 29, 31} // cRLDistributionPoints
)

// DPURI is the URI of the test leaves' CRL distribution points.
const DPURI = "http://crl.example/inter.crl"

// CA is a certificate and its key.
type CA struct {
	Cert *x509.Certificate
	Key  *ecdsa.PrivateKey
}

// PKI is a chain Root -> Inter -> Leaf: the leaf is a server certificate for the DNS name
// localhost.
type PKI struct {
	Root, Inter, Leaf CA
}

// NewKey is a new ECDSA P-256 key.
func NewKey(t testing.TB) *ecdsa.PrivateKey {
	t.Helper()
	k, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	return k
}

// Issue is the certificate of tmpl for key, signed by parent, or self-signed when parent is nil.
// It sets tmpl's serial number (the time in nanoseconds) and validity (an hour ago to a day
// from now).
func Issue(t testing.TB, tmpl *x509.Certificate, parent *CA, key *ecdsa.PrivateKey) CA {
	t.Helper()
	tmpl.SerialNumber = big.NewInt(time.Now().UnixNano())
	tmpl.NotBefore, tmpl.NotAfter = time.Now().Add(-time.Hour), time.Now().Add(24*time.Hour)
	pcert, pkey := tmpl, key
	if parent != nil {
		pcert, pkey = parent.Cert, parent.Key
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, pcert, &key.PublicKey, pkey)
	if err != nil {
		t.Fatal(err)
	}
	c, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatal(err)
	}
	return CA{Cert: c, Key: key}
}

// NewCA is a self-signed CA certificate (CN "Test Root", O "pgconnector", allowed to sign
// certificates and CRLs) with its key.
func NewCA(t testing.TB) CA {
	t.Helper()
	return Issue(t, &x509.Certificate{Subject: pkix.Name{CommonName: "Test Root", Organization: []string{"pgconnector"}},
		BasicConstraintsValid: true, IsCA: true, KeyUsage: x509.KeyUsageCertSign | x509.KeyUsageCRLSign}, nil, NewKey(t))
}

// New is a new PKI whose root and intermediate may sign certificates and CRLs.
func New(t testing.TB) *PKI {
	return NewRootUsage(t, x509.KeyUsageCertSign|x509.KeyUsageCRLSign)
}

// NewRootUsage is New with the root's key usage rootUsage.
func NewRootUsage(t testing.TB, rootUsage x509.KeyUsage) *PKI {
	t.Helper()
	p := &PKI{}
	p.Root = Issue(t, &x509.Certificate{
		Subject:  pkix.Name{CommonName: "Test Root", Organization: []string{"pgconnector"}},
		KeyUsage: rootUsage, BasicConstraintsValid: true, IsCA: true,
	}, nil, NewKey(t))
	p.Inter = Issue(t, &x509.Certificate{
		Subject:  pkix.Name{CommonName: "Test Intermediate", Organization: []string{"pgconnector"}},
		KeyUsage: x509.KeyUsageCertSign | x509.KeyUsageCRLSign, BasicConstraintsValid: true, IsCA: true,
	}, &p.Root, NewKey(t))
	p.Leaf = Issue(t, &x509.Certificate{
		Subject:     pkix.Name{CommonName: "localhost"},
		KeyUsage:    x509.KeyUsageDigitalSignature,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		DNSNames:    []string{"localhost"},
	}, &p.Inter, NewKey(t))
	return p
}

// NewLeafDP is New whose leaf has a cRLDistributionPoints extension of the distribution points
// dps (DP), none when dps is empty.
func NewLeafDP(t testing.TB, dps ...[]byte) *PKI {
	t.Helper()
	return WithLeafDP(t, New(t), dps...)
}

// WithLeafDP is a copy of p with a new leaf, issued by p's intermediate, with a
// cRLDistributionPoints extension of the distribution points dps (DP), none when dps is empty.
func WithLeafDP(t testing.TB, p *PKI, dps ...[]byte) *PKI {
	t.Helper()
	q := *p
	var ext []pkix.Extension
	if len(dps) > 0 {
		ext = []pkix.Extension{{Id: OIDCRLDP, Value: CRLDPs(dps...)}}
	}
	q.Leaf = Issue(t, &x509.Certificate{
		Subject:         pkix.Name{CommonName: "localhost"},
		KeyUsage:        x509.KeyUsageDigitalSignature,
		ExtKeyUsage:     []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		DNSNames:        []string{"localhost"},
		ExtraExtensions: ext,
	}, &p.Inter, NewKey(t))
	return &q
}

// PEMCert is the certificate c as a PEM block "CERTIFICATE".
func PEMCert(c *x509.Certificate) []byte {
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: c.Raw})
}

// PEMCRL is the DER CRL der as a PEM block "X509 CRL".
func PEMCRL(der []byte) []byte {
	return pem.EncodeToMemory(&pem.Block{Type: "X509 CRL", Bytes: der})
}

// CRLSpec describes a CRL for MakeCRL.
type CRLSpec struct {
	By         *CA // issuer
	Signer     *CA // signs instead of By (same name and key identifier, other key) when not nil
	Revoke     []*big.Int
	Reason     int // the reason code (RFC 5280, 5.3.1) of every entry
	This, Next time.Duration
	Ext        []pkix.Extension
	AKID       []byte // the authorityKeyIdentifier's value instead of crypto/x509's when not nil
}

// MakeCRL is the DER CRL of s: number the time in nanoseconds, thisUpdate and nextUpdate now
// plus This and Next (an hour ago and an hour from now when zero), one entry for each serial
// number of Revoke, revoked an hour ago.
func MakeCRL(t testing.TB, s CRLSpec) []byte {
	t.Helper()
	issuer, key := s.By.Cert, s.By.Key
	if s.Signer != nil {
		key = s.Signer.Key
	}
	if issuer.KeyUsage&x509.KeyUsageCRLSign == 0 {
		// crypto/x509 will not sign for such an issuer: give it a copy that may (same name,
		// same key identifier), as a CA that signs CRLs against its key usage would.
		c := *issuer
		c.KeyUsage |= x509.KeyUsageCRLSign
		issuer = &c
	}
	now := time.Now()
	if s.This == 0 {
		s.This = -time.Hour
	}
	if s.Next == 0 {
		s.Next = time.Hour
	}
	tmpl := &x509.RevocationList{
		Number: big.NewInt(now.UnixNano()), ThisUpdate: now.Add(s.This), NextUpdate: now.Add(s.Next),
		ExtraExtensions: s.Ext,
	}
	for _, sn := range s.Revoke {
		tmpl.RevokedCertificateEntries = append(tmpl.RevokedCertificateEntries,
			x509.RevocationListEntry{SerialNumber: sn, RevocationTime: now.Add(-time.Hour), ReasonCode: s.Reason})
	}
	der, err := x509.CreateRevocationList(rand.Reader, tmpl, issuer, key)
	if err != nil {
		t.Fatal(err)
	}
	if s.AKID != nil {
		der = ResignWithAKID(t, der, key, s.AKID)
	}
	return der
}

// ResignWithAKID is the CRL der (signed by key with ECDSA and SHA-256, as crypto/x509 signs with
// a P-256 key) with akid as its authorityKeyIdentifier's value, signed again.
func ResignWithAKID(t testing.TB, der []byte, key *ecdsa.PrivateKey, akid []byte) []byte {
	t.Helper()
	var certList struct {
		TBS       asn1.RawValue
		Algorithm pkix.AlgorithmIdentifier
		Signature asn1.BitString
	}
	var tbs struct {
		Version             int
		Signature           pkix.AlgorithmIdentifier
		Issuer              asn1.RawValue
		ThisUpdate          time.Time
		NextUpdate          time.Time        `asn1:"optional"`
		RevokedCertificates []asn1.RawValue  `asn1:"optional"`
		Extensions          []pkix.Extension `asn1:"tag:0,optional,explicit"`
	}
	if _, err := asn1.Unmarshal(der, &certList); err != nil {
		t.Fatal(err)
	}
	if _, err := asn1.Unmarshal(certList.TBS.FullBytes, &tbs); err != nil {
		t.Fatal(err)
	}
	for i, e := range tbs.Extensions {
		if e.Id.Equal(OIDAKID) {
			tbs.Extensions[i].Value = akid
		}
	}
	tbsDER, err := asn1.Marshal(tbs)
	if err != nil {
		t.Fatal(err)
	}
	digest := sha256.Sum256(tbsDER)
	sig, err := ecdsa.SignASN1(rand.Reader, key, digest[:])
	if err != nil {
		t.Fatal(err)
	}
	certList.TBS = asn1.RawValue{FullBytes: tbsDER}
	certList.Signature = asn1.BitString{Bytes: sig, BitLength: 8 * len(sig)}
	out, err := asn1.Marshal(certList)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := x509.ParseRevocationList(out); err != nil {
		t.Fatal(err)
	}
	return out
}

// AKID is an AuthorityKeyIdentifier (RFC 5280, 4.2.1.1) of the key identifier keyID, the
// directoryName issuer (DER Name) and the serial number, each when not nil.
func AKID(keyID, issuer []byte, serial *big.Int) []byte {
	var b []byte
	if keyID != nil {
		k, _ := asn1.Marshal(asn1.RawValue{Class: asn1.ClassContextSpecific, Tag: 0, Bytes: keyID})
		b = append(b, k...)
	}
	if issuer != nil {
		n, _ := asn1.Marshal(asn1.RawValue{Class: asn1.ClassContextSpecific, Tag: 1, IsCompound: true, Bytes: DirName(issuer)})
		b = append(b, n...)
	}
	if serial != nil {
		i, _ := asn1.Marshal(serial)
		var v asn1.RawValue
		_, _ = asn1.Unmarshal(i, &v)
		s, _ := asn1.Marshal(asn1.RawValue{Class: asn1.ClassContextSpecific, Tag: 2, Bytes: v.Bytes})
		b = append(b, s...)
	}
	seq, _ := asn1.Marshal(asn1.RawValue{Class: asn1.ClassUniversal, Tag: asn1.TagSequence, IsCompound: true, Bytes: b})
	return seq
}

// CRLDPs is a cRLDistributionPoints extension's value (RFC 5280, 4.2.1.13): the SEQUENCE of
// the DistributionPoints dps (DP).
func CRLDPs(dps ...[]byte) []byte {
	v, _ := asn1.Marshal(asn1.RawValue{Class: asn1.ClassUniversal, Tag: asn1.TagSequence, IsCompound: true, Bytes: bytes.Join(dps, nil)})
	return v
}

// DP is a DistributionPoint (RFC 5280, 4.2.1.13): name (DPFullName, DPRelative) when not nil,
// reasons (a BIT STRING's content: unused bits, then the bits) when not nil, cRLIssuer the
// general names crlIssuer when there are any.
func DP(name, reasons []byte, crlIssuer ...[]byte) []byte {
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

// DPFullName is a DistributionPointName's fullName of the general names gns.
func DPFullName(gns ...[]byte) []byte {
	full, _ := asn1.Marshal(asn1.RawValue{Class: asn1.ClassContextSpecific, Tag: 0, IsCompound: true, Bytes: bytes.Join(gns, nil)})
	return full
}

// DPRelative is a DistributionPointName's nameRelativeToCRLIssuer of the attributes.
func DPRelative(attrs ...pkix.AttributeTypeAndValue) []byte {
	set, _ := asn1.Marshal(pkix.RelativeDistinguishedNameSET(attrs))
	var v asn1.RawValue
	_, _ = asn1.Unmarshal(set, &v)
	rel, _ := asn1.Marshal(asn1.RawValue{Class: asn1.ClassContextSpecific, Tag: 1, IsCompound: true, Bytes: v.Bytes})
	return rel
}

// IDP is an IssuingDistributionPoint (RFC 5280, 5.2.5) of the DistributionPointName name
// (DPFullName, DPRelative), the other fields absent.
func IDP(name []byte) []byte {
	dp, _ := asn1.Marshal(asn1.RawValue{Class: asn1.ClassContextSpecific, Tag: 0, IsCompound: true, Bytes: name})
	seq, _ := asn1.Marshal(asn1.RawValue{Class: asn1.ClassUniversal, Tag: asn1.TagSequence, IsCompound: true, Bytes: dp})
	return seq
}

// DNSName is a GeneralName dNSName (RFC 5280, 4.2.1.6).
func DNSName(name string) []byte {
	gn, _ := asn1.Marshal(asn1.RawValue{Class: asn1.ClassContextSpecific, Tag: 2, Bytes: []byte(name)})
	return gn
}

// URIName is a GeneralName uniformResourceIdentifier (RFC 5280, 4.2.1.6).
func URIName(uri string) []byte {
	gn, _ := asn1.Marshal(asn1.RawValue{Class: asn1.ClassContextSpecific, Tag: 6, Bytes: []byte(uri)})
	return gn
}

// DirName is a GeneralName directoryName (RFC 5280, 4.2.1.6) of the DER Name name.
func DirName(name []byte) []byte {
	gn, _ := asn1.Marshal(asn1.RawValue{Class: asn1.ClassContextSpecific, Tag: 4, IsCompound: true, Bytes: name})
	return gn
}

// Junk is a server certificate list that chains to nothing, made by JunkChain.
type Junk struct {
	// Leaf is a server certificate for localhost, with its key, issued by "Junk A".
	Leaf CA
	// List is sent after the leaf: CA certificates alternating the subject "Junk A" issued by
	// "Junk B" and "Junk B" issued by "Junk A", all of one P-521 key, each with the
	// subjectKeyIdentifier of that key and an authorityKeyIdentifier naming the same
	// identifier (the leaf's too), all signed by another key. Every certificate's issuer name
	// and key identifier therefore match half of the list, and no signature verifies: a chain
	// builder that checks each candidate's signature checks about len(List)/2 at each step.
	List []*x509.Certificate
	// Anchor is a self-signed "Junk B" of a key of its own with the list's subjectKeyIdentifier:
	// a root file that holds it completes the chain leaf, List[0], Anchor, whose first
	// signature (Anchor's on List[0]) fails.
	Anchor *x509.Certificate
}

// JunkChain is a Junk of n certificates after the leaf.
func JunkChain(t testing.TB, n int) *Junk {
	t.Helper()
	// P-521: the dearest signature check of crypto/x509 (about 2.6 ms), as a hostile server would
	// choose.
	junkKey, err := ecdsa.GenerateKey(elliptic.P521(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	signer := NewKey(t)
	spki, err := x509.MarshalPKIXPublicKey(&junkKey.PublicKey)
	if err != nil {
		t.Fatal(err)
	}
	sum := sha256.Sum256(spki)
	skid := sum[:20]
	names := [2]pkix.Name{{CommonName: "Junk A"}, {CommonName: "Junk B"}}
	// The parent templates carry no public key: crypto/x509 then signs with signer, whose
	// key is nobody's.
	parent := func(name pkix.Name) *CA {
		return &CA{Cert: &x509.Certificate{Subject: name, SubjectKeyId: skid}, Key: signer}
	}
	j := &Junk{}
	for i := range n {
		c := Issue(t, &x509.Certificate{
			Subject: names[i%2], SubjectKeyId: skid,
			KeyUsage: x509.KeyUsageCertSign, BasicConstraintsValid: true, IsCA: true,
		}, parent(names[(i+1)%2]), junkKey)
		j.List = append(j.List, c.Cert)
	}
	j.Leaf = Issue(t, &x509.Certificate{
		Subject:     pkix.Name{CommonName: "localhost"},
		KeyUsage:    x509.KeyUsageDigitalSignature,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		DNSNames:    []string{"localhost"},
	}, parent(names[0]), NewKey(t))
	j.Anchor = Issue(t, &x509.Certificate{
		Subject: names[1], SubjectKeyId: skid,
		KeyUsage: x509.KeyUsageCertSign, BasicConstraintsValid: true, IsCA: true,
	}, nil, NewKey(t)).Cert
	return j
}
