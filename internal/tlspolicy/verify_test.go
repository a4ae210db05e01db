package tlspolicy

import (
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/asn1"
	"encoding/pem"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/pgconnector/pgconnector/internal/testpki"
)

// writeRoots writes certs as one PEM root file, padded with newlines to size bytes when size is
// larger.
func writeRoots(t *testing.T, path string, size int, certs ...*x509.Certificate) {
	t.Helper()
	var b []byte
	for _, c := range certs {
		b = append(b, testpki.PEMCert(c)...)
	}
	for len(b) < size {
		b = append(b, '\n')
	}
	if err := os.WriteFile(path, b, 0o600); err != nil {
		t.Fatal(err)
	}
}

// The chain must end at a self-signed certificate of the root file, as "openssl verify -CAfile"
// (OpenSSL without X509_V_FLAG_PARTIAL_CHAIN) decides: the same verdict, the same reason.
func TestChainAnchorsMatchOpenSSL(t *testing.T) {
	if _, err := exec.LookPath("openssl"); err != nil {
		t.Fatal("openssl is not in $PATH: scripts/install-deps.sh installs it")
	}
	p := testpki.New(t)
	other := testpki.New(t)
	self := testpki.Issue(t, &x509.Certificate{Subject: pkix.Name{CommonName: "localhost"}, DNSNames: []string{"localhost"},
		KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}}, nil, testpki.NewKey(t))
	junk := testpki.JunkChain(t, 120)
	junkPeer := append([]*x509.Certificate{junk.Leaf.Cert}, junk.List...)
	// A loop: A by B, B by A, A by the root. OpenSSL's chain takes A twice (server, A by B, B by
	// A, A by root, root); crypto/x509 never takes a subject and key twice and accepts the
	// shorter path (server, A by root, root), which skips B: B's extensions are checked on
	// OpenSSL's chain. B named A: a key rollover, A by A's other key and back.
	loopFrom := func(root *testpki.CA, nameB string, b *x509.Certificate) []*x509.Certificate {
		ka, kb := testpki.NewKey(t), testpki.NewKey(t)
		nameA := pkix.Name{CommonName: "Loop A", Organization: []string{"pgconnector"}}
		aByRoot := testpki.Issue(t, &x509.Certificate{Subject: nameA, KeyUsage: x509.KeyUsageCertSign,
			BasicConstraintsValid: true, IsCA: true}, root, ka)
		b.Subject, b.KeyUsage, b.BasicConstraintsValid, b.IsCA = pkix.Name{CommonName: nameB, Organization: []string{"pgconnector"}},
			x509.KeyUsageCertSign, true, true
		// An authorityKeyIdentifier of the issuer's key, which crypto/x509 leaves out when the
		// names are equal (it would make a rollover's certificates self-signed).
		b.AuthorityKeyId = aByRoot.Cert.SubjectKeyId
		bByA := testpki.Issue(t, b, &aByRoot, kb)
		aByB := testpki.Issue(t, &x509.Certificate{Subject: nameA, KeyUsage: x509.KeyUsageCertSign,
			BasicConstraintsValid: true, IsCA: true, AuthorityKeyId: bByA.Cert.SubjectKeyId}, &bByA, ka)
		leaf := testpki.Issue(t, &x509.Certificate{Subject: pkix.Name{CommonName: "localhost"}, DNSNames: []string{"localhost"},
			KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}}, &aByRoot, testpki.NewKey(t))
		return []*x509.Certificate{leaf.Cert, aByB.Cert, bByA.Cert, aByRoot.Cert}
	}
	loop := func(b *x509.Certificate) []*x509.Certificate { return loopFrom(&p.Root, "Loop B", b) }
	// A root whose path length allows one CA below it.
	rootLen1 := testpki.Issue(t, &x509.Certificate{Subject: pkix.Name{CommonName: "Root of path length 1"},
		KeyUsage: x509.KeyUsageCertSign, BasicConstraintsValid: true, IsCA: true, MaxPathLen: 1}, nil, testpki.NewKey(t))
	// The root's name and key again, self-signed, for clients only.
	clientRoot := testpki.Issue(t, &x509.Certificate{Subject: p.Root.Cert.Subject, KeyUsage: x509.KeyUsageCertSign,
		BasicConstraintsValid: true, IsCA: true, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}}, nil, p.Root.Key)
	// A server certificate for clients only, by an intermediate that is not a CA.
	notCA := testpki.Issue(t, &x509.Certificate{Subject: pkix.Name{CommonName: "Not a CA"}, KeyUsage: x509.KeyUsageCertSign,
		BasicConstraintsValid: true}, &p.Root, testpki.NewKey(t))
	clientByNotCA := testpki.Issue(t, &x509.Certificate{Subject: pkix.Name{CommonName: "localhost"}, DNSNames: []string{"localhost"},
		KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}}, &notCA, testpki.NewKey(t))
	// An intermediate for any purpose (anyExtendedKeyUsage alone), and its server certificate.
	anyInter := testpki.Issue(t, &x509.Certificate{Subject: pkix.Name{CommonName: "Any purpose"}, KeyUsage: x509.KeyUsageCertSign,
		BasicConstraintsValid: true, IsCA: true, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageAny}}, &p.Root, testpki.NewKey(t))
	// An intermediate with a critical Netscape certificate type (SSL CA): OpenSSL supports it,
	// crypto/x509 does not. Under the root, and under an issuer that is not a CA.
	nsType := []pkix.Extension{{Id: []int{2, 16, 840, 1, 113730, 1, 1}, Critical: true, Value: []byte{3, 2, 2, 4}}}
	nsInter := testpki.Issue(t, &x509.Certificate{Subject: pkix.Name{CommonName: "Netscape type"}, KeyUsage: x509.KeyUsageCertSign,
		BasicConstraintsValid: true, IsCA: true, ExtraExtensions: nsType}, &p.Root, testpki.NewKey(t))
	nsUnderNotCA := testpki.Issue(t, &x509.Certificate{Subject: pkix.Name{CommonName: "Netscape type"}, KeyUsage: x509.KeyUsageCertSign,
		BasicConstraintsValid: true, IsCA: true, ExtraExtensions: nsType}, &notCA, testpki.NewKey(t))
	serverUnder := func(issuer *testpki.CA, extra ...pkix.Extension) *x509.Certificate {
		return testpki.Issue(t, &x509.Certificate{Subject: pkix.Name{CommonName: "localhost"}, DNSNames: []string{"localhost"},
			KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}, ExtraExtensions: extra},
			issuer, testpki.NewKey(t)).Cert
	}
	badSignature := func(c *x509.Certificate) *x509.Certificate {
		der := slices.Clone(c.Raw)
		der[len(der)-1] ^= 1 // the signature's last byte
		bad, err := x509.ParseCertificate(der)
		if err != nil {
			t.Fatal(err)
		}
		return bad
	}
	// A version 1 root (no extensions, so no basicConstraints: OpenSSL's check_ca lets an anchor
	// be so), made by openssl as crypto/x509 makes only version 3, and a chain under it.
	v1Root := opensslV1Root(t, t.TempDir())
	v1Inter := testpki.Issue(t, &x509.Certificate{Subject: pkix.Name{CommonName: "Under a version 1 root"}, KeyUsage: x509.KeyUsageCertSign,
		BasicConstraintsValid: true, IsCA: true}, &v1Root, testpki.NewKey(t))
	anyLeaf := testpki.Issue(t, &x509.Certificate{Subject: pkix.Name{CommonName: "localhost"}, DNSNames: []string{"localhost"},
		KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}}, &anyInter, testpki.NewKey(t))
	dir := t.TempDir()
	for _, tt := range []struct {
		name   string
		file   []*x509.Certificate
		peer   []*x509.Certificate
		reason string // "" for verified
	}{
		{"root in file, server sends leaf and intermediate", []*x509.Certificate{p.Root.Cert}, []*x509.Certificate{p.Leaf.Cert, p.Inter.Cert}, ""},
		{"root and intermediate in file, server sends leaf", []*x509.Certificate{p.Inter.Cert, p.Root.Cert}, []*x509.Certificate{p.Leaf.Cert}, ""},
		{"intermediate only in file", []*x509.Certificate{p.Inter.Cert}, []*x509.Certificate{p.Leaf.Cert}, "unable to get issuer certificate"},
		{"intermediate only in file, server sends its chain", []*x509.Certificate{p.Inter.Cert}, []*x509.Certificate{p.Leaf.Cert, p.Inter.Cert}, "unable to get issuer certificate"},
		{"intermediate only in file, server sends the root too", []*x509.Certificate{p.Inter.Cert}, []*x509.Certificate{p.Leaf.Cert, p.Inter.Cert, p.Root.Cert}, "unable to get issuer certificate"},
		{"root in file, server sends leaf only", []*x509.Certificate{p.Root.Cert}, []*x509.Certificate{p.Leaf.Cert}, "unable to get local issuer certificate"},
		{"another root", []*x509.Certificate{other.Root.Cert}, []*x509.Certificate{p.Leaf.Cert, p.Inter.Cert}, "unable to get local issuer certificate"},
		{"another root, server sends its root", []*x509.Certificate{other.Root.Cert}, []*x509.Certificate{p.Leaf.Cert, p.Inter.Cert, p.Root.Cert}, "self-signed certificate in certificate chain"},
		{"self-signed server certificate not in file", []*x509.Certificate{p.Root.Cert}, []*x509.Certificate{self.Cert}, "self-signed certificate"},
		{"self-signed server certificate in file", []*x509.Certificate{self.Cert}, []*x509.Certificate{self.Cert}, ""},
		{"leaf itself in file", []*x509.Certificate{p.Leaf.Cert}, []*x509.Certificate{p.Leaf.Cert, p.Inter.Cert}, "unable to get local issuer certificate"},
		{"120 junk certificates chaining to each other", []*x509.Certificate{p.Root.Cert}, junkPeer, "certificate chain too long"},
		{"junk certificates, an anchor of their name", []*x509.Certificate{junk.Anchor}, junkPeer, "certificate signature failure"},
		{"server certificate only for clients", []*x509.Certificate{p.Root.Cert}, []*x509.Certificate{testpki.Issue(t, &x509.Certificate{
			Subject: pkix.Name{CommonName: "localhost"}, DNSNames: []string{"localhost"}, KeyUsage: x509.KeyUsageDigitalSignature,
			ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}}, &p.Inter, testpki.NewKey(t)).Cert, p.Inter.Cert}, "unsuitable certificate purpose"},
		{"a loop through A twice", []*x509.Certificate{p.Root.Cert}, loop(&x509.Certificate{}), ""},
		{"a loop, B only for clients", []*x509.Certificate{p.Root.Cert},
			loop(&x509.Certificate{ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}}), "unsuitable certificate purpose"},
		{"a loop, B for servers", []*x509.Certificate{p.Root.Cert},
			loop(&x509.Certificate{ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}}), ""},
		{"a loop, B with a path length of 0", []*x509.Certificate{p.Root.Cert},
			loop(&x509.Certificate{MaxPathLen: 0, MaxPathLenZero: true}), "path length constraint exceeded"},
		{"a loop, B with a path length of 1", []*x509.Certificate{p.Root.Cert},
			loop(&x509.Certificate{MaxPathLen: 1}), ""},
		{"a loop, B with an unknown critical extension", []*x509.Certificate{p.Root.Cert},
			loop(&x509.Certificate{ExtraExtensions: []pkix.Extension{{Id: []int{1, 3, 6, 1, 4, 1, 55555, 1}, Critical: true, Value: []byte{5, 0}}}}),
			"unhandled critical extension"},
		{"a key rollover loop, a root of path length 1", []*x509.Certificate{rootLen1.Cert},
			loopFrom(&rootLen1, "Loop A", &x509.Certificate{}), ""},
		{"the root twice, the first for clients only", []*x509.Certificate{clientRoot.Cert, p.Root.Cert},
			[]*x509.Certificate{p.Leaf.Cert, p.Inter.Cert}, "unsuitable certificate purpose"},
		{"server certificate for clients by a CA that is not one", []*x509.Certificate{p.Root.Cert},
			[]*x509.Certificate{clientByNotCA.Cert, notCA.Cert}, "unsuitable certificate purpose"},
		{"an intermediate for any purpose", []*x509.Certificate{p.Root.Cert},
			[]*x509.Certificate{anyLeaf.Cert, anyInter.Cert}, "unsuitable certificate purpose"},
		{"a bad server signature, an intermediate with a critical Netscape type", []*x509.Certificate{p.Root.Cert},
			[]*x509.Certificate{badSignature(serverUnder(&nsInter)), nsInter.Cert}, "certificate signature failure"},
		{"an intermediate with a critical Netscape type under one that is not a CA", []*x509.Certificate{p.Root.Cert},
			[]*x509.Certificate{serverUnder(&nsUnderNotCA), nsUnderNotCA.Cert, notCA.Cert}, "invalid CA certificate"},
		{"a version 1 root", []*x509.Certificate{v1Root.Cert},
			[]*x509.Certificate{serverUnder(&v1Inter), v1Inter.Cert}, ""},
		{"a server certificate of Netscape type SSL client", []*x509.Certificate{p.Root.Cert},
			[]*x509.Certificate{serverUnder(&p.Inter, pkix.Extension{Id: []int{2, 16, 840, 1, 113730, 1, 1}, Value: []byte{3, 2, 7, 0x80}}), p.Inter.Cert},
			"unsuitable certificate purpose"},
		{"a server certificate of Netscape type SSL server", []*x509.Certificate{p.Root.Cert},
			[]*x509.Certificate{serverUnder(&p.Inter, pkix.Extension{Id: []int{2, 16, 840, 1, 113730, 1, 1}, Value: []byte{3, 2, 6, 0x40}}), p.Inter.Cert}, ""},
		{"a server certificate with an empty extendedKeyUsage", []*x509.Certificate{p.Root.Cert},
			[]*x509.Certificate{serverUnder(&p.Inter, pkix.Extension{Id: []int{2, 5, 29, 37}, Value: []byte{0x30, 0}}), p.Inter.Cert},
			"unsuitable certificate purpose"},
	} {
		rootFile := filepath.Join(dir, "root.pem")
		writeRoots(t, rootFile, 0, tt.file...)
		chk := &ServerCheck{RootFile: rootFile, Verify: true}
		err := chk.VerifyConnection(tls.ConnectionState{PeerCertificates: tt.peer})
		got := ""
		if err != nil {
			msg := strings.TrimPrefix(err.Error(), "certificate verify failed: ")
			got, _, _ = strings.Cut(msg, " (certificate at depth")
		}
		if got != tt.reason {
			t.Errorf("%s: %v, want %q", tt.name, err, tt.reason)
		}
		// OpenSSL beside: the leaf, the server's other certificates untrusted.
		args := []string{"verify", "-purpose", "sslserver", "-CAfile", rootFile}
		if len(tt.peer) > 1 {
			untrusted := filepath.Join(dir, "untrusted.pem")
			writeRoots(t, untrusted, 0, tt.peer[1:]...)
			args = append(args, "-untrusted", untrusted)
		}
		leaf := filepath.Join(dir, "leaf.pem")
		writeRoots(t, leaf, 0, tt.peer[0])
		out, oerr := exec.Command("openssl", append(args, leaf)...).CombinedOutput()
		ossl := ""
		if oerr != nil {
			ossl = strings.TrimSpace(string(out))
			for line := range strings.Lines(string(out)) {
				if _, r, ok := strings.Cut(line, " depth lookup: "); ok {
					ossl = strings.TrimSpace(r)
					break
				}
			}
		}
		if ossl != tt.reason {
			t.Errorf("%s: openssl says %q, the table %q", tt.name, ossl, tt.reason)
		}
	}
}

