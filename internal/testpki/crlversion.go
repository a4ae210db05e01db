package testpki

import (
	"crypto/ecdsa"
	"crypto/rand"
	"crypto/sha256"
	"crypto/x509/pkix"
	"encoding/asn1"
	"math/big"
	"testing"
	"time"
)

// NoVersion is the version of MakeCRLVersion for a CRL without a version field: a version 1
// CRL (RFC 5280, 5.1.2.1), as "openssl ca -gencrl" writes one when it adds no extension
// (crl_extensions unset, no entry with a reason).
const NoVersion = -1

// oidECDSAWithSHA256 is the signature algorithm ecdsa-with-SHA256 (RFC 5758, 3.2).
var oidECDSAWithSHA256 = asn1.ObjectIdentifier{1, 2, 840, 10045, 4, 3, 2}

// MakeCRLv1 is the DER version 1 CRL of s: MakeCRLVersion with NoVersion.
func MakeCRLv1(t testing.TB, s CRLSpec) []byte {
	t.Helper()
	return MakeCRLVersion(t, s, NoVersion)
}

// MakeCRLVersion is the DER CRL of s (times and entries as MakeCRL makes them) with the version
// field version (0 for v1, 1 for v2; NoVersion leaves it out), built without crypto/x509, which
// writes version 2 CRLs only. The CRL has the extensions s.Ext and no other (no CRL number, no
// authorityKeyIdentifier: s.AKID is ignored); an entry has a reasonCode only when s.Reason is
// not 0. It is signed by s.By's key (s.Signer's when not nil) with ECDSA and SHA-256.
func MakeCRLVersion(t testing.TB, s CRLSpec, version int) []byte {
	t.Helper()
	key := s.By.Key
	if s.Signer != nil {
		key = s.Signer.Key
	}
	now := time.Now().UTC()
	if s.This == 0 {
		s.This = -time.Hour
	}
	if s.Next == 0 {
		s.Next = time.Hour
	}
	type entry struct {
		Serial     *big.Int
		Revoked    time.Time
		Extensions []pkix.Extension `asn1:"optional"`
	}
	var entries []entry
	for _, sn := range s.Revoke {
		e := entry{Serial: sn, Revoked: now.Add(-time.Hour)}
		if s.Reason != 0 {
			v, err := asn1.Marshal(asn1.Enumerated(s.Reason))
			if err != nil {
				t.Fatal(err)
			}
			e.Extensions = []pkix.Extension{{Id: asn1.ObjectIdentifier{2, 5, 29, 21}, Value: v}}
		}
		entries = append(entries, e)
	}
	alg := pkix.AlgorithmIdentifier{Algorithm: oidECDSAWithSHA256}
	var fields []any
	if version != NoVersion {
		fields = append(fields, version)
	}
	fields = append(fields, alg, asn1.RawValue{FullBytes: s.By.Cert.RawSubject}, now.Add(s.This), now.Add(s.Next))
	if len(entries) > 0 {
		fields = append(fields, entries)
	}
	var tbs []byte
	for _, f := range fields {
		b, err := asn1.Marshal(f)
		if err != nil {
			t.Fatal(err)
		}
		tbs = append(tbs, b...)
	}
	if len(s.Ext) > 0 {
		exts, err := asn1.Marshal(s.Ext)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := asn1.Marshal(asn1.RawValue{Class: asn1.ClassContextSpecific, Tag: 0, IsCompound: true, Bytes: exts})
		tbs = append(tbs, b...)
	}
	tbs, _ = asn1.Marshal(asn1.RawValue{Class: asn1.ClassUniversal, Tag: asn1.TagSequence, IsCompound: true, Bytes: tbs})
	return signCRL(t, tbs, alg, key)
}

// signCRL is the CertificateList (RFC 5280, 5.1) of the DER TBSCertList tbs signed by key.
func signCRL(t testing.TB, tbs []byte, alg pkix.AlgorithmIdentifier, key *ecdsa.PrivateKey) []byte {
	t.Helper()
	digest := sha256.Sum256(tbs)
	sig, err := ecdsa.SignASN1(rand.Reader, key, digest[:])
	if err != nil {
		t.Fatal(err)
	}
	out, err := asn1.Marshal(struct {
		TBS       asn1.RawValue
		Algorithm pkix.AlgorithmIdentifier
		Signature asn1.BitString
	}{asn1.RawValue{FullBytes: tbs}, alg, asn1.BitString{Bytes: sig, BitLength: 8 * len(sig)}})
	if err != nil {
		t.Fatal(err)
	}
	return out
}
