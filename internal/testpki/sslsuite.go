package testpki

import (
	"crypto"
	"crypto/rand"
	"crypto/rsa"
	"crypto/sha1"
	"crypto/sha256"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/asn1"
	"encoding/binary"
	"encoding/pem"
	"fmt"
	"math/big"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"
)

// SSLSuitePassword is the sslpassword of the suite's encrypted client keys
// (src/test/ssl/sslfiles.mk: client-encrypted-pem.key).
const SSLSuitePassword = "dUmmyP^#+"

// SSLSuiteFiles are the files of PostgreSQL's SSL test suite (src/test/ssl/ssl/ as
// src/test/ssl/sslfiles.mk makes them from src/test/ssl/conf/*.config), by the suite's file
// name ("root+server_ca.crt", "client-der.key", "root+server-crldir/<hash>.r0", ...), made
// afresh with RSA 2048 keys:
//
//   - root_ca (self-signed) signs server_ca and client_ca;
//   - server_ca signs the server certificates: server-cn-only (CN common-name.pg-ssltest.test),
//     server-multiple-alt-names, server-single-alt-name, server-cn-and-alt-names,
//     server-no-names, server-revoked, server-ip-cn-only, server-ip-in-dnsname,
//     server-ip-alt-names, server-cn-and-ip-alt-names, server-ip-cn-and-alt-names,
//     server-ip-cn-and-dns-alt-names, all with O=PGDG;
//   - client_ca signs client (CN ssltestuser), client-revoked, client-revoked-utf8 (a Greek
//     CN), client-dn (O=PGDG, OU=Engineering, OU=Testing, CN=ssltestuser-dn), client-long
//     (a long subject) and client_ext (CN ssltestuser with basicConstraints, keyUsage and
//     extendedKeyUsage);
//   - the CRLs are version 1 (no version field, no extensions), as `openssl ca -gencrl`
//     writes them without a crl_extensions section: root.crl (nothing revoked), server.crl
//     (server-revoked), client.crl (client-revoked and client-revoked-utf8), and the bundles root+server.crl,
//     root+client.crl and the directories root+server-crldir, root+client-crldir and
//     client-crldir, whose files are named by OpenSSL's subject-name hash (X509_NAME_hash);
//   - client.key in PEM (PKCS#1), client-der.key (PKCS#1 DER), client-encrypted-pem.key (PEM
//     encrypted with AES-256-CBC and SSLSuitePassword), client-encrypted-der.key
//     (the same PKCS#1 DER as client-der.key: sslfiles.mk writes it with `openssl rsa
//     -outform DER -passout`, and DER output is never encrypted).
//
// The set is made once per process (RSA key generation is slow under -race); callers get a
// copy of the map.
func SSLSuiteFiles(t testing.TB) map[string][]byte {
	t.Helper()
	suiteOnce.Do(func() { suiteFiles, suiteErr = makeSSLSuite() })
	if suiteErr != nil {
		t.Fatal(suiteErr)
	}
	out := make(map[string][]byte, len(suiteFiles))
	for k, v := range suiteFiles {
		out[k] = v
	}
	return out
}

var (
	suiteOnce  sync.Once
	suiteFiles map[string][]byte
	suiteErr   error
)

type rsaCA struct {
	cert *x509.Certificate
	key  *rsa.PrivateKey
}

type suiteMaker struct {
	serial int64
	files  map[string][]byte
}

func (m *suiteMaker) issue(tmpl *x509.Certificate, parent *rsaCA) (*rsaCA, error) {
	key, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		return nil, err
	}
	m.serial++
	tmpl.SerialNumber = big.NewInt(time.Now().UnixNano()/1000 + m.serial)
	tmpl.NotBefore, tmpl.NotAfter = time.Now().Add(-time.Hour), time.Now().Add(10*365*24*time.Hour)
	pcert, pkey := tmpl, key
	if parent != nil {
		pcert, pkey = parent.cert, parent.key
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, pcert, &key.PublicKey, pkey)
	if err != nil {
		return nil, err
	}
	c, err := x509.ParseCertificate(der)
	if err != nil {
		return nil, err
	}
	return &rsaCA{cert: c, key: key}, nil
}

