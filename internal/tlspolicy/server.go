package tlspolicy

import (
	"crypto/sha256"
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
//   - a chain must end at a self-signed certificate of the file (or of the system's roots), as
//     OpenSSL without X509_V_FLAG_PARTIAL_CHAIN requires: an intermediate CA in the file may
//     complete a chain but is no trust anchor (chain.go states the rules and the reasons named);
//   - when the root file exists, the chain is verified (and the CRLs checked) under every
//     sslmode, prefer, allow and require included (require then acts as verify-ca); a
//     certificate that does not verify fails the TLS attempt, and prefer (allow) goes on in
//     plaintext on a new connection, as libpq;
//   - when it does not exist, verify-ca and verify-full fail before the TLS handshake, with
//     libpq's message; the other modes connect without verifying;
//   - verify-full then checks the host name (as written in the connection string, also with
//     hostaddr) against the certificate by libpq's rules, after the chain and the CRLs as in
//     libpq, where OpenSSL verifies the chain in the handshake and libpq the name after it:
//     subjectAltName dNSName and iPAddress entries, the Common Name when there is no
//     subjectAltName of the host's kind (hostname.go states the rules);
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
// unchanged: a bundle of every public CA (200 KiB) is then neither opened nor parsed again,
// which would cost milliseconds twice per connection (before the handshake and in it).
//
// Unchanged is, from one stat, the same device, inode, size, modification time and
// status-change time (ctime, which every write, rename onto the path and chmod or utimes sets to
// the current time and which nothing can set back), for a file whose times were at least
// settleTime older than the moment it was read (so that a change within the file system's clock
// tick gives another ctime). Otherwise the file is read again, and parsed again unless its
// content (SHA-256) is the one parsed before. A file replaced in place with the same size and
// modification time (cp -p, rsync --inplace -t, tar) is therefore read again. Where the system
// has no ctime (not unix), the file is read at every connection.
//
// It holds one file, the last read (each read of new content replaces it, at most MaxRootFile
// bytes parsed), and nothing once a stat finds the file gone.
type RootCache struct {
	mu    sync.Mutex
	stamp fileStamp
	fast  bool     // stamp may be trusted without reading the file
	sum   [32]byte // SHA-256 of the content parsed
	set   *rootSet
}

// settleTime is how much older than its read a file's times must be for its stat to stand for
// its content (a file system's timestamps move by clock ticks of up to a few milliseconds).
var settleTime = 2 * time.Second

// fileStamp tells a file apart from the one read before: another file (inode) or new content.
type fileStamp struct {
	size  int64
	mtime time.Time
	id    fileIdentity
}

func stampOf(fi fs.FileInfo) fileStamp {
	return fileStamp{size: fi.Size(), mtime: fi.ModTime(), id: identityOf(fi)}
}

// trustOf is the chain check's trust for the anchors of one connection; roots nil is none.
func trustOf(rs *rootSet) chainTrust {
	return chainTrust{anchors: rs.anchors, store: rs}
}

// roots returns the trust anchors for one connection; ok false (and no error) when there are
// none and sslmode does not need them: the server is then not verified, as in libpq.
func (s *ServerCheck) roots() (t chainTrust, ok bool, err error) {
	if s.System {
		pool, err := x509.SystemCertPool()
		if err != nil {
			return t, false, refused(fmt.Errorf("could not load system root certificate paths: %w", err))
		}
		return chainTrust{anchors: pool, filter: true}, true, nil
	}
	if s.RootFile == "" {
		if s.Verify {
			return t, false, refused(errors.New("could not get home directory to locate root certificate file\n" + RootHint))
		}
		return t, false, nil
	}
	// libpq: any failure of stat() is a file that does not exist.
	fi, err := os.Stat(s.RootFile)
	if err != nil {
		s.Cache.drop() // nothing to keep for a file that is gone
		if s.Verify {
			return t, false, refused(fmt.Errorf("root certificate file %q does not exist\n%s", s.RootFile, RootHint))
		}
		return t, false, nil
	}
	// The file unchanged since the last read: this stat is the only system call.
	if rs := s.Cache.unchanged(fi); rs != nil {
		return trustOf(rs), true, nil
	}
	rs, err := s.Cache.read(s.RootFile)
	if err != nil {
		return t, false, refused(fmt.Errorf("could not read root certificate file %q: %w", s.RootFile, err))
	}
	return trustOf(rs), true, nil
}

// BeforeTLS is negotiation.Host.BeforeTLS: what libpq's initialize_SSL refuses before its
// ClientHello (no root file under verify-*, a root file that cannot be read).
func (s *ServerCheck) BeforeTLS() error {
	_, _, err := s.roots()
	return err
}

// VerifyConnection is tls.Config.VerifyConnection: the chain against the roots of this
// connection, the CRLs, then the host name under verify-full.
func (s *ServerCheck) VerifyConnection(cs tls.ConnectionState) error {
	t, ok, err := s.roots()
	if err != nil || !ok {
		return err
	}
	return s.verify(cs, t)
}

// VerifyChain is VerifyConnection with the trust anchors given (not nil; an application's pool,
// whose certificates cannot be listed: a chain that ends at one that is not self-signed is
// refused): the chain, the CRLs, then the host name under verify-full.
func (s *ServerCheck) VerifyChain(cs tls.ConnectionState, roots *x509.CertPool) error {
	return s.verify(cs, chainTrust{anchors: roots, filter: true})
}

func (s *ServerCheck) verify(cs tls.ConnectionState, t chainTrust) error {
	now := time.Now()
	chains, err := verifyChain(cs.PeerCertificates, t, now)
	if err != nil {
		return refused(err)
	}
	if s.CRL != nil {
		if err := s.CRL.Check(chains, now); err != nil {
			return refused(err)
		}
	}
	if s.Host != "" {
		if err := checkHostName(cs.PeerCertificates[0], s.Host); err != nil {
			return refused(err)
		}
	}
	return nil
}

func refused(err error) error { return &negotiation.TLSRefusedError{Err: err} }

// ReadRootFile reads the PEM certificates of a root certificate file and returns its trust
// anchors: the self-signed ones (the others only complete chains, see chain.go). The file must be
// a regular file of at most MaxRootFile bytes (checked on the open file, which is opened without
// blocking, so that a FIFO or a device is refused, not read), with at least one certificate.
func ReadRootFile(path string) (*x509.CertPool, error) {
	rs, err := (&RootCache{}).read(path)
	if err != nil {
		return nil, err
	}
	return rs.anchors, nil
}

// drop forgets the file read last; nothing for a nil cache.
func (rc *RootCache) drop() {
	if rc == nil {
		return
	}
	rc.mu.Lock()
	defer rc.mu.Unlock()
	rc.stamp, rc.fast, rc.sum, rc.set = fileStamp{}, false, [32]byte{}, nil
}

// unchanged returns the root set of the last read when fi, a stat of the file, shows it unchanged
// (see RootCache); nil otherwise, or for a nil cache.
func (rc *RootCache) unchanged(fi fs.FileInfo) *rootSet {
	if rc == nil || !fi.Mode().IsRegular() {
		return nil
	}
	stamp := stampOf(fi)
	if !stamp.id.known() {
		return nil
	}
	rc.mu.Lock()
	defer rc.mu.Unlock()
	if rc.set == nil || !rc.fast || rc.stamp != stamp {
		return nil
	}
	return rc.set
}

// read is ReadRootFile's reading, with the root set of the last read when the content is the
// same; a nil cache reads and parses the file every time.
func (rc *RootCache) read(path string) (*rootSet, error) {
	if rc == nil {
		rc = &RootCache{}
	}
	readAt := time.Now()
	f, st, err := openRegular(path, MaxRootFile)
	if err != nil {
		return nil, fileError(err)
	}
	defer f.Close()
	stamp := stampOf(st)
	data, err := readAtMost(f, MaxRootFile)
	if err != nil {
		return nil, fileError(err)
	}
	sum := sha256.Sum256(data)
	// The stat stands for the content when it was taken of the content read (the size agrees)
	// and the file's times are older than the read by more than a clock tick.
	fast := int64(len(data)) == stamp.size && stamp.id.known() &&
		readAt.Sub(stamp.mtime) > settleTime && readAt.Sub(stamp.id.changed()) > settleTime
	rc.mu.Lock()
	rs := rc.set
	if rc.sum != sum {
		rs = nil
	} else if rs != nil {
		rc.stamp, rc.fast = stamp, fast
	}
	rc.mu.Unlock()
	if rs != nil {
		return rs, nil
	}
	var certs []*x509.Certificate
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
		certs = append(certs, c)
	}
	if len(certs) == 0 {
		return nil, errors.New("no certificate found") // OpenSSL: "no certificate or crl found"
	}
	rs = newRootSet(certs)
	rc.mu.Lock()
	rc.stamp, rc.fast, rc.sum, rc.set = stamp, fast, sum, rs
	rc.mu.Unlock()
	return rs, nil
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
