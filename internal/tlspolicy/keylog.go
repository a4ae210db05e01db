package tlspolicy

import "os"

// KeyLogFile is sslkeylogfile, the file's name, as a tls.Config KeyLogWriter: each line
// crypto/tls writes (NSS key log format) is appended to the file, opened for that line
// (O_APPEND|O_CREATE|O_WRONLY, mode 0600 when created) as libpq 18 does (fe-secure-openssl.c,
// SSL_CTX_keylog_cb), symbolic links followed. Unlike libpq, the file is opened with O_NONBLOCK
// and written only when it is a regular file: a FIFO (which would hold the handshake until a
// reader came, or block the write), a device or a socket is not written to. Errors are not
// returned: the handshake goes on without the line.
type KeyLogFile string

// Write appends p, one key log line, to the file; it always returns len(p), nil.
func (f KeyLogFile) Write(p []byte) (int, error) {
	fd, err := os.OpenFile(string(f), os.O_APPEND|os.O_CREATE|os.O_WRONLY|openNonBlocking, 0o600)
	if err != nil {
		return len(p), nil // ENXIO for a FIFO without a reader
	}
	defer fd.Close()
	if st, err := fd.Stat(); err == nil && st.Mode().IsRegular() {
		_, _ = fd.Write(p)
	}
	return len(p), nil
}