func caTemplate(cn string) *x509.Certificate {
	return &x509.Certificate{Subject: pkix.Name{CommonName: cn}, BasicConstraintsValid: true, IsCA: true,
		KeyUsage: x509.KeyUsageCertSign | x509.KeyUsageCRLSign}
}

func leafTemplate(cn string, org bool, dns []string, ips ...string) *x509.Certificate {
	name := pkix.Name{CommonName: cn}
	if org {
		name.Organization = []string{"PGDG"}
	}
	c := &x509.Certificate{Subject: name, DNSNames: dns, KeyUsage: x509.KeyUsageDigitalSignature | x509.KeyUsageKeyEncipherment}
	for _, ip := range ips {
		c.IPAddresses = append(c.IPAddresses, net.ParseIP(ip))
	}
	return c
}

func makeSSLSuite() (map[string][]byte, error) {
	m := &suiteMaker{files: map[string][]byte{}}
	root, err := m.issue(caTemplate("Test root CA for PostgreSQL SSL regression test suite"), nil)
	if err != nil {
		return nil, err
	}
	serverCA, err := m.issue(caTemplate("Test CA for PostgreSQL SSL regression test server certs"), root)
	if err != nil {
		return nil, err
	}
	clientCA, err := m.issue(caTemplate("Test CA for PostgreSQL SSL regression test client certs"), root)
	if err != nil {
		return nil, err
	}
	p := func(c *rsaCA) []byte { return PEMCert(c.cert) }
	cat := func(parts ...[]byte) []byte { return []byte(strings.Join(bytesToStrings(parts), "")) }
	m.files["root_ca.crt"] = p(root)
	m.files["server_ca.crt"] = p(serverCA)
	m.files["client_ca.crt"] = p(clientCA)
	m.files["root+server_ca.crt"] = cat(p(root), p(serverCA))
	m.files["root+client_ca.crt"] = cat(p(root), p(clientCA))
	m.files["both-cas-1.crt"] = cat(p(root), p(serverCA), p(clientCA))
	m.files["both-cas-2.crt"] = cat(p(root), p(clientCA), p(serverCA))

	const cn = "common-name.pg-ssltest.test"
	servers := []struct {
		name string
		tmpl *x509.Certificate
	}{
		{"server-cn-only", leafTemplate(cn, true, nil)},
		{"server-multiple-alt-names", leafTemplate("", true, []string{"dns1.alt-name.pg-ssltest.test", "dns2.alt-name.pg-ssltest.test", "*.wildcard.pg-ssltest.test"})},
		{"server-single-alt-name", leafTemplate("", true, []string{"single.alt-name.pg-ssltest.test"})},
		{"server-cn-and-alt-names", leafTemplate(cn, true, []string{"dns1.alt-name.pg-ssltest.test", "dns2.alt-name.pg-ssltest.test"})},
		{"server-no-names", leafTemplate("", true, nil)},
		{"server-revoked", leafTemplate(cn, true, nil)},
		{"server-ip-cn-only", leafTemplate("192.0.2.1", true, nil)},
		{"server-ip-in-dnsname", leafTemplate("", true, []string{"192.0.2.1"})},
		{"server-ip-alt-names", leafTemplate("", true, nil, "192.0.2.1", "2001:db8::1")},
		{"server-cn-and-ip-alt-names", leafTemplate(cn, true, nil, "192.0.2.1", "2001:db8::1")},
		{"server-ip-cn-and-alt-names", leafTemplate("192.0.2.1", true, nil, "192.0.2.2", "2001:db8::1")},
		{"server-ip-cn-and-dns-alt-names", leafTemplate("192.0.2.1", true, []string{"dns1.alt-name.pg-ssltest.test", "dns2.alt-name.pg-ssltest.test"})},
	}
	var revokedServer *rsaCA
	for _, s := range servers {
		c, err := m.issue(s.tmpl, serverCA)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", s.name, err)
		}
		m.files[s.name+".crt"] = p(c)
		m.files[s.name+".key"] = pem.EncodeToMemory(&pem.Block{Type: "RSA PRIVATE KEY", Bytes: x509.MarshalPKCS1PrivateKey(c.key)})
		if s.name == "server-revoked" {
			revokedServer = c
		}
		if s.name == "server-cn-only" {
			m.files["server-cn-only+server_ca.crt"] = cat(p(c), p(serverCA))
		}
	}
	client, err := m.issue(leafTemplate("ssltestuser", false, nil), clientCA)
	if err != nil {
		return nil, err
	}
	revokedClient, err := m.issue(leafTemplate("ssltestuser", false, nil), clientCA)
	if err != nil {
		return nil, err
	}
	m.files["client.crt"] = p(client)
	m.files["client+client_ca.crt"] = cat(p(client), p(clientCA))
	m.files["client-revoked.crt"] = p(revokedClient)
	clientDER := x509.MarshalPKCS1PrivateKey(client.key)
	m.files["client.key"] = pem.EncodeToMemory(&pem.Block{Type: "RSA PRIVATE KEY", Bytes: clientDER})
	m.files["client-der.key"] = clientDER
	//lint:ignore SA1019 the suite's key is in OpenSSL's traditional encrypted PEM, which only this writes
	enc, err := x509.EncryptPEMBlock(rand.Reader, "RSA PRIVATE KEY", clientDER, []byte(SSLSuitePassword), x509.PEMCipherAES256) //nolint:staticcheck
	if err != nil {
		return nil, err
	}
	m.files["client-encrypted-pem.key"] = pem.EncodeToMemory(enc)
	m.files["client-revoked.key"] = pem.EncodeToMemory(&pem.Block{Type: "RSA PRIVATE KEY", Bytes: x509.MarshalPKCS1PrivateKey(revokedClient.key)})
	// sslfiles.mk writes it with `openssl rsa -outform DER -passout ...`: DER output has no
	// encryption, so the "encrypted" DER key is the plain DER key.
	m.files["client-encrypted-der.key"] = clientDER

	// The other client certificates of client_ca: client-dn (conf/client-dn.config: O, two
	// OUs and a CN, each its own RDN), client-long (conf/client-long.config: a subject longer
	// than a log line shows), client-revoked-utf8 (conf/client-revoked-utf8.config: a CN in
	// UTF-8, revoked in client.crl) and client_ext (conf/client_ext.config: basicConstraints
	// critical CA:FALSE, keyUsage, extendedKeyUsage clientAuth), each with its PEM key.
	dnName, err := asn1.Marshal(pkix.RDNSequence{
		{{Type: asn1.ObjectIdentifier{2, 5, 4, 10}, Value: "PGDG"}},
		{{Type: asn1.ObjectIdentifier{2, 5, 4, 11}, Value: "Engineering"}},
		{{Type: asn1.ObjectIdentifier{2, 5, 4, 11}, Value: "Testing"}},
		{{Type: asn1.ObjectIdentifier{2, 5, 4, 3}, Value: "ssltestuser-dn"}},
	})
	if err != nil {
		return nil, err
	}
	dnTmpl := leafTemplate("", false, nil)
	dnTmpl.RawSubject = dnName
	longTmpl := leafTemplate("ssl-123456789012345678901234567890123456789012345678901234567890", false, nil)
	longTmpl.Subject.Organization = []string{"PGDG, a very long organization name, with commas and spaces"}
	longTmpl.Subject.OrganizationalUnit = []string{"Testing of very long subjects, which a log line truncates"}
	extTmpl := leafTemplate("ssltestuser", false, nil)
	extTmpl.BasicConstraintsValid = true
	extTmpl.KeyUsage = x509.KeyUsageContentCommitment | x509.KeyUsageDigitalSignature | x509.KeyUsageKeyEncipherment
	extTmpl.ExtKeyUsage = []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}
	var revokedUTF8 *rsaCA
	for _, c := range []struct {
		name string
		tmpl *x509.Certificate
	}{
		{"client-dn", dnTmpl},
		{"client-long", longTmpl},
		{"client-revoked-utf8", leafTemplate("\u039f\u03b4\u03c5\u03c3\u03c3\u03ad\u03b1\u03c2", false, nil)},
		{"client_ext", extTmpl},
	} {
		k, err := m.issue(c.tmpl, clientCA)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", c.name, err)
		}
		m.files[c.name+".crt"] = p(k)
		m.files[c.name+".key"] = pem.EncodeToMemory(&pem.Block{Type: "RSA PRIVATE KEY", Bytes: x509.MarshalPKCS1PrivateKey(k.key)})
		if c.name == "client-revoked-utf8" {
			revokedUTF8 = k
		}
	}

	rootCRL, err := crlV1(root, nil)
	if err != nil {
		return nil, err
	}
	serverCRL, err := crlV1(serverCA, []*big.Int{revokedServer.cert.SerialNumber})
	if err != nil {
		return nil, err
	}
	clientCRL, err := crlV1(clientCA, []*big.Int{revokedClient.cert.SerialNumber, revokedUTF8.cert.SerialNumber})
	if err != nil {
		return nil, err
	}
	m.files["root.crl"] = rootCRL
	m.files["server.crl"] = serverCRL
	m.files["client.crl"] = clientCRL
	m.files["root+server.crl"] = cat(rootCRL, serverCRL)
	m.files["root+client.crl"] = cat(rootCRL, clientCRL)
	h := func(c *rsaCA) string { return fmt.Sprintf("%08x.r0", NameHash(c.cert.RawSubject)) }
	m.files["root+server-crldir/"+h(root)] = rootCRL
	m.files["root+server-crldir/"+h(serverCA)] = serverCRL
	m.files["root+client-crldir/"+h(root)] = rootCRL
	m.files["root+client-crldir/"+h(clientCA)] = clientCRL
	m.files["client-crldir/"+h(clientCA)] = clientCRL
	return m.files, nil
}

