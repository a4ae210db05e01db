package tlspolicy

import (
	"bytes"
	"crypto"
	"crypto/ecdsa"
	"crypto/ed25519"
	"crypto/rsa"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/asn1"
	"encoding/pem"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"reflect"
	"strings"
	"sync"

	"github.com/youmark/pkcs8"
)

// The client certificate of sslcert and sslkey is loaded as libpq's initialize_SSL
// (fe-secure-openssl.c) loads it, for each connection, before the ClientHello:
//   - the certificate file is sslcert, else ~/.postgresql/postgresql.crt; one that does not exist
//     (ENOENT, ENOTDIR) means no certificate, and the key is then not read; another stat error
//     is "could not open certificate file";
//   - it holds PEM certificates, the client's first, then the chain sent with it (OpenSSL's
//     SSL_CTX_use_certificate_chain_file); blocks of other types are skipped;
//   - the key file is sslkey, else ~/.postgresql/postgresql.key: it must exist ("certificate
//     present, but not private key file"), be a regular file, and, off Windows, have no group or
//     world access, except read access for the group when root owns it (0640);
//   - the key is PEM (PKCS#1, SEC 1, PKCS#8), else DER (the same, as libpq tries
//     SSL_FILETYPE_ASN1 when PEM fails); an encrypted key (legacy PEM "Proc-Type: 4,ENCRYPTED",
//     PKCS#8 "ENCRYPTED PRIVATE KEY") is decrypted with sslpassword; an encrypted PKCS#8 key in
//     DER is refused, as libpq cannot read it (it reports "no start line");
//   - the key must be the certificate's ("certificate does not match private key file").
//
// The certificate is then sent whenever the server asks for one, whatever CAs its
// CertificateRequest lists (OpenSSL sends the certificate it has; crypto/tls's Certificates
// would be filtered by that list): a server that cannot verify it answers "unknown ca", as it
// does to libpq.
//
// What differs from libpq: libpq, given no sslpassword, lets OpenSSL prompt on the terminal for
// an encrypted key; the connector fails with "the key is encrypted and sslpassword is empty". An
// encrypted DER key is refused naming what it is, where libpq reports its failed PEM attempt
// ("no start line"). PBKDF2 iteration counts above MaxKeyIterations and scrypt
// parameters needing more than 32 MiB (OpenSSL's own scrypt limit) are refused unread. Keys
// crypto/tls cannot sign with (DSA) fail to load. Files are read as the root certificate file
// is: regular files only, opened without blocking, at most MaxClientFile bytes.

// MaxClientFile bounds the certificate and key files of sslcert and sslkey.
const MaxClientFile = 1 << 20

// MaxKeyIterations bounds the PBKDF2 iteration count of an encrypted PKCS#8 key (OpenSSL writes
// 2048; 10 million take seconds): a larger count is refused before any derivation.
const MaxKeyIterations = 10_000_000

// maxScryptMemory is OpenSSL's default limit for scrypt (EVP_PBE_scrypt's maxmem, 32 MiB).
const maxScryptMemory = 32 << 20

// KeyAccessHint is the part of libpq's message for a key file with group or world access that
// states the rule.
const KeyAccessHint = "file must have permissions u=rw (0600) or less if owned by the current user, or permissions u=rw,g=r (0640) or less if owned by root"

// ClientCert is the client certificate of one connection string (sslcert, sslkey,
// sslpassword), read at each connection. It is safe for concurrent use. The zero value of a
// field means: CertFile "" is no certificate (no home directory); KeyFile "" with a
// certificate fails, as libpq fails to match a key it could not locate.
type ClientCert struct {
	CertFile string // sslcert, else ~/.postgresql/postgresql.crt
	KeyFile  string // sslkey, else ~/.postgresql/postgresql.key
	Password string // sslpassword; never shown

	mu       sync.Mutex
	certData []byte // the files of the last certificate loaded, and what they gave
	keyData  []byte
	cert     *tls.Certificate
}

// noCertificate is what GetClientCertificate returns when there is none to send.
var noCertificate = &tls.Certificate{}

// BeforeTLS loads the certificate and key as libpq does before its ClientHello, and returns
// libpq's error when that fails (a *negotiation.TLSRefusedError), nil when there is no
// certificate file or the pair loads.
func (c *ClientCert) BeforeTLS() error {
	_, err := c.Load()
	return err
}

// GetClientCertificate is tls.Config.GetClientCertificate: the certificate of the files as they
// are now, whatever the server's CertificateRequest lists; none (an empty certificate) when
// there is no certificate file.
func (c *ClientCert) GetClientCertificate(*tls.CertificateRequestInfo) (*tls.Certificate, error) {
	cert, err := c.Load()
	if err != nil {
		return nil, err
	}
	if cert == nil {
		return noCertificate, nil
	}
	return cert, nil
}

