package testpki

import (
	"bytes"
	"crypto/x509"
	"encoding/pem"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// TestSSLSuiteFilesAsOpenSSLReadsThem checks the suite's files with the openssl program: the
// CRLs are version 1 and verify against their issuer, the CRL directory names are OpenSSL's
// subject hashes, and the server chain verifies to the root.
func TestSSLSuiteFilesAsOpenSSLReadsThem(t *testing.T) {
	openssl, err := exec.LookPath("openssl")
	if err != nil {
		t.Fatal("openssl is needed to check the files: ", err)
	}
	files := SSLSuiteFiles(t)
	dir := t.TempDir()
	for name, data := range files {
		p := filepath.Join(dir, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o700); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, data, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	run := func(args ...string) string {
		out, err := exec.Command(openssl, args...).CombinedOutput()
		if err != nil {
			t.Fatalf("openssl %s: %v: %s", strings.Join(args, " "), err, out)
		}
		return string(out)
	}
	for _, c := range []struct{ crl, ca string }{{"server.crl", "server_ca.crt"}, {"client.crl", "client_ca.crt"}, {"root.crl", "root_ca.crt"}} {
		out := run("crl", "-in", filepath.Join(dir, c.crl), "-noout", "-text", "-CAfile", filepath.Join(dir, c.ca))
		if !strings.Contains(out, "Version 1 (0x0)") || !strings.Contains(out, "verify OK") {
			t.Errorf("%s: want a version 1 CRL that verifies, openssl says:\n%s", c.crl, out)
		}
		hash := strings.TrimSpace(run("crl", "-in", filepath.Join(dir, c.crl), "-noout", "-hash"))
		if _, err := os.Stat(filepath.Join(dir, "root+"+strings.TrimSuffix(strings.TrimPrefix(c.ca, "root_ca.crt"), "_ca.crt")+"-crldir", hash+".r0")); err != nil && c.crl != "root.crl" {
			t.Errorf("%s: no file %s.r0 in its CRL directory: %v", c.crl, hash, err)
		}
	}
	out := run("verify", "-CAfile", filepath.Join(dir, "root_ca.crt"), "-untrusted", filepath.Join(dir, "server_ca.crt"), filepath.Join(dir, "server-cn-only.crt"))
	if !strings.Contains(out, "OK") {
		t.Errorf("server-cn-only does not verify: %s", out)
	}
	rev, err := exec.Command(openssl, "verify", "-crl_check", "-CAfile", filepath.Join(dir, "root+server_ca.crt"), "-CRLfile", filepath.Join(dir, "server.crl"), filepath.Join(dir, "server-revoked.crt")).CombinedOutput()
	if out := string(rev); err == nil || !strings.Contains(out, "certificate revoked") {
		t.Errorf("server-revoked is not revoked by server.crl: %s", out)
	}
	if _, err := x509.ParsePKCS1PrivateKey(files["client-der.key"]); err != nil {
		t.Errorf("client-der.key: %v", err)
	}
	if b, _ := pem.Decode(files["client-encrypted-pem.key"]); b == nil || !bytes.Contains(files["client-encrypted-pem.key"], []byte("ENCRYPTED")) {
		t.Errorf("client-encrypted-pem.key is not an encrypted PEM key")
	}
}