func bytesToStrings(parts [][]byte) []string {
	s := make([]string, len(parts))
	for i, b := range parts {
		s[i] = string(b)
	}
	return s
}

// crlV1 is a PEM version 1 CRL (RFC 5280, 5.1: TBSCertList without version and
// crlExtensions) of issuer revoking serials, signed with sha256WithRSAEncryption. Go's
// x509.CreateRevocationList writes only version 2.
func crlV1(issuer *rsaCA, serials []*big.Int) ([]byte, error) {
	type revoked struct {
		Serial *big.Int
		Time   time.Time `asn1:"utc"`
	}
	type tbs struct {
		Signature  pkix.AlgorithmIdentifier
		Issuer     asn1.RawValue
		ThisUpdate time.Time `asn1:"utc"`
		NextUpdate time.Time `asn1:"utc"`
		Revoked    []revoked `asn1:"optional,omitempty"`
	}
	alg := pkix.AlgorithmIdentifier{Algorithm: asn1.ObjectIdentifier{1, 2, 840, 113549, 1, 1, 11}, Parameters: asn1.NullRawValue}
	now := time.Now().UTC().Truncate(time.Second)
	t := tbs{Signature: alg, Issuer: asn1.RawValue{FullBytes: issuer.cert.RawSubject}, ThisUpdate: now.Add(-time.Hour), NextUpdate: now.Add(10 * 365 * 24 * time.Hour)}
	for _, s := range serials {
		t.Revoked = append(t.Revoked, revoked{Serial: s, Time: now.Add(-time.Hour)})
	}
	tbsDER, err := asn1.Marshal(t)
	if err != nil {
		return nil, err
	}
	sum := sha256.Sum256(tbsDER)
	sig, err := rsa.SignPKCS1v15(rand.Reader, issuer.key, crypto.SHA256, sum[:])
	if err != nil {
		return nil, err
	}
	der, err := asn1.Marshal(struct {
		TBS       asn1.RawValue
		Algorithm pkix.AlgorithmIdentifier
		Signature asn1.BitString
	}{asn1.RawValue{FullBytes: tbsDER}, alg, asn1.BitString{Bytes: sig, BitLength: 8 * len(sig)}})
	if err != nil {
		return nil, err
	}
	return PEMCRL(der), nil
}