// opensslV1Root is a self-signed version 1 certificate (CN "Version 1 Root", a P-256 key) that
// openssl makes in dir, with its key.
func opensslV1Root(t *testing.T, dir string) testpki.CA {
	t.Helper()
	key, csr, root := filepath.Join(dir, "v1.key"), filepath.Join(dir, "v1.csr"), filepath.Join(dir, "v1.pem")
	for _, args := range [][]string{
		{"ecparam", "-name", "prime256v1", "-genkey", "-noout", "-out", key},
		{"req", "-new", "-key", key, "-subj", "/CN=Version 1 Root", "-out", csr},
		{"x509", "-req", "-in", csr, "-signkey", key, "-days", "2", "-out", root},
	} {
		if out, err := exec.Command("openssl", args...).CombinedOutput(); err != nil {
			t.Fatalf("openssl %s: %v\n%s", args[0], err, out)
		}
	}
	read := func(path string) []byte {
		b, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		blk, _ := pem.Decode(b)
		if blk == nil {
			t.Fatalf("%s: no PEM block", path)
		}
		return blk.Bytes
	}
	c, err := x509.ParseCertificate(read(root))
	if err != nil {
		t.Fatal(err)
	}
	if c.Version != 1 {
		t.Fatalf("openssl made a version %d certificate, want 1", c.Version)
	}
	k, err := x509.ParseECPrivateKey(read(key))
	if err != nil {
		t.Fatal(err)
	}
	return testpki.CA{Cert: c, Key: k}
}

