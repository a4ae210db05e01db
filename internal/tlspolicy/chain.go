package tlspolicy

import (
	"bytes"
	"crypto/x509"
	"errors"
	"fmt"
	"slices"
	"sync/atomic"
	"time"
)

// The chain of the server's certificate is verified as OpenSSL's X509_verify_cert verifies it
// with libpq's settings (fe-secure-openssl.c, initialize_SSL: SSL_CTX_load_verify_locations,
// SSL_VERIFY_PEER, no X509_V_FLAG_PARTIAL_CHAIN; OpenSSL 3's x509_vfy.c, build_chain and
// check_trust):
//   - every certificate of the root certificate file is in the store, but only a self-signed one
//     is a trust anchor: a chain must end at a self-signed certificate of the file. The file's
//     other certificates (an intermediate CA) may complete the chain, as the certificates the
//     server sends may; a file that holds only an intermediate CA verifies nothing;
//   - self-signed is OpenSSL's test (X509_self_signed without the signature check, the
//     EXFLAG_SS of v3_purp.c): the subject and issuer names are equal (canonical forms, as
//     X509_NAME_cmp compares them), the certificate's own authorityKeyIdentifier, if it has one,
//     matches itself (X509_check_akid), and its signature algorithm is one of its key's type. A
//     trust anchor's own signature is not checked, as OpenSSL does not check it without
//     X509_V_FLAG_CHECK_SS_SIGNATURE;
//   - with sslrootcert=system, and with a pool an application gave (WithTLSConfigFunc's
//     RootCAs), whose certificates cannot be listed, a chain that crypto/x509 ends at a
//     certificate of the pool that is not self-signed is refused;
//   - a server certificate whose key usage (when it has one) allows neither digital signature,
//     key encipherment nor key agreement is refused (OpenSSL's check_purpose_ssl_server, KU_TLS);
//     crypto/x509 checks the rest (names chaining, signatures, validity, basic constraints, path
//     length, extended key usage, name constraints).
//
// A refusal says "certificate verify failed: " and OpenSSL's reason (X509_verify_cert_error_string),
// found by building the chain as build_chain does (issuers from the file first, then from the
// server's certificates): "self-signed certificate" (the server's certificate alone, self-signed,
// not in the file), "self-signed certificate in certificate chain" (the chain ends at a self-signed
// certificate not in the file), "unable to get issuer certificate" (it ends at a certificate of
// the file that is not self-signed), "unable to get local issuer certificate" (it ends at a
// certificate the server sent), then for a complete chain "invalid CA certificate", "unsupported
// certificate purpose", "certificate signature failure", "certificate has expired", "certificate
// is not yet valid"; crypto/x509's reason when none of these is found. The certificate is named by
// its depth in the chain (0: the server's) and its subject, as the CRL check names it.

// maxChainDepth bounds the chain built to name a refusal's reason (OpenSSL's default
// verification depth is 100).
const maxChainDepth = 100

// rootSet is a root certificate file as OpenSSL's store holds it.
type rootSet struct {
	anchors *x509.CertPool      // the self-signed certificates: the trust anchors
	others  []*x509.Certificate // the other certificates: chain material only
	certs   []*x509.Certificate // every certificate of the file, in order
}

func newRootSet(certs []*x509.Certificate) *rootSet {
	rs := &rootSet{anchors: x509.NewCertPool(), certs: certs}
	for _, c := range certs {
		if selfSigned(c) {
			rs.anchors.AddCert(c)
		} else {
			rs.others = append(rs.others, c)
		}
	}
	return rs
}

// selfSigned is OpenSSL's X509_self_signed(c, 0) (see above).
func selfSigned(c *x509.Certificate) bool {
	subject, err := canonicalName(c.RawSubject)
	if err != nil {
		return false
	}
	issuer, err := canonicalName(c.RawIssuer)
	if err != nil || !bytes.Equal(subject, issuer) {
		return false
	}
	if !issuedBy(c, c) {
		return false
	}
	return signatureKeyType(c.SignatureAlgorithm) == c.PublicKeyAlgorithm
}