// Load reads the files and returns the certificate with its key; nil, nil when there is no
// certificate file. The parse of the last files loaded is kept: files of the same content are
// read again (and the key's permissions checked again) but neither parsed nor decrypted again.
func (c *ClientCert) Load() (*tls.Certificate, error) {
	if c.CertFile == "" {
		return nil, nil
	}
	if _, err := os.Stat(c.CertFile); err != nil {
		if errors.Is(err, fs.ErrNotExist) || isNotDir(err) {
			return nil, nil
		}
		return nil, refused(fmt.Errorf("could not open certificate file %q: %w", c.CertFile, fileError(err)))
	}
	certData, err := ReadLocalFile(c.CertFile, MaxClientFile)
	if err != nil {
		return nil, refused(fmt.Errorf("could not read certificate file %q: %w", c.CertFile, fileError(err)))
	}
	keyData, err := c.readKey()
	if err != nil {
		return nil, refused(err)
	}
	c.mu.Lock()
	if c.cert != nil && bytes.Equal(c.certData, certData) && bytes.Equal(c.keyData, keyData) {
		cert := c.cert
		c.mu.Unlock()
		return cert, nil
	}
	c.mu.Unlock()
	cert, err := c.parse(certData, keyData)
	if err != nil {
		return nil, refused(err)
	}
	c.mu.Lock()
	c.certData, c.keyData, c.cert = certData, keyData, cert
	c.mu.Unlock()
	return cert, nil
}

// readKey reads the key file after libpq's checks: it exists, is a regular file and has no
// group or world access beyond the rule (KeyFileAccessRefused), checked on the file opened.
func (c *ClientCert) readKey() ([]byte, error) {
	if c.KeyFile == "" {
		return nil, errors.New("certificate present, but no private key file: no home directory to find ~/.postgresql/postgresql.key in")
	}
	fi, err := os.Stat(c.KeyFile)
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return nil, fmt.Errorf("certificate present, but not private key file %q", c.KeyFile)
		}
		return nil, fmt.Errorf("could not stat private key file %q: %w", c.KeyFile, fileError(err))
	}
	if !fi.Mode().IsRegular() {
		return nil, fmt.Errorf("private key file %q is not a regular file", c.KeyFile)
	}
	f, st, err := openRegular(c.KeyFile, MaxClientFile)
	if err != nil {
		return nil, fmt.Errorf("could not load private key file %q: %w", c.KeyFile, fileError(err))
	}
	defer f.Close()
	if uid, ok := ownerOf(st); ok && KeyFileAccessRefused(uid, st.Mode()) {
		return nil, fmt.Errorf("private key file %q has group or world access; %s", c.KeyFile, KeyAccessHint)
	}
	data, err := readAtMost(f, MaxClientFile)
	if err != nil {
		return nil, fmt.Errorf("could not load private key file %q: %w", c.KeyFile, fileError(err))
	}
	return data, nil
}

// KeyFileAccessRefused is libpq's rule for a key file (initialize_SSL): one root (uid 0) owns may
// give the group read access (0640), any other none; neither may give the world any.
func KeyFileAccessRefused(uid uint32, mode fs.FileMode) bool {
	perm := mode.Perm()
	if uid == 0 {
		return perm&0o037 != 0 // g+w, g+x, o+rwx
	}
	return perm&0o077 != 0
}

// parse makes the certificate and its key of the files' contents.
func (c *ClientCert) parse(certData, keyData []byte) (*tls.Certificate, error) {
	var chain [][]byte
	var leaf *x509.Certificate
	for rest := certData; ; {
		var b *pem.Block
		b, rest = pem.Decode(rest)
		if b == nil {
			break
		}
		switch b.Type {
		case "CERTIFICATE", "X509 CERTIFICATE", "TRUSTED CERTIFICATE":
		default:
			continue
		}
		x, err := x509.ParseCertificate(b.Bytes)
		if err != nil {
			return nil, fmt.Errorf("could not read certificate file %q: a certificate does not parse: %w", c.CertFile, err)
		}
		if leaf == nil {
			leaf = x
		}
		chain = append(chain, b.Bytes)
	}
	if leaf == nil {
		return nil, fmt.Errorf("could not read certificate file %q: no PEM certificate found", c.CertFile)
	}
	key, err := parseKey(keyData, []byte(c.Password))
	if err != nil {
		return nil, fmt.Errorf("could not load private key file %q: %w", c.KeyFile, err)
	}
	pub, ok := key.Public().(interface{ Equal(crypto.PublicKey) bool })
	if !ok || !pub.Equal(leaf.PublicKey) {
		return nil, fmt.Errorf("certificate does not match private key file %q: key values mismatch", c.KeyFile)
	}
	return &tls.Certificate{Certificate: chain, PrivateKey: key, Leaf: leaf}, nil
}