// A wrong root is a chain failure even under verify-full with a host name the certificate does
// not name: the chain is checked first, as libpq (OpenSSL in the handshake, the name after it).
func TestChainBeforeHostName(t *testing.T) {
	p, other := testpki.New(t), testpki.New(t)
	rootFile := filepath.Join(t.TempDir(), "root.pem")
	writeRoots(t, rootFile, 0, other.Root.Cert)
	chk := &ServerCheck{RootFile: rootFile, Verify: true, Host: "elsewhere.example"}
	err := chk.VerifyConnection(tls.ConnectionState{PeerCertificates: []*x509.Certificate{p.Leaf.Cert, p.Inter.Cert}})
	if err == nil || !strings.HasPrefix(err.Error(), "certificate verify failed: unable to get local issuer certificate") {
		t.Errorf("wrong root and wrong name: %v", err)
	}
	writeRoots(t, rootFile, 0, p.Root.Cert)
	err = chk.VerifyConnection(tls.ConnectionState{PeerCertificates: []*x509.Certificate{p.Leaf.Cert, p.Inter.Cert}})
	if err == nil || err.Error() != `server certificate for "localhost" does not match host name "elsewhere.example"` {
		t.Errorf("right root, wrong name: %v", err)
	}
}

// libpq's host name rules (fe-secure-common.c, fe-secure-openssl.c), with the cases of
// src/test/ssl/t/001_ssltests.pl's certificates (server-cn-only, server-multiple-alt-names,
// server-ip-alt-names, server-cn-and-ip-alt-names, server-ip-cn-only, server-ip-in-dnsname,
// server-no-names) and libpq's messages.
func TestHostNameAsLibpq(t *testing.T) {
	ca := testpki.NewCA(t)
	san := func(gns ...[]byte) []pkix.Extension {
		v, _ := asn1.Marshal(asn1.RawValue{Class: asn1.ClassUniversal, Tag: asn1.TagSequence, IsCompound: true, Bytes: joinBytes(gns)})
		return []pkix.Extension{{Id: oidSAN, Value: v}}
	}
	ipName := func(s string) []byte {
		ip := net.ParseIP(s)
		if v4 := ip.To4(); v4 != nil {
			ip = v4
		}
		gn, _ := asn1.Marshal(asn1.RawValue{Class: asn1.ClassContextSpecific, Tag: tagIPAddress, Bytes: ip})
		return gn
	}
	cert := func(cn string, ext []pkix.Extension) *x509.Certificate {
		return testpki.Issue(t, &x509.Certificate{Subject: pkix.Name{CommonName: cn}, ExtraExtensions: ext}, &ca, testpki.NewKey(t)).Cert
	}
	cnOnly := cert("common-name.pg-ssltest.test", nil)
	multi := cert("", san(testpki.DNSName("dns1.alt-name.pg-ssltest.test"), testpki.DNSName("dns2.alt-name.pg-ssltest.test"), testpki.DNSName("*.wildcard.pg-ssltest.test")))
	ipAlt := cert("", san(ipName("192.0.2.1"), ipName("2001:db8::1")))
	cnAndIP := cert("common-name.pg-ssltest.test", san(ipName("192.0.2.1"), ipName("2001:db8::1")))
	cnAndDNS := cert("common-name.pg-ssltest.test", san(testpki.DNSName("dns1.alt-name.pg-ssltest.test"), testpki.DNSName("dns2.alt-name.pg-ssltest.test")))
	ipCN := cert("192.0.2.1", nil)
	ipInDNS := cert("", san(testpki.DNSName("192.0.2.1")))
	ipCNAndDNS := cert("192.0.2.1", san(testpki.DNSName("dns1.alt-name.pg-ssltest.test")))
	noNames := cert("", nil)
	nul := cert("", san(testpki.DNSName("a\x00.example")))
	for _, tt := range []struct {
		cert *x509.Certificate
		host string
		want string // "" for a match
	}{
		{cnOnly, "common-name.pg-ssltest.test", ""},
		{cnOnly, "COMMON-NAME.pg-ssltest.TEST", ""},
		{cnOnly, "wronghost.test", `server certificate for "common-name.pg-ssltest.test" does not match host name "wronghost.test"`},
		{multi, "dns2.alt-name.pg-ssltest.test", ""},
		{multi, "foo.wildcard.pg-ssltest.test", ""},
		{multi, "deep.subdomain.wildcard.pg-ssltest.test", `server certificate for "dns1.alt-name.pg-ssltest.test" (and 2 other names) does not match host name "deep.subdomain.wildcard.pg-ssltest.test"`},
		{multi, "wildcard.pg-ssltest.test", `server certificate for "dns1.alt-name.pg-ssltest.test" (and 2 other names) does not match host name "wildcard.pg-ssltest.test"`},
		{ipAlt, "192.0.2.1", ""},
		{ipAlt, "192.000.002.001", ""},
		{ipAlt, "0xc0.0.2.1", ""},
		{ipAlt, "3221225985", ""},
		{ipAlt, "192.0.2.2", `server certificate for "192.0.2.1" (and 1 other name) does not match host name "192.0.2.2"`},
		{ipAlt, "192.0.2.1/32", `server certificate for "192.0.2.1" (and 1 other name) does not match host name "192.0.2.1/32"`},
		{ipAlt, "2001:DB8::1", ""},
		{ipAlt, "2001:db8:0:0:0:0:0:1", ""},
		{ipAlt, "2001:db8::0.0.0.1", ""},
		{ipAlt, "::1", `server certificate for "192.0.2.1" (and 1 other name) does not match host name "::1"`},
		{ipAlt, "2001:DB8::1/128", `server certificate for "192.0.2.1" (and 1 other name) does not match host name "2001:DB8::1/128"`},
		{cnAndIP, "common-name.pg-ssltest.test", ""},
		{cnAndIP, "192.0.2.1", ""},
		{cnAndIP, "192.0.2.9", `server certificate for "192.0.2.1" (and 1 other name) does not match host name "192.0.2.9"`},
		{cnAndDNS, "common-name.pg-ssltest.test", `server certificate for "dns1.alt-name.pg-ssltest.test" (and 1 other name) does not match host name "common-name.pg-ssltest.test"`},
		{ipCN, "192.0.2.1", ""},
		{ipCN, "192.000.002.001", `server certificate for "192.0.2.1" does not match host name "192.000.002.001"`},
		{ipInDNS, "192.0.2.1", ""},
		{ipCNAndDNS, "192.0.2.1", ""},
		{ipCNAndDNS, "dns1.alt-name.pg-ssltest.test", ""},
		{noNames, "common-name.pg-ssltest.test", "could not get server's host name from server certificate"},
		{nul, "a", "SSL certificate's name contains embedded null"},
	} {
		err := checkHostName(tt.cert, tt.host)
		if tt.want == "" && err != nil || tt.want != "" && (err == nil || err.Error() != tt.want) {
			t.Errorf("%s against %q: %v, want %q", tt.host, tt.cert.Subject, err, tt.want)
		}
	}
}