// issuedBy is the part of OpenSSL's X509_check_issued that needs no signature: c's
// authorityKeyIdentifier, when it has one, matches issuer (X509_check_akid). An
// authorityKeyIdentifier that does not parse matches nothing.
func issuedBy(c, issuer *x509.Certificate) bool {
	for _, e := range c.Extensions {
		if e.Id.Equal(oidAKID) {
			a, ok := parseAKID(e.Value)
			return ok && a.matches(issuer)
		}
	}
	return true
}

// signatureKeyType is the key type a signature algorithm signs with (OpenSSL's
// check_sig_alg_match; RSA-PSS signs with an RSA key).
func signatureKeyType(a x509.SignatureAlgorithm) x509.PublicKeyAlgorithm {
	switch a {
	case x509.MD2WithRSA, x509.MD5WithRSA, x509.SHA1WithRSA, x509.SHA256WithRSA, x509.SHA384WithRSA,
		x509.SHA512WithRSA, x509.SHA256WithRSAPSS, x509.SHA384WithRSAPSS, x509.SHA512WithRSAPSS:
		return x509.RSA
	case x509.DSAWithSHA1, x509.DSAWithSHA256:
		return x509.DSA
	case x509.ECDSAWithSHA1, x509.ECDSAWithSHA256, x509.ECDSAWithSHA384, x509.ECDSAWithSHA512:
		return x509.ECDSA
	case x509.PureEd25519:
		return x509.Ed25519
	}
	return x509.UnknownPublicKeyAlgorithm
}

// chainTrust is where a chain's trust anchors come from.
type chainTrust struct {
	anchors *x509.CertPool
	// others are chain material besides the server's certificates (a root file's certificates
	// that are not self-signed).
	others []*x509.Certificate
	// store is every certificate of the root file, to name a refusal's reason; nil for a pool
	// that cannot be listed.
	store []*x509.Certificate
	// filter: the pool may hold certificates that are not self-signed (system, application):
	// chains that end at one are refused.
	filter bool
}

// verifyChain verifies the server's certificates peer (its own first) against t at now, and
// returns the verified chains (each from the server's certificate to a self-signed anchor) or
// an error "certificate verify failed: REASON (certificate at depth N, SUBJECT)".
func verifyChain(peer []*x509.Certificate, t chainTrust, now time.Time) ([][]*x509.Certificate, error) {
	if len(peer) == 0 {
		return nil, errors.New("certificate verify failed: the server sent no certificate")
	}
	inter := x509.NewCertPool()
	for _, c := range peer[1:] {
		inter.AddCert(c)
	}
	for _, c := range t.others {
		inter.AddCert(c)
	}
	chains, err := peer[0].Verify(x509.VerifyOptions{Roots: t.anchors, Intermediates: inter, CurrentTime: now})
	var partial []*x509.Certificate // a chain ending at a pooled certificate that is not self-signed
	if err == nil && t.filter {
		kept := chains[:0:0]
		for _, ch := range chains {
			if selfSigned(ch[len(ch)-1]) {
				kept = append(kept, ch)
			} else if partial == nil {
				partial = ch
			}
		}
		chains = kept
	}
	if err == nil && len(chains) > 0 {
		if leaf := peer[0]; leaf.KeyUsage != 0 &&
			leaf.KeyUsage&(x509.KeyUsageDigitalSignature|x509.KeyUsageKeyEncipherment|x509.KeyUsageKeyAgreement) == 0 {
			return nil, verifyFailed("unsupported certificate purpose", 0, leaf)
		}
		return chains, nil
	}
	if partial != nil {
		return nil, verifyFailed("unable to get issuer certificate", len(partial)-1, partial[len(partial)-1])
	}
	return nil, diagnose(peer, t.store, err, now)
}

func verifyFailed(reason string, depth int, c *x509.Certificate) error {
	return fmt.Errorf("certificate verify failed: %s (certificate at depth %d, %s)", reason, depth, c.Subject)
}