// errBadDecrypt is OpenSSL's reason for a key that sslpassword does not decrypt.
var errBadDecrypt = errors.New("bad decrypt (sslpassword does not decrypt the key)")

// errNoPassword is an encrypted key without sslpassword.
var errNoPassword = errors.New("the key is encrypted and sslpassword is empty")

// parseKey reads a private key as libpq does: the first PEM block of a private key type, else
// the whole file as DER; the PEM error is the one reported when both fail, unless the DER is an
// encrypted key (then its error: a wrong password says so).
func parseKey(data, password []byte) (crypto.Signer, error) {
	pemErr := errors.New("no PEM private key found")
	for rest := data; ; {
		var b *pem.Block
		b, rest = pem.Decode(rest)
		if b == nil {
			break
		}
		if !strings.HasSuffix(b.Type, "PRIVATE KEY") {
			continue
		}
		key, err := pemKey(b, password)
		if err == nil {
			return key, nil
		}
		pemErr = err
		break
	}
	if key, encrypted, err := derKey(data); err == nil {
		return key, nil
	} else if encrypted {
		return nil, err
	}
	return nil, pemErr
}

// pemKey decodes one PEM block of a private key, encrypted or not.
func pemKey(b *pem.Block, password []byte) (crypto.Signer, error) {
	der := b.Bytes
	// Legacy PEM encryption (deprecated in crypto/x509, insecure by design) is what OpenSSL 1.1
	// writes with "openssl rsa -aes128", and what libpq reads.
	if x509.IsEncryptedPEMBlock(b) {
		if len(password) == 0 {
			return nil, errNoPassword
		}
		var err error
		der, err = x509.DecryptPEMBlock(b, password)
		if err != nil {
			if errors.Is(err, x509.IncorrectPasswordError) {
				return nil, errBadDecrypt
			}
			return nil, fmt.Errorf("cannot decrypt the key: %w", err)
		}
		key, err := plainKey(der)
		if err != nil {
			// A wrong password passes the padding check once in about 256 tries.
			return nil, errBadDecrypt
		}
		return key, nil
	}
	if b.Type == "ENCRYPTED PRIVATE KEY" {
		return encryptedPKCS8(der, password)
	}
	return plainKey(der)
}

// derKey reads data as a DER key; encrypted tells that it is an encrypted PKCS#8 key, which
// libpq does not read in DER (OpenSSL's SSL_FILETYPE_ASN1 takes no password): its error is then
// the one to report.
func derKey(data []byte) (key crypto.Signer, encrypted bool, err error) {
	if key, err := plainKey(data); err == nil {
		return key, false, nil
	}
	var info encryptedKeyInfo
	if rest, err := asn1.Unmarshal(data, &info); err == nil && len(rest) == 0 {
		return nil, true, errors.New("the key is an encrypted DER key: libpq reads an encrypted key in PEM only (\"ENCRYPTED PRIVATE KEY\")")
	}
	return nil, false, errors.New("not a DER key")
}

// plainKey parses an unencrypted DER key: PKCS#1 (RSA), PKCS#8, SEC 1 (EC), as crypto/tls's
// X509KeyPair tries them.
func plainKey(der []byte) (crypto.Signer, error) {
	var key any
	var err error
	if key, err = x509.ParsePKCS1PrivateKey(der); err != nil {
		if key, err = x509.ParsePKCS8PrivateKey(der); err != nil {
			if key, err = x509.ParseECPrivateKey(der); err != nil {
				return nil, errors.New("the key is neither PKCS#1, PKCS#8 nor SEC 1 (EC)")
			}
		}
	}
	switch k := key.(type) {
	case *rsa.PrivateKey, *ecdsa.PrivateKey, ed25519.PrivateKey:
		return k.(crypto.Signer), nil
	}
	return nil, fmt.Errorf("a key of type %T cannot sign TLS handshakes", key)
}

// encryptedKeyInfo is PKCS#8's EncryptedPrivateKeyInfo (RFC 5958, section 3).
type encryptedKeyInfo struct {
	Algorithm     pkix.AlgorithmIdentifier
	EncryptedData []byte
}

