package tlspolicy

import (
	"crypto/x509"
	"encoding/asn1"
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
//     key encipherment nor key agreement, or whose Netscape certificate type (when it has one)
//     does not allow an SSL server, is refused (OpenSSL's check_purpose_ssl_server, KU_TLS,
//     NS_SSL_SERVER); with a root file, the chain's extensions are checked as
//     check_chain_extensions checks them (checkExtensions); crypto/x509 checks the rest (names
//     chaining, signatures, validity, name constraints) and the same extensions by its own
//     rules (with sslrootcert=system or an application's pool, by its rules alone: it accepts
//     anyExtendedKeyUsage, which OpenSSL does not), stricter in four corners: it counts a
//     self-issued CA (a key rollover) in a path length, it refuses an extendedKeyUsage that
//     lists a server-gated-crypto purpose and not serverAuth, it refuses a critical extension
//     that OpenSSL supports and it does not handle (a Netscape certificate type, name
//     constraints on directory names), and it refuses a version 3 anchor without
//     basicConstraints.
//
// The chain is the one OpenSSL's build_chain builds, without checking a signature: from the
// server's certificate up, at each step the issuer looked for in the root file first, then (as
// long as no certificate of the file is in the chain) among the certificates the server sent,
// as check_issued picks it: the subject name equal to the issuer name (canonical forms), the
// authorityKeyIdentifier matching, the key usage (when given) allowing certificate signing, not
// already in the chain; of those the first valid at the time, else the one that expires last
// (find_issuer, X509_STORE_CTX_get1_issuer). It stops at a self-signed certificate, when no
// issuer is found, or past OpenSSL's default depth (100 certificates between the server's and
// the anchor). With a root file, a chain that does not end at a self-signed certificate of the
// file is refused there, as is one whose extensions check_chain_extensions refuses; crypto/x509
// then checks that chain (its intermediates are the chain's certificates, no other), each
// signature once. crypto/x509 may accept another path over them and not OpenSSL's (it never
// takes a subject and key twice, as N1 by N2, N2 by N1, N1 by N0 does): OpenSSL's chain, whose
// extensions are checked already, is then checked here for its signatures and validity periods
// and is the chain verified, the one whose CRLs are checked; name constraints along it are left
// to crypto/x509's paths. OpenSSL's check of the signatures and validity periods from the
// anchor down (checkSignatures), stopping at the first failure, runs in three cases: to name
// the reason of crypto/x509's refusal; when crypto/x509 accepted another path; and first, before
// crypto/x509, when a name repeats along the chain (crypto/x509 would try each certificate of
// that name). The package's own checks thus check at most one signature that fails, however many
// certificates the server sent, and crypto/x509 then checks each of the chain's signatures once
// (a second time only in the last two cases); with sslrootcert=system or an application's pool,
// which cannot be listed, the chain is built from the server's certificates alone and
// crypto/x509 finds the anchor (at most 100 signature checks, its own bound), and a refusal
// names the reason of the chain so built (a chain that crypto/x509 refused for another reason,
// an expired certificate, is named by where it ends).
//
// A refusal says "certificate verify failed: " and OpenSSL's reason (X509_verify_cert_error_string):
// "certificate chain too long" (no anchor within the depth), "self-signed certificate" (the
// server's certificate alone, self-signed, not in the file), "self-signed certificate in
// certificate chain" (the chain ends at a self-signed certificate not in the file), "unable to
// get issuer certificate" (it ends at a certificate of the file that is not self-signed),
// "unable to get local issuer certificate" (it ends at a certificate the server sent), then for
// a complete chain, from the server's certificate up, "unhandled critical extension" (one
// OpenSSL does not support), "invalid CA certificate", "unsuitable certificate purpose",
// "path length constraint exceeded", then from the anchor down "certificate signature
// failure", "certificate has expired", "certificate is not yet valid"; crypto/x509's reason
// when none of these is found (without a depth). The certificate is named by its depth in the
// chain (0: the server's) and its subject, as the CRL check names it.

// maxChainDepth is OpenSSL's default verification depth (X509_VERIFY_PARAM's depth, which libpq
// leaves): at most that many certificates between the server's and the anchor. build_chain
// builds one certificate further and refuses a chain that reaches it untrusted.
const maxChainDepth = 100

// rootSet is a root certificate file as OpenSSL's store holds it.
type rootSet struct {
	anchors *x509.CertPool      // the self-signed certificates: the trust anchors
	certs   []*x509.Certificate // every certificate of the file, in order
	index   issuerIndex         // certs by subject
	raw     map[string]bool     // the DER encodings of certs
	names   nameCache           // the canonical names met reading the file; read only after
}

func newRootSet(certs []*x509.Certificate) *rootSet {
	rs := &rootSet{anchors: x509.NewCertPool(), certs: certs, raw: map[string]bool{}}
	rs.index = rs.names.indexBySubject(certs)
	for _, c := range certs {
		if rs.names.selfSigned(c) {
			rs.anchors.AddCert(c)
		}
		rs.raw[string(c.Raw)] = true
	}
	return rs
}

// issuerIndex is a list of certificates by canonical subject name, in the list's order.
type issuerIndex map[string][]*x509.Certificate

// nameCache holds the canonical forms (canonicalName) of the DER names met in one verification,
// or in the reading of a root file (base), by DER encoding: a certificate's issuer is the
// subject of the next one up, and canonicalName, which re-encodes every attribute, is the
// largest cost of building a chain. A nil *nameCache computes every name afresh.
type nameCache struct {
	base *nameCache // the root file's, read only; nil for none
	m    map[string]canonName
}

// canonName is a name's canonical form; ok false when it does not parse.
type canonName struct {
	s  string
	ok bool
}

// canon is canonicalName(der), from the cache when der was met before.
func (nc *nameCache) canon(der []byte) (string, bool) {
	if nc == nil {
		c, err := canonicalName(der)
		return string(c), err == nil
	}
	for x := nc; x != nil; x = x.base {
		if v, hit := x.m[string(der)]; hit {
			return v.s, v.ok
		}
	}
	c, err := canonicalName(der)
	v := canonName{string(c), err == nil}
	if nc.m == nil {
		nc.m = map[string]canonName{}
	}
	nc.m[string(der)] = v
	return v.s, v.ok
}

// indexBySubject indexes certs by subject; a certificate whose subject has no canonical form
// (does not parse) issues nothing.
func (nc *nameCache) indexBySubject(certs []*x509.Certificate) issuerIndex {
	idx := issuerIndex{}
	for _, c := range certs {
		if name, ok := nc.canon(c.RawSubject); ok {
			idx[name] = append(idx[name], c)
		}
	}
	return idx
}

// selfIssued is OpenSSL's EXFLAG_SI (v3_purp.c): the subject and issuer names are equal
// (canonical forms), whatever the key.
func (nc *nameCache) selfIssued(c *x509.Certificate) bool {
	subject, ok := nc.canon(c.RawSubject)
	if !ok {
		return false
	}
	issuer, ok := nc.canon(c.RawIssuer)
	return ok && subject == issuer
}

// selfSigned is OpenSSL's X509_self_signed(c, 0) (see above).
func selfSigned(c *x509.Certificate) bool { return (*nameCache)(nil).selfSigned(c) }

func (nc *nameCache) selfSigned(c *x509.Certificate) bool {
	if !nc.selfIssued(c) {
		return false
	}
	if a, ok := certAKID(c); !ok || !a.matches(c) {
		return false
	}
	return signatureKeyType(c.SignatureAlgorithm) == c.PublicKeyAlgorithm
}

// certAKID is c's authorityKeyIdentifier, the part of OpenSSL's X509_check_issued that needs no
// signature (X509_check_akid): nil when c has none (it matches any issuer); ok false when it
// does not parse (it matches none).
func certAKID(c *x509.Certificate) (a *authorityKeyID, ok bool) {
	for _, e := range c.Extensions {
		if e.Id.Equal(oidAKID) {
			return parseAKID(e.Value)
		}
	}
	return nil, true
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
	// store is the root file; nil for a pool that cannot be listed (system, application).
	store *rootSet
	// filter: the pool may hold certificates that are not self-signed (system, application):
	// chains that end at one are refused.
	filter bool
}

// verifyChain verifies the server's certificates peer (its own first) against t at now, and
// returns the verified chains (each from the server's certificate to a self-signed anchor;
// with a root file, OpenSSL's one chain) or an error "certificate verify failed: REASON
// (certificate at depth N, SUBJECT)", or without the depth and subject when crypto/x509's reason
// is given or the server sent no certificate.
func verifyChain(peer []*x509.Certificate, t chainTrust, now time.Time) ([][]*x509.Certificate, error) {
	if len(peer) == 0 {
		return nil, errors.New("certificate verify failed: the server sent no certificate")
	}
	b := buildChain(peer, t.store, now)
	if t.store != nil {
		if err := b.checkShape(); err != nil {
			return nil, err
		}
		// With a name repeated along the chain crypto/x509 would try each certificate of that
		// name (up to 100 signatures): the one chain's signatures are checked first, stopping
		// at the first that fails. Otherwise crypto/x509 checks them, once.
		if b.repeated {
			if err := b.checkSignatures(now); err != nil {
				return nil, err
			}
		}
	}
	// The chain's certificates are crypto/x509's intermediates, but an anchor of the file: among
	// the intermediates too, it would be tried as an issuer twice.
	above := b.certs[1:]
	if len(above) > 0 && b.topSelfSigned && b.inStore(b.certs[len(b.certs)-1]) {
		above = above[:len(above)-1]
	}
	inter := x509.NewCertPool()
	for _, c := range above {
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
		// (With a root file checkShape checked it.)
		if leaf := peer[0]; t.store == nil && !serverUsage(leaf) {
			return nil, verifyFailed("unsuitable certificate purpose", 0, leaf)
		}
		// OpenSSL's one chain, when crypto/x509 found it too, is the one whose CRLs are
		// checked, as OpenSSL checks them on it alone.
		if t.store == nil {
			return chains, nil
		}
		for _, ch := range chains {
			if slices.EqualFunc(ch, b.certs, func(x, y *x509.Certificate) bool { return x.Equal(y) }) {
				return [][]*x509.Certificate{ch}, nil
			}
		}
		// crypto/x509 found other paths over the chain's certificates (it never takes a subject
		// and key twice, as OpenSSL's chain may: N1 by N2, N2 by N1, N1 by N0). OpenSSL's one
		// chain must pass too (checkShape checked its extensions), and it is the one returned:
		// the one whose CRLs OpenSSL checks.
		if err := b.checkSignatures(now); err != nil {
			return nil, err
		}
		return [][]*x509.Certificate{b.certs}, nil
	}
	if partial != nil {
		return nil, verifyFailed("unable to get issuer certificate", len(partial)-1, partial[len(partial)-1])
	}
	// OpenSSL's reason, when one of its checks refuses the chain.
	if t.store == nil {
		if err := b.checkShape(); err != nil {
			return nil, err
		}
	} else if err := b.checkSignatures(now); err != nil {
		return nil, err
	}
	if err == nil {
		err = errors.New("no chain to a trusted root")
	}
	return nil, fmt.Errorf("certificate verify failed: %w", err)
}

// serverUsage is OpenSSL's key usage and Netscape certificate type checks of a server's
// certificate (check_purpose_ssl_server: ns_reject with NS_SSL_SERVER, ku_reject with KU_TLS):
// no Netscape certificate type, or one that allows an SSL server (one that does not parse
// allows nothing, as it makes the certificate invalid for OpenSSL); no key usage, or one that
// allows digital signature, key encipherment or key agreement.
func serverUsage(c *x509.Certificate) bool {
	if ns, ok := extension(c, oidNetscapeCertType); ok {
		var bits asn1.BitString
		if rest, err := asn1.Unmarshal(ns, &bits); err != nil || len(rest) > 0 ||
			len(bits.Bytes) == 0 || bits.Bytes[0]&nsSSLServer == 0 {
			return false
		}
	}
	return c.KeyUsage == 0 ||
		c.KeyUsage&(x509.KeyUsageDigitalSignature|x509.KeyUsageKeyEncipherment|x509.KeyUsageKeyAgreement) != 0
}

// oidNetscapeCertType is Netscape's certificate type extension; nsSSLServer its "SSL server"
// bit in the first byte, as OpenSSL reads it (NS_SSL_SERVER).
var oidNetscapeCertType = asn1.ObjectIdentifier{2, 16, 840, 1, 113730, 1, 1}

const nsSSLServer = 0x40

func verifyFailed(reason string, depth int, c *x509.Certificate) error {
	return fmt.Errorf("certificate verify failed: %s (certificate at depth %d, %s)", reason, depth, c.Subject)
}

// builtChain is the chain build_chain builds (see above).
type builtChain struct {
	certs   []*x509.Certificate // from the server's certificate up
	trusted bool                // a certificate of the root file is in the chain
	store   *rootSet            // the root file; nil for a pool that cannot be listed
	// topSelfSigned: the last certificate of certs is self-signed.
	topSelfSigned bool
	// repeated: two certificates of certs have the same subject (canonical forms).
	repeated bool
	// signed: checkSignatures passed.
	signed bool
	// names: the canonical names met building the chain.
	names *nameCache
}

// buildChain builds the chain of peer (the server's certificates, its own first) with the root
// file store (nil: the server's certificates alone), checking no signature.
func buildChain(peer []*x509.Certificate, store *rootSet, now time.Time) *builtChain {
	names := &nameCache{}
	b := &builtChain{certs: []*x509.Certificate{peer[0]}, store: store, names: names}
	var fromStore issuerIndex
	if store != nil {
		fromStore, names.base = store.index, &store.names
	}
	fromPeer := names.indexBySubject(peer[1:])
	// The server's certificate counts as untrusted even when the file holds it; once a
	// certificate of the file is in the chain, issuers are looked for in the file only.
	inChain := map[string]bool{string(peer[0].Raw): true}
	subjects := map[string]bool{}
	for {
		cur := b.certs[len(b.certs)-1]
		subject, _ := names.canon(cur.RawSubject)
		b.repeated = b.repeated || subjects[subject]
		subjects[subject] = true
		if b.topSelfSigned = names.selfSigned(cur); b.topSelfSigned || len(b.certs) > maxChainDepth+1 {
			break
		}
		issuer := findIssuer(cur, names, fromStore, inChain, now)
		if issuer == nil && !b.trusted {
			if issuer = findIssuer(cur, names, fromPeer, inChain, now); issuer != nil && b.inStore(issuer) {
				b.trusted = true
			}
		} else if issuer != nil {
			b.trusted = true
		}
		if issuer == nil {
			break
		}
		b.certs = append(b.certs, issuer)
		inChain[string(issuer.Raw)] = true
	}
	return b
}

func (b *builtChain) inStore(c *x509.Certificate) bool {
	return b.store != nil && b.store.raw[string(c.Raw)]
}

// checkShape returns OpenSSL's refusal of the chain's shape (see above): no self-signed
// certificate of the root file at its end, then its extensions (checkExtensions). nil: OpenSSL
// checks the signatures and validity periods next (checkSignatures), crypto/x509 the rest.
// Without a root file (a chain built from the server's certificates alone) it never returns
// nil: it names where the chain ends.
func (b *builtChain) checkShape() error {
	chain := b.certs
	top, depth := chain[len(chain)-1], len(chain)-1
	ss := b.topSelfSigned
	switch {
	case depth > maxChainDepth && !(ss && b.inStore(top)):
		return verifyFailed("certificate chain too long", depth, top)
	case ss && !b.inStore(top) && depth == 0:
		return verifyFailed("self-signed certificate", 0, top)
	case ss && !b.inStore(top):
		return verifyFailed("self-signed certificate in certificate chain", depth, top)
	case !ss && b.trusted:
		return verifyFailed("unable to get issuer certificate", depth, top)
	case !ss:
		return verifyFailed("unable to get local issuer certificate", depth, top)
	}
	// A chain to an anchor of the file: the checks OpenSSL makes next (check_chain_extensions,
	// then internal_verify from the anchor down: checkSignatures).
	return b.checkExtensions()
}

// checkExtensions is OpenSSL's check_chain_extensions (x509_vfy.c) on a chain to an anchor of
// the file, with the purpose libpq's handshake sets (ssl_server): from the server's certificate
// up, for each certificate in this order, a critical extension OpenSSL does not support
// ("unhandled critical extension", X509_supported_extension), a certificate above the server's
// that is not a CA ("invalid CA certificate", check_ca: basicConstraints with cA, or for the
// anchor alone, without basicConstraints, version 1 or a key usage; a key usage must allow
// certificate signing), an extendedKeyUsage that does not allow a server, or a server
// certificate whose key usage does not ("unsuitable certificate purpose",
// check_purpose_ssl_server), a pathLenConstraint exceeded by the CAs below it that are not
// self-issued ("path length constraint exceeded"). nil when none is refused.
func (b *builtChain) checkExtensions() error {
	plen := 0
	for i, c := range b.certs {
		for _, e := range c.Extensions {
			if e.Critical && !opensslSupported(e.Id) {
				return verifyFailed("unhandled critical extension", i, c)
			}
		}
		if i > 0 && !opensslCA(c, i == len(b.certs)-1) {
			return verifyFailed("invalid CA certificate", i, c)
		}
		if !serverExtKeyUsage(c) || i == 0 && !serverUsage(c) {
			return verifyFailed("unsuitable certificate purpose", i, c)
		}
		if i > 1 && c.BasicConstraintsValid && c.MaxPathLen >= 0 && plen > c.MaxPathLen {
			return verifyFailed("path length constraint exceeded", i, c)
		}
		// A self-issued CA (a key rollover) does not count.
		if i > 0 && !b.names.selfIssued(c) {
			plen++
		}
	}
	return nil
}

// opensslSupportedExtensions are the extensions OpenSSL 3 supports (v3_purp.c,
// X509_supported_extension): a critical one of another type fails a chain.
var opensslSupportedExtensions = []asn1.ObjectIdentifier{
	oidNetscapeCertType,             // Netscape certificate type
	{2, 5, 29, 15},                  // keyUsage
	{2, 5, 29, 17},                  // subjectAltName
	{2, 5, 29, 19},                  // basicConstraints
	{2, 5, 29, 30},                  // nameConstraints
	{2, 5, 29, 31},                  // cRLDistributionPoints
	{2, 5, 29, 32},                  // certificatePolicies
	{2, 5, 29, 33},                  // policyMappings
	{2, 5, 29, 36},                  // policyConstraints
	{2, 5, 29, 37},                  // extKeyUsage
	{2, 5, 29, 54},                  // inhibitAnyPolicy
	{1, 3, 6, 1, 5, 5, 7, 1, 7},     // sbgp-ipAddrBlock (RFC 3779)
	{1, 3, 6, 1, 5, 5, 7, 1, 8},     // sbgp-autonomousSysNum (RFC 3779)
	{1, 3, 6, 1, 5, 5, 7, 1, 14},    // proxyCertInfo
	{1, 3, 6, 1, 5, 5, 7, 48, 1, 5}, // OCSP no check
}

func opensslSupported(id asn1.ObjectIdentifier) bool {
	return slices.ContainsFunc(opensslSupportedExtensions, id.Equal)
}

// opensslCA is OpenSSL's check_ca as check_chain_extensions takes it for a certificate above the
// server's (x509_vfy.c, v3_purp.c): a key usage, when given, allows certificate signing, and
// basicConstraints says cA; the anchor (top) without basicConstraints passes too when it is of
// version 1 (a self-signed one, as the anchor is) or has a key usage.
func opensslCA(c *x509.Certificate, top bool) bool {
	if c.KeyUsage != 0 && c.KeyUsage&x509.KeyUsageCertSign == 0 {
		return false
	}
	if c.BasicConstraintsValid {
		return c.IsCA
	}
	return top && (c.Version == 1 || c.KeyUsage != 0)
}

// serverExtKeyUsage is OpenSSL's purpose check of a certificate's extendedKeyUsage for a
// server (xku_reject with XKU_SSL_SERVER | XKU_SGC, v3_purp.c): none, or one that lists
// serverAuth or a server-gated-crypto purpose (Netscape's, Microsoft's; crypto/x509 then
// refuses one that lists only those). anyExtendedKeyUsage alone does not allow a server.
func serverExtKeyUsage(c *x509.Certificate) bool {
	if _, ok := extension(c, oidEKU); !ok {
		return true // none (an empty one allows nothing)
	}
	for _, u := range c.ExtKeyUsage {
		switch u {
		case x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageNetscapeServerGatedCrypto, x509.ExtKeyUsageMicrosoftServerGatedCrypto:
			return true
		}
	}
	return false
}

// checkSignatures returns OpenSSL's refusal of a chain that passed checkShape for a signature or
// a validity period (internal_verify, from the anchor down: the first failure), nil when none
// fails. It checks at most one signature that fails, and nothing a second time.
func (b *builtChain) checkSignatures(now time.Time) error {
	if b.signed {
		return nil
	}
	chain := b.certs
	depth := len(chain) - 1
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
	b.signed = true
	return nil
}

// findIssuer is the issuer of c among the candidates (by subject), as OpenSSL's check_issued and
// find_issuer pick it: the subject name equal to c's issuer name (canonical forms), c's
// authorityKeyIdentifier matching, the key usage (when given) allowing certificate signing, not
// in the chain (inChain, by DER encoding); of those, the first valid at now, else the one that
// expires last (the first of those). No signature is checked.
func findIssuer(c *x509.Certificate, names *nameCache, candidates issuerIndex, inChain map[string]bool, now time.Time) *x509.Certificate {
	want, ok := names.canon(c.RawIssuer)
	if !ok {
		return nil
	}
	akid, ok := certAKID(c)
	if !ok {
		return nil
	}
	var best *x509.Certificate
	for _, cand := range candidates[want] {
		if inChain[string(cand.Raw)] || !akid.matches(cand) ||
			cand.KeyUsage != 0 && cand.KeyUsage&x509.KeyUsageCertSign == 0 {
			continue
		}
		if !now.Before(cand.NotBefore) && !now.After(cand.NotAfter) {
			return cand
		}
		if best == nil || cand.NotAfter.After(best.NotAfter) {
			best = cand
		}
	}
	return best
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
