package tlspolicy

import (
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"sync"
	"time"

	"github.com/pgconnector/pgconnector/negotiation"
)

// The server's certificate is checked here, not by crypto/tls, as libpq checks it
// (fe-secure-openssl.c, initialize_SSL and open_client_SSL; libpq-ssl.html, "Client
// Verification of Server Certificates"):
//   - the trust anchors are those of the root certificate file, sslrootcert, else
//     ~/.postgresql/root.crt, read at each connection (a file created or replaced later is
//     used); sslrootcert=system takes the system's (crypto/x509's SystemCertPool, which honours
//     SSL_CERT_FILE and SSL_CERT_DIR as OpenSSL does), and nothing else ever does: pgx's
//     configuration, whose nil RootCAs would mean the system's, is not used;
//   - when the root file exists, the chain is verified (and the CRLs checked) under every
//     sslmode, prefer, allow and require included (require then acts as verify-ca); a
//     certificate that does not verify fails the TLS attempt, and prefer (allow) goes on in
//     plaintext on a new connection, as libpq;
//   - when it does not exist, verify-ca and verify-full fail before the TLS handshake, with
//     libpq's message; the other modes connect without verifying;
//   - verify-full also checks the host name (as written in the connection string, also with
//     hostaddr) against the certificate (crypto/x509's rules: subjectAltName only);
//   - the host name is sent as SNI only with sslsni=1 (the default) and when it is not an IP
//     address, by libpq's test (digits and dots only, or a colon); sslsni=0 sends none, and
//     verify-full still checks the name.
//
// Every error is a *negotiation.TLSRefusedError: the client's refusal, never taken for the
// server's lack of TLS.

// CRLChecker checks the verified chains of a server's certificate (each leaf first, root last)
// against CRLs, as a CRLStore does once its files are read.
type CRLChecker interface {
	Check(chains [][]*x509.Certificate, now time.Time) error
}

// RootHint is the second line of libpq's (16 to 18) errors for a missing root certificate file.
const RootHint = "Either provide the file, use the system's trusted roots with sslrootcert=system, or change sslmode to disable server certificate verification."

// MaxRootFile bounds a root certificate file, checked before it is read: a bundle of every
// public CA is about 200 KiB.
const MaxRootFile = 16 << 20

// ServerCheck checks one host's TLS server (see above). It is safe for concurrent use.
type ServerCheck struct {
	RootFile string     // sslrootcert, else ~/.postgresql/root.crt; "" without a home directory
	System   bool       // sslrootcert=system
	Verify   bool       // sslmode verify-ca or verify-full: no root file is an error
	Host     string     // the name verify-full checks; "" for the other modes
	CRL      CRLChecker // nil: no CRL (none given and no default, or system roots)

	Cache *RootCache // nil: no cache
}

// RootCache is the last root certificate file read, kept for the handshakes that find the file
// unchanged (the same file, size and modification time, from one stat): a bundle of every
// public CA (200 KiB) is then neither opened nor parsed again, which would cost milliseconds
// twice per connection (before the handshake and in it).
type RootCache struct {
	mu    sync.Mutex
	stamp fileStamp
	pool  *x509.CertPool
}

// fileStamp tells a file apart from the one read before: another file (inode) or new content.
type fileStamp struct {
	size  int64
	mtime time.Time
	id    fileIdentity
}

// roots returns the trust anchors for one connection; nil (and no error) when there are none
// and sslmode does not need them: the server is then not verified, as in libpq.
func (s *ServerCheck) roots() (*x509.CertPool, error) {
	if s.System {
		pool, err := x509.SystemCertPool()
		if err != nil {
			return nil, refused(fmt.Errorf("could not load system root certificate paths: %w", err))
		}
		return pool, nil
	}
	if s.RootFile == "" {
		if s.Verify {
			return nil, refused(errors.New("could not get home directory to locate root certificate file\n" + RootHint))
		}
		return nil, nil
	}
	// libpq: any failure of stat() is a file that does not exist.
	fi, err := os.Stat(s.RootFile)
	if err != nil {
		if s.Verify {
			return nil, refused(fmt.Errorf("root certificate file %q does not exist\n%s", s.RootFile, RootHint))
		}
		return nil, nil
	}
	// The file unchanged since the last read: this stat is the only system call.
	if pool := s.Cache.unchanged(fi); pool != nil {
		return pool, nil
	}
	pool, err := s.Cache.read(s.RootFile)
	if err != nil {
		return nil, refused(fmt.Errorf("could not read root certificate file %q: %w", s.RootFile, err))
	}
	return pool, nil
}

// BeforeTLS is negotiation.Host.BeforeTLS: what libpq's initialize_SSL refuses before its
// ClientHello (no root file under verify-*, a root file that cannot be read).
func (s *ServerCheck) BeforeTLS() error {
	_, err := s.roots()
	return err
}

// VerifyConnection is tls.Config.VerifyConnection: the chain against the roots of this
// connection, the host name under verify-full, then the CRLs.
func (s *ServerCheck) VerifyConnection(cs tls.ConnectionState) error {
	roots, err := s.roots()
	if err != nil || roots == nil {
		return err
	}
	return s.VerifyChain(cs, roots)
}