var (
	oidPBES2  = asn1.ObjectIdentifier{1, 2, 840, 113549, 1, 5, 13}
	oidPBKDF2 = asn1.ObjectIdentifier{1, 2, 840, 113549, 1, 5, 12}
	oidScrypt = asn1.ObjectIdentifier{1, 3, 6, 1, 4, 1, 11591, 4, 11}
)

// encryptedPKCS8 decrypts an EncryptedPrivateKeyInfo with github.com/youmark/pkcs8 (PBES2 with
// PBKDF2 or scrypt; AES or 3DES), after checking that its key derivation is within bounds.
func encryptedPKCS8(der, password []byte) (crypto.Signer, error) {
	if len(password) == 0 {
		return nil, errNoPassword
	}
	if err := checkKDF(der); err != nil {
		return nil, err
	}
	key, _, err := pkcs8.ParsePrivateKey(der, password)
	if err != nil {
		if strings.Contains(err.Error(), "incorrect password") || strings.Contains(err.Error(), "padding") {
			return nil, errBadDecrypt
		}
		return nil, fmt.Errorf("cannot decrypt the key: %w", err)
	}
	s, ok := key.(crypto.Signer)
	if !ok {
		return nil, fmt.Errorf("a key of type %T cannot sign TLS handshakes", key)
	}
	switch s.(type) {
	case *rsa.PrivateKey, *ecdsa.PrivateKey, ed25519.PrivateKey:
		return s, nil
	}
	return nil, fmt.Errorf("a key of type %T cannot sign TLS handshakes", key)
}

// checkKDF refuses an encrypted key whose key derivation would take too long or too much memory.
func checkKDF(der []byte) error {
	var info encryptedKeyInfo
	if _, err := asn1.Unmarshal(der, &info); err != nil {
		return errors.New("the key is not an encrypted PKCS#8 key")
	}
	if !info.Algorithm.Algorithm.Equal(oidPBES2) {
		return fmt.Errorf("the key's encryption %v is not supported (PBES2 only)", info.Algorithm.Algorithm)
	}
	var params struct {
		KDF    pkix.AlgorithmIdentifier
		Scheme pkix.AlgorithmIdentifier
	}
	if _, err := asn1.Unmarshal(info.Algorithm.Parameters.FullBytes, &params); err != nil {
		return errors.New("the key's PBES2 parameters do not parse")
	}
	switch {
	case params.KDF.Algorithm.Equal(oidPBKDF2):
		var p struct {
			Salt       []byte
			Iterations int
			KeyLength  int                      `asn1:"optional"`
			PRF        pkix.AlgorithmIdentifier `asn1:"optional"`
		}
		if _, err := asn1.Unmarshal(params.KDF.Parameters.FullBytes, &p); err != nil {
			return errors.New("the key's PBKDF2 parameters do not parse")
		}
		if p.Iterations < 1 || p.Iterations > MaxKeyIterations {
			return fmt.Errorf("the key's PBKDF2 iteration count %d is outside 1 to %d", p.Iterations, MaxKeyIterations)
		}
	case params.KDF.Algorithm.Equal(oidScrypt):
		var p struct {
			Salt      []byte
			N         int
			R         int
			P         int
			KeyLength int `asn1:"optional"`
		}
		if _, err := asn1.Unmarshal(params.KDF.Parameters.FullBytes, &p); err != nil {
			return errors.New("the key's scrypt parameters do not parse")
		}
		// scrypt uses 128*N*r bytes (and p times that much work).
		if p.N < 2 || p.R < 1 || p.P < 1 || p.N > maxScryptMemory/128/p.R || p.P > 16 {
			return fmt.Errorf("the key's scrypt parameters (N=%d, r=%d, p=%d) need more than OpenSSL's 32 MiB", p.N, p.R, p.P)
		}
	default:
		return fmt.Errorf("the key's key derivation %v is not supported (PBKDF2, scrypt)", params.KDF.Algorithm)
	}
	return nil
}

// IsClientCertLoader reports whether f is a ClientCert's GetClientCertificate (of any
// ClientCert): an attempt's TLS configuration whose Certificates an application set (through
// WithTLSConfigFunc) while it still holds such an f must drop f, or crypto/tls would send the
// files' certificate and never look at Certificates.
func IsClientCertLoader(f func(*tls.CertificateRequestInfo) (*tls.Certificate, error)) bool {
	if f == nil {
		return false
	}
	return reflect.ValueOf(f).Pointer() == loaderPointer
}

// loaderPointer is the code of a ClientCert's GetClientCertificate method value, the same for
// every ClientCert.
var loaderPointer = reflect.ValueOf((&ClientCert{}).GetClientCertificate).Pointer()