func joinBytes(bs [][]byte) []byte {
	var out []byte
	for _, b := range bs {
		out = append(out, b...)
	}
	return out
}

// glibc's inet_aton forms, and pg_inet_net_ntop's IPv6 text.
func TestInetForms(t *testing.T) {
	for s, want := range map[string]string{
		"192.0.2.1": "192.0.2.1", "192.000.002.001": "192.0.2.1", "0300.0.2.1": "192.0.2.1", "192.0.513": "192.0.2.1",
		"192.513": "192.0.2.1", "3221225985": "192.0.2.1", "0xC0000201": "192.0.2.1", "192.0.2.1 junk": "192.0.2.1",
		"192.0.2.256": "", "08.0.0.1": "", "1.2.3.4.": "", ".1.2.3": "", "0x": "", "4294967296": "", "a.b.c.d": "", "": "",
	} {
		a, ok := inetAton(s)
		got := ""
		if ok {
			got = net.IP(a[:]).String()
		}
		if got != want {
			t.Errorf("inetAton(%q) = %q, want %q", s, got, want)
		}
	}
	for s, want := range map[string]string{
		"2001:db8::1": "2001:db8::1", "::": "::", "::1": "::1", "::2": "::2", "::1.2.3.4": "::1.2.3.4", "::ffff:192.0.2.1": "::ffff:192.0.2.1",
		"1:0:0:2:0:0:0:3": "1:0:0:2::3", "1:0:2:0:3:0:4:0": "1:0:2:0:3:0:4:0",
	} {
		a, ok := inetPton6(s)
		if !ok || ntop6(a) != want {
			t.Errorf("ntop6(%q) = %q, %v, want %q", s, ntop6(a), ok, want)
		}
	}
	for _, s := range []string{"fe80::1%eth0", "[::1]", "1.2.3.4", "::1/128"} {
		if _, ok := inetPton6(s); ok {
			t.Errorf("inetPton6(%q) accepted", s)
		}
	}
}