// NameHash is OpenSSL's X509_NAME_hash of a DER Name (crypto/x509/x509_cmp.c and the
// canonical encoding of x_name.c's x509_name_canon): the first four bytes, little-endian, of
// the SHA-1 of the Name's RDNs, each attribute value re-encoded as a UTF8String, lower-cased,
// with its spaces trimmed and runs of spaces folded, without the outer SEQUENCE header. Only
// ASCII values are folded as OpenSSL does; that is all the suite's names hold. It names the
// files of a CRL directory (sslcrldir, ssl_crl_dir: "<hash>.r0").
func NameHash(rawName []byte) uint32 {
	var rdns pkix.RDNSequence
	if _, err := asn1.Unmarshal(rawName, &rdns); err != nil {
		return 0
	}
	var canon []byte
	for _, rdn := range rdns {
		type atv struct {
			Type  asn1.ObjectIdentifier
			Value asn1.RawValue
		}
		set := make([]atv, 0, len(rdn))
		for _, a := range rdn {
			v := strings.ToLower(strings.Join(strings.Fields(fmt.Sprint(a.Value)), " "))
			set = append(set, atv{a.Type, asn1.RawValue{Tag: asn1.TagUTF8String, Bytes: []byte(v)}})
		}
		b, err := asn1.MarshalWithParams(set, "set")
		if err != nil {
			return 0
		}
		canon = append(canon, b...)
	}
	sum := sha1.Sum(canon)
	return binary.LittleEndian.Uint32(sum[:4])
}

