package tlspolicy

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/rsa"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"io/fs"
	"math/big"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/youmark/pkcs8"

	"github.com/pgconnector/pgconnector/negotiation"
)

// libpq's rule for a key file's permissions (fe-secure-openssl.c, initialize_SSL).
func TestKeyFileAccessRefused(t *testing.T) {
	for _, tc := range []struct {
		uid     uint32
		mode    fs.FileMode
		refused bool
	}{
		{1000, 0o600, false}, {1000, 0o400, false}, {1000, 0o700, false},
		{1000, 0o640, true}, {1000, 0o604, true}, {1000, 0o610, true}, {1000, 0o601, true},
		{0, 0o600, false}, {0, 0o640, false}, {0, 0o440, false},
		{0, 0o660, true}, {0, 0o650, true}, {0, 0o644, true}, {0, 0o641, true},
	} {
		if got := KeyFileAccessRefused(tc.uid, tc.mode); got != tc.refused {
			t.Errorf("uid %d mode %#o: refused %v, want %v", tc.uid, tc.mode, got, tc.refused)
		}
	}
}

// keyPair is a self-signed certificate with its RSA key.
func keyPair(t testing.TB) ([]byte, *rsa.PrivateKey) {
	t.Helper()
	key, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "client"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour)}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), key
}

// The key formats libpq reads (PEM, DER, encrypted), with the messages of libpq's failures,
// never holding the password; the key files made by Go and, for the encrypted ones, by openssl.
func TestClientCertKeyFormats(t *testing.T) {
	dir := t.TempDir()
	certPEM, key := keyPair(t)
	_, other := keyPair(t)
	ecKey, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	const password = "dUmmyP^#+"
	pkcs1 := x509.MarshalPKCS1PrivateKey(key)
	p8, _ := x509.MarshalPKCS8PrivateKey(key)
	ecDER, _ := x509.MarshalECPrivateKey(ecKey)
	enc8, err := pkcs8.MarshalPrivateKey(key, []byte(password), nil)
	if err != nil {
		t.Fatal(err)
	}
	legacy, err := x509.EncryptPEMBlock(rand.Reader, "RSA PRIVATE KEY", pkcs1, []byte(password), x509.PEMCipherAES128)
	if err != nil {
		t.Fatal(err)
	}
	write := func(name string, data []byte) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, data, 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	certFile := write("client.crt", certPEM)
	pemOf := func(typ string, der []byte) []byte { return pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der}) }
	type keyCase struct {
		name, password, want string // want "": loads
		key                  []byte
	}
	cases := []keyCase{
		{name: "PEM PKCS#1", key: pemOf("RSA PRIVATE KEY", pkcs1)},
		{name: "PEM PKCS#8", key: pemOf("PRIVATE KEY", p8)},
		{name: "PEM after a certificate", key: append(append([]byte{}, certPEM...), pemOf("PRIVATE KEY", p8)...)},
		{name: "DER PKCS#1", key: pkcs1},
		{name: "DER PKCS#8", key: p8},
		{name: "encrypted PKCS#8 PEM", key: pemOf("ENCRYPTED PRIVATE KEY", enc8), password: password},
		{name: "encrypted PKCS#8 DER", key: enc8, password: password, want: "encrypted DER key: libpq reads an encrypted key in PEM only"},
		{name: "legacy encrypted PEM", key: pem.EncodeToMemory(legacy), password: password},
		{name: "encrypted PKCS#8 PEM, wrong password", key: pemOf("ENCRYPTED PRIVATE KEY", enc8), password: "wrong",
			want: `could not load private key file "KEY": bad decrypt`},
		{name: "legacy encrypted PEM, wrong password", key: pem.EncodeToMemory(legacy), password: "wrong-" + password,
			want: `could not load private key file "KEY": bad decrypt`},
		{name: "encrypted PKCS#8, no password", key: pemOf("ENCRYPTED PRIVATE KEY", enc8), want: "the key is encrypted and sslpassword is empty"},
		{name: "legacy encrypted PEM, no password", key: pem.EncodeToMemory(legacy), want: "the key is encrypted and sslpassword is empty"},
		{name: "another key", key: pemOf("PRIVATE KEY", mustPKCS8(t, other)), want: `certificate does not match private key file "KEY": key values mismatch`},
		{name: "EC key for an RSA certificate", key: pemOf("EC PRIVATE KEY", ecDER), want: "key values mismatch"},
		{name: "not a key", key: []byte("hello\n"), want: `could not load private key file "KEY": no PEM private key found`},
	}
	if _, err := exec.LookPath("openssl"); err == nil {
		pkcs1File := write("pkcs1.pem", pemOf("RSA PRIVATE KEY", pkcs1))
		run := func(args ...string) []byte {
			out, err := exec.Command("openssl", args...).Output()
			if err != nil {
				t.Fatalf("openssl %v: %v", args, err)
			}
			return out
		}
		pass := "pass:" + password
		cases = append(cases,
			keyCase{name: "openssl legacy -aes128", password: password,
				key: run("rsa", "-in", pkcs1File, "-traditional", "-aes128", "-passout", pass)},
			keyCase{name: "openssl pkcs8 -v2 aes-128-cbc", password: password,
				key: run("pkcs8", "-topk8", "-in", pkcs1File, "-v2", "aes-128-cbc", "-passout", pass)},
			keyCase{name: "openssl rsa -outform DER -aes128", password: password, want: "encrypted DER key",
				key: run("rsa", "-in", pkcs1File, "-outform", "DER", "-aes128", "-passout", pass)},
			keyCase{name: "openssl pkcs8 scrypt", password: password,
				key: run("pkcs8", "-topk8", "-in", pkcs1File, "-scrypt", "-passout", pass)},
		)
	}
	for i, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			keyFile := write("key"+string(rune('a'+i)), tc.key)
			c := &ClientCert{CertFile: certFile, KeyFile: keyFile, Password: tc.password}
			cert, err := c.Load()
			want := strings.ReplaceAll(tc.want, "KEY", keyFile)
			if tc.want == "" {
				if err != nil || cert == nil || len(cert.Certificate) != 1 {
					t.Fatalf("Load: %v, %v", cert, err)
				}
				return
			}
			var tr *negotiation.TLSRefusedError
			if err == nil || !strings.Contains(err.Error(), want) || !errors.As(err, &tr) {
				t.Fatalf("Load: %v (%T), want a TLSRefusedError with %q", err, err, want)
			}
			if tc.password != "" && strings.Contains(err.Error(), tc.password) {
				t.Errorf("%q holds the password", err)
			}
		})
	}
}