// diagnose names OpenSSL's reason for a chain crypto/x509 refused (goErr, nil when the chain was
// refused for ending at a certificate that is not self-signed): it builds the chain as
// build_chain does, issuers from store (the root file) first, then from the server's
// certificates.
func diagnose(peer, store []*x509.Certificate, goErr error, now time.Time) error {
	inStore := func(c *x509.Certificate) bool {
		return slices.ContainsFunc(store, func(s *x509.Certificate) bool { return bytes.Equal(s.Raw, c.Raw) })
	}
	// The server's certificate counts as untrusted even when the file holds it; once a
	// certificate of the file is in the chain, issuers are looked for in the file only.
	chain := []*x509.Certificate{peer[0]}
	trusted := false
	for len(chain) < maxChainDepth && !selfSigned(chain[len(chain)-1]) {
		cur := chain[len(chain)-1]
		issuer := findIssuer(cur, store, chain, now)
		if issuer == nil && !trusted {
			if issuer = findIssuer(cur, peer[1:], chain, now); issuer != nil && inStore(issuer) {
				trusted = true
			}
		} else if issuer != nil {
			trusted = true
		}
		if issuer == nil {
			break
		}
		chain = append(chain, issuer)
	}
	top, depth := chain[len(chain)-1], len(chain)-1
	ss := selfSigned(top)
	switch {
	case ss && !inStore(top) && depth == 0:
		return verifyFailed("self-signed certificate", 0, top)
	case ss && !inStore(top):
		return verifyFailed("self-signed certificate in certificate chain", depth, top)
	case !ss && trusted:
		return verifyFailed("unable to get issuer certificate", depth, top)
	case !ss:
		return verifyFailed("unable to get local issuer certificate", depth, top)
	}
	// A chain to an anchor of the file: the checks OpenSSL makes next, in its order
	// (check_chain_extensions, then internal_verify from the anchor down).
	for i, c := range chain[1:] {
		if !c.BasicConstraintsValid || !c.IsCA {
			return verifyFailed("invalid CA certificate", i+1, c)
		}
	}
	if leaf := chain[0]; len(leaf.ExtKeyUsage) > 0 && !slices.Contains(leaf.ExtKeyUsage, x509.ExtKeyUsageServerAuth) {
		return verifyFailed("unsupported certificate purpose", 0, leaf)
	}
	for n := depth; n >= 0; n-- {
		c := chain[n]
		if n < depth && checkSignature(chain[n+1], c.SignatureAlgorithm, c.RawTBSCertificate, c.Signature) != nil {
			return verifyFailed("certificate signature failure", n, c)
		}
		if now.Before(c.NotBefore) {
			return verifyFailed("certificate is not yet valid", n, c)
		}
		if now.After(c.NotAfter) {
			return verifyFailed("certificate has expired", n, c)
		}
	}
	if goErr == nil {
		goErr = errors.New("no chain to a trusted root")
	}
	return fmt.Errorf("certificate verify failed: %w", goErr)
}

// findIssuer is the issuer of c among candidates, as OpenSSL's check_issued picks it: the subject
// name equal to c's issuer name (canonical forms), c's authorityKeyIdentifier matching, the key
// usage (when given) allowing certificate signing; of those, the first whose signature on c
// verifies and that is valid at now, else the first. Certificates already in chain are skipped.
func findIssuer(c *x509.Certificate, candidates, chain []*x509.Certificate, now time.Time) *x509.Certificate {
	want, err := canonicalName(c.RawIssuer)
	if err != nil {
		return nil
	}
	var first *x509.Certificate
	for _, cand := range candidates {
		if slices.ContainsFunc(chain, func(x *x509.Certificate) bool { return bytes.Equal(x.Raw, cand.Raw) }) {
			continue
		}
		name, err := canonicalName(cand.RawSubject)
		if err != nil || !bytes.Equal(name, want) || !issuedBy(c, cand) ||
			cand.KeyUsage != 0 && cand.KeyUsage&x509.KeyUsageCertSign == 0 {
			continue
		}
		if checkSignature(cand, c.SignatureAlgorithm, c.RawTBSCertificate, c.Signature) == nil &&
			!now.Before(cand.NotBefore) && !now.After(cand.NotAfter) {
			return cand
		}
		if first == nil {
			first = cand
		}
	}
	return first
}

// signatureChecks, when a test sets it, counts the signatures checked by checkSignature.
var signatureChecks atomic.Pointer[atomic.Int64]

// checkSignature is issuer.CheckSignature: the signature sig by issuer's key of signed with
// algorithm a. Every signature the package checks itself goes through it (crypto/x509's Verify
// checks its own, at most 100 per call).
func checkSignature(issuer *x509.Certificate, a x509.SignatureAlgorithm, signed, sig []byte) error {
	if n := signatureChecks.Load(); n != nil {
		n.Add(1)
	}
	return issuer.CheckSignature(a, signed, sig)
}