// SSLSuiteRSAPSS adds to files the suite's server-rsapss.crt and server-rsapss.key: a
// self-signed certificate (CN common-name.pg-ssltest.test, O PGDG) whose key is an RSASSA-PSS
// key (RFC 4055: the rsassaPss public key algorithm), as src/test/ssl/sslfiles.mk makes it
// with `openssl genpkey -algorithm rsa-pss`. crypto/x509 cannot write such a key, so the
// openssl program does; the test fails without it.
func SSLSuiteRSAPSS(t testing.TB, files map[string][]byte) {
	t.Helper()
	openssl, err := exec.LookPath("openssl")
	if err != nil {
		t.Fatal("the RSA-PSS certificate needs the openssl program: ", err)
	}
	dir := t.TempDir()
	key, crt := filepath.Join(dir, "server-rsapss.key"), filepath.Join(dir, "server-rsapss.crt")
	for _, args := range [][]string{
		{"genpkey", "-algorithm", "rsa-pss", "-pkeyopt", "rsa_keygen_bits:2048", "-out", key},
		{"req", "-new", "-x509", "-key", key, "-subj", "/CN=common-name.pg-ssltest.test/O=PGDG", "-days", "3650", "-out", crt},
	} {
		if out, err := exec.Command(openssl, args...).CombinedOutput(); err != nil {
			t.Fatalf("openssl %s: %v: %s", args[0], err, out)
		}
	}
	for name, path := range map[string]string{"server-rsapss.key": key, "server-rsapss.crt": crt} {
		b, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		files[name] = b
	}
}