func mustPKCS8(t *testing.T, key any) []byte {
	der, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	return der
}

// The files as libpq finds them: no certificate file is no certificate (the key unread); a
// certificate without its key, a key that is not a regular file or that group or others may
// read are refused with libpq's messages; a replaced certificate is the one sent next.
func TestClientCertFiles(t *testing.T) {
	dir := t.TempDir()
	certPEM, key := keyPair(t)
	keyPEM := pem.EncodeToMemory(&pem.Block{Type: "RSA PRIVATE KEY", Bytes: x509.MarshalPKCS1PrivateKey(key)})
	certFile, keyFile := filepath.Join(dir, "c.crt"), filepath.Join(dir, "c.key")
	missing := filepath.Join(dir, "missing")

	c := &ClientCert{CertFile: missing, KeyFile: missing}
	if cert, err := c.Load(); cert != nil || err != nil {
		t.Fatalf("no certificate file: %v, %v", cert, err)
	}
	if cert, err := c.GetClientCertificate(nil); err != nil || len(cert.Certificate) != 0 {
		t.Fatalf("no certificate file: GetClientCertificate %v, %v, want an empty certificate", cert, err)
	}
	if cert, err := (&ClientCert{CertFile: filepath.Join(dir, "missing", "x"), KeyFile: missing}).Load(); cert != nil || err != nil {
		t.Fatalf("ENOTDIR: %v, %v", cert, err)
	}
	if err := os.WriteFile(certFile, certPEM, 0o644); err != nil {
		t.Fatal(err)
	}
	check := func(name, want string) {
		t.Helper()
		_, err := (&ClientCert{CertFile: certFile, KeyFile: keyFile}).Load()
		if want == "" {
			if err != nil {
				t.Errorf("%s: %v", name, err)
			}
			return
		}
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%s: %v, want %q", name, err, want)
		}
	}
	check("no key file", `certificate present, but not private key file "`+keyFile+`"`)
	if err := os.Mkdir(keyFile, 0o700); err != nil {
		t.Fatal(err)
	}
	check("a directory", `private key file "`+keyFile+`" is not a regular file`)
	os.Remove(keyFile)
	if err := os.WriteFile(keyFile, keyPEM, 0o600); err != nil {
		t.Fatal(err)
	}
	check("0600", "")
	uid := uint32(os.Getuid())
	for _, mode := range []fs.FileMode{0o640, 0o644, 0o660, 0o604, 0o400} {
		if err := os.Chmod(keyFile, mode); err != nil {
			t.Fatal(err)
		}
		want := ""
		if KeyFileAccessRefused(uid, mode) {
			want = `private key file "` + keyFile + `" has group or world access; ` + KeyAccessHint
		}
		check(mode.String(), want)
	}
	if uid == 0 { // a file of another user: 0640 is refused to root too
		if err := os.Chown(keyFile, 65534, 65534); err != nil {
			t.Fatal(err)
		}
		os.Chmod(keyFile, 0o640)
		check("0640 of uid 65534", "has group or world access")
		os.Chmod(keyFile, 0o600)
		check("0600 of uid 65534", "")
	}
	os.Chmod(keyFile, 0o600)

	// Rotation: the files replaced are read at the next load.
	c = &ClientCert{CertFile: certFile, KeyFile: keyFile}
	first, err := c.Load()
	if err != nil {
		t.Fatal(err)
	}
	again, _ := c.Load()
	if again != first {
		t.Error("the same files were parsed again")
	}
	certPEM2, key2 := keyPair(t)
	os.WriteFile(certFile, certPEM2, 0o644)
	os.WriteFile(keyFile, pem.EncodeToMemory(&pem.Block{Type: "RSA PRIVATE KEY", Bytes: x509.MarshalPKCS1PrivateKey(key2)}), 0o600)
	second, err := c.GetClientCertificate(&tls.CertificateRequestInfo{})
	if err != nil || second == first || !second.Leaf.PublicKey.(*rsa.PublicKey).Equal(&key2.PublicKey) {
		t.Fatalf("after rotation: %v, %v", second, err)
	}
}