// A root file replaced in place with the same size and modification time (cp -p, rsync
// --inplace -t, tar) is read again: a CA removed from it is no longer trusted.
func TestRootCacheNoticesReplacementInPlace(t *testing.T) {
	for _, settled := range []bool{false, true} {
		if settled {
			old := settleTime
			settleTime = 0 // the fast path taken at once: the ctime alone tells the files apart
			t.Cleanup(func() { settleTime = old })
		}
		p, other := testpki.New(t), testpki.New(t)
		path := filepath.Join(t.TempDir(), "root.pem")
		writeRoots(t, path, 4096, p.Root.Cert)
		fi, err := os.Stat(path)
		if err != nil {
			t.Fatal(err)
		}
		chk := &ServerCheck{RootFile: path, Verify: true, Cache: &RootCache{}}
		cs := tls.ConnectionState{PeerCertificates: []*x509.Certificate{p.Leaf.Cert, p.Inter.Cert}}
		if err := chk.VerifyConnection(cs); err != nil {
			t.Fatal(err)
		}
		time.Sleep(20 * time.Millisecond) // past the file system's clock tick
		f, err := os.OpenFile(path, os.O_WRONLY, 0)
		if err != nil {
			t.Fatal(err)
		}
		b := testpki.PEMCert(other.Root.Cert)
		for len(b) < 4096 {
			b = append(b, '\n')
		}
		if _, err := f.WriteAt(b, 0); err != nil {
			t.Fatal(err)
		}
		f.Close()
		if err := os.Chtimes(path, fi.ModTime(), fi.ModTime()); err != nil {
			t.Fatal(err)
		}
		if fi2, _ := os.Stat(path); fi2.Size() != fi.Size() || !fi2.ModTime().Equal(fi.ModTime()) {
			t.Fatal("the file's size or mtime changed")
		}
		if err := chk.VerifyConnection(cs); err == nil {
			t.Errorf("settled %v: the CA removed from the file is still trusted", settled)
		}
	}
}