// VerifyChain is VerifyConnection with the trust anchors given (not nil): the chain, the host
// name under verify-full, then the CRLs.
func (s *ServerCheck) VerifyChain(cs tls.ConnectionState, roots *x509.CertPool) error {
	if len(cs.PeerCertificates) == 0 {
		return refused(errors.New("certificate verify failed: the server sent no certificate"))
	}
	opts := x509.VerifyOptions{Roots: roots, Intermediates: x509.NewCertPool(), DNSName: s.Host}
	for _, c := range cs.PeerCertificates[1:] {
		opts.Intermediates.AddCert(c)
	}
	chains, err := cs.PeerCertificates[0].Verify(opts)
	if err != nil {
		return refused(fmt.Errorf("certificate verify failed: %w", err))
	}
	if s.CRL != nil {
		if err := s.CRL.Check(chains, time.Now()); err != nil {
			return refused(err)
		}
	}
	return nil
}

func refused(err error) error { return &negotiation.TLSRefusedError{Err: err} }

// ReadRootFile reads the PEM certificates of a root certificate file. The file must be a
// regular file of at most MaxRootFile bytes (checked on the open file, which is opened without
// blocking, so that a FIFO or a device is refused, not read), with at least one certificate.
func ReadRootFile(path string) (*x509.CertPool, error) {
	return (&RootCache{}).read(path)
}

// unchanged returns the pool of the last read when fi, a stat of the file, shows it unchanged
// (the same file, size and modification time); nil otherwise, or for a nil cache.
func (rc *RootCache) unchanged(fi fs.FileInfo) *x509.CertPool {
	if rc == nil || !fi.Mode().IsRegular() {
		return nil
	}
	stamp := fileStamp{size: fi.Size(), mtime: fi.ModTime(), id: identityOf(fi)}
	rc.mu.Lock()
	defer rc.mu.Unlock()
	if rc.pool == nil || rc.stamp != stamp {
		return nil
	}
	return rc.pool
}

// read is ReadRootFile, with the pool of the last read when the file is unchanged; a nil
// cache reads the file every time.
func (rc *RootCache) read(path string) (*x509.CertPool, error) {
	if rc == nil {
		rc = &RootCache{}
	}
	f, st, err := openRegular(path, MaxRootFile)
	if err != nil {
		return nil, fileError(err)
	}
	defer f.Close()
	stamp := fileStamp{size: st.Size(), mtime: st.ModTime(), id: identityOf(st)}
	rc.mu.Lock()
	pool := rc.pool
	if rc.stamp != stamp {
		pool = nil
	}
	rc.mu.Unlock()
	if pool != nil {
		return pool, nil
	}
	data, err := readAtMost(f, MaxRootFile)
	if err != nil {
		return nil, fileError(err)
	}
	pool = x509.NewCertPool()
	n := 0
	for rest := data; ; {
		var b *pem.Block
		b, rest = pem.Decode(rest)
		if b == nil {
			break
		}
		if b.Type != "CERTIFICATE" && b.Type != "TRUSTED CERTIFICATE" && b.Type != "X509 CERTIFICATE" {
			continue
		}
		c, err := x509.ParseCertificate(b.Bytes)
		if err != nil {
			return nil, fmt.Errorf("a certificate does not parse: %w", err)
		}
		pool.AddCert(c)
		n++
	}
	if n == 0 {
		return nil, errors.New("no certificate found") // OpenSSL: "no certificate or crl found"
	}
	if int64(len(data)) == stamp.size {
		rc.mu.Lock()
		rc.stamp, rc.pool = stamp, pool
		rc.mu.Unlock()
	}
	return pool, nil
}

// openRegular opens a local file for reading, without blocking (a FIFO with no writer, a
// device), and returns it when it is a regular file of at most limit bytes; errors are
// *fs.PathError.
func openRegular(path string, limit int64) (*os.File, fs.FileInfo, error) {
	f, err := os.OpenFile(path, os.O_RDONLY|openNonBlocking, 0)
	if err != nil {
		return nil, nil, err
	}
	st, err := f.Stat()
	switch {
	case err != nil:
	case !st.Mode().IsRegular():
		err = &fs.PathError{Op: "open", Path: path, Err: errors.New("not a regular file")}
	case st.Size() > limit:
		err = &fs.PathError{Op: "open", Path: path, Err: fmt.Errorf("larger than %d bytes", limit)}
	}
	if err != nil {
		f.Close()
		return nil, nil, err
	}
	return f, st, nil
}

// readAtMost reads f to its end, failing when it holds more than limit bytes (a file that grew
// since it was checked).
func readAtMost(f *os.File, limit int64) ([]byte, error) {
	data, err := io.ReadAll(io.LimitReader(f, limit+1))
	if err != nil {
		return nil, err
	}
	if int64(len(data)) > limit {
		return nil, &fs.PathError{Op: "read", Path: f.Name(), Err: fmt.Errorf("larger than %d bytes", limit)}
	}
	return data, nil
}

// ReadLocalFile is os.ReadFile for a regular file of at most limit bytes (openRegular).
func ReadLocalFile(path string, limit int64) ([]byte, error) {
	f, _, err := openRegular(path, limit)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	return readAtMost(f, limit)
}

// fileError says what went wrong with a file without repeating its path.
func fileError(err error) error {
	var pe *os.PathError
	if errors.As(err, &pe) {
		return pe.Err
	}
	return err
}
