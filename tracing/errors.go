package tracing

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"io"
	"net"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/pgconnector/pgconnector/negotiation"
)

// sqlState returns the SQLSTATE of the server error err wraps, or "".
func sqlState(err error) string {
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) {
		return pgErr.Code
	}
	return ""
}

// errorType returns the low-cardinality value of error.type for err: its SQLSTATE when it wraps
// a server error, else one of the ErrorType classes, else def (the class of the failed step).
// It is called only for recording spans.
func errorType(err error, def string) string {
	if code := sqlState(err); code != "" {
		return code
	}
	switch {
	case errors.Is(err, context.Canceled):
		return ErrorTypeCanceled
	case errors.Is(err, context.DeadlineExceeded), pgconn.Timeout(err):
		return ErrorTypeTimeout
	case errors.Is(err, negotiation.ErrGSSNoCredentials), errors.Is(err, negotiation.ErrGSSUnixSocket),
		errors.Is(err, negotiation.ErrGSSRequired):
		return ErrorTypeGSSEncRequire
	case errors.Is(err, negotiation.ErrNoMethod):
		return ErrorTypeNoMethod
	case errors.Is(err, negotiation.ErrGSSUnverified):
		return ErrorTypeGSSUnverified
	case errors.Is(err, negotiation.ErrGSSRejected):
		return ErrorTypeGSSRejected
	}
	var (
		protoErr *negotiation.ProtocolError
		respErr  *negotiation.ErrorResponseError
	)
	switch {
	case errors.As(err, &protoErr):
		return ErrorTypeProtocol
	case errors.As(err, &respErr):
		return ErrorTypeErrorResponse
	}
	var netErr net.Error
	if errors.As(err, &netErr) && netErr.Timeout() {
		return ErrorTypeTimeout
	}
	var dnsErr *net.DNSError
	if errors.As(err, &dnsErr) {
		return ErrorTypeDNS
	}
	if isTLSError(err) {
		return ErrorTypeTLS
	}
	var opErr *net.OpError
	if errors.As(err, &opErr) {
		if opErr.Op == "dial" {
			return ErrorTypeDial
		}
		return ErrorTypeNetwork
	}
	if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
		return ErrorTypeNetwork
	}
	return def
}

// isTLSError reports whether err comes from crypto/tls or crypto/x509.
func isTLSError(err error) bool {
	var (
		certErr    *tls.CertificateVerificationError
		recordErr  tls.RecordHeaderError
		alertErr   tls.AlertError
		echErr     *tls.ECHRejectionError
		hostErr    x509.HostnameError
		unknownCA  x509.UnknownAuthorityError
		invalidErr x509.CertificateInvalidError
		opErr      *net.OpError
	)
	switch {
	case errors.As(err, &certErr), errors.As(err, &recordErr), errors.As(err, &alertErr),
		errors.As(err, &echErr), errors.As(err, &hostErr), errors.As(err, &unknownCA),
		errors.As(err, &invalidErr):
		return true
	}
	// An alert received from the server: crypto/tls reports it as a *net.OpError whose Op is
	// "remote error" (tls.Conn.readRecordOrCCS).
	return errors.As(err, &opErr) && opErr.Op == "remote error"
}