// What a connection pays for the client certificate: the two files read again (and the key's
// permissions checked), the parse kept while their content is the same.
func BenchmarkClientCertLoad(b *testing.B) {
	dir := b.TempDir()
	certPEM, key := keyPair(b)
	certFile, keyFile := filepath.Join(dir, "c.crt"), filepath.Join(dir, "c.key")
	os.WriteFile(certFile, certPEM, 0o644)
	os.WriteFile(keyFile, pem.EncodeToMemory(&pem.Block{Type: "RSA PRIVATE KEY", Bytes: x509.MarshalPKCS1PrivateKey(key)}), 0o600)
	c := &ClientCert{CertFile: certFile, KeyFile: keyFile}
	b.ReportAllocs()
	for b.Loop() {
		if _, err := c.Load(); err != nil {
			b.Fatal(err)
		}
	}
}

// The loader of any ClientCert is told from an application's function.
func TestIsClientCertLoader(t *testing.T) {
	a, b := &ClientCert{CertFile: "a"}, &ClientCert{CertFile: "b"}
	if !IsClientCertLoader(a.GetClientCertificate) || !IsClientCertLoader(b.GetClientCertificate) {
		t.Error("a ClientCert's loader not recognised")
	}
	app := func(*tls.CertificateRequestInfo) (*tls.Certificate, error) { return nil, nil }
	if IsClientCertLoader(app) || IsClientCertLoader(nil) {
		t.Error("an application's function (or nil) taken for the loader")
	}
}

// The key file is a local file, read as untrusted input: parseKey never panics, and a key it
// returns is usable (a signer with a public key).
func FuzzParseKey(f *testing.F) {
	f.Add([]byte("-----BEGIN PRIVATE KEY-----\nMIGHAgEAMBMGByqGSM49AgEGCCqGSM49AwEHBG0wawIBAQQg\n-----END PRIVATE KEY-----\n"), []byte("pw"))
	f.Add([]byte("-----BEGIN ENCRYPTED PRIVATE KEY-----\nMIIBvTBXBgkqhkiG9w0BBQ0wSjApBgkqhkiG9w0BBQwwHAQI\n-----END ENCRYPTED PRIVATE KEY-----\n"), []byte("pw"))
	f.Add([]byte{0x30, 0x81, 0x87, 0x02, 0x01, 0x00}, []byte(nil))
	f.Fuzz(func(t *testing.T, data, password []byte) {
		key, err := parseKey(data, password)
		if err == nil && (key == nil || key.Public() == nil) {
			t.Fatal("a key without a public key and no error")
		}
	})
}
